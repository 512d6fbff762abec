//! The master's signals: flags set by signal-hook handlers and a self-pipe
//! the master polls, so that nothing runs in a handler but a store and a
//! write.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
use signal_hook::SigId;

use mpm_core::{Error, Result};

/// Flags set by signal handlers, and the registrations to undo in a child.
pub(crate) struct Signals {
    pub(crate) stop: Arc<AtomicBool>,
    /// Which stop signal came last, for the log.
    stop_signal: Arc<AtomicUsize>,
    pub(crate) graceful_restart: Arc<AtomicBool>,
    pub(crate) restart: Arc<AtomicBool>,
    pub(crate) upgrade: Arc<AtomicBool>,
    pub(crate) child_exited: Arc<AtomicBool>,
    pub(crate) wake_read: OwnedFd,
    _wake_write: OwnedFd,
    ids: Vec<SigId>,
}

impl Signals {
    pub(crate) fn install() -> Result<Signals> {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|e| Error::io("creating the signal pipe", e.into()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let graceful_restart = Arc::new(AtomicBool::new(false));
        let restart = Arc::new(AtomicBool::new(false));
        let upgrade = Arc::new(AtomicBool::new(false));
        let child_exited = Arc::new(AtomicBool::new(false));
        let stop_signal = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        let io = |e| Error::io("installing signal handlers", e);
        for sig in [SIGTERM, SIGINT, SIGWINCH] {
            ids.push(
                signal_hook::flag::register_usize(sig, Arc::clone(&stop_signal), sig as usize)
                    .map_err(io)?,
            );
        }
        for (sig, flag) in [
            (SIGTERM, &stop),
            (SIGINT, &stop),
            (SIGWINCH, &stop),
            (SIGUSR1, &graceful_restart),
            (SIGHUP, &restart),
            (SIGUSR2, &upgrade),
            (SIGCHLD, &child_exited),
        ] {
            ids.push(signal_hook::flag::register(sig, Arc::clone(flag)).map_err(io)?);
            let wake = w.try_clone().map_err(io)?;
            ids.push(signal_hook::low_level::pipe::register(sig, wake).map_err(io)?);
        }
        Ok(Signals {
            stop,
            stop_signal,
            graceful_restart,
            restart,
            upgrade,
            child_exited,
            wake_read: r,
            _wake_write: w,
            ids,
        })
    }

    /// How the last stop was asked for, for the log: the signal's name
    /// (`SIGTERM`), or "told to stop" when it came from the program.
    pub(crate) fn stop_cause(&self) -> String {
        match self.stop_signal.load(Ordering::SeqCst) {
            0 => "told to stop".to_string(),
            sig => format!("received {}", mpm_core::signal_name(sig as i32)),
        }
    }

    /// Is the stop asked for a fast one? SIGTERM and SIGINT stop now (as
    /// nginx's `-s stop`, httpd's `-k stop`), SIGWINCH gracefully; a stop
    /// from the program is as `lifecycle` was told
    /// ([`Lifecycle::stop_now`](mpm_core::Lifecycle::stop_now) or
    /// [`stop`](mpm_core::Lifecycle::stop)).
    pub(crate) fn stop_is_fast(&self, lifecycle: &mpm_core::Lifecycle) -> bool {
        match self.stop_signal.load(Ordering::SeqCst) {
            0 => lifecycle.is_fast_stop(),
            sig => sig != SIGWINCH as usize,
        }
    }

    pub(crate) fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!(nix::unistd::read(self.wake_read.as_raw_fd(), &mut buf), Ok(n) if n > 0) {}
    }

    /// In a fresh child: the master's handlers must not fire here.
    pub(crate) fn uninstall(&self) {
        for id in &self.ids {
            signal_hook::low_level::unregister(*id);
        }
    }
}
