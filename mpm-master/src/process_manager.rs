//! A single-threaded master that forks the serving processes, replaces those
//! that die, and turns signals into stops and graceful restarts.
//!
//! The master never serves a request and never starts a thread, so `fork()`
//! copies a process in which no lock can be held by a thread that the child
//! lacks (checked: [`mpm_sys::fork::fork`] counts the threads and refuses a
//! threaded process, and `run` ends with that line). Signals reach it through signal-hook flags and a self-pipe it polls
//! beside the lifecycle's stop pipe, once a second at least, to reap children;
//! with nothing due (a spawn, a ramp, an upgrade, a drain), once a second is
//! all it wakes by itself.
//!
//! | signal to the master | meaning (as httpd's) |
//! |---|---|
//! | SIGTERM, SIGINT | fast stop: refuse new connections, children close every connection now (in flight or idle) and exit |
//! | SIGWINCH | graceful stop: refuse new connections, children finish what they have within `--graceful-timeout`; then what is still in flight is closed (a fast stop), and a child still running [`ABANDON_AFTER`](mpm_core::ABANDON_AFTER) later is killed |
//! | SIGUSR1 | graceful restart: a new generation of children starts at once; the old one stops accepting, finishes in-flight requests within `--graceful-timeout` (then, as on a graceful stop, what is still in flight is closed and a child still running [`ABANDON_AFTER`](mpm_core::ABANDON_AFTER) later is killed) and exits; the listening sockets never close |
//! | SIGHUP | restart: the children are stopped (gracefully, told with SIGUSR1 that a successor follows) and [`ProcessManager::run`] returns [`Exit::Restart`], so that the caller re-reads its configuration and runs a new set; the listening sockets stay open |
//! | SIGUSR2 | binary upgrade (see [`crate::upgrade`]): a new master inherits the listening sockets; once it is ready this one drains (its children told with SIGUSR1) and [`ProcessManager::run`] returns [`Exit::Upgraded`]; if it fails, this one serves on |
//!
//! Children told with SIGUSR1 have a successor ([`Lifecycle::has_successor`]):
//! they hand the connections they hold that have not sent a byte to the next
//! generation ([`mpm_core::HandOver`]) instead of waiting for them.
//!
//! A child that exits (or is killed) while its generation is current is
//! replaced; one that dies within a second of starting counts as a crash, and
//! repeated crashes back off exponentially (up to ten seconds) instead of
//! forking in a loop.
//!
//! ## How fast prefork's pool grows
//!
//! A prefork child serves one connection at a time, and a keep-alive client
//! holds its child between requests: a burst of clients beyond the idle
//! children waits in the listen backlog until the master forks for it.
//! Checking the spare count once a second, as httpd does (`--min-spare`:
//! 1, 2, 4 ... 32 children a second), made such a burst wait seconds (33
//! keep-alive clients on the defaults: the last answered after 4.4 s). So
//! the master also forks as soon as connections wait: it polls the
//! listening sockets beside its signal pipe, and a connection in the
//! backlog while no child of the current generation is idle (or starting),
//! per the scoreboard, forks a round of children at once: 1, then 2, 4 ...
//! up to [`MAX_BURST`] (32) for each round that finds connections still
//! waiting, never more than `--server-limit` in all.
//!
//! A round comes once the previous one's children have started and taken
//! connections, at most every [`RAMP_TICK`] (10 ms): the master reaches 32
//! children per 10 ms, 3,200 a second at most, and in practice forks as
//! fast as children start (33 keep-alive clients at once on the defaults:
//! 31 children in 5 rounds, every client answered within 75 ms on a debug
//! build, `a_burst_of_keep_alive_clients_...` in `tests/tests/prefork.rs`).
//! The round size falls back to 1 once the master sees the backlog empty.
//!
//! Why the listening sockets rather than the scoreboard alone: the
//! scoreboard says every child is busy, not that anyone waits (a full pool
//! of keep-alive clients needs no more children), and the master would
//! have to read it on a timer to notice the moment they all became busy.
//! A listening socket that polls readable says a connection waits, and it
//! wakes the master at that moment, with no timer. It is readable too
//! while an idle child is about to accept: then the master leaves the
//! sockets out of its poll for one tick (10 ms) and looks again, so that a
//! steady stream of connections wakes it at most 100 times a second more,
//! and an idle server no more than before. Sockets that do not listen in
//! the master (each child binds its own with `--reuseport`) are not
//! watched: the pool then grows with the spare count alone.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mpm_sys::fork::{fork, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::socket::{getsockopt, sockopt};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1, SIGWINCH};

use mpm_core::scoreboard::{Scoreboard, WorkerState};
use mpm_core::{Error, Lifecycle, Listener, Phase, Result};

use crate::signals::Signals;
use crate::sizing::Sizing;
use crate::upgrade::{self, Outcome, Pending, ReadyReport, UpgradeSpec};

/// Most children forked in one round for connections that wait with no
/// child idle (httpd's `MAX_SPAWN_RATE`, there per second).
pub const MAX_BURST: usize = 32;

/// The least time between two such rounds, and how long the master leaves
/// the listening sockets out of its poll when a connection waits for a
/// child that is idle (or starting) and about to take it.
pub const RAMP_TICK: Duration = Duration::from_millis(10);

/// What a child runs: its own copies of the listeners, its own lifecycle
/// (stopped now by SIGTERM or SIGINT, gracefully by SIGUSR1 or SIGWINCH; SIGUSR1, sent on a
/// graceful restart, a restart and an upgrade, also marks it as having a
/// [successor](Lifecycle::has_successor)), and its process slot
/// number (`0..children`, reused by its replacement and by its successor in
/// the next generation). Returns when it has drained; the child then exits.
pub type ChildMain<'a> = dyn Fn(Vec<Listener>, &Lifecycle, usize) -> Result<()> + 'a;

#[derive(Debug)]
struct Child {
    pid: Pid,
    generation: u64,
    slot: usize,
    started: Instant,
    /// Told to go gracefully (its generation replaced, or a stop): the
    /// deadline of its drain, which the master keeps (see [`Deadline`]).
    drain: Option<Deadline>,
}

/// A drain's deadline as the master keeps it for one child told to go:
/// at `cut_at` what the child still serves is cut by a fast stop
/// (SIGTERM), and a child still running [`ABANDON_AFTER`](mpm_core::ABANDON_AFTER)
/// (and a second's slack) later is killed.
///
/// Kept by the master, not the child, because a prefork child is
/// single-threaded: blocked in a `sendfile` to a slow client, it has no
/// thread to watch the clock (worker and event processes keep the same
/// deadline themselves too, with a thread; the master's SIGTERM then only
/// turns their cut into a fast stop's). Kept per child, because a graceful
/// restart leaves an old generation draining while the master serves on,
/// and a stop that comes meanwhile must not push its deadline back.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    cut_at: Instant,
    cut: bool,
    killed: bool,
}

impl Deadline {
    fn new(cut_at: Instant) -> Deadline {
        Deadline {
            cut_at,
            cut: false,
            killed: false,
        }
    }

    fn kill_at(&self) -> Instant {
        mpm_core::deadline(
            self.cut_at,
            mpm_core::ABANDON_AFTER + Duration::from_secs(1),
        )
    }

    /// Bring the cut forward to `at` (a stop, a fast stop), never back.
    fn no_later_than(&mut self, at: Instant) {
        if !self.cut {
            self.cut_at = self.cut_at.min(at);
        }
    }

    /// The next moment due: the cut, then the kill, then none.
    fn next(&self) -> Option<Instant> {
        if !self.cut {
            Some(self.cut_at)
        } else if !self.killed {
            Some(self.kill_at())
        } else {
            None
        }
    }
}

/// Why [`ProcessManager::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Told to stop: every child has exited and the listeners refuse
    /// connections.
    Stopped,
    /// SIGHUP: every child has exited; read the configuration again and run
    /// a new set on the same listeners.
    Restart,
    /// SIGUSR2: a new master serves on the same listeners; this one's
    /// children have drained, and it should exit.
    Upgraded,
}

/// Runs the serving processes and keeps them running.
///
/// Its signal handlers are installed when it is made, so make it before
/// telling anyone the server is up (a pid file, a log line): a signal sent on
/// the strength of those then finds the master ready for it.
pub struct ProcessManager<'a> {
    listeners: &'a [Listener],
    sizing: Sizing,
    graceful_timeout: Duration,
    signals: Signals,
    on_graceful_restart: Option<&'a dyn Fn()>,
    upgrade: Option<UpgradeSpec>,
    ready: ReadyReport,
    drain: Option<(Duration, &'static Scoreboard)>,
}

impl std::fmt::Debug for ProcessManager<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessManager")
            .field("sizing", &self.sizing)
            .field("graceful_timeout", &self.graceful_timeout)
            .finish()
    }
}

impl<'a> ProcessManager<'a> {
    /// A manager for `children` processes serving `listeners`.
    pub fn new(
        listeners: &'a [Listener],
        children: usize,
        graceful_timeout: Duration,
    ) -> Result<Self> {
        Self::with_sizing(listeners, Sizing::Fixed(children.max(1)), graceful_timeout)
    }

    /// A manager that sizes the children as `sizing` says.
    pub fn with_sizing(
        listeners: &'a [Listener],
        sizing: Sizing,
        graceful_timeout: Duration,
    ) -> Result<Self> {
        Ok(ProcessManager {
            listeners,
            sizing,
            graceful_timeout,
            signals: Signals::install()?,
            on_graceful_restart: None,
            upgrade: None,
            ready: ReadyReport::default(),
            drain: None,
        })
    }

    /// Run `hook` in the master on each graceful restart, before the new
    /// generation is forked (to reopen logs, as httpd does).
    pub fn on_graceful_restart(mut self, hook: &'a dyn Fn()) -> Self {
        self.on_graceful_restart = Some(hook);
        self
    }

    /// On SIGTERM, SIGWINCH or `lifecycle.stop()`, serve on for `delay`
    /// first with `scoreboard` marked draining (the status page answers
    /// 503), so that a load balancer stops sending before the listeners
    /// close. A second stop signal stops at once.
    pub fn drain_first(mut self, delay: Duration, scoreboard: &'static Scoreboard) -> Self {
        if !delay.is_zero() {
            self.drain = Some((delay, scoreboard));
        }
        self
    }

    /// Upgrade on SIGUSR2 by starting a new master as `spec` says (without
    /// it, SIGUSR2 is logged and ignored).
    pub fn upgrade_with(mut self, spec: UpgradeSpec) -> Self {
        self.upgrade = Some(spec);
        self
    }

    /// This master was started by an upgrading one: report to it once the
    /// first children serve, and leave the listeners listening on a stop
    /// while it lives.
    pub fn report_ready(mut self, ready: ReadyReport) -> Self {
        self.ready = ready;
        self
    }

    fn max_children(&self) -> usize {
        match self.sizing {
            Sizing::Fixed(n) => n,
            Sizing::Spare { max, .. } => max.max(1),
        }
    }

    /// Fork the children and manage them until the master is told to stop
    /// (by a signal, or by `lifecycle.stop()`), then stop them all.
    ///
    /// Must be called while the process has a single thread: otherwise
    /// the first fork is refused, and `run` returns that error (one line
    /// naming the precondition).
    pub fn run(mut self, lifecycle: &Lifecycle, child_main: &ChildMain<'_>) -> Result<Exit> {
        let mut ready = std::mem::take(&mut self.ready);
        let signals = &self.signals;
        let mut pending: Option<Pending> = None;
        // Set while serving on, marked draining, before a stop.
        let mut drain_until: Option<Instant> = None;
        // After a hand-over: the pid file whose `.oldbin` goes at exit.
        let mut handed_over_pid_file: Option<Option<PathBuf>> = None;
        let mut children: Vec<Child> = Vec::new();
        let mut generation = 1u64;
        let mut crashes = 0u32;
        let mut next_spawn = Instant::now();
        let mut wanted = match self.sizing {
            Sizing::Fixed(n) => n,
            Sizing::Spare { start, max, .. } => start.clamp(1, max.max(1)),
        };
        let mut spawn_rate = 1usize;
        let mut next_maintenance = Instant::now() + Duration::from_secs(1);
        // Prefork: the listening sockets watched for connections that wait
        // with no child idle, the next round's size, and until when the
        // sockets are left out of the poll (see the module docs).
        let mut watched = self.watched_listeners();
        let mut burst = 1usize;
        let mut quiet_until: Option<Instant> = None;
        let mut ramp_until: Option<Instant> = None;
        let mut exit = Exit::Stopped;
        // Children this master told to go (too many idle): not crashes.
        let mut retired: Vec<Pid> = Vec::new();
        loop {
            // Keep the current generation at strength (throttled after crashes).
            let current = children
                .iter()
                .filter(|c| c.generation == generation)
                .count();
            if current < wanted && Instant::now() >= next_spawn {
                for _ in current..wanted {
                    let Some(slot) = (0..self.max_children()).find(|slot| {
                        !children
                            .iter()
                            .any(|c| c.generation == generation && c.slot == *slot)
                    }) else {
                        break;
                    };
                    children.push(self.spawn(generation, slot, signals, child_main)?);
                }
            }
            lifecycle.set_phase(Phase::Serving);
            // Started by an upgrade: ready once a full first generation has
            // outlived the crash-at-start window.
            if generation == 1 && crashes == 0 {
                let up: Vec<&Child> = children.iter().filter(|c| c.generation == 1).collect();
                if up.len() >= wanted
                    && up
                        .iter()
                        .all(|c| c.started.elapsed() >= upgrade::READY_AFTER)
                {
                    ready.report();
                }
            }

            if let Sizing::Spare {
                min_spare,
                max_spare,
                max,
                scoreboard,
                ..
            } = self.sizing
            {
                if Instant::now() >= next_maintenance {
                    next_maintenance = Instant::now() + Duration::from_secs(1);
                    let idle = idle_children(&children, generation, &retired, scoreboard);
                    let (idle_now, last_idle) = (idle.len(), idle.last().map(|c| c.pid));
                    if idle_now > max_spare {
                        // One a second, gently: it is idle, so it just exits;
                        // with the drain deadline of any child told to go, in
                        // case it took a connection as it was told.
                        if let Some(pid) = last_idle {
                            let _ = kill(pid, Signal::SIGUSR1);
                            retired.push(pid);
                            wanted = wanted.saturating_sub(1).max(1);
                            let cut_at = mpm_core::deadline(Instant::now(), self.graceful_timeout);
                            if let Some(c) = children.iter_mut().find(|c| c.pid == pid) {
                                c.drain.get_or_insert(Deadline::new(cut_at));
                            }
                        }
                        spawn_rate = 1;
                    } else if idle_now < min_spare && wanted < max {
                        wanted = (wanted + spawn_rate).min(max);
                        spawn_rate = (spawn_rate * 2).min(32);
                    } else {
                        spawn_rate = 1;
                    }
                }
            }

            let now = Instant::now();
            let current = children
                .iter()
                .filter(|c| c.generation == generation)
                .count();
            // An idle master sleeps until a signal, a child's exit or a
            // stop wakes it, or a second has passed: each moment below
            // counts only while it has something to do (the spawn time was
            // the poll's end even with nothing to spawn, which woke every
            // master a hundred times a second).
            let mut until = now + Duration::from_secs(1);
            // Old generations draining: cut or kill those due, and wake
            // for the next.
            if let Some(due) = keep_deadlines(
                &mut children,
                "the graceful timeout of children told to go",
                now,
            ) {
                until = until.min(due);
            }
            if current < wanted {
                until = until.min(next_spawn.max(now));
            }
            if matches!(self.sizing, Sizing::Spare { .. }) {
                until = until.min(next_maintenance);
            }
            // An upgrade under way, from either side, is looked at every
            // tick: this master's new one (its answer, exit or time-out),
            // or, started by one, the old master to tell soon after the
            // first generation has lived READY_AFTER.
            if pending.is_some() || (generation == 1 && crashes == 0 && ready.is_pending()) {
                until = until.min(now + RAMP_TICK);
            }
            if let Some(d) = drain_until {
                until = until.min(d);
            }
            // Watch the listeners while nothing is left to fork and there is
            // room for more; not while a connection waits for a child that
            // is about to take it.
            let watch = !watched.is_empty()
                && current >= wanted
                && current < self.max_children()
                && now >= next_spawn
                && quiet_until.is_none_or(|q| now >= q);
            if let Some(q) = quiet_until.filter(|q| *q > now) {
                until = until.min(q);
            }
            // Ramping: a tick, to see the last round's children busy.
            if ramp_until.is_some_and(|r| now < r) {
                until = until.min(now + RAMP_TICK);
            }
            let timeout = until
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(10), Duration::from_secs(1));
            let mut fds = vec![PollFd::new(signals.wake_read.as_fd(), PollFlags::POLLIN)];
            // Once a stop has been asked, the stop pipe stays readable: a
            // draining master must not spin on it.
            if drain_until.is_none() {
                fds.push(PollFd::new(lifecycle.wake_fd(), PollFlags::POLLIN));
            }
            if let Some(p) = &pending {
                fds.push(PollFd::new(p.fd(), PollFlags::POLLIN));
            }
            let first_listener = fds.len();
            if watch {
                fds.extend(watched.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
            }
            let polled = match poll(&mut fds, PollTimeout::from(timeout.as_millis() as u16)) {
                Ok(_) => true,
                Err(nix::errno::Errno::EINTR) => false,
                Err(e) => {
                    // Cannot happen with valid descriptors; never spin on it.
                    mpm_core::log_error!("mpm: master: poll failed: {e}");
                    std::thread::sleep(timeout);
                    false
                }
            };
            // Did a connection wait in a backlog? (Looked: the listeners
            // were in the poll, and it answered.)
            let looked = watch && polled;
            let mut waiting = false;
            let mut broken = Vec::new();
            for (i, fd) in fds.iter().skip(first_listener).enumerate() {
                let got = fd.revents().unwrap_or(PollFlags::empty());
                waiting |= looked && got.contains(PollFlags::POLLIN);
                // A socket that stopped listening polls ready for ever:
                // never watched again, so that the master cannot spin.
                if got.intersects(PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL) {
                    broken.push(i);
                }
            }
            drop(fds);
            for i in broken.into_iter().rev() {
                watched.remove(i);
            }
            signals.drain();

            if let Some(p) = &pending {
                match p.check() {
                    Outcome::Waiting => {}
                    Outcome::Ready => {
                        mpm_core::log_notice!(
                            "mpm: upgrade: new master {} is serving; this master ({}) drains \
                             {} and exits",
                            p.pid,
                            std::process::id(),
                            mpm_core::plural(children.len(), "child", "children")
                        );
                        // Like nginx's, `FILE.oldbin` names this master until it exits.
                        handed_over_pid_file = Some(p.pid_file().map(Path::to_path_buf));
                        exit = Exit::Upgraded;
                        // Handed over: the new master is no longer ours to stop.
                        pending = None;
                        break;
                    }
                    Outcome::Failed(why) => {
                        // Rolled back before the log line says so.
                        if let Some(p) = pending.take() {
                            p.roll_back();
                        }
                        mpm_core::log_error!("mpm: upgrade failed: {why}; this master serves on");
                    }
                }
            }
            if signals.upgrade.swap(false, Ordering::SeqCst) {
                match (&self.upgrade, &pending) {
                    (None, _) => {
                        mpm_core::log_warn!("mpm: SIGUSR2 ignored: no binary to upgrade to")
                    }
                    (Some(_), Some(p)) => {
                        mpm_core::log_warn!(
                            "mpm: SIGUSR2 ignored: new master {} is starting",
                            p.pid
                        )
                    }
                    (Some(spec), None) => match spec.start(self.listeners) {
                        Ok(p) => {
                            mpm_core::log_notice!(
                                "mpm: upgrade: started {} as pid {}; this master serves until \
                                 it is ready",
                                spec.binary.display(),
                                p.pid
                            );
                            pending = Some(p);
                        }
                        Err(e) => {
                            mpm_core::log_error!("mpm: upgrade failed: {e}; this master serves on")
                        }
                    },
                }
            }

            let stop_asked = signals.stop.swap(false, Ordering::SeqCst);
            if let (Some((delay, scoreboard)), None, true) = (
                self.drain,
                drain_until,
                stop_asked || lifecycle.is_stopping(),
            ) {
                scoreboard.set_draining();
                drain_until = Some(mpm_core::deadline(Instant::now(), delay));
                mpm_core::log_notice!(
                    "mpm: {}: draining: serving on for {delay:?} with the status page answering \
                     503, then stopping (signal again to stop now)",
                    signals.stop_cause()
                );
            } else if stop_asked
                || (lifecycle.is_stopping() && drain_until.is_none())
                || drain_until.is_some_and(|d| Instant::now() >= d)
            {
                let n = children.len();
                if signals.stop_is_fast(lifecycle) {
                    mpm_core::log_notice!(
                        "mpm: {}: stopping now (fast stop): {n} {} {} connections",
                        signals.stop_cause(),
                        if n == 1 {
                            "child closes"
                        } else {
                            "children close"
                        },
                        if n == 1 { "its" } else { "their" },
                    );
                } else {
                    mpm_core::log_notice!(
                        "mpm: {}: stopping gracefully: {n} {} {} requests (at most {:?})",
                        signals.stop_cause(),
                        if n == 1 {
                            "child finishes"
                        } else {
                            "children finish"
                        },
                        if n == 1 { "its" } else { "their" },
                        self.graceful_timeout
                    );
                }
                break;
            }
            if signals.restart.swap(false, Ordering::SeqCst) {
                mpm_core::log_notice!(
                    "mpm: received SIGHUP: restart: stopping the children, then reading the \
                     configuration again"
                );
                exit = Exit::Restart;
                break;
            }
            if signals.graceful_restart.swap(false, Ordering::SeqCst) {
                mpm_core::log_notice!(
                    "mpm: received SIGUSR1: graceful restart: generation {}",
                    generation + 1
                );
                // The old generation drains as a graceful stop does, within
                // the graceful timeout: at its deadline what it still serves
                // is cut, and a child still running later is killed (kept
                // below, by `keep_deadlines`, as the master serves on).
                // Without it a prefork child held by a slow download ran on
                // until the client had read the last byte.
                let cut_at = mpm_core::deadline(Instant::now(), self.graceful_timeout);
                for c in children.iter_mut().filter(|c| c.generation == generation) {
                    let _ = kill(c.pid, Signal::SIGUSR1);
                    c.drain
                        .get_or_insert(Deadline::new(cut_at))
                        .no_later_than(cut_at);
                }
                generation += 1;
                if let Some(hook) = self.on_graceful_restart {
                    hook();
                }
                if let Sizing::Spare { scoreboard, .. } = self.sizing {
                    scoreboard.set_generation(generation as u32);
                }
                crashes = 0;
                next_spawn = Instant::now();
            }
            signals.child_exited.store(false, Ordering::SeqCst);
            for (child, status) in reap(&mut children) {
                if let Some(i) = retired.iter().position(|p| *p == child.pid) {
                    retired.swap_remove(i);
                    continue;
                }
                if child.generation != generation {
                    // An old generation finishing: not replaced, but a
                    // crash is still worth a line.
                    if !matches!(status, WaitStatus::Exited(_, 0)) {
                        mpm_core::log_warn!(
                            "mpm: child {} of generation {} {}",
                            child.pid,
                            child.generation,
                            describe(&status)
                        );
                    }
                    continue;
                }
                let clean = matches!(status, WaitStatus::Exited(_, 0));
                mpm_core::log_warn!(
                    "mpm: child {} {}; replacing it",
                    child.pid,
                    describe(&status)
                );
                if !clean && child.started.elapsed() < Duration::from_secs(1) {
                    crashes += 1;
                    let backoff =
                        Duration::from_millis(100 << crashes.min(7)).min(Duration::from_secs(10));
                    mpm_core::log_error!(
                        "mpm: child crashed at start {} in a row; next try in {backoff:?}",
                        mpm_core::plural(crashes, "time", "times")
                    );
                    next_spawn = Instant::now() + backoff;
                } else {
                    crashes = 0;
                }
            }

            // Connections wait: fork a round for them now, unless a child
            // is idle (or starting) and takes them; look again in a tick.
            if let Sizing::Spare {
                max, scoreboard, ..
            } = self.sizing
            {
                let now = Instant::now();
                if waiting && idle_children(&children, generation, &retired, scoreboard).is_empty()
                {
                    let current = children
                        .iter()
                        .filter(|c| c.generation == generation)
                        .count();
                    wanted = (wanted.max(current) + burst).min(max);
                    burst = (burst * 2).min(MAX_BURST);
                    ramp_until = Some(now + Duration::from_secs(1));
                    quiet_until = Some(now + RAMP_TICK);
                } else if waiting {
                    quiet_until = Some(now + RAMP_TICK);
                } else if looked {
                    // Nobody waits: the next ramp starts with one child.
                    burst = 1;
                }
            }
        }

        // Stop: the children stop accepting and drain; unless a new set
        // follows, the listening sockets then refuse whatever still arrives.
        // When one does (a restart, an upgrade), SIGUSR1 tells them so: a
        // connection that has sent nothing is handed to it.
        // A fast stop is told with SIGTERM, a graceful one with SIGWINCH.
        let fast = exit == Exit::Stopped && signals.stop_is_fast(lifecycle);
        let told = match exit {
            Exit::Stopped if fast => Signal::SIGTERM,
            Exit::Stopped => Signal::SIGWINCH,
            Exit::Restart | Exit::Upgraded => Signal::SIGUSR1,
        };
        for c in &children {
            let _ = kill(c.pid, told);
        }
        if exit == Exit::Stopped {
            if fast {
                lifecycle.stop_now();
            } else {
                lifecycle.stop();
            }
            // Shared with the master that started this one (an upgrade not
            // yet complete), they must go on listening for it.
            if !ready.shares_listeners() {
                for l in self.listeners {
                    l.stop_listening();
                }
            }
        }
        // The drain's moments, as a child's own (`mpm_core::Drain`): at the
        // graceful deadline (at once in a fast stop) what is still in flight
        // is cut, by a fast stop (SIGTERM: a single-threaded prefork child
        // has no thread to keep its own deadline); a child still running
        // `ABANDON_AFTER` (and a second's slack) later is killed. A child of
        // an older generation, already draining, keeps its own deadline if
        // that is sooner.
        let now = Instant::now();
        let stop_cut_at = if fast {
            now
        } else {
            mpm_core::deadline(now, self.graceful_timeout)
        };
        for c in &mut children {
            let d = c.drain.get_or_insert(Deadline::new(stop_cut_at));
            d.no_later_than(stop_cut_at);
            // A fast stop was told with SIGTERM just now: that is the cut.
            d.cut |= fast;
        }
        let mut cut_by = "the graceful timeout";
        while !children.is_empty() {
            let _ = keep_deadlines(&mut children, cut_by, Instant::now());
            let _ = reap(&mut children);
            if !children.is_empty() {
                let mut fds = [PollFd::new(signals.wake_read.as_fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::from(50u16));
                signals.drain();
                // SIGTERM during a graceful stop: cut it short.
                if signals.stop.swap(false, Ordering::SeqCst)
                    && children.iter().any(|c| c.drain.is_some_and(|d| !d.cut))
                    && exit == Exit::Stopped
                    && signals.stop_is_fast(lifecycle)
                {
                    mpm_core::log_notice!(
                        "mpm: {}: stopping now (fast stop)",
                        signals.stop_cause()
                    );
                    lifecycle.stop_now();
                    let now = Instant::now();
                    for d in children.iter_mut().filter_map(|c| c.drain.as_mut()) {
                        d.no_later_than(now);
                    }
                    cut_by = "fast stop";
                }
            }
        }
        signals.uninstall();
        // Stopped mid-upgrade: the new master goes too, and the pid file
        // comes back.
        if let Some(p) = pending.take() {
            p.roll_back();
        }
        if let Some(Some(path)) = handed_over_pid_file {
            upgrade::remove_oldbin(&path);
        }
        if exit != Exit::Restart {
            lifecycle.set_phase(Phase::Stopped);
        }
        Ok(exit)
    }

    /// Prefork's listening sockets that listen in the master, which it
    /// watches for connections that wait (not those of `--reuseport`, which
    /// each child binds for itself, nor the hand-over channel).
    fn watched_listeners(&self) -> Vec<BorrowedFd<'a>> {
        if !matches!(self.sizing, Sizing::Spare { .. }) {
            return Vec::new();
        }
        let listeners: &'a [Listener] = self.listeners;
        listeners
            .iter()
            .filter_map(Listener::as_std)
            .filter(|l| getsockopt(l, sockopt::AcceptConn).unwrap_or(false))
            .map(|l| l.as_fd())
            .collect()
    }

    fn spawn(
        &self,
        generation: u64,
        slot: usize,
        signals: &Signals,
        child_main: &ChildMain<'_>,
    ) -> Result<Child> {
        // Signals are blocked across the fork: one sent to a new child before
        // it has its own handlers would otherwise run the master's inherited
        // ones (and be lost), and a child told to go would serve on. Blocked,
        // it waits until the child's handlers are in place.
        let mut before = SigSet::empty();
        sigprocmask(
            SigmaskHow::SIG_BLOCK,
            Some(&SigSet::all()),
            Some(&mut before),
        )
        .map_err(|e| Error::io("blocking signals", e.into()))?;
        // The master must be single-threaded (see `run`): mpm-sys's fork
        // counts the threads and refuses otherwise, and the error is the
        // one line the master exits with.
        match fork() {
            Ok(Forked::Parent(child)) => {
                let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
                Ok(Child {
                    pid: child,
                    generation,
                    slot,
                    started: Instant::now(),
                    drain: None,
                })
            }
            Ok(Forked::Child) => {
                signals.uninstall();
                // Die with the master rather than serve on unsupervised.
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
                let code = match run_child(self.listeners, generation, slot, &before, child_main) {
                    Ok(()) => 0,
                    Err(e) => {
                        mpm_core::log_error!("mpm: child {}: {e}", std::process::id());
                        1
                    }
                };
                std::process::exit(code);
            }
            Err(e) => {
                let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
                Err(e.into())
            }
        }
    }
}

fn run_child(
    listeners: &[Listener],
    generation: u64,
    slot: usize,
    mask: &SigSet,
    child_main: &ChildMain<'_>,
) -> Result<()> {
    let lifecycle = Lifecycle::new()?;
    lifecycle.set_shared_listeners();
    lifecycle.set_generation(generation as u32);
    // No signal thread: a prefork child must stay single-threaded. SIGUSR1
    // means a successor takes over: recorded before the stop is seen.
    lifecycle.successor_on_quietly(&[SIGUSR1])?;
    lifecycle.stop_now_on_quietly(&[SIGTERM, SIGINT])?;
    lifecycle.stop_on_quietly(&[SIGUSR1, SIGWINCH])?;
    // Its handlers are in place: take the signals held since the fork.
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(mask), None)
        .map_err(|e| Error::io("unblocking signals", e.into()))?;
    let mine = listeners
        .iter()
        .map(Listener::try_clone)
        .collect::<Result<Vec<_>>>()?;
    child_main(mine, &lifecycle, slot)
}

/// Keep the drain deadlines of the children told to go ([`Deadline`]):
/// cut those whose deadline has passed (SIGTERM, the fast stop, which a
/// prefork child blocked in a write sees as the write failing), kill those
/// still running `ABANDON_AFTER` and a second later. Returns the next
/// moment due, if any.
fn keep_deadlines(children: &mut [Child], cut_by: &str, now: Instant) -> Option<Instant> {
    let due = children
        .iter()
        .filter(|c| c.drain.is_some_and(|d| !d.cut && now >= d.cut_at))
        .count();
    if due > 0 {
        mpm_core::log_notice!(
            "mpm: {cut_by}: closing the connections {due} {} still {}",
            if due == 1 { "child" } else { "children" },
            if due == 1 { "holds" } else { "hold" }
        );
    }
    for c in children.iter_mut() {
        let Some(d) = c.drain.as_mut() else {
            continue;
        };
        if !d.cut && now >= d.cut_at {
            d.cut = true;
            let _ = kill(c.pid, Signal::SIGTERM);
        }
        if d.cut && !d.killed && now >= d.kill_at() {
            d.killed = true;
            mpm_core::log_warn!("mpm: child {} did not stop in time; killing it", c.pid);
            let _ = kill(c.pid, Signal::SIGKILL);
        }
    }
    children
        .iter()
        .filter_map(|c| c.drain.and_then(|d| d.next()))
        .min()
}

/// The children of `generation` that are idle or starting (not those told
/// to go), by their first scoreboard slot.
fn idle_children<'c>(
    children: &'c [Child],
    generation: u64,
    retired: &[Pid],
    scoreboard: &Scoreboard,
) -> Vec<&'c Child> {
    children
        .iter()
        .filter(|c| c.generation == generation && !retired.contains(&c.pid))
        .filter(|c| {
            scoreboard
                .process_slots(c.slot)
                .first()
                .is_some_and(|s| matches!(s.state(), WorkerState::Idle | WorkerState::Starting))
        })
        .collect()
}

/// Collect every child that has exited, removing it from `children`.
fn reap(children: &mut Vec<Child>) -> Vec<(Child, WaitStatus)> {
    let mut gone = Vec::new();
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(status) => {
                if let Some(pid) = status.pid() {
                    if let Some(i) = children.iter().position(|c| c.pid == pid) {
                        gone.push((children.swap_remove(i), status));
                    }
                }
            }
        }
    }
    gone
}

fn describe(status: &WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exited with status {code}"),
        WaitStatus::Signaled(_, sig, core) => {
            format!(
                "was killed by {sig}{}",
                if *core { " (core dumped)" } else { "" }
            )
        }
        other => format!("changed state: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second thread lives while the master runs: a threaded process,
    /// which the master must not be. The first fork is refused, and `run`
    /// ends with that one line instead of forking.
    #[test]
    fn a_threaded_master_is_refused_its_first_fork_in_one_line() {
        let listeners = [Listener::bind("127.0.0.1:0".parse().expect("addr"), 8).expect("bind")];
        let lifecycle = Lifecycle::new().expect("lifecycle");
        let manager =
            ProcessManager::new(&listeners, 1, Duration::from_secs(1)).expect("a manager");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        let result = manager.run(&lifecycle, &|_, _, _| Ok(()));
        drop(tx);
        let _ = other.join();
        let err = result.expect_err("refused");
        let line = err.to_string();
        assert!(
            line.starts_with("fork refused: this process has "),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
    }
}
