//! [`Connection`]: one open connection to an upstream, plain or TLS,
//! always non-blocking.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use mpm_core::held_sends::{self, HeldSocket};
use mpm_core::waiting::{ready, Await};

use crate::pool::PoolKey;
use crate::tls::TlsStream;

/// An open connection to an upstream: TCP, or TLS over TCP.
///
/// Its socket is non-blocking. The `try_` methods return `WouldBlock` when
/// the socket is not ready: for a caller that builds its own
/// [`Await`] (a body streamed from the client, a tunnel), with
/// [`wait_readable`](Connection::wait_readable) and
/// [`wait_writable`](Connection::wait_writable). The `async` methods wait
/// themselves, with [`mpm_core::waiting::ready`]: parked on the loop under
/// the event MPM, blocked in `poll(2)` under prefork and worker.
pub struct Connection {
    io: Io,
    /// Its target's, shared ([`Target`](crate::Target)'s field says why).
    key: Arc<PoolKey>,
    opened_at: Instant,
    requests_served: u64,
    /// Who its socket is, for a loop that keeps it registered
    /// ([`Await::stamp`]).
    stamp: u64,
    /// Its last read left nothing in the socket (it returned less than it
    /// asked for, or `WouldBlock`): input after it is news to a loop that
    /// keeps the socket registered ([`is_fresh`](Self::is_fresh)).
    drained: bool,
}

enum Io {
    /// Its small writes held to the end of an event loop's turn
    /// ([`mpm_core::held_sends`]).
    Plain(Arc<HeldSocket>),
    Tls(Box<TlsStream>),
}

impl Connection {
    pub(crate) fn plain(sock: TcpStream, key: Arc<PoolKey>) -> Connection {
        Connection::new(Io::Plain(HeldSocket::new(sock)), key)
    }

    pub(crate) fn tls(stream: TlsStream, key: Arc<PoolKey>) -> Connection {
        Connection::new(Io::Tls(Box::new(stream)), key)
    }

    fn new(io: Io, key: Arc<PoolKey>) -> Connection {
        Connection {
            io,
            key,
            opened_at: mpm_core::turn_clock::now(),
            requests_served: 0,
            stamp: mpm_core::waiting::new_stamp(),
            drained: false,
        }
    }

    /// The socket's descriptor, for an [`Await`].
    pub fn raw_fd(&self) -> RawFd {
        self.sock().as_raw_fd()
    }

    /// The stamp its waits carry ([`Await::stamp`]): plain TCP only. Its
    /// waits keep to the stamped contract (each follows a `WouldBlock`, or
    /// a response read to its end); a TLS connection's may not (rustls
    /// may hold records to write that no `WouldBlock` preceded), so they
    /// are armed for each wait as before.
    pub fn stamp(&self) -> Option<u64> {
        match self.io {
            Io::Plain(_) => Some(self.stamp),
            Io::Tls(_) => None,
        }
    }

    /// The upstream's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.key.addr
    }

    /// What the pool files this connection under.
    pub fn key(&self) -> &PoolKey {
        &self.key
    }

    /// Whether this is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.io, Io::Tls(_))
    }

    /// When it was opened.
    pub fn opened_at(&self) -> Instant {
        self.opened_at
    }

    /// How many responses were read to their end on it before it was last
    /// given back to the pool: 0 for a new connection.
    pub fn requests_served(&self) -> u64 {
        self.requests_served
    }

    pub(crate) fn served_one(&mut self) {
        self.requests_served += 1;
    }

    fn sock(&self) -> &TcpStream {
        match &self.io {
            Io::Plain(s) => s.socket(),
            Io::Tls(t) => &t.sock,
        }
    }

    /// Read what is there: `Ok(0)` at the end of the stream, `WouldBlock`
    /// when nothing is (for TLS: no complete record; and the end is a
    /// close_notify: a close without one is an `UnexpectedEof` error).
    pub fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.io {
            Io::Plain(s) => {
                let got = s.read(buf);
                self.drained = match &got {
                    Ok(n) => *n < buf.len(),
                    Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                };
                got
            }
            Io::Tls(t) => t.try_read(buf),
        }
    }

    /// Write what the socket (or, for TLS, rustls's bounded buffer) takes:
    /// `WouldBlock` when nothing. TLS records may remain pending after it:
    /// see [`wants_write`](Connection::wants_write) and
    /// [`try_flush`](Connection::try_flush).
    pub fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.io {
            Io::Plain(s) => held_sends::write(s, buf),
            Io::Tls(t) => t.try_write(buf),
        }
    }

    /// Send TLS records still pending: `WouldBlock` while some remain.
    /// Nothing to do for plain TCP.
    pub fn try_flush(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(_) => Ok(()),
            Io::Tls(t) => t.try_flush(),
        }
    }

    /// Whether TLS records wait to be written (then a wait for input
    /// should also wait for room: [`wait_readable`](Connection::wait_readable)
    /// does).
    pub fn wants_write(&self) -> bool {
        match &self.io {
            Io::Plain(_) => false,
            Io::Tls(t) => t.tls.wants_write(),
        }
    }

    /// The wait for input on this connection until `until` (and for room,
    /// while TLS records are pending).
    pub fn wait_readable(&self, until: Instant) -> Await {
        let mut wait = Await::readable(self.raw_fd(), until);
        wait.write = self.wants_write();
        wait.stamp = self.stamp();
        wait
    }

    /// The wait for room on this connection until `until`.
    pub fn wait_writable(&self, until: Instant) -> Await {
        Await {
            stamp: self.stamp(),
            ..Await::writable(self.raw_fd(), until)
        }
    }

    /// Read at least one byte (`Ok(0)`: the end of the stream), waiting
    /// until `until`; past it a `TimedOut` error.
    pub async fn read(&mut self, buf: &mut [u8], until: Instant) -> io::Result<usize> {
        loop {
            match self.try_read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready(self.wait_readable(until)).await?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// Write all of `buf` (and the TLS records it makes), waiting until
    /// `until`; past it a `TimedOut` error.
    pub fn write_all<'a>(
        &'a mut self,
        buf: &'a [u8],
        until: Instant,
    ) -> impl std::future::Future<Output = io::Result<()>> + 'a {
        self.write_all_or(buf, until, |e| e)
    }

    /// [`write_all`](Self::write_all), its error made into the caller's
    /// by `error`.
    ///
    /// One loop with one wait, the writes and then the flush of what TLS
    /// still holds (which is all [`flush`](Self::flush) is), rather than a
    /// loop that awaits a flush of its own;
    /// an `async` block rather than an `async fn`, which would keep its
    /// arguments twice; and the error mapped in here rather than by a
    /// future around this one, which would keep them a third time. This
    /// future is in that of every request waiting on its upstream.
    #[allow(clippy::manual_async_fn)] // see above: its future's size
    pub fn write_all_or<'a, E: 'a>(
        &'a mut self,
        buf: &'a [u8],
        until: Instant,
        error: fn(io::Error) -> E,
    ) -> impl std::future::Future<Output = Result<(), E>> + 'a {
        async move {
            let mut buf = buf;
            loop {
                let step = if buf.is_empty() {
                    self.try_flush().map(|()| None)
                } else {
                    self.try_write(buf).map(Some)
                };
                match step {
                    Ok(None) => return Ok(()),
                    Ok(Some(0)) => return Err(error(io::ErrorKind::WriteZero.into())),
                    Ok(Some(n)) => buf = &buf[n..],
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready(self.wait_writable(until)).await.map_err(error)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(error(e)),
                }
            }
        }
    }

    /// Shut the writing half (after close_notify, for TLS), as a tunnel
    /// does when its client finished sending; reading goes on. A TLS
    /// record that did not fit the socket at once is lost.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(s) => s.socket().shutdown(std::net::Shutdown::Write),
            Io::Tls(t) => t.shutdown_write(),
        }
    }

    /// Send the pending TLS records, waiting until `until`: a
    /// [`write_all`](Self::write_all) of nothing, whose loop ends with
    /// this flush.
    pub fn flush(
        &mut self,
        until: Instant,
    ) -> impl std::future::Future<Output = io::Result<()>> + '_ {
        self.write_all(&[], until)
    }

    /// Whether an idle connection may be used again: its peer has not
    /// closed it and sent nothing (a byte between two responses means the
    /// exchange is out of step).
    ///
    /// Plain TCP: on an event loop that keeps the socket registered, the
    /// loop's word, no system call, if the last read drained the socket
    /// and no input was reported since ([`idle_input_seen`]: what nginx
    /// relies on); otherwise a peek (`recv(MSG_PEEK)`). The loop knows only
    /// what it has taken from the kernel: bytes that came after its last
    /// `epoll_wait` and after the last read are not seen, as a peek does
    /// not see those that come after it. TLS reads through rustls, which
    /// takes in session tickets sent after the handshake and would call a
    /// close_notify the end.
    ///
    /// [`idle_input_seen`]: mpm_core::waiting::idle_input_seen
    pub(crate) fn is_fresh(&mut self) -> bool {
        match &mut self.io {
            Io::Plain(s) => {
                if self.drained
                    && mpm_core::waiting::idle_input_seen(s.socket().as_raw_fd(), self.stamp)
                        == Some(false)
                {
                    return true;
                }
                !crate::connect::is_stale(s.socket())
            }
            Io::Tls(t) => {
                let mut byte = [0u8; 1];
                matches!(t.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.key.addr)
            .field("tls", &self.is_tls())
            .field("fd", &self.raw_fd())
            .field("requests_served", &self.requests_served)
            .finish()
    }
}
