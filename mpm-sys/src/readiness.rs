//! Readiness of descriptors named by number: a connection's wait on an
//! upstream socket its state owns (`mpm_core::Await`) carries the number,
//! not a borrow, since the wait outlives the step that made it. The kernel
//! checks every number it is given (a closed one is `POLLNVAL` to `poll`,
//! `EBADF` to `epoll_ctl`), so these calls are safe for any number.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

/// Readiness asked of, or reported for, one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ready {
    /// Readable, at its end, or failed.
    pub read: bool,
    /// Writable, or failed.
    pub write: bool,
    /// Asked ([`poll_numbers`]): the peer's end of its stream too
    /// (`POLLRDHUP`), besides what `read` and `write` ask. Reported: the
    /// peer ended its stream, reset it, or it failed. (An epoll arming
    /// asks for the end always.)
    pub hang_up: bool,
}

/// The most descriptors one [`poll_numbers`] call watches: a connection's
/// upstream, its client, and the pipe a fast stop writes to.
pub const MAX_POLLED: usize = 3;

/// `poll(2)` on descriptors by number (at most [`MAX_POLLED`]), at most
/// `timeout` (`None`: no limit). Returns, for each, what it reported (a
/// closed number reports both, so that its owner tries its I/O and sees
/// the error). An entry that asks for nothing still reports a reset or an
/// error (`POLLHUP`, `POLLERR`); one that asks `hang_up`, the end of the
/// peer's stream too. No allocation: a blocking model's worker calls it once per
/// wait on an upstream.
pub fn poll_numbers(
    fds: &[(RawFd, Ready)],
    timeout: Option<Duration>,
) -> io::Result<[Ready; MAX_POLLED]> {
    if fds.len() > MAX_POLLED {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "poll_numbers watches at most three descriptors",
        ));
    }
    let mut set = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_POLLED];
    for (slot, &(fd, want)) in set.iter_mut().zip(fds) {
        slot.fd = fd;
        slot.events = (if want.read {
            libc::POLLIN | libc::POLLRDHUP
        } else {
            0
        }) | (if want.write { libc::POLLOUT } else { 0 })
            | (if want.hang_up { libc::POLLRDHUP } else { 0 });
    }
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_millis().min(i32::MAX as u128) as i32,
    };
    // SAFETY: `set` is a live, initialised array of which the first
    // `fds.len()` (at most its length) pollfd structures are passed, for
    // poll to write `revents` into; poll accepts any descriptor number (an
    // invalid one is reported as POLLNVAL).
    let rc = unsafe { libc::poll(set.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = [Ready::default(); MAX_POLLED];
    for (o, p) in out.iter_mut().zip(&set[..fds.len()]) {
        let bad = p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        *o = Ready {
            read: bad || p.revents & (libc::POLLIN | libc::POLLRDHUP) != 0,
            write: bad || p.revents & libc::POLLOUT != 0,
            hang_up: bad || p.revents & libc::POLLRDHUP != 0,
        };
    }
    Ok(out)
}

/// Arm `fd` in the epoll set `epoll` for one report of `want` under
/// `token` (`EPOLLONESHOT`, level-triggered: armed again by the next call,
/// which reports at once what is already ready, so no readiness is lost
/// between two waits). Adds the descriptor if the set does not hold it
/// (or holds a closed one of the same number, which the kernel removed).
pub fn epoll_arm_once(epoll: impl AsFd, fd: RawFd, want: Ready, token: u64) -> io::Result<()> {
    let mut events = libc::EPOLLONESHOT as u32 | libc::EPOLLRDHUP as u32;
    if want.read {
        events |= libc::EPOLLIN as u32;
    }
    if want.write {
        events |= libc::EPOLLOUT as u32;
    }
    let mut ev = libc::epoll_event { events, u64: token };
    let ep = epoll.as_fd().as_raw_fd();
    // SAFETY: `ev` is a live epoll_event for the duration of the call; the
    // kernel validates both descriptor numbers (EBADF, ENOENT).
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut ev) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOENT) {
        return Err(err);
    }
    // SAFETY: as above.
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Register `fd` in the epoll set `epoll` under `token` for good:
/// readable, writable and the peer's end, edge-triggered (`EPOLLET`), as
/// nginx registers an upstream socket. No later call is needed however
/// often its owner waits on it: each change of its readiness is reported
/// once, and the set forgets it when it is closed. Adds it; a socket the
/// set already holds (registered by [`epoll_arm_once`] before) is changed
/// instead.
pub fn epoll_register_edge(epoll: impl AsFd, fd: RawFd, token: u64) -> io::Result<()> {
    let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
    let mut ev = libc::epoll_event { events, u64: token };
    let ep = epoll.as_fd().as_raw_fd();
    // SAFETY: `ev` is a live epoll_event for the duration of the call; the
    // kernel validates both descriptor numbers (EBADF, EEXIST).
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EEXIST) {
        return Err(err);
    }
    // SAFETY: as above.
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut ev) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Take `fd` out of the epoll set `epoll` (a descriptor its connection no
/// longer waits on but keeps open, in a pool). An error (not in the set,
/// closed) is not one to act on: the set no longer reports it either way.
pub fn epoll_forget(epoll: impl AsFd, fd: RawFd) {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: `ev` is live for the call (ignored by DEL on current
    // kernels); the kernel validates both numbers.
    let _ = unsafe { libc::epoll_ctl(epoll.as_fd().as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_closed_number_reports_ready_instead_of_failing() {
        // Above any descriptor limit: no other test's file can take it.
        let fd = i32::MAX - 1;
        let got = poll_numbers(
            &[(
                fd,
                Ready {
                    read: true,
                    ..Ready::default()
                },
            )],
            Some(Duration::ZERO),
        )
        .unwrap();
        assert!(got[0].read);
    }

    /// Reports of `epoll` now: (token, readable, writable) each.
    fn reports(epoll: &std::os::fd::OwnedFd) -> Vec<(u64, bool, bool)> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: test-only; `evs` is a live array of 8 events.
        let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), evs.as_mut_ptr(), 8, 0) };
        assert!(n >= 0);
        evs[..n as usize]
            .iter()
            .map(|e| {
                let f = e.events;
                (
                    e.u64,
                    f & libc::EPOLLIN as u32 != 0,
                    f & libc::EPOLLOUT as u32 != 0,
                )
            })
            .collect()
    }

    fn epoll() -> std::os::fd::OwnedFd {
        use std::os::fd::FromRawFd;
        // SAFETY: test-only; a new descriptor owned from here on.
        unsafe { std::os::fd::OwnedFd::from_raw_fd(libc::epoll_create1(libc::EPOLL_CLOEXEC)) }
    }

    #[test]
    fn a_socket_registered_once_reports_each_new_input_without_another_call() {
        let ep = epoll();
        let (a, mut b) = UnixStream::pair().unwrap();
        epoll_register_edge(&ep, a.as_raw_fd(), 7).unwrap();
        // Registering reports what holds now (room), once.
        assert_eq!(reports(&ep), vec![(7, false, true)]);
        assert!(reports(&ep).is_empty(), "an edge is reported once");
        for _ in 0..3 {
            b.write_all(b"x").unwrap();
            let got = reports(&ep);
            assert_eq!(got.len(), 1);
            assert!(got[0].1, "new input is a new report: {got:?}");
            assert!(reports(&ep).is_empty());
        }
        // Registered already (as by a one-shot arming): changed, not refused.
        epoll_register_edge(&ep, a.as_raw_fd(), 8).unwrap();
        assert!(reports(&ep).iter().all(|r| r.0 == 8));
    }

    #[test]
    fn readiness_is_reported_by_number() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let want = Ready {
            read: true,
            ..Ready::default()
        };
        let got = poll_numbers(&[(a.as_raw_fd(), want)], Some(Duration::ZERO)).unwrap();
        assert!(!got[0].read);
        b.write_all(b"x").unwrap();
        let got = poll_numbers(&[(a.as_raw_fd(), want)], Some(Duration::from_secs(1))).unwrap();
        assert!(got[0].read);
    }
}
