//! Resource limits: running out of descriptors (the server keeps serving
//! what it has, pauses accepting, says so, and recovers when descriptors free
//! up); a flood of pipelined requests buffered boundedly and all answered;
//! bodies over the limit refused before they are read.

#![forbid(unsafe_code)]
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

/// A client pipelines 64 MiB of requests for a 64 KiB file without reading
/// a response. The server must stop reading once its buffers are full (the
/// client's writes block) instead of buffering everything; once the client
/// reads, every request is answered, in order.
fn a_flood_of_pipelined_requests_is_buffered_boundedly_and_all_answered(mpm: &str) {
    const REQUESTS: usize = 2048;
    let root = TempDir::new("pipeline-flood");
    let file = tests::pattern(64 * 1024, 7);
    root.write("file.bin", &file);
    // No cap on requests per connection (it is 1000 by default).
    let server = Server::start(mpm, Some(root.path()), &["--max-keepalive-requests", "0"]);
    // 32 KiB a request, in padding fields within the field size limit.
    let pad = "p".repeat(8000);
    let request = format!(
        "GET /file.bin HTTP/1.1\r\nHost: t\r\nX-1: {pad}\r\nX-2: {pad}\r\nX-3: {pad}\r\nX-4: {pad}\r\n\r\n"
    );
    let total = REQUESTS * request.len();
    let conn = RawConn::connect(server.addr());
    let mut writer = conn.stream().try_clone().unwrap();
    writer.set_write_timeout(None).unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let written = std::sync::Arc::clone(&written);
        std::thread::spawn(move || {
            use std::io::Write;
            for _ in 0..REQUESTS {
                writer.write_all(request.as_bytes()).unwrap();
                written.fetch_add(request.len(), std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    // Wait until the writes stop making progress: the server stopped reading.
    let mut last = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = written.load(std::sync::atomic::Ordering::Relaxed);
        if now == last || now == total || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let stalled_at = written.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{mpm}: the client's writes stalled after {stalled_at} of {total} bytes");
    assert!(
        stalled_at < total / 2,
        "{mpm}: the server took {stalled_at} of {total} bytes of requests without a response read"
    );
    // Now read: every request is answered with the whole file.
    let mut conn = conn;
    for i in 0..REQUESTS {
        let r = conn
            .read_response()
            .unwrap_or_else(|e| panic!("{mpm}: response {i}: {e}"));
        assert_eq!(r.status, 200, "{mpm}: response {i}");
        assert!(r.body == file, "{mpm}: response {i} has the wrong body");
    }
    sender.join().unwrap();
}

/// Bodies beyond the limit are refused from their announced size: the 413
/// comes back without the client sending a byte of the body.
fn bodies_over_the_limit_get_413_before_they_are_sent(mpm: &str) {
    let root = TempDir::new("body-limit");
    root.write("index.html", b"ok\n");
    let server = Server::start(mpm, Some(root.path()), &["--limit-request-body", "65536"]);
    let heads: [&[u8]; 3] = [
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 10737418240\r\n\r\n",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 10737418240\r\nExpect: 100-continue\r\n\r\n",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n280000000\r\n",
    ];
    for head in heads {
        let mut c = RawConn::connect(server.addr());
        c.send(head).unwrap();
        let r = c.read_response().unwrap_or_else(|e| {
            panic!(
                "{mpm}: no answer to {:?}: {e}",
                String::from_utf8_lossy(head)
            )
        });
        assert_eq!(r.status, 413, "{:?}", String::from_utf8_lossy(head));
        assert!(c.closed_by_peer(Duration::from_secs(5)), "open after 413");
    }
    // A body that grows past the limit as it arrives is cut off there, not
    // read to its end: the client's further writes fail.
    let mut c = RawConn::connect(server.addr());
    c.send(b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 16384, "c".repeat(16384));
    let mut sent = 0usize;
    let mut refused = false;
    for _ in 0..4096 {
        if c.send(chunk.as_bytes()).is_err() {
            refused = true;
            break;
        }
        sent += chunk.len();
    }
    assert!(
        refused,
        "{mpm}: {sent} bytes of a body over a 64 KiB limit were all read"
    );
    let mut c = RawConn::connect(server.addr());
    c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().status, 200);
}

tests::mpm_suite!(
    descriptor_exhaustion_is_survived_and_recovered_from,
    a_flood_of_pipelined_requests_is_buffered_boundedly_and_all_answered,
    bodies_over_the_limit_get_413_before_they_are_sent,
);
