//! How every model stops: one drain, with one grace period.

use std::time::{Duration, Instant};

use crate::lifecycle::{Lifecycle, Phase};
use crate::listener::Listener;

/// How long a stopping server waits on an idle connection for a request the
/// client may already have sent (still crossing the network, or the
/// loopback's deferred delivery) before closing it. Every model uses this
/// one grace: a request sent just before a stop is answered (with
/// `Connection: close`) rather than met by a closed connection.
pub const STOP_GRACE: Duration = Duration::from_millis(100);

/// A stop in progress: begun when the lifecycle was told to stop, with the
/// moment idle connections close and the moment work in flight is cut off.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    close_idle_at: Instant,
    deadline: Instant,
}

impl Drain {
    /// Begin draining: move the lifecycle to [`Phase::Draining`], and stop
    /// listening unless the listening sockets are shared with siblings and
    /// the next generation ([`Lifecycle::owns_listeners`]).
    pub fn begin(lifecycle: &Lifecycle, listeners: &[Listener], graceful: Duration) -> Drain {
        lifecycle.set_phase(Phase::Draining);
        if lifecycle.owns_listeners() {
            for l in listeners {
                l.stop_listening();
            }
        }
        let now = Instant::now();
        Drain {
            close_idle_at: now + STOP_GRACE,
            deadline: crate::deadline(now, graceful),
        }
    }

    /// When idle connections are closed: [`STOP_GRACE`] after the stop.
    pub fn close_idle_at(&self) -> Instant {
        self.close_idle_at
    }

    /// When work still in flight is cut off (`graceful_timeout` after the stop).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// For a model whose workers block: wait out the grace, then until
    /// `finished` says every worker is done, closing idle connections with
    /// `close_idle` as they appear and cutting the rest off with `cut_all`
    /// (which returns how many it cut) once the deadline passes.
    pub fn wait(
        &self,
        mut finished: impl FnMut() -> bool,
        mut close_idle: impl FnMut(),
        mut cut_all: impl FnMut() -> usize,
    ) {
        std::thread::sleep(self.close_idle_at.saturating_duration_since(Instant::now()));
        loop {
            close_idle();
            if finished() {
                return;
            }
            if Instant::now() >= self.deadline {
                let cut = cut_all();
                if cut > 0 {
                    crate::log_warn!(
                        "mpm: graceful timeout: closed {} still in flight",
                        crate::plural(cut, "connection", "connections")
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
