//! The configuration a server runs with ([`Config`], declared with the
//! settings in `table.rs`), and what each layer below (process model, HTTP, TLS) reads of it.

use std::path::PathBuf;
use std::time::Duration;

use mpm_core::{MpmKind, MpmSettings};
use mpm_http::HttpSettings;
use mpm_site::About;

use super::{Config, ConfigLayer};

/// TLS as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Certificate and key files, in pairs; the first is the default.
    pub certs: Vec<(PathBuf, PathBuf)>,
    /// Sessions the shared cache holds (0: none).
    pub session_cache: usize,
    /// Session tickets on or off.
    pub session_tickets: bool,
    /// How long a session may be resumed.
    pub session_timeout: Duration,
}

impl Default for Config {
    /// What `mpm serve` runs with when given nothing: every setting's
    /// declared default, resolved as any configuration is.
    fn default() -> Self {
        // The declared defaults are checked by a test; they cannot fail.
        #[allow(clippy::expect_used)]
        Config::resolve(ConfigLayer::default()).expect("the declared defaults resolve")
    }
}

/// Scoreboard slots one process of `mpm` with `threads` workers takes.
pub(crate) fn slots_per_process(mpm: MpmKind, threads: usize) -> usize {
    match mpm {
        MpmKind::Prefork => 1,
        MpmKind::Worker => threads,
        // The loop's thread answers requests too: it has a slot of its own.
        MpmKind::Event | MpmKind::Uring => threads.saturating_add(1),
    }
}

/// Each layer's settings, built from the one configuration: nothing below
/// this crate reads `Config`.
impl Config {
    /// Scoreboard slots each serving process takes: one per worker that
    /// actually starts.
    pub fn slots_per_process(&self) -> usize {
        slots_per_process(self.mpm, self.mpm_settings().threads())
    }

    /// What the process model reads.
    pub fn mpm_settings(&self) -> MpmSettings {
        MpmSettings {
            max_request_workers: self.max_request_workers,
            threads_per_child: self.threads_per_child,
            async_request_worker_factor: self.async_request_worker_factor,
            timeout: self.timeout,
            // An event loop cuts off a request in progress that goes silent
            // at the first of its limits.
            request_timeout: self
                .timeout
                .min(self.request_header_timeout)
                .min(self.request_body_timeout),
            keepalive_timeout: self.keepalive_timeout,
            graceful_timeout: self.graceful_timeout,
            poller: self.poller,
            send_lowat: self.send_lowat,
            max_connections_per_child: self.max_connections_per_child,
            epoll_exclusive: self.epoll_exclusive,
            reuseport: self.reuseport,
            // Made by whoever forks the processes that share it.
            ledger: None,
        }
    }

    /// What the HTTP layer reads.
    pub fn http_settings(&self) -> HttpSettings {
        HttpSettings {
            limit_request_line: self.limit_request_line,
            limit_request_fields: self.limit_request_fields,
            limit_request_field_size: self.limit_request_field_size,
            limit_request_body: self.limit_request_body,
            keepalive: self.keepalive,
            max_keepalive_requests: self.max_keepalive_requests,
            request_header_timeout: self.request_header_timeout,
            request_body_timeout: self.request_body_timeout,
            request_body_min_rate: self.request_body_min_rate,
            request_header_min_rate: self.request_header_min_rate,
            request_header_max_timeout: self.request_header_max_timeout,
            timeout: self.timeout,
            sendfile: self.sendfile,
            sendfile_max_chunk: self.sendfile_max_chunk,
            request_pool: self.request_pool,
            error_pages: self.error_pages.clone(),
            added_fields: self.added_fields.clone(),
            h2: mpm_http::H2Settings {
                tls: self.http2,
                cleartext: self.h2c,
                max_concurrent_streams: self.h2_max_concurrent_streams,
                max_header_list_size: self.h2_max_header_list_size,
                max_frame_size: self.h2_max_frame_size,
                initial_window_size: self.h2_initial_window_size,
            },
            ..HttpSettings::default()
        }
    }

    /// What the TLS layer reads, for a protocol that is HTTP (`http`: ALPN
    /// `http/1.1`, plain HTTP on a TLS port answered 400) or not.
    pub fn tls_settings(&self, http: bool) -> Option<mpm_tls::TlsSettings> {
        let t = self.tls.as_ref()?;
        Some(mpm_tls::TlsSettings {
            certs: t
                .certs
                .iter()
                .map(|(cert, key)| mpm_tls::CertPair {
                    cert: cert.clone(),
                    key: key.clone(),
                })
                .collect(),
            // RFC 9113 §3.2: `h2` first, so that a client offering both
            // gets HTTP/2.
            alpn: if http && self.http2 {
                vec![b"h2".to_vec(), b"http/1.1".to_vec()]
            } else if http {
                vec![b"http/1.1".to_vec()]
            } else {
                Vec::new()
            },
            session_cache: t.session_cache,
            session_tickets: t.session_tickets,
            session_timeout: t.session_timeout,
            handshake_timeout: self.request_header_timeout,
            plain_http_answer: http,
        })
    }

    /// The reverse proxy's upstream pools, as `--proxy-keepalive` and
    /// `--proxy-keepalive-timeout` say (the routes are [`Config::proxy`]).
    pub fn proxy_pools(&self) -> mpm_proxy::PoolSettings {
        mpm_proxy::PoolSettings {
            keepalive: self.proxy_keepalive,
            keepalive_timeout: self.proxy_keepalive_timeout,
        }
    }

    /// What the welcome page says about this server.
    pub fn about(&self) -> About {
        About {
            mpm: self.mpm,
            listen: self.listen.clone(),
            max_request_workers: self.max_request_workers,
            threads_per_child: self.threads_per_child,
            sendfile: self.sendfile,
            keepalive: self.keepalive,
            keepalive_timeout: self.keepalive_timeout,
            // What the kernel offers is what the ring uses.
            ring: (self.mpm == MpmKind::Uring)
                .then(|| mpm_uring::available().ok().map(|f| f.describe()))
                .flatten(),
        }
    }
}
