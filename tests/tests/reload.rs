//! What a restart or a stop does to a keep-alive connection: an idle one is
//! closed between requests, and a request the client has already sent is
//! answered, never dropped (the reload race nginx users complain of).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

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
        let mut c = RawConn::connect(server.addr());
        c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(c.read_response().unwrap().body, PAGE);
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

// Prefork is not held to this yet: under parallel load about one run in ten
// sees a prefork child close such a connection without answering it. The
// cause is not found; the operations issue tracks it.
#[test]
fn worker_answers_a_request_sent_as_a_graceful_restart_begins() {
    a_request_sent_as_a_graceful_restart_begins_is_answered("worker");
}

#[test]
fn event_answers_a_request_sent_as_a_graceful_restart_begins() {
    a_request_sent_as_a_graceful_restart_begins_is_answered("event");
}
