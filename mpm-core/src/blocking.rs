//! Driving a [`ConnectionHandler`] on a blocking socket, as prefork and worker do.

use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::connection_handler::{ConnectionHandler, Interest, Wait};
use crate::hand_over::HandOver;
use crate::lifecycle::Lifecycle;
use crate::panics::{catch, Panic};
use crate::scoreboard::WorkerState;
use crate::settings::MpmSettings;
use crate::stream::Stream;

/// The waits a blocking driver enforces with `SO_RCVTIMEO`/`SO_SNDTIMEO`.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Mid-request reads and every write.
    pub request: Duration,
    /// Idle between requests.
    pub keepalive: Duration,
    /// Longest lingering drain before close.
    pub linger: Duration,
    /// How long a new connection waits for its first bytes before its
    /// handler is asked to read anyway (and answers a timeout, say): the
    /// shortest of the protocol's limits ([`MpmSettings::request_timeout`]).
    pub first_request: Duration,
    /// Do accepted sockets already carry `request` as their read and write
    /// timeouts, copied from the listener
    /// ([`Listener::pass_on_options`](crate::Listener::pass_on_options))?
    pub inherited: bool,
}

impl Timeouts {
    /// The timeouts the settings ask for.
    pub fn from_settings(settings: &MpmSettings) -> Timeouts {
        Timeouts {
            request: settings.timeout,
            keepalive: settings.keepalive_timeout,
            linger: crate::stream::LINGER_TIME,
            first_request: settings.request_timeout,
            inherited: false,
        }
    }

    /// The timeouts of `settings` for connections accepted from `listeners`,
    /// after setting on them what accepted sockets copy
    /// ([`Listener::pass_on_options`](crate::Listener::pass_on_options)):
    /// the read and write timeouts are then inherited, not set per connection.
    pub fn inherited_by(
        settings: &MpmSettings,
        listeners: &[crate::Listener],
    ) -> crate::Result<Timeouts> {
        crate::Listener::pass_on_options(listeners, settings)?;
        let mut t = Timeouts::from_settings(settings);
        t.inherited = true;
        Ok(t)
    }
}

/// Told when a connection parks idle between requests and when it is about
/// to close, so that a stopping server can close idle connections instead of
/// waiting out their timeout, and never touches a descriptor after its close.
pub trait IdlePark {
    /// The connection on `fd` is about to wait idle for its next request.
    /// Return false if the server is stopping: the driver then closes it.
    fn park(&mut self, fd: BorrowedFd<'_>) -> bool;
    /// A new connection whose handler [can hand it over](ConnectionHandler::can_hand_over)
    /// is about to wait for its first bytes, at most `within`. A parker that
    /// knows the stop pipe and the [`HandOver`] channel waits here (with
    /// [`await_first_request`]) and, if the server stops with a successor
    /// while the client is silent, passes the connection on. The default
    /// returns at once: the driver then reads.
    fn first_request(&mut self, socket: &TcpStream, within: Duration) -> FirstRequest {
        let _ = (socket, within);
        FirstRequest::Serve
    }
    /// The idle wait on the connection ended (a request arrived, or not).
    fn unpark(&mut self);
    /// The connection's descriptor is about to be closed.
    fn closing(&mut self);
}

/// Has the peer of the connection on `fd` sent bytes not yet read? A
/// non-blocking peek. A stopping server still answers such a request (with
/// `Connection: close`) rather than close on it: closing would drop a
/// request the client had already sent.
pub fn has_pending_input(fd: impl AsFd) -> bool {
    mpm_sys::socket::has_pending_input(fd)
}

/// Does the peer of the connection on `fd` send something within `within`
/// (or has it already)? See [`has_pending_input`]; a stopping blocking
/// model waits [`STOP_GRACE`](crate::STOP_GRACE) this way.
pub fn input_arrives_within(fd: impl AsFd, within: Duration) -> bool {
    let conn = fd.as_fd();
    let deadline = crate::deadline(Instant::now(), within);
    loop {
        let mut fds = [nix::poll::PollFd::new(conn, nix::poll::PollFlags::POLLIN)];
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = left.as_millis().min(u16::MAX as u128) as u16;
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(n) if n > 0 => return has_pending_input(conn),
            // A second stop signal (SIGTERM after SIGUSR1, say) must not cut
            // the grace short: wait out the rest of it.
            Err(nix::errno::Errno::EINTR) if !left.is_zero() => {}
            _ => return has_pending_input(conn),
        }
    }
}

/// What a new connection's wait for its first request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstRequest {
    /// Serve it here: bytes arrived, the wait ran out (the handler answers
    /// its timeout), or there is no one to hand it to.
    Serve,
    /// It was passed to the next generation: close this process's copy and
    /// never touch it again.
    HandedOver,
}

/// The first-request wait of a blocking model's worker: poll the
/// connection and the stop pipe, at most `within`. Should the server stop
/// with a successor while the client is silent, wait
/// [`STOP_GRACE`](crate::STOP_GRACE) for a request already on its way, then
/// hand the connection over. A stop with no successor changes nothing: the
/// connection is served here as before.
pub fn await_first_request(
    socket: &TcpStream,
    within: Duration,
    lifecycle: &Lifecycle,
    hand_over: Option<&HandOver>,
) -> FirstRequest {
    let deadline = crate::deadline(Instant::now(), within);
    loop {
        if lifecycle.is_stopping() {
            let (true, Some(channel)) = (lifecycle.has_successor(), hand_over) else {
                return FirstRequest::Serve; // a plain stop: served here, as before
            };
            if input_arrives_within(socket, crate::STOP_GRACE) {
                return FirstRequest::Serve;
            }
            return match channel.send(socket.as_fd()) {
                Ok(()) => FirstRequest::HandedOver,
                Err(e) => {
                    crate::log_warn!(
                        "mpm: could not hand a connection to the next generation ({e}); \
                         serving it here"
                    );
                    FirstRequest::Serve
                }
            };
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return FirstRequest::Serve;
        }
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = [
            PollFd::new(socket.as_fd(), PollFlags::POLLIN),
            PollFd::new(lifecycle.wake_fd(), PollFlags::POLLIN),
        ];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return FirstRequest::Serve,
            Ok(_) if fds[0].revents().is_some_and(|r| !r.is_empty()) => return FirstRequest::Serve,
            // The stop pipe (looked at on the next turn), or the time ran out.
            Ok(_) => {}
        }
    }
}

/// An [`IdlePark`] that never stops idle connections early.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPark;

impl IdlePark for NoPark {
    fn park(&mut self, _fd: BorrowedFd<'_>) -> bool {
        true
    }
    fn unpark(&mut self) {}
    fn closing(&mut self) {}
}

/// Serve one connection to completion with blocking I/O: call the handler's
/// steps as its [`Interest`] asks, with the matching socket timeout, until it
/// closes. Returns the number of steps taken.
///
/// A panic in a step is caught ([`crate::panics::catch`]) and logged in one
/// line; the connection is closed, `park` is told so
/// ([`IdlePark::closing`]), and the caller serves on.
pub fn serve_blocking<H: ConnectionHandler>(
    handler: &mut H,
    mut stream: Stream,
    timeouts: &Timeouts,
    park: &mut dyn IdlePark,
) -> u64 {
    let mut steps = 0u64;
    if timeouts.inherited {
        stream.inherits_read_timeout(timeouts.request);
    } else if stream.set_write_timeout(timeouts.request).is_err() {
        park.closing();
        return steps;
    }
    let mut conn = match catch(|| handler.connected(&stream)) {
        Ok(conn) => conn,
        Err(p) => {
            log_panic("connected", &p, &stream);
            park.closing();
            return steps;
        }
    };
    if catch(|| handler.can_hand_over(&conn)).unwrap_or(false) {
        stream.set_state(WorkerState::Reading);
        if park.first_request(stream.socket(), timeouts.first_request) == FirstRequest::HandedOver {
            if let Some(slot) = stream.score_slot() {
                slot.record_hand_over();
            }
            park.closing();
            return steps;
        }
    }
    let mut interest = Interest::Read(Wait::Request);
    let mut last_read;
    loop {
        steps += 1;
        // More to do at once: `readable` resumes it.
        if interest == Interest::Yield {
            interest = Interest::Read(Wait::Request);
        }
        let next = match interest {
            Interest::Read(wait) => {
                last_read = true;
                let limit = match wait {
                    Wait::Request => timeouts.request,
                    Wait::KeepAlive => timeouts.keepalive,
                };
                if stream.set_read_timeout(limit).is_err() {
                    park.closing();
                    return steps;
                }
                stream.set_state(match wait {
                    Wait::Request => WorkerState::Reading,
                    Wait::KeepAlive => WorkerState::KeepAlive,
                });
                if wait == Wait::KeepAlive {
                    if !park.park(stream.socket().as_fd()) {
                        // Stopping: the protocol's last word, then the close.
                        if let Err(p) = catch(|| handler.idle_at_stop(&mut conn, &mut stream)) {
                            log_panic("idle_at_stop", &p, &stream);
                        }
                        park.unpark();
                        park.closing();
                        return steps;
                    }
                    let next = catch(|| handler.readable(&mut conn, &mut stream));
                    park.unpark();
                    next
                } else {
                    catch(|| handler.readable(&mut conn, &mut stream))
                }
            }
            Interest::Write => {
                last_read = false;
                catch(|| handler.writable(&mut conn, &mut stream))
            }
            Interest::Close => {
                park.closing();
                return steps;
            }
            Interest::Linger => {
                park.closing();
                stream.set_state(WorkerState::Closing);
                stream.linger_close(timeouts.linger);
                return steps;
            }
            Interest::Await(wait) => {
                // httpd's shape: this thread (or process) waits with the
                // request, in poll(2) on the upstream socket (and the
                // client's, when the step asks), then the step resumes.
                last_read = true;
                stream.set_state(WorkerState::Writing);
                let client = stream.socket().as_raw_fd();
                let cut = stream.cut_fd().map(|fd| fd.as_raw_fd());
                let woke = crate::waiting::block_until_watching(&wait, Some(client), cut);
                // Cut before or while it waited, by a fast stop (a prefork
                // child's SIGTERM, whose pipe the poll watches) or by a drain
                // that shut the client's socket down (worker): the request is
                // over, and its upstream closes with it, now rather than
                // when the upstream answers or the master kills the child.
                if stream.is_cut() {
                    park.closing();
                    return steps;
                }
                if woke.client_readable {
                    // Its end of the stream too: the step reads it (a
                    // peek at pending input would not tell it).
                    stream.input_reported(false);
                }
                if woke.client_hung_up {
                    // The client's doing, not a drain's cut (the worker
                    // model's shuts the socket down both ways), and a wait
                    // its hang-up ends (a tunnel's does not: a reset only).
                    if !stream.is_draining() && crate::waiting::ends_on_hang_up(&wait) {
                        if let Err(p) = catch(|| handler.hung_up(&mut conn, &mut stream)) {
                            log_panic("hung_up", &p, &stream);
                        }
                    }
                    park.closing();
                    return steps;
                }
                catch(|| handler.readable(&mut conn, &mut stream))
            }
            Interest::Yield => unreachable!("made a read above"),
        };
        interest = match next {
            Ok(next) => next,
            Err(p) => {
                log_panic(if last_read { "readable" } else { "writable" }, &p, &stream);
                park.closing();
                return steps;
            }
        };
        // On a blocking socket, WouldBlock means SO_RCVTIMEO/SO_SNDTIMEO expired.
        if stream.take_would_block() {
            if let Err(p) = catch(|| handler.timed_out(&mut conn, &mut stream)) {
                log_panic("timed_out", &p, &stream);
            }
            park.closing();
            return steps;
        }
    }
}

/// Drive one connection on a non-blocking `stream` as an event loop does,
/// with `poll(2)` for its epoll set: every wake goes through
/// [`prefetch`](ConnectionHandler::prefetch) (the step then runs "on the
/// loop" or, for [`Prefetch::Ready`](crate::Prefetch::Ready), as a worker
/// would), a write through
/// [`writes_without_blocking`](ConnectionHandler::writes_without_blocking),
/// an idle connection is [`parked`](ConnectionHandler::parked), and an
/// [`Interest::Await`] is waited on in `poll` with no thread of a pool
/// involved. Until the connection closes, or nothing happens for `idle`;
/// returns every interest the steps returned, for a test to assert on
/// (what the event MPM would have done with each). Panics are not caught:
/// this is a test harness, not a server.
pub fn drive_like_a_loop<H: ConnectionHandler>(
    handler: &mut H,
    mut stream: Stream,
    idle: Duration,
) -> Vec<Interest> {
    let fd = stream.as_raw_fd();
    let ready = |read: bool| {
        let until = crate::deadline(Instant::now(), idle);
        let wait = crate::waiting::Await::timer(until);
        let wait = if read {
            wait.or_client_input()
        } else {
            wait.or_client_room()
        };
        crate::waiting::block_until(&wait, Some(fd))
    };
    let mut conn = handler.connected(&stream);
    let mut seen = Vec::new();
    let mut interest = Interest::Read(Wait::Request);
    loop {
        interest = match interest {
            Interest::Read(wait) => {
                if wait == Wait::KeepAlive {
                    handler.parked(&mut conn);
                }
                if stream.drained() && !ready(true) {
                    return seen;
                }
                wake_like_a_loop(handler, &mut conn, &mut stream)
            }
            Interest::Write => {
                if !ready(false) {
                    return seen;
                }
                stream.set_on_event_loop(handler.writes_without_blocking(&conn));
                let next = handler.writable(&mut conn, &mut stream);
                stream.take_would_block();
                next
            }
            Interest::Yield => wake_like_a_loop(handler, &mut conn, &mut stream),
            Interest::Await(wait) => {
                // Parked: no worker holds it, only this poll.
                crate::waiting::block_until(&wait, Some(fd));
                wake_like_a_loop(handler, &mut conn, &mut stream)
            }
            Interest::Close | Interest::Linger => return seen,
        };
        seen.push(interest);
    }
}

/// One wake of a loop: `prefetch`, then `readable` on the loop or (as a
/// worker would) off it.
fn wake_like_a_loop<H: ConnectionHandler>(
    handler: &mut H,
    conn: &mut H::Conn,
    stream: &mut Stream,
) -> Interest {
    stream.set_on_event_loop(true);
    let found = handler.prefetch(conn, stream);
    stream.take_would_block();
    let next = match found {
        crate::Prefetch::Wait(next) => next,
        crate::Prefetch::ReadyInline => handler.readable(conn, stream),
        crate::Prefetch::Ready => {
            stream.set_on_event_loop(false);
            handler.readable(conn, stream)
        }
    };
    // WouldBlock on a non-blocking socket is not a timeout.
    stream.take_would_block();
    next
}

/// The one error-log line for a panic in a step: which step, the panic,
/// and whose connection was closed for it.
pub fn log_panic(step: &str, panic: &Panic, stream: &Stream) {
    crate::log_error!(
        "mpm: connection handler panicked in {step}: {panic}; closed the connection from {}",
        stream.peer_addr()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::{AsRawFd, RawFd};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Panics in whichever step its connection asks for.
    struct Fragile;

    impl ConnectionHandler for Fragile {
        type Conn = ();
        fn connected(&mut self, _: &Stream) {}
        fn readable(&mut self, _: &mut (), _: &mut Stream) -> Interest {
            panic!("readable fell over")
        }
        fn writable(&mut self, _: &mut (), _: &mut Stream) -> Interest {
            Interest::Close
        }
    }

    #[derive(Default)]
    struct Recorder {
        parked: Vec<RawFd>,
        unparked: usize,
        closing: usize,
    }

    impl IdlePark for Recorder {
        fn park(&mut self, fd: BorrowedFd<'_>) -> bool {
            self.parked.push(fd.as_raw_fd());
            true
        }
        fn unpark(&mut self) {
            self.unparked += 1;
        }
        fn closing(&mut self) {
            self.closing += 1;
        }
    }

    #[test]
    fn a_panicking_step_still_closes_its_bookkeeping_and_returns() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"x").unwrap();
        let (socket, peer) = listener.accept().unwrap();
        let stream = Stream::new(socket, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
        let mut park = Recorder::default();
        let timeouts = Timeouts::from_settings(&MpmSettings::default());
        let logged = crate::error_log::expect("'readable fell over'");
        // Returns (does not unwind) and tells the park the descriptor goes.
        let steps = serve_blocking(&mut Fragile, stream, &timeouts, &mut park);
        assert_eq!(steps, 1);
        assert_eq!(logged.count(), 1, "the panic is one line");
        assert_eq!(park.closing, 1);
        // The socket was closed: end-of-file, or a reset for the unread byte.
        let mut buf = [0u8; 1];
        use std::io::Read;
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        match client.read(&mut buf) {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        }
    }

    /// A caller's `Duration::MAX` is "as long as can be", not an overflow
    /// panic when added to now.
    #[test]
    fn waiting_duration_max_for_input_does_not_panic() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(b"x").unwrap();
        let (socket, _) = listener.accept().unwrap();
        assert!(input_arrives_within(&socket, Duration::MAX));
        assert!(has_pending_input(&socket));
    }
}
