//! The worker model's accept strategy: one thread at a time holds the
//! listener mutex and waits, in `poll` (or epoll, or select) over every
//! listener and the stop pipe, for a connection to accept. The loop itself
//! is prefork's too ([`mpm_core::take_turns`], where what counts as an
//! accept wait is explained); this model brings only its lock, an
//! in-process mutex.

use std::io;
use std::sync::atomic::AtomicU64;

use parking_lot::{Mutex, MutexGuard};

use mpm_core::listener_poller::{ListenerPoller, PollerKind};
use mpm_core::take_turns::{self, AcceptErrors, Accepted, Turn};
use mpm_core::{Lifecycle, Listener};

/// The listeners and the mutex that lets one thread at a time wait on them,
/// as httpd's worker MPM does: the others sleep on the mutex, not in the
/// kernel, so a new connection wakes exactly one thread.
#[derive(Debug)]
pub struct ListenerMutex {
    listeners: Vec<Listener>,
    /// The turn, and the poller that only its holder uses.
    turn: Mutex<ListenerPoller>,
    /// When the last holder gave the turn up (monotonic ns).
    released: AtomicU64,
    errors: AcceptErrors,
}

impl ListenerMutex {
    /// Share these listeners between threads, which wait on them with a
    /// poller of `kind` that also wakes when the lifecycle stops.
    pub fn new(
        listeners: Vec<Listener>,
        kind: PollerKind,
        lifecycle: &Lifecycle,
    ) -> mpm_core::Result<Self> {
        let poller = ListenerPoller::new(kind, &listeners, lifecycle.wake_fd())?;
        Ok(ListenerMutex {
            listeners,
            turn: Mutex::new(poller),
            released: AtomicU64::new(0),
            errors: AcceptErrors::new(),
        })
    }

    /// The listeners.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// Wait for our turn, then for a connection on any listener
    /// ([`take_turns::accept`]). `None` once the lifecycle is stopping.
    pub fn accept(&self, lifecycle: &Lifecycle) -> Option<Accepted> {
        // An in-process mutex cannot fail: the only error is the turn's.
        take_turns::accept(&self.listeners, self, lifecycle, &self.errors)
            .ok()
            .flatten()
    }
}

impl Turn for ListenerMutex {
    type Held<'a> = MutexGuard<'a, ListenerPoller>;

    fn try_take(&self) -> io::Result<Option<Self::Held<'_>>> {
        Ok(self.turn.try_lock())
    }

    /// Never interrupted, and need not be: a stop wakes the holder (the
    /// stop pipe is in its poller), whose release lets the next one in to
    /// see the stop.
    fn take(&self, _stopping: &dyn Fn() -> bool) -> io::Result<Option<Self::Held<'_>>> {
        Ok(Some(self.turn.lock()))
    }

    fn give_back<'b>(&'b self, held: Self::Held<'b>) -> io::Result<()> {
        drop(held);
        Ok(())
    }

    fn released(&self) -> Option<&AtomicU64> {
        Some(&self.released)
    }
}
