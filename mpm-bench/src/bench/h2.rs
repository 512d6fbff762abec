//! `mpm bench --h2`: the same load over HTTP/2, with prior knowledge (h2c)
//! on `http://` and chosen by ALPN over TLS on `https://`, `--streams`
//! requests in flight on each connection (h2load's `-m`), on `h2`'s client
//! side driven without a runtime: each client thread polls its connections
//! and their streams with a waker that does nothing, and sleeps in
//! `poll(2)` on their sockets when a pass moved nothing.
//!
//! Each request of the mix is the HTTP/1.1 request the engine would send,
//! parsed back (method, target, fields, body), so a workload means the same
//! over either protocol. Latency runs from the stream's HEADERS to its last
//! DATA frame. A connection that fails counts its streams as read errors
//! and is made again; a TLS handshake that fails is counted by kind, as the
//! HTTP/1.1 engine counts it, with a request of the budget failed for it.
//! A server that chooses `http/1.1` by ALPN, or answers the preface in
//! HTTP/1 on `http://` (no h2c), ends the run as refused: its answers would
//! be another protocol's figures.
//!
//! [`Held`] is one connection driven a request at a time, blocking: what
//! `mpm compare` holds idle HTTP/2 connections with.
//!
//! Client threads share nothing but `Progress`'s relaxed counters and its
//! refusal (one atomic load a pass): sixty-four of them, for a server of
//! 64 cores, take no lock between them.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{Connection, ResponseFuture, SendRequest};
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::engine::{Load, Progress};
use super::summary::{Recorder, Summary};
use super::tls::TlsClient;

/// A non-blocking socket as `h2` wants it, plain or TLS: `WouldBlock` is
/// `Pending` (the thread's pass polls again after `poll(2)`).
enum Sock {
    /// In clear, and whether the server's first bytes were an HTTP/1
    /// answer (`None` until they come).
    Plain(TcpStream, Arc<std::sync::OnceLock<bool>>),
    Tls(TcpStream, Box<rustls::ClientConnection>),
}

/// `WouldBlock` as `Pending`, anything else as it is.
fn ready<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        other => Poll::Ready(other),
    }
}

/// Send the records TLS has sealed, as far as the socket takes them.
fn flush_tls(sock: &mut TcpStream, tls: &mut rustls::ClientConnection) -> Poll<io::Result<()>> {
    while tls.wants_write() {
        match tls.write_tls(sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return ready(Err(e)),
        }
    }
    Poll::Ready(Ok(()))
}

impl AsyncRead for Sock {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let (sock, tls) = match &mut *self {
            Sock::Plain(s, http1) => {
                return ready(s.read(buf.initialize_unfilled())).map_ok(|n| {
                    buf.advance(n);
                    if n > 0 && http1.get().is_none() {
                        let _ = http1.set(buf.filled().starts_with(b"HTTP/"));
                    }
                });
            }
            Sock::Tls(s, tls) => (s, tls),
        };
        loop {
            // Plaintext already decrypted first; 0 is the peer's close_notify.
            match tls.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            match tls.read_tls(sock) {
                // The end of the socket: h2 sees the end of the stream.
                Ok(0) => return Poll::Ready(Ok(())),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        let _ = tls.write_tls(sock); // our alert
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut *self {
            Sock::Plain(s, _) => ready(s.write(b)),
            Sock::Tls(s, tls) => {
                // What is sealed goes first: the buffer stays one write deep.
                if flush_tls(s, tls)?.is_pending() {
                    return Poll::Pending;
                }
                let n = tls.writer().write(b)?;
                // Sent now if the socket takes it, else by the next flush.
                let _ = flush_tls(s, tls);
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut *self {
            Sock::Plain(..) => Poll::Ready(Ok(())),
            Sock::Tls(s, tls) => flush_tls(s, tls),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A request of the mix, as HTTP/2 sends it.
struct H2Request {
    head: http::Request<()>,
    body: Bytes,
}

/// Parse the engine's HTTP/1.1 bytes of a request back into its parts,
/// for `scheme://authority`.
fn h2_request(bytes: &[u8], scheme: &str, authority: &str) -> io::Result<H2Request> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return Err(io::Error::other("a request of the load does not parse")),
    };
    let mut head = http::Request::builder()
        .method(req.method.unwrap_or("GET"))
        .uri(format!("{scheme}://{authority}{}", req.path.unwrap_or("/")));
    for h in req.headers.iter() {
        // HTTP/1.1's own fields have no place in HTTP/2 (RFC 9113 §8.2.2).
        let own = [
            "host",
            "connection",
            "keep-alive",
            "transfer-encoding",
            "upgrade",
        ];
        if !own.iter().any(|o| h.name.eq_ignore_ascii_case(o)) {
            head = head.header(h.name, h.value);
        }
    }
    let head = head
        .body(())
        .map_err(|e| io::Error::other(format!("a request of the load: {e}")))?;
    Ok(H2Request {
        head,
        body: Bytes::copy_from_slice(&bytes[len..]),
    })
}

/// A stream in flight.
enum InFlight {
    Head {
        resp: ResponseFuture,
        r: usize,
        started: Instant,
    },
    Body {
        body: RecvStream,
        status: u16,
        got: u64,
        r: usize,
        started: Instant,
    },
}

/// One connection and its streams.
struct Conn {
    conn: Pin<Box<Connection<Sock, Bytes>>>,
    send: SendRequest<Bytes>,
    fd: OwnedFd,
    streams: Vec<InFlight>,
    /// Its TLS session was resumed (`--tls-resume`).
    resumed: bool,
    /// In clear: whether the server answered the preface in HTTP/1.
    http1: Arc<std::sync::OnceLock<bool>>,
}

/// Why a run over `http://` against a server answering the preface in
/// HTTP/1 (a 400 or a 505) ends: otherwise every stream would count as a
/// read error and nothing would say why.
const NO_H2C: &str = "--h2: the server answered the HTTP/2 preface in HTTP/1: it does not take \
                      HTTP/2 in clear with prior knowledge (h2c; mpm takes it with `--h2c on`); \
                      use an https:// URL for HTTP/2 over TLS";

impl Conn {
    /// Did the server answer the preface in HTTP/1?
    fn answered_http1(&self) -> bool {
        self.http1.get() == Some(&true)
    }
}

/// The stream and connection windows the client opens: 2^30 - 1 bytes,
/// as h2load's defaults.
const WINDOW: u32 = (1 << 30) - 1;

/// Why a connection could not be made.
pub(crate) enum ConnectError {
    /// TCP, or HTTP/2's own handshake (the preface and SETTINGS).
    Io(io::Error),
    /// The TLS handshake, by kind (as the summary counts them).
    Handshake(String),
    /// The server chose another protocol than `h2` by ALPN: why, in words.
    Refused(String),
}

/// The scheme and the TLS client of a load's connections: `https` offering
/// `h2` by ALPN, or `http` with prior knowledge.
fn scheme(tls: Option<&TlsClient>) -> (&'static str, Option<TlsClient>) {
    match tls {
        Some(t) => ("https", Some(t.offering_h2())),
        None => ("http", None),
    }
}

/// Run `load` over HTTP/2, `streams` in flight per connection.
pub(crate) fn run(load: &Load, progress: &Progress, streams: usize) -> io::Result<Summary> {
    let authority = load.addr.to_string();
    let (scheme, tls) = scheme(load.tls.as_ref());
    let requests: Vec<H2Request> = load
        .requests
        .iter()
        .map(|p| h2_request(&p.bytes, scheme, &authority))
        .collect::<io::Result<_>>()?;
    let requests = &requests;
    let tls = tls.as_ref();
    super::engine::on_threads(
        load,
        "bench-h2",
        &format!("{} (HTTP/2, {streams} streams per connection)", load.url),
        true,
        |(_, share), deadline| {
            client(
                load,
                progress,
                (requests, tls),
                (share, streams.max(1)),
                deadline,
            )
        },
    )
}

/// Connect, do TLS (ALPN `h2`, else refused) if `tls`, and hand-shake
/// HTTP/2, within `timeout`.
fn connect(
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    timeout: Duration,
) -> Result<Conn, ConnectError> {
    let io = ConnectError::Io;
    let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    sock.set_nodelay(true).map_err(io)?;
    let until = Instant::now() + timeout;
    let http1 = Arc::new(std::sync::OnceLock::new());
    let sock = match tls {
        None => Sock::Plain(sock, Arc::clone(&http1)),
        Some(t) => {
            // Blocking, bounded by what is left of the timeout: a
            // connection is made before its streams start.
            let mut c = rustls::ClientConnection::new(Arc::clone(&t.config), t.name.clone())
                .map_err(|e| ConnectError::Handshake(super::tls::kind(&e)))?;
            let left = until.saturating_duration_since(Instant::now());
            let left = left.max(Duration::from_millis(1));
            sock.set_read_timeout(Some(left)).map_err(io)?;
            sock.set_write_timeout(Some(left)).map_err(io)?;
            while c.is_handshaking() {
                if let Err(e) = c.complete_io(&mut sock) {
                    return Err(
                        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                            Some(tls) => ConnectError::Handshake(super::tls::kind(tls)),
                            None if e.kind() == io::ErrorKind::UnexpectedEof => {
                                ConnectError::Handshake("closed by the server".into())
                            }
                            None => ConnectError::Handshake(format!("io: {:?}", e.kind())),
                        },
                    );
                }
            }
            match c.alpn_protocol() {
                Some(b"h2") => {}
                other => {
                    let chose = match other {
                        Some(p) => format!("chose {} by ALPN", String::from_utf8_lossy(p)),
                        None => "chose no protocol by ALPN".to_string(),
                    };
                    return Err(ConnectError::Refused(format!(
                        "--h2: the server {chose}, not h2 (HTTP/2 over TLS is refused by \
                         `--http2 off`, and prefork offers HTTP/1.1 only)"
                    )));
                }
            }
            Sock::Tls(sock, Box::new(c))
        }
    };
    let resumed = matches!(&sock, Sock::Tls(_, c)
        if c.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
    let fd = match &sock {
        Sock::Plain(s, _) | Sock::Tls(s, _) => {
            s.set_nonblocking(true).map_err(io)?;
            s.as_fd().try_clone_to_owned().map_err(io)?
        }
    };
    // h2load's windows (its -w 30 -W 30): a large answer is not paced by
    // window updates, so the server's cost is measured, not the client's
    // round trips.
    let mut hs = Box::pin(
        h2::client::Builder::new()
            .initial_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .handshake::<Sock, Bytes>(sock),
    );
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match hs.as_mut().poll(&mut cx) {
            Poll::Ready(Ok((send, conn))) => {
                return Ok(Conn {
                    conn: Box::pin(conn),
                    send,
                    fd,
                    streams: Vec::new(),
                    resumed,
                    http1,
                })
            }
            Poll::Ready(Err(e)) => return Err(io(io::Error::other(e))),
            Poll::Pending if Instant::now() >= until => {
                return Err(io(io::ErrorKind::TimedOut.into()))
            }
            Poll::Pending => wait(&[&fd], Duration::from_millis(1)),
        }
    }
}

/// Sleep in `poll(2)` until one of `fds` is readable, at most `max`.
fn wait(fds: &[&OwnedFd], max: Duration) {
    let mut set: Vec<nix::poll::PollFd<'_>> = fds
        .iter()
        .map(|fd| nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN))
        .collect();
    let ms = u16::try_from(max.as_millis()).unwrap_or(u16::MAX);
    let _ = nix::poll::poll(&mut set, nix::poll::PollTimeout::from(ms));
}

/// One thread's connections, driven to the run's end.
fn client(
    load: &Load,
    progress: &Progress,
    (requests, tls): (&[H2Request], Option<&TlsClient>),
    (connections, streams): (usize, usize),
    deadline: Option<Instant>,
) -> io::Result<Recorder> {
    let mut rec = Recorder::new(load.requests.len());
    let mut conns: Vec<Option<Conn>> = (0..connections).map(|_| None).collect();
    let mut cx = Context::from_waker(Waker::noop());
    let mut next = 0usize;
    let mut starting = true;
    loop {
        let mut moved = false;
        let mut open = 0;
        for slot in &mut conns {
            if progress.refused().is_some() {
                return Ok(rec);
            }
            if slot.is_none() && starting {
                match connect(load.addr, tls, load.timeout) {
                    Ok(c) => {
                        progress.connected(Ok(()));
                        rec.connections += 1;
                        rec.resumed += u64::from(c.resumed);
                        *slot = Some(c);
                    }
                    Err(ConnectError::Io(e)) => {
                        progress.connected(Err(&e));
                        rec.errors.connect += 1;
                        if progress.nothing_connects(load.connections) {
                            return Ok(rec);
                        }
                        continue;
                    }
                    Err(ConnectError::Handshake(kind)) => {
                        // The connection was made; TLS failed on it. A
                        // request of the budget fails with it, so that a
                        // server that always fails still ends an `-n` run.
                        progress.connected(Ok(()));
                        rec.connections += 1;
                        rec.handshake_error(kind);
                        if progress.may_start(load.limit, deadline) {
                            let r = load.schedule[next % load.schedule.len()];
                            next += 1;
                            rec.failed(r);
                            progress
                                .finished
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        } else {
                            starting = false;
                        }
                        continue;
                    }
                    Err(ConnectError::Refused(why)) => {
                        progress.connected(Ok(()));
                        progress.refuse(why);
                        return Ok(rec);
                    }
                }
            }
            let Some(c) = slot else { continue };
            // New streams, as many as the budget and the connection allow.
            while starting && c.streams.len() < streams {
                match c.send.poll_ready(&mut cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) | Poll::Pending => break,
                }
                if !progress.may_start(load.limit, deadline) {
                    starting = false;
                    break;
                }
                let r = load.schedule[next % load.schedule.len()];
                next += 1;
                let req = &requests[r];
                let end = req.body.is_empty();
                match c.send.send_request(req.head.clone(), end) {
                    Ok((resp, mut body)) => {
                        if !end {
                            let _ = body.send_data(req.body.clone(), true);
                        }
                        c.streams.push(InFlight::Head {
                            resp,
                            r,
                            started: Instant::now(),
                        });
                        moved = true;
                    }
                    Err(_) => {
                        rec.errors.read += 1;
                        rec.failed(r);
                        progress
                            .finished
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        break;
                    }
                }
            }
            // Driven; ready only once it ended (failed, or closed by the server).
            let broken = c.conn.as_mut().poll(&mut cx).is_ready();
            if broken && c.answered_http1() {
                progress.refuse(NO_H2C.to_string());
                return Ok(rec);
            }
            let now = Instant::now();
            let mut i = 0;
            while i < c.streams.len() {
                let done = step(&mut c.streams[i], &mut cx, load, &mut rec, now);
                match done {
                    Step::Pending => i += 1,
                    Step::Moved => {
                        moved = true;
                        i += 1;
                    }
                    Step::Finished => {
                        moved = true;
                        c.streams.swap_remove(i);
                        progress
                            .finished
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            if broken {
                // Its streams failed; it is made again on the next pass.
                for s in c.streams.drain(..) {
                    let (InFlight::Head { r, .. } | InFlight::Body { r, .. }) = s;
                    rec.errors.read += 1;
                    rec.failed(r);
                    progress
                        .finished
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                *slot = None;
                moved = true;
                continue;
            }
            open += c.streams.len();
        }
        if !starting && open == 0 {
            return Ok(rec);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // A duration's end: what is in flight is not counted.
            return Ok(rec);
        }
        if !moved {
            let fds: Vec<&OwnedFd> = conns.iter().flatten().map(|c| &c.fd).collect();
            wait(&fds, Duration::from_millis(1));
        }
    }
}

/// What a stream's turn came to.
enum Step {
    Pending,
    Moved,
    Finished,
}

/// Poll one stream: its head, then its body; a timeout fails it.
fn step(
    s: &mut InFlight,
    cx: &mut Context<'_>,
    load: &Load,
    rec: &mut Recorder,
    now: Instant,
) -> Step {
    let (r, started) = match s {
        InFlight::Head { r, started, .. } | InFlight::Body { r, started, .. } => (*r, *started),
    };
    if now.duration_since(started) > load.timeout {
        rec.errors.timeout += 1;
        rec.failed(r);
        return Step::Finished;
    }
    let mut moved = false;
    loop {
        match s {
            InFlight::Head { resp, .. } => match Pin::new(resp).poll(cx) {
                Poll::Pending => return if moved { Step::Moved } else { Step::Pending },
                Poll::Ready(Err(_)) => {
                    rec.errors.read += 1;
                    rec.failed(r);
                    return Step::Finished;
                }
                Poll::Ready(Ok(answer)) => {
                    let status = answer.status().as_u16();
                    *s = InFlight::Body {
                        body: answer.into_body(),
                        status,
                        got: 0,
                        r,
                        started,
                    };
                    moved = true;
                }
            },
            InFlight::Body {
                body, status, got, ..
            } => match body.poll_data(cx) {
                Poll::Pending => return if moved { Step::Moved } else { Step::Pending },
                Poll::Ready(Some(Ok(data))) => {
                    *got += data.len() as u64;
                    let _ = body.flow_control().release_capacity(data.len());
                    moved = true;
                }
                Poll::Ready(Some(Err(_))) => {
                    rec.errors.read += 1;
                    rec.failed(r);
                    return Step::Finished;
                }
                Poll::Ready(None) => {
                    let expected = load.requests[r].expect.accepts(*status);
                    rec.response(r, *status, *got, Instant::now() - started, expected);
                    return Step::Finished;
                }
            },
        }
    }
}

/// One HTTP/2 connection driven a request at a time, blocking: what
/// `mpm compare` holds idle HTTP/2 connections with (each has sent the
/// preface, its SETTINGS and a request, read the answer, and then sends
/// nothing until it is served again).
pub(crate) struct Held {
    conn: Conn,
    scheme: &'static str,
    authority: String,
}

impl Held {
    /// Connect to `addr` (over `tls`, offering `h2` by ALPN) and hand-shake,
    /// within `timeout`.
    pub(crate) fn connect(
        addr: SocketAddr,
        tls: Option<&TlsClient>,
        timeout: Duration,
    ) -> Result<Held, ConnectError> {
        let (scheme, tls) = scheme(tls);
        Ok(Held {
            conn: connect(addr, tls.as_ref(), timeout)?,
            scheme,
            authority: addr.to_string(),
        })
    }

    /// Send `request` (as the engine's HTTP/1.1 bytes) on a stream of its
    /// own and read the whole answer: its status, or `None` when the
    /// connection or the stream failed, or `timeout` passed.
    pub(crate) fn exchange(&mut self, request: &[u8], timeout: Duration) -> Option<u16> {
        let req = h2_request(request, self.scheme, &self.authority).ok()?;
        let c = &mut self.conn;
        let mut cx = Context::from_waker(Waker::noop());
        let until = Instant::now() + timeout;
        let mut stream: Option<InFlight> = None;
        loop {
            // Ready only once it ended: closed, or failed.
            if c.conn.as_mut().poll(&mut cx).is_ready() {
                return None;
            }
            let moved = match &mut stream {
                None => match c.send.poll_ready(&mut cx) {
                    Poll::Ready(Ok(())) => {
                        let end = req.body.is_empty();
                        let (resp, mut body) = c.send.send_request(req.head.clone(), end).ok()?;
                        if !end {
                            body.send_data(req.body.clone(), true).ok()?;
                        }
                        stream = Some(InFlight::Head {
                            resp,
                            r: 0,
                            started: Instant::now(),
                        });
                        true
                    }
                    Poll::Ready(Err(_)) => return None,
                    Poll::Pending => false,
                },
                Some(InFlight::Head { resp, .. }) => match Pin::new(resp).poll(&mut cx) {
                    Poll::Ready(Ok(answer)) => {
                        let status = answer.status().as_u16();
                        stream = Some(InFlight::Body {
                            body: answer.into_body(),
                            status,
                            got: 0,
                            r: 0,
                            started: Instant::now(),
                        });
                        true
                    }
                    Poll::Ready(Err(_)) => return None,
                    Poll::Pending => false,
                },
                Some(InFlight::Body { body, status, .. }) => match body.poll_data(&mut cx) {
                    Poll::Ready(Some(Ok(data))) => {
                        let _ = body.flow_control().release_capacity(data.len());
                        true
                    }
                    Poll::Ready(Some(Err(_))) => return None,
                    Poll::Ready(None) => {
                        let status = *status;
                        // Once more, so that what the answer asked of the
                        // connection (acknowledgements, window updates)
                        // is sent before it sits idle.
                        let _ = c.conn.as_mut().poll(&mut cx);
                        return Some(status);
                    }
                    Poll::Pending => false,
                },
            };
            if !moved {
                if Instant::now() >= until {
                    return None;
                }
                wait(&[&c.fd], Duration::from_millis(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::h2_request;

    #[test]
    fn a_load_s_request_keeps_its_method_target_fields_and_body_over_http2() {
        let bytes = b"POST /api?x=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nConnection: close\r\n\
                      Content-Length: 2\r\n\r\nhi";
        let r = h2_request(bytes, "http", "127.0.0.1:80").expect("parses");
        assert_eq!(r.head.method(), "POST");
        assert_eq!(r.head.uri(), "http://127.0.0.1:80/api?x=1");
        assert_eq!(r.head.headers()["x-a"], "1");
        assert!(!r.head.headers().contains_key("connection"));
        assert!(!r.head.headers().contains_key("host"));
        assert_eq!(&r.body[..], b"hi");
    }
}
