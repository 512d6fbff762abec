//! Waiting for a connection on any of several listeners: with `epoll`,
//! `poll` or `select`, chosen at launch (`--poller`).
//!
//! Prefork children and worker threads wait here, under their accept or
//! listener mutex, for one of the listening sockets (or the stop pipe) to
//! become readable. With one listener the three differ by little; with a
//! hundred, `poll` and `select` hand the kernel the whole set on every call
//! and scan it again on return, while an epoll set is registered once and
//! reports only what is ready: the 2000 httpd measurement found the
//! poll-based `ap_poll` 6.7 % slower than `select` at 100 listeners.
//!
//! `select` cannot watch a descriptor at or above `FD_SETSIZE` (1024):
//! [`ListenerPoller::new`] refuses such a set with an error that says so,
//! instead of the undefined behaviour C programs meet.
//!
//! The event MPM's loop is epoll by design (it parks thousands of
//! connections); this choice is for prefork and worker.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::select::{select, FdSet};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::error::{Error, Result};
use crate::listener::Listener;

/// How a process waits on its listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollerKind {
    /// One epoll set per waiting thread, registered once.
    #[default]
    Epoll,
    /// `poll(2)` over every listener on each wait.
    Poll,
    /// `select(2)` over every listener on each wait (descriptors below 1024).
    Select,
}

impl PollerKind {
    /// Every poller, in the order reports list them.
    pub const ALL: [PollerKind; 3] = [PollerKind::Epoll, PollerKind::Poll, PollerKind::Select];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PollerKind::Epoll => "epoll",
            PollerKind::Poll => "poll",
            PollerKind::Select => "select",
        }
    }
}

impl crate::Choice for PollerKind {
    const ALL: &'static [Self] = &PollerKind::ALL;

    fn name(self) -> &'static str {
        PollerKind::name(self)
    }
}

impl fmt::Display for PollerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one wait found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The stop pipe is readable: the server is stopping.
    Stop,
    /// These listeners (indices into the set) may have a connection.
    Ready,
    /// Nothing (timeout, or a signal interrupted the wait).
    Nothing,
}

/// Waits on a fixed set of listeners and a wake descriptor; built once per
/// prefork child or worker process, reused for every wait, so a wait
/// allocates nothing.
///
/// It holds its own copies (`dup`) of the descriptors, so it can live
/// beside the listeners, under a mutex; drop it with them.
pub struct ListenerPoller {
    fds: Vec<OwnedFd>,
    /// Which listeners the last wait found readable.
    ready: Vec<bool>,
    how: How,
}

enum How {
    Epoll(Epoll, Vec<EpollEvent>),
    Poll,
    Select,
}

impl fmt::Debug for ListenerPoller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.how {
            How::Epoll(..) => PollerKind::Epoll,
            How::Poll => PollerKind::Poll,
            How::Select => PollerKind::Select,
        };
        f.debug_struct("ListenerPoller")
            .field("kind", &kind)
            .field("listeners", &self.ready.len())
            .finish()
    }
}

impl ListenerPoller {
    /// A poller of `kind` over `listeners`, woken also when `wake` (the
    /// lifecycle's stop pipe) becomes readable.
    pub fn new(
        kind: PollerKind,
        listeners: &[Listener],
        wake: BorrowedFd<'_>,
    ) -> Result<ListenerPoller> {
        let fds = listeners
            .iter()
            .map(|l| l.as_fd())
            .chain([wake])
            .map(|fd| fd.try_clone_to_owned())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| Error::io("copying the listening descriptors", e))?;
        let how = match kind {
            PollerKind::Epoll => {
                let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
                    .map_err(|e| Error::io("creating the listeners' epoll set", e.into()))?;
                for (i, fd) in fds.iter().enumerate() {
                    epoll
                        .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                        .map_err(|e| Error::io("adding a listener to epoll", e.into()))?;
                }
                How::Epoll(epoll, vec![EpollEvent::empty(); fds.len()])
            }
            PollerKind::Poll => How::Poll,
            PollerKind::Select => {
                if let Some(high) = fds
                    .iter()
                    .map(|fd| fd.as_raw_fd())
                    .find(|&fd| fd >= libc::FD_SETSIZE as i32)
                {
                    return Err(Error::config(format!(
                        "--poller select: descriptor {high} is not below FD_SETSIZE ({}), \
                         which select(2) cannot watch; use --poller poll or epoll",
                        libc::FD_SETSIZE
                    )));
                }
                How::Select
            }
        };
        Ok(ListenerPoller {
            ready: vec![false; listeners.len()],
            fds,
            how,
        })
    }

    /// Wait until a listener is readable, the wake descriptor is, or
    /// `timeout` passes (`None`: no limit).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Woken> {
        self.ready.iter_mut().for_each(|r| *r = false);
        let wake = self.ready.len();
        let mut stop = false;
        match &mut self.how {
            How::Epoll(epoll, events) => {
                let t = match timeout {
                    None => EpollTimeout::NONE,
                    Some(d) => EpollTimeout::try_from(d).unwrap_or(EpollTimeout::MAX),
                };
                let n = match epoll.wait(events, t) {
                    Ok(n) => n,
                    Err(nix::errno::Errno::EINTR) => return Ok(Woken::Nothing),
                    Err(e) => return Err(e.into()),
                };
                for ev in &events[..n] {
                    let i = ev.data() as usize;
                    if i == wake {
                        stop = true;
                    } else if let Some(r) = self.ready.get_mut(i) {
                        *r = true;
                    }
                }
            }
            How::Poll => {
                let mut pfds: smallvec::SmallVec<[PollFd<'_>; 8]> = self
                    .fds
                    .iter()
                    .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
                    .collect();
                let t = match timeout {
                    None => PollTimeout::NONE,
                    Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
                };
                match poll(&mut pfds, t) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => return Ok(Woken::Nothing),
                    Err(e) => return Err(e.into()),
                }
                for (i, p) in pfds.iter().enumerate() {
                    if p.revents().is_some_and(|r| !r.is_empty()) {
                        if i == wake {
                            stop = true;
                        } else {
                            self.ready[i] = true;
                        }
                    }
                }
            }
            How::Select => {
                let mut set = FdSet::new();
                for fd in &self.fds {
                    set.insert(fd.as_fd());
                }
                let mut tv = timeout.map(|d| TimeVal::microseconds(d.as_micros() as i64));
                match select(None, &mut set, None, None, tv.as_mut()) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => return Ok(Woken::Nothing),
                    Err(e) => return Err(e.into()),
                }
                for (i, fd) in self.fds.iter().enumerate() {
                    if set.contains(fd.as_fd()) {
                        if i == wake {
                            stop = true;
                        } else {
                            self.ready[i] = true;
                        }
                    }
                }
            }
        }
        Ok(if stop {
            Woken::Stop
        } else if self.ready.contains(&true) {
            Woken::Ready
        } else {
            Woken::Nothing
        })
    }

    /// The indices of the listeners the last [`wait`](Self::wait) found
    /// readable.
    pub fn ready(&self) -> impl Iterator<Item = usize> + '_ {
        self.ready
            .iter()
            .enumerate()
            .filter(|(_, r)| **r)
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    /// The FD_SETSIZE test opens over a thousand descriptors: while it runs,
    /// another test's would land above 1024, where select cannot go.
    static DESCRIPTORS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    fn listeners(n: usize) -> Vec<Listener> {
        (0..n)
            .map(|_| Listener::bind("127.0.0.1:0".parse().expect("address"), 16).expect("bind"))
            .collect()
    }

    #[test]
    fn every_poller_finds_the_listener_with_a_connection_and_the_wake_pipe() {
        let _one_at_a_time = DESCRIPTORS.lock();
        for kind in PollerKind::ALL {
            let ls = listeners(5);
            let (wake_r, wake_w) = nix::unistd::pipe().expect("pipe");
            let mut p = ListenerPoller::new(kind, &ls, wake_r.as_fd()).expect("poller");
            assert_eq!(
                p.wait(Some(Duration::from_millis(10))).expect("wait"),
                Woken::Nothing,
                "{kind}"
            );
            let _c = TcpStream::connect(ls[3].local_addr()).expect("connect");
            assert_eq!(p.wait(None).expect("wait"), Woken::Ready, "{kind}");
            assert_eq!(p.ready().collect::<Vec<_>>(), [3], "{kind}");
            nix::unistd::write(&wake_w, b"x").expect("write");
            assert_eq!(p.wait(None).expect("wait"), Woken::Stop, "{kind}");
        }
    }

    #[test]
    fn select_refuses_a_descriptor_at_or_above_fd_setsize() {
        let _one_at_a_time = DESCRIPTORS.lock();
        // 1030 listeners (and the poller's copies) run past descriptor 1024.
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let raised = getrlimit(Resource::RLIMIT_NOFILE)
            .and_then(|(_, hard)| setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map(|()| hard));
        match raised {
            Ok(limit) if limit >= 2200 => {}
            _ => return, // the hard limit is too low here: nothing to test
        }
        let ls = listeners(1030);
        let (wake_r, _wake_w) = nix::unistd::pipe().expect("pipe");
        let err = ListenerPoller::new(PollerKind::Select, &ls, wake_r.as_fd())
            .expect_err("select must refuse a descriptor past 1023");
        let text = err.to_string();
        assert!(
            text.contains("FD_SETSIZE") && text.contains("--poller poll"),
            "{text}"
        );
        // poll and epoll take it.
        assert!(ListenerPoller::new(PollerKind::Poll, &ls, wake_r.as_fd()).is_ok());
        assert!(ListenerPoller::new(PollerKind::Epoll, &ls, wake_r.as_fd()).is_ok());
    }
}
