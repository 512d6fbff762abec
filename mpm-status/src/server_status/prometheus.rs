//! The status page's counters in Prometheus's text exposition format
//! (version 0.0.4): `/server-status?format=prometheus`, or the metrics path.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `mpm_info{mpm,allocator,version}` | gauge | always 1: what runs |
//! | `mpm_start_time_seconds`, `mpm_uptime_seconds` | gauge | when the server started (Unix time), and since |
//! | `mpm_generation` | gauge | raised by each graceful restart |
//! | `mpm_draining` | gauge | 1 while a stopping server drains (`--drain-delay`) |
//! | `mpm_processes` | gauge | serving processes (holding scoreboard slots) |
//! | `mpm_worker_slots` | gauge | scoreboard slots: the most workers there can be |
//! | `mpm_workers{state}` | gauge | workers `busy` (serving a request), `idle` (waiting for a connection), `keepalive` (holding an idle connection) |
//! | `mpm_requests_total` | counter | requests answered by the handlers |
//! | `mpm_responses_total{class}` | counter | responses by status class, `1xx` to `5xx`, the HTTP layer's own (400, 408, ...) included |
//! | `mpm_response_bytes_total` | counter | response body bytes |
//! | `mpm_connections_total` | counter | connections accepted |
//! | `mpm_accept_waits_total`, `mpm_accept_wait_seconds_total` | counter | accepts after a turn at the accept (prefork) or listener (worker) mutex that a queued connection waited for, and the time it waited; only where workers take turns under a mutex |
//! | `mpm_sends_total`, `mpm_sends_would_block_total` | counter | writes to client sockets, and those that found the socket full |
//! | `mpm_allocations_total`, `mpm_frees_total`, `mpm_allocated_bytes_total` | counter | what went through the global allocator, when it is mpm's |
//! | `mpm_live_bytes`, `mpm_live_bytes_peak` | gauge | bytes allocated and not freed; the sum of each worker's high-water mark |
//! | `mpm_allocator_lock_contended_total`, `mpm_allocator_lock_wait_seconds_total` | counter | `--allocator locked` only: times its mutex was held, and the time waited |
//!
//! As on the JSON page, a figure that does not apply to the server is
//! absent rather than zero.
//! | `mpm_context_switches_total{kind}` | counter | `voluntary` and `involuntary`, summed from /proc over the serving processes' threads |
//! | `mpm_tls_*_total` | counter | with TLS listeners: each TLS counter of the status page (`mpm_tls_handshakes_full_total`, `mpm_tls_handshakes_resumed_total`, `mpm_tls_failed_timeout_total`, ...; `mpm_tls_handshakes_failed_total` sums the failures) |
//! | `mpm_h2_connections_open` | gauge | with HTTP/2 on: HTTP/2 connections open now |
//! | `mpm_h2_*_total` | counter | with HTTP/2 on: the rest of the status page's `h2` section (`mpm_h2_connections_total`, `mpm_h2_streams_total`, `mpm_h2_streams_reset_total`, `mpm_h2_streams_refused_total`, `mpm_h2_goaway_stop_total`, ...) |
//!
//! Counters count since the server started, over every process and
//! generation (a full restart by SIGHUP starts them again, which
//! Prometheus's `rate()` treats as a counter reset).

use std::fmt::{Display, Write as _};

use super::{costs, ServerStatus, Snapshot};

/// The `Content-Type` of the text format.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A text exposition being written.
struct Exposition(String);

impl Exposition {
    /// Start a metric family with its HELP and TYPE lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = write!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    /// One sample, with labels whose values need no escaping (fixed names).
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{label}=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.0.push_str("\\\\"),
                        '"' => self.0.push_str("\\\""),
                        '\n' => self.0.push_str("\\n"),
                        c => self.0.push(c),
                    }
                }
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    /// A family of one sample without labels.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

impl ServerStatus {
    pub(super) fn render_prometheus(&self, snap: &Snapshot) -> String {
        let t = &snap.totals;
        let c = costs(snap);
        let a = &c.alloc;
        let mut e = Exposition(String::with_capacity(4096));
        let allocator = mpm_core::allocator::active().map_or("unknown", |k| k.name());
        e.family(
            "mpm_info",
            "gauge",
            "The process model, allocator and version; always 1.",
        );
        e.sample(
            "mpm_info",
            &[
                ("mpm", self.mpm.name()),
                ("allocator", allocator),
                ("version", env!("CARGO_PKG_VERSION")),
            ],
            1,
        );
        e.single(
            "mpm_start_time_seconds",
            "gauge",
            "When the server started, in seconds since the Unix epoch.",
            self.scoreboard.started_ms() as f64 / 1000.0,
        );
        e.single(
            "mpm_uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            snap.uptime_ms as f64 / 1000.0,
        );
        e.single(
            "mpm_generation",
            "gauge",
            "The generation of serving processes, raised by each graceful restart.",
            snap.generation,
        );
        e.single(
            "mpm_draining",
            "gauge",
            "1 while a stopping server drains before it stops listening.",
            u8::from(self.scoreboard.is_draining()),
        );
        e.single("mpm_processes", "gauge", "Serving processes.", c.processes);
        e.single(
            "mpm_worker_slots",
            "gauge",
            "Scoreboard slots: the most workers there can be.",
            snap.slots.len(),
        );
        e.family(
            "mpm_workers",
            "gauge",
            "Workers by state: busy serving a request, idle waiting for a connection, \
             keepalive holding an idle connection.",
        );
        for (state, n) in [
            ("busy", t.busy),
            ("idle", t.idle),
            ("keepalive", t.keepalive),
        ] {
            e.sample("mpm_workers", &[("state", state)], n);
        }
        e.single(
            "mpm_requests_total",
            "counter",
            "Requests answered by the handlers.",
            t.requests,
        );
        e.family(
            "mpm_responses_total",
            "counter",
            "Responses by status class, the HTTP layer's own error answers included.",
        );
        for (class, n) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().zip(t.responses) {
            e.sample("mpm_responses_total", &[("class", class)], n);
        }
        let counters: [(&str, &str, u64); 4] = [
            ("mpm_response_bytes_total", "Response body bytes.", t.bytes),
            (
                "mpm_connections_total",
                "Connections accepted.",
                t.connections,
            ),
            (
                "mpm_sends_total",
                "Writes to client sockets (send, sendfile, writev).",
                t.sends,
            ),
            (
                "mpm_sends_would_block_total",
                "Writes to client sockets that found the socket full.",
                t.send_would_block,
            ),
        ];
        for (name, help, value) in counters {
            e.single(name, "counter", help, value);
        }
        // A figure that does not apply to this server is absent, not zero:
        // accept waits where workers take turns under a mutex, allocator
        // figures where the allocator is mpm's, lock waits for `locked`.
        if t.accept_mutex {
            e.single(
                "mpm_accept_waits_total",
                "counter",
                "Accepts after a turn at the accept or listener mutex that a queued connection \
                 waited for.",
                t.accept_waits,
            );
            e.single(
                "mpm_accept_wait_seconds_total",
                "counter",
                "Time queued connections waited for the turn at the mutex.",
                t.accept_wait_ns as f64 / 1e9,
            );
        }
        if let Some(kind) = mpm_core::allocator::active() {
            let counters: [(&str, &str, u64); 3] = [
                (
                    "mpm_allocations_total",
                    "Allocations through the global allocator.",
                    a.allocations,
                ),
                (
                    "mpm_frees_total",
                    "Frees through the global allocator.",
                    a.frees,
                ),
                (
                    "mpm_allocated_bytes_total",
                    "Bytes allocated through the global allocator.",
                    a.bytes_allocated,
                ),
            ];
            for (name, help, value) in counters {
                e.single(name, "counter", help, value);
            }
            e.single(
                "mpm_live_bytes",
                "gauge",
                "Bytes allocated and not yet freed.",
                a.bytes_allocated.saturating_sub(a.bytes_freed),
            );
            e.single(
                "mpm_live_bytes_peak",
                "gauge",
                "The sum of each worker's high-water mark of live bytes.",
                a.live_bytes_peak,
            );
            if kind == mpm_core::allocator::AllocatorKind::Locked {
                e.single(
                    "mpm_allocator_lock_contended_total",
                    "counter",
                    "Times the locked allocator's mutex was already held.",
                    a.lock_contended,
                );
                e.single(
                    "mpm_allocator_lock_wait_seconds_total",
                    "counter",
                    "Time spent waiting for the locked allocator's mutex.",
                    a.lock_wait_ns as f64 / 1e9,
                );
            }
        }
        e.family(
            "mpm_context_switches_total",
            "counter",
            "Context switches of the serving processes' threads.",
        );
        e.sample(
            "mpm_context_switches_total",
            &[("kind", "voluntary")],
            c.voluntary,
        );
        e.sample(
            "mpm_context_switches_total",
            &[("kind", "involuntary")],
            c.involuntary,
        );
        // The layers' own counters (TLS: handshakes, resumptions, failures
        // by kind), as the page lists them.
        for (section, values) in &self.sections {
            for (key, value) in values() {
                let (name, kind) = match value {
                    // `_total` once, for a key that already says it.
                    super::Value::Counter(_) if key.ends_with("_total") => {
                        (format!("mpm_{section}_{key}"), "counter")
                    }
                    super::Value::Counter(_) => (format!("mpm_{section}_{key}_total"), "counter"),
                    super::Value::Gauge(_) => (format!("mpm_{section}_{key}"), "gauge"),
                };
                let help = format!(
                    "The {section} layer's {} (the status page's {section}_{key}).",
                    key.replace('_', " ")
                );
                e.single(&name, kind, &help, value.number());
            }
        }
        // The layers' tables (the proxy's upstreams): a family per value,
        // a sample per row, labelled as the row is.
        for (table, rows) in &self.tables {
            let rows = rows();
            let Some(first) = rows.first() else { continue };
            for (i, (key, kind)) in first.values.iter().enumerate() {
                let (name, kind) = match kind {
                    super::Value::Counter(_) => (format!("mpm_{table}_{key}_total"), "counter"),
                    super::Value::Gauge(_) => (format!("mpm_{table}_{key}"), "gauge"),
                };
                let help = format!(
                    "The {table} layer's {}, per row of its table (the status page's {table}).",
                    key.replace('_', " ")
                );
                e.family(&name, kind, &help);
                for row in &rows {
                    let labels: Vec<(&str, &str)> =
                        row.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    if let Some((_, v)) = row.values.get(i) {
                        e.sample(&name, &labels, v.number());
                    }
                }
            }
        }
        e.0
    }
}
