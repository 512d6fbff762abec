//! Stopping on SIGWINCH (a graceful stop): requests in flight finish, idle
//! connections do not hold the server up, no new connection is taken, and
//! the exit is clean. SIGTERM, the fast stop, is `fast_stop.rs`'s.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tests::site::{self, BIG_LEN, HELLO_TXT};
use tests::{mpm_suite, RawConn, Server};

/// The download is read in this many pieces, with a pause between them.
const PIECES: usize = 8;

/// Start a server and a download of `/big.bin` that has received its head
/// and a few KB, with most of the file still unsent on the server's side.
fn start_slow_download(mpm: &str, root: &std::path::Path) -> (Server, RawConn, Vec<u8>) {
    let server = Server::start(mpm, Some(root), &[]);
    let mut conn = server.connect();
    conn.set_recv_buffer(64 * 1024);
    conn.send(b"GET /big.bin HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let head = conn.read_head().unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(BIG_LEN.to_string().as_str())
    );
    let start = conn.read_some(4096).unwrap();
    assert!(!start.is_empty(), "no body bytes after the head");
    (server, conn, start)
}

/// Read the rest of the download slowly, in a few pieces.
fn finish_slow_download(conn: &mut RawConn, mut body: Vec<u8>) -> Vec<u8> {
    let piece = BIG_LEN / PIECES;
    let deadline = Instant::now() + Duration::from_secs(60);
    while body.len() < BIG_LEN {
        let goal = (body.len() + piece).min(BIG_LEN);
        while body.len() < goal {
            assert!(Instant::now() < deadline, "the download stalled");
            let chunk = conn.read_some(goal - body.len()).unwrap_or_else(|e| {
                panic!("download cut after {} of {BIG_LEN} bytes: {e}", body.len())
            });
            assert!(
                !chunk.is_empty(),
                "download closed after {} of {BIG_LEN} bytes",
                body.len()
            );
            body.extend(chunk);
        }
        // A slow client: the server must wait for it, not cut it off.
        std::thread::sleep(Duration::from_millis(100));
    }
    body
}

/// Is a connection to `addr` refused?
fn refused(addr: SocketAddr) -> bool {
    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Ok(_) => false,
        Err(e) => e.kind() == ErrorKind::ConnectionRefused,
    }
}

fn sigwinch_lets_a_slow_download_finish_then_exits_with_status_0(mpm: &str) {
    let root = site::docroot_with_big_files();
    let (mut server, mut conn, start) = start_slow_download(mpm, root.path());
    server.graceful_stop();
    assert!(
        server.wait_for_stderr("stopping gracefully", Duration::from_secs(10)),
        "no sign of SIGWINCH, or not said to be the graceful stop, on stderr:\n{}",
        server.stderr_text()
    );
    assert!(server.is_running(), "exited with a download in flight");
    let body = finish_slow_download(&mut conn, start);
    assert!(
        body == site::big(),
        "the downloaded bytes differ from the file"
    );
    // Stopping: the connection is closed after the response, not kept.
    assert!(conn.closed_by_peer(Duration::from_secs(5)));
    let status = server.wait_exit(Duration::from_secs(10));
    let stderr = server.stderr_text();
    let status = status.unwrap_or_else(|| panic!("still running after the download:\n{stderr}"));
    assert!(status.success(), "exit {status}:\n{stderr}");
    assert!(stderr.contains("mpm: stopped"), "{stderr}");
}

fn sigterm_closes_idle_keepalive_connections_and_exits_promptly(mpm: &str) {
    let root = site::docroot();
    // Long waits, so only closing idle connections at once makes a prompt exit.
    let flags = ["--keepalive-timeout", "60s", "--graceful-timeout", "60s"];
    let mut server = Server::start(mpm, Some(root.path()), &flags);
    let mut idle: Vec<RawConn> = (0..3).map(|_| server.connect()).collect();
    for conn in &mut idle {
        conn.send(b"GET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let r = conn.read_response().unwrap();
        assert!(r.status == 200 && r.body == HELLO_TXT.as_bytes());
    }
    server.terminate();
    // Not a speed assertion: far below the 60 s a server waiting on them takes.
    let status = server.wait_exit(Duration::from_secs(10));
    let stderr = server.stderr_text();
    let status = status.unwrap_or_else(|| {
        panic!("still running 10 s after SIGTERM with idle keep-alive connections:\n{stderr}")
    });
    assert!(status.success(), "exit {status}:\n{stderr}");
    assert!(stderr.contains("mpm: stopped"), "{stderr}");
    for conn in &mut idle {
        assert!(conn.closed_by_peer(Duration::from_secs(5)));
    }
}

fn new_connections_are_refused_after_sigwinch(mpm: &str) {
    let root = site::docroot_with_big_files();
    let (mut server, mut conn, start) = start_slow_download(mpm, root.path());
    let addr = server.addr();
    server.graceful_stop();
    assert!(server.wait_for_stderr("stopping", Duration::from_secs(10)));
    // The stop is asynchronous to the stderr line: give it a moment (bounded)
    // to close the listener while the download keeps the server draining.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut refused_while_draining = refused(addr);
    while !refused_while_draining && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        refused_while_draining = refused(addr);
    }
    assert!(server.is_running(), "exited with a download in flight");
    let body = finish_slow_download(&mut conn, start);
    assert!(
        body == site::big(),
        "the downloaded bytes differ from the file"
    );
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        refused(addr),
        "connections accepted after the server exited"
    );
    assert!(
        refused_while_draining,
        "while draining after SIGWINCH, {addr} still accepted connections (that are never served)"
    );
}

mpm_suite!(
    sigwinch_lets_a_slow_download_finish_then_exits_with_status_0,
    sigterm_closes_idle_keepalive_connections_and_exits_promptly,
    new_connections_are_refused_after_sigwinch,
);
