//! The event model's accept strategy: the loop accepts, non-blocking, in
//! batches, while a worker is free and the connection cap allows; otherwise
//! it takes the listeners out of its epoll set (httpd's "listeners
//! disabled") and leaves connections in the backlog.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::epoll::{EpollEvent, EpollFlags};

use mpm_core::{ConnectionHandler, Error, Result, Stream, Wait};

use crate::event_loop::{EventLoop, Parked, Slot, LISTENER};
use crate::timeout_queues::TimeoutKind;
use crate::worker_pool::Conn;

/// Connections accepted per listener event before serving the others.
const ACCEPT_BATCH: usize = 64;

impl<H: ConnectionHandler> EventLoop<H> {
    pub(crate) fn accept(&mut self, index: usize) {
        for _ in 0..ACCEPT_BATCH {
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
                    let state = self.handler.connected(&stream);
                    let t = self.slots.insert(Slot::Busy {
                        readable: false,
                        writable: false,
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
                        Box::new(Conn { stream, state }),
                        Parked::Read(Wait::Request),
                        TimeoutKind::Request,
                    );
                }
                Err(e) => {
                    match e.kind() {
                        ErrorKind::WouldBlock | ErrorKind::Interrupted => return,
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
    /// descriptor shortage pause is running, and the server is not stopping.
    pub(crate) fn update_listening(&mut self) {
        if self.accept_paused_until.is_some_and(|t| self.now >= t) {
            self.accept_paused_until = None;
        }
        let want = self.stop_deadline.is_none()
            && self.accept_paused_until.is_none()
            && self.in_flight < self.threads
            && self.slots.len() < self.max_conns;
        if want != self.listening {
            if !want {
                self.stats.listener_pauses += 1;
            }
            let _ = self.set_listening(want);
        }
    }

    pub(crate) fn set_listening(&mut self, on: bool) -> Result<()> {
        if on == self.listening {
            return Ok(());
        }
        for (i, l) in self.listeners.iter().enumerate() {
            let fd = l.as_fd();
            let r = if on {
                self.epoll.add(
                    fd,
                    EpollEvent::new(EpollFlags::EPOLLIN, LISTENER + i as u64),
                )
            } else {
                self.epoll.delete(fd)
            };
            r.map_err(|e| Error::io("registering a listener", e.into()))?;
        }
        self.listening = on;
        Ok(())
    }
}
