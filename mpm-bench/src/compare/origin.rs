//! The origin compare puts behind a proxy route: an HTTP/1.1 server on
//! 127.0.0.1 that answers every request `delay` after its head arrived,
//! `200 OK` with a body of `body` bytes, on keep-alive connections.
//!
//! It runs in one thread of compare's process, an epoll loop over every
//! connection, so that 10,000 requests waiting on it cost it descriptors
//! and a few hundred bytes each, not threads: what is measured is the
//! proxy's cost of a waiting request, never the origin's. Every request
//! waits the same time, so the deadlines arrive in order and a queue is
//! the timer (`epoll_wait` sleeps until the first one). It counts the
//! connections it accepts, the requests it takes in, and those whose delay
//! has not passed (the requests waiting on it now).
//!
//! It parses just enough: the end of each request head, a `Content-Length`
//! body (read and dropped) and `Connection: close` (closed after that
//! answer). A head longer than 64 KiB closes the connection.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use socket2::{Domain, Socket, Type};

use mpm_core::Error;

/// The largest body `--upstream-body` takes.
pub const MAX_BODY: usize = 64 << 20;
/// The longest delay the origin takes (`--upstream-delay`).
pub const MAX_DELAY: Duration = Duration::from_secs(600);
/// A request head longer than this closes its connection.
const MAX_HEAD: usize = 64 * 1024;
/// epoll key of the listener (connections use their descriptor).
const LISTENER: u64 = u64::MAX;
/// The longest `epoll_wait`, so that a stop is seen within it.
const TICK_MS: u16 = 50;
/// Descriptors compare asks for when it may raise its hard limit (it is
/// root): 10,000 waiting requests are 10,000 client sockets and 10,000
/// origin sockets in compare's process, and as many again in the server's
/// (which inherits the limit).
pub const WANTED_FDS: u64 = 65_536;

/// Raise this process's descriptor limit to [`WANTED_FDS`] where that is
/// allowed (the hard limit too, as root), else to the hard limit: the
/// limit now.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft >= WANTED_FDS {
        return soft;
    }
    let want = WANTED_FDS;
    if setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).is_ok() {
        return want;
    }
    // Not allowed above the hard limit: as far as it goes.
    mpm_master::raise_fd_limit().unwrap_or(soft)
}

/// What the origin has seen; shared with its thread.
#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
    /// Requests whose delay has passed (their answer is due or written).
    answered: AtomicU64,
}

/// A running origin, stopped when dropped.
#[derive(Debug)]
pub struct Origin {
    addr: SocketAddr,
    delay: Duration,
    body: usize,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Origin {
    /// Listen on 127.0.0.1 (an ephemeral port) and answer every request
    /// after `delay` with `body` bytes.
    pub fn start(delay: Duration, body: usize) -> Result<Origin, Error> {
        if body > MAX_BODY {
            return Err(Error::config(format!(
                "--upstream-body {body}: at most {MAX_BODY} bytes"
            )));
        }
        if delay > MAX_DELAY {
            return Err(Error::config(format!(
                "--upstream-delay {delay:?}: at most {MAX_DELAY:?}"
            )));
        }
        let io = |what: &str| {
            let what = what.to_string();
            move |e| Error::io(format!("the origin: {what}"), e)
        };
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).map_err(io("a socket"))?;
        socket.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        socket
            .bind(&addr.into())
            .map_err(io("binding 127.0.0.1:0"))?;
        // A proxy opens a connection per waiting request, thousands at
        // once: std's backlog of 128 would drop their SYNs (a second lost each).
        socket.listen(4096).map_err(io("listening"))?;
        socket.set_nonblocking(true).map_err(io("O_NONBLOCK"))?;
        let listener: TcpListener = socket.into();
        let addr = listener.local_addr().map_err(io("its address"))?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::io("the origin: epoll_create1", io::Error::from(e)))?;
        epoll
            .add(&listener, EpollEvent::new(EpollFlags::EPOLLIN, LISTENER))
            .map_err(|e| Error::io("the origin: epoll_ctl", io::Error::from(e)))?;
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nServer: mpm-compare-origin\r\nContent-Type: text/plain\r\n\
             Content-Length: {body}\r\n\r\n"
        )
        .into_bytes();
        answer.resize(answer.len() + body, b'x');
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut lp = Loop {
            epoll,
            listener,
            conns: Vec::new(),
            queue: VecDeque::new(),
            delay,
            answer: answer.into(),
            counters: Arc::clone(&counters),
            generation: 0,
        };
        let halt = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("mpm-compare-origin".into())
            .spawn(move || lp.run(&halt))
            .map_err(io("starting its thread"))?;
        Ok(Origin {
            addr,
            delay,
            body,
            counters,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long it waits before each answer.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Bytes in each answer's body.
    pub fn body(&self) -> usize {
        self.body
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.counters.connections.load(Ordering::Relaxed)
    }

    /// Request heads taken in so far.
    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::Relaxed)
    }

    /// Requests taken in whose delay has not passed: waiting on it now.
    pub fn waiting(&self) -> u64 {
        let answered = self.counters.answered.load(Ordering::Relaxed);
        self.requests().saturating_sub(answered)
    }

    /// `--proxy /=http://ADDR`, the route every server under test gets.
    pub fn proxy_flags(&self) -> [String; 2] {
        ["--proxy".into(), format!("/=http://{}", self.addr)]
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One client connection of the origin.
struct Conn {
    stream: TcpStream,
    /// Tells this connection from a later one on the same descriptor
    /// (the deadline queue names connections by descriptor).
    generation: u64,
    /// The start of a request head whose end has not arrived.
    head: Vec<u8>,
    /// Request body bytes still to read and drop.
    discard: usize,
    /// Requests whose delay has not passed.
    waiting: usize,
    /// Answers due and not yet written whole.
    due: usize,
    /// Bytes of the first due answer already written.
    sent: usize,
    /// The client said `Connection: close`: close after its answer.
    close: bool,
    /// EPOLLOUT is registered (a write found the socket full).
    out: bool,
}

struct Loop {
    epoll: Epoll,
    listener: TcpListener,
    /// By descriptor.
    conns: Vec<Option<Conn>>,
    /// (when due, descriptor, generation), in order: every request waits
    /// the same time.
    queue: VecDeque<(Instant, usize, u64)>,
    delay: Duration,
    answer: Arc<[u8]>,
    counters: Arc<Counters>,
    generation: u64,
}

impl Loop {
    fn run(&mut self, stop: &AtomicBool) {
        let mut events = vec![EpollEvent::empty(); 512];
        let mut buf = vec![0u8; 64 * 1024];
        while !stop.load(Ordering::Relaxed) {
            let wait = self.queue.front().map_or(TICK_MS, |&(at, _, _)| {
                // Rounded up, so that the wait never ends before the deadline.
                let us = at.saturating_duration_since(Instant::now()).as_micros();
                us.div_ceil(1000).min(u128::from(TICK_MS)) as u16
            });
            let n = self.epoll.wait(&mut events, wait).unwrap_or(0);
            for ev in &events[..n] {
                if ev.data() == LISTENER {
                    self.accept();
                    continue;
                }
                let fd = ev.data() as usize;
                let flags = ev.events();
                let keep = match self.conns.get_mut(fd).and_then(Option::as_mut) {
                    None => continue,
                    Some(c) => {
                        let mut keep = true;
                        if flags.intersects(
                            EpollFlags::EPOLLIN | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR,
                        ) {
                            keep = take_requests(
                                c,
                                &mut buf,
                                self.delay,
                                &mut self.queue,
                                &self.counters,
                                fd,
                            );
                        }
                        if keep && (c.due > 0 || c.close) {
                            keep = flush(&self.epoll, c, &self.answer);
                        }
                        keep
                    }
                };
                if !keep {
                    self.close(fd);
                }
            }
            self.answer_due();
        }
    }

    fn accept(&mut self) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) => {
                    if e.raw_os_error() == Some(libc::EMFILE)
                        || e.raw_os_error() == Some(libc::ENFILE)
                    {
                        // Out of descriptors: let some close.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    return;
                }
            };
            self.counters.connections.fetch_add(1, Ordering::Relaxed);
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let fd = stream.as_raw_fd() as usize;
            if self
                .epoll
                .add(
                    stream.as_fd(),
                    EpollEvent::new(EpollFlags::EPOLLIN, fd as u64),
                )
                .is_err()
            {
                continue;
            }
            if self.conns.len() <= fd {
                self.conns.resize_with(fd + 1, || None);
            }
            self.generation += 1;
            self.conns[fd] = Some(Conn {
                stream,
                generation: self.generation,
                head: Vec::new(),
                discard: 0,
                waiting: 0,
                due: 0,
                sent: 0,
                close: false,
                out: false,
            });
        }
    }

    /// Every request whose delay has passed: its answer is due.
    fn answer_due(&mut self) {
        let now = Instant::now();
        while let Some(&(at, fd, generation)) = self.queue.front() {
            if at > now {
                break;
            }
            self.queue.pop_front();
            self.counters.answered.fetch_add(1, Ordering::Relaxed);
            let keep = match self.conns.get_mut(fd).and_then(Option::as_mut) {
                // That connection is gone; the descriptor may be another's now.
                Some(c) if c.generation == generation => {
                    c.waiting -= 1;
                    c.due += 1;
                    flush(&self.epoll, c, &self.answer)
                }
                _ => continue,
            };
            if !keep {
                self.close(fd);
            }
        }
    }

    fn close(&mut self, fd: usize) {
        if let Some(c) = self.conns.get_mut(fd).and_then(Option::take) {
            // Its requests still queued are answered (counted) and skipped.
            let _ = self.epoll.delete(c.stream.as_fd());
        }
    }
}

/// Read what the client sent and take in the requests it completes;
/// false: close the connection.
fn take_requests(
    c: &mut Conn,
    buf: &mut [u8],
    delay: Duration,
    queue: &mut VecDeque<(Instant, usize, u64)>,
    counters: &Counters,
    fd: usize,
) -> bool {
    let n = match c.stream.read(buf) {
        Ok(0) => return false,
        Ok(n) => n,
        Err(e) => {
            return matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            )
        }
    };
    if c.close {
        // After `Connection: close` the rest is ignored.
        return true;
    }
    let joined;
    let mut data = &buf[..n];
    if !c.head.is_empty() {
        c.head.extend_from_slice(data);
        joined = std::mem::take(&mut c.head);
        data = &joined;
    }
    let mut p = 0;
    let mut new = 0u64;
    while p < data.len() && !c.close {
        if c.discard > 0 {
            let k = c.discard.min(data.len() - p);
            c.discard -= k;
            p += k;
            continue;
        }
        match find(&data[p..], b"\r\n\r\n") {
            None => {
                if data.len() - p > MAX_HEAD {
                    return false;
                }
                c.head.extend_from_slice(&data[p..]);
                break;
            }
            Some(end) => {
                let head = &data[p..p + end];
                c.discard = header(head, b"content-length")
                    .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok())
                    .unwrap_or(0);
                c.close =
                    header(head, b"connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close"));
                p += end + 4;
                new += 1;
            }
        }
    }
    if new > 0 {
        counters.requests.fetch_add(new, Ordering::Relaxed);
        let at = Instant::now() + delay;
        for _ in 0..new {
            queue.push_back((at, fd, c.generation));
        }
        c.waiting += new as usize;
    }
    true
}

/// Write the due answers until they are done or the socket is full;
/// false: close the connection.
fn flush(epoll: &Epoll, c: &mut Conn, answer: &[u8]) -> bool {
    while c.due > 0 {
        match c.stream.write(&answer[c.sent..]) {
            Ok(0) => return false,
            Ok(w) => {
                c.sent += w;
                if c.sent == answer.len() {
                    c.sent = 0;
                    c.due -= 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !c.out {
                    let fd = c.stream.as_raw_fd() as u64;
                    let mut ev = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT, fd);
                    let _ = epoll.modify(c.stream.as_fd(), &mut ev);
                    c.out = true;
                }
                return true;
            }
            Err(_) => return false,
        }
    }
    if c.out {
        let fd = c.stream.as_raw_fd() as u64;
        let mut ev = EpollEvent::new(EpollFlags::EPOLLIN, fd);
        let _ = epoll.modify(c.stream.as_fd(), &mut ev);
        c.out = false;
    }
    !(c.close && c.waiting == 0)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The value of header `name` (lower case) in a request head, if present.
fn header<'a>(head: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request on `s`, read to the end of its answer: the status line
    /// and the body's length.
    fn exchange(s: &mut TcpStream, request: &[u8]) -> (String, usize) {
        s.write_all(request).expect("send");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).expect("read");
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
            if let Some(end) = find(&got, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|v| v.parse().ok())
                    .expect("a length");
                if got.len() >= end + 4 + len {
                    let status = head.lines().next().unwrap_or("").to_string();
                    return (status, got.len() - end - 4);
                }
            }
        }
    }

    #[test]
    fn the_origin_answers_after_its_delay_and_counts_connections_and_requests() {
        let delay = Duration::from_millis(150);
        let origin = Origin::start(delay, 1456).expect("origin");
        assert_eq!((origin.connections(), origin.requests()), (0, 0));
        let mut a = TcpStream::connect(origin.addr()).expect("connect");
        a.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let get = b"GET /anything HTTP/1.1\r\nHost: x\r\n\r\n";
        // Two requests on one keep-alive connection, a third on another.
        for _ in 0..2 {
            let sent = Instant::now();
            let (status, body) = exchange(&mut a, get);
            assert!(sent.elapsed() >= delay, "answered before its delay");
            assert_eq!((status.as_str(), body), ("HTTP/1.1 200 OK", 1456));
        }
        let mut b = TcpStream::connect(origin.addr()).expect("connect");
        b.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(exchange(&mut b, post).1, 1456);
        assert_eq!(origin.connections(), 2);
        assert_eq!(origin.requests(), 3, "the POST's body is no request");
        assert_eq!(origin.waiting(), 0);
    }

    #[test]
    fn a_request_is_counted_as_waiting_until_its_delay_passes() {
        let origin = Origin::start(Duration::from_secs(30), 10).expect("origin");
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(origin.addr()).expect("connect");
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("send");
            held.push(s);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while origin.requests() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!((origin.requests(), origin.waiting()), (3, 3));
        assert_eq!(origin.connections(), 3);
        // Dropped with requests waiting: the thread stops all the same.
        drop(origin);
    }

    #[test]
    fn connection_close_is_answered_then_closed() {
        let origin = Origin::start(Duration::ZERO, 3).expect("origin");
        let mut s = TcpStream::connect(origin.addr()).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("send");
        let mut all = Vec::new();
        s.read_to_end(&mut all).expect("read to the close");
        assert!(all.starts_with(b"HTTP/1.1 200 OK\r\n") && all.ends_with(b"\r\n\r\nxxx"));
    }

    #[test]
    fn a_body_or_delay_too_large_is_refused_with_the_option_named() {
        let e = Origin::start(Duration::ZERO, MAX_BODY + 1).expect_err("too big");
        assert!(e.to_string().contains("--upstream-body"), "{e}");
        let e = Origin::start(MAX_DELAY * 2, 1).expect_err("too long");
        assert!(e.to_string().contains("--upstream-delay"), "{e}");
    }
}
