//! `mpm bench --h2`: the same load over HTTP/2 with prior knowledge (h2c),
//! `--streams` requests in flight on each connection (h2load's `-m`), on
//! `h2`'s client side driven without a runtime: each client thread polls
//! its connections and their streams with a waker that does nothing, and
//! sleeps in `poll(2)` on their sockets when a pass moved nothing.
//!
//! Each request of the mix is the HTTP/1.1 request the engine would send,
//! parsed back (method, target, fields, body), so a workload means the same
//! over either protocol. Latency runs from the stream's HEADERS to its last
//! DATA frame. A connection that fails counts its streams as read errors
//! and is made again.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::{Connection, ResponseFuture, SendRequest};
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::engine::{Load, Progress};
use super::summary::{Recorder, Summary};

/// A non-blocking socket as `h2` wants it: `WouldBlock` is `Pending` (the
/// thread's pass polls again after `poll(2)`).
struct Sock(TcpStream);

impl AsyncRead for Sock {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.read(buf.initialize_unfilled()) {
            Ok(n) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.write(b) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            other => Poll::Ready(other),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
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

/// Parse the engine's HTTP/1.1 bytes of a request back into its parts.
fn h2_request(bytes: &[u8], authority: &str) -> io::Result<H2Request> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return Err(io::Error::other("a request of the load does not parse")),
    };
    let mut head = http::Request::builder()
        .method(req.method.unwrap_or("GET"))
        .uri(format!("http://{authority}{}", req.path.unwrap_or("/")));
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
    fd: std::os::fd::OwnedFd,
    streams: Vec<InFlight>,
}

/// Run `load` over HTTP/2, `streams` in flight per connection.
pub(crate) fn run(load: &Load, progress: &Progress, streams: usize) -> io::Result<Summary> {
    let authority = load.addr.to_string();
    let requests: Vec<H2Request> = load
        .requests
        .iter()
        .map(|p| h2_request(&p.bytes, &authority))
        .collect::<io::Result<_>>()?;
    let requests = &requests;
    super::engine::on_threads(
        load,
        "bench-h2",
        &format!("{} (HTTP/2, {streams} streams per connection)", load.url),
        true,
        |(_, share), deadline| client(load, progress, requests, (share, streams.max(1)), deadline),
    )
}

/// Connect and hand-shake (prior knowledge), within `timeout`.
fn connect(load: &Load, timeout: Duration) -> io::Result<Conn> {
    let sock = TcpStream::connect_timeout(&load.addr, timeout)?;
    sock.set_nodelay(true)?;
    sock.set_nonblocking(true)?;
    let fd = sock.as_fd().try_clone_to_owned()?;
    let mut hs = Box::pin(h2::client::handshake::<Sock>(Sock(sock)));
    let mut cx = Context::from_waker(Waker::noop());
    let until = Instant::now() + timeout;
    loop {
        match hs.as_mut().poll(&mut cx) {
            Poll::Ready(Ok((send, conn))) => {
                return Ok(Conn {
                    conn: Box::pin(conn),
                    send,
                    fd,
                    streams: Vec::new(),
                })
            }
            Poll::Ready(Err(e)) => return Err(io::Error::other(e)),
            Poll::Pending if Instant::now() >= until => return Err(io::ErrorKind::TimedOut.into()),
            Poll::Pending => wait(&[&fd], Duration::from_millis(1)),
        }
    }
}

/// Sleep in `poll(2)` until one of `fds` is readable, at most `max`.
fn wait(fds: &[&std::os::fd::OwnedFd], max: Duration) {
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
    requests: &[H2Request],
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
            if slot.is_none() && starting {
                match connect(load, load.timeout) {
                    Ok(c) => {
                        progress.connected(Ok(()));
                        rec.connections += 1;
                        *slot = Some(c);
                    }
                    Err(e) => {
                        progress.connected(Err(&e));
                        rec.errors.connect += 1;
                        if progress.nothing_connects(load.connections) {
                            return Ok(rec);
                        }
                        continue;
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
            let fds: Vec<&std::os::fd::OwnedFd> = conns.iter().flatten().map(|c| &c.fd).collect();
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

#[cfg(test)]
mod tests {
    use super::h2_request;

    #[test]
    fn a_load_s_request_keeps_its_method_target_fields_and_body_over_http2() {
        let bytes = b"POST /api?x=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nConnection: close\r\n\
                      Content-Length: 2\r\n\r\nhi";
        let r = h2_request(bytes, "127.0.0.1:80").expect("parses");
        assert_eq!(r.head.method(), "POST");
        assert_eq!(r.head.uri(), "http://127.0.0.1:80/api?x=1");
        assert_eq!(r.head.headers()["x-a"], "1");
        assert!(!r.head.headers().contains_key("connection"));
        assert!(!r.head.headers().contains_key("host"));
        assert_eq!(&r.body[..], b"hi");
    }
}
