//! The load generator's core: each client thread drives its share of the
//! connections from one epoll set, a state machine per connection
//! (connecting → writing → reading → next request), so one core can keep
//! thousands of connections busy.
//!
//! The hot path reuses everything: each request's bytes are built once, each
//! thread reads into one buffer, each connection's parser keeps its head
//! buffer; recording a latency and checking the status against what the
//! request expects are the only work per response besides the system calls
//! (one `write` and usually one `read` on a keep-alive connection, plus the
//! `epoll_wait` they share).
//!
//! A workload's requests are drawn from one schedule shared by every
//! connection (the request number modulo its length), so that `-n` sends
//! each request exactly its share. Slow clients send each request a piece
//! at a time and wait between pieces on a timer, never in a sleep.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use socket2::{Domain, Protocol, Socket, Type};

use super::response_parser::{Feed, ResponseParser};
use super::summary::{Recorder, Summary};
use crate::workload::{Expect, SlowClients, Workload};

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// After this many requests (answered or failed).
    Requests(u64),
    /// After this long; requests still in flight then are not counted.
    Duration(Duration),
}

/// One request of a load, ready to send.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// `METHOD /path`, for the report.
    pub label: String,
    /// The complete request, sent as is: `pipeline` copies of it, one
    /// after the other, when the load pipelines.
    pub bytes: Vec<u8>,
    /// The statuses that count as an answer.
    pub expect: Expect,
    /// Every 200 must have the first 200's body length.
    pub same_length: bool,
}

/// What to load, and how hard.
#[derive(Debug, Clone)]
pub struct Load {
    /// The server.
    pub addr: SocketAddr,
    /// The URL (or the workload), for the report.
    pub url: String,
    /// The requests of the mix.
    pub requests: Vec<Prepared>,
    /// Indices into `requests`, in the order they are sent (request number
    /// `k` sends `schedule[k % len]`).
    pub schedule: Vec<usize>,
    /// Concurrent connections.
    pub connections: usize,
    /// Client threads (each with its own epoll set).
    pub threads: usize,
    /// When to stop.
    pub limit: Limit,
    /// Keep connections open between requests (false: the request says
    /// `Connection: close`, and a new connection carries each request).
    pub keepalive: bool,
    /// Requests a connection sends in one write before reading their
    /// answers (1: one at a time). Under a request limit, the last batch
    /// of each connection may take the count past it by less than this.
    pub pipeline: usize,
    /// How long one request may take before it counts as a timeout.
    pub timeout: Duration,
    /// Slow clients: their share of the connections, and how they send.
    pub slow: SlowClients,
    /// `https://`: how connections do TLS.
    pub tls: Option<super::tls::TlsClient>,
    /// HTTP/2 (`--h2`, a workload's `h2-streams`): this many streams in
    /// flight on each connection, with prior knowledge on `http://`, by
    /// ALPN over `tls`; `None`: HTTP/1.1.
    pub h2_streams: Option<usize>,
}

impl Load {
    /// `workload` against the server at `addr` (whose `Host` is `host`),
    /// with one client thread and a 10 s timeout; change the rest after.
    pub fn from_workload(addr: SocketAddr, host: &str, workload: &Workload, limit: Limit) -> Load {
        Load {
            addr,
            url: format!("http://{host} ({})", workload.name),
            requests: workload
                .requests
                .iter()
                .map(|r| Prepared {
                    label: r.label(),
                    bytes: r
                        .to_bytes(host, !workload.keepalive)
                        .repeat(workload.pipeline.max(1)),
                    expect: r.expect.clone(),
                    same_length: r.same_length,
                })
                .collect(),
            schedule: workload.schedule(),
            connections: workload.connections,
            threads: 1,
            limit,
            keepalive: workload.keepalive,
            pipeline: workload.pipeline.max(1),
            timeout: Duration::from_secs(10),
            slow: workload.slow,
            tls: None,
            h2_streams: workload.h2_streams,
        }
    }

    /// Is connection `i` (of all threads') a slow client?
    fn is_slow(&self, i: usize) -> bool {
        let slow = (self.slow.share * self.connections as f64).round() as usize;
        let n = self.connections.max(1);
        slow > 0 && (i + 1) * slow / n > i * slow / n
    }
}

/// Shared between the client threads and whoever watches them.
#[derive(Debug)]
pub struct Progress {
    /// Requests begun under `-n` (the budget is taken from here).
    issued: AtomicU64,
    /// Requests finished, answered or not.
    pub finished: AtomicU64,
    /// Set to end the run early (Ctrl-C); shared with a signal handler.
    pub stop: Arc<AtomicBool>,
    /// Connections made, and connection attempts that failed: a run in which
    /// every connection has failed once and none was ever made stops at once.
    connected: AtomicU64,
    connect_failures: AtomicU64,
    /// Why the first connection attempt failed, for the report.
    first_connect_error: std::sync::OnceLock<String>,
    /// The server refused the load's protocol (HTTP/2 not chosen by ALPN):
    /// why. Set, it ends the run: no figure of another protocol is taken
    /// for this one's.
    refused: std::sync::OnceLock<String>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new(Arc::new(AtomicBool::new(false)))
    }
}

impl Progress {
    /// A fresh run that ends early once `stop` is set.
    pub fn new(stop: Arc<AtomicBool>) -> Progress {
        Progress {
            issued: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            stop,
            connected: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            first_connect_error: std::sync::OnceLock::new(),
            refused: std::sync::OnceLock::new(),
        }
    }

    /// May another request start, under `limit` (by `deadline`)? The
    /// shared count of `-n`; under a duration, only the clock (for the
    /// HTTP/2 engine, which counts its own).
    pub(crate) fn may_start(&self, limit: Limit, deadline: Option<Instant>) -> bool {
        if self.stop.load(Ordering::Relaxed) || self.refused.get().is_some() {
            return false;
        }
        match limit {
            Limit::Requests(n) => self.issued.fetch_add(1, Ordering::Relaxed) < n,
            Limit::Duration(_) => deadline.is_none_or(|d| Instant::now() < d),
        }
    }

    /// A connection was made (`Ok`), or could not be (`Err`).
    pub(crate) fn connected(&self, result: Result<(), &io::Error>) {
        match result {
            Ok(()) => {
                self.connected.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.connect_failures.fetch_add(1, Ordering::Relaxed);
                let _ = self.first_connect_error.set(e.to_string());
            }
        }
    }

    /// Has every one of `connections` failed to connect, and none connected?
    pub(crate) fn nothing_connects(&self, connections: usize) -> bool {
        self.connected.load(Ordering::Relaxed) == 0
            && self.connect_failures.load(Ordering::Relaxed) >= connections.max(1) as u64
    }

    /// The server will not speak the load's protocol: end the run, saying why.
    pub(crate) fn refuse(&self, why: String) {
        let _ = self.refused.set(why);
    }

    /// Did the server refuse the load's protocol (an `https://` HTTP/2 load
    /// to a server that chose `http/1.1` by ALPN)? Then why, in words.
    pub fn refused(&self) -> Option<&str> {
        self.refused.get().map(String::as_str)
    }

    /// Did the run end because nothing would take a connection? Then why
    /// (the first attempt's error).
    pub fn never_connected(&self) -> Option<&str> {
        (self.connected.load(Ordering::Relaxed) == 0)
            .then(|| self.first_connect_error.get().map(String::as_str))
            .flatten()
    }
}

/// Run `load` to its limit; `progress` is updated as it goes.
pub fn run(load: &Load, progress: &Progress) -> io::Result<Summary> {
    if load.requests.is_empty() || load.schedule.is_empty() {
        return Err(io::Error::other("a load needs at least one request"));
    }
    if let Some(streams) = load.h2_streams {
        return super::h2::run(load, progress, streams);
    }
    // Body length of each request's first 200, `u64::MAX` until then.
    let reference: Vec<AtomicU64> = load
        .requests
        .iter()
        .map(|_| AtomicU64::new(u64::MAX))
        .collect();
    let reference = &reference;
    on_threads(
        load,
        "bench",
        &load.url,
        load.keepalive,
        |first_share, deadline| {
            Client::new(load, progress, reference, deadline, first_share)?.run()
        },
    )
}

/// Run `client` on `load.threads` threads (at most one per connection),
/// each given the number of its first connection and its share of them
/// (the first threads take one more) and the run's deadline; then sum
/// their counts into the summary of `url`. What the HTTP/1.1 and HTTP/2
/// engines share.
pub(crate) fn on_threads(
    load: &Load,
    name: &str,
    url: &str,
    keepalive: bool,
    client: impl Fn((usize, usize), Option<Instant>) -> io::Result<Recorder> + Sync,
) -> io::Result<Summary> {
    let threads = load.threads.clamp(1, load.connections.max(1));
    let start = Instant::now();
    let deadline = match load.limit {
        Limit::Duration(d) => Some(start + d),
        Limit::Requests(_) => None,
    };
    let share_of =
        |t: usize| load.connections / threads + usize::from(t < load.connections % threads);
    let client = &client;
    let results: Vec<io::Result<Recorder>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let first = (0..t).map(share_of).sum::<usize>();
                let share = share_of(t);
                std::thread::Builder::new()
                    .name(format!("{name}-{t}"))
                    .spawn_scoped(scope, move || client((first, share), deadline))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a client thread panicked"))),
                Err(e) => Err(e),
            })
            .collect()
    });
    let elapsed = match deadline {
        Some(d) => d.min(Instant::now()) - start,
        None => start.elapsed(),
    };
    let mut all = Recorder::new(load.requests.len());
    for r in results {
        all.merge(&r?);
    }
    let labels: Vec<(String, String)> = load
        .requests
        .iter()
        .map(|r| (r.label.clone(), r.expect.to_string()))
        .collect();
    Ok(Summary::new(
        url,
        (load.connections, threads, keepalive),
        elapsed,
        &all,
        &labels,
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request: the run is over for this connection.
    Idle,
    Connecting,
    /// The TLS handshake of a new connection.
    Handshaking,
    Writing,
    /// A slow client between two pieces of its request.
    Pausing,
    Reading,
    /// The response is complete and the server closes: wait for its FIN, so
    /// that TIME_WAIT lands on the server's side, not on the client's ports.
    Draining,
}

#[derive(Debug)]
struct Conn {
    sock: Option<Socket>,
    phase: Phase,
    written: usize,
    started: Instant,
    parser: ResponseParser,
    /// Requests answered on this socket: a keep-alive connection the server
    /// closed while idle is retried once, not counted as an error.
    served: u64,
    /// Interest registered with epoll.
    want: Want,
    /// The request in flight: an index into the load's requests.
    req: usize,
    /// Requests in the write in flight (1 unless pipelining).
    batch: usize,
    /// Answers still due for them.
    left: usize,
    /// A slow client: sends its requests a piece at a time.
    slow: bool,
    /// A slow client's next piece is due then.
    next_piece: Option<Instant>,
    /// `https://`: the TLS connection over `sock`.
    tls: Option<Box<rustls::ClientConnection>>,
    /// The request is in the TLS connection's buffer (being sent).
    tls_queued: bool,
}

/// Read plaintext (through TLS for `https://`); `Ok(0)` at the end.
fn recv(c: &mut Conn, buf: &mut [u8]) -> io::Result<usize> {
    let Some(sock) = c.sock.as_ref() else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    let Some(tls) = c.tls.as_mut() else {
        let mut s = sock;
        return s.read(buf);
    };
    loop {
        match tls.reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let mut s = sock;
        match tls.read_tls(&mut s)? {
            0 => return Ok(0),
            _ => {
                tls.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
        }
    }
}

/// What a connection waits for from epoll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Read,
    Write,
    /// Nothing: a slow client waiting on its timer (a level-triggered
    /// writable socket would otherwise wake the loop without end).
    Nothing,
}

struct Client<'a> {
    load: &'a Load,
    progress: &'a Progress,
    /// Each request's first 200 body length, shared by the threads.
    reference: &'a [AtomicU64],
    deadline: Option<Instant>,
    epoll: Epoll,
    conns: Vec<Conn>,
    buf: Vec<u8>,
    rec: Recorder,
    /// Connections whose next request starts on the next turn of the loop
    /// (after a failure: a loop, not recursion, however many fail at once).
    pending: Vec<usize>,
    /// The slow clients among the connections.
    slow: Vec<usize>,
    /// Requests begun by this thread (under a duration limit).
    issued_here: u64,
}

impl<'a> Client<'a> {
    fn new(
        load: &'a Load,
        progress: &'a Progress,
        reference: &'a [AtomicU64],
        deadline: Option<Instant>,
        (first, share): (usize, usize),
    ) -> io::Result<Client<'a>> {
        let now = Instant::now();
        let conns: Vec<Conn> = (0..share)
            .map(|j| Conn {
                sock: None,
                phase: Phase::Idle,
                written: 0,
                started: now,
                parser: ResponseParser::default(),
                served: 0,
                want: Want::Read,
                req: 0,
                batch: 1,
                left: 0,
                slow: load.is_slow(first + j),
                next_piece: None,
                tls: None,
                tls_queued: false,
            })
            .collect();
        let slow = (0..share).filter(|&j| conns[j].slow).collect();
        Ok(Client {
            load,
            progress,
            reference,
            deadline,
            epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?,
            conns,
            buf: vec![0; 16 * 1024],
            rec: Recorder::new(load.requests.len()),
            pending: Vec::with_capacity(share),
            slow,
            issued_here: 0,
        })
    }

    fn run(mut self) -> io::Result<Recorder> {
        for i in 0..self.conns.len() {
            self.begin(i);
        }
        let mut events = vec![EpollEvent::empty(); 512];
        let mut last_scan = Instant::now();
        let mut batch = Vec::with_capacity(self.conns.len());
        loop {
            // One pass over those waiting; any that fail again wait for the next.
            std::mem::swap(&mut self.pending, &mut batch);
            for i in batch.drain(..) {
                self.begin(i);
            }
            if self.progress.stop.load(Ordering::Relaxed)
                || self.nothing_connects()
                || self.deadline.is_some_and(|d| Instant::now() >= d)
                || (self.pending.is_empty() && self.conns.iter().all(|c| c.phase == Phase::Idle))
            {
                break;
            }
            let wait = if self.pending.is_empty() {
                self.next_timer().map_or(50u16, |due| {
                    let ms = due.saturating_duration_since(Instant::now()).as_millis();
                    ms.min(50) as u16
                })
            } else {
                0
            };
            let n = match self.epoll.wait(&mut events, wait) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => 0,
                Err(e) => return Err(e.into()),
            };
            for ev in &events[..n] {
                self.ready(ev.data() as usize);
            }
            let now = Instant::now();
            self.send_due_pieces(now);
            if now - last_scan >= Duration::from_millis(50) {
                last_scan = now;
                self.expire(now);
            }
        }
        Ok(self.rec)
    }

    /// When the next slow client's piece is due.
    fn next_timer(&self) -> Option<Instant> {
        self.slow
            .iter()
            .filter_map(|&i| self.conns[i].next_piece)
            .min()
    }

    /// Slow clients whose pause is over send their next piece.
    fn send_due_pieces(&mut self, now: Instant) {
        for k in 0..self.slow.len() {
            let i = self.slow[k];
            if self.conns[i].phase == Phase::Pausing
                && self.conns[i].next_piece.is_some_and(|t| t <= now)
            {
                self.conns[i].next_piece = None;
                self.write(i);
            }
        }
    }

    /// Has every connection failed to connect once, and none connected?
    /// Then nothing listens (a closed port): the run ends at once instead of
    /// piling up connect errors for its whole duration.
    fn nothing_connects(&self) -> bool {
        let p = self.progress;
        p.connected.load(Ordering::Relaxed) == 0
            && p.connect_failures.load(Ordering::Relaxed) >= self.load.connections.max(1) as u64
    }

    /// A connection attempt failed with `e`.
    fn connect_failed(&mut self, i: usize, e: io::Error) {
        self.rec.errors.connect += 1;
        self.progress
            .connect_failures
            .fetch_add(1, Ordering::Relaxed);
        let _ = self.progress.first_connect_error.set(e.to_string());
        self.finished_then_next(i)
    }

    /// Requests in flight longer than the timeout fail.
    fn expire(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.phase != Phase::Idle
                && c.phase != Phase::Draining
                && now - c.started > self.load.timeout
            {
                self.rec.errors.timeout += 1;
                self.fail(i);
            } else if c.phase == Phase::Draining && now - c.started > self.load.timeout {
                self.close(i);
                self.begin(i);
            }
        }
    }

    /// May another request start? Its number, if so: shared by the threads
    /// under `-n` (so that the shares are exact), this thread's own under a
    /// duration (no cache line every thread writes on every request).
    fn take_budget(&mut self) -> Option<u64> {
        if self.progress.stop.load(Ordering::Relaxed) {
            return None;
        }
        match self.load.limit {
            Limit::Requests(n) => {
                let batch = self.load.pipeline as u64;
                let k = self.progress.issued.fetch_add(batch, Ordering::Relaxed);
                (k < n).then_some(k / batch)
            }
            Limit::Duration(_) => {
                if self.deadline.is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                self.issued_here += self.load.pipeline as u64;
                Some(self.issued_here / self.load.pipeline as u64 - 1)
            }
        }
    }

    /// Start the next request on connection `i`, if the run goes on.
    fn begin(&mut self, i: usize) {
        let Some(k) = self.take_budget() else {
            self.close(i);
            self.conns[i].phase = Phase::Idle;
            return;
        };
        let schedule = &self.load.schedule;
        self.conns[i].req = schedule[(k % schedule.len() as u64) as usize];
        self.conns[i].started = Instant::now();
        self.conns[i].batch = self.load.pipeline;
        self.conns[i].left = self.load.pipeline;
        self.conns[i].parser.reset();
        self.send_or_connect(i);
    }

    fn send_or_connect(&mut self, i: usize) {
        if self.conns[i].sock.is_some() {
            self.conns[i].written = 0;
            self.write(i);
        } else {
            self.connect(i);
        }
    }

    fn connect(&mut self, i: usize) {
        let addr = self.load.addr;
        let sock = match Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .and_then(|s| {
                s.set_nonblocking(true)?;
                s.set_tcp_nodelay(true)?;
                Ok(s)
            }) {
            Ok(s) => s,
            Err(e) => return self.connect_failed(i, e),
        };
        let connected = match sock.connect(&addr.into()) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
            Err(e) => return self.connect_failed(i, e),
        };
        let flags = if connected {
            EpollFlags::EPOLLIN
        } else {
            EpollFlags::EPOLLOUT
        };
        if self
            .epoll
            .add(sock.as_fd(), EpollEvent::new(flags, i as u64))
            .is_err()
        {
            self.rec.errors.connect += 1;
            return self.finished_then_next(i);
        }
        let c = &mut self.conns[i];
        c.sock = Some(sock);
        c.served = 0;
        c.want = if connected { Want::Read } else { Want::Write };
        c.written = 0;
        c.tls = None;
        if connected {
            self.connected(i);
        } else {
            c.phase = Phase::Connecting;
        }
    }

    /// The TCP connection is up: a TLS handshake first for `https://`.
    fn connected(&mut self, i: usize) {
        self.rec.connections += 1;
        self.progress.connected.fetch_add(1, Ordering::Relaxed);
        let Some(tls) = &self.load.tls else {
            return self.write(i);
        };
        match rustls::ClientConnection::new(Arc::clone(&tls.config), tls.name.clone()) {
            Ok(conn) => {
                let c = &mut self.conns[i];
                c.tls = Some(Box::new(conn));
                c.tls_queued = false;
                c.phase = Phase::Handshaking;
                self.handshake(i);
            }
            Err(e) => self.handshake_failed(i, super::tls::kind(&e)),
        }
    }

    /// Drive the TLS handshake as far as the socket allows.
    fn handshake(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            let (Some(sock), Some(tls)) = (c.sock.as_ref(), c.tls.as_mut()) else {
                return;
            };
            let mut s = sock;
            if tls.wants_write() {
                match tls.write_tls(&mut s) {
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return self.interest(i, Want::Write)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return self.handshake_failed(i, format!("io: {:?}", e.kind())),
                }
            }
            if !tls.is_handshaking() {
                if tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    self.rec.resumed += 1;
                }
                c.written = 0;
                return self.write(i);
            }
            match tls.read_tls(&mut s) {
                Ok(0) => return self.handshake_failed(i, "closed by the server".into()),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        let _ = tls.write_tls(&mut s); // our alert
                        return self.handshake_failed(i, super::tls::kind(&e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.interest(i, Want::Read)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.handshake_failed(i, format!("io: {:?}", e.kind())),
            }
        }
    }

    fn handshake_failed(&mut self, i: usize, kind: String) {
        self.rec.handshake_error(kind);
        self.fail(i);
    }

    /// Send the request through TLS: whole, or a slow client's next piece
    /// (a record of its own, sent before the pause, as a slow client's
    /// bytes reach a TLS server).
    fn write_tls(&mut self, i: usize) {
        let req = self.batch_bytes(i);
        let piece = self.load.slow.bytes.max(1);
        let pause = self.load.slow.pause;
        let c = &mut self.conns[i];
        let (Some(sock), Some(tls)) = (c.sock.as_ref(), c.tls.as_mut()) else {
            return;
        };
        if !c.tls_queued {
            let end = if c.slow {
                (c.written + piece).min(req.len())
            } else {
                req.len()
            };
            if std::io::Write::write_all(&mut tls.writer(), &req[c.written..end]).is_err() {
                return self.lost(i);
            }
            c.written = end;
            c.tls_queued = true;
        }
        let mut s = sock;
        while tls.wants_write() {
            match tls.write_tls(&mut s) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.phase = Phase::Writing;
                    return self.interest(i, Want::Write);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.lost(i),
            }
        }
        c.tls_queued = false;
        if c.written < req.len() {
            c.phase = Phase::Pausing;
            c.next_piece = Some(Instant::now() + pause);
            return self.interest(i, Want::Nothing);
        }
        c.phase = Phase::Reading;
        self.interest(i, Want::Read);
    }

    fn interest(&mut self, i: usize, want: Want) {
        let c = &mut self.conns[i];
        if c.want == want {
            return;
        }
        c.want = want;
        let flags = match want {
            Want::Write => EpollFlags::EPOLLOUT,
            Want::Read => EpollFlags::EPOLLIN,
            Want::Nothing => EpollFlags::empty(),
        };
        if let Some(s) = &c.sock {
            let mut ev = EpollEvent::new(flags, i as u64);
            let _ = self.epoll.modify(s.as_fd(), &mut ev);
        }
    }

    fn write(&mut self, i: usize) {
        if self.conns[i].tls.is_some() {
            return self.write_tls(i);
        }
        let req = self.batch_bytes(i);
        let piece = self.load.slow.bytes.max(1);
        loop {
            let c = &mut self.conns[i];
            let Some(sock) = &c.sock else { return };
            let end = if c.slow {
                (c.written + piece).min(req.len())
            } else {
                req.len()
            };
            match sock.send(&req[c.written..end]) {
                Ok(n) => {
                    c.written += n;
                    if c.written == req.len() {
                        c.phase = Phase::Reading;
                        self.interest(i, Want::Read);
                        return;
                    }
                    if c.slow && c.written == end {
                        c.phase = Phase::Pausing;
                        c.next_piece = Some(Instant::now() + self.load.slow.pause);
                        self.interest(i, Want::Nothing);
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.phase = Phase::Writing;
                    self.interest(i, Want::Write);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.lost(i),
            }
        }
    }

    fn ready(&mut self, i: usize) {
        match self.conns[i].phase {
            Phase::Idle => {}
            Phase::Connecting => {
                let failed = match &self.conns[i].sock {
                    Some(s) => match s.take_error() {
                        Ok(None) => None,
                        Ok(Some(e)) | Err(e) => Some(e),
                    },
                    None => Some(io::Error::from(io::ErrorKind::NotConnected)),
                };
                if let Some(e) = failed {
                    self.close(i);
                    return self.connect_failed(i, e);
                }
                self.connected(i);
            }
            Phase::Handshaking => self.handshake(i),
            Phase::Writing => self.write(i),
            // Only an error or a hang-up is reported while pausing: the
            // server answered early (400, 408) or closed.
            Phase::Pausing => {
                self.conns[i].next_piece = None;
                self.conns[i].phase = Phase::Reading;
                self.interest(i, Want::Read);
                self.read(i);
            }
            Phase::Reading => self.read(i),
            Phase::Draining => {
                let c = &mut self.conns[i];
                if c.sock.is_some() {
                    match recv(c, &mut self.buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                        // EOF, an error or stray bytes: either way this
                        // connection is done.
                        _ => {}
                    }
                }
                self.close(i);
                self.begin(i);
            }
        }
    }

    fn read(&mut self, i: usize) {
        // Until the response ends or the socket is drained: a large body
        // then costs one epoll_wait per socket buffer, not per read.
        loop {
            let c = &mut self.conns[i];
            if c.sock.is_none() {
                return;
            }
            let n = match recv(c, &mut self.buf) {
                Ok(n) => n,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    return
                }
                Err(_) => return self.lost(i),
            };
            if n == 0 {
                if let Some(resp) = c.parser.eof() {
                    self.complete(i, resp.status, resp.body_len, true);
                    return;
                }
                return self.lost(i);
            }
            // Pipelined answers may share a read: each one ends where the
            // next begins.
            let mut from = 0;
            loop {
                let c = &mut self.conns[i];
                match c.parser.feed(&self.buf[from..n]) {
                    // A short read has taken all there was (TLS may hold
                    // more already decrypted: read on until it would block).
                    Ok(Feed::More) if n < self.buf.len() && c.tls.is_none() => return,
                    Ok(Feed::More) => break,
                    Ok(Feed::Done(resp, used)) if c.left > 1 && !resp.close => {
                        c.left -= 1;
                        c.parser.reset();
                        self.record(i, resp.status, resp.body_len);
                        from += used;
                        if from == n {
                            break;
                        }
                    }
                    Ok(Feed::Done(resp, used)) => {
                        if from + used < n {
                            // Bytes nobody asked for: the stream is out of step.
                            self.rec.errors.bad_response += 1;
                            return self.fail(i);
                        }
                        return self.complete(i, resp.status, resp.body_len, resp.close);
                    }
                    Err(_) => {
                        self.rec.errors.bad_response += 1;
                        return self.fail(i);
                    }
                }
            }
        }
    }

    fn complete(&mut self, i: usize, status: u16, body_len: u64, close: bool) {
        self.record(i, status, body_len);
        let rest = self.conns[i].left.saturating_sub(1);
        if rest > 0 && close {
            // The server closed before answering the rest of a pipelined
            // batch (its limit of requests per connection): they go again
            // on a new connection, as a browser resends them.
            let c = &mut self.conns[i];
            (c.batch, c.left) = (rest, rest);
            c.parser.reset();
            self.close(i);
            return self.connect(i);
        }
        self.after_response(i, close);
    }

    /// What connection `i` writes: its request, `batch` times.
    fn batch_bytes(&self, i: usize) -> &'a [u8] {
        let load: &'a Load = self.load;
        let c = &self.conns[i];
        let all = &load.requests[c.req].bytes;
        let one = all.len() / load.pipeline.max(1);
        &all[..one * c.batch.min(load.pipeline)]
    }

    /// `n` requests of connection `i`'s batch will get no answer.
    fn unanswered(&mut self, i: usize, n: usize) {
        for _ in 0..n {
            self.rec.errors.read += 1;
            self.rec.failed(self.conns[i].req);
            self.progress.finished.fetch_add(1, Ordering::Relaxed);
        }
        self.conns[i].left -= n;
    }

    /// Count one answer on connection `i` (of a pipelined batch, its
    /// latency runs from the batch's write).
    fn record(&mut self, i: usize, status: u16, body_len: u64) {
        let latency = self.conns[i].started.elapsed();
        let r = self.conns[i].req;
        let request = &self.load.requests[r];
        if status == 200 && request.same_length {
            let reference = match self.reference[r].compare_exchange(
                u64::MAX,
                body_len,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => body_len,
                Err(first) => first,
            };
            if reference != body_len {
                self.rec.errors.length += 1;
                self.rec.failed(r);
                self.progress.finished.fetch_add(1, Ordering::Relaxed);
                self.conns[i].served += 1;
                return;
            }
        }
        let expected = request.expect.accepts(status);
        self.rec.response(r, status, body_len, latency, expected);
        self.progress.finished.fetch_add(1, Ordering::Relaxed);
        self.conns[i].served += 1;
    }

    fn after_response(&mut self, i: usize, close: bool) {
        if close || !self.load.keepalive {
            if close && self.conns[i].sock.is_some() {
                // The server closes: wait for its FIN before closing ours.
                self.conns[i].phase = Phase::Draining;
                return;
            }
            self.close(i);
        }
        self.begin(i);
    }

    /// The connection broke. A keep-alive connection closed by the server
    /// before any byte of the next response (its idle timeout, or a
    /// request limit) is reopened for the same request, as browsers do;
    /// anything else is a read error.
    fn lost(&mut self, i: usize) {
        let c = &self.conns[i];
        if c.served > 0 && !c.parser.started() && c.left == c.batch && c.phase == Phase::Reading {
            self.close(i);
            return self.connect(i);
        }
        self.rec.errors.read += 1;
        self.fail(i);
    }

    /// This request failed: drop the connection and go on.
    fn fail(&mut self, i: usize) {
        self.close(i);
        self.finished_then_next(i);
    }

    fn finished_then_next(&mut self, i: usize) {
        // The rest of a pipelined batch went with the connection.
        self.unanswered(i, self.conns[i].left.saturating_sub(1));
        self.rec.failed(self.conns[i].req);
        self.progress.finished.fetch_add(1, Ordering::Relaxed);
        self.conns[i].phase = Phase::Idle;
        self.pending.push(i);
    }

    fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        // Closing the descriptor removes it from the epoll set.
        c.sock = None;
        c.tls = None;
        c.want = Want::Read;
        c.next_piece = None;
        c.phase = Phase::Idle;
    }
}
