//! The event model's accept strategy: the loop accepts, non-blocking, while
//! a worker is free and the connection cap allows; otherwise it takes the
//! listeners out of its epoll set (httpd's "listeners disabled") and leaves
//! connections in the backlog, for a sibling process or for later.
//!
//! Sibling processes share each listening socket (one accept queue, so no
//! connection is lost when a process exits) and register it with
//! `EPOLLEXCLUSIVE`: a new connection wakes one process that sleeps in
//! `epoll_wait`, not all of them. Such a process accepts one connection per
//! wake-up, so that a burst spreads over the processes that are idle; one
//! that owns its listeners alone accepts in batches. A process that holds
//! more connections than the sibling holding fewest (by a slack) stops
//! accepting until they even out ([`mpm_core::ConnectionLedger`]): a burst
//! of keep-alive connections would otherwise stay with whoever was awake.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::epoll::{EpollEvent, EpollFlags};

use mpm_core::blocking::log_panic;
use mpm_core::panics::catch;
use mpm_core::{ConnectionHandler, Error, Result, Stream, Wait};

use crate::event_loop::{EventLoop, Parked, Slot, LISTENER};
use crate::timeout_queues::TimeoutKind;
use crate::worker_pool::Conn;

impl<H: ConnectionHandler> EventLoop<H> {
    /// Accept from listener `index`; `woken`: a listener event asked for it
    /// (an accept that finds nothing then counts as an empty wake-up).
    pub(crate) fn accept(&mut self, index: usize, woken: bool) {
        for n in 0..self.accept_batch {
            // The flag, not only the deadline: a stop signal handled in the
            // same wait as the listener's readiness must not take one more.
            if self.slots.len() >= self.max_conns
                || self.stop_deadline.is_some()
                || self.lifecycle.is_stopping()
            {
                return;
            }
            let Some(listener) = self.listeners.get(index) else {
                return;
            };
            match listener.accept_nonblocking() {
                Ok((socket, peer)) => {
                    self.stats.accepted += 1;
                    if let Some(s) = self.slot {
                        s.record_accept(0);
                    }
                    let stream =
                        Stream::accepted_nonblocking(socket, peer, Arc::clone(&self.draining));
                    let handler = &mut self.handler;
                    let state = match catch(|| handler.connected(&stream)) {
                        Ok(state) => state,
                        Err(p) => {
                            self.stats.panics += 1;
                            log_panic("connected", &p, &stream);
                            continue;
                        }
                    };
                    let t = self.slots.insert(Slot::Busy {
                        readable: false,
                        writable: false,
                        end: false,
                    });
                    let flags = EpollFlags::EPOLLIN
                        | EpollFlags::EPOLLOUT
                        | EpollFlags::EPOLLRDHUP
                        | EpollFlags::EPOLLET;
                    if self
                        .epoll
                        .add(stream.socket().as_fd(), EpollEvent::new(flags, t as u64))
                        .is_err()
                    {
                        self.slots.remove(t);
                        continue;
                    }
                    // Registering reports data already there, so no read is needed now.
                    self.park(
                        t,
                        Box::new(Conn::new(stream, state)),
                        Parked::Read(Wait::Request),
                        TimeoutKind::Request,
                    );
                }
                Err(e) => {
                    match e.kind() {
                        ErrorKind::WouldBlock => {
                            if woken && n == 0 {
                                self.stats.empty_wakeups += 1;
                            }
                            return;
                        }
                        ErrorKind::Interrupted => return,
                        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset => continue,
                        _ => {}
                    }
                    if e.raw_os_error() == Some(libc::EINVAL) {
                        // The master shut the listener down: the server is stopping.
                        let _ = self.set_listening(false);
                        return;
                    }
                    // Out of descriptors (or memory): keep serving, stop accepting a while.
                    if self
                        .last_accept_error_log
                        .is_none_or(|t| self.now.duration_since(t) >= Duration::from_secs(1))
                    {
                        mpm_core::log_error!("mpm: accept failed: {e}; pausing new connections");
                        self.last_accept_error_log = Some(self.now);
                    }
                    self.accept_paused_until = Some(self.now + Duration::from_millis(100));
                    let _ = self.set_listening(false);
                    return;
                }
            }
        }
    }

    /// Accept only while a worker is free, the connection cap allows, no
    /// descriptor shortage pause is running, the server is not stopping,
    /// and (with siblings sharing the listeners) this process holds no more
    /// connections than its share.
    pub(crate) fn update_listening(&mut self) {
        if self.accept_paused_until.is_some_and(|t| self.now >= t) {
            self.accept_paused_until = None;
        }
        let able = self.stop_deadline.is_none()
            && self.accept_paused_until.is_none()
            && self.in_flight < self.threads
            && self.slots.len() < self.max_conns;
        // Asked every turn: alone, a loop that stays as able as it was
        // has nothing to change, publish or count.
        if able == self.listening && self.gate.alone() {
            return;
        }
        let open = self.slots.len();
        let want = self.gate.want(self.now, able, open, self.listening);
        if want != self.listening {
            let _ = self.set_listening(want);
        }
    }

    pub(crate) fn set_listening(&mut self, on: bool) -> Result<()> {
        if on == self.listening {
            return Ok(());
        }
        for i in 0..self.listeners.len() {
            let fd = self.listeners[i].as_fd();
            let r = if on {
                let token = LISTENER + i as u64;
                let exclusive = EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE;
                match self.exclusive {
                    true => match self.epoll.add(fd, EpollEvent::new(exclusive, token)) {
                        // Before Linux 4.5: every process wakes, as before.
                        Err(nix::errno::Errno::EINVAL) => {
                            self.exclusive = false;
                            mpm_core::log_info!(
                                "mpm: EPOLLEXCLUSIVE refused by this kernel; every idle \
                                 process wakes for a new connection"
                            );
                            self.epoll
                                .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, token))
                        }
                        r => r,
                    },
                    false => self
                        .epoll
                        .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, token)),
                }
            } else {
                self.epoll.delete(fd)
            };
            r.map_err(|e| Error::io("registering a listener", e.into()))?;
        }
        self.listening = on;
        Ok(())
    }
}
