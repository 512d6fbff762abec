//! Taking turns to accept.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use parking_lot::Mutex;

use mpm_core::{Lifecycle, Listener};

/// The listeners and the mutex that lets one thread at a time wait on them,
/// as httpd's worker MPM does: the others sleep on the mutex, not in the
/// kernel, so a new connection wakes exactly one thread.
#[derive(Debug)]
pub struct ListenerMutex {
    listeners: Vec<Listener>,
    turn: Mutex<()>,
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
    /// Share these listeners between threads.
    pub fn new(listeners: Vec<Listener>) -> Self {
        ListenerMutex {
            listeners,
            turn: Mutex::new(()),
            last_error_log: Mutex::new(None),
        }
    }

    /// The listeners.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }

    /// Wait for our turn, then for a connection on any listener. Returns
    /// `Err(Stopped)` once the lifecycle is stopping.
    pub fn accept(&self, lifecycle: &Lifecycle) -> Result<Accepted, Stopped> {
        let asked = Instant::now();
        let _turn = self.turn.lock();
        let waited = asked.elapsed();
        self.accept_locked(lifecycle)
            .map(|(socket, peer)| Accepted {
                socket,
                peer,
                waited,
            })
    }

    fn accept_locked(&self, lifecycle: &Lifecycle) -> Result<(TcpStream, SocketAddr), Stopped> {
        loop {
            if lifecycle.is_stopping() {
                return Err(Stopped::Stopping);
            }
            // Under load a connection is usually queued already: try before polling.
            if let [only] = self.listeners.as_slice() {
                match only.accept() {
                    Ok(c) => return Ok(c),
                    Err(e) => self.on_error(e),
                }
            }
            let mut fds: Vec<PollFd<'_>> = self
                .listeners
                .iter()
                .map(|l| PollFd::new(l.as_std().as_fd(), PollFlags::POLLIN))
                .collect();
            fds.push(PollFd::new(lifecycle.wake_fd(), PollFlags::POLLIN));
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    self.on_error(e.into());
                    continue;
                }
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            if ready[self.listeners.len()] {
                return Err(Stopped::Stopping);
            }
            for (listener, _) in self.listeners.iter().zip(&ready).filter(|(_, r)| **r) {
                // Told to stop since poll returned: leave it for the next generation.
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
                eprintln!("mpm: accept failed: {e}; backing off");
                *last = Some(Instant::now());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
