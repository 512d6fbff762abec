//! Idle keep-alive connections in the worker model: what each worker thread
//! holds, for a stop that neither waits on idle connections nor touches a
//! closed descriptor.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::sys::socket::{shutdown, Shutdown};
use parking_lot::Mutex;

use mpm_core::blocking::{await_first_request, FirstRequest, IdlePark};
use mpm_core::{HandOver, Lifecycle};

#[derive(Debug, Clone, Copy)]
struct Slot {
    fd: RawFd,
    idle: bool,
}

const EMPTY: Slot = Slot {
    fd: -1,
    idle: false,
};

/// One slot per worker thread. A thread records its connection while it
/// holds one and marks it idle between requests; the stopping thread shuts
/// down idle connections for reading (their blocked read returns end-of-file)
/// and, after the graceful timeout, every connection.
///
/// Each slot has its own lock, taken only at these transitions, so threads do
/// not contend with each other. The lock also orders "register, then check
/// stopping" against "set stopping, then scan", so no idle connection is
/// missed.
#[derive(Debug)]
pub struct ConnectionSlots {
    slots: Vec<Mutex<Slot>>,
}

impl ConnectionSlots {
    /// `n` empty slots.
    pub fn new(n: usize) -> Self {
        ConnectionSlots {
            slots: (0..n).map(|_| Mutex::new(EMPTY)).collect(),
        }
    }

    /// Record that slot `i` serves the connection on `fd`.
    pub fn hold(&self, i: usize, fd: RawFd) {
        *self.slots[i].lock() = Slot { fd, idle: false };
    }

    /// Shut down every idle connection for reading: its thread wakes from its
    /// read with end-of-file and closes it. Busy ones finish their request.
    pub fn close_idle(&self) -> usize {
        self.shutdown_where(|s| s.idle, Shutdown::Read)
    }

    /// Shut down every connection still held, busy or not.
    pub fn close_all(&self) -> usize {
        self.shutdown_where(|_| true, Shutdown::Both)
    }

    /// Connections held right now.
    pub fn held(&self) -> usize {
        self.slots.iter().filter(|s| s.lock().fd >= 0).count()
    }

    fn shutdown_where(&self, pick: impl Fn(&Slot) -> bool, how: Shutdown) -> usize {
        let mut n = 0;
        for slot in &self.slots {
            let s = slot.lock();
            if s.fd >= 0 && pick(&s) {
                // The slot's lock is held, and a thread clears its slot (under
                // this lock) before closing the descriptor, so `fd` is still
                // the open connection it records. An error (the peer already
                // gone) changes nothing: the thread sees the end either way.
                let _ = shutdown(s.fd, how);
                n += 1;
            }
        }
        n
    }

    /// The [`IdlePark`] for slot `i`, for a server with this lifecycle
    /// (whose stop it watches) and hand-over channel (where a connection
    /// that has sent nothing goes when a successor takes over).
    pub fn parker<'a>(
        &'a self,
        i: usize,
        lifecycle: &'a Lifecycle,
        hand_over: Option<&'a HandOver>,
    ) -> SlotParker<'a> {
        SlotParker {
            slots: self,
            index: i,
            lifecycle,
            hand_over,
        }
    }
}

/// The [`IdlePark`] of one worker thread.
pub struct SlotParker<'a> {
    slots: &'a ConnectionSlots,
    index: usize,
    lifecycle: &'a Lifecycle,
    hand_over: Option<&'a HandOver>,
}

impl std::fmt::Debug for SlotParker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotParker")
            .field("index", &self.index)
            .finish()
    }
}

impl IdlePark for SlotParker<'_> {
    fn park(&mut self, fd: BorrowedFd<'_>) -> bool {
        *self.slots.slots[self.index].lock() = Slot {
            fd: fd.as_raw_fd(),
            idle: true,
        };
        // Checked after registering: a stop that began earlier is seen here,
        // one that begins later finds the slot idle and shuts it down. A
        // request already sent is answered either way (a shutdown for
        // reading still delivers what had arrived).
        // A fast stop gives no grace: the connection closes at once.
        !self.lifecycle.is_stopping()
            || (!self.lifecycle.is_fast_stop()
                && mpm_core::blocking::input_arrives_within(fd, mpm_core::STOP_GRACE))
    }

    fn first_request(&mut self, socket: &TcpStream, within: Duration) -> FirstRequest {
        // Polled with the stop pipe, not a blocking read: a stop with a
        // successor can then hand the connection over.
        await_first_request(socket, within, self.lifecycle, self.hand_over)
    }

    fn unpark(&mut self) {
        self.slots.slots[self.index].lock().idle = false;
    }

    fn closing(&mut self) {
        *self.slots.slots[self.index].lock() = EMPTY;
    }
}
