//! The global allocator's shim: one `GlobalAlloc` that forwards every call
//! to the allocator chosen for this process, and reports what it does to an
//! [`Observer`] (mpm-core's per-worker counters).
//!
//! The allocator is named by the `MPM_ALLOCATOR` environment variable
//! ([`ENV`]), read once with `getenv` (which does not allocate) on the first
//! allocation and never changed after, so one pointer is never handled by
//! two allocators. The hot path only reads that choice: nothing is written
//! to memory every thread shares on an allocation (the observer decides
//! where it counts).
//!
//! `Locked` is the system allocator behind one global mutex (the 2001-era
//! libc malloc whose locks dominated a threaded server's profile). It uses
//! the standard library's futex mutex rather than parking_lot's:
//! parking_lot allocates its parking table on first contention, which inside
//! an allocator would recurse into itself.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

/// The environment variable that names the allocator of this process.
pub const ENV: &str = "MPM_ALLOCATOR";

/// The allocators the shim forwards to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The C library's malloc.
    System,
    /// Microsoft's mimalloc.
    Mimalloc,
    /// The C library's malloc behind one global mutex.
    Locked,
    /// jemalloc (only with the `jemalloc` cargo feature).
    Jemalloc,
}

impl Backend {
    fn code(self) -> u8 {
        match self {
            Backend::System => 1,
            Backend::Mimalloc => 2,
            Backend::Locked => 3,
            Backend::Jemalloc => 4,
        }
    }

    fn from_code(c: u8) -> Option<Backend> {
        match c {
            1 => Some(Backend::System),
            2 => Some(Backend::Mimalloc),
            3 => Some(Backend::Locked),
            4 => Some(Backend::Jemalloc),
            _ => None,
        }
    }
}

/// What the shim reports; called on every allocation, from inside the
/// allocator. An observer should neither allocate (it would recurse) nor
/// panic (the process aborts: an allocator must not unwind).
pub trait Observer: Sync + 'static {
    /// `bytes` were allocated (a reallocation reports its new size).
    fn allocated(&self, bytes: usize);
    /// `bytes` were freed (a reallocation reports its old size).
    fn freed(&self, bytes: usize);
    /// The `Locked` allocator's mutex was held by another thread, and was
    /// waited for `ns` nanoseconds.
    fn lock_waited(&self, ns: u64);
}

/// The backend chosen for this process: 0 until the shim's first call.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

fn chosen() -> u8 {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: the name is NUL-terminated; getenv returns a pointer
            // into the environment (or null) and allocates nothing. Safe
            // code cannot change the environment under it (`set_var` is
            // unsafe, for this reason).
            let value = unsafe { libc::getenv(c"MPM_ALLOCATOR".as_ptr()) };
            let kind = if value.is_null() {
                Backend::System
            } else {
                // SAFETY: getenv returned a NUL-terminated string, which
                // stays as long as the environment is not changed.
                let bytes = unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes();
                match bytes {
                    b"mimalloc" => Backend::Mimalloc,
                    b"locked" => Backend::Locked,
                    #[cfg(feature = "jemalloc")]
                    b"jemalloc" => Backend::Jemalloc,
                    _ => Backend::System,
                }
            };
            // Two threads racing here read the same environment and store
            // the same choice; it never changes afterwards.
            CHOSEN.store(kind.code(), Ordering::Relaxed);
            kind.code()
        }
        c => c,
    }
}

/// The allocator this process runs with, or `None` when no [`Shim`] has
/// allocated in it (the program installed another global allocator).
pub fn active() -> Option<Backend> {
    Backend::from_code(CHOSEN.load(Ordering::Relaxed))
}

static BIG_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn locked<T>(observer: &impl Observer, f: impl FnOnce() -> T) -> T {
    let guard = match BIG_LOCK.try_lock() {
        Ok(g) => g,
        Err(_) => {
            let start = Instant::now();
            let g = BIG_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            observer.lock_waited(start.elapsed().as_nanos() as u64);
            g
        }
    };
    let r = f();
    drop(guard);
    r
}

/// Aborts the process if dropped during an unwind: a panic must not leave
/// an allocator (undefined behaviour), so an observer's panic aborts.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        std::process::abort();
    }
}

/// Call the observer; a panic in it aborts instead of unwinding.
fn observe(f: impl FnOnce()) {
    let bomb = AbortOnUnwind;
    f();
    std::mem::forget(bomb);
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

/// The global allocator of a program built on mpm: forwards to the
/// allocator this process was started with, and reports to `O`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Shim<O> {
    observer: O,
}

impl<O: Observer> Shim<O> {
    /// A shim reporting to `observer`.
    pub const fn new(observer: O) -> Shim<O> {
        Shim { observer }
    }

    /// Forward one call to the chosen allocator (`locked`: the system one
    /// under the global mutex).
    fn dispatch<T>(&self, call: impl FnOnce(&dyn GlobalAllocRef) -> T) -> T {
        match chosen() {
            2 => call(&mimalloc::MiMalloc),
            3 => locked(&self.observer, || call(&System)),
            #[cfg(feature = "jemalloc")]
            4 => call(&tikv_jemallocator::Jemalloc),
            _ => call(&System),
        }
    }
}

// SAFETY: every call is forwarded to one allocator chosen once per process
// (never changed after the first allocation), so each pointer is freed by
// the allocator that made it; the observer only observes, and cannot
// unwind out of here (a panic in it aborts).
unsafe impl<O: Observer> GlobalAlloc for Shim<O> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        observe(|| self.observer.allocated(layout.size()));
        // SAFETY: forwarded with the caller's layout.
        self.dispatch(|a| unsafe { a.alloc(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        observe(|| self.observer.freed(layout.size()));
        // SAFETY: `ptr` came from the same allocator, chosen once.
        self.dispatch(|a| unsafe { a.dealloc(ptr, layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        observe(|| self.observer.allocated(layout.size()));
        // SAFETY: forwarded with the caller's layout.
        self.dispatch(|a| unsafe { a.alloc_zeroed(layout) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        observe(|| {
            self.observer.freed(layout.size());
            self.observer.allocated(new_size);
        });
        // SAFETY: `ptr` came from the same allocator, chosen once.
        self.dispatch(|a| unsafe { a.realloc(ptr, layout, new_size) })
    }
}

/// Allocate and free through a shim that is not the global allocator: what
/// the tests of an observer need, without `unsafe` of their own.
pub fn exercise<O: Observer>(shim: &Shim<O>, sizes: &[usize]) {
    for &size in sizes {
        let Ok(layout) = Layout::from_size_align(size.max(1), 8) else {
            continue;
        };
        // SAFETY: a non-zero-sized layout; the block is freed at once with
        // the same layout by the same shim.
        unsafe {
            let p = GlobalAlloc::alloc(shim, layout);
            if !p.is_null() {
                GlobalAlloc::dealloc(shim, p, layout);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[derive(Debug, Default)]
    struct Count {
        allocated: AtomicU64,
        freed: AtomicU64,
    }

    impl Observer for &'static Count {
        fn allocated(&self, bytes: usize) {
            self.allocated.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        fn freed(&self, bytes: usize) {
            self.freed.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        fn lock_waited(&self, _ns: u64) {}
    }

    #[test]
    fn the_shim_reports_every_call_and_chooses_once() {
        let count: &'static Count = Box::leak(Box::default());
        let shim = Shim::new(count);
        exercise(&shim, &[16, 100, 4096]);
        assert_eq!(count.allocated.load(Ordering::Relaxed), 16 + 100 + 4096);
        assert_eq!(count.freed.load(Ordering::Relaxed), 16 + 100 + 4096);
        // The first call chose (the test binary's environment: the system's
        // unless MPM_ALLOCATOR says), and the choice is what `active` says.
        let first = active().expect("chosen on the first call");
        exercise(&shim, &[8]);
        assert_eq!(active(), Some(first));
    }
}
