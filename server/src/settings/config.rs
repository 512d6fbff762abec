//! The configuration a server runs with, resolved from the layers and
//! checked, and what each layer below (process model, HTTP, TLS) reads of it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mpm_core::allocator::AllocatorKind;
use mpm_core::error_log::LogLevel;
use mpm_core::listener_poller::PollerKind;
use mpm_core::{MpmKind, MpmSettings};
use mpm_http::access_log::LogWrite;
use mpm_http::log_format::LogFormat;
use mpm_http::{About, CacheRules, Dotfiles, ErrorPages, Gzip, HttpSettings};
use mpm_prefork::AcceptMutex;

use super::values::CpuAffinity;
use super::ConfigLayer;

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

/// A complete, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The process model.
    pub mpm: MpmKind,
    /// Addresses to listen on.
    pub listen: Vec<SocketAddr>,
    /// Addresses to listen on with TLS.
    pub listen_tls: Vec<SocketAddr>,
    /// TLS: certificates and sessions, when a TLS address is listed.
    pub tls: Option<TlsConfig>,
    /// Accept queue length per listener.
    pub backlog: u32,
    /// The directory served, or `None` for the embedded welcome site.
    pub docroot: Option<PathBuf>,
    /// Most requests served at once.
    pub max_request_workers: usize,
    /// Serving processes; more than one runs under the process manager.
    pub server_limit: usize,
    /// Was `server_limit` chosen by `--server-limit auto` (one per CPU)?
    pub server_limit_auto: bool,
    /// Whether each serving process is pinned to one CPU.
    pub cpu_affinity: CpuAffinity,
    /// Threads per worker process.
    pub threads_per_child: usize,
    /// Event MPM: connections held per request worker.
    pub async_request_worker_factor: usize,
    /// Whether connections are kept open between requests.
    pub keepalive: bool,
    /// Idle wait between requests.
    pub keepalive_timeout: Duration,
    /// Requests per connection (0: unlimited).
    pub max_keepalive_requests: u64,
    /// Wait bound for one read or write mid-request.
    pub timeout: Duration,
    /// Bound on receiving a whole request head.
    pub request_header_timeout: Duration,
    /// How long shutdown waits for requests in flight.
    pub graceful_timeout: Duration,
    /// sendfile(2) for file bodies, or read+write.
    pub sendfile: bool,
    /// Most bytes of a file body per sendfile, and per event-loop turn (0: no limit).
    pub sendfile_max_chunk: u64,
    /// Event: shared listeners registered with EPOLLEXCLUSIVE.
    pub epoll_exclusive: bool,
    /// A per-worker arena for each request's scratch, reset after it.
    pub request_pool: bool,
    /// Files up to this size are served from memory.
    pub file_cache_max_size: u64,
    /// Request-line limit in bytes.
    pub limit_request_line: usize,
    /// Header-field count limit.
    pub limit_request_fields: usize,
    /// Header-field size limit in bytes.
    pub limit_request_field_size: usize,
    /// Request-body limit in bytes.
    pub limit_request_body: u64,
    /// Path of the status page, or `None` when disabled.
    pub status_path: Option<String>,
    /// Whether non-loopback clients may see the status page.
    pub status_remote: bool,
    /// Where to write the master's pid.
    pub pid_file: Option<PathBuf>,
    /// Prefork: children forked at start.
    pub start_servers: usize,
    /// Prefork: fewest idle children kept.
    pub min_spare: usize,
    /// Prefork: most idle children kept.
    pub max_spare: usize,
    /// Connections per child before it is replaced (0: never).
    pub max_connections_per_child: u64,
    /// Prefork: accept serialization.
    pub accept_mutex: AcceptMutex,
    /// How prefork and worker wait on their listeners.
    pub poller: PollerKind,
    /// TCP_NOTSENT_LOWAT for client sockets; 0 for the kernel's default.
    pub send_lowat: u32,
    /// Prefork and event: a SO_REUSEPORT listening socket per serving process.
    pub reuseport: bool,
    /// Serving processes drop to this user and group (uid, gid), when root.
    pub run_as: Option<(u32, u32)>,
    /// Whether dotfiles are served.
    pub dotfiles: Dotfiles,
    /// Whether precompressed `.br` and `.gz` siblings are served.
    pub precompressed: bool,
    /// Gzip on the fly, if on.
    pub gzip: Option<Gzip>,
    /// Whether directories without an index are listed.
    pub autoindex: bool,
    /// Pages of the docroot that replace the built-in error pages.
    pub error_pages: ErrorPages,
    /// `Cache-Control` rules for files.
    pub expires: CacheRules,
    /// Where the counters answer in Prometheus's format, besides the
    /// status page's `?format=prometheus`.
    pub metrics_path: Option<String>,
    /// The allocator asked for, if any (else the one the process started with).
    pub allocator: Option<AllocatorKind>,
    /// Where the access log goes, if anywhere.
    pub access_log: Option<PathBuf>,
    /// The access log's line format.
    pub log_format: LogFormat,
    /// How unbuffered access-log lines are written.
    pub log_write: LogWrite,
    /// Bytes of access-log lines buffered per worker (0: none).
    pub log_buffer: usize,
    /// The error log's level.
    pub log_level: LogLevel,
    /// Where the error log goes instead of stderr, if set.
    pub error_log: Option<PathBuf>,
    /// The binary a binary upgrade starts (`None`: the one running).
    pub upgrade_binary: Option<PathBuf>,
    /// How long the new master of an upgrade may take to be ready.
    pub upgrade_timeout: Duration,
    /// How long a stopping master serves on, reporting draining, first.
    pub drain_delay: Duration,
    /// Time allowed for a request body before the rate extends it.
    pub request_body_timeout: Duration,
    /// Bytes per second that extend the body timeout by a second (0: none).
    pub request_body_min_rate: u64,
    /// Bytes per second that extend the header timeout by a second (0: none).
    pub request_header_min_rate: u64,
    /// The most the header timeout is extended to.
    pub request_header_max_timeout: Duration,
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
        // The listener thread answers requests too: it has a slot of its own.
        MpmKind::Event => threads.saturating_add(1),
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
            alpn: if http {
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
        }
    }
}
