//! Multishot accept: one submission per listening socket yields a
//! completion per new connection, until the loop cancels it (every worker
//! busy, the connection cap, this process over its share of the
//! connections, a stop) and arms it again.

use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

use mpm_core::loop_parts::timeout_queues::TimeoutKind;
use mpm_core::loop_parts::worker_pool::Conn;
use mpm_core::panics::catch;
use mpm_core::{blocking::log_panic, ConnectionHandler, Stream, Wait};
use mpm_sys::ring::Completion;

use crate::ring_loop::{user_data, Entry, Op, Parked, RingLoop, State};

impl<H: ConnectionHandler> RingLoop<H> {
    /// A completion of listener `index`'s multishot accept.
    pub(crate) fn accepted(&mut self, index: usize, c: &mut Completion) {
        if let Some(fd) = c.accepted() {
            let socket = TcpStream::from(fd);
            if let Ok(peer) = socket.peer_addr() {
                let stream = Stream::accepted_nonblocking(socket, peer, Arc::clone(&self.draining));
                self.serve_new(stream);
            }
        }
        if c.more {
            return;
        }
        // The accept ended: cancelled, or failed.
        if let Some(a) = self.armed.get_mut(index) {
            *a = false;
        }
        if let Some(a) = self.cancelling.get_mut(index) {
            *a = false;
        }
        match -c.result {
            libc::ECANCELED => self.take_woken_for(index),
            // The master shut the listener down: the server is stopping.
            libc::EINVAL => self.listening = false,
            e if c.result < 0 => self.accept_failed(std::io::Error::from_raw_os_error(e)),
            _ => {}
        }
        self.arm_listeners();
    }

    /// Listener `index`'s accept was cancelled: take the connections the
    /// kernel may have woken it for in the meantime.
    ///
    /// A multishot accept waits on the listener exclusively (the kernel
    /// wakes one waiter a connection, not every sibling process), and a
    /// waiter that is being cancelled still takes the wake-up. So a
    /// connection that arrived between this loop's decision to stop
    /// accepting and the kernel's processing of the cancel woke this ring's
    /// accept, which then ended with `ECANCELED` without accepting it, and
    /// no sibling was told: it waited in the accept queue, while a sibling
    /// listened with nothing to do, until the next connection arrived or an
    /// accept was armed again: 0.1 to 0.64 s under `wrk -c 4` here, whose
    /// connections reconnect together at `--max-keepalive-requests`, as the
    /// two processes' balance moved. What is queued once the cancel is done
    /// is therefore taken here, as an accept that completed before its
    /// cancel is served. A connection arriving after the cancel wakes a
    /// sibling instead; if both try for it, one gets `WouldBlock`. A
    /// stopping loop takes none: it serves no new connection.
    fn take_woken_for(&mut self, index: usize) {
        if self.listening || self.stop_deadline.is_some() || self.lifecycle.is_stopping() {
            // Listening again: the accept armed next tries the queue first.
            return;
        }
        while self.slots.len() < self.max_conns {
            let Some(listener) = self.listeners.get(index) else {
                return;
            };
            match listener.accept_nonblocking() {
                Ok((socket, peer)) => {
                    self.stats.taken_after_cancel += 1;
                    let stream =
                        Stream::accepted_nonblocking(socket, peer, Arc::clone(&self.draining));
                    self.serve_new(stream);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // WouldBlock (none queued) or a failure the accept armed
                // next will meet and report.
                Err(_) => return,
            }
        }
    }

    /// Out of descriptors (or memory): keep serving, stop accepting a while.
    fn accept_failed(&mut self, e: std::io::Error) {
        if matches!(
            e.raw_os_error(),
            Some(libc::ECONNABORTED) | Some(libc::EINTR) | Some(libc::EAGAIN)
        ) {
            return;
        }
        if self
            .last_accept_error_log
            .is_none_or(|t| self.now.duration_since(t) >= Duration::from_secs(1))
        {
            mpm_core::log_error!("mpm: accept failed: {e}; pausing new connections");
            self.last_accept_error_log = Some(self.now);
        }
        self.accept_paused_until = Some(self.now + Duration::from_millis(100));
        self.set_listening(false);
    }

    /// The hand-over channel has connections: receive them.
    pub(crate) fn hand_over_ready(&mut self, index: usize, _c: &Completion) {
        if let Some(a) = self.armed.get_mut(index) {
            *a = false;
        }
        if let Some(a) = self.cancelling.get_mut(index) {
            *a = false;
        }
        for _ in 0..64 {
            if !self.listening {
                break;
            }
            let Some(listener) = self.listeners.get(index) else {
                break;
            };
            match listener.accept_nonblocking() {
                Ok((socket, peer)) => {
                    let stream =
                        Stream::accepted_nonblocking(socket, peer, Arc::clone(&self.draining));
                    self.serve_new(stream);
                }
                Err(_) => break,
            }
        }
        self.arm_listeners();
    }

    /// A new connection: in ring mode, its receive armed, waiting for its
    /// first request.
    fn serve_new(&mut self, mut stream: Stream) {
        self.stats.accepted += 1;
        if let Some(s) = self.slot {
            s.record_accept(0);
        }
        stream.set_ring_mode();
        let handler = &mut self.handler;
        let state = match catch(|| handler.connected(&stream)) {
            Ok(state) => state,
            Err(p) => {
                self.stats.panics += 1;
                log_panic("connected", &p, &stream);
                return;
            }
        };
        let key = self.key();
        let fd = stream.as_fd().as_raw_fd();
        let t = self.slots.insert(Entry {
            key,
            fd,
            recv: false,
            recv_cancelled: false,
            send: false,
            client_poll: None,
            upstream: None,
            state: State::Busy,
        });
        self.park(
            t,
            Box::new(Conn::new(stream, state)),
            Parked::Read(Wait::Request),
            TimeoutKind::Request,
        );
        self.arm_recv(t);
        if let Some(Entry {
            state: State::Parked { conn, .. },
            recv,
            ..
        }) = self.slots.get_mut(t)
        {
            conn.stream.set_ring_owns(*recv, true);
        }
    }

    /// Accept only while a worker is free, the connection cap allows, no
    /// descriptor shortage pause runs, the server is not stopping, and
    /// (with siblings sharing the listeners) this process holds no more
    /// than its share.
    pub(crate) fn update_listening(&mut self) {
        if self.accept_paused_until.is_some_and(|t| self.now >= t) {
            self.accept_paused_until = None;
        }
        let able = self.stop_deadline.is_none()
            && !self.lifecycle.is_stopping()
            && self.accept_paused_until.is_none()
            && self.in_flight < self.threads
            && self.slots.len() < self.max_conns;
        let open = self.slots.len();
        let want = self.gate.want(self.now, able, open, self.listening);
        if want != self.listening {
            self.set_listening(want);
        }
    }

    /// Arm (or cancel) every listener's accept.
    pub(crate) fn set_listening(&mut self, on: bool) {
        self.listening = on;
        self.arm_listeners();
    }

    fn arm_listeners(&mut self) {
        for i in 0..self.listeners.len() {
            let fd = self.listeners[i].as_fd().as_raw_fd();
            let channel = self.listeners[i].hand_over_channel().is_some();
            let op = if channel {
                Op::ListenerPoll
            } else {
                Op::Accept
            };
            let ud = user_data(op, 0, i);
            if self.listening && !self.armed[i] {
                let armed = if channel {
                    self.ring.poll_once(fd, true, false, ud)
                } else {
                    self.ring.accept_multi(fd, ud)
                };
                self.armed[i] = armed.is_ok();
            } else if !self.listening && self.armed[i] && !self.cancelling[i] {
                self.cancelling[i] = self.ring.cancel(ud).is_ok();
            }
        }
    }
}
