//! The loads a comparison runs against each server variant: a workload
//! (what is sent, on how many connections), who serves it, and what is
//! measured.

use std::time::Duration;

use crate::workload::{Workload, WorkloadRequest};

/// Which program serves a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerBin {
    /// This program serving compare's own docroot (`serve --docroot`): the
    /// built-in scenarios.
    Docroot,
    /// This program as its `serve` runs it (with the flags after `--`): an
    /// application's own workloads, `--workload` files, `METHOD:/path`.
    Program,
    /// An example program built next to this one (`target/release/examples/NAME`),
    /// run with the same `serve` flags; the scenario is skipped when it is missing.
    Example(&'static str),
}

/// What a scenario measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Drive the workload with the bench engine for the run's duration.
    Requests,
    /// Hold this many keep-alive connections idle (each served the
    /// workload's first request once) and measure the memory.
    Idle {
        /// Connections held.
        connections: usize,
    },
    /// Open this many connections, each sending the workload's first
    /// request to a proxied route whose origin sits on it, and measure the
    /// server holding them (a server of its own, sized for them: see
    /// [`Scenario::server_flags`]).
    Waiting {
        /// Requests sent, one per connection.
        requests: usize,
    },
    /// Fetch the workload's first request `transfers` times, one at a time,
    /// reading slower than the server can send: `chunk` bytes, then a
    /// `pause_us` pause.
    SlowReader {
        /// Transfers, one after another.
        transfers: usize,
        /// Bytes taken per read.
        chunk: usize,
        /// Microseconds between reads.
        pause_us: u64,
    },
}

/// Whether a scenario's client speaks TLS, and how it handshakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// Plain HTTP.
    Off,
    /// TLS, every new connection a full handshake.
    Full,
    /// TLS, new connections resume a session (tickets).
    Resumed,
}

/// The origin compare starts behind a proxy route (`--upstream-delay`,
/// the `waiting` experiment): every server under test gets
/// `--proxy /=http://ORIGIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upstream {
    /// How long the origin waits before each answer.
    pub delay: Duration,
    /// Bytes in each answer's body.
    pub body: usize,
}

/// The origin's body when `--upstream-body` does not say: the peers' page.
pub const UPSTREAM_BODY: usize = 1456;
/// How long the `waiting` experiment's origin sits on each request (as
/// proxy_peers.py's `waiting`): far longer than the measurement.
pub const WAITING_DELAY: Duration = Duration::from_secs(10);
/// The most processes a prefork server under test may have: a waiting
/// request beyond them is reported as not held, rather than forked for.
pub const PREFORK_CAP: usize = 256;

/// One load, run against every variant.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Behind a proxy route to compare's origin, if it is.
    pub upstream: Option<Upstream>,
    /// Over TLS (the server's `--listen-tls` listener), and how.
    pub tls: Tls,
    /// Short name (`--scenario` selects by it; `idle` selects every idle count).
    pub name: String,
    /// A few words for tables and charts.
    pub title: String,
    /// Which program serves it.
    pub server: ServerBin,
    /// What is sent.
    pub workload: Workload,
    /// What is measured.
    pub load: Load,
}

/// The 1456-byte page in compare's docroot.
pub const PAGE: &str = "/index.html";
/// The 1 MiB file in compare's docroot.
pub const FILE: &str = "/1mib.bin";
/// The 16 MiB file in compare's docroot.
pub const BIG_FILE: &str = "/16mib.bin";

impl Scenario {
    /// Requests for the docroot's `path` on `connections` keep-alive
    /// connections (a static file: every 200 must have the same length).
    pub fn keepalive(name: &str, title: &str, path: &str, connections: usize) -> Scenario {
        Scenario {
            upstream: None,
            tls: Tls::Off,
            name: name.into(),
            title: title.into(),
            server: ServerBin::Docroot,
            workload: Workload::new(name)
                .title(title)
                .request(WorkloadRequest::get(path).same_length(true))
                .connections(connections),
            load: Load::Requests,
        }
    }

    /// `depth` requests for `path` written at once on each of
    /// `connections` keep-alive connections (HTTP/1.1 pipelining).
    pub fn pipelined(
        name: &str,
        title: &str,
        path: &str,
        connections: usize,
        depth: usize,
    ) -> Scenario {
        let mut s = Scenario::keepalive(name, title, path, connections);
        s.workload.pipeline = depth;
        s
    }

    /// A connection per request for `path`, `connections` at a time.
    pub fn close(name: &str, title: &str, path: &str, connections: usize) -> Scenario {
        let mut s = Scenario::keepalive(name, title, path, connections);
        s.workload.keepalive = false;
        s
    }

    /// A workload as a scenario, served by the program itself.
    pub fn workload(workload: Workload) -> Scenario {
        Scenario {
            upstream: None,
            tls: Tls::Off,
            name: workload.name.clone(),
            title: workload.describe(),
            server: ServerBin::Program,
            workload,
            load: Load::Requests,
        }
    }

    /// `connections` idle keep-alive connections, each served the
    /// docroot's page once.
    pub fn idle(connections: usize) -> Scenario {
        Scenario {
            upstream: None,
            tls: Tls::Off,
            name: format!("idle-{connections}"),
            title: format!("{connections} idle keep-alive connections"),
            server: ServerBin::Docroot,
            workload: Workload::get("idle", PAGE),
            load: Load::Idle { connections },
        }
    }

    /// `connections` idle keep-alive connections, each first sent
    /// `workload`'s first request, on the program itself.
    pub fn idle_after(workload: &Workload, connections: usize) -> Scenario {
        let first = workload.requests.first().cloned();
        let mut w = Workload::new("idle");
        w.requests.extend(first);
        Scenario {
            upstream: None,
            tls: Tls::Off,
            name: format!("idle-{connections}"),
            title: format!(
                "{connections} idle keep-alive connections (after {})",
                w.requests
                    .first()
                    .map_or_else(String::new, WorkloadRequest::label)
            ),
            server: ServerBin::Program,
            workload: w,
            load: Load::Idle { connections },
        }
    }

    /// `transfers` fetches of `path` by a reader that takes `chunk` bytes
    /// every `pause_us` microseconds.
    pub fn slow_reader(
        name: &str,
        title: &str,
        path: &str,
        transfers: usize,
        chunk: usize,
        pause_us: u64,
    ) -> Scenario {
        Scenario {
            load: Load::SlowReader {
                transfers,
                chunk,
                pause_us,
            },
            ..Scenario::keepalive(name, title, path, 1)
        }
    }

    /// GET / through the proxy route to an origin answering after
    /// `upstream.delay`, on `connections` keep-alive connections.
    pub fn upstream(upstream: Upstream, connections: usize) -> Scenario {
        let title = format!(
            "GET / through the proxy to an origin answering after {} ms, {connections} \
             keep-alive connections",
            upstream.delay.as_millis()
        );
        let workload = Workload::new("upstream")
            .title(title)
            .request(WorkloadRequest::get("/"))
            .connections(connections);
        Scenario::workload(workload).through(upstream)
    }

    /// `requests` connections, each sending one GET through the proxy
    /// route to an origin that answers after [`WAITING_DELAY`]: held, not
    /// answered, while the server is measured.
    pub fn waiting(requests: usize) -> Scenario {
        Scenario {
            upstream: Some(Upstream {
                delay: WAITING_DELAY,
                body: UPSTREAM_BODY,
            }),
            tls: Tls::Off,
            name: format!("waiting-{requests}"),
            title: format!("{requests} requests waiting on the upstream"),
            server: ServerBin::Program,
            workload: Workload::get("waiting", "/"),
            load: Load::Waiting { requests },
        }
    }

    /// The same, its requests sent through the proxy route to compare's origin.
    pub fn through(self, upstream: Upstream) -> Scenario {
        Scenario {
            upstream: Some(upstream),
            ..self
        }
    }

    /// The `serve` flags this scenario's server needs besides the
    /// variant's: a waiting scenario's server is sized for its requests
    /// (`--max-request-workers` N + 64, as peers.py sizes for idle
    /// connections; prefork at most [`PREFORK_CAP`] processes, started
    /// small as httpd's), and stops its drain after a second (the origin
    /// would hold the requests for ten).
    pub fn server_flags(&self, mpm: mpm_core::MpmKind) -> Vec<String> {
        let Load::Waiting { requests } = self.load else {
            return Vec::new();
        };
        let mut workers = requests + 64;
        if mpm == mpm_core::MpmKind::Prefork {
            workers = workers.min(PREFORK_CAP);
        }
        vec![
            "--max-request-workers".into(),
            workers.to_string(),
            "--graceful-timeout".into(),
            "1s".into(),
        ]
    }

    /// Which server a scenario runs on: scenarios with the same key share
    /// one per variant (a waiting scenario has one of its own).
    pub fn server_key(&self) -> (ServerBin, Option<usize>) {
        match self.load {
            Load::Waiting { requests } => (self.server, Some(requests)),
            _ => (self.server, None),
        }
    }

    /// The same over TLS, handshaking as `tls` says.
    pub fn over_tls(self, tls: Tls) -> Scenario {
        Scenario { tls, ..self }
    }

    /// Served by another program.
    pub fn served_by(self, server: ServerBin) -> Scenario {
        Scenario { server, ..self }
    }

    /// Does `--scenario NAME` select it? (`idle` selects every idle
    /// count, `waiting` every waiting one.)
    pub fn matches(&self, name: &str) -> bool {
        self.name == name
            || (name == "idle" && matches!(self.load, Load::Idle { .. }))
            || (name == "waiting" && matches!(self.load, Load::Waiting { .. }))
    }

    /// Connections held, for an idle or a waiting scenario (its cells are
    /// memory against connections, not requests a second).
    pub fn idle_connections(&self) -> Option<usize> {
        match self.load {
            Load::Idle { connections } => Some(connections),
            Load::Waiting { requests } => Some(requests),
            Load::Requests | Load::SlowReader { .. } => None,
        }
    }

    /// The first request, as idle and slow-reader scenarios send it.
    pub fn first_request(&self) -> WorkloadRequest {
        self.workload
            .requests
            .first()
            .cloned()
            .unwrap_or_else(|| WorkloadRequest::get("/"))
    }

    /// Roughly how long one run takes, for the time estimate.
    pub fn estimate(&self, duration: Duration, warmup: Duration) -> Duration {
        match self.load {
            Load::Requests => duration + warmup,
            Load::Idle { connections } => {
                Duration::from_millis(400) + Duration::from_micros(200 * connections as u64)
            }
            Load::SlowReader { transfers, .. } => Duration::from_millis(200) * transfers as u32,
            // Sent, then sampled once the origin has them all (at most 8 s).
            Load::Waiting { requests } => {
                Duration::from_millis(1500) + Duration::from_micros(300 * requests as u64)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_served_by_the_program_and_idle_sends_their_first_request() {
        let w = Workload::get("api", "/api/users/1").keepalive(false);
        let s = Scenario::workload(w.clone());
        assert_eq!((s.server, s.name.as_str()), (ServerBin::Program, "api"));
        let idle = Scenario::idle_after(&w, 5);
        assert_eq!(idle.first_request().path, "/api/users/1");
        assert_eq!(idle.idle_connections(), Some(5));
        assert!(idle.matches("idle") && idle.matches("idle-5"));
        assert_eq!(Scenario::idle(5).server, ServerBin::Docroot);
    }
}
