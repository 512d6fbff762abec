//! What a prefork child runs: setup → serve → drain, one connection at a
//! time, in a single-threaded process.

use std::sync::Arc;

use mpm_core::blocking::{serve_blocking, Timeouts};
use mpm_core::listener_poller::ListenerPoller;
use mpm_core::scoreboard::{Slot, WorkerState};
use mpm_core::take_turns::{self, AcceptErrors, Accepted};
use mpm_core::{
    Drain, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, MpmSettings, Phase, Result, Stream,
};

use crate::accept::{AcceptLock, AcceptMutex, ChildTurn};
use crate::keepalive::KeepAliveWait;

/// The prefork MPM. Made in the master before forking (it holds the accept
/// mutex); [`Mpm::run`] is what each single-threaded child runs, with one
/// scoreboard slot.
#[derive(Debug)]
pub struct Prefork {
    lock: AcceptLock,
}

impl Prefork {
    /// Make the accept mutex of this kind ([`AcceptMutex::None`] for
    /// children that each listen on a socket of their own, `SO_REUSEPORT`).
    pub fn new(accept_mutex: AcceptMutex) -> Result<Prefork> {
        Ok(Prefork {
            lock: AcceptLock::create(accept_mutex)?,
        })
    }

    /// The accept mutex in use.
    pub fn accept_mutex(&self) -> AcceptMutex {
        self.lock.kind()
    }
}

impl Mpm for Prefork {
    fn kind(&self) -> MpmKind {
        MpmKind::Prefork
    }

    fn run<F: HandlerFactory>(
        &self,
        settings: &MpmSettings,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        // Setup: this child's turn at the mutex, its poller and its handler.
        settings.require_listeners(&listeners)?;
        let timeouts = Timeouts::inherited_by(settings, &listeners)?;
        let slot = slots.first();
        if let Some(s) = slot {
            s.claim(lifecycle.generation());
            if self.lock.takes_turns() {
                s.mark_accept_mutex();
            }
        }
        interrupt_on_stop_signals();
        // Made in the child: an epoll set must not be shared across fork.
        let poller = ListenerPoller::new(settings.poller, &listeners, lifecycle.wake_fd())?;
        let turn = ChildTurn::new(self.lock.for_child()?, poller);
        let errors = AcceptErrors::new();
        // One thread, and layers are told so before they build (they start
        // no thread of their own here).
        mpm_core::set_serves_on_one_thread();
        let mut handler = factory.build();
        let draining = lifecycle.draining_flag();
        let fast_stop = lifecycle.fast_stop();
        let hand_over = listeners.iter().find_map(Listener::hand_over_channel);
        // Serve: one connection at a time, the process itself the worker.
        lifecycle.set_phase(Phase::Serving);
        let mut served = 0u64;
        loop {
            if let Some(s) = slot {
                s.set_state(WorkerState::Idle);
            }
            let Some(Accepted {
                socket,
                peer,
                waited,
            }) = take_turns::accept(&listeners, &turn, lifecycle, &errors)?
            else {
                break;
            };
            if let Some(s) = slot {
                s.record_accept(waited.as_nanos() as u64);
            }
            let Ok(mut stream) = Stream::new(socket, peer, true, Arc::clone(&draining)) else {
                continue;
            };
            stream.set_score_slot(slot);
            // No other thread can shut this connection down: a fast stop
            // (SIGTERM, from the master at once or at its graceful
            // deadline) makes its reads and writes fail instead.
            stream.cut_on(fast_stop.clone());
            let mut park = KeepAliveWait {
                lifecycle,
                timeout: settings.keepalive_timeout,
                hand_over,
            };
            serve_blocking(&mut handler, stream, &timeouts, &mut park);
            // No flusher thread here: buffered log lines go out before
            // this child waits, perhaps for long, for its next connection.
            mpm_core::buffered_output::flush_now();
            served += 1;
            if settings.max_connections_per_child > 0
                && served >= settings.max_connections_per_child
            {
                break; // recycled: the master forks a fresh child
            }
            if lifecycle.is_stopping() {
                break;
            }
        }
        // Drain: the connection in hand was finished above (an idle one was
        // closed after the grace by `KeepAliveWait`), or cut by a fast stop;
        // the listeners are the master's, shared with the siblings and the
        // next generation. The drain's deadline is kept by the master, which
        // turns a graceful stop into a fast one (SIGTERM) when it passes,
        // and kills a child still running `ABANDON_AFTER` later: this
        // single-threaded child has no thread to keep it.
        let _drain = Drain::begin(lifecycle, &listeners, settings.graceful_timeout);
        if let Some(s) = slot {
            s.release();
        }
        lifecycle.set_phase(Phase::Stopped);
        Ok(())
    }
}

/// Let the stop signals interrupt blocking system calls (an `fcntl` or
/// `flock` wait for the accept mutex) instead of restarting them, so that a
/// child told to go while it waits notices.
fn interrupt_on_stop_signals() {
    use nix::sys::signal::Signal;
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGUSR1,
        Signal::SIGWINCH,
    ] {
        // A failure leaves the call restarting: a stop is then noticed once
        // the turn comes, as before this was set.
        let _ = mpm_sys::signals::interrupt_system_calls(sig);
    }
}
