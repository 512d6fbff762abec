//! HTTP/2's settings: whether it is served, and the limits each
//! connection announces in its SETTINGS frame.

/// How the HTTP layer serves HTTP/2 (`--http2`, `--h2c` and the `--h2-*`
/// limits). The defaults are nginx's where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Settings {
    /// Serve HTTP/2 to a TLS client that chose `h2` by ALPN (`--http2`).
    /// The `mpm` crate offers `h2` in ALPN only when this is on (and the
    /// model carries it).
    pub tls: bool,
    /// Serve HTTP/2 with prior knowledge on plain listeners (`--h2c`): a
    /// connection whose first bytes are the connection preface.
    pub cleartext: bool,
    /// Streams a client may have open at once on one connection
    /// (SETTINGS_MAX_CONCURRENT_STREAMS; nginx's
    /// `http2_max_concurrent_streams`, 128): the per-connection budget of
    /// streams in flight. One more is refused with `REFUSED_STREAM`.
    pub max_concurrent_streams: u32,
    /// The largest header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE,
    /// decoded size as RFC 9113 counts it); a larger one is answered 431.
    pub max_header_list_size: u32,
    /// The largest frame payload the server accepts
    /// (SETTINGS_MAX_FRAME_SIZE, 16384 to 16777215).
    pub max_frame_size: u32,
    /// Each stream's receive window at its start
    /// (SETTINGS_INITIAL_WINDOW_SIZE, 1 to 2^31-1): how much of a request
    /// body a client may send before the server takes it.
    pub initial_window_size: u32,
}

/// The smallest frame size RFC 9113 allows a peer to announce.
pub const MIN_FRAME_SIZE: u32 = 16_384;
/// The largest frame size RFC 9113 allows.
pub const MAX_FRAME_SIZE: u32 = 16_777_215;
/// The largest window RFC 9113 allows.
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

impl Default for H2Settings {
    fn default() -> Self {
        H2Settings {
            tls: true,
            cleartext: false,
            max_concurrent_streams: 128,
            // nginx's large_client_header_buffers (4 of 8k).
            max_header_list_size: 32 * 1024,
            max_frame_size: MIN_FRAME_SIZE,
            // nginx's http2_body_preread_size (64k).
            initial_window_size: 65_536,
        }
    }
}

impl H2Settings {
    /// Is HTTP/2 served at all (over TLS or in clear)?
    pub fn any(&self) -> bool {
        self.tls || self.cleartext
    }

    /// The codec's settings these make. The flood limits are `mpm-h2`'s
    /// defaults (rapid reset: 100 streams reset before their answer, less
    /// one per stream answered; 1,024 streams the server had to reset
    /// itself; 10,000 frames in a row that carry no request), which
    /// [`mpm_h2::Settings`] documents.
    pub(crate) fn codec(&self) -> mpm_h2::Settings {
        let window = self.initial_window_size.clamp(1, MAX_WINDOW_SIZE);
        mpm_h2::Settings {
            max_concurrent_streams: self.max_concurrent_streams,
            max_header_list_size: self.max_header_list_size,
            max_frame_size: self.max_frame_size.clamp(MIN_FRAME_SIZE, MAX_FRAME_SIZE),
            initial_window_size: window,
            // The connection's window: room for a few streams' bodies.
            connection_window_size: window.saturating_mul(4).clamp(65_535, MAX_WINDOW_SIZE),
            ..mpm_h2::Settings::default()
        }
    }
}
