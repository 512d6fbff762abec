//! A connection's steps on the loop, what its last step asked for, and its
//! hand-offs to workers (and to the next generation).

use std::net::Shutdown;

use mpm_core::blocking::log_panic;
use mpm_core::loop_parts::timeout_queues::TimeoutKind;
use mpm_core::loop_parts::worker_pool::{Conn, Job, Step};
use mpm_core::panics::catch;
use mpm_core::scoreboard::WorkerState;
use mpm_core::{ConnectionHandler, Interest, Prefetch, Wait, LINGER_BYTES};

use std::io::{ErrorKind, Read};
use std::os::fd::AsFd;

use crate::ring_loop::{user_data, Entry, Leave, Op, Parked, RingLoop, State};

impl<H: ConnectionHandler> RingLoop<H> {
    /// Act on a parked connection whose wait is over.
    pub(crate) fn step(&mut self, t: usize) {
        let Some((wait, conn)) = self.unpark(t) else {
            return;
        };
        self.cancel_polls(t);
        match wait {
            Parked::Linger => {}
            Parked::Await(w) => {
                self.awaits.remove(&(w.until, t));
            }
            _ => self.timeouts.remove(t),
        }
        match wait {
            Parked::Read(_) => self.read_step(t, conn, false),
            Parked::Await(_) => self.read_step(t, conn, true),
            Parked::Write => self.write_step(t, conn),
            Parked::Linger => self.linger_drain(t, conn),
            Parked::Flush { linger } => {
                let pending =
                    self.slots.get(t).is_some_and(|e| e.send) || conn.stream.ring_output_len() > 0;
                if pending {
                    // Timed out with output unsent: closed.
                    self.close(t);
                } else if linger {
                    self.start_linger(t, conn);
                } else {
                    self.close(t);
                }
            }
        }
    }

    /// Whether the ring owns the stream's input (a receive is armed) and
    /// output (always, on the loop).
    fn own(&self, t: usize, conn: &mut Conn<H::Conn>) {
        let recv = self.slots.get(t).is_some_and(|e| e.recv);
        conn.stream.set_ring_owns(recv, true);
    }

    fn read_step(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, resumed: bool) {
        conn.stream.set_on_event_loop(true);
        self.own(t, &mut conn);
        self.lend_output(&mut conn);
        let Some(found) = self.guarded(&mut conn, "prefetch", |h, c| {
            h.prefetch(&mut c.state, &mut c.stream)
        }) else {
            return self.close(t);
        };
        match found {
            Prefetch::Wait(next) => self.apply(t, conn, next),
            Prefetch::Ready => self.dispatch(t, conn, Step::Read),
            Prefetch::ReadyInline => {
                if resumed {
                    self.stats.resumed_inline += 1;
                } else {
                    self.stats.inline_steps += 1;
                }
                conn.stream.set_score_slot(self.slot);
                let next = self.guarded(&mut conn, "readable", |h, c| {
                    h.readable(&mut c.state, &mut c.stream)
                });
                conn.stream.set_state(WorkerState::Idle);
                match next {
                    Some(next) => self.apply(t, conn, next),
                    None => self.close(t),
                }
            }
        }
    }

    fn write_step(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        let Some(inline) = self.guarded(&mut conn, "writes_without_blocking", |h, c| {
            h.writes_without_blocking(&c.state)
        }) else {
            return self.close(t);
        };
        if !inline {
            return self.dispatch(t, conn, Step::Write);
        }
        conn.stream.set_on_event_loop(true);
        conn.stream.set_score_slot(self.slot);
        self.own(t, &mut conn);
        self.lend_output(&mut conn);
        match self.guarded(&mut conn, "writable", |h, c| {
            h.writable(&mut c.state, &mut c.stream)
        }) {
            Some(next) => self.apply(t, conn, next),
            None => self.close(t),
        }
    }

    /// Run one handler step on the loop, catching a panic: `None` if it
    /// panicked (logged; the caller closes the connection).
    pub(crate) fn guarded<R>(
        &mut self,
        conn: &mut Conn<H::Conn>,
        step: &str,
        f: impl FnOnce(&mut H, &mut Conn<H::Conn>) -> R,
    ) -> Option<R> {
        let handler = &mut self.handler;
        let ran = catch(|| f(handler, conn));
        conn.stream.take_would_block();
        match ran {
            Ok(r) => Some(r),
            Err(p) => {
                self.stats.panics += 1;
                log_panic(step, &p, &conn.stream);
                None
            }
        }
    }

    /// Hand a connection to a worker, once the ring lets go of it.
    fn dispatch(&mut self, t: usize, conn: Box<Conn<H::Conn>>, step: Step) {
        self.stats.handoffs += 1;
        self.leave(t, conn, Leave::Worker(step));
    }

    /// Wait for the ring to let go of the connection (cancelling its
    /// receive), then send it where `to` says.
    pub(crate) fn leave(&mut self, t: usize, conn: Box<Conn<H::Conn>>, to: Leave) {
        let Some(e) = self.slots.get_mut(t) else {
            return;
        };
        if e.recv && !e.recv_cancelled {
            e.recv_cancelled = true;
            let _ = self.ring.cancel(user_data(Op::Recv, e.key, t));
        }
        e.state = State::Leaving { conn, to };
        // A send to a reader that stalls must not hold it forever.
        self.timeouts.push(TimeoutKind::Write, t, self.now);
        self.try_leave(t);
    }

    /// Go on if the ring holds none of the connection's I/O.
    pub(crate) fn try_leave(&mut self, t: usize) {
        let Some(e) = self.slots.get_mut(t) else {
            return;
        };
        if e.recv || e.send {
            return;
        }
        let State::Leaving { mut conn, to } = std::mem::replace(&mut e.state, State::Busy) else {
            return;
        };
        self.timeouts.remove(t);
        conn.stream.set_ring_owns(false, false);
        match to {
            Leave::Worker(step) => {
                conn.stream.set_on_event_loop(false);
                // Its writes to an upstream held this turn go first: a
                // worker cannot send this thread's.
                mpm_core::held_sends::flush();
                mpm_core::held_sends::open();
                self.in_flight += 1;
                if let Some(jobs) = &self.jobs {
                    if jobs
                        .send(Job {
                            token: t,
                            step,
                            conn,
                        })
                        .is_ok()
                    {
                        return;
                    }
                }
                self.in_flight -= 1;
                self.close(t);
            }
            Leave::HandOver => self.hand_over_one(t, conn),
        }
    }

    /// A worker gave a connection back.
    pub(crate) fn came_back(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, next: Interest) {
        self.own(t, &mut conn);
        self.apply(t, conn, next);
    }

    /// Park a connection as its last step asked, or close it.
    pub(crate) fn apply(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, interest: Interest) {
        self.reclaim(&mut conn);
        let (recv, send) = match self.slots.get(t) {
            Some(e) => (e.recv, e.send),
            None => return,
        };
        let gathered = conn.stream.ring_output_len() > 0;
        if gathered {
            self.dirty.push(t);
        }
        let pending_out = send || gathered;
        match interest {
            Interest::Read(wait) => {
                // Stopping: an idle connection closes, unless its next
                // request has already arrived.
                if self.stop_deadline.is_some()
                    && wait == Wait::KeepAlive
                    && !conn.stream.has_buffered_input()
                {
                    return self.say_goodbye(t, conn);
                }
                if wait == Wait::KeepAlive
                    && self
                        .guarded(&mut conn, "parked", |h, c| h.parked(&mut c.state))
                        .is_none()
                {
                    return self.close(t);
                }
                let more = !conn.stream.drained();
                let kind = match wait {
                    Wait::Request => TimeoutKind::Request,
                    Wait::KeepAlive => TimeoutKind::KeepAlive,
                };
                self.park(t, conn, Parked::Read(wait), kind);
                self.arm_recv(t);
                if more {
                    self.queue_resume(t);
                }
            }
            Interest::Write => {
                self.park(t, conn, Parked::Write, TimeoutKind::Write);
                if !pending_out {
                    // Written directly (by a worker) and the socket was
                    // full: wait for room.
                    self.poll_client_room(t);
                }
            }
            Interest::Yield => {
                self.stats.yields += 1;
                self.park(t, conn, Parked::Read(Wait::Request), TimeoutKind::Request);
                self.queue_resume(t);
            }
            Interest::Await(wait) => {
                self.stats.awaits += 1;
                let asks_client = wait.client_read || wait.client_write;
                if mpm_core::waiting::ends_on_hang_up(&wait) && conn.stream.peer_ended() {
                    // Hung up before it came to wait.
                    return self.abandon(t, conn);
                }
                let mut ready_now = wait.client_read && !conn.stream.drained();
                if let Some(fd) = wait.fd {
                    let key = self.key();
                    match self.ring.poll_once(
                        fd,
                        wait.read,
                        wait.write,
                        user_data(Op::Upstream, key, t),
                    ) {
                        Ok(()) => {
                            if let Some(e) = self.slots.get_mut(t) {
                                e.upstream = Some(key);
                            }
                        }
                        Err(_) => ready_now = true,
                    }
                }
                if let Some(e) = self.slots.get_mut(t) {
                    e.state = State::Parked {
                        conn,
                        wait: Parked::Await(wait),
                        queued: false,
                    };
                    self.awaits.insert((wait.until, t));
                }
                // Asked nothing of the client, it is still heard: its
                // hang-up ends the wait.
                if (wait.client_read || !asks_client) && !recv {
                    self.arm_recv(t);
                }
                if wait.client_write && !pending_out {
                    self.poll_client_room(t);
                }
                if ready_now {
                    self.queue_resume(t);
                }
            }
            Interest::Close => self.finish(t, conn, pending_out, false),
            Interest::Linger => self.finish(t, conn, pending_out, true),
        }
    }

    /// A stopping loop closes this idle connection: the protocol's last
    /// word first (HTTP/2's GOAWAY; HTTP/1.1 says nothing), gathered for
    /// the ring, then the close once it is sent.
    fn say_goodbye(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        self.own(t, &mut conn);
        let _ = self.guarded(&mut conn, "idle_at_stop", |h, c| {
            h.idle_at_stop(&mut c.state, &mut c.stream)
        });
        self.apply(t, conn, Interest::Close);
    }

    /// Close (or close lingering) once the output is sent.
    fn finish(&mut self, t: usize, conn: Box<Conn<H::Conn>>, pending_out: bool, linger: bool) {
        if pending_out {
            self.park(t, conn, Parked::Flush { linger }, TimeoutKind::Write);
        } else if linger {
            self.start_linger(t, conn);
        } else {
            self.close(t);
        }
    }

    fn poll_client_room(&mut self, t: usize) {
        let key = self.key();
        let Some(e) = self.slots.get_mut(t) else {
            return;
        };
        if e.client_poll.is_some() {
            return;
        }
        if self
            .ring
            .poll_once(e.fd, false, true, user_data(Op::ClientPoll, key, t))
            .is_ok()
        {
            e.client_poll = Some(key);
        }
    }

    pub(crate) fn park(
        &mut self,
        t: usize,
        conn: Box<Conn<H::Conn>>,
        wait: Parked,
        kind: TimeoutKind,
    ) {
        if let Some(e) = self.slots.get_mut(t) {
            e.state = State::Parked {
                conn,
                wait,
                queued: false,
            };
            self.timeouts.push(kind, t, self.now);
        }
    }

    pub(crate) fn queue_resume(&mut self, t: usize) {
        if let Some(Entry {
            state: State::Parked { queued, .. },
            ..
        }) = self.slots.get_mut(t)
        {
            if !*queued {
                *queued = true;
                self.resume.push(t);
            }
        }
    }

    /// Parked connection `t`'s client hung up while it awaited something
    /// else: see [`ConnectionHandler::hung_up`].
    pub(crate) fn hung_up(&mut self, t: usize) {
        let Some((wait, conn)) = self.unpark(t) else {
            return;
        };
        if let Parked::Await(w) = wait {
            self.awaits.remove(&(w.until, t));
        }
        self.abandon(t, conn);
    }

    /// Cancel the polls connection `t` no longer waits on (its upstream's,
    /// its client's room): a report still to come is then stale, by its
    /// key, and the ring lets go of the socket.
    fn cancel_polls(&mut self, t: usize) {
        let Some(e) = self.slots.get_mut(t) else {
            return;
        };
        if let Some(k) = e.upstream.take() {
            let _ = self.ring.cancel(user_data(Op::Upstream, k, t));
        }
        if let Some(k) = e.client_poll.take() {
            let _ = self.ring.cancel(user_data(Op::ClientPoll, k, t));
        }
    }

    /// Take parked connection `t` in hand, with what it waited for: its
    /// slot is busy meanwhile.
    fn unpark(&mut self, t: usize) -> Option<(Parked, Box<Conn<H::Conn>>)> {
        let e = self.slots.get_mut(t)?;
        match std::mem::replace(&mut e.state, State::Busy) {
            State::Parked { wait, conn, .. } => Some((wait, conn)),
            other => {
                e.state = other;
                None
            }
        }
    }

    /// Tell the handler its client hung up, and close the connection.
    fn abandon(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        self.own(t, &mut conn);
        let _ = self.guarded(&mut conn, "hung_up", |h, c| {
            h.hung_up(&mut c.state, &mut c.stream)
        });
        // Now, so that the ring lets go of the upstream socket the handler
        // dropped (its FIN goes now, not once the answers below are sent).
        self.cancel_polls(t);
        // Answers made before it (pipelined ahead of the request dropped)
        // still go out, then the connection closes.
        let gathered = conn.stream.ring_output_len() > 0;
        if gathered {
            self.dirty.push(t);
        }
        let pending_out = gathered || self.slots.get(t).is_some_and(|e| e.send);
        self.finish(t, conn, pending_out, false);
    }

    /// Close a connection, cancelling whatever the ring holds of it.
    pub(crate) fn close(&mut self, t: usize) {
        self.close_entry(t, true);
    }

    /// Close a connection; `cancel_send`: a send in flight is cancelled
    /// too (else it keeps the socket until it completes).
    pub(crate) fn close_entry(&mut self, t: usize, cancel_send: bool) {
        self.timeouts.remove(t);
        let Some(e) = self.slots.try_remove(t) else {
            return;
        };
        if let State::Parked {
            wait: Parked::Await(w),
            ..
        } = &e.state
        {
            self.awaits.remove(&(w.until, t));
        }
        if e.recv {
            let _ = self.ring.cancel(user_data(Op::Recv, e.key, t));
        }
        if e.send && cancel_send {
            let _ = self.ring.cancel(user_data(Op::Send, e.key, t));
        }
        if let Some(k) = e.client_poll {
            let _ = self.ring.cancel(user_data(Op::ClientPoll, k, t));
        }
        if let Some(k) = e.upstream {
            let _ = self.ring.cancel(user_data(Op::Upstream, k, t));
        }
        // Dropping the entry closes our descriptor; the kernel closes the
        // connection once the cancelled operations let go of it.
    }

    fn start_linger(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        if conn.stream.socket().shutdown(Shutdown::Write).is_err() {
            return self.close(t);
        }
        conn.linger_left = LINGER_BYTES;
        self.park(t, conn, Parked::Linger, TimeoutKind::Linger);
        self.arm_recv(t);
        self.again.push(t);
    }

    /// Lingering close: read and discard what the ring received until the
    /// peer closes, within the linger's time and bytes.
    fn linger_drain(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        self.own(t, &mut conn);
        let mut scratch = [0u8; 4096];
        while conn.linger_left > 0 {
            let want = scratch.len().min(conn.linger_left);
            match conn.stream.read(&mut scratch[..want]) {
                Ok(0) => break,
                Ok(n) => conn.linger_left -= n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if let Some(e) = self.slots.get_mut(t) {
                        e.state = State::Parked {
                            conn,
                            wait: Parked::Linger,
                            queued: false,
                        };
                    }
                    // The receive may have ended (out of buffers): again.
                    self.arm_recv(t);
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.close(t);
    }

    /// Close the idle keep-alive connections of a stopping loop, except
    /// one whose next request has arrived: that one is served first.
    pub(crate) fn close_idle(&mut self) {
        self.hand_over_silent();
        let mut doomed = Vec::new();
        for (t, e) in self.slots.iter() {
            if let State::Parked {
                wait: Parked::Read(Wait::KeepAlive),
                conn,
                ..
            } = &e.state
            {
                if conn.stream.has_buffered_input() {
                    self.again.push(t);
                } else {
                    doomed.push(t);
                }
            }
        }
        for t in doomed {
            let Some(e) = self.slots.get_mut(t) else {
                continue;
            };
            let State::Parked { conn, .. } = std::mem::replace(&mut e.state, State::Busy) else {
                continue;
            };
            self.timeouts.remove(t);
            self.say_goodbye(t, conn);
        }
    }

    /// Stopping with a successor: each connection that has sent nothing
    /// yet leaves the ring, then goes to the next generation.
    fn hand_over_silent(&mut self) {
        if !self.lifecycle.has_successor()
            || !self
                .listeners
                .iter()
                .any(|l| l.hand_over_channel().is_some())
        {
            return;
        }
        let silent: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, e)| match &e.state {
                State::Parked {
                    wait: Parked::Read(Wait::Request),
                    conn,
                    ..
                } if !e.send
                    && self.handler.can_hand_over(&conn.state)
                    && !conn.stream.has_buffered_input() =>
                {
                    Some(t)
                }
                _ => None,
            })
            .collect();
        for t in silent {
            let Some(e) = self.slots.get_mut(t) else {
                continue;
            };
            let State::Parked { conn, .. } = std::mem::replace(&mut e.state, State::Busy) else {
                continue;
            };
            self.timeouts.remove(t);
            self.leave(t, conn, Leave::HandOver);
        }
    }

    /// The ring let go of a silent connection: hand it over, unless bytes
    /// came meanwhile (then it is served here).
    fn hand_over_one(&mut self, t: usize, conn: Box<Conn<H::Conn>>) {
        if conn.stream.ring_input_len() > 0 || conn.stream.ring_input_has_ended() {
            self.park(t, conn, Parked::Read(Wait::Request), TimeoutKind::Request);
            self.again.push(t);
            return;
        }
        let sent = self
            .listeners
            .iter()
            .find_map(|l| l.hand_over_channel())
            .map(|c| c.send(conn.stream.socket().as_fd()));
        match sent {
            Some(Ok(())) => {
                if let Some(s) = self.slot {
                    s.record_hand_over();
                }
                self.close(t);
            }
            Some(Err(e)) => {
                mpm_core::log_warn!(
                    "mpm: could not hand a connection to the next generation ({e}); serving \
                     it here"
                );
                self.park(t, conn, Parked::Read(Wait::Request), TimeoutKind::Request);
                self.arm_recv(t);
            }
            None => self.close(t),
        }
    }

    /// The drain's deadline: close every connection the loop holds.
    pub(crate) fn close_all_parked(&mut self) {
        let held: Vec<usize> = self
            .slots
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Busy))
            .map(|(t, _)| t)
            .collect();
        for t in held {
            self.close(t);
        }
    }
}
