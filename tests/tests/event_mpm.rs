//! What the event MPM promises beyond the shared suite: idle connections cost
//! memory, not threads; slow clients never hold a worker.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};

use std::net::TcpStream;
use std::time::{Duration, Instant};

use tests::{threads, RawConn, Server, TempDir};

const PAGE: &[u8] = b"<html><body>small page</body></html>\n";

fn docroot() -> TempDir {
    let root = TempDir::new("event");
    root.write("index.html", PAGE);
    root
}

/// Raise this test process's descriptor limit to what `n` sockets need.
fn allow_descriptors(n: u64) -> bool {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((_, hard)) if hard >= n => setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok(),
        _ => false,
    }
}

fn get_on(conn: &mut RawConn) -> Vec<u8> {
    conn.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = conn.read_response().unwrap();
    assert_eq!(r.status, 200);
    r.body
}

#[test]
fn ten_thousand_idle_keepalive_connections_are_held_by_fewer_than_64_threads() {
    const IDLE: usize = 10_000;
    if !allow_descriptors(IDLE as u64 + 512) {
        tests::skip(&format!(
            "this process may not open {IDLE} sockets (hard RLIMIT_NOFILE)"
        ));
        return;
    }
    let root = docroot();
    let server = Server::start(
        "event",
        Some(root.path()),
        &[
            "--server-limit",
            "1",
            "--max-request-workers",
            "4000",
            "--keepalive-timeout",
            "120s",
        ],
    );
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        let mut conn = RawConn::connect(server.addr());
        // Every hundredth finishes a request first, so both fresh and
        // keep-alive connections are held.
        if i % 100 == 0 {
            assert_eq!(get_on(&mut conn), PAGE);
        }
        idle.push(conn);
    }
    // The master's and its serving process's.
    let held_threads: usize = std::iter::once(server.pid())
        .chain(tests::children(server.pid()))
        .map(threads)
        .sum();
    assert!(
        held_threads < 64,
        "{held_threads} threads hold {IDLE} connections"
    );

    // A fresh client is answered at once.
    let started = Instant::now();
    assert_eq!(server.get("/index.html").body, PAGE);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "a fresh request took {took:?}"
    );

    // And a sample of the idle ones is still served.
    for conn in idle.iter_mut().step_by(500) {
        assert_eq!(get_on(conn), PAGE);
    }
}

#[test]
fn a_slow_reader_of_a_large_file_holds_no_worker() {
    let root = docroot();
    let big = tests::pattern(16 << 20, 7);
    root.write("big.bin", &big);
    // One process, one worker: if the slow download held it, nothing else
    // could be served.
    let server = Server::start(
        "event",
        Some(root.path()),
        &["--server-limit", "1", "--threads-per-child", "1"],
    );
    let mut slow = RawConn::connect(server.addr());
    slow.set_recv_buffer(64 * 1024);
    slow.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let head = slow.read_head().unwrap();
    assert_eq!(head.status, 200);
    let mut received = Vec::new();
    // Read at about 64 KiB a second for a while, serving others meanwhile.
    for round in 0..6 {
        received.extend(slow.read_some(64 * 1024).unwrap());
        let started = Instant::now();
        // A file that is not cached yet needs a worker; the page is inline.
        let path = if round % 2 == 0 {
            "/index.html"
        } else {
            "/nope"
        };
        let r = server.get(path);
        assert!(r.status == 200 || r.status == 404);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "round {round}: {took:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        received.len() < big.len() / 4,
        "the reader was meant to be slow"
    );
    // The slow reader still gets every byte, in order.
    let mut buf = vec![0u8; 1 << 20];
    while received.len() < big.len() {
        let chunk = slow.read_some(buf.len()).unwrap();
        assert!(!chunk.is_empty(), "closed after {} bytes", received.len());
        received.extend(chunk);
    }
    buf.clear();
    assert!(
        received == big,
        "the slow download's bytes differ from the file"
    );
}

#[test]
fn slowloris_clients_are_cut_off_and_hold_no_worker() {
    let root = docroot();
    let server = Server::start(
        "event",
        Some(root.path()),
        &[
            "--server-limit",
            "1",
            "--threads-per-child",
            "1",
            "--request-header-timeout",
            "1s",
        ],
    );
    // Ten clients trickle a request head a byte at a time.
    let head = b"GET /index.html HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut slow: Vec<TcpStream> = (0..10)
        .map(|_| {
            let s = TcpStream::connect(server.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    let started = Instant::now();
    let mut cut = vec![false; slow.len()];
    for byte in head.iter() {
        for (i, s) in slow.iter_mut().enumerate() {
            if !cut[i] && s.write_all(&[*byte]).is_err() {
                cut[i] = true;
            }
        }
        // Meanwhile a normal client is served.
        assert_eq!(server.get("/index.html").body, PAGE);
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    // Each trickler was answered 408 (or closed) well before it finished,
    // rather than served or left waiting.
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut reply = Vec::new();
        if let Err(e) = s.read_to_end(&mut reply) {
            assert!(
                e.kind() == std::io::ErrorKind::ConnectionReset,
                "a trickler was neither answered nor closed: {e}"
            );
        }
        let text = String::from_utf8_lossy(&reply);
        assert!(
            reply.is_empty() || text.starts_with("HTTP/1.1 408"),
            "a trickled head was answered: {text}"
        );
    }
}

#[test]
fn the_connection_cap_leaves_further_clients_in_the_backlog_until_one_closes() {
    let root = docroot();
    // One process, two workers, two connections per worker: four
    // connections at most.
    let server = Server::start(
        "event",
        Some(root.path()),
        &[
            "--server-limit",
            "1",
            "--max-request-workers",
            "2",
            "--async-request-worker-factor",
            "2",
        ],
    );
    let mut held: Vec<RawConn> = (0..4)
        .map(|_| {
            let mut c = RawConn::connect(server.addr());
            assert_eq!(get_on(&mut c), PAGE);
            c
        })
        .collect();
    // A fifth connects (the kernel queues it) but is not taken in.
    let mut fifth = TcpStream::connect(server.addr()).unwrap();
    fifth
        .write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        fifth.read(&mut buf).is_err(),
        "a fifth connection was served past the cap"
    );
    // One closes: the fifth is accepted and answered.
    held.pop();
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = fifth.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
}
