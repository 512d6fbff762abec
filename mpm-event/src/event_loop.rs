//! The listener thread: one epoll set over the listening sockets and every
//! connection that is waiting, whatever it waits for.

use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use nix::poll::PollTimeout;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use slab::Slab;

use mpm_core::{
    Await, ConnectionHandler, Drain, Error, Interest, Lifecycle, Listener, MpmSettings, Prefetch,
    Result, RingQueues, Wait, LINGER_BYTES, LINGER_TIME,
};

use mpm_core::blocking::{has_pending_input, log_panic};
use mpm_core::loop_parts::accept_gate::{sleep_for, AcceptGate};
use mpm_core::panics::catch;
use mpm_core::scoreboard::{Slot as ScoreSlot, WorkerState};

use crate::await_deadlines::AwaitDeadlines;
use crate::timeout_queues::{TimeoutKind, TimeoutQueues};
use crate::upstream_registry::{self, Seen, Waited, Watching, EDGE};
use crate::worker_pool::{Conn, Done, Job, PoolHandle, Returns, Step};

/// Tokens at or above this are not connections.
pub(crate) const LISTENER: u64 = 1 << 62;
/// A connection's upstream descriptor: its token with this bit set.
const UPSTREAM: u64 = 1 << 61;
const RETURNS: u64 = 1 << 63;
const STOP: u64 = (1 << 63) + 1;

/// Events taken from the kernel per `epoll_wait`.
const EVENTS: usize = 256;

/// Steps that hold their sends between two sends of what is held
/// ([`EventLoop::flush_held`]): the longest an answer waits is this many
/// other steps (a step on the loop is short: nothing slow runs there),
/// in a turn of many events, resumed connections or both.
const HOLD_STEPS: usize = 64;

/// What a parked connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    Read(Wait),
    Write,
    Linger,
    /// Its step is over and its answer held ([`Stream::hold_sends`](mpm_core::Stream::hold_sends)) did
    /// not all go: the rest is sent as the socket takes it, then it does
    /// what the step asked (close, or a lingering close).
    Flush(Then),
    /// On a descriptor of its own (an upstream), and perhaps on the
    /// client's socket, until a deadline of its own: in `awaits`, not in a
    /// timeout queue.
    Await(Await),
}

/// What a connection whose held answer is still going out does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    Close,
    Linger,
}

pub(crate) enum Slot<C> {
    /// In the epoll set, waiting, and in the timeout queue of its wait.
    /// `queued`: on the list of connections stepped again this turn or the
    /// next (`resume`); an edge seen meanwhile waits for that step, so that
    /// such a connection gets one step a turn, not one per poll.
    Parked {
        conn: Box<Conn<C>>,
        wait: Parked,
        queued: bool,
    },
    /// At a worker (or in the loop's own hands). Edges seen meanwhile are
    /// remembered, since an edge-triggered epoll will not repeat them;
    /// `end`: one of them was the peer's end of the stream.
    Busy {
        readable: bool,
        writable: bool,
        end: bool,
    },
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
    /// Times `epoll_wait` returned with a listening socket ready: with
    /// sibling processes sharing the sockets, the wake-ups new connections
    /// cost this process.
    pub listener_wakeups: u64,
    /// Of those, the ones that found nothing to accept (a sibling had taken
    /// the connection): the wasted wake-ups `EPOLLEXCLUSIVE` avoids.
    pub empty_wakeups: u64,
    /// Steps that yielded the loop with more to do (a body's per-turn budget
    /// spent, or a pipelined request that may block next), resumed a turn
    /// later.
    pub yields: u64,
    /// Panics caught in handler steps run on the loop.
    pub panics: u64,
    /// Times accepting was paused because this process held more
    /// connections than a sibling sharing its listeners.
    pub balance_pauses: u64,
    /// Times a connection was parked waiting on a descriptor of its own
    /// (an upstream), holding no thread.
    pub awaits: u64,
    /// Of the steps that resumed after such a wait, those run on the loop.
    pub resumed_inline: u64,
    /// Of those waits, the ones on an upstream socket registered already
    /// (edge-triggered, kept while it lives): no system call.
    pub waits_registered_before: u64,
    /// Reports for a registered upstream socket that no parked connection
    /// waited on (busy, or the socket idle in a pool): kept for the next
    /// wait on it, stepping nobody.
    pub edges_kept: u64,
    /// Answers held by the steps that made them and sent, all of each,
    /// with the others held since the last send of them (at the end of
    /// the turn's events, before the wait, every 64 steps that hold), or
    /// at the end of their own step before a close
    /// ([`Stream::hold_sends`](mpm_core::Stream::hold_sends)).
    pub held_sends: u64,
}

/// The event loop of one process.
pub struct EventLoop<H: ConnectionHandler> {
    pub(crate) epoll: Epoll,
    pub(crate) handler: H,
    pub(crate) slots: Slab<Slot<H::Conn>>,
    pub(crate) timeouts: TimeoutQueues,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) listening: bool,
    /// Are the listeners registered with `EPOLLEXCLUSIVE`?
    pub(crate) exclusive: bool,
    /// Do sibling processes wait on the same listening sockets?
    pub(crate) shared: bool,
    /// Connections accepted per listener event before serving the others.
    pub(crate) accept_batch: usize,
    /// Whether to accept now, with the ledger where the processes sharing
    /// the listeners say how many connections each holds.
    pub(crate) gate: AcceptGate,
    pub(crate) jobs: Option<Sender<Job<H::Conn>>>,
    pub(crate) returns: Arc<Returns<H::Conn>>,
    pub(crate) in_flight: usize,
    pub(crate) threads: usize,
    pub(crate) max_conns: usize,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) draining: Arc<AtomicBool>,
    pub(crate) stop_deadline: Option<Instant>,
    /// The stop in progress, whose moments `stop_deadline` and
    /// `close_idle_at` follow (a fast stop may come during a graceful one).
    drain: Option<Drain>,
    /// When a stopping loop closes its idle keep-alive connections: a moment
    /// after the stop, so that a request already on its way is answered.
    pub(crate) close_idle_at: Option<Instant>,
    pub(crate) accept_paused_until: Option<Instant>,
    pub(crate) last_accept_error_log: Option<Instant>,
    pub(crate) now: Instant,
    /// Connections to step again in this turn (an edge seen while busy, a
    /// lingering close to start draining).
    pub(crate) again: Vec<usize>,
    /// Connections to step again on the next turn, after the others had
    /// theirs: those that yielded, and those with more input unread.
    pub(crate) resume: Vec<usize>,
    resuming: Vec<usize>,
    /// Connections workers gave back, taken from `returns` each turn.
    pub(crate) returned: Vec<Done<H::Conn>>,
    pub(crate) stats: LoopStats,
    pub(crate) slot: Option<&'static ScoreSlot>,
    /// Connections parked on a wait of their own ([`Parked::Await`]), by
    /// the deadline it gave: resumed then, ready or not.
    awaits: AwaitDeadlines,
    /// Connections whose steps held their answers this turn
    /// ([`Stream::hold_sends`](mpm_core::Stream::hold_sends)): sent together before the loop waits.
    held: Vec<usize>,
    /// Empty queues for the streams that hold: lent for a step, taken
    /// back once sent, so a keep-alive answer allocates nothing and an
    /// idle connection holds none. Boxed as the stream keeps them.
    #[allow(clippy::vec_box)]
    spare_queues: Vec<Box<RingQueues>>,
    /// Steps that held their sends since the last `flush_held`.
    held_steps: usize,
}

/// Connections accepted per listener event by a process that owns its
/// listeners: nobody else could take them.
const ACCEPT_BATCH: usize = 64;

/// The same, when sibling processes share the listeners: one, as nginx's
/// `multi_accept off`, so that a burst of connections spreads over the
/// processes the exclusive wake-ups wake instead of landing on the first.
const SHARED_ACCEPT_BATCH: usize = 1;

impl<H: ConnectionHandler> EventLoop<H> {
    /// A turn begins: the loop's time, read once, for its timeouts and
    /// for the steps it runs (`turn_clock::now`).
    #[inline]
    fn tick(&mut self) {
        self.now = Instant::now();
        mpm_core::turn_clock::begin_turn(self.now);
    }

    /// A loop over these listeners, handing work to the pool's workers and
    /// keeping its own state in `slot`.
    pub fn new(
        settings: &MpmSettings,
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
        // Sockets of its own (SO_REUSEPORT) are no sibling's.
        let shared = !lifecycle.owns_listeners() && !settings.reuseport;
        let mut this = EventLoop {
            epoll,
            handler,
            slots: Slab::with_capacity(1024),
            timeouts: TimeoutQueues::new(
                // A request in progress that goes silent is cut off by the
                // first of its limits; a trickle is caught by the protocol's
                // own deadline check as each piece arrives.
                settings.request_timeout,
                settings.keepalive_timeout,
                settings.timeout,
                LINGER_TIME,
            ),
            listeners,
            listening: false,
            exclusive: settings.epoll_exclusive,
            shared,
            accept_batch: if shared {
                SHARED_ACCEPT_BATCH
            } else {
                ACCEPT_BATCH
            },
            gate: AcceptGate::new(settings.ledger.filter(|_| shared)),
            jobs: Some(jobs),
            returns,
            in_flight: 0,
            threads,
            max_conns: settings
                .max_request_workers
                .max(threads)
                .saturating_mul(settings.async_request_worker_factor),
            lifecycle: lifecycle.clone(),
            draining: lifecycle.draining_flag(),
            stop_deadline: None,
            drain: None,
            close_idle_at: None,
            accept_paused_until: None,
            last_accept_error_log: None,
            now: Instant::now(),
            again: Vec::new(),
            held: Vec::new(),
            spare_queues: Vec::new(),
            held_steps: 0,
            resume: Vec::new(),
            resuming: Vec::new(),
            returned: Vec::new(),
            stats: LoopStats::default(),
            slot,
            awaits: AwaitDeadlines::default(),
        };
        this.set_listening(true)?;
        Ok(this)
    }

    /// Serve until stopped and drained: the core [`Drain`]'s moments, its
    /// deadline cutting what is still parked here, its give-up time leaving
    /// behind what workers still hold. Returns the loop's counters and the
    /// drain (for the caller to join the workers by); the job channel is
    /// closed on return.
    pub fn run(mut self, graceful: Duration) -> (LoopStats, Option<Drain>) {
        let _watching = Watching::start();
        let mut events = vec![EpollEvent::empty(); EVENTS];
        // Whether it accepts is in the ledger before the slot reads idle
        // (run.rs claimed it "starting"): a process shown idle takes its
        // share of a burst.
        self.tick();
        self.update_listening();
        if let Some(s) = self.slot {
            s.set_state(WorkerState::Idle);
        }
        loop {
            self.tick();
            // Only connections at workers come back: with none there, the
            // channel is empty, and the turn does not look.
            if self.in_flight > 0 {
                // A buffer kept across turns: a hand-off costs no allocation.
                let mut returned = std::mem::take(&mut self.returned);
                returned.extend(self.returns.drain());
                for done in returned.drain(..) {
                    self.in_flight -= 1;
                    self.apply(done.token, done.conn, done.interest);
                }
                self.returned = returned;
            }
            self.run_again();
            if self.lifecycle.is_stopping() && self.drain.is_none() {
                self.begin_stop(graceful);
            }
            if let Some(drain) = &self.drain {
                self.stop_deadline = Some(drain.deadline());
                if self.close_idle_at.is_some() {
                    self.close_idle_at = Some(drain.close_idle_at());
                }
            }
            if self.close_idle_at.is_some_and(|t| self.now >= t) {
                self.close_idle_at = None;
                // What steps held goes out before their connections may
                // be closed as idle.
                self.flush_held();
                self.close_idle();
                self.run_again();
            }
            if let Some(drain) = self.drain.clone() {
                self.flush_held();
                if self.slots.is_empty() {
                    break;
                }
                if self.now >= drain.deadline() {
                    let parked = self.slots.len().saturating_sub(self.in_flight);
                    self.close_parked(|_| true);
                    let cut =
                        parked.saturating_sub(self.slots.len().saturating_sub(self.in_flight));
                    if cut > 0 {
                        drain.log_cut(cut);
                    }
                    // What workers still hold is theirs to finish; past
                    // the give-up time the loop leaves it behind.
                    if self.in_flight == 0 || self.now >= drain.give_up_at() {
                        break;
                    }
                }
            }
            self.update_listening();

            // Connections with more to do now: poll without sleeping, serve
            // whatever else is ready, then give them their next turn.
            // Only a connection at a worker can come back during the sleep:
            // with none there, the workers need not be told that it sleeps
            // (two sequentially consistent stores and a look at the
            // channel, every turn).
            // Held answers go out before the loop may sleep.
            self.flush_held();
            let mut told = false;
            let timeout = if !self.resume.is_empty() {
                PollTimeout::ZERO
            } else {
                let timeout = self.wait_timeout();
                if timeout.is_zero() || (self.in_flight > 0 && !self.returns.may_sleep()) {
                    PollTimeout::ZERO
                } else {
                    told = self.in_flight > 0;
                    PollTimeout::from(timeout.as_millis().clamp(1, 1000) as u16)
                }
            };
            let n = match self.epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => 0,
                Err(e) => {
                    self.wait_failed(e);
                    0
                }
            };
            if told {
                self.returns.woke();
            }
            self.tick();
            // The turn's writes to upstreams are held until `flush_held`.
            mpm_core::held_sends::open();
            let mut listener_ready = false;
            for ev in &events[..n] {
                listener_ready |= (LISTENER..RETURNS).contains(&ev.data());
                self.on_event(ev.data(), ev.events());
            }
            // This turn's answers, held by the steps that made them, sent
            // together; the resumed connections' steps hold theirs until
            // the end of the turn.
            self.flush_held();
            mpm_core::held_sends::open();
            if listener_ready {
                self.stats.listener_wakeups += 1;
            } else if n == 0 && self.listening && self.shared && self.exclusive {
                // An exclusive wake-up goes to one sleeping process; if that
                // one stopped accepting before it took the connection (it
                // reached its cap, or is stopping), nobody else was told.
                // Idle, look for such a connection: it waits at most one
                // idle wait (a second), never indefinitely.
                for i in 0..self.listeners.len() {
                    self.accept(i, false);
                }
            }
            self.run_again();
            std::mem::swap(&mut self.resume, &mut self.resuming);
            let mut resuming = std::mem::take(&mut self.resuming);
            let resumes = resuming.len();
            for (i, t) in resuming.drain(..).enumerate() {
                if let Some(Slot::Parked { queued, .. }) = self.slots.get_mut(t) {
                    *queued = false;
                }
                self.step(t);
                // That step may have spent a whole body budget: what became
                // ready meanwhile (a small request) is served before the
                // next resumed connection spends its own, so that it waits
                // one budget, not all of them.
                if i + 1 < resumes {
                    self.serve_ready_now(&mut events);
                }
            }
            self.resuming = resuming;
            self.run_again();
            // What the resumed steps held goes out before the wait, at the
            // top of the next turn: timeouts close no connection whose
            // step just ran (its park renewed its deadline).
            self.expire();
        }
        self.flush_held();
        self.jobs = None; // workers see the channel close and exit
        self.gate.release();
        self.stats.listener_pauses = self.gate.listener_pauses;
        self.stats.balance_pauses = self.gate.balance_pauses;
        if let Some(s) = self.slot {
            s.release();
        }
        (self.stats, self.drain)
    }

    /// Serve the connections that are ready now, without sleeping: between
    /// two resumed connections' turns. Listening sockets are left to the
    /// main wait (they are level-triggered, so they show there again): it
    /// decides whether to accept (workers free, the ledger's balance) and
    /// counts the wake-ups. A failing wait is left to it too; it reports it.
    fn serve_ready_now(&mut self, events: &mut [EpollEvent]) {
        let n = self.epoll.wait(events, PollTimeout::ZERO).unwrap_or(0);
        if n == 0 {
            return;
        }
        self.tick();
        for ev in &events[..n] {
            if !(LISTENER..RETURNS).contains(&ev.data()) {
                self.on_event(ev.data(), ev.events());
            }
        }
        self.run_again();
    }

    /// `epoll_wait` failed other than by a signal: the set is unusable (a
    /// bug, or the kernel out of memory). Said once, and this process stops
    /// (under a master, a new one takes its place); a pause keeps a loop
    /// whose every wait fails from spinning while it drains.
    fn wait_failed(&mut self, e: nix::errno::Errno) {
        if !self.lifecycle.is_stopping() {
            mpm_core::log_error!(
                "mpm: event loop of process {}: epoll_wait failed: {e}; stopping this process",
                std::process::id()
            );
            self.lifecycle.stop();
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    fn wait_timeout(&self) -> Duration {
        sleep_for(
            self.now,
            self.gate.balance_paused,
            &[
                self.timeouts.next_deadline(),
                self.awaits.first().map(|(d, _)| d),
                self.accept_paused_until,
                self.close_idle_at,
                // Upstream bytes a full socket did not take: soon again.
                mpm_core::held_sends::retry_at(self.now),
            ],
            self.stop_deadline,
            self.drain.as_ref(),
        )
    }

    fn on_event(&mut self, token: u64, flags: EpollFlags) {
        match token {
            STOP => {} // noticed at the top of the loop
            RETURNS => self.returns.clear_wake(),
            t if t >= LISTENER => self.accept((t - LISTENER) as usize, true),
            t if t & UPSTREAM == 0 && t & EDGE != 0 => self.on_edge(t, flags),
            t if t & UPSTREAM != 0 => {
                // One report per arming: the step that resumes arms it again
                // if it still waits. A connection not waiting on it now (it
                // went on for another reason) finds out by its own I/O.
                let t = (t & !UPSTREAM) as usize;
                if let Some(Slot::Parked {
                    wait: Parked::Await(_),
                    queued: false,
                    ..
                }) = self.slots.get(t)
                {
                    self.step(t);
                }
            }
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
                // The peer's end of the stream: it may share this edge with
                // the last bytes before it, and no edge will come for it
                // alone once a read takes those bytes.
                let end = flags.intersects(
                    EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR,
                );
                match self.slots.get_mut(t) {
                    None => {}
                    Some(Slot::Busy {
                        readable: r,
                        writable: w,
                        end: e,
                    }) => {
                        *r |= readable;
                        *w |= writable;
                        *e |= end;
                    }
                    Some(Slot::Parked { wait, conn, queued }) => {
                        // The stream remembers the input whatever happens
                        // now: a connection waiting to write, or one queued
                        // to step again this turn (whose step may not read:
                        // output it yielded comes first), reads it before
                        // it waits for input again; and one that reads here
                        // must not take a short read for the end.
                        if readable {
                            conn.stream.input_reported(end);
                        }
                        // The client hung up while its request waits on
                        // something else (an upstream): the wait is over
                        // for good.
                        let gone = end
                            && matches!(wait, Parked::Await(w) if mpm_core::waiting::ends_on_hang_up(w))
                            && hung_up_indeed(&conn.stream);
                        // Room for what a step held and could not send.
                        let send_held = writable && conn.stream.held_len() > 0;
                        // Queued: the step from `resume` comes this turn.
                        let go = !*queued
                            && match wait {
                                Parked::Read(_) | Parked::Linger => readable,
                                Parked::Write | Parked::Flush(_) => writable,
                                Parked::Await(w) => {
                                    (w.client_read && readable) || (w.client_write && writable)
                                }
                            };
                        if gone {
                            return self.hung_up(t);
                        }
                        if send_held {
                            self.held.push(t);
                        }
                        if go {
                            self.step(t);
                        }
                    }
                }
            }
        }
    }

    /// A registered upstream socket's readiness changed: step the
    /// connection waiting on it, or keep it for the next wait.
    fn on_edge(&mut self, token: u64, flags: EpollFlags) {
        let got = Seen {
            read: flags.intersects(
                EpollFlags::EPOLLIN
                    | EpollFlags::EPOLLRDHUP
                    | EpollFlags::EPOLLHUP
                    | EpollFlags::EPOLLERR,
            ),
            write: flags
                .intersects(EpollFlags::EPOLLOUT | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR),
        };
        let Some(r) = upstream_registry::with(|reg| reg.report(token, got)) else {
            return; // a socket closed since
        };
        let want = match self.slots.get(r.waiter) {
            // Parked on this very socket (a slot reused since, or a
            // connection that went on to wait on something else, is not).
            Some(Slot::Parked {
                wait: Parked::Await(w),
                queued: false,
                ..
            }) if w.fd == Some(r.fd) && w.stamp == Some(r.stamp) => Seen {
                read: w.read,
                write: w.write,
            },
            _ => {
                self.stats.edges_kept += 1;
                return;
            }
        };
        if (want.read && r.seen.read) || (want.write && r.seen.write) {
            upstream_registry::with(|reg| reg.take(r.fd, want));
            self.step(r.waiter);
        }
    }

    /// Act on a parked connection whose wait is over.
    fn step(&mut self, t: usize) {
        let wait = match self.slots.get(t) {
            Some(Slot::Parked { wait, .. }) => *wait,
            _ => return,
        };
        // Its wait is over: out of the timeout queue until it parks again.
        // A lingering close keeps its one deadline however often it reads.
        match wait {
            Parked::Linger => {}
            Parked::Await(_) => self.awaits.remove(t),
            _ => self.timeouts.remove(t),
        }
        let Some(conn) = self.unpark(t) else {
            return;
        };
        match wait {
            // Resumed as after a yield: `prefetch` says where it runs.
            Parked::Read(_) => self.read_step(t, conn, false),
            Parked::Await(_) => self.read_step(t, conn, true),
            Parked::Write => self.write_step(t, conn),
            Parked::Linger => self.linger_drain(t, conn),
            Parked::Flush(then) => self.flush_then(t, conn, then),
        }
    }

    /// Input arrived: read ahead, then answer on the loop what cannot block,
    /// and hand the rest to a worker.
    /// `resumed`: after a wait of its own (an upstream), not new input:
    /// counted apart from requests answered on the loop.
    fn read_step(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, resumed: bool) {
        conn.stream.set_on_event_loop(true);
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
                self.hold(&mut conn);
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

    /// The socket can take more: write on the loop what needs nothing else
    /// (within the handler's per-turn budget), or hand it to a worker.
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
        self.hold(&mut conn);
        match self.guarded(&mut conn, "writable", |h, c| {
            h.writable(&mut c.state, &mut c.stream)
        }) {
            Some(next) => self.apply(t, conn, next),
            None => self.close(t),
        }
    }

    /// A stopping loop is about to close this idle connection: the
    /// protocol's last word first (HTTP/2's GOAWAY; HTTP/1.1 says nothing).
    pub(crate) fn say_goodbye(&mut self, conn: &mut Conn<H::Conn>) {
        let _ = self.guarded(conn, "idle_at_stop", |h, c| {
            h.idle_at_stop(&mut c.state, &mut c.stream)
        });
    }

    /// Run one handler step on the loop, catching a panic: `None` if it
    /// panicked (logged in one line; the caller closes the connection).
    fn guarded<R>(
        &mut self,
        conn: &mut Conn<H::Conn>,
        step: &str,
        f: impl FnOnce(&mut H, &mut Conn<H::Conn>) -> R,
    ) -> Option<R> {
        let handler = &mut self.handler;
        let ran = catch(|| f(handler, conn));
        // WouldBlock on this non-blocking socket is not a timeout.
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

    /// Hand a connection with a whole request to a worker.
    fn dispatch(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, step: Step) {
        self.stats.handoffs += 1;
        self.in_flight += 1;
        conn.stream.set_on_event_loop(false);
        // An answer held earlier this turn goes before the worker's: what
        // the socket does not take now, the worker's first write sends.
        conn.stream.stop_holding(&mut self.spare_queues);
        if conn.stream.held_len() > 0 {
            let _ = conn.stream.send_held(&mut self.spare_queues);
        }
        // So are its writes to an upstream (a worker cannot send this
        // thread's), and the batch stays open for the turn's other steps.
        mpm_core::held_sends::flush();
        mpm_core::held_sends::open();
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
        conn.stream.stop_holding(&mut self.spare_queues);
        if conn.stream.held_len() > 0 {
            match interest {
                // Its answer goes out before the socket closes.
                Interest::Close => return self.flush_then(t, conn, Then::Close),
                Interest::Linger => return self.flush_then(t, conn, Then::Linger),
                _ => self.held.push(t),
            }
        }
        let (seen_readable, seen_writable) = match self.slots.get(t) {
            Some(Slot::Busy {
                readable,
                writable,
                end,
            }) => {
                // Input that came while it was busy is read when it next
                // waits for input, the end of the stream included.
                if *readable {
                    conn.stream.input_reported(*end);
                }
                (*readable, *writable)
            }
            _ => (false, false),
        };
        match interest {
            Interest::Read(wait) => {
                // Stopping: an idle connection closes, unless its next
                // request has already arrived (perhaps while a worker held
                // it): that one is answered first, with `Connection: close`.
                if self.stop_deadline.is_some()
                    && wait == Wait::KeepAlive
                    && !(seen_readable || has_pending_input(&conn.stream))
                {
                    self.say_goodbye(&mut conn);
                    let _ = conn.stream.send_held(&mut self.spare_queues);
                    self.close(t);
                    return;
                }
                if wait == Wait::KeepAlive
                    && self
                        .guarded(&mut conn, "parked", |h, c| h.parked(&mut c.state))
                        .is_none()
                {
                    self.close(t);
                    return;
                }
                let more = seen_readable || !conn.stream.drained();
                let kind = match wait {
                    Wait::Request => TimeoutKind::Request,
                    Wait::KeepAlive => TimeoutKind::KeepAlive,
                };
                self.park(t, conn, Parked::Read(wait), kind);
                // Edge-triggered: input left unread gets no new edge. Read it
                // on the next turn, after the others had theirs.
                if more {
                    self.queue_resume(t);
                }
            }
            Interest::Write => {
                self.park(t, conn, Parked::Write, TimeoutKind::Write);
                if seen_writable {
                    self.queue_resume(t);
                }
            }
            Interest::Yield => {
                // `readable` again next turn, through `prefetch`, which
                // decides where it runs (output still queued included).
                self.stats.yields += 1;
                self.park(t, conn, Parked::Read(Wait::Request), TimeoutKind::Request);
                self.queue_resume(t);
            }
            Interest::Await(wait) => {
                self.stats.awaits += 1;
                if mpm_core::waiting::ends_on_hang_up(&wait)
                    && conn.stream.peer_ended()
                    && hung_up_indeed(&conn.stream)
                {
                    // Hung up before it came to wait: no edge will say so.
                    return self.abandon(t, conn);
                }
                let mut ready_now = (wait.client_read && (seen_readable || !conn.stream.drained()))
                    || (wait.client_write && seen_writable);
                if self.arm(t, &wait) {
                    ready_now = true;
                }
                if let Some(slot) = self.slots.get_mut(t) {
                    *slot = Slot::Parked {
                        conn,
                        wait: Parked::Await(wait),
                        queued: false,
                    };
                    self.awaits.insert(wait.until, t);
                }
                if ready_now {
                    self.queue_resume(t);
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
                conn.linger_left = LINGER_BYTES;
                self.park(t, conn, Parked::Linger, TimeoutKind::Linger);
                self.again.push(t); // drain what is already there
            }
        }
    }

    /// A step on the loop holds its sends; after [`HOLD_STEPS`] of them,
    /// what the others held goes out first (all of them are parked: the
    /// one in hand is not, and holds nothing of this turn yet).
    fn hold(&mut self, conn: &mut Conn<H::Conn>) {
        self.held_steps += 1;
        if self.held_steps > HOLD_STEPS {
            self.flush_held();
            mpm_core::held_sends::open();
        }
        conn.stream.hold_sends(&mut self.spare_queues);
    }

    /// Send what connection `t`'s step held, then do `then`; what the
    /// socket does not take now waits, parked, for room (and for the write
    /// timeout).
    fn flush_then(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>, then: Then) {
        match conn.stream.send_held(&mut self.spare_queues) {
            Ok(()) => {
                self.stats.held_sends += 1;
                let next = match then {
                    Then::Close => Interest::Close,
                    Then::Linger => Interest::Linger,
                };
                self.apply(t, conn, next);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                self.park(t, conn, Parked::Flush(then), TimeoutKind::Write);
            }
            Err(_) => self.close(t),
        }
    }

    /// Send the answers this turn's steps held, together: a receiver woken
    /// by the first finds the next ones while it is awake. What a socket
    /// does not take now waits for its room (the edge brings the
    /// connection back here); a socket that fails closes its connection.
    fn flush_held(&mut self) {
        self.held_steps = 0;
        // Requests to upstreams first: their answers are the longer wait.
        mpm_core::held_sends::flush();
        if self.held.is_empty() {
            return;
        }
        let mut held = std::mem::take(&mut self.held);
        for t in held.drain(..) {
            let failed = match self.slots.get_mut(t) {
                // A connection waiting to close sends its own.
                Some(Slot::Parked { conn, wait, .. }) if !matches!(wait, Parked::Flush(_)) => {
                    if conn.stream.held_len() == 0 {
                        continue;
                    }
                    match conn.stream.send_held(&mut self.spare_queues) {
                        Ok(()) => {
                            self.stats.held_sends += 1;
                            false
                        }
                        Err(e) => e.kind() != ErrorKind::WouldBlock,
                    }
                }
                _ => false,
            };
            if failed {
                self.close(t);
            }
        }
        self.held = held;
    }

    /// Make the kernel report `wait`'s descriptor to connection `t`:
    /// whether it is to resume at once. A stamped socket is registered once
    /// and kept (the [upstream registry](crate::upstream_registry));
    /// readiness reported while nobody waited answers the wait now. Any other descriptor is armed for one report
    /// (`EPOLLONESHOT`, level-triggered; one already due is reported at
    /// once). A descriptor the set refuses: the step resumes and meets the
    /// error in its own I/O.
    fn arm(&mut self, t: usize, wait: &Await) -> bool {
        let Some(fd) = wait.fd else { return false };
        if let Some(stamp) = wait.stamp {
            let want = Seen {
                read: wait.read,
                write: wait.write,
            };
            match upstream_registry::with(|reg| reg.wait(&self.epoll.0, fd, stamp, t, want)) {
                Some(Ok(Waited::Kept { ready })) => {
                    self.stats.waits_registered_before += 1;
                    return ready;
                }
                Some(Ok(Waited::Registered)) => return false,
                Some(Err(_)) => return true,
                None => {}
            }
        }
        upstream_registry::with(|reg| reg.forget(fd));
        mpm_core::waiting::arm_once(&self.epoll.0, wait, t as u64 | UPSTREAM).is_err()
    }

    pub(crate) fn park(
        &mut self,
        t: usize,
        conn: Box<Conn<H::Conn>>,
        wait: Parked,
        kind: TimeoutKind,
    ) {
        if let Some(slot) = self.slots.get_mut(t) {
            *slot = Slot::Parked {
                conn,
                wait,
                queued: false,
            };
            self.timeouts.push(kind, t, self.now);
        }
    }

    /// Step this parked connection again next turn, after the others.
    fn queue_resume(&mut self, t: usize) {
        if let Some(Slot::Parked { queued, .. }) = self.slots.get_mut(t) {
            if !*queued {
                *queued = true;
                self.resume.push(t);
            }
        }
    }

    /// Parked connection `t`'s client hung up while it awaited something
    /// else: see [`ConnectionHandler::hung_up`].
    fn hung_up(&mut self, t: usize) {
        self.awaits.remove(t);
        if let Some(conn) = self.unpark(t) {
            self.abandon(t, conn);
        }
    }

    /// Take parked connection `t` in hand: its slot is busy meanwhile.
    fn unpark(&mut self, t: usize) -> Option<Box<Conn<H::Conn>>> {
        let slot = self.slots.get_mut(t)?;
        let busy = Slot::Busy {
            readable: false,
            writable: false,
            end: false,
        };
        match std::mem::replace(slot, busy) {
            Slot::Parked { conn, .. } => Some(conn),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Tell the handler its client hung up, and close the connection.
    fn abandon(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        let _ = self.guarded(&mut conn, "hung_up", |h, c| {
            h.hung_up(&mut c.state, &mut c.stream)
        });
        // Answers made before it (pipelined ahead of the request dropped)
        // and held this turn still go out, then the connection closes.
        if conn.stream.held_len() > 0 {
            return self.flush_then(t, conn, Then::Close);
        }
        drop(conn);
        self.close(t);
    }

    /// Close a connection: out of its timeout queue and out of the slab
    /// (dropping it closes the socket).
    pub(crate) fn close(&mut self, t: usize) {
        self.timeouts.remove(t);
        if let Some(Slot::Parked {
            wait: Parked::Await(_),
            ..
        }) = self.slots.get(t)
        {
            self.awaits.remove(t);
        }
        self.slots.try_remove(t);
    }

    /// Step the connections in `again`. Called several times a turn, and
    /// most turns find it empty: that check is inlined, the loop is not.
    #[inline]
    fn run_again(&mut self) {
        if !self.again.is_empty() {
            self.run_again_now();
        }
    }

    #[inline(never)]
    fn run_again_now(&mut self) {
        while !self.again.is_empty() {
            let batch = std::mem::take(&mut self.again);
            for t in batch {
                self.step(t);
            }
        }
    }

    /// Lingering close: read and discard until the peer closes, for at most
    /// [`LINGER_TIME`] from its start (the timeout queued when it began is
    /// never pushed back) and [`LINGER_BYTES`] in all, as the blocking
    /// models' lingering close.
    fn linger_drain(&mut self, t: usize, mut conn: Box<Conn<H::Conn>>) {
        let mut scratch = [0u8; 4096];
        while conn.linger_left > 0 {
            let want = scratch.len().min(conn.linger_left);
            match conn.stream.read(&mut scratch[..want]) {
                Ok(0) => break,
                Ok(n) => conn.linger_left -= n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // Still in its queue, with its first deadline.
                    if let Some(slot) = self.slots.get_mut(t) {
                        *slot = Slot::Parked {
                            conn,
                            wait: Parked::Linger,
                            queued: false,
                        };
                    }
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.close(t);
    }

    fn expire(&mut self) {
        // Waits of their own whose deadline came: resumed, ready or not;
        // the step answers its own timeout.
        while let Some((until, t)) = self.awaits.first() {
            if until > self.now {
                break;
            }
            self.awaits.remove(t);
            if let Some(Slot::Parked {
                wait: Parked::Await(_),
                queued: false,
                ..
            }) = self.slots.get(t)
            {
                self.again.push(t);
            }
        }
        self.run_again();
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
                    let _ = self.guarded(&mut conn, "timed_out", |h, c| {
                        h.timed_out(&mut c.state, &mut c.stream)
                    });
                }
            }
        }
    }

    fn begin_stop(&mut self, graceful: Duration) {
        let _ = self.set_listening(false);
        let drain = Drain::begin(&self.lifecycle, &self.listeners, graceful);
        self.stop_deadline = Some(drain.deadline());
        self.close_idle_at = Some(drain.close_idle_at());
        self.drain = Some(drain);
        // The stop pipe stays readable from now on: edge-triggered, it no
        // longer wakes every wait of the drain, yet a fast stop asked
        // during it (a second write) still does.
        let _ = self.epoll.modify(
            self.lifecycle.wake_fd(),
            &mut EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, STOP),
        );
    }
}

/// The client's end, reported for this slot, is its own: a report may be
/// one the kernel queued for the connection that held the slot before in
/// the same batch of events (tokens are slot numbers), and a request must
/// not be dropped for it. A `poll` of the socket tells (its FIN came, or a
/// reset). Asked only when an end was reported and a request waits on
/// something else: no system call on any other path.
fn hung_up_indeed(stream: &mpm_core::Stream) -> bool {
    stream.peer_closed()
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use mpm_core::Stream;

    use super::*;

    struct Nothing;

    impl ConnectionHandler for Nothing {
        type Conn = ();
        fn connected(&mut self, _stream: &Stream) {}
        fn readable(&mut self, _conn: &mut (), _stream: &mut Stream) -> Interest {
            Interest::Close
        }
        fn writable(&mut self, _conn: &mut (), _stream: &mut Stream) -> Interest {
            Interest::Close
        }
    }

    #[test]
    fn a_failing_epoll_wait_stops_the_loop_instead_of_being_swallowed() {
        let lifecycle = Lifecycle::new().unwrap();
        let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 8).unwrap();
        let returns = Arc::new(Returns::new().unwrap());
        let (jobs, _rx) = crossbeam_channel::unbounded();
        let event_loop = EventLoop::new(
            &MpmSettings::default(),
            listeners,
            Nothing,
            PoolHandle {
                jobs,
                returns,
                threads: 1,
            },
            &lifecycle,
            None,
        )
        .unwrap();
        // Break the set: its descriptor number now names /dev/null, and
        // every epoll_wait fails with EINVAL.
        let null = std::fs::File::open("/dev/null").unwrap();
        // dup2 replaces the epoll descriptor's file, which the loop only waits on.
        nix::unistd::dup2(null.as_raw_fd(), event_loop.epoll.0.as_raw_fd()).unwrap();
        // Before, the error read as "no events" forever and this never returned.
        let logged = mpm_core::error_log::expect("epoll_wait failed: EINVAL");
        let _ = event_loop.run(Duration::from_millis(100));
        assert!(
            lifecycle.is_stopping(),
            "the failure did not stop the process"
        );
        assert_eq!(logged.count(), 1, "the failure is logged once");
    }
}
