//! An origin server for the reverse-proxy tests: HTTP/1.1 on
//! `127.0.0.1:0`, on std threads, in the test process. It records every
//! request head it receives (so a test asserts what reached it), counts the
//! connections it accepted, and answers each path from a script the test
//! gives ([`Script`]): a status, fields and a body, chunked or not, after a
//! delay; or held until [`Origin::release`]; or misbehaving (bytes cut
//! short, garbage, one byte a second); or a `101` and an echo; or events
//! with pauses between them (server-sent events).
//!
//! A request held until release holds no thread: its connection is put
//! aside with what it is to be answered, and a thread is made for it again
//! when it is released. So a thousand requests parked at the origin cost
//! the test process a thousand sockets, not a thousand threads.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest request head the origin reads.
const MAX_HEAD: usize = 256 * 1024;
/// How much of each request body is kept for [`Seen::body`].
const KEEP_BODY: usize = 1 << 20;
/// How long a connection thread waits for a next request, or a held
/// step for its release, before giving up: tests end well before.
const IDLE: Duration = Duration::from_secs(60);
/// Stack of a connection thread: it holds buffers on the heap only.
const STACK: usize = 256 * 1024;

/// A request as it reached the origin.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The request target, as sent (`/a/b?q`).
    pub target: String,
    /// `HTTP/1.1` or `HTTP/1.0`.
    pub version: String,
    /// The header fields, in order, as sent.
    pub headers: Vec<(String, String)>,
    /// The first MiB of the body.
    pub body: Vec<u8>,
    /// The body's whole length.
    pub body_len: u64,
    /// Did the body reach its end as framed (not cut by a close)?
    pub body_ended: bool,
    /// The connection's peer (the proxy's side).
    pub peer: SocketAddr,
    /// Which accepted connection (1 for the first) it came on.
    pub connection: usize,
}

impl Seen {
    /// The first value of a field (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::field(&self.headers, name)
    }

    /// Did the request carry this field?
    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// The target's path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// One step of an answer sent as pieces ([`Script::steps`]).
#[derive(Debug, Clone)]
pub enum Step {
    /// Send these bytes (a chunk, if the answer is chunked).
    Send(Vec<u8>),
    /// Wait this long.
    Pause(Duration),
    /// Wait until [`Origin::release`] is called.
    Hold,
}

/// How a scripted answer's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// `Content-Length`, computed by the origin.
    Length,
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body ends when the origin closes the connection.
    Close,
}

#[derive(Debug, Clone)]
enum Body {
    Bytes(Vec<u8>),
    /// `block` repeated to `len` bytes, written without building them.
    Repeat(Arc<Vec<u8>>, u64),
    Steps(Vec<Step>),
}

#[derive(Debug, Clone)]
enum Act {
    Respond {
        status: u16,
        reason: String,
        headers: Vec<(String, String)>,
        body: Body,
        framing: Framing,
        cut_after: Option<u64>,
    },
    /// Write the bytes, then close.
    Raw(Vec<u8>),
    /// Write the bytes one at a time, `every` apart, then close.
    Trickle(Vec<u8>, Duration),
    /// Write each step's bytes as they are, pausing between them, then
    /// close.
    RawSteps(Vec<Step>),
    /// Answer 101 with these fields, then echo every byte back.
    Echo(Vec<(String, String)>),
    /// Close without a byte.
    Hang,
}

/// What the origin answers on a path ([`Origin::on`]). Built as
/// `Script::new(200).header("ETag", "\"v1\"").body(b"...")`.
///
/// A [`new`](Script::new) answer honours a request's `If-None-Match` (a
/// `304` when it names the answer's `ETag`) and, when the answer has
/// `Accept-Ranges: bytes`, a single `Range: bytes=A-B` (a `206`), and
/// sends no body to `HEAD`, so that conditional and partial answers are
/// the origin's to give, as the proxy must pass them.
#[derive(Debug, Clone)]
pub struct Script {
    act: Act,
    delay: Duration,
    hold: bool,
}

impl Script {
    /// `status`, no fields but the framing, an empty body.
    pub fn new(status: u16) -> Script {
        Script {
            act: Act::Respond {
                status,
                reason: reason_phrase(status).to_string(),
                headers: Vec::new(),
                body: Body::Bytes(Vec::new()),
                framing: Framing::Length,
                cut_after: None,
            },
            delay: Duration::ZERO,
            hold: false,
        }
    }

    /// `200` with this body.
    pub fn ok(body: &[u8]) -> Script {
        Script::new(200).body(body)
    }

    /// Write these bytes, whatever they are, and close.
    pub fn raw(bytes: &[u8]) -> Script {
        Script {
            act: Act::Raw(bytes.to_vec()),
            delay: Duration::ZERO,
            hold: false,
        }
    }

    /// Write these bytes one at a time, `every` apart, and close.
    pub fn trickle(bytes: &[u8], every: Duration) -> Script {
        Script {
            act: Act::Trickle(bytes.to_vec(), every),
            delay: Duration::ZERO,
            hold: false,
        }
    }

    /// Write these steps' bytes, whatever they are, with the pauses
    /// between them (interim answers spaced out, say), and close.
    pub fn raw_steps(steps: Vec<Step>) -> Script {
        Script {
            act: Act::RawSteps(steps),
            delay: Duration::ZERO,
            hold: false,
        }
    }

    /// Close the connection without answering.
    pub fn hang_up() -> Script {
        Script {
            act: Act::Hang,
            delay: Duration::ZERO,
            hold: false,
        }
    }

    /// Answer `101 Switching Protocols` (`Upgrade` and `Connection:
    /// Upgrade`, and `Sec-WebSocket-Accept` for any key), then echo every
    /// byte received until the peer closes.
    pub fn websocket_echo() -> Script {
        Script {
            act: Act::Echo(vec![
                ("Upgrade".into(), "websocket".into()),
                ("Connection".into(), "Upgrade".into()),
                (
                    "Sec-WebSocket-Accept".into(),
                    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into(),
                ),
            ]),
            delay: Duration::ZERO,
            hold: false,
        }
    }

    /// Add a field.
    pub fn header(mut self, name: &str, value: &str) -> Script {
        if let Act::Respond { headers, .. } = &mut self.act {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    /// The body.
    pub fn body(mut self, bytes: &[u8]) -> Script {
        if let Act::Respond { body, .. } = &mut self.act {
            *body = Body::Bytes(bytes.to_vec());
        }
        self
    }

    /// A body of `len` bytes: `block` over and over (a gibibyte costs no
    /// memory to send).
    pub fn repeat(mut self, block: Arc<Vec<u8>>, len: u64) -> Script {
        if let Act::Respond { body, .. } = &mut self.act {
            *body = Body::Repeat(block, len);
        }
        self
    }

    /// A body sent as these steps (chunked unless [`close_delimited`]):
    /// events with pauses between them.
    ///
    /// [`close_delimited`]: Script::close_delimited
    pub fn steps(mut self, steps: Vec<Step>) -> Script {
        if let Act::Respond { body, framing, .. } = &mut self.act {
            *body = Body::Steps(steps);
            if *framing == Framing::Length {
                *framing = Framing::Chunked;
            }
        }
        self
    }

    /// Send the body chunked, a chunk per step (or per 16 KiB).
    pub fn chunked(mut self) -> Script {
        if let Act::Respond { framing, .. } = &mut self.act {
            *framing = Framing::Chunked;
        }
        self
    }

    /// Send the body without a length, and close after it.
    pub fn close_delimited(mut self) -> Script {
        if let Act::Respond { framing, .. } = &mut self.act {
            *framing = Framing::Close;
        }
        self
    }

    /// Announce the whole body, but close after `n` of its bytes.
    pub fn cut_after(mut self, n: u64) -> Script {
        if let Act::Respond { cut_after, .. } = &mut self.act {
            *cut_after = Some(n);
        }
        self
    }

    /// Answer only after `d`.
    pub fn delay(mut self, d: Duration) -> Script {
        self.delay = d;
        self
    }

    /// Answer only once [`Origin::release`] is called (the request is
    /// recorded first; no thread waits meanwhile).
    pub fn hold(mut self) -> Script {
        self.hold = true;
        self
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

/// A connection put aside until [`Origin::release`], with the request it
/// is to answer.
struct Parked {
    conn: Conn,
    seen: Seen,
    script: Script,
}

#[derive(Default)]
struct Shared {
    scripts: Mutex<Vec<(String, Script)>>,
    seen: Mutex<Vec<Seen>>,
    accepted: AtomicUsize,
    body_bytes: AtomicU64,
    parked: Mutex<Vec<Parked>>,
    /// Requests held: parked, or a step waiting on [`Step::Hold`].
    holding: AtomicUsize,
    /// Bumped by each release; held steps wait for it to change.
    release: Mutex<u64>,
    released: Condvar,
    /// Every connection open, to shut down when the origin stops.
    open: Mutex<HashMap<usize, TcpStream>>,
    stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The script for `path`: an exact match, else the longest `PREFIX*`.
    fn script_for(&self, path: &str) -> Option<Script> {
        let scripts = lock(&self.scripts);
        if let Some((_, s)) = scripts.iter().rev().find(|(p, _)| p == path) {
            return Some(s.clone());
        }
        scripts
            .iter()
            .filter_map(|(p, s)| {
                let prefix = p.strip_suffix('*')?;
                path.starts_with(prefix).then_some((prefix.len(), s))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(_, s)| s.clone())
    }
}

/// An origin server on `127.0.0.1`, stopped (its connections shut down)
/// when dropped.
pub struct Origin {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin").field("addr", &self.addr).finish()
    }
}

impl Origin {
    /// Start on a port of the system's choosing.
    pub fn start() -> Origin {
        TcpListener::bind("127.0.0.1:0")
            .and_then(Origin::listen_on)
            .unwrap_or_else(|e| panic!("starting an origin: {e}"))
    }

    /// Start on a [`DeadPort`] ([`dead_port`], [`Origin::stop_keeping_port`]):
    /// the dead upstream comes to life, on the socket that kept its port,
    /// so that nothing took it meanwhile.
    pub fn revive(dead: DeadPort) -> io::Result<Origin> {
        dead.socket.listen(128)?;
        Origin::listen_on(TcpListener::from(dead.socket))
    }

    /// Stop this origin and keep its port dead ([`DeadPort`]): taken the
    /// moment its listener closes (its accepting thread sees the stop a
    /// little later), so that no other test's bind takes the port before
    /// the test brings the origin back with [`Origin::revive`]. Bound with
    /// `SO_REUSEADDR` (the connections the origin closed hold the port in
    /// TIME_WAIT); the kernel still never hands the port to a bind that
    /// asks for any port while this socket holds it.
    pub fn stop_keeping_port(self) -> DeadPort {
        let addr = self.addr;
        drop(self);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match DeadPort::hold(addr, true) {
                Ok(kept) => return kept,
                // The listener is open yet.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("keeping {addr} after its origin stopped: {e}"),
            }
        }
    }

    fn listen_on(listener: TcpListener) -> io::Result<Origin> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("origin-{}", addr.port()))
            .spawn(move || accept_loop(&listener, &s))?;
        Ok(Origin { addr, shared })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answer requests for `path` (without the query; `PREFIX*` for every
    /// path under a prefix) with `script`; a later call for the same path
    /// wins. Paths with no script are answered `404`.
    pub fn on(&self, path: &str, script: Script) -> &Origin {
        lock(&self.shared.scripts).push((path.to_string(), script));
        self
    }

    /// Every request received so far (its body too, once read), in order.
    pub fn requests(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }

    /// The requests received for `path` (without the query).
    pub fn requests_to(&self, path: &str) -> Vec<Seen> {
        lock(&self.shared.seen)
            .iter()
            .filter(|s| s.path() == path)
            .cloned()
            .collect()
    }

    /// How many connections it has accepted.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now: accepted, and neither closed by the proxy
    /// (the origin reads their end) nor by the origin.
    pub fn open_connections(&self) -> usize {
        lock(&self.shared.open).len()
    }

    /// Request body bytes received so far, over every request (an upload's
    /// progress).
    pub fn body_bytes(&self) -> u64 {
        self.shared.body_bytes.load(Ordering::SeqCst)
    }

    /// How many requests are held until [`release`](Self::release).
    pub fn holding(&self) -> usize {
        self.shared.holding.load(Ordering::SeqCst)
    }

    /// How many of the requests held (until [`release`](Self::release))
    /// had their connection closed by the proxy meanwhile: its end of the
    /// stream, or a reset, is there to read.
    pub fn held_closed(&self) -> usize {
        let parked = lock(&self.shared.parked);
        parked
            .iter()
            .filter(|p| {
                let mut byte = [0u8; 1];
                let s = &p.conn.stream;
                if s.set_nonblocking(true).is_err() {
                    return false;
                }
                let gone = match s.peek(&mut byte) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => e.kind() != io::ErrorKind::WouldBlock,
                };
                let _ = s.set_nonblocking(false);
                gone
            })
            .count()
    }

    /// Answer every request held so far, and let every answer waiting at a
    /// [`Step::Hold`] go on.
    pub fn release(&self) {
        *lock(&self.shared.release) += 1;
        self.shared.released.notify_all();
        let parked: Vec<Parked> = lock(&self.shared.parked).drain(..).collect();
        for p in parked {
            let s = Arc::clone(&self.shared);
            self.shared.holding.fetch_sub(1, Ordering::SeqCst);
            let spawned = std::thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || {
                    let mut conn = p.conn;
                    if answer(&s, &mut conn, &p.seen, &p.script).is_ok() {
                        serve(&s, conn);
                    } else {
                        s.forget(&conn);
                    }
                });
            if let Err(e) = spawned {
                panic!("a thread to answer a released request: {e}");
            }
        }
    }

    /// Wait until `done` holds of the origin, polling; false after `within`.
    pub fn wait_until(&self, within: Duration, done: impl Fn(&Origin) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        *lock(&self.shared.release) += 1;
        self.shared.released.notify_all();
        lock(&self.shared.parked).clear();
        for (_, s) in lock(&self.shared.open).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A port on 127.0.0.1 that refuses every connection for as long as this
/// lives: a dead upstream. A socket is bound to it and never listens, so a
/// connection there is reset as at a port nothing holds; and it is bound
/// without `SO_REUSEADDR`, so that no other bind takes the port meanwhile.
/// (A port that was merely free a moment ago is not dead: the suite's other
/// servers and origins bind port 0 all the time, and one of them took such a
/// port once, answering a request the test expected refused.)
/// [`Origin::revive`] brings it to life. Shown as its address.
#[derive(Debug)]
pub struct DeadPort {
    socket: socket2::Socket,
    addr: SocketAddr,
}

impl DeadPort {
    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl std::fmt::Display for DeadPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr.fmt(f)
    }
}

impl DeadPort {
    /// A socket bound to `addr` (port 0: one of the system's choosing) and
    /// never listening; with `SO_REUSEADDR` if `reuse`. (socket2's socket,
    /// unlike std's listener, binds without listening, and without
    /// `SO_REUSEADDR` unless asked.)
    fn hold(addr: SocketAddr, reuse: bool) -> io::Result<DeadPort> {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        socket.set_reuse_address(reuse)?;
        socket.bind(&addr.into())?;
        let addr = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an IP address"))?;
        Ok(DeadPort { socket, addr })
    }
}

/// A [`DeadPort`] of the system's choosing.
pub fn dead_port() -> DeadPort {
    DeadPort::hold(SocketAddr::from(([127, 0, 0, 1], 0)), false)
        .unwrap_or_else(|e| panic!("holding a dead port: {e}"))
}

/// A port on 127.0.0.1 for a server the test starts on it, held until
/// the test drops it: a socket bound there with `SO_REUSEADDR` and never
/// listening. A server that binds with `SO_REUSEADDR` too (mpm does) binds
/// and listens on it meanwhile; a bind for any port (every other server
/// and origin of the suite) is never given it, as it could be given a port
/// that was merely free a moment ago.
pub fn port_for_a_server() -> DeadPort {
    DeadPort::hold(SocketAddr::from(([127, 0, 0, 1], 0)), true)
        .unwrap_or_else(|e| panic!("holding a port for a server: {e}"))
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            // Out of descriptors, or the like: try again shortly.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let id = shared.accepted.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = stream.set_read_timeout(Some(IDLE));
        let _ = stream.set_write_timeout(Some(IDLE));
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.open).insert(id, clone);
        }
        let conn = Conn {
            stream,
            buf: Vec::new(),
            id,
        };
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || serve(&s, conn));
        if spawned.is_err() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A request line and its fields.
struct Head {
    method: String,
    target: String,
    version: String,
    headers: Vec<(String, String)>,
}

/// One accepted connection and the bytes read past the last request.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    id: usize,
}

impl Shared {
    fn forget(&self, conn: &Conn) {
        lock(&self.open).remove(&conn.id);
        let _ = conn.stream.shutdown(Shutdown::Both);
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

impl Conn {
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The next request head, or `None` at a clean end of file.
    fn read_head(&mut self) -> io::Result<Option<Head>> {
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(bad("request head too long"));
            }
            if self.fill()? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(bad("closed in a request head"))
                };
            }
        };
        let head: Vec<u8> = self.buf.drain(..end + 4).collect();
        let text = String::from_utf8_lossy(&head[..end]).into_owned();
        let mut lines = text.split("\r\n");
        let line = lines.next().unwrap_or_default();
        let mut parts = line.splitn(3, ' ');
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let version = parts.next().unwrap_or_default().to_string();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_string(), v.trim().to_string()))
            .collect();
        Ok(Some(Head {
            method,
            target,
            version,
            headers,
        }))
    }

    fn take(&mut self, max: usize) -> io::Result<Vec<u8>> {
        if self.buf.is_empty() && self.fill()? == 0 {
            return Err(bad("closed in a request body"));
        }
        let n = max.min(self.buf.len());
        Ok(self.buf.drain(..n).collect())
    }

    fn line(&mut self) -> io::Result<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            if self.fill()? == 0 {
                return Err(bad("closed in a chunk size line"));
            }
        }
    }

    /// Read the body as framed, counting it and keeping its first MiB.
    fn read_body(&mut self, seen: &mut Seen, shared: &Shared) -> io::Result<()> {
        let keep = |bytes: &[u8], seen: &mut Seen| {
            seen.body_len += bytes.len() as u64;
            shared
                .body_bytes
                .fetch_add(bytes.len() as u64, Ordering::SeqCst);
            let room = KEEP_BODY.saturating_sub(seen.body.len());
            seen.body.extend_from_slice(&bytes[..room.min(bytes.len())]);
        };
        let chunked = seen
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            loop {
                let size = self.line()?;
                let size = size.split(';').next().unwrap_or_default().trim();
                let mut left = u64::from_str_radix(size, 16).map_err(|_| bad("chunk size"))?;
                if left == 0 {
                    while !self.line()?.is_empty() {}
                    return Ok(());
                }
                while left > 0 {
                    let part = self.take(left.min(1 << 20) as usize)?;
                    left -= part.len() as u64;
                    keep(&part, seen);
                }
                self.line()?;
            }
        }
        let mut left: u64 = seen
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while left > 0 {
            let part = self.take(left.min(1 << 20) as usize)?;
            left -= part.len() as u64;
            keep(&part, seen);
        }
        Ok(())
    }
}

/// Serve requests on `conn` until it closes or a script closes it.
fn serve(shared: &Arc<Shared>, mut conn: Conn) {
    while let Ok(Some(head)) = conn.read_head() {
        let Head {
            method,
            target,
            version,
            headers,
        } = head;
        let peer = conn
            .stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let mut seen = Seen {
            method,
            target,
            version,
            headers,
            body: Vec::new(),
            body_len: 0,
            body_ended: false,
            peer,
            connection: conn.id,
        };
        let script = shared.script_for(seen.path());
        let upgrade = matches!(
            script,
            Some(Script {
                act: Act::Echo(_),
                ..
            })
        );
        // A body is read before the answer, unless the request upgrades.
        if !upgrade && conn.read_body(&mut seen, shared).is_err() {
            lock(&shared.seen).push(seen);
            break;
        }
        seen.body_ended = true;
        lock(&shared.seen).push(seen.clone());
        let script = script.unwrap_or_else(|| {
            Script::new(404).body(format!("no script for {}\n", seen.path()).as_bytes())
        });
        if script.hold {
            let mut parked = lock(&shared.parked);
            parked.push(Parked { conn, seen, script });
            // Counted once [`Origin::release`] would find it.
            shared.holding.fetch_add(1, Ordering::SeqCst);
            drop(parked);
            // The thread ends; `release` makes one to answer.
            return;
        }
        if answer(shared, &mut conn, &seen, &script).is_err() {
            break;
        }
    }
    shared.forget(&conn);
}

/// Answer `seen` as `script` says; an error closes the connection (the
/// script's doing, or the peer's).
fn answer(shared: &Shared, conn: &mut Conn, seen: &Seen, script: &Script) -> io::Result<()> {
    if !script.delay.is_zero() {
        std::thread::sleep(script.delay);
    }
    let s = &mut conn.stream;
    match &script.act {
        Act::Raw(bytes) => {
            s.write_all(bytes)?;
            Err(bad("a raw answer closes"))
        }
        Act::Trickle(bytes, every) => {
            for b in bytes {
                s.write_all(&[*b])?;
                std::thread::sleep(*every);
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
            }
            Err(bad("a trickled answer closes"))
        }
        Act::RawSteps(steps) => {
            for step in steps {
                match step {
                    Step::Send(bytes) => s.write_all(bytes)?,
                    Step::Pause(d) => std::thread::sleep(*d),
                    Step::Hold => wait_release(shared),
                }
            }
            Err(bad("a raw answer closes"))
        }
        Act::Hang => Err(bad("hung up")),
        Act::Echo(fields) => {
            let mut head = b"HTTP/1.1 101 Switching Protocols\r\n".to_vec();
            for (n, v) in fields {
                head.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
            }
            head.extend_from_slice(b"\r\n");
            s.write_all(&head)?;
            // Bytes that came with the head are the tunnel's first.
            let early = std::mem::take(&mut conn.buf);
            conn.stream.write_all(&early)?;
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = conn.stream.read(&mut buf)?;
                if n == 0 {
                    return Err(bad("the tunnel closed"));
                }
                conn.stream.write_all(&buf[..n])?;
            }
        }
        Act::Respond {
            status,
            reason,
            headers,
            body,
            framing,
            cut_after,
        } => respond(
            shared,
            &mut conn.stream,
            seen,
            Respond {
                status: *status,
                reason,
                headers,
                body,
                framing: *framing,
                cut_after: *cut_after,
            },
        ),
    }
}

struct Respond<'a> {
    status: u16,
    reason: &'a str,
    headers: &'a [(String, String)],
    body: &'a Body,
    framing: Framing,
    cut_after: Option<u64>,
}

/// `bytes=A-B` (or `A-`) against a body of `len`: the inclusive range.
fn single_range(value: &str, len: u64) -> Option<(u64, u64)> {
    let spec = value.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let a: u64 = a.trim().parse().ok()?;
    let b: u64 = match b.trim() {
        "" => len.checked_sub(1)?,
        b => b.parse::<u64>().ok()?.min(len.checked_sub(1)?),
    };
    (a <= b).then_some((a, b))
}

fn respond(shared: &Shared, s: &mut TcpStream, seen: &Seen, r: Respond<'_>) -> io::Result<()> {
    let head_only = seen.method.eq_ignore_ascii_case("HEAD");
    let mut status = r.status;
    let mut reason = r.reason;
    let mut fields: Vec<(String, String)> = r.headers.to_vec();
    let mut range = None;
    let full_len = match r.body {
        Body::Bytes(b) => Some(b.len() as u64),
        Body::Repeat(_, len) => Some(*len),
        Body::Steps(_) => None,
    };
    // The origin's own conditional and range handling, as a file server's.
    let etag = crate::field(r.headers, "etag");
    let not_modified = status == 200
        && etag.is_some_and(|e| {
            seen.header("if-none-match")
                .is_some_and(|inm| inm.split(',').any(|t| t.trim() == e || t.trim() == "*"))
        });
    if not_modified {
        status = 304;
        reason = reason_phrase(304);
    } else if status == 200
        && crate::field(r.headers, "accept-ranges") == Some("bytes")
        && matches!(r.body, Body::Bytes(_))
    {
        if let (Some(value), Some(len)) = (seen.header("range"), full_len) {
            if let Some((a, b)) = single_range(value, len) {
                status = 206;
                reason = reason_phrase(206);
                fields.push(("Content-Range".into(), format!("bytes {a}-{b}/{len}")));
                range = Some((a, b));
            }
        }
    }
    let bodiless = status == 304 || status == 204 || (100..200).contains(&status);
    let body_len = match range {
        Some((a, b)) => Some(b - a + 1),
        None => full_len,
    };
    let framing = if bodiless { Framing::Length } else { r.framing };
    match framing {
        Framing::Length if !bodiless => {
            if let Some(len) = body_len {
                fields.push(("Content-Length".into(), len.to_string()));
            }
        }
        Framing::Chunked => fields.push(("Transfer-Encoding".into(), "chunked".into())),
        Framing::Close => fields.push(("Connection".into(), "close".into())),
        Framing::Length => {}
    }
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    for (n, v) in &fields {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    if head_only || bodiless {
        return Ok(());
    }
    let mut out = Out {
        s,
        chunked: framing == Framing::Chunked,
        left: r.cut_after,
    };
    match r.body {
        Body::Bytes(b) => {
            let b = match range {
                Some((a, z)) => &b[a as usize..=z as usize],
                None => &b[..],
            };
            for piece in b.chunks(16 * 1024) {
                out.send(piece)?;
            }
        }
        Body::Repeat(block, len) => {
            let mut left = *len;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                out.send(&block[..n])?;
                left -= n as u64;
            }
        }
        Body::Steps(steps) => {
            for step in steps {
                match step {
                    Step::Send(bytes) => out.send(bytes)?,
                    Step::Pause(d) => std::thread::sleep(*d),
                    Step::Hold => wait_release(shared),
                }
            }
        }
    }
    if out.chunked {
        out.s.write_all(b"0\r\n\r\n")?;
    }
    if framing == Framing::Close {
        return Err(bad("a close-delimited body ends with the connection"));
    }
    Ok(())
}

/// Wait at a [`Step::Hold`] for the next release.
fn wait_release(shared: &Shared) {
    let mut gen = lock(&shared.release);
    let start = *gen;
    // Counted with the lock held: a release seen after the count is one
    // this wait sees.
    shared.holding.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + IDLE;
    while *gen == start && Instant::now() < deadline {
        gen = shared
            .released
            .wait_timeout(gen, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    shared.holding.fetch_sub(1, Ordering::SeqCst);
}

/// The body's writer: chunks it, and cuts it after so many bytes.
struct Out<'a> {
    s: &'a mut TcpStream,
    chunked: bool,
    left: Option<u64>,
}

impl Out<'_> {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let bytes = match self.left {
            Some(left) if (bytes.len() as u64) >= left => {
                let part = &bytes[..left as usize];
                self.write(part)?;
                self.s.flush()?;
                return Err(bad("cut short as scripted"));
            }
            Some(left) => {
                self.left = Some(left - bytes.len() as u64);
                bytes
            }
            None => bytes,
        };
        self.write(bytes)
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.chunked {
            self.s
                .write_all(format!("{:x}\r\n", bytes.len()).as_bytes())?;
            self.s.write_all(bytes)?;
            self.s.write_all(b"\r\n")
        } else {
            self.s.write_all(bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RawConn;

    fn get(path: &str, fields: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: o\r\n{fields}\r\n").into_bytes()
    }

    #[test]
    fn it_answers_conditionals_ranges_and_chunks_as_a_file_server_would() {
        let o = Origin::start();
        o.on(
            "/f",
            Script::ok(b"0123456789")
                .header("ETag", "\"e\"")
                .header("Accept-Ranges", "bytes"),
        )
        .on("/c", Script::ok(b"chunked body").chunked());
        let mut c = RawConn::connect(o.addr());
        c.send(&get("/f", "If-None-Match: \"e\"\r\n")).unwrap();
        assert_eq!(c.read_response().unwrap().status, 304);
        c.send(&get("/f", "Range: bytes=2-4\r\n")).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (206, b"234".as_slice()));
        assert_eq!(r.header("content-range"), Some("bytes 2-4/10"));
        c.send(&get("/c", "")).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.body, b"chunked body");
        c.send(&get("/none", "")).unwrap();
        assert_eq!(c.read_response().unwrap().status, 404);
        // Four requests on one connection, each recorded.
        assert_eq!(o.accepted(), 1);
        let seen = o.requests();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[1].header("range"), Some("bytes=2-4"));
        assert!(seen.iter().all(|s| s.connection == 1));
    }

    #[test]
    fn it_counts_a_request_body_and_cuts_an_answer_short_when_told() {
        let o = Origin::start();
        o.on("/up", Script::ok(b"ok"))
            .on("/short", Script::ok(&[7u8; 100]).cut_after(10));
        let mut c = RawConn::connect(o.addr());
        c.send(b"POST /up HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!(c.read_response().unwrap().body, b"ok");
        let up = &o.requests_to("/up")[0];
        assert_eq!((up.body_len, up.body.as_slice()), (5, b"abcde".as_slice()));
        assert_eq!(o.body_bytes(), 5);
        c.send(&get("/short", "")).unwrap();
        let err = c.read_response().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }

    #[test]
    fn held_requests_are_answered_on_release_and_an_upgrade_echoes() {
        let o = Origin::start();
        o.on("/held", Script::ok(b"released").hold())
            .on("/ws", Script::websocket_echo());
        let mut held: Vec<RawConn> = (0..3)
            .map(|_| {
                let mut c = RawConn::connect(o.addr());
                c.send(&get("/held", "")).unwrap();
                c
            })
            .collect();
        assert!(o.wait_until(Duration::from_secs(10), |o| o.holding() == 3));
        o.release();
        for c in &mut held {
            assert_eq!(c.read_response().unwrap().body, b"released");
        }
        assert_eq!(o.holding(), 0);
        let mut c = RawConn::connect(o.addr());
        c.send(&get("/ws", "Upgrade: websocket\r\nConnection: Upgrade\r\n"))
            .unwrap();
        assert_eq!(c.read_head().unwrap().status, 101);
        c.send(b"ping").unwrap();
        let mut back = Vec::new();
        while back.len() < 4 {
            back.extend(c.read_some(4).unwrap());
        }
        assert_eq!(back, b"ping");
    }
}
