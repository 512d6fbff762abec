//! What a connection counted: streams, resets, and each flood cut off.

/// Counters one connection keeps; the caller reads them with
/// [`Connection::stats`](crate::Connection::stats) (and adds them to its
/// own, per process, when the connection ends: nothing here is shared).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Frames received (whole ones, of every type).
    pub frames_received: u64,
    /// Streams the peer opened (refused ones included).
    pub streams_opened: u64,
    /// Streams refused past SETTINGS_MAX_CONCURRENT_STREAMS or after our
    /// GOAWAY.
    pub streams_refused: u64,
    /// Streams the peer reset.
    pub streams_reset_by_peer: u64,
    /// Streams we reset: malformed requests (§8.1.1), stream errors, and
    /// the caller's [`Connection::reset`](crate::Connection::reset).
    pub streams_reset_by_us: u64,
    /// PINGs answered.
    pub pings: u64,
    /// SETTINGS frames applied and acknowledged.
    pub settings: u64,
    /// Connection errors (a GOAWAY with an error code sent), floods included.
    pub connection_errors: u64,
    /// Cut for too many PING, SETTINGS, PRIORITY or unknown frames in a row.
    pub control_floods: u64,
    /// Cut for too many empty DATA or CONTINUATION frames in a row.
    pub empty_frame_floods: u64,
    /// Cut for a header block growing past its bound (CONTINUATION flood).
    pub continuation_floods: u64,
    /// Cut for rapid reset.
    pub rapid_reset_floods: u64,
    /// Cut for too many streams we had to reset.
    pub local_reset_floods: u64,
}
