//! Running out of descriptors: the server keeps serving what it has, pauses
//! accepting, says so, and recovers when descriptors free up.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::{RawConn, Server, TempDir};

fn descriptor_exhaustion_is_survived_and_recovered_from(mpm: &str) {
    let root = TempDir::new("emfile");
    root.write("index.html", b"ok\n");
    // Few descriptors: some already go to the listener, epoll, pipes and
    // threads. A worker thread holds one connection, so worker needs more
    // threads than descriptors to run short.
    let workers = if mpm == "worker" { "64" } else { "8" };
    let server = Server::start_with_fd_limit(
        mpm,
        Some(root.path()),
        &[
            "--max-request-workers",
            workers,
            "--threads-per-child",
            workers,
            "--keepalive-timeout",
            "30s",
        ],
        40,
    );
    let mut first = RawConn::connect(server.addr());
    first
        .send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(first.read_response().unwrap().status, 200);

    // Far more connections than descriptors left: the kernel completes them,
    // the server cannot accept them all.
    let flood: Vec<std::net::TcpStream> = (0..60)
        .filter_map(|_| std::net::TcpStream::connect(server.addr()).ok())
        .collect();
    // A prefork child holds one connection at a time and has a descriptor
    // limit of its own, so it never runs out: the shortage is the others'.
    assert!(
        mpm == "prefork" || server.wait_for_stderr("accept failed", Duration::from_secs(10)),
        "no word of the descriptor shortage: {}",
        server.stderr_text()
    );
    // The connection it already has is still served.
    first
        .send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(first.read_response().unwrap().status, 200);

    // Descriptors free up: new clients are served again.
    drop(flood);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = RawConn::connect(server.addr());
        let ok = c
            .send(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .is_ok()
            && c.read_response().is_ok_and(|r| r.status == 200);
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not serving again after the shortage"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

tests::mpm_suite!(descriptor_exhaustion_is_survived_and_recovered_from);
