//! What the server sends, looked at as `h2` writes it, for the one thing
//! the connection cannot learn otherwise: the streams `h2` refuses itself
//! (RST_STREAM REFUSED_STREAM, RFC 9113 §5.1.2) when a client opens more
//! than `--h2-max-concurrent-streams` at once. `h2` answers those before
//! the server sees them (they are never accepted), so they are counted
//! from its frames: 9-octet headers read, payloads skipped, but for the
//! 4 octets of an RST_STREAM's error code. A few dozen octets of state
//! per connection, no allocation, nothing shared but the counter a
//! refusal adds to.

use super::stats::{self, Count};

/// RST_STREAM's frame type (RFC 9113 §6.4).
const RST_STREAM: u8 = 0x3;
/// REFUSED_STREAM's error code (RFC 9113 §7).
const REFUSED_STREAM: u32 = 0x7;

/// A scan of the frames the server writes (a frame may straddle writes).
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// The frame header being gathered, and how much of it is there.
    head: [u8; 9],
    have: u8,
    /// Payload octets of the frame passing still to come.
    left: u32,
    /// The frame passing is an RST_STREAM: its error code, gathered.
    rst: bool,
    code: [u8; 4],
    code_have: u8,
}

impl Refusals {
    /// The server wrote `bytes` (the next octets of its frames): count the
    /// RST_STREAM REFUSED_STREAM that end among them (in the status
    /// page's counters), and return how many.
    pub(crate) fn sent(&mut self, mut bytes: &[u8]) -> u32 {
        let mut refused = 0;
        while !bytes.is_empty() {
            if self.left == 0 {
                let have = usize::from(self.have);
                let n = (9 - have).min(bytes.len());
                self.head[have..have + n].copy_from_slice(&bytes[..n]);
                self.have += n as u8;
                bytes = &bytes[n..];
                if self.have == 9 {
                    self.have = 0;
                    self.left = u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]);
                    self.rst = self.head[3] == RST_STREAM && self.left == 4;
                    self.code_have = 0;
                }
                continue;
            }
            let n = (self.left as usize).min(bytes.len());
            if self.rst {
                let have = usize::from(self.code_have);
                let take = (4 - have).min(n);
                self.code[have..have + take].copy_from_slice(&bytes[..take]);
                self.code_have += take as u8;
                if self.code_have == 4 {
                    self.rst = false;
                    if u32::from_be_bytes(self.code) == REFUSED_STREAM {
                        stats::add(Count::StreamsRefused);
                        refused += 1;
                    }
                }
            }
            self.left -= n as u32;
            bytes = &bytes[n..];
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::Refusals;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, 0]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    #[test]
    fn only_rst_stream_refused_stream_is_counted_however_the_writes_split() {
        let mut bytes = frame(4, 0, &[]); // SETTINGS, empty
        bytes.extend(frame(0, 1, &[3u8; 300])); // DATA full of 0x3s
        bytes.extend(frame(3, 1, &[0, 0, 0, 8])); // RST_STREAM CANCEL
        bytes.extend(frame(3, 3, &[0, 0, 0, 7])); // RST_STREAM REFUSED_STREAM
        bytes.extend(frame(0, 1, &[0, 0, 0, 7, 0, 0, 0, 7])); // DATA, not a reset
        bytes.extend(frame(7, 0, &[0, 0, 0, 0, 0, 0, 0, 7])); // GOAWAY REFUSED_STREAM
        bytes.extend(frame(3, 5, &[0, 0, 0, 7])); // RST_STREAM REFUSED_STREAM
        for split in [1, 2, 5, 9, 13, bytes.len()] {
            let mut scan = Refusals::default();
            let counted: u32 = bytes.chunks(split).map(|c| scan.sent(c)).sum();
            assert_eq!(counted, 2, "written {split} octets at a time");
            assert_eq!((scan.left, scan.have), (0, 0), "at a frame's start");
        }
    }

    #[test]
    fn the_scan_holds_a_few_dozen_octets_per_connection() {
        assert!(std::mem::size_of::<Refusals>() <= 32);
    }
}
