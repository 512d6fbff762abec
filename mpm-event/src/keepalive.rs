//! Idle keep-alive connections in the event model: they wait parked in the
//! loop's epoll set, holding no thread; a stop closes them after the grace,
//! sparing one whose next request has arrived.

use std::os::fd::AsRawFd;

use mpm_core::blocking::has_pending_input;
use mpm_core::{ConnectionHandler, Wait};

use crate::event_loop::{EventLoop, Parked, Slot};

impl<H: ConnectionHandler> EventLoop<H> {
    /// Close the idle keep-alive connections of a stopping loop, except one
    /// whose next request has arrived (its event not yet handled): that one
    /// is served first, with `Connection: close`, since closing it would
    /// drop a request the client had sent.
    pub(crate) fn close_idle(&mut self) {
        let waiting: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Parked {
                    wait: Parked::Read(Wait::KeepAlive),
                    conn,
                } if has_pending_input(conn.stream.as_raw_fd()) => Some(t),
                _ => None,
            })
            .collect();
        self.again.extend(waiting.iter().copied());
        self.close_parked(|w| w == Parked::Read(Wait::KeepAlive));
    }

    pub(crate) fn close_parked(&mut self, pick: impl Fn(Parked) -> bool) {
        let spared = std::mem::take(&mut self.again);
        let doomed: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Parked { wait, .. } if pick(*wait) && !spared.contains(&t) => Some(t),
                _ => None,
            })
            .collect();
        self.again = spared;
        for t in doomed {
            self.close(t);
        }
    }
}
