//! The loop of one process: one io_uring over the listening sockets and
//! every connection the loop holds, whatever it waits for.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use slab::Slab;

use mpm_core::loop_parts::accept_gate::{sleep_for, AcceptGate};
use mpm_core::loop_parts::timeout_queues::{TimeoutKind, TimeoutQueues};
use mpm_core::loop_parts::worker_pool::{Conn, Done, Job, PoolHandle, Returns, Step};
use mpm_core::scoreboard::{Slot as ScoreSlot, WorkerState};
use mpm_core::{
    Await, ConnectionHandler, Drain, Error, Lifecycle, Listener, MpmSettings, Result, RingQueues,
    Wait, LINGER_TIME,
};
use mpm_sys::ring::{Completion, Ring, RingFeatures, RingStats};

/// The input a connection may have queued before its receive is
/// cancelled (armed again once the handler has read it down).
pub const INPUT_CAP: usize = 256 * 1024;

/// Empty queues kept for the connections on the loop: at most this many,
/// with room for at most [`SPARE_CAPACITY`] bytes each.
const SPARES: usize = 256;
const SPARE_CAPACITY: usize = 64 * 1024;

/// Submission entries of a process's ring.
const ENTRIES: u32 = 1024;
/// Provided buffers, and their size: 1024 × 4 KiB = 4 MiB a process,
/// whatever the number of connections.
const BUFFERS: u16 = 1024;
const BUFFER_SIZE: usize = 4096;

/// What an operation is, in the top byte of its user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Recv = 1,
    Send = 2,
    /// The client's socket can take bytes (after a worker's direct write
    /// would have blocked, or a tunnel waiting on its client).
    ClientPoll = 3,
    /// A connection's own descriptor (an upstream) is ready.
    Upstream = 4,
    Accept = 5,
    /// The hand-over channel, a Unix socket: polled, then received from.
    ListenerPoll = 6,
    Returns = 7,
    Stop = 8,
}

/// Keep the pool of spare queues bounded, and their buffers small: of those
/// added since `before`, drop what does not fit.
// Boxed in the pool as in a stream: lending one moves a pointer, no
// allocation.
#[allow(clippy::vec_box)]
fn trim_spares(spares: &mut Vec<Box<RingQueues>>, before: usize) {
    let mut i = before;
    while i < spares.len() {
        if spares.len() > SPARES || spares[i].capacity() > SPARE_CAPACITY {
            spares.swap_remove(i);
        } else {
            i += 1;
        }
    }
}

/// User data: the operation, a 24-bit key (the connection's, so that a
/// completion for a connection since closed, whose slot was reused, is
/// known stale), the slot.
pub(crate) fn user_data(op: Op, key: u32, token: usize) -> u64 {
    ((op as u64) << 56) | (u64::from(key & 0xFF_FFFF) << 32) | (token as u64 & 0xFFFF_FFFF)
}

fn decode(ud: u64) -> (Option<Op>, u32, usize) {
    let op = match ud >> 56 {
        1 => Some(Op::Recv),
        2 => Some(Op::Send),
        3 => Some(Op::ClientPoll),
        4 => Some(Op::Upstream),
        5 => Some(Op::Accept),
        6 => Some(Op::ListenerPoll),
        7 => Some(Op::Returns),
        8 => Some(Op::Stop),
        _ => None,
    };
    (
        op,
        ((ud >> 32) & 0xFF_FFFF) as u32,
        (ud & 0xFFFF_FFFF) as usize,
    )
}

/// What a parked connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    Read(Wait),
    Write,
    Linger,
    Await(Await),
    /// Its output to be sent, then closed (or closed lingering).
    Flush {
        linger: bool,
    },
}

/// Where a connection goes once the ring lets go of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    Worker(Step),
    /// To the next generation, if nothing arrived meanwhile.
    HandOver,
}

pub(crate) enum State<C> {
    /// On the loop, waiting.
    Parked {
        conn: Box<Conn<C>>,
        wait: Parked,
        queued: bool,
    },
    /// On the loop, waiting for the ring to let go of its I/O (see the
    /// hand-off rule in the crate documentation).
    Leaving { conn: Box<Conn<C>>, to: Leave },
    /// At a worker, or in the loop's hands for a step.
    Busy,
}

/// A connection, and what the ring holds of it.
pub(crate) struct Entry<C> {
    pub(crate) key: u32,
    pub(crate) fd: RawFd,
    /// A multishot receive is armed (until its last completion).
    pub(crate) recv: bool,
    pub(crate) recv_cancelled: bool,
    /// A send is in flight.
    pub(crate) send: bool,
    /// The key of a poll for room on the client's socket, in flight.
    pub(crate) client_poll: Option<u32>,
    /// The key of a poll on the connection's own descriptor, in flight.
    pub(crate) upstream: Option<u32>,
    pub(crate) state: State<C>,
}

/// Counters for the stop notice and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoopStats {
    /// Requests answered on the loop itself, with no hand-off.
    pub inline_steps: u64,
    /// Steps handed to workers.
    pub handoffs: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Times accepting was paused (every worker busy, the cap reached).
    pub listener_pauses: u64,
    /// Times accepting was paused for balance with siblings.
    pub balance_pauses: u64,
    /// Connections accepted after an accept was cancelled: the kernel had
    /// woken the cancelled accept for them (see the crate documentation).
    pub taken_after_cancel: u64,
    /// Steps that yielded the loop with more to do.
    pub yields: u64,
    /// Panics caught in steps run on the loop.
    pub panics: u64,
    /// Waits on a descriptor of the connection's own.
    pub awaits: u64,
    /// Of the steps resumed after such a wait, those run on the loop.
    pub resumed_inline: u64,
    /// The ring's own counters: submissions, `io_uring_enter` calls,
    /// completions.
    pub ring: RingStats,
}

/// The loop of one process.
pub(crate) struct RingLoop<H: ConnectionHandler> {
    pub(crate) ring: Ring,
    pub(crate) handler: H,
    pub(crate) slots: Slab<Entry<H::Conn>>,
    pub(crate) timeouts: TimeoutQueues,
    pub(crate) listeners: Vec<Listener>,
    /// Per listener: an accept (or poll) is armed, and a cancel of it asked.
    pub(crate) armed: Vec<bool>,
    pub(crate) cancelling: Vec<bool>,
    pub(crate) listening: bool,
    pub(crate) gate: AcceptGate,
    pub(crate) jobs: Option<Sender<Job<H::Conn>>>,
    pub(crate) returns: Arc<Returns<H::Conn>>,
    returns_armed: bool,
    stop_armed: bool,
    pub(crate) in_flight: usize,
    pub(crate) threads: usize,
    pub(crate) max_conns: usize,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) draining: Arc<AtomicBool>,
    pub(crate) stop_deadline: Option<Instant>,
    drain: Option<Drain>,
    pub(crate) close_idle_at: Option<Instant>,
    pub(crate) accept_paused_until: Option<Instant>,
    pub(crate) last_accept_error_log: Option<Instant>,
    pub(crate) now: Instant,
    /// Connections to step again in this turn.
    pub(crate) again: Vec<usize>,
    /// Connections to step again next turn, after the others.
    pub(crate) resume: Vec<usize>,
    resuming: Vec<usize>,
    /// Connections whose gathered output is sent at the end of the turn.
    pub(crate) dirty: Vec<usize>,
    returned: Vec<Done<H::Conn>>,
    completions: Vec<Completion>,
    /// Empty queues lent to connections while on the loop (boxed as a
    /// stream holds them: lending one moves a pointer).
    #[allow(clippy::vec_box)]
    pub(crate) spares: Vec<Box<RingQueues>>,
    pub(crate) next_key: u32,
    pub(crate) stats: LoopStats,
    pub(crate) slot: Option<&'static ScoreSlot>,
    pub(crate) awaits: BTreeSet<(Instant, usize)>,
}

impl<H: ConnectionHandler> RingLoop<H> {
    /// A turn begins: the loop's time, read once, for its timeouts and
    /// for the steps it runs (`turn_clock::now`).
    #[inline]
    fn tick(&mut self) {
        self.now = Instant::now();
        mpm_core::turn_clock::begin_turn(self.now);
    }

    /// A loop over these listeners, with a ring set up on this thread.
    pub(crate) fn new(
        settings: &MpmSettings,
        listeners: Vec<Listener>,
        handler: H,
        pool: PoolHandle<H::Conn>,
        lifecycle: &Lifecycle,
        slot: Option<&'static ScoreSlot>,
        features: RingFeatures,
    ) -> Result<Self> {
        let PoolHandle {
            jobs,
            returns,
            threads,
        } = pool;
        let mut ring =
            Ring::new(ENTRIES, BUFFERS, BUFFER_SIZE).map_err(|e| Error::config(e.to_string()))?;
        ring.set_multishot(features.multishot_recv);
        let shared = !lifecycle.owns_listeners() && !settings.reuseport;
        let n = listeners.len();
        let mut this = RingLoop {
            ring,
            handler,
            slots: Slab::with_capacity(1024),
            timeouts: TimeoutQueues::new(
                settings.request_timeout,
                settings.keepalive_timeout,
                settings.timeout,
                LINGER_TIME,
            ),
            listeners,
            armed: vec![false; n],
            cancelling: vec![false; n],
            listening: false,
            gate: AcceptGate::new(settings.ledger.filter(|_| shared)),
            jobs: Some(jobs),
            returns,
            returns_armed: false,
            stop_armed: false,
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
            resume: Vec::new(),
            resuming: Vec::new(),
            dirty: Vec::new(),
            returned: Vec::new(),
            completions: Vec::new(),
            spares: Vec::new(),
            next_key: 0,
            stats: LoopStats::default(),
            slot,
            awaits: BTreeSet::new(),
        };
        this.arm_wakeups()
            .map_err(|e| Error::io("arming the ring's wake-ups", e))?;
        this.set_listening(true);
        Ok(this)
    }

    /// A fresh 24-bit key.
    pub(crate) fn key(&mut self) -> u32 {
        self.next_key = self.next_key.wrapping_add(1) & 0xFF_FFFF;
        self.next_key
    }

    /// The stop pipe (armed once: after a stop it stays readable) and the
    /// workers' eventfd (armed again after each report).
    fn arm_wakeups(&mut self) -> std::io::Result<()> {
        if !self.returns_armed {
            let fd = self.returns.wake_fd().as_raw_fd();
            self.ring
                .poll_once(fd, true, false, user_data(Op::Returns, 0, 0))?;
            self.returns_armed = true;
        }
        if !self.stop_armed && !self.lifecycle.is_stopping() {
            let fd = self.lifecycle.wake_fd().as_fd().as_raw_fd();
            self.ring
                .poll_once(fd, true, false, user_data(Op::Stop, 0, 0))?;
            self.stop_armed = true;
        }
        Ok(())
    }

    /// Serve until stopped and drained; returns the counters and the drain.
    pub(crate) fn run(mut self, graceful: Duration) -> (LoopStats, Option<Drain>) {
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
            // channel is empty, and the turn does not look (as event's).
            if self.in_flight > 0 {
                let mut returned = std::mem::take(&mut self.returned);
                returned.extend(self.returns.drain());
                for done in returned.drain(..) {
                    self.in_flight -= 1;
                    self.came_back(done.token, done.conn, done.interest);
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
                // A request that has arrived may still sit in a completion
                // (the ring took it from the socket): take those first, so
                // that no connection is closed on a request it sent.
                self.reap_now();
                self.close_idle();
                self.run_again();
            }
            if let Some(drain) = self.drain.clone() {
                // Done once no connection is left and no accept is armed:
                // one the kernel completed before its cancel took effect
                // is a connection to serve, not to drop.
                if self.slots.is_empty() && !self.armed.contains(&true) {
                    break;
                }
                if self.now >= drain.deadline() {
                    let held = self.slots.len().saturating_sub(self.in_flight);
                    self.close_all_parked();
                    let cut = held.saturating_sub(self.slots.len().saturating_sub(self.in_flight));
                    if cut > 0 {
                        drain.log_cut(cut);
                    }
                    if self.in_flight == 0 || self.now >= drain.give_up_at() {
                        break;
                    }
                }
            }
            self.update_listening();
            self.flush_dirty();
            if let Err(e) = self.arm_wakeups() {
                self.ring_failed("arming a wake-up", e);
            }
            let timeout = if !self.resume.is_empty() {
                Duration::ZERO
            } else {
                let t = self.wait_timeout();
                if t.is_zero() || !self.returns.may_sleep() {
                    Duration::ZERO
                } else {
                    t.clamp(Duration::from_millis(1), Duration::from_secs(1))
                }
            };
            if let Err(e) = self.ring.wait(timeout) {
                self.ring_failed("io_uring_enter", e);
            }
            self.returns.woke();
            self.tick();
            // The turn's writes to upstreams are held, and sent together
            // before the next wait (`flush_dirty`), as event's loop does.
            mpm_core::held_sends::open();
            self.handle_completions();
            std::mem::swap(&mut self.resume, &mut self.resuming);
            let mut resuming = std::mem::take(&mut self.resuming);
            for t in resuming.drain(..) {
                if let Some(Entry {
                    state: State::Parked { queued, .. },
                    ..
                }) = self.slots.get_mut(t)
                {
                    *queued = false;
                }
                self.step(t);
            }
            self.resuming = resuming;
            self.run_again();
            self.expire();
        }
        mpm_core::held_sends::flush();
        // Close what is left here, so that the ring lets go of it before
        // it is dropped.
        self.close_all_parked();
        self.jobs = None;
        self.gate.release();
        if let Some(s) = self.slot {
            s.release();
        }
        self.stats.ring = self.ring.stats();
        self.stats.listener_pauses = self.gate.listener_pauses;
        self.stats.balance_pauses = self.gate.balance_pauses;
        (self.stats, self.drain)
    }

    /// Act on every completion reaped now.
    fn handle_completions(&mut self) {
        let mut completions = std::mem::take(&mut self.completions);
        self.ring.reap(&mut completions);
        for c in completions.iter_mut() {
            self.on_completion(c);
        }
        self.completions = completions;
        self.run_again();
    }

    /// Submit, and act on what has completed, without waiting.
    fn reap_now(&mut self) {
        self.flush_dirty();
        if self.ring.wait(Duration::ZERO).is_ok() {
            self.handle_completions();
        }
    }

    /// The ring failed other than by a signal: said once, and this process
    /// stops (under a master, a new one takes its place).
    fn ring_failed(&mut self, what: &str, e: std::io::Error) {
        if !self.lifecycle.is_stopping() {
            mpm_core::log_error!(
                "mpm: uring loop of process {}: {what} failed: {e}; stopping this process",
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
                self.awaits.first().map(|&(d, _)| d),
                self.accept_paused_until,
                self.close_idle_at,
                // Upstream bytes a full socket did not take: soon again.
                mpm_core::held_sends::retry_at(self.now),
            ],
            self.stop_deadline,
            self.drain.as_ref(),
        )
    }

    fn on_completion(&mut self, c: &mut Completion) {
        let (op, key, t) = decode(c.user_data);
        match op {
            Some(Op::Stop) => self.stop_armed = false,
            Some(Op::Returns) => {
                self.returns_armed = false;
                self.returns.clear_wake();
            }
            Some(Op::Accept) => self.accepted(t, c),
            Some(Op::ListenerPoll) => self.hand_over_ready(t, c),
            Some(Op::Recv) => self.received(t, key, c),
            Some(Op::Send) => self.sent(t, key, c),
            Some(Op::ClientPoll) => {
                let Some(e) = self.slots.get_mut(t).filter(|e| e.client_poll == Some(key)) else {
                    return;
                };
                e.client_poll = None;
                match &e.state {
                    State::Parked {
                        wait: Parked::Write,
                        queued: false,
                        ..
                    } => self.step(t),
                    State::Parked {
                        wait: Parked::Await(w),
                        queued: false,
                        ..
                    } if w.client_write => self.step(t),
                    _ => {}
                }
            }
            Some(Op::Upstream) => {
                let Some(e) = self.slots.get_mut(t).filter(|e| e.upstream == Some(key)) else {
                    return;
                };
                e.upstream = None;
                if let State::Parked {
                    wait: Parked::Await(_),
                    queued: false,
                    ..
                } = e.state
                {
                    self.step(t);
                }
            }
            None => {}
        }
    }

    /// Bytes (or the end) for connection `t`.
    fn received(&mut self, t: usize, key: u32, c: &Completion) {
        let Some(e) = self.slots.get_mut(t).filter(|e| e.key == key) else {
            return;
        };
        let conn = match &mut e.state {
            State::Parked { conn, .. } | State::Leaving { conn, .. } => conn,
            State::Busy => return,
        };
        let bytes = self.ring.bytes(c);
        if !bytes.is_empty() {
            if let Some(spare) = self.spares.pop() {
                if let Some(back) = conn.stream.lend_ring_queues(spare) {
                    self.spares.push(back);
                }
            }
            conn.stream.ring_input(bytes);
        } else if c.result == 0
            || (c.result < 0 && c.result != -libc::ECANCELED && c.result != -libc::ENOBUFS)
        {
            // The end of the stream, or an error, which ends it as surely.
            conn.stream.ring_input_ended();
        }
        if !c.more {
            e.recv = false;
            e.recv_cancelled = false;
        }
        // A flood the handler is not reading: stop receiving until it has.
        if e.recv && !e.recv_cancelled && conn.stream.ring_input_len() > INPUT_CAP {
            e.recv_cancelled = true;
            let _ = self.ring.cancel(user_data(Op::Recv, key, t));
        }
        let owns = e.recv;
        conn.stream.set_ring_owns(owns, true);
        let ended = conn.stream.ring_input_has_ended();
        match &e.state {
            // The client hung up while its request waits on something
            // else (an upstream): the wait is over for good.
            State::Parked {
                wait: Parked::Await(w),
                ..
            } if ended && mpm_core::waiting::ends_on_hang_up(w) => self.hung_up(t),
            State::Parked {
                wait: Parked::Read(_) | Parked::Linger,
                queued: false,
                ..
            } => self.step(t),
            // Stepped once the turn's completions are all in: a tunnel or
            // an upload waiting for the client gets its input a few KiB a
            // completion, and a step for each moved that much (246,604
            // steps for a 1 GiB upload; with the turn's pieces together,
            // a step moves what they brought).
            State::Parked {
                wait: Parked::Await(w),
                queued: false,
                ..
            } if w.client_read => self.queue_resume(t),
            State::Leaving { .. } => self.try_leave(t),
            _ => {}
        }
    }

    /// A send of connection `t` completed.
    fn sent(&mut self, t: usize, key: u32, c: &mut Completion) {
        let Some(e) = self.slots.get_mut(t).filter(|e| e.key == key) else {
            return;
        };
        e.send = false;
        let conn = match &mut e.state {
            State::Parked { conn, .. } | State::Leaving { conn, .. } => conn,
            State::Busy => return,
        };
        conn.stream.set_ring_sending(false);
        if c.result < 0 {
            // The peer is gone: nothing more can reach it.
            return self.close(t);
        }
        if let Some(mut buf) = c.sent() {
            let n = (c.result as usize).min(buf.len());
            if n < buf.len() {
                buf.drain(..n);
                conn.stream.unsent_ring_output(buf);
            } else if buf.capacity() <= SPARE_CAPACITY {
                conn.stream.return_ring_output_buffer(buf);
            }
        }
        if conn.stream.ring_output_len() > 0 {
            self.dirty.push(t);
            return;
        }
        // All sent: its queues, empty unless input came meanwhile, go back
        // to the pool until it next needs them.
        let before = self.spares.len();
        conn.stream.take_ring_spares(&mut self.spares);
        trim_spares(&mut self.spares, before);
        match &e.state {
            State::Parked {
                wait: Parked::Write,
                queued: false,
                ..
            } => self.step(t),
            State::Parked {
                wait: Parked::Await(w),
                queued: false,
                ..
            } if w.client_write => self.step(t),
            State::Parked {
                wait: Parked::Flush { .. },
                ..
            } => self.step(t),
            State::Leaving { .. } => self.try_leave(t),
            _ => {}
        }
    }

    /// Send what each connection stepped this turn gathered: one send per
    /// connection, all in the turn's one enter.
    fn flush_dirty(&mut self) {
        // The requests to upstreams first (direct sends, held this turn).
        mpm_core::held_sends::flush();
        let dirty = std::mem::take(&mut self.dirty);
        for &t in &dirty {
            let Some(e) = self.slots.get_mut(t) else {
                continue;
            };
            if e.send {
                continue;
            }
            let conn = match &mut e.state {
                State::Parked { conn, .. } | State::Leaving { conn, .. } => conn,
                State::Busy => continue,
            };
            let out = conn.stream.take_ring_output();
            if out.is_empty() {
                continue;
            }
            match self.ring.send(e.fd, out, user_data(Op::Send, e.key, t)) {
                Ok(()) => {
                    e.send = true;
                    conn.stream.set_ring_sending(true);
                }
                Err(_) => self.close(t),
            }
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// Take back a connection's queues once empty, for the next
    /// connection to use: one that waits holds none.
    pub(crate) fn reclaim(&mut self, conn: &mut Conn<H::Conn>) {
        let before = self.spares.len();
        conn.stream.take_ring_spares(&mut self.spares);
        trim_spares(&mut self.spares, before);
    }

    /// Lend a connection queues for the step it is about to run.
    pub(crate) fn lend_output(&mut self, conn: &mut Conn<H::Conn>) {
        if let Some(spare) = self.spares.pop() {
            if let Some(back) = conn.stream.lend_ring_queues(spare) {
                self.spares.push(back);
            }
        }
    }

    /// Arm connection `t`'s multishot receive, unless armed, ended, or its
    /// queue is past the cap.
    pub(crate) fn arm_recv(&mut self, t: usize) {
        let Some(e) = self.slots.get_mut(t) else {
            return;
        };
        if e.recv {
            return;
        }
        let full_or_ended = match &e.state {
            State::Parked { conn, .. } | State::Leaving { conn, .. } => {
                conn.stream.ring_input_len() > INPUT_CAP || conn.stream.ring_input_has_ended()
            }
            State::Busy => true,
        };
        if full_or_ended {
            return;
        }
        if self
            .ring
            .recv_multi(e.fd, user_data(Op::Recv, e.key, t))
            .is_ok()
        {
            e.recv = true;
        }
    }

    pub(crate) fn run_again(&mut self) {
        while !self.again.is_empty() {
            let batch = std::mem::take(&mut self.again);
            for t in batch {
                self.step(t);
            }
        }
    }

    fn begin_stop(&mut self, graceful: Duration) {
        let drain = Drain::begin(&self.lifecycle, &self.listeners, graceful);
        self.stop_deadline = Some(drain.deadline());
        self.close_idle_at = Some(drain.close_idle_at());
        self.drain = Some(drain);
        self.set_listening(false);
    }

    fn expire(&mut self) {
        while let Some(&(until, t)) = self.awaits.first() {
            if until > self.now {
                break;
            }
            self.awaits.remove(&(until, t));
            if let Some(Entry {
                state:
                    State::Parked {
                        wait: Parked::Await(_),
                        queued: false,
                        ..
                    },
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
            let Some(e) = self.slots.get_mut(t) else {
                continue;
            };
            match std::mem::replace(&mut e.state, State::Busy) {
                State::Parked { mut conn, .. } => {
                    if kind != TimeoutKind::Linger {
                        let _ = self.guarded(&mut conn, "timed_out", |h, c| {
                            h.timed_out(&mut c.state, &mut c.stream)
                        });
                        // What the timeout answered (a 408) goes out before
                        // the close.
                        if conn.stream.ring_output_len() > 0 {
                            if let Some(e) = self.slots.get_mut(t) {
                                if !e.send {
                                    let out = conn.stream.take_ring_output();
                                    let _ =
                                        self.ring.send(e.fd, out, user_data(Op::Send, e.key, t));
                                    // Submitted now, while the descriptor
                                    // is open: the send then keeps the
                                    // socket until it is done.
                                    let _ = self.ring.submit();
                                    e.send = false;
                                }
                            }
                        }
                    }
                    self.close_entry(t, false);
                }
                other => {
                    e.state = other;
                    self.close(t);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use mpm_core::loop_parts::worker_pool::Returns;
    use mpm_core::{Interest, Stream};

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

    fn a_loop(
        listener: Listener,
        lifecycle: &Lifecycle,
        features: RingFeatures,
    ) -> RingLoop<Nothing> {
        let (jobs, _) = crossbeam_channel::unbounded();
        let pool = PoolHandle {
            jobs,
            returns: Arc::new(Returns::new().unwrap()),
            threads: 1,
        };
        RingLoop::new(
            &MpmSettings::default(),
            vec![listener],
            Nothing,
            pool,
            lifecycle,
            None,
            features,
        )
        .unwrap()
    }

    /// One turn of a loop without sleeping: submit, reap, act.
    fn turn(l: &mut RingLoop<Nothing>) {
        l.ring.wait(Duration::ZERO).unwrap();
        l.now = Instant::now();
        l.handle_completions();
    }

    #[test]
    fn a_connection_that_woke_a_cancelled_accept_is_taken_not_left_in_the_queue() {
        let Ok(features) = mpm_sys::ring::probe() else {
            return; // io_uring refused here: the refusal has tests of its own
        };
        let lifecycle = Lifecycle::new().unwrap();
        let shared = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 8)
            .unwrap()
            .remove(0);
        let addr = shared.local_addr();
        // Two processes' loops on one listener, as siblings share it: `a`
        // armed its accept first, so the kernel's one wake-up a connection
        // goes to `a`'s.
        let mut a = a_loop(shared.try_clone().unwrap(), &lifecycle, features);
        a.ring.submit().unwrap();
        let mut b = a_loop(shared, &lifecycle, features);
        b.ring.submit().unwrap();
        // `a` stops accepting (its share reached, say): the cancel goes in
        // at its next enter. A connection arrives meanwhile.
        a.set_listening(false);
        let _client = std::net::TcpStream::connect(addr).unwrap();
        for _ in 0..20 {
            turn(&mut a);
            turn(&mut b);
            if a.slots.len() + b.slots.len() > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Before, `a`'s accept ended cancelled without taking it, `b` was
        // never woken, and it waited for the next connection to arrive.
        assert_eq!(
            a.slots.len() + b.slots.len(),
            1,
            "the connection was left in the accept queue while a sibling listened"
        );
        assert!(!a.armed[0], "the cancelled accept ended");
    }

    #[test]
    fn user_data_carries_the_operation_the_key_and_the_slot_back() {
        for (op, key, t) in [
            (Op::Recv, 1, 0),
            (Op::Send, 0xFF_FFFF, 0xFFFF_FFFF),
            (Op::Upstream, 0x12_3456, 42),
            (Op::Accept, 0, 3),
            (Op::Stop, 0, 0),
        ] {
            assert_eq!(decode(user_data(op, key, t)), (Some(op), key, t));
        }
        // A key past 24 bits keeps its low bits: a stale completion is told
        // apart from its slot's next connection by them.
        assert_eq!(decode(user_data(Op::Recv, 0x0100_0001, 5)).1, 1);
        // Never the ring's reserved user data.
        assert_ne!(user_data(Op::Stop, 0xFF_FFFF, 0xFFFF_FFFF), u64::MAX);
        assert_eq!(decode(u64::MAX).0, None);
    }
}
