//! The Huffman code of RFC 7541 Appendix B: decoding (every Huffman-coded
//! string a client sends) and encoding (for the tests' round trips; the
//! encoder sends literals raw, see `hpack.rs`).
//!
//! Decoding without a tree: the code is canonical (the codes of one length
//! are consecutive, shorter ones first), so a code of `n` bits is a symbol
//! when it lies in `[first[n], first[n] + count[n])`, found at
//! `base[n] + code - first[n]` in `symbols`. Codes of 8 bits or fewer (the
//! letters, digits and common punctuation) come from one 256-entry table.

/// Each symbol's code and its length in bits; 256 is EOS (RFC 7541
/// Appendix B).
#[rustfmt::skip]
pub(crate) const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28),
    (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30),
    (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28),
    (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28), (0xffffff5, 28),
    (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28),
    (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), (0x1ff9, 13), (0x15, 6),
    (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6),
    (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6),
    (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12),
    (0x3fc, 10), (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7),
    (0x62, 7), (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8),
    (0x73, 7), (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6),
    (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
    (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7), (0x79, 7), (0x7a, 7), (0x7b, 7),
    (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20),
    (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22),
    (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23),
    (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22),
    (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23),
    (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23),
    (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22),
    (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22),
    (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23), (0x1fffe0, 21),
    (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23),
    (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23),
    (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20),
    (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25), (0x3ffffe2, 26),
    (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27), (0x3ffffe5, 26),
    (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27),
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24), (0x1fffe4, 21),
    (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27),
    (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22),
    (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26),
    (0x7ffff4, 23), (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26),
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27),
    (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27),
    (0x7fffff0, 27), (0x3ffffee, 26), (0x3fffffff, 30),
];

/// Why a Huffman string is not one (RFC 7541 §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HuffmanError {
    /// A sequence of bits that is no symbol's code, or EOS itself.
    BadCode,
    /// Padding longer than 7 bits, or not the most significant bits of EOS.
    BadPadding,
}

struct Canonical {
    first: [u32; 31],
    count: [u32; 31],
    base: [u32; 31],
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut first = [u32::MAX; 31];
    let mut count = [0u32; 31];
    let mut i = 0;
    while i < CODES.len() {
        let (code, len) = CODES[i];
        let l = len as usize;
        count[l] += 1;
        if code < first[l] {
            first[l] = code;
        }
        i += 1;
    }
    let mut base = [0u32; 31];
    let mut acc = 0;
    let mut l = 0;
    while l < 31 {
        base[l] = acc;
        acc += count[l];
        l += 1;
    }
    let mut symbols = [0u16; 257];
    i = 0;
    while i < CODES.len() {
        let (code, len) = CODES[i];
        let l = len as usize;
        symbols[(base[l] + code - first[l]) as usize] = i as u16;
        i += 1;
    }
    Canonical {
        first,
        count,
        base,
        symbols,
    }
}

static CANONICAL: Canonical = canonical();

const fn symbol_in(c: &Canonical, code: u32, bits: usize) -> Option<u16> {
    if bits >= 31 {
        return None;
    }
    let offset = code.wrapping_sub(c.first[bits]);
    if offset < c.count[bits] {
        Some(c.symbols[(c.base[bits] + offset) as usize])
    } else {
        None
    }
}

/// For each 8 bits, the symbol whose code of 8 bits or fewer they begin
/// with and that code's length (0: the code is longer).
static SHORT: [(u8, u8); 256] = short();

const fn short() -> [(u8, u8); 256] {
    let c = canonical();
    let mut table = [(0u8, 0u8); 256];
    let mut v = 0;
    while v < 256 {
        let mut len = 5;
        while len <= 8 {
            if let Some(symbol) = symbol_in(&c, (v as u32) >> (8 - len), len) {
                table[v] = (symbol as u8, len as u8);
                break;
            }
            len += 1;
        }
        v += 1;
    }
    table
}

/// Decode `input`, appending the octets to `out`.
pub(crate) fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    // Bits not yet decoded, in the low `bits` bits of `acc`.
    let mut acc: u64 = 0;
    let mut bits: usize = 0;
    let mut i = 0;
    loop {
        while bits <= 56 && i < input.len() {
            acc = (acc << 8) | u64::from(input[i]);
            bits += 8;
            i += 1;
        }
        if bits == 0 {
            return Ok(());
        }
        if bits >= 8 {
            let top = ((acc >> (bits - 8)) & 0xff) as usize;
            let (symbol, len) = SHORT[top];
            if len != 0 {
                out.push(symbol);
                bits -= len as usize;
                continue;
            }
        }
        // A longer code, or the last few bits.
        let mut len = if bits >= 8 { 9 } else { 5 };
        let mut found = false;
        while len <= 30 && len <= bits {
            let code = ((acc >> (bits - len)) & ((1u64 << len) - 1)) as u32;
            if let Some(symbol) = symbol_in(&CANONICAL, code, len) {
                if symbol == 256 {
                    return Err(HuffmanError::BadCode);
                }
                out.push(symbol as u8);
                bits -= len;
                found = true;
                break;
            }
            len += 1;
        }
        if found {
            continue;
        }
        if i < input.len() {
            // Unreachable with 57+ bits loaded (no code is longer than 30),
            // kept as an answer rather than a loop.
            return Err(HuffmanError::BadCode);
        }
        // What is left is padding: fewer than 8 bits, all ones (§5.2).
        if bits > 7 {
            return Err(HuffmanError::BadCode);
        }
        let mask = (1u64 << bits) - 1;
        return if acc & mask == mask {
            Ok(())
        } else {
            Err(HuffmanError::BadPadding)
        };
    }
}

/// The length of `input` Huffman-coded, in octets.
pub(crate) fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Encode `input`, appending to `out` (padded with the top bits of EOS).
pub(crate) fn encode(input: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits = 0;
    for &b in input {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | u64::from(code);
        bits += len as usize;
        while bits >= 8 {
            out.push((acc >> (bits - 8)) as u8);
            bits -= 8;
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) as u8) | ((1u8 << pad) - 1));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{decode, encode, encoded_len, HuffmanError, CODES};

    #[test]
    fn every_symbol_decodes_from_its_code() {
        for b in 0..=255u8 {
            let mut coded = Vec::new();
            encode(&[b], &mut coded);
            let mut out = Vec::new();
            decode(&coded, &mut out).unwrap();
            assert_eq!(out, [b], "symbol {b}");
        }
    }

    #[test]
    fn rfc7541_c4_www_example_com() {
        let coded = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        let mut out = Vec::new();
        decode(&coded, &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
        let mut again = Vec::new();
        encode(b"www.example.com", &mut again);
        assert_eq!(again, coded);
        assert_eq!(encoded_len(b"www.example.com"), coded.len());
    }

    #[test]
    fn section_5_2_eos_in_a_string_is_an_error() {
        // EOS (30 ones) padded by two more ones.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()),
            Err(HuffmanError::BadCode)
        );
        assert_eq!(CODES[256], (0x3fffffff, 30));
    }

    #[test]
    fn section_5_2_padding_longer_than_7_bits_is_an_error() {
        // 'a' (00011, 5 bits) then 11 bits of ones.
        assert!(decode(&[0b0001_1111, 0xff], &mut Vec::new()).is_err());
    }

    #[test]
    fn section_5_2_padding_not_of_ones_is_an_error() {
        // 'a' (00011) then 000.
        assert_eq!(
            decode(&[0b0001_1000], &mut Vec::new()),
            Err(HuffmanError::BadPadding)
        );
    }
}
