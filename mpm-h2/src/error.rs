//! The crate's one error type, and the error codes of RFC 9113 §7.

use std::fmt;

/// An error code of RFC 9113 §7, as RST_STREAM and GOAWAY carry it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// Not an error: a graceful GOAWAY, a stream no longer wanted.
    pub const NO_ERROR: Reason = Reason(0x0);
    /// A protocol rule broken, and no more specific code.
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    /// Ours: something went wrong on this side.
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    /// A flow-control window broken or overflowed.
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    /// A SETTINGS not acknowledged in time.
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    /// A frame on a stream already half-closed or closed by the peer.
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    /// A stream refused before any processing (safe to retry).
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    /// A stream no longer needed.
    pub const CANCEL: Reason = Reason(0x8);
    /// The header compression state cannot be kept.
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    /// A CONNECT tunnel's connection failed.
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    /// A peer behaving abusively (the floods).
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    /// The transport's security is too weak.
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    /// HTTP/1.1 is required instead.
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);

    /// The code's name in RFC 9113, or "unknown".
    pub fn name(self) -> &'static str {
        match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => "unknown",
        }
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#x})", self.name(), self.0)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What went wrong: a connection error (the GOAWAY is already queued in
/// the output: write it, then close), or a call the connection's state
/// does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The peer broke RFC 9113 or RFC 7541 in a way that ends the
    /// connection (§5.4.1); a GOAWAY with `reason` is queued.
    #[error("HTTP/2 connection error {reason}: {why}")]
    Connection {
        /// The code sent in the GOAWAY.
        reason: Reason,
        /// What the peer did, for the error log.
        why: &'static str,
    },
    /// A send on a stream that is not open for sending (reset by the
    /// peer, or ended already): the caller may drop what it had for it.
    #[error("HTTP/2 stream {0} is closed for sending")]
    StreamClosed(u32),
    /// Response HEADERS sent twice, or DATA before HEADERS.
    #[error("HTTP/2 stream {0}: {1}")]
    Misuse(u32, &'static str),
}

impl Error {
    /// The GOAWAY code of a connection error, if this is one.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Error::Connection { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}
