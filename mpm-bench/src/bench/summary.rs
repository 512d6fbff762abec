//! What a load run measured: latencies in an HDR histogram, status counts,
//! answers their request did not expect, errors by kind, per request of the
//! mix and in total; printed like wrk, or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Errors by kind, as wrk and ab report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// The connection could not be made (refused, unreachable).
    pub connect: u64,
    /// Reading or writing failed, or the server closed mid-response.
    pub read: u64,
    /// No complete response within `--timeout`.
    pub timeout: u64,
    /// The response did not parse, or its framing was broken.
    pub bad_response: u64,
    /// The body's length differed from the first response's (ab's "Length" failures).
    pub length: u64,
}

impl ErrorCounts {
    /// All errors.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.timeout + self.bad_response + self.length
    }

    pub(crate) fn add(&mut self, other: &ErrorCounts) {
        self.connect += other.connect;
        self.read += other.read;
        self.timeout += other.timeout;
        self.bad_response += other.bad_response;
        self.length += other.length;
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p99_9: u64,
    /// The slowest.
    pub max: u64,
    /// The mean.
    pub mean: f64,
}

/// What one request of the mix got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    responses: u64,
    unexpected: u64,
    errors: u64,
}

/// One thread's (or the merged) record of a run.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Latency of each complete response, in microseconds.
    pub(crate) histogram: Histogram<u64>,
    pub(crate) statuses: BTreeMap<u16, u64>,
    pub(crate) errors: ErrorCounts,
    pub(crate) body_bytes: u64,
    pub(crate) connections: u64,
    /// Responses whose status their request did not expect.
    pub(crate) unexpected: u64,
    /// Per request of the mix.
    pub(crate) per_request: Vec<Tally>,
}

impl Recorder {
    /// For a mix of `requests` requests.
    pub(crate) fn new(requests: usize) -> Recorder {
        Recorder {
            // Three significant figures, one microsecond to an hour, allocated
            // once: no resizing on the hot path.
            histogram: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .unwrap_or_else(|_| unreachable!("valid bounds")),
            statuses: BTreeMap::new(),
            errors: ErrorCounts::default(),
            body_bytes: 0,
            connections: 0,
            unexpected: 0,
            per_request: vec![Tally::default(); requests],
        }
    }

    /// Request `r` of the mix got a complete response.
    pub(crate) fn response(
        &mut self,
        r: usize,
        status: u16,
        body: u64,
        latency: Duration,
        expected: bool,
    ) {
        let us = (latency.as_micros() as u64).max(1);
        // `record` grows the histogram as needed (saturating_record would
        // clamp to its current top instead).
        if self.histogram.record(us).is_err() {
            self.histogram.saturating_record(us);
        }
        // Statuses are few: the map allocates only for a new code.
        *self.statuses.entry(status).or_insert(0) += 1;
        self.body_bytes += body;
        if let Some(t) = self.per_request.get_mut(r) {
            t.responses += 1;
            t.unexpected += u64::from(!expected);
        }
        self.unexpected += u64::from(!expected);
    }

    /// Request `r` of the mix failed (its kind is counted in `errors`).
    pub(crate) fn failed(&mut self, r: usize) {
        if let Some(t) = self.per_request.get_mut(r) {
            t.errors += 1;
        }
    }

    pub(crate) fn merge(&mut self, other: &Recorder) {
        let _ = self.histogram.add(&other.histogram);
        for (s, n) in &other.statuses {
            *self.statuses.entry(*s).or_insert(0) += n;
        }
        self.errors.add(&other.errors);
        self.body_bytes += other.body_bytes;
        self.connections += other.connections;
        self.unexpected += other.unexpected;
        if self.per_request.len() < other.per_request.len() {
            self.per_request
                .resize(other.per_request.len(), Tally::default());
        }
        for (mine, theirs) in self.per_request.iter_mut().zip(&other.per_request) {
            mine.responses += theirs.responses;
            mine.unexpected += theirs.unexpected;
            mine.errors += theirs.errors;
        }
    }
}

/// What one request of the mix got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestSummary {
    /// `METHOD /path`.
    pub request: String,
    /// The statuses it expects (`2xx`, or a list).
    pub expect: String,
    /// Complete responses.
    pub responses: u64,
    /// Of those, with a status it did not expect.
    pub unexpected: u64,
    /// Sent and not answered (any kind of error).
    pub errors: u64,
}

/// The result of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The URL loaded.
    pub url: String,
    /// Concurrent connections.
    pub connections: usize,
    /// Client threads.
    pub threads: usize,
    /// Keep-alive (false: a connection per request).
    pub keepalive: bool,
    /// Wall-clock time of the run in seconds.
    pub duration_s: f64,
    /// Complete responses, any status.
    pub responses: u64,
    /// Responses per second.
    pub requests_per_s: f64,
    /// Body bytes received.
    pub body_bytes: u64,
    /// TCP connections opened.
    pub connections_opened: u64,
    /// Latency from sending a request (from connecting, for a new connection)
    /// to the end of its response, in microseconds.
    pub latency_us: Latency,
    /// Responses by status code.
    pub status: BTreeMap<u16, u64>,
    /// Responses whose status their request did not expect (by default
    /// anything but 2xx).
    pub unexpected: u64,
    /// Requests that got no valid response, by kind.
    pub errors: ErrorCounts,
    /// Per request of the mix, in the order they were given.
    pub by_request: Vec<RequestSummary>,
}

impl Summary {
    pub(crate) fn new(
        url: &str,
        (connections, threads, keepalive): (usize, usize, bool),
        elapsed: Duration,
        r: &Recorder,
        labels: &[(String, String)],
    ) -> Summary {
        let h = &r.histogram;
        let responses = h.len();
        let secs = elapsed.as_secs_f64().max(1e-9);
        let latency = if responses == 0 {
            Latency::default()
        } else {
            Latency {
                p50: h.value_at_quantile(0.5),
                p90: h.value_at_quantile(0.9),
                p99: h.value_at_quantile(0.99),
                p99_9: h.value_at_quantile(0.999),
                max: h.max(),
                mean: h.mean(),
            }
        };
        Summary {
            url: url.to_string(),
            connections,
            threads,
            keepalive,
            duration_s: secs,
            responses,
            requests_per_s: responses as f64 / secs,
            body_bytes: r.body_bytes,
            connections_opened: r.connections,
            latency_us: latency,
            status: r.statuses.clone(),
            unexpected: r.unexpected,
            errors: r.errors,
            by_request: labels
                .iter()
                .zip(&r.per_request)
                .map(|((request, expect), t)| RequestSummary {
                    request: request.clone(),
                    expect: expect.clone(),
                    responses: t.responses,
                    unexpected: t.unexpected,
                    errors: t.errors,
                })
                .collect(),
        }
    }

    /// As JSON (one object).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A human-readable report, like wrk's.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let l = &self.latency_us;
        let ms = |us: u64| us as f64 / 1000.0;
        let _ = writeln!(
            s,
            "{} connections, {} thread{}, {} on {}",
            self.connections,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            if self.keepalive {
                "keep-alive"
            } else {
                "a connection per request"
            },
            self.url
        );
        let _ = writeln!(
            s,
            "  {} responses in {:.2}s, {:.1} MiB body, {} connections opened",
            self.responses,
            self.duration_s,
            self.body_bytes as f64 / (1024.0 * 1024.0),
            self.connections_opened
        );
        let _ = writeln!(
            s,
            "  latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3}",
            ms(l.p50),
            ms(l.p90),
            ms(l.p99),
            ms(l.p99_9),
            ms(l.max),
            l.mean / 1000.0
        );
        let statuses: Vec<String> = self
            .status
            .iter()
            .map(|(code, n)| format!("{code}: {n}"))
            .collect();
        let _ = writeln!(
            s,
            "  status: {}",
            if statuses.is_empty() {
                "none".to_string()
            } else {
                statuses.join(", ")
            }
        );
        let expects: Vec<&str> = self.by_request.iter().map(|r| r.expect.as_str()).collect();
        let _ = writeln!(
            s,
            "  unexpected: {}{}",
            self.unexpected,
            match expects.as_slice() {
                [one] => format!(" (expected {one})"),
                _ => String::new(),
            }
        );
        if self.by_request.len() > 1 {
            for r in &self.by_request {
                let _ = writeln!(
                    s,
                    "    {}: {} responses, {} unexpected (expected {}), {} errors",
                    r.request, r.responses, r.unexpected, r.expect, r.errors
                );
            }
        }
        let e = &self.errors;
        let _ = writeln!(
            s,
            "  errors: {} (connect {}, read {}, timeout {}, bad response {}, length {})",
            e.total(),
            e.connect,
            e.read,
            e.timeout,
            e.bad_response,
            e.length
        );
        let _ = writeln!(s, "Requests/sec: {:.2}", self.requests_per_s);
        s
    }
}
