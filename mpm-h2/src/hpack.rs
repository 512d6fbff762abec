//! HPACK (RFC 7541): the decoder of request header blocks, with its
//! dynamic table bounded by our SETTINGS_HEADER_TABLE_SIZE, and the
//! encoder of response header blocks.
//!
//! The encoder uses the static table and literals "without indexing" and
//! sends strings raw (names lowercased as they are written, RFC 9113
//! §8.2.1, so that a handler's `Content-Type` costs no lowercased copy): it keeps no dynamic table, so it holds no memory per
//! connection and never has to follow the peer's table size (§4.2 lets an
//! encoder use less than the decoder allows). A response head is a
//! handful of fields whose values change per response (date, length,
//! etag), so a table would mostly save `server` and `content-type`; and
//! Huffman-coding a value costs a table walk per octet to save about a
//! fifth of it. Neither was measured to pay here, so neither is done.

use std::collections::VecDeque;
use std::ops::Range;

use crate::huffman;

/// What went wrong decoding a header block: every one is a
/// COMPRESSION_ERROR (RFC 9113 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HpackError {
    /// A representation, integer or string cut off by the block's end.
    Truncated,
    /// Index 0, or past the static and dynamic tables (§2.3.3).
    BadIndex,
    /// An integer too large for any field (§5.1).
    Overflow,
    /// A string's Huffman code is bad (§5.2).
    Huffman,
    /// A dynamic table size update larger than our setting, or after a
    /// field (§4.2, §6.3).
    BadSizeUpdate,
}

/// The static table (RFC 7541 Appendix A), indices 1 to 61.
pub(crate) const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The overhead RFC 7541 §4.1 counts per entry beside its octets.
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// The octets a field's span takes in a [`Fields`] buffer: where its name
/// starts, where its value starts (its name's end), where its value ends.
const SPAN: usize = 12;

/// A header block as the decoder writes it: the connection's scratch,
/// cleared and reused block after block while streams are open (no
/// allocation per block once it has grown to a block's size), from which
/// a [`Fields`] is made with one allocation.
#[derive(Debug, Default)]
pub(crate) struct Block {
    bytes: Vec<u8>,
    /// Per field: where its name starts, where its value starts (its
    /// name's end), where its value ends, in `bytes`.
    spans: Vec<[u32; 3]>,
}

/// What a block's scratch reserves the first time: a request head a
/// browser sends (a few hundred octets, a dozen or two fields) without
/// growing.
const BLOCK_OCTETS: usize = 512;
const BLOCK_FIELDS: usize = 24;

impl Block {
    /// Empty, its capacity kept (and made, the first time).
    pub(crate) fn clear(&mut self) {
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(BLOCK_OCTETS);
            self.spans.reserve(BLOCK_FIELDS);
        }
        self.bytes.clear();
        self.spans.clear();
    }

    /// How many fields.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The name and value of field `i`.
    pub(crate) fn field(&self, i: usize) -> (&[u8], &[u8]) {
        let [a, b, c] = self.spans[i];
        (
            &self.bytes[a as usize..b as usize],
            &self.bytes[b as usize..c as usize],
        )
    }

    /// The fields in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(|i| self.field(i))
    }

    /// The span of field `i`'s value in the octets (the same in the
    /// [`Fields`] that [`Block::freeze`] makes).
    pub(crate) fn value_range(&self, i: usize) -> Range<u32> {
        let [_, b, c] = self.spans[i];
        b..c
    }

    /// The octets in `range`.
    pub(crate) fn slice(&self, range: &Range<u32>) -> &[u8] {
        &self.bytes[range.start as usize..range.end as usize]
    }

    /// The heap the scratch holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.spans.capacity() * std::mem::size_of::<[u32; 3]>()
    }

    /// A field appended.
    fn push(&mut self, name: &[u8], value: &[u8]) {
        let a = self.bytes.len();
        self.bytes.extend_from_slice(name);
        let b = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.spans
            .push([a as u32, b as u32, self.bytes.len() as u32]);
    }

    /// The fields from the `skip`th on (a head leaves its pseudo-header
    /// fields out: it keeps their values' ranges), with all the octets: one
    /// allocation of exactly their size.
    pub(crate) fn freeze(&self, skip: usize) -> Fields {
        let spans = self.spans.get(skip..).unwrap_or(&[]);
        frozen(&self.bytes, spans.iter().copied(), spans.len(), &[])
    }

    /// As [`freeze`](Self::freeze), for a request head: several `cookie`
    /// fields are joined into one, at the first one's place, their values
    /// separated by `"; "` (RFC 9113 §8.2.3 asks it before a request goes
    /// on to HTTP/1.1, where one `Cookie` field is all a server reads: a
    /// proxy's upstream, a handler reading one `cookie` value).
    pub(crate) fn freeze_request(&self, skip: usize) -> Fields {
        let spans = self.spans.get(skip..).unwrap_or(&[]);
        let is_cookie = |s: &[u32; 3]| &self.bytes[s[0] as usize..s[1] as usize] == b"cookie";
        let cookies = spans.iter().filter(|s| is_cookie(s)).count();
        if cookies < 2 {
            return self.freeze(skip);
        }
        // The joined field after every other octet: the spans already
        // taken (the pseudo-header values' too) stay where they are.
        let mut joined = b"cookie".to_vec();
        for s in spans.iter().filter(|s| is_cookie(s)) {
            if joined.len() > b"cookie".len() {
                joined.extend_from_slice(b"; ");
            }
            joined.extend_from_slice(&self.bytes[s[1] as usize..s[2] as usize]);
        }
        let at = self.bytes.len() as u32;
        let span = [at, at + 6, at + joined.len() as u32];
        let mut first = true;
        let kept = spans.iter().filter_map(|s| {
            if !is_cookie(s) {
                Some(*s)
            } else if std::mem::take(&mut first) {
                Some(span)
            } else {
                None
            }
        });
        frozen(&self.bytes, kept, spans.len() - cookies + 1, &joined)
    }
}

/// A decoded header block: every field's name and value, one after the
/// other, then where each lies, in one buffer: one allocation per block,
/// however many fields.
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Fields {
    /// The names' and values' octets (`..octets`), then a span per field
    /// (`SPAN` octets: three `u32`s, native-endian).
    buf: Box<[u8]>,
    octets: u32,
}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|(n, v)| (String::from_utf8_lossy(n), String::from_utf8_lossy(v))),
            )
            .finish()
    }
}

/// Fields of `bytes` and then `extra` (octets appended), with these
/// `count` spans, in one allocation of exactly their size.
fn frozen(
    bytes: &[u8],
    spans: impl Iterator<Item = [u32; 3]>,
    count: usize,
    extra: &[u8],
) -> Fields {
    let octets = bytes.len() + extra.len();
    let mut buf = Vec::with_capacity(octets + count * SPAN);
    buf.extend_from_slice(bytes);
    buf.extend_from_slice(extra);
    for span in spans {
        for at in span {
            buf.extend_from_slice(&at.to_ne_bytes());
        }
    }
    Fields {
        buf: buf.into_boxed_slice(),
        octets: octets as u32,
    }
}

impl Fields {
    /// The fields in the order they came: (name, value).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(|i| self.field(i))
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        (self.buf.len() - self.octets as usize) / SPAN
    }

    /// No field at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of the first field named `name` (lowercase).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The heap these fields hold.
    pub fn heap_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The name and value of field `i`.
    pub(crate) fn field(&self, i: usize) -> (&[u8], &[u8]) {
        let at = self.octets as usize + i * SPAN;
        let s = &self.buf[at..at + SPAN];
        let word = |k: usize| u32::from_ne_bytes([s[k], s[k + 1], s[k + 2], s[k + 3]]) as usize;
        let (a, b, c) = (word(0), word(4), word(8));
        (&self.buf[a..b], &self.buf[b..c])
    }

    /// The octets in `range` (a [`Block::value_range`] of the block this
    /// was made from).
    pub(crate) fn slice(&self, range: &Range<u32>) -> &[u8] {
        &self.buf[range.start as usize..range.end as usize]
    }

    /// The fields as a decoder's scratch holds them.
    pub(crate) fn to_block(&self) -> Block {
        let mut block = Block::default();
        for (name, value) in self.iter() {
            block.push(name, value);
        }
        block
    }

    /// For tests and builders: a field appended (the buffer is made again:
    /// a decoded block never takes this way).
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let mut block = self.to_block();
        block.push(name, value);
        *self = block.freeze(0);
    }
}

/// One entry of the dynamic table: name and value in one allocation.
#[derive(Debug)]
struct Entry {
    data: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn name(&self) -> &[u8] {
        &self.data[..self.name_len]
    }
    fn value(&self) -> &[u8] {
        &self.data[self.name_len..]
    }
    fn size(&self) -> usize {
        self.data.len() + ENTRY_OVERHEAD
    }
}

/// The decoder's state: its dynamic table, newest entry first.
#[derive(Debug)]
pub(crate) struct Decoder {
    entries: VecDeque<Entry>,
    /// The table's size as §4.1 counts it.
    size: usize,
    /// Its current maximum (the last size update, at first our setting).
    capacity: usize,
    /// The largest a size update may set: our SETTINGS_HEADER_TABLE_SIZE.
    limit: usize,
}

impl Decoder {
    /// A decoder whose table may hold `limit` octets (§4.1's measure).
    pub(crate) fn new(limit: usize) -> Decoder {
        Decoder {
            entries: VecDeque::new(),
            size: 0,
            capacity: limit,
            limit,
        }
    }

    /// The table's size (§4.1).
    #[cfg(test)]
    pub(crate) fn table_size(&self) -> usize {
        self.size
    }

    /// The heap the table holds: its entries and the ring of them.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.entries.iter().map(|e| e.data.len()).sum::<usize>()
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.entries
            .iter()
            .map(|e| (e.name().to_vec(), e.value().to_vec()))
            .collect()
    }

    /// Decode `block` into `out` (appended). Fields past `list_limit`
    /// (RFC 9113 §6.5.2's measure: octets plus 32 per field) are decoded,
    /// so that the table stays in step with the peer's, but not kept; the
    /// answer says whether the list fit.
    pub(crate) fn decode(
        &mut self,
        mut block: &[u8],
        out: &mut Block,
        list_limit: usize,
    ) -> Result<bool, HpackError> {
        let mut list_size = 0usize;
        let mut fits = true;
        let mut fields_seen = false;
        while let Some(&first) = block.first() {
            let start = out.bytes.len();
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = integer(&mut block, 7)?;
                self.copy_indexed(index, out, true)?;
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first
                // field of a block (§4.2).
                let size = integer(&mut block, 5)?;
                if fields_seen || size > self.limit {
                    return Err(HpackError::BadSizeUpdate);
                }
                self.capacity = size;
                self.evict(0);
                continue;
            } else {
                // Literal (§6.2): with incremental indexing (01), without
                // (0000) or never indexed (0001).
                let (prefix, index_it) = if first & 0x40 != 0 {
                    (6, true)
                } else {
                    (4, false)
                };
                let index = integer(&mut block, prefix)?;
                if index == 0 {
                    string(&mut block, &mut out.bytes)?;
                } else {
                    self.copy_indexed(index, out, false)?;
                }
                let name_end = out.bytes.len();
                string(&mut block, &mut out.bytes)?;
                if index_it {
                    let data = out.bytes[start..].to_vec().into_boxed_slice();
                    self.insert(Entry {
                        data,
                        name_len: name_end - start,
                    });
                }
                out.spans
                    .push([start as u32, name_end as u32, out.bytes.len() as u32]);
            }
            fields_seen = true;
            let [a, _, c] = *out.spans.last().ok_or(HpackError::Truncated)?;
            list_size += (c - a) as usize + ENTRY_OVERHEAD;
            if list_size > list_limit {
                fits = false;
            }
            if !fits {
                // Keep decoding for the table's sake, keep nothing.
                out.spans.pop();
                out.bytes.truncate(start);
            }
        }
        Ok(fits)
    }

    /// Append entry `index`'s name (and value, with `whole`) to `out`; a
    /// whole one becomes a field.
    fn copy_indexed(&self, index: usize, out: &mut Block, whole: bool) -> Result<(), HpackError> {
        let (name, value): (&[u8], &[u8]) = match index {
            0 => return Err(HpackError::BadIndex),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                (n.as_bytes(), v.as_bytes())
            }
            _ => {
                let e = self.entries.get(index - 62).ok_or(HpackError::BadIndex)?;
                (e.name(), e.value())
            }
        };
        let a = out.bytes.len();
        out.bytes.extend_from_slice(name);
        if whole {
            let b = out.bytes.len();
            out.bytes.extend_from_slice(value);
            out.spans.push([a as u32, b as u32, out.bytes.len() as u32]);
        }
        Ok(())
    }

    fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.capacity {
            // An entry larger than the table empties it (§4.4).
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.entries.push_front(entry);
    }

    /// Evict the oldest entries until `room` more octets fit (§4.4).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.capacity {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
        if self.entries.is_empty() && self.entries.capacity() > 0 {
            self.entries = VecDeque::new();
        }
    }
}

/// Decode an integer with an `n`-bit prefix (§5.1), consuming it.
fn integer(block: &mut &[u8], n: u32) -> Result<usize, HpackError> {
    let (&first, mut rest) = block.split_first().ok_or(HpackError::Truncated)?;
    let max_prefix = (1usize << n) - 1;
    let mut value = usize::from(first) & max_prefix;
    if value == max_prefix {
        let mut shift = 0u32;
        loop {
            let (&b, r) = rest.split_first().ok_or(HpackError::Truncated)?;
            rest = r;
            // No field or table is near 2^28: more is an attack or a bug.
            if shift > 21 {
                return Err(HpackError::Overflow);
            }
            value += usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
    }
    *block = rest;
    Ok(value)
}

/// Decode a string literal (§5.2), appending it to `out`.
fn string(block: &mut &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let huffman = block.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(block, 7)?;
    if len > block.len() {
        return Err(HpackError::Truncated);
    }
    let (s, rest) = block.split_at(len);
    if huffman {
        huffman::decode(s, out).map_err(|_| HpackError::Huffman)?;
    } else {
        out.extend_from_slice(s);
    }
    *block = rest;
    Ok(())
}

/// Encode an integer with an `n`-bit prefix (§5.1); `flags` go in the
/// first octet's bits above the prefix.
pub(crate) fn encode_integer(value: usize, n: u32, flags: u8, out: &mut Vec<u8>) {
    let (octets, len) = integer_octets(value, n, flags);
    out.extend_from_slice(&octets[..len]);
}

/// The most octets an integer takes (§5.1): the prefix, then 7 bits an
/// octet of a 64-bit value.
const INTEGER_OCTETS: usize = 11;

/// An integer's octets (§5.1), and how many of them there are.
pub(crate) fn integer_octets(value: usize, n: u32, flags: u8) -> ([u8; INTEGER_OCTETS], usize) {
    let mut octets = [0u8; INTEGER_OCTETS];
    let max_prefix = (1usize << n) - 1;
    if value < max_prefix {
        octets[0] = flags | value as u8;
        return (octets, 1);
    }
    octets[0] = flags | max_prefix as u8;
    let mut len = 1;
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        octets[len] = (rest as u8 & 0x7f) | 0x80;
        len += 1;
        rest >>= 7;
    }
    octets[len] = rest as u8;
    (octets, len + 1)
}

/// Encode a string literal (§5.2), Huffman-coded if `huffman` and shorter.
pub(crate) fn encode_string(s: &[u8], huffman: bool, out: &mut Vec<u8>) {
    if huffman {
        let len = huffman::encoded_len(s);
        if len < s.len() {
            encode_integer(len, 7, 0x80, out);
            huffman::encode(s, out);
            return;
        }
    }
    encode_integer(s.len(), 7, 0, out);
    out.extend_from_slice(s);
}

/// The static index of `name` (in lowercase), the first entry with it
/// (RFC 7541 Appendix A).
fn static_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// The longest name in the static table (`access-control-allow-origin`).
const LONGEST_STATIC_NAME: usize = 27;

/// The static index of a field name written in any case: a response's
/// fields come from handlers as `Content-Type` as often as
/// `content-type`, and go out in lowercase (RFC 9113 §8.2.1).
fn static_name_any_case(name: &[u8]) -> Option<usize> {
    if !name.iter().any(u8::is_ascii_uppercase) {
        return static_name(name);
    }
    if name.len() > LONGEST_STATIC_NAME {
        return None;
    }
    let mut low = [0u8; LONGEST_STATIC_NAME];
    let low = &mut low[..name.len()];
    for (d, s) in low.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    static_name(low)
}

/// `:status` as the first field of a response block (§8.3.2): indexed
/// when the static table has it, else a literal on its name.
pub(crate) fn encode_status(status: u16, out: &mut Vec<u8>) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if index != 0 {
        out.push(0x80 | index);
        return;
    }
    // Literal without indexing, indexed name 8 (`:status`).
    out.push(0x08);
    let digits = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    out.push(3);
    out.extend_from_slice(&digits);
}

/// A field's name as a literal without indexing starts it (§6.2.2): its
/// static index when the table has it, else the name, lowercased as it is
/// written (a name in any case is taken: RFC 9113 §8.2.1 sends them in
/// lowercase). `authorization`, `cookie` and `set-cookie` go as never
/// indexed (§6.2.3), so that no intermediary puts them in a table. The
/// value follows ([`encode_string`]).
pub(crate) fn encode_name(name: &[u8], out: &mut Vec<u8>) {
    match static_name_any_case(name) {
        Some(i) => {
            let flags = if matches!(i, 23 | 32 | 55) {
                0x10
            } else {
                0x00
            };
            encode_integer(i, 4, flags, out);
        }
        None => {
            out.push(0x00);
            encode_integer(name.len(), 7, 0, out);
            out.extend(name.iter().map(u8::to_ascii_lowercase));
        }
    }
}

/// A field as a literal without indexing (§6.2.2): [`encode_name`], then
/// the value raw.
pub(crate) fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    encode_name(name, out);
    encode_string(value, false, out);
}

/// A literal without indexing (0x00) or never indexed (0x10), its name
/// as given (case kept), for the decoder's tests.
#[cfg(test)]
pub(crate) fn encode_literal(name: &[u8], value: &[u8], never: bool, out: &mut Vec<u8>) {
    let flags = if never { 0x10 } else { 0x00 };
    match static_name(name) {
        Some(i) => encode_integer(i, 4, flags, out),
        None => {
            out.push(flags);
            encode_string(name, false, out);
        }
    }
    encode_string(value, false, out);
}

/// A field with incremental indexing (§6.2.1), for tests that need the
/// peer side of a dynamic table.
#[cfg(test)]
pub(crate) fn encode_indexed_literal(name: &[u8], value: &[u8], huffman: bool, out: &mut Vec<u8>) {
    match static_name(name) {
        Some(i) => encode_integer(i, 6, 0x40, out),
        None => {
            out.push(0x40);
            encode_string(name, huffman, out);
        }
    }
    encode_string(value, huffman, out);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{encode_field, encode_integer, encode_status, integer, Block, Decoder, HpackError};

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(f: &Block) -> Vec<(String, String)> {
        f.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect()
    }

    fn table(d: &Decoder) -> Vec<(String, String)> {
        d.entries()
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn decode(d: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut f = Block::default();
        assert!(d.decode(block, &mut f, usize::MAX).unwrap());
        fields(&f)
    }

    #[test]
    fn rfc7541_c1_integers() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337; C.1.3: 42 at an
        // octet boundary.
        for (value, n, bytes) in [
            (10, 5, vec![0x0a]),
            (1337, 5, vec![0x1f, 0x9a, 0x0a]),
            (42, 8, vec![0x2a]),
        ] {
            let mut out = Vec::new();
            encode_integer(value, n, 0, &mut out);
            assert_eq!(out, bytes);
            let mut b: &[u8] = &bytes;
            assert_eq!(integer(&mut b, n).unwrap(), value);
        }
    }

    /// C.3: requests without Huffman coding, one decoder across the three.
    #[test]
    fn rfc7541_c3_requests_without_huffman() {
        let mut d = Decoder::new(4096);
        let r1 = hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
        assert_eq!(
            decode(&mut d, &r1),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(table(&d), pairs(&[(":authority", "www.example.com")]));
        assert_eq!(d.table_size(), 57);

        let r2 = hex("8286 84be 5808 6e6f 2d63 6163 6865");
        assert_eq!(
            decode(&mut d, &r2),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        assert_eq!(
            table(&d),
            pairs(&[
                ("cache-control", "no-cache"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.table_size(), 110);

        let r3 = hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65");
        assert_eq!(
            decode(&mut d, &r3),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(
            table(&d),
            pairs(&[
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.table_size(), 164);
    }

    /// C.4: the same requests, Huffman-coded.
    #[test]
    fn rfc7541_c4_requests_with_huffman() {
        let mut d = Decoder::new(4096);
        let r1 = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        assert_eq!(
            decode(&mut d, &r1),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.table_size(), 57);
        let r2 = hex("8286 84be 5886 a8eb 1064 9cbf");
        assert_eq!(
            decode(&mut d, &r2)[4],
            ("cache-control".into(), "no-cache".into())
        );
        assert_eq!(d.table_size(), 110);
        let r3 = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        assert_eq!(
            decode(&mut d, &r3)[4],
            ("custom-key".into(), "custom-value".into())
        );
        assert_eq!(
            table(&d),
            pairs(&[
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.table_size(), 164);
    }

    /// Per response: the decoded list, the table after it, its size.
    type Expected = (Vec<(String, String)>, Vec<(String, String)>, usize);

    fn c5_c6_expectations() -> [Expected; 3] {
        let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
        let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
        let loc = "https://www.example.com";
        let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
        [
            (
                pairs(&[
                    (":status", "302"),
                    ("cache-control", "private"),
                    ("date", date1),
                    ("location", loc),
                ]),
                pairs(&[
                    ("location", loc),
                    ("date", date1),
                    ("cache-control", "private"),
                    (":status", "302"),
                ]),
                222,
            ),
            (
                pairs(&[
                    (":status", "307"),
                    ("cache-control", "private"),
                    ("date", date1),
                    ("location", loc),
                ]),
                pairs(&[
                    (":status", "307"),
                    ("location", loc),
                    ("date", date1),
                    ("cache-control", "private"),
                ]),
                222,
            ),
            (
                pairs(&[
                    (":status", "200"),
                    ("cache-control", "private"),
                    ("date", date2),
                    ("location", loc),
                    ("content-encoding", "gzip"),
                    ("set-cookie", cookie),
                ]),
                pairs(&[
                    ("set-cookie", cookie),
                    ("content-encoding", "gzip"),
                    ("date", date2),
                ]),
                215,
            ),
        ]
    }

    /// C.5's and C.6's three blocks, decoded in turn by one decoder with a
    /// 256-octet table: each block's fields, the table after it, its size.
    fn decodes_as_c5_c6(blocks: &[Vec<u8>]) {
        let mut d = Decoder::new(256);
        for (block, (list, tab, size)) in blocks.iter().zip(c5_c6_expectations()) {
            assert_eq!(decode(&mut d, block), list);
            assert_eq!(table(&d), tab);
            assert_eq!(d.table_size(), size);
        }
    }

    /// C.5: responses without Huffman coding, a 256-octet table (evictions).
    #[test]
    fn rfc7541_c5_responses_without_huffman_and_evictions() {
        let blocks = [
            hex("4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
            hex("4803 3330 37c1 c0bf"),
            hex("88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31"),
        ];
        decodes_as_c5_c6(&blocks);
    }

    /// C.6: the same responses, Huffman-coded.
    #[test]
    fn rfc7541_c6_responses_with_huffman_and_evictions() {
        let blocks = [
            hex("4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3"),
            hex("4883 640e ffc1 c0bf"),
            hex("88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07"),
        ];
        decodes_as_c5_c6(&blocks);
    }

    #[test]
    fn section_2_3_3_index_zero_and_past_the_tables_are_errors() {
        let mut d = Decoder::new(4096);
        let mut f = Block::default();
        assert_eq!(
            d.decode(&[0x80], &mut f, usize::MAX),
            Err(HpackError::BadIndex)
        );
        assert_eq!(
            d.decode(&[0x80 | 62], &mut f, usize::MAX),
            Err(HpackError::BadIndex)
        );
    }

    #[test]
    fn section_4_2_a_size_update_after_a_field_is_an_error() {
        let mut d = Decoder::new(4096);
        let mut f = Block::default();
        assert_eq!(
            d.decode(&[0x82, 0x20], &mut f, usize::MAX),
            Err(HpackError::BadSizeUpdate)
        );
    }

    #[test]
    fn section_6_3_a_size_update_over_our_setting_is_an_error() {
        let mut d = Decoder::new(4096);
        let mut f = Block::default();
        // 4097 with a 5-bit prefix.
        let mut block = Vec::new();
        encode_integer(4097, 5, 0x20, &mut block);
        assert_eq!(
            d.decode(&block, &mut f, usize::MAX),
            Err(HpackError::BadSizeUpdate)
        );
        let mut ok = Vec::new();
        encode_integer(4096, 5, 0x20, &mut ok);
        assert_eq!(d.decode(&ok, &mut f, usize::MAX), Ok(true));
    }

    #[test]
    fn section_5_2_a_string_cut_off_by_the_block_is_an_error() {
        let mut d = Decoder::new(4096);
        let mut f = Block::default();
        assert_eq!(
            d.decode(&[0x40, 0x05, b'a'], &mut f, usize::MAX),
            Err(HpackError::Truncated)
        );
    }

    #[test]
    fn section_5_1_an_integer_too_large_is_an_error() {
        let mut d = Decoder::new(4096);
        let mut f = Block::default();
        let block = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(
            d.decode(&block, &mut f, usize::MAX),
            Err(HpackError::Overflow)
        );
    }

    #[test]
    fn a_list_over_the_limit_is_decoded_but_not_kept() {
        let mut d = Decoder::new(4096);
        let mut block = Vec::new();
        super::encode_indexed_literal(b"x-big", &[b'a'; 100], false, &mut block);
        let mut f = Block::default();
        assert_eq!(d.decode(&block, &mut f, 64), Ok(false));
        assert_eq!(f.len(), 0);
        // The table still took the entry, as the peer's did.
        assert_eq!(d.table_size(), 5 + 100 + 32);
    }

    #[test]
    fn the_static_names_match_appendix_a_first_entries_in_any_case() {
        for (i, (name, _)) in super::STATIC.iter().enumerate() {
            let first = super::STATIC.iter().position(|(n, _)| n == name).unwrap() + 1;
            assert_eq!(super::static_name(name.as_bytes()), Some(first), "{name}");
            let upper = name.to_ascii_uppercase();
            assert_eq!(
                super::static_name_any_case(upper.as_bytes()),
                Some(first),
                "{upper} ({i})"
            );
        }
        assert_eq!(super::static_name(b"x-custom"), None);
        assert_eq!(super::static_name_any_case(b"X-Custom"), None);
    }

    #[test]
    fn the_encoder_writes_status_and_fields_the_decoder_reads_back() {
        let mut block = Vec::new();
        encode_status(200, &mut block);
        encode_status(302, &mut block);
        encode_field(b"content-length", b"12", &mut block);
        encode_field(b"X-Custom", b"v", &mut block);
        encode_field(b"Set-Cookie", b"a=b", &mut block);
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &block),
            pairs(&[
                (":status", "200"),
                (":status", "302"),
                ("content-length", "12"),
                ("x-custom", "v"),
                ("set-cookie", "a=b")
            ])
        );
        assert_eq!(d.table_size(), 0);
        // `set-cookie` never indexed (§6.2.3): 0001, name index 55.
        assert!(block.windows(2).any(|w| w == [0x1f, 55 - 15]), "{block:?}");
    }
}

#[cfg(test)]
mod properties {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::{
        encode_indexed_literal, encode_integer, encode_literal, Block, Decoder, ENTRY_OVERHEAD,
    };
    use crate::huffman;

    /// How a field is sent: with incremental indexing, without, never
    /// indexed; its strings Huffman-coded or not.
    #[derive(Debug, Clone, Copy)]
    enum Rep {
        Indexing { huffman: bool },
        Without,
        Never,
    }

    fn rep() -> impl Strategy<Value = Rep> {
        prop_oneof![
            any::<bool>().prop_map(|huffman| Rep::Indexing { huffman }),
            Just(Rep::Without),
            Just(Rep::Never),
        ]
    }

    fn name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::sample::select(vec![
                b"content-type".to_vec(),
                b"accept".to_vec(),
                b"user-agent".to_vec(),
                b"cookie".to_vec()
            ]),
            proptest::collection::vec(any::<u8>(), 1..20),
        ]
    }

    proptest! {
        #[test]
        fn huffman_round_trips(s in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut coded = Vec::new();
            huffman::encode(&s, &mut coded);
            prop_assert_eq!(coded.len(), huffman::encoded_len(&s));
            let mut out = Vec::new();
            huffman::decode(&coded, &mut out).unwrap();
            prop_assert_eq!(out, s);
        }

        /// Blocks of fields in every representation decode to the same
        /// fields, block after block on one decoder (the dynamic table
        /// carried across), and the table stays within its size.
        #[test]
        fn header_blocks_round_trip(
            table in 0usize..600,
            blocks in proptest::collection::vec(
                proptest::collection::vec((name(), proptest::collection::vec(any::<u8>(), 0..80), rep()), 0..12),
                1..6,
            ),
        ) {
            let mut d = Decoder::new(table);
            for block in blocks {
                let mut bytes = Vec::new();
                for (n, v, r) in &block {
                    match r {
                        Rep::Indexing { huffman } => encode_indexed_literal(n, v, *huffman, &mut bytes),
                        Rep::Without => encode_literal(n, v, false, &mut bytes),
                        Rep::Never => encode_literal(n, v, true, &mut bytes),
                    }
                }
                let mut f = Block::default();
                prop_assert!(d.decode(&bytes, &mut f, usize::MAX).unwrap());
                let got: Vec<(Vec<u8>, Vec<u8>)> = f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                let want: Vec<(Vec<u8>, Vec<u8>)> = block.iter().map(|(n, v, _)| (n.clone(), v.clone())).collect();
                prop_assert_eq!(got, want);
                prop_assert!(d.table_size() <= table);
                let counted: usize = d.entries().iter().map(|(n, v)| n.len() + v.len() + ENTRY_OVERHEAD).sum();
                prop_assert_eq!(counted, d.table_size());
            }
        }

        /// An entry indexed in one block is found by its index in the next.
        #[test]
        fn an_indexed_entry_serves_the_next_block(v in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut d = Decoder::new(4096);
            let mut first = Vec::new();
            encode_indexed_literal(b"x-k", &v, true, &mut first);
            d.decode(&first, &mut Block::default(), usize::MAX).unwrap();
            let mut second = Vec::new();
            encode_integer(62, 7, 0x80, &mut second);
            let mut f = Block::default();
            d.decode(&second, &mut f, usize::MAX).unwrap();
            let frozen = f.freeze(0);
            prop_assert_eq!(frozen.get(b"x-k"), Some(&v[..]));
        }

        /// Any octets: an answer, never a panic.
        #[test]
        fn any_block_is_decoded_or_refused(block in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut d = Decoder::new(4096);
            let _ = d.decode(&block, &mut Block::default(), 16_384);
            prop_assert!(d.table_size() <= 4096);
        }
    }
}
