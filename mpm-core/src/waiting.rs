//! Waiting on a descriptor of the connection's own: an upstream socket.
//!
//! A step that sends a request to another server (a reverse proxy's
//! upstream, a database, an API a handler calls) returns
//! [`Interest::Await`](crate::Interest::Await) when that socket would block,
//! instead of blocking on it. Under the event MPM the connection is then
//! parked on the loop with the upstream descriptor, holding no thread, and
//! resumed ([`ConnectionHandler::readable`](crate::ConnectionHandler::readable),
//! through [`prefetch`](crate::ConnectionHandler::prefetch) on a loop) when
//! that descriptor is ready or the wait's deadline passes; under prefork and
//! worker the same step blocks its process or thread in `poll(2)`, as httpd's
//! mod_proxy does. One handler serves every model.
//!
//! Futures are the second half of this module: code that reads as `async`
//! Rust (an axum user's handler) runs on the same mechanism. An I/O future
//! of mpm's ([`ready`], [`sleep`]) records what it waits for with
//! [`wait_on`] and returns `Pending`; the protocol that polls the future
//! ([`poll_once`]) turns that record into an [`Await`]. No runtime, no
//! waker threads: the waker is a no-op and the record is all.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use mpm_core::waiting::{poll_once, sleep, Polled};
//!
//! let mut call = Box::pin(async {
//!     sleep(Duration::from_millis(5)).await;
//!     42
//! });
//! // The first poll parks the future: a timer, no descriptor.
//! let Polled::Wait(wait) = poll_once(call.as_mut()) else { panic!("not parked") };
//! assert_eq!(wait.fd, None);
//! // A driver waits until the deadline, then polls again.
//! std::thread::sleep(wait.until.saturating_duration_since(Instant::now()));
//! assert!(matches!(poll_once(call.as_mut()), Polled::Ready(42)));
//! ```

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// What a step waits for when it returns [`Interest::Await`](crate::Interest::Await).
///
/// The connection is resumed when *any* of the named readiness conditions
/// holds, or at `until` whichever comes first; the step finds out which by
/// trying its I/O again (a `WouldBlock` means not yet) and by looking at the
/// clock against its own deadline. A spurious resume is allowed: a step
/// must expect one and may return the same wait again.
///
/// # Stamped waits
///
/// A wait on a socket with a [`stamp`](Await::stamp) may be served
/// edge-triggered: an event loop registers the socket once and keeps it
/// registered while it lives (also while it is idle in a pool), so that a
/// wait costs no system call; a readiness reported while nobody waits on
/// it is remembered, and resumes the next wait on it at once. What the
/// loop does not see is input that was there before the step last
/// resumed and that the step left unread: so return a stamped wait for a
/// direction only once that direction's I/O returned `WouldBlock`, or once
/// everything there was has been read (a request sent after its
/// predecessor's response was read to its end). mpm's upstream client
/// stamps its plain TCP connections and keeps to this. A wait without a
/// stamp (an embedder's own descriptor) is armed for one report,
/// level-triggered, each time ([`arm_once`]): nothing is asked of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Await {
    /// The descriptor waited on, owned by the connection's state (an
    /// upstream socket), open until the step resumes; `None` for a timer.
    pub fd: Option<RawFd>,
    /// Resume when `fd` is readable (or at its end, or failed).
    pub read: bool,
    /// Resume when `fd` can take bytes (a connect finished, or failed).
    pub write: bool,
    /// Resume when the client's socket is readable too: a tunnel, or a
    /// request whose body is read while the upstream is written.
    pub client_read: bool,
    /// Resume when the client's socket can take bytes: a tunnel whose
    /// client was slower than its upstream.
    pub client_write: bool,
    /// Resume no later than this, ready or not.
    pub until: Instant,
    /// Who `fd` is: a number ([`new_stamp`]) given to the socket when it
    /// was made, unique in the process, so that a loop can tell it from a
    /// later socket that got the same descriptor number. A stamped wait
    /// lets a loop keep the socket registered for good, edge-triggered:
    /// see [the contract](#stamped-waits). `None`: a plain descriptor,
    /// armed for each wait.
    pub stamp: Option<u64>,
    /// The client hanging up (closing its end, even if only that half, or
    /// resetting the connection) while the wait asks nothing of it ends
    /// the request: the model calls
    /// [`ConnectionHandler::hung_up`](crate::ConnectionHandler::hung_up)
    /// and closes. True for an answer awaited (the constructors' default);
    /// false for a tunnel, whose client may close its end and still read.
    pub hang_up_ends: bool,
}

impl Await {
    /// Wait until `fd` is readable, at most until `until`.
    pub fn readable(fd: RawFd, until: Instant) -> Await {
        Await {
            fd: Some(fd),
            read: true,
            write: false,
            client_read: false,
            client_write: false,
            until,
            stamp: None,
            hang_up_ends: true,
        }
    }

    /// Wait until `fd` is writable, at most until `until`.
    pub fn writable(fd: RawFd, until: Instant) -> Await {
        Await {
            write: true,
            read: false,
            ..Await::readable(fd, until)
        }
    }

    /// Wait only for the time `until`.
    pub fn timer(until: Instant) -> Await {
        Await {
            fd: None,
            read: false,
            write: false,
            client_read: false,
            client_write: false,
            until,
            stamp: None,
            hang_up_ends: true,
        }
    }

    /// The same wait on a socket stamped `stamp` when it was made
    /// ([`new_stamp`]): see [the contract](#stamped-waits).
    pub fn stamped(mut self, stamp: u64) -> Await {
        self.stamp = Some(stamp);
        self
    }

    /// The same wait, also resumed by input from the client.
    pub fn or_client_input(mut self) -> Await {
        self.client_read = true;
        self
    }

    /// The same wait, also resumed when the client can take bytes.
    pub fn or_client_room(mut self) -> Await {
        self.client_write = true;
        self
    }

    /// Of two waits, the one to park on while both are pending (futures
    /// joined in one step). Both must complete before the step can, so
    /// waiting on either never delays the step; the earlier deadline keeps
    /// both timeouts honest, and a timer gives way to a descriptor.
    fn merge(self, other: Await) -> Await {
        let until = self.until.min(other.until);
        let mut kept = if self.fd.is_none() && other.fd.is_some() {
            other
        } else {
            self
        };
        kept.until = until;
        kept.client_read |= other.client_read;
        kept.client_write |= other.client_write;
        kept.hang_up_ends &= other.hang_up_ends;
        kept
    }
}

thread_local! {
    /// The wait recorded by the futures polled in the step running on this
    /// thread: set by [`wait_on`], taken by [`poll_once`].
    static RECORDED: Cell<Option<Await>> = const { Cell::new(None) };
}

/// Record, for the step polling the current future, that it waits for
/// `wait`. Called by an I/O future just before it returns `Pending`; a
/// future that returns `Pending` without recording anything is polled again
/// on the driver's next turn ([`Polled::Again`]).
pub fn wait_on(wait: Await) {
    RECORDED.with(|r| {
        let merged = match r.get() {
            Some(earlier) => earlier.merge(wait),
            None => wait,
        };
        r.set(Some(merged));
    });
}

/// What one poll of a future came to.
#[derive(Debug)]
pub enum Polled<T> {
    /// It finished.
    Ready(T),
    /// It waits for this: return [`Interest::Await`](crate::Interest::Await)
    /// with it, and poll again when resumed.
    Wait(Await),
    /// It is pending on something that recorded no wait (a future not made
    /// by mpm's I/O): poll again on the next turn
    /// ([`Interest::Yield`](crate::Interest::Yield)).
    Again,
}

/// Poll `future` once, on this thread, and say what it waits for.
pub fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Polled<F::Output> {
    RECORDED.with(|r| r.set(None));
    let mut cx = Context::from_waker(Waker::noop());
    match future.poll(&mut cx) {
        Poll::Ready(v) => {
            RECORDED.with(|r| r.set(None));
            Polled::Ready(v)
        }
        Poll::Pending => match RECORDED.with(|r| r.take()) {
            Some(wait) => Polled::Wait(wait),
            None => Polled::Again,
        },
    }
}

/// Run `future` to completion on this thread, blocking in `poll(2)` on
/// what it waits for: for a blocking model's worker, a test, or a command
/// line tool. A step on an event loop never calls this; it returns the
/// wait instead.
pub fn block_on<F: Future>(future: F) -> F::Output {
    // A thread that blocks is in no loop's turn: its deadlines read the
    // clock (see turn_clock), and the turn it was in, if any, is back after.
    let turn = crate::turn_clock::leave_turn();
    let mut future = std::pin::pin!(future);
    let out = loop {
        match poll_once(future.as_mut()) {
            Polled::Ready(v) => break v,
            Polled::Wait(wait) => {
                block_until(&wait, None);
            }
            Polled::Again => std::thread::yield_now(),
        }
    };
    crate::turn_clock::restore(turn);
    out
}

/// Block in `poll(2)` until `wait` is over: its descriptor (and, given
/// `client`, the client's socket) ready as it asks, or its deadline passed.
/// Returns whether something was (or may be) ready; false: the time ran out.
///
/// The client's socket is watched even when the wait asks nothing of it:
/// its hang-up (the client closed its end or reset the connection, or a
/// drain that cuts it shut it down) ends the wait, as does a signal (a
/// prefork child's fast stop), so that the driver can see the request is
/// over ([`Woke::client_hung_up`]) instead of waiting on for an upstream
/// nobody will be answered from.
pub fn block_until(wait: &Await, client: Option<RawFd>) -> bool {
    block_until_watching(wait, client, None).ready
}

/// Does the client hanging up end `wait` ([`Await::hang_up_ends`], for a
/// wait that asks nothing of the client)?
pub fn ends_on_hang_up(wait: &Await) -> bool {
    wait.hang_up_ends && !wait.client_read && !wait.client_write
}

/// What [`block_until_watching`] woke to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Woke {
    /// Something was (or may be) ready; false: the time ran out.
    pub ready: bool,
    /// The client's socket, asked nothing by the wait, hung up: the client
    /// closed its end (nginx's "client prematurely closed connection": a
    /// client that only half-closed is taken as gone, as nginx takes it
    /// while a request waits on its upstream), reset it, or a drain cut
    /// the connection from another thread. Told by the wait's own `poll`,
    /// no system call of its own.
    pub client_hung_up: bool,
    /// The client's socket, asked for input by the wait, is readable:
    /// bytes, or the end of its stream (which a peek at pending input
    /// would not tell).
    pub client_readable: bool,
}

/// [`block_until`], saying also whether the client's socket hung up while
/// the wait asked nothing of it; and ended, given `cut`, as soon as that
/// descriptor turns readable ([`FastStop::fd`](crate::FastStop::fd): a
/// fast stop, already asked or asked meanwhile).
pub fn block_until_watching(wait: &Await, client: Option<RawFd>, cut: Option<RawFd>) -> Woke {
    use mpm_sys::readiness::{poll_numbers, Ready};
    // On the stack: a blocking worker waits this way once per upstream wait.
    let mut fds = [(-1, Ready::default()); mpm_sys::readiness::MAX_POLLED];
    let mut n = 0;
    if let Some(fd) = cut {
        fds[n] = (
            fd,
            Ready {
                read: true,
                ..Ready::default()
            },
        );
        n += 1;
    }
    if let Some(fd) = wait.fd {
        fds[n] = (
            fd,
            Ready {
                read: wait.read,
                write: wait.write,
                hang_up: false,
            },
        );
        n += 1;
    }
    // The client's entry, when the wait asks nothing of it: readiness
    // told for it is a hang-up (its end, when the wait ends with it) or
    // an error (POLLHUP, POLLERR).
    let asks_nothing = !wait.client_read && !wait.client_write;
    if let Some(c) = client {
        fds[n] = (
            c,
            Ready {
                read: wait.client_read,
                write: wait.client_write,
                hang_up: asks_nothing && wait.hang_up_ends,
            },
        );
        n += 1;
    }
    let fds = &fds[..n];
    let watched = client.filter(|_| asks_nothing).map(|_| n - 1);
    let asked_input = client.filter(|_| wait.client_read).map(|_| n - 1);
    let woke = |ready: bool| Woke {
        ready,
        client_hung_up: false,
        client_readable: false,
    };
    loop {
        let left = wait.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return woke(false);
        }
        match poll_numbers(fds, Some(left.max(Duration::from_millis(1)))) {
            Ok(ready) if ready.iter().any(|r| r.read || r.write || r.hang_up) => {
                let hung = watched
                    .and_then(|i| ready.get(i))
                    .is_some_and(|r| r.read || r.write || r.hang_up);
                let client_readable = asked_input
                    .and_then(|i| ready.get(i))
                    .is_some_and(|r| r.read);
                return Woke {
                    ready: true,
                    client_hung_up: hung,
                    client_readable,
                };
            }
            Ok(_) => {}
            // A spurious resume (allowed): the signal may have stopped the
            // server, which the driver looks at before the step runs.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return woke(true),
            // Nothing to wait on that poll accepts: the step finds out
            // when it resumes and tries its I/O.
            Err(_) => return woke(true),
        }
    }
}

/// A new [stamp](Await::stamp) for a socket just made: unique in this
/// process (a counter; taken once per socket, not per wait).
pub fn new_stamp() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What an event loop answers about an idle stamped socket: see
/// [`idle_input_seen`].
pub type IdleInputWatch = fn(fd: RawFd, stamp: u64) -> Option<bool>;

thread_local! {
    /// The loop running on this thread, if it keeps stamped sockets
    /// registered: set by [`watch_idle_input`].
    static IDLE_INPUT: Cell<Option<IdleInputWatch>> = const { Cell::new(None) };
}

/// For an event loop that keeps [stamped](Await::stamp) sockets registered
/// for good: answer [`idle_input_seen`] on this thread with `watch` (`None`
/// when the loop ends).
pub fn watch_idle_input(watch: Option<IdleInputWatch>) {
    IDLE_INPUT.with(|w| w.set(watch));
}

/// Whether the event loop running this step saw input (bytes, or the
/// peer's end) on the stamped socket `fd` since a step last resumed for
/// reading it, forgetting it as it answers: `Some(false)` means the loop
/// has the socket registered edge-triggered and has been told of nothing
/// since. `None`: no loop on this thread watches it (a blocking model, a
/// worker thread, a socket this loop never waited on); ask the socket.
///
/// What a pool uses instead of peeking at an idle connection before reuse
/// (nginx's way: its idle upstream connections stay in the event set and
/// one that turns readable is closed). Only meaningful if the last read of
/// the socket left nothing unread (it returned less than it asked for),
/// and it knows only what the loop has taken from the kernel: bytes that
/// arrived since the loop last looked (`epoll_wait`) are not known yet.
pub fn idle_input_seen(fd: RawFd, stamp: u64) -> Option<bool> {
    IDLE_INPUT
        .with(|w| w.get())
        .and_then(|watch| watch(fd, stamp))
}

/// For an event loop: arm the descriptor of `wait` in the epoll set
/// `epoll` for one report under `token` (`EPOLLONESHOT`, level-triggered:
/// arming it again reports at once what is already ready, so nothing is
/// lost between two waits, and a descriptor that went back to a pool
/// reports nothing more). A timer has nothing to arm.
pub fn arm_once(epoll: impl std::os::fd::AsFd, wait: &Await, token: u64) -> io::Result<()> {
    let Some(fd) = wait.fd else { return Ok(()) };
    let want = mpm_sys::readiness::Ready {
        read: wait.read,
        write: wait.write,
        hang_up: false,
    };
    mpm_sys::readiness::epoll_arm_once(epoll, fd, want, token)
}

/// For an event loop: register the socket of a [stamped](Await::stamp)
/// wait in the epoll set `epoll` under `token` for good, edge-triggered
/// (readable, writable, its end), so that later waits on it cost no system
/// call. The loop remembers what is reported while nobody waits (see
/// [the contract](Await#stamped-waits)); the set forgets the socket when
/// it is closed.
pub fn register_edge(epoll: impl std::os::fd::AsFd, fd: RawFd, token: u64) -> io::Result<()> {
    mpm_sys::readiness::epoll_register_edge(epoll, fd, token)
}

/// A future that is ready once `fd` is ready as `wait` says or its deadline
/// passed: `Ok(())` when ready (or possibly ready: try the I/O), a
/// `TimedOut` error at the deadline. Its first poll always waits: call it
/// after an operation returned `WouldBlock`.
pub fn ready(wait: Await) -> Ready {
    Ready {
        wait,
        polled: false,
    }
}

/// See [`ready`].
#[derive(Debug)]
pub struct Ready {
    wait: Await,
    polled: bool,
}

impl Future for Ready {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.polled {
            if self.wait.fd.is_none() || crate::turn_clock::now() >= self.wait.until {
                if self.wait.fd.is_none() {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "timed out waiting for the upstream",
                )));
            }
            return Poll::Ready(Ok(()));
        }
        self.polled = true;
        wait_on(self.wait);
        Poll::Pending
    }
}

/// A future that completes after `duration`, parking the step meanwhile.
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        until: crate::deadline(crate::turn_clock::now(), duration),
    }
}

/// See [`sleep`].
#[derive(Debug)]
pub struct Sleep {
    until: Instant,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if crate::turn_clock::now() >= self.until {
            return Poll::Ready(());
        }
        wait_on(Await::timer(self.until));
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_pending_read_is_reported_as_a_wait_on_its_descriptor() {
        let (mut a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let fd = b.as_raw_fd();
        let mut read = Box::pin(async move {
            let mut b = b;
            let mut buf = [0u8; 8];
            loop {
                match b.read(&mut buf) {
                    Ok(n) => return buf[..n].to_vec(),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready(Await::readable(fd, until)).await.unwrap()
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        });
        match poll_once(read.as_mut()) {
            Polled::Wait(w) => assert_eq!(w, Await::readable(fd, until)),
            other => panic!("expected a wait, got {other:?}"),
        }
        a.write_all(b"hi").unwrap();
        match poll_once(read.as_mut()) {
            Polled::Ready(v) => assert_eq!(v, b"hi"),
            other => panic!("expected the bytes, got {other:?}"),
        }
    }

    /// The race this closes: a prefork child's SIGTERM that lands after
    /// the driver last looked at the flag and before `poll` was entered
    /// interrupts nothing; the child waited on the upstream until the
    /// master killed it. The fast stop's pipe ends the wait whenever the
    /// stop came, and a graceful stop leaves the wait alone.
    #[test]
    fn a_fast_stop_asked_before_the_wait_began_ends_it_and_a_graceful_one_does_not() {
        let (_upstream, never) = UnixStream::pair().unwrap();
        // A client that stays, watched as the driver watches it: the wait
        // polls three descriptors.
        let (_peer, client) = UnixStream::pair().unwrap();
        let client = Some(client.as_raw_fd());
        let graceful = crate::Lifecycle::new().unwrap();
        graceful.stop();
        let cut = graceful.fast_stop();
        let soon = Await::readable(
            never.as_raw_fd(),
            Instant::now() + Duration::from_millis(50),
        );
        let woke = block_until_watching(&soon, client, Some(cut.fd().as_raw_fd()));
        assert!(!woke.ready, "a graceful stop ended a wait on an upstream");
        assert!(!cut.is_set());

        let fast = crate::Lifecycle::new().unwrap();
        fast.stop_now();
        let cut = fast.fast_stop();
        // Were the stop missed, this would wait its whole minute and say
        // the time ran out.
        let long = Await::readable(never.as_raw_fd(), Instant::now() + Duration::from_secs(60));
        let woke = block_until_watching(&long, client, Some(cut.fd().as_raw_fd()));
        assert!(woke.ready && !woke.client_hung_up, "{woke:?}");
        assert!(cut.is_set());
    }

    #[test]
    fn joined_waits_park_on_a_descriptor_with_the_earlier_deadline() {
        let now = Instant::now();
        let a = Await::timer(now + Duration::from_millis(10));
        let b = Await::readable(7, now + Duration::from_secs(1));
        let m = a.merge(b);
        assert_eq!(m.fd, Some(7));
        assert_eq!(m.until, now + Duration::from_millis(10));
    }

    #[test]
    fn a_wait_past_its_deadline_is_a_timeout_error() {
        let (_a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        let until = Instant::now() + Duration::from_millis(20);
        let got = block_on(async move {
            let _keep = b;
            ready(Await::readable(fd, until)).await?;
            ready(Await::readable(fd, until)).await
        });
        assert_eq!(got.unwrap_err().kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_future_that_records_nothing_is_polled_again() {
        let mut first = true;
        let mut f = Box::pin(std::future::poll_fn(move |_| {
            if std::mem::take(&mut first) {
                Poll::Pending
            } else {
                Poll::Ready(1)
            }
        }));
        assert!(matches!(poll_once(f.as_mut()), Polled::Again));
        assert!(matches!(poll_once(f.as_mut()), Polled::Ready(1)));
    }
}
