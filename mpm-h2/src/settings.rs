//! Our SETTINGS (RFC 9113 §6.5.2), with nginx-like defaults, and the
//! flood limits the connection enforces.

/// The initial flow-control window every stream and the connection start
/// with (§6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest window (§6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The smallest SETTINGS_MAX_FRAME_SIZE, and its initial value (§6.5.2).
pub const MIN_FRAME_SIZE: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE (§6.5.2).
pub const MAX_FRAME_SIZE: u32 = 16_777_215;

/// What the server announces, and the limits it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK table the peer may fill
    /// (default 4,096, the RFC's initial value). A smaller one is enforced
    /// from the start: a peer that filled the RFC's 4,096 before our
    /// SETTINGS reached it gets COMPRESSION_ERROR, so keep the default
    /// unless the peers are known.
    pub header_table_size: u32,
    /// SETTINGS_MAX_CONCURRENT_STREAMS (default 128, nginx's): a stream
    /// past it is refused with REFUSED_STREAM.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: each stream's receive window
    /// (default 65,535).
    pub initial_window_size: u32,
    /// The connection's receive window (default 1 MiB): above 65,535 it is
    /// opened by a WINDOW_UPDATE after the SETTINGS.
    pub connection_window_size: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame payload we accept
    /// (default 16,384).
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (default 16,384): a request head
    /// larger (RFC 9113's measure) is reported as
    /// [`Event::HeadersTooLarge`](crate::Event::HeadersTooLarge).
    pub max_header_list_size: u32,
    /// PING, SETTINGS, PRIORITY, empty DATA and CONTINUATION, RST_STREAM
    /// and WINDOW_UPDATE on closed streams, and frames of unknown types a
    /// peer may send in a row without opening a stream or
    /// sending body (default 10,000, nginx's and nghttp2's bound on frames
    /// queued for a client); one more is a flood: GOAWAY ENHANCE_YOUR_CALM.
    pub idle_frame_limit: u32,
    /// Streams the peer may reset before their response began, less one
    /// per stream answered in full (default 100): rapid reset (CVE-2023-44487)
    /// past it is ENHANCE_YOUR_CALM.
    pub rapid_reset_limit: u32,
    /// Streams we may reset for a malformed request (default 1,024, `h2`'s
    /// default): past it, ENHANCE_YOUR_CALM.
    pub local_reset_limit: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            header_table_size: 4_096,
            max_concurrent_streams: 128,
            initial_window_size: DEFAULT_WINDOW,
            connection_window_size: 1 << 20,
            max_frame_size: MIN_FRAME_SIZE,
            max_header_list_size: 16_384,
            idle_frame_limit: 10_000,
            rapid_reset_limit: 100,
            local_reset_limit: 1_024,
        }
    }
}

/// What the peer announced (§6.5.2's initial values until it says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerSettings {
    pub(crate) initial_window_size: u32,
    pub(crate) max_frame_size: u32,
}

impl Default for PeerSettings {
    fn default() -> PeerSettings {
        PeerSettings {
            initial_window_size: DEFAULT_WINDOW,
            max_frame_size: MIN_FRAME_SIZE,
        }
    }
}
