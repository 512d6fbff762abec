//! The contract's wait on a descriptor of the connection's own
//! (`Interest::Await`), under every model, with a line protocol that relays
//! each request to an origin and its answer back: prefork's and worker's
//! step blocks on the upstream socket (a thread or process per waiting
//! request, as httpd's mod_proxy), the event loop parks the connection with
//! it and holds no thread. The reverse proxy and `Response::later` are
//! built on this; their own tests are elsewhere.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpm_core::{
    Await, ConnectionHandler, Interest, Lifecycle, Listener, Mpm, MpmSettings, Phase, Prefetch,
    Stream, Wait,
};

/// Relays each line `N` from the client to the origin, and the origin's
/// answer back as `ok ANSWER`; `timeout` if the origin has not answered
/// within `patience`. Each request opens its own upstream connection.
struct Relay {
    origin: SocketAddr,
    patience: Duration,
    /// Stamp each upstream socket and its waits (`Await::stamp`): the
    /// event loop keeps it registered instead of arming it per wait.
    stamped: bool,
}

#[derive(Default)]
struct RelayConn {
    line: Vec<u8>,
    /// The upstream socket, the wait's deadline, and the socket's stamp.
    upstream: Option<(TcpStream, Instant, u64)>,
    answer: Vec<u8>,
    out: Vec<u8>,
    waits: u32,
}

impl Relay {
    /// Resume or start the exchange; `Await` while the origin is silent.
    fn exchange(&mut self, c: &mut RelayConn, s: &mut Stream) -> Interest {
        loop {
            if let Some((up, until, stamp)) = &mut c.upstream {
                let mut buf = [0u8; 256];
                match up.read(&mut buf) {
                    Ok(n) if n > 0 => {
                        c.answer.extend_from_slice(&buf[..n]);
                        if !c.answer.ends_with(b"\n") {
                            continue;
                        }
                        c.out = [b"ok ".as_slice(), &c.answer].concat();
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if Instant::now() < *until {
                            c.waits += 1;
                            let wait = Await::readable(up.as_raw_fd(), *until);
                            return Interest::Await(if self.stamped {
                                wait.stamped(*stamp)
                            } else {
                                wait
                            });
                        }
                        c.out = b"timeout\n".to_vec();
                    }
                    _ => c.out = b"upstream failed\n".to_vec(),
                }
                c.upstream = None;
                c.answer.clear();
                return self.flush(c, s);
            }
            let Some(end) = c.line.iter().position(|&b| b == b'\n') else {
                return Interest::Read(Wait::KeepAlive);
            };
            let line: Vec<u8> = c.line.drain(..=end).collect();
            let mut up = TcpStream::connect(self.origin).unwrap();
            up.write_all(&line).unwrap();
            up.set_nonblocking(true).unwrap();
            let stamp = mpm_core::waiting::new_stamp();
            c.upstream = Some((up, Instant::now() + self.patience, stamp));
        }
    }

    fn flush(&mut self, c: &mut RelayConn, s: &mut Stream) -> Interest {
        while !c.out.is_empty() {
            match s.write(&c.out) {
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Write,
                Err(_) => return Interest::Close,
            }
        }
        Interest::Read(Wait::KeepAlive)
    }
}

impl ConnectionHandler for Relay {
    type Conn = RelayConn;

    fn connected(&mut self, _: &Stream) -> RelayConn {
        RelayConn::default()
    }

    fn readable(&mut self, c: &mut RelayConn, s: &mut Stream) -> Interest {
        if c.upstream.is_some() {
            return self.exchange(c, s);
        }
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => Interest::Close,
            Ok(n) => {
                c.line.extend_from_slice(&buf[..n]);
                self.exchange(c, s)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Interest::Read(Wait::KeepAlive),
            Err(_) => Interest::Close,
        }
    }

    fn writable(&mut self, c: &mut RelayConn, s: &mut Stream) -> Interest {
        self.flush(c, s)
    }

    /// Every step is a non-blocking exchange: the loop runs it itself.
    fn prefetch(&mut self, _: &mut RelayConn, _: &mut Stream) -> Prefetch {
        Prefetch::ReadyInline
    }
}

/// Relays each line as [`Relay`] does, over upstream connections kept
/// alive in a pool shared by the process's threads, each socket stamped
/// and waited on with its stamp: what the event loop keeps registered. A
/// pooled connection the origin closed is found closed by the request
/// that takes it (its first read is the end), which opens another one:
/// the descriptor number just freed, a new stamp.
#[derive(Clone, Copy)]
struct PooledRelay {
    origin: SocketAddr,
    patience: Duration,
    /// Run each step on a worker, not on the loop.
    on_worker: bool,
    /// How long a step stays busy after its read would block and before
    /// it returns the wait: an answer that comes meanwhile is reported
    /// while the connection is on its worker.
    busy: Duration,
}

struct Upstream {
    sock: TcpStream,
    stamp: u64,
}

/// The idle upstream connections, and every socket opened: (fd, stamp).
static POOL: Mutex<Vec<Upstream>> = Mutex::new(Vec::new());
static OPENED: Mutex<Vec<(i32, u64)>> = Mutex::new(Vec::new());

#[derive(Default)]
struct PooledConn {
    line: Vec<u8>,
    /// The request on its way: its line, its upstream, its deadline.
    sent: Vec<u8>,
    up: Option<(Upstream, Instant)>,
    answer: Vec<u8>,
    out: Vec<u8>,
}

impl PooledRelay {
    fn open(&self) -> Upstream {
        let sock = TcpStream::connect(self.origin).unwrap();
        sock.set_nonblocking(true).unwrap();
        let stamp = mpm_core::waiting::new_stamp();
        OPENED.lock().unwrap().push((sock.as_raw_fd(), stamp));
        Upstream { sock, stamp }
    }

    fn exchange(&mut self, c: &mut PooledConn, s: &mut Stream) -> Interest {
        loop {
            if let Some((up, until)) = &mut c.up {
                // Resumed by the deadline: the wait was not woken by the
                // answer (which may be there by now). Said as a timeout.
                if Instant::now() >= *until {
                    c.out = b"timeout\n".to_vec();
                    c.up = None;
                    c.answer.clear();
                    return self.flush(c, s);
                }
                let mut buf = [0u8; 256];
                match up.sock.read(&mut buf) {
                    Ok(n) if n > 0 => {
                        c.answer.extend_from_slice(&buf[..n]);
                        if !c.answer.ends_with(b"\n") {
                            continue;
                        }
                        c.out = [b"ok ".as_slice(), &c.answer].concat();
                        let (up, _) = c.up.take().unwrap();
                        POOL.lock().unwrap().push(up);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(self.busy);
                        let wait = Await::readable(up.sock.as_raw_fd(), *until);
                        return Interest::Await(wait.stamped(up.stamp));
                    }
                    // Closed (or reset) before any answer: a pooled
                    // connection the origin closed while idle. The same
                    // line goes on a new one.
                    _ if c.answer.is_empty() => {
                        c.up = None; // closed: its number is free again
                        let mut fresh = self.open();
                        fresh.sock.write_all(&c.sent).unwrap();
                        c.up = Some((fresh, Instant::now() + self.patience));
                        continue;
                    }
                    _ => {
                        c.out = b"upstream failed\n".to_vec();
                        c.up = None;
                    }
                }
                c.answer.clear();
                return self.flush(c, s);
            }
            let Some(end) = c.line.iter().position(|&b| b == b'\n') else {
                return Interest::Read(Wait::KeepAlive);
            };
            c.sent = c.line.drain(..=end).collect();
            let pooled = POOL.lock().unwrap().pop();
            let mut up = pooled.unwrap_or_else(|| self.open());
            // A write to a connection the origin closed may still succeed
            // (or fail): either way the read that follows finds it closed.
            if up.sock.write_all(&c.sent).is_err() {
                drop(up);
                up = self.open();
                up.sock.write_all(&c.sent).unwrap();
            }
            c.up = Some((up, Instant::now() + self.patience));
        }
    }

    fn flush(&mut self, c: &mut PooledConn, s: &mut Stream) -> Interest {
        while !c.out.is_empty() {
            match s.write(&c.out) {
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Write,
                Err(_) => return Interest::Close,
            }
        }
        Interest::Read(Wait::KeepAlive)
    }
}

impl ConnectionHandler for PooledRelay {
    type Conn = PooledConn;

    fn connected(&mut self, _: &Stream) -> PooledConn {
        PooledConn::default()
    }

    fn readable(&mut self, c: &mut PooledConn, s: &mut Stream) -> Interest {
        if c.up.is_some() {
            return self.exchange(c, s);
        }
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => Interest::Close,
            Ok(n) => {
                c.line.extend_from_slice(&buf[..n]);
                self.exchange(c, s)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Interest::Read(Wait::KeepAlive),
            Err(_) => Interest::Close,
        }
    }

    fn writable(&mut self, c: &mut PooledConn, s: &mut Stream) -> Interest {
        self.flush(c, s)
    }

    fn prefetch(&mut self, _: &mut PooledConn, _: &mut Stream) -> Prefetch {
        if self.on_worker {
            Prefetch::Ready
        } else {
            Prefetch::ReadyInline
        }
    }
}

/// An origin that answers each line with the same line, `delay` after it
/// came, on connections it keeps open until told to close them all.
struct EchoOrigin {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl EchoOrigin {
    fn start(delay: Duration) -> EchoOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&conns);
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                kept.lock().unwrap().push(s.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut w = s.try_clone().unwrap();
                    let mut r = BufReader::new(s);
                    let mut line = Vec::new();
                    while r.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                        std::thread::sleep(delay);
                        if w.write_all(&line).is_err() {
                            return;
                        }
                        line.clear();
                    }
                });
            }
        });
        EchoOrigin { addr, conns }
    }

    /// Close every connection it holds, as an origin whose keep-alive
    /// timeout passed.
    fn close_all(&self) {
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The number before `what` in the loop's stop notice.
fn counted(notice: &str, what: &str) -> u64 {
    let at = notice
        .find(what)
        .unwrap_or_else(|| panic!("{what:?} in {notice}"));
    let before = notice[..at].trim_end();
    let digits = before.rsplit(|c: char| !c.is_ascii_digit()).next().unwrap();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a number before {what:?} in {notice}"))
}

/// Serve with `relay` under event around `body`; returns what `body` did
/// (asserted on after the server stopped: a failure inside would leave it
/// running) and the loop's stop notice.
fn with_pooled_relay<T>(relay: PooledRelay, body: impl FnOnce(SocketAddr) -> T) -> (T, String) {
    let origin = relay.origin;
    *RELAY_ORIGIN.lock().unwrap() = Some(origin);
    *PATIENCE.lock().unwrap() = relay.patience;
    *POOLED.lock().unwrap() = Some(relay);
    POOL.lock().unwrap().clear();
    OPENED.lock().unwrap().clear();
    let notice = mpm_core::error_log::expect(
        format!("mpm: event process {} accepted", std::process::id()).leak(),
    );
    let mut done = None;
    with_server("event", 2, |addr, _| done = Some(body(addr)));
    *POOLED.lock().unwrap() = None;
    POOL.lock().unwrap().clear();
    let lines = notice.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    (done.unwrap(), lines[0].clone())
}

/// Send `line` on `c` and read the answer.
fn exchange(c: &mut TcpStream, line: &str) -> String {
    if c.write_all(line.as_bytes()).is_err() {
        return String::new();
    }
    answer(c)
}

/// A pooled upstream connection the origin closes while it is idle
/// reports its end to the loop, which steps nobody for it (the client's
/// connection waits for its next request) and keeps the report. The next
/// request finds the connection closed and opens another, which gets the
/// descriptor number just freed under a new stamp: the loop registers the
/// new socket rather than take it for the one it had (which would never
/// report, and the request would wait for its timeout). Every request is
/// answered by the origin, none by the timeout. The origin answers 50 ms
/// after each request, so that every request waits on its socket.
#[test]
fn under_event_a_new_upstream_socket_on_a_closed_pooled_ones_number_is_waited_on_anew() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let origin = EchoOrigin::start(Duration::from_millis(50));
    let relay = PooledRelay {
        origin: origin.addr,
        patience: Duration::from_secs(5),
        on_worker: false,
        busy: Duration::ZERO,
    };
    let (answers, notice) = with_pooled_relay(relay, |addr| {
        let mut c = ask(addr, "");
        let mut answers = vec![exchange(&mut c, "0\n")];
        for round in 1..=5 {
            // The origin closes the idle connection; the loop sees it.
            origin.close_all();
            std::thread::sleep(Duration::from_millis(50));
            answers.push(exchange(&mut c, &format!("{round}\n")));
            // And a second request on the new connection, kept this time.
            answers.push(exchange(&mut c, &format!("{round}b\n")));
        }
        answers
    });
    let mut expected = vec!["ok 0\n".to_string()];
    for round in 1..=5 {
        expected.push(format!("ok {round}\n"));
        expected.push(format!("ok {round}b\n"));
    }
    assert_eq!(answers, expected);
    let opened = OPENED.lock().unwrap().clone();
    assert_eq!(opened.len(), 6, "{opened:?}");
    let reused = opened.windows(2).filter(|w| w[0].0 == w[1].0).count();
    assert!(reused > 0, "no descriptor number was reused: {opened:?}");
    assert!(counted(&notice, "upstream reports kept") > 0, "{notice}");
}

/// An upstream's answer that comes while the connection is busy on a
/// worker (its read would block, then the step takes a while before it
/// returns the wait) is reported to the loop before the connection parks:
/// the loop keeps the report and the wait resumes at once, on a socket it
/// registered for an earlier request (no system call for the wait).
#[test]
fn under_event_an_upstream_answer_that_comes_while_the_connection_is_busy_is_not_lost() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The answer comes 30 ms after the request: after the read that would
    // block, while the step is busy for 150 ms more.
    let origin = EchoOrigin::start(Duration::from_millis(30));
    let relay = PooledRelay {
        origin: origin.addr,
        patience: Duration::from_secs(5),
        on_worker: true,
        busy: Duration::from_millis(150),
    };
    let (answers, notice) = with_pooled_relay(relay, |addr| {
        let mut c = ask(addr, "");
        (0..5)
            .map(|round| exchange(&mut c, &format!("{round}\n")))
            .collect::<Vec<_>>()
    });
    let expected: Vec<String> = (0..5).map(|round| format!("ok {round}\n")).collect();
    assert_eq!(answers, expected);
    assert_eq!(OPENED.lock().unwrap().len(), 1, "one upstream connection");
    assert!(
        counted(&notice, "on an upstream socket registered before") >= 4,
        "{notice}"
    );
    assert!(counted(&notice, "upstream reports kept") >= 4, "{notice}");
}

/// Each held connection and the line it sent.
type Held = Arc<Mutex<Vec<(TcpStream, Vec<u8>)>>>;

/// An origin that reads a line and answers it only when released: one
/// thread accepts and holds every connection, so that the test process's
/// threads are the server's and this one.
struct Origin {
    addr: SocketAddr,
    held: Held,
    stop: Arc<AtomicBool>,
}

impl Origin {
    fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, st) = (Arc::clone(&held), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let mut line = Vec::new();
                        let mut r = BufReader::new(s.try_clone().unwrap());
                        let _ = r.read_until(b'\n', &mut line);
                        h.lock().unwrap().push((s, line));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Origin { addr, held, stop }
    }

    /// How many requests have reached it.
    fn waiting(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Answer every request held so far with its own line.
    fn release(&self) {
        for (mut s, line) in self.held.lock().unwrap().drain(..) {
            let _ = s.write_all(&line);
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn threads_of_this_process() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

type Slots = &'static [mpm_core::scoreboard::Slot];

fn run_model(model: &str, settings: &MpmSettings, l: Vec<Listener>, lc: &Lifecycle, s: Slots) {
    let origin = RELAY_ORIGIN.lock().unwrap().unwrap();
    let patience = *PATIENCE.lock().unwrap();
    let stamped = *STAMPED.lock().unwrap();
    if let Some(pooled) = *POOLED.lock().unwrap() {
        let factory = move || PooledRelay {
            origin,
            patience,
            ..pooled
        };
        return match model {
            "worker" => mpm_worker::Worker.run(settings, l, factory, lc, s).unwrap(),
            "uring" => mpm_uring::Uring.run(settings, l, factory, lc, s).unwrap(),
            _ => mpm_event::Event.run(settings, l, factory, lc, s).unwrap(),
        };
    }
    let factory = move || Relay {
        origin,
        patience,
        stamped,
    };
    match model {
        "worker" => mpm_worker::Worker.run(settings, l, factory, lc, s).unwrap(),
        "uring" => mpm_uring::Uring.run(settings, l, factory, lc, s).unwrap(),
        _ => mpm_event::Event.run(settings, l, factory, lc, s).unwrap(),
    }
}

static RELAY_ORIGIN: Mutex<Option<SocketAddr>> = Mutex::new(None);
static PATIENCE: Mutex<Duration> = Mutex::new(Duration::from_secs(30));
/// Whether the relay stamps its upstream sockets.
static STAMPED: Mutex<bool> = Mutex::new(false);
/// Serve with a [`PooledRelay`] like this one instead of a [`Relay`].
static POOLED: Mutex<Option<PooledRelay>> = Mutex::new(None);
/// The tests here share the statics above: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Run `model` with `threads` workers around `body`, which gets the address.
fn with_server(model: &str, threads: usize, body: impl FnOnce(SocketAddr, &Lifecycle)) {
    let settings = MpmSettings {
        // Event: `threads` workers, and room for thousands of connections.
        max_request_workers: if matches!(model, "event" | "uring") {
            4000
        } else {
            threads
        },
        threads_per_child: threads,
        graceful_timeout: Duration::from_secs(1),
        ..MpmSettings::default()
    };
    let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 4096).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let slots = mpm_core::scoreboard::Scoreboard::create(1, threads)
        .unwrap()
        .process_slots(0);
    std::thread::scope(|scope| {
        scope.spawn(|| run_model(model, &settings, listeners, &lifecycle, slots));
        assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
        body(addr, &lifecycle);
        lifecycle.stop();
    });
}

fn ask(addr: SocketAddr, line: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(line.as_bytes()).unwrap();
    c
}

fn answer(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\n") {
        match c.read(&mut b) {
            Ok(1) => got.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Under event, a thousand requests waiting on their upstream are parked
/// on the loop with it: the process has exactly the threads it had before
/// they came, and every one is answered once the origin speaks.
#[test]
fn under_event_a_thousand_requests_waiting_on_an_upstream_add_no_thread() {
    a_thousand_requests_waiting_on_an_upstream_add_no_thread("event", false);
}

/// The same with stamped sockets, which the loop registers once and keeps
/// (edge-triggered) instead of arming them for each wait.
#[test]
fn under_event_a_thousand_requests_waiting_on_registered_upstream_sockets_add_no_thread() {
    a_thousand_requests_waiting_on_an_upstream_add_no_thread("event", true);
}

/// The same under uring, whose ring polls the upstream sockets.
#[test]
fn under_uring_a_thousand_requests_waiting_on_an_upstream_add_no_thread() {
    a_thousand_requests_waiting_on_an_upstream_add_no_thread("uring", false);
}

fn a_thousand_requests_waiting_on_an_upstream_add_no_thread(model: &str, stamped: bool) {
    const WAITING: usize = 1000;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    *STAMPED.lock().unwrap() = stamped;
    let origin = Origin::start();
    *RELAY_ORIGIN.lock().unwrap() = Some(origin.addr);
    *PATIENCE.lock().unwrap() = Duration::from_secs(60);
    // The loop's notice at its stop says what it did: 1,000 parked.
    let notice = mpm_core::error_log::expect(
        format!(
            "mpm: {model} process {} accepted 1001 connections",
            std::process::id()
        )
        .leak(),
    );
    with_server(model, 4, |addr, _| {
        // Warm: the pool's threads exist before counting.
        let mut c = ask(addr, "warm\n");
        wait_until("the warm-up request", || origin.waiting() == 1);
        origin.release();
        assert_eq!(answer(&mut c), "ok warm\n");
        let before = threads_of_this_process();
        let mut clients: Vec<TcpStream> =
            (0..WAITING).map(|i| ask(addr, &format!("{i}\n"))).collect();
        wait_until("every request to reach the origin", || {
            origin.waiting() == WAITING
        });
        let during = threads_of_this_process();
        assert_eq!(
            during, before,
            "{WAITING} waiting requests changed the thread count"
        );
        origin.release();
        for (i, c) in clients.iter_mut().enumerate() {
            assert_eq!(answer(c), format!("ok {i}\n"));
        }
    });
    let lines = notice.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(" 0 handed to workers")
            && lines[0].contains("1001 waits parked on an upstream, 1001 resumed on the loop"),
        "{lines:?}"
    );
    // Under event each answer was held by its step and sent with the
    // others held with it (uring gathers its own way).
    if model == "event" {
        assert!(
            lines[0].contains("1001 answers held and sent with others"),
            "{lines:?}"
        );
    }
    *STAMPED.lock().unwrap() = false;
}

/// Under worker (and prefork, which runs the same blocking driver) a
/// waiting request holds its thread: with two threads, two requests wait
/// at the origin and the third is not read until one is answered.
#[test]
fn under_worker_a_waiting_request_holds_its_thread() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let origin = Origin::start();
    *RELAY_ORIGIN.lock().unwrap() = Some(origin.addr);
    *PATIENCE.lock().unwrap() = Duration::from_secs(60);
    with_server("worker", 2, |addr, _| {
        let mut clients: Vec<TcpStream> = (0..3).map(|i| ask(addr, &format!("{i}\n"))).collect();
        wait_until("two requests at the origin", || origin.waiting() == 2);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            origin.waiting(),
            2,
            "a third request passed two busy threads"
        );
        origin.release();
        // The two answered clients leave; their threads are free again
        // (a blocking model's thread holds its keep-alive connection too).
        let mut got = Vec::new();
        let mut left = Vec::new();
        for mut c in clients.drain(..) {
            c.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            match answer(&mut c) {
                a if a.is_empty() => left.push(c),
                a => got.push(a),
            }
        }
        assert_eq!(left.len(), 1, "answered: {got:?}");
        wait_until("the third request", || origin.waiting() == 1);
        origin.release();
        left[0]
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        got.push(answer(&mut left[0]));
        got.sort();
        assert_eq!(got, ["ok 0\n", "ok 1\n", "ok 2\n"]);
    });
}

/// The wait's own deadline resumes the step, which answers its timeout
/// and keeps the connection: under both driver kinds.
#[test]
fn a_wait_past_its_deadline_resumes_the_step_and_the_connection_serves_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let origin = Origin::start();
    *RELAY_ORIGIN.lock().unwrap() = Some(origin.addr);
    *PATIENCE.lock().unwrap() = Duration::from_millis(200);
    // The loops' stop notices ("mpm: event process …", "mpm: uring
    // process …").
    let _notice = mpm_core::error_log::expect("mpm: ");
    for model in ["event", "uring", "worker"] {
        with_server(model, 2, |addr, _| {
            let mut c = ask(addr, "silent\n");
            let started = Instant::now();
            assert_eq!(answer(&mut c), "timeout\n", "{model}");
            assert!(started.elapsed() >= Duration::from_millis(190), "{model}");
            origin.held.lock().unwrap().clear();
            // The same connection, a second request, answered this time.
            c.write_all(b"again\n").unwrap();
            wait_until("the second request", || origin.waiting() == 1);
            origin.release();
            assert_eq!(answer(&mut c), "ok again\n", "{model}");
        });
    }
}

/// Prefork's children run the blocking driver: the same wait, driven
/// directly, answers as soon as the origin does.
#[test]
fn the_blocking_driver_resumes_a_step_when_its_upstream_answers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let origin = Origin::start();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut client = ask(addr, "direct\n");
    let (socket, peer) = listener.accept().unwrap();
    let stream = Stream::new(socket, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
    let o = &origin;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            wait_until("the request at the origin", || o.waiting() == 1);
            std::thread::sleep(Duration::from_millis(50));
            o.release();
        });
        let mut relay = Relay {
            origin: origin.addr,
            patience: Duration::from_secs(30),
            stamped: false,
        };
        let timeouts = mpm_core::blocking::Timeouts::from_settings(&MpmSettings::default());
        let reader = scope.spawn(move || {
            let got = answer(&mut client);
            drop(client);
            got
        });
        mpm_core::blocking::serve_blocking(
            &mut relay,
            stream,
            &timeouts,
            &mut mpm_core::blocking::NoPark,
        );
        assert_eq!(reader.join().unwrap(), "ok direct\n");
    });
}

/// A graceful stop lets a request waiting on its upstream finish within
/// `--graceful-timeout` (1 s here) and cuts one that waits longer, under
/// both driver kinds: the answer that comes in time is delivered, the other
/// connection is closed unanswered, and the server stops.
#[test]
fn a_graceful_stop_lets_a_waiting_request_finish_in_time_and_cuts_one_that_does_not() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _notice = mpm_core::error_log::expect("mpm: ");
    let origin = Origin::start();
    *RELAY_ORIGIN.lock().unwrap() = Some(origin.addr);
    *PATIENCE.lock().unwrap() = Duration::from_secs(60);
    for model in ["event", "uring", "worker"] {
        let started = Instant::now();
        with_server(model, 2, |addr, lifecycle| {
            let mut soon = ask(addr, "soon\n");
            wait_until("the first request at the origin", || origin.waiting() == 1);
            let first = origin.held.lock().unwrap().pop().unwrap();
            let mut never = ask(addr, "never\n");
            wait_until("the second request at the origin", || origin.waiting() == 1);
            lifecycle.stop();
            // Answered 200 ms into the grace: delivered.
            std::thread::sleep(Duration::from_millis(200));
            let (mut s, line) = first;
            s.write_all(&line).unwrap();
            assert_eq!(answer(&mut soon), "ok soon\n", "{model}");
            // Never answered: cut once the grace is over.
            assert_eq!(answer(&mut never), "", "{model}");
            origin.held.lock().unwrap().clear();
        });
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{model}: the stop took {:?}",
            started.elapsed()
        );
    }
}
