//! How every model stops: one drain, with one grace period, one deadline
//! and one answer to a worker that does not stop.
//!
//! A drain has three moments, the same in every model:
//!
//! 1. **begin**: stop accepting; idle connections close [`STOP_GRACE`]
//!    after the stop (a request already on its way is answered first);
//! 2. **deadline**: `graceful_timeout` after the stop, connections still in
//!    flight are cut (shut down, or closed by the loop that holds them);
//! 3. **give up**: [`ABANDON_AFTER`] later, a worker still busy (a handler
//!    looping without I/O, which no closed socket can reach) is abandoned
//!    with one log line naming how many, and the process exits anyway.
//!
//! A fast stop ([`Lifecycle::stop_now`]) is the same drain with no grace:
//! every moment is the stop itself, even when it comes during a graceful
//! drain already under way.

use std::time::{Duration, Instant};

use crate::lifecycle::{Lifecycle, Phase};
use crate::listener::Listener;
use crate::worker_threads::WorkerThreads;

/// How long a stopping server waits on an idle connection for a request the
/// client may already have sent (still crossing the network, or the
/// loopback's deferred delivery) before closing it. Every model uses this
/// one grace: a request sent just before a stop is answered (with
/// `Connection: close`) rather than met by a closed connection.
pub const STOP_GRACE: Duration = Duration::from_millis(100);

/// How long a drain waits, once it has cut the connections still in
/// flight, for the workers that served them to notice and return. A worker
/// still busy then is stuck without I/O; the process exits without it.
pub const ABANDON_AFTER: Duration = Duration::from_secs(1);

/// A stop in progress: begun when the lifecycle was told to stop, with the
/// moment idle connections close and the moment work in flight is cut off.
#[derive(Debug, Clone)]
pub struct Drain {
    lifecycle: Lifecycle,
    began: Instant,
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
            lifecycle: lifecycle.clone(),
            began: now,
            close_idle_at: now + STOP_GRACE,
            deadline: crate::deadline(now, graceful),
        }
    }

    /// Is this a fast stop ([`Lifecycle::stop_now`], perhaps asked after
    /// the drain began)? Then every moment below is the stop itself.
    pub fn is_fast(&self) -> bool {
        self.lifecycle.is_fast_stop()
    }

    /// How long an idle connection is given for a request on its way:
    /// [`STOP_GRACE`], or nothing in a fast stop.
    pub fn grace(&self) -> Duration {
        if self.is_fast() {
            Duration::ZERO
        } else {
            STOP_GRACE
        }
    }

    /// When idle connections are closed: [`STOP_GRACE`] after the stop.
    pub fn close_idle_at(&self) -> Instant {
        if self.is_fast() {
            self.began
        } else {
            self.close_idle_at
        }
    }

    /// When work still in flight is cut off (`graceful_timeout` after the
    /// stop; at once in a fast stop).
    pub fn deadline(&self) -> Instant {
        if self.is_fast() {
            self.began
        } else {
            self.deadline
        }
    }

    /// When a worker still busy is abandoned: [`ABANDON_AFTER`] past the
    /// [`deadline`](Self::deadline).
    pub fn give_up_at(&self) -> Instant {
        crate::deadline(self.deadline(), ABANDON_AFTER)
    }

    /// For a model whose workers block: wait out the grace, then until
    /// every worker has returned, closing idle connections with
    /// `close_idle` as they appear and cutting the rest off with `cut_all`
    /// (which returns how many it cut) once the deadline passes; then join
    /// the workers ([`join`](Self::join)), abandoning any still stuck.
    pub fn wait(
        &self,
        workers: WorkerThreads,
        mut close_idle: impl FnMut(),
        mut cut_all: impl FnMut() -> usize,
    ) {
        let mut said = false;
        loop {
            // Slept in short steps: a fast stop may come during the grace.
            let now = Instant::now();
            if now < self.close_idle_at() {
                std::thread::sleep((self.close_idle_at() - now).min(Duration::from_millis(20)));
                continue;
            }
            close_idle();
            if workers.all_finished() {
                break;
            }
            if now >= self.deadline() {
                // Again on each turn: a worker may have been between its
                // accept and recording the connection.
                let cut = cut_all();
                if cut > 0 && !said {
                    said = true;
                    self.log_cut(cut);
                }
            }
            // Only once what is left was cut: a fast stop that comes more
            // than `ABANDON_AFTER` into a graceful drain (the master's, at
            // its graceful deadline) is already past its give-up time, and
            // its workers must still be told before the join waits for them.
            if now >= self.give_up_at() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.join(workers);
    }

    /// Say, once, that `cut` connections still in flight were closed: by
    /// the graceful timeout, or by a fast stop.
    pub fn log_cut(&self, cut: usize) {
        let what = crate::plural(cut, "connection", "connections");
        if self.is_fast() {
            crate::log_notice!("mpm: fast stop: closed {what} still in flight");
        } else {
            crate::log_warn!("mpm: graceful timeout: closed {what} still in flight");
        }
    }

    /// Join the workers, waiting for them at most until
    /// [`give_up_at`](Self::give_up_at): one still busy then (a handler
    /// looping without I/O) is abandoned, in one log line naming how many,
    /// and the process goes on to exit without it.
    pub fn join(&self, workers: WorkerThreads) {
        // Never less than a moment: workers told to stop just now (an event
        // loop that closed their channel at the give-up time) are idle, not
        // stuck, and return at once.
        let at_least = crate::deadline(Instant::now(), Duration::from_millis(100));
        let stuck = workers.join_until(self.give_up_at().max(at_least));
        if stuck > 0 {
            let what = if stuck == 1 {
                "worker thread"
            } else {
                "worker threads"
            };
            crate::log_warn!(
                "mpm: {stuck} {what} still busy {ABANDON_AFTER:?} after the stop's deadline \
                 (a handler looping without I/O?): abandoned; exiting without {}",
                if stuck == 1 { "it" } else { "them" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_graceful_drain_keeps_the_grace_and_the_graceful_timeout() {
        let lifecycle = Lifecycle::new().unwrap();
        lifecycle.stop();
        let drain = Drain::begin(&lifecycle, &[], Duration::from_secs(30));
        assert!(!drain.is_fast());
        assert_eq!(drain.grace(), STOP_GRACE);
        assert!(drain.deadline() >= Instant::now() + Duration::from_secs(29));
        assert_eq!(drain.give_up_at(), drain.deadline() + ABANDON_AFTER);
    }

    #[test]
    fn a_fast_stop_during_a_graceful_drain_moves_its_deadline_to_the_stop() {
        let _cut = crate::error_log::expect("fast stop: closed");
        let lifecycle = Lifecycle::new().unwrap();
        lifecycle.stop();
        let drain = Drain::begin(&lifecycle, &[], Duration::from_secs(30));
        lifecycle.stop_now();
        assert!(drain.is_fast());
        assert_eq!(drain.grace(), Duration::ZERO);
        assert!(drain.deadline() <= Instant::now(), "not cut at once");
        assert!(drain.close_idle_at() <= Instant::now());
    }

    #[test]
    fn a_worker_stuck_past_the_deadline_is_abandoned_not_waited_for() {
        // The lines this stop says on purpose: kept, not printed among the results.
        let _cut = crate::error_log::expect("fast stop: closed");
        let abandoned = crate::error_log::expect("abandoned");
        let lifecycle = Lifecycle::new().unwrap();
        lifecycle.stop_now();
        let release = Arc::new(AtomicBool::new(false));
        let stuck = Arc::clone(&release);
        let workers = WorkerThreads::spawn(
            "stuck",
            1,
            |_| {
                let stuck = Arc::clone(&stuck);
                // A handler looping without I/O: no closed socket reaches it.
                move || {
                    while !stuck.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            },
            || {},
        )
        .unwrap();
        let drain = Drain::begin(&lifecycle, &[], Duration::from_secs(30));
        let began = Instant::now();
        let mut cuts = 0;
        drain.wait(
            workers,
            || {},
            || {
                cuts += 1;
                1
            },
        );
        let took = began.elapsed();
        release.store(true, Ordering::Relaxed);
        assert!(cuts > 0, "the connection in flight was never cut");
        assert!(
            took >= ABANDON_AFTER - Duration::from_millis(50) && took < ABANDON_AFTER * 3,
            "gave up after {took:?}, not {ABANDON_AFTER:?} past the deadline"
        );
        let lines = abandoned.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("1 worker thread still busy"), "{lines:?}");
    }
}
