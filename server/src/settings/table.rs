//! Every setting of mpm, declared once: its doc comment is its help (and
//! its line in `docs/configuration.md`), then its field of
//! [`ConfigLayer`] (whose name with dashes is the flag and the TOML key),
//! the name of its value, its default, its bounds, and the field of
//! [`Config`] it becomes: `config = TYPE` for a value taken as it is
//! (checked against its bounds; a switch becomes a `bool`, a duration a
//! `Duration`), or `config by hand { FIELDS }` for values `resolve.rs`
//! works out from several settings. A new setting is one entry here, plus
//! the code that uses its value.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mpm_core::allocator::AllocatorKind;
use mpm_core::error_log::LogLevel;
use mpm_core::listener_poller::PollerKind;
use mpm_core::scoreboard::MAX_SLOTS;
use mpm_core::{MpmKind, MpmSettings, Seconds};
use mpm_http::access_log::{LogWrite, MAX_LOG_BUFFER};
use mpm_http::log_format::LogFormat;
use mpm_http::{
    AddedFields, ErrorPages, H2Settings, HttpSettings, MAX_FRAME_SIZE, MAX_REQUEST_FIELDS,
    MAX_WINDOW_SIZE, MIN_FRAME_SIZE,
};
use mpm_master::upgrade::READY_TIMEOUT;
use mpm_prefork::AcceptMutex;
use mpm_proxy::{ProxyRoute, DEFAULT_KEEPALIVE, DEFAULT_KEEPALIVE_TIMEOUT};
use mpm_site::{CacheRules, Dotfiles, Gzip, DEFAULT_IN_MEMORY};
use mpm_tls::TlsSettings;

use super::config::TlsConfig;
use super::declare::settings;
use super::listen::DEFAULT_LISTEN;
use super::values::{Bounds, CpuAffinity, OnOff, ServerLimit};
use super::{
    MAX_BODY_LIMIT, MAX_FIELD_LIMIT, MAX_FILE_CACHE_SIZE, MAX_PROXY_KEEPALIVE,
    MAX_THREADS_PER_CHILD,
};

settings! {
    [Processes]

    /// Process model: prefork, worker, event or uring (io_uring; refused
    /// with the cause where the kernel or a seccomp filter denies it).
    mpm: Option<MpmKind>, "MPM",
        default = value(MpmKind::Worker), bounds = Bounds::Any,
        config = MpmKind;

    /// Most requests served at once (threads, or processes for prefork).
    max_request_workers: Option<usize>, "N",
        default = value(MpmSettings::default().max_request_workers),
        bounds = Bounds::Between(1, MAX_SLOTS as u128),
        config = usize;

    /// Serving processes, children of a single-threaded master that replaces
    /// any that die and turns signals into restarts and upgrades; auto: one
    /// per CPU the server may use.
    server_limit: Option<ServerLimit>, "N|auto",
        default = text("event and uring: auto (one per CPU); worker: 1; prefork: max-request-workers"),
        bounds = Bounds::Any,
        config by hand {
            /// Serving processes; more than one runs under the process manager.
            server_limit: usize,
            /// Was `server_limit` chosen by `--server-limit auto` (one per CPU)?
            server_limit_auto: bool,
        };

    /// Pin each serving process to one CPU (auto) or not (off).
    cpu_affinity: Option<CpuAffinity>, "auto|off",
        default = value(CpuAffinity::Off), bounds = Bounds::Any,
        config = CpuAffinity;

    /// Threads in each process.
    threads_per_child: Option<usize>, "N",
        default = text("max-request-workers / server-limit; event and uring: at most 32; prefork: 1"),
        bounds = Bounds::Between(1, MAX_THREADS_PER_CHILD as u128),
        config by hand {
            /// Threads per serving process.
            threads_per_child: usize,
        };

    /// Event MPM: connections one process holds, per request worker
    /// (the role of httpd's AsyncRequestWorkerFactor).
    async_request_worker_factor: Option<usize>, "N",
        default = value(MpmSettings::default().async_request_worker_factor),
        bounds = Bounds::at_least(1),
        config = usize;

    /// Event: register shared listening sockets with EPOLLEXCLUSIVE, so a
    /// new connection wakes one process (on), or every idle one (off).
    epoll_exclusive: Option<OnOff>, "on|off",
        default = value(OnOff(MpmSettings::default().epoll_exclusive)), bounds = Bounds::Any,
        config = bool;

    /// Prefork: children forked at start.
    start_servers: Option<usize>, "N",
        default = value(8), bounds = Bounds::Any,
        config by hand {
            /// Prefork: children forked at start.
            start_servers: usize,
        };

    /// Prefork: fewest idle children kept (more are forked, 1, 2, 4 ... 32 a
    /// second, and, while connections wait with no child idle, at once in
    /// rounds of up to 32 every 10 ms).
    min_spare: Option<usize>, "N",
        default = value(8), bounds = Bounds::Any,
        config by hand {
            /// Prefork: fewest idle children kept.
            min_spare: usize,
        };

    /// Prefork: most idle children kept (the rest are stopped).
    max_spare: Option<usize>, "N",
        default = value(64), bounds = Bounds::Any,
        config by hand {
            /// Prefork: most idle children kept.
            max_spare: usize,
        };

    /// Connections a child serves before it is replaced (0: never).
    max_connections_per_child: Option<u64>, "N",
        default = value(MpmSettings::default().max_connections_per_child), bounds = Bounds::Any,
        config = u64;

    /// Prefork: how children take turns to accept: fcntl, flock, pthread or none.
    accept_mutex: Option<AcceptMutex>, "KIND",
        default = value(AcceptMutex::Pthread), bounds = Bounds::Any,
        config = AcceptMutex;

    /// Prefork and worker: how a waiting worker watches the listeners:
    /// epoll, poll or select (below descriptor 1024 only).
    poller: Option<PollerKind>, "KIND",
        default = value(MpmSettings::default().poller), bounds = Bounds::Any,
        config = PollerKind;

    /// Prefork, event and uring: give each serving process a listening socket of
    /// its own (SO_REUSEPORT) instead of sharing one: on or off.
    reuseport: Option<OnOff>, "on|off",
        default = value(OnOff(false)), bounds = Bounds::Any,
        config = bool;

    [Listening]

    /// Address to listen on (IPv4 `127.0.0.1:8080`, IPv6 `[::1]:8080`, or a
    /// host name for every address it has, `localhost:8080`; `https://ADDR`
    /// for TLS); repeat for several.
    listen: Vec<String>, "ADDR",
        default = text(DEFAULT_LISTEN), bounds = Bounds::Any,
        config by hand {
            /// Addresses to listen on.
            listen: Vec<SocketAddr>,
        };

    /// Address to listen on with TLS (as `--listen https://ADDR`); repeat for several.
    listen_tls: Vec<String>, "ADDR",
        default = text("none"), bounds = Bounds::Any,
        config by hand {
            /// Addresses to listen on with TLS.
            listen_tls: Vec<SocketAddr>,
        };

    /// TLS certificate chain (PEM), server certificate first; repeat for
    /// several names (SNI), each with its --tls-key; the first is the default.
    tls_cert: Vec<PathBuf>, "FILE",
        default = text("none"), bounds = Bounds::Any,
        config by hand {
            /// TLS: certificates and sessions, when a TLS address is listed.
            tls: Option<TlsConfig>,
        };

    /// TLS private key (PEM) of the --tls-cert in the same position.
    tls_key: Vec<PathBuf>, "FILE",
        default = text("none"), bounds = Bounds::Any,
        config by hand {};

    /// TLS sessions kept in the cache every process shares (`off` for none).
    tls_session_cache: Option<String>, "N|off",
        default = value(TlsSettings::default().session_cache.to_string()), bounds = Bounds::Any,
        config by hand {};

    /// TLS session tickets, their keys shared by every process and rotated: on or off.
    tls_session_tickets: Option<OnOff>, "on|off",
        default = value(OnOff(TlsSettings::default().session_tickets)), bounds = Bounds::Any,
        config by hand {};

    /// How long a TLS session may be resumed (also the ticket keys' period).
    tls_session_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(TlsSettings::default().session_timeout)), bounds = Bounds::NonZero,
        config by hand {};

    /// Listen backlog (accept queue length) for each listening socket.
    backlog: Option<u32>, "N",
        default = value(1024), bounds = Bounds::at_least(1),
        config = u32;

    /// Send low-water mark for client sockets in bytes (TCP_NOTSENT_LOWAT
    /// on Linux, where SO_SNDLOWAT cannot be set); 0 leaves the kernel's.
    send_lowat: Option<u32>, "BYTES",
        default = value(MpmSettings::default().send_lowat), bounds = Bounds::Any,
        config = u32;

    [Requests]

    /// Keep connections open between requests: on or off.
    keepalive: Option<OnOff>, "on|off",
        default = value(OnOff(HttpSettings::default().keepalive)), bounds = Bounds::Any,
        config = bool;

    /// How long an idle keep-alive connection waits for its next request.
    keepalive_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(MpmSettings::default().keepalive_timeout)),
        bounds = Bounds::NonZero,
        config = Duration;

    /// Requests served on one connection before it is closed (0: no limit).
    max_keepalive_requests: Option<u64>, "N",
        default = value(HttpSettings::default().max_keepalive_requests), bounds = Bounds::Any,
        config = u64;

    /// How long one read or write of a request in progress may wait.
    timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(MpmSettings::default().timeout)), bounds = Bounds::NonZero,
        config = Duration;

    /// How long a client may take to send a whole request head (408 after it).
    request_header_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(HttpSettings::default().request_header_timeout)),
        bounds = Bounds::NonZero,
        config = Duration;

    /// HTTP/2 over TLS: `h2` offered by ALPN before `http/1.1`, on or off.
    /// Prefork offers only `http/1.1` (a child would serve one stream at a
    /// time and hold a process for the connection's life).
    http2: Option<OnOff>, "on|off",
        default = text("on (prefork: off)"), bounds = Bounds::Any,
        config by hand {
            /// Serve HTTP/2 to TLS clients that choose it by ALPN.
            http2: bool,
        };

    /// HTTP/2 in clear with prior knowledge on plain listeners (h2c): a
    /// connection whose first bytes are the HTTP/2 preface is served as
    /// HTTP/2; on or off (not with prefork).
    h2c: Option<OnOff>, "on|off",
        default = value(OnOff(H2Settings::default().cleartext)), bounds = Bounds::Any,
        config = bool;

    /// HTTP/2: streams a client may have open at once on one connection
    /// (SETTINGS_MAX_CONCURRENT_STREAMS; one more is refused).
    h2_max_concurrent_streams: Option<u32>, "N",
        default = value(H2Settings::default().max_concurrent_streams),
        bounds = Bounds::Between(1, 65_536),
        config = u32;

    /// HTTP/2: the largest request header list accepted, in bytes as RFC
    /// 9113 counts them (SETTINGS_MAX_HEADER_LIST_SIZE).
    h2_max_header_list_size: Option<u32>, "BYTES",
        default = value(H2Settings::default().max_header_list_size),
        bounds = Bounds::Between(1024, 16 << 20),
        config = u32;

    /// HTTP/2: the largest frame payload accepted (SETTINGS_MAX_FRAME_SIZE).
    h2_max_frame_size: Option<u32>, "BYTES",
        default = value(H2Settings::default().max_frame_size),
        bounds = Bounds::Between(MIN_FRAME_SIZE as u128, MAX_FRAME_SIZE as u128),
        config = u32;

    /// HTTP/2: each stream's receive window at its start
    /// (SETTINGS_INITIAL_WINDOW_SIZE): request body bytes a client may send
    /// before the server takes them.
    h2_initial_window_size: Option<u32>, "BYTES",
        default = value(H2Settings::default().initial_window_size),
        bounds = Bounds::Between(1, MAX_WINDOW_SIZE as u128),
        config = u32;

    /// How long a stopping server waits for requests in flight.
    graceful_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(MpmSettings::default().graceful_timeout)), bounds = Bounds::Any,
        config = Duration;

    /// Per-request arena for scratch that dies with the request (httpd's
    /// request pool): on, or off to take each object from the allocator.
    request_pool: Option<OnOff>, "on|off",
        default = value(OnOff(HttpSettings::default().request_pool)), bounds = Bounds::Any,
        config = bool;

    /// Longest request line accepted (414 beyond it).
    limit_request_line: Option<usize>, "BYTES",
        default = value(HttpSettings::default().limit_request_line),
        bounds = Bounds::Between(16, MAX_FIELD_LIMIT as u128),
        config = usize;

    /// Most header fields in one request (431 beyond it; at most 128).
    limit_request_fields: Option<usize>, "N",
        default = value(HttpSettings::default().limit_request_fields),
        bounds = Bounds::Between(1, MAX_REQUEST_FIELDS as u128),
        config = usize;

    /// Longest header field accepted (431 beyond it).
    limit_request_field_size: Option<usize>, "BYTES",
        default = value(HttpSettings::default().limit_request_field_size),
        bounds = Bounds::Between(16, MAX_FIELD_LIMIT as u128),
        config = usize;

    /// Largest request body accepted (413 beyond it). 0: no limit on a
    /// body the handler reads as it arrives (streamed: the proxy's uploads
    /// above 64 KiB or chunked), as nginx's `client_max_body_size 0` and
    /// httpd's `LimitRequestBody 0`; a body read whole into memory (the
    /// site's, the proxy's up to 64 KiB or over HTTP/2 without a length, an
    /// application's that takes it whole) is then still held to 1048576
    /// (413 beyond it).
    limit_request_body: Option<u64>, "BYTES",
        default = value(HttpSettings::default().limit_request_body),
        bounds = Bounds::at_most(MAX_BODY_LIMIT as u128),
        config = u64;

    /// On a stop (SIGTERM, SIGINT or SIGWINCH), serve on this long with the
    /// status page answering 503 (draining), so that a load balancer's
    /// health check takes the instance out before it stops listening; a
    /// second stop signal ends it.
    drain_delay: Option<Seconds>, "DURATION",
        default = value(Seconds(Duration::ZERO)), bounds = Bounds::Any,
        config = Duration;

    /// How long a client may take to send a request body at first; each
    /// `--request-body-min-rate` bytes received extend it by a second (408 after it).
    request_body_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(HttpSettings::default().request_body_timeout)),
        bounds = Bounds::NonZero,
        config = Duration;

    /// Bytes per second a request body must keep arriving at to extend
    /// `--request-body-timeout` (0: the timeout is a fixed bound).
    request_body_min_rate: Option<u64>, "BYTES",
        default = value(HttpSettings::default().request_body_min_rate), bounds = Bounds::Any,
        config = u64;

    /// Bytes per second a request head must keep arriving at to extend
    /// `--request-header-timeout` (0: the timeout is a fixed bound), as
    /// mod_reqtimeout's `header=20-40,MinRate=500`: a trickle is cut off at
    /// the timeout, a large head arriving at the rate may take longer.
    request_header_min_rate: Option<u64>, "BYTES",
        default = value(HttpSettings::default().request_header_min_rate), bounds = Bounds::Any,
        config = u64;

    /// The most a request head may take however fast it arrives (at least
    /// `--request-header-timeout`).
    request_header_max_timeout: Option<Seconds>, "DURATION",
        default = text("twice --request-header-timeout"), bounds = Bounds::Any,
        config by hand {
            /// The most the header timeout is extended to.
            request_header_max_timeout: Duration,
        };

    /// Add this field to every response of status 200, 201, 204, 206, 301,
    /// 302, 303, 304, 307 or 308, whatever answered it (the site, the proxy,
    /// an application), as nginx's `add_header`: `Strict-Transport-Security:
    /// max-age=63072000`; repeat for several.
    add_header: Vec<String>, "NAME: VALUE",
        default = text("none"), bounds = Bounds::Any,
        config by hand {
            /// Fields added to responses (`--add-header` and `--add-header-always`).
            added_fields: AddedFields,
        };

    /// Add this field to every response, errors included, as nginx's
    /// `add_header ... always`: `X-Frame-Options: DENY`; repeat for several.
    add_header_always: Vec<String>, "NAME: VALUE",
        default = text("none"), bounds = Bounds::Any,
        config by hand {};

    [Site]

    /// Directory to serve; without it, an embedded welcome site is served.
    docroot: Option<PathBuf>, "DIR",
        default = text("none: the embedded welcome site"), bounds = Bounds::Any,
        config = Option<PathBuf>;

    /// Send file bodies with sendfile(2) (on) or read+write (off).
    sendfile: Option<OnOff>, "on|off",
        default = value(OnOff(HttpSettings::default().sendfile)), bounds = Bounds::Any,
        config = bool;

    /// Most bytes of a file body per sendfile call, and per turn of an
    /// event loop before it serves its other connections (0: no limit).
    sendfile_max_chunk: Option<u64>, "BYTES",
        default = value(HttpSettings::default().sendfile_max_chunk), bounds = Bounds::Any,
        config = u64;

    /// Keep files up to this size in memory and write them with the head in
    /// one call (0: every body by sendfile or read+write).
    file_cache_max_size: Option<u64>, "BYTES",
        default = value(DEFAULT_IN_MEMORY), bounds = Bounds::at_most(MAX_FILE_CACHE_SIZE as u128),
        config = u64;

    /// Files and directories whose names start with a dot: deny (403, but
    /// `.well-known` is served) or allow.
    dotfiles: Option<Dotfiles>, "deny|allow",
        default = value(Dotfiles::Deny), bounds = Bounds::Any,
        config = Dotfiles;

    /// Serve FILE.br or FILE.gz in place of FILE to a client that accepts
    /// that coding (nginx's gzip_static and brotli_static): on or off.
    precompressed: Option<OnOff>, "on|off",
        default = value(OnOff(false)), bounds = Bounds::Any,
        config = bool;

    /// Gzip files of the --gzip-types on the fly for clients that accept
    /// it: on or off.
    gzip: Option<OnOff>, "on|off",
        default = value(OnOff(false)), bounds = Bounds::Any,
        config by hand {
            /// Gzip on the fly, if on.
            gzip: Option<Gzip>,
        };

    /// Media types gzipped on the fly, comma-separated (`text/*`, or `*`
    /// for all).
    gzip_types: Option<Vec<String>>, "TYPES",
        default = value(Gzip::default().types), bounds = Bounds::Any,
        config by hand {};

    /// Gzip level, 1 (fastest) to 9 (smallest).
    gzip_level: Option<u32>, "1-9",
        default = value(Gzip::default().level), bounds = Bounds::Between(1, 9),
        config by hand {};

    /// Files smaller than this are not gzipped.
    gzip_min_length: Option<u64>, "BYTES",
        default = value(Gzip::default().min_length), bounds = Bounds::Any,
        config by hand {};

    /// List a directory without an index.html, as HTML (JSON with
    /// `?format=json`): on or off.
    autoindex: Option<OnOff>, "on|off",
        default = value(OnOff(false)), bounds = Bounds::Any,
        config = bool;

    /// Answer these statuses with a page of the docroot instead of the
    /// built-in one, the status kept: `404=/errors/404.html`,
    /// `500,502,503=/errors/5xx.html`; repeat for several.
    error_page: Vec<String>, "CODES=PATH",
        default = text("none: the built-in pages"), bounds = Bounds::Any,
        config by hand {
            /// Pages of the docroot that replace the built-in error pages.
            error_pages: ErrorPages,
        };

    /// `Cache-Control` for files by extension or media type: `.css,.js=30d`,
    /// `image/*=7d`, `text/html=epoch` (no-cache), `*=1h`; repeat for several.
    expires: Vec<String>, "MATCH=AGE",
        default = text("none: no Cache-Control"), bounds = Bounds::Any,
        config by hand {
            /// `Cache-Control` rules for files.
            expires: CacheRules,
        };

    /// Paths under this prefix are answered 404 to clients, and served only
    /// when an upstream's `X-Accel-Redirect` names them (nginx's `internal`
    /// locations): `/protected/`; repeat for several.
    internal: Vec<String>, "PREFIX",
        default = text("none"), bounds = Bounds::Any,
        config by hand {
            /// Path prefixes only internal redirects reach (`--internal`).
            internal: Vec<String>,
        };

    [Proxy]

    /// Pass requests under PREFIX to the upstream URLs (`/api/=http://10.0.0.2:8080/v1/,http://10.0.0.3:8080/v1/`):
    /// the longest prefix wins, a URL with a path replaces the prefix (nginx's
    /// `proxy_pass`), round-robin with nginx's defaults; repeat for several. In
    /// the file, `[[proxy]]` tables set the rest (docs/configuration.md).
    proxy: Vec<ProxyRoute>, "PREFIX=URL[,URL...]",
        default = text("none"), bounds = Bounds::Any,
        config by hand {
            /// The reverse proxy's routes, checked (no prefix twice).
            proxy: Vec<ProxyRoute>,
        };

    /// Idle connections kept open to each upstream, per serving process
    /// (nginx's `keepalive`); 0 closes each after its request.
    proxy_keepalive: Option<usize>, "N",
        default = value(DEFAULT_KEEPALIVE), bounds = Bounds::at_most(MAX_PROXY_KEEPALIVE as u128),
        config = usize;

    /// How long an idle upstream connection is kept open.
    proxy_keepalive_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(DEFAULT_KEEPALIVE_TIMEOUT)), bounds = Bounds::NonZero,
        config = Duration;

    [Status]

    /// Path of the status page (`off` to disable).
    status_path: Option<String>, "PATH",
        default = value(String::from("/server-status")), bounds = Bounds::Any,
        config by hand {
            /// Path of the status page, or `None` when disabled.
            status_path: Option<String>,
        };

    /// Answer the status page to clients other than loopback: on or off.
    status_remote: Option<OnOff>, "on|off",
        default = value(OnOff(false)), bounds = Bounds::Any,
        config = bool;

    /// Also answer the status page's counters in Prometheus's text format
    /// at this path (`off`: only at `STATUS-PATH?format=prometheus`).
    metrics_path: Option<String>, "PATH",
        default = text("off"), bounds = Bounds::Any,
        config by hand {
            /// Where the counters answer in Prometheus's format, besides the
            /// status page's `?format=prometheus`.
            metrics_path: Option<String>,
        };

    [Logs]

    /// Append a line per response to this file (opened by the process that
    /// binds, before --user takes effect).
    access_log: Option<PathBuf>, "FILE",
        default = text("none"), bounds = Bounds::Any,
        config = Option<PathBuf>;

    /// Access-log line format: common, combined (adds Referer and
    /// User-Agent) or upstream (combined, then the upstream's address,
    /// status and time, as nginx's $upstream_* variables).
    log_format: Option<LogFormat>, "common|combined|upstream",
        default = value(LogFormat::Common), bounds = Bounds::Any,
        config = LogFormat;

    /// How an unbuffered line is written: writev (its pieces gathered) or
    /// copy (copied into one buffer, then write).
    log_write: Option<LogWrite>, "writev|copy",
        default = value(LogWrite::Copy), bounds = Bounds::Any,
        config = LogWrite;

    /// Buffer this many bytes of access-log lines per worker (0: one write
    /// per response); written within a second, and at exit.
    log_buffer: Option<usize>, "BYTES",
        default = value(0), bounds = Bounds::at_most(MAX_LOG_BUFFER as u128),
        config = usize;

    /// Error-log level: error, warn, notice, info or debug (notices, such
    /// as start and stop, are always written).
    log_level: Option<LogLevel>, "LEVEL",
        default = value(LogLevel::Warn), bounds = Bounds::Any,
        config = LogLevel;

    /// Send the error log (stderr) to this file; reopened with the access log.
    error_log: Option<PathBuf>, "FILE",
        default = text("stderr"), bounds = Bounds::Any,
        config = Option<PathBuf>;

    [Operation]

    /// Write the master's pid here (for `mpm signal`); removed at exit.
    pid_file: Option<PathBuf>, "FILE",
        default = text("none"), bounds = Bounds::Any,
        config = Option<PathBuf>;

    /// Serving processes run as this user (the master, which binds, stays
    /// as started); only when started as root.
    user: Option<String>, "NAME",
        default = text("none: as started"), bounds = Bounds::Any,
        config by hand {
            /// Serving processes drop to this user and group (uid, gid), when root.
            run_as: Option<(u32, u32)>,
        };

    /// Serving processes run with this group.
    group: Option<String>, "NAME",
        default = text("the user's"), bounds = Bounds::Any,
        config by hand {};

    /// The global allocator: system, mimalloc or locked (the system one
    /// behind a global mutex). The server restarts itself to switch.
    allocator: Option<AllocatorKind>, "NAME",
        default = text("the one the program started with"), bounds = Bounds::Any,
        config = Option<AllocatorKind>;

    /// The binary SIGUSR2 (`mpm signal upgrade`) starts as the new master.
    upgrade_binary: Option<PathBuf>, "PATH",
        default = text("the path this server was started from"), bounds = Bounds::Any,
        config = Option<PathBuf>;

    /// How long the new master of an upgrade may take to be ready before
    /// the old one stops it and serves on.
    upgrade_timeout: Option<Seconds>, "DURATION",
        default = value(Seconds(READY_TIMEOUT)), bounds = Bounds::NonZero,
        config = Duration;
}
