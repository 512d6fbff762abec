//! One lock for every table shared between processes: a robust,
//! process-shared pthread mutex (`PTHREAD_PROCESS_SHARED`,
//! `PTHREAD_MUTEX_ROBUST`) in shared memory.
//!
//! * A waiter sleeps in the kernel (a futex) rather than spinning.
//! * A holder that dies holding it (SIGKILL, a crash) is detected by the
//!   kernel, which walks the dead thread's robust list: the next locker gets
//!   the mutex and is told ([`ProcessMutexGuard::holder_died`]), so that it
//!   can repair or reset what the dead holder may have half-written. No pid
//!   is consulted, so a pid reused by another process cannot pass a dead
//!   holder for alive.
//! * It is unlocked only by dropping its guard, so memory holding a locked
//!   mutex is not unmapped under its holder: a guard borrows the mutex, an
//!   [`OwnedProcessMutex`] (unmapped when dropped) cannot be dropped while
//!   one lives, and one whose guard was forgotten is left mapped.

use std::cell::UnsafeCell;
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::time::Duration;

use crate::error::{Error, Result};

/// A robust, process-shared mutex living in shared memory; made only by
/// [`ProcessMutex::leak`] or [`OwnedProcessMutex::new`], never moved.
#[repr(C, align(64))]
pub struct ProcessMutex {
    raw: UnsafeCell<libc::pthread_mutex_t>,
}

impl std::fmt::Debug for ProcessMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessMutex")
    }
}

// SAFETY: the mutex is only reached through the pthread calls, which are
// safe to make from any thread (and process) at once: that is their job.
unsafe impl Sync for ProcessMutex {}
// SAFETY: as above; it holds no thread-bound state (a guard does).
unsafe impl Send for ProcessMutex {}

/// Map `n` mutexes and initialise each robust and process-shared.
fn map_mutexes(n: usize, what: &str) -> Result<NonNull<ProcessMutex>> {
    let bytes = n
        .checked_mul(std::mem::size_of::<ProcessMutex>())
        .ok_or_else(|| Error::TooLarge {
            what: what.to_string(),
            detail: format!("{n} mutexes: too many"),
        })?;
    let base = crate::shared_memory::map(bytes, what)?.cast::<ProcessMutex>();
    let fail = |call: &str, rc: i32| {
        Error::os(format!("{what}: {call}"), io::Error::from_raw_os_error(rc))
    };
    let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
    // SAFETY: `attr` is local memory for pthread_mutexattr_init to fill.
    let rc = unsafe { libc::pthread_mutexattr_init(attr.as_mut_ptr()) };
    if rc != 0 {
        return Err(fail("pthread_mutexattr_init", rc));
    }
    let attr = attr.as_mut_ptr();
    // SAFETY: `attr` was initialised above and is destroyed below; each
    // mutex is in the fresh mapping (n × 64 bytes, page-aligned, so every
    // element is aligned for pthread_mutex_t), unused by anyone yet.
    let rc = unsafe {
        let mut rc = libc::pthread_mutexattr_setpshared(attr, libc::PTHREAD_PROCESS_SHARED);
        if rc == 0 {
            rc = libc::pthread_mutexattr_setrobust(attr, libc::PTHREAD_MUTEX_ROBUST);
        }
        for i in 0..n {
            if rc != 0 {
                break;
            }
            rc = libc::pthread_mutex_init(base.as_ptr().add(i).cast(), attr);
        }
        libc::pthread_mutexattr_destroy(attr);
        rc
    };
    if rc != 0 {
        // The mapping leaks (a page or so, on a failure that stops the server).
        return Err(fail("making a robust process-shared mutex", rc));
    }
    Ok(base)
}

impl ProcessMutex {
    /// `n` mutexes in shared memory that is never unmapped, for tables that
    /// live as long as the process; `what` names them in errors.
    pub fn leak(n: usize, what: &str) -> Result<&'static [ProcessMutex]> {
        let base = map_mutexes(n, what)?;
        // SAFETY: `n` initialised mutexes, aligned, in a mapping never
        // unmapped, so 'static; only shared references are handed out.
        Ok(unsafe { std::slice::from_raw_parts(base.as_ptr(), n) })
    }

    fn raw(&self) -> *mut libc::pthread_mutex_t {
        self.raw.get()
    }

    /// What a pthread lock call returned, as a guard or an error.
    fn locked(&self, rc: libc::c_int) -> io::Result<Option<ProcessMutexGuard<'_>>> {
        let holder_died = match rc {
            0 => false,
            libc::EBUSY | libc::ETIMEDOUT => return Ok(None),
            libc::EOWNERDEAD => {
                // SAFETY: EOWNERDEAD means this thread now holds the mutex,
                // which is what pthread_mutex_consistent needs.
                match unsafe { libc::pthread_mutex_consistent(self.raw()) } {
                    0 => true,
                    e => {
                        // SAFETY: held by this thread (as above): give it back.
                        unsafe { libc::pthread_mutex_unlock(self.raw()) };
                        return Err(io::Error::from_raw_os_error(e));
                    }
                }
            }
            e => return Err(io::Error::from_raw_os_error(e)),
        };
        Ok(Some(ProcessMutexGuard {
            mutex: self,
            holder_died,
            not_send: PhantomData,
        }))
    }

    /// Wait (asleep in the kernel) for the mutex. An error only if the
    /// system refuses (a mutex made unrecoverable: never through this API).
    pub fn lock(&self) -> io::Result<ProcessMutexGuard<'_>> {
        loop {
            // SAFETY: an initialised process-shared mutex that stays mapped
            // while `self` is borrowed.
            let rc = unsafe { libc::pthread_mutex_lock(self.raw()) };
            match self.locked(rc)? {
                Some(guard) => return Ok(guard),
                None => continue, // EBUSY/ETIMEDOUT cannot come from lock; retry
            }
        }
    }

    /// The mutex if it is free now, without waiting.
    pub fn try_lock(&self) -> io::Result<Option<ProcessMutexGuard<'_>>> {
        // SAFETY: as in `lock`.
        let rc = unsafe { libc::pthread_mutex_trylock(self.raw()) };
        self.locked(rc)
    }

    /// Wait at most about `limit` for the mutex; `None` if it stayed held.
    ///
    /// The limit is kept on the wall clock (`pthread_mutex_timedlock`): the
    /// monotonic `pthread_mutex_clocklock` needs glibc 2.30 at link time and
    /// the `libc` crate does not declare it. Setting the clock back
    /// stretches one wait by as much; a caller that waits in a loop to
    /// check a flag between waits sees the flag late, not never.
    pub fn lock_for(&self, limit: Duration) -> io::Result<Option<ProcessMutexGuard<'_>>> {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        let secs = libc::time_t::try_from(limit.as_secs()).unwrap_or(libc::time_t::MAX);
        let mut nsec = now.tv_nsec + i64::from(limit.subsec_nanos());
        let mut sec = now.tv_sec.saturating_add(secs);
        if nsec >= 1_000_000_000 {
            nsec -= 1_000_000_000;
            sec = sec.saturating_add(1);
        }
        let until = libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec as _,
        };
        // SAFETY: as in `lock`; `until` is a valid, normalised timespec.
        let rc = unsafe { libc::pthread_mutex_timedlock(self.raw(), &until) };
        self.locked(rc)
    }
}

/// A held [`ProcessMutex`], unlocked when dropped (a panic included).
/// Stays on the thread that locked it: only the owner may unlock.
#[derive(Debug)]
#[must_use = "the mutex is unlocked when the guard is dropped"]
pub struct ProcessMutexGuard<'a> {
    mutex: &'a ProcessMutex,
    holder_died: bool,
    not_send: PhantomData<*const ()>,
}

impl ProcessMutexGuard<'_> {
    /// Did the previous holder die holding the mutex? Then what it guards
    /// may be half-written: repair or reset it before relying on it.
    pub fn holder_died(&self) -> bool {
        self.holder_died
    }
}

impl Drop for ProcessMutexGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard exists only while this thread holds the mutex
        // (it is not Send), and the mutex outlives the borrow.
        unsafe { libc::pthread_mutex_unlock(self.mutex.raw()) };
    }
}

/// One [`ProcessMutex`] in shared memory that is unmapped when this owner
/// is dropped; a guard borrows it, so it is never unmapped while held here.
#[derive(Debug)]
pub struct OwnedProcessMutex {
    mutex: NonNull<ProcessMutex>,
}

// SAFETY: it only lends `&ProcessMutex`, which is Send and Sync.
unsafe impl Send for OwnedProcessMutex {}
// SAFETY: as above.
unsafe impl Sync for OwnedProcessMutex {}

impl OwnedProcessMutex {
    /// A new mutex in its own shared mapping; `what` names it in errors.
    pub fn new(what: &str) -> Result<OwnedProcessMutex> {
        Ok(OwnedProcessMutex {
            mutex: map_mutexes(1, what)?,
        })
    }
}

impl std::ops::Deref for OwnedProcessMutex {
    type Target = ProcessMutex;
    fn deref(&self) -> &ProcessMutex {
        // SAFETY: initialised by `new`, mapped until `self` is dropped,
        // which the borrow of `self` outlives.
        unsafe { self.mutex.as_ref() }
    }
}

impl Drop for OwnedProcessMutex {
    fn drop(&mut self) {
        // A guard forgotten (`mem::forget`) leaves the mutex held by this
        // thread and linked into its robust list, which the C library walks:
        // unmapping it then would leave that list pointing at nothing. So it
        // is unmapped only if this thread can take it now (then it is on no
        // list once given back); held elsewhere, the page is left mapped.
        let free = match self.try_lock() {
            Ok(Some(guard)) => {
                drop(guard);
                true
            }
            _ => false,
        };
        if free {
            // SAFETY: mapped by `new` with this size and unmapped only here,
            // once; no guard is left (each borrows `self`) and the mutex is
            // free, so no list of this process links it. (It is not
            // destroyed: processes forked from this one use their copies.)
            let _ = unsafe {
                nix::sys::mman::munmap(self.mutex.cast(), std::mem::size_of::<ProcessMutex>())
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_mutex_is_refused_to_others_until_dropped() {
        let m = OwnedProcessMutex::new("test").unwrap();
        let guard = m.lock().unwrap();
        assert!(!guard.holder_died());
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(m.try_lock().unwrap().is_none());
                assert!(m.lock_for(Duration::from_millis(20)).unwrap().is_none());
            });
        });
        drop(guard);
        assert!(m.try_lock().unwrap().is_some());
        assert!(m.lock_for(Duration::ZERO).unwrap().is_some());
    }

    #[test]
    fn a_thread_that_dies_holding_it_is_reported_to_the_next_holder() {
        let m = &ProcessMutex::leak(1, "test").unwrap()[0];
        std::thread::spawn(move || std::mem::forget(m.lock().unwrap()))
            .join()
            .unwrap();
        let guard = m.lock().unwrap();
        assert!(guard.holder_died());
        drop(guard);
        assert!(!m.lock().unwrap().holder_died(), "made consistent again");
    }

    #[test]
    fn waiters_sleep_and_lose_no_update() {
        let m = &ProcessMutex::leak(1, "test").unwrap()[0];
        let n = crate::shared_memory::leak::<std::sync::atomic::AtomicU64>("n").unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        let _g = m.lock().unwrap();
                        // A load then a store: only the mutex keeps it whole.
                        let v = n.load(std::sync::atomic::Ordering::Relaxed);
                        n.store(v + 1, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(n.load(std::sync::atomic::Ordering::Relaxed), 4000);
    }

    /// A guard forgotten leaves its mutex linked into this thread's robust
    /// list, which the C library rewrites on every robust lock and unlock:
    /// dropping the owner must leave that memory mapped, or giving back a
    /// mutex locked before it writes into an unmapped page (a crash here).
    #[test]
    fn a_mutex_whose_guard_was_forgotten_stays_mapped_when_dropped() {
        let before = OwnedProcessMutex::new("before").unwrap();
        let held_before = before.lock().unwrap();
        let forgotten = OwnedProcessMutex::new("forgotten").unwrap();
        std::mem::forget(forgotten.lock().unwrap());
        drop(forgotten);
        // Unlinking `before` rewrites its neighbour in the list: `forgotten`.
        drop(held_before);
        let after = OwnedProcessMutex::new("after").unwrap();
        drop(after.lock().unwrap());
    }
}
