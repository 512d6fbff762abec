//! Global allocators chosen at launch, and what they cost, counted per worker.
//!
//! One binary carries three allocators: the system's (glibc malloc), mimalloc,
//! and `locked`, the system allocator behind one global mutex: the 2001-era
//! libc malloc whose locks dominated a threaded server's profile; with the
//! `jemalloc` cargo feature, a fourth, jemalloc. A program
//! installs [`MpmAllocator`](type@MpmAllocator) as its `#[global_allocator]`: mpm-sys's
//! [`Shim`], which dispatches to the allocator
//! named by the `MPM_ALLOCATOR` environment variable (read once, on the first
//! allocation, so one pointer is never handled by two allocators), with this
//! module's counting as its observer. `mpm serve --allocator NAME`
//! re-executes itself with the variable set when it differs.
//!
//! Counting costs no shared cache line: each worker thread counts into its
//! own counters, in its scoreboard slot (where
//! [`Slot::claim`](crate::scoreboard::Slot::claim) points it);
//! threads without a slot (a master, a signal thread) count into
//! process-wide atomics. The status page sums slots across processes.
//! Every update is an atomic read-modify-write, even in a slot's own
//! counters: after a graceful restart a new generation takes over the
//! slots while the old one finishes its requests, and both count into the
//! same counters (a load-then-store would lose the other's updates). On its
//! own cache line the uncontended `lock xadd` costs a few nanoseconds of an
//! allocation's tens. Nothing else is written per allocation: whether the
//! shim is installed is the allocator choice it makes once, read after.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use mpm_sys::alloc_shim::{Backend, Observer, Shim};

/// The environment variable that names the allocator of this process.
pub const ENV: &str = mpm_sys::alloc_shim::ENV;

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

    fn from_backend(b: Backend) -> AllocatorKind {
        match b {
            Backend::System => AllocatorKind::System,
            Backend::Mimalloc => AllocatorKind::Mimalloc,
            Backend::Locked => AllocatorKind::Locked,
            Backend::Jemalloc => AllocatorKind::Jemalloc,
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

/// The allocator this process runs with, or `None` when the program did not
/// install [`MpmAllocator`](type@MpmAllocator) (then it is whatever the program uses).
pub fn active() -> Option<AllocatorKind> {
    mpm_sys::alloc_shim::active().map(AllocatorKind::from_backend)
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

// In a scoreboard slot, in shared memory: atomics only, zero to start.
mpm_sys::shm_safe!(Counters {
    allocations,
    frees,
    bytes_allocated,
    bytes_freed,
    lock_contended,
    lock_wait_ns,
    live_peak,
});

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
    static MINE: Cell<Option<&'static Counters>> = const { Cell::new(None) };
}

/// Count this thread's allocations into `counters` (its scoreboard slot's)
/// from now on.
pub(crate) fn count_into(counters: &'static Counters) {
    let _ = MINE.try_with(|m| m.set(Some(counters)));
}

fn with_counters(f: impl FnOnce(&Counters)) {
    let mine = MINE.try_with(Cell::get).ok().flatten();
    f(mine.unwrap_or(&UNSLOTTED));
}

/// Add atomically: a slot's counters may be shared by two generations.
fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

/// What the shim reports to: this thread's counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting;

impl Observer for Counting {
    fn allocated(&self, bytes: usize) {
        count_alloc(bytes);
    }

    fn freed(&self, bytes: usize) {
        count_free(bytes);
    }

    fn lock_waited(&self, ns: u64) {
        with_counters(|c| {
            bump(&c.lock_contended, 1);
            bump(&c.lock_wait_ns, ns);
        });
    }
}

/// The global allocator of a program built on mpm: dispatches to the
/// allocator this process was started with, and counts.
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: mpm_core::allocator::MpmAllocator = mpm_core::allocator::MpmAllocator;
/// ```
pub type MpmAllocator = Shim<Counting>;

/// The one value of [`MpmAllocator`](type@MpmAllocator), named like it so that
/// `static ALLOCATOR: MpmAllocator = MpmAllocator;` reads as for a unit struct.
#[allow(non_upper_case_globals)]
pub const MpmAllocator: MpmAllocator = Shim::new(Counting);

pub(crate) fn count_alloc(bytes: usize) {
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

pub(crate) fn count_free(bytes: usize) {
    with_counters(|c| {
        bump(&c.frees, 1);
        bump(&c.bytes_freed, bytes as u64);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the shim sees goes to the counters of the thread that allocates:
    /// its own once it has some, the process's until then.
    #[test]
    fn a_thread_counts_into_its_own_counters_once_given_them() {
        let mine: &'static Counters = Box::leak(Box::new(Counters::new()));
        std::thread::spawn(move || {
            count_into(mine);
            mpm_sys::alloc_shim::exercise(&MpmAllocator, &[100, 28]);
        })
        .join()
        .unwrap();
        let mut t = AllocTotals::default();
        mine.add_to(&mut t);
        assert_eq!((t.allocations, t.frees), (2, 2));
        assert_eq!((t.bytes_allocated, t.bytes_freed), (128, 128));
        // The shim allocated here: it is what `active` reports.
        assert!(active().is_some());
    }
}
