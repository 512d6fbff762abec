//! Global allocators chosen at launch, and what they cost, counted per worker.
//!
//! One binary carries three allocators: the system's (glibc malloc), mimalloc,
//! and `locked`, the system allocator behind one global mutex: the 2001-era
//! libc malloc whose locks dominated a threaded server's profile; with the
//! `jemalloc` cargo feature, a fourth, jemalloc. A program
//! installs [`MpmAllocator`] as its `#[global_allocator]`; it dispatches to
//! the allocator named by the `MPM_ALLOCATOR` environment variable, read once
//! with `getenv` (which does not allocate) on the first allocation, so one
//! pointer is never handled by two allocators. `mpm serve --allocator NAME`
//! re-executes itself with the variable set when it differs.
//!
//! Counting costs no shared cache line: each worker thread counts into its
//! own scoreboard slot (see [`Slot::claim`](crate::scoreboard::Slot::claim));
//! threads without a slot (a master, a signal thread) count into
//! process-wide atomics. The status page sums slots across processes.
//! Every update is an atomic read-modify-write, even in a slot's own
//! counters: after a graceful restart a new generation takes over the
//! slots while the old one finishes its requests, and both count into the
//! same counters (a load-then-store would lose the other's updates). On its
//! own cache line the uncontended `lock xadd` costs a few nanoseconds of an
//! allocation's tens.
//!
//! The `locked` allocator uses the standard library's futex mutex rather
//! than parking_lot's: parking_lot allocates its parking table on first
//! contention, which inside an allocator would recurse into itself.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

use crate::scoreboard::Slot;

/// The environment variable that names the allocator of this process.
pub const ENV: &str = "MPM_ALLOCATOR";

/// The allocators a process can run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocatorKind {
    /// The C library's malloc.
    System,
    /// Microsoft's mimalloc.
    Mimalloc,
    /// The C library's malloc behind one global mutex.
    Locked,
    /// jemalloc (only with the `jemalloc` cargo feature).
    Jemalloc,
}

impl AllocatorKind {
    /// Every allocator this build has, in the order reports list them.
    #[cfg(not(feature = "jemalloc"))]
    pub const ALL: [AllocatorKind; 3] = [
        AllocatorKind::System,
        AllocatorKind::Mimalloc,
        AllocatorKind::Locked,
    ];
    /// Every allocator this build has, in the order reports list them.
    #[cfg(feature = "jemalloc")]
    pub const ALL: [AllocatorKind; 4] = [
        AllocatorKind::System,
        AllocatorKind::Mimalloc,
        AllocatorKind::Locked,
        AllocatorKind::Jemalloc,
    ];

    /// The name used on the command line and in `MPM_ALLOCATOR`.
    pub fn name(self) -> &'static str {
        match self {
            AllocatorKind::System => "system",
            AllocatorKind::Mimalloc => "mimalloc",
            AllocatorKind::Locked => "locked",
            AllocatorKind::Jemalloc => "jemalloc",
        }
    }

    fn code(self) -> u8 {
        match self {
            AllocatorKind::System => 1,
            AllocatorKind::Mimalloc => 2,
            AllocatorKind::Locked => 3,
            AllocatorKind::Jemalloc => 4,
        }
    }

    fn from_code(c: u8) -> AllocatorKind {
        match c {
            2 => AllocatorKind::Mimalloc,
            3 => AllocatorKind::Locked,
            4 => AllocatorKind::Jemalloc,
            _ => AllocatorKind::System,
        }
    }
}

impl std::fmt::Display for AllocatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Only the allocators this build has are values (`jemalloc` needs the
/// `jemalloc` cargo feature).
impl crate::Choice for AllocatorKind {
    const ALL: &'static [Self] = &AllocatorKind::ALL;

    fn name(self) -> &'static str {
        AllocatorKind::name(self)
    }
}

impl std::str::FromStr for AllocatorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        <Self as crate::Choice>::from_name(s)
    }
}

static CHOSEN: AtomicU8 = AtomicU8::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn chosen() -> u8 {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: the name is NUL-terminated; getenv returns a pointer
            // into the environment (or null) and allocates nothing. Nothing
            // modifies the environment this early in a process.
            let value = unsafe { libc::getenv(c"MPM_ALLOCATOR".as_ptr()) };
            let kind = if value.is_null() {
                AllocatorKind::System
            } else {
                // SAFETY: getenv returned a NUL-terminated string.
                let bytes = unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes();
                match bytes {
                    b"mimalloc" => AllocatorKind::Mimalloc,
                    b"locked" => AllocatorKind::Locked,
                    #[cfg(feature = "jemalloc")]
                    b"jemalloc" => AllocatorKind::Jemalloc,
                    _ => AllocatorKind::System,
                }
            };
            CHOSEN.store(kind.code(), Ordering::Relaxed);
            kind.code()
        }
        c => c,
    }
}

/// The allocator this process runs with, or `None` when the program did not
/// install [`MpmAllocator`] (then it is whatever the program uses).
pub fn active() -> Option<AllocatorKind> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| AllocatorKind::from_code(chosen()))
}

/// Allocation counters of the threads that have no scoreboard slot.
static UNSLOTTED: Counters = Counters::new();

/// What the allocator counts, per worker (in its slot) or per process.
#[derive(Debug)]
#[repr(C)]
pub struct Counters {
    allocations: AtomicU64,
    frees: AtomicU64,
    bytes_allocated: AtomicU64,
    bytes_freed: AtomicU64,
    lock_contended: AtomicU64,
    lock_wait_ns: AtomicU64,
    /// The most these counters ever held live (allocated less freed).
    live_peak: AtomicU64,
}

impl Counters {
    /// All zero.
    pub const fn new() -> Counters {
        Counters {
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            bytes_allocated: AtomicU64::new(0),
            bytes_freed: AtomicU64::new(0),
            lock_contended: AtomicU64::new(0),
            lock_wait_ns: AtomicU64::new(0),
            live_peak: AtomicU64::new(0),
        }
    }

    /// Add these counters into `sum`.
    pub fn add_to(&self, sum: &mut AllocTotals) {
        sum.allocations += self.allocations.load(Ordering::Relaxed);
        sum.frees += self.frees.load(Ordering::Relaxed);
        sum.bytes_allocated += self.bytes_allocated.load(Ordering::Relaxed);
        sum.bytes_freed += self.bytes_freed.load(Ordering::Relaxed);
        sum.lock_contended += self.lock_contended.load(Ordering::Relaxed);
        sum.lock_wait_ns += self.lock_wait_ns.load(Ordering::Relaxed);
        sum.live_bytes_peak += self.live_peak.load(Ordering::Relaxed);
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

/// Sums of [`Counters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AllocTotals {
    /// Allocations (including reallocations).
    pub allocations: u64,
    /// Frees.
    pub frees: u64,
    /// Bytes asked for.
    pub bytes_allocated: u64,
    /// Bytes given back.
    pub bytes_freed: u64,
    /// Times the `locked` allocator's mutex was already held.
    pub lock_contended: u64,
    /// Nanoseconds spent waiting for it.
    pub lock_wait_ns: u64,
    /// The sum of each worker's own high-water mark of bytes it allocated
    /// and had not freed: an upper bound on the peak of live bytes, since
    /// workers need not peak at the same moment.
    pub live_bytes_peak: u64,
}

/// This process's counters for threads without a slot.
pub fn unslotted() -> &'static Counters {
    &UNSLOTTED
}

thread_local! {
    /// The counters this thread adds to: its scoreboard slot's, once it has one.
    static MINE: Cell<*const Counters> = const { Cell::new(std::ptr::null()) };
}

/// Count this thread's allocations into `slot` from now on.
pub(crate) fn count_into(slot: &'static Slot) {
    let _ = MINE.try_with(|m| m.set(slot.alloc_counters()));
}

fn with_counters(f: impl FnOnce(&Counters)) {
    let mine = MINE.try_with(Cell::get).unwrap_or(std::ptr::null());
    if mine.is_null() {
        f(&UNSLOTTED);
    } else {
        // SAFETY: slots live in a mapping that is never unmapped.
        f(unsafe { &*mine });
    }
}

/// Add atomically: a slot's counters may be shared by two generations.
fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

static BIG_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn locked<T>(f: impl FnOnce() -> T) -> T {
    let guard = match BIG_LOCK.try_lock() {
        Ok(g) => g,
        Err(_) => {
            let start = Instant::now();
            let g = BIG_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            let waited = start.elapsed().as_nanos() as u64;
            with_counters(|c| {
                bump(&c.lock_contended, 1);
                bump(&c.lock_wait_ns, waited);
            });
            g
        }
    };
    let r = f();
    drop(guard);
    r
}

/// The global allocator of a program built on mpm: dispatches to the
/// allocator this process was started with, and counts.
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: mpm_core::allocator::MpmAllocator = mpm_core::allocator::MpmAllocator;
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct MpmAllocator;

fn count_alloc(bytes: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    with_counters(|c| {
        bump(&c.allocations, 1);
        let allocated = c
            .bytes_allocated
            .fetch_add(bytes as u64, Ordering::Relaxed)
            .wrapping_add(bytes as u64);
        // Memory freed by another thread makes this thread's own balance
        // run negative: a high-water mark only counts what is above zero.
        let live = allocated as i64 - c.bytes_freed.load(Ordering::Relaxed) as i64;
        if live > c.live_peak.load(Ordering::Relaxed) as i64 {
            c.live_peak.fetch_max(live as u64, Ordering::Relaxed);
        }
    });
}

fn count_free(bytes: usize) {
    with_counters(|c| {
        bump(&c.frees, 1);
        bump(&c.bytes_freed, bytes as u64);
    });
}

/// Forward one call to the chosen allocator (`locked`: the system one under
/// the global mutex).
fn dispatch<T>(call: impl FnOnce(&dyn GlobalAllocRef) -> T) -> T {
    match chosen() {
        2 => call(&mimalloc::MiMalloc),
        3 => locked(|| call(&System)),
        #[cfg(feature = "jemalloc")]
        4 => call(&tikv_jemallocator::Jemalloc),
        _ => call(&System),
    }
}

/// `GlobalAlloc` as a trait object, so one dispatch serves every method.
trait GlobalAllocRef {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8;
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout);
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8;
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8;
}

impl<A: GlobalAlloc> GlobalAllocRef for A {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is GlobalAlloc::alloc's.
        unsafe { GlobalAlloc::alloc(self, layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is GlobalAlloc::dealloc's.
        unsafe { GlobalAlloc::dealloc(self, ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is GlobalAlloc::alloc_zeroed's.
        unsafe { GlobalAlloc::alloc_zeroed(self, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is GlobalAlloc::realloc's.
        unsafe { GlobalAlloc::realloc(self, ptr, layout, new_size) }
    }
}

// SAFETY: every call is forwarded to one allocator chosen once per process
// (never changed after the first allocation), so each pointer is freed by
// the allocator that made it; the counters only observe.
unsafe impl GlobalAlloc for MpmAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        // SAFETY: forwarded with the caller's layout.
        dispatch(|a| unsafe { a.alloc(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count_free(layout.size());
        // SAFETY: `ptr` came from the same allocator, chosen once.
        dispatch(|a| unsafe { a.dealloc(ptr, layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        // SAFETY: forwarded with the caller's layout.
        dispatch(|a| unsafe { a.alloc_zeroed(layout) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_free(layout.size());
        count_alloc(new_size);
        // SAFETY: `ptr` came from the same allocator, chosen once.
        dispatch(|a| unsafe { a.realloc(ptr, layout, new_size) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoreboard::Scoreboard;

    /// After a graceful restart a slot's old and new owners count into it
    /// at once: no update may be lost.
    #[test]
    fn two_threads_counting_into_one_slot_lose_no_update() {
        let sb = Scoreboard::create(1, 1).expect("a scoreboard");
        let slot: &'static Slot = &sb.slots()[0];
        const N: u64 = 200_000;
        let threads: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    count_into(slot);
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
