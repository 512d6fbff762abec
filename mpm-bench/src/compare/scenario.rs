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

/// One load, run against every variant.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
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

    /// A connection per request for `path`, `connections` at a time.
    pub fn close(name: &str, title: &str, path: &str, connections: usize) -> Scenario {
        let mut s = Scenario::keepalive(name, title, path, connections);
        s.workload.keepalive = false;
        s
    }

    /// A workload as a scenario, served by the program itself.
    pub fn workload(workload: Workload) -> Scenario {
        Scenario {
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

    /// Served by another program.
    pub fn served_by(self, server: ServerBin) -> Scenario {
        Scenario { server, ..self }
    }

    /// Does `--scenario NAME` select it? (`idle` selects every idle count.)
    pub fn matches(&self, name: &str) -> bool {
        self.name == name || (name == "idle" && matches!(self.load, Load::Idle { .. }))
    }

    /// Idle connections held, for an idle scenario.
    pub fn idle_connections(&self) -> Option<usize> {
        match self.load {
            Load::Idle { connections } => Some(connections),
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
