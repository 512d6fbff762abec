//! The worker model's accept strategy: one thread at a time holds the
//! listener mutex and waits, in `poll` (or epoll, or select) over every
//! listener and the stop pipe, for a connection to accept.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use mpm_core::listener_poller::{ListenerPoller, PollerKind, Woken};
use mpm_core::{Lifecycle, Listener};

/// The listeners and the mutex that lets one thread at a time wait on them,
/// as httpd's worker MPM does: the others sleep on the mutex, not in the
/// kernel, so a new connection wakes exactly one thread.
#[derive(Debug)]
pub struct ListenerMutex {
    listeners: Vec<Listener>,
    /// The turn, and the poller that only its holder uses.
    turn: Mutex<ListenerPoller>,
    last_error_log: Mutex<Option<Instant>>,
}

/// A connection, and how long its thread waited for its turn to accept.
#[derive(Debug)]
pub struct Accepted {
    /// The connected socket.
    pub socket: TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// Time spent waiting for the listener mutex.
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
        // Only a turn that had to wait counts as a wait (a contended mutex).
        let (mut poller, waited) = match self.turn.try_lock() {
            Some(p) => (p, Duration::ZERO),
            None => {
                let asked = Instant::now();
                let p = self.turn.lock();
                (p, asked.elapsed())
            }
        };
        self.accept_locked(&mut poller, lifecycle)
            .map(|(socket, peer)| Accepted {
                socket,
                peer,
                waited,
            })
    }

    fn accept_locked(
        &self,
        poller: &mut ListenerPoller,
        lifecycle: &Lifecycle,
    ) -> Result<(TcpStream, SocketAddr), Stopped> {
        loop {
            if lifecycle.is_stopping() {
                return Err(Stopped::Stopping);
            }
            // Under load a connection is usually queued already: try before
            // polling (with one listening socket; the hand-over channel
            // beside it is taken when polled).
            let mut sockets = self
                .listeners
                .iter()
                .filter(|l| l.hand_over_channel().is_none());
            if let (Some(only), None) = (sockets.next(), sockets.next()) {
                match only.accept() {
                    Ok(c) => return Ok(c),
                    Err(e) => self.on_error(e),
                }
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
