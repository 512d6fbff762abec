//! Prefork's accept strategy: children take turns under an accept mutex,
//! chosen at launch (`fcntl`, `flock`, a robust process-shared `pthread`
//! mutex, or `none`), and the child whose turn it is waits on every
//! listener, accepts one connection, and gives the turn back.
//!
//! Made in the master before any fork; each child then takes its own
//! [`ChildLock`], which for `flock` means a file description of its own
//! (flock locks belong to an open file description, which children that
//! merely inherit a descriptor would share).
//!
//! The lock "file" of `fcntl` and `flock` has no name: it is a `memfd`, a
//! file in memory that only descriptors reach. The master stays root, and a
//! lock file at a path in a shared directory (`/tmp/mpm-accept-PID.lock`, as
//! it once was) is a path any local user can plant a symbolic link at.
//!
//! The loop that takes the turn, waits on the listeners and accepts is
//! worker's too: [`mpm_core::take_turns`] (where what counts as an accept
//! wait is explained); this file brings prefork's lock to it (`ChildTurn`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::ptr::NonNull;

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};

use std::cell::{RefCell, RefMut};
use std::sync::atomic::AtomicU64;

use mpm_core::listener_poller::ListenerPoller;
use mpm_core::take_turns::Turn;
use mpm_core::{Error, Result};

/// How prefork children take turns to accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[value(rename_all = "lower")]
pub enum AcceptMutex {
    /// `fcntl(F_SETLKW)` on a lock file.
    Fcntl,
    /// `flock(2)` on a lock file each child opens itself.
    Flock,
    /// A process-shared, robust pthread mutex in shared memory: it recovers
    /// when its owner dies holding it.
    #[default]
    Pthread,
    /// No mutex: every idle child waits in `accept` (the thundering herd).
    None,
}

impl AcceptMutex {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            AcceptMutex::Fcntl => "fcntl",
            AcceptMutex::Flock => "flock",
            AcceptMutex::Pthread => "pthread",
            AcceptMutex::None => "none",
        }
    }
}

/// The master's accept mutex, shared by every child.
#[derive(Debug)]
pub struct AcceptLock {
    kind: AcceptMutex,
    file: Option<File>,
    mutex: Option<NonNull<libc::pthread_mutex_t>>,
    /// When the last holder gave the turn up (monotonic ns), shared by the
    /// children; `None` without a mutex.
    released: Option<NonNull<AtomicU64>>,
}

// SAFETY: the pthread mutex lives in shared memory for the life of the
// process and is only used through the pthread calls, which are thread-safe.
unsafe impl Send for AcceptLock {}
// SAFETY: as above; the file is only used through fcntl/flock.
unsafe impl Sync for AcceptLock {}

impl AcceptLock {
    /// Make the lock of this kind.
    pub fn create(kind: AcceptMutex) -> Result<AcceptLock> {
        let mut lock = AcceptLock {
            kind,
            file: None,
            mutex: None,
            released: None,
        };
        match kind {
            AcceptMutex::None => {}
            AcceptMutex::Fcntl | AcceptMutex::Flock => {
                // Children reach the file through the inherited descriptor
                // (and /proc/self/fd for their own flock description):
                // nothing needs a name, so it has none to follow or plant.
                lock.file = Some(
                    anonymous_file()
                        .map_err(|e| Error::io("creating the accept mutex's lock file", e))?,
                );
            }
            AcceptMutex::Pthread => lock.mutex = Some(shared_robust_mutex()?),
        }
        if kind != AcceptMutex::None {
            lock.released = Some(shared_clock()?);
        }
        Ok(lock)
    }

    /// Does a child take turns under this lock (every kind but `none`)?
    pub fn takes_turns(&self) -> bool {
        self.kind != AcceptMutex::None
    }

    fn released(&self) -> Option<&AtomicU64> {
        // SAFETY: the mapping is made once, never unmapped, and holds one
        // AtomicU64 (zeroed by the kernel: a valid value).
        self.released.map(|p| unsafe { p.as_ref() })
    }

    /// The kind of lock.
    pub fn kind(&self) -> AcceptMutex {
        self.kind
    }

    /// The lock as one child uses it.
    pub fn for_child(&self) -> Result<ChildLock<'_>> {
        let own = match (self.kind, &self.file) {
            (AcceptMutex::Flock, Some(f)) => Some(
                File::open(format!("/proc/self/fd/{}", f.as_raw_fd()))
                    .map_err(|e| Error::io("opening the flock accept mutex", e))?,
            ),
            _ => None,
        };
        Ok(ChildLock { lock: self, own })
    }
}

impl Drop for AcceptLock {
    fn drop(&mut self) {
        if let Some(m) = self.mutex.take() {
            // SAFETY: the mapping was made by `shared_robust_mutex` with this
            // size and is unmapped once: every `ChildLock` borrows this lock,
            // so none is left in this process, and the children that shared
            // it have their own copies of the mapping (a restart drops the
            // lock only once they have all exited).
            unsafe {
                libc::pthread_mutex_destroy(m.as_ptr());
                let _ = nix::sys::mman::munmap(
                    m.cast::<std::ffi::c_void>(),
                    std::mem::size_of::<libc::pthread_mutex_t>(),
                );
            }
        }
        if let Some(r) = self.released.take() {
            // SAFETY: made by `shared_clock` with this size, unmapped once,
            // for the same reasons as the mutex above.
            unsafe {
                let _ = nix::sys::mman::munmap(
                    r.cast::<std::ffi::c_void>(),
                    std::mem::size_of::<AtomicU64>(),
                );
            }
        }
    }
}

/// A file with no name, for the `fcntl` and `flock` locks: `memfd_create`.
fn anonymous_file() -> io::Result<File> {
    // SAFETY: a NUL-terminated name and valid flags; on success the kernel
    // returns a new descriptor that nothing else owns.
    let fd = unsafe { libc::memfd_create(c"mpm-accept-mutex".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above: a fresh descriptor, owned here alone.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// One child's handle on the [`AcceptLock`].
#[derive(Debug)]
pub struct ChildLock<'a> {
    lock: &'a AcceptLock,
    own: Option<File>,
}

impl ChildLock<'_> {
    /// Wait for the turn to accept. Returns `Ok(false)` without the lock if
    /// `stopping` turns true meanwhile: a child told to go while it waits
    /// must not wait for a connection that may never come. `fcntl` and `flock`
    /// waits are interrupted by the stop signal (the child's handlers do not
    /// restart system calls); a pthread mutex wait is never interrupted, so
    /// it is taken with a timeout and `stopping` is checked between tries.
    pub fn lock(&self, stopping: &dyn Fn() -> bool) -> io::Result<bool> {
        loop {
            if stopping() {
                return Ok(false);
            }
            let r = match self.lock.kind {
                AcceptMutex::None => return Ok(true),
                AcceptMutex::Fcntl => {
                    let f = self.lock.file.as_ref().ok_or_else(missing)?;
                    let fl = whole_file(libc::F_WRLCK);
                    fcntl(f.as_raw_fd(), FcntlArg::F_SETLKW(&fl))
                        .map(drop)
                        .map_err(io::Error::from)
                }
                AcceptMutex::Flock => {
                    let f = self.own.as_ref().ok_or_else(missing)?;
                    // SAFETY: flock on a descriptor we own.
                    match unsafe { libc::flock(f.as_fd().as_raw_fd(), libc::LOCK_EX) } {
                        0 => Ok(()),
                        _ => Err(io::Error::last_os_error()),
                    }
                }
                AcceptMutex::Pthread => {
                    let m = self.lock.mutex.ok_or_else(missing)?.as_ptr();
                    match timed_lock(m, 1) {
                        0 => Ok(()),
                        libc::ETIMEDOUT => continue,
                        // Its owner died holding it: we own it now; mark it usable.
                        // SAFETY: we hold the mutex, as EOWNERDEAD means.
                        libc::EOWNERDEAD => match unsafe { libc::pthread_mutex_consistent(m) } {
                            0 => Ok(()),
                            e => Err(io::Error::from_raw_os_error(e)),
                        },
                        e => Err(io::Error::from_raw_os_error(e)),
                    }
                }
            };
            match r {
                Ok(()) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Take the turn if it is free now, without waiting: lets the caller
    /// count only the acquisitions that had to wait (contended ones).
    pub fn try_lock(&self) -> io::Result<bool> {
        let busy = |e: &io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN) | Some(libc::EACCES) | Some(libc::EINTR)
            )
        };
        let r = match self.lock.kind {
            AcceptMutex::None => return Ok(true),
            AcceptMutex::Fcntl => {
                let f = self.lock.file.as_ref().ok_or_else(missing)?;
                let fl = whole_file(libc::F_WRLCK);
                fcntl(f.as_raw_fd(), FcntlArg::F_SETLK(&fl))
                    .map(drop)
                    .map_err(io::Error::from)
            }
            AcceptMutex::Flock => {
                let f = self.own.as_ref().ok_or_else(missing)?;
                // SAFETY: flock on a descriptor we own.
                match unsafe { libc::flock(f.as_fd().as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } {
                    0 => Ok(()),
                    _ => Err(io::Error::last_os_error()),
                }
            }
            AcceptMutex::Pthread => {
                let m = self.lock.mutex.ok_or_else(missing)?.as_ptr();
                // SAFETY: as in `lock`.
                match unsafe { libc::pthread_mutex_trylock(m) } {
                    0 => Ok(()),
                    libc::EBUSY => return Ok(false),
                    // SAFETY: we hold the mutex, as EOWNERDEAD means.
                    libc::EOWNERDEAD => match unsafe { libc::pthread_mutex_consistent(m) } {
                        0 => Ok(()),
                        e => Err(io::Error::from_raw_os_error(e)),
                    },
                    e => Err(io::Error::from_raw_os_error(e)),
                }
            }
        };
        match r {
            Ok(()) => Ok(true),
            Err(e) if busy(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give the turn up.
    pub fn unlock(&self) -> io::Result<()> {
        match self.lock.kind {
            AcceptMutex::None => Ok(()),
            AcceptMutex::Fcntl => {
                let f = self.lock.file.as_ref().ok_or_else(missing)?;
                let fl = whole_file(libc::F_UNLCK);
                retry(|| fcntl(f.as_raw_fd(), FcntlArg::F_SETLK(&fl)).map(drop))
            }
            AcceptMutex::Flock => {
                let f = self.own.as_ref().ok_or_else(missing)?;
                // SAFETY: flock on a descriptor we own.
                retry_os(|| unsafe { libc::flock(f.as_fd().as_raw_fd(), libc::LOCK_UN) })
            }
            AcceptMutex::Pthread => {
                let m = self.lock.mutex.ok_or_else(missing)?.as_ptr();
                // SAFETY: as in `lock`; we hold the mutex.
                match unsafe { libc::pthread_mutex_unlock(m) } {
                    0 => Ok(()),
                    e => Err(io::Error::from_raw_os_error(e)),
                }
            }
        }
    }
}

/// One child's turn at accepting, for [`mpm_core::take_turns::accept`] (the loop
/// worker's threads run too): its handle on the accept mutex, and its
/// poller, which it uses only while it holds the turn.
#[derive(Debug)]
pub(crate) struct ChildTurn<'a> {
    lock: ChildLock<'a>,
    poller: RefCell<ListenerPoller>,
}

impl<'a> ChildTurn<'a> {
    pub(crate) fn new(lock: ChildLock<'a>, poller: ListenerPoller) -> ChildTurn<'a> {
        ChildTurn {
            lock,
            poller: RefCell::new(poller),
        }
    }

    /// The poller, with the turn just taken; given back if it is already
    /// lent (which `take_turns::accept`, giving each turn back before the
    /// next, never does).
    fn held(&self) -> io::Result<RefMut<'_, ListenerPoller>> {
        match self.poller.try_borrow_mut() {
            Ok(p) => Ok(p),
            Err(_) => {
                self.lock.unlock()?;
                Err(io::Error::other("the accept turn is already held"))
            }
        }
    }
}

impl Turn for ChildTurn<'_> {
    type Held<'b>
        = RefMut<'b, ListenerPoller>
    where
        Self: 'b;

    fn try_take(&self) -> io::Result<Option<Self::Held<'_>>> {
        match self.lock.try_lock()? {
            true => self.held().map(Some),
            false => Ok(None),
        }
    }

    fn take(&self, stopping: &dyn Fn() -> bool) -> io::Result<Option<Self::Held<'_>>> {
        match self.lock.lock(stopping)? {
            true => self.held().map(Some),
            false => Ok(None),
        }
    }

    fn give_back<'b>(&'b self, held: Self::Held<'b>) -> io::Result<()> {
        drop(held);
        self.lock.unlock()
    }

    fn released(&self) -> Option<&AtomicU64> {
        self.lock.lock.released()
    }
}

fn missing() -> io::Error {
    io::Error::other("accept mutex not set up")
}

fn whole_file(kind: libc::c_int) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

fn retry(mut f: impl FnMut() -> nix::Result<()>) -> io::Result<()> {
    loop {
        match f() {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn retry_os(mut f: impl FnMut() -> libc::c_int) -> io::Result<()> {
    loop {
        if f() == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A zeroed `AtomicU64` in anonymous shared memory, seen by every child.
fn shared_clock() -> Result<NonNull<AtomicU64>> {
    let len = std::num::NonZeroUsize::new(std::mem::size_of::<AtomicU64>())
        .ok_or_else(|| Error::config("empty clock"))?;
    // SAFETY: a fresh shared anonymous mapping, page-aligned and zeroed:
    // a valid AtomicU64, never unmapped.
    let mem = unsafe {
        mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
        )
    }
    .map_err(|e| Error::io("mapping the accept mutex's clock", e.into()))?;
    Ok(mem.cast::<AtomicU64>())
}

/// Lock `m`, waiting at most `secs` seconds by the monotonic clock
/// (`pthread_mutex_clocklock`), so that setting the wall clock back cannot
/// stretch the wait. Returns the pthread error code (0 when locked).
fn timed_lock(m: *mut libc::pthread_mutex_t, secs: libc::time_t) -> libc::c_int {
    #[cfg(target_env = "gnu")]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    // Other C libraries have only the wall-clock `pthread_mutex_timedlock`.
    #[cfg(not(target_env = "gnu"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_REALTIME;
    let mut until = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec we own.
    unsafe { libc::clock_gettime(CLOCK, &mut until) };
    until.tv_sec = until.tv_sec.saturating_add(secs);
    #[cfg(target_env = "gnu")]
    {
        extern "C" {
            // glibc 2.30 and later; not yet in the libc crate.
            fn pthread_mutex_clocklock(
                m: *mut libc::pthread_mutex_t,
                clock: libc::clockid_t,
                abstime: *const libc::timespec,
            ) -> libc::c_int;
        }
        // SAFETY: `m` is an initialised process-shared mutex in shared
        // memory that outlives every child; `until` is a valid timespec.
        unsafe { pthread_mutex_clocklock(m, CLOCK, &until) }
    }
    #[cfg(not(target_env = "gnu"))]
    // SAFETY: as above.
    unsafe {
        libc::pthread_mutex_timedlock(m, &until)
    }
}

/// A process-shared, robust mutex in anonymous shared memory.
fn shared_robust_mutex() -> Result<NonNull<libc::pthread_mutex_t>> {
    let len = std::num::NonZeroUsize::new(std::mem::size_of::<libc::pthread_mutex_t>())
        .ok_or_else(|| Error::config("empty mutex"))?;
    // SAFETY: a fresh shared anonymous mapping, big enough for the mutex.
    let mem = unsafe {
        mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
        )
    }
    .map_err(|e| Error::io("mapping the accept mutex", e.into()))?;
    let m = mem.cast::<libc::pthread_mutex_t>();
    let fail = |what: &str, rc: i32| Error::io(what, io::Error::from_raw_os_error(rc));
    // SAFETY: the attribute object is initialised before use and destroyed
    // after; the mutex memory is valid, aligned (page-aligned) and unused.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        let rc = libc::pthread_mutexattr_init(attr.as_mut_ptr());
        if rc != 0 {
            return Err(fail("pthread_mutexattr_init", rc));
        }
        let attr_ptr = attr.as_mut_ptr();
        let rc = libc::pthread_mutexattr_setpshared(attr_ptr, libc::PTHREAD_PROCESS_SHARED);
        if rc != 0 {
            return Err(fail("pthread_mutexattr_setpshared", rc));
        }
        let rc = libc::pthread_mutexattr_setrobust(attr_ptr, libc::PTHREAD_MUTEX_ROBUST);
        if rc != 0 {
            return Err(fail("pthread_mutexattr_setrobust", rc));
        }
        let rc = libc::pthread_mutex_init(m.as_ptr(), attr_ptr);
        libc::pthread_mutexattr_destroy(attr_ptr);
        if rc != 0 {
            return Err(fail("pthread_mutex_init", rc));
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_files_have_no_name_and_lock_across_descriptions() {
        for kind in [AcceptMutex::Fcntl, AcceptMutex::Flock] {
            let lock = AcceptLock::create(kind).unwrap();
            let fd = lock.file.as_ref().unwrap().as_raw_fd();
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
            // A memfd: nothing in any directory to plant a link at.
            assert!(
                target
                    .to_string_lossy()
                    .starts_with("/memfd:mpm-accept-mutex"),
                "{kind:?}: {}",
                target.display()
            );
            let child = lock.for_child().unwrap();
            assert!(child.try_lock().unwrap());
            child.unlock().unwrap();
        }
    }

    #[test]
    fn a_pthread_lock_is_taken_and_given_back_and_unmapped_when_dropped() {
        let lock = AcceptLock::create(AcceptMutex::Pthread).unwrap();
        let child = lock.for_child().unwrap();
        assert!(child.lock(&|| false).unwrap());
        // Held: a second try fails at once; the timed wait gives up.
        assert!(!child.try_lock().unwrap());
        let m = lock.mutex.unwrap().as_ptr();
        assert_eq!(timed_lock(m, 0), libc::ETIMEDOUT);
        child.unlock().unwrap();
        assert!(child.try_lock().unwrap());
        child.unlock().unwrap();
        drop(child);
        drop(lock);
    }
}
