//! The worker model's accept strategy: one thread at a time holds the
//! listener mutex and waits, in `poll` (or epoll, or select) over every
//! listener and the stop pipe, for a connection to accept.
//!
//! **What counts as an accept wait.** A thread blocked on the mutex while
//! its holder waits for a connection is not contention: nothing is waiting
//! for it. A wait is counted when a thread that had to wait for the turn
//! finds a connection already queued as it gets it: that connection waited
//! for the turn to be handed over, from the previous holder's release to
//! this acquisition. An idle server counts none.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use mpm_core::listener_poller::{ListenerPoller, PollerKind, Woken};
use mpm_core::scoreboard::monotonic_ns;
use mpm_core::{Lifecycle, Listener};

/// The listeners and the mutex that lets one thread at a time wait on them,
/// as httpd's worker MPM does: the others sleep on the mutex, not in the
/// kernel, so a new connection wakes exactly one thread.
#[derive(Debug)]
pub struct ListenerMutex {
    listeners: Vec<Listener>,
    /// The turn, and the poller that only its holder uses.
    turn: Mutex<ListenerPoller>,
    /// When the last holder gave the turn up (monotonic ns).
    released: AtomicU64,
    last_error_log: Mutex<Option<Instant>>,
}

/// A connection, and how long its thread waited for its turn to accept.
#[derive(Debug)]
pub struct Accepted {
    /// The connected socket.
    pub socket: TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// How long a queued connection waited for the turn to reach this
    /// thread (zero unless it had to wait and a connection was queued when
    /// it came).
    pub waited: Duration,
}

/// Why no connection was returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The server is stopping.
    Stopping,
}

impl ListenerMutex {
    /// Share these listeners between threads, which wait on them with a
    /// poller of `kind` that also wakes when the lifecycle stops.
    pub fn new(
        listeners: Vec<Listener>,
        kind: PollerKind,
        lifecycle: &Lifecycle,
    ) -> mpm_core::Result<Self> {
        let poller = ListenerPoller::new(kind, &listeners, lifecycle.wake_fd())?;
        Ok(ListenerMutex {
            listeners,
            turn: Mutex::new(poller),
            released: AtomicU64::new(0),
            last_error_log: Mutex::new(None),
        })
    }

    /// The listeners.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// Wait for our turn, then for a connection on any listener. Returns
    /// `Err(Stopped)` once the lifecycle is stopping.
    pub fn accept(&self, lifecycle: &Lifecycle) -> Result<Accepted, Stopped> {
        let (mut poller, asked) = match self.turn.try_lock() {
            Some(p) => (p, None),
            None => {
                let asked = monotonic_ns();
                (self.turn.lock(), Some(asked))
            }
        };
        let got = monotonic_ns();
        // Told to stop while waiting: leave queued connections to the next
        // generation (accept_locked below returns at once).
        let queued = match asked {
            Some(_) if !lifecycle.is_stopping() => self.accept_queued(&mut poller),
            _ => None,
        };
        let result = match (queued, asked) {
            (Some((socket, peer)), Some(asked)) => {
                let since = asked.max(self.released.load(Ordering::Acquire));
                Ok(Accepted {
                    socket,
                    peer,
                    waited: Duration::from_nanos(got.saturating_sub(since).max(1)),
                })
            }
            (_, asked) => self
                .accept_locked(&mut poller, lifecycle, asked.is_none())
                .map(|(socket, peer)| Accepted {
                    socket,
                    peer,
                    waited: Duration::ZERO,
                }),
        };
        self.released.store(monotonic_ns(), Ordering::Release);
        drop(poller);
        result
    }

    /// A connection already queued on any listener, taken without waiting.
    fn accept_queued(&self, poller: &mut ListenerPoller) -> Option<(TcpStream, SocketAddr)> {
        if let Some(only) = self.only_socket() {
            return match only.accept() {
                Ok(c) => Some(c),
                Err(e) => {
                    self.on_error(e);
                    None
                }
            };
        }
        match poller.wait(Some(Duration::ZERO)) {
            Ok(Woken::Ready) => poller
                .ready()
                .find_map(|i| self.listeners.get(i).and_then(|l| l.accept().ok())),
            _ => None,
        }
    }

    /// The listening socket, when there is one (besides a hand-over channel).
    fn only_socket(&self) -> Option<&Listener> {
        let mut sockets = self
            .listeners
            .iter()
            .filter(|l| l.hand_over_channel().is_none());
        match (sockets.next(), sockets.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// Wait for a connection and accept it; `try_first`: try an accept
    /// before polling (unless [`accept_queued`](Self::accept_queued) just did).
    fn accept_locked(
        &self,
        poller: &mut ListenerPoller,
        lifecycle: &Lifecycle,
        mut try_first: bool,
    ) -> Result<(TcpStream, SocketAddr), Stopped> {
        loop {
            if lifecycle.is_stopping() {
                return Err(Stopped::Stopping);
            }
            // Under load a connection is usually queued already: try before
            // polling (with one listening socket; the hand-over channel
            // beside it is taken when polled).
            if let Some(only) = self.only_socket() {
                if try_first {
                    match only.accept() {
                        Ok(c) => return Ok(c),
                        Err(e) => self.on_error(e),
                    }
                }
                try_first = true;
            }
            match poller.wait(None) {
                Ok(Woken::Stop) => return Err(Stopped::Stopping),
                Ok(Woken::Ready) => {}
                Ok(Woken::Nothing) => continue,
                Err(e) => {
                    self.on_error(e);
                    continue;
                }
            }
            for listener in poller.ready().map(|i| &self.listeners[i]) {
                // Told to stop since the wait returned: leave it for the next generation.
                if lifecycle.is_stopping() {
                    return Err(Stopped::Stopping);
                }
                match listener.accept() {
                    Ok(c) => return Ok(c),
                    Err(e) => self.on_error(e),
                }
            }
        }
    }

    /// Transient accept failures: `WouldBlock` (a sibling won) is silent;
    /// descriptor exhaustion backs off and is logged at most once a second.
    fn on_error(&self, e: io::Error) {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => return,
            io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset => return,
            _ => {}
        }
        if e.raw_os_error() == Some(libc::EINVAL) {
            // The listener was shut down because the server is stopping; the
            // stop pipe tells this thread so on its next turn.
            std::thread::sleep(Duration::from_millis(10));
            return;
        }
        {
            let mut last = self.last_error_log.lock();
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                mpm_core::log_error!("mpm: accept failed: {e}; backing off");
                *last = Some(Instant::now());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
