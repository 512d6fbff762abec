//! The switches the classic experiments turn (`--poller`, `--send-lowat`,
//! `--request-pool`) change how the server works, never what it serves.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use tests::{pattern, run_mpm, RawConn, Server, TempDir};

/// Every address the server said it listens on, once it has said `n`.
fn listening_addrs(server: &Server, n: usize) -> Vec<SocketAddr> {
    let parse = || -> Vec<SocketAddr> {
        server
            .stderr_text()
            .lines()
            .filter_map(|l| l.split("listening on http://").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter_map(|a| a.parse().ok())
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while parse().len() < n && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    parse()
}

fn every_poller_serves_every_listener(mpm: &str) {
    let root = TempDir::new("poller");
    let page = pattern(1456, 7);
    root.write("index.html", &page);
    let pollers: &[&str] = if matches!(mpm, "event" | "uring") {
        &["epoll"]
    } else {
        &["epoll", "poll", "select"]
    };
    for poller in pollers {
        let server = Server::start(
            mpm,
            Some(root.path()),
            &[
                "--poller",
                poller,
                "--listen",
                "127.0.0.1:0",
                "--listen",
                "127.0.0.1:0",
                "--max-request-workers",
                "4",
            ],
        );
        let addrs = listening_addrs(&server, 3);
        assert_eq!(addrs.len(), 3, "{poller}: {}", server.stderr_text());
        for round in 0..3 {
            for addr in &addrs {
                let mut c = RawConn::connect(*addr);
                c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let r = c.read_response().unwrap();
                assert_eq!(r.status, 200, "{poller} {addr} round {round}");
                assert!(r.body == page, "{poller} {addr}: wrong bytes");
            }
        }
    }
}

/// The event MPM's loop is epoll: another poller is refused (a test of
/// event alone, not of every model).
#[test]
fn the_event_mpm_refuses_another_poller_in_one_line() {
    let exit = run_mpm(
        &[
            "serve",
            "--mpm",
            "event",
            "--poller",
            "poll",
            "--listen",
            "127.0.0.1:0",
        ],
        Duration::from_secs(10),
    );
    exit.assert_one_line_error("--poller poll under event");
    assert!(exit.stderr.contains("epoll"), "{}", exit.stderr);
}

/// A field of the status page's JSON, as a number.
fn field(json: &str, name: &str) -> f64 {
    let at = json.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
    json[at..]
        .split([',', '}'])
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn a_send_low_water_mark_still_sends_whole_files_to_a_slow_reader(mpm: &str) {
    let root = TempDir::new("lowat");
    let big = pattern(4 << 20, 11);
    root.write("big.bin", &big);
    for sendfile in ["on", "off"] {
        let server = Server::start(
            mpm,
            Some(root.path()),
            &[
                "--send-lowat",
                "16384",
                "--sendfile",
                sendfile,
                "--max-request-workers",
                "4",
            ],
        );
        let before = field(&server.get("/server-status?json").text(), "send_calls");
        let mut c = RawConn::connect(server.addr());
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        // Read slowly at first, so the server meets a full socket.
        let mut got = Vec::new();
        let mut chunk = [0u8; 8192];
        for _ in 0..20 {
            let n = c.stream().read(&mut chunk).unwrap();
            got.extend_from_slice(&chunk[..n]);
            std::thread::sleep(Duration::from_millis(5));
        }
        got.extend_from_slice(&c.read_to_end().unwrap());
        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(got.starts_with(b"HTTP/1.1 200"), "sendfile {sendfile}");
        assert!(
            got[head_end..] == big[..],
            "sendfile {sendfile}: wrong bytes"
        );
        let json = server.get("/server-status?json").text();
        assert!(
            field(&json, "send_calls") > before,
            "the sends are counted: {json}"
        );
    }
}

fn the_request_pool_switch_serves_the_same_bytes(mpm: &str) {
    let root = TempDir::new("pool-bytes");
    let page = pattern(3000, 5);
    root.write("a b/page.html", &page);
    for pool in ["on", "off"] {
        let server = Server::start(mpm, Some(root.path()), &["--request-pool", pool]);
        for path in ["/a%20b/page.html", "/a%20b/./x/../page.html"] {
            let r = server.get(path);
            assert_eq!(r.status, 200, "pool {pool} {path}");
            assert!(r.body == page, "pool {pool} {path}");
        }
        assert_eq!(server.get("/a%20b/missing").status, 404, "pool {pool}");
        let mut c = RawConn::connect(server.addr());
        c.send(b"GET /a%20b/../../etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(c.read_response().unwrap().status, 403, "pool {pool}");
        assert_eq!(server.get("/a%20b").status, 301, "pool {pool}");
    }
}

/// With sendfile off the body goes out by read+write; its last write must
/// not carry MSG_MORE, or the kernel holds the tail back for its 200 ms cork
/// timer and a keep-alive client waits that long for every response.
fn read_write_bodies_are_not_held_back_at_their_end(mpm: &str) {
    let root = TempDir::new("no-cork");
    let page = pattern(1456, 3);
    root.write("index.html", &page);
    let server = Server::start(
        mpm,
        Some(root.path()),
        &["--sendfile", "off", "--file-cache-max-size", "0"],
    );
    let mut c = RawConn::connect(server.addr());
    let started = std::time::Instant::now();
    for _ in 0..10 {
        c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let r = c.read_response().unwrap();
        assert!(r.status == 200 && r.body == page);
    }
    // Held back, ten responses take two seconds or more.
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "{took:?} for 10 requests"
    );
}

tests::mpm_suite!(
    read_write_bodies_are_not_held_back_at_their_end,
    every_poller_serves_every_listener,
    a_send_low_water_mark_still_sends_whole_files_to_a_slow_reader,
    the_request_pool_switch_serves_the_same_bytes,
);
