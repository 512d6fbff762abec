//! What a prefork child runs.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use mpm_core::blocking::{serve_blocking, IdlePark, Timeouts};
use mpm_core::config::AcceptMutex;
use mpm_core::listener_poller::{ListenerPoller, Woken};
use mpm_core::scoreboard::{Slot, WorkerState};
use mpm_core::{Config, Error, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, Result, Stream};

use crate::accept_mutex::{AcceptLock, ChildLock};

/// The prefork MPM. Made in the master before forking (it holds the accept
/// mutex); [`Mpm::run`] is what each single-threaded child runs, with one
/// scoreboard slot.
#[derive(Debug)]
pub struct Prefork {
    lock: AcceptLock,
}

impl Prefork {
    /// Make the accept mutex this configuration asks for.
    pub fn new(config: &Config) -> Result<Prefork> {
        Ok(Prefork {
            lock: AcceptLock::create(config.accept_mutex)?,
        })
    }

    /// The accept mutex in use.
    pub fn accept_mutex(&self) -> AcceptMutex {
        self.lock.kind()
    }
}

impl Mpm for Prefork {
    fn kind(&self) -> MpmKind {
        MpmKind::Prefork
    }

    fn run<F: HandlerFactory>(
        &self,
        config: &Config,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        if listeners.is_empty() {
            return Err(Error::config("no listening address"));
        }
        let slot = slots.first();
        if let Some(s) = slot {
            s.claim(lifecycle.generation());
        }
        // With --reuseport each child listens on a socket of its own, so no
        // two children wait on one socket and no mutex is needed.
        let no_mutex;
        let (listeners, lock) = if config.reuseport {
            let own = listeners
                .iter()
                .map(|l| Listener::bind_reuseport(l.local_addr(), config.backlog))
                .collect::<Result<Vec<_>>>()?;
            no_mutex = AcceptLock::create(AcceptMutex::None)?;
            mpm_core::drop_privileges(config.run_as)?;
            (own, no_mutex.for_child()?)
        } else {
            (listeners, self.lock.for_child()?)
        };
        interrupt_on_stop_signals();
        // Made in the child: an epoll set must not be shared across fork.
        let mut poller = ListenerPoller::new(config.poller, &listeners, lifecycle.wake_fd())?;
        let mut handler = factory.build();
        let timeouts = Timeouts::inherited_by(config, &listeners)?;
        let draining = lifecycle.draining_flag();
        let mut served = 0u64;
        loop {
            if let Some(s) = slot {
                s.set_state(WorkerState::Idle);
            }
            let Some((socket, peer, waited)) = accept(&listeners, &mut poller, &lock, lifecycle)?
            else {
                break;
            };
            if let Some(s) = slot {
                s.record_accept(waited.as_nanos() as u64);
            }
            let Ok(mut stream) = Stream::new(socket, peer, true, Arc::clone(&draining)) else {
                continue;
            };
            stream.set_score_slot(slot);
            let mut park = KeepAliveWait {
                lifecycle,
                timeout: config.keepalive_timeout,
            };
            serve_blocking(&mut handler, stream, &timeouts, &mut park);
            // No flusher thread here: buffered log lines go out before
            // this child waits, perhaps for long, for its next connection.
            mpm_core::access_log::flush_now();
            served += 1;
            if config.max_connections_per_child > 0 && served >= config.max_connections_per_child {
                break; // recycled: the master forks a fresh child
            }
            if lifecycle.is_stopping() {
                break;
            }
        }
        if let Some(s) = slot {
            s.release();
        }
        Ok(())
    }
}

/// Let the stop signals interrupt blocking system calls (an `fcntl` or
/// `flock` wait for the accept mutex) instead of restarting them, so that a
/// child told to go while it waits notices.
fn interrupt_on_stop_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGWINCH] {
        // SAFETY: read the installed action and write it back unchanged but
        // for SA_RESTART; both structs are valid for the calls.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut action) == 0 {
                action.sa_flags &= !libc::SA_RESTART;
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }
}

/// Take the turn, wait for a connection on any listener (or the stop pipe),
/// accept it, give the turn back. `None` once stopping.
fn accept(
    listeners: &[Listener],
    poller: &mut ListenerPoller,
    lock: &ChildLock<'_>,
    lifecycle: &Lifecycle,
) -> Result<Option<(std::net::TcpStream, std::net::SocketAddr, Duration)>> {
    let asked = Instant::now();
    let stopping = || lifecycle.is_stopping();
    // Only a turn that had to wait counts as a wait (a contended mutex).
    let free = lock
        .try_lock()
        .map_err(|e| Error::io("taking the accept mutex", e))?;
    let waited = if free {
        Duration::ZERO
    } else {
        if !lock
            .lock(&stopping)
            .map_err(|e| Error::io("taking the accept mutex", e))?
        {
            return Ok(None);
        }
        asked.elapsed()
    };
    let result = accept_locked(listeners, poller, lifecycle);
    lock.unlock()
        .map_err(|e| Error::io("releasing the accept mutex", e))?;
    Ok(result.map(|(s, p)| (s, p, waited)))
}

fn accept_locked(
    listeners: &[Listener],
    poller: &mut ListenerPoller,
    lifecycle: &Lifecycle,
) -> Option<(std::net::TcpStream, std::net::SocketAddr)> {
    let mut last_log: Option<Instant> = None;
    loop {
        if lifecycle.is_stopping() {
            return None;
        }
        match poller.wait(None) {
            Ok(Woken::Stop) => return None,
            Ok(Woken::Ready) => {}
            Ok(Woken::Nothing) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        for l in poller.ready().map(|i| &listeners[i]) {
            // Told to stop since the wait returned: leave the connection
            // queued for the next generation rather than answer it `Connection: close`.
            if lifecycle.is_stopping() {
                return None;
            }
            match l.accept() {
                Ok(c) => return Some(c),
                Err(e) => match e.kind() {
                    // A sibling won (no mutex), or the client gave up.
                    std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::Interrupted
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::ConnectionReset => {}
                    _ if e.raw_os_error() == Some(libc::EINVAL) => return None,
                    _ => {
                        if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                            mpm_core::log_error!("mpm: accept failed: {e}; backing off");
                            last_log = Some(Instant::now());
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                },
            }
        }
    }
}

/// A single-threaded child cannot be woken from a blocking read by another
/// thread, so an idle keep-alive wait polls the connection together with the
/// stop pipe: a stop closes idle connections at once.
struct KeepAliveWait<'a> {
    lifecycle: &'a Lifecycle,
    timeout: Duration,
}

impl IdlePark for KeepAliveWait<'_> {
    fn park(&mut self, fd: RawFd) -> bool {
        if self.lifecycle.is_stopping() {
            return mpm_core::blocking::input_arrives_within(fd, mpm_core::blocking::STOP_GRACE);
        }
        // SAFETY: `fd` is the open connection the driver is about to read;
        // it outlives this call.
        let conn = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let mut fds = [
            PollFd::new(conn, PollFlags::POLLIN),
            PollFd::new(self.lifecycle.wake_fd(), PollFlags::POLLIN),
        ];
        let deadline = Instant::now() + self.timeout;
        loop {
            // Buffered access-log lines are due within a second even while
            // idle, and this single-threaded child has no flusher thread.
            let left = deadline.saturating_duration_since(Instant::now());
            let flush = mpm_core::access_log::flush_due_in();
            let wait = flush.map_or(left, |f| f.min(left));
            let ms = wait.as_millis().min(i32::MAX as u128) as i32;
            let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(0) if flush.is_some() && Instant::now() < deadline => {
                    mpm_core::access_log::flush_stale();
                }
                Err(_) | Ok(0) => return false, // keep-alive timeout: close
                Ok(_) => break,
            }
        }
        // A request that has arrived is served even when stopping (with
        // `Connection: close`): closing would drop a request the client had
        // already sent, the reload race nginx users know. Told to stop while
        // idle, it waits a moment for a request already on its way.
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            return true;
        }
        mpm_core::blocking::input_arrives_within(fd, mpm_core::blocking::STOP_GRACE)
    }

    fn unpark(&mut self) {}

    fn closing(&mut self) {}
}
