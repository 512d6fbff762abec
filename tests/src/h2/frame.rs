//! HTTP/2 frames as bytes (RFC 9113 section 4.1): every frame type, with
//! any flags, length, stream identifier (the reserved bit included) and
//! payload, so that a test can send what no conforming client would.

/// Frame types (RFC 9113 section 6, and 11.2 for their codes).
pub mod kind {
    /// DATA (6.1).
    pub const DATA: u8 = 0x0;
    /// HEADERS (6.2).
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (6.3).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM (6.4).
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS (6.5).
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (6.6).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING (6.7).
    pub const PING: u8 = 0x6;
    /// GOAWAY (6.8).
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE (6.9).
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION (6.10).
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 section 6).
pub mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, PUSH_PROMISE, CONTINUATION: the header block ends here.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS, PUSH_PROMISE: a pad length octet leads the payload.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: a stream dependency and weight lead the payload.
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 section 7).
pub mod code {
    /// Graceful shutdown, or no error.
    pub const NO_ERROR: u32 = 0x0;
    /// A protocol error.
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// An implementation fault.
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// The flow-control protocol was violated.
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    /// SETTINGS were not acknowledged in time.
    pub const SETTINGS_TIMEOUT: u32 = 0x4;
    /// A frame arrived after the stream was half-closed.
    pub const STREAM_CLOSED: u32 = 0x5;
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: u32 = 0x7;
    /// The stream is no longer needed.
    pub const CANCEL: u32 = 0x8;
    /// The header compression context could not be kept.
    pub const COMPRESSION_ERROR: u32 = 0x9;
    /// A CONNECT tunnel was reset or closed.
    pub const CONNECT_ERROR: u32 = 0xa;
    /// The peer behaves in a way that may make excessive load.
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    /// The transport does not meet security requirements.
    pub const INADEQUATE_SECURITY: u32 = 0xc;
    /// HTTP/1.1 is required instead.
    pub const HTTP_1_1_REQUIRED: u32 = 0xd;

    /// The code's name, for messages (`0x1 PROTOCOL_ERROR`).
    pub fn name(code: u32) -> String {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        match NAMES.get(code as usize) {
            Some(name) => format!("{code:#x} {name}"),
            None => format!("{code:#x} (unknown)"),
        }
    }
}

/// SETTINGS parameters (RFC 9113 section 6.5.2).
pub mod setting {
    /// SETTINGS_HEADER_TABLE_SIZE.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload any peer must accept (SETTINGS_MAX_FRAME_SIZE's
/// initial value).
pub const DEFAULT_MAX_FRAME_SIZE: usize = 16_384;

/// One frame. `stream` is the whole 32-bit field as sent: the reserved bit
/// is bit 31, so a test sets it with `stream | 1 << 31`. `length` is the
/// length field as sent, normally `payload.len()` (see [`Frame::lying`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The type octet.
    pub kind: u8,
    /// The flags octet.
    pub flags: u8,
    /// The reserved bit and stream identifier, as on the wire.
    pub stream: u32,
    /// The length field (24 bits).
    pub length: u32,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// A frame of any type, its length that of `payload`.
    pub fn new(kind: u8, flags: u8, stream: u32, payload: Vec<u8>) -> Frame {
        Frame {
            kind,
            flags,
            stream,
            length: payload.len() as u32,
            payload,
        }
    }

    /// The same frame with a length field that says `length`, whatever the
    /// payload's (a frame that lies about its size).
    pub fn lying(mut self, length: u32) -> Frame {
        self.length = length;
        self
    }

    /// DATA.
    pub fn data(stream: u32, flags: u8, payload: &[u8]) -> Frame {
        Frame::new(kind::DATA, flags, stream, payload.to_vec())
    }

    /// HEADERS carrying `block` (a header block fragment).
    pub fn headers(stream: u32, flags: u8, block: &[u8]) -> Frame {
        Frame::new(kind::HEADERS, flags, stream, block.to_vec())
    }

    /// HEADERS with the PRIORITY flag: dependency, weight, then `block`.
    pub fn headers_with_priority(
        stream: u32,
        flags: u8,
        depends_on: u32,
        weight: u8,
        block: &[u8],
    ) -> Frame {
        let mut payload = depends_on.to_be_bytes().to_vec();
        payload.push(weight);
        payload.extend_from_slice(block);
        Frame::new(kind::HEADERS, flags | flag::PRIORITY, stream, payload)
    }

    /// A PADDED frame (DATA, HEADERS): the pad length octet says
    /// `pad_length`, followed by `body` and `padding` zero octets (a test
    /// makes `pad_length` disagree with `padding` to send an invalid one).
    pub fn padded(
        kind: u8,
        stream: u32,
        flags: u8,
        pad_length: u8,
        body: &[u8],
        padding: usize,
    ) -> Frame {
        let mut payload = vec![pad_length];
        payload.extend_from_slice(body);
        payload.resize(payload.len() + padding, 0);
        Frame::new(kind, flags | flag::PADDED, stream, payload)
    }

    /// PRIORITY: exclusive bit and dependency, weight.
    pub fn priority(stream: u32, depends_on: u32, weight: u8) -> Frame {
        let mut payload = depends_on.to_be_bytes().to_vec();
        payload.push(weight);
        Frame::new(kind::PRIORITY, 0, stream, payload)
    }

    /// RST_STREAM with an error code.
    pub fn rst_stream(stream: u32, error: u32) -> Frame {
        Frame::new(kind::RST_STREAM, 0, stream, error.to_be_bytes().to_vec())
    }

    /// SETTINGS (not an acknowledgement) with these parameters, in order.
    pub fn settings(params: &[(u16, u32)]) -> Frame {
        let mut payload = Vec::with_capacity(params.len() * 6);
        for (id, value) in params {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        Frame::new(kind::SETTINGS, 0, 0, payload)
    }

    /// An empty SETTINGS with ACK.
    pub fn settings_ack() -> Frame {
        Frame::new(kind::SETTINGS, flag::ACK, 0, Vec::new())
    }

    /// PING with 8 octets of opaque data.
    pub fn ping(flags: u8, data: [u8; 8]) -> Frame {
        Frame::new(kind::PING, flags, 0, data.to_vec())
    }

    /// GOAWAY: last stream identifier, error code, debug data.
    pub fn goaway(last_stream: u32, error: u32, debug: &[u8]) -> Frame {
        let mut payload = last_stream.to_be_bytes().to_vec();
        payload.extend_from_slice(&error.to_be_bytes());
        payload.extend_from_slice(debug);
        Frame::new(kind::GOAWAY, 0, 0, payload)
    }

    /// WINDOW_UPDATE with an increment (its reserved bit as given).
    pub fn window_update(stream: u32, increment: u32) -> Frame {
        Frame::new(
            kind::WINDOW_UPDATE,
            0,
            stream,
            increment.to_be_bytes().to_vec(),
        )
    }

    /// CONTINUATION carrying `block`.
    pub fn continuation(stream: u32, flags: u8, block: &[u8]) -> Frame {
        Frame::new(kind::CONTINUATION, flags, stream, block.to_vec())
    }

    /// PUSH_PROMISE: promised stream, then `block`.
    pub fn push_promise(stream: u32, flags: u8, promised: u32, block: &[u8]) -> Frame {
        let mut payload = promised.to_be_bytes().to_vec();
        payload.extend_from_slice(block);
        Frame::new(kind::PUSH_PROMISE, flags, stream, payload)
    }

    /// The stream identifier without the reserved bit.
    pub fn stream_id(&self) -> u32 {
        self.stream & 0x7fff_ffff
    }

    /// Is `flag` set?
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The frame on the wire: the 9-octet header (length truncated to 24
    /// bits), then the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.payload.len());
        out.extend_from_slice(&self.length.to_be_bytes()[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// The frame at the start of `buf` and the octets it takes, once all
    /// of it is there (None before): a reader keeps what it has read until
    /// a frame is whole, so that a read timing out mid-frame loses nothing.
    pub fn parse(buf: &[u8]) -> Option<(Frame, usize)> {
        let head = buf.get(..9)?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]);
        let end = 9 + length as usize;
        let payload = buf.get(9..end)?.to_vec();
        let frame = Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]),
            length,
            payload,
        };
        Some((frame, end))
    }

    /// The length field of the frame whose header starts `buf`, if the
    /// header is there.
    pub fn announced_length(buf: &[u8]) -> Option<usize> {
        let head = buf.get(..3)?;
        Some(u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize)
    }

    /// A GOAWAY's (last stream, error code), or an RST_STREAM's error code
    /// (as `(0, code)`); None for other frames or a short payload.
    pub fn error_code(&self) -> Option<(u32, u32)> {
        let word = |at: usize| {
            self.payload
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        match self.kind {
            kind::GOAWAY => Some((word(0)? & 0x7fff_ffff, word(4)?)),
            kind::RST_STREAM => Some((0, word(0)?)),
            _ => None,
        }
    }

    /// The header block fragment of a HEADERS, PUSH_PROMISE or
    /// CONTINUATION frame, without padding and priority fields; None if
    /// the padding is longer than the payload.
    pub fn fragment(&self) -> Option<&[u8]> {
        let mut body = &self.payload[..];
        let mut pad = 0usize;
        if matches!(self.kind, kind::HEADERS | kind::PUSH_PROMISE | kind::DATA)
            && self.has(flag::PADDED)
        {
            pad = *body.first()? as usize;
            body = &body[1..];
        }
        if self.kind == kind::HEADERS && self.has(flag::PRIORITY) {
            body = body.get(5..)?;
        }
        if self.kind == kind::PUSH_PROMISE {
            body = body.get(4..)?;
        }
        body.get(..body.len().checked_sub(pad)?)
    }

    /// A SETTINGS frame's parameters, in order (a trailing partial one is
    /// left out).
    pub fn settings_params(&self) -> Vec<(u16, u32)> {
        self.payload
            .chunks_exact(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                )
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_as_written_reserved_bit_and_all() {
        let sent = Frame::headers(1 | 1 << 31, flag::END_HEADERS, b"block");
        let bytes = sent.encode();
        assert_eq!(&bytes[..9], &[0, 0, 5, 1, 4, 0x80, 0, 0, 1]);
        assert_eq!(Frame::parse(&bytes[..bytes.len() - 1]), None);
        let (got, used) = Frame::parse(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(got, sent);
        assert_eq!(got.stream_id(), 1);
    }

    #[test]
    fn a_lying_length_is_sent_as_given() {
        let bytes = Frame::ping(0, [0; 8]).lying(6).encode();
        assert_eq!(&bytes[..3], &[0, 0, 6]);
        assert_eq!(bytes.len(), 9 + 8);
    }

    #[test]
    fn padding_and_priority_are_taken_off_a_fragment() {
        let f = Frame::padded(kind::HEADERS, 1, 0, 3, b"abc", 3);
        assert_eq!(f.fragment(), Some(&b"abc"[..]));
        let f = Frame::headers_with_priority(1, 0, 0, 16, b"xyz");
        assert_eq!(f.fragment(), Some(&b"xyz"[..]));
        let f = Frame::padded(kind::HEADERS, 1, 0, 9, b"abc", 0);
        assert_eq!(f.fragment(), None);
    }
}
