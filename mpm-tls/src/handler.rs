//! [`TlsHandler`]: any [`ConnectionHandler`] behind TLS. Connections from
//! plain listeners pass straight through; those from TLS listeners do their
//! handshake first (on a worker, never on an event loop), then run the
//! inner handler's steps with the session attached to the [`Stream`].

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpm_core::{ConnectionHandler, HandlerFactory, Interest, Prefetch, Stream, Wait};

use crate::session::{Pool, Session};
use crate::sniff::{self, First};
use crate::stats::Kind;
use crate::Tls;

/// Which listeners speak TLS, told apart by the address a connection
/// arrived on (the kernel's `getsockname`, as nginx does for a wildcard
/// listener), so that the process models need not know.
#[derive(Debug, Clone, Default)]
pub struct TlsListeners {
    tls: Vec<SocketAddr>,
    plain: Vec<SocketAddr>,
}

impl TlsListeners {
    /// The listeners' bound addresses, each with whether it serves TLS.
    pub fn new(listeners: impl IntoIterator<Item = (SocketAddr, bool)>) -> TlsListeners {
        let mut this = TlsListeners::default();
        for (addr, tls) in listeners {
            if tls {
                this.tls.push(addr);
            } else {
                this.plain.push(addr);
            }
        }
        this
    }

    /// Does any listener serve TLS?
    pub fn any(&self) -> bool {
        !self.tls.is_empty()
    }

    /// Is a connection accepted on `local` (its own address) a TLS one?
    pub fn is_tls(&self, local: SocketAddr) -> bool {
        if self.tls.contains(&local) {
            return true;
        }
        if self.plain.contains(&local) {
            return false;
        }
        let wildcard = |a: &SocketAddr| {
            a.ip().is_unspecified() && a.port() == local.port() && a.is_ipv4() == local.is_ipv4()
        };
        self.tls.iter().any(wildcard) && !self.plain.iter().any(wildcard)
    }

    fn for_stream(&self, stream: &Stream) -> bool {
        if self.tls.is_empty() {
            return false;
        }
        if self.plain.is_empty() {
            return true;
        }
        stream.local_addr().is_ok_and(|a| self.is_tls(a))
    }
}

/// The [`HandlerFactory`] that puts TLS in front of another: built once per
/// server start, before forking, from what every process shares.
#[derive(Debug)]
pub struct TlsFactory<F> {
    inner: F,
    tls: Option<Arc<Tls>>,
    listeners: Arc<TlsListeners>,
    pool: Arc<Pool>,
}

impl<F: HandlerFactory> TlsFactory<F> {
    /// TLS from `tls` on the connections of `listeners`' TLS listeners, in
    /// front of `inner`'s handlers; without `tls`, or without TLS
    /// listeners, every connection goes straight to `inner`.
    pub fn new(inner: F, tls: Option<Arc<Tls>>, listeners: TlsListeners) -> TlsFactory<F> {
        TlsFactory {
            inner,
            tls: if listeners.any() { tls } else { None },
            listeners: Arc::new(listeners),
            pool: Arc::new(Pool::default()),
        }
    }
}

impl<F: HandlerFactory> HandlerFactory for TlsFactory<F> {
    type Handler = TlsHandler<F::Handler>;

    fn build(&self) -> Self::Handler {
        TlsHandler {
            inner: self.inner.build(),
            tls: self.tls.clone(),
            listeners: Arc::clone(&self.listeners),
            pool: Arc::clone(&self.pool),
        }
    }
}

/// A [`ConnectionHandler`] behind TLS: plain connections pass through, TLS
/// ones handshake first (on a worker), then run the inner handler's steps
/// with the session attached to the [`Stream`].
#[derive(Debug)]
pub struct TlsHandler<H> {
    inner: H,
    tls: Option<Arc<Tls>>,
    listeners: Arc<TlsListeners>,
    pool: Arc<Pool>,
}

impl<H: ConnectionHandler> TlsHandler<H> {
    /// Wrap one handler (a factory does it per worker).
    pub fn new(inner: H, tls: Arc<Tls>, listeners: TlsListeners) -> TlsHandler<H> {
        TlsHandler {
            inner,
            tls: Some(tls),
            listeners: Arc::new(listeners),
            pool: Arc::new(Pool::default()),
        }
    }
}

/// A connection's state: the inner handler's, and the TLS session of a
/// connection from a TLS listener.
pub struct TlsConn<C> {
    inner: C,
    session: Option<Box<Session>>,
    tls: bool,
}

impl<C> std::fmt::Debug for TlsConn<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn").field("tls", &self.tls).finish()
    }
}

/// The answer to a plain HTTP request on a TLS port.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Content-Length: 58\r\nConnection: close\r\n\r\n\
400 Bad Request: plain HTTP request sent to an HTTPS port\n";

impl<H: ConnectionHandler> TlsHandler<H> {
    fn count(&self, kind: Kind) {
        if let Some(t) = &self.tls {
            t.stats.add(kind);
        }
    }

    /// One handshake step: at most one read, then whatever it allows.
    fn handshake(&mut self, c: &mut TlsConn<H::Conn>, s: &mut Stream) -> Interest {
        let Some(tls) = self.tls.clone() else {
            return Interest::Close;
        };
        let Some(sess) = c.session.as_mut() else {
            return Interest::Close;
        };
        let now = Instant::now();
        if let Some(deadline) = sess.deadline {
            if now >= deadline {
                self.count(Kind::Timeout);
                return Interest::Close;
            }
            // A blocking read waits no longer than the handshake may take.
            if s.is_blocking() {
                let wait = (deadline - now).max(Duration::from_millis(1));
                if s.set_read_timeout(wait.min(tls.timeout)).is_err() {
                    return Interest::Close;
                }
            }
        }
        match sess.fill(s) {
            Ok(0) => {
                // Closed before a byte (a port probe) is no handshake.
                if !sess.received().is_empty() || sess.sniffed {
                    self.count(Kind::ClosedEarly);
                }
                return Interest::Close;
            }
            Ok(_) => {}
            // On a blocking socket the read timed out: the driver calls
            // `timed_out`, which counts it.
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Read(Wait::Request),
            Err(e) if e.kind() == ErrorKind::Interrupted => return Interest::Read(Wait::Request),
            Err(_) => {
                self.count(Kind::BadMessage);
                return Interest::Close;
            }
        }
        if !sess.sniffed {
            match sniff::first(sess.received()) {
                First::NeedMore => return Interest::Read(Wait::Request),
                First::PlainHttp => {
                    self.count(Kind::PlainHttp);
                    if !tls.plain_http_answer {
                        return Interest::Close;
                    }
                    let _ = s.send(PLAIN_HTTP_ANSWER, false);
                    return Interest::Linger;
                }
                First::Hello(Some(name)) if !tls.certs.knows(name) => {
                    self.count(Kind::UnknownName);
                    mpm_core::log_info!(
                        "mpm: TLS: {} asked for {name:?}, which no certificate names",
                        s.peer_addr()
                    );
                    let _ = s.send(&sniff::UNRECOGNIZED_NAME, false);
                    return Interest::Linger;
                }
                _ => sess.sniffed = true,
            }
        }
        if let Err(e) = sess.process(None) {
            self.count(Kind::of_error(&e));
            mpm_core::log_info!("mpm: TLS handshake with {} failed: {e}", s.peer_addr());
            sess.flush_once(s);
            return Interest::Close;
        }
        let done = !sess.is_handshaking();
        if done {
            self.count(if sess.resumed() {
                Kind::Resumed
            } else {
                Kind::Full
            });
            if sess.is_tls13() {
                self.count(Kind::Tls13);
            }
            sess.deadline = None;
        }
        match sess.flush(s, false) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && !s.is_blocking() => {
                sess.after = Some(Interest::Read(Wait::Request));
                return Interest::Write;
            }
            Err(_) => return Interest::Close,
        }
        if done && (sess.holds_plain() || sess.peer_closed) {
            // The client's first request came with its Finished.
            return self.inner_step(c, s, false);
        }
        Interest::Read(Wait::Request)
    }

    /// Run the inner handler's step with the session attached.
    fn inner_step(&mut self, c: &mut TlsConn<H::Conn>, s: &mut Stream, write: bool) -> Interest {
        let Some(sess) = c.session.take() else {
            return Interest::Close;
        };
        s.attach(sess);
        let interest = if write {
            self.inner.writable(&mut c.inner, s)
        } else {
            self.inner.readable(&mut c.inner, s)
        };
        if !self.take_back(c, s) {
            return Interest::Close;
        }
        self.finish(c, s, interest)
    }

    /// Take the session back from the stream.
    fn take_back(&self, c: &mut TlsConn<H::Conn>, s: &mut Stream) -> bool {
        c.session = s
            .detach()
            .and_then(|t| t.into_any().downcast::<Session>().ok());
        c.session.is_some()
    }

    /// After an inner step: send what it wrote (and close_notify if it
    /// closes); a socket that is full turns its answer into a wait to write.
    fn finish(&mut self, c: &mut TlsConn<H::Conn>, s: &mut Stream, i: Interest) -> Interest {
        let Some(sess) = c.session.as_mut() else {
            return Interest::Close;
        };
        if sess.failed.is_some() {
            sess.flush_once(s);
            return Interest::Close;
        }
        if matches!(i, Interest::Close | Interest::Linger) {
            sess.queue_close_notify();
        }
        match sess.flush(s, false) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && !s.is_blocking() => {
                sess.after = Some(i);
                return Interest::Write;
            }
            Err(_) => return Interest::Close,
        }
        s.hold_input(sess.holds_plain());
        i
    }
}

impl<H: ConnectionHandler> ConnectionHandler for TlsHandler<H> {
    type Conn = TlsConn<H::Conn>;

    fn connected(&mut self, stream: &Stream) -> Self::Conn {
        let inner = self.inner.connected(stream);
        let mut conn = TlsConn {
            inner,
            session: None,
            tls: false,
        };
        let Some(tls) = &self.tls else {
            return conn;
        };
        if !self.listeners.for_stream(stream) {
            return conn;
        }
        conn.tls = true;
        match Session::new(
            Arc::clone(&tls.config),
            Arc::clone(&self.pool),
            Instant::now().checked_add(tls.timeout),
        ) {
            Ok(sess) => conn.session = Some(Box::new(sess)),
            Err(e) => mpm_core::log_error!("mpm: TLS: cannot start a session: {e}"),
        }
        conn
    }

    fn readable(&mut self, c: &mut Self::Conn, s: &mut Stream) -> Interest {
        if !c.tls {
            return self.inner.readable(&mut c.inner, s);
        }
        match c.session.as_ref() {
            None => Interest::Close,
            Some(sess) if sess.is_handshaking() => self.handshake(c, s),
            Some(_) => self.inner_step(c, s, false),
        }
    }

    fn writable(&mut self, c: &mut Self::Conn, s: &mut Stream) -> Interest {
        if !c.tls {
            return self.inner.writable(&mut c.inner, s);
        }
        let Some(sess) = c.session.as_mut() else {
            return Interest::Close;
        };
        if let Some(after) = sess.after {
            match sess.flush(s, false) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock && !s.is_blocking() => {
                    return Interest::Write;
                }
                Err(_) => return Interest::Close,
            }
            sess.after = None;
            if after != Interest::Write {
                s.hold_input(sess.holds_plain());
                return after;
            }
        }
        if sess.is_handshaking() {
            return Interest::Read(Wait::Request);
        }
        self.inner_step(c, s, true)
    }

    fn timed_out(&mut self, c: &mut Self::Conn, s: &mut Stream) {
        if !c.tls {
            return self.inner.timed_out(&mut c.inner, s);
        }
        match c.session.take() {
            Some(sess) if sess.is_handshaking() => {
                self.count(Kind::Timeout);
                c.session = Some(sess);
            }
            Some(sess) => {
                // The inner protocol's last word (HTTP's 408), encrypted.
                s.attach(sess);
                self.inner.timed_out(&mut c.inner, s);
                if self.take_back(c, s) {
                    if let Some(sess) = c.session.as_mut() {
                        sess.queue_close_notify();
                        sess.flush_once(s);
                    }
                }
            }
            None => {}
        }
    }

    fn idle_at_stop(&mut self, c: &mut Self::Conn, s: &mut Stream) {
        if !c.tls {
            return self.inner.idle_at_stop(&mut c.inner, s);
        }
        match c.session.take() {
            // The inner protocol's last word (HTTP/2's GOAWAY), encrypted,
            // then close_notify.
            Some(sess) if !sess.is_handshaking() => {
                s.attach(sess);
                self.inner.idle_at_stop(&mut c.inner, s);
                if self.take_back(c, s) {
                    if let Some(sess) = c.session.as_mut() {
                        sess.queue_close_notify();
                        sess.flush_once(s);
                    }
                }
            }
            other => c.session = other,
        }
    }

    fn prefetch(&mut self, c: &mut Self::Conn, s: &mut Stream) -> Prefetch {
        if !c.tls {
            return self.inner.prefetch(&mut c.inner, s);
        }
        let Some(sess) = c.session.take() else {
            return Prefetch::Wait(Interest::Close);
        };
        // Handshakes are CPU work: never on the loop.
        if sess.is_handshaking() || sess.after.is_some() || sess.failed.is_some() {
            c.session = Some(sess);
            return Prefetch::Ready;
        }
        // Decrypting what arrived is a copy's worth of work: the loop does
        // it, and the inner protocol reads ahead as it would in plain.
        s.attach(sess);
        let p = self.inner.prefetch(&mut c.inner, s);
        if !self.take_back(c, s) {
            return Prefetch::Wait(Interest::Close);
        }
        let Some(sess) = c.session.as_ref() else {
            return Prefetch::Wait(Interest::Close);
        };
        if sess.failed.is_some() || sess.unsent() > 0 {
            return Prefetch::Ready; // a worker sends the alert, or the records
        }
        s.hold_input(sess.holds_plain());
        p
    }

    fn writes_without_blocking(&self, c: &Self::Conn) -> bool {
        if !c.tls {
            return self.inner.writes_without_blocking(&c.inner);
        }
        match c.session.as_ref() {
            None => true,
            // Encrypting a body is CPU work: workers do it, in parallel,
            // not the loop.
            Some(sess) => match sess.after {
                Some(Interest::Write) | None => false,
                // Only records of ours are left to send.
                Some(_) => true,
            },
        }
    }

    fn can_hand_over(&self, c: &Self::Conn) -> bool {
        let untouched = !c.tls || c.session.as_ref().is_some_and(|s| s.untouched());
        untouched && self.inner.can_hand_over(&c.inner)
    }

    fn hung_up(&mut self, c: &mut Self::Conn, s: &mut Stream) {
        // Nothing goes to a client that is gone: the inner protocol's log
        // lines only, with no session attached (it writes nothing).
        self.inner.hung_up(&mut c.inner, s);
    }

    fn parked(&mut self, c: &mut Self::Conn) {
        self.inner.parked(&mut c.inner);
        if let Some(sess) = c.session.as_mut() {
            sess.park();
        }
    }
}

impl Session {
    /// Is decrypted plaintext waiting for the inner handler?
    pub(crate) fn holds_plain(&self) -> bool {
        mpm_core::Transport::holds_input(self)
    }
}
