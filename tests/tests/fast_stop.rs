//! Two stops, as nginx and httpd have: SIGTERM (and SIGINT, `mpm signal
//! stop`) stops now, closing every connection, in flight or idle;
//! SIGWINCH (`mpm signal graceful-stop`) lets requests in flight finish
//! within `--graceful-timeout` (that download completing, byte for byte, is
//! tests/tests/shutdown.rs's). The graceful timeout here is 30 s: a server
//! that exits within a few seconds did not wait it out (a correctness
//! bound, not a speed goal).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::site::{self, BIG_LEN};
use tests::{mpm_suite, RawConn, Server};

/// Far below the 30 s graceful timeout: a fast stop did not wait for it.
const PROMPTLY: Duration = Duration::from_secs(8);

/// A server with a 30 s graceful timeout, and a download of `/big.bin`
/// (8 MiB) that has received its head and a few KB: most of the file is
/// still unsent, held back by a client that reads nothing more for now.
fn start_slow_download(mpm: &str, root: &std::path::Path) -> (Server, RawConn, usize) {
    start_slow_download_with(mpm, root, "30s")
}

fn start_slow_download_with(
    mpm: &str,
    root: &std::path::Path,
    graceful_timeout: &str,
) -> (Server, RawConn, usize) {
    let server = Server::start(mpm, Some(root), &["--graceful-timeout", graceful_timeout]);
    let mut conn = server.connect();
    conn.set_recv_buffer(64 * 1024);
    conn.send(b"GET /big.bin HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let head = conn.read_head().unwrap();
    assert_eq!(head.status, 200);
    let start = conn.read_some(4096).unwrap();
    assert!(!start.is_empty(), "no body bytes after the head");
    (server, conn, start.len())
}

/// Read what the server still sends until it closes the connection (or
/// the file is complete); returns the body bytes received in all.
fn read_to_close(conn: &mut RawConn, mut got: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < BIG_LEN && Instant::now() < deadline {
        match conn.read_some(64 * 1024) {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(chunk) => got += chunk.len(),
            Err(_) => break, // reset: cut as well
        }
    }
    got
}

/// Wait for the exit, at most [`PROMPTLY`]; panics with the log otherwise.
fn exits_promptly(server: &mut Server, what: &str) {
    let asked = Instant::now();
    let status = server.wait_exit(PROMPTLY);
    let stderr = server.stderr_text();
    let status = status.unwrap_or_else(|| {
        panic!("still running {PROMPTLY:?} after {what}, with a download in flight:\n{stderr}")
    });
    assert!(status.success(), "exit {status}:\n{stderr}");
    assert!(stderr.contains("mpm: stopped"), "{stderr}");
    eprintln!("exited {:?} after {what}", asked.elapsed());
}

fn sigterm_cuts_a_slow_download_and_exits_promptly(mpm: &str) {
    let root = site::docroot_with_big_files();
    let (mut server, mut conn, start) = start_slow_download(mpm, root.path());
    server.terminate();
    exits_promptly(&mut server, "SIGTERM");
    let stderr = server.stderr_text();
    assert!(
        stderr.contains("received SIGTERM: stopping now (fast stop)"),
        "the log does not say which stop it was:\n{stderr}"
    );
    let got = read_to_close(&mut conn, start);
    assert!(
        got < BIG_LEN,
        "the download in flight was not cut: all {BIG_LEN} bytes came"
    );
}

fn sigint_is_a_fast_stop_too(mpm: &str) {
    let root = site::docroot_with_big_files();
    let (mut server, mut conn, start) = start_slow_download(mpm, root.path());
    server.signal(libc::SIGINT);
    exits_promptly(&mut server, "SIGINT");
    let stderr = server.stderr_text();
    assert!(
        stderr.contains("received SIGINT: stopping now (fast stop)"),
        "{stderr}"
    );
    assert!(read_to_close(&mut conn, start) < BIG_LEN, "not cut");
}

fn sigterm_during_a_graceful_stop_cuts_it_short(mpm: &str) {
    let root = site::docroot_with_big_files();
    let (mut server, mut conn, start) = start_slow_download(mpm, root.path());
    server.graceful_stop();
    assert!(server.wait_for_stderr("stopping gracefully", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.is_running(), "exited with a download in flight");
    server.terminate();
    exits_promptly(&mut server, "SIGTERM during a graceful stop");
    let got = read_to_close(&mut conn, start);
    assert!(
        got < BIG_LEN,
        "the download in flight was not cut: all {BIG_LEN} bytes came"
    );
}

fn a_graceful_stop_cuts_what_is_still_in_flight_at_its_timeout(mpm: &str) {
    let root = site::docroot_with_big_files();
    let (mut server, mut conn, start) = start_slow_download_with(mpm, root.path(), "1s");
    server.graceful_stop();
    // The same answer in every model: cut at the graceful timeout, said in
    // the log (by the process that cut it: the master for prefork's
    // single-threaded children).
    exits_promptly(&mut server, "SIGWINCH with a graceful timeout of 1 s");
    let stderr = server.stderr_text();
    assert!(stderr.contains("graceful timeout"), "{stderr}");
    assert!(read_to_close(&mut conn, start) < BIG_LEN, "not cut");
}

mpm_suite!(
    sigterm_cuts_a_slow_download_and_exits_promptly,
    sigint_is_a_fast_stop_too,
    sigterm_during_a_graceful_stop_cuts_it_short,
    a_graceful_stop_cuts_what_is_still_in_flight_at_its_timeout,
);
