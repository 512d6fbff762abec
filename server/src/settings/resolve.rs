//! From a layer of settings to a checked [`Config`]: the declared defaults
//! and bounds first (`table.rs`), then one short function per concern for
//! the fields worked out by hand, from more than one setting (processes and
//! threads, listeners and TLS, the static site, the user).

use std::path::Path;
use std::time::Duration;

use mpm_core::listener_poller::PollerKind;
use mpm_core::{Error, MpmKind, Result};
use mpm_http::{AddedFields, ErrorPage, ErrorPages};
use mpm_site::{CacheRules, Dotfiles, Gzip, StaticFiles};

use super::config::{slots_per_process, TlsConfig};
use super::table::ByHand;
use super::values::{Bounds, Resolve, ServerLimit, Value};
use super::{listen, Config, ConfigLayer, MAX_SERVER_LIMIT, MAX_THREADS_PER_CHILD};

/// The value of a setting the declarations give a default.
fn given<T: Value>(value: Option<T>, id: &str) -> Result<T> {
    value.resolve(id)
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
        check_docroot(l.docroot.as_deref())?;
        check_upgrade_binary(l.upgrade_binary.as_deref())?;
        check_output_file("pid-file", l.pid_file.as_deref())?;
        check_output_file("access-log", l.access_log.as_deref())?;
        check_output_file("error-log", l.error_log.as_deref())?;
        let dotfiles = given(l.dotfiles, "dotfiles")?;
        let (status_path, metrics_path) = status_and_metrics(&l)?;
        let by_hand = ByHand {
            listen,
            listen_tls,
            tls,
            server_limit: p.server_limit,
            server_limit_auto: p.server_limit_auto,
            threads_per_child: p.threads_per_child,
            start_servers: p.start_servers,
            min_spare: p.min_spare,
            max_spare: p.max_spare,
            status_path,
            metrics_path,
            run_as: resolve_user(l.user.as_deref(), l.group.as_deref())?,
            gzip,
            error_pages: error_pages(&l.error_page, l.docroot.as_deref(), dotfiles)?,
            expires: CacheRules::parse(&l.expires).map_err(Error::config)?,
            added_fields: AddedFields::parse(&l.add_header, &l.add_header_always)
                .map_err(|e| Error::config(format!("--add-header: {e}")))?,
            request_header_max_timeout: header_max_timeout(&l)?,
            proxy: proxy_routes(&l.proxy)?,
            internal: internal_prefixes(&l.internal)?,
            http2: http2(&l)?,
        };
        Config::assemble(&l, by_hand)
    }
}

/// The process model and how many processes and threads serve, each
/// setting checked against the others.
struct Processes {
    server_limit: usize,
    server_limit_auto: bool,
    threads_per_child: usize,
    start_servers: usize,
    min_spare: usize,
    max_spare: usize,
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
        if mpm == MpmKind::Uring && poller != PollerKind::Epoll {
            return Err(Error::config(format!(
                "--poller {poller} applies to prefork and worker; the uring MPM's loop is io_uring"
            )));
        }
        let reuseport: bool = l.reuseport.resolve("reuseport")?;
        if reuseport && mpm == MpmKind::Worker {
            return Err(Error::config(
                "--reuseport is for --mpm prefork, event and uring",
            ));
        }
        // Prefork serves a connection per process: its limit is the worker
        // count. Event and uring run a loop per CPU.
        let limit = l.server_limit.unwrap_or(match mpm {
            MpmKind::Prefork => ServerLimit::Count(max_request_workers),
            MpmKind::Event | MpmKind::Uring => ServerLimit::Auto,
            MpmKind::Worker => ServerLimit::Count(1),
        });
        // A limit worked out from --max-request-workers names that flag.
        if mpm == MpmKind::Prefork
            && l.server_limit.is_none()
            && max_request_workers > MAX_SERVER_LIMIT
        {
            return Err(Error::config(format!(
                "--max-request-workers {max_request_workers}: prefork runs a process for each, \
                 at most {MAX_SERVER_LIMIT}"
            )));
        }
        let server_limit = server_limit(mpm, limit)?;
        let per_process = max_request_workers.div_ceil(server_limit);
        let threads_per_child = l.threads_per_child.unwrap_or(match mpm {
            MpmKind::Event | MpmKind::Uring => per_process.min(32),
            MpmKind::Prefork => 1,
            MpmKind::Worker => per_process,
        });
        // A worked-out count is bounded as a given one is, and says which
        // settings it was worked out from.
        if l.threads_per_child.is_none() && threads_per_child > MAX_THREADS_PER_CHILD {
            return Err(Error::config(format!(
                "--max-request-workers {max_request_workers} over --server-limit {server_limit} \
                 is {threads_per_child} threads a process: at most {MAX_THREADS_PER_CHILD} \
                 (raise --server-limit, or give --threads-per-child)"
            )));
        }
        Bounds::Between(1, MAX_THREADS_PER_CHILD as u128)
            .check("threads-per-child", &threads_per_child)
            .map_err(Error::config)?;
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
            server_limit,
            server_limit_auto: limit == ServerLimit::Auto,
            threads_per_child,
            start_servers: given(l.start_servers, "start_servers")?.clamp(1, max_request_workers),
            min_spare,
            max_spare: given(l.max_spare, "max_spare")?
                .min(max_request_workers)
                .max(min_spare + 1),
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

/// `--request-header-max-timeout`: twice the first allowance unless set,
/// as httpd's 20-40, and never shorter than it.
fn header_max_timeout(l: &ConfigLayer) -> Result<Duration> {
    let first: Duration = l.request_header_timeout.resolve("request_header_timeout")?;
    let max = l
        .request_header_max_timeout
        .map_or(first.saturating_mul(2), |s| s.0);
    if max < first {
        return Err(Error::config(format!(
            "--request-header-max-timeout {max:?} is shorter than --request-header-timeout {first:?}"
        )));
    }
    Ok(max)
}

/// `--proxy` and the `[[proxy]]` tables: each route was checked as it was
/// read; together, no prefix twice and not too many.
fn proxy_routes(routes: &[mpm_proxy::ProxyRoute]) -> Result<Vec<mpm_proxy::ProxyRoute>> {
    mpm_proxy::check_routes(routes).map_err(|e| Error::config(format!("--proxy: {e}")))?;
    Ok(routes.to_vec())
}

/// `--docroot`: a directory that exists.
fn check_docroot(dir: Option<&Path>) -> Result<()> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let meta = std::fs::metadata(dir).map_err(|e| Error::from(mpm_site::Error::docroot(dir, e)))?;
    if !meta.is_dir() {
        return Err(Error::config(format!(
            "docroot {}: not a directory",
            dir.display()
        )));
    }
    Ok(())
}

/// A path setting (`--status-path`, `--metrics-path`) that may be `off`.
fn path_or_off(name: &str, value: Option<String>) -> Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(p) if p == "off" => Ok(None),
        Some(p) if p.starts_with('/') => {
            // Compared with a request's path, which never holds these: such
            // a page could never be asked for.
            match p
                .chars()
                .find(|&c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
            {
                Some(c) => Err(Error::config(format!(
                    "--{name} '{}': {} is never part of a request's path, so no \
                     request could reach it (give a path such as /server-status, or off)",
                    p.escape_debug(),
                    match c {
                        '?' => "a query (?)".to_string(),
                        '#' => "a fragment (#)".to_string(),
                        ' ' => "a space".to_string(),
                        c if c.is_whitespace() => format!("white space ({})", c.escape_debug()),
                        c => format!("a control character ({})", c.escape_debug()),
                    }
                ))),
                None => Ok(Some(p)),
            }
        }
        Some(p) => Err(Error::config(format!(
            "--{name} '{}': must start with / (or be off)",
            p.escape_debug()
        ))),
    }
}

/// `--status-path` and `--metrics-path` (each checked by [`path_or_off`]):
/// one path cannot answer both pages.
fn status_and_metrics(l: &ConfigLayer) -> Result<(Option<String>, Option<String>)> {
    let status = path_or_off("status-path", l.status_path.clone())?;
    let metrics = path_or_off("metrics-path", l.metrics_path.clone())?;
    match (&status, &metrics) {
        (Some(s), Some(m)) if s == m => Err(Error::config(format!(
            "--metrics-path {m}: the status page's path too (--status-path); \
             give it another path, or off (the status page answers \
             {s}?format=prometheus anyway)"
        ))),
        _ => Ok((status, metrics)),
    }
}

/// `--upgrade-binary`: a file that exists and may be run.
fn check_upgrade_binary(path: Option<&Path>) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match path {
        Some(p) if !p.is_file() => Err(Error::config(format!(
            "--upgrade-binary {}: no such file",
            p.display()
        ))),
        Some(p)
            if p.metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o111 == 0) =>
        {
            Err(Error::config(format!(
                "--upgrade-binary {}: not executable (chmod +x it, or name the binary)",
                p.display()
            )))
        }
        _ => Ok(()),
    }
}

/// `--pid-file`, `--access-log`, `--error-log`: a file (not a directory)
/// in a directory that exists, so that `mpm check` refuses what `serve`
/// would; the file itself is made, or opened, when the server starts.
fn check_output_file(name: &str, path: Option<&Path>) -> Result<()> {
    let Some(file) = path else {
        return Ok(());
    };
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let why = if file.as_os_str().is_empty() {
        "expected a file name".to_string()
    } else if file.is_dir() {
        "a directory, expected a file".to_string()
    } else if !dir.is_dir() {
        format!("no directory {}", dir.display())
    } else {
        return Ok(());
    };
    Err(Error::config(format!(
        "--{name} '{}': {why}",
        file.display()
    )))
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
    // Checked with a TLS listener or without, as every other setting is.
    let session_cache = given(l.tls_session_cache.clone(), "tls_session_cache")?;
    let session_cache = match session_cache.as_str() {
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
    Ok(Some(TlsConfig {
        certs: certs.iter().cloned().zip(keys.iter().cloned()).collect(),
        session_cache,
        session_tickets: l.tls_session_tickets.resolve("tls_session_tickets")?,
        session_timeout: l.tls_session_timeout.resolve("tls_session_timeout")?,
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
    let on: bool = l.gzip.resolve("gzip")?;
    Ok(on.then_some(gzip))
}

/// `--http2` (on where the model carries it: not prefork, whose children
/// serve one stream at a time) and `--h2c`, checked against `--mpm`.
fn http2(l: &ConfigLayer) -> Result<bool> {
    let mpm = given(l.mpm, "mpm")?;
    let h2c: bool = l.h2c.resolve("h2c")?;
    if mpm == MpmKind::Prefork {
        if h2c {
            return Err(Error::config(
                "--h2c on: prefork serves one stream at a time per child, so it offers \
                 HTTP/1.1 only; use --mpm worker, event or uring for HTTP/2",
            ));
        }
        if l.http2.is_some_and(|on| on.0) {
            return Err(Error::config(
                "--http2 on: prefork serves one stream at a time per child, so it offers \
                 HTTP/1.1 only; use --mpm worker, event or uring for HTTP/2",
            ));
        }
        return Ok(false);
    }
    Ok(l.http2.is_none_or(|on| on.0))
}

/// The largest error page kept in memory.
const MAX_ERROR_PAGE: u64 = 1 << 20;

/// `--internal` prefixes: paths (a `/` first, no space, control, `?` or
/// `#`: a path has none), at most
/// [`MAX_INTERNAL`](crate::internal::MAX_INTERNAL) of them.
fn internal_prefixes(values: &[String]) -> Result<Vec<String>> {
    let max = crate::internal::MAX_INTERNAL;
    if values.len() > max {
        return Err(Error::config(format!(
            "--internal: {} prefixes; at most {max}",
            values.len()
        )));
    }
    for v in values {
        if !v.starts_with('/')
            || v.chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
        {
            return Err(Error::config(format!(
                "--internal '{v}': expected a path prefix, as /protected/"
            )));
        }
    }
    Ok(values.to_vec())
}

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
    fn a_worked_out_thread_count_is_bounded_as_a_given_one() {
        let many = ConfigLayer {
            max_request_workers: Some(100_000),
            ..ConfigLayer::default()
        };
        let err = Config::resolve(many).unwrap_err().to_string();
        // Named by the flags it was worked out from, not a flag not given.
        assert!(
            err.contains(
                "--max-request-workers 100000 over --server-limit 1 is 100000 threads a \
                 process: at most 20000"
            ),
            "{err}"
        );
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
