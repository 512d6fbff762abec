//! The protocol-agnostic contract between a process model and a protocol.

use crate::stream::Stream;
use crate::waiting::Await;

/// What a connection waits for after a step.
///
/// Returned by every step of a [`ConnectionHandler`]. A blocking MPM (prefork,
/// worker) simply calls the matching step again; the event MPM parks the
/// connection in its poller until the socket is ready, without a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Call [`ConnectionHandler::readable`] when the peer has sent more bytes.
    Read(Wait),
    /// Call [`ConnectionHandler::writable`] when the socket can take more bytes.
    Write,
    /// Close the connection now: everything the peer sent has been consumed.
    Close,
    /// Close after a lingering drain: shut down writing, then read and discard
    /// what the peer still sends for a short while, so that unread input does
    /// not make the kernel reset the connection before the peer has read the
    /// last response.
    Linger,
    /// The step stopped early with more to do now (its budget for one turn
    /// of an event loop is spent, or what comes next may block): call
    /// [`readable`](ConnectionHandler::readable) again, which resumes
    /// whatever is unfinished (output still queued first). A blocking MPM
    /// calls it at once; an event loop first serves its other connections,
    /// then decides again through [`prefetch`](ConnectionHandler::prefetch)
    /// whether it runs on the loop or on a worker.
    Yield,
    /// Wait on a descriptor of the connection's own (an upstream socket),
    /// not on the client: call [`readable`](ConnectionHandler::readable)
    /// again when it is ready as [`Await`] says, or at its deadline,
    /// whichever comes first. An event loop parks the connection with both
    /// descriptors and holds no thread meanwhile (and resumes it through
    /// [`prefetch`](ConnectionHandler::prefetch), as after a
    /// [`Yield`](Interest::Yield)); a blocking MPM blocks in `poll(2)`. The
    /// deadline is the step's own: it is not one of the server's timeouts,
    /// and [`timed_out`](ConnectionHandler::timed_out) is not called for it
    /// (the step resumes and answers its timeout, a 504, say). A stopping
    /// server lets such a wait finish within the graceful timeout, then
    /// closes the connection.
    Await(Await),
}

/// What a read-ahead on an event loop found; see [`ConnectionHandler::prefetch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Nothing to act on yet: keep waiting as this says (or close).
    Wait(Interest),
    /// A unit of work (a whole request) is buffered: run
    /// [`ConnectionHandler::readable`] on a worker thread.
    Ready,
    /// A unit of work is buffered and answering it will not block: the event
    /// loop may run [`ConnectionHandler::readable`] itself, saving the two
    /// thread switches of a hand-off.
    ReadyInline,
}

/// Which timeout bounds a [`Interest::Read`] wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Mid-request (or a new connection): bounded by `--timeout`.
    Request,
    /// Idle between requests: bounded by `--keepalive-timeout`. An idle
    /// connection may be closed when the server stops.
    KeepAlive,
}

/// A protocol, driven one readiness step at a time.
///
/// This is the only thing a process model knows about. The MPM owns the socket
/// and the waiting; the handler owns the bytes and the per-connection state in
/// [`ConnectionHandler::Conn`].
///
/// # Contract
///
/// * A new connection starts waiting for [`Interest::Read`] with
///   [`Wait::Request`]: the MPM calls [`connected`](Self::connected) once, then
///   [`readable`](Self::readable).
/// * Each step performs **at most one read that may block** and may write until
///   the socket would block. On a blocking socket (prefork, worker) writes
///   complete; on a non-blocking one (event) a write that would block means the
///   step returns [`Interest::Write`]. The same code serves both when it treats
///   [`std::io::ErrorKind::WouldBlock`] as "return and wait".
/// * When a wait times out, the MPM calls [`timed_out`](Self::timed_out) (a
///   last chance to tell the peer) and closes.
/// * **The loop's rule.** When [`Stream::on_event_loop`] is true the step runs
///   on an event loop, the one thread every parked connection of the process
///   waits on, and must not block: no disk read of data that is not in the
///   page cache, no lock held long, no handler that may sleep. The loop
///   asks before each step ([`prefetch`](Self::prefetch) for a unit of work,
///   [`writes_without_blocking`](Self::writes_without_blocking) for output);
///   a step that finds its *next* unit (a pipelined request, say) may block
///   returns [`Interest::Yield`] instead of doing it, and the loop asks
///   again. A step on the loop also writes at most a bounded amount of a
///   large body (the HTTP layer's `--sendfile-max-chunk`) and then yields,
///   so that one fast download never keeps the others waiting; the loop
///   resumes it on its next turn, so it is never starved either.
/// * **Waiting on an upstream.** A step that waits for another server
///   returns [`Interest::Await`] naming that socket (see
///   [`waiting`](crate::waiting)) rather than blocking on it: one
///   handler is then httpd's shape under prefork and worker (the thread
///   waits) and nginx's under event (the loop holds the socket, no thread
///   does). The step that resumes must expect a spurious wake.
/// * **Panics.** A panic in any step is caught by the MPM
///   ([`panics::catch`](crate::panics::catch)), logged in one line, and
///   costs that connection only: it is closed, and its worker, slot and
///   in-flight count are returned.
/// * A handler instance belongs to one thread (it is built per thread or per
///   process by a [`HandlerFactory`]), but a connection's state may move
///   between threads between steps, so it must be `Send`.
///
/// # Example: a line-echo protocol
///
/// ```
/// use std::io::{ErrorKind, Read, Write};
/// use mpm_core::{ConnectionHandler, Interest, Stream, Wait};
///
/// /// Echoes every line back, upper-cased.
/// struct Shout;
///
/// #[derive(Default)]
/// struct Line { pending: Vec<u8>, out: Vec<u8> }
///
/// impl ConnectionHandler for Shout {
///     type Conn = Line;
///     fn connected(&mut self, _stream: &Stream) -> Line { Line::default() }
///     fn readable(&mut self, conn: &mut Line, stream: &mut Stream) -> Interest {
///         let mut buf = [0u8; 512];
///         match stream.read(&mut buf) {
///             Ok(0) => return Interest::Close,
///             Ok(n) => conn.pending.extend_from_slice(&buf[..n]),
///             Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Read(Wait::KeepAlive),
///             Err(_) => return Interest::Close,
///         }
///         while let Some(end) = conn.pending.iter().position(|&b| b == b'\n') {
///             let line: Vec<u8> = conn.pending.drain(..=end).collect();
///             conn.out.extend(line.to_ascii_uppercase());
///         }
///         self.writable(conn, stream)
///     }
///     fn writable(&mut self, conn: &mut Line, stream: &mut Stream) -> Interest {
///         while !conn.out.is_empty() {
///             match stream.write(&conn.out) {
///                 Ok(n) => { conn.out.drain(..n); }
///                 Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Write,
///                 Err(_) => return Interest::Close,
///             }
///         }
///         Interest::Read(Wait::KeepAlive)
///     }
/// }
/// # let _ = Shout;
/// ```
pub trait ConnectionHandler {
    /// Per-connection state, created by [`connected`](Self::connected).
    type Conn: Send + 'static;

    /// A connection was accepted; build its state.
    fn connected(&mut self, stream: &Stream) -> Self::Conn;

    /// The peer sent bytes (or closed): read at most once, act, and say what
    /// to wait for next.
    fn readable(&mut self, conn: &mut Self::Conn, stream: &mut Stream) -> Interest;

    /// The socket can take more bytes: write what is pending.
    fn writable(&mut self, conn: &mut Self::Conn, stream: &mut Stream) -> Interest;

    /// A wait timed out; the connection is closed after this returns.
    /// The default does nothing.
    fn timed_out(&mut self, conn: &mut Self::Conn, stream: &mut Stream) {
        let _ = (conn, stream);
    }

    /// Event loops only: read what has arrived without blocking and say
    /// whether a whole unit of work is buffered, so that a worker thread is
    /// only handed complete requests and slow clients never hold one. Runs on
    /// the event loop's own handler; must not block. The default reads
    /// nothing and asks for a worker at once, as httpd's event MPM does.
    fn prefetch(&mut self, conn: &mut Self::Conn, stream: &mut Stream) -> Prefetch {
        let _ = (conn, stream);
        Prefetch::Ready
    }

    /// Event loops only: after a step returned [`Interest::Write`], can
    /// [`writable`](Self::writable) run on the event loop, blocking on nothing
    /// but the socket (a file body, say)? The default is no: a worker does it.
    fn writes_without_blocking(&self, conn: &Self::Conn) -> bool {
        let _ = conn;
        false
    }

    /// Could the connection be passed, as it is, to another process: has
    /// nothing been read from it or written to it, so that the socket alone
    /// carries its state? A process that stops with a successor (a graceful
    /// restart, a restart, an upgrade) then hands a connection whose client
    /// has not sent its request yet to the next generation
    /// ([`HandOver`](crate::HandOver)), instead of keeping it until the
    /// request comes or the graceful timeout cuts it off unanswered. The
    /// default, no, is always safe.
    fn can_hand_over(&self, conn: &Self::Conn) -> bool {
        let _ = conn;
        false
    }

    /// The server stops, and is about to close this connection, which
    /// waits idle ([`Wait::KeepAlive`]) with nothing from the peer to
    /// answer: the protocol's last word before the close. It writes a
    /// few octets, which the idle connection's empty socket buffer takes
    /// at once (on a non-blocking socket, what it does not take is
    /// dropped), and reads nothing. A model calls it once, just before it
    /// closes such a connection at a drain: when idle connections close
    /// (after [`STOP_GRACE`](crate::STOP_GRACE)), or when a step that
    /// ends after the stop leaves the connection idle. The connection is
    /// closed after it returns, whatever it wrote (under an event loop,
    /// once the loop has sent it). A connection cut at the graceful
    /// deadline, or by a fast stop, is not asked. A blocking model whose
    /// thread waits in the connection's read at the stop ends that read
    /// instead (worker shuts the socket down for reading): the protocol
    /// sees the end of its input with [`Stream::is_draining`] set, and
    /// says its last word there.
    ///
    /// The default writes nothing: an HTTP/1.1 connection between requests
    /// is closed as it is, which RFC 9112 §9.6 allows (a client retries a
    /// request it had not sent). HTTP/2 sends GOAWAY(NO_ERROR) naming the
    /// last stream it processed (RFC 9113 §6.8), as nginx does, so that
    /// the client knows no request was lost.
    fn idle_at_stop(&mut self, conn: &mut Self::Conn, stream: &mut Stream) {
        let _ = (conn, stream);
    }

    /// Event loops only: the connection is parked idle between requests;
    /// release what it need not keep (buffers), so that an idle connection
    /// costs as little memory as possible. The default keeps everything.
    fn parked(&mut self, conn: &mut Self::Conn) {
        let _ = conn;
    }

    /// The client hung up (closed its end of the connection, or reset it)
    /// while the connection awaited something else ([`Interest::Await`]
    /// asking neither `client_read` nor `client_write`): every model closes
    /// the connection right after this returns, dropping what it waited
    /// for (an upstream's connection closes with it), rather than wait on
    /// for an answer nobody will read. nginx does the same for a request
    /// waiting on its upstream (its 499). For the last word in the logs;
    /// the default says nothing.
    fn hung_up(&mut self, conn: &mut Self::Conn, stream: &mut Stream) {
        let _ = (conn, stream);
    }
}

/// Builds a [`ConnectionHandler`] for each worker.
///
/// Called once per child process after `fork()` (prefork) or once per worker
/// thread (worker, event), like actix's per-worker service factory: state
/// made in [`build`](Self::build) is private to that worker, while what the
/// factory itself holds is shared (read-only, and copy-on-write across fork).
///
/// Any `Fn() -> H` closure that is `Send + Sync` is a factory.
pub trait HandlerFactory: Send + Sync + 'static {
    /// The handler each worker gets.
    type Handler: ConnectionHandler;

    /// Build one worker's handler.
    fn build(&self) -> Self::Handler;
}

impl<F, H> HandlerFactory for F
where
    F: Fn() -> H + Send + Sync + 'static,
    H: ConnectionHandler,
{
    type Handler = H;

    fn build(&self) -> H {
        self()
    }
}
