//! The frame layer (RFC 9113 §4.1, §6): types, flags, and writing frame
//! headers and the fixed-size frames into the output.

/// The connection preface a client sends first (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame header's length in octets (§4.1).
pub(crate) const HEADER_LEN: usize = 9;

pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const PRIORITY: u8 = 0x2;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PUSH_PROMISE: u8 = 0x5;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;

pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
pub(crate) const PADDED: u8 = 0x8;
pub(crate) const PRIORITY_FLAG: u8 = 0x20;

// SETTINGS identifiers (§6.5.2).
pub(crate) const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub(crate) const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub(crate) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(crate) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(crate) const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub(crate) const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// A frame's header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) len: usize,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl Head {
    /// Parse the first 9 octets of `b` (the caller checked there are 9).
    pub(crate) fn parse(b: &[u8]) -> Head {
        Head {
            len: (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            // The reserved bit is ignored (§4.1).
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

/// A frame header into `out`.
pub(crate) fn write_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]);
}

/// Patch the length of the frame whose header starts at `at`.
pub(crate) fn patch_len(out: &mut [u8], at: usize, len: usize) {
    let l = (len as u32).to_be_bytes();
    out[at..at + 3].copy_from_slice(&l[1..]);
}

pub(crate) fn write_rst(out: &mut Vec<u8>, stream: u32, code: u32) {
    write_head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_be_bytes());
}

pub(crate) fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub(crate) fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: u32) {
    write_head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
}

/// A 31-bit value (stream ids, window increments) from 4 octets.
pub(crate) fn u31(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff
}

pub(crate) fn u32_at(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::{patch_len, write_head, Head};

    #[test]
    fn section_4_1_a_header_round_trips_and_the_reserved_bit_is_ignored() {
        let mut out = Vec::new();
        write_head(&mut out, 0x01_02_03, 0x1, 0x5, 0x8000_0003);
        assert_eq!(
            Head::parse(&out),
            Head {
                len: 0x01_02_03,
                kind: 1,
                flags: 5,
                stream: 3
            }
        );
        patch_len(&mut out, 0, 7);
        assert_eq!(Head::parse(&out).len, 7);
    }
}
