//! `mpm bench` against real servers (every MPM) and against small fake ones
//! that misbehave: exact counts for `-n`, statuses, `--close`, errors by kind,
//! and the `--json` shape.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::Value;
use tests::{run_mpm, with_transport, Server, TempDir, Transport};

const PAGE_LEN: usize = 1456;

fn docroot() -> TempDir {
    let dir = TempDir::new("bench");
    dir.write("index.html", &vec![b'x'; PAGE_LEN]);
    dir
}

/// `mpm bench --json ARGS` (exit code checked): the parsed report.
fn bench(args: &[&str], expect_code: i32) -> Value {
    let mut all = vec!["bench", "--json", "--timeout", "5s"];
    all.extend_from_slice(args);
    let out = run_mpm(&all, Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(expect_code),
        "mpm {all:?}: stderr {}",
        out.stderr
    );
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

fn n(v: &Value, path: &[&str]) -> u64 {
    let mut at = v;
    for p in path {
        at = &at[*p];
    }
    at.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not a count in {v}"))
}

fn pipelined_requests_are_each_counted_once(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    // 4 connections, 16 requests a write: 20 whole batches.
    let r = bench(
        &[
            "-n",
            "320",
            "-c",
            "4",
            "--pipeline",
            "16",
            &server.url("/index.html"),
        ],
        0,
    );
    assert_eq!(n(&r, &["responses"]), 320);
    assert_eq!(n(&r, &["status", "200"]), 320);
    assert_eq!(n(&r, &["body_bytes"]), 320 * PAGE_LEN as u64);
    assert_eq!(
        n(&r, &["errors", "read"]) + n(&r, &["errors", "bad_response"]),
        0
    );
}

/// A server that closes after 10 requests answers part of a 16-request
/// batch: the rest go again on a new connection, and none is counted lost.
fn a_pipelined_batch_cut_by_the_servers_limit_is_sent_again(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &["--max-keepalive-requests", "10"]);
    let r = bench(
        &[
            "-n",
            "160",
            "-c",
            "2",
            "--pipeline",
            "16",
            &server.url("/index.html"),
        ],
        0,
    );
    assert_eq!(n(&r, &["status", "200"]), 160);
    assert_eq!(
        n(&r, &["errors", "read"]) + n(&r, &["errors", "bad_response"]),
        0
    );
    assert!(n(&r, &["connections_opened"]) >= 16, "{r}");
}

fn a_fixed_request_count_is_answered_exactly(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = bench(&["-n", "300", "-c", "8", &server.url("/index.html")], 0);
    assert_eq!(n(&r, &["responses"]), 300);
    assert_eq!(n(&r, &["status", "200"]), 300);
    assert_eq!(
        n(&r, &["errors", "connect"]) + n(&r, &["errors", "read"]),
        0
    );
    assert_eq!(
        n(&r, &["errors", "bad_response"]) + n(&r, &["errors", "length"]),
        0
    );
    assert_eq!(n(&r, &["body_bytes"]), 300 * PAGE_LEN as u64);
    assert_eq!(n(&r, &["connections_opened"]), 8, "keep-alive reuses them");
    // The server's own count agrees (the status request itself is not counted).
    let status: Value = serde_json::from_str(&server.get("/server-status?json").text()).unwrap();
    assert_eq!(n(&status, &["total_requests"]), 300);
}

/// Every answer a 404: counted, and the run says so and exits 1 (a run that
/// measured only errors must not pass for a benchmark).
fn a_run_where_no_answer_is_a_success_is_counted_warned_and_exits_1(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let url = server.url("/missing.html");
    let out = run_mpm(
        &["bench", "--json", "-n", "40", "-c", "4", &url],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["status"], serde_json::json!({"404": 40}));
    assert_eq!(n(&r, &["responses"]), 40);
    assert!(
        out.stderr.contains("warning: no response was a success")
            && out.stderr.contains("40 × 404"),
        "{}",
        out.stderr
    );
    // Not the 2xx a request expects by default...
    assert_eq!(n(&r, &["unexpected"]), 40);
    // ...unless it is told to expect it.
    let r = bench(
        &["-n", "10", "--expect", "404", &server.url("/missing.html")],
        0,
    );
    assert_eq!(n(&r, &["unexpected"]), 0);
    assert_eq!(r["by_request"][0]["expect"], "404");
}

fn close_opens_a_connection_per_request(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = bench(
        &["-n", "60", "-c", "4", "--close", &server.url("/index.html")],
        0,
    );
    assert_eq!(n(&r, &["responses"]), 60);
    assert_eq!(n(&r, &["connections_opened"]), 60);
    assert_eq!(r["keepalive"], Value::Bool(false));
}

tests::mpm_suite!(
    a_fixed_request_count_is_answered_exactly,
    pipelined_requests_are_each_counted_once,
    a_pipelined_batch_cut_by_the_servers_limit_is_sent_again,
    a_run_where_no_answer_is_a_success_is_counted_warned_and_exits_1,
    close_opens_a_connection_per_request,
);

/// `--h2`: the load over HTTP/2 with prior knowledge, `--streams` at once
/// on each connection: every request answered on the two connections
/// opened, as the server counts them too; and what it refuses, in one line.
#[test]
fn h2_multiplexes_the_requests_on_its_connections() {
    let root = docroot();
    for mpm in ["worker", "event"] {
        let server = Server::start(mpm, Some(root.path()), &["--h2c", "on"]);
        let url = server.url("/index.html");
        let r = bench(&["--h2", "--streams", "8", "-n", "400", "-c", "2", &url], 0);
        assert_eq!(n(&r, &["responses"]), 400, "{mpm}");
        assert_eq!(n(&r, &["status", "200"]), 400, "{mpm}");
        assert_eq!(n(&r, &["body_bytes"]), 400 * PAGE_LEN as u64, "{mpm}");
        assert_eq!(n(&r, &["connections_opened"]), 2, "{mpm}");
        let status: Value =
            serde_json::from_str(&server.get("/server-status?json").text()).unwrap();
        assert_eq!(n(&status, &["h2", "streams_total"]), 400, "{mpm}");
        assert_eq!(n(&status, &["h2", "connections_total"]), 2, "{mpm}");
    }
    let out = run_mpm(
        &["bench", "--h2", "--close", "http://127.0.0.1:9/"],
        Duration::from_secs(20),
    );
    out.assert_one_line_error("--close");
}

/// `--h2` over TLS: `h2` chosen by ALPN, every request answered on the
/// two connections opened (the server counts the same streams), nothing
/// counted as an error; and a server that chooses `http/1.1` (`--http2
/// off`) refused in one line with exit 2, its answers never counted.
#[test]
fn h2_over_tls_is_chosen_by_alpn_and_refused_by_a_server_offering_http1_only() {
    let root = docroot();
    let ca = tests::tls::material().ca.to_str().unwrap();
    for mpm in ["worker", "event"] {
        let server = with_transport(Transport::Tls, || {
            Server::start(mpm, Some(root.path()), &[])
        });
        let url = server.url("/index.html");
        assert!(url.starts_with("https://"), "{url}");
        let r = bench(
            &[
                "--h2",
                "--streams",
                "8",
                "-n",
                "400",
                "-c",
                "2",
                "--cacert",
                ca,
                &url,
            ],
            0,
        );
        assert_eq!(n(&r, &["responses"]), 400, "{mpm}");
        assert_eq!(n(&r, &["status", "200"]), 400, "{mpm}");
        assert_eq!(n(&r, &["body_bytes"]), 400 * PAGE_LEN as u64, "{mpm}");
        assert_eq!(n(&r, &["connections_opened"]), 2, "{mpm}");
        for kind in [
            "connect",
            "read",
            "timeout",
            "bad_response",
            "length",
            "handshake",
        ] {
            assert_eq!(n(&r, &["errors", kind]), 0, "{mpm}: {kind}");
        }
        let status: Value =
            serde_json::from_str(&server.get("/server-status?json").text()).unwrap();
        assert_eq!(n(&status, &["h2", "streams_total"]), 400, "{mpm}");
        assert_eq!(n(&status, &["h2", "connections_total"]), 2, "{mpm}");
    }
    let server = with_transport(Transport::Tls, || {
        Server::start("event", Some(root.path()), &["--http2", "off"])
    });
    let out = run_mpm(
        &[
            "bench",
            "--h2",
            "-n",
            "10",
            "--cacert",
            ca,
            &server.url("/index.html"),
        ],
        Duration::from_secs(20),
    );
    out.assert_one_line_error("--http2 off");
    assert!(
        out.stderr
            .contains("--h2: the server chose http/1.1 by ALPN, not h2"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "no figures: {}", out.stdout);
}

/// `--h2` on `http://` against a server that does not take HTTP/2 in
/// clear (mpm without `--h2c on` answers the preface in HTTP/1): one line
/// saying so and how to get it, exit 2, no figures; not a read error per
/// stream. With `--h2c on` the same run is answered.
#[test]
fn h2_in_clear_against_a_server_without_h2c_is_refused_in_one_line() {
    let root = docroot();
    for mpm in ["worker", "event"] {
        let server = with_transport(Transport::Plain, || {
            Server::start(mpm, Some(root.path()), &[])
        });
        let url = server.url("/index.html");
        let out = run_mpm(
            &["bench", "--h2", "-n", "20", "-c", "2", &url],
            Duration::from_secs(20),
        );
        out.assert_one_line_error(mpm);
        assert!(
            out.stderr.contains("answered the HTTP/2 preface in HTTP/1")
                && out.stderr.contains("--h2c on"),
            "{mpm}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{mpm}: no figures: {}", out.stdout);
        let h2c = with_transport(Transport::Plain, || {
            Server::start(mpm, Some(root.path()), &["--h2c", "on"])
        });
        let r = bench(&["--h2", "-n", "20", "-c", "2", &h2c.url("/index.html")], 0);
        assert_eq!(n(&r, &["status", "200"]), 20, "{mpm}");
    }
}

/// The shop example's workload file (`server/examples/shop.toml`), sent 50
/// times: the application counts exactly the shares of its weights (30
/// item reads, 10 searches, 10 POSTs with their 31-byte bodies), each
/// request carrying the file's header, and nothing else.
#[test]
fn a_workload_file_drives_exactly_its_weighted_requests() {
    let server = Server::start_example("shop", "event", &["--server-limit", "1"]);
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/examples/shop.toml");
    let r = bench(
        &["-n", "50", "-c", "4", "--workload", file, &server.url("/")],
        0,
    );
    assert_eq!(n(&r, &["responses"]), 50);
    assert_eq!(n(&r, &["unexpected"]), 0, "{r}");
    assert_eq!(n(&r, &["connections"]), 4, "-c wins over the file's 20");
    let by: Vec<(String, u64)> = r["by_request"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["request"].as_str().unwrap().to_string(),
                n(q, &["responses"]),
            )
        })
        .collect();
    assert_eq!(
        by,
        [
            ("GET /api/items/7".to_string(), 30),
            ("GET /api/search?q=lamp".to_string(), 10),
            ("POST /api/items".to_string(), 10)
        ]
    );
    assert_eq!(r["status"], serde_json::json!({"200": 40, "201": 10}));
    let counts: Value = serde_json::from_str(&server.get("/api/counts").text()).unwrap();
    assert_eq!(
        counts,
        serde_json::json!({"get_item": 30, "post_item": 10, "post_bytes": 310, "search": 10,
                           "slow": 0, "other": 0, "marked": 50}),
    );
}

/// Slow clients send their requests a few bytes at a time with pauses
/// between: a request of a hundred-odd bytes in 10-byte pieces 20 ms apart
/// takes well over 100 ms, and is still answered.
#[test]
fn slow_clients_send_their_requests_in_pieces() {
    let root = docroot();
    let server = Server::start("event", Some(root.path()), &[]);
    let dir = TempDir::new("bench-slow");
    let file = dir.write(
        "slow.toml",
        b"connections = 2\nslow-clients = 0.5\nslow-pause = \"20ms\"\nslow-bytes = 10\n\
          [[request]]\npath = \"/index.html\"\n",
    );
    let r = bench(
        &[
            "-n",
            "8",
            "--workload",
            file.to_str().unwrap(),
            &server.url("/"),
        ],
        0,
    );
    assert_eq!(n(&r, &["status", "200"]), 8);
    // One connection of the two is slow: the slowest requests are its.
    assert!(n(&r, &["latency_us", "max"]) >= 100_000, "{r}");
    assert!(
        n(&r, &["latency_us", "p50"]) < 100_000,
        "the other is not slow: {r}"
    );
}

/// Nothing listening: the run stops as soon as every connection has failed
/// once (it ran its whole duration and piled up 131,050 connect errors),
/// with one line that says why, and exit 1.
#[test]
fn a_closed_port_fails_fast_with_one_line_and_exit_1() {
    // Refusing for the whole test: no other test's bind can take it.
    let closed = tests::origin::dead_port();
    let url = format!("http://{closed}/");
    for limit in [&["-d", "60s"][..], &["-n", "1000000"]] {
        let mut args = vec!["bench", "-c", "3"];
        args.extend_from_slice(limit);
        args.push(&url);
        // Well under the 60 s asked for: it did not run its course.
        let out = run_mpm(&args, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(1), "{limit:?}: {}", out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("no connection to 127.0.0.1:")
                && out.stderr.contains("refused")
                && out.stderr.contains("is the server up?"),
            "{}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

/// A server that answers each connection's first request with `reply(i)`
/// and closes, for `count` connections.
fn fake_server(count: usize, reply: impl Fn(usize) -> Vec<u8> + Send + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for i in 0..count {
            let Ok((mut s, _)) = l.accept() else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&reply(i));
        }
    });
    url
}

#[test]
fn garbage_and_broken_framing_are_bad_responses() {
    let url = fake_server(6, |i| {
        if i % 2 == 0 {
            b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec()
        }
    });
    let r = bench(&["-n", "6", "-c", "1", "--close", &url], 1);
    assert_eq!(n(&r, &["errors", "bad_response"]), 6);
}

#[test]
fn a_body_cut_short_is_a_read_error_and_other_lengths_are_counted() {
    let url = fake_server(3, |i| match i {
        0 => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab".to_vec(),
        1 => b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc".to_vec(),
        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nab".to_vec(),
    });
    let r = bench(&["-n", "3", "-c", "1", "--close", &url], 0);
    assert_eq!(n(&r, &["responses"]), 1);
    assert_eq!(
        n(&r, &["errors", "length"]),
        1,
        "3 bytes where the first had 2"
    );
    assert_eq!(n(&r, &["errors", "read"]), 1, "closed 7 bytes short");
}

#[test]
fn a_server_that_never_answers_gives_timeouts() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    // Accept and hold every connection, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept() {
            held.push(s);
        }
    });
    let out = run_mpm(
        &[
            "bench",
            "--json",
            "--timeout",
            "300ms",
            "-n",
            "4",
            "-c",
            "2",
            &url,
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(n(&r, &["errors", "timeout"]), 4);
}

#[test]
fn json_has_every_documented_field() {
    let url = fake_server(2, |_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
    });
    let r = bench(&["-n", "2", "-c", "1", &url], 0);
    for key in [
        "url",
        "connections",
        "threads",
        "keepalive",
        "duration_s",
        "responses",
        "requests_per_s",
        "body_bytes",
        "connections_opened",
        "latency_us",
        "status",
        "unexpected",
        "errors",
        "by_request",
    ] {
        assert!(r.get(key).is_some(), "{key} missing from {r}");
    }
    for key in ["p50", "p90", "p99", "p99_9", "max", "mean"] {
        assert!(
            r["latency_us"].get(key).is_some(),
            "latency_us.{key} missing"
        );
    }
    assert!(n(&r, &["latency_us", "max"]) >= n(&r, &["latency_us", "p50"]));
    assert_eq!(n(&r, &["responses"]), 2);
}

#[test]
fn bad_flags_are_one_line_and_exit_2() {
    for args in [
        &["bench", "https://127.0.0.1/"][..],
        &["bench", "-c", "0", "http://127.0.0.1:1/"],
        &["bench", "-H", "nocolon", "http://127.0.0.1:1/"],
    ] {
        let out = run_mpm(args, Duration::from_secs(10));
        out.assert_one_line_error(&format!("{args:?}"));
    }
}
