//! `Body::Polled`: a body read from a non-blocking source that has nothing
//! to give every few reads, sent whole (with `Content-Length` when the
//! source knows its length, chunked when not) under both drivers; and a
//! source that fails mid-body cuts the connection instead of ending the
//! body cleanly.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{read_response, serve_http, Driver, DRIVERS};
use mpm_core::waiting::{sleep, Await, Polled};
use mpm_http::{Body, HttpHandler, PollRead, Request, Response};

/// The body's bytes: `i % 251` at offset `i`, so that a byte out of place
/// shows.
fn pattern() -> &'static [u8] {
    static P: OnceLock<Vec<u8>> = OnceLock::new();
    P.get_or_init(|| (0..251 * 300).map(|i| (i % 251) as u8).collect())
}

/// A source of `total` pattern bytes that waits (a timer already due, or
/// nothing recorded) every few reads, and fails at `fail_at` if given.
struct Source {
    total: u64,
    pos: u64,
    reads: u64,
    known: bool,
    fail_at: Option<u64>,
}

impl PollRead for Source {
    fn poll_read(&mut self, buf: &mut [u8]) -> Polled<io::Result<usize>> {
        self.reads += 1;
        match self.reads % 5 {
            1 => return Polled::Wait(Await::timer(Instant::now())),
            3 => return Polled::Again,
            _ => {}
        }
        if self.fail_at.is_some_and(|at| self.pos >= at) {
            return Polled::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the upstream reset",
            )));
        }
        let at = (self.pos % 251) as usize;
        let n = buf
            .len()
            .min(usize::try_from(self.total - self.pos).unwrap_or(usize::MAX))
            .min(pattern().len() - 251);
        buf[..n].copy_from_slice(&pattern()[at..at + n]);
        self.pos += n as u64;
        Polled::Ready(Ok(n))
    }

    fn len(&self) -> Option<u64> {
        self.known.then_some(self.total)
    }
}

/// `/known/N` and `/unknown/N`: N pattern bytes; `/known-fail/N` (N
/// announced) and `/unknown-fail/N`: fail after 100 KiB.
struct Bodies;

impl HttpHandler for Bodies {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        let mut parts = req.path().trim_start_matches('/').split('/');
        let kind = parts.next().unwrap_or_default();
        let (later, kind) = match kind.strip_prefix("later-") {
            Some(rest) => (true, rest),
            None => (false, kind),
        };
        let total: u64 = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let source = Source {
            total,
            pos: 0,
            reads: 0,
            known: !kind.starts_with("unknown"),
            fail_at: kind.ends_with("fail").then_some(100 * 1024),
        };
        let answer = Response::new(200).body(Body::Polled(Box::new(source)));
        if later {
            // An upstream's answer: the head comes later, then its body.
            return Response::later(async move {
                sleep(Duration::from_millis(2)).await;
                answer
            });
        }
        answer
    }

    fn answers_without_blocking(&self, _: &Request<'_>) -> bool {
        true
    }
}

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c
}

/// Read a head byte by byte (so that nothing after it is taken).
fn read_head(c: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "closed mid-head");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Read `n` bytes and check they are the pattern from offset `from`.
fn expect_pattern(c: &mut TcpStream, from: u64, n: u64) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = from;
    let end = from + n;
    while at < end {
        let want = buf.len().min((end - at) as usize);
        let got = c.read(&mut buf[..want]).unwrap();
        assert!(got > 0, "the body ended at {at} of {end}");
        let p = (at % 251) as usize;
        assert!(
            buf[..got] == pattern()[p..p + got],
            "a byte out of place within {at}..{}",
            at + got as u64
        );
        at += got as u64;
    }
}

/// Read a chunked body of pattern bytes to its last chunk; its length.
fn expect_chunked_pattern(c: &mut TcpStream) -> u64 {
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            assert_eq!(c.read(&mut byte).unwrap(), 1, "cut in a size line");
            line.push(byte[0]);
        }
        let size =
            u64::from_str_radix(std::str::from_utf8(&line[..line.len() - 2]).unwrap(), 16).unwrap();
        expect_pattern(c, total, size);
        total += size;
        let mut crlf = [0u8; 2];
        c.read_exact(&mut crlf).unwrap();
        assert_eq!(&crlf, b"\r\n");
        if size == 0 {
            return total;
        }
    }
}

const GIB: u64 = 1 << 30;

#[test]
fn a_polled_body_of_a_gib_arrives_whole_with_its_content_length() {
    // The loop driver: within --sendfile-max-chunk a turn, yielding between.
    let (addr, server) = serve_http(Driver::Loop, Bodies);
    let mut c = connect(addr);
    c.write_all(format!("GET /known/{GIB} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .unwrap();
    let head = read_head(&mut c);
    assert!(
        head.contains(&format!("Content-Length: {GIB}\r\n")),
        "{head}"
    );
    expect_pattern(&mut c, 0, GIB);
    // The connection goes on after it.
    c.write_all(b"GET /known/10 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (head, body) = read_response(&mut c);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert_eq!(body, &pattern()[..10]);
    let seen = server.join().unwrap();
    assert!(
        seen.iter().any(|i| matches!(i, mpm_core::Interest::Yield)),
        "the loop served others between stretches"
    );
}

#[test]
fn a_polled_body_of_unknown_length_arrives_whole_chunked() {
    let (addr, server) = serve_http(Driver::Blocking, Bodies);
    let mut c = connect(addr);
    c.write_all(
        format!("GET /unknown/{GIB} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let head = read_head(&mut c);
    assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
    assert!(!head.contains("Content-Length"), "{head}");
    assert_eq!(expect_chunked_pattern(&mut c), GIB);
    server.join().unwrap();
}

#[test]
fn polled_bodies_are_framed_alike_by_both_drivers() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Bodies);
        let mut c = connect(addr);
        let n = 3 * 1024 * 1024 + 7;
        c.write_all(
            format!(
                "GET /known/{n} HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET /unknown/{n} HTTP/1.1\r\nHost: a\r\n\r\n\
                 HEAD /known/{n} HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET /unknown/{n} HTTP/1.0\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let head = read_head(&mut c);
        assert!(
            head.contains(&format!("Content-Length: {n}\r\n")),
            "{driver:?}: {head}"
        );
        expect_pattern(&mut c, 0, n);
        let head = read_head(&mut c);
        assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
        assert_eq!(expect_chunked_pattern(&mut c), n);
        let head = read_head(&mut c);
        assert!(
            head.contains(&format!("Content-Length: {n}\r\n")),
            "HEAD: {head}"
        );
        // HTTP/1.0: delimited by the close.
        let head = read_head(&mut c);
        assert!(head.contains("Connection: close\r\n"), "{head}");
        assert!(!head.contains("chunked"), "{head}");
        expect_pattern(&mut c, 0, n);
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{driver:?}: nothing after the body");
        server.join().unwrap();
    }
}

/// A `HEAD` answer's body says the `GET`'s length when it knows it, and
/// nothing when it does not (a proxy whose upstream gave none): no
/// `Content-Length: 0`, no `Transfer-Encoding`, and the connection goes on.
#[test]
fn a_head_answer_of_unknown_length_has_no_framing_field() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Bodies);
        let mut c = connect(addr);
        c.write_all(
            b"HEAD /unknown/10 HTTP/1.1\r\nHost: a\r\n\r\n\
              HEAD /known/10 HTTP/1.1\r\nHost: a\r\n\r\n\
              GET /known/10 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let head = read_head(&mut c);
        assert!(
            head.starts_with("HTTP/1.1 200 OK\r\n"),
            "{driver:?}: {head}"
        );
        assert!(
            !head.contains("Content-Length") && !head.contains("Transfer-Encoding"),
            "{driver:?}: {head}"
        );
        let head = read_head(&mut c);
        assert!(
            head.contains("Content-Length: 10\r\n"),
            "{driver:?}: {head}"
        );
        let (head, body) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{driver:?}: {head}");
        assert_eq!(body, &pattern()[..10]);
        server.join().unwrap();
    }
}

#[test]
fn a_later_answer_may_have_a_polled_body() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Bodies);
        let mut c = connect(addr);
        let n = 2 * 1024 * 1024;
        c.write_all(
            format!(
                "GET /later-known/{n} HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET /later-unknown/{n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let head = read_head(&mut c);
        assert!(
            head.contains(&format!("Content-Length: {n}\r\n")),
            "{driver:?}: {head}"
        );
        expect_pattern(&mut c, 0, n);
        let head = read_head(&mut c);
        assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
        assert_eq!(expect_chunked_pattern(&mut c), n);
        server.join().unwrap();
    }
}

#[test]
fn a_source_that_fails_mid_body_cuts_the_connection() {
    for driver in DRIVERS {
        let logged = mpm_core::error_log::expect("a response body's source failed after");
        // Announced: a short body, then the end of the stream.
        let (addr, server) = serve_http(driver, Bodies);
        let mut c = connect(addr);
        c.write_all(b"GET /known-fail/1048576 HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let head = read_head(&mut c);
        assert!(head.contains("Content-Length: 1048576\r\n"), "{head}");
        let mut rest = Vec::new();
        // The cut: the end of the stream (or a reset) well short of it.
        let _ = c.read_to_end(&mut rest);
        assert!(
            (100 * 1024..1 << 20).contains(&rest.len()),
            "{driver:?}: {} bytes",
            rest.len()
        );
        server.join().unwrap();
        // Chunked: never the last chunk.
        let (addr, server) = serve_http(driver, Bodies);
        let mut c = connect(addr);
        c.write_all(b"GET /unknown-fail/1048576 HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let head = read_head(&mut c);
        assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        assert!(!rest.ends_with(b"0\r\n\r\n"), "{driver:?}: a clean end");
        assert!(
            rest.len() >= 100 * 1024,
            "{driver:?}: what came before the failure"
        );
        server.join().unwrap();
        assert_eq!(logged.count(), 2, "{driver:?}: one line per failure");
    }
}
