//! What a client sees of the rule every model keeps for the event loop's
//! sake: nothing one client does (pipelining a slow request behind a fast
//! one, downloading a huge file as fast as it can, trickling bytes after an
//! error) keeps the server from answering the others. The bounds are
//! functional and generous (a second or two); none is a performance goal.
//! The event MPM runs one process here (`--server-limit 1`), so that every
//! client meets the same loop.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tests::{mpm_suite, RawConn, Server, TempDir};

/// `--server-limit 1` for event and uring: one loop for every client.
fn one_loop(mpm: &str) -> &'static [&'static str] {
    if matches!(mpm, "event" | "uring") {
        &["--server-limit", "1"]
    } else {
        &[]
    }
}

fn a_slow_pipelined_request_delays_no_other_client(mpm: &str) {
    let server = Server::start_example("json_api", mpm, one_loop(mpm));
    let mut pipelining = RawConn::connect(server.addr());
    let sent = Instant::now();
    pipelining
        .send(
            b"GET /api/hello HTTP/1.1\r\nHost: t\r\n\r\n\
              GET /api/sleep?ms=3000 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
    // The fast answer is not held back behind the slow one.
    let first = pipelining.read_response().unwrap();
    assert_eq!(first.text(), r#"{"hello":"world"}"#);
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "{mpm}: the first answer waited {took:?}"
    );
    // Another client, while the slow request runs, is answered at once.
    let asked = Instant::now();
    let mut other = RawConn::connect(server.addr());
    other
        .send(b"GET /api/hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(other.read_response().unwrap().status, 200);
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "{mpm}: another client waited {took:?} behind a pipelined slow request"
    );
    // And the slow one is answered, in order, on its connection.
    assert_eq!(
        pipelining.read_response().unwrap().text(),
        r#"{"slept_ms":3000}"#
    );
}

fn a_fast_huge_download_keeps_no_small_request_waiting(mpm: &str) {
    let root = TempDir::new("huge");
    root.write("index.html", b"small\n");
    // 1 GiB, sparse: no disk, and the page cache fills as it is read.
    let huge = std::fs::File::create(root.path().join("huge.bin")).unwrap();
    huge.set_len(1 << 30).unwrap();
    let server = Server::start(mpm, Some(root.path()), one_loop(mpm));
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let downloader = {
        let (received, stop, addr) = (Arc::clone(&received), Arc::clone(&stop), server.addr());
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            let mut buf = vec![0u8; 1 << 20];
            // As fast as it can, until it has it all or is told to stop.
            while !stop.load(Ordering::Relaxed) {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if received.fetch_add(n as u64, Ordering::Relaxed) + n as u64 > 1 << 30 {
                            break;
                        }
                    }
                }
            }
        })
    };
    while received.load(Ordering::Relaxed) < 1 << 20 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Fifty clients, five keep-alive requests each, while it downloads.
    let clients: Vec<_> = (0..50)
        .map(|_| {
            let addr = server.addr();
            std::thread::spawn(move || {
                let mut c = RawConn::connect(addr);
                let mut slowest = Duration::ZERO;
                for _ in 0..5 {
                    let asked = Instant::now();
                    c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                        .unwrap();
                    assert_eq!(c.read_response().unwrap().body, b"small\n");
                    slowest = slowest.max(asked.elapsed());
                }
                slowest
            })
        })
        .collect();
    let slowest = clients
        .into_iter()
        .map(|c| c.join().unwrap())
        .max()
        .unwrap();
    let downloaded = received.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    downloader.join().unwrap();
    assert!(
        slowest < Duration::from_secs(2),
        "{mpm}: a small request waited {slowest:?} beside a download"
    );
    eprintln!(
        "{mpm}: slowest small request {slowest:?}, with {} MiB of the download received",
        downloaded >> 20
    );
}

fn a_client_trickling_after_an_error_is_closed_by_the_linger_deadline(mpm: &str) {
    let server = Server::start(mpm, None, one_loop(mpm));
    let mut c = TcpStream::connect(server.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A malformed request: 400, then a lingering close.
    c.write_all(b"NONSENSE\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    c.read_to_end(&mut reply).unwrap(); // the server shut its side down
    assert!(reply.starts_with(b"HTTP/1.1 400"), "{reply:?}");
    let answered = Instant::now();
    // A byte every 200 ms: each read restarting the linger would keep the
    // connection forever; the deadline holds from the first.
    let closed = loop {
        std::thread::sleep(Duration::from_millis(200));
        if c.write_all(b"x").is_err() {
            break answered.elapsed();
        }
        if answered.elapsed() > Duration::from_secs(8) {
            panic!("{mpm}: still lingering after 8 s of trickling");
        }
    };
    // Two seconds of lingering; the write that notices comes after it.
    assert!(
        closed < Duration::from_secs(5),
        "{mpm}: closed after {closed:?}"
    );
    assert_eq!(server.get("/").status, 200);
}

mpm_suite!(
    a_slow_pipelined_request_delays_no_other_client,
    a_fast_huge_download_keeps_no_small_request_waiting,
    a_client_trickling_after_an_error_is_closed_by_the_linger_deadline,
);
