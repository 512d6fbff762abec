//! Idle keep-alive connections in the event model: they wait parked in the
//! loop's epoll set, holding no thread; a stop closes them after the grace,
//! sparing one whose next request has arrived. A connection that has sent
//! nothing at all is handed to the next generation when there is one.

use std::os::fd::AsFd;

use mpm_core::blocking::has_pending_input;
use mpm_core::{ConnectionHandler, Wait};

use crate::event_loop::{EventLoop, Parked, Slot};

impl<H: ConnectionHandler> EventLoop<H> {
    /// Close the idle keep-alive connections of a stopping loop, except one
    /// whose next request has arrived (its event not yet handled): that one
    /// is served first, with `Connection: close`, since closing it would
    /// drop a request the client had sent.
    pub(crate) fn close_idle(&mut self) {
        self.hand_over_silent();
        let waiting: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Parked {
                    wait: Parked::Read(Wait::KeepAlive),
                    conn,
                    ..
                } if has_pending_input(&conn.stream) => Some(t),
                _ => None,
            })
            .collect();
        self.again.extend(waiting.iter().copied());
        // Each with the protocol's last word (HTTP/2's GOAWAY), spared
        // those to step again (their request has come).
        let idle: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Parked {
                    wait: Parked::Read(Wait::KeepAlive),
                    ..
                } if !self.again.contains(&t) => Some(t),
                _ => None,
            })
            .collect();
        for t in idle {
            self.timeouts.remove(t);
            if let Some(Slot::Parked { mut conn, .. }) = self.slots.try_remove(t) {
                self.say_goodbye(&mut conn);
            } // Dropped: closed.
        }
    }

    /// Stopping with a successor: pass every connection that has sent
    /// nothing yet (not even within the grace) to the next generation, as
    /// the blocking models do ([`mpm_core::HandOver`]). One the channel
    /// cannot take stays, and is served here.
    fn hand_over_silent(&mut self) {
        if !self.lifecycle.has_successor() {
            return;
        }
        let Some(channel) = self
            .listeners
            .iter()
            .position(|l| l.hand_over_channel().is_some())
        else {
            return;
        };
        let silent: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Parked {
                    wait: Parked::Read(Wait::Request),
                    conn,
                    ..
                } if self.handler.can_hand_over(&conn.state)
                    && !has_pending_input(&conn.stream) =>
                {
                    Some(t)
                }
                _ => None,
            })
            .collect();
        for t in silent {
            let Some(Slot::Parked { conn, .. }) = self.slots.get(t) else {
                continue;
            };
            let socket = conn.stream.socket().as_fd();
            let sent = self.listeners[channel]
                .hand_over_channel()
                .map(|c| c.send(socket));
            match sent {
                Some(Ok(())) => {
                    // The kernel holds the socket for the next owner: out of
                    // this set (closing our copy alone would leave it in),
                    // then closed here.
                    let _ = self.epoll.delete(socket);
                    if let Some(s) = self.slot {
                        s.record_hand_over();
                    }
                    self.close(t);
                }
                Some(Err(e)) => {
                    mpm_core::log_warn!(
                        "mpm: could not hand connections to the next generation ({e}); \
                         serving them here"
                    );
                    return;
                }
                None => return,
            }
        }
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
