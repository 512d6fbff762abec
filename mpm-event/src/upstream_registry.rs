//! The upstream sockets this loop keeps registered in its epoll set for
//! good, edge-triggered, so that a wait on one costs no system call (as
//! nginx keeps its upstream connections). A wait names its socket by
//! descriptor and stamp ([`mpm_core::Await::stamp`]); the registry holds,
//! per descriptor number, the stamp registered, the connection that last
//! waited on it, and the readiness reported while nobody waited, which the
//! next wait on the same socket takes at once: an edge-triggered set does
//! not say it again.
//!
//! A closed socket leaves the kernel's set by itself; its entry stays here
//! until a socket with the same number and another stamp is waited on,
//! which registers that one afresh. The stamp is in the event's token too,
//! so that a report the kernel queued for the closed socket before the
//! number was reused is told apart and dropped.
//!
//! The registry also answers a pool about its idle connections
//! ([`mpm_core::waiting::idle_input_seen`]): a socket whose last read left
//! nothing unread and of which no input was reported since may be reused
//! without a look of its own (a `recv(MSG_PEEK)`, a system call a proxied
//! request), as nginx reuses its idle upstream connections; one that
//! turned readable meanwhile is looked at.
//!
//! One registry per loop, touched by the loop's thread alone: no lock, and
//! a loop per process (each with its own pool of upstream connections)
//! carries it to any number of cores unchanged. It is that thread's
//! ([`with`]), so that a step polled on the loop can ask it.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, RawFd};

/// The token bit of a registered upstream socket's reports; below the
/// connections' `UPSTREAM` bit, above any connection token.
pub(crate) const EDGE: u64 = 1 << 60;
/// Descriptor numbers below `1 << FD_BITS` are registered here; a higher
/// one (a process allowed over a million files) is armed per wait instead.
const FD_BITS: u32 = 20;
const FD_MASK: u64 = (1 << FD_BITS) - 1;
/// The stamp's low bits carried in a token: enough that a report queued
/// for a closed socket never matches the socket that took its number.
const STAMP_MASK: u64 = (1 << (60 - FD_BITS)) - 1;

/// Readiness reported for a socket and not yet handed to a step.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub read: bool,
    pub write: bool,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// 0: nothing registered under this number.
    stamp: u64,
    /// The connection (slab token) that last waited on it; it may since
    /// wait on something else, which the loop checks.
    waiter: usize,
    seen: Seen,
}

const EMPTY: Entry = Entry {
    stamp: 0,
    waiter: usize::MAX,
    seen: Seen {
        read: false,
        write: false,
    },
};

/// A report for a registered socket, as [`Registry::report`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    pub fd: RawFd,
    pub stamp: u64,
    /// Who last waited on it (check that it still does).
    pub waiter: usize,
    /// All the readiness not yet handed to a step, this report's included.
    pub seen: Seen,
}

thread_local! {
    /// The registry of the loop running on this thread.
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// The registry of the loop on this thread. Not reentrant: `f` must not
/// step a connection.
pub(crate) fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    REGISTRY.with(|r| f(&mut r.borrow_mut()))
}

/// While a loop runs on this thread: its registry starts empty (a loop run
/// before it on the thread had another epoll set), and it answers
/// [`mpm_core::waiting::idle_input_seen`]; both end with the guard.
pub(crate) struct Watching(());

impl Watching {
    pub(crate) fn start() -> Watching {
        with(|r| *r = Registry::default());
        mpm_core::waiting::watch_idle_input(Some(idle_input_seen));
        Watching(())
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        mpm_core::waiting::watch_idle_input(None);
        // Its entries name sockets of an epoll set going away.
        let _ = REGISTRY.try_with(|r| r.try_borrow_mut().map(|mut r| *r = Registry::default()));
    }
}

fn idle_input_seen(fd: RawFd, stamp: u64) -> Option<bool> {
    REGISTRY
        .try_with(|r| r.try_borrow_mut().ok()?.idle_input(fd, stamp))
        .ok()
        .flatten()
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// By descriptor number; grows to the highest one waited on.
    entries: Vec<Entry>,
}

/// What [`Registry::wait`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Registered already: no system call. `ready`: readiness reported
    /// meanwhile answers this wait now (taken: the step will try its I/O).
    Kept { ready: bool },
    /// Registered now (one `epoll_ctl`); the kernel reports what holds.
    Registered,
}

impl Registry {
    fn index(fd: RawFd) -> Option<usize> {
        usize::try_from(fd).ok().filter(|&i| (i as u64) <= FD_MASK)
    }

    fn token(fd: RawFd, stamp: u64) -> u64 {
        EDGE | ((stamp & STAMP_MASK) << FD_BITS) | (fd as u64 & FD_MASK)
    }

    /// Connection `waiter` waits on socket `fd` stamped `stamp` for
    /// `want`. `None`: a number this registry does not keep (arm it per
    /// wait instead). An error: the set refused it (the caller resumes
    /// the step, which meets the error in its own I/O).
    pub(crate) fn wait(
        &mut self,
        epoll: impl AsFd,
        fd: RawFd,
        stamp: u64,
        waiter: usize,
        want: Seen,
    ) -> Option<io::Result<Waited>> {
        let i = Self::index(fd)?;
        if i >= self.entries.len() {
            self.entries.resize(i + 1, EMPTY);
        }
        let e = &mut self.entries[i];
        e.waiter = waiter;
        if e.stamp == stamp {
            let ready = (want.read && e.seen.read) || (want.write && e.seen.write);
            if ready {
                e.take(want);
            }
            return Some(Ok(Waited::Kept { ready }));
        }
        // Another socket had this number (closed since, so the kernel
        // dropped it), or none: register this one.
        *e = Entry {
            stamp,
            waiter,
            seen: Seen::default(),
        };
        match mpm_core::waiting::register_edge(epoll, fd, Self::token(fd, stamp)) {
            Ok(()) => Some(Ok(Waited::Registered)),
            Err(err) => {
                self.entries[i] = EMPTY;
                Some(Err(err))
            }
        }
    }

    /// A wait without a stamp on `fd`: it is armed one-shot, which
    /// replaces any registration of ours, so the entry goes.
    pub(crate) fn forget(&mut self, fd: RawFd) {
        if let Some(e) = Self::index(fd).and_then(|i| self.entries.get_mut(i)) {
            *e = EMPTY;
        }
    }

    /// The kernel reported `token` (an [`EDGE`] token) ready as `got`:
    /// remembered, and returned with who may wait on it. `None`: a report
    /// for a socket closed since (its number now another's, or nobody's).
    pub(crate) fn report(&mut self, token: u64, got: Seen) -> Option<Report> {
        let fd = (token & FD_MASK) as RawFd;
        let stamp_bits = (token & !EDGE) >> FD_BITS;
        let e = self.entries.get_mut(Self::index(fd)?)?;
        if e.stamp == 0 || e.stamp & STAMP_MASK != stamp_bits {
            return None;
        }
        e.seen.read |= got.read;
        e.seen.write |= got.write;
        Some(Report {
            fd,
            stamp: e.stamp,
            waiter: e.waiter,
            seen: e.seen,
        })
    }

    /// Whether input was reported on `fd` stamped `stamp` since a step
    /// last resumed to read it, forgotten as it is told (the caller looks
    /// at the socket itself); `None` for a socket not registered here.
    pub(crate) fn idle_input(&mut self, fd: RawFd, stamp: u64) -> Option<bool> {
        let e = self.entries.get_mut(Self::index(fd)?)?;
        if e.stamp != stamp {
            return None;
        }
        Some(std::mem::take(&mut e.seen.read))
    }

    /// The waiter of `fd` is stepped for `want`: it tries that I/O now, so
    /// what was seen of it is handed over.
    pub(crate) fn take(&mut self, fd: RawFd, want: Seen) {
        if let Some(e) = Self::index(fd).and_then(|i| self.entries.get_mut(i)) {
            e.take(want);
        }
    }
}

impl Entry {
    fn take(&mut self, want: Seen) {
        if want.read {
            self.seen.read = false;
        }
        if want.write {
            self.seen.write = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use nix::poll::PollTimeout;
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};

    const READ: Seen = Seen {
        read: true,
        write: false,
    };

    fn reports(epoll: &Epoll, reg: &mut Registry) -> Vec<Report> {
        let mut evs = [EpollEvent::empty(); 8];
        let n = epoll.wait(&mut evs, PollTimeout::ZERO).unwrap();
        evs[..n]
            .iter()
            .filter_map(|e| {
                let f = e.events();
                reg.report(
                    e.data(),
                    Seen {
                        read: f.intersects(EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP),
                        write: f.contains(EpollFlags::EPOLLOUT),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_number_past_the_registry_is_left_to_one_shot_arming_and_an_entry_is_24_bytes() {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        let mut reg = Registry::default();
        assert!(reg.wait(&ep.0, 1 << FD_BITS, 5, 1, READ).is_none());
        assert!(reg.entries.is_empty(), "nothing kept for it");
        // design.md's cost of the registry: 24 bytes per number.
        assert_eq!(std::mem::size_of::<Entry>(), 24);
    }

    #[test]
    fn a_second_wait_on_the_same_socket_costs_no_registration_and_loses_no_input() {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        let mut reg = Registry::default();
        let (a, mut b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        assert_eq!(
            reg.wait(&ep.0, fd, 5, 1, READ).unwrap().unwrap(),
            Waited::Registered
        );
        reports(&ep, &mut reg); // the room it has, said once
        reg.take(fd, READ);
        // Input while its connection is busy elsewhere: kept, and the
        // next wait on it is answered at once.
        b.write_all(b"x").unwrap();
        let got = reports(&ep, &mut reg);
        assert_eq!(got.len(), 1);
        assert!(got[0].seen.read);
        assert_eq!(
            reg.wait(&ep.0, fd, 5, 1, READ).unwrap().unwrap(),
            Waited::Kept { ready: true }
        );
        // Taken: the wait after that one parks.
        assert_eq!(
            reg.wait(&ep.0, fd, 5, 1, READ).unwrap().unwrap(),
            Waited::Kept { ready: false }
        );
    }

    #[test]
    fn an_idle_socket_that_turned_readable_is_told_to_the_pool_once_and_a_quiet_one_as_quiet() {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        let _watching = Watching::start();
        let (a, mut b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        // Never waited on here: the loop knows nothing of it.
        assert_eq!(mpm_core::waiting::idle_input_seen(fd, 5), None);
        with(|reg| reg.wait(&ep.0, fd, 5, 1, READ).unwrap().unwrap());
        with(|reg| reports(&ep, reg));
        with(|reg| reg.take(fd, READ)); // a step read it (to its end)
                                        // Idle and quiet: the loop's word stands for a peek.
        assert_eq!(mpm_core::waiting::idle_input_seen(fd, 5), Some(false));
        // Another socket's stamp on this number: not this one's word.
        assert_eq!(mpm_core::waiting::idle_input_seen(fd, 6), None);
        // The upstream writes to the idle connection (or closes it).
        b.write_all(b"stray").unwrap();
        assert_eq!(with(|reg| reports(&ep, reg)).len(), 1);
        assert_eq!(mpm_core::waiting::idle_input_seen(fd, 5), Some(true));
        // Told once: the caller looked at the socket itself.
        assert_eq!(mpm_core::waiting::idle_input_seen(fd, 5), Some(false));
        drop(_watching);
        // No loop on this thread any more: nobody's word.
        assert_eq!(mpm_core::waiting::idle_input_seen(fd, 5), None);
    }

    #[test]
    fn a_new_socket_on_a_closed_ones_number_is_registered_and_old_reports_are_dropped() {
        let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        let mut reg = Registry::default();
        let (a, mut b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        reg.wait(&ep.0, fd, 5, 1, READ).unwrap().unwrap();
        b.write_all(b"x").unwrap();
        // A report of the old socket, taken from the kernel before the
        // number was reused.
        let stale = Registry::token(fd, 5);
        drop(a);
        drop(b);
        let (c, mut d) = UnixStream::pair().unwrap();
        let fd2 = c.as_raw_fd();
        // Whatever number the new one got, a new stamp registers it.
        assert_eq!(
            reg.wait(&ep.0, fd2, 6, 2, READ).unwrap().unwrap(),
            Waited::Registered
        );
        if fd2 == fd {
            assert_eq!(reg.report(stale, READ), None);
        }
        reports(&ep, &mut reg);
        reg.take(fd2, READ);
        d.write_all(b"y").unwrap();
        let got = reports(&ep, &mut reg);
        assert_eq!(got.len(), 1, "the new socket reports: {got:?}");
        assert_eq!((got[0].fd, got[0].stamp, got[0].waiter), (fd2, 6, 2));
    }
}
