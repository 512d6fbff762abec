//! The listener thread: one epoll set over the listening sockets and every
//! connection that is waiting, whatever it waits for.

use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use nix::poll::PollTimeout;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use slab::Slab;

use mpm_core::{
    Config, ConnectionHandler, Error, Interest, Lifecycle, Listener, Prefetch, Result, Stream, Wait,
};

use mpm_core::scoreboard::{Slot as ScoreSlot, WorkerState};

use crate::timeout_queues::{TimeoutKind, TimeoutQueues};
use crate::worker_pool::{Conn, Done, Job, PoolHandle, Returns, Step};

/// Tokens at or above this are not connections.
const LISTENER: u64 = 1 << 62;
const RETURNS: u64 = 1 << 63;
const STOP: u64 = (1 << 63) + 1;

/// How long a stopping loop waits before closing idle keep-alive
/// connections: a request the client sent just before the stop is still
/// crossing the network, or the loopback's softirq, and is answered.
const IDLE_CLOSE_GRACE: Duration = Duration::from_millis(100);

/// Events taken from the kernel per `epoll_wait`.
const EVENTS: usize = 256;
/// Connections accepted per listener event before serving the others.
const ACCEPT_BATCH: usize = 64;

/// What a parked connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parked {
    Read(Wait),
    Write,
    Linger,
}

enum Slot<C> {
    /// In the epoll set, waiting, and in the timeout queue of its wait.
    Parked { conn: Box<Conn<C>>, wait: Parked },
    /// At a worker (or in the loop's own hands). Edges seen meanwhile are
    /// remembered, since an edge-triggered epoll will not repeat them.
    Busy { readable: bool, writable: bool },
}

/// Counters a test or the status page can read.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoopStats {
    /// Requests answered on the loop itself, with no hand-off.
    pub inline_steps: u64,
    /// Steps handed to workers.
    pub handoffs: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Times accepting was paused because every worker was busy or the
    /// connection cap was reached ("listeners disabled").
    pub listener_pauses: u64,
}

/// The event loop of one process.
pub struct EventLoop<H: ConnectionHandler> {
    epoll: Epoll,
    handler: H,
    slots: Slab<Slot<H::Conn>>,
    timeouts: TimeoutQueues,
    listeners: Vec<Listener>,
    listening: bool,
    jobs: Option<Sender<Job<H::Conn>>>,
    returns: Arc<Returns<H::Conn>>,
    in_flight: usize,
    threads: usize,
    max_conns: usize,
    lifecycle: Lifecycle,
    draining: Arc<AtomicBool>,
    stop_deadline: Option<Instant>,
    /// When a stopping loop closes its idle keep-alive connections: a moment
    /// after the stop, so that a request already on its way is answered.
    close_idle_at: Option<Instant>,
    accept_paused_until: Option<Instant>,
    last_accept_error_log: Option<Instant>,
    now: Instant,
    again: Vec<usize>,
    /// Connections workers gave back, taken from `returns` each turn.
    returned: Vec<Done<H::Conn>>,
    stats: LoopStats,
    slot: Option<&'static ScoreSlot>,
}

impl<H: ConnectionHandler> EventLoop<H> {
    /// A loop over these listeners, handing work to the pool's workers and
    /// keeping its own state in `slot`.
    pub fn new(
        config: &Config,
        listeners: Vec<Listener>,
        handler: H,
        pool: PoolHandle<H::Conn>,
        lifecycle: &Lifecycle,
        slot: Option<&'static ScoreSlot>,
    ) -> Result<Self> {
        let PoolHandle {
            jobs,
            returns,
            threads,
        } = pool;
        if let Some(s) = slot {
            s.claim(lifecycle.generation());
            s.set_state(WorkerState::Idle);
        }
        let io = |what: &str, e: nix::Error| Error::io(what, e.into());
        let epoll =
            Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| io("epoll_create", e))?;
        epoll
            .add(
                lifecycle.wake_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, STOP),
            )
            .map_err(|e| io("registering the stop pipe", e))?;
        epoll
            .add(
                returns.wake_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, RETURNS),
            )
            .map_err(|e| io("registering the return eventfd", e))?;
        let mut this = EventLoop {
            epoll,
            handler,
            slots: Slab::with_capacity(1024),
            timeouts: TimeoutQueues::new(
                // A request in progress that goes silent is cut off by the
                // first of its limits; a trickle is caught by the HTTP
                // layer's deadline check as each piece arrives.
                config
                    .timeout
                    .min(config.request_header_timeout)
                    .min(config.request_body_timeout),
                config.keepalive_timeout,
                config.timeout,
                Duration::from_secs(2),
            ),
            listeners,
            listening: false,
            jobs: Some(jobs),
            returns,
            in_flight: 0,
            threads,
            max_conns: config
                .max_request_workers
                .max(threads)
                .saturating_mul(config.async_request_worker_factor),
            lifecycle: lifecycle.clone(),
            draining: lifecycle.draining_flag(),
            stop_deadline: None,
            close_idle_at: None,
            accept_paused_until: None,
            last_accept_error_log: None,
            now: Instant::now(),
            again: Vec::new(),
            returned: Vec::new(),
            stats: LoopStats::default(),
            slot,
        };
        this.set_listening(true)?;
        Ok(this)
    }

    /// Serve until stopped and drained (or the graceful timeout passes).
    /// Returns the loop's counters; the job channel is closed on return.
    pub fn run(mut self, graceful: Duration) -> LoopStats {
        let mut events = vec![EpollEvent::empty(); EVENTS];
        loop {
            self.now = Instant::now();
            // A buffer kept across turns: a hand-off costs no allocation.
            let mut returned = std::mem::take(&mut self.returned);
            returned.extend(self.returns.drain());
            for done in returned.drain(..) {
                self.in_flight -= 1;
                self.apply(done.token, done.conn, done.interest);
            }
            self.returned = returned;
            self.run_again();
            if self.lifecycle.is_stopping() && self.stop_deadline.is_none() {
                self.begin_stop(graceful);
            }
            if self.close_idle_at.is_some_and(|t| self.now >= t) {
                self.close_idle_at = None;
                self.close_idle();
                self.run_again();
            }
            if let Some(deadline) = self.stop_deadline {
                if self.slots.is_empty() {
                    break;
                }
                if self.now >= deadline {
                    self.close_parked(|_| true);
                    if self.in_flight == 0 || self.now >= deadline + Duration::from_secs(1) {
                        break;
                    }
                }
            }
            self.update_listening();

            let timeout = self.wait_timeout();
            let timeout = if timeout.is_zero() || !self.returns.may_sleep() {
                PollTimeout::ZERO
            } else {
                PollTimeout::from(timeout.as_millis().clamp(1, 1000) as u16)
            };
            let n = self.epoll.wait(&mut events, timeout).unwrap_or(0);
            self.returns.woke();
            self.now = Instant::now();
            for ev in &events[..n] {
                self.on_event(ev.data(), ev.events());
            }
            self.run_again();
            self.expire();
        }
        self.jobs = None; // workers see the channel close and exit
        if let Some(s) = self.slot {
            s.release();
        }
        self.stats
    }

    fn wait_timeout(&self) -> Duration {
        let mut until = self.now + Duration::from_secs(1);
        if let Some(d) = self.timeouts.next_deadline() {
            until = until.min(d);
        }
        if let Some(d) = self.accept_paused_until {
            until = until.min(d);
        }
        if let Some(d) = self.stop_deadline {
            until = until.min(d);
        }
        if let Some(d) = self.close_idle_at {
            until = until.min(d);
        }
        until.saturating_duration_since(self.now)
    }

    fn on_event(&mut self, token: u64, flags: EpollFlags) {
        match token {
            STOP => {} // noticed at the top of the loop
            RETURNS => self.returns.clear_wake(),
            t if t >= LISTENER => self.accept((t - LISTENER) as usize),
            t => {
                let t = t as usize;
                let readable = flags.intersects(
                    EpollFlags::EPOLLIN
                        | EpollFlags::EPOLLRDHUP
                        | EpollFlags::EPOLLHUP
                        | EpollFlags::EPOLLERR,
                );
                let writable = flags
                    .intersects(EpollFlags::EPOLLOUT | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR);
                match self.slots.get_mut(t) {
                    None => {}
                    Some(Slot::Busy {
                        readable: r,
                        writable: w,
                    }) => {
                        *r |= readable;
                        *w |= writable;
                    }
                    Some(Slot::Parked { wait, .. }) => {
                        let go = match wait {
                            Parked::Read(_) | Parked::Linger => readable,
                            Parked::Write => writable,
                        };
                        if go {
                            self.step(t);
                        }
                    }
                }
            }
        }
    }

    /// Act on a parked connection whose wait is over.
    fn step(&mut self, t: usize) {
        let Some(slot) = self.slots.get_mut(t) else {
            return;
        };
        let wait = match slot {
            Slot::Parked { wait, .. } => *wait,
            Slot::Busy { .. } => return,
        };
        // Its wait is over: out of the timeout queue until it parks again.
        self.timeouts.remove(t);
        let Slot::Parked { mut conn, .. } = std::mem::replace(
            slot,
            Slot::Busy {
                readable: false,
                writable: false,
            },
        ) else {
            return;
        };
        match wait {
            Parked::Read(_) => match self.handler.prefetch(&mut conn.state, &mut conn.stream) {
                Prefetch::Wait(next) => self.apply(t, conn, next),
                Prefetch::Ready => self.dispatch(t, conn, Step::Read),
                Prefetch::ReadyInline => {
                    self.stats.inline_steps += 1;
                    conn.stream.set_score_slot(self.slot);
                    let next = self.handler.readable(&mut conn.state, &mut conn.stream);
                    conn.stream.take_would_block();
                    conn.stream.set_state(WorkerState::Idle);
                    self.apply(t, conn, next);
                }
            },
            Parked::Write => {
                if self.handler.writes_without_blocking(&conn.state) {
                    let next = self.handler.writable(&mut conn.state, &mut conn.stream);
                    conn.stream.take_would_block();
                    self.apply(t, conn, next);
                } else {
                    self.dispatch(t, conn, Step::Write);
                }
            }
            Parked::Linger => self.linger_drain(t, conn),
        }
    }

    /// Hand a connection with a whole request to a worker.
    fn dispatch(&mut self, t: usize, conn: Box<Conn<H::Conn>>, step: Step) {
        self.stats.handoffs += 1;
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
        // No workers left: the connection is dropped (closed).
        self.in_flight -= 1;
        self.close(t);
    }

    /// Park a connection as its last step asked, or close it.
    fn apply(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, interest: Interest) {
        let (seen_readable, seen_writable) = match self.slots.get(t) {
            Some(Slot::Busy { readable, writable }) => (*readable, *writable),
            _ => (false, false),
        };
        match interest {
            Interest::Read(wait) => {
                // Stopping: an idle connection closes, unless its next
                // request has already arrived (perhaps while a worker held
                // it): that one is answered first, with `Connection: close`.
                if self.stop_deadline.is_some()
                    && wait == Wait::KeepAlive
                    && !(seen_readable || has_input(&conn.stream))
                {
                    self.close(t);
                    return;
                }
                if wait == Wait::KeepAlive {
                    self.handler.parked(&mut conn.state);
                }
                let more = seen_readable || !conn.stream.drained();
                let kind = match wait {
                    Wait::Request => TimeoutKind::Request,
                    Wait::KeepAlive => TimeoutKind::KeepAlive,
                };
                self.park(t, conn, Parked::Read(wait), kind);
                if more {
                    self.again.push(t);
                }
            }
            Interest::Write => {
                self.park(t, conn, Parked::Write, TimeoutKind::Write);
                if seen_writable {
                    self.again.push(t);
                }
            }
            Interest::Close => {
                self.close(t);
            }
            Interest::Linger => {
                if conn.stream.socket().shutdown(Shutdown::Write).is_err() {
                    self.close(t);
                    return;
                }
                self.park(t, conn, Parked::Linger, TimeoutKind::Linger);
                self.again.push(t); // drain what is already there
            }
        }
    }

    fn park(&mut self, t: usize, conn: Box<Conn<H::Conn>>, wait: Parked, kind: TimeoutKind) {
        if let Some(slot) = self.slots.get_mut(t) {
            *slot = Slot::Parked { conn, wait };
            self.timeouts.push(kind, t, self.now);
        }
    }

    /// Close a connection: out of its timeout queue and out of the slab
    /// (dropping it closes the socket).
    fn close(&mut self, t: usize) {
        self.timeouts.remove(t);
        self.slots.try_remove(t);
    }

    fn run_again(&mut self) {
        while !self.again.is_empty() {
            let batch = std::mem::take(&mut self.again);
            for t in batch {
                self.step(t);
            }
        }
    }

    /// Lingering close: read and discard until the peer closes; each time
    /// something arrives the two-second linger starts again.
    fn linger_drain(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        let mut scratch = [0u8; 2048];
        for _ in 0..64 {
            match conn.stream.read(&mut scratch) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.park(t, conn, Parked::Linger, TimeoutKind::Linger);
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.close(t);
    }

    fn expire(&mut self) {
        let mut due = Vec::new();
        self.timeouts
            .expire(self.now, |kind, t| due.push((kind, t)));
        for (kind, t) in due {
            // Only parked connections are queued; a busy one left its queue.
            if !matches!(self.slots.get(t), Some(Slot::Parked { .. })) {
                continue;
            }
            self.timeouts.remove(t);
            if let Some(Slot::Parked { mut conn, .. }) = self.slots.try_remove(t) {
                if kind != TimeoutKind::Linger {
                    self.handler.timed_out(&mut conn.state, &mut conn.stream);
                }
            }
        }
    }

    fn accept(&mut self, index: usize) {
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
    fn update_listening(&mut self) {
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

    fn set_listening(&mut self, on: bool) -> Result<()> {
        if on == self.listening {
            return Ok(());
        }
        for (i, l) in self.listeners.iter().enumerate() {
            let fd = l.as_std().as_fd();
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

    fn begin_stop(&mut self, graceful: Duration) {
        self.stop_deadline = Some(self.now + graceful);
        let _ = self.set_listening(false);
        if self.lifecycle.owns_listeners() {
            for l in &self.listeners {
                l.stop_listening();
            }
        }
        self.close_idle_at = Some(self.now + IDLE_CLOSE_GRACE);
    }

    /// Close the idle keep-alive connections of a stopping loop, except one
    /// whose next request has arrived (its event not yet handled): that one
    /// is served first, with `Connection: close`, since closing it would
    /// drop a request the client had sent.
    fn close_idle(&mut self) {
        let waiting: Vec<usize> = self
            .slots
            .iter()
            .filter_map(|(t, s)| match s {
                Slot::Parked {
                    wait: Parked::Read(Wait::KeepAlive),
                    conn,
                } if has_input(&conn.stream) => Some(t),
                _ => None,
            })
            .collect();
        self.again.extend(waiting.iter().copied());
        self.close_parked(|w| w == Parked::Read(Wait::KeepAlive));
    }

    fn close_parked(&mut self, pick: impl Fn(Parked) -> bool) {
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

/// Has the peer sent bytes not yet read? (A peek, without blocking.)
fn has_input(stream: &Stream) -> bool {
    let mut byte = [0u8; 1];
    stream.socket().peek(&mut byte).is_ok_and(|n| n > 0)
}
