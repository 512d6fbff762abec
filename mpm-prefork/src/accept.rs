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
//! The `pthread` mutex is mpm-sys's [`OwnedProcessMutex`], the robust
//! process-shared mutex every shared table uses; it and the shared clock are
//! unmapped when the [`AcceptLock`] is dropped (a restart that re-read the
//! configuration, once every child using them has exited), and a held turn
//! borrows them, so they are never unmapped under a holder.
//!
//! The lock "file" of `fcntl` and `flock` has no name: it is a `memfd`, a
//! file in memory that only descriptors reach. The master stays root, and a
//! lock file at a path in a shared directory (`/tmp/mpm-accept-PID.lock`, as
//! it once was) is a path any local user can plant a symbolic link at.
//!
//! The loop that takes the turn, waits on the listeners and accepts is
//! worker's too: [`mpm_core::take_turns`] (where what counts as an accept
//! wait is explained); this file brings prefork's lock to it (`ChildTurn`).

use std::cell::{RefCell, RefMut};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg};

use mpm_core::listener_poller::ListenerPoller;
use mpm_core::take_turns::Turn;
use mpm_core::{Error, Result};
use mpm_sys::process_mutex::{OwnedProcessMutex, ProcessMutexGuard};
use mpm_sys::shared_memory::SharedBox;

/// How prefork children take turns to accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

impl mpm_core::Choice for AcceptMutex {
    const ALL: &'static [Self] = &[
        AcceptMutex::Fcntl,
        AcceptMutex::Flock,
        AcceptMutex::Pthread,
        AcceptMutex::None,
    ];

    fn name(self) -> &'static str {
        AcceptMutex::name(self)
    }
}

/// The master's accept mutex, shared by every child.
#[derive(Debug)]
pub struct AcceptLock {
    kind: AcceptMutex,
    file: Option<File>,
    mutex: Option<OwnedProcessMutex>,
    /// When the last holder gave the turn up (monotonic ns), shared by the
    /// children; `None` without a mutex.
    released: Option<SharedBox<AtomicU64>>,
}

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
            AcceptMutex::Pthread => {
                lock.mutex = Some(OwnedProcessMutex::new("the accept mutex")?);
            }
        }
        if kind != AcceptMutex::None {
            lock.released = Some(SharedBox::new("the accept mutex's clock")?);
        }
        Ok(lock)
    }

    /// Does a child take turns under this lock (every kind but `none`)?
    pub fn takes_turns(&self) -> bool {
        self.kind != AcceptMutex::None
    }

    fn released(&self) -> Option<&AtomicU64> {
        self.released.as_deref()
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
        Ok(ChildLock {
            lock: self,
            own,
            held: RefCell::new(None),
        })
    }
}

/// A file with no name, for the `fcntl` and `flock` locks: `memfd_create`.
fn anonymous_file() -> io::Result<File> {
    let fd = rustix::fs::memfd_create(c"mpm-accept-mutex", rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(File::from(fd))
}

/// One child's handle on the [`AcceptLock`].
#[derive(Debug)]
pub struct ChildLock<'a> {
    lock: &'a AcceptLock,
    own: Option<File>,
    /// The `pthread` mutex while this child holds it: dropping the guard
    /// gives the turn back.
    held: RefCell<Option<ProcessMutexGuard<'a>>>,
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
                    rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive)
                        .map_err(io::Error::from)
                }
                AcceptMutex::Pthread => {
                    let m = self.lock.mutex.as_deref().ok_or_else(missing)?;
                    // A holder that died holding it left it to us, made
                    // usable again; the turn guards no data to repair.
                    match m.lock_for(Duration::from_secs(1)) {
                        Ok(Some(guard)) => {
                            *self.held.borrow_mut() = Some(guard);
                            Ok(())
                        }
                        Ok(None) => continue,
                        Err(e) => Err(e),
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
                rustix::fs::flock(f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                    .map_err(io::Error::from)
            }
            AcceptMutex::Pthread => {
                let m = self.lock.mutex.as_deref().ok_or_else(missing)?;
                match m.try_lock()? {
                    Some(guard) => {
                        *self.held.borrow_mut() = Some(guard);
                        Ok(())
                    }
                    None => return Ok(false),
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
                loop {
                    match rustix::fs::flock(f, rustix::fs::FlockOperation::Unlock) {
                        Err(rustix::io::Errno::INTR) => continue,
                        r => return r.map_err(io::Error::from),
                    }
                }
            }
            AcceptMutex::Pthread => {
                // Dropping the guard unlocks.
                match self.held.borrow_mut().take() {
                    Some(_guard) => Ok(()),
                    None => Err(io::Error::other("the accept mutex is not held")),
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
        let m = lock.mutex.as_deref().unwrap();
        assert!(m.lock_for(Duration::ZERO).unwrap().is_none());
        child.unlock().unwrap();
        assert!(child.try_lock().unwrap());
        child.unlock().unwrap();
        drop(child);
        drop(lock);
    }
}
