//! Idle keep-alive connections in the prefork model: the child waits on the
//! connection and the stop pipe together, so that a stop closes an idle
//! connection at once.

use std::net::TcpStream;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use mpm_core::blocking::{await_first_request, FirstRequest, IdlePark};
use mpm_core::{HandOver, Lifecycle, STOP_GRACE};

/// A single-threaded child cannot be woken from a blocking read by another
/// thread, so an idle keep-alive wait polls the connection together with the
/// stop pipe: a stop closes idle connections at once.
pub(crate) struct KeepAliveWait<'a> {
    pub(crate) lifecycle: &'a Lifecycle,
    pub(crate) timeout: Duration,
    /// Where a connection goes that has sent nothing when a successor takes over.
    pub(crate) hand_over: Option<&'a HandOver>,
}

impl IdlePark for KeepAliveWait<'_> {
    fn first_request(&mut self, socket: &TcpStream, within: Duration) -> FirstRequest {
        await_first_request(socket, within, self.lifecycle, self.hand_over)
    }

    fn park(&mut self, conn: BorrowedFd<'_>) -> bool {
        if self.lifecycle.is_stopping() {
            // A fast stop gives no grace: the connection closes at once.
            return !self.lifecycle.is_fast_stop()
                && mpm_core::blocking::input_arrives_within(conn, STOP_GRACE);
        }
        let mut fds = [
            PollFd::new(conn, PollFlags::POLLIN),
            PollFd::new(self.lifecycle.wake_fd(), PollFlags::POLLIN),
        ];
        let deadline = mpm_core::deadline(Instant::now(), self.timeout);
        loop {
            // Buffered access-log lines are due within a second even while
            // idle, and this single-threaded child has no flusher thread.
            let left = deadline.saturating_duration_since(Instant::now());
            let flush = mpm_core::buffered_output::due_in();
            let wait = flush.map_or(left, |f| f.min(left));
            let ms = wait.as_millis().min(i32::MAX as u128) as i32;
            let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(0) if flush.is_some() && Instant::now() < deadline => {
                    mpm_core::buffered_output::flush_stale();
                }
                Err(_) | Ok(0) => return false, // keep-alive timeout: close
                Ok(_) => break,
            }
        }
        // A request that has arrived is served even when stopping (with
        // `Connection: close`): closing would drop a request the client had
        // already sent, the reload race nginx users know. Told to stop while
        // idle, it waits a moment for a request already on its way.
        if self.lifecycle.is_fast_stop() {
            return false;
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            return true;
        }
        mpm_core::blocking::input_arrives_within(conn, STOP_GRACE)
    }

    fn unpark(&mut self) {}

    fn closing(&mut self) {}
}
