//! What a process model reads: the few settings every [`Mpm`](crate::Mpm)
//! takes, built by whoever reads the configuration (the `mpm` crate).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::ledger::LedgerSeat;
use crate::listener::Listener;
use crate::listener_poller::PollerKind;

/// The settings of a process model. Only what a model reads is here; the
/// protocol's settings travel with its [`HandlerFactory`](crate::HandlerFactory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpmSettings {
    /// Most requests served at once by one process's workers (httpd's
    /// `MaxRequestWorkers` as it applies to one process).
    pub max_request_workers: usize,
    /// Worker threads per process (at most `max_request_workers`).
    pub threads_per_child: usize,
    /// Event: connections a process holds per request worker.
    pub async_request_worker_factor: usize,
    /// One blocking read or write may wait this long (`--timeout`); accepted
    /// sockets inherit it as `SO_RCVTIMEO` and `SO_SNDTIMEO`.
    pub timeout: Duration,
    /// Event: how long a connection in the middle of a unit of work (a
    /// request) may stay silent on the loop before it is timed out: the
    /// shortest of `timeout` and the protocol's own limits.
    pub request_timeout: Duration,
    /// How long an idle connection waits for its next unit of work.
    pub keepalive_timeout: Duration,
    /// How long a stop waits for work in flight.
    pub graceful_timeout: Duration,
    /// Prefork and worker: how a waiting worker watches the listeners.
    pub poller: PollerKind,
    /// `TCP_NOTSENT_LOWAT` for accepted sockets; 0 leaves the kernel's.
    pub send_lowat: u32,
    /// Prefork: connections a child serves before it is replaced (0: never).
    pub max_connections_per_child: u64,
    /// Event: register listening sockets shared with sibling processes with
    /// `EPOLLEXCLUSIVE`, so that a new connection wakes one idle process
    /// rather than every one (`--epoll-exclusive`; off only to measure the
    /// difference).
    pub epoll_exclusive: bool,
    /// Each serving process listens on sockets of its own (`SO_REUSEPORT`,
    /// `--reuseport`): the kernel spreads connections over them, and none
    /// is shared with a sibling.
    pub reuseport: bool,
    /// Event: this process's seat in the ledger of connections held by the
    /// processes sharing the listening sockets, which spreads them evenly
    /// (`None`: one process, or sockets of its own).
    pub ledger: Option<LedgerSeat>,
}

impl Default for MpmSettings {
    fn default() -> Self {
        MpmSettings {
            max_request_workers: 256,
            threads_per_child: 256,
            async_request_worker_factor: 4,
            timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(60),
            graceful_timeout: Duration::from_secs(10),
            poller: PollerKind::Epoll,
            send_lowat: 0,
            max_connections_per_child: 0,
            epoll_exclusive: true,
            reuseport: false,
            ledger: None,
        }
    }
}

impl MpmSettings {
    /// The worker threads a threaded model starts in one process.
    pub fn threads(&self) -> usize {
        self.threads_per_child.min(self.max_request_workers).max(1)
    }

    /// The first step of every model's run: there must be something to serve.
    pub fn require_listeners(&self, listeners: &[Listener]) -> Result<()> {
        if listeners.is_empty() {
            return Err(Error::config("no listening address"));
        }
        Ok(())
    }
}
