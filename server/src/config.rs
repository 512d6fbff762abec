//! Server configuration: command-line flags and an optional TOML file with the
//! same keys, the command line winning.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use mpm_core::allocator::AllocatorKind;
use mpm_core::error_log::LogLevel;
use mpm_core::listener_poller::PollerKind;
use mpm_core::{Error, MpmKind, MpmSettings, Result, Seconds};
use mpm_http::access_log::{LogWrite, MAX_LOG_BUFFER};
use mpm_http::log_format::LogFormat;
use mpm_http::{ErrorPage, ErrorPages, HttpSettings, MAX_REQUEST_FIELDS};
use mpm_prefork::AcceptMutex;
use mpm_site::{About, CacheRules, Dotfiles, Gzip, StaticFiles, DEFAULT_IN_MEMORY};

/// The most serving processes (httpd's hard `ServerLimit` bound).
pub const MAX_SERVER_LIMIT: usize = 20_000;
/// The most threads in one process (httpd's hard `ThreadLimit` bound).
pub const MAX_THREADS_PER_CHILD: usize = 20_000;
/// The most listening addresses (`--listen 1-65535` would take every port).
pub const MAX_LISTENERS: usize = 1024;
/// The longest request line or header field that may be allowed: a head is
/// then at most eight times that.
pub const MAX_FIELD_LIMIT: usize = 1 << 20;
/// The largest request body that may be allowed (httpd's `LimitRequestBody`
/// bound): bodies are buffered whole.
pub const MAX_BODY_LIMIT: u64 = i32::MAX as u64;
/// The largest file kept in memory by the open-file cache (it holds up to
/// 256 files).
pub const MAX_FILE_CACHE_SIZE: u64 = 16 << 20;

/// The candidate `given` was most likely meant as, if one is close enough:
/// the fewest single-letter edits (a swap of two neighbours counts as one),
/// at most a third of the word's length (and at least two).
pub(crate) fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let given = given.to_ascii_lowercase();
    let limit = (given.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&given, &c.to_ascii_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions
/// and swaps of adjacent characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// `value` if it is at most `max`, else the one-line complaint about `--name`.
fn at_most<T: PartialOrd + std::fmt::Display>(name: &str, value: T, max: T) -> Result<T> {
    if value > max {
        return Err(Error::config(format!("--{name} {value}: at most {max}")));
    }
    Ok(value)
}

/// Look up `--user` and `--group` now, so that a name that does not exist
/// is a configuration error rather than a failure in every child.
fn resolve_user(user: Option<&str>, group: Option<&str>) -> Result<Option<(u32, u32)>> {
    use nix::unistd::{Group, User};
    let Some(name) = user else {
        if let Some(g) = group {
            return Err(Error::config(format!("--group '{g}' needs --user")));
        }
        return Ok(None);
    };
    let u = User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| Error::config(format!("--user '{name}': no such user")))?;
    let gid = match group {
        Some(g) => {
            Group::from_name(g)
                .ok()
                .flatten()
                .ok_or_else(|| Error::config(format!("--group '{g}': no such group")))?
                .gid
        }
        None => u.gid,
    };
    Ok(Some((u.uid.as_raw(), gid.as_raw())))
}

/// A switch written `on` or `off` (also `true`/`false`), as httpd's directives are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl FromStr for OnOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "on" | "true" | "yes" | "1" => Ok(OnOff(true)),
            "off" | "false" | "no" | "0" => Ok(OnOff(false)),
            _ => Err(format!("'{s}' is not on or off")),
        }
    }
}

impl<'de> Deserialize<'de> for OnOff {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(b) => Ok(OnOff(b)),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// `--server-limit`: a number of serving processes, or `auto`, one per CPU
/// the server may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerLimit {
    /// One serving process per CPU this process may use: its affinity mask
    /// and cgroup CPU quota, as `std::thread::available_parallelism` reads
    /// them (nginx's `worker_processes auto`).
    Auto,
    /// This many.
    Count(usize),
}

impl FromStr for ServerLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(ServerLimit::Auto);
        }
        s.parse()
            .map(ServerLimit::Count)
            .map_err(|_| format!("'{s}' is not a number of processes or auto"))
    }
}

impl<'de> Deserialize<'de> for ServerLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => usize::try_from(n)
                .map(ServerLimit::Count)
                .map_err(|_| serde::de::Error::custom(format!("{n} processes is too many"))),
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// `--cpu-affinity`: whether each serving process is pinned to a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[value(rename_all = "lower")]
pub enum CpuAffinity {
    /// Serving process N runs on the Nth CPU this server may use (in turn,
    /// when there are more processes than CPUs), as nginx's
    /// `worker_cpu_affinity auto`.
    Auto,
    /// The scheduler places every process (and thread) where it likes.
    #[default]
    Off,
}

/// The one way a file's value becomes one of the command line's enums: by
/// the names `clap::ValueEnum` gives the flag (case-insensitive, aliases
/// included), with the valid names in the error, as on the command line.
fn value_enum<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: clap::ValueEnum,
{
    let s = String::deserialize(d)?;
    T::from_str(&s, true).map(Some).map_err(|_| {
        let names = value_names::<T>();
        let guess = did_you_mean(&s, names.split(", "))
            .map(|g| format!(" (did you mean '{g}'?)"))
            .unwrap_or_default();
        serde::de::Error::custom(format!("invalid value '{s}' (expected {names}){guess}"))
    })
}

/// What each setting is when neither the command line nor the file gives
/// it, as `serve --help` shows it (`[default: ...]`): keyed by the flag's id
/// (its field name). Every setting has an entry (a test checks), made from
/// [`Config::default`] where the default is a value.
pub fn defaults() -> Vec<(&'static str, String)> {
    let d = Config::default();
    let secs = |t: Duration| {
        if t.subsec_millis() == 0 {
            format!("{}s", t.as_secs())
        } else {
            format!("{}ms", t.as_millis())
        }
    };
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    fn name<T: clap::ValueEnum>(v: T) -> String {
        v.to_possible_value()
            .map_or_else(String::new, |p| p.get_name().to_string())
    }
    let listen: Vec<String> = d.listen.iter().map(ToString::to_string).collect();
    vec![
        ("mpm", name(d.mpm)),
        ("listen", listen.join(", ")),
        ("listen_tls", "none".into()),
        ("tls_cert", "none".into()),
        ("tls_key", "none".into()),
        ("tls_session_cache", {
            let t = mpm_tls::TlsSettings::default();
            t.session_cache.to_string()
        }),
        (
            "tls_session_tickets",
            on(mpm_tls::TlsSettings::default().session_tickets),
        ),
        (
            "tls_session_timeout",
            secs(mpm_tls::TlsSettings::default().session_timeout),
        ),
        ("backlog", d.backlog.to_string()),
        ("docroot", "none: the embedded welcome site".into()),
        ("max_request_workers", d.max_request_workers.to_string()),
        (
            "server_limit",
            format!(
                "event: auto (one per CPU); worker: {}; prefork: max-request-workers",
                d.server_limit
            ),
        ),
        ("cpu_affinity", name(d.cpu_affinity)),
        (
            "threads_per_child",
            "max-request-workers / server-limit; event: at most 32; prefork: 1".into(),
        ),
        (
            "async_request_worker_factor",
            d.async_request_worker_factor.to_string(),
        ),
        ("keepalive", on(d.keepalive)),
        ("keepalive_timeout", secs(d.keepalive_timeout)),
        (
            "max_keepalive_requests",
            d.max_keepalive_requests.to_string(),
        ),
        ("timeout", secs(d.timeout)),
        ("request_header_timeout", secs(d.request_header_timeout)),
        (
            "request_header_min_rate",
            d.request_header_min_rate.to_string(),
        ),
        (
            "request_header_max_timeout",
            "twice --request-header-timeout".into(),
        ),
        ("graceful_timeout", secs(d.graceful_timeout)),
        ("sendfile", on(d.sendfile)),
        ("sendfile_max_chunk", d.sendfile_max_chunk.to_string()),
        ("epoll_exclusive", on(d.epoll_exclusive)),
        ("request_pool", on(d.request_pool)),
        ("file_cache_max_size", d.file_cache_max_size.to_string()),
        ("limit_request_line", d.limit_request_line.to_string()),
        ("limit_request_fields", d.limit_request_fields.to_string()),
        (
            "limit_request_field_size",
            d.limit_request_field_size.to_string(),
        ),
        ("limit_request_body", d.limit_request_body.to_string()),
        (
            "status_path",
            d.status_path.clone().unwrap_or_else(|| "off".into()),
        ),
        ("status_remote", on(d.status_remote)),
        ("pid_file", "none".into()),
        ("start_servers", d.start_servers.to_string()),
        ("min_spare", d.min_spare.to_string()),
        ("max_spare", d.max_spare.to_string()),
        (
            "max_connections_per_child",
            d.max_connections_per_child.to_string(),
        ),
        ("accept_mutex", name(d.accept_mutex)),
        ("poller", name(d.poller)),
        ("send_lowat", d.send_lowat.to_string()),
        ("reuseport", on(d.reuseport)),
        ("user", "none: as started".into()),
        ("group", "the user's".into()),
        ("dotfiles", name(d.dotfiles)),
        ("precompressed", on(d.precompressed)),
        ("gzip", on(d.gzip.is_some())),
        ("gzip_types", Gzip::default().types.join(",")),
        ("gzip_level", Gzip::default().level.to_string()),
        ("gzip_min_length", Gzip::default().min_length.to_string()),
        ("autoindex", on(d.autoindex)),
        ("error_page", "none: the built-in pages".into()),
        ("expires", "none: no Cache-Control".into()),
        ("metrics_path", "off".into()),
        ("allocator", "the one the program started with".into()),
        ("access_log", "none".into()),
        ("log_format", name(d.log_format)),
        ("log_write", name(d.log_write)),
        ("log_buffer", d.log_buffer.to_string()),
        ("log_level", name(d.log_level)),
        ("error_log", "stderr".into()),
        (
            "upgrade_binary",
            "the path this server was started from".into(),
        ),
        ("upgrade_timeout", secs(d.upgrade_timeout)),
        ("drain_delay", secs(d.drain_delay)),
        ("request_body_timeout", secs(d.request_body_timeout)),
        ("request_body_min_rate", d.request_body_min_rate.to_string()),
    ]
}

/// serde's "unknown field `x`, expected one of `a`, `b`, ..." (every key,
/// hundreds of characters) as one short line: the key, the one meant if
/// one is close, and where the keys are listed.
fn unknown_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let guess = did_you_mean(key, known.iter().copied())
        .map(|g| format!(" (did you mean `{g}`?)"))
        .unwrap_or_default();
    Some(format!(
        "unknown key `{key}`{guess}; the keys are the flags' names without `--` (mpm serve --help)"
    ))
}

/// The valid names of a command-line enum, comma-separated.
pub(crate) fn value_names<T: clap::ValueEnum>() -> String {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One source of settings, every field optional: the command line, or a TOML
/// file whose keys are the flags' names (`max-request-workers = 64`).
///
/// Layers are merged by [`Config::resolve`]; a value given on the command
/// line wins over the file.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigLayer {
    /// Process model: prefork, worker or event.
    #[arg(long, value_name = "MPM", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub mpm: Option<MpmKind>,
    /// Address to listen on (IPv4 `127.0.0.1:8080`, IPv6 `[::1]:8080`, or a
    /// host name for every address it has, `localhost:8080`; `https://ADDR`
    /// for TLS); repeat for several.
    #[arg(long, value_name = "ADDR")]
    #[serde(default)]
    pub listen: Vec<String>,
    /// Address to listen on with TLS (as `--listen https://ADDR`); repeat for several.
    #[arg(long, value_name = "ADDR")]
    #[serde(default)]
    pub listen_tls: Vec<String>,
    /// TLS certificate chain (PEM), server certificate first; repeat for
    /// several names (SNI), each with its --tls-key; the first is the default.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tls_cert: Vec<PathBuf>,
    /// TLS private key (PEM) of the --tls-cert in the same position.
    #[arg(long, value_name = "FILE")]
    #[serde(default)]
    pub tls_key: Vec<PathBuf>,
    /// TLS sessions kept in the cache every process shares (`off` for none).
    #[arg(long, value_name = "N|off")]
    pub tls_session_cache: Option<String>,
    /// TLS session tickets, their keys shared by every process and rotated: on or off.
    #[arg(long, value_name = "on|off")]
    pub tls_session_tickets: Option<OnOff>,
    /// How long a TLS session may be resumed (also the ticket keys' period).
    #[arg(long, value_name = "DURATION")]
    pub tls_session_timeout: Option<Seconds>,
    /// Listen backlog (accept queue length) for each listening socket.
    #[arg(long, value_name = "N")]
    pub backlog: Option<u32>,
    /// Directory to serve; without it, an embedded welcome site is served.
    #[arg(long, value_name = "DIR")]
    pub docroot: Option<PathBuf>,
    /// Most requests served at once (threads, or processes for prefork).
    #[arg(long, value_name = "N")]
    pub max_request_workers: Option<usize>,
    /// Serving processes, children of a single-threaded master that replaces
    /// any that die and turns signals into restarts and upgrades; auto: one
    /// per CPU the server may use.
    #[arg(long, value_name = "N|auto")]
    pub server_limit: Option<ServerLimit>,
    /// Pin each serving process to one CPU (auto) or not (off).
    #[arg(long, value_name = "auto|off", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub cpu_affinity: Option<CpuAffinity>,
    /// Threads in each process.
    #[arg(long, value_name = "N")]
    pub threads_per_child: Option<usize>,
    /// Event MPM: connections one process holds, per request worker
    /// (the role of httpd's AsyncRequestWorkerFactor).
    #[arg(long, value_name = "N")]
    pub async_request_worker_factor: Option<usize>,
    /// Keep connections open between requests: on or off.
    #[arg(long, value_name = "on|off")]
    pub keepalive: Option<OnOff>,
    /// How long an idle keep-alive connection waits for its next request.
    #[arg(long, value_name = "DURATION")]
    pub keepalive_timeout: Option<Seconds>,
    /// Requests served on one connection before it is closed (0: no limit).
    #[arg(long, value_name = "N")]
    pub max_keepalive_requests: Option<u64>,
    /// How long one read or write of a request in progress may wait.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<Seconds>,
    /// How long a client may take to send a whole request head (408 after it).
    #[arg(long, value_name = "DURATION")]
    pub request_header_timeout: Option<Seconds>,
    /// How long a stopping server waits for requests in flight.
    #[arg(long, value_name = "DURATION")]
    pub graceful_timeout: Option<Seconds>,
    /// Send file bodies with sendfile(2) (on) or read+write (off).
    #[arg(long, value_name = "on|off")]
    pub sendfile: Option<OnOff>,
    /// Most bytes of a file body per sendfile call, and per turn of an
    /// event loop before it serves its other connections (0: no limit).
    #[arg(long, value_name = "BYTES")]
    pub sendfile_max_chunk: Option<u64>,
    /// Event: register shared listening sockets with EPOLLEXCLUSIVE, so a
    /// new connection wakes one process (on), or every idle one (off).
    #[arg(long, value_name = "on|off")]
    pub epoll_exclusive: Option<OnOff>,
    /// Per-request arena for scratch that dies with the request (httpd's
    /// request pool): on, or off to take each object from the allocator.
    #[arg(long, value_name = "on|off")]
    pub request_pool: Option<OnOff>,
    /// Keep files up to this size in memory and write them with the head in
    /// one call (0: every body by sendfile or read+write).
    #[arg(long, value_name = "BYTES")]
    pub file_cache_max_size: Option<u64>,
    /// Longest request line accepted (414 beyond it).
    #[arg(long, value_name = "BYTES")]
    pub limit_request_line: Option<usize>,
    /// Most header fields in one request (431 beyond it; at most 128).
    #[arg(long, value_name = "N")]
    pub limit_request_fields: Option<usize>,
    /// Longest header field accepted (431 beyond it).
    #[arg(long, value_name = "BYTES")]
    pub limit_request_field_size: Option<usize>,
    /// Largest request body accepted (413 beyond it).
    #[arg(long, value_name = "BYTES")]
    pub limit_request_body: Option<u64>,
    /// Path of the status page (`off` to disable).
    #[arg(long, value_name = "PATH")]
    pub status_path: Option<String>,
    /// Answer the status page to clients other than loopback: on or off.
    #[arg(long, value_name = "on|off")]
    pub status_remote: Option<OnOff>,
    /// Write the master's pid here (for `mpm signal`); removed at exit.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Prefork: children forked at start.
    #[arg(long, value_name = "N")]
    pub start_servers: Option<usize>,
    /// Prefork: fewest idle children kept (more are forked, 1, 2, 4 ... 32 a second).
    #[arg(long, value_name = "N")]
    pub min_spare: Option<usize>,
    /// Prefork: most idle children kept (the rest are stopped).
    #[arg(long, value_name = "N")]
    pub max_spare: Option<usize>,
    /// Connections a child serves before it is replaced (0: never).
    #[arg(long, value_name = "N")]
    pub max_connections_per_child: Option<u64>,
    /// Prefork: how children take turns to accept: fcntl, flock, pthread or none.
    #[arg(long, value_name = "KIND", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub accept_mutex: Option<AcceptMutex>,
    /// Prefork and worker: how a waiting worker watches the listeners:
    /// epoll, poll or select (below descriptor 1024 only).
    #[arg(long, value_name = "KIND", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub poller: Option<PollerKind>,
    /// Send low-water mark for client sockets in bytes (TCP_NOTSENT_LOWAT
    /// on Linux, where SO_SNDLOWAT cannot be set); 0 leaves the kernel's.
    #[arg(long, value_name = "BYTES")]
    pub send_lowat: Option<u32>,
    /// Prefork and event: give each serving process a listening socket of
    /// its own (SO_REUSEPORT) instead of sharing one: on or off.
    #[arg(long, value_name = "on|off")]
    pub reuseport: Option<OnOff>,
    /// Serving processes run as this user (the master, which binds, stays
    /// as started); only when started as root.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Serving processes run with this group.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Files and directories whose names start with a dot: deny (403, but
    /// `.well-known` is served) or allow.
    #[arg(long, value_name = "deny|allow", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub dotfiles: Option<Dotfiles>,
    /// Serve FILE.br or FILE.gz in place of FILE to a client that accepts
    /// that coding (nginx's gzip_static and brotli_static): on or off.
    #[arg(long, value_name = "on|off")]
    pub precompressed: Option<OnOff>,
    /// Gzip files of the --gzip-types on the fly for clients that accept
    /// it: on or off.
    #[arg(long, value_name = "on|off")]
    pub gzip: Option<OnOff>,
    /// Media types gzipped on the fly, comma-separated (`text/*`, or `*`
    /// for all).
    #[arg(long, value_name = "TYPES", value_delimiter = ',')]
    pub gzip_types: Option<Vec<String>>,
    /// Gzip level, 1 (fastest) to 9 (smallest).
    #[arg(long, value_name = "1-9")]
    pub gzip_level: Option<u32>,
    /// Files smaller than this are not gzipped.
    #[arg(long, value_name = "BYTES")]
    pub gzip_min_length: Option<u64>,
    /// List a directory without an index.html, as HTML (JSON with
    /// `?format=json`): on or off.
    #[arg(long, value_name = "on|off")]
    pub autoindex: Option<OnOff>,
    /// Answer these statuses with a page of the docroot instead of the
    /// built-in one, the status kept: `404=/errors/404.html`,
    /// `500,502,503=/errors/5xx.html`; repeat for several.
    #[arg(long, value_name = "CODES=PATH")]
    #[serde(default)]
    pub error_page: Vec<String>,
    /// `Cache-Control` for files by extension or media type: `.css,.js=30d`,
    /// `image/*=7d`, `text/html=epoch` (no-cache), `*=1h`; repeat for several.
    #[arg(long, value_name = "MATCH=AGE")]
    #[serde(default)]
    pub expires: Vec<String>,
    /// Also answer the status page's counters in Prometheus's text format
    /// at this path (`off`: only at `STATUS-PATH?format=prometheus`).
    #[arg(long, value_name = "PATH")]
    pub metrics_path: Option<String>,
    /// The global allocator: system, mimalloc or locked (the system one
    /// behind a global mutex). The server restarts itself to switch.
    #[arg(long, value_name = "NAME", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub allocator: Option<AllocatorKind>,
    /// Append a line per response to this file (opened by the process that
    /// binds, before --user takes effect).
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<PathBuf>,
    /// Access-log line format: common or combined (adds Referer and User-Agent).
    #[arg(long, value_name = "common|combined", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub log_format: Option<LogFormat>,
    /// How an unbuffered line is written: writev (its pieces gathered) or
    /// copy (copied into one buffer, then write).
    #[arg(long, value_name = "writev|copy", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub log_write: Option<LogWrite>,
    /// Buffer this many bytes of access-log lines per worker (0: one write
    /// per response); written within a second, and at exit.
    #[arg(long, value_name = "BYTES")]
    pub log_buffer: Option<usize>,
    /// Error-log level: error, warn, notice, info or debug (notices, such
    /// as start and stop, are always written).
    #[arg(long, value_name = "LEVEL", ignore_case = true)]
    #[serde(default, deserialize_with = "value_enum")]
    pub log_level: Option<LogLevel>,
    /// Send the error log (stderr) to this file; reopened with the access log.
    #[arg(long, value_name = "FILE")]
    pub error_log: Option<PathBuf>,
    /// The binary SIGUSR2 (`mpm signal upgrade`) starts as the new master.
    #[arg(long, value_name = "PATH")]
    pub upgrade_binary: Option<PathBuf>,
    /// How long the new master of an upgrade may take to be ready before
    /// the old one stops it and serves on.
    #[arg(long, value_name = "DURATION")]
    pub upgrade_timeout: Option<Seconds>,
    /// On SIGTERM or SIGWINCH, serve on this long with the status page
    /// answering 503 (draining), so that a load balancer's health check
    /// takes the instance out before it stops listening.
    #[arg(long, value_name = "DURATION")]
    pub drain_delay: Option<Seconds>,
    /// How long a client may take to send a request body at first; each
    /// `--request-body-min-rate` bytes received extend it by a second (408 after it).
    #[arg(long, value_name = "DURATION")]
    pub request_body_timeout: Option<Seconds>,
    /// Bytes per second a request body must keep arriving at to extend
    /// `--request-body-timeout` (0: the timeout is a fixed bound).
    #[arg(long, value_name = "BYTES")]
    pub request_body_min_rate: Option<u64>,
    /// Bytes per second a request head must keep arriving at to extend
    /// `--request-header-timeout` (0: the timeout is a fixed bound), as
    /// mod_reqtimeout's `header=20-40,MinRate=500`: a trickle is cut off at
    /// the timeout, a large head arriving at the rate may take longer.
    #[arg(long, value_name = "BYTES")]
    pub request_header_min_rate: Option<u64>,
    /// The most a request head may take however fast it arrives (at least
    /// `--request-header-timeout`).
    #[arg(long, value_name = "DURATION")]
    pub request_header_max_timeout: Option<Seconds>,
}

impl ConfigLayer {
    /// Read a TOML file of settings. Errors are one line naming the file,
    /// the line and the problem.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(format!("config {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| Error::config(format!("config {}: {e}", path.display())))
    }

    /// Parse settings from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        parse_toml(text)
    }

    /// Settings from a table of the file `text` (the keys of a program's own
    /// settings taken out); errors name the line of the key they are about.
    pub(crate) fn from_table(table: toml::Table, text: &str) -> Result<Self, String> {
        let parse = |t: toml::Table| -> Result<ConfigLayer, String> {
            toml::Value::Table(t)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    unknown_key(e.message()).unwrap_or_else(|| e.message().replace('\n', " "))
                })
        };
        parse(table.clone()).map_err(|msg| {
            // A table keeps no positions: find the key at fault, one at a time.
            let culprit = table.iter().find(|(k, v)| {
                parse(toml::Table::from_iter([((*k).clone(), (*v).clone())])).is_err()
            });
            match culprit {
                Some((key, _)) => format!("line {}: {key}: {msg}", line_of(text, key)),
                None => msg,
            }
        })
    }

    /// Fill every field this layer leaves unset from `lower`.
    pub fn or(self, lower: ConfigLayer) -> ConfigLayer {
        ConfigLayer {
            mpm: self.mpm.or(lower.mpm),
            listen: if self.listen.is_empty() {
                lower.listen
            } else {
                self.listen
            },
            listen_tls: if self.listen_tls.is_empty() {
                lower.listen_tls
            } else {
                self.listen_tls
            },
            tls_cert: if self.tls_cert.is_empty() {
                lower.tls_cert
            } else {
                self.tls_cert
            },
            tls_key: if self.tls_key.is_empty() {
                lower.tls_key
            } else {
                self.tls_key
            },
            tls_session_cache: self.tls_session_cache.or(lower.tls_session_cache),
            tls_session_tickets: self.tls_session_tickets.or(lower.tls_session_tickets),
            tls_session_timeout: self.tls_session_timeout.or(lower.tls_session_timeout),
            backlog: self.backlog.or(lower.backlog),
            docroot: self.docroot.or(lower.docroot),
            max_request_workers: self.max_request_workers.or(lower.max_request_workers),
            server_limit: self.server_limit.or(lower.server_limit),
            cpu_affinity: self.cpu_affinity.or(lower.cpu_affinity),
            threads_per_child: self.threads_per_child.or(lower.threads_per_child),
            async_request_worker_factor: self
                .async_request_worker_factor
                .or(lower.async_request_worker_factor),
            keepalive: self.keepalive.or(lower.keepalive),
            keepalive_timeout: self.keepalive_timeout.or(lower.keepalive_timeout),
            max_keepalive_requests: self.max_keepalive_requests.or(lower.max_keepalive_requests),
            timeout: self.timeout.or(lower.timeout),
            request_header_timeout: self.request_header_timeout.or(lower.request_header_timeout),
            graceful_timeout: self.graceful_timeout.or(lower.graceful_timeout),
            sendfile: self.sendfile.or(lower.sendfile),
            sendfile_max_chunk: self.sendfile_max_chunk.or(lower.sendfile_max_chunk),
            epoll_exclusive: self.epoll_exclusive.or(lower.epoll_exclusive),
            request_pool: self.request_pool.or(lower.request_pool),
            file_cache_max_size: self.file_cache_max_size.or(lower.file_cache_max_size),
            limit_request_line: self.limit_request_line.or(lower.limit_request_line),
            limit_request_fields: self.limit_request_fields.or(lower.limit_request_fields),
            limit_request_field_size: self
                .limit_request_field_size
                .or(lower.limit_request_field_size),
            limit_request_body: self.limit_request_body.or(lower.limit_request_body),
            status_path: self.status_path.or(lower.status_path),
            status_remote: self.status_remote.or(lower.status_remote),
            pid_file: self.pid_file.or(lower.pid_file),
            start_servers: self.start_servers.or(lower.start_servers),
            min_spare: self.min_spare.or(lower.min_spare),
            max_spare: self.max_spare.or(lower.max_spare),
            max_connections_per_child: self
                .max_connections_per_child
                .or(lower.max_connections_per_child),
            accept_mutex: self.accept_mutex.or(lower.accept_mutex),
            poller: self.poller.or(lower.poller),
            send_lowat: self.send_lowat.or(lower.send_lowat),
            reuseport: self.reuseport.or(lower.reuseport),
            user: self.user.or(lower.user),
            group: self.group.or(lower.group),
            dotfiles: self.dotfiles.or(lower.dotfiles),
            precompressed: self.precompressed.or(lower.precompressed),
            gzip: self.gzip.or(lower.gzip),
            gzip_types: self.gzip_types.or(lower.gzip_types),
            gzip_level: self.gzip_level.or(lower.gzip_level),
            gzip_min_length: self.gzip_min_length.or(lower.gzip_min_length),
            autoindex: self.autoindex.or(lower.autoindex),
            error_page: if self.error_page.is_empty() {
                lower.error_page
            } else {
                self.error_page
            },
            expires: if self.expires.is_empty() {
                lower.expires
            } else {
                self.expires
            },
            metrics_path: self.metrics_path.or(lower.metrics_path),
            allocator: self.allocator.or(lower.allocator),
            access_log: self.access_log.or(lower.access_log),
            log_format: self.log_format.or(lower.log_format),
            log_write: self.log_write.or(lower.log_write),
            log_buffer: self.log_buffer.or(lower.log_buffer),
            log_level: self.log_level.or(lower.log_level),
            error_log: self.error_log.or(lower.error_log),
            upgrade_binary: self.upgrade_binary.or(lower.upgrade_binary),
            upgrade_timeout: self.upgrade_timeout.or(lower.upgrade_timeout),
            drain_delay: self.drain_delay.or(lower.drain_delay),
            request_body_timeout: self.request_body_timeout.or(lower.request_body_timeout),
            request_body_min_rate: self.request_body_min_rate.or(lower.request_body_min_rate),
            request_header_min_rate: self
                .request_header_min_rate
                .or(lower.request_header_min_rate),
            request_header_max_timeout: self
                .request_header_max_timeout
                .or(lower.request_header_max_timeout),
        }
    }
}

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
    fn default() -> Self {
        // The layers' own defaults, so that a library user who builds their
        // settings directly gets what `mpm serve` does.
        let (m, h) = (MpmSettings::default(), HttpSettings::default());
        Config {
            mpm: MpmKind::Worker,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            listen_tls: Vec::new(),
            tls: None,
            backlog: 1024,
            docroot: None,
            max_request_workers: m.max_request_workers,
            server_limit: 1,
            server_limit_auto: false,
            cpu_affinity: CpuAffinity::Off,
            threads_per_child: m.threads_per_child,
            async_request_worker_factor: m.async_request_worker_factor,
            keepalive: h.keepalive,
            keepalive_timeout: m.keepalive_timeout,
            max_keepalive_requests: h.max_keepalive_requests,
            timeout: m.timeout,
            request_header_timeout: h.request_header_timeout,
            graceful_timeout: m.graceful_timeout,
            sendfile: h.sendfile,
            sendfile_max_chunk: h.sendfile_max_chunk,
            epoll_exclusive: m.epoll_exclusive,
            request_pool: h.request_pool,
            file_cache_max_size: DEFAULT_IN_MEMORY,
            limit_request_line: h.limit_request_line,
            limit_request_fields: h.limit_request_fields,
            limit_request_field_size: h.limit_request_field_size,
            limit_request_body: h.limit_request_body,
            status_path: Some("/server-status".to_string()),
            status_remote: false,
            pid_file: None,
            start_servers: 8,
            min_spare: 8,
            max_spare: 64,
            max_connections_per_child: m.max_connections_per_child,
            accept_mutex: AcceptMutex::Pthread,
            poller: m.poller,
            send_lowat: m.send_lowat,
            reuseport: false,
            run_as: None,
            dotfiles: Dotfiles::Deny,
            precompressed: false,
            gzip: None,
            autoindex: false,
            error_pages: ErrorPages::new(),
            expires: CacheRules::new(),
            metrics_path: None,
            allocator: None,
            access_log: None,
            log_format: LogFormat::Common,
            log_write: LogWrite::Copy,
            log_buffer: 0,
            log_level: LogLevel::Warn,
            error_log: None,
            upgrade_binary: None,
            upgrade_timeout: mpm_master::upgrade::READY_TIMEOUT,
            drain_delay: Duration::ZERO,
            request_body_timeout: h.request_body_timeout,
            request_body_min_rate: h.request_body_min_rate,
            request_header_min_rate: h.request_header_min_rate,
            request_header_max_timeout: h.request_header_max_timeout,
        }
    }
}

/// Scoreboard slots one process of `mpm` with `threads` workers takes.
fn slots_per_process(mpm: MpmKind, threads: usize) -> usize {
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

impl Config {
    /// Merge a layer over the defaults and check every value.
    pub fn resolve(layer: ConfigLayer) -> Result<Config> {
        let d = Config::default();
        // `https://ADDR` in --listen is a TLS listener, as --listen-tls ADDR.
        let (mut plain, mut tls_addrs) = (Vec::new(), Vec::new());
        for s in &layer.listen {
            match s.strip_prefix("https://") {
                Some(rest) => tls_addrs.extend(parse_listen_range(rest)?),
                None => plain.extend(parse_listen_range(s.strip_prefix("http://").unwrap_or(s))?),
            }
        }
        for s in &layer.listen_tls {
            let s = s.strip_prefix("https://").unwrap_or(s);
            tls_addrs.extend(parse_listen_range(s).map_err(|e| {
                Error::config(e.to_string().replacen("--listen ", "--listen-tls ", 1))
            })?);
        }
        let gzip = gzip(&layer)?;
        let listen = if plain.is_empty() && tls_addrs.is_empty() {
            d.listen
        } else {
            plain
        };
        if listen.len() + tls_addrs.len() > MAX_LISTENERS {
            return Err(Error::config(format!(
                "--listen: {} addresses; at most {MAX_LISTENERS}",
                listen.len() + tls_addrs.len()
            )));
        }
        let tls = tls_config(&layer, !tls_addrs.is_empty())?;
        let max_request_workers = at_most(
            "max-request-workers",
            layer.max_request_workers.unwrap_or(d.max_request_workers),
            mpm_core::scoreboard::MAX_SLOTS,
        )?;
        if max_request_workers == 0 {
            return Err(Error::config("--max-request-workers must be at least 1"));
        }
        let mpm = layer.mpm.unwrap_or(d.mpm);
        let poller = layer.poller.unwrap_or(d.poller);
        if mpm == MpmKind::Event && poller != PollerKind::Epoll {
            return Err(Error::config(format!(
                "--poller {poller} applies to prefork and worker; the event MPM's loop is epoll"
            )));
        }
        // Prefork serves a connection per process: its limit is the worker
        // count. Event runs a loop per CPU.
        let limit = layer.server_limit.unwrap_or(match mpm {
            MpmKind::Prefork => ServerLimit::Count(max_request_workers),
            MpmKind::Event => ServerLimit::Auto,
            MpmKind::Worker => ServerLimit::Count(d.server_limit),
        });
        let server_limit = match limit {
            ServerLimit::Auto if mpm == MpmKind::Prefork => {
                return Err(Error::config(
                    "--server-limit auto is for worker and event; prefork forks up to \
                     --max-request-workers children",
                ))
            }
            // A quota or mask can say more CPUs than processes are allowed.
            ServerLimit::Auto => mpm_master::cpus::usable_cpus().min(MAX_SERVER_LIMIT),
            ServerLimit::Count(0) => {
                return Err(Error::config("--server-limit must be at least 1 (or auto)"))
            }
            ServerLimit::Count(n) => at_most("server-limit", n, MAX_SERVER_LIMIT)?,
        };
        let per_process = max_request_workers.div_ceil(server_limit);
        let threads_per_child = layer.threads_per_child.unwrap_or(match mpm {
            MpmKind::Event => per_process.min(32),
            MpmKind::Prefork => 1,
            MpmKind::Worker => per_process,
        });
        if threads_per_child == 0 {
            return Err(Error::config("--threads-per-child must be at least 1"));
        }
        let threads_per_child = at_most(
            "threads-per-child",
            threads_per_child,
            MAX_THREADS_PER_CHILD,
        )?;
        let backlog = layer.backlog.unwrap_or(d.backlog);
        if backlog == 0 {
            return Err(Error::config("--backlog must be at least 1"));
        }
        let limit_request_fields = layer.limit_request_fields.unwrap_or(d.limit_request_fields);
        if limit_request_fields == 0 || limit_request_fields > MAX_REQUEST_FIELDS {
            return Err(Error::config(format!(
                "--limit-request-fields must be between 1 and {MAX_REQUEST_FIELDS}"
            )));
        }
        let limit_request_line = layer.limit_request_line.unwrap_or(d.limit_request_line);
        let limit_request_field_size = layer
            .limit_request_field_size
            .unwrap_or(d.limit_request_field_size);
        if limit_request_line < 16 || limit_request_field_size < 16 {
            return Err(Error::config(
                "--limit-request-line and --limit-request-field-size must be at least 16 bytes",
            ));
        }
        at_most("limit-request-line", limit_request_line, MAX_FIELD_LIMIT)?;
        at_most(
            "limit-request-field-size",
            limit_request_field_size,
            MAX_FIELD_LIMIT,
        )?;
        let nonzero = |name: &str, v: Option<Seconds>, dflt: Duration| -> Result<Duration> {
            let v = v.map(|s| s.0).unwrap_or(dflt);
            if v.is_zero() {
                Err(Error::config(format!("--{name} must be more than zero")))
            } else {
                Ok(v)
            }
        };
        let dotfiles = layer.dotfiles.unwrap_or(d.dotfiles);
        let docroot = match layer.docroot {
            Some(dir) => {
                let meta = std::fs::metadata(&dir)
                    .map_err(|e| Error::from(mpm_site::Error::docroot(&dir, e)))?;
                if !meta.is_dir() {
                    return Err(Error::config(format!(
                        "docroot {}: not a directory",
                        dir.display()
                    )));
                }
                Some(dir)
            }
            None => None,
        };
        let min_spare = layer
            .min_spare
            .unwrap_or(d.min_spare)
            .min(max_request_workers);
        let max_spare = layer
            .max_spare
            .unwrap_or(d.max_spare)
            .min(max_request_workers)
            .max(min_spare + 1);
        let start_servers = layer
            .start_servers
            .unwrap_or(d.start_servers)
            .clamp(1, max_request_workers);
        let reuseport = layer.reuseport.map(|r| r.0).unwrap_or(d.reuseport);
        if reuseport && mpm == MpmKind::Worker {
            return Err(Error::config("--reuseport is for --mpm prefork and event"));
        }
        let async_request_worker_factor = layer
            .async_request_worker_factor
            .unwrap_or(d.async_request_worker_factor);
        if async_request_worker_factor == 0 {
            return Err(Error::config(
                "--async-request-worker-factor must be at least 1",
            ));
        }
        let sendfile_max_chunk = layer.sendfile_max_chunk.unwrap_or(d.sendfile_max_chunk);
        let request_header_timeout = nonzero(
            "request-header-timeout",
            layer.request_header_timeout,
            d.request_header_timeout,
        )?;
        // Twice the first allowance unless set, as httpd's 20-40.
        let request_header_max_timeout = layer
            .request_header_max_timeout
            .map_or(request_header_timeout.saturating_mul(2), |s| s.0);
        if request_header_max_timeout < request_header_timeout {
            return Err(Error::config(format!(
                "--request-header-max-timeout {:?} is shorter than --request-header-timeout {:?}",
                request_header_max_timeout, request_header_timeout
            )));
        }
        let per_process = slots_per_process(mpm, threads_per_child.min(max_request_workers));
        if mpm_core::scoreboard::Scoreboard::slots_for(server_limit, per_process).is_err() {
            return Err(Error::config(format!(
                "--server-limit {server_limit} with {per_process} workers a process: at most {} \
                 workers in all",
                mpm_core::scoreboard::MAX_SLOTS
            )));
        }
        let error_pages = error_pages(&layer.error_page, docroot.as_deref(), dotfiles)?;
        let expires = CacheRules::parse(&layer.expires).map_err(Error::config)?;
        Ok(Config {
            mpm,
            server_limit,
            server_limit_auto: limit == ServerLimit::Auto,
            cpu_affinity: layer.cpu_affinity.unwrap_or(d.cpu_affinity),
            sendfile_max_chunk,
            epoll_exclusive: layer
                .epoll_exclusive
                .map(|e| e.0)
                .unwrap_or(d.epoll_exclusive),
            async_request_worker_factor,
            listen,
            listen_tls: tls_addrs,
            tls,
            backlog,
            docroot,
            max_request_workers,
            threads_per_child,
            keepalive: layer.keepalive.map(|k| k.0).unwrap_or(d.keepalive),
            keepalive_timeout: nonzero(
                "keepalive-timeout",
                layer.keepalive_timeout,
                d.keepalive_timeout,
            )?,
            max_keepalive_requests: layer
                .max_keepalive_requests
                .unwrap_or(d.max_keepalive_requests),
            timeout: nonzero("timeout", layer.timeout, d.timeout)?,
            request_header_timeout,
            graceful_timeout: layer
                .graceful_timeout
                .map(|s| s.0)
                .unwrap_or(d.graceful_timeout),
            sendfile: layer.sendfile.map(|s| s.0).unwrap_or(d.sendfile),
            request_pool: layer.request_pool.map(|s| s.0).unwrap_or(d.request_pool),
            file_cache_max_size: at_most(
                "file-cache-max-size",
                layer.file_cache_max_size.unwrap_or(d.file_cache_max_size),
                MAX_FILE_CACHE_SIZE,
            )?,
            limit_request_line,
            limit_request_fields,
            limit_request_field_size,
            limit_request_body: at_most(
                "limit-request-body",
                layer.limit_request_body.unwrap_or(d.limit_request_body),
                MAX_BODY_LIMIT,
            )?,
            status_path: match layer.status_path {
                None => d.status_path,
                Some(p) if p == "off" => None,
                Some(p) if p.starts_with('/') => Some(p),
                Some(p) => {
                    return Err(Error::config(format!(
                        "--status-path '{p}': must start with / (or be off)"
                    )))
                }
            },
            status_remote: layer.status_remote.map(|s| s.0).unwrap_or(d.status_remote),
            pid_file: layer.pid_file,
            start_servers,
            min_spare,
            max_spare,
            max_connections_per_child: layer
                .max_connections_per_child
                .unwrap_or(d.max_connections_per_child),
            accept_mutex: layer.accept_mutex.unwrap_or(d.accept_mutex),
            poller,
            send_lowat: layer.send_lowat.unwrap_or(d.send_lowat),
            reuseport,
            run_as: resolve_user(layer.user.as_deref(), layer.group.as_deref())?,
            dotfiles,
            precompressed: layer.precompressed.is_some_and(|p| p.0),
            gzip,
            autoindex: layer.autoindex.is_some_and(|a| a.0),
            error_pages,
            expires,
            metrics_path: match layer.metrics_path {
                None => None,
                Some(p) if p == "off" => None,
                Some(p) if p.starts_with('/') => Some(p),
                Some(p) => {
                    return Err(Error::config(format!(
                        "--metrics-path '{p}': must start with / (or be off)"
                    )))
                }
            },
            allocator: layer.allocator,
            access_log: layer.access_log,
            log_format: layer.log_format.unwrap_or(d.log_format),
            log_write: layer.log_write.unwrap_or(d.log_write),
            log_buffer: match layer.log_buffer.unwrap_or(d.log_buffer) {
                n if n > MAX_LOG_BUFFER => {
                    return Err(Error::config(format!(
                        "--log-buffer {n}: at most {} bytes",
                        MAX_LOG_BUFFER
                    )))
                }
                n => n,
            },
            log_level: layer.log_level.unwrap_or(d.log_level),
            error_log: layer.error_log,
            upgrade_binary: match layer.upgrade_binary {
                Some(p) if !p.is_file() => {
                    return Err(Error::config(format!(
                        "--upgrade-binary {}: no such file",
                        p.display()
                    )))
                }
                other => other,
            },
            upgrade_timeout: nonzero("upgrade-timeout", layer.upgrade_timeout, d.upgrade_timeout)?,
            drain_delay: layer.drain_delay.map(|s| s.0).unwrap_or(Duration::ZERO),
            request_body_timeout: nonzero(
                "request-body-timeout",
                layer.request_body_timeout,
                d.request_body_timeout,
            )?,
            request_body_min_rate: layer
                .request_body_min_rate
                .unwrap_or(d.request_body_min_rate),
            request_header_min_rate: layer
                .request_header_min_rate
                .unwrap_or(d.request_header_min_rate),
            request_header_max_timeout,
        })
    }
}

/// The TLS settings of a layer: certificate and key files in pairs, each
/// readable (their contents are checked when the server starts, and by
/// `mpm check`), and the session settings.
fn tls_config(layer: &ConfigLayer, listening: bool) -> Result<Option<TlsConfig>> {
    let (certs, keys) = (&layer.tls_cert, &layer.tls_key);
    if !listening {
        if !certs.is_empty() || !keys.is_empty() {
            return Err(Error::config(
                "--tls-cert and --tls-key need a TLS listener (--listen-tls ADDR or --listen https://ADDR)",
            ));
        }
        return Ok(None);
    }
    if certs.is_empty() {
        return Err(Error::config(
            "a TLS listener needs a certificate: --tls-cert FILE --tls-key FILE",
        ));
    }
    if certs.len() != keys.len() {
        return Err(Error::config(format!(
            "{} --tls-cert but {} --tls-key: give each certificate its key, in the same order",
            certs.len(),
            keys.len()
        )));
    }
    let d = mpm_tls::TlsSettings::default();
    let session_cache = match layer.tls_session_cache.as_deref() {
        None => d.session_cache,
        Some("off") => 0,
        Some(n) => match n.parse::<usize>() {
            Ok(n) if (1..=mpm_tls::session_cache::MAX_SESSIONS).contains(&n) => n,
            _ => {
                return Err(Error::config(format!(
                    "--tls-session-cache '{n}': expected a number of sessions from 1 to {} or off",
                    mpm_tls::session_cache::MAX_SESSIONS
                )))
            }
        },
    };
    let session_timeout = layer.tls_session_timeout.map_or(d.session_timeout, |s| s.0);
    if session_timeout.is_zero() {
        return Err(Error::config(
            "--tls-session-timeout must be more than zero",
        ));
    }
    Ok(Some(TlsConfig {
        certs: certs.iter().cloned().zip(keys.iter().cloned()).collect(),
        session_cache,
        session_tickets: layer.tls_session_tickets.map_or(d.session_tickets, |t| t.0),
        session_timeout,
    }))
}

/// Gzip on the fly as `--gzip` and its settings ask, checked.
fn gzip(layer: &ConfigLayer) -> Result<Option<Gzip>> {
    let d = Gzip::default();
    let level = layer.gzip_level.unwrap_or(d.level);
    if !(1..=9).contains(&level) {
        return Err(Error::config(format!(
            "--gzip-level {level}: must be between 1 (fastest) and 9 (smallest)"
        )));
    }
    let types = layer.gzip_types.clone().unwrap_or(d.types);
    let types: Vec<String> = types
        .iter()
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    if let Some(bad) = types
        .iter()
        .find(|t| *t != "*" && t.split('/').filter(|p| !p.is_empty()).count() != 2)
    {
        return Err(Error::config(format!(
            "--gzip-types '{bad}': not a media type (expected type/subtype, type/* or *)"
        )));
    }
    if types.is_empty() {
        return Err(Error::config("--gzip-types: give at least one media type"));
    }
    let on = layer.gzip.is_some_and(|g| g.0);
    Ok(on.then(|| Gzip {
        level,
        min_length: layer.gzip_min_length.unwrap_or(d.min_length),
        types,
    }))
}

/// The largest error page kept in memory.
const MAX_ERROR_PAGE: u64 = 1 << 20;

/// `--error-page CODES=PATH` values, each page read now from the docroot
/// (as it would be served), so that a page that is missing is an error at
/// start, not a 404 in place of every error.
fn error_pages(
    values: &[String],
    docroot: Option<&Path>,
    dotfiles: Dotfiles,
) -> Result<ErrorPages> {
    let mut pages = ErrorPages::new();
    if values.is_empty() {
        return Ok(pages);
    }
    let Some(docroot) = docroot else {
        return Err(Error::config(format!(
            "--error-page '{}': error pages are files of the --docroot, and there is none",
            values[0]
        )));
    };
    let site = StaticFiles::new(docroot)
        .map_err(Error::from)?
        .serve_dotfiles(dotfiles == Dotfiles::Allow);
    for value in values {
        let bad = |why: String| Error::config(format!("--error-page '{value}': {why}"));
        let (codes, path) = value
            .split_once('=')
            .ok_or_else(|| bad("expected CODES=PATH, as 404=/errors/404.html".into()))?;
        let path = path.trim();
        if !path.starts_with('/') {
            return Err(bad(
                "the page is a path under the docroot, starting with /".into()
            ));
        }
        let (body, content_type) = site.read(path, MAX_ERROR_PAGE).map_err(|status| {
            bad(match status {
                404 => format!("{path}: no such file under the docroot"),
                413 => format!("{path}: larger than {MAX_ERROR_PAGE} bytes"),
                _ => format!("{path}: cannot be served ({status})"),
            })
        })?;
        let page = ErrorPage {
            body: body.into(),
            content_type: content_type.into(),
        };
        for code in codes.split(',') {
            let status: u16 = code
                .trim()
                .parse()
                .map_err(|_| bad(format!("'{}' is not a status code", code.trim())))?;
            if !(300..=599).contains(&status) || status == 304 {
                return Err(bad(format!(
                    "{status} has no error page (300 to 599, but 304, which has no body)"
                )));
            }
            pages.insert(status, page.clone());
        }
    }
    Ok(pages)
}

/// Parse TOML text; an error is one line naming the line.
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = unknown_key(e.message()).unwrap_or_else(|| e.message().replace('\n', " "));
        match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        }
    })
}

/// The line of `text` where `key` is set (1 if it cannot be found).
pub(crate) fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches(['"', '\'']);
            l.strip_prefix(key).is_some_and(|rest| {
                rest.trim_start_matches(['"', '\''])
                    .trim_start()
                    .starts_with('=')
            })
        })
        .map_or(1, |i| i + 1)
}

/// Parse a `--listen` value: `HOST:PORT`, `[V6]:PORT`, or a bare port (all
/// IPv4 interfaces). A host name (`localhost:8080`) stands for every address
/// it resolves to that this machine has, as nginx's `listen` does.
pub fn parse_listen(s: &str) -> Result<Vec<SocketAddr>> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(vec![SocketAddr::from(([0, 0, 0, 0], port))]);
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let shape = || {
        Error::config(format!(
            "--listen '{s}': not an address (expected HOST:PORT, [IPV6]:PORT or PORT)"
        ))
    };
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(shape());
    };
    let port: u16 = port.parse().map_err(|_| shape())?;
    if host.is_empty() || host.contains([':', '[', ']', '/', ' ']) {
        return Err(shape());
    }
    use std::net::ToSocketAddrs;
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::config(format!("--listen '{s}': cannot resolve {host}: {e}")))?
        .collect();
    // Only the addresses this machine has: `localhost` may name ::1 on a
    // host without IPv6. A socket bound to port 0 and dropped says so.
    let mut mine: Vec<SocketAddr> = Vec::new();
    for addr in &resolved {
        let probe = SocketAddr::new(addr.ip(), 0);
        if !mine.contains(addr) && std::net::TcpListener::bind(probe).is_ok() {
            mine.push(*addr);
        }
    }
    if mine.is_empty() {
        let all: Vec<String> = resolved.iter().map(|a| a.ip().to_string()).collect();
        return Err(Error::config(format!(
            "--listen '{s}': {host} resolves to {}, none of them an address of this machine",
            if all.is_empty() {
                "nothing".to_string()
            } else {
                all.join(", ")
            }
        )));
    }
    Ok(mine)
}

/// Parse a `--listen` value that may name a range of ports:
/// `127.0.0.1:8000-8099` or `8000-8099` is a hundred listeners.
pub fn parse_listen_range(s: &str) -> Result<Vec<SocketAddr>> {
    let range = s.rsplit_once(':').map_or(("", s), |(h, p)| (h, p));
    if let Some((lo, hi)) = range.1.split_once('-') {
        let bad = || {
            Error::config(format!(
                "--listen '{s}': not a port range (expected HOST:FIRST-LAST with FIRST <= LAST)"
            ))
        };
        let (lo, hi): (u16, u16) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if lo > hi || lo == 0 {
            return Err(bad());
        }
        let host = if range.0.is_empty() {
            "0.0.0.0"
        } else {
            range.0
        };
        return (lo..=hi)
            .map(|port| parse_listen(&format!("{host}:{port}")))
            .collect::<Result<Vec<_>>>()
            .map(|all| all.into_iter().flatten().collect());
    }
    parse_listen(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_a_default_for_the_help() {
        use clap::Args;
        let cmd = ConfigLayer::augment_args(clap::Command::new("t"));
        let table = defaults();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                table.iter().any(|(k, _)| *k == id),
                "--{id} has no entry in config::defaults()"
            );
        }
        assert_eq!(
            table.len(),
            cmd.get_arguments().count(),
            "a stale entry in defaults()"
        );
    }

    #[test]
    fn did_you_mean_finds_the_near_miss_only() {
        let keys = ["backlog", "listen", "max-request-workers", "timeout"];
        assert_eq!(did_you_mean("baklog", keys), Some("backlog"));
        assert_eq!(did_you_mean("lisetn", keys), Some("listen"));
        assert_eq!(
            did_you_mean("max-request-worker", keys),
            Some("max-request-workers")
        );
        assert_eq!(did_you_mean("bogus-key", keys), None);
        let err = ConfigLayer::from_toml("baklog = 3\n").unwrap_err();
        assert!(err.contains("`baklog` (did you mean `backlog`?)"), "{err}");
        assert!(err.len() < 160, "{err}");
    }

    #[test]
    fn listen_takes_port_ranges() {
        let a = parse_listen_range("127.0.0.1:8000-8099").unwrap();
        assert_eq!(a.len(), 100);
        assert_eq!((a[0].port(), a[99].port()), (8000, 8099));
        assert_eq!(parse_listen_range("9000-9001").unwrap().len(), 2);
        assert_eq!(parse_listen_range("[::1]:80").unwrap().len(), 1);
        assert!(parse_listen_range("127.0.0.1:9-1").is_err());
        assert!(parse_listen_range("127.0.0.1:1-x").is_err());
    }

    #[test]
    fn file_keys_are_the_flag_names_and_the_command_line_wins() {
        let file = ConfigLayer::from_toml(
            "max-request-workers = 8\nkeepalive-timeout = \"2s\"\nsendfile = \"off\"\nlisten = [\"127.0.0.1:0\"]\n",
        )
        .unwrap();
        let cli = ConfigLayer {
            max_request_workers: Some(4),
            ..ConfigLayer::default()
        };
        let c = Config::resolve(cli.or(file)).unwrap();
        assert_eq!(c.max_request_workers, 4);
        assert_eq!(c.keepalive_timeout, Duration::from_secs(2));
        assert!(!c.sendfile);
        assert_eq!(c.listen[0].ip().to_string(), "127.0.0.1");
    }

    #[test]
    fn unknown_file_keys_are_one_line_naming_the_line() {
        let err = ConfigLayer::from_toml("mpm = \"worker\"\n\nbogus-key = 1\n").unwrap_err();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("line 3") && err.contains("bogus-key"), "{err}");
    }

    #[test]
    fn zero_workers_and_bad_addresses_are_refused() {
        let zero = ConfigLayer {
            max_request_workers: Some(0),
            ..ConfigLayer::default()
        };
        assert!(Config::resolve(zero).unwrap_err().is_config());
        let bad = ConfigLayer {
            listen: vec!["nowhere".into()],
            ..ConfigLayer::default()
        };
        let err = Config::resolve(bad).unwrap_err();
        assert!(err.to_string().contains("nowhere"), "{err}");
    }

    #[test]
    fn missing_docroot_is_a_docroot_error() {
        let layer = ConfigLayer {
            docroot: Some("/definitely/not/here".into()),
            ..ConfigLayer::default()
        };
        let err = Config::resolve(layer).unwrap_err();
        assert!(err.is_config(), "{err}");
        assert!(
            err.to_string().starts_with("docroot /definitely/not/here"),
            "{err}"
        );
    }

    #[test]
    fn a_table_without_a_programs_keys_names_the_line_of_a_bad_one() {
        let text = "mpm = \"worker\"\n\n  backlog = \"many\"\nmax-keys = 3\n";
        let mut table: toml::Table = parse_toml(text).unwrap();
        table.remove("max-keys");
        let err = ConfigLayer::from_table(table, text).unwrap_err();
        assert!(err.starts_with("line 3: backlog: "), "{err}");
        assert_eq!(line_of(text, "max-keys"), 4);
    }

    #[test]
    fn site_features_are_off_by_default_and_checked_when_given() {
        let c = Config::resolve(ConfigLayer::default()).unwrap();
        assert!(!c.precompressed && !c.autoindex && c.gzip.is_none());
        assert!(c.error_pages.is_empty() && c.expires.is_empty());
        assert_eq!(c.metrics_path, None);
        let file = ConfigLayer::from_toml(
            "gzip = \"on\"\ngzip-types = [\"text/*\", \"application/json\"]\ngzip-level = 1\n\
             expires = [\".css=1d\"]\nmetrics-path = \"/metrics\"\n",
        )
        .unwrap();
        let c = Config::resolve(file).unwrap();
        let gzip = c.gzip.unwrap();
        assert_eq!((gzip.level, gzip.min_length), (1, 256));
        assert!(gzip.applies_to("text/css", 1000) && !gzip.applies_to("image/png", 1000));
        assert_eq!(
            c.expires.cache_control("a.css", "text/css").as_deref(),
            Some("max-age=86400")
        );
        assert_eq!(c.metrics_path.as_deref(), Some("/metrics"));
        // Settings of gzip are checked even while it is off.
        let bad = ConfigLayer {
            gzip_level: Some(0),
            ..ConfigLayer::default()
        };
        assert!(Config::resolve(bad)
            .unwrap_err()
            .to_string()
            .contains("--gzip-level"));
        let no_docroot = ConfigLayer {
            error_page: vec!["404=/e.html".into()],
            ..ConfigLayer::default()
        };
        assert!(Config::resolve(no_docroot)
            .unwrap_err()
            .to_string()
            .contains("--docroot"));
    }

    #[test]
    fn listen_accepts_ipv6_and_bare_ports() {
        assert!(parse_listen("[::1]:80").unwrap()[0].is_ipv6());
        assert_eq!(parse_listen("8080").unwrap()[0].port(), 8080);
    }

    #[test]
    fn listen_resolves_host_names_to_every_address_the_machine_has() {
        let addrs = parse_listen("localhost:8080").unwrap();
        assert!(!addrs.is_empty());
        assert!(
            addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8080),
            "{addrs:?}"
        );
        assert!(
            addrs.contains(&"127.0.0.1:8080".parse().unwrap()),
            "{addrs:?}"
        );
        assert_eq!(
            parse_listen_range("localhost:8000-8001").unwrap().len(),
            2 * addrs.len()
        );
        let err = parse_listen("no-such-host.invalid:80")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot resolve no-such-host.invalid"), "{err}");
        assert!(parse_listen("localhost:http").is_err());
    }
}
