//! HPACK (RFC 7541) for the conformance suite: an encoder of header blocks
//! that writes each representation a test asks for, valid or not, and a
//! decoder of the server's blocks.
//!
//! Sending needs no Huffman coding: literals go out raw, and the few
//! Huffman strings the HPACK cases send (bad padding, EOS) are written bit
//! by bit from RFC 7541 Appendix B. Decoding uses `fluke-hpack`, the
//! maintained fork of the `hpack` crate (whose last release is from 2016):
//! a whole RFC 7541 decoder with the Huffman table and the dynamic table,
//! synchronous, depending on nothing but `tracing`; `httlib-hpack` would do
//! too but has had no release since 2021.

/// One representation in a header block (RFC 7541 section 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// Indexed header field (6.1): a static (1-61) or dynamic (62-) entry;
    /// index 0 is invalid.
    Indexed(usize),
    /// Literal header field (6.2).
    Literal {
        /// With incremental indexing, without, or never indexed.
        mode: Indexing,
        /// The name: an index, or a literal string.
        name: Name,
        /// The value string.
        value: Str,
    },
    /// Dynamic table size update (6.3).
    SizeUpdate(usize),
    /// Octets as given (what no representation describes).
    Raw(Vec<u8>),
}

/// The three kinds of literal (RFC 7541 sections 6.2.1-6.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexing {
    /// 6.2.1: the field is added to the dynamic table.
    Incremental,
    /// 6.2.2.
    Without,
    /// 6.2.3.
    Never,
}

/// A literal's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    /// The name of a table entry.
    Indexed(usize),
    /// A string.
    Literal(Str),
}

/// A string literal (RFC 7541 section 5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Str {
    /// Raw octets (H = 0).
    Plain(Vec<u8>),
    /// Octets sent with H = 1 as they are: the caller has Huffman-coded
    /// them (or not, for an invalid string).
    Huffman(Vec<u8>),
}

impl Str {
    /// A raw string.
    pub fn plain(s: impl AsRef<[u8]>) -> Str {
        Str::Plain(s.as_ref().to_vec())
    }
}

impl Field {
    /// A literal without indexing, name and value as raw strings: how the
    /// suite sends most fields (no state at either end).
    pub fn literal(name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Field {
        Field::Literal {
            mode: Indexing::Without,
            name: Name::Literal(Str::plain(name)),
            value: Str::plain(value),
        }
    }

    /// A literal with incremental indexing (it enters the dynamic table).
    pub fn indexed_literal(name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Field {
        Field::Literal {
            mode: Indexing::Incremental,
            name: Name::Literal(Str::plain(name)),
            value: Str::plain(value),
        }
    }
}

/// Append `value` as an HPACK integer with an N-bit prefix (RFC 7541
/// section 5.1); `first` holds the bits above the prefix.
pub fn integer(out: &mut Vec<u8>, first: u8, prefix_bits: u8, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

fn string(out: &mut Vec<u8>, s: &Str) {
    let (h, bytes) = match s {
        Str::Plain(b) => (0, b),
        Str::Huffman(b) => (0x80, b),
    };
    integer(out, h, 7, bytes.len());
    out.extend_from_slice(bytes);
}

/// The header block of `fields`, in order.
pub fn encode(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for field in fields {
        match field {
            Field::Indexed(i) => integer(&mut out, 0x80, 7, *i),
            Field::Literal { mode, name, value } => {
                let (first, bits) = match mode {
                    Indexing::Incremental => (0x40, 6),
                    Indexing::Without => (0x00, 4),
                    Indexing::Never => (0x10, 4),
                };
                match name {
                    Name::Indexed(i) => integer(&mut out, first, bits, *i),
                    Name::Literal(s) => {
                        out.push(first);
                        string(&mut out, s);
                    }
                }
                string(&mut out, value);
            }
            Field::SizeUpdate(n) => integer(&mut out, 0x20, 5, *n),
            Field::Raw(bytes) => out.extend_from_slice(bytes),
        }
    }
    out
}

/// Pack Huffman codes (`(code, bit length)`, RFC 7541 Appendix B) into
/// octets, the last one filled with `pad_bit` (1 for the EOS prefix a valid
/// string ends with, 0 for an invalid one).
pub fn huffman_bits(codes: &[(u32, u8)], pad_bit: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut n) = (0u64, 0u32);
    for &(code, len) in codes {
        acc = acc << len | u64::from(code);
        n += u32::from(len);
        while n >= 8 {
            n -= 8;
            out.push((acc >> n) as u8);
        }
    }
    if n > 0 {
        let pad = 8 - n;
        let fill = if pad_bit { (1u64 << pad) - 1 } else { 0 };
        out.push((acc << pad | fill) as u8);
    }
    out
}

/// Huffman code of `a` (RFC 7541 Appendix B: `00011`, 5 bits).
pub const HUFFMAN_A: (u32, u8) = (0b00011, 5);
/// The EOS symbol (30 bits of 1).
pub const HUFFMAN_EOS: (u32, u8) = (0x3fff_ffff, 30);

/// A decoder of the server's header blocks, its dynamic table kept across
/// blocks as the connection's is.
pub struct Decoder(fluke_hpack::Decoder<'static>);

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decoder")
    }
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder(fluke_hpack::Decoder::new())
    }
}

impl Decoder {
    /// The fields of one whole header block, or why it cannot be decoded.
    pub fn decode(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, String> {
        let fields = self.0.decode(block).map_err(|e| format!("{e:?}"))?;
        Ok(fields
            .into_iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(&n).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_rfc_7541_appendix_c_1() {
        let mut out = Vec::new();
        integer(&mut out, 0, 5, 10);
        integer(&mut out, 0, 5, 1337);
        integer(&mut out, 0, 8, 42);
        assert_eq!(out, [0x0a, 0x1f, 0x9a, 0x0a, 0x2a]);
    }

    #[test]
    fn what_the_encoder_writes_the_decoder_reads() {
        let block = encode(&[
            Field::Indexed(2),
            Field::indexed_literal("x-one", "1"),
            Field::literal("x-two", "2"),
            Field::Literal {
                mode: Indexing::Never,
                name: Name::Indexed(4),
                value: Str::plain("/p"),
            },
            Field::Indexed(62),
        ]);
        let got = Decoder::default().decode(&block).unwrap();
        let want = [
            (":method", "GET"),
            ("x-one", "1"),
            ("x-two", "2"),
            (":path", "/p"),
            ("x-one", "1"),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn huffman_strings_are_packed_msb_first_and_padded() {
        // "a" then five 1 bits of EOS prefix: 00011 111.
        assert_eq!(huffman_bits(&[HUFFMAN_A], true), [0x1f]);
        assert_eq!(huffman_bits(&[HUFFMAN_A], false), [0x18]);
        let block = encode(&[Field::Literal {
            mode: Indexing::Without,
            name: Name::Literal(Str::plain("x")),
            value: Str::Huffman(huffman_bits(&[HUFFMAN_A, HUFFMAN_A], true)),
        }]);
        let got = Decoder::default().decode(&block).unwrap();
        assert_eq!(got, [("x".to_string(), "aa".to_string())]);
    }
}
