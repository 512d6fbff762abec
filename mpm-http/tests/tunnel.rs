//! `Response::tunnel`: after a `101`, bytes go both ways between the client
//! and the upstream (the client's early bytes first), the connection ends
//! when the upstream closes and the client follows, or when the tunnel sits
//! idle past its timeout; under both drivers, and from a later answer too.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{read_response, serve_http, DRIVERS};
use mpm_core::waiting::sleep;
use mpm_http::{HttpHandler, Request, Response, Tunnel};

/// The upstream's side of the tunnel: one end of a socket pair.
struct Upstream {
    socket: UnixStream,
    idle: Duration,
}

impl Tunnel for Upstream {
    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.socket.read(buf)
    }
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.socket.write(buf)
    }
    fn idle_timeout(&self) -> Duration {
        self.idle
    }
}

/// Upgrades `/ws` at once and `/later-ws` from a later answer.
struct Upgrader {
    upstream: Option<Upstream>,
}

impl HttpHandler for Upgrader {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        let Some(upstream) = self.upstream.take() else {
            return Response::error(503);
        };
        let switch = |upstream: Upstream| {
            Response::new(101)
                .header("Upgrade", "echo")
                .tunnel(Box::new(upstream))
        };
        if req.path() == "/later-ws" {
            return Response::later(async move {
                sleep(Duration::from_millis(5)).await;
                switch(upstream)
            });
        }
        switch(upstream)
    }

    fn answers_without_blocking(&self, _: &Request<'_>) -> bool {
        true
    }
}

fn upgrader(idle: Duration) -> (Upgrader, UnixStream) {
    let (theirs, ours) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    theirs
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let handler = Upgrader {
        upstream: Some(Upstream { socket: ours, idle }),
    };
    (handler, theirs)
}

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn read_exactly(r: &mut impl Read, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).unwrap();
    buf
}

#[test]
fn a_tunnel_carries_bytes_both_ways_and_ends_when_the_upstream_closes() {
    for driver in DRIVERS {
        for path in ["/ws", "/later-ws"] {
            let (handler, mut upstream) = upgrader(Duration::from_secs(10));
            let (addr, server) = serve_http(driver, handler);
            let mut c = connect(addr);
            c.write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nearly"
                )
                .as_bytes(),
            )
            .unwrap();
            let (head, _) = read_response(&mut c);
            assert!(
                head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
                "{driver:?} {path}: {head}"
            );
            assert!(head.contains("Upgrade: echo\r\n"), "{head}");
            assert!(head.contains("Connection: Upgrade\r\n"), "{head}");
            assert!(!head.contains("Content-Length"), "{head}");
            // What the client sent behind its head goes first.
            assert_eq!(read_exactly(&mut upstream, 5), b"early");
            upstream.write_all(b"pong").unwrap();
            assert_eq!(read_exactly(&mut c, 4), b"pong");
            c.write_all(b"ping").unwrap();
            assert_eq!(read_exactly(&mut upstream, 4), b"ping");
            // More than either buffer holds, each way at once.
            let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
            let down = {
                let big = big.clone();
                let mut up = upstream.try_clone().unwrap();
                std::thread::spawn(move || {
                    up.write_all(&big).unwrap();
                    read_exactly(&mut up, big.len())
                })
            };
            let mut writer = c.try_clone().unwrap();
            let sent = {
                let big = big.clone();
                std::thread::spawn(move || writer.write_all(&big).unwrap())
            };
            assert!(read_exactly(&mut c, big.len()) == big, "{driver:?}: down");
            sent.join().unwrap();
            assert!(down.join().unwrap() == big, "{driver:?}: up");
            // The upstream closes: the client sees the end.
            drop(upstream);
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty(), "{rest:?}");
            drop(c);
            server.join().unwrap();
        }
    }
}

#[test]
fn a_tunnel_closes_when_the_client_is_done_and_the_upstream_follows() {
    for driver in DRIVERS {
        let (handler, mut upstream) = upgrader(Duration::from_secs(10));
        let (addr, server) = serve_http(driver, handler);
        let mut c = connect(addr);
        c.write_all(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
            .unwrap();
        let (head, _) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        c.write_all(b"bye").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        // The upstream gets the bytes, then the end of its input...
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye", "{driver:?}");
        // ...and may still answer before it closes.
        upstream.write_all(b"last words").unwrap();
        drop(upstream);
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"last words", "{driver:?}");
        server.join().unwrap();
    }
}

#[test]
fn an_idle_tunnel_is_closed_after_its_timeout() {
    for driver in DRIVERS {
        let (handler, mut upstream) = upgrader(Duration::from_millis(100));
        let (addr, server) = serve_http(driver, handler);
        let mut c = connect(addr);
        c.write_all(b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
            .unwrap();
        let (head, _) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        // Nothing moves: both sides see the end.
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).unwrap();
        assert!(got.is_empty());
        server.join().unwrap();
    }
}

#[test]
fn a_tunnel_on_a_status_other_than_101_is_refused_with_a_500() {
    let logged = mpm_core::error_log::expect("a tunnel follows a 101 answer, not a 200");
    let (theirs, _) = UnixStream::pair().unwrap();
    let r = Response::new(200).tunnel(Box::new(Upstream {
        socket: theirs,
        idle: Duration::from_secs(1),
    }));
    assert_eq!(r.status(), 500);
    assert!(!r.is_tunnel());
    assert_eq!(logged.count(), 1);
}
