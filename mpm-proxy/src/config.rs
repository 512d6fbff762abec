//! What a proxy route is: its prefix, its upstreams and every setting that
//! shapes how requests are passed to them, with nginx's defaults; the flag
//! form `PREFIX=URL[,URL...]` parsed into a route; and the bounds every
//! value is checked against, so that no value a user writes crashes.
//!
//! Each setting kind parses from the word a flag or a file writes
//! ([`FromStr`]) and shows back as that word ([`fmt::Display`]); the `mpm`
//! crate's settings table reads `[[proxy]]` tables with them.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use crate::cidr::Cidr;
use crate::cookie::{CookieRule, MAX_COOKIE_RULES};
use crate::cookie_flags::{CookieFlags, MAX_COOKIE_FLAGS};
use crate::error::{Error, Result};
use crate::redirect::{Redirect, MAX_REDIRECTS};
use crate::set_header::{check_hidden, written_by_forwarded, SetHeader, MAX_SET_HEADERS};

/// The longest a timeout, a health interval or a `fail_timeout` may be: a
/// day (state in shared memory is kept in milliseconds, and nothing a
/// proxy waits on is meant to take longer).
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);
/// The most upstreams one route may list.
pub const MAX_UPSTREAMS_PER_ROUTE: usize = 1024;
/// The most proxy routes.
pub const MAX_ROUTES: usize = 1024;
/// The largest `weight`.
pub const MAX_WEIGHT: u32 = 1000;
/// The largest `max_fails`, `next_upstream_tries`, `rise` or `fall`.
pub const MAX_COUNT: u32 = 10_000;
/// The most trusted-proxy ranges one route may list.
pub const MAX_TRUSTED: usize = 1024;
/// The longest prefix, health path or `Host` value, in bytes.
pub const MAX_TEXT: usize = 1024;
/// The shortest active-check interval.
pub const MIN_HEALTH_INTERVAL: Duration = Duration::from_millis(100);

/// One reverse-proxy route: requests whose path starts with `prefix` (see
/// [`RouteTable`](crate::RouteTable) for exactly what matches) are passed
/// to one of `upstreams`.
///
/// Defaults are nginx's where nginx has the setting (`proxy_*_timeout` 60 s,
/// `max_fails=1 fail_timeout=10s`, `proxy_next_upstream` on for errors,
/// `Host` set to the upstream's own), and streaming otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRoute {
    /// The path prefix, starting with `/`.
    pub prefix: String,
    /// Where requests go: at least one.
    pub upstreams: Vec<UpstreamSpec>,
    /// How an upstream is chosen for each request.
    pub balance: Balance,
    /// How long connecting to an upstream may take (then the next, or 504).
    pub connect_timeout: Duration,
    /// How long the upstream may be silent while the answer is read: the
    /// longest wait for each read, of the head (an interim `1xx` answer
    /// is a read) as of the body, as nginx's `proxy_read_timeout`.
    pub read_timeout: Duration,
    /// How long the upstream may take to accept each part of the request.
    pub send_timeout: Duration,
    /// Try the next upstream when one cannot be connected to, or closes
    /// before any byte of its answer, for idempotent requests.
    pub next_upstream: bool,
    /// The most upstreams one request tries (0: all of them).
    pub next_upstream_tries: u32,
    /// Whether an answer is read whole before it is sent on.
    pub buffering: Buffering,
    /// Active health checks, if any.
    pub health: Option<ActiveHealth>,
    /// Which fields tell the upstream who the client is.
    pub forwarded: ForwardedStyle,
    /// Peers whose `X-Forwarded-*` or `Forwarded` fields are kept (and
    /// appended to) rather than replaced.
    pub trusted_proxies: Vec<Cidr>,
    /// The `Host` the upstream is sent.
    pub host: HostMode,
    /// A PEM file of the certificate authorities an `https://` upstream's
    /// certificate is verified against, instead of the Mozilla roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// PEM files of the certificate chain and private key presented to an
    /// `https://` upstream that asks for one (mutual TLS: nginx's
    /// `proxy_ssl_certificate` and `proxy_ssl_certificate_key`).
    pub client_cert: Option<ClientCert>,
    /// How the `Location` and `Refresh` fields of the upstream's answers
    /// are rewritten, as nginx's `proxy_redirect` (`[Redirect::Default]`
    /// by default, as nginx's; empty: `off`).
    pub redirect: Vec<Redirect>,
    /// Answers of 300 or more are replaced by the server's error page for
    /// their status, where one is configured (`--error-page`), as nginx's
    /// `proxy_intercept_errors` (off by default).
    pub intercept_errors: bool,
    /// An upstream's `X-Accel-Redirect` is followed: the server answers
    /// the path it names instead (on by default, as nginx; off is nginx's
    /// `proxy_ignore_headers X-Accel-Redirect`, the field dropped and the
    /// answer passed as it came).
    pub accel_redirect: bool,
    /// How the `Domain` attributes of the upstream's `Set-Cookie` fields
    /// are rewritten, as nginx's `proxy_cookie_domain` (empty by default:
    /// `off`).
    pub cookie_domain: Vec<CookieRule>,
    /// How their `Path` attributes are, as nginx's `proxy_cookie_path`.
    pub cookie_path: Vec<CookieRule>,
    /// Flags added to or removed from them, per cookie, as nginx's
    /// `proxy_cookie_flags` (empty by default: `off`).
    pub cookie_flags: Vec<CookieFlags>,
    /// Fields set on every forwarded request, replacing the client's of
    /// the same name (an empty value removes them), as nginx's
    /// `proxy_set_header`.
    pub set_header: Vec<SetHeader>,
    /// Fields of the upstream's answers never passed to the client, as
    /// nginx's `proxy_hide_header`.
    pub hide_header: Vec<String>,
}

/// One upstream of a route, with nginx's `server` parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// Where it is, and the path that replaces the route's prefix.
    pub url: UpstreamUrl,
    /// Its share of requests against the route's others: 1 to [`MAX_WEIGHT`].
    pub weight: u32,
    /// Failures within `fail_timeout` that mark it down for `fail_timeout`
    /// (0: never marked down by failures).
    pub max_fails: u32,
    /// The window failures are counted in, and how long it stays down.
    pub fail_timeout: Duration,
    /// Taken only while no other upstream of the route may be (nginx's
    /// `server ... backup`): all down, or all tried by this request.
    pub backup: bool,
    /// The most requests this serving process has in flight to it at once
    /// (nginx's `server ... max_conns`, which counts per worker process
    /// without a `zone`); past it, the route's others are taken, and with
    /// none left the request is a 502. 0: no limit (the default).
    pub max_conns: u32,
}

/// An upstream's URL: `http://` or `https://`, a host (a name, an IPv4
/// address or a bracketed IPv6 one), an optional port, an optional path.
///
/// Whether it has a path decides how request paths map, as nginx's
/// `proxy_pass` does (see [`map_target`](crate::map_target)):
/// `http://10.0.0.2:8080/v1/` has the path `/v1/`, `http://10.0.0.2:8080`
/// has none, and `http://10.0.0.2:8080/` has `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamUrl {
    text: String,
    tls: bool,
    host: String,
    port: u16,
    authority: String,
    path: Option<String>,
    /// The one address of the host it stands for, when the host's name
    /// resolved to several ([`one_upstream_per_address`](crate::one_upstream_per_address)).
    address: Option<SocketAddr>,
}

impl UpstreamUrl {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Is it `https://`?
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host: a name, or an address (IPv6 without its brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port: as written, else 80 or 443.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host[:port]` as written in the URL (IPv6 in brackets): nginx's
    /// `$proxy_host`, the `Host` an upstream is sent by default.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path, if the URL has one (even just `/`).
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The one address of its host this upstream stands for, when the
    /// host's name resolved to several (nginx makes each address a server
    /// of its own; [`one_upstream_per_address`](crate::one_upstream_per_address)
    /// does so); `None` for a URL as written, connected to at its host's
    /// first address.
    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// This URL standing for one address of its host.
    pub fn at_address(&self, addr: SocketAddr) -> UpstreamUrl {
        UpstreamUrl {
            address: Some(addr),
            ..self.clone()
        }
    }
}

impl FromStr for UpstreamUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<UpstreamUrl> {
        let bad = |why: &str| Error::config(format!("upstream '{s}': {why}"));
        let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("http://") {
            (false, &s[7..])
        } else if lower.starts_with("https://") {
            (true, &s[8..])
        } else {
            return Err(bad("the URL must start with http:// or https://"));
        };
        if s.len() > MAX_TEXT {
            return Err(bad(&format!("longer than {MAX_TEXT} bytes")));
        }
        let end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.contains('@') {
            return Err(bad("user names and passwords in the URL are not supported"));
        }
        if authority.contains(['?', '#']) || path.contains(['?', '#']) {
            return Err(bad("an upstream URL has no query or fragment"));
        }
        if !path.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("the path has a space or a control character"));
        }
        let (host, port) = split_host_port(authority).map_err(|why| bad(&why))?;
        Ok(UpstreamUrl {
            text: s.to_string(),
            tls,
            host: host.to_string(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
            authority: authority.to_string(),
            path: (!path.is_empty()).then(|| path.to_string()),
            address: None,
        })
    }
}

/// `host[:port]` of an authority, checked: a name of letters, digits,
/// `-`, `.` and `_`, or an IPv6 address in brackets; a port 1 to 65535.
fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err("an IPv6 address needs its closing ]".into());
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("'{addr}' is not an IPv6 address"));
        }
        match after {
            "" => (addr, None),
            p => match p.strip_prefix(':') {
                Some(p) => (addr, Some(p)),
                None => return Err("only a :port may follow an IPv6 address".into()),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if !authority.starts_with('[')
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        return Err(format!("'{host}' is not a host name or an address"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("port '{p}' is not a number from 1 to 65535")),
        },
    };
    Ok((host, port))
}

/// As written, and the address it stands for when it stands for one of
/// several (`http://app:8080/ (10.0.0.3:8080)`): what the error log, the
/// status page and the metrics name it by.
impl fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        match self.address {
            Some(a) => write!(f, " ({a})"),
            None => Ok(()),
        }
    }
}

/// How a route chooses an upstream for a request. Every way skips the
/// upstreams marked down; with none up, the request is answered 502.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Weighted round-robin, smooth as nginx's: with weights 5, 1, 1 the
    /// order is a a b a c a a, not a a a a a b c (`round-robin`).
    RoundRobin,
    /// The fewest requests in flight from this process, relative to weight;
    /// ties by weighted round-robin (`least-conn`).
    LeastConn,
    /// A consistent hash of a key (`hash:client`, `hash:header:NAME`): the
    /// same key goes to the same upstream while it is up, and removing an
    /// upstream moves only its own keys.
    Hash(HashKey),
}

/// What a [`Balance::Hash`] route hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's IP address (without its port).
    ClientAddr,
    /// The value of this request header (case-insensitive name); a request
    /// without it (or with it empty) goes by weighted round-robin, as
    /// nginx's `hash` does with an empty key.
    Header(String),
}

impl FromStr for Balance {
    type Err = Error;

    fn from_str(s: &str) -> Result<Balance> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        match lower.as_str() {
            "round-robin" => return Ok(Balance::RoundRobin),
            "least-conn" => return Ok(Balance::LeastConn),
            "hash:client" => return Ok(Balance::Hash(HashKey::ClientAddr)),
            _ => {}
        }
        if lower.starts_with("hash:header:") {
            let name = &t["hash:header:".len()..];
            if is_token(name) && name.len() <= MAX_TEXT {
                return Ok(Balance::Hash(HashKey::Header(name.to_string())));
            }
            return Err(Error::config(format!(
                "balance '{s}': '{name}' is not a header name"
            )));
        }
        Err(Error::config(format!(
            "balance '{s}': expected round-robin, least-conn, hash:client or hash:header:NAME"
        )))
    }
}

impl fmt::Display for Balance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Balance::RoundRobin => f.write_str("round-robin"),
            Balance::LeastConn => f.write_str("least-conn"),
            Balance::Hash(HashKey::ClientAddr) => f.write_str("hash:client"),
            Balance::Hash(HashKey::Header(h)) => write!(f, "hash:header:{h}"),
        }
    }
}

/// Whether an answer is read whole before it is sent on.
///
/// Whatever the route says, an answer of type `text/event-stream` is
/// streamed (each event reaches the client as the upstream sends it), and
/// an upstream's `X-Accel-Buffering: yes` or `no` decides for its answer,
/// as with nginx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Buffering {
    /// Read the answer from the upstream into memory, up to
    /// [`BUFFERED_MAX`](crate::BUFFERED_MAX) bytes, before sending the
    /// client anything: the upstream connection is free (back in the pool)
    /// as soon as the upstream has sent it, however slow the client. An
    /// answer longer than that is streamed from that point. nginx would
    /// spill it to a temporary file; mpm keeps memory bounded instead.
    On,
    /// Send each part of the answer on as it arrives: the upstream
    /// connection is held until the client has read it all (nginx's
    /// `proxy_buffering off`). The default.
    #[default]
    Off,
}

impl FromStr for Buffering {
    type Err = Error;

    fn from_str(s: &str) -> Result<Buffering> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" => Ok(Buffering::On),
            "off" => Ok(Buffering::Off),
            _ => Err(Error::config(format!(
                "buffering '{s}': expected on or off"
            ))),
        }
    }
}

impl fmt::Display for Buffering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buffering::On => "on",
            Buffering::Off => "off",
        })
    }
}

/// Active health checks: a `GET path` to each upstream every `interval`,
/// run once per interval by one process of the server (see
/// [`Checker`](crate::Checker)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveHealth {
    /// Time between two checks of an upstream.
    pub interval: Duration,
    /// The path requested.
    pub path: String,
    /// The statuses that pass.
    pub expect_status: StatusMatch,
    /// Passed checks in a row that bring a down upstream back.
    pub rise: u32,
    /// Failed checks in a row that take an upstream down.
    pub fall: u32,
    /// How long one check may take, connect to answer.
    pub timeout: Duration,
    /// The route's `ca_file`, for checks of `https://` upstreams (set
    /// from the route when it is read).
    pub ca_file: Option<std::path::PathBuf>,
    /// The route's `client_cert`, presented by checks as by requests.
    pub client_cert: Option<ClientCert>,
}

/// A client certificate for mutual TLS to upstreams: PEM files of the
/// certificate chain and of its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The certificate chain, the client's certificate first.
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
}

impl Default for ActiveHealth {
    fn default() -> Self {
        ActiveHealth {
            interval: Duration::from_secs(5),
            path: "/".to_string(),
            expect_status: StatusMatch::default(),
            rise: 2,
            fall: 3,
            timeout: Duration::from_secs(2),
            ca_file: None,
            client_cert: None,
        }
    }
}

/// The statuses an active check passes on: a range (`200-399`, the
/// default) or a list (`200,204`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusMatch {
    /// From the first to the second, both included.
    Range(u16, u16),
    /// Any of these.
    List(Vec<u16>),
}

impl Default for StatusMatch {
    fn default() -> Self {
        StatusMatch::Range(200, 399)
    }
}

impl StatusMatch {
    /// Does `status` pass?
    pub fn matches(&self, status: u16) -> bool {
        match self {
            StatusMatch::Range(lo, hi) => (*lo..=*hi).contains(&status),
            StatusMatch::List(list) => list.contains(&status),
        }
    }
}

impl FromStr for StatusMatch {
    type Err = Error;

    fn from_str(s: &str) -> Result<StatusMatch> {
        let bad = || {
            Error::config(format!(
                "health status '{s}': expected a range (200-399) or a list (200,204) of statuses 100 to 599"
            ))
        };
        let status = |w: &str| -> Result<u16> {
            let w = w.trim();
            match w.parse::<u16>() {
                Ok(n) if (100..=599).contains(&n) && w.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
                _ => Err(bad()),
            }
        };
        if let Some((lo, hi)) = s.split_once('-') {
            let (lo, hi) = (status(lo)?, status(hi)?);
            if lo > hi {
                return Err(bad());
            }
            return Ok(StatusMatch::Range(lo, hi));
        }
        let list = s.split(',').map(status).collect::<Result<Vec<u16>>>()?;
        if list.len() > 100 {
            return Err(bad());
        }
        Ok(StatusMatch::List(list))
    }
}

impl fmt::Display for StatusMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusMatch::Range(lo, hi) => write!(f, "{lo}-{hi}"),
            StatusMatch::List(list) => {
                let words: Vec<String> = list.iter().map(u16::to_string).collect();
                f.write_str(&words.join(","))
            }
        }
    }
}

/// Which fields tell the upstream who the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedStyle {
    /// `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host`, as
    /// most applications expect (`x-forwarded`, the default).
    #[default]
    XForwarded,
    /// One RFC 7239 `Forwarded` element: `for=`, `proto=`, `host=` (`forwarded`).
    Forwarded,
    /// Neither: the client's fields pass as they came (`off`).
    Off,
}

impl FromStr for ForwardedStyle {
    type Err = Error;

    fn from_str(s: &str) -> Result<ForwardedStyle> {
        match s.trim().to_ascii_lowercase().as_str() {
            "x-forwarded" => Ok(ForwardedStyle::XForwarded),
            "forwarded" => Ok(ForwardedStyle::Forwarded),
            "off" => Ok(ForwardedStyle::Off),
            _ => Err(Error::config(format!(
                "forwarded '{s}': expected x-forwarded, forwarded or off"
            ))),
        }
    }
}

impl fmt::Display for ForwardedStyle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ForwardedStyle::XForwarded => "x-forwarded",
            ForwardedStyle::Forwarded => "forwarded",
            ForwardedStyle::Off => "off",
        })
    }
}

/// The `Host` the upstream is sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HostMode {
    /// The upstream URL's `host[:port]`, as nginx's default
    /// (`proxy_set_header Host $proxy_host`): what a virtual-hosted
    /// upstream expects (`upstream`, the default).
    #[default]
    Upstream,
    /// The client's `Host` (nginx's `$host`), for an upstream that builds
    /// links from it; the upstream's if the client sent none (`pass`).
    Pass,
    /// This value (any other word: `example.com`, `example.com:8443`).
    Set(String),
}

impl FromStr for HostMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<HostMode> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "upstream" => return Ok(HostMode::Upstream),
            "pass" => return Ok(HostMode::Pass),
            _ => {}
        }
        if t.len() <= MAX_TEXT && split_host_port(t).is_ok() {
            return Ok(HostMode::Set(t.to_string()));
        }
        Err(Error::config(format!(
            "host '{s}': expected upstream, pass, or a host[:port] to send"
        )))
    }
}

impl fmt::Display for HostMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMode::Upstream => f.write_str("upstream"),
            HostMode::Pass => f.write_str("pass"),
            HostMode::Set(h) => f.write_str(h),
        }
    }
}

/// RFC 9110 `token`: what a header name is made of.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl UpstreamSpec {
    /// An upstream at `url` with nginx's defaults: weight 1, `max_fails=1`,
    /// `fail_timeout=10s`.
    pub fn new(url: &str) -> Result<UpstreamSpec> {
        Ok(UpstreamSpec {
            url: url.trim().parse()?,
            weight: 1,
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            backup: false,
            max_conns: 0,
        })
    }

    /// Every value within its bounds.
    pub fn check(&self) -> Result<()> {
        let at = |what: &str| format!("upstream '{}': {what}", self.url);
        if !(1..=MAX_WEIGHT).contains(&self.weight) {
            return Err(Error::config(at(&format!(
                "weight {} must be 1 to {MAX_WEIGHT}",
                self.weight
            ))));
        }
        for (what, n) in [("max_fails", self.max_fails), ("max_conns", self.max_conns)] {
            if n > MAX_COUNT {
                return Err(Error::config(at(&format!(
                    "{what} {n} must be 0 to {MAX_COUNT}"
                ))));
            }
        }
        check_duration(
            &at("fail_timeout"),
            self.fail_timeout,
            Duration::from_millis(1),
        )
    }
}

/// A route's list `what` (of route `p`): at most `max` entries, each one
/// passing `check`, or the one line saying which did not.
fn check_list<T>(
    p: &str,
    what: &str,
    items: &[T],
    max: usize,
    check: impl Fn(&T) -> Result<()>,
) -> Result<()> {
    if items.len() > max {
        return Err(Error::config(format!(
            "route {p}: {} {what} entries, at most {max}",
            items.len()
        )));
    }
    for item in items {
        check(item).map_err(|e| Error::config(format!("route {p}: {what}: {e}")))?;
    }
    Ok(())
}

/// A duration at least `min` and at most [`MAX_DURATION`], or the one line
/// saying which bound it broke.
fn check_duration(name: &str, d: Duration, min: Duration) -> Result<()> {
    if d < min || d > MAX_DURATION {
        return Err(Error::config(format!(
            "{name} {}: must be {} to {}",
            show_duration(d),
            show_duration(min),
            show_duration(MAX_DURATION)
        )));
    }
    Ok(())
}

/// A duration as settings write it: `10s`, `250ms`.
pub fn show_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl ProxyRoute {
    /// A route from `prefix` to `urls`, every other setting at its default.
    pub fn new(prefix: &str, urls: &[&str]) -> Result<ProxyRoute> {
        let upstreams = urls
            .iter()
            .map(|u| UpstreamSpec::new(u))
            .collect::<Result<Vec<_>>>()?;
        let route = ProxyRoute {
            prefix: prefix.to_string(),
            upstreams,
            balance: Balance::RoundRobin,
            connect_timeout: Duration::from_secs(60),
            read_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            next_upstream: true,
            next_upstream_tries: 0,
            buffering: Buffering::default(),
            health: None,
            forwarded: ForwardedStyle::default(),
            trusted_proxies: Vec::new(),
            host: HostMode::default(),
            ca_file: None,
            client_cert: None,
            redirect: vec![Redirect::Default],
            intercept_errors: false,
            accel_redirect: true,
            cookie_domain: Vec::new(),
            cookie_path: Vec::new(),
            cookie_flags: Vec::new(),
            set_header: Vec::new(),
            hide_header: Vec::new(),
        };
        route.check()?;
        Ok(route)
    }

    /// The flag form `PREFIX=URL[,URL...]`, e.g.
    /// `/api/=http://127.0.0.1:8080/v1/,http://10.0.0.2:8080/v1/`: the
    /// first `=` ends the prefix, commas separate the upstreams.
    ///
    /// ```
    /// let r = mpm_proxy::ProxyRoute::from_flag("/api/=http://127.0.0.1:8080/v1/").unwrap();
    /// assert_eq!(r.prefix, "/api/");
    /// assert_eq!(r.upstreams[0].url.path(), Some("/v1/"));
    /// assert!(mpm_proxy::ProxyRoute::from_flag("api=http://x").is_err());
    /// ```
    pub fn from_flag(flag: &str) -> Result<ProxyRoute> {
        let Some((prefix, urls)) = flag.split_once('=') else {
            return Err(Error::config(format!(
                "'{flag}': expected PREFIX=URL[,URL...], e.g. /api/=http://127.0.0.1:8080/"
            )));
        };
        let urls: Vec<&str> = urls.split(',').map(str::trim).collect();
        if urls.iter().all(|u| u.is_empty()) {
            return Err(Error::config(format!(
                "'{flag}': no upstream URL after the '='"
            )));
        }
        if let Some(i) = urls.iter().position(|u| u.is_empty()) {
            return Err(Error::config(format!(
                "'{flag}': upstream {} of the list is empty (a stray comma?)",
                i + 1
            )));
        }
        ProxyRoute::new(prefix.trim(), &urls)
    }

    /// The flag form of the route's prefix and upstreams (its other
    /// settings are the file's to show).
    pub fn to_flag(&self) -> String {
        let urls: Vec<&str> = self.upstreams.iter().map(|u| u.url.as_str()).collect();
        format!("{}={}", self.prefix, urls.join(","))
    }

    /// Every value within its bounds: the one-line complaint about the
    /// first that is not.
    pub fn check(&self) -> Result<()> {
        let p = &self.prefix;
        if !p.starts_with('/') {
            return Err(Error::config(format!(
                "prefix '{p}': must start with / (e.g. /api/)"
            )));
        }
        if p.len() > MAX_TEXT || !p.bytes().all(|b| b.is_ascii_graphic()) || p.contains(['?', '#'])
        {
            return Err(Error::config(format!(
                "prefix '{p}': a path of at most {MAX_TEXT} bytes, without spaces, controls, ? or #"
            )));
        }
        if self.upstreams.is_empty() {
            return Err(Error::config(format!("route {p}: no upstreams")));
        }
        if self.upstreams.len() > MAX_UPSTREAMS_PER_ROUTE {
            return Err(Error::config(format!(
                "route {p}: {} upstreams, at most {MAX_UPSTREAMS_PER_ROUTE}",
                self.upstreams.len()
            )));
        }
        for (i, u) in self.upstreams.iter().enumerate() {
            u.check()?;
            if self.upstreams[..i].iter().any(|v| v.url == u.url) {
                return Err(Error::config(format!(
                    "route {p}: upstream '{}' is listed twice (give it a weight instead)",
                    u.url
                )));
            }
        }
        if self.upstreams.iter().all(|u| u.backup) {
            return Err(Error::config(format!(
                "route {p}: every upstream is a backup; at least one must not be"
            )));
        }
        if matches!(self.balance, Balance::Hash(_)) && self.upstreams.iter().any(|u| u.backup) {
            return Err(Error::config(format!(
                "route {p}: a backup upstream cannot be used with balance = \"{}\" (as \
                 nginx's hash): a key's upstream would move to the backup and back",
                self.balance
            )));
        }
        let one_ms = Duration::from_millis(1);
        check_duration(
            &format!("route {p}: connect_timeout"),
            self.connect_timeout,
            one_ms,
        )?;
        check_duration(
            &format!("route {p}: read_timeout"),
            self.read_timeout,
            one_ms,
        )?;
        check_duration(
            &format!("route {p}: send_timeout"),
            self.send_timeout,
            one_ms,
        )?;
        if self.next_upstream_tries > MAX_COUNT {
            return Err(Error::config(format!(
                "route {p}: next_upstream_tries {} must be 0 (all) to {MAX_COUNT}",
                self.next_upstream_tries
            )));
        }
        if self.trusted_proxies.len() > MAX_TRUSTED {
            return Err(Error::config(format!(
                "route {p}: {} trusted_proxies, at most {MAX_TRUSTED}",
                self.trusted_proxies.len()
            )));
        }
        if let Some(h) = &self.health {
            h.check(p)?;
        }
        if self.client_cert.is_some() && !self.upstreams.iter().any(|u| u.url.is_tls()) {
            return Err(Error::config(format!(
                "route {p}: client_cert is for https:// upstreams, and the route has none"
            )));
        }
        check_list(
            p,
            "redirect",
            &self.redirect,
            MAX_REDIRECTS,
            Redirect::check,
        )?;
        check_list(
            p,
            "cookie_domain",
            &self.cookie_domain,
            MAX_COOKIE_RULES,
            CookieRule::check,
        )?;
        check_list(
            p,
            "cookie_path",
            &self.cookie_path,
            MAX_COOKIE_RULES,
            CookieRule::check,
        )?;
        check_list(
            p,
            "cookie_flags",
            &self.cookie_flags,
            MAX_COOKIE_FLAGS,
            CookieFlags::check,
        )?;
        for (what, n) in [
            ("set_header", self.set_header.len()),
            ("hide_header", self.hide_header.len()),
        ] {
            if n > MAX_SET_HEADERS {
                return Err(Error::config(format!(
                    "route {p}: {n} {what} fields, at most {MAX_SET_HEADERS}"
                )));
            }
        }
        for (i, h) in self.set_header.iter().enumerate() {
            if self.set_header[..i]
                .iter()
                .any(|o| o.name().eq_ignore_ascii_case(h.name()))
            {
                return Err(Error::config(format!(
                    "route {p}: set_header {}: given twice",
                    h.name()
                )));
            }
            if self.forwarded != ForwardedStyle::Off && written_by_forwarded(h.name()) {
                return Err(Error::config(format!(
                    "route {p}: set_header {}: the route's `forwarded` ({}) writes it; \
                     set forwarded = \"off\" to write it yourself",
                    h.name(),
                    self.forwarded
                )));
            }
        }
        for name in &self.hide_header {
            check_hidden(name).map_err(|e| Error::config(format!("route {p}: {e}")))?;
        }
        Ok(())
    }
}

impl ActiveHealth {
    fn check(&self, route: &str) -> Result<()> {
        let at = |what: &str| format!("route {route}: {what}");
        check_duration(&at("health_interval"), self.interval, MIN_HEALTH_INTERVAL)?;
        check_duration(
            &at("health_timeout"),
            self.timeout,
            Duration::from_millis(1),
        )?;
        if !self.path.starts_with('/')
            || self.path.len() > MAX_TEXT
            || !self.path.bytes().all(|b| b.is_ascii_graphic())
            // A fragment is never part of a request's target (RFC 9112 3.2).
            || self.path.contains('#')
        {
            return Err(Error::config(at(&format!(
                "health_path '{}': a path starting with /, without spaces, controls or a fragment (#)",
                self.path
            ))));
        }
        for (name, n) in [("health_rise", self.rise), ("health_fall", self.fall)] {
            if !(1..=MAX_COUNT).contains(&n) {
                return Err(Error::config(at(&format!(
                    "{name} {n} must be 1 to {MAX_COUNT}"
                ))));
            }
        }
        Ok(())
    }
}

/// The routes together: at most [`MAX_ROUTES`], no prefix twice.
pub fn check_routes(routes: &[ProxyRoute]) -> Result<()> {
    if routes.len() > MAX_ROUTES {
        return Err(Error::config(format!(
            "{} proxy routes: at most {MAX_ROUTES}",
            routes.len()
        )));
    }
    for (i, r) in routes.iter().enumerate() {
        r.check()?;
        if routes[..i].iter().any(|o| o.prefix == r.prefix) {
            return Err(Error::config(format!(
                "proxy prefix {} is given twice: list every upstream in one route",
                r.prefix
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(flag: &str) -> String {
        ProxyRoute::from_flag(flag).unwrap_err().to_string()
    }

    #[test]
    fn the_flag_form_makes_a_route_with_nginx_defaults() {
        let r = ProxyRoute::from_flag("/api/=http://127.0.0.1:8080/v1/,http://10.0.0.2:8080/v1/")
            .unwrap();
        assert_eq!(r.prefix, "/api/");
        assert_eq!(r.upstreams.len(), 2);
        let u = &r.upstreams[1];
        assert_eq!(
            (u.url.host(), u.url.port(), u.url.path()),
            ("10.0.0.2", 8080, Some("/v1/"))
        );
        assert_eq!(
            (u.weight, u.max_fails, u.fail_timeout),
            (1, 1, Duration::from_secs(10))
        );
        assert_eq!(r.balance, Balance::RoundRobin);
        assert_eq!(r.connect_timeout, Duration::from_secs(60));
        assert!(r.next_upstream && r.next_upstream_tries == 0);
        assert_eq!(
            (r.buffering, r.forwarded, &r.host),
            (
                Buffering::Off,
                ForwardedStyle::XForwarded,
                &HostMode::Upstream
            )
        );
        assert_eq!(
            r.to_flag(),
            "/api/=http://127.0.0.1:8080/v1/,http://10.0.0.2:8080/v1/"
        );
    }

    #[test]
    fn flag_errors_are_one_line_naming_what_is_wrong() {
        for (flag, says) in [
            ("api/=http://x", "must start with /"),
            ("/api/", "expected PREFIX=URL"),
            ("/api/=", "no upstream URL"),
            (
                "/api/=http://a,,http://b",
                "upstream 2 of the list is empty",
            ),
            ("/api/=ftp://x/", "must start with http:// or https://"),
            ("/api/=http://", "no host"),
            ("/api/=http://x:0/", "port '0'"),
            ("/api/=http://x:99999/", "port '99999'"),
            ("/api/=http://x:+80/", "port '+80'"),
            ("/api/=http://u:p@x/", "user names and passwords"),
            ("/api/=http://x/?q=1", "no query"),
            ("/api/=http://[::1/", "closing ]"),
            ("/api/=http://[zz]/", "not an IPv6 address"),
            ("/api/=http://a b/", "not a host name"),
            ("/a b/=http://x/", "without spaces"),
            ("/api/=http://x/,http://x/", "listed twice"),
        ] {
            let e = err(flag);
            assert!(e.contains(says), "{flag}: {e}");
            assert!(!e.contains('\n'), "{flag}: {e}");
        }
    }

    #[test]
    fn urls_keep_or_lack_a_path_as_written() {
        let u: UpstreamUrl = "http://h:81".parse().unwrap();
        assert_eq!((u.path(), u.authority(), u.port()), (None, "h:81", 81));
        let u: UpstreamUrl = "HTTPS://h/".parse().unwrap();
        assert_eq!(
            (u.path(), u.is_tls(), u.port(), u.authority()),
            (Some("/"), true, 443, "h")
        );
        let u: UpstreamUrl = "http://[::1]:9000/x".parse().unwrap();
        assert_eq!(
            (u.host(), u.authority(), u.path()),
            ("::1", "[::1]:9000", Some("/x"))
        );
    }

    #[test]
    fn setting_words_parse_and_show_back() {
        for w in [
            "round-robin",
            "least-conn",
            "hash:client",
            "hash:header:X-User",
        ] {
            assert_eq!(w.parse::<Balance>().unwrap().to_string(), w);
        }
        assert!("hash:header:".parse::<Balance>().is_err());
        assert!("hash:header:a b".parse::<Balance>().is_err());
        assert!("random"
            .parse::<Balance>()
            .unwrap_err()
            .to_string()
            .contains("least-conn"));
        assert_eq!("ON".parse::<Buffering>().unwrap(), Buffering::On);
        assert!("yes".parse::<Buffering>().is_err());
        for w in ["x-forwarded", "forwarded", "off"] {
            assert_eq!(w.parse::<ForwardedStyle>().unwrap().to_string(), w);
        }
        assert_eq!("pass".parse::<HostMode>().unwrap(), HostMode::Pass);
        assert_eq!(
            "example.com:8443".parse::<HostMode>().unwrap(),
            HostMode::Set("example.com:8443".into())
        );
        assert!("a b".parse::<HostMode>().is_err());
    }

    #[test]
    fn health_statuses_are_a_range_or_a_list() {
        let r: StatusMatch = "200-399".parse().unwrap();
        assert!(r.matches(200) && r.matches(399) && !r.matches(400));
        let l: StatusMatch = "200,204".parse().unwrap();
        assert!(l.matches(204) && !l.matches(201));
        assert_eq!(l.to_string(), "200,204");
        for bad in ["", "399-200", "2xx", "99", "600", "200-", "+200"] {
            assert!(bad.parse::<StatusMatch>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_bound_is_checked() {
        let mut r = ProxyRoute::new("/", &["http://a"]).unwrap();
        r.upstreams[0].weight = 0;
        assert!(r
            .check()
            .unwrap_err()
            .to_string()
            .contains("weight 0 must be 1 to 1000"));
        r.upstreams[0].weight = 1001;
        assert!(r.check().is_err());
        r.upstreams[0].weight = 1;
        r.upstreams[0].fail_timeout = Duration::ZERO;
        assert!(r
            .check()
            .unwrap_err()
            .to_string()
            .contains("fail_timeout 0s"));
        r.upstreams[0].fail_timeout = Duration::MAX;
        assert!(r.check().is_err());
        r.upstreams[0].fail_timeout = Duration::from_secs(1);
        r.read_timeout = Duration::from_secs(100_000);
        assert!(r.check().unwrap_err().to_string().contains("read_timeout"));
        r.read_timeout = Duration::from_secs(1);
        r.health = Some(ActiveHealth {
            rise: 0,
            ..ActiveHealth::default()
        });
        assert!(r.check().unwrap_err().to_string().contains("health_rise 0"));
        r.health = Some(ActiveHealth {
            interval: Duration::from_millis(1),
            ..ActiveHealth::default()
        });
        assert!(r
            .check()
            .unwrap_err()
            .to_string()
            .contains("health_interval"));
        r.health = Some(ActiveHealth {
            path: "health".into(),
            ..ActiveHealth::default()
        });
        assert!(r.check().unwrap_err().to_string().contains("health_path"));
        r.health = Some(ActiveHealth {
            path: "/health#now".into(),
            ..ActiveHealth::default()
        });
        assert!(r.check().unwrap_err().to_string().contains("fragment"));
        r.health = Some(ActiveHealth::default());
        assert!(r.check().is_ok());
    }

    #[test]
    fn duplicate_prefixes_are_refused() {
        let a = ProxyRoute::from_flag("/api/=http://a").unwrap();
        let b = ProxyRoute::from_flag("/api/=http://b").unwrap();
        let e = check_routes(&[a.clone(), b]).unwrap_err().to_string();
        assert!(e.contains("/api/ is given twice"), "{e}");
        assert!(check_routes(&[a, ProxyRoute::from_flag("/api=http://b").unwrap()]).is_ok());
    }
}
