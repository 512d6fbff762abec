//! `fork(2)` for a process that has one thread, checked.
//!
//! A child forked from a threaded process holds a copy of every lock the
//! other threads held (the allocator's, stdio's) with nobody to release
//! them: it may only make async-signal-safe calls until it execs. mpm's
//! master forks serving processes that run on, so it must have one thread
//! when it forks; [`fork`] counts them at run time and refuses otherwise.

use std::sync::atomic::{AtomicU64, Ordering};

use nix::unistd::Pid;

use crate::error::{Error, Result};

/// Which side of a [`fork`] this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The parent, with the child's pid.
    Parent(Pid),
    /// The child.
    Child,
}

/// Forks on the way to this process (see [`epoch`]).
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// A number that differs between this process and the process it was
/// forked from by [`fork`], read for the cost of a load: what a value made
/// before a fork can be checked against to tell whether it was made in
/// this process (`getpid` is a system call, which glibc no longer caches).
/// Two children of one parent may share a number, which no check needs:
/// neither holds the other's memory.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Relaxed)
}

/// How many threads this process has now (the entries of
/// `/proc/self/task`).
pub fn thread_count() -> Result<usize> {
    let dir = std::fs::read_dir("/proc/self/task")
        .map_err(|e| Error::os("counting this process's threads in /proc/self/task", e))?;
    Ok(dir.count())
}

/// Fork this process, if it has one thread; otherwise refuse with
/// [`Error::Threaded`], whose message names the precondition.
pub fn fork() -> Result<Forked> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(Error::Threaded { threads });
    }
    // SAFETY: the process has one thread (counted just above; only that
    // thread, which is here, could have started another since), so the
    // child is a whole copy in which no lock is held by a missing thread,
    // and may run on as the parent would.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { child }) => Ok(Forked::Parent(child)),
        Ok(nix::unistd::ForkResult::Child) => {
            EPOCH.fetch_add(1, Ordering::Relaxed);
            Ok(Forked::Child)
        }
        Err(e) => Err(Error::os("fork", e)),
    }
}

/// End a forked child at once (`_exit`): no atexit handler, no flush of
/// the parent's buffers that the child inherited.
pub fn exit_child(code: i32) -> ! {
    // SAFETY: _exit ends the process without touching any memory of it;
    // nothing can be left half-done that another process relies on.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second thread lives while fork is asked (the harness may run this
    /// on its main thread alone): fork must refuse, naming the precondition.
    #[test]
    fn a_threaded_process_is_refused_fork() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || rx.recv());
        let result = fork();
        drop(tx);
        let _ = other.join();
        let err = result.unwrap_err();
        let Error::Threaded { threads } = err else {
            panic!("not refused for its threads: {err}");
        };
        assert!(threads >= 2, "{threads}");
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("fork refused: this process has {threads} threads"))
                && message.contains("must be single-threaded"),
            "{message}"
        );
    }
}
