//! What a restart or a stop does to a keep-alive connection: an idle one is
//! closed between requests, and a request the client has already sent is
//! answered, never dropped (the reload race nginx users complain of).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::{RawConn, Server, TempDir};

const PAGE: &[u8] = b"still answered\n";

fn a_request_sent_as_a_graceful_restart_begins_is_answered(mpm: &str) {
    let root = TempDir::new("reload");
    root.write("index.html", PAGE);
    let extra: &[&str] = if mpm == "prefork" {
        &[
            "--start-servers",
            "2",
            "--min-spare",
            "1",
            "--max-spare",
            "4",
        ]
    } else {
        &["--server-limit", "2", "--max-request-workers", "8"]
    };
    let mut server = Server::start(mpm, Some(root.path()), extra);
    for round in 0..10 {
        let before = tests::children(server.pid());
        // A connection with one request answered and kept alive. A process
        // told to stop in the instant it accepted answers `Connection:
        // close` instead, rightly: then try again on a new connection.
        let mut c = (0..5)
            .find_map(|_| {
                let mut c = RawConn::connect(server.addr());
                c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                let first = c.read_response().unwrap();
                assert_eq!(first.body, PAGE);
                let kept = first.header("connection") != Some("close");
                if !kept {
                    eprintln!("round {round}: closed after one request; a new connection");
                }
                kept.then_some(c)
            })
            .unwrap_or_else(|| {
                panic!(
                    "round {round}: every connection closed after one request\n{}",
                    server.stderr_text()
                )
            });
        // The next request is in the server's socket buffer before the
        // signal is even sent.
        c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        server.signal(libc::SIGUSR1);
        let r = c.read_response().unwrap_or_else(|e| {
            panic!(
                "round {round}: the request was dropped: {e}\n{}",
                server.stderr_text()
            )
        });
        assert_eq!(r.status, 200, "round {round}");
        assert_eq!(r.body, PAGE, "round {round}");
        // Then the old child closes the connection, between requests.
        assert!(c.closed_by_peer(Duration::from_secs(15)), "round {round}");
        // The old generation finishes and exits; a new one serves.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let now = tests::children(server.pid());
            if !now.is_empty() && now.iter().all(|c| !before.contains(c)) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: old children {before:?} still there: {now:?}\n{}",
                server.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(server.stop().success());
}

fn a_request_answered_during_a_stop_says_connection_close(mpm: &str) {
    let root = tests::site::docroot_with_big_files();
    let extra: &[&str] = if mpm == "prefork" {
        &["--start-servers", "2"]
    } else {
        &["--server-limit", "2"]
    };
    let mut server = Server::start(mpm, Some(root.path()), extra);
    // A slow download with a second request pipelined behind it: that one
    // is read and answered only after the stop has begun.
    let mut c = RawConn::connect(server.addr());
    c.set_recv_buffer(64 * 1024);
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let head = c.read_head().unwrap();
    assert_eq!(head.status, 200);
    // An idle keep-alive connection beside it.
    let mut idle = RawConn::connect(server.addr());
    idle.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(idle.read_response().unwrap().status, 200);
    // A graceful stop: the download in flight and the request behind it finish.
    server.graceful_stop();
    assert!(server.wait_for_stderr("stopping", Duration::from_secs(10)));
    // The idle one is closed between requests, without waiting for its
    // keep-alive timeout.
    assert!(idle.closed_by_peer(Duration::from_secs(15)));
    let mut body = Vec::new();
    while body.len() < tests::site::BIG_LEN {
        let chunk = c
            .read_some((tests::site::BIG_LEN - body.len()).min(64 * 1024))
            .unwrap();
        assert!(!chunk.is_empty(), "download cut at {}", body.len());
        body.extend(chunk);
    }
    let r = c.read_response().unwrap_or_else(|e| {
        panic!(
            "the pipelined request was dropped: {e}\n{}",
            server.stderr_text()
        )
    });
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_by_peer(Duration::from_secs(15)));
    let status = server.wait_exit(Duration::from_secs(20)).unwrap();
    assert!(status.success(), "{status}\n{}", server.stderr_text());
}

const CLOSE_REQUEST: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

/// Connections accepted by the old children but silent when `signal` (a
/// graceful restart, or a restart) comes, and connections opened as it goes
/// on, send their request after `delays` (all at once): every one is
/// answered, and the old children exit without waiting for them.
fn silent_connections_are_handed_to_the_new_generation(
    mpm: &str,
    signal: i32,
    delays: &[Duration],
) {
    let root = TempDir::new("reload-silent");
    root.write("index.html", PAGE);
    let mut args = if mpm == "prefork" {
        vec![
            "--start-servers",
            "3",
            "--min-spare",
            "1",
            "--max-spare",
            "8",
        ]
    } else {
        vec!["--server-limit", "2", "--max-request-workers", "16"]
    };
    // Long enough that an old child waiting on a silent client would still
    // be there when the last one sends.
    args.extend(["--graceful-timeout", "30s"]);
    let mut server = Server::start(mpm, Some(root.path()), &args);
    let addr = server.addr();
    let old = tests::wait_for_children(
        server.pid(),
        if mpm == "prefork" { 3 } else { 2 },
        &[],
        Duration::from_secs(10),
    )
    .unwrap_or_else(|| tests::children(server.pid()));
    let mut clients: Vec<_> = (0..6)
        .map(|i| tests::SilentClient::connect(addr, CLOSE_REQUEST, delays[i % delays.len()]))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let signalled = std::time::Instant::now();
    server.signal(signal);
    // Opened during the hand-over, until every old child has exited.
    while tests::children(server.pid())
        .iter()
        .any(|c| old.contains(c))
    {
        clients.push(tests::SilentClient::connect(
            addr,
            CLOSE_REQUEST,
            delays[clients.len() % delays.len()],
        ));
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            signalled.elapsed() < Duration::from_secs(25),
            "old children {old:?} did not exit:\n{}",
            server.stderr_text()
        );
    }
    let longest = delays.iter().max().copied().unwrap_or_default();
    assert!(
        clients[..6]
            .iter()
            .filter(|c| c.delay == longest)
            .all(|c| !c.has_sent()),
        "the old children waited {:?}, for the silent clients:\n{}",
        signalled.elapsed(),
        server.stderr_text()
    );
    for c in clients {
        let delay = c.delay;
        let r = c.reply().unwrap_or_else(|e| {
            panic!(
                "a client silent for {delay:?} was dropped: {e}\n{}",
                server.stderr_text()
            )
        });
        assert_eq!((r.status, &r.body[..]), (200, PAGE), "silent for {delay:?}");
    }
    let json = server.get("/server-status?json").text();
    assert!(
        !json.contains("\"handed_over_connections\":0,"),
        "nothing was counted as handed over: {json}"
    );
    assert!(server.stop().success());
}

fn silent_connections_around_a_graceful_restart_are_served(mpm: &str) {
    silent_connections_are_handed_to_the_new_generation(
        mpm,
        libc::SIGUSR1,
        &[
            Duration::from_millis(100),
            Duration::from_secs(2),
            Duration::from_secs(15),
        ],
    );
}

/// A restart (SIGHUP) stops the children the same way: shorter delays,
/// the mechanism is the graceful restart's.
fn silent_connections_around_a_restart_are_served(mpm: &str) {
    silent_connections_are_handed_to_the_new_generation(
        mpm,
        libc::SIGHUP,
        &[Duration::from_millis(100), Duration::from_secs(3)],
    );
}

/// A graceful restart keeps `--graceful-timeout` as a graceful stop does:
/// a download the old generation still sends when it passes is cut, and
/// the old process is gone soon after, while the new generation serves.
/// Prefork's single-threaded children cannot keep their own deadline: the
/// master cuts them, with SIGTERM. It used to do so on a stop only, and an
/// old prefork child served a slow download to its end, seconds later.
fn a_graceful_restart_cuts_a_download_still_in_flight_at_its_graceful_timeout(mpm: &str) {
    const GRACEFUL: Duration = Duration::from_millis(200);
    let root = tests::site::docroot_with_big_files();
    let mut server = Server::start(mpm, Some(root.path()), &["--graceful-timeout", "200ms"]);
    // A download that has received its head and a few KB; the client then
    // reads nothing more for a while, so that most of the 8 MiB stay unsent.
    let mut c = server.connect();
    c.set_recv_buffer(64 * 1024);
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let head = c.read_head().unwrap();
    assert_eq!(head.status, 200);
    let mut got = c.read_some(4096).unwrap().len();
    assert!(got > 0, "no body bytes after the head");
    let old = tests::children(server.pid());
    let signalled = Instant::now();
    server.signal(libc::SIGUSR1);
    // The new generation serves meanwhile.
    let r = server.get("/hello.txt");
    assert_eq!(r.status, 200, "{}", server.stderr_text());
    // The old generation, the download's process among it, is gone within
    // about a second of the deadline.
    let gone_by = signalled + GRACEFUL + Duration::from_millis(1300);
    loop {
        let now = tests::children(server.pid());
        if !now.iter().any(|p| old.contains(p)) {
            break;
        }
        assert!(
            Instant::now() < gone_by,
            "old children {:?} still there {:?} after SIGUSR1 with --graceful-timeout 200ms\n{}",
            now.iter().filter(|p| old.contains(p)).collect::<Vec<_>>(),
            signalled.elapsed(),
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        tests::children(server.pid())
            .iter()
            .any(|p| !old.contains(p)),
        "no new generation"
    );
    // Well past the deadline, the client reads on: what was already in the
    // sockets' buffers, then the end (or a reset), before the end of the file.
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(signalled.elapsed()));
    let until = Instant::now() + Duration::from_secs(10);
    while got < tests::site::BIG_LEN && Instant::now() < until {
        match c.read_some(64 * 1024) {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(chunk) => got += chunk.len(),
            Err(_) => break, // reset: cut as well
        }
    }
    assert!(
        got < tests::site::BIG_LEN,
        "the download in flight was not cut at the graceful timeout: all {got} bytes came \
         {:?} after SIGUSR1\n{}",
        signalled.elapsed(),
        server.stderr_text()
    );
    assert!(server.stop().success());
}

tests::mpm_suite!(
    a_request_sent_as_a_graceful_restart_begins_is_answered,
    a_request_answered_during_a_stop_says_connection_close,
    silent_connections_around_a_graceful_restart_are_served,
    silent_connections_around_a_restart_are_served,
    a_graceful_restart_cuts_a_download_still_in_flight_at_its_graceful_timeout,
);
