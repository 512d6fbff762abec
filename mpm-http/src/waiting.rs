//! What a response may hold that waits on another server without holding a
//! thread: an answer still to come ([`Response::later`]), a body read from a
//! non-blocking source ([`PollRead`], [`Body::Polled`]), and the two-way
//! byte stream of an upgraded connection ([`Tunnel`],
//! [`Response::tunnel`]). The connection drives each of them one step at a
//! time with [`Interest::Await`](mpm_core::Interest::Await): a blocking
//! model's thread waits in `poll(2)`, the event loop parks the connection
//! and holds no thread.
//!
//! [`Response::later`]: crate::Response::later
//! [`Response::tunnel`]: crate::Response::tunnel
//! [`Body::Polled`]: crate::Body::Polled

use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::time::Duration;

use mpm_core::waiting::Polled;

use crate::response::Response;

/// The future of a [`Response::later`](crate::Response::later), boxed.
pub(crate) type LaterAnswer = Pin<Box<dyn Future<Output = Response> + Send + 'static>>;

/// A response body read from a non-blocking source (an upstream socket):
/// the writer asks it for bytes only when the client can take them, one
/// buffer at a time, so memory stays bounded both ways.
///
/// `poll_read` never blocks: with nothing to give yet it returns
/// [`Polled::Wait`] with what it waits for (its socket readable, until its
/// deadline), and is called again when that is ready or the deadline
/// passed (perhaps spuriously: try again, and wait again). An I/O future
/// of mpm's can be driven from here with
/// [`poll_once`](mpm_core::waiting::poll_once).
///
/// ```
/// use mpm_core::waiting::Polled;
/// use mpm_http::{Body, PollRead, Response};
///
/// /// Counts down, a digit per read.
/// struct Countdown(u8);
///
/// impl PollRead for Countdown {
///     fn poll_read(&mut self, buf: &mut [u8]) -> Polled<std::io::Result<usize>> {
///         if self.0 == 0 || buf.is_empty() {
///             return Polled::Ready(Ok(0));
///         }
///         self.0 -= 1;
///         buf[0] = b'0' + self.0;
///         Polled::Ready(Ok(1))
///     }
///     fn len(&self) -> Option<u64> {
///         Some(u64::from(self.0))
///     }
/// }
///
/// let r = Response::new(200).body(Body::Polled(Box::new(Countdown(3))));
/// assert_eq!(r.body_ref().len(), Some(3));
/// ```
// `len` is the length announced in advance, if any: an `is_empty` beside
// it would have to say "not known" too, which `len() == Some(0)` does.
#[allow(clippy::len_without_is_empty)]
pub trait PollRead: Send {
    /// Read into `buf`: `Ready(Ok(n))` with `n` bytes, `Ready(Ok(0))` at the
    /// end, `Wait` when nothing is there yet (with what to wait for),
    /// `Again` to be called again on the next turn. An error mid-body cuts
    /// the client's connection: the client sees a short body, never a
    /// clean end.
    fn poll_read(&mut self, buf: &mut [u8]) -> Polled<io::Result<usize>>;

    /// The body's length, when known: sent as `Content-Length` (and a
    /// source that ends before it cuts the connection). Unknown (`None`,
    /// the default): chunked to HTTP/1.1 clients, delimited by the close
    /// for HTTP/1.0 ones, as [`Body::Stream`](crate::Body::Stream).
    fn len(&self) -> Option<u64> {
        None
    }
}

/// The upstream side of an upgraded connection (a WebSocket after `101
/// Switching Protocols`): a non-blocking socket, or a layer over one (TLS),
/// that the connection pumps bytes to and from.
///
/// `read` and `write` must not block: `WouldBlock` when the socket is not
/// ready, `Ok(0)` from `read` at the upstream's end of the stream.
pub trait Tunnel: Send {
    /// The descriptor to wait on for `read` and `write`.
    fn fd(&self) -> RawFd;

    /// Read what the upstream sent.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Send bytes from the client to the upstream.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize>;

    /// The tunnel closes when neither side sent anything for this long.
    fn idle_timeout(&self) -> Duration;

    /// The client finished sending: end the upstream's input (the
    /// default shuts down writing on [`fd`](Self::fd); a TLS layer sends
    /// its `close_notify` first).
    fn shutdown_write(&mut self) -> io::Result<()> {
        nix::sys::socket::shutdown(self.fd(), nix::sys::socket::Shutdown::Write)
            .map_err(io::Error::from)
    }
}

impl std::fmt::Debug for dyn PollRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PollRead")
    }
}

impl std::fmt::Debug for dyn Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tunnel")
    }
}
