//! The in-memory pipe between `h2`'s client and our codec, and a small
//! server on the codec: `GET /size/N` answers N octets of `x`, `POST`
//! answers the body's length and octet sum (and its trailers, ` name=value`
//! each), any other GET its method and
//! path; `hold` keeps answers back until `release_held`.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use mpm_h2::{Connection, Event, Reason, Settings};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Octets in flight each way.
#[derive(Default)]
pub struct Wire {
    pub to_server: Vec<u8>,
    pub to_client: Vec<u8>,
    pub closed: bool,
}

/// The client's end of the pipe.
pub struct ClientIo(pub Rc<RefCell<Wire>>);

/// The server's end of the pipe (for `h2`'s own server, which the bench
/// measures ours against).
pub struct ServerIo(pub Rc<RefCell<Wire>>);

/// A read from one direction of the wire: what is there, else the end
/// once `closed` (only the client sees the server close), else pending.
fn read_from(queue: &mut Vec<u8>, closed: bool, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
    if queue.is_empty() {
        return if closed {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        };
    }
    let n = buf.remaining().min(queue.len());
    buf.put_slice(&queue[..n]);
    queue.drain(..n);
    Poll::Ready(Ok(()))
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let w = &mut *self.0.borrow_mut();
        read_from(&mut w.to_client, w.closed, buf)
    }
}

impl AsyncRead for ServerIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        read_from(&mut self.0.borrow_mut().to_server, false, buf)
    }
}

/// Writes append to one direction of the wire and never wait.
macro_rules! writes_to {
    ($end:ty, $queue:ident) => {
        impl AsyncWrite for $end {
            fn poll_write(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
                b: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.0.borrow_mut().$queue.extend_from_slice(b);
                Poll::Ready(Ok(b.len()))
            }
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
    };
}
writes_to!(ClientIo, to_server);
writes_to!(ServerIo, to_client);

/// A frame: its 9-octet header (length, `kind`, `flags`, `stream`) and
/// `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A response being sent: what is left of its body.
struct Pending {
    body: Vec<u8>,
    sent: usize,
}

/// A small server on our codec.
pub struct Server {
    pub conn: Connection,
    input: Vec<u8>,
    posts: HashMap<u32, (usize, u64, String)>,
    pending: HashMap<u32, Pending>,
    pub hold: bool,
    pub held: Vec<(u32, Vec<u8>)>,
    pub resets: Vec<(u32, Reason)>,
    pub error: Option<mpm_h2::Error>,
}

impl Server {
    pub fn new(settings: Settings) -> Server {
        Server {
            conn: Connection::new(settings),
            input: Vec::new(),
            posts: HashMap::new(),
            pending: HashMap::new(),
            hold: false,
            held: Vec::new(),
            resets: Vec::new(),
            error: None,
        }
    }

    /// Read what the client wrote, answer, write back.
    pub fn step(&mut self, wire: &RefCell<Wire>) {
        {
            let mut w = wire.borrow_mut();
            self.input.extend_from_slice(&w.to_server);
            w.to_server.clear();
        }
        if self.error.is_none() {
            match self.conn.recv(&self.input) {
                Ok(n) => {
                    self.events();
                    self.input.drain(..n);
                }
                Err(e) => self.error = Some(e),
            }
        }
        self.send_pending();
        let mut w = wire.borrow_mut();
        self.conn.write_to(&mut w.to_client);
        if self.error.is_some() || self.conn.is_done() {
            w.closed = true;
        }
    }

    fn events(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            match e {
                Event::Request {
                    stream,
                    head,
                    end_stream,
                } => {
                    let method = String::from_utf8(head.method().to_vec()).unwrap();
                    let path = String::from_utf8(head.path().unwrap().to_vec()).unwrap();
                    if method == "POST" {
                        self.posts.insert(stream, (0, 0, String::new()));
                        if end_stream {
                            self.answer_post(stream);
                        }
                    } else if path == "/fields" {
                        self.answer_fields(stream);
                    } else if let Some(n) = path.strip_prefix("/size/") {
                        self.answer(stream, vec![b'x'; n.parse().unwrap()]);
                    } else {
                        self.answer(stream, format!("{method} {path}").into_bytes());
                    }
                }
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => {
                    let bytes = &self.input[data.clone()];
                    if let Some(p) = self.posts.get_mut(&stream) {
                        p.0 += bytes.len();
                        p.1 += bytes.iter().map(|&b| u64::from(b)).sum::<u64>();
                    }
                    self.conn.release_capacity(stream, data.len());
                    if end_stream {
                        self.answer_post(stream);
                    }
                }
                Event::Reset { stream, reason } => {
                    self.resets.push((stream, reason));
                    self.pending.remove(&stream);
                }
                Event::Trailers { stream, fields } => {
                    if let Some(p) = self.posts.get_mut(&stream) {
                        for (n, v) in fields.iter() {
                            p.2.push_str(&format!(
                                " {}={}",
                                String::from_utf8_lossy(n),
                                String::from_utf8_lossy(v)
                            ));
                        }
                    }
                    self.answer_post(stream);
                }
                Event::SendCapacity { .. } | Event::GoAway { .. } => {}
                Event::HeadersTooLarge { stream } => {
                    self.conn.send_headers(stream, 431, &[], true).unwrap();
                }
            }
        }
    }

    fn answer_post(&mut self, stream: u32) {
        if let Some((len, sum, trailers)) = self.posts.remove(&stream) {
            self.answer(stream, format!("POST {len} {sum}{trailers}").into_bytes());
        }
    }

    /// A head written a field at a time: names in any case, values
    /// written in place (one past 127 octets, whose length takes two);
    /// a first attempt dropped unfinished, which sends nothing.
    fn answer_fields(&mut self, stream: u32) {
        {
            let mut dropped = self.conn.start_headers(stream, 500, true).unwrap();
            dropped.field(b"x-dropped", b"1");
        }
        let mut head = self.conn.start_headers(stream, 200, false).unwrap();
        head.field(b"Content-Type", b"text/plain")
            .field(b"X-Mixed-Case", b"yes")
            .field_with(b"x-long", |out| out.extend_from_slice(&[b'l'; 300]))
            .field_with(b"Date", |out| {
                out.extend_from_slice(b"Sun, 06 Nov 1994 08:49:37 GMT");
            })
            .field_with(b"content-length", |out| out.extend_from_slice(b"2"));
        head.finish().unwrap();
        self.pending.insert(
            stream,
            Pending {
                body: b"ok".to_vec(),
                sent: 0,
            },
        );
    }

    fn answer(&mut self, stream: u32, body: Vec<u8>) {
        if self.hold {
            self.held.push((stream, body));
            return;
        }
        let len = body.len().to_string();
        self.conn
            .send_headers(stream, 200, &[(b"content-length", len.as_bytes())], false)
            .unwrap();
        self.pending.insert(stream, Pending { body, sent: 0 });
    }

    pub fn release_held(&mut self) {
        for (stream, body) in std::mem::take(&mut self.held) {
            self.answer(stream, body);
        }
    }

    fn send_pending(&mut self) {
        let mut done = Vec::new();
        for (&stream, p) in &mut self.pending {
            match self.conn.send_data(stream, &p.body[p.sent..], true) {
                Ok(n) => {
                    p.sent += n;
                    if p.sent == p.body.len() {
                        done.push(stream);
                    }
                }
                Err(_) => done.push(stream),
            }
        }
        for s in done {
            self.pending.remove(&s);
        }
    }
}

/// `h2`'s client and our server, stepped in turn.
pub struct Driver {
    pub wire: Rc<RefCell<Wire>>,
    pub server: Server,
    pub conn: Pin<Box<h2::client::Connection<ClientIo, Bytes>>>,
    pub send: h2::client::SendRequest<Bytes>,
    pub ended: bool,
}

const ROUNDS: usize = 100_000;

impl Driver {
    /// Connect; `window`: the client's stream and connection windows.
    pub fn new(settings: Settings, window: Option<u32>) -> Driver {
        let wire = Rc::new(RefCell::new(Wire::default()));
        let mut server = Server::new(settings);
        let mut b = h2::client::Builder::new();
        if let Some(w) = window {
            b.initial_window_size(w).initial_connection_window_size(w);
        }
        let mut hs = pin!(b.handshake::<ClientIo, Bytes>(ClientIo(wire.clone())));
        let mut cx = Context::from_waker(Waker::noop());
        let (send, conn) = loop {
            if let Poll::Ready(r) = hs.as_mut().poll(&mut cx) {
                break r.unwrap();
            }
            server.step(&wire);
        };
        Driver {
            wire,
            server,
            conn: Box::pin(conn),
            send,
            ended: false,
        }
    }

    /// One round: the client's connection, then the server.
    pub fn run_once(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        if !self.ended && self.conn.as_mut().poll(&mut cx).is_ready() {
            self.ended = true;
        }
        self.server.step(&self.wire);
    }

    /// Rounds until `f` is ready (at most ROUNDS, or a panic).
    pub fn run<T>(&mut self, f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
        self.run_bounded(f).expect("the exchange did not finish")
    }

    /// Rounds until `f` is ready; None when it never is.
    pub fn run_bounded<T>(&mut self, mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> Option<T> {
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..ROUNDS {
            self.run_once();
            if let Poll::Ready(t) = f(&mut cx) {
                return Some(t);
            }
            if self.ended && self.wire.borrow().to_client.is_empty() {
                // One last look after the connection ended.
                return match f(&mut cx) {
                    Poll::Ready(t) => Some(t),
                    Poll::Pending => None,
                };
            }
        }
        None
    }

    /// Send a request (with `body` in one go, if any).
    pub fn start(
        &mut self,
        method: &str,
        path: &str,
        body: Option<Bytes>,
    ) -> h2::client::ResponseFuture {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://example{path}"))
            .body(())
            .unwrap();
        let mut send = self.send.clone();
        self.run(|cx| send.poll_ready(cx)).unwrap();
        let (resp, mut stream) = send.send_request(req, body.is_none()).unwrap();
        if let Some(b) = body {
            stream.send_data(b, true).unwrap();
        }
        resp
    }

    /// The response's status and whole body.
    pub fn finish(&mut self, resp: h2::client::ResponseFuture) -> (u16, Vec<u8>) {
        let (status, _, body) = self.finish_with_headers(resp);
        (status, body)
    }

    /// Status, header fields and body of a response.
    pub fn finish_with_headers(
        &mut self,
        resp: h2::client::ResponseFuture,
    ) -> (u16, http::HeaderMap, Vec<u8>) {
        let mut resp = pin!(resp);
        let r = self.run(|cx| resp.as_mut().poll(cx)).unwrap();
        let status = r.status().as_u16();
        let (head, mut body) = r.into_parts();
        let mut out = Vec::new();
        loop {
            let next = self.run(|cx| body.poll_data(cx));
            match next {
                Some(Ok(chunk)) => {
                    body.flow_control().release_capacity(chunk.len()).unwrap();
                    out.extend_from_slice(&chunk);
                }
                Some(Err(e)) => panic!("body: {e}"),
                None => break,
            }
        }
        (status, head.headers, out)
    }
}
