//! The HTTP layer's settings: what the `mpm` crate reads from flags and the
//! TOML file and hands to an [`HttpFactory`](crate::HttpFactory).

use std::sync::Arc;
use std::time::Duration;

use crate::access_log::AccessLog;
use crate::added_fields::AddedFields;
use crate::buffer_pool::BufferPool;
use crate::error_pages::ErrorPages;
use crate::h2::H2Settings;
use crate::head::Limits;

/// How the HTTP layer treats every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Longest request line accepted (414 beyond it).
    pub limit_request_line: usize,
    /// Most header fields in one request (431 beyond it); at most
    /// [`MAX_REQUEST_FIELDS`](crate::MAX_REQUEST_FIELDS).
    pub limit_request_fields: usize,
    /// Longest header field accepted (431 beyond it).
    pub limit_request_field_size: usize,
    /// Largest request body accepted (413 beyond it). 0: no limit on a
    /// body the handler reads as it arrives (streamed, or awaited by its
    /// future: the proxy's uploads), as nginx's `client_max_body_size 0`
    /// and httpd's `LimitRequestBody 0`; a body the layer reads whole into
    /// memory for the handler is then still bounded, by [`WHOLE_BODY_CAP`].
    pub limit_request_body: u64,
    /// Keep connections open between requests.
    pub keepalive: bool,
    /// Requests served on one connection before it is closed (0: no limit).
    pub max_keepalive_requests: u64,
    /// A whole request head must arrive within this, counted from its first
    /// byte (from the accept for a connection's first request); then 408.
    pub request_header_timeout: Duration,
    /// Each this many head bytes received extend the header allowance by a
    /// second (0: the allowance is fixed)...
    pub request_header_min_rate: u64,
    /// ...up to this in all (`mod_reqtimeout`'s `header=20-40`).
    pub request_header_max_timeout: Duration,
    /// A request body's first allowance (then 408).
    pub request_body_timeout: Duration,
    /// Each this many body bytes received extend the body allowance by a
    /// second (0: the allowance is fixed).
    pub request_body_min_rate: u64,
    /// The longest a single read may wait.
    pub timeout: Duration,
    /// File bodies by `sendfile(2)` (or read+write).
    pub sendfile: bool,
    /// Most bytes of a file body one `sendfile` asks for, and the most an
    /// event loop sends of it per turn before serving its other connections
    /// (nginx's `sendfile_max_chunk`); 0: no limit.
    pub sendfile_max_chunk: u64,
    /// A per-worker arena for each request's scratch.
    pub request_pool: bool,
    /// The `Server` field of every response a handler does not give its
    /// own (empty: none). The `mpm` crate sets it from the application's
    /// identity.
    pub server: String,
    /// Pages that replace the built-in error pages, by status.
    pub error_pages: ErrorPages,
    /// Fields added to responses (`--add-header`, `--add-header-always`).
    pub added_fields: AddedFields,
    /// HTTP/2: whether it is served (over TLS, in clear) and its limits.
    pub h2: H2Settings,
}

/// The largest body the layer reads whole into memory for a handler when
/// [`HttpSettings::limit_request_body`] is 0 (no limit on bodies read as
/// they arrive): 1 MiB, the default limit. A body held whole is never
/// unbounded; to allow larger ones whole, set a limit above this.
pub const WHOLE_BODY_CAP: u64 = 1 << 20;

/// The default for [`HttpSettings::sendfile_max_chunk`]: 512 KiB.
pub const DEFAULT_SENDFILE_MAX_CHUNK: u64 = 512 * 1024;

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            limit_request_line: 8190,
            limit_request_fields: 100,
            limit_request_field_size: 8190,
            limit_request_body: WHOLE_BODY_CAP,
            keepalive: true,
            max_keepalive_requests: 1000,
            // mod_reqtimeout's default: header=20-40,MinRate=500.
            request_header_timeout: Duration::from_secs(20),
            request_header_min_rate: 500,
            request_header_max_timeout: Duration::from_secs(40),
            // mod_reqtimeout's default: body=20,MinRate=500.
            request_body_timeout: Duration::from_secs(20),
            request_body_min_rate: 500,
            timeout: Duration::from_secs(60),
            sendfile: true,
            sendfile_max_chunk: DEFAULT_SENDFILE_MAX_CHUNK,
            request_pool: true,
            server: format!("mpm/{}", env!("CARGO_PKG_VERSION")),
            error_pages: ErrorPages::new(),
            added_fields: AddedFields::default(),
            h2: H2Settings::default(),
        }
    }
}

/// What every connection of a factory reads: the settings in the form the
/// state machine uses, and what its workers share.
#[derive(Debug, Clone)]
pub(crate) struct ServiceSettings {
    pub(crate) limits: Limits,
    pub(crate) keepalive: bool,
    pub(crate) max_keepalive_requests: u64,
    pub(crate) request_header_timeout: Duration,
    pub(crate) request_header_min_rate: u64,
    pub(crate) request_header_max_timeout: Duration,
    pub(crate) request_body_timeout: Duration,
    pub(crate) request_body_min_rate: u64,
    /// The longest a single read may wait (`--timeout`).
    pub(crate) timeout: Duration,
    pub(crate) sendfile: bool,
    /// `sendfile_max_chunk`, with "no limit" as the largest value.
    pub(crate) sendfile_max_chunk: u64,
    pub(crate) request_pool: bool,
    pub(crate) server: String,
    pub(crate) error_pages: ErrorPages,
    pub(crate) added_fields: Arc<AddedFields>,
    pub(crate) buffers: Arc<BufferPool>,
    pub(crate) access_log: Option<Arc<AccessLog>>,
    pub(crate) h2: H2Settings,
}

impl ServiceSettings {
    /// The service settings for `settings`, with a buffer pool of their own.
    pub(crate) fn new(settings: &HttpSettings) -> ServiceSettings {
        ServiceSettings {
            limits: Limits {
                line: settings.limit_request_line,
                fields: settings.limit_request_fields,
                field_size: settings.limit_request_field_size,
                body: match settings.limit_request_body {
                    0 => u64::MAX,
                    n => n,
                },
                whole_body: match settings.limit_request_body {
                    0 => WHOLE_BODY_CAP,
                    n => n,
                },
            },
            keepalive: settings.keepalive,
            max_keepalive_requests: settings.max_keepalive_requests,
            request_header_timeout: settings.request_header_timeout,
            request_header_min_rate: settings.request_header_min_rate,
            request_header_max_timeout: settings.request_header_max_timeout,
            request_body_timeout: settings.request_body_timeout,
            request_body_min_rate: settings.request_body_min_rate,
            timeout: settings.timeout,
            sendfile: settings.sendfile,
            sendfile_max_chunk: match settings.sendfile_max_chunk {
                0 => u64::MAX,
                n => n,
            },
            request_pool: settings.request_pool,
            server: settings.server.clone(),
            error_pages: settings.error_pages.clone(),
            added_fields: Arc::new(settings.added_fields.clone()),
            buffers: Arc::default(),
            access_log: None,
            h2: settings.h2,
        }
    }

    /// The largest receive buffer a connection may grow to: a whole head
    /// plus a body read whole (bounded even when bodies read as they
    /// arrive are not).
    pub(crate) fn max_buffer(&self) -> usize {
        let body = usize::try_from(self.limits.whole_body).unwrap_or(usize::MAX);
        self.limits
            .max_head()
            .saturating_add(body)
            .saturating_add(1024)
    }
}

#[cfg(test)]
mod tests {
    use super::{HttpSettings, ServiceSettings, WHOLE_BODY_CAP};

    /// 0 lifts the limit on bodies read as they arrive, not on the buffer
    /// a body read whole is held in; a size bounds both.
    #[test]
    fn a_body_limit_of_0_lifts_the_streamed_limit_and_keeps_the_whole_one() {
        let with = |limit| {
            ServiceSettings::new(&HttpSettings {
                limit_request_body: limit,
                ..HttpSettings::default()
            })
        };
        let unlimited = with(0);
        assert_eq!(unlimited.limits.body, u64::MAX);
        assert_eq!(unlimited.limits.whole_body, WHOLE_BODY_CAP);
        let head = unlimited.limits.max_head();
        assert_eq!(
            unlimited.max_buffer(),
            head + WHOLE_BODY_CAP as usize + 1024
        );
        let set = with(10 << 20);
        assert_eq!(
            (set.limits.body, set.limits.whole_body),
            (10 << 20, 10 << 20)
        );
        // A limit an embedder sets past usize's range saturates.
        assert_eq!(with(u64::MAX).max_buffer(), usize::MAX);
    }
}
