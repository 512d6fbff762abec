//! Server lifecycle phases that embedders and tests can wait on.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Binding listeners and starting workers.
    Starting,
    /// Accepting and serving.
    Serving,
    /// No longer accepting; requests in flight are finishing.
    Draining,
    /// Every worker has exited.
    Stopped,
}

/// Shared handle on a server's lifecycle: its phase, and the stop request.
///
/// Cheap to clone. An MPM moves it through the phases in order; anyone may
/// call [`stop`](Self::stop) (a signal handler, a test, an embedding
/// program) and wait for a phase with [`wait_for`](Self::wait_for).
#[derive(Debug, Clone)]
pub struct Lifecycle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    phase: Mutex<Phase>,
    changed: Condvar,
    draining: Arc<AtomicBool>,
    /// Set (before `draining`) when the stop is a fast one: connections in
    /// flight are closed at once instead of finishing.
    fast: Arc<AtomicBool>,
    /// Set when the stop is a hand-over: another generation takes over the
    /// listeners (graceful restart, restart, upgrade).
    successor: Arc<AtomicBool>,
    shared_listeners: AtomicBool,
    generation: std::sync::atomic::AtomicU32,
    // A pipe that becomes readable, and stays readable, once stop is asked:
    // workers poll it beside their listeners so that none sleeps in accept.
    wake_read: OwnedFd,
    wake_write: OwnedFd,
    // Another, readable once a *fast* stop is asked (`FastStop`): a wait
    // that must end at a fast stop but go on through a graceful one polls
    // it, and it is never readable for a graceful stop.
    cut_read: Arc<OwnedFd>,
    cut_write: OwnedFd,
}

/// A fast stop as a process that has no other thread to tell it sees one
/// (a prefork child): a flag, and a descriptor that turns readable when the
/// flag is set and stays so. A wait in `poll(2)` that includes the
/// descriptor ends at a fast stop whenever it came: before the wait began,
/// or during it. (A signal's `EINTR` alone would miss a stop that came
/// between the last look at the flag and the call to `poll`, and the wait
/// would go on until its own deadline.) From [`Lifecycle::fast_stop`].
#[derive(Debug, Clone)]
pub struct FastStop {
    flag: Arc<AtomicBool>,
    fd: Arc<OwnedFd>,
}

impl FastStop {
    /// Has the fast stop been asked?
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// The descriptor, readable once the fast stop is asked, for `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Lifecycle {
    /// A lifecycle in [`Phase::Starting`].
    pub fn new() -> Result<Lifecycle> {
        let pipe = || {
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|e| Error::io("creating the stop pipe", e.into()))
        };
        let (r, w) = pipe()?;
        let (cut_read, cut_write) = pipe()?;
        Ok(Lifecycle {
            inner: Arc::new(Inner {
                phase: Mutex::new(Phase::Starting),
                changed: Condvar::new(),
                draining: Arc::new(AtomicBool::new(false)),
                fast: Arc::new(AtomicBool::new(false)),
                successor: Arc::new(AtomicBool::new(false)),
                shared_listeners: AtomicBool::new(false),
                generation: std::sync::atomic::AtomicU32::new(1),
                wake_read: r,
                wake_write: w,
                cut_read: Arc::new(cut_read),
                cut_write,
            }),
        })
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.inner.phase.lock()
    }

    /// Move to `phase` (never backwards) and wake everyone waiting.
    pub fn set_phase(&self, phase: Phase) {
        let mut p = self.inner.phase.lock();
        if phase > *p {
            *p = phase;
            self.inner.changed.notify_all();
        }
    }

    /// Wait until the server has reached `phase` (or gone past it).
    /// Returns false on timeout.
    pub fn wait_for(&self, phase: Phase, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut p = self.inner.phase.lock();
        while *p < phase {
            match deadline {
                Some(d) => {
                    if self.inner.changed.wait_until(&mut p, d).timed_out() {
                        return *p >= phase;
                    }
                }
                None => self.inner.changed.wait(&mut p),
            }
        }
        true
    }

    /// Ask the server to stop gracefully: it stops accepting, finishes
    /// requests in flight within `graceful_timeout` (closing idle keep-alive
    /// connections), and exits.
    pub fn stop(&self) {
        if !self.inner.draining.swap(true, Ordering::SeqCst) {
            // A full pipe or a closed reader both mean the wake-up is already visible.
            let _ = nix::unistd::write(&self.inner.wake_write, b"x");
        }
        self.enter_draining();
    }

    /// Ask the server to stop now (a fast stop, as nginx's `-s stop`): it
    /// stops accepting, closes every connection, in flight or idle, and
    /// exits. Also cuts short a graceful stop already under way.
    pub fn stop_now(&self) {
        let first = !self.inner.fast.swap(true, Ordering::SeqCst);
        self.inner.draining.store(true, Ordering::SeqCst);
        if first {
            // Written again even if a graceful stop wrote before: a loop
            // that waits on the pipe edge-triggered must wake for this one.
            let _ = nix::unistd::write(&self.inner.wake_write, b"x");
            let _ = nix::unistd::write(&self.inner.cut_write, b"x");
        }
        self.enter_draining();
    }

    /// Is the stop asked for a fast one ([`stop_now`](Self::stop_now))?
    pub fn is_fast_stop(&self) -> bool {
        self.inner.fast.load(Ordering::Relaxed)
    }

    /// The fast stop ([`stop_now`](Self::stop_now), or a signal installed
    /// with [`stop_now_on_quietly`](Self::stop_now_on_quietly)), for what
    /// must notice it without a thread to tell it
    /// ([`Stream::cut_on`](crate::Stream::cut_on)).
    pub fn fast_stop(&self) -> FastStop {
        FastStop {
            flag: Arc::clone(&self.inner.fast),
            fd: Arc::clone(&self.inner.cut_read),
        }
    }

    fn enter_draining(&self) {
        let mut p = self.inner.phase.lock();
        if *p < Phase::Draining {
            *p = Phase::Draining;
            self.inner.changed.notify_all();
        }
    }

    /// Record that the stop asked for (now or later) hands over to a
    /// successor: another generation serves the same listeners, so a
    /// connection that has not sent a byte may be passed to it
    /// ([`HandOver`](crate::HandOver)) instead of being waited on.
    pub fn set_successor(&self) {
        self.inner.successor.store(true, Ordering::SeqCst);
    }

    /// Does a successor take over once this process stops?
    pub fn has_successor(&self) -> bool {
        self.inner.successor.load(Ordering::SeqCst)
    }

    /// Has a stop been asked for?
    pub fn is_stopping(&self) -> bool {
        self.inner.draining.load(Ordering::Relaxed)
    }

    /// The flag [`Stream::is_draining`](crate::Stream::is_draining) reads.
    pub fn draining_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.inner.draining)
    }

    /// A descriptor that turns readable when a stop is asked, for `poll`.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.inner.wake_read.as_fd()
    }

    /// Mark the listening sockets as shared with other processes (a child of
    /// the process manager): stopping must then leave them listening, for
    /// the siblings and the next generation, instead of shutting them down.
    pub fn set_shared_listeners(&self) {
        self.inner.shared_listeners.store(true, Ordering::Relaxed);
    }

    /// The generation this process belongs to (raised by graceful restarts).
    pub fn generation(&self) -> u32 {
        self.inner.generation.load(Ordering::Relaxed)
    }

    /// Record the generation this process belongs to.
    pub fn set_generation(&self, generation: u32) {
        self.inner.generation.store(generation, Ordering::Relaxed);
    }

    /// Does this process own its listening sockets alone?
    pub fn owns_listeners(&self) -> bool {
        !self.inner.shared_listeners.load(Ordering::Relaxed)
    }

    /// Stop as the process manager does: now on SIGTERM or SIGINT (a fast
    /// stop, [`stop_now`](Self::stop_now)), gracefully on SIGWINCH
    /// ([`stop`](Self::stop)). Spawns a thread that waits for the signals
    /// (signal-hook), so nothing runs in a signal handler but a write to a
    /// pipe; a SIGTERM after a SIGWINCH cuts the graceful stop short.
    pub fn stop_on_signals(&self) -> Result<()> {
        use signal_hook::consts::{SIGINT, SIGTERM, SIGWINCH};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGWINCH])
            .map_err(|e| Error::io("installing signal handlers", e))?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("mpm-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    let name = signal_name(sig);
                    if sig == SIGWINCH {
                        crate::log_notice!(
                            "mpm: received {name}: graceful stop: requests in flight finish first"
                        );
                        me.stop();
                    } else {
                        crate::log_notice!(
                            "mpm: received {name}: fast stop: closing every connection now"
                        );
                        me.stop_now();
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("starting the signal thread", e))?;
        Ok(())
    }

    /// Stop gracefully when the process receives any of `signals`, without
    /// a thread: the handlers set the draining flag and write to the stop
    /// pipe, and nothing else. For a process that must stay single-threaded
    /// (a prefork child). Its phase is not moved; wait with
    /// [`wait_stop`](Self::wait_stop).
    pub fn stop_on_quietly(&self, signals: &[i32]) -> Result<()> {
        self.on_quietly(signals, false)
    }

    /// Stop now ([`stop_now`](Self::stop_now)) when the process receives
    /// any of `signals`, without a thread, as
    /// [`stop_on_quietly`](Self::stop_on_quietly) does.
    pub fn stop_now_on_quietly(&self, signals: &[i32]) -> Result<()> {
        self.on_quietly(signals, true)
    }

    fn on_quietly(&self, signals: &[i32], fast: bool) -> Result<()> {
        let io = |e| Error::io("installing signal handlers", e);
        for &sig in signals {
            // signal-hook runs a signal's actions in the order they were
            // registered: the fast flag is set before a worker can see the
            // draining one.
            if fast {
                signal_hook::flag::register(sig, Arc::clone(&self.inner.fast)).map_err(io)?;
                let cut = self.inner.cut_write.try_clone().map_err(io)?;
                signal_hook::low_level::pipe::register(sig, cut).map_err(io)?;
            }
            signal_hook::flag::register(sig, Arc::clone(&self.inner.draining)).map_err(io)?;
            let wake = self.inner.wake_write.try_clone().map_err(io)?;
            signal_hook::low_level::pipe::register(sig, wake).map_err(io)?;
        }
        Ok(())
    }

    /// Record a successor ([`set_successor`](Self::set_successor)) when the
    /// process receives any of `signals`, from a handler that only stores a
    /// flag. Install it before the stop handlers for the same signals, so
    /// that the flag is set by the time a woken worker looks.
    pub fn successor_on_quietly(&self, signals: &[i32]) -> Result<()> {
        for &sig in signals {
            signal_hook::flag::register(sig, Arc::clone(&self.inner.successor))
                .map_err(|e| Error::io("installing signal handlers", e))?;
        }
        Ok(())
    }

    /// Block until a stop is asked for (by [`stop`](Self::stop) or a
    /// signal), whichever way it was installed; then move to
    /// [`Phase::Draining`].
    pub fn wait_stop(&self) {
        while !self.is_stopping() {
            let mut fds = [nix::poll::PollFd::new(
                self.wake_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16));
        }
        self.set_phase(Phase::Draining);
    }

    /// Stop gracefully when the process receives any of `signals`, from a
    /// signal thread (see [`stop_on_signals`](Self::stop_on_signals)).
    pub fn stop_on(&self, signals: &[i32]) -> Result<()> {
        let mut signals = signal_hook::iterator::Signals::new(signals)
            .map_err(|e| Error::io("installing signal handlers", e))?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("mpm-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    crate::log_notice!(
                        "mpm: received {}: graceful stop: requests in flight finish first",
                        signal_name(sig)
                    );
                    me.stop();
                }
            })
            .map_err(|e| Error::io("starting the signal thread", e))?;
        Ok(())
    }
}

/// A signal's name (`SIGTERM`), for the log; its number if it has none.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string())
}
