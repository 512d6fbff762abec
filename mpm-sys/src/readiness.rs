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
}

/// The most descriptors one [`poll_numbers`] call watches: a connection's
/// upstream and its client.
pub const MAX_POLLED: usize = 2;

/// `poll(2)` on descriptors by number (at most [`MAX_POLLED`]), at most
/// `timeout` (`None`: no limit). Returns, for each, what it reported (a
/// closed number reports both, so that its owner tries its I/O and sees
/// the error). No allocation: a blocking model's worker calls it once per
/// wait on an upstream.
pub fn poll_numbers(
    fds: &[(RawFd, Ready)],
    timeout: Option<Duration>,
) -> io::Result<[Ready; MAX_POLLED]> {
    if fds.len() > MAX_POLLED {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "poll_numbers watches at most two descriptors",
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
        }) | (if want.write { libc::POLLOUT } else { 0 });
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
                    write: false,
                },
            )],
            Some(Duration::ZERO),
        )
        .unwrap();
        assert!(got[0].read);
    }

    #[test]
    fn readiness_is_reported_by_number() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let want = Ready {
            read: true,
            write: false,
        };
        let got = poll_numbers(&[(a.as_raw_fd(), want)], Some(Duration::ZERO)).unwrap();
        assert!(!got[0].read);
        b.write_all(b"x").unwrap();
        let got = poll_numbers(&[(a.as_raw_fd(), want)], Some(Duration::from_secs(1))).unwrap();
        assert!(got[0].read);
    }
}
