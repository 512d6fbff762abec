//! Workloads as data: what a client sends and how.
//!
//! A [`Workload`] is a mix of requests — each a method, a path, header
//! fields and a body, with a weight and the statuses it expects — sent on
//! a number of concurrent connections, kept alive or opened for each
//! request, with an optional share of slow clients. `mpm bench --workload
//! FILE` and `mpm compare --workload FILE` read one from TOML; an
//! application built on `mpm::main` ships its own through `App::workloads`,
//! so that `myapp compare` measures its endpoints with no flags; and
//! `mpm compare --scenario get:/api/users/1` is the one-request shorthand.
//!
//! ```toml
//! name = "browse"                 # how --scenario and the report name it (default: the file's stem)
//! title = "browsing the catalogue"
//! connections = 50                # concurrent connections (default 50)
//! keepalive = true                # false: a new connection for each request
//! pipeline = 1                    # requests sent at once on a connection before reading (default 1)
//! h2-streams = 10                 # HTTP/2 instead, this many streams in flight per connection (h2c on
//!                                 # http://, h2 by ALPN on https://; default: HTTP/1.1)
//! slow-clients = 0.1              # share of the connections that send slowly (default 0)
//! slow-pause = "10ms"             # a slow client sends slow-bytes, then pauses this long
//! slow-bytes = 16
//!
//! [[request]]
//! path = "/api/items/7"           # method GET unless given
//! weight = 3                      # three of these for every one below (default 1)
//! expect = [200]                  # the statuses that count as answered (default: any 2xx)
//!
//! [[request]]
//! method = "POST"
//! path = "/api/items"
//! headers = { Content-Type = "application/json" }
//! body = '{"name":"lamp"}'
//! expect = [201]
//! ```
//!
//! Requests are drawn in a fixed, interleaved order (smooth weighted
//! round-robin), shared by every connection: a run of `-n` requests sends
//! each request exactly its share (40 requests of weights 3 and 1: 30 and
//! 10).
//!
//! Every value is checked when the workload is read ([`Workload::validate`]):
//! a bad one is one line naming the workload, the request and the problem.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use mpm_core::{Error, Seconds};

/// Connections when a workload does not say.
pub const DEFAULT_CONNECTIONS: usize = 50;
/// The most connections a workload may ask for.
pub const MAX_CONNECTIONS: usize = 100_000;
/// The most requests in one workload's mix.
pub const MAX_REQUESTS: usize = 1_000;
/// The largest weight of one request.
pub const MAX_WEIGHT: u32 = 10_000;
/// The most requests one connection sends before reading their answers.
pub const MAX_PIPELINE: usize = 256;
/// The most HTTP/2 streams one connection keeps in flight (a server's
/// own limit, 128 by default for mpm and nginx, holds back the rest).
pub const MAX_STREAMS: usize = 1_024;
/// The largest request body.
pub const MAX_BODY: usize = 16 << 20;
/// The longest request target.
pub const MAX_PATH: usize = 8 * 1024;

/// A mix of requests and how they are sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Short name: `--scenario` selects by it, the report's tables use it.
    pub name: String,
    /// A few words for tables and charts (default: made from the requests).
    pub title: Option<String>,
    /// The requests, each with its weight in the mix.
    pub requests: Vec<WorkloadRequest>,
    /// Concurrent connections.
    pub connections: usize,
    /// Keep connections open between requests (false: a connection per
    /// request, each request saying `Connection: close`).
    pub keepalive: bool,
    /// Requests each connection sends at once, in one write, before it
    /// reads their answers (HTTP/1.1 pipelining, as wrk's pipeline script
    /// and `h2load -m` for HTTP/2); 1: one at a time.
    pub pipeline: usize,
    /// HTTP/2 instead of HTTP/1.1, with this many streams in flight on each
    /// connection (h2load's `-m`): with prior knowledge (h2c) on a plain
    /// listener, chosen by ALPN over TLS. `None`: HTTP/1.1.
    pub h2_streams: Option<usize>,
    /// The share of connections that send their requests slowly.
    pub slow: SlowClients,
}

/// Clients on a slow link: each of their requests is sent `bytes` at a
/// time, `pause` apart, so that a model that gives a reading connection a
/// worker (prefork, worker) keeps that worker for the whole request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowClients {
    /// Share of the connections, 0 to 1.
    pub share: f64,
    /// Pause after each piece of a request.
    pub pause: Duration,
    /// Bytes in each piece.
    pub bytes: usize,
}

impl Default for SlowClients {
    fn default() -> Self {
        SlowClients {
            share: 0.0,
            pause: Duration::from_millis(10),
            bytes: 16,
        }
    }
}

/// One request of a mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadRequest {
    /// The method, as sent (`GET`, `POST`, ...).
    pub method: String,
    /// The request target: a path and query (`/api/items?page=2`).
    pub path: String,
    /// Header fields sent besides `Host`, `User-Agent`, `Accept`,
    /// `Content-Length` and `Connection`.
    pub headers: Vec<(String, String)>,
    /// The body (sent with its `Content-Length`).
    pub body: Vec<u8>,
    /// How many of this request for each one of weight 1.
    pub weight: u32,
    /// The statuses that count as an answer.
    pub expect: Expect,
    /// Every 200 response must have the same body length as the first
    /// (ab's "length" failures): right for static files, wrong for
    /// answers that vary.
    pub same_length: bool,
}

/// The statuses a request accepts as its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Any 2xx.
    Success,
    /// These statuses only.
    Only(Vec<u16>),
}

impl Expect {
    /// Does `status` count as an answer?
    pub fn accepts(&self, status: u16) -> bool {
        match self {
            Expect::Success => (200..300).contains(&status),
            Expect::Only(list) => list.contains(&status),
        }
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Success => f.write_str("2xx"),
            Expect::Only(list) => {
                let l: Vec<String> = list.iter().map(u16::to_string).collect();
                f.write_str(&l.join(","))
            }
        }
    }
}

impl WorkloadRequest {
    /// `METHOD path`, weight 1, expecting any 2xx.
    pub fn new(method: impl Into<String>, path: impl Into<String>) -> WorkloadRequest {
        WorkloadRequest {
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
            weight: 1,
            expect: Expect::Success,
            same_length: false,
        }
    }

    /// `GET path`.
    pub fn get(path: impl Into<String>) -> WorkloadRequest {
        WorkloadRequest::new("GET", path)
    }

    /// `POST path` with `body`.
    pub fn post(path: impl Into<String>, body: impl Into<Vec<u8>>) -> WorkloadRequest {
        WorkloadRequest::new("POST", path).body(body)
    }

    /// With a header field.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// With a body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// With a weight in the mix.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Expecting exactly these statuses.
    pub fn expect(mut self, statuses: &[u16]) -> Self {
        self.expect = Expect::Only(statuses.to_vec());
        self
    }

    /// Checking that every 200 has the first one's body length.
    pub fn same_length(mut self, on: bool) -> Self {
        self.same_length = on;
        self
    }

    /// `GET /path`, for tables.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The bytes sent for this request to `host`; `close` adds
    /// `Connection: close`.
    pub fn to_bytes(&self, host: &str, close: bool) -> Vec<u8> {
        let mut r = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        let has = |name: &str| {
            self.headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        if !has("host") {
            let _ = write!(r, "Host: {host}\r\n");
        }
        if !has("user-agent") {
            r.push_str("User-Agent: mpm-bench\r\n");
        }
        if !has("accept") {
            r.push_str("Accept: */*\r\n");
        }
        for (name, value) in &self.headers {
            let _ = write!(r, "{name}: {value}\r\n");
        }
        if !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH") {
            let _ = write!(r, "Content-Length: {}\r\n", self.body.len());
        }
        if close {
            r.push_str("Connection: close\r\n");
        }
        r.push_str("\r\n");
        let mut bytes = r.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    fn validate(&self) -> Result<(), String> {
        if self.method.is_empty() || self.method.len() > 32 || !self.method.bytes().all(is_tchar) {
            return Err(format!(
                "method '{}': a method is a token (GET, POST, ...)",
                self.method
            ));
        }
        let path_ok = self.path == "*"
            || (self.path.starts_with('/') && self.path.bytes().all(|b| b.is_ascii_graphic()));
        if !path_ok || self.path.len() > MAX_PATH {
            return Err(format!(
                "path '{}': a path starts with / and has no spaces or control characters \
                 (at most {MAX_PATH} bytes; percent-encode the rest)",
                self.path.escape_debug()
            ));
        }
        for (name, value) in &self.headers {
            if name.is_empty() || !name.bytes().all(is_tchar) {
                return Err(format!(
                    "header '{}': not a field name",
                    name.escape_debug()
                ));
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(format!(
                    "header {name}: a value is one line (no CR, LF or NUL)"
                ));
            }
            for (reserved, why) in [
                ("content-length", "it is computed from the body"),
                (
                    "transfer-encoding",
                    "the body is sent with its Content-Length",
                ),
                (
                    "connection",
                    "say keepalive = false for a connection per request",
                ),
            ] {
                if name.eq_ignore_ascii_case(reserved) {
                    return Err(format!("header {name}: not settable ({why})"));
                }
            }
        }
        if self.body.len() > MAX_BODY {
            return Err(format!("body: at most {MAX_BODY} bytes"));
        }
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(format!("weight {}: from 1 to {MAX_WEIGHT}", self.weight));
        }
        if let Expect::Only(list) = &self.expect {
            if list.is_empty() {
                return Err("expect: at least one status (or leave it out for any 2xx)".into());
            }
            if let Some(bad) = list.iter().find(|s| !(100..=599).contains(*s)) {
                return Err(format!("expect: {bad} is not a status (100 to 599)"));
            }
        }
        Ok(())
    }
}

/// RFC 9110's `tchar`: what a method or a field name is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Workload {
    /// A workload called `name` with no requests yet: 50 keep-alive
    /// connections, no slow clients.
    pub fn new(name: impl Into<String>) -> Workload {
        Workload {
            name: name.into(),
            title: None,
            requests: Vec::new(),
            connections: DEFAULT_CONNECTIONS,
            keepalive: true,
            pipeline: 1,
            h2_streams: None,
            slow: SlowClients::default(),
        }
    }

    /// `GET path` and nothing else.
    pub fn get(name: impl Into<String>, path: impl Into<String>) -> Workload {
        Workload::new(name).request(WorkloadRequest::get(path))
    }

    /// With a title for tables and charts.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// With one more request in the mix.
    pub fn request(mut self, request: WorkloadRequest) -> Self {
        self.requests.push(request);
        self
    }

    /// On `n` concurrent connections.
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// Keep-alive (`true`, the default) or a connection per request.
    pub fn keepalive(mut self, on: bool) -> Self {
        self.keepalive = on;
        self
    }

    /// With `depth` requests sent at once on each connection (pipelined).
    pub fn pipeline(mut self, depth: usize) -> Self {
        self.pipeline = depth;
        self
    }

    /// Over HTTP/2, `streams` requests in flight on each connection.
    pub fn h2(mut self, streams: usize) -> Self {
        self.h2_streams = Some(streams);
        self
    }

    /// With `share` (0 to 1) of the connections sending each request
    /// `bytes` at a time, `pause` apart.
    pub fn slow_clients(mut self, share: f64, pause: Duration, bytes: usize) -> Self {
        self.slow = SlowClients {
            share,
            pause,
            bytes,
        };
        self
    }

    /// Its title, or one made from what it sends.
    pub fn describe(&self) -> String {
        if let Some(t) = &self.title {
            return t.clone();
        }
        let what = match self.requests.as_slice() {
            [one] => one.label(),
            many => {
                let labels: Vec<String> = many
                    .iter()
                    .take(3)
                    .map(|r| format!("{} ×{}", r.label(), r.weight))
                    .collect();
                let more = if many.len() > 3 { ", ..." } else { "" };
                format!("{}{more}", labels.join(", "))
            }
        };
        let how = if let Some(m) = self.h2_streams {
            format!("HTTP/2, {} connections × {m} streams", self.connections)
        } else if self.keepalive {
            format!("{} keep-alive connections", self.connections)
        } else {
            format!("a connection per request, {} at once", self.connections)
        };
        let slow = if self.slow.share > 0.0 {
            format!(", {:.0} % slow clients", self.slow.share * 100.0)
        } else {
            String::new()
        };
        let pipelined = if self.pipeline > 1 {
            format!(", {} pipelined", self.pipeline)
        } else {
            String::new()
        };
        format!("{what}, {how}{pipelined}{slow}")
    }

    /// Check every value; the error names the workload and the request.
    pub fn validate(&self) -> Result<(), Error> {
        let fail = |m: String| Error::config(format!("workload '{}': {m}", self.name));
        if self.name.is_empty()
            || self.name.len() > 64
            || !self.name.chars().all(|c| c.is_ascii_graphic() && c != ',')
        {
            return Err(fail(
                "a name is 1 to 64 printable characters, no spaces or commas".into(),
            ));
        }
        if self.requests.is_empty() {
            return Err(fail("no request: add a [[request]] with a path".into()));
        }
        if self.requests.len() > MAX_REQUESTS {
            return Err(fail(format!("at most {MAX_REQUESTS} requests")));
        }
        for (i, r) in self.requests.iter().enumerate() {
            r.validate()
                .map_err(|m| fail(format!("request {} ({}): {m}", i + 1, r.label())))?;
        }
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return Err(fail(format!(
                "connections {}: from 1 to {MAX_CONNECTIONS}",
                self.connections
            )));
        }
        if self.pipeline == 0 || self.pipeline > MAX_PIPELINE {
            return Err(fail(format!(
                "pipeline {}: from 1 to {MAX_PIPELINE}",
                self.pipeline
            )));
        }
        if self.pipeline > 1 && !self.keepalive {
            return Err(fail(
                "pipeline needs keepalive = true (pipelined requests share a connection)".into(),
            ));
        }
        if let Some(m) = self.h2_streams {
            if m == 0 || m > MAX_STREAMS {
                return Err(fail(format!("h2-streams {m}: from 1 to {MAX_STREAMS}")));
            }
            if !self.keepalive || self.pipeline > 1 || self.slow.share > 0.0 {
                return Err(fail(
                    "h2-streams: HTTP/2 keeps its connections and multiplexes its requests \
                     (no keepalive = false, pipeline or slow-clients with it)"
                        .into(),
                ));
            }
        }
        let s = &self.slow;
        if !(0.0..=1.0).contains(&s.share) {
            return Err(fail(format!(
                "slow-clients {}: a share from 0 to 1",
                s.share
            )));
        }
        if s.pause.is_zero() || s.pause > Duration::from_secs(10) {
            return Err(fail("slow-pause: above zero, at most 10s".into()));
        }
        if s.bytes == 0 || s.bytes > 1 << 20 {
            return Err(fail("slow-bytes: from 1 to 1048576".into()));
        }
        Ok(())
    }

    /// Connections that are slow clients: `share` of them, spread evenly
    /// (connection `i` of `connections` is slow when this says so).
    pub fn is_slow(&self, i: usize) -> bool {
        let slow = (self.slow.share * self.connections as f64).round() as usize;
        let n = self.connections.max(1);
        slow > 0 && (i + 1) * slow / n > i * slow / n
    }

    /// The order requests are drawn in: indices into
    /// [`requests`](Self::requests), each appearing `weight` times (after
    /// dividing the weights by their greatest common divisor), spread out
    /// by smooth weighted round-robin (3 and 1 give `0 0 1 0`).
    pub fn schedule(&self) -> Vec<usize> {
        let g = self
            .requests
            .iter()
            .fold(0u32, |g, r| gcd(g, r.weight))
            .max(1);
        let weights: Vec<i64> = self
            .requests
            .iter()
            .map(|r| i64::from(r.weight / g))
            .collect();
        let total: i64 = weights.iter().sum();
        let mut current = vec![0i64; weights.len()];
        let mut order = Vec::with_capacity(total.max(0) as usize);
        for _ in 0..total {
            for (c, w) in current.iter_mut().zip(&weights) {
                *c += w;
            }
            let Some(best) = (0..current.len()).max_by_key(|&i| (current[i], -(i as i64))) else {
                break;
            };
            current[best] -= total;
            order.push(best);
        }
        order
    }

    /// Parse a workload from TOML text (the format in the module
    /// documentation); `default_name` when the text has no `name`.
    pub fn from_toml(text: &str, default_name: &str) -> Result<Workload, Error> {
        let raw: RawWorkload = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().replace('\n', " ");
            Error::config(match line {
                Some(l) => format!("line {l}: {msg}"),
                None => msg,
            })
        })?;
        let d = SlowClients::default();
        let w = Workload {
            name: raw.name.unwrap_or_else(|| default_name.to_string()),
            title: raw.title,
            requests: raw
                .request
                .into_iter()
                .map(|r| WorkloadRequest {
                    method: r.method.unwrap_or_else(|| "GET".into()),
                    path: r.path,
                    headers: r.headers.into_iter().collect(),
                    body: r.body.unwrap_or_default().into_bytes(),
                    weight: r.weight.unwrap_or(1),
                    expect: r.expect.map_or(Expect::Success, Expect::Only),
                    same_length: r.same_length.unwrap_or(false),
                })
                .collect(),
            connections: raw.connections.unwrap_or(DEFAULT_CONNECTIONS),
            keepalive: raw.keepalive.unwrap_or(true),
            pipeline: raw.pipeline.unwrap_or(1),
            h2_streams: raw.h2_streams,
            slow: SlowClients {
                share: raw.slow_clients.unwrap_or(0.0),
                pause: raw.slow_pause.map_or(d.pause, |s| s.0),
                bytes: raw.slow_bytes.unwrap_or(d.bytes),
            },
        };
        w.validate()?;
        Ok(w)
    }

    /// Read a workload file; errors name the file.
    pub fn from_file(path: &Path) -> Result<Workload, Error> {
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(format!("workload {shown}: {e}")))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workload".into());
        Workload::from_toml(&text, &stem)
            .map_err(|e| Error::config(format!("workload {shown}: {e}")))
    }

    /// `METHOD:/path` (`get:/api/users/1`): one request, any 2xx expected,
    /// on 50 keep-alive connections. `None` when `spec` has no `:/`.
    pub fn from_spec(spec: &str) -> Option<Result<Workload, Error>> {
        let (method, path) = spec.split_once(':')?;
        if !path.starts_with('/') {
            return None;
        }
        let w =
            Workload::new(spec).request(WorkloadRequest::new(method.to_ascii_uppercase(), path));
        Some(
            w.validate()
                .map(|()| w)
                .map_err(|e| Error::config(format!("--scenario {spec}: {e}"))),
        )
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A duration in a workload file: whole seconds, a float, or text (`"2s"`),
/// each bounded as `mpm_core::Seconds` bounds the command line's.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Seconds>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(u64),
        Float(f64),
        Text(String),
    }
    let parsed = match Raw::deserialize(d)? {
        Raw::Int(n) => Seconds::from_whole(n),
        Raw::Float(f) => Seconds::from_float(f),
        Raw::Text(s) => s.parse(),
    };
    parsed.map(Some).map_err(serde::de::Error::custom)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawWorkload {
    name: Option<String>,
    title: Option<String>,
    connections: Option<usize>,
    keepalive: Option<bool>,
    pipeline: Option<usize>,
    h2_streams: Option<usize>,
    slow_clients: Option<f64>,
    #[serde(default, deserialize_with = "seconds")]
    slow_pause: Option<Seconds>,
    slow_bytes: Option<usize>,
    #[serde(default)]
    request: Vec<RawRequest>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRequest {
    method: Option<String>,
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    weight: Option<u32>,
    expect: Option<Vec<u16>>,
    same_length: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIX: &str = r#"
        name = "mix"
        connections = 4
        keepalive = false
        slow-clients = 0.5
        slow-pause = "5ms"

        [[request]]
        path = "/a"
        weight = 3

        [[request]]
        method = "POST"
        path = "/b"
        body = "hello"
        headers = { Content-Type = "text/plain" }
        expect = [201, 202]
    "#;

    #[test]
    fn a_file_gives_every_field_and_the_defaults() {
        let w = Workload::from_toml(MIX, "unused").expect("valid");
        assert_eq!(w.name, "mix");
        assert_eq!((w.connections, w.keepalive), (4, false));
        assert_eq!(w.slow.share, 0.5);
        assert_eq!(w.slow.pause, Duration::from_millis(5));
        assert_eq!(w.slow.bytes, 16);
        let (a, b) = (&w.requests[0], &w.requests[1]);
        assert_eq!(
            (a.method.as_str(), a.weight, &a.expect),
            ("GET", 3, &Expect::Success)
        );
        assert_eq!(b.body, b"hello");
        assert_eq!(b.expect, Expect::Only(vec![201, 202]));
        assert!(b.expect.accepts(202) && !b.expect.accepts(200));
        assert!(a.expect.accepts(204) && !a.expect.accepts(301));
        let named = Workload::from_toml("[[request]]\npath = \"/\"\n", "stem").expect("valid");
        assert_eq!((named.name.as_str(), named.connections), ("stem", 50));
        assert!(named.keepalive);
        assert_eq!(named.pipeline, 1, "one request at a time unless asked");
        let deep =
            Workload::from_toml("pipeline = 16\n[[request]]\npath = \"/\"\n", "p").expect("valid");
        assert_eq!(deep.pipeline, 16);
        assert!(
            deep.describe().contains("16 pipelined"),
            "{}",
            deep.describe()
        );
        assert_eq!(named.h2_streams, None, "HTTP/1.1 unless asked");
        let h2 = Workload::from_toml(
            "h2-streams = 10\nconnections = 4\n[[request]]\npath = \"/\"\n",
            "h",
        )
        .expect("valid");
        assert_eq!(h2.h2_streams, Some(10));
        assert!(
            h2.describe().contains("HTTP/2, 4 connections × 10 streams"),
            "{}",
            h2.describe()
        );
    }

    #[test]
    fn requests_are_drawn_in_exact_interleaved_shares() {
        let w = Workload::from_toml(MIX, "x").expect("valid");
        assert_eq!(w.schedule(), [0, 0, 1, 0]);
        let even = Workload::new("e")
            .request(WorkloadRequest::get("/a").weight(2))
            .request(WorkloadRequest::get("/b").weight(4))
            .request(WorkloadRequest::get("/c").weight(2));
        let s = even.schedule();
        assert_eq!(s.len(), 4, "weights are divided by their gcd: {s:?}");
        assert_eq!(s.iter().filter(|&&i| i == 1).count(), 2);
    }

    #[test]
    fn slow_clients_are_their_share_spread_out() {
        let w =
            Workload::get("s", "/")
                .connections(10)
                .slow_clients(0.3, Duration::from_millis(1), 8);
        let slow: Vec<usize> = (0..10).filter(|&i| w.is_slow(i)).collect();
        assert_eq!(slow.len(), 3, "{slow:?}");
        assert!(slow.windows(2).all(|p| p[1] - p[0] >= 3), "{slow:?}");
        assert!(!(0..10).any(|i| Workload::get("s", "/").connections(10).is_slow(i)));
    }

    #[test]
    fn the_request_carries_its_body_length_and_headers() {
        let w = Workload::from_toml(MIX, "x").expect("valid");
        let bytes = String::from_utf8(w.requests[1].to_bytes("h:1", true)).expect("ascii");
        assert_eq!(
            bytes,
            "POST /b HTTP/1.1\r\nHost: h:1\r\nUser-Agent: mpm-bench\r\nAccept: */*\r\n\
             Content-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        );
    }

    #[test]
    fn bad_values_are_one_line_naming_the_request() {
        for (text, says) in [
            (
                "[[request]]\npath = \"nope\"\n",
                "request 1 (GET nope): path",
            ),
            ("[[request]]\npath = \"/\"\nweight = 0\n", "weight 0"),
            (
                "[[request]]\npath = \"/\"\nexpect = [42]\n",
                "42 is not a status",
            ),
            (
                "[[request]]\npath = \"/\"\nmethod = \"G T\"\n",
                "method 'G T'",
            ),
            (
                "[[request]]\npath = \"/\"\nheaders = { X = \"a\\r\\nb\" }\n",
                "one line",
            ),
            (
                "[[request]]\npath = \"/\"\nheaders = { Content-Length = \"9\" }\n",
                "computed from the body",
            ),
            (
                "connections = 0\n[[request]]\npath = \"/\"\n",
                "connections 0",
            ),
            (
                "slow-clients = 2.0\n[[request]]\npath = \"/\"\n",
                "slow-clients 2",
            ),
            (
                "pipeline = 0\n[[request]]\npath = \"/\"\n",
                "pipeline 0: from 1 to 256",
            ),
            (
                "pipeline = 4\nkeepalive = false\n[[request]]\npath = \"/\"\n",
                "pipeline needs keepalive",
            ),
            (
                "h2-streams = 0\n[[request]]\npath = \"/\"\n",
                "h2-streams 0: from 1 to 1024",
            ),
            (
                "h2-streams = 4\npipeline = 4\n[[request]]\npath = \"/\"\n",
                "HTTP/2 keeps its connections and multiplexes",
            ),
            ("name = \"x\"\n", "no request"),
            (
                "[[request]]\npath = \"/\"\ncolour = 1\n",
                "unknown field `colour`",
            ),
        ] {
            let e = Workload::from_toml(text, "w").expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_spec_is_one_get_and_other_text_is_a_name() {
        let w = Workload::from_spec("get:/api/users/1")
            .expect("a spec")
            .expect("valid");
        assert_eq!(w.requests[0].label(), "GET /api/users/1");
        assert_eq!(w.name, "get:/api/users/1");
        assert!(Workload::from_spec("keepalive").is_none());
        assert!(Workload::from_spec("idle-100").is_none());
        assert!(Workload::from_spec("get:/a b").expect("a spec").is_err());
    }
}
