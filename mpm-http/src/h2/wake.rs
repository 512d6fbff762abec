//! The waker the step polls `h2` with: it only records that it was woken.
//! `h2` wakes the connection's task when a stream queued frames, and a
//! stream's when its window opened or its data came; the step polls
//! everything again while the flag says something moved, then goes back
//! to the socket. No thread is ever woken: the one polling is the one to
//! notice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// Set by any wake, cleared by the step before each round of polls.
#[derive(Debug, Default)]
pub(crate) struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

impl Flag {
    /// A waker that sets this flag.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::clone(self))
    }

    /// Was it woken since the last call? Clears it.
    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Flag;

    #[test]
    fn a_wake_is_seen_once() {
        let flag = Arc::new(Flag::default());
        let waker = flag.waker();
        assert!(!flag.take());
        waker.wake_by_ref();
        assert!(flag.take());
        assert!(!flag.take(), "cleared by the look");
        waker.wake();
        assert!(flag.take());
    }
}
