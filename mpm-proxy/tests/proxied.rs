//! The proxy against std-thread origins, served by the blocking driver:
//! what reaches the upstream, what comes back, keep-alive to upstreams,
//! 502 and 504, retries, passive health, streamed bodies, tunnels,
//! uploads, smuggling refused.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use mpm_core::Interest;
use mpm_proxy::ProxyRoute;

#[test]
fn a_proxied_answer_is_the_upstreams_and_the_request_is_rewritten() {
    let (up, seen) = origin(|_| {
        Some(
            b"HTTP/1.1 200 OK\r\nServer: origin/1\r\nETag: \"v1\"\r\nConnection: keep-alive, X-Internal\r\nX-Internal: 1\r\nX-Accel-Limit-Rate: 1024\r\nKeep-Alive: timeout=5\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
                .to_vec(),
        )
    });
    let p = serve(proxy(&[&format!("/api/=http://{up}/v1/")]));
    let (head, body) = get(
        p,
        "GET /api/items?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nProxy-Authorization: Basic eA==\r\nTE: trailers\r\nAccept: */*\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(body, b"hello");
    assert!(
        head.contains("Server: origin/1\r\n") && head.contains("ETag: \"v1\"\r\n"),
        "{head}"
    );
    for gone in ["X-Internal", "X-Accel", "Keep-Alive"] {
        assert!(!head.contains(gone), "{gone} reached the client: {head}");
    }
    let sent = String::from_utf8(seen.requests.lock().unwrap()[0].clone()).unwrap();
    assert!(
        sent.starts_with(&format!("GET /v1/items?x=1 HTTP/1.1\r\nHost: {up}\r\n")),
        "{sent}"
    );
    assert!(
        sent.contains("Accept: */*\r\n") && sent.contains("X-Forwarded-For: 127.0.0.1\r\n"),
        "{sent}"
    );
    assert!(sent.contains("X-Forwarded-Host: example.com\r\n"), "{sent}");
    for gone in ["X-Secret", "Proxy-", "TE:", "close"] {
        assert!(!sent.contains(gone), "{gone} reached the upstream: {sent}");
    }
}

#[test]
fn requests_on_one_client_connection_share_one_upstream_connection() {
    let (up, seen) = plain_origin("ok");
    let rp = proxy(&[&format!("/=http://{up}")]);
    let state = rp.state().clone();
    let p = serve(rp);
    let mut c = client(p);
    for _ in 0..5 {
        c.write_all(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut c, false);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, b"ok");
    }
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "kept alive and reused"
    );
    assert_eq!(seen.requests.lock().unwrap().len(), 5);
    let snap = &state.snapshot()[0];
    assert_eq!(
        (
            snap.requests,
            snap.connections_opened,
            snap.connections_reused,
            snap.pool_idle
        ),
        (5, 1, 4, 1),
        "{snap:?}"
    );
}

#[test]
fn a_dead_upstream_is_a_502_and_a_silent_one_a_504() {
    let dead = dead_addr();
    let errors = mpm_core::error_log::expect(naming(dead));
    let p = serve(proxy(&[&format!("/=http://{dead}")]));
    let (head, _) = get(p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    let (up, _) = origin(|_| {
        std::thread::sleep(Duration::from_secs(1));
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec())
    });
    let timeouts = mpm_core::error_log::expect(naming(up));
    let mut route = ProxyRoute::from_flag(&format!("/=http://{up}")).unwrap();
    route.read_timeout = Duration::from_millis(200);
    let p = serve(proxy_of(vec![route]));
    let (head, _) = get(p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 504"), "{head}");
    assert!(errors.count() >= 1, "{:?}", errors.lines());
    assert!(
        timeouts.lines().iter().any(|l| l.contains("in time")),
        "{:?}",
        timeouts.lines()
    );
}

#[test]
fn a_get_goes_to_the_next_upstream_after_a_connect_error_and_a_post_does_not() {
    let (up, seen) = plain_origin("alive");
    let dead = dead_addr();
    let errors = mpm_core::error_log::expect(naming(dead));
    let mut route = ProxyRoute::from_flag(&format!("/=http://{dead},http://{up}")).unwrap();
    route.upstreams[0].max_fails = 0; // stays in rotation: every other request meets it
    let p = serve(proxy_of(vec![route]));
    for _ in 0..4 {
        let (head, body) = get(p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, b"alive");
    }
    let mut posts = Vec::new();
    for _ in 0..2 {
        let (head, _) = get(
            p,
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx",
        );
        posts.push(head[9..12].to_string());
    }
    posts.sort();
    assert_eq!(
        posts,
        ["200", "502"],
        "one POST met the dead upstream and was not retried"
    );
    assert_eq!(seen.requests.lock().unwrap().len(), 5);
    assert!(errors.count() >= 3);
}

#[test]
fn passive_health_skips_a_dead_upstream() {
    let (up, seen) = plain_origin("alive");
    let dead = dead_addr();
    let errors = mpm_core::error_log::expect(naming(dead));
    let p = serve(proxy(&[&format!("/=http://{dead},http://{up}")]));
    for _ in 0..6 {
        let (head, _) = get(p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    // One failure (max_fails=1) marked it down: only the first meeting cost a try.
    let lines = errors.lines();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("could not connect"))
            .count(),
        1,
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("marked down for 10s")),
        "{lines:?}"
    );
    assert_eq!(seen.requests.lock().unwrap().len(), 6);
}

#[test]
fn an_event_reaches_the_client_before_the_upstream_ends() {
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        read_request(&mut s).unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
            .unwrap();
        // The rest only once the client has seen the first event.
        wait.recv().unwrap();
        s.write_all(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n").unwrap();
    });
    // Buffering on: an event stream is streamed all the same.
    let mut route = ProxyRoute::from_flag(&format!("/=http://{up}")).unwrap();
    route.buffering = mpm_proxy::Buffering::On;
    let p = serve(proxy_of(vec![route]));
    let mut c = client(p);
    c.write_all(b"GET /events HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !contains(&got, b"data: 1\n\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the first event");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("Content-Type: text/event-stream\r\n"),
        "{text}"
    );
    go_on.send(()).unwrap();
    while !contains(&got, b"data: 2\n\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the second event");
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_request_framed_two_ways_never_reaches_the_upstream() {
    let (up, seen) = plain_origin("x");
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let (head, _) = get(
        p,
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(seen.connections.load(Ordering::SeqCst), 0);
}

#[test]
fn head_keeps_the_upstreams_length_and_a_304_passes() {
    let (up, _) = origin(|req| {
        Some(if req.starts_with(b"HEAD") {
            b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n".to_vec()
        } else {
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n".to_vec()
        })
    });
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let (head, body) = get(p, "HEAD /f HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("Content-Length: 1234\r\n"),
        "{head}"
    );
    assert!(body.is_empty());
    let (head, _) = get(
        p,
        "GET /f HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"v1\"\r\n\r\n",
    );
    assert!(
        head.starts_with("HTTP/1.1 304") && head.contains("ETag: \"v1\"\r\n"),
        "{head}"
    );
}

#[test]
fn a_hostile_upstream_gets_the_client_a_502() {
    let (up, _) = origin(|_| Some(b"SPDY/9 what\r\n\r\n".to_vec()));
    let errors = mpm_core::error_log::expect(naming(up));
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let (head, _) = get(p, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(
        errors.lines().iter().any(|l| l.contains("malformed")),
        "{:?}",
        errors.lines()
    );
}

#[test]
fn a_large_upload_is_streamed_to_the_upstream_whole() {
    let (up, seen) = origin(|req| {
        let body_len = req.len() - req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() - 4;
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body_len}",
                body_len.to_string().len()
            )
            .into_bytes(),
        )
    });
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let body = vec![b'u'; 1 << 20];
    let mut c = client(p);
    write!(
        c,
        "PUT /up HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(&body).unwrap();
    let (head, answer) = read_response(&mut c, false);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(answer, (1 << 20).to_string().as_bytes());
    let sent = seen.requests.lock().unwrap()[0].clone();
    assert!(contains(
        &sent,
        format!("Content-Length: {}\r\n", 1 << 20).as_bytes()
    ));
}

#[test]
fn an_upgrade_is_tunnelled_after_a_101() {
    // An echo after the 101, as a WebSocket server would be.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let req = read_request(&mut s).unwrap();
        assert!(
            contains(&req, b"Upgrade: websocket\r\n") && contains(&req, b"Connection: upgrade\r\n")
        );
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n").unwrap();
        let mut buf = [0u8; 64];
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return;
            }
            s.write_all(&buf[..n]).unwrap();
        }
    });
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let mut c = client(p);
    c.write_all(
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .unwrap();
    let (head, _) = read_response(&mut c, false);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("Upgrade: websocket\r\n"), "{head}");
    c.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    c.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");
}

#[test]
fn on_a_loop_a_request_waits_on_the_upstream_socket_without_a_worker() {
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    let (up, _) = origin(move |_| {
        // Answer only once the client's request is surely parked.
        wait.lock().unwrap().recv().unwrap();
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nparked".to_vec())
    });
    let (p, server) = serve_on_a_loop(proxy(&[&format!("/=http://{up}")]));
    let mut c = client(p);
    c.write_all(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    go_on.send(()).unwrap();
    let (head, body) = read_response(&mut c, false);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"parked");
    let seen = server.join().unwrap();
    assert!(
        seen.iter()
            .any(|i| matches!(i, Interest::Await(a) if a.fd.is_some() && a.read)),
        "the request waited on the upstream's socket, parked: {seen:?}"
    );
}

#[test]
fn with_buffering_on_the_upstream_connection_is_free_before_the_client_reads() {
    const BODY: usize = 512 * 1024;
    let (up, _) = origin(|_| {
        let mut answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n").into_bytes();
        answer.resize(answer.len() + BODY, b'b');
        Some(answer)
    });
    let mut route = ProxyRoute::from_flag(&format!("/=http://{up}")).unwrap();
    route.buffering = mpm_proxy::Buffering::On;
    let rp = proxy_of(vec![route]);
    let state = rp.state().clone();
    let p = serve(rp);
    let mut c = client(p);
    c.write_all(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    // Only the head read: the body is in the proxy's memory, the
    // connection already back in the pool.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    assert_eq!(state.snapshot()[0].pool_idle, 1);
    let mut body = vec![0u8; BODY];
    c.read_exact(&mut body).unwrap();
    assert!(body.iter().all(|&b| b == b'b'));
}

#[test]
fn an_embedder_mounts_the_proxy_among_its_routes() {
    let (up, seen) = plain_origin("from upstream");
    let api = proxy(&[&format!("/api/=http://{up}/v1/")]);
    let routes = mpm_http::Routes::new()
        .get("/health", |_: &mut (), _: &mpm_http::Request<'_>| "ok")
        .mount("/api/", api.worker());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let router = routes.with_state(());
        let mut service = mpm_http::HttpService::new(router, &mpm_http::HttpSettings::default());
        let (sock, peer) = listener.accept().unwrap();
        let stream = mpm_core::Stream::new(
            sock,
            peer,
            true,
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        )
        .unwrap();
        let timeouts = mpm_core::blocking::Timeouts {
            request: Duration::from_secs(10),
            keepalive: Duration::from_millis(300),
            linger: Duration::from_millis(100),
            first_request: Duration::from_secs(10),
            inherited: false,
        };
        mpm_core::blocking::serve_blocking(
            &mut service,
            stream,
            &timeouts,
            &mut mpm_core::blocking::NoPark,
        );
    });
    let mut c = client(addr);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut c, false).1, b"ok");
    c.write_all(b"GET /api/users HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    let (head, body) = read_response(&mut c, false);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"from upstream");
    let sent = seen.requests.lock().unwrap()[0].clone();
    assert!(sent.starts_with(b"GET /v1/users HTTP/1.1\r\n"));
}

#[test]
fn a_large_chunked_answer_streams_whole() {
    const CHUNKS: usize = 256;
    let (up, _) = origin(|_| {
        let mut answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for i in 0..CHUNKS {
            answer.extend_from_slice(b"8000\r\n");
            answer.resize(answer.len() + 0x8000, b'a' + (i % 26) as u8);
            answer.extend_from_slice(b"\r\n");
        }
        answer.extend_from_slice(b"0\r\n\r\n");
        Some(answer)
    });
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let (head, body) = get(p, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
    assert_eq!(body.len(), CHUNKS * 0x8000);
    for (i, chunk) in body.chunks(0x8000).enumerate() {
        assert!(
            chunk.iter().all(|&b| b == b'a' + (i % 26) as u8),
            "chunk {i}"
        );
    }
}

#[test]
fn an_upstreams_status_and_reason_pass_and_an_impossible_status_is_a_502() {
    let (up, _) = origin(|req| {
        Some(if req.starts_with(b"GET /odd") {
            b"HTTP/1.1 299 Fine Enough\r\nContent-Length: 0\r\n\r\n".to_vec()
        } else {
            b"HTTP/1.1 999 Nope\r\nContent-Length: 0\r\n\r\n".to_vec()
        })
    });
    let errors = mpm_core::error_log::expect(naming(up));
    let p = serve(proxy(&[&format!("/=http://{up}")]));
    let (head, _) = get(p, "GET /odd HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 299 Fine Enough\r\n"), "{head}");
    let (head, _) = get(p, "GET /bad HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    let lines = errors.lines();
    assert!(lines[0].contains("malformed: status 999"), "{lines:?}");
    // A route's only upstream is never marked down (nginx's rule).
    assert_eq!(lines.len(), 1, "{lines:?}");
}

/// A host name with several addresses is an upstream per address, as
/// nginx makes each a server: requests go round-robin to both live ones
/// with the name as their `Host`, a dead one is retried past and marked
/// down, and the status page names each by URL and address.
#[test]
fn a_name_with_several_addresses_is_balanced_over_them_and_each_is_counted() {
    let answer = |who: &'static str| {
        move |_: &[u8]| {
            Some(format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{who}").into_bytes())
        }
    };
    let (a, seen_a) = origin(answer("a"));
    // The same port on another loopback address (Linux routes 127/8 to lo).
    let Ok(listener_b) = std::net::TcpListener::bind(("127.0.0.2", a.port())) else {
        eprintln!("skipped: 127.0.0.2:{} cannot be bound here", a.port());
        return;
    };
    let (b, seen_b) = origin_on(listener_b, answer("b"));
    let dead: std::net::SocketAddr = format!("127.0.0.3:{}", a.port()).parse().unwrap();
    // Its failure and its marking down, each named with its address.
    let errors = mpm_core::error_log::expect(naming(format!("({dead})")));
    let route = ProxyRoute::from_flag(&format!("/=http://scaled.test:{}", a.port())).unwrap();
    let routes = mpm_proxy::one_upstream_per_address(vec![route], |host, _| {
        assert_eq!(host, "scaled.test");
        Ok(vec![a, dead, b])
    })
    .unwrap();
    let rp = proxy_of(routes);
    let state = rp.state().clone();
    let p = serve(rp);
    let mut answers = String::new();
    for _ in 0..6 {
        let (head, body) = get(p, "GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        answers.push_str(std::str::from_utf8(&body).unwrap());
    }
    assert!(answers.contains('a') && answers.contains('b'), "{answers}");
    for seen in [&seen_a, &seen_b] {
        let first = String::from_utf8(seen.requests.lock().unwrap()[0].clone()).unwrap();
        let host = format!("\r\nHost: scaled.test:{}\r\n", a.port());
        assert!(first.contains(&host), "{first}");
    }
    let snap = state.snapshot();
    let rows: Vec<(&str, bool)> = snap.iter().map(|s| (s.url.as_str(), s.up)).collect();
    let url = format!("http://scaled.test:{}", a.port());
    assert_eq!(
        rows,
        [
            (format!("{url} ({a})").as_str(), true),
            (format!("{url} ({dead})").as_str(), false),
            (format!("{url} ({b})").as_str(), true),
        ]
    );
    assert!(snap[1].failures >= 1, "{:?}", snap[1]);
    assert!(errors.count() >= 2, "{:?}", errors.lines());
}
