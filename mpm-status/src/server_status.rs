//! The status page, as httpd's `mod_status`: totals, a one-letter-per-slot
//! scoreboard, and what each worker is doing, read straight from the
//! [`Scoreboard`] that every serving process writes.
//!
//! `GET /server-status` answers an HTML page; with `json` in the query
//! (`/server-status?json`) the same as `application/json`:
//!
//! | field | meaning |
//! |---|---|
//! | `uptime_seconds` | since the scoreboard was made (the server started) |
//! | `draining` | the server is about to stop (`--drain-delay`); the page then answers 503 |
//! | `mpm` | the process model |
//! | `generation` | raised by each graceful restart |
//! | `total_requests`, `total_bytes`, `total_connections` | since start, over every process and generation; bytes are response bodies |
//! | `handed_over_connections` | connections a stopping generation passed to the next before they sent a byte (counted once in `total_connections`) |
//! | `requests_per_second` | `total_requests` over the uptime |
//! | `busy_workers`, `idle_workers`, `keepalive_workers` | workers serving a request, waiting for a connection, holding an idle keep-alive connection |
//! | `accept_waits`, `accept_wait_ms` | connections accepted after waiting for the accept (prefork) or listener (worker) mutex to be handed over while they were queued, and the time they waited; only where workers take turns under a mutex (absent under event, and prefork with `--accept-mutex none`) |
//! | `send_calls`, `send_would_block` | calls that wrote to client sockets (send, sendfile, writev), and those that found the socket full |
//! | `allocator`, `allocations`, `frees`, `bytes_allocated`, `live_bytes`, `live_bytes_peak` | the global allocator and what went through it; the peak is the sum of each worker's own high-water mark; the counts are absent (and `allocator` is `null`) when the program does not use mpm's allocator |
//! | `lock_contended`, `lock_wait_us` | for `--allocator locked` only: times its mutex was already held, and the time waited |
//! | `voluntary_ctxt_switches`, `involuntary_ctxt_switches` | summed from /proc over the serving processes' threads |
//! | `tls` | with TLS listeners: `handshakes_full`, `handshakes_resumed`, `handshakes_tls13`, `tickets_opened`, `session_cache_hits`, `session_cache_stores`, the failures by kind (`failed_plain_http`, `failed_unknown_name`, `failed_bad_message`, `failed_no_shared_parameters`, `failed_client_alert`, `failed_timeout`, `failed_closed_early`, `failed_other`) and their sum `handshakes_failed`, over every process and generation |
//! | `h2` | with HTTP/2 on (`--http2`, `--h2c`): `connections_open` (now), `connections_total`, `streams_total`, `streams_reset` (by the server: a malformed request, a body that failed), `streams_refused` (past `--h2-max-concurrent-streams`: RST_STREAM REFUSED_STREAM), and the GOAWAYs sent by cause, `goaway_flood`, `goaway_protocol_error` (a client's bad frames, or one that chose `h2` by ALPN and sent no preface), `goaway_stop` (the server stopping, idle connections included), over every process and generation |
//! | `workers` | one object per slot in use: `slot`, `pid`, `generation`, `state`, `requests`, `bytes`, `connections`, `last_request_age_ms` (`null` before the first request), `request_line` |
//!
//! Every figure is a total since the server started: a figure per request is
//! the difference of two readings divided by the requests between them
//! (what `mpm compare` does over each timed run), never a total over the
//! uptime, which would count start-up work as if requests had done it.
//! A figure that is not this server's is absent, not zero.
//!
//! A request is counted once its handler has answered, so a page never
//! counts the request that asked for it. Graceful restarts keep the
//! scoreboard; `mpm serve` makes a new one on a full restart (SIGHUP).
//!
//! `/server-status?format=prometheus` answers the same counters in
//! Prometheus's text format ([`prometheus`] lists them).
//!
//! Only loopback clients are answered unless the page is made remote
//! (`--status-remote on`): request lines name other clients' URLs.

use std::fmt::Write as _;
use std::io;
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use mpm_core::scoreboard::{Scoreboard, Slot, WorkerState};
use mpm_core::MpmKind;
use mpm_http::escape::html_escape_into;
use mpm_http::{HttpHandler, Request, Response};
use serde::ser::SerializeMap;
use serde::Serialize;

pub mod prometheus;

/// Counters a layer below HTTP (TLS) shows on the page: read at each
/// request, as (name, value) pairs.
pub type SectionCounters = std::sync::Arc<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// A layer's numbers, each a counter or a gauge ([`Value`]): read at each
/// request, as (name, value) pairs. For a section with a reading that goes
/// down as well as up (HTTP/2's connections open), which Prometheus must
/// see as a gauge.
pub type SectionValues = std::sync::Arc<dyn Fn() -> Vec<(&'static str, Value)> + Send + Sync>;

/// A layer's counters kept per labelled row (the reverse proxy's, per
/// upstream): read at each request.
pub type TableRows = std::sync::Arc<dyn Fn() -> Vec<TableRow> + Send + Sync>;

/// One row of a [`TableRows`] section: what names it, and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// What tells this row from the others (`route`, `upstream`): labels in
    /// Prometheus, fields in JSON, the first columns in HTML.
    pub labels: Vec<(&'static str, String)>,
    /// Its values, in the order shown: a counter (only ever grows, `_total`
    /// in Prometheus) or a gauge (a value now: health, idle connections).
    pub values: Vec<(&'static str, Value)>,
}

/// A row's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Only grows while the server runs.
    Counter(u64),
    /// A reading now.
    Gauge(u64),
}

impl Value {
    fn number(self) -> u64 {
        match self {
            Value::Counter(n) | Value::Gauge(n) => n,
        }
    }
}

/// The status page handler. Cheap to clone: it holds a reference to the
/// shared scoreboard and two settings.
#[derive(Clone)]
pub struct ServerStatus {
    scoreboard: &'static Scoreboard,
    mpm: MpmKind,
    remote: bool,
    sections: Vec<(&'static str, SectionValues)>,
    tables: Vec<(&'static str, TableRows)>,
}

impl std::fmt::Debug for ServerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerStatus")
            .field("mpm", &self.mpm)
            .field("remote", &self.remote)
            .finish()
    }
}

/// One reading of the scoreboard, taken once so that the JSON and HTML
/// renderings of a request agree with themselves.
struct Snapshot {
    now_ms: u64,
    uptime_ms: u64,
    generation: u32,
    totals: mpm_core::scoreboard::Totals,
    slots: &'static [Slot],
}

impl ServerStatus {
    /// A status page over `scoreboard`, for a server running `mpm`; with
    /// `remote` false only loopback clients are answered (others get 403).
    pub fn new(scoreboard: &'static Scoreboard, mpm: MpmKind, remote: bool) -> ServerStatus {
        ServerStatus {
            scoreboard,
            mpm,
            remote,
            sections: Vec::new(),
            tables: Vec::new(),
        }
    }

    /// Show a layer's counters too, under `name` (a JSON object of that
    /// name, an HTML table under that heading): TLS's handshakes.
    pub fn with_section(self, name: &'static str, counters: SectionCounters) -> ServerStatus {
        self.with_section_values(
            name,
            std::sync::Arc::new(move || {
                counters()
                    .into_iter()
                    .map(|(k, n)| (k, Value::Counter(n)))
                    .collect()
            }),
        )
    }

    /// Show a layer's numbers too, each a counter or a gauge, under `name`
    /// (as [`with_section`](Self::with_section)): HTTP/2's, whose
    /// connections open go down as well as up.
    pub fn with_section_values(
        mut self,
        name: &'static str,
        values: SectionValues,
    ) -> ServerStatus {
        self.sections.push((name, values));
        self
    }

    /// Show a layer's rows too, under `name`: a JSON array of that name, an
    /// HTML table, and in Prometheus one family per value, one sample per
    /// row with its labels (`mpm_proxy_requests_total{route="/",upstream="http://a"}`).
    pub fn with_table(mut self, name: &'static str, rows: TableRows) -> ServerStatus {
        self.tables.push((name, rows));
        self
    }

    /// Answer one request for the page: 403 to a client that may not see
    /// it, 405 for methods other than `GET` and `HEAD`, else the page (JSON
    /// when the query contains `json`, Prometheus's text format with
    /// `format=prometheus`).
    pub fn handle(&self, req: &Request<'_>) -> Response {
        if let Some(refused) = self.refuse(req) {
            return refused;
        }
        let snap = self.snapshot();
        if req.query_param("format").as_deref() == Some("prometheus") {
            return self.prometheus(&snap);
        }
        let json = req.query().is_some_and(|q| q.contains("json"));
        // A server about to stop fails health checks, so that a load
        // balancer sends it nothing new before it stops listening.
        let code = if self.scoreboard.is_draining() {
            503
        } else {
            200
        };
        let (content_type, body) = if json {
            ("application/json", self.render_json(&snap))
        } else {
            ("text/html; charset=utf-8", self.render_html(&snap))
        };
        Response::new(code)
            .header("Content-Type", content_type)
            // A snapshot is stale at once: no cache may keep it.
            .header("Cache-Control", "no-store")
            .body(body)
    }

    /// Answer a request for the metrics alone (the metrics path): the
    /// counters in Prometheus's text format, to the same clients as the
    /// page.
    pub fn metrics(&self, req: &Request<'_>) -> Response {
        if let Some(refused) = self.refuse(req) {
            return refused;
        }
        self.prometheus(&self.snapshot())
    }

    /// 403 for a client that may not see the page, 405 for a method other
    /// than `GET` and `HEAD`.
    fn refuse(&self, req: &Request<'_>) -> Option<Response> {
        if !self.remote && !is_loopback(req.peer_addr().ip()) {
            return Some(Response::error(403).header("Cache-Control", "no-store"));
        }
        if !matches!(req.method(), "GET" | "HEAD") {
            return Some(
                Response::method_not_allowed(req.method(), "GET, HEAD")
                    .header("Cache-Control", "no-store"),
            );
        }
        None
    }

    /// The counters for Prometheus. Always 200, draining included (the
    /// `mpm_draining` gauge says so): a scrape keeps its data while a load
    /// balancer's health check on the page fails.
    fn prometheus(&self, snap: &Snapshot) -> Response {
        Response::new(200)
            .header("Content-Type", prometheus::CONTENT_TYPE)
            .header("Cache-Control", "no-store")
            .body(self.render_prometheus(snap))
    }

    fn snapshot(&self) -> Snapshot {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let slots = self.scoreboard.slots();
        // The master may not record graceful restarts in the header; the
        // newest generation holding a slot says the same.
        let generation = slots
            .iter()
            .filter(|s| s.state() != WorkerState::Dead)
            .map(Slot::generation)
            .fold(self.scoreboard.generation(), u32::max);
        Snapshot {
            now_ms,
            uptime_ms: now_ms.saturating_sub(self.scoreboard.started_ms()),
            generation,
            totals: self.scoreboard.totals(),
            slots,
        }
    }
}

/// What the allocator and the scheduler cost, over the serving processes.
struct Costs {
    alloc: mpm_core::allocator::AllocTotals,
    voluntary: u64,
    involuntary: u64,
    /// Processes holding slots.
    processes: usize,
}

/// Allocation counters are every slot's (all processes) plus this
/// process's threads without a slot; context switches are summed from
/// /proc over the processes holding slots.
fn costs(snap: &Snapshot) -> Costs {
    let mut a = mpm_core::allocator::AllocTotals::default();
    for s in snap.slots {
        s.alloc_counters().add_to(&mut a);
    }
    mpm_core::allocator::unslotted().add_to(&mut a);
    let mut pids: Vec<i32> = snap
        .slots
        .iter()
        .filter(|s| s.state() != WorkerState::Dead)
        .map(Slot::pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let processes = pids.len();
    let (mut voluntary, mut involuntary) = (0u64, 0u64);
    // Each thread counts its own switches: sum the tasks of each process.
    let tasks = pids.into_iter().flat_map(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|task| task.path().join("status"))
    });
    for status in tasks {
        let Ok(text) = std::fs::read_to_string(status) else {
            continue;
        };
        for line in text.lines() {
            let value = |l: &str| l.split_whitespace().nth(1).and_then(|v| v.parse().ok());
            if line.starts_with("voluntary_ctxt_switches:") {
                voluntary += value(line).unwrap_or(0);
            } else if line.starts_with("nonvoluntary_ctxt_switches:") {
                involuntary += value(line).unwrap_or(0);
            }
        }
    }
    Costs {
        alloc: a,
        voluntary,
        involuntary,
        processes,
    }
}

impl ServerStatus {
    /// The page as JSON, built with serde_json from [`Document`]: the
    /// fields in the order the table above lists them, compact, on one
    /// line with a newline after it.
    fn render_json(&self, snap: &Snapshot) -> String {
        let t = &snap.totals;
        let Costs {
            alloc: a,
            voluntary,
            involuntary,
            ..
        } = costs(snap);
        let allocator = mpm_core::allocator::active();
        let doc = Document {
            uptime_seconds: decimals(snap.uptime_ms as f64 / 1000.0, 1e3),
            mpm: self.mpm.name(),
            draining: self.scoreboard.is_draining(),
            generation: snap.generation,
            total_requests: t.requests,
            total_bytes: t.bytes,
            total_connections: t.connections,
            handed_over_connections: t.handed_over,
            requests_per_second: decimals(per_second(t.requests, snap.uptime_ms), 1e3),
            busy_workers: t.busy,
            idle_workers: t.idle,
            keepalive_workers: t.keepalive,
            send_calls: t.sends,
            send_would_block: t.send_would_block,
            accept_waits: t.accept_mutex.then_some(t.accept_waits),
            accept_wait_ms: t
                .accept_mutex
                .then(|| decimals(t.accept_wait_ns as f64 / 1e6, 1e3)),
            allocator: allocator.map(|kind| kind.name()),
            allocations: allocator.map(|kind| Allocations {
                allocations: a.allocations,
                frees: a.frees,
                bytes_allocated: a.bytes_allocated,
                live_bytes: a.bytes_allocated.saturating_sub(a.bytes_freed),
                live_bytes_peak: a.live_bytes_peak,
                // Only the `locked` allocator has a lock to wait for.
                lock: (kind == mpm_core::allocator::AllocatorKind::Locked).then(|| LockWaits {
                    lock_contended: a.lock_contended,
                    lock_wait_us: decimals(a.lock_wait_ns as f64 / 1e3, 1e1),
                }),
            }),
            voluntary_ctxt_switches: voluntary,
            involuntary_ctxt_switches: involuntary,
            sections: Sections(&self.sections),
            tables: Tables(&self.tables),
            workers: snap
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state() != WorkerState::Dead)
                .map(|(i, s)| Worker {
                    slot: i,
                    pid: s.pid(),
                    generation: s.generation(),
                    state: s.state().name(),
                    requests: s.requests(),
                    bytes: s.bytes(),
                    connections: s.connections(),
                    last_request_age_ms: last_request_age_ms(s, snap.now_ms),
                    request_line: s.request_line(),
                })
                .collect(),
        };
        let mut out = Vec::with_capacity(256 + 200 * snap.slots.len());
        // Into a Vec, with string keys only: serializing cannot fail, and
        // serde_json writes UTF-8.
        let _ = doc.serialize(&mut serde_json::Serializer::with_formatter(
            &mut out, ScriptSafe,
        ));
        out.push(b'\n');
        String::from_utf8(out).unwrap_or_default()
    }

    fn render_html(&self, snap: &Snapshot) -> String {
        let t = &snap.totals;
        let mut out = String::with_capacity(2048 + 300 * snap.slots.len());
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>mpm server status</title>\
             <style>body{{font-family:sans-serif}}td,th{{padding:0 .6em;text-align:left}}\
             pre{{font-size:1.1em}}</style></head><body>\n\
             <h1>mpm server status</h1>\n<table>\n\
             <tr><th>MPM</th><td>{}{}</td></tr>\n\
             <tr><th>Uptime</th><td>{:.3} s</td></tr>\n\
             <tr><th>Generation</th><td>{}</td></tr>\n\
             <tr><th>Total requests</th><td>{}</td></tr>\n\
             <tr><th>Total bytes</th><td>{}</td></tr>\n\
             <tr><th>Total connections</th><td>{}</td></tr>\n\
             <tr><th>Requests per second</th><td>{:.3}</td></tr>\n\
             <tr><th>Workers</th><td>{} busy, {} idle, {} keep-alive</td></tr>\n",
            self.mpm.name(),
            if self.scoreboard.is_draining() {
                " (draining: about to stop)"
            } else {
                ""
            },
            snap.uptime_ms as f64 / 1000.0,
            snap.generation,
            t.requests,
            t.bytes,
            t.connections,
            per_second(t.requests, snap.uptime_ms),
            t.busy,
            t.idle,
            t.keepalive,
        );
        if t.accept_mutex {
            let _ = writeln!(
                out,
                "<tr><th>Accept mutex waits</th><td>{} connections queued for a hand-over \
                 ({:.3} ms)</td></tr>",
                t.accept_waits,
                t.accept_wait_ns as f64 / 1e6,
            );
        }
        out.push_str("</table>\n");
        for (name, counters) in &self.sections {
            let _ = write!(
                out,
                "<h2>{}</h2>\n<table class=\"{name}\">\n",
                name.to_uppercase()
            );
            for (key, value) in counters() {
                let _ = writeln!(
                    out,
                    "<tr><th>{}</th><td>{}</td></tr>",
                    key.replace('_', " "),
                    value.number()
                );
            }
            out.push_str("</table>\n");
        }
        for (name, rows) in &self.tables {
            let rows = rows();
            let _ = write!(
                out,
                "<h2>{}</h2>\n<table class=\"{name}\">\n",
                name.to_uppercase()
            );
            if let Some(first) = rows.first() {
                out.push_str("<tr>");
                for (k, _) in &first.labels {
                    let _ = write!(out, "<th>{}</th>", k.replace('_', " "));
                }
                for (k, _) in &first.values {
                    let _ = write!(out, "<th>{}</th>", k.replace('_', " "));
                }
                out.push_str("</tr>\n");
            }
            for row in &rows {
                out.push_str("<tr>");
                for (_, v) in &row.labels {
                    out.push_str("<td>");
                    mpm_http::escape::html_escape_into(&mut out, v);
                    out.push_str("</td>");
                }
                for (_, v) in &row.values {
                    let _ = write!(out, "<td>{}</td>", v.number());
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</table>\n");
        }
        out.push_str("<h2>Scoreboard</h2>\n<pre class=\"scoreboard\">");
        for (i, s) in snap.slots.iter().enumerate() {
            // mod_status wraps its key line every 64 slots.
            if i > 0 && i % 64 == 0 {
                out.push('\n');
            }
            out.push(s.state().key());
        }
        out.push_str(
            "</pre>\n<p>Scoreboard Key:<br>\n\
             \"<b><code>_</code></b>\" Waiting for Connection,\n\
             \"<b><code>S</code></b>\" Starting up,\n\
             \"<b><code>R</code></b>\" Reading Request,<br>\n\
             \"<b><code>W</code></b>\" Sending Reply,\n\
             \"<b><code>K</code></b>\" Keepalive (read),\n\
             \"<b><code>C</code></b>\" Closing connection,<br>\n\
             \"<b><code>G</code></b>\" Gracefully finishing,\n\
             \"<b><code>.</code></b>\" Open slot with no current process</p>\n",
        );
        out.push_str(
            "<h2>Workers</h2>\n<table class=\"workers\">\n<tr><th>Slot</th><th>PID</th>\
             <th>Gen</th><th>State</th><th>Requests</th><th>Bytes</th><th>Conns</th>\
             <th>Last request</th><th>Request line</th></tr>\n",
        );
        for (i, s) in snap.slots.iter().enumerate() {
            let state = s.state();
            if state == WorkerState::Dead {
                continue;
            }
            let age = match last_request_age_ms(s, snap.now_ms) {
                Some(ms) => format!("{ms} ms ago"),
                None => "-".to_string(),
            };
            let _ = write!(
                out,
                "<tr><td>{i}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{age}</td><td><code>",
                s.pid(),
                s.generation(),
                state.key(),
                state.name(),
                s.requests(),
                s.bytes(),
                s.connections(),
            );
            html_escape_into(&mut out, &s.request_line());
            out.push_str("</code></td></tr>\n");
        }
        out.push_str("</table>\n</body></html>\n");
        out
    }
}

impl HttpHandler for ServerStatus {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        ServerStatus::handle(self, request)
    }

    fn answers_without_blocking(&self, _request: &Request<'_>) -> bool {
        true // everything is in memory
    }
}

/// Loopback, counting `::ffff:127.0.0.1` (an IPv4 client on a dual-stack
/// IPv6 listener) as loopback too.
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

fn per_second(count: u64, ms: u64) -> f64 {
    // Less than a millisecond counts as one: a fast client can ask within it.
    count as f64 * 1000.0 / ms.max(1) as f64
}

fn last_request_age_ms(slot: &Slot, now_ms: u64) -> Option<u64> {
    match slot.last_request_ms() {
        0 => None,
        at => Some(now_ms.saturating_sub(at)),
    }
}

/// `x` rounded to the decimals of `scale` (1e3: three), as the page has
/// always shown its fractions.
fn decimals(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

/// The JSON page (see the table in this module's documentation). A figure
/// that is not this server's is absent: the `Option`s skipped when `None`.
#[derive(Serialize)]
struct Document<'a> {
    uptime_seconds: f64,
    mpm: &'static str,
    draining: bool,
    generation: u32,
    total_requests: u64,
    total_bytes: u64,
    total_connections: u64,
    handed_over_connections: u64,
    requests_per_second: f64,
    busy_workers: u64,
    idle_workers: u64,
    keepalive_workers: u64,
    send_calls: u64,
    send_would_block: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    accept_waits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    accept_wait_ms: Option<f64>,
    /// `null` when the program does not use mpm's allocator.
    allocator: Option<&'static str>,
    #[serde(flatten)]
    allocations: Option<Allocations>,
    voluntary_ctxt_switches: u64,
    involuntary_ctxt_switches: u64,
    /// Each layer's section (`tls`), as an object of its name.
    #[serde(flatten)]
    sections: Sections<'a>,
    /// Each layer's table (`proxy`), as an array of its name.
    #[serde(flatten)]
    tables: Tables<'a>,
    workers: Vec<Worker>,
}

/// What went through mpm's allocator.
#[derive(Serialize)]
struct Allocations {
    allocations: u64,
    frees: u64,
    bytes_allocated: u64,
    live_bytes: u64,
    live_bytes_peak: u64,
    #[serde(flatten)]
    lock: Option<LockWaits>,
}

/// The `locked` allocator's waits.
#[derive(Serialize)]
struct LockWaits {
    lock_contended: u64,
    lock_wait_us: f64,
}

/// One slot in use.
#[derive(Serialize)]
struct Worker {
    slot: usize,
    pid: i32,
    generation: u32,
    state: &'static str,
    requests: u64,
    bytes: u64,
    connections: u64,
    /// `null` before the slot's first request.
    last_request_age_ms: Option<u64>,
    request_line: String,
}

/// The layers' sections, each read now: `"tls":{"handshakes_full":3,...}`.
struct Sections<'a>(&'a [(&'static str, SectionValues)]);

impl Serialize for Sections<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, counters) in self.0 {
            map.serialize_entry(name, &Section(counters()))?;
        }
        map.end()
    }
}

/// The layers' tables, each read now: `"proxy":[{"route":"/",...,"requests":3}]`.
struct Tables<'a>(&'a [(&'static str, TableRows)]);

impl Serialize for Tables<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, rows) in self.0 {
            let rows: Vec<Row> = rows().into_iter().map(Row).collect();
            map.serialize_entry(name, &rows)?;
        }
        map.end()
    }
}

/// One row: its labels, then its values.
struct Row(TableRow);

impl Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.labels.len() + self.0.values.len()))?;
        for (k, v) in &self.0.labels {
            map.serialize_entry(k, v)?;
        }
        for (k, v) in &self.0.values {
            map.serialize_entry(k, &v.number())?;
        }
        map.end()
    }
}

/// One section's counters, in the order the layer gives them.
struct Section(Vec<(&'static str, Value)>);

impl Serialize for Section {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v.number())))
    }
}

/// serde_json's compact output, with `<` and DEL escaped in strings too
/// (`\u003c`, `\u007f`), as the page always had them: request lines are
/// the clients', and so the JSON is safe to paste into a `<script>`.
struct ScriptSafe;

impl serde_json::ser::Formatter for ScriptSafe {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(['<', '\u{7f}']) {
            writer.write_all(&rest.as_bytes()[..at])?;
            write!(writer, "\\u{:04x}", rest.as_bytes()[at])?;
            rest = &rest[at + 1..];
        }
        writer.write_all(rest.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpm_http::{Body, Version};
    use std::net::SocketAddr;

    fn body(r: &Response) -> String {
        match r.body_ref() {
            Body::Bytes(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("expected bytes, got {other:?}"),
        }
    }

    /// A scoreboard of two processes of two slots: slot 0 writing a
    /// request with characters that need escaping, slot 1 idle, the rest
    /// never used.
    fn board() -> &'static Scoreboard {
        let sb = Scoreboard::create(2, 2).unwrap();
        let busy = &sb.slots()[0];
        busy.claim(3);
        busy.mark_accept_mutex();
        busy.set_state(WorkerState::Writing);
        busy.record_accept(0);
        busy.record_request(b"GET /a\"b\\c<script>&d HTTP/1.1", 120);
        let idle = &sb.slots()[1];
        idle.claim(3);
        idle.set_state(WorkerState::Idle);
        sb
    }

    fn get(status: &ServerStatus, target: &str) -> Response {
        status.handle(&Request::for_test("GET", target, Version::Http11, &[], b""))
    }

    #[test]
    fn a_draining_server_fails_health_checks_with_503() {
        let sb = board();
        let status = ServerStatus::new(sb, MpmKind::Worker, false);
        assert!(body(&get(&status, "/server-status?json")).contains("\"draining\":false"));
        sb.set_draining();
        let r = get(&status, "/server-status?json");
        assert_eq!(r.status(), 503);
        assert!(body(&r).contains("\"draining\":true"));
        assert_eq!(get(&status, "/server-status").status(), 503);
    }

    #[test]
    fn json_has_every_field_and_escapes_request_lines() {
        let status = ServerStatus::new(board(), MpmKind::Worker, false);
        let r = get(&status, "/server-status?json");
        assert_eq!(r.status(), 200);
        assert_eq!(r.header_value("content-type"), Some("application/json"));
        assert_eq!(r.header_value("cache-control"), Some("no-store"));
        let text = body(&r);
        for field in [
            "uptime_seconds",
            "requests_per_second",
            "total_connections",
            "handed_over_connections",
            "keepalive_workers",
            "accept_waits",
            "accept_wait_ms",
            "send_calls",
            "send_would_block",
            "last_request_age_ms",
        ] {
            assert!(text.contains(&format!("\"{field}\":")), "{field}: {text}");
        }
        assert!(text.contains("\"mpm\":\"worker\""), "{text}");
        assert!(text.contains("\"generation\":3,"), "{text}");
        assert!(text.contains("\"total_requests\":1,"), "{text}");
        assert!(text.contains("\"total_bytes\":120,"), "{text}");
        assert!(
            text.contains("\"busy_workers\":1,\"idle_workers\":1,"),
            "{text}"
        );
        // Two slots in use; the never-used ones are left out.
        assert_eq!(text.matches("\"slot\":").count(), 2, "{text}");
        assert!(text.contains("\"state\":\"writing\""), "{text}");
        assert!(text.contains("\"state\":\"idle\""), "{text}");
        // The idle slot never answered a request.
        assert!(text.contains("\"last_request_age_ms\":null"), "{text}");
        assert!(
            text.contains(r#""request_line":"GET /a\"b\\c\u003cscript>&d HTTP/1.1""#),
            "{text}"
        );
        let pid = std::process::id();
        assert!(text.contains(&format!("\"pid\":{pid},")), "{text}");
    }

    #[test]
    fn json_is_one_document_in_the_documented_order_with_each_layers_section() {
        let status = ServerStatus::new(board(), MpmKind::Worker, false).with_section(
            "tls",
            std::sync::Arc::new(|| vec![("handshakes_full", 3), ("failed_timeout", 1)]),
        );
        let text = body(&get(&status, "/server-status?json"));
        assert!(text.ends_with("]}\n") && !text.contains(": "), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["tls"]["handshakes_full"], 3, "{text}");
        assert_eq!(v["tls"]["failed_timeout"], 1, "{text}");
        assert_eq!(v["workers"].as_array().map(Vec::len), Some(2), "{text}");
        assert_eq!(
            v["workers"][0]["request_line"], "GET /a\"b\\c<script>&d HTTP/1.1",
            "{text}"
        );
        assert!(v["uptime_seconds"].as_f64().is_some(), "{text}");
        let at = |key: &str| {
            text.find(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("no {key}: {text}"))
        };
        let order = [
            "uptime_seconds",
            "mpm",
            "draining",
            "generation",
            "total_requests",
            "total_bytes",
            "total_connections",
            "handed_over_connections",
            "requests_per_second",
            "busy_workers",
            "idle_workers",
            "keepalive_workers",
            "send_calls",
            "send_would_block",
            "accept_waits",
            "accept_wait_ms",
            "allocator",
            "voluntary_ctxt_switches",
            "involuntary_ctxt_switches",
            "tls",
            "workers",
        ];
        for pair in order.windows(2) {
            assert!(
                at(pair[0]) < at(pair[1]),
                "{} after {}: {text}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn figures_that_are_not_the_servers_are_absent_not_zero() {
        // Workers that take no turns (event) and a program without mpm's
        // allocator: no accept waits, no allocation or lock counts.
        let sb = Scoreboard::create(1, 1).unwrap();
        let s = &sb.slots()[0];
        s.claim(1);
        s.record_accept(0);
        s.record_request(b"GET / HTTP/1.1", 1);
        let status = ServerStatus::new(sb, MpmKind::Event, false);
        let text = body(&get(&status, "/server-status?json"));
        for absent in [
            "accept_wait",
            "lock_contended",
            "allocations",
            "_per_request",
        ] {
            assert!(!text.contains(absent), "{absent}: {text}");
        }
        assert!(text.contains("\"allocator\":null"), "{text}");
        let html = body(&get(&status, "/server-status"));
        assert!(!html.contains("Accept mutex"), "{html}");
        let with_turns = ServerStatus::new(board(), MpmKind::Worker, false);
        let html = body(&get(&with_turns, "/server-status"));
        assert!(html.contains("Accept mutex waits"), "{html}");
    }

    #[test]
    fn html_has_the_key_line_and_escapes_request_lines() {
        let status = ServerStatus::new(board(), MpmKind::Event, false);
        let r = get(&status, "/server-status");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.header_value("content-type"),
            Some("text/html; charset=utf-8")
        );
        let text = body(&r);
        assert!(
            text.contains("<pre class=\"scoreboard\">W_..</pre>"),
            "{text}"
        );
        assert!(text.contains("Scoreboard Key"), "{text}");
        assert!(
            text.contains("GET /a&quot;b\\c&lt;script&gt;&amp;d HTTP/1.1"),
            "{text}"
        );
        assert!(!text.contains("<script>"), "{text}");
        assert!(text.contains("<td>event</td>"), "{text}");
    }

    #[test]
    fn only_loopback_clients_unless_remote() {
        let sb = board();
        let req = |peer: &str| {
            let peer: SocketAddr = peer.parse().unwrap();
            ServerStatus::new(sb, MpmKind::Worker, false)
                .handle(
                    &Request::for_test("GET", "/server-status", Version::Http11, &[], b"")
                        .with_peer(peer),
                )
                .status()
        };
        assert_eq!(req("192.0.2.7:5000"), 403);
        assert_eq!(req("[2001:db8::1]:5000"), 403);
        assert_eq!(req("[::ffff:192.0.2.7]:5000"), 403);
        assert_eq!(req("127.0.0.1:5000"), 200);
        assert_eq!(req("[::1]:5000"), 200);
        assert_eq!(req("[::ffff:127.0.0.1]:5000"), 200);
        let remote = ServerStatus::new(sb, MpmKind::Worker, true);
        let r = remote.handle(
            &Request::for_test("GET", "/server-status", Version::Http11, &[], b"")
                .with_peer("192.0.2.7:5000".parse().unwrap()),
        );
        assert_eq!(r.status(), 200);
    }

    #[test]
    fn other_methods_get_405_with_allow() {
        let status = ServerStatus::new(board(), MpmKind::Worker, false);
        let r = status.handle(&Request::for_test(
            "POST",
            "/server-status",
            Version::Http11,
            &[],
            b"x",
        ));
        assert_eq!(r.status(), 405);
        assert_eq!(r.header_value("allow"), Some("GET, HEAD"));
        let head = status.handle(&Request::for_test(
            "HEAD",
            "/server-status?json",
            Version::Http11,
            &[],
            b"",
        ));
        assert_eq!(head.status(), 200);
        assert!(status.answers_without_blocking(&Request::for_test(
            "GET",
            "/server-status",
            Version::Http11,
            &[],
            b""
        )));
    }

    #[test]
    fn a_layers_counters_are_prometheus_counters_too() {
        let status = ServerStatus::new(board(), MpmKind::Event, false).with_section(
            "tls",
            std::sync::Arc::new(|| vec![("handshakes_full", 3), ("failed_timeout", 1)]),
        );
        let text = body(&get(&status, "/server-status?format=prometheus"));
        assert!(
            text.contains(
                "# TYPE mpm_tls_handshakes_full_total counter\nmpm_tls_handshakes_full_total 3\n"
            ),
            "{text}"
        );
        assert!(text.contains("mpm_tls_failed_timeout_total 1\n"), "{text}");
        assert!(
            text.contains("# HELP mpm_tls_failed_timeout_total "),
            "{text}"
        );
    }

    #[test]
    fn a_layers_gauge_is_a_prometheus_gauge_and_a_total_is_said_once() {
        let status = ServerStatus::new(board(), MpmKind::Event, false).with_section_values(
            "h2",
            std::sync::Arc::new(|| {
                vec![
                    ("connections_open", Value::Gauge(2)),
                    ("connections_total", Value::Counter(5)),
                    ("streams_refused", Value::Counter(1)),
                ]
            }),
        );
        let text = body(&get(&status, "/server-status?format=prometheus"));
        assert!(
            text.contains("# TYPE mpm_h2_connections_open gauge\nmpm_h2_connections_open 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE mpm_h2_connections_total counter\nmpm_h2_connections_total 5\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE mpm_h2_streams_refused_total counter\n"),
            "{text}"
        );
        let json = body(&get(&status, "/server-status?json"));
        assert!(
            json.contains("\"h2\":{\"connections_open\":2,\"connections_total\":5,"),
            "{json}"
        );
    }

    #[test]
    fn a_layers_table_is_labelled_rows_in_every_format() {
        let status = ServerStatus::new(board(), MpmKind::Event, false).with_table(
            "proxy",
            std::sync::Arc::new(|| {
                ["http://a:1", "http://b\"<2"]
                    .iter()
                    .enumerate()
                    .map(|(i, u)| TableRow {
                        labels: vec![("route", "/api/".into()), ("upstream", (*u).into())],
                        values: vec![
                            ("requests", Value::Counter(10 + i as u64)),
                            ("up", Value::Gauge(1 - i as u64)),
                        ],
                    })
                    .collect()
            }),
        );
        let text = body(&get(&status, "/server-status?format=prometheus"));
        assert!(
            text.contains("# TYPE mpm_proxy_requests_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("mpm_proxy_requests_total{route=\"/api/\",upstream=\"http://a:1\"} 10\n"),
            "{text}"
        );
        assert!(
            text.contains("mpm_proxy_up{route=\"/api/\",upstream=\"http://b\\\"<2\"} 0\n"),
            "{text}"
        );
        let json = body(&get(&status, "/server-status?json"));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["proxy"][1]["requests"], 11);
        assert_eq!(v["proxy"][0]["upstream"], "http://a:1");
        let html = body(&get(&status, "/server-status"));
        assert!(html.contains("<td>http://b&quot;&lt;2</td>"), "{html}");
    }

    #[test]
    fn prometheus_format_has_help_and_type_for_every_sample() {
        let sb = board();
        sb.slots()[0].record_status(200);
        sb.slots()[1].record_status(404);
        let status = ServerStatus::new(sb, MpmKind::Prefork, false);
        let r = get(&status, "/server-status?format=prometheus");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.header_value("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let text = body(&r);
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(matches!(kind, "gauge" | "counter"), "{line}");
                assert!(text.contains(&format!("# HELP {name} ")), "{name}");
                assert!(typed.insert(name.to_string()), "{name} typed twice");
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(typed.contains(name), "{name} has no TYPE before it");
            }
        }
        assert!(text.contains("mpm_info{mpm=\"prefork\","), "{text}");
        assert!(text.contains("mpm_requests_total 1\n"), "{text}");
        assert!(
            text.contains("mpm_responses_total{class=\"2xx\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("mpm_responses_total{class=\"4xx\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("mpm_workers{state=\"busy\"} 1\n"), "{text}");
        // The metrics path answers the same, to the same clients.
        let m = status.metrics(&Request::for_test(
            "GET",
            "/metrics",
            Version::Http11,
            &[],
            b"",
        ));
        assert!(body(&m).starts_with("# HELP mpm_info"));
        let far = status.metrics(
            &Request::for_test("GET", "/metrics", Version::Http11, &[], b"")
                .with_peer("192.0.2.7:5000".parse().unwrap()),
        );
        assert_eq!(far.status(), 403);
        // Draining: the page fails health checks, the scrape still works.
        sb.set_draining();
        assert_eq!(
            get(&status, "/server-status?format=prometheus").status(),
            200
        );
        assert!(
            body(&get(&status, "/server-status?format=prometheus")).contains("mpm_draining 1\n")
        );
    }
}
