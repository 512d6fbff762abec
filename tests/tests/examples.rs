//! The embedding examples, each built and run as a server under every MPM:
//! what a user's own handler gets from `mpm::main` must hold for all three.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use tests::{RawConn, Server};

fn get(server: &Server, path: &str) -> (u16, String) {
    let mut c = RawConn::connect(server.addr());
    c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let r = c.read_response().unwrap();
    (r.status, r.text())
}

fn json_api_answers_cpu_bound_blocking_and_trivial_endpoints(mpm: &str) {
    let server = Server::start_example("json_api", mpm, &[]);
    assert_eq!(
        get(&server, "/api/hello"),
        (200, r#"{"hello":"world"}"#.into())
    );
    assert_eq!(
        get(&server, "/api/cpu?n=1000"),
        (200, r#"{"n":1000,"primes":168}"#.into())
    );
    assert_eq!(
        get(&server, "/api/sleep?ms=30"),
        (200, r#"{"slept_ms":30}"#.into())
    );
    assert_eq!(get(&server, "/api/nope").0, 404);
    // Blocking requests at once: each is served, none lost.
    let addr = server.addr();
    let sleepers: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = RawConn::connect(addr);
                c.send(b"GET /api/sleep?ms=100 HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                c.read_response().unwrap().text()
            })
        })
        .collect();
    for s in sleepers {
        assert_eq!(s.join().unwrap(), r#"{"slept_ms":100}"#);
    }
    // A body reaches the handler.
    let mut c = RawConn::connect(server.addr());
    c.send(b"POST /api/echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    assert_eq!(c.read_response().unwrap().text(), r#"{"bytes":5}"#);
    // The status page comes with the entry point.
    assert_eq!(get(&server, "/server-status?json").0, 200);
}

fn per_worker_state_is_each_workers_own(mpm: &str) {
    let server = Server::start_example("per_worker_state", mpm, &["--max-request-workers", "4"]);
    // (pid, worker) -> the counts it reported, in order.
    let mut seen: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
    for _ in 0..40 {
        let (status, body) = get(&server, "/whoami");
        assert_eq!(status, 200, "{body}");
        let field = |name: &str| -> u64 {
            let at = body.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
            body[at..]
                .split([',', '}'])
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        assert_eq!(field("pool"), 2, "every worker opens its own pool: {body}");
        seen.entry((field("pid"), field("worker")))
            .or_default()
            .push(field("served"));
    }
    // Each worker counts its own requests, from 1, without gaps: the state
    // is per worker, never shared (a shared counter would skip numbers).
    for (who, counts) in &seen {
        let expected: Vec<u64> = (1..=counts.len() as u64).collect();
        assert_eq!(counts, &expected, "worker {who:?}");
    }
}

fn streaming_sends_a_large_body_chunked_and_to_http10_until_close(mpm: &str) {
    let server = Server::start_example("streaming", mpm, &[]);
    let mut c = RawConn::connect(server.addr());
    c.send(b"GET /lines?count=20000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let text = r.text();
    assert_eq!(text.lines().count(), 20_000);
    assert_eq!(text.lines().last(), Some("line 20000 of 20000"));
    // The connection is still good for another request.
    c.send(b"GET /lines?count=3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().text().lines().count(), 3);
    // HTTP/1.0 has no chunks: the close ends the body.
    let mut c = RawConn::connect(server.addr());
    c.send(b"GET /lines?count=500 HTTP/1.0\r\n\r\n").unwrap();
    let raw = String::from_utf8(c.read_to_end().unwrap()).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding"));
    assert_eq!(body.lines().count(), 500);
}

/// Adler-32 of `bytes`, to check the example's.
fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in bytes {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

/// `POST /count` reads an upload as it arrives, announced or chunked, in
/// pieces that come apart, and answers its length and checksum; the
/// connection then serves on. (Under event and uring the answer's future
/// reads it; elsewhere the handler's thread.)
fn streaming_counts_an_upload_as_it_arrives(mpm: &str) {
    // Past the default 1 MiB limit.
    let server = Server::start_example("streaming", mpm, &["--limit-request-body", "4194304"]);
    let body = tests::pattern(3 * 1024 * 1024 + 5, 11);
    let expected = format!("{} bytes, adler32 {:08x}\n", body.len(), adler32(&body));
    let mut c = RawConn::connect(server.addr());
    // Announced, sent in pieces.
    c.send(
        format!(
            "POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    for piece in body.chunks(700_001) {
        c.send(piece).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.text()), (200, expected.clone()));
    // Chunked, in the same connection.
    let mut framed =
        b"POST /count HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in body.chunks(100_000) {
        framed.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        framed.extend_from_slice(piece);
        framed.extend_from_slice(b"\r\n");
    }
    framed.extend_from_slice(b"0\r\n\r\n");
    for piece in framed.chunks(1_000_003) {
        c.send(piece).unwrap();
    }
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.text()), (200, expected));
    c.send(b"GET /lines?count=3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().text().lines().count(), 3);
}

fn shop_answers_its_endpoints_with_the_statuses_its_workloads_expect(mpm: &str) {
    let server = Server::start_example("shop", mpm, &[]);
    assert_eq!(
        get(&server, "/api/items/7"),
        (200, r#"{"id":7,"name":"oak mirror 7"}"#.into())
    );
    assert_eq!(get(&server, "/api/items/5000").0, 404);
    assert_eq!(get(&server, "/api/search?q=lamp").0, 200);
    assert_eq!(
        get(&server, "/api/slow?ms=5"),
        (200, r#"{"slept_ms":5}"#.into())
    );
    let mut c = RawConn::connect(server.addr());
    c.send(b"POST /api/items HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nlamp")
        .unwrap();
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.text()), (201, r#"{"created":4}"#.into()));
    assert_eq!(get(&server, "/nope").0, 404);
}

fn line_echo_protocol_echoes_lines(mpm: &str) {
    let server = Server::start_example("line_echo", mpm, &[]);
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"first\nsec").unwrap();
    s.write_all(b"ond\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "first\n");
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "second\n");
}

fn techempower_answers_plaintext_and_json_by_the_rules_pipelined_too(mpm: &str) {
    let server = Server::start_example("techempower", mpm, &[]);
    let mut c = RawConn::connect(server.addr());
    for (path, body, kind) in [
        ("/plaintext", "Hello, World!", "text/plain"),
        (
            "/json",
            r#"{"message":"Hello, World!"}"#,
            "application/json",
        ),
    ] {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let r = c.read_response().unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, body), "{path}");
        assert_eq!(r.header("content-type"), Some(kind), "{path}");
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str())
        );
        assert!(r.header("server").is_some_and(|s| !s.is_empty()));
        assert!(r.header("date").is_some_and(|d| d.ends_with(" GMT")));
    }
    // TechEmpower's pipelined plaintext: 16 requests in one write, 16
    // answers in order on the same connection.
    let one = "GET /plaintext HTTP/1.1\r\nHost: t\r\n\r\n";
    c.send(one.repeat(16).as_bytes()).unwrap();
    for i in 0..16 {
        let r = c.read_response().unwrap();
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "Hello, World!"),
            "#{i}"
        );
    }
    assert_eq!(get(&server, "/nope").0, 404);
}

/// The backend-for-frontend calls its two services (by default its own
/// demo routes, 20 ms each, on a timer) at once and merges their JSON;
/// several dashboards at once are each answered, under every model.
/// A GET whose `Host` is the server's address (the BFF's demo services
/// are reached there).
fn get_at(server: &Server, path: &str) -> (u16, String) {
    let mut c = RawConn::connect(server.addr());
    let host = server.addr();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let r = c.read_response().unwrap();
    (r.status, r.text())
}

fn bff_merges_two_upstream_answers_into_one(mpm: &str) {
    let server = Server::start_example("bff", mpm, &[]);
    let (status, body) = get_at(&server, "/dashboard/7");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        r#"{"id":"7","orders":{"id":"7","orders":[{"qty":1,"sku":"lamp"},{"qty":2,"sku":"rug"}]},"profile":{"id":"7","name":"user 7"}}"#
    );
    let addr = server.addr();
    let many: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = RawConn::connect(addr);
                c.send(format!("GET /dashboard/{i} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
                    .unwrap();
                c.read_response().unwrap().text()
            })
        })
        .collect();
    for (i, t) in many.into_iter().enumerate() {
        let text = t.join().unwrap();
        assert!(text.contains(&format!(r#""name":"user {i}""#)), "{text}");
    }
    // A service that is down degrades the page instead of failing it.
    drop(server);
    let server = Server::start_example("bff", mpm, &["--orders-upstream", "http://127.0.0.1:9/"]);
    let (status, body) = get_at(&server, "/dashboard/1");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""profile":{"id":"1""#), "{body}");
    assert!(body.contains(r#""orders":{"error":"#), "{body}");
}

tests::mpm_suite!(
    bff_merges_two_upstream_answers_into_one,
    techempower_answers_plaintext_and_json_by_the_rules_pipelined_too,
    json_api_answers_cpu_bound_blocking_and_trivial_endpoints,
    per_worker_state_is_each_workers_own,
    streaming_sends_a_large_body_chunked_and_to_http10_until_close,
    streaming_counts_an_upload_as_it_arrives,
    shop_answers_its_endpoints_with_the_statuses_its_workloads_expect,
    line_echo_protocol_echoes_lines,
);
