//! From a layer of settings to a checked [`Config`]: the declared defaults
//! and bounds first, then one short function per concern for what depends
//! on more than one setting (processes and threads, timeouts, TLS, the
//! static site, the user).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mpm_core::listener_poller::PollerKind;
use mpm_core::{Error, MpmKind, Result, Seconds};
use mpm_http::{CacheRules, Dotfiles, ErrorPage, ErrorPages, Gzip, StaticFiles};

use super::config::{slots_per_process, Config, TlsConfig};
use super::values::{OnOff, ServerLimit};
use super::{listen, ConfigLayer, MAX_SERVER_LIMIT};

/// The value of a setting the declarations give a default: always there
/// once the layers are merged over [`ConfigLayer::defaults`].
fn given<T>(value: Option<T>, id: &str) -> Result<T> {
    value.ok_or_else(|| Error::config(format!("--{}: no value", id.replace('_', "-"))))
}

/// A switch's value.
fn on(value: Option<OnOff>, id: &str) -> Result<bool> {
    given(value, id).map(|s| s.0)
}

/// A duration's value.
fn time(value: Option<Seconds>, id: &str) -> Result<Duration> {
    given(value, id).map(|s| s.0)
}

impl Config {
    /// Merge a layer over the defaults and check every value.
    pub fn resolve(layer: ConfigLayer) -> Result<Config> {
        let l = layer.or(ConfigLayer::defaults());
        l.check_bounds().map_err(Error::config)?;
        let gzip = gzip(&l)?;
        let (listen, listen_tls) = listen::listeners(&l.listen, &l.listen_tls)?;
        let tls = tls_config(&l, !listen_tls.is_empty())?;
        let p = Processes::resolve(&l)?;
        let (request_header_timeout, request_header_max_timeout) = header_timeouts(&l)?;
        let dotfiles: Dotfiles = given(l.dotfiles, "dotfiles")?;
        let docroot = docroot(l.docroot.clone())?;
        let error_pages = error_pages(&l.error_page, docroot.as_deref(), dotfiles)?;
        Ok(Config {
            mpm: p.mpm,
            listen,
            listen_tls,
            tls,
            backlog: given(l.backlog, "backlog")?,
            docroot,
            max_request_workers: p.max_request_workers,
            server_limit: p.server_limit,
            server_limit_auto: p.server_limit_auto,
            cpu_affinity: given(l.cpu_affinity, "cpu_affinity")?,
            threads_per_child: p.threads_per_child,
            async_request_worker_factor: given(
                l.async_request_worker_factor,
                "async_request_worker_factor",
            )?,
            keepalive: on(l.keepalive, "keepalive")?,
            keepalive_timeout: time(l.keepalive_timeout, "keepalive_timeout")?,
            max_keepalive_requests: given(l.max_keepalive_requests, "max_keepalive_requests")?,
            timeout: time(l.timeout, "timeout")?,
            request_header_timeout,
            graceful_timeout: time(l.graceful_timeout, "graceful_timeout")?,
            sendfile: on(l.sendfile, "sendfile")?,
            sendfile_max_chunk: given(l.sendfile_max_chunk, "sendfile_max_chunk")?,
            epoll_exclusive: on(l.epoll_exclusive, "epoll_exclusive")?,
            request_pool: on(l.request_pool, "request_pool")?,
            file_cache_max_size: given(l.file_cache_max_size, "file_cache_max_size")?,
            limit_request_line: given(l.limit_request_line, "limit_request_line")?,
            limit_request_fields: given(l.limit_request_fields, "limit_request_fields")?,
            limit_request_field_size: given(
                l.limit_request_field_size,
                "limit_request_field_size",
            )?,
            limit_request_body: given(l.limit_request_body, "limit_request_body")?,
            status_path: path_or_off("status-path", l.status_path.clone())?,
            status_remote: on(l.status_remote, "status_remote")?,
            pid_file: l.pid_file.clone(),
            start_servers: p.start_servers,
            min_spare: p.min_spare,
            max_spare: p.max_spare,
            max_connections_per_child: given(
                l.max_connections_per_child,
                "max_connections_per_child",
            )?,
            accept_mutex: given(l.accept_mutex, "accept_mutex")?,
            poller: p.poller,
            send_lowat: given(l.send_lowat, "send_lowat")?,
            reuseport: p.reuseport,
            run_as: resolve_user(l.user.as_deref(), l.group.as_deref())?,
            dotfiles,
            precompressed: on(l.precompressed, "precompressed")?,
            gzip,
            autoindex: on(l.autoindex, "autoindex")?,
            error_pages,
            expires: CacheRules::parse(&l.expires).map_err(Error::config)?,
            metrics_path: path_or_off("metrics-path", l.metrics_path.clone())?,
            allocator: l.allocator,
            access_log: l.access_log.clone(),
            log_format: given(l.log_format, "log_format")?,
            log_write: given(l.log_write, "log_write")?,
            log_buffer: given(l.log_buffer, "log_buffer")?,
            log_level: given(l.log_level, "log_level")?,
            error_log: l.error_log.clone(),
            upgrade_binary: upgrade_binary(l.upgrade_binary.clone())?,
            upgrade_timeout: time(l.upgrade_timeout, "upgrade_timeout")?,
            drain_delay: time(l.drain_delay, "drain_delay")?,
            request_body_timeout: time(l.request_body_timeout, "request_body_timeout")?,
            request_body_min_rate: given(l.request_body_min_rate, "request_body_min_rate")?,
            request_header_min_rate: given(l.request_header_min_rate, "request_header_min_rate")?,
            request_header_max_timeout,
        })
    }
}

/// The process model and how many processes and threads serve, each
/// setting checked against the others.
struct Processes {
    mpm: MpmKind,
    max_request_workers: usize,
    server_limit: usize,
    server_limit_auto: bool,
    threads_per_child: usize,
    start_servers: usize,
    min_spare: usize,
    max_spare: usize,
    poller: PollerKind,
    reuseport: bool,
}

impl Processes {
    fn resolve(l: &ConfigLayer) -> Result<Processes> {
        let mpm = given(l.mpm, "mpm")?;
        let max_request_workers = given(l.max_request_workers, "max_request_workers")?;
        let poller = given(l.poller, "poller")?;
        if mpm == MpmKind::Event && poller != PollerKind::Epoll {
            return Err(Error::config(format!(
                "--poller {poller} applies to prefork and worker; the event MPM's loop is epoll"
            )));
        }
        let reuseport = on(l.reuseport, "reuseport")?;
        if reuseport && mpm == MpmKind::Worker {
            return Err(Error::config("--reuseport is for --mpm prefork and event"));
        }
        // Prefork serves a connection per process: its limit is the worker
        // count. Event runs a loop per CPU.
        let limit = l.server_limit.unwrap_or(match mpm {
            MpmKind::Prefork => ServerLimit::Count(max_request_workers),
            MpmKind::Event => ServerLimit::Auto,
            MpmKind::Worker => ServerLimit::Count(1),
        });
        let server_limit = server_limit(mpm, limit)?;
        let per_process = max_request_workers.div_ceil(server_limit);
        let threads_per_child = l.threads_per_child.unwrap_or(match mpm {
            MpmKind::Event => per_process.min(32),
            MpmKind::Prefork => 1,
            MpmKind::Worker => per_process,
        });
        let slots = slots_per_process(mpm, threads_per_child.min(max_request_workers));
        if mpm_core::scoreboard::Scoreboard::slots_for(server_limit, slots).is_err() {
            return Err(Error::config(format!(
                "--server-limit {server_limit} with {slots} workers a process: at most {} \
                 workers in all",
                mpm_core::scoreboard::MAX_SLOTS
            )));
        }
        let min_spare = given(l.min_spare, "min_spare")?.min(max_request_workers);
        Ok(Processes {
            mpm,
            max_request_workers,
            server_limit,
            server_limit_auto: limit == ServerLimit::Auto,
            threads_per_child,
            start_servers: given(l.start_servers, "start_servers")?.clamp(1, max_request_workers),
            min_spare,
            max_spare: given(l.max_spare, "max_spare")?
                .min(max_request_workers)
                .max(min_spare + 1),
            poller,
            reuseport,
        })
    }
}

/// `--server-limit` as a number of processes.
fn server_limit(mpm: MpmKind, limit: ServerLimit) -> Result<usize> {
    match limit {
        ServerLimit::Auto if mpm == MpmKind::Prefork => Err(Error::config(
            "--server-limit auto is for worker and event; prefork forks up to \
             --max-request-workers children",
        )),
        // A quota or mask can say more CPUs than processes are allowed.
        ServerLimit::Auto => Ok(mpm_master::cpus::usable_cpus().min(MAX_SERVER_LIMIT)),
        ServerLimit::Count(0) => Err(Error::config("--server-limit must be at least 1 (or auto)")),
        ServerLimit::Count(n) if n > MAX_SERVER_LIMIT => Err(Error::config(format!(
            "--server-limit {n}: at most {MAX_SERVER_LIMIT}"
        ))),
        ServerLimit::Count(n) => Ok(n),
    }
}

/// `--request-header-timeout` and its maximum: twice the first allowance
/// unless set, as httpd's 20-40, and never shorter than it.
fn header_timeouts(l: &ConfigLayer) -> Result<(Duration, Duration)> {
    let first = time(l.request_header_timeout, "request_header_timeout")?;
    let max = l
        .request_header_max_timeout
        .map_or(first.saturating_mul(2), |s| s.0);
    if max < first {
        return Err(Error::config(format!(
            "--request-header-max-timeout {max:?} is shorter than --request-header-timeout {first:?}"
        )));
    }
    Ok((first, max))
}

/// `--docroot`: a directory that exists.
fn docroot(dir: Option<PathBuf>) -> Result<Option<PathBuf>> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    let meta =
        std::fs::metadata(&dir).map_err(|e| Error::from(mpm_http::Error::docroot(&dir, e)))?;
    if !meta.is_dir() {
        return Err(Error::config(format!(
            "docroot {}: not a directory",
            dir.display()
        )));
    }
    Ok(Some(dir))
}

/// A path setting (`--status-path`, `--metrics-path`) that may be `off`.
fn path_or_off(name: &str, value: Option<String>) -> Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(p) if p == "off" => Ok(None),
        Some(p) if p.starts_with('/') => Ok(Some(p)),
        Some(p) => Err(Error::config(format!(
            "--{name} '{p}': must start with / (or be off)"
        ))),
    }
}

/// `--upgrade-binary`: a file that exists.
fn upgrade_binary(path: Option<PathBuf>) -> Result<Option<PathBuf>> {
    match path {
        Some(p) if !p.is_file() => Err(Error::config(format!(
            "--upgrade-binary {}: no such file",
            p.display()
        ))),
        other => Ok(other),
    }
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

/// The TLS settings of a layer: certificate and key files in pairs, each
/// readable (their contents are checked when the server starts, and by
/// `mpm check`), and the session settings.
fn tls_config(l: &ConfigLayer, listening: bool) -> Result<Option<TlsConfig>> {
    let (certs, keys) = (&l.tls_cert, &l.tls_key);
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
    let session_cache = match given(l.tls_session_cache.as_deref(), "tls_session_cache")? {
        "off" => 0,
        n => match n.parse::<usize>() {
            Ok(n) if (1..=mpm_tls::session_cache::MAX_SESSIONS).contains(&n) => n,
            _ => {
                return Err(Error::config(format!(
                    "--tls-session-cache '{n}': expected a number of sessions from 1 to {} or off",
                    mpm_tls::session_cache::MAX_SESSIONS
                )))
            }
        },
    };
    Ok(Some(TlsConfig {
        certs: certs.iter().cloned().zip(keys.iter().cloned()).collect(),
        session_cache,
        session_tickets: on(l.tls_session_tickets, "tls_session_tickets")?,
        session_timeout: time(l.tls_session_timeout, "tls_session_timeout")?,
    }))
}

/// Gzip on the fly as `--gzip` and its settings ask, checked (even while
/// it is off).
fn gzip(l: &ConfigLayer) -> Result<Option<Gzip>> {
    let types: Vec<String> = given(l.gzip_types.clone(), "gzip_types")?
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
    let gzip = Gzip {
        level: given(l.gzip_level, "gzip_level")?,
        min_length: given(l.gzip_min_length, "gzip_min_length")?,
        types,
    };
    Ok(on(l.gzip, "gzip")?.then_some(gzip))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_defaults_resolve() {
        let c = Config::resolve(ConfigLayer::default()).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.mpm, MpmKind::Worker);
        assert_eq!(c.backlog, 1024);
        assert_eq!(c.status_path.as_deref(), Some("/server-status"));
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
}
