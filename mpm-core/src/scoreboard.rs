//! The scoreboard: one slot per worker (process or thread) in anonymous
//! shared memory, made before any fork so that every process writes its own
//! slots and the master and the status page read them all.
//!
//! Counters are atomics that are only ever added to, so totals are exact even
//! when a slot's process changes: after a graceful restart the new generation
//! takes over the slots at once while the old one finishes its requests,
//! still adding to the same counters. Old generations therefore never need
//! slots of their own, and the table never fills (httpd's "scoreboard is
//! full" complaint). What an old process must not do is overwrite the new
//! owner's pid, state or request line: it writes those only while the slot
//! still carries its pid.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::allocator::Counters;
use crate::error::{Error, Result};

/// Bytes of the current request line a slot keeps.
pub const REQUEST_LINE: usize = 64;

/// The most slots a scoreboard holds (processes × workers per process):
/// the mapping is then at most this many slots long, whatever the
/// configuration asks for.
pub const MAX_SLOTS: usize = 1 << 18;

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// No process or thread holds the slot.
    Dead = 0,
    /// Starting up.
    Starting = 1,
    /// Waiting for a connection.
    Idle = 2,
    /// Reading a request.
    Reading = 3,
    /// Handling a request and writing its response.
    Writing = 4,
    /// Holding a connection idle between requests.
    KeepAlive = 5,
    /// Closing a connection.
    Closing = 6,
    /// Finishing its work before exiting.
    Graceful = 7,
}

impl WorkerState {
    fn from_u8(v: u8) -> WorkerState {
        match v {
            1 => WorkerState::Starting,
            2 => WorkerState::Idle,
            3 => WorkerState::Reading,
            4 => WorkerState::Writing,
            5 => WorkerState::KeepAlive,
            6 => WorkerState::Closing,
            7 => WorkerState::Graceful,
            _ => WorkerState::Dead,
        }
    }

    /// The one-letter key mod_status uses.
    pub fn key(self) -> char {
        match self {
            WorkerState::Dead => '.',
            WorkerState::Starting => 'S',
            WorkerState::Idle => '_',
            WorkerState::Reading => 'R',
            WorkerState::Writing => 'W',
            WorkerState::KeepAlive => 'K',
            WorkerState::Closing => 'C',
            WorkerState::Graceful => 'G',
        }
    }

    /// A lower-case name, for JSON.
    pub fn name(self) -> &'static str {
        match self {
            WorkerState::Dead => "dead",
            WorkerState::Starting => "starting",
            WorkerState::Idle => "idle",
            WorkerState::Reading => "reading",
            WorkerState::Writing => "writing",
            WorkerState::KeepAlive => "keepalive",
            WorkerState::Closing => "closing",
            WorkerState::Graceful => "graceful",
        }
    }

    /// Is the worker serving a request (not idle, not keeping a connection)?
    pub fn is_busy(self) -> bool {
        matches!(
            self,
            WorkerState::Reading | WorkerState::Writing | WorkerState::Closing
        )
    }
}

/// One worker's slot, aligned (and so padded) to 128 bytes: slots of
/// processes and threads on different cores never share a cache line (nor
/// the pair of lines an adjacent-line prefetcher fetches together).
#[derive(Debug)]
#[repr(C, align(128))]
pub struct Slot {
    pid: AtomicI32,
    generation: AtomicU32,
    state: AtomicU8,
    line_len: AtomicU8,
    /// Set when the worker takes turns under an accept (listener) mutex,
    /// so that its accept waits are figures of this server.
    accept_mutex: AtomicU8,
    requests: AtomicU64,
    bytes: AtomicU64,
    connections: AtomicU64,
    last_request_ms: AtomicU64,
    accept_waits: AtomicU64,
    accept_wait_ns: AtomicU64,
    sends: AtomicU64,
    send_would_block: AtomicU64,
    /// Responses by status class: 1xx to 5xx.
    responses: [AtomicU64; 5],
    /// Connections passed to the next generation unanswered (counted again
    /// by the slot that takes them).
    handed_over: AtomicU64,
    line: [AtomicU8; REQUEST_LINE],
    alloc: Counters,
}

// Atomics only; all zero is a dead slot with zero counters.
mpm_sys::shm_safe!(Slot {
    pid,
    generation,
    state,
    line_len,
    accept_mutex,
    requests,
    bytes,
    connections,
    last_request_ms,
    accept_waits,
    accept_wait_ns,
    sends,
    send_would_block,
    responses,
    handed_over,
    line,
    alloc,
});

#[derive(Debug)]
#[repr(C)]
struct Header {
    started_ms: AtomicU64,
    generation: AtomicU32,
    slots: AtomicU32,
    per_process: AtomicU32,
    draining: AtomicU32,
}

mpm_sys::shm_safe!(Header {
    started_ms,
    generation,
    slots,
    per_process,
    draining,
});

/// The shared table of slots. Made once per server, before forking, and
/// never unmapped: it lives as long as the process, so slot references are
/// `'static`. A restart that re-reads the configuration lays the same
/// mapping out again ([`Scoreboard::reuse`]) instead of mapping another.
#[derive(Debug)]
pub struct Scoreboard {
    header: &'static Header,
    /// Every slot mapped; the first `header.slots` are in use.
    all: &'static [Slot],
}

/// This process's pid, cached: `getpid` is a system call, and a slot asks
/// on every state change. Set again by [`Slot::claim`], which every worker
/// calls after it is forked.
static MY_PID: AtomicI32 = AtomicI32::new(0);

fn my_pid() -> i32 {
    match MY_PID.load(Ordering::Relaxed) {
        0 => refresh_pid(),
        pid => pid,
    }
}

fn refresh_pid() -> i32 {
    let pid = std::process::id() as i32;
    MY_PID.store(pid, Ordering::Relaxed);
    pid
}

fn now_ms() -> u64 {
    // Read on every request: the tick's resolution is plenty.
    crate::coarse_clock::unix_millis()
}

impl Scoreboard {
    /// How many slots `processes` × `per_process` is, if a scoreboard can
    /// hold that many (at most [`MAX_SLOTS`]).
    pub fn slots_for(processes: usize, per_process: usize) -> Result<usize> {
        processes
            .max(1)
            .checked_mul(per_process.max(1))
            .filter(|&n| n <= MAX_SLOTS)
            .ok_or_else(|| {
                Error::config(format!(
                    "{processes} processes of {per_process} workers: a scoreboard holds at most \
                     {MAX_SLOTS} workers"
                ))
            })
    }

    /// A scoreboard of `processes` × `per_process` slots in shared memory
    /// (at most [`MAX_SLOTS`]: more is a configuration error).
    pub fn create(processes: usize, per_process: usize) -> Result<&'static Scoreboard> {
        let n = Self::slots_for(processes, per_process)?;
        // Bounded above, so the size cannot overflow; checked all the same.
        let (header, slots) =
            mpm_sys::shared_memory::leak_with_header::<Header, Slot>(n, "the scoreboard")?;
        header.started_ms.store(now_ms(), Ordering::Relaxed);
        header.generation.store(1, Ordering::Relaxed);
        header.slots.store(n as u32, Ordering::Relaxed);
        header
            .per_process
            .store(per_process.max(1) as u32, Ordering::Relaxed);
        Ok(Box::leak(Box::new(Scoreboard { header, all: slots })))
    }

    /// Lay this scoreboard out again for `processes` × `per_process` slots,
    /// for a restart that re-read the configuration, once every process
    /// that used it has exited: the mapping is kept (and its counters, which
    /// only ever add up), every slot is marked dead until a new worker claims
    /// it. False, leaving it as it was, if it holds fewer slots than that:
    /// it cannot grow without a full stop (as httpd's `ServerLimit`).
    pub fn reuse(&self, processes: usize, per_process: usize) -> bool {
        let Ok(n) = Self::slots_for(processes, per_process) else {
            return false;
        };
        if n > self.all.len() {
            return false;
        }
        for s in self.all {
            s.state.store(WorkerState::Dead as u8, Ordering::Relaxed);
        }
        self.header.slots.store(n as u32, Ordering::Relaxed);
        self.header
            .per_process
            .store(per_process.max(1) as u32, Ordering::Relaxed);
        true
    }

    /// Every slot in use.
    pub fn slots(&self) -> &'static [Slot] {
        let n = (self.header.slots.load(Ordering::Relaxed) as usize).min(self.all.len());
        &self.all[..n]
    }

    /// The slots of process number `process`.
    pub fn process_slots(&self, process: usize) -> &'static [Slot] {
        let slots = self.slots();
        let per = self.per_process();
        let start = process.saturating_mul(per).min(slots.len());
        let end = start.saturating_add(per).min(slots.len());
        &slots[start..end]
    }

    /// Slots per process.
    pub fn per_process(&self) -> usize {
        self.header.per_process.load(Ordering::Relaxed) as usize
    }

    /// How many process slots there are.
    pub fn processes(&self) -> usize {
        self.slots().len() / self.per_process().max(1)
    }

    /// When the server started (Unix milliseconds).
    pub fn started_ms(&self) -> u64 {
        self.header.started_ms.load(Ordering::Relaxed)
    }

    /// The current generation (raised by each graceful restart).
    pub fn generation(&self) -> u32 {
        self.header.generation.load(Ordering::Relaxed)
    }

    /// Record a new generation.
    pub fn set_generation(&self, generation: u32) {
        self.header.generation.store(generation, Ordering::Relaxed);
    }

    /// Is the server about to stop (serving on for its drain delay)?
    pub fn is_draining(&self) -> bool {
        self.header.draining.load(Ordering::Relaxed) != 0
    }

    /// Record that the server is about to stop: the status page then
    /// answers 503, for load balancers' health checks.
    pub fn set_draining(&self) {
        self.header.draining.store(1, Ordering::Relaxed);
    }

    /// Totals over every slot.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in self.slots() {
            t.requests += s.requests();
            t.bytes += s.bytes();
            t.connections += s.connections.load(Ordering::Relaxed);
            t.handed_over += s.handed_over.load(Ordering::Relaxed);
            t.accept_waits += s.accept_waits.load(Ordering::Relaxed);
            t.accept_wait_ns += s.accept_wait_ns.load(Ordering::Relaxed);
            t.accept_mutex |= s.accept_mutex.load(Ordering::Relaxed) != 0;
            t.sends += s.sends.load(Ordering::Relaxed);
            t.send_would_block += s.send_would_block.load(Ordering::Relaxed);
            for (sum, n) in t.responses.iter_mut().zip(&s.responses) {
                *sum += n.load(Ordering::Relaxed);
            }
            match s.state() {
                WorkerState::Dead => {}
                WorkerState::Idle => t.idle += 1,
                st if st.is_busy() => t.busy += 1,
                WorkerState::KeepAlive => t.keepalive += 1,
                _ => {}
            }
        }
        // A connection handed over was accepted once, and counted by both
        // generations' slots.
        t.connections = t.connections.saturating_sub(t.handed_over);
        t
    }
}

/// Sums over the scoreboard.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Requests answered.
    pub requests: u64,
    /// Response bytes queued.
    pub bytes: u64,
    /// Connections accepted (once each, though one handed to the next
    /// generation passed through two slots).
    pub connections: u64,
    /// Connections an old generation handed to the next before they sent a
    /// byte ([`HandOver`](crate::HandOver)).
    pub handed_over: u64,
    /// Workers waiting for a connection.
    pub idle: u64,
    /// Workers serving a request.
    pub busy: u64,
    /// Workers holding an idle keep-alive connection.
    pub keepalive: u64,
    /// Do the workers take turns under an accept (listener) mutex? If
    /// not (event, prefork without one), the two figures below are not
    /// this server's and are left out.
    pub accept_mutex: bool,
    /// Connections accepted after a turn that had to wait while a
    /// connection was already queued.
    pub accept_waits: u64,
    /// Nanoseconds queued connections waited for the turn to be handed over.
    pub accept_wait_ns: u64,
    /// Calls that wrote to a client socket (send, sendfile, writev).
    pub sends: u64,
    /// Of those, the ones that found the socket full (`EAGAIN`): each is a
    /// wait for the socket to drain, a wake-up later.
    pub send_would_block: u64,
    /// Responses by status class, `[1xx, 2xx, 3xx, 4xx, 5xx]`: the
    /// handlers' and the HTTP layer's own (a 400 for a malformed request, a
    /// 408), which `requests` does not count.
    pub responses: [u64; 5],
}

impl Slot {
    /// Take the slot for this process (a new process or thread starts).
    pub fn claim(&'static self, generation: u32) {
        crate::allocator::count_into(&self.alloc);
        self.pid.store(refresh_pid(), Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.state
            .store(WorkerState::Starting as u8, Ordering::Relaxed);
    }

    /// Give the slot up (the worker exits), if it is still ours.
    pub fn release(&self) {
        if self.is_mine() {
            self.state.store(WorkerState::Dead as u8, Ordering::Relaxed);
        }
    }

    fn is_mine(&self) -> bool {
        self.pid.load(Ordering::Relaxed) == my_pid()
    }

    /// Set the state, if the slot is still ours.
    pub fn set_state(&self, state: WorkerState) {
        if self.is_mine() {
            self.state.store(state as u8, Ordering::Relaxed);
        }
    }

    /// A request is being answered: count it, its response bytes, and keep
    /// its request line.
    pub fn record_request(&self, line: &[u8], bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        // A later answer's size is not known yet (0): no locked add for it.
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        if self.is_mine() {
            self.last_request_ms.store(now_ms(), Ordering::Relaxed);
            let n = line.len().min(REQUEST_LINE);
            for (dst, &b) in self.line.iter().zip(&line[..n]) {
                dst.store(b, Ordering::Relaxed);
            }
            self.line_len.store(n as u8, Ordering::Relaxed);
        }
    }

    /// A response with this status was answered (any class; 1xx to 5xx
    /// are counted apart, others not at all).
    pub fn record_status(&self, status: u16) {
        if let Some(class) = (status / 100).checked_sub(1) {
            if let Some(n) = self.responses.get(usize::from(class)) {
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// This worker takes turns under an accept (listener) mutex: its
    /// accept waits are figures of the server.
    pub fn mark_accept_mutex(&self) {
        self.accept_mutex.store(1, Ordering::Relaxed);
    }

    /// A connection was accepted; `wait_ns` is how long queued connections
    /// waited for this worker's turn (0: none waited). A model counts only
    /// time a connection was waiting: a worker blocked on the mutex while
    /// its holder waits for a connection is not contention.
    pub fn record_accept(&self, wait_ns: u64) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        if wait_ns > 0 {
            self.accept_waits.fetch_add(1, Ordering::Relaxed);
            self.accept_wait_ns.fetch_add(wait_ns, Ordering::Relaxed);
        }
    }

    /// A connection that had sent nothing was handed to the next generation.
    pub fn record_hand_over(&self) {
        self.handed_over.fetch_add(1, Ordering::Relaxed);
    }

    /// A write to a client socket was made; `blocked` if it found the
    /// socket full.
    pub fn record_send(&self, blocked: bool) {
        self.sends.fetch_add(1, Ordering::Relaxed);
        if blocked {
            self.send_would_block.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The owner's pid (0 if never used).
    pub fn pid(&self) -> i32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// The owner's generation.
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Relaxed)
    }

    /// What the worker is doing.
    pub fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Requests answered through this slot.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Response bytes through this slot.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The allocation counters of the thread that holds this slot.
    pub fn alloc_counters(&self) -> &Counters {
        &self.alloc
    }

    /// Connections accepted through this slot.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// When the last request began (Unix milliseconds, 0 if none).
    pub fn last_request_ms(&self) -> u64 {
        self.last_request_ms.load(Ordering::Relaxed)
    }

    /// The last request line (possibly cut short, possibly torn while being
    /// written: it is for display).
    pub fn request_line(&self) -> String {
        let n = (self.line_len.load(Ordering::Relaxed) as usize).min(REQUEST_LINE);
        let bytes: Vec<u8> = self.line[..n]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Nanoseconds on the system-wide monotonic clock: comparable between the
/// processes of a server (accept hand-over times are written by one and
/// read by another).
pub fn monotonic_ns() -> u64 {
    mpm_sys::clock::monotonic_ns()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_and_states_count() {
        let sb = Scoreboard::create(2, 3).unwrap();
        assert_eq!(sb.slots().len(), 6);
        assert_eq!(sb.process_slots(1).len(), 3);
        let s = &sb.process_slots(1)[0];
        s.claim(1);
        s.set_state(WorkerState::Writing);
        s.record_request(b"GET /a HTTP/1.1", 100);
        s.record_request(b"GET /b HTTP/1.1", 50);
        sb.slots()[0].claim(1);
        sb.slots()[0].set_state(WorkerState::Idle);
        s.record_status(200);
        s.record_status(404);
        s.record_status(503);
        s.record_status(99);
        s.record_status(600);
        let t = sb.totals();
        assert_eq!((t.requests, t.bytes, t.busy, t.idle), (2, 150, 1, 1));
        assert_eq!(t.responses, [0, 1, 0, 1, 1]);
        assert_eq!(s.request_line(), "GET /b HTTP/1.1");
    }

    #[test]
    fn slots_never_share_a_cache_line() {
        // 128 bytes: two 64-byte lines, as adjacent-line prefetchers pair
        // them; a slot's counters are written by its own worker alone.
        assert_eq!(std::mem::align_of::<Slot>(), 128);
        assert_eq!(std::mem::size_of::<Slot>() % 128, 0);
        let sb = Scoreboard::create(2, 2).unwrap();
        for s in sb.slots() {
            assert_eq!(s as *const Slot as usize % 128, 0);
        }
    }

    #[test]
    fn sizes_are_bounded_and_their_arithmetic_checked() {
        // The segfault of a review: 72057594037927936 threads per child.
        let err = Scoreboard::create(1, 72_057_594_037_927_936).unwrap_err();
        assert!(err.is_config(), "{err}");
        assert!(Scoreboard::create(usize::MAX, usize::MAX).is_err());
        assert!(Scoreboard::create(2, MAX_SLOTS).is_err());
        let sb = Scoreboard::create(1, MAX_SLOTS).unwrap();
        assert_eq!(sb.slots().len(), MAX_SLOTS);
        // Past the end, a process's slots are empty, never out of bounds.
        assert!(sb.process_slots(usize::MAX).is_empty());
    }

    #[test]
    fn a_restart_lays_the_same_mapping_out_again_or_refuses_to_grow() {
        let sb = Scoreboard::create(2, 4).unwrap();
        let s = &sb.slots()[5];
        s.claim(1);
        s.set_state(WorkerState::Writing);
        s.record_request(b"GET / HTTP/1.1", 10);
        assert!(sb.reuse(4, 2));
        assert_eq!(
            (sb.slots().len(), sb.per_process(), sb.processes()),
            (8, 2, 4)
        );
        // Counters kept, states cleared for the new workers.
        assert_eq!(sb.totals().requests, 1);
        assert_eq!(s.state(), WorkerState::Dead);
        assert!(sb.reuse(1, 3));
        assert_eq!(sb.slots().len(), 3);
        assert!(!sb.reuse(3, 3), "nine slots do not fit in eight");
        assert_eq!(sb.slots().len(), 3);
    }

    #[test]
    fn a_slot_taken_over_keeps_counting_but_not_displaying_for_the_old_owner() {
        let sb = Scoreboard::create(1, 1).unwrap();
        let s = &sb.slots()[0];
        s.claim(1);
        // Another process takes the slot over (a new generation).
        s.pid.store(-5, Ordering::Relaxed);
        s.set_state(WorkerState::Writing);
        s.record_request(b"GET /old HTTP/1.1", 10);
        assert_eq!(s.state(), WorkerState::Starting);
        assert_eq!(s.requests(), 1);
        assert_eq!(s.request_line(), "");
    }

    /// After a graceful restart a slot's old and new owners count into it
    /// at once: no update may be lost.
    #[test]
    fn two_threads_counting_into_one_slot_lose_no_update() {
        use crate::allocator::{count_alloc, count_free, count_into, AllocTotals};
        let sb = Scoreboard::create(1, 1).expect("a scoreboard");
        let slot: &'static Slot = &sb.slots()[0];
        const N: u64 = 200_000;
        let threads: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    count_into(slot.alloc_counters());
                    for _ in 0..N {
                        count_alloc(16);
                        count_free(16);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a counting thread");
        }
        let mut t = AllocTotals::default();
        slot.alloc_counters().add_to(&mut t);
        assert_eq!((t.allocations, t.frees), (2 * N, 2 * N));
        assert_eq!((t.bytes_allocated, t.bytes_freed), (32 * N, 32 * N));
    }
}
