//! A bounded client loop for hand-over tests (binary upgrade, restarts, a
//! load balancer in front): several threads send `GET` requests, some on a
//! fresh connection each, some on keep-alive connections, and count every
//! request that did not get a complete `200`.
//!
//! Like every HTTP client (curl, browsers, HAProxy), a request that fails on
//! a *reused* keep-alive connection before a single byte of response came
//! back is retried once on a new connection: the server may close an idle
//! connection at any time (RFC 9112, section 9.3.1), and the client cannot
//! tell that from a request lost in flight. Counted apart as `retried`.
//! Nothing else is retried: a fresh connection refused or reset, a cut
//! response, or a status other than 200 is a failure.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::IO_TIMEOUT;

/// What the client threads saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests answered with a complete 200.
    pub ok: u64,
    /// Requests retried once after a reused connection was closed idle.
    pub retried: u64,
    /// Each failed request, described.
    pub failures: Vec<String>,
    /// How many 200 responses carried each body.
    pub bodies: BTreeMap<Vec<u8>, u64>,
}

impl Tally {
    /// Print the counts, then fail if any request failed (showing the first
    /// ten and `logs`) or if fewer than `at_least` were answered.
    pub fn assert_no_failures(&self, at_least: u64, logs: &str) {
        eprintln!(
            "{} requests answered ({} bodies), {} retried after an idle close, {} failed",
            self.ok,
            self.bodies.len(),
            self.retried,
            self.failures.len()
        );
        assert!(
            self.failures.is_empty(),
            "{} of {} requests failed: {:?}\n{logs}",
            self.failures.len(),
            self.ok + self.failures.len() as u64,
            &self.failures[..self.failures.len().min(10)],
        );
        assert!(self.ok > at_least, "only {} requests answered", self.ok);
    }

    fn merge(&mut self, other: Tally) {
        self.ok += other.ok;
        self.retried += other.retried;
        self.failures.extend(other.failures);
        for (body, n) in other.bodies {
            *self.bodies.entry(body).or_default() += n;
        }
    }
}

/// Client threads running until [`finish`](Self::finish).
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Tally>>,
}

impl Load {
    /// Start `threads` clients requesting `path` from `addr`: even ones on
    /// keep-alive connections (up to 50 requests each), odd ones on a new
    /// connection per request.
    pub fn start(addr: SocketAddr, threads: usize, path: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|i| {
                let stop = Arc::clone(&stop);
                let path = path.to_string();
                std::thread::spawn(move || client(addr, &path, i % 2 == 0, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stop the clients and add up what they saw.
    pub fn finish(self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let mut total = Tally::default();
        for t in self.threads {
            match t.join() {
                Ok(tally) => total.merge(tally),
                Err(_) => total.failures.push("a client thread panicked".into()),
            }
        }
        total
    }
}

fn client(addr: SocketAddr, path: &str, keep_alive: bool, stop: &AtomicBool) -> Tally {
    let mut tally = Tally::default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: load\r\n{}\r\n",
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        }
    );
    let mut conn: Option<(TcpStream, u32)> = None;
    while !stop.load(Ordering::Relaxed) {
        let reused = conn.is_some();
        let (mut stream, used) = match conn.take() {
            Some(c) => c,
            None => match open(addr) {
                Ok(s) => (s, 0),
                Err(e) => {
                    tally.failures.push(format!("connect: {e}"));
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            },
        };
        let outcome = exchange(&mut stream, request.as_bytes());
        let outcome = match outcome {
            Err(Failure::Nothing(_)) if reused => {
                tally.retried += 1;
                match open(addr) {
                    Ok(mut fresh) => {
                        let again = exchange(&mut fresh, request.as_bytes());
                        stream = fresh;
                        again
                    }
                    Err(e) => Err(Failure::Nothing(format!("reconnect: {e}"))),
                }
            }
            other => other,
        };
        match outcome {
            Ok((body, close)) => {
                tally.ok += 1;
                *tally.bodies.entry(body).or_default() += 1;
                if keep_alive && !close && used < 50 {
                    conn = Some((stream, used + 1));
                }
            }
            Err(Failure::Nothing(e)) | Err(Failure::Partial(e)) => {
                tally.failures.push(e);
            }
        }
    }
    tally
}

fn open(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    s.set_nodelay(true)?;
    Ok(s)
}

enum Failure {
    /// Not one byte of response came back.
    Nothing(String),
    /// A response began but was wrong or cut.
    Partial(String),
}

/// One request and its response: the body, and whether the server said
/// `Connection: close`.
fn exchange(stream: &mut TcpStream, request: &[u8]) -> Result<(Vec<u8>, bool), Failure> {
    stream
        .write_all(request)
        .map_err(|e| Failure::Nothing(format!("send: {e}")))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Err(Failure::Nothing("closed unanswered".into())),
            Ok(0) => return Err(Failure::Partial("closed mid-head".into())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if buf.is_empty() => return Err(Failure::Nothing(format!("read: {e}"))),
            Err(e) => return Err(Failure::Partial(format!("read mid-head: {e}"))),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status_ok = head.starts_with("http/1.1 200 ");
    let close = head.contains("\r\nconnection: close\r\n");
    let length: usize = head
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Failure::Partial(format!("no content-length: {head:?}")))?;
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        match stream.read(&mut chunk) {
            Ok(0) => return Err(Failure::Partial("closed mid-body".into())),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(Failure::Partial(format!("read mid-body: {e}"))),
        }
    }
    if !status_ok {
        let line = head.lines().next().unwrap_or("").to_string();
        return Err(Failure::Partial(format!("status: {line}")));
    }
    Ok((body, close))
}
