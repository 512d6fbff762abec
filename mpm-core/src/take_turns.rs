//! How the models whose workers block take turns to accept (prefork's
//! children under a cross-process accept mutex, worker's threads under a
//! listener mutex): the one accept function both call.
//!
//! The worker whose turn it is waits, in the [`ListenerPoller`] (epoll,
//! poll or select over every listener and the stop pipe), for a connection,
//! accepts it and gives the turn back; the others sleep on the turn, not in
//! the kernel, so a new connection wakes exactly one of them (httpd's
//! accept mutex). What differs between the models is only the lock, behind
//! [`Turn`].
//!
//! **What counts as an accept wait.** A worker blocked on the turn while
//! its holder waits in `poll` for a connection is not contention: nothing
//! is waiting for it. A wait is counted when a worker that had to wait for
//! the turn finds a connection already queued as it gets it: that
//! connection waited for the turn to be handed over, and the time counted
//! is the hand-over's (from the previous holder's release, kept on the
//! monotonic clock where every worker sees it, to this one's acquisition).
//! An idle server counts none; a busy one counts the hand-overs that kept
//! connections queued.
//!
//! **Errors**, one policy for both: a connection a sibling won
//! (`WouldBlock`, without a mutex) or the client gave up on is skipped in
//! silence; a listener shut down because the server stops (`EINVAL`) ends
//! the wait once the stop is seen; anything else (descriptor exhaustion, a
//! failing poller) backs off 10 ms and is logged at most once a second.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::ops::DerefMut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::lifecycle::Lifecycle;
use crate::listener::Listener;
use crate::listener_poller::{ListenerPoller, Woken};
use crate::scoreboard::monotonic_ns;

/// The turn to accept, as a model holds it: a lock whose holder alone uses
/// the [`ListenerPoller`].
pub trait Turn {
    /// The turn held: the poller, its holder's alone.
    type Held<'a>: DerefMut<Target = ListenerPoller>
    where
        Self: 'a;

    /// Take the turn if it is free now, without waiting (`None`: busy).
    /// Lets [`accept`] count only the acquisitions that had to wait.
    fn try_take(&self) -> io::Result<Option<Self::Held<'_>>>;

    /// Wait for the turn. `None` without it if `stopping` turns true
    /// meanwhile (a lock whose wait a stop cannot interrupt checks it
    /// between timed tries).
    fn take(&self, stopping: &dyn Fn() -> bool) -> io::Result<Option<Self::Held<'_>>>;

    /// Give the turn back.
    fn give_back<'a>(&'a self, held: Self::Held<'a>) -> io::Result<()>;

    /// Where the last holder wrote when it gave the turn up (monotonic ns),
    /// seen by every worker taking turns; `None` when there are no turns
    /// (prefork's `none` mutex: every child waits in the kernel).
    fn released(&self) -> Option<&AtomicU64>;
}

/// A connection, and how long its worker waited for the turn to accept it.
#[derive(Debug)]
pub struct Accepted {
    /// The connected socket.
    pub socket: TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// How long a queued connection waited for the turn to reach this
    /// worker (zero unless it had to wait and a connection was queued when
    /// it came; see the module documentation).
    pub waited: Duration,
}

/// When the accept errors were last logged, shared by the workers taking
/// turns: at most one line a second, however many fail.
#[derive(Debug, Default)]
pub struct AcceptErrors {
    last_log: Mutex<Option<Instant>>,
}

impl AcceptErrors {
    /// Nothing logged yet.
    pub fn new() -> AcceptErrors {
        AcceptErrors::default()
    }

    /// A failure that is not the client's: logged (at most once a second),
    /// then a pause, so that a failing call is not retried in a spin.
    fn back_off(&self, what: &str, e: &io::Error) {
        {
            let mut last = self.last_log.lock();
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                crate::log_error!("mpm: {what} failed: {e}; backing off");
                *last = Some(Instant::now());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    /// What an accept error means for the wait: skipped in silence, the
    /// listener shut (the server stopping), or backed off from.
    fn on_accept_error(&self, e: &io::Error) {
        match e.kind() {
            // A sibling won (no mutex), or the client gave up.
            io::ErrorKind::WouldBlock
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset => {}
            // The listener was shut down because the server is stopping;
            // the stop pipe says so on the next wait.
            _ if e.raw_os_error() == Some(libc::EINVAL) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => self.back_off("accept", e),
        }
    }
}

/// Take the turn, wait for a connection on any listener (or the stop
/// pipe), accept it, give the turn back. `None` once stopping. An error
/// only when the turn itself fails (a broken accept mutex).
pub fn accept<T: Turn>(
    listeners: &[Listener],
    turn: &T,
    lifecycle: &Lifecycle,
    errors: &AcceptErrors,
) -> Result<Option<Accepted>> {
    let stopping = || lifecycle.is_stopping();
    let taking = |e| Error::io("taking the accept mutex", e);
    let (mut held, asked) = match turn.try_take().map_err(taking)? {
        Some(held) => (held, None),
        None => {
            let asked = monotonic_ns();
            match turn.take(&stopping).map_err(taking)? {
                Some(held) => (held, Some(asked)),
                None => return Ok(None),
            }
        }
    };
    let got = monotonic_ns();
    // Told to stop while waiting: leave queued connections to the next
    // generation (`accept_locked` below returns at once).
    let queued = match asked {
        Some(_) if !lifecycle.is_stopping() => accept_queued(listeners, &mut held, errors),
        _ => None,
    };
    let result = match (queued, asked) {
        (Some((socket, peer)), Some(asked)) => {
            let released = turn.released().map_or(0, |r| r.load(Ordering::Acquire));
            let since = asked.max(released);
            Some(Accepted {
                socket,
                peer,
                waited: Duration::from_nanos(got.saturating_sub(since).max(1)),
            })
        }
        (_, asked) => accept_locked(listeners, &mut held, lifecycle, errors, asked.is_none()).map(
            |(socket, peer)| Accepted {
                socket,
                peer,
                waited: Duration::ZERO,
            },
        ),
    };
    if let Some(r) = turn.released() {
        r.store(monotonic_ns(), Ordering::Release);
    }
    turn.give_back(held)
        .map_err(|e| Error::io("releasing the accept mutex", e))?;
    Ok(result)
}

/// A connection already queued on any listener, taken without waiting.
fn accept_queued(
    listeners: &[Listener],
    poller: &mut ListenerPoller,
    errors: &AcceptErrors,
) -> Option<(TcpStream, SocketAddr)> {
    if let Some(only) = only_socket(listeners) {
        return match only.accept() {
            Ok(c) => Some(c),
            Err(e) => {
                errors.on_accept_error(&e);
                None
            }
        };
    }
    match poller.wait(Some(Duration::ZERO)) {
        Ok(Woken::Ready) => poller
            .ready()
            .find_map(|i| listeners.get(i).and_then(|l| l.accept().ok())),
        _ => None,
    }
}

/// The listening socket, when there is one (besides a hand-over channel).
fn only_socket(listeners: &[Listener]) -> Option<&Listener> {
    let mut sockets = listeners.iter().filter(|l| l.hand_over_channel().is_none());
    match (sockets.next(), sockets.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// Wait for a connection and accept it; `try_first`: try an accept before
/// polling (unless [`accept_queued`] just did).
fn accept_locked(
    listeners: &[Listener],
    poller: &mut ListenerPoller,
    lifecycle: &Lifecycle,
    errors: &AcceptErrors,
    mut try_first: bool,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        if lifecycle.is_stopping() {
            return None;
        }
        // Under load a connection is usually queued already: try before
        // polling (with one listening socket; the hand-over channel beside
        // it is taken when polled).
        if let Some(only) = only_socket(listeners) {
            if try_first {
                match only.accept() {
                    Ok(c) => return Some(c),
                    Err(e) => errors.on_accept_error(&e),
                }
            }
            try_first = true;
        }
        match poller.wait(None) {
            Ok(Woken::Stop) => return None,
            Ok(Woken::Ready) => {}
            Ok(Woken::Nothing) => continue,
            Err(e) => {
                errors.back_off("waiting for connections", &e);
                continue;
            }
        }
        for listener in poller.ready().filter_map(|i| listeners.get(i)) {
            // Told to stop since the wait returned: leave the connection
            // queued for the next generation rather than answer it
            // `Connection: close`.
            if lifecycle.is_stopping() {
                return None;
            }
            match listener.accept() {
                Ok(c) => return Some(c),
                Err(e) => errors.on_accept_error(&e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::listener_poller::PollerKind;

    /// The simplest turn: an in-process mutex around the poller.
    struct Local {
        poller: Mutex<ListenerPoller>,
        released: AtomicU64,
    }

    impl Turn for Local {
        type Held<'a> = parking_lot::MutexGuard<'a, ListenerPoller>;
        fn try_take(&self) -> io::Result<Option<Self::Held<'_>>> {
            Ok(self.poller.try_lock())
        }
        fn take(&self, _: &dyn Fn() -> bool) -> io::Result<Option<Self::Held<'_>>> {
            Ok(Some(self.poller.lock()))
        }
        fn give_back<'a>(&'a self, held: Self::Held<'a>) -> io::Result<()> {
            drop(held);
            Ok(())
        }
        fn released(&self) -> Option<&AtomicU64> {
            Some(&self.released)
        }
    }

    fn setup() -> (Vec<Listener>, Local, Lifecycle) {
        let lifecycle = Lifecycle::new().unwrap();
        let listeners = vec![Listener::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap()];
        let poller =
            ListenerPoller::new(PollerKind::Poll, &listeners, lifecycle.wake_fd()).unwrap();
        let turn = Local {
            poller: Mutex::new(poller),
            released: AtomicU64::new(0),
        };
        (listeners, turn, lifecycle)
    }

    #[test]
    fn a_free_turn_accepts_a_queued_connection_and_counts_no_wait() {
        let (listeners, turn, lifecycle) = setup();
        let client = TcpStream::connect(listeners[0].local_addr()).unwrap();
        let got = accept(&listeners, &turn, &lifecycle, &AcceptErrors::new())
            .unwrap()
            .expect("a connection");
        assert_eq!(got.peer, client.local_addr().unwrap());
        assert_eq!(got.waited, Duration::ZERO, "an uncontended turn is no wait");
        assert!(
            turn.released.load(Ordering::Relaxed) > 0,
            "the release time was not kept"
        );
    }

    #[test]
    fn a_turn_waited_for_counts_the_hand_over_when_a_connection_is_queued() {
        let (listeners, turn, lifecycle) = setup();
        let _client = TcpStream::connect(listeners[0].local_addr()).unwrap();
        std::thread::scope(|s| {
            let held = turn.poller.lock();
            let waiter = s.spawn(|| accept(&listeners, &turn, &lifecycle, &AcceptErrors::new()));
            std::thread::sleep(Duration::from_millis(50));
            turn.released.store(monotonic_ns(), Ordering::Release);
            drop(held);
            let got = waiter.join().unwrap().unwrap().expect("a connection");
            assert!(
                got.waited > Duration::ZERO,
                "a contended turn counts a wait"
            );
            assert!(
                got.waited < Duration::from_millis(50),
                "counted from the hand-over, not from the ask: {:?}",
                got.waited
            );
        });
    }

    #[test]
    fn a_stop_ends_the_wait_for_a_connection_that_never_comes() {
        let (listeners, turn, lifecycle) = setup();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| accept(&listeners, &turn, &lifecycle, &AcceptErrors::new()));
            std::thread::sleep(Duration::from_millis(50));
            lifecycle.stop();
            assert!(waiter.join().unwrap().unwrap().is_none());
        });
    }
}
