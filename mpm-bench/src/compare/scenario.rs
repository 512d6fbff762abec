//! The loads a comparison runs against each server variant.

/// Which program serves a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerBin {
    /// This program (`mpm serve --docroot` on compare's own docroot).
    This,
    /// An example program built next to this one (`target/release/examples/NAME`),
    /// run with the same `serve` flags; the scenario is skipped when it is missing.
    Example(&'static str),
}

/// What a scenario does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Drive requests with the bench engine for the run's duration.
    Requests {
        /// Concurrent connections.
        connections: usize,
        /// Keep-alive, or a connection per request.
        keepalive: bool,
    },
    /// Hold this many keep-alive connections idle and measure the memory.
    Idle {
        /// Connections held.
        connections: usize,
    },
    /// Fetch the file `transfers` times, one at a time, reading it slower
    /// than the server can send: `chunk` bytes, then a `pause_us` pause.
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

/// One load, run against every variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Over TLS (the server's `--listen-tls` listener), and how.
    pub tls: Tls,
    /// Short name (`--scenario` selects by it; `idle` selects every idle count).
    pub name: String,
    /// A few words for tables and charts.
    pub title: String,
    /// Which program serves it.
    pub server: ServerBin,
    /// The path requested.
    pub path: &'static str,
    /// What is done.
    pub load: Load,
}

/// The 1456-byte page in compare's docroot.
pub const PAGE: &str = "/index.html";
/// The 1 MiB file in compare's docroot.
pub const FILE: &str = "/1mib.bin";
/// The 16 MiB file in compare's docroot.
pub const BIG_FILE: &str = "/16mib.bin";

impl Scenario {
    /// Requests for `path` on `connections` keep-alive connections.
    pub fn keepalive(name: &str, title: &str, path: &'static str, connections: usize) -> Scenario {
        Scenario {
            tls: Tls::Off,
            name: name.into(),
            title: title.into(),
            server: ServerBin::This,
            path,
            load: Load::Requests {
                connections,
                keepalive: true,
            },
        }
    }

    /// A connection per request for `path`, `connections` at a time.
    pub fn close(name: &str, title: &str, path: &'static str, connections: usize) -> Scenario {
        Scenario {
            load: Load::Requests {
                connections,
                keepalive: false,
            },
            ..Scenario::keepalive(name, title, path, connections)
        }
    }

    /// `connections` idle keep-alive connections, each served once.
    pub fn idle(connections: usize) -> Scenario {
        Scenario {
            tls: Tls::Off,
            name: format!("idle-{connections}"),
            title: format!("{connections} idle keep-alive connections"),
            server: ServerBin::This,
            path: PAGE,
            load: Load::Idle { connections },
        }
    }

    /// `transfers` fetches of `path` by a reader that takes `chunk` bytes
    /// every `pause_us` microseconds.
    pub fn slow_reader(
        name: &str,
        title: &str,
        path: &'static str,
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

    /// The same over TLS, handshaking as `tls` says.
    pub fn over_tls(self, tls: Tls) -> Scenario {
        Scenario { tls, ..self }
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
            Load::Requests { .. } | Load::SlowReader { .. } => None,
        }
    }
}
