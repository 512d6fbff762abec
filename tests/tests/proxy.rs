//! The reverse proxy (`--proxy PREFIX=URL[,URL...]`, `[[proxy]]` tables)
//! under every model, the client speaking plain HTTP or TLS to mpm
//! (`mpm_suite!(over transports: ...)`); the upstreams are origins in this
//! test process ([`tests::origin`]), plain HTTP, each test its own.
//!
//! What the proxy owes: an answer passed on as the origin gave it;
//! hop-by-hop fields kept from the origin and who the client is told it;
//! a request the server would refuse for itself (smuggling) refused before
//! it is forwarded; 502 and 504 when the origin fails, and nothing else
//! disturbed; health, passive and active; retries only where they are
//! safe; streaming both ways in bounded memory, events as they come,
//! tunnels after a 101; upstream connections reused; a graceful stop
//! waiting for a request parked on its upstream (and cutting it at its
//! timeout); each upstream's counters and access-log fields; and, under
//! event, a request waiting on its upstream holds no thread.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::ErrorKind;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tests::origin::{dead_port, Origin, Script, Step};
use tests::{mpm_suite, pattern, run_mpm, site, threads, Exit, RawConn, Reply, Server, TempDir};

/// The origin's own `Date` and `Last-Modified`: fixed, so that an answer
/// fetched twice is the same answer (the proxied one carries mpm's `Date`
/// instead, as nginx's does: docs/proxy.md).
const DATE: &str = "Tue, 01 Dec 2026 12:00:00 GMT";

/// A request head for `path` with extra field lines.
fn request(method: &str, path: &str, fields: &[&str]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: proxy.test\r\n");
    for f in fields {
        r.push_str(f);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// One request on a new connection to `addr` (TLS if a TLS server
/// listens there) and its whole response.
fn ask(addr: std::net::SocketAddr, method: &str, path: &str, fields: &[&str]) -> Reply {
    let mut c = RawConn::connect(addr);
    c.send(&request(method, path, fields)).unwrap();
    c.read_response_to(method)
        .unwrap_or_else(|e| panic!("{method} {path} at {addr}: {e}"))
}

/// A server with the suite's small site and these proxy arguments; the
/// site's directory lives as long as it.
struct Proxied {
    server: Server,
    _root: TempDir,
}

impl std::ops::Deref for Proxied {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.server
    }
}

fn serve(mpm: &str, args: &[&str]) -> Proxied {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), args);
    Proxied {
        server,
        _root: root,
    }
}

/// `--proxy /=http://ORIGIN` and more.
fn serve_all_to(mpm: &str, origin: &Origin, extra: &[&str]) -> Proxied {
    let route = format!("/={}", origin.url(""));
    let mut args = vec!["--proxy", route.as_str()];
    args.extend_from_slice(extra);
    serve(mpm, &args)
}

/// A server configured by a settings file with this text.
fn serve_with_file(mpm: &str, toml: &str, extra: &[&str]) -> (Proxied, TempDir) {
    let dir = TempDir::new("proxy-config");
    let file = dir.write("mpm.toml", toml.as_bytes());
    let file = file.to_str().unwrap().to_string();
    let mut args = vec!["--config", file.as_str()];
    args.extend_from_slice(extra);
    (serve(mpm, &args), dir)
}

/// One process (and one thread, where the model has threads): requests on
/// separate connections see the same balancer and pool.
fn one_worker(mpm: &str) -> Vec<&'static str> {
    let mut a = vec!["--server-limit", "1"];
    if mpm != "prefork" {
        a.extend(["--threads-per-child", "1"]);
    }
    a
}

/// The access log's text once `done` holds of it (polled: lines are
/// written as answers end), or what it holds after 10 s.
fn access_log_when(log: &std::path::Path, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if done(&text) || Instant::now() >= deadline {
            return text;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The origin's usual fields: its own `Date` and `Server`, a type, a
/// cache lifetime.
fn origin_fields(s: Script) -> Script {
    s.header("Date", DATE)
        .header("Server", "origin/1.0")
        .header("Content-Type", "text/plain")
        .header("Cache-Control", "max-age=60")
}

/// A response's end-to-end fields, lower-cased names, in order: without
/// the hop-by-hop ones, without `Date` (mpm writes its own, as nginx does:
/// docs/proxy.md), and without the framing if `framing_free` (an answer
/// the proxy may frame anew).
fn end_to_end(r: &Reply, framing_free: bool) -> Vec<(String, String)> {
    r.headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .filter(|(n, _)| {
            let hop = matches!(
                n.as_str(),
                "connection" | "keep-alive" | "transfer-encoding" | "date"
            );
            let framing = framing_free && n == "content-length";
            !hop && !framing
        })
        .collect()
}

fn assert_same(direct: &Reply, proxied: &Reply, what: &str) {
    assert_eq!(proxied.status, direct.status, "{what}: status");
    assert_eq!(proxied.header_count("date"), 1, "{what}: one Date");
    let reframed = direct.header("transfer-encoding").is_some()
        || proxied.header("transfer-encoding").is_some();
    assert_eq!(
        end_to_end(proxied, reframed),
        end_to_end(direct, reframed),
        "{what}: the proxied fields differ from the origin's"
    );
    assert!(
        proxied.body == direct.body,
        "{what}: the proxied body ({} bytes) differs from the origin's ({} bytes)",
        proxied.body.len(),
        direct.body.len()
    );
}

// ---------------------------------------------------------------------------
// Answers passed on
// ---------------------------------------------------------------------------

fn a_proxied_answer_is_the_origins_byte_for_byte(mpm: &str) {
    let origin = Origin::start();
    let page = pattern(3000, 11);
    let mib = pattern(1 << 20, 12);
    origin
        .on(
            "/cached",
            origin_fields(Script::ok(&page))
                .header("ETag", "\"v1\"")
                .header("Last-Modified", DATE)
                .header("Accept-Ranges", "bytes"),
        )
        .on("/chunked", origin_fields(Script::ok(&page).chunked()))
        .on(
            "/mebibyte",
            origin_fields(Script::ok(&mib)).header("ETag", "\"m\""),
        );
    let server = serve_all_to(mpm, &origin, &[]);
    let cases: &[(&str, &str, &[&str], u16)] = &[
        ("GET", "/cached", &[], 200),
        ("GET", "/cached", &["If-None-Match: \"v1\""], 304),
        ("HEAD", "/cached", &[], 200),
        ("GET", "/cached", &["Range: bytes=100-199"], 206),
        ("GET", "/chunked", &[], 200),
        ("GET", "/mebibyte", &[], 200),
    ];
    for &(method, path, fields, status) in cases {
        let what = format!("{method} {path} {fields:?}");
        let direct = ask(origin.addr(), method, path, fields);
        assert_eq!(direct.status, status, "{what}: the origin's own answer");
        let before = origin.requests_to(path).len();
        let proxied = ask(server.addr(), method, path, fields);
        assert_eq!(
            origin.requests_to(path).len(),
            before + 1,
            "{what}: the request did not reach the origin once"
        );
        assert_same(&direct, &proxied, &what);
    }
    // The conditional went to the origin as the client sent it.
    let conditional = &origin.requests_to("/cached")[3];
    assert_eq!(conditional.header("if-none-match"), Some("\"v1\""));
}

/// The origin's fields are passed as its bytes: a value past ASCII
/// (obs-text, a Latin-1 `é`) as it came, as nginx passes it; its `Date`,
/// framing and hop-by-hop fields replaced by the proxy's own.
fn a_field_value_past_ascii_from_the_origin_is_passed_as_it_came(mpm: &str) {
    let origin = Origin::start();
    origin.on(
        "/latin",
        Script::raw(
            b"HTTP/1.1 200 OK\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\nX-Latin: caf\xe9 au lait\r\n\
              Keep-Alive: timeout=5\r\nContent-Length: 3\r\nX-After: \tok\r\n\r\nok\n",
        ),
    );
    let server = serve_all_to(mpm, &origin, &[]);
    let mut c = server.connect();
    c.send(&request("GET", "/latin", &["Connection: close"]))
        .unwrap();
    let got = c.read_to_end().unwrap();
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head");
    let head = &got[..head_end + 2];
    assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"), "{head:?}");
    assert!(
        contains(head, b"\r\nX-Latin: caf\xe9 au lait\r\n"),
        "the value past ASCII was not passed as it came: {:?}",
        String::from_utf8_lossy(head)
    );
    assert!(contains(head, b"\r\nX-After: ok\r\n"), "{head:?}");
    assert!(!contains(head, b"Keep-Alive"), "a hop-by-hop field passed");
    assert!(!contains(head, b"2001"), "the origin's Date passed");
    assert!(contains(head, b"\r\nContent-Length: 3\r\n"));
    assert_eq!(&got[head_end + 4..], b"ok\n");
}

/// A `HEAD` answer's `Content-Length` is the one the `GET` would have:
/// when the upstream gave none that the proxy can use (a chunked answer,
/// one with no framing field, a length that is not one number, a length
/// beside `Transfer-Encoding`), the client's answer has none either (not
/// `Content-Length: 0`, which says the `GET` would have an empty body),
/// and the connection goes on.
fn a_head_answer_without_a_usable_length_from_the_upstream_carries_no_content_length(mpm: &str) {
    let origin = Origin::start();
    origin
        .on(
            "/chunked",
            Script::raw(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kind: chunked\r\n\r\n",
            ),
        )
        .on(
            "/unframed",
            Script::raw(b"HTTP/1.1 200 OK\r\nX-Kind: unframed\r\n\r\n"),
        )
        .on(
            "/two-lengths",
            Script::raw(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\nX-Kind: two\r\n\r\n"),
        )
        .on(
            "/signed-length",
            Script::raw(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\nX-Kind: signed\r\n\r\n"),
        )
        .on(
            "/framed-twice",
            Script::raw(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\
                  X-Kind: twice\r\n\r\n",
            ),
        )
        .on("/next", Script::ok(b"next\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let mut c = server.connect();
    for path in [
        "/chunked",
        "/unframed",
        "/two-lengths",
        "/signed-length",
        "/framed-twice",
    ] {
        c.send(&request("HEAD", path, &[])).unwrap();
        let r = c
            .read_response_to("HEAD")
            .unwrap_or_else(|e| panic!("HEAD {path}: {e}"));
        assert_eq!(r.status, 200, "HEAD {path}");
        assert!(r.header("x-kind").is_some(), "HEAD {path}: {:?}", r.headers);
        assert_eq!(
            r.header("content-length"),
            None,
            "HEAD {path}: a length the upstream did not give"
        );
        // Kept alive: the next request on the connection is answered.
        c.send(&request("GET", "/next", &[])).unwrap();
        let next = c
            .read_response()
            .unwrap_or_else(|e| panic!("GET /next after HEAD {path}: {e}"));
        assert_eq!(
            (next.status, next.body.as_slice()),
            (200, &b"next\n"[..]),
            "after HEAD {path}"
        );
    }
}

fn hop_by_hop_fields_never_reach_the_origin_and_x_forwarded_for_does(mpm: &str) {
    let origin = Origin::start();
    origin.on("/echo", Script::ok(b"seen\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let r = ask(
        server.addr(),
        "GET",
        "/echo?x=1",
        &[
            "Connection: close, X-Secret",
            "X-Secret: for the proxy only",
            "Keep-Alive: timeout=5",
            "TE: trailers",
            "Proxy-Authorization: Basic cHJveHk6c2VjcmV0",
            "X-Forwarded-For: 203.0.113.9",
            "X-Kept: end to end",
        ],
    );
    assert_eq!((r.status, r.body.as_slice()), (200, b"seen\n".as_slice()));
    let seen = origin.requests_to("/echo");
    assert_eq!(seen.len(), 1);
    let seen = &seen[0];
    assert_eq!(seen.target, "/echo?x=1");
    for hop in ["X-Secret", "Keep-Alive", "TE", "Proxy-Authorization"] {
        assert!(
            !seen.has(hop),
            "{hop} reached the origin: {:?}",
            seen.headers
        );
    }
    assert!(
        seen.header("connection")
            .is_none_or(|v| !v.to_ascii_lowercase().contains("x-secret")),
        "{:?}",
        seen.headers
    );
    assert_eq!(seen.header("x-kept"), Some("end to end"));
    // The client's address, alone: a client's own claim is not kept from
    // a peer that is no trusted proxy.
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    let proto = if server.is_tls() { "https" } else { "http" };
    assert_eq!(seen.header("x-forwarded-proto"), Some(proto));
}

fn a_request_the_server_would_refuse_for_itself_never_reaches_the_origin(mpm: &str) {
    let origin = Origin::start();
    origin.on("/s", Script::ok(b"forwarded\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let smuggling: &[&[u8]] = &[
        b"POST /s HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /s HTTP/1.1\r\nHost: t\r\n\r\n",
        b"POST /s HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST /s HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"GET /s HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n",
        b"GET /s HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n",
    ];
    for (i, bytes) in smuggling.iter().enumerate() {
        let mut c = server.connect();
        c.send(bytes).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(
            r.status,
            400,
            "case {i}: {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    assert!(
        origin.requests().is_empty(),
        "refused requests reached the origin: {:?}",
        origin.requests()
    );
    // A clean one does.
    assert_eq!(ask(server.addr(), "GET", "/s", &[]).body, b"forwarded\n");
}

fn paths_nginx_refuses_and_fields_it_drops_never_reach_the_origin(mpm: &str) {
    let origin = Origin::start();
    origin.on("/plain", Script::ok(b"forwarded\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    for target in [
        "ws://internal.example/x",
        "/../etc/passwd",
        "/%2e%2e/etc/passwd",
        "/a%00b",
        "/a%zz",
        "/x/..%2Fadmin",
    ] {
        let mut c = server.connect();
        c.send(&request("GET", target, &[])).unwrap();
        assert_eq!(c.read_response().unwrap().status, 400, "{target}");
    }
    assert!(
        origin.requests().is_empty(),
        "refused requests reached the origin: {:?}",
        origin.requests()
    );
    // Names with `_` (read as `X-Forwarded-For` by CGI-style upstreams)
    // are dropped, as nginx drops them; an upgrade to h2c alone is passed
    // as a plain request, never tunnelled.
    let r = ask(
        server.addr(),
        "GET",
        "/plain",
        &[
            "X_Forwarded_For: 6.6.6.6",
            "Connection: Upgrade, HTTP2-Settings",
            "Upgrade: h2c",
            "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
            "X-Kept: 1",
        ],
    );
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"forwarded\n".as_slice())
    );
    let seen = &origin.requests_to("/plain")[0];
    for dropped in ["X_Forwarded_For", "Upgrade", "HTTP2-Settings"] {
        assert!(
            !seen.has(dropped),
            "{dropped} reached the origin: {:?}",
            seen.headers
        );
    }
    assert_eq!(seen.header("x-kept"), Some("1"));
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
}

/// Without a `/` route, the proxy refuses (400) only what one of its routes
/// would take; a target no route takes once normalised (another scheme's
/// absolute form, dots above the root) is the site's, which refuses it
/// too: nothing reaches the origin either way (docs/proxy.md).
fn without_a_root_route_targets_no_route_takes_are_the_sites_and_never_reach_the_origin(mpm: &str) {
    let origin = Origin::start();
    origin.on("/v1/x", Script::ok(b"forwarded\n"));
    let route = format!("/api/={}", origin.url("/v1/"));
    let server = serve(mpm, &["--proxy", route.as_str()]);
    for (target, status) in [
        // The proxy's own refusals, under its route.
        ("/api/a%00b", 400),
        ("/api/a%zz", 400),
        ("/api/..%2Fadmin", 400),
        // No route's: the static site answers.
        ("ws://internal.example/api/x", 400),
        ("/api/../../etc/passwd", 403),
        ("/%2e%2e/api/x", 400),
    ] {
        let mut c = server.connect();
        c.send(&request("GET", target, &[])).unwrap();
        assert_eq!(c.read_response().unwrap().status, status, "{target}");
    }
    assert!(
        origin.requests().is_empty(),
        "refused requests reached the origin: {:?}",
        origin.requests()
    );
    // The route itself still forwards, and its prefix without the slash is
    // redirected to it, query kept (README.md, "What mpm does not do").
    let r = ask(server.addr(), "GET", "/api/x", &[]);
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"forwarded\n".as_slice())
    );
    let r = ask(server.addr(), "GET", "/api?q=1", &[]);
    assert_eq!((r.status, r.header("location")), (301, Some("/api/?q=1")));
}

// ---------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------

fn an_origin_down_is_502_its_timeout_504_and_the_server_serves_on(mpm: &str) {
    let origin = Origin::start();
    origin
        .on(
            "/slow/*",
            Script::ok(b"late\n").delay(Duration::from_secs(3)),
        )
        .on("/fine/*", Script::ok(b"fine\n"));
    let dead = dead_port();
    let toml = format!(
        "[[proxy]]\nprefix = \"/down/\"\nupstreams = [\"http://{dead}\"]\n\n\
         [[proxy]]\nprefix = \"/slow/\"\nupstreams = [\"{o}\"]\nread_timeout = \"300ms\"\n\n\
         [[proxy]]\nprefix = \"/fine/\"\nupstreams = [\"{o}\"]\n",
        o = origin.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let mut c = server.connect();
    c.send(&request("GET", "/down/x", &[])).unwrap();
    assert_eq!(c.read_response().unwrap().status, 502, "the origin down");
    c.send(&request("GET", "/fine/x", &[])).unwrap();
    assert_eq!(c.read_response().unwrap().body, b"fine\n", "after the 502");
    c.send(&request("GET", "/slow/x", &[])).unwrap();
    assert_eq!(
        c.read_response().unwrap().status,
        504,
        "the origin's timeout"
    );
    c.send(&request("GET", "/fine/x", &[])).unwrap();
    assert_eq!(c.read_response().unwrap().body, b"fine\n", "after the 504");
    c.send(&request("GET", "/hello.txt", &[])).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.body, site::HELLO_TXT.as_bytes(), "the site");
    // And on a new connection.
    assert_eq!(server.get("/fine/y").body, b"fine\n");
}

/// nginx's `proxy_read_timeout` bounds the wait for each read, not the
/// whole answer: interim `103` answers, each within `read_timeout` of the
/// one before but together far past it, keep the request waiting for its
/// final answer, which the client gets.
fn interim_answers_each_within_the_read_timeout_keep_the_request_waiting(mpm: &str) {
    let origin = Origin::start();
    let hint = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n".to_vec();
    let mut steps = Vec::new();
    for _ in 0..5 {
        steps.push(Step::Send(hint.clone()));
        steps.push(Step::Pause(Duration::from_millis(300)));
    }
    steps.push(Step::Send(
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfinal\n".to_vec(),
    ));
    origin.on("/hinted", Script::raw_steps(steps));
    // 1.5 s of interim answers, longer than the read timeout; each gap
    // under a third of it, so that a busy machine's late answer (650 ms
    // once, for a first one) is not taken for a timeout.
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"{o}\"]\nread_timeout = \"1s\"\n",
        o = origin.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let started = Instant::now();
    let r = ask(server.addr(), "GET", "/hinted", &[]);
    assert_eq!(
        (r.status, String::from_utf8_lossy(&r.body).as_ref()),
        (200, "final\n"),
        "after {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

/// nginx: "If there is only a single server in a group, max_fails,
/// fail_timeout and slow_start parameters are ignored, and such a server
/// will never be considered unavailable." A route's only upstream that
/// timed out once is tried again at the next request, not refused as "no
/// live upstream" for fail_timeout.
fn a_routes_only_upstream_is_never_taken_out_by_its_failures(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/slow", Script::ok(b"late\n").delay(Duration::from_secs(2)))
        .on("/fast", Script::ok(b"fast\n"));
    // 800 ms of read timeout: the fast answer must come within it while
    // the whole suite loads the machine (300 ms was once not enough).
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"{o}\"]\nread_timeout = \"800ms\"\n",
        o = origin.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let mut c = server.connect();
    for round in 0..2 {
        c.send(&request("GET", "/slow", &[])).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(r.status, 504, "round {round}: the timeout");
        c.send(&request("GET", "/fast", &[])).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(
            (r.status, r.text()),
            (200, "fast\n".to_string()),
            "round {round}: the only upstream was taken out after its timeout"
        );
    }
    assert_eq!(origin.requests_to("/slow").len(), 2);
}

fn passive_health_skips_a_dead_upstream_and_an_active_check_brings_it_back(mpm: &str) {
    let live = Origin::start();
    live.on("/p", Script::ok(b"live\n"))
        .on("/health", Script::ok(b"ok\n"));
    let dead = dead_port();
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"http://{dead}\", \"{live}\"]\n\
         health_interval = \"200ms\"\nhealth_path = \"/health\"\nhealth_rise = 1\n",
        live = live.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    // Every request is answered by the live one: the first that tried the
    // dead one went on to the next, the rest skip it.
    for i in 0..10 {
        assert_eq!(server.get("/p").body, b"live\n", "request {i}");
    }
    assert_eq!(live.requests_to("/p").len(), 10);
    // The dead one comes to life: an active check sees it, and requests
    // reach it again.
    let revived = Origin::revive(dead).unwrap_or_else(|e| {
        panic!("listening on the dead port: {e}");
    });
    revived
        .on("/p", Script::ok(b"revived\n"))
        .on("/health", Script::ok(b"ok\n"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while revived.requests_to("/p").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no request reached the revived upstream; it saw {:?}",
            revived
                .requests()
                .iter()
                .map(|s| s.target.clone())
                .collect::<Vec<_>>()
        );
        let r = server.get("/p");
        assert_eq!(r.status, 200);
        thread::sleep(Duration::from_millis(20));
    }
    // It was brought back by a check, not by a client's request.
    let seen: Vec<String> = revived
        .requests()
        .iter()
        .map(|s| s.target.clone())
        .collect();
    assert_eq!(seen[0], "/health", "the revived upstream saw {seen:?}");
}

fn passive_health_sends_nothing_more_to_an_upstream_after_its_failure(mpm: &str) {
    // An upstream that takes each connection and closes it without a byte:
    // unlike a port nothing listens on, it counts what it is sent.
    let failing = Origin::start();
    failing.on("/*", Script::hang_up());
    let live = Origin::start();
    live.on("/p", Script::ok(b"live\n"));
    let server = serve(
        mpm,
        &[
            "--proxy",
            &format!("/={},{}", failing.url(""), live.url("")),
        ],
    );
    for i in 0..10 {
        assert_eq!(server.get("/p").body, b"live\n", "request {i}");
    }
    // max_fails = 1 (nginx's default): its first failure takes it out for
    // fail_timeout (10 s), however the requests are balanced.
    assert_eq!(
        failing.requests_to("/p").len(),
        1,
        "the failing upstream was sent requests after its failure"
    );
    assert_eq!(live.requests_to("/p").len(), 10);
}

fn a_get_is_retried_on_the_next_upstream_after_a_connect_error_and_a_post_is_not(mpm: &str) {
    let live = Origin::start();
    live.on("/r", Script::ok(b"live\n"));
    let dead = dead_port();
    // max_fails = 0: the dead one is never taken out, so that it keeps its
    // turn in the round.
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [{{ url = \"http://{dead}\", max_fails = 0 }}, \
         \"{live}\"]\n",
        live = live.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &one_worker(mpm));
    let mut c = server.connect();
    for i in 0..4 {
        c.send(&request("GET", "/r", &[])).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"live\n".as_slice()),
            "GET {i}"
        );
    }
    assert_eq!(live.requests_to("/r").len(), 4);
    let mut refused = 0;
    for i in 0..4 {
        c.send(&request("POST", "/r", &["Content-Length: 4"]))
            .unwrap();
        c.send(b"data").unwrap();
        let r = c.read_response().unwrap();
        match r.status {
            200 => {}
            502 => refused += 1,
            other => panic!("POST {i}: {other}"),
        }
        if r.header("connection") == Some("close") {
            c = server.connect();
        }
    }
    let posts = live
        .requests_to("/r")
        .iter()
        .filter(|s| s.method == "POST")
        .count();
    assert!(
        refused > 0,
        "no POST was sent to the dead upstream first (round-robin over two)"
    );
    assert_eq!(posts + refused, 4, "a POST that failed was sent on");
}

/// `least-conn` counts a request in flight until its body ends, as
/// nginx's `least_conn` does, not only until the upstream's head came: while
/// one upstream streams a long answer, the next requests go to the other.
/// Under event, one process and one thread (one balancer), the long answer
/// parked on the loop.
#[test]
fn under_event_least_conn_counts_a_streamed_answer_in_flight_until_it_ends() {
    let (a, b) = (Origin::start(), Origin::start());
    for (o, name) in [(&a, "a"), (&b, "b")] {
        o.on(
            "/long",
            Script::new(200).chunked().steps(vec![
                Step::Send(format!("{name} first\n").into_bytes()),
                Step::Hold,
                Step::Send(b"rest\n".to_vec()),
            ]),
        )
        .on("/short", Script::ok(format!("{name}\n").as_bytes()));
    }
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"{a}\", \"{b}\"]\nbalance = \"least-conn\"\n",
        a = a.url(""),
        b = b.url("")
    );
    let (server, _dir) = serve_with_file("event", &toml, &one_worker("event"));
    let mut long = RawConn::connect(server.addr());
    long.send(&request("GET", "/long", &[])).unwrap();
    assert_eq!(long.read_head().unwrap().status, 200);
    let mut got = Vec::new();
    while !contains(&got, b" first\n") {
        let more = long.read_some(1024).unwrap();
        assert!(!more.is_empty(), "closed before the first part");
        got.extend(more);
    }
    let busy = if contains(&got, b"a first") { "a" } else { "b" };
    for i in 0..4 {
        let r = ask(server.addr(), "GET", "/short", &[]);
        assert_eq!(r.status, 200, "request {i}");
        assert_ne!(
            r.text().trim(),
            busy,
            "request {i} went to {busy}, which is still streaming an answer"
        );
    }
    a.release();
    b.release();
    while !contains(&got, b"rest\n") {
        let more = long.read_some(1024).unwrap();
        assert!(!more.is_empty(), "closed before the end");
        got.extend(more);
    }
}

// ---------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------

fn the_first_server_sent_event_reaches_the_client_before_the_origin_finishes(mpm: &str) {
    let origin = Origin::start();
    origin.on(
        "/events",
        Script::new(200)
            .header("Content-Type", "text/event-stream")
            .header("Cache-Control", "no-cache")
            .steps(vec![
                Step::Send(b"data: one\n\n".to_vec()),
                // The rest only once the client has the first.
                Step::Hold,
                Step::Send(b"data: two\n\n".to_vec()),
                Step::Pause(Duration::from_millis(100)),
                Step::Send(b"data: three\n\n".to_vec()),
            ]),
    );
    let server = serve_all_to(mpm, &origin, &[]);
    let mut c = server.connect();
    c.send(&request("GET", "/events", &["Accept: text/event-stream"]))
        .unwrap();
    let head = c.read_head().unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("text/event-stream"));
    // Read (and de-chunk, if the proxy chunks) until the first event,
    // while the origin holds the rest.
    let mut got = Vec::new();
    while !contains(&got, b"data: one\n\n") {
        let more = c.read_some(64 * 1024).unwrap_or_else(|e| {
            panic!(
                "the first event did not come while the origin held the rest: {e}; got {:?}",
                String::from_utf8_lossy(&got)
            )
        });
        assert!(!more.is_empty(), "closed before the first event");
        got.extend(more);
    }
    assert!(
        origin.wait_until(Duration::from_secs(5), |o| o.holding() == 1),
        "the origin is not holding the rest"
    );
    assert!(
        !contains(&got, b"data: two"),
        "an event came before it was sent"
    );
    origin.release();
    while !contains(&got, b"data: three\n\n") {
        let more = c.read_some(64 * 1024).unwrap();
        assert!(!more.is_empty(), "closed before the last event");
        got.extend(more);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// How many bytes the big transfers move: `MPM_PROXY_BIG_MIB` MiB, by
/// default 256 MiB each way. The issue's gibibyte (`MPM_PROXY_BIG_MIB=1024`)
/// passes too, but in a debug build on 2 cores its six runs (every model,
/// both transports) took 73 s together, more than this file's share of the
/// CI budget; 256 MiB is still 4,000 times the socket buffers, so a proxy
/// that held the body would show it in its RSS. Past 2047 MiB
/// (`MPM_PROXY_BIG_MIB=2100`), the upload runs with `--limit-request-body
/// 0`, no limit: the largest that may be set is 2 GiB.
fn big_len() -> u64 {
    std::env::var("MPM_PROXY_BIG_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(256)
        << 20
}

/// How much more memory the server's processes may hold while a big
/// transfer goes through them than before: a few buffers, never the body.
const RSS_GROWTH_KIB: u64 = 64 * 1024;

/// The resident memory of the server's processes (the master and its
/// children), in KiB.
fn tree_rss_kib(pid: u32) -> u64 {
    std::iter::once(pid)
        .chain(tests::children(pid))
        .map(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

const BLOCK: usize = 64 * 1024;

fn a_big_download_and_upload_go_through_the_proxy_in_bounded_memory(mpm: &str) {
    let len = big_len();
    let block = Arc::new(pattern(BLOCK, 21));
    let origin = Origin::start();
    origin
        .on(
            "/big",
            Script::new(200)
                .header("Content-Type", "application/octet-stream")
                .repeat(Arc::clone(&block), len),
        )
        .on("/upload", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let limit = len.to_string();
    // Past the largest limit that may be set (2 GiB), none: 0.
    let body_limit = if len > i32::MAX as u64 { "0" } else { &limit };
    // One serving process: a tree that grows is then one that holds
    // bodies, not one that started more processes.
    let server = serve_all_to(
        mpm,
        &origin,
        &["--limit-request-body", body_limit, "--server-limit", "1"],
    );
    // Idle, after one proxied request has made the pools and buffers.
    assert_eq!(ask(server.addr(), "GET", "/small", &[]).body, b"small\n");
    let idle = tree_rss_kib(server.pid());
    let mut peak = idle;

    // Down.
    let mut c = server.connect();
    c.send(&request("GET", "/big", &[])).unwrap();
    let head = c.read_head().unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some(limit.as_str()));
    let mut at: u64 = 0;
    let mut next_sample = 0;
    while at < len {
        let chunk = c.read_some(1 << 20).unwrap();
        assert!(!chunk.is_empty(), "the download closed after {at} bytes");
        let offset = (at % BLOCK as u64) as usize;
        let mut i = 0;
        while i < chunk.len() {
            let o = (offset + i) % BLOCK;
            let n = (BLOCK - o).min(chunk.len() - i);
            assert!(
                chunk[i..i + n] == block[o..o + n],
                "the download's bytes differ at {}",
                at + i as u64
            );
            i += n;
        }
        at += chunk.len() as u64;
        if at >= next_sample {
            peak = peak.max(tree_rss_kib(server.pid()));
            next_sample += 16 << 20;
        }
    }
    assert!(
        peak <= idle + RSS_GROWTH_KIB,
        "the server grew from {idle} KiB to {peak} KiB during a {} MiB download",
        len >> 20
    );

    // Up, on the same connection.
    c.send(&request(
        "POST",
        "/upload",
        &[
            &format!("Content-Length: {len}"),
            "Content-Type: application/octet-stream",
        ],
    ))
    .unwrap();
    let mut sent: u64 = 0;
    let mut next_sample = 0;
    while sent < len {
        let n = (len - sent).min(BLOCK as u64) as usize;
        c.send(&block[..n]).unwrap();
        sent += n as u64;
        if sent >= next_sample {
            peak = peak.max(tree_rss_kib(server.pid()));
            next_sample += 16 << 20;
        }
    }
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"stored\n".as_slice()));
    let up = origin.requests_to("/upload");
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].body_len, len, "the origin received another length");
    assert!(
        up[0].body[..BLOCK] == block[..],
        "the upload's first bytes differ"
    );
    assert!(
        peak <= idle + RSS_GROWTH_KIB,
        "the server grew from {idle} KiB to {peak} KiB during a {} MiB upload",
        len >> 20
    );
}

/// `body` framed chunked, in chunks of the sizes `sizes` cycles through,
/// then the last chunk: one buffer, to go in one write.
fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / 64 + 16);
    let (mut at, mut i) = (0, 0);
    while at < body.len() {
        let n = sizes[i % sizes.len()].min(body.len() - at);
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend_from_slice(&body[at..at + n]);
        out.extend_from_slice(b"\r\n");
        (at, i) = (at + n, i + 1);
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Well under `--request-body-timeout` (20 s): an upload whose end the
/// server missed is answered 408 only after that.
const PROMPTLY: Duration = Duration::from_secs(5);

/// Send a chunked `POST /up` with this `framed` body in one write (head,
/// chunks and the last chunk together, and `after` behind them) and read
/// the answer.
fn upload_in_one_write(c: &mut RawConn, framed: &[u8], after: &[u8]) -> Reply {
    let mut bytes = request("POST", "/up", &["Transfer-Encoding: chunked"]);
    bytes.extend_from_slice(framed);
    bytes.extend_from_slice(after);
    let began = Instant::now();
    c.send(&bytes).unwrap();
    let r = c.read_response().unwrap_or_else(|e| {
        panic!(
            "no answer after {:?} ({e}): the body's end was missed",
            began.elapsed()
        )
    });
    assert!(
        began.elapsed() < PROMPTLY,
        "answered {} after {:?}: the body's end was missed",
        r.status,
        began.elapsed()
    );
    r
}

#[track_caller]
fn assert_uploaded(origin: &Origin, n: usize, body: &[u8]) {
    let up = origin.requests_to("/up");
    assert_eq!(up.len(), n, "requests that reached the origin whole");
    let seen = &up[n - 1];
    assert_eq!(seen.header("transfer-encoding"), Some("chunked"));
    assert_eq!(seen.body_len, body.len() as u64, "the origin's body length");
    assert!(seen.body == body, "the origin received other bytes");
}

/// The last data chunk and the last chunk (`0\r\n\r\n`) read together:
/// the streamed upload ends there, its end reaches the upstream, and the
/// client is answered at once (not a 408 after the body timeout); the
/// connection then serves its next request.
fn a_chunked_upload_whose_last_chunk_comes_with_its_data_reaches_the_upstream_whole(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/up", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let mut c = server.connect();
    let cases: &[(&[u8], &[u8])] = &[
        (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
        (b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n", b"hello, world"),
        // A trailer field after the last chunk (read, and not passed on).
        (b"5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n", b"hello"),
    ];
    for (i, &(framed, body)) in cases.iter().enumerate() {
        let r = upload_in_one_write(&mut c, framed, b"");
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"stored\n".as_slice()),
            "{:?}",
            String::from_utf8_lossy(framed)
        );
        assert_uploaded(&origin, i + 1, body);
    }
    c.send(&request("GET", "/small", &[])).unwrap();
    assert_eq!(c.read_response().unwrap().body, b"small\n");
}

/// A few hundred KiB chunked, all in one write with its head: the read
/// that brings the last chunk brings data with it, and the upload ends.
fn a_large_chunked_upload_sent_in_one_write_reaches_the_upstream_whole(mpm: &str) {
    let origin = Origin::start();
    origin.on("/up", Script::ok(b"stored\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let body = pattern(300 * 1024 + 77, 41);
    for (i, sizes) in [&[8192][..], &[1000, 16 * 1024 + 3, 333]]
        .iter()
        .enumerate()
    {
        let mut c = server.connect();
        let r = upload_in_one_write(&mut c, &chunked(&body, sizes), b"");
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"stored\n".as_slice()),
            "chunks of {sizes:?}"
        );
        assert_uploaded(&origin, i + 1, &body);
    }
}

/// Past `--limit-request-body`, a chunked upload (whose length only its
/// bytes tell) is refused by the server itself with 413, whatever the
/// upstream made of the part it got, and the server serves on.
fn a_proxied_chunked_upload_past_the_body_limit_is_413_and_the_server_serves_on(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/up", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let server = serve_all_to(mpm, &origin, &["--limit-request-body", "100000"]);
    let mut c = server.connect();
    let r = upload_in_one_write(&mut c, &chunked(&pattern(150_000, 3), &[8192]), b"");
    assert_eq!(r.status, 413);
    assert!(
        origin
            .requests_to("/up")
            .iter()
            .all(|u| u.body_len < 150_000),
        "the origin received the whole body past the limit"
    );
    assert_eq!(ask(server.addr(), "GET", "/small", &[]).body, b"small\n");
}

/// `--limit-request-body 0` is no limit, as nginx's `client_max_body_size
/// 0`, on what the proxy streams: uploads of 2 MiB, past the default
/// 1 MiB, by their length and chunked, reach the upstream whole. A body
/// the site reads whole into memory is still held to 1 MiB: 413, before
/// any of it is sent.
fn with_limit_request_body_0_an_upload_past_the_default_limit_reaches_the_upstream(mpm: &str) {
    let origin = Origin::start();
    origin.on("/up", Script::ok(b"stored\n"));
    let route = format!("/api/={}", origin.url("/"));
    let server = serve(
        mpm,
        &["--proxy", route.as_str(), "--limit-request-body", "0"],
    );
    let body = pattern((2 << 20) + 17, 5);
    let mut c = server.connect();
    let length = format!("Content-Length: {}", body.len());
    let mut bytes = request("POST", "/api/up", &[&length]);
    bytes.extend_from_slice(&body);
    c.send(&bytes).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"stored\n".as_slice()));
    let mut bytes = request("POST", "/api/up", &["Transfer-Encoding: chunked"]);
    bytes.extend_from_slice(&chunked(&body, &[64 * 1024 + 5]));
    c.send(&bytes).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"stored\n".as_slice()));
    let up = origin.requests_to("/up");
    assert_eq!(up.len(), 2, "requests that reached the origin");
    for seen in &up {
        assert!(seen.body_ended, "the upload's end did not reach the origin");
        assert_eq!(seen.body_len, body.len() as u64, "the origin's body length");
        // The origin keeps the first MiB.
        assert!(
            body.starts_with(&seen.body),
            "the origin received other bytes"
        );
    }

    // The site reads a body whole: its in-memory bound holds.
    let over = format!("Content-Length: {}", (1 << 20) + 1);
    let mut c = server.connect();
    c.send(&request("POST", "/index.html", &[&over])).unwrap();
    assert_eq!(c.read_response().unwrap().status, 413);
}

/// A chunked upload whose framing breaks after a good first chunk (a size
/// line that is not hex, a chunk longer than it said) is answered 400 by
/// the server, whatever reached the origin, and the server serves on.
fn a_proxied_upload_with_a_broken_chunk_is_400_and_the_server_serves_on(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/up", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    for broken in [
        &b"5\r\nhello\r\nzz\r\nxx\r\n0\r\n\r\n"[..],
        b"5\r\nhello\r\n3\r\ntoo long\r\n0\r\n\r\n",
    ] {
        let mut c = server.connect();
        let r = upload_in_one_write(&mut c, broken, b"");
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(broken));
        assert_eq!(ask(server.addr(), "GET", "/small", &[]).body, b"small\n");
    }
    // The part before the break may have gone up; its end never did, so
    // the origin cannot take a cut upload for a whole one.
    assert!(
        origin.requests_to("/up").iter().all(|u| !u.body_ended),
        "a broken upload reached the origin with an end"
    );
}

/// An upload that stops coming mid-body is answered 408 once the body
/// timeout has passed (the upstream's own timeouts are a minute), and the
/// server serves on.
fn a_proxied_upload_that_stops_coming_is_408_at_the_body_timeout(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/up", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let server = serve_all_to(
        mpm,
        &origin,
        &[
            "--request-body-timeout",
            "1s",
            "--request-body-min-rate",
            "0",
        ],
    );
    let mut c = server.connect();
    c.send(&request("POST", "/up", &["Content-Length: 200000"]))
        .unwrap();
    c.send(&pattern(100_000, 5)).unwrap();
    let began = Instant::now();
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 408);
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "answered after {:?}",
        began.elapsed()
    );
    assert_eq!(ask(server.addr(), "GET", "/small", &[]).body, b"small\n");
}

/// `Expect: 100-continue` on a proxied upload is answered before the body
/// is sent (the client waits for it), and the body then reaches the
/// origin whole.
fn a_proxied_upload_expecting_100_continue_hears_it_before_its_body(mpm: &str) {
    let origin = Origin::start();
    origin.on("/up", Script::ok(b"stored\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let body = pattern(100_000, 9);
    let mut c = server.connect();
    c.send(&request(
        "POST",
        "/up",
        &["Content-Length: 100000", "Expect: 100-continue"],
    ))
    .unwrap();
    let interim = c.read_head().unwrap();
    assert_eq!(interim.status, 100);
    c.send(&body).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, b"stored\n".as_slice()));
    let up = origin.requests_to("/up");
    assert_eq!(up.len(), 1);
    assert!(up[0].body == body, "the origin received other bytes");
}

/// A client that closes mid-upload loses its request and nothing else:
/// the next client is served.
fn a_client_gone_mid_upload_disturbs_nothing_else(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/up", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    for framing in ["Content-Length: 300000", "Transfer-Encoding: chunked"] {
        let mut c = server.connect();
        c.send(&request("POST", "/up", &[framing])).unwrap();
        let part = if framing.starts_with("Content") {
            pattern(100_000, 1)
        } else {
            chunked(&pattern(100_000, 1), &[4096])[..90_000].to_vec()
        };
        c.send(&part).unwrap();
        drop(c);
        assert_eq!(
            ask(server.addr(), "GET", "/small", &[]).body,
            b"small\n",
            "{framing}"
        );
    }
}

/// A request pipelined behind a chunked upload, in the same write, is
/// served after it, on the same connection.
fn a_request_pipelined_behind_a_chunked_upload_is_served_after_it(mpm: &str) {
    let origin = Origin::start();
    origin
        .on("/up", Script::ok(b"stored\n"))
        .on("/small", Script::ok(b"small\n"));
    let server = serve_all_to(mpm, &origin, &[]);
    let body = pattern(40 * 1024, 43);
    for (i, body) in [&b"hello"[..], &body].iter().enumerate() {
        let mut c = server.connect();
        let next = request("GET", "/small", &[]);
        let r = upload_in_one_write(&mut c, &chunked(body, &[4096]), &next);
        assert_eq!((r.status, r.body.as_slice()), (200, b"stored\n".as_slice()));
        assert_uploaded(&origin, i + 1, body);
        let r = c.read_response().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, b"small\n".as_slice()));
    }
}

/// A WebSocket handshake's fields (RFC 6455's sample key).
const WEBSOCKET_UPGRADE: [&str; 4] = [
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version: 13",
];

fn a_websocket_echo_goes_through_the_proxy(mpm: &str) {
    let origin = Origin::start();
    origin.on("/ws", Script::websocket_echo());
    let server = serve_all_to(mpm, &origin, &[]);
    let mut c = server.connect();
    c.send(&request("GET", "/ws", &WEBSOCKET_UPGRADE)).unwrap();
    let head = c.read_head().unwrap();
    assert_eq!(head.status, 101);
    assert!(head
        .header("upgrade")
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket")));
    let seen = &origin.requests_to("/ws")[0];
    assert!(seen
        .header("upgrade")
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket")));
    assert_eq!(
        seen.header("sec-websocket-key"),
        Some("dGhlIHNhbXBsZSBub25jZQ==")
    );
    // Frames either way: bytes in, the same bytes back, several times.
    for round in 0..3u64 {
        let frame = pattern(1000 + round as usize * 3000, 30 + round);
        echoed(&mut c, &frame, &format!("round {round}"));
    }
}

/// A tunnel with nothing moving either way is closed after the route's
/// `read_timeout` (docs/proxy.md: "closed after `read_timeout` idle").
fn an_idle_websocket_tunnel_is_closed_after_the_routes_read_timeout(mpm: &str) {
    let origin = Origin::start();
    origin.on("/ws", Script::websocket_echo());
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"{}\"]\nread_timeout = \"1s\"\n",
        origin.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let mut c = server.connect();
    c.send(&request("GET", "/ws", &WEBSOCKET_UPGRADE)).unwrap();
    assert_eq!(c.read_head().unwrap().status, 101);
    let frame = pattern(100, 7);
    echoed(&mut c, &frame, "before the idle time");
    let idle_from = Instant::now();
    // Then nothing either way: the proxy closes the client's side.
    let got = c.read_some(64);
    let waited = idle_from.elapsed();
    // A close (a TLS client may see it as a reset), not the client's own
    // read timeout.
    assert!(
        match &got {
            Ok(b) => b.is_empty(),
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        },
        "the idle tunnel carried {got:?}"
    );
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "closed after {waited:?}, the read_timeout is 1s"
    );
}

/// A `101` passes only with an `Upgrade` naming protocols the client
/// offered (RFC 9110 §15.2.2, §7.8), else 502; and `h2c` is never asked
/// for, even beside `websocket` (h2c smuggling), which still tunnels.
fn a_101_switches_only_to_a_protocol_the_client_offered_and_never_to_h2c(mpm: &str) {
    let origin = Origin::start();
    origin
        .on(
            "/no-upgrade",
            Script::raw(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n"),
        )
        .on(
            "/to-h2c",
            Script::raw(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
            ),
        )
        .on("/ws", Script::websocket_echo());
    let server = serve_all_to(mpm, &origin, &[]);
    let upgrade = |path: &str, list: &str| {
        let mut c = server.connect();
        let up = format!("Upgrade: {list}");
        c.send(&request(
            "GET",
            path,
            &[
                up.as_str(),
                "Connection: Upgrade, HTTP2-Settings",
                "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version: 13",
            ],
        ))
        .unwrap();
        let head = c.read_head().unwrap();
        (c, head.status)
    };
    for (path, list) in [
        ("/no-upgrade", "websocket"),
        ("/to-h2c", "websocket"),
        ("/to-h2c", "websocket, h2c"),
        ("/to-h2c", "h2c, websocket"),
    ] {
        assert_eq!(upgrade(path, list).1, 502, "{path} with Upgrade: {list}");
    }
    for list in ["websocket, h2c", "h2c, websocket"] {
        let (mut c, status) = upgrade("/ws", list);
        assert_eq!(status, 101, "Upgrade: {list}");
        let frame = pattern(2000, 7);
        echoed(&mut c, &frame, &format!("Upgrade: {list}"));
    }
    let seen = origin.requests();
    assert_eq!(seen.len(), 6);
    for s in &seen {
        let upgrades: Vec<&str> = s
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(upgrades, ["websocket"], "{} {:?}", s.target, s.headers);
        assert!(!s.has("http2-settings"), "{:?}", s.headers);
    }
}

/// An upstream that ends a tunnel (a WebSocket's closing frame, then its
/// close) right after its last bytes, or right after its 101: those bytes
/// reach the client before its end, every time. Under event and uring the
/// client's half was shut ahead of the bytes held for the turn's end, and
/// they were lost (3 runs in 10 reached the client).
fn an_upstreams_last_bytes_before_its_close_reach_the_tunnels_client(mpm: &str) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            let _ = s.set_nodelay(true);
            thread::spawn(move || {
                let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
                while !contains(&buf, b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                             Connection: Upgrade\r\n\r\n";
                if buf.starts_with(b"GET /at-once ") {
                    // The 101, bytes and the close in one go.
                    let _ = s.write_all(&[&head[..], b"EARLY"].concat());
                    return;
                }
                let _ = s.write_all(head);
                // The client's ping, then the last words and the close.
                let _ = s.read(&mut chunk);
                let _ = s.write_all(b"FINAL");
            });
        }
    });
    let route = format!("/=http://{up}");
    let server = serve(mpm, &["--proxy", route.as_str()]);
    let upgrade = [
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ];
    let to_end = |c: &mut tests::RawConn| {
        let mut got = Vec::new();
        loop {
            let more = c.read_some(4096).unwrap_or_default();
            if more.is_empty() {
                return got;
            }
            got.extend(more);
        }
    };
    for round in 0..10 {
        let mut c = server.connect();
        c.send(&request("GET", "/later", &upgrade)).unwrap();
        assert_eq!(c.read_head().unwrap().status, 101, "round {round}");
        c.send(b"ping").unwrap();
        assert_eq!(to_end(&mut c), b"FINAL", "round {round}: the last bytes");

        let mut c = server.connect();
        c.send(&request("GET", "/at-once", &upgrade)).unwrap();
        assert_eq!(c.read_head().unwrap().status, 101, "round {round}");
        assert_eq!(
            to_end(&mut c),
            b"EARLY",
            "round {round}: bytes after the 101"
        );
    }
}

fn requests_on_one_client_connection_share_one_upstream_connection_unless_none_is_kept(mpm: &str) {
    let origin = Origin::start();
    origin.on("/k", Script::ok(b"k\n"));
    let server = serve_all_to(mpm, &origin, &["--server-limit", "1"]);
    let mut c = server.connect();
    for i in 0..20 {
        c.send(&request("GET", "/k", &[])).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(r.body, b"k\n", "request {i}");
    }
    assert_eq!(origin.requests_to("/k").len(), 20);
    assert_eq!(
        origin.accepted(),
        1,
        "20 requests on one client connection opened {} upstream connections",
        origin.accepted()
    );
    drop(server);
    // With no idle connections kept (--proxy-keepalive 0), each request
    // opens its own.
    let server = serve_all_to(
        mpm,
        &origin,
        &["--server-limit", "1", "--proxy-keepalive", "0"],
    );
    let mut c = server.connect();
    for i in 0..5 {
        c.send(&request("GET", "/k", &[])).unwrap();
        assert_eq!(c.read_response().unwrap().body, b"k\n", "request {i}");
    }
    assert_eq!(
        origin.accepted(),
        1 + 5,
        "--proxy-keepalive 0 kept a connection"
    );
}

/// An origin that closes each connection right after an answer that said
/// nothing of closing: the proxy keeps the connection, and the next GET,
/// taking it back at once (without the liveness check a request that can
/// go again skips), finds it closed and goes again on a new one. No client
/// sees the close.
fn a_get_on_a_kept_connection_the_origin_closed_goes_again_on_a_new_one(mpm: &str) {
    let origin = Origin::start();
    origin.on(
        "/gone",
        Script::raw(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"),
    );
    let server = serve_all_to(mpm, &origin, &["--server-limit", "1"]);
    let mut c = server.connect();
    for i in 0..10 {
        c.send(&request("GET", "/gone", &[])).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"ok\n"[..]),
            "request {i}"
        );
    }
    assert_eq!(origin.requests_to("/gone").len(), 10);
}

// ---------------------------------------------------------------------------
// A hostile upstream
// ---------------------------------------------------------------------------

/// What a client got from a request to a misbehaving upstream.
#[derive(Debug)]
enum Got {
    /// A whole answer with this status.
    Status(u16),
    /// A head with this status, then the connection cut in the body.
    Cut(u16),
    /// The connection cut before a head.
    Nothing,
}

fn try_ask(addr: std::net::SocketAddr, path: &str) -> Got {
    let mut c = RawConn::connect(addr);
    c.send(&request("GET", path, &[])).unwrap();
    let head = match c.read_head() {
        Ok(h) => h,
        Err(_) => return Got::Nothing,
    };
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let chunked = head.header("transfer-encoding").is_some();
    let mut got = 0;
    loop {
        if !chunked && got >= len {
            return Got::Status(head.status);
        }
        match c.read_some(64 * 1024) {
            Ok(b) if b.is_empty() => return Got::Cut(head.status),
            Ok(b) => {
                got += b.len();
                if chunked && b.ends_with(b"0\r\n\r\n") {
                    return Got::Status(head.status);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                panic!("{path}: neither answered nor cut within the client's timeout")
            }
            Err(_) => return Got::Cut(head.status),
        }
    }
}

/// An upstream that answers `GET /a` with `A1` and, a millisecond later
/// on the same connection, with an answer nobody asked for (`STRAY`), and
/// anything else with `B1`; `sent` is told when a stray answer has left.
fn start_stray_upstream(sent: std::sync::mpsc::Sender<()>) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            let sent = sent.clone();
            // The stray answer leaves at once, not held by Nagle until
            // the proxy's next request acknowledges the first (then it
            // would arrive after that request, as its answer would: what
            // no proxy can tell apart).
            let _ = s.set_nodelay(true);
            thread::spawn(move || {
                let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
                loop {
                    while !contains(&buf, b"\r\n\r\n") {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    let first = buf.starts_with(b"GET /a ");
                    buf.drain(..end);
                    if first {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nA1");
                        thread::sleep(Duration::from_millis(1));
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY");
                        let _ = sent.send(());
                    } else {
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nB1");
                    }
                }
            });
        }
    });
    addr
}

/// nginx's `proxy_redirect default`: a `Location` (and a `Refresh`) the
/// upstream builds from the URL it was sent becomes the route's (a URL
/// with a path gives the prefix, one without gives `/`); one naming
/// elsewhere passes as it came; `redirect = "off"` passes every one; a
/// route's own rule is tried before `default`.
fn an_upstreams_redirect_to_its_own_url_is_rewritten_to_the_routes_prefix(mpm: &str) {
    let origin = Origin::start();
    let refresh = format!("3; url={}", origin.url("/v1/later"));
    origin
        .on(
            "/v1/go",
            Script::new(302)
                .header("Location", &origin.url("/v1/login?next=%2Fhome"))
                .header("Refresh", &refresh),
        )
        .on(
            "/v1/away",
            Script::new(301).header("Location", "https://elsewhere.example/v1/x"),
        )
        .on(
            "/v1/admin",
            Script::new(303).header("Location", &origin.url("/v1/admin/panel")),
        )
        .on(
            "/plain/go",
            Script::new(201).header("Location", &origin.url("/plain/there")),
        );
    let toml = format!(
        "[[proxy]]\nprefix = \"/api/\"\nupstreams = [\"{v1}\"]\n\n\
         [[proxy]]\nprefix = \"/raw/\"\nupstreams = [\"{v1}\"]\nredirect = \"off\"\n\n\
         [[proxy]]\nprefix = \"/own/\"\nupstreams = [\"{v1}\"]\n\
         redirect = [{{ from = \"{admin}\", to = \"/console/\" }}, \"default\"]\n\n\
         [[proxy]]\nprefix = \"/plain\"\nupstreams = [\"{bare}\"]\n",
        v1 = origin.url("/v1/"),
        admin = origin.url("/v1/admin/"),
        bare = origin.url(""),
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let location = |path: &str| {
        let r = ask(server.addr(), "GET", path, &[]);
        (r.status, r.header("location").map(str::to_string))
    };
    let go = ask(server.addr(), "GET", "/api/go", &[]);
    assert_eq!(
        (go.status, go.header("location"), go.header("refresh")),
        (
            302,
            Some("/api/login?next=%2Fhome"),
            Some("3; url=/api/later")
        )
    );
    assert_eq!(
        location("/api/away"),
        (301, Some("https://elsewhere.example/v1/x".into())),
        "elsewhere: as it came"
    );
    assert_eq!(
        location("/raw/go"),
        (302, Some(origin.url("/v1/login?next=%2Fhome"))),
        "redirect = off"
    );
    assert_eq!(location("/own/admin"), (303, Some("/console/panel".into())));
    assert_eq!(
        location("/own/go"),
        (302, Some("/own/login?next=%2Fhome".into()))
    );
    assert_eq!(location("/plain/go"), (201, Some("/plain/there".into())));
}

/// nginx's `proxy_set_header` and `proxy_hide_header`: a route's fields
/// replace the client's of the same name on the way up (variables filled
/// in, an empty value removing the field), and its hidden fields never
/// reach the client on the way back.
fn a_routes_set_fields_replace_the_clients_and_its_hidden_fields_never_reach_the_client(mpm: &str) {
    let origin = Origin::start();
    origin.on(
        "/app",
        origin_fields(Script::ok(b"app\n"))
            .header("X-Powered-By", "PHP/5.0")
            .header("X-Kept", "yes"),
    );
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"{o}\"]\n\
         set_header = {{ \"X-Real-IP\" = \"$remote_addr\", \"X-Via\" = \"$scheme://$host\", \
         \"Accept-Encoding\" = \"\" }}\n\
         hide_header = [\"x-powered-by\"]\n",
        o = origin.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let r = ask(
        server.addr(),
        "GET",
        "/app",
        &["X-Real-IP: 6.6.6.6", "Accept-Encoding: gzip", "X-Other: 1"],
    );
    assert_eq!((r.status, r.body.as_slice()), (200, &b"app\n"[..]));
    assert_eq!(r.header("x-powered-by"), None, "hidden");
    assert_eq!(r.header("x-kept"), Some("yes"));
    let seen = origin.requests_to("/app");
    let got = &seen[0];
    let named = |n: &str| {
        got.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(named("x-real-ip"), ["127.0.0.1"], "the client's replaced");
    let scheme = if server.is_tls() { "https" } else { "http" };
    assert_eq!(named("x-via"), [format!("{scheme}://proxy.test").as_str()]);
    assert!(
        named("accept-encoding").is_empty(),
        "an empty value removes it"
    );
    assert_eq!(named("x-other"), ["1"], "the rest passes");
    let at = |n: &str| {
        got.headers
            .iter()
            .position(|(k, _)| k.eq_ignore_ascii_case(n))
    };
    assert!(
        at("x-real-ip") > at("x-other"),
        "after the client's: {:?}",
        got.headers
    );
}

/// nginx's `proxy_cookie_domain` and `proxy_cookie_path`: an upstream's
/// cookies set for its own name and paths reach the client set for the
/// proxy's, their other attributes and the other fields as they came; and
/// `proxy_cookie_flags`: the session cookie gets the flags its route names.
fn an_upstreams_cookies_are_set_for_the_proxys_domain_and_the_routes_paths(mpm: &str) {
    let origin = Origin::start();
    origin.on(
        "/v1/login",
        origin_fields(Script::ok(b"in\n"))
            .header(
                "Set-Cookie",
                "sid=42; Domain=.backend.internal; Path=/v1/; HttpOnly",
            )
            .header("Set-Cookie", "theme=dark; path=/v1/prefs; Max-Age=60")
            .header("Set-Cookie", "other=1; Domain=elsewhere.example; Path=/x/")
            .header("X-Path", "/v1/"),
    );
    let toml = format!(
        "[[proxy]]\nprefix = \"/api/\"\nupstreams = [\"{o}\"]\n\
         cookie_domain = [{{ from = \"backend.internal\", to = \"proxy.test\" }}]\n\
         cookie_path = [{{ from = \"/v1/\", to = \"/api/\" }}]\n\
         cookie_flags = [{{ cookie = \"sid\", flags = [\"secure\", \"samesite=lax\"] }}]\n",
        o = origin.url("/v1/")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let r = ask(server.addr(), "GET", "/api/login", &[]);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"in\n"[..]));
    let cookies: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        cookies,
        [
            "sid=42; Domain=.proxy.test; Path=/api/; HttpOnly; Secure; SameSite=Lax",
            "theme=dark; path=/api/prefs; Max-Age=60",
            "other=1; Domain=elsewhere.example; Path=/x/",
        ]
    );
    assert_eq!(
        r.header("x-path"),
        Some("/v1/"),
        "other fields as they came"
    );
}

/// nginx's `proxy_intercept_errors on` with `error_page`: an upstream's
/// answer whose status has an error page is replaced by the page (status
/// kept, a 401's `WWW-Authenticate` kept); a status without one, and a
/// route without the setting, pass the upstream's answer as it came.
fn an_intercepting_route_answers_an_upstreams_error_with_the_servers_page(mpm: &str) {
    let origin = Origin::start();
    for (path, status) in [("/down", 502), ("/gone", 404), ("/auth", 401)] {
        origin.on(
            path,
            Script::new(status)
                .header("Content-Type", "application/json")
                .header("X-Upstream", "yes")
                .header("Server", "origin/1.0")
                .header("WWW-Authenticate", "Basic realm=\"app\"")
                .body(b"{\"error\":\"upstream's own\"}"),
        );
    }
    // An answer streamed from the upstream (its body does not come with
    // its head): intercepted, its connection must not go back to the pool
    // with the rest of the body unread.
    origin.on("/big-down", Script::new(502).body(&vec![b'x'; 300_000]));
    let page = "<!DOCTYPE html><h1>We will be right back</h1>\n";
    let root = site::docroot();
    root.write("errors/upstream.html", page.as_bytes());
    let toml = format!(
        "[[proxy]]\nprefix = \"/app/\"\nupstreams = [\"{o}/\"]\nintercept_errors = \"on\"\n\
         [[proxy]]\nprefix = \"/raw/\"\nupstreams = [\"{o}/\"]\n",
        o = origin.url("").trim_end_matches('/')
    );
    let config = root.write("mpm.toml", toml.as_bytes());
    let server = Server::start(
        mpm,
        Some(root.path()),
        &[
            "--config",
            config.to_str().unwrap(),
            "--error-page",
            "401,502=/errors/upstream.html",
        ],
    );
    let r = ask(server.addr(), "GET", "/app/down", &[]);
    assert_eq!((r.status, r.text().as_str()), (502, page));
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert_eq!(
        r.header("x-upstream"),
        None,
        "nothing of the upstream's answer"
    );
    assert_eq!(r.header("www-authenticate"), None);
    assert!(
        r.header("server").is_some_and(|s| s != "origin/1.0"),
        "the server's own Server: {:?}",
        r.header("server")
    );
    let r = ask(server.addr(), "GET", "/app/auth", &[]);
    assert_eq!((r.status, r.text().as_str()), (401, page));
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"app\""),
        "a 401 keeps what the client needs to authenticate"
    );
    // No page for 404: the upstream's answer, as it came.
    let r = ask(server.addr(), "GET", "/app/gone", &[]);
    assert_eq!(r.status, 404);
    assert_eq!(r.text(), "{\"error\":\"upstream's own\"}");
    assert_eq!(r.header("x-upstream"), Some("yes"));
    // A route without the setting passes a 502 as it came.
    let r = ask(server.addr(), "GET", "/raw/down", &[]);
    assert_eq!((r.status, r.header("x-upstream")), (502, Some("yes")));
    assert_eq!(r.text(), "{\"error\":\"upstream's own\"}");
    // The intercepted upstream connections cost nothing later.
    for _ in 0..3 {
        let r = ask(server.addr(), "GET", "/app/big-down", &[]);
        assert_eq!((r.status, r.text().as_str()), (502, page));
        let r = ask(server.addr(), "GET", "/app/down", &[]);
        assert_eq!((r.status, r.text().as_str()), (502, page));
    }
}

/// nginx's `X-Accel-Redirect`: an upstream's answer naming a path is
/// replaced by the server's answer to a `GET` of that path, made with the
/// client's fields (its `Range` applies) and keeping the upstream's
/// `Content-Disposition` and `Set-Cookie`; an `--internal` path is 404 to
/// a client however it is written; a redirect to a proxied path goes to
/// that route's upstream; a cycle is 500 and a target that is no path 404;
/// a route with `accel_redirect = "off"` passes the upstream's answer
/// without the field; the connection goes on after each.
fn an_upstreams_x_accel_redirect_is_answered_with_the_path_it_names(mpm: &str) {
    let origin = Origin::start();
    let report = |s: Script| {
        s.header("X-Accel-Redirect", "/protected/report.bin")
            .header("Content-Disposition", "attachment; filename=\"report.bin\"")
            .header("Set-Cookie", "seen=1")
            .header("Content-Type", "text/plain")
    };
    origin.on(
        "/dl/report",
        report(Script::ok(b"the upstream's placeholder")),
    );
    // A body that does not come with the head: dropped unread.
    origin.on("/dl/big", report(Script::ok(&vec![b'u'; 300_000])));
    origin.on(
        "/dl/api",
        Script::ok(b"placeholder").header("X-Accel-Redirect", "/inner/data?x=1"),
    );
    origin.on("/inner/data", Script::ok(b"inner answer\n"));
    let redirects = |path: &str, to: &str| {
        origin.on(path, Script::ok(b"").header("X-Accel-Redirect", to));
    };
    redirects("/dl/loop", "/dl/loop");
    redirects("/dl/bad", "protected/report.bin");
    // As nginx reads the value: its escapes decoded, its other bytes
    // taken as they are; a `..` in it refused.
    redirects("/dl/spaced", "/protected/my report 100%.txt");
    redirects("/dl/escaped", "/protected/my%20report%20100%25.txt");
    redirects("/dl/climb", "/protected/../public.txt");
    let file: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let root = site::docroot();
    root.write("protected/report.bin", &file);
    root.write("protected/my report 100%.txt", b"spaced\n");
    root.write("public.txt", b"public\n");
    let o = origin.url("").trim_end_matches('/').to_string();
    let toml = format!(
        "internal = [\"/protected/\", \"/inner/\"]\n\
         [[proxy]]\nprefix = \"/dl/\"\nupstreams = [\"{o}/dl/\"]\n\
         [[proxy]]\nprefix = \"/inner/\"\nupstreams = [\"{o}/inner/\"]\n\
         [[proxy]]\nprefix = \"/raw/\"\nupstreams = [\"{o}/dl/\"]\naccel_redirect = \"off\"\n"
    );
    let config = root.write("mpm.toml", toml.as_bytes());
    let logs = TempDir::new("x-accel-log");
    let log = logs.path().join("access.log");
    let server = Server::start(
        mpm,
        Some(root.path()),
        &[
            "--config",
            config.to_str().unwrap(),
            "--access-log",
            log.to_str().unwrap(),
            "--log-format",
            "upstream",
        ],
    );
    let addr = server.addr();
    let mut c = RawConn::connect(addr);
    let mut on_one = |method: &str, path: &str, fields: &[&str]| {
        c.send(&request(method, path, fields)).unwrap();
        c.read_response_to(method)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    };
    for path in ["/dl/report", "/dl/big"] {
        let r = on_one("GET", path, &[]);
        assert_eq!(r.status, 200, "{path}");
        assert!(r.body == file, "{path}: the file, not the upstream's body");
        assert_eq!(
            r.header("content-disposition"),
            Some("attachment; filename=\"report.bin\"")
        );
        assert_eq!(r.header("set-cookie"), Some("seen=1"));
        assert_eq!(r.header("x-accel-redirect"), None);
    }
    let r = on_one("GET", "/dl/report", &["Range: bytes=10-19"]);
    assert_eq!(
        (r.status, &r.body[..]),
        (206, &file[10..20]),
        "the client's range applies"
    );
    let r = on_one("HEAD", "/dl/report", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("100000"));
    let r = on_one("GET", "/dl/api", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "inner answer\n"));
    assert_eq!(
        origin.requests_to("/inner/data")[0].target,
        "/inner/data?x=1"
    );
    let r = on_one("GET", "/raw/report", &[]);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "the upstream's placeholder"),
        "accel_redirect = off: the answer as it came"
    );
    assert_eq!(r.header("x-accel-redirect"), None);
    for path in [
        "/protected/report.bin",
        "/%70rotected/report.bin",
        "/x/../protected/report.bin",
        "/inner/data",
    ] {
        assert_eq!(on_one("GET", path, &[]).status, 404, "{path} is internal");
    }
    assert_eq!(on_one("GET", "/dl/loop", &[]).status, 500, "a cycle");
    assert_eq!(on_one("GET", "/dl/bad", &[]).status, 404, "not a path");
    for path in ["/dl/spaced", "/dl/escaped"] {
        let r = on_one("GET", path, &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "spaced\n"), "{path}");
    }
    assert_eq!(on_one("GET", "/public.txt", &[]).status, 200);
    assert_eq!(on_one("GET", "/dl/climb", &[]).status, 404, "a `..` in it");
    let r = on_one("GET", "/dl/report", &[]);
    assert!(r.status == 200 && r.body == file, "the connection goes on");
    // One access-log line a client's request: its own request line, the
    // last answer's status and size, the upstream that redirected.
    let text = access_log_when(&log, |t| t.lines().next().is_some());
    let first = text.lines().next().expect("no access-log line");
    assert!(
        first.contains("\"GET /dl/report HTTP/1.1\" 200 100000 "),
        "{first}"
    );
    assert!(
        first.contains(&format!("\"{}\" 200 ", origin.addr())),
        "the upstream that redirected: {first}"
    );
}

/// nginx's upstream `keepalive_timeout`: an idle upstream connection is
/// closed once it has been idle that long, with no request to it after
/// (the pool alone looked only when asked for one), and the idle gauge
/// drops with it. Under prefork, whose child keeps its one thread, the
/// look is on its requests' way: a request to another route does it.
fn an_idle_upstream_connection_is_closed_at_its_keepalive_timeout_with_no_request_after(mpm: &str) {
    let (origin, other) = (Origin::start(), Origin::start());
    origin.on("/x", Script::ok(b"x\n"));
    other.on("/y", Script::ok(b"y\n"));
    let route = format!("/other/={}", other.url("/"));
    let mut args = vec!["--proxy-keepalive-timeout", "1s", "--proxy", route.as_str()];
    args.extend(one_worker(mpm));
    let server = serve_all_to(mpm, &origin, &args);
    assert_eq!(ask(server.addr(), "GET", "/x", &[]).status, 200);
    assert_eq!(origin.open_connections(), 1, "kept for the next request");
    assert_eq!(pool_idle_settles(&server, 1.0), 1.0, "and counted idle");
    if mpm == "prefork" {
        thread::sleep(Duration::from_millis(1500));
        assert_eq!(ask(server.addr(), "GET", "/other/y", &[]).status, 200);
    }
    assert!(
        origin.wait_until(Duration::from_secs(10), |o| o.open_connections() == 0),
        "the idle connection outlived its keepalive timeout"
    );
    let want = if mpm == "prefork" { 1.0 } else { 0.0 };
    assert_eq!(
        pool_idle_settles(&server, want),
        want,
        "the gauge drops with it (prefork: the other route's one is left)"
    );
    assert_eq!(
        ask(server.addr(), "GET", "/x", &[]).status,
        200,
        "and a new one is made"
    );
}

/// A client that goes away (closes its end, or resets the connection)
/// while its request waits on the upstream has the request dropped, as
/// nginx drops it: the upstream's connection is closed at once, not when
/// the upstream answers or times out, and the access log says 499. The
/// server goes on serving.
fn a_client_that_hangs_up_while_its_request_waits_has_the_upstream_connection_closed(mpm: &str) {
    let origin = Origin::start();
    origin.on("/held", Script::ok(b"too late\n").hold());
    origin.on("/now", Script::ok(b"now\n"));
    let logs = TempDir::new("hung-up-log");
    let log = logs.path().join("access.log");
    let server = Server::start(
        mpm,
        None,
        &[
            "--proxy",
            &format!("/={}", origin.url("")),
            "--access-log",
            log.to_str().unwrap(),
        ],
    );
    let addr = server.addr();
    // Closed; reset; and closed after bytes nobody reads while the request
    // waits (a TLS client's close_notify, a stray CRLF): its end counts.
    for (n, how) in [(1, "closed"), (2, "reset"), (3, "closed after bytes")] {
        let mut c = RawConn::connect(addr);
        c.send(&request("GET", "/held", &[])).unwrap();
        assert!(
            origin.wait_until(Duration::from_secs(10), |o| o.holding() == n),
            "the request never reached the upstream"
        );
        match how {
            "reset" => socket2::SockRef::from(c.stream())
                .set_linger(Some(Duration::ZERO))
                .unwrap(),
            "closed after bytes" => {
                c.send(b"\r\n").unwrap();
                c.stream().shutdown(std::net::Shutdown::Write).unwrap();
            }
            _ => {}
        }
        drop(c);
        assert!(
            origin.wait_until(Duration::from_secs(10), |o| o.held_closed() == n),
            "the upstream's connection stayed open after the client {how}"
        );
    }
    let hung = |t: &str| t.matches("\"GET /held HTTP/1.1\" 499 ").count();
    let text = access_log_when(&log, |t| hung(t) == 3);
    assert_eq!(hung(&text), 3, "one 499 line each: {text}");
    let r = ask(addr, "GET", "/now", &[]);
    assert_eq!((r.status, r.text().as_str()), (200, "now\n"));
    origin.release();
}

/// A client that sends a request for a file and one for the upstream,
/// pipelined, and closes its end at once (all in one packet, as `printf
/// ... | nc -N` does) gets the file's answer: only the request waiting on
/// the upstream is dropped, its upstream connection closed.
fn a_client_that_half_closes_after_pipelined_requests_still_gets_the_answers_made_before(
    mpm: &str,
) {
    let origin = Origin::start();
    origin.on("/api/held", Script::ok(b"too late\n").hold());
    let root = site::docroot();
    root.write("page.txt", b"the page\n");
    let route = format!("/api/={}", origin.url("/api/"));
    let logs = TempDir::new("half-closed-log");
    let log = logs.path().join("access.log");
    let server = Server::start(
        mpm,
        Some(root.path()),
        &["--proxy", &route, "--access-log", log.to_str().unwrap()],
    );
    let mut c = RawConn::connect(server.addr());
    let mut both = request("GET", "/page.txt", &[]);
    both.extend_from_slice(&request("GET", "/api/held", &[]));
    c.send(&both).unwrap();
    c.stream().shutdown(std::net::Shutdown::Write).unwrap();
    let r = c.read_response_to("GET").unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "the page\n"));
    // Dropped while it waited: on its upstream's answer, or already on its
    // connection to the upstream (then the origin never saw it).
    let text = access_log_when(&log, |t| t.contains("\"GET /api/held HTTP/1.1\" 499 "));
    assert!(
        text.contains("\"GET /api/held HTTP/1.1\" 499 "),
        "the waiting request was not dropped: {text}"
    );
    assert!(text.contains("\"GET /page.txt HTTP/1.1\" 200 "), "{text}");
    assert!(
        origin.wait_until(Duration::from_secs(10), |o| o.held_closed() == o.holding()),
        "the upstream's connection stayed open"
    );
    origin.release();
}

/// nginx's `server ... max_conns`: an upstream with as many requests in
/// flight from the serving process is passed over for the route's others,
/// and taken again once one ends. Counted per process, as nginx's without
/// a `zone`.
fn an_upstream_at_its_max_conns_is_passed_over_until_a_request_ends(mpm: &str) {
    let (a, b) = (Origin::start(), Origin::start());
    a.on("/x", Script::ok(b"a\n").hold());
    a.on("/y", Script::ok(b"a\n"));
    b.on("/x", Script::ok(b"b\n"));
    b.on("/y", Script::ok(b"b\n"));
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\n\
         upstreams = [{{ url = \"{a}\", max_conns = 1 }}, \"{b}\"]\n",
        a = a.url(""),
        b = b.url("")
    );
    if mpm == "prefork" {
        // A prefork child serves one request at a time: its own count never
        // passes 1, and each request's try ends with it.
        let (server, _dir) = serve_with_file(mpm, &toml, &["--server-limit", "1"]);
        let got: Vec<String> = (0..4)
            .map(|_| ask(server.addr(), "GET", "/y", &[]).text())
            .collect();
        assert_eq!(
            got,
            ["a\n", "b\n", "a\n", "b\n"],
            "round-robin, never refused"
        );
        return;
    }
    let (server, _dir) = serve_with_file(
        mpm,
        &toml,
        &["--server-limit", "1", "--threads-per-child", "4"],
    );
    let addr = server.addr();
    let held = thread::spawn(move || ask(addr, "GET", "/x", &[]).text());
    assert!(
        a.wait_until(Duration::from_secs(10), |o| o.holding() == 1),
        "the first request never reached a"
    );
    // Round-robin's next two would be b, then a: a is full, so both are b's.
    for _ in 0..2 {
        let r = ask(addr, "GET", "/x", &[]);
        assert_eq!((r.status, r.text().as_str()), (200, "b\n"));
    }
    a.release();
    assert_eq!(held.join().unwrap(), "a\n");
    // Each serving thread keeps its own round-robin (as each nginx worker
    // does): whichever threads take them, two picks include a.
    let got: Vec<String> = (0..2).map(|_| ask(addr, "GET", "/y", &[]).text()).collect();
    assert!(
        got.iter().any(|t| t == "a\n"),
        "a takes requests again: {got:?}"
    );
}

/// nginx's `server ... backup`: a backup upstream takes requests only
/// while the route's other upstreams may not (down, or tried by this
/// request), and none while they may.
fn a_backup_upstream_is_taken_only_while_the_others_cannot_be(mpm: &str) {
    let primary = Origin::start();
    primary.on("/*", Script::ok(b"primary\n"));
    let backup = Origin::start();
    backup.on("/*", Script::ok(b"backup\n"));
    let dead = dead_port();
    let toml = format!(
        "[[proxy]]\nprefix = \"/up/\"\nupstreams = [\"{p}\", {{ url = \"{b}\", backup = true }}]\n\n\
         [[proxy]]\nprefix = \"/down/\"\nupstreams = [\"http://{dead}\", {{ url = \"{b}\", backup = true }}]\n",
        p = primary.url(""),
        b = backup.url(""),
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    for _ in 0..4 {
        assert_eq!(ask(server.addr(), "GET", "/up/x", &[]).body, b"primary\n");
    }
    assert!(backup.requests().is_empty(), "{:?}", backup.requests());
    // The primary refused: this GET goes on to the backup, and so do the
    // next while the primary is marked down.
    for _ in 0..3 {
        let r = ask(server.addr(), "GET", "/down/x", &[]);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"backup\n"[..]));
    }
    assert_eq!(backup.requests().len(), 3);
    // The primary is not the route's only upstream: its failure marks it
    // down (so the next requests go straight to the backup).
    let (scrape, text) = prometheus(&server);
    let dead_down = scrape.samples.iter().any(|s| {
        s.metric == "mpm_proxy_marked_down_total"
            && s.labels.get("route") == Some("/down/")
            && s.labels
                .get("upstream")
                .is_some_and(|u| u.contains(&dead.to_string()))
            && matches!(s.value, prometheus_parse::Value::Counter(v) if v >= 1.0)
    });
    assert!(dead_down, "{text}");
}

fn bytes_an_upstream_sends_after_its_answer_never_answer_the_next_request(mpm: &str) {
    let (sent, stray_sent) = std::sync::mpsc::channel();
    let up = start_stray_upstream(sent);
    let route = format!("/=http://{up}");
    let server = serve(mpm, &["--proxy", route.as_str()]);
    let mut c = server.connect();
    for i in 0..5 {
        c.send(&request("GET", "/a", &[])).unwrap();
        assert_eq!(c.read_response().unwrap().body, b"A1");
        // The stray answer is on the pooled connection once sent (loopback
        // delivers it within the send): that connection must not carry
        // the next request.
        stray_sent.recv_timeout(Duration::from_secs(10)).unwrap();
        c.send(&request("GET", "/b", &[])).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, b"B1".as_slice()),
            "round {i}: the next request got another's answer"
        );
    }
}

fn a_hostile_upstream_gets_the_client_a_502_and_disturbs_nothing_else(mpm: &str) {
    let hostile = Origin::start();
    let mut huge = b"HTTP/1.1 200 OK\r\nX-Huge: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 100 * 1024));
    huge.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\nok");
    hostile
        .on(
            "/garbage",
            Script::raw(b"SPLAT 200 nonsense\r\n\r\nwhatever"),
        )
        .on("/huge-head", Script::raw(&huge))
        // A transfer coding mpm does not decode: its bytes would reach
        // the client still coded, the coding's name dropped.
        .on(
            "/gzip-te",
            Script::raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b\x08\x00"),
        )
        .on("/short", Script::ok(&pattern(10_000, 40)).cut_after(1_000))
        .on(
            "/trickle",
            Script::trickle(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                Duration::from_secs(1),
            ),
        );
    let fine = Origin::start();
    fine.on("/fine/x", Script::ok(b"fine\n"));
    // The trickle's route times out in half a second; the others' answers
    // are wrong, not late, and their route waits as long as the default
    // (so that a busy machine gets them a 502, never a 504).
    let toml = format!(
        "[[proxy]]\nprefix = \"/h/trickle\"\nupstreams = [{{ url = \"{h}/trickle\", max_fails = 0 }}]\n\
         read_timeout = \"500ms\"\n\n\
         [[proxy]]\nprefix = \"/h/\"\nupstreams = [{{ url = \"{h}/\", max_fails = 0 }}]\n\n\
         [[proxy]]\nprefix = \"/fine/\"\nupstreams = [\"{f}\"]\n",
        h = hostile.url(""),
        f = fine.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let addr = server.addr();
    let cases = [
        "/h/garbage",
        "/h/huge-head",
        "/h/gzip-te",
        "/h/short",
        "/h/trickle",
    ];
    let askers: Vec<_> = cases
        .iter()
        .map(|&path| thread::spawn(move || (path, try_ask(addr, path))))
        .collect();
    // While they are at it (the trickle takes a second a byte), another
    // route is served as ever.
    assert!(
        hostile.wait_until(Duration::from_secs(10), |o| o.requests().len()
            == cases.len()),
        "the hostile origin saw {:?}",
        hostile.requests()
    );
    for _ in 0..3 {
        assert_eq!(ask(addr, "GET", "/fine/x", &[]).body, b"fine\n");
    }
    for a in askers {
        let (path, got) = a.join().unwrap();
        let ok = match path {
            "/h/garbage" | "/h/huge-head" | "/h/gzip-te" => matches!(got, Got::Status(502)),
            // The head may have gone on before the body fell short.
            "/h/short" => matches!(got, Got::Status(502) | Got::Cut(200)),
            _ => matches!(got, Got::Status(502 | 504)),
        };
        assert!(ok, "{path}: the client got {got:?}");
    }
    assert_eq!(ask(addr, "GET", "/fine/x", &[]).body, b"fine\n");
    assert_eq!(fine.requests_to("/fine/x").len(), 4);
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

fn proxy_tables_in_the_settings_file_map_paths_as_nginx_does(mpm: &str) {
    let api = Origin::start();
    api.on("/v1/*", Script::ok(b"api\n"));
    let whole = Origin::start();
    whole.on("/static/*", Script::ok(b"whole\n"));
    let toml = format!(
        "[[proxy]]\nprefix = \"/api/\"\nupstreams = [\"{a}/v1/\"]\nhost = \"pass\"\n\n\
         [[proxy]]\nprefix = \"/static/\"\nupstreams = [{{ url = \"{w}\", weight = 2 }}]\n\
         balance = \"least-conn\"\n",
        a = api.url(""),
        w = whole.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let mut c = server.connect();
    c.send(&request("GET", "/api/users/7?full=1", &[])).unwrap();
    assert_eq!(c.read_response().unwrap().body, b"api\n");
    c.send(&request("GET", "/static/app.js", &[])).unwrap();
    assert_eq!(c.read_response().unwrap().body, b"whole\n");
    c.send(&request("GET", "/hello.txt", &[])).unwrap();
    assert_eq!(
        c.read_response().unwrap().body,
        site::HELLO_TXT.as_bytes(),
        "the site serves what no route takes"
    );
    // A URL with a path replaces the prefix; one without passes the path.
    let a = &api.requests()[0];
    assert_eq!(a.target, "/v1/users/7?full=1");
    assert_eq!(a.header("host"), Some("proxy.test"), "host = \"pass\"");
    let w = &whole.requests()[0];
    assert_eq!(w.target, "/static/app.js");
    assert_eq!(
        w.header("host"),
        Some(whole.addr().to_string().as_str()),
        "the upstream's host:port by default"
    );
}

/// Route matching decodes escapes of unreserved characters (docs/proxy.md),
/// as nginx does: `/%61pi/x` is under `/api/` (so an encoded letter is no
/// way around a route), and a route without a path passes it as sent. An
/// encoded `/` is not decoded: `/api%2Fx` goes to the route that takes the
/// rest, as the client sent it.
fn an_encoded_letter_in_a_path_is_decoded_to_match_a_route(mpm: &str) {
    let api = Origin::start();
    api.on("/*", Script::ok(b"api\n"));
    let root = Origin::start();
    root.on("/*", Script::ok(b"root\n"));
    let api_route = format!("/api/={}", api.url(""));
    let root_route = format!("/={}", root.url(""));
    let server = serve(
        mpm,
        &[
            "--proxy",
            api_route.as_str(),
            "--proxy",
            root_route.as_str(),
        ],
    );
    let mut c = server.connect();
    for (target, body) in [
        ("/%61pi/x", &b"api\n"[..]),
        ("/api/x", b"api\n"),
        ("/api%2Fx", b"root\n"),
    ] {
        c.send(&request("GET", target, &[])).unwrap();
        assert_eq!(c.read_response().unwrap().body, body, "{target}");
    }
    assert_eq!(
        api.requests()
            .iter()
            .map(|r| r.target.as_str())
            .collect::<Vec<_>>(),
        ["/%61pi/x", "/api/x"],
        "passed as sent"
    );
    assert_eq!(root.requests()[0].target, "/api%2Fx", "passed as sent");
}

fn a_trusted_proxys_forwarded_for_is_kept_and_rfc_7239_is_a_choice(mpm: &str) {
    let origin = Origin::start();
    origin.on("/*", Script::ok(b"ok\n"));
    let toml = format!(
        "[[proxy]]\nprefix = \"/trusted/\"\nupstreams = [\"{o}\"]\n\
         trusted_proxies = [\"127.0.0.0/8\"]\n\n\
         [[proxy]]\nprefix = \"/rfc/\"\nupstreams = [\"{o}\"]\nforwarded = \"forwarded\"\n",
        o = origin.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let claim = ["X-Forwarded-For: 203.0.113.9", "X-Forwarded-Proto: https"];
    assert_eq!(ask(server.addr(), "GET", "/trusted/a", &claim).status, 200);
    assert_eq!(ask(server.addr(), "GET", "/rfc/b", &claim).status, 200);
    let trusted = &origin.requests_to("/trusted/a")[0];
    assert_eq!(
        trusted.header("x-forwarded-for"),
        Some("203.0.113.9, 127.0.0.1"),
        "a trusted peer's list is appended to"
    );
    assert_eq!(trusted.header("x-forwarded-proto"), Some("https"));
    let rfc = &origin.requests_to("/rfc/b")[0];
    let proto = if server.is_tls() { "https" } else { "http" };
    assert_eq!(
        rfc.header("forwarded"),
        Some(format!("for=127.0.0.1;proto={proto};host=proxy.test").as_str())
    );
    assert!(
        !rfc.has("x-forwarded-for") && !rfc.has("x-forwarded-proto"),
        "an untrusted client's X-Forwarded-* went on: {:?}",
        rfc.headers
    );
}

fn a_hash_of_a_header_sends_each_value_to_one_upstream(mpm: &str) {
    let (a, b) = (Origin::start(), Origin::start());
    a.on("/u", Script::ok(b"a\n"));
    b.on("/u", Script::ok(b"b\n"));
    let toml = format!(
        "[[proxy]]\nprefix = \"/\"\nupstreams = [\"{a}\", \"{b}\"]\n\
         balance = \"hash:header:X-User\"\n",
        a = a.url(""),
        b = b.url("")
    );
    let (server, _dir) = serve_with_file(mpm, &toml, &[]);
    let mut answered = std::collections::HashMap::new();
    for round in 0..3 {
        for user in 0..20 {
            let field = format!("X-User: user-{user}");
            let r = ask(server.addr(), "GET", "/u", &[&field]);
            let first = answered.entry(user).or_insert_with(|| r.body.clone());
            assert_eq!(
                *first, r.body,
                "round {round}: user-{user} moved to another upstream"
            );
        }
    }
    let on_a = answered.values().filter(|b| b.as_slice() == b"a\n").count();
    assert!(
        on_a > 0 && on_a < 20,
        "20 users all hashed to one upstream ({on_a} on the first)"
    );
}

fn the_upstream_format_logs_the_upstreams_address_status_and_time(mpm: &str) {
    let origin = Origin::start();
    origin.on("/up/a", Script::new(201).body(b"made\n"));
    let dead = dead_port();
    let (gone_a, gone_b) = (dead_port(), dead_port());
    let logs = TempDir::new("proxy-logs");
    let log = logs.path().join("access.log");
    let (up, down) = (
        format!("/up/={}", origin.url("")),
        format!("/down/=http://{dead}"),
    );
    // Two upstreams, each marked down by its first failure.
    let gone = format!("/gone/=http://{gone_a},http://{gone_b}");
    let server = serve(
        mpm,
        &[
            "--proxy",
            &up,
            "--proxy",
            &down,
            "--proxy",
            &gone,
            "--access-log",
            log.to_str().unwrap(),
            "--log-format",
            "upstream",
        ],
    );
    let mut c = server.connect();
    let asked = [
        ("/up/a", 201),
        ("/down/b", 502),
        ("/gone/a", 502),
        ("/gone/b", 502),
        ("/hello.txt", 200),
    ];
    for (path, status) in asked {
        c.send(&request("GET", path, &[])).unwrap();
        assert_eq!(c.read_response().unwrap().status, status, "{path}");
    }
    let text = access_log_when(&log, |t| t.lines().count() >= asked.len());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), asked.len(), "{lines:?}");
    // `... "$upstream_addr" $upstream_status $upstream_response_time`.
    let tail = |line: &str| -> (String, String, f64) {
        let mut words = line.rsplitn(3, ' ');
        let time = words.next().unwrap_or_default();
        let status = words.next().unwrap_or_default().to_string();
        let rest = words.next().unwrap_or_default();
        let addr = rest.rsplit(' ').next().unwrap_or_default().to_string();
        let time = time
            .parse()
            .unwrap_or_else(|_| panic!("no upstream time at the end of {line:?}"));
        (addr, status, time)
    };
    // The time parses as seconds (its size is not a correctness matter).
    let (addr, status, _) = tail(lines[0]);
    assert!(
        lines[0].contains("\"GET /up/a HTTP/1.1\" 201 "),
        "{}",
        lines[0]
    );
    assert_eq!(
        (addr, status),
        (format!("\"{}\"", origin.addr()), "201".to_string())
    );
    let (addr, status, _) = tail(lines[1]);
    assert!(
        lines[1].contains("\"GET /down/b HTTP/1.1\" 502 "),
        "{}",
        lines[1]
    );
    assert_eq!((addr, status), (format!("\"{dead}\""), "-".to_string()));
    // Both tried, one after the other (in either order), neither answering.
    assert!(
        [(&gone_a, &gone_b), (&gone_b, &gone_a)]
            .iter()
            .any(|(x, y)| lines[2].contains(&format!("\"{x}, {y}\" - "))),
        "{}",
        lines[2]
    );
    // Both down now: no upstream tried, none named (it was `"" - 0.000`).
    assert!(
        lines[3].ends_with("\"-\" - -"),
        "a 502 no upstream was tried for names none: {}",
        lines[3]
    );
    assert!(
        lines[4].ends_with("\"-\" - -"),
        "the site's answer names no upstream: {}",
        lines[4]
    );
}

fn each_upstreams_counters_are_on_the_status_page_and_in_prometheus(mpm: &str) {
    let failing = Origin::start();
    failing.on("/*", Script::hang_up());
    let live = Origin::start();
    live.on("/c", Script::ok(b"c\n"));
    let route = format!("/={},{}", failing.url(""), live.url(""));
    let server = serve(mpm, &["--proxy", &route, "--server-limit", "1"]);
    let mut c = server.connect();
    for i in 0..10 {
        c.send(&request("GET", "/c", &[])).unwrap();
        assert_eq!(c.read_response().unwrap().body, b"c\n", "request {i}");
    }
    // Prefork's one process is free again once the client has gone.
    drop(c);
    let (scrape, text) = prometheus(&server);
    // A family's sample for the upstream at `origin`.
    let value = |name: &str, origin: &Origin| -> f64 {
        let port = format!(":{}", origin.addr().port());
        scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name
                    && s.labels.get("route") == Some("/")
                    && s.labels.get("upstream").is_some_and(|u| u.contains(&port))
            })
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{name} is {other:?}"),
            })
            .unwrap_or_else(|| panic!("no {name} for {origin:?} in:\n{text}"))
    };
    assert_eq!(value("mpm_proxy_requests_total", &live), 10.0);
    assert_eq!(value("mpm_proxy_up", &live), 1.0);
    assert_eq!(value("mpm_proxy_failures_total", &live), 0.0);
    // One client connection, one upstream connection, reused for the rest.
    assert_eq!(value("mpm_proxy_connections_opened_total", &live), 1.0);
    assert_eq!(value("mpm_proxy_connections_reused_total", &live), 9.0);
    assert_eq!(value("mpm_proxy_up", &failing), 0.0);
    assert_eq!(value("mpm_proxy_failures_total", &failing), 1.0);
    assert_eq!(value("mpm_proxy_marked_down_total", &failing), 1.0);
    // The page in JSON has the same rows.
    let page = ask(server.addr(), "GET", "/server-status?json", &[]);
    let json: serde_json::Value = serde_json::from_slice(&page.body).unwrap();
    let rows = json["proxy"]
        .as_array()
        .unwrap_or_else(|| panic!("no proxy table in {}", page.text()));
    assert_eq!(rows.len(), 2, "{rows:?}");
}

/// The server's Prometheus page, parsed, and its text.
fn prometheus(server: &Server) -> (prometheus_parse::Scrape, String) {
    let metrics = ask(
        server.addr(),
        "GET",
        "/server-status?format=prometheus",
        &[],
    );
    assert_eq!(metrics.status, 200);
    let text = metrics.text().to_string();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    (scrape, text)
}

/// Each upstream's `mpm_proxy_pool_idle` now, as (route, port, value).
fn pool_idle(server: &Server) -> Vec<(String, u16, f64)> {
    let (scrape, _) = prometheus(server);
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == "mpm_proxy_pool_idle")
        .map(|s| {
            let upstream = s.labels.get("upstream").unwrap_or_default();
            let port = upstream
                .trim_end_matches('/')
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no port in {upstream:?}"));
            let v = match s.value {
                prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("pool_idle is {other:?}"),
            };
            (
                s.labels.get("route").unwrap_or_default().to_string(),
                port,
                v,
            )
        })
        .collect()
}

/// The idle connections the gauge shows over every upstream, once it
/// reads `want` (or what it read last, after 10 s).
fn pool_idle_settles(server: &Server, want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sum: f64 = pool_idle(server).iter().map(|(_, _, v)| v).sum();
        if sum == want || Instant::now() >= deadline {
            return sum;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn the_idle_gauge_drops_what_the_pools_dropped_and_what_an_old_generation_held(mpm: &str) {
    let origin = Origin::start();
    origin.on("/a", Script::ok(b"a\n"));
    let server = serve_all_to(mpm, &origin, &one_worker(mpm));
    assert_eq!(ask(server.addr(), "GET", "/a", &[]).status, 200);
    assert_eq!(pool_idle_settles(&server, 1.0), 1.0, "one connection kept");
    // The upstream goes away: the pool finds its kept connection closed,
    // drops it, and cannot open another (502). The gauge read 1 for as
    // long as nothing was given back.
    let dead = origin.stop_keeping_port();
    assert_eq!(ask(server.addr(), "GET", "/a", &[]).status, 502);
    assert_eq!(
        pool_idle_settles(&server, 0.0),
        0.0,
        "the pool holds nothing after its connection was found closed"
    );
    let origin = Origin::revive(dead).unwrap();
    origin.on("/a", Script::ok(b"a\n"));
    assert_eq!(ask(server.addr(), "GET", "/a", &[]).status, 200);
    assert_eq!(pool_idle_settles(&server, 1.0), 1.0, "one connection kept");
    // A graceful restart: the old generation's process exits and its
    // pool's connections close with it. The gauge kept its share forever.
    let mut server = server;
    server.server.signal(libc::SIGUSR1);
    assert!(
        server.wait_for_stderr("graceful restart", Duration::from_secs(10)),
        "no graceful restart"
    );
    assert_eq!(
        pool_idle_settles(&server, 0.0),
        0.0,
        "the exited generation's connections are no one's idle ones"
    );
}

fn a_killed_processs_idle_connections_leave_the_gauge(mpm: &str) {
    let origin = Origin::start();
    origin.on("/a", Script::ok(b"a\n"));
    let server = serve_all_to(mpm, &origin, &one_worker(mpm));
    assert_eq!(ask(server.addr(), "GET", "/a", &[]).status, 200);
    assert_eq!(pool_idle_settles(&server, 1.0), 1.0, "one connection kept");
    // The serving process is killed: no exit handler runs, and the kernel
    // closes its pooled connection. Its share was left in the gauge for
    // as long as the server ran.
    let serving = tests::wait_for_children(server.pid(), 1, &[], Duration::from_secs(10))
        .expect("one serving process");
    tests::kill(serving[0] as i32, libc::SIGKILL);
    tests::wait_for_children(server.pid(), 1, &serving, Duration::from_secs(10))
        .expect("the killed process was not replaced");
    assert_eq!(
        pool_idle_settles(&server, 0.0),
        0.0,
        "the killed process's connection is no one's idle one"
    );
    // The replacement counts its own.
    assert_eq!(ask(server.addr(), "GET", "/a", &[]).status, 200);
    assert_eq!(pool_idle_settles(&server, 1.0), 1.0, "its connection kept");
}

/// Two prefork children, each holding a client's keep-alive connection
/// (a child serves one at a time) and a pooled upstream connection: the
/// killed one's leaves the gauge, the live one's stays.
#[test]
fn under_prefork_a_killed_childs_idle_connection_leaves_the_gauge_and_a_siblings_stays() {
    let origin = Origin::start();
    origin.on("/a", Script::ok(b"a\n"));
    let server = serve_all_to(
        "prefork",
        &origin,
        &[
            "--server-limit",
            "3",
            "--start-servers",
            "3",
            "--max-spare",
            "3",
        ],
    );
    let children = tests::wait_for_children(server.pid(), 3, &[], Duration::from_secs(10))
        .expect("three children");
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = RawConn::connect(server.addr());
        c.send(&request("GET", "/a", &[])).unwrap();
        assert_eq!(c.read_response_to("GET").unwrap().status, 200);
        held.push(c);
    }
    assert_eq!(
        pool_idle_settles(&server, 2.0),
        2.0,
        "one kept by each child"
    );
    // The children holding a connection to the origin (its socket's inode,
    // from /proc/net/tcp, among their descriptors): not the one answering
    // the status page.
    let port = origin.addr().port();
    let to_origin: Vec<String> = std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let remote = u16::from_str_radix(f.get(2)?.rsplit(':').next()?, 16).ok()?;
            let inode = f.get(9)?;
            (remote == port).then(|| format!("socket:[{inode}]"))
        })
        .collect();
    let holds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|mut d| {
            d.any(|e| {
                e.ok()
                    .and_then(|e| std::fs::read_link(e.path()).ok())
                    .is_some_and(|l| to_origin.contains(&l.to_string_lossy().into_owned()))
            })
        })
    };
    let busy: Vec<u32> = children.iter().copied().filter(|&c| holds(c)).collect();
    assert_eq!(
        busy.len(),
        2,
        "two children each hold an upstream connection"
    );
    tests::kill(busy[0] as i32, libc::SIGKILL);
    assert_eq!(
        pool_idle_settles(&server, 1.0),
        1.0,
        "the killed child's connection is gone, its sibling's counted"
    );
    drop(held);
}

fn two_routes_to_one_upstream_count_each_idle_connection_once(mpm: &str) {
    let origin = Origin::start();
    origin.on("/x", Script::ok(b"x\n"));
    let (a, b) = (
        format!("/a/={}", origin.url("/")),
        format!("/b/={}", origin.url("/")),
    );
    let mut args = vec!["--proxy", a.as_str(), "--proxy", b.as_str()];
    args.extend(one_worker(mpm));
    let server = serve(mpm, &args);
    for path in ["/a/x", "/b/x", "/a/x", "/b/x"] {
        assert_eq!(ask(server.addr(), "GET", path, &[]).status, 200, "{path}");
    }
    // Every connection the origin accepted is kept (none was closed), and
    // counted under one route only: the two rows shared one pooled
    // connection, and each showed it.
    let rows = pool_idle(&server);
    let sum: f64 = rows.iter().map(|(_, _, v)| v).sum();
    assert_eq!(sum, origin.accepted() as f64, "{rows:?}");
}

fn a_graceful_stop_waits_for_a_request_waiting_on_its_upstream(mpm: &str) {
    let origin = Origin::start();
    origin.on("/w", Script::ok(b"answered\n").hold());
    let route = format!("/={}", origin.url(""));
    let root = site::docroot();
    let mut server = Server::start(
        mpm,
        Some(root.path()),
        &["--proxy", &route, "--graceful-timeout", "30s"],
    );
    let mut c = server.connect();
    c.send(&request("GET", "/w", &[])).unwrap();
    assert!(
        origin.wait_until(Duration::from_secs(10), |o| o.holding() == 1),
        "the request did not reach the origin"
    );
    server.graceful_stop();
    assert!(server.wait_for_stderr("stopping", Duration::from_secs(10)));
    // Time for a server that cuts waiting requests at a stop to do it.
    thread::sleep(Duration::from_millis(300));
    assert!(server.is_running(), "exited with a request waiting");
    origin.release();
    let r = c.read_response().unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"answered\n".as_slice())
    );
    drop(c);
    let status = server.wait_exit(Duration::from_secs(15));
    let stderr = server.stderr_text();
    let status = status.unwrap_or_else(|| panic!("still running after the answer:\n{stderr}"));
    assert!(status.success(), "exit {status}:\n{stderr}");
}

/// A server proxying to an origin that never answers `/w`, with one
/// request waiting there and a WebSocket tunnel open: what a stop must
/// cut. The origin and the docroot are kept alive with it.
struct Waiting {
    server: Server,
    _origin: Origin,
    _root: TempDir,
    request: RawConn,
    tunnel: RawConn,
}

fn a_request_waiting_and_a_tunnel(mpm: &str, graceful_timeout: &str) -> Waiting {
    let origin = Origin::start();
    origin.on("/w", Script::ok(b"never\n").hold());
    origin.on("/ws", Script::websocket_echo());
    let route = format!("/={}", origin.url(""));
    let root = site::docroot();
    let server = Server::start(
        mpm,
        Some(root.path()),
        &["--proxy", &route, "--graceful-timeout", graceful_timeout],
    );
    let mut request = server.connect();
    request.send(&self::request("GET", "/w", &[])).unwrap();
    assert!(origin.wait_until(Duration::from_secs(10), |o| o.holding() == 1));
    let tunnel = open_tunnel(&server);
    Waiting {
        server,
        _origin: origin,
        _root: root,
        request,
        tunnel,
    }
}

/// The server's exit after `signal`: within 15 s, with status 0, and no
/// child killed or thread abandoned on the way. Its standard error.
fn exits_cleanly(server: &mut Server, signal: &str) -> String {
    let status = server.wait_exit(Duration::from_secs(15));
    let stderr = server.stderr_text();
    let status = status.unwrap_or_else(|| panic!("still running 15 s after {signal}:\n{stderr}"));
    assert!(status.success(), "exit {status}:\n{stderr}");
    assert_cut_in_time(&stderr);
    stderr
}

fn a_request_still_waiting_at_the_graceful_timeout_is_cut_and_the_server_exits(mpm: &str) {
    let mut w = a_request_waiting_and_a_tunnel(mpm, "1s");
    w.server.graceful_stop();
    exits_cleanly(&mut w.server, "SIGWINCH with --graceful-timeout 1s");
    // The client was not answered by the origin: cut, or told so.
    match w.request.read_response() {
        Err(_) => {}
        Ok(r) => assert!(r.status >= 500, "the cut request got {}", r.status),
    }
    assert_closed(&mut w.tunnel);
}

/// A fast stop (SIGTERM) closes a request waiting on its upstream and a
/// tunnel at once, under every model: a prefork child waiting in `poll` on
/// the upstream sees the fast stop's pipe turn readable (whether the
/// SIGTERM came during the wait or just before it), a worker thread sees
/// its client's socket shut down, and neither waits for the upstream
/// (which never answers here). Before, prefork's child was killed 2 s later and worker's
/// process left its thread behind a second later.
fn a_fast_stop_closes_a_request_waiting_on_its_upstream_and_a_tunnel_at_once(mpm: &str) {
    let mut w = a_request_waiting_and_a_tunnel(mpm, "30s");
    w.server.terminate();
    // Neither waited for the upstream: no child killed, no thread left
    // behind (their signs in the log; a time bound would be one more
    // test that fails on a busy machine).
    exits_cleanly(&mut w.server, "SIGTERM");
    assert!(
        w.request.read_response().is_err(),
        "the waiting request was answered"
    );
    assert_closed(&mut w.tunnel);
}

/// A WebSocket tunnel through the server to the origin's echo, one round
/// trip made.
fn open_tunnel(server: &Server) -> RawConn {
    let mut t = server.connect();
    t.send(&request(
        "GET",
        "/ws",
        &["Upgrade: websocket", "Connection: Upgrade"],
    ))
    .unwrap();
    assert_eq!(t.read_head().unwrap().status, 101);
    echoed(&mut t, b"ping", "the tunnel's first round trip");
    t
}

/// `frame` sent through the tunnel `c`, and the same bytes back from the
/// origin's echo before the tunnel closes.
fn echoed(c: &mut RawConn, frame: &[u8], what: &str) {
    c.send(frame).unwrap();
    let mut back = Vec::new();
    while back.len() < frame.len() {
        let more = c.read_some(frame.len() - back.len()).unwrap();
        assert!(!more.is_empty(), "{what}: the tunnel closed");
        back.extend(more);
    }
    assert!(back == frame, "{what}: the echo differs");
}

/// Closed by the server: end-of-file or an error, nothing more read.
fn assert_closed(c: &mut RawConn) {
    if let Ok(more) = c.read_some(100) {
        assert!(more.is_empty(), "{} bytes after the stop", more.len());
    }
}

/// The stop's cut reached what waited on an upstream: no prefork child had
/// to be killed, no worker thread left behind.
fn assert_cut_in_time(stderr: &str) {
    for sign in ["killing it", "abandoned"] {
        assert!(!stderr.contains(sign), "`{sign}` in the log:\n{stderr}");
    }
}

/// A figure of the status page's JSON (`"name":value`).
fn status_figure(server: &Server, name: &str) -> f64 {
    let json = server.get("/server-status?json").text();
    let at = json
        .find(&format!("\"{name}\":"))
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        + name.len()
        + 3;
    json[at..]
        .split([',', '}'])
        .next()
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("{name} is not a number in {json}"))
}

/// The most allocations a proxied request may cost (a GET answered 200
/// with a 1,456-byte body, keep-alive to the client and to the origin), as
/// the status page counts them, client over plain HTTP: what the diet of
/// issue 26 left is 6 under every model (6.10 to 6.15 measured with this
/// test, the status page's own allocations counted in: the same counters
/// see its request, spread over the N proxied ones); before it, 46. The
/// bound leaves room for that share and no more: one allocation more per
/// request fails it.
const PROXIED_REQUEST_ALLOCATIONS: f64 = 7.0;

/// The same over TLS to the client, which adds rustls's own per request:
/// 8.8 measured under prefork and worker, 9.8 under event and uring (one
/// more there, on the TLS layer's side: not looked into yet).
const PROXIED_REQUEST_ALLOCATIONS_TLS: f64 = 10.5;

fn a_proxied_request_costs_a_bounded_number_of_allocations(mpm: &str) {
    const N: usize = 200;
    let origin = Origin::start();
    origin.on("/a", Script::ok(&[b'a'; 1456]));
    // One process and one thread, whose counters the status page reads
    // alone once the client has gone.
    let server = serve_all_to(mpm, &origin, &one_worker(mpm));
    // `n` requests on one client connection; it closes after them, so
    // that the one worker is free for the status page.
    let requests = |n: usize, what: &str| {
        let mut c = server.connect();
        for i in 0..n {
            c.send(&request("GET", "/a", &[])).unwrap();
            let r = c.read_response().unwrap();
            assert!(
                r.status == 200 && r.body.len() == 1456,
                "{what} {i}: {} {:?}",
                r.status,
                r.text()
            );
        }
    };
    // Warm first: the upstream connection pooled, the thread's head
    // buffer made, the status page's own first-time allocations done.
    requests(10, "warming request");
    status_figure(&server, "allocations");
    let before = status_figure(&server, "allocations");
    requests(N, "request");
    let after = status_figure(&server, "allocations");
    let per_request = (after - before) / N as f64;
    let (bound, transport) = if server.is_tls() {
        (PROXIED_REQUEST_ALLOCATIONS_TLS, "TLS")
    } else {
        (PROXIED_REQUEST_ALLOCATIONS, "plain")
    };
    assert!(
        per_request <= bound,
        "a proxied request costs {per_request:.2} allocations under {mpm} ({transport}), at most {bound} allowed"
    );
    assert_eq!(origin.accepted(), 1, "the origin connection was not kept");
}

mpm_suite!(
    over transports:
    a_proxied_answer_is_the_origins_byte_for_byte,
    a_field_value_past_ascii_from_the_origin_is_passed_as_it_came,
    a_head_answer_without_a_usable_length_from_the_upstream_carries_no_content_length,
    hop_by_hop_fields_never_reach_the_origin_and_x_forwarded_for_does,
    a_request_the_server_would_refuse_for_itself_never_reaches_the_origin,
    paths_nginx_refuses_and_fields_it_drops_never_reach_the_origin,
    without_a_root_route_targets_no_route_takes_are_the_sites_and_never_reach_the_origin,
    an_origin_down_is_502_its_timeout_504_and_the_server_serves_on,
    interim_answers_each_within_the_read_timeout_keep_the_request_waiting,
    a_routes_only_upstream_is_never_taken_out_by_its_failures,
    passive_health_skips_a_dead_upstream_and_an_active_check_brings_it_back,
    passive_health_sends_nothing_more_to_an_upstream_after_its_failure,
    a_get_is_retried_on_the_next_upstream_after_a_connect_error_and_a_post_is_not,
    the_first_server_sent_event_reaches_the_client_before_the_origin_finishes,
    a_big_download_and_upload_go_through_the_proxy_in_bounded_memory,
    a_chunked_upload_whose_last_chunk_comes_with_its_data_reaches_the_upstream_whole,
    a_large_chunked_upload_sent_in_one_write_reaches_the_upstream_whole,
    a_request_pipelined_behind_a_chunked_upload_is_served_after_it,
    a_proxied_chunked_upload_past_the_body_limit_is_413_and_the_server_serves_on,
    with_limit_request_body_0_an_upload_past_the_default_limit_reaches_the_upstream,
    a_proxied_upload_that_stops_coming_is_408_at_the_body_timeout,
    a_proxied_upload_with_a_broken_chunk_is_400_and_the_server_serves_on,
    a_proxied_upload_expecting_100_continue_hears_it_before_its_body,
    a_client_gone_mid_upload_disturbs_nothing_else,
    a_websocket_echo_goes_through_the_proxy,
    an_idle_websocket_tunnel_is_closed_after_the_routes_read_timeout,
    an_upstreams_last_bytes_before_its_close_reach_the_tunnels_client,
    a_101_switches_only_to_a_protocol_the_client_offered_and_never_to_h2c,
    requests_on_one_client_connection_share_one_upstream_connection_unless_none_is_kept,
    a_get_on_a_kept_connection_the_origin_closed_goes_again_on_a_new_one,
    a_hostile_upstream_gets_the_client_a_502_and_disturbs_nothing_else,
    bytes_an_upstream_sends_after_its_answer_never_answer_the_next_request,
    an_upstreams_redirect_to_its_own_url_is_rewritten_to_the_routes_prefix,
    a_routes_set_fields_replace_the_clients_and_its_hidden_fields_never_reach_the_client,
    an_upstreams_cookies_are_set_for_the_proxys_domain_and_the_routes_paths,
    an_upstream_at_its_max_conns_is_passed_over_until_a_request_ends,
    an_intercepting_route_answers_an_upstreams_error_with_the_servers_page,
    an_upstreams_x_accel_redirect_is_answered_with_the_path_it_names,
    a_client_that_hangs_up_while_its_request_waits_has_the_upstream_connection_closed,
    an_idle_upstream_connection_is_closed_at_its_keepalive_timeout_with_no_request_after,
    a_client_that_half_closes_after_pipelined_requests_still_gets_the_answers_made_before,
    a_backup_upstream_is_taken_only_while_the_others_cannot_be,
    proxy_tables_in_the_settings_file_map_paths_as_nginx_does,
    an_encoded_letter_in_a_path_is_decoded_to_match_a_route,
    a_trusted_proxys_forwarded_for_is_kept_and_rfc_7239_is_a_choice,
    a_hash_of_a_header_sends_each_value_to_one_upstream,
    the_upstream_format_logs_the_upstreams_address_status_and_time,
    each_upstreams_counters_are_on_the_status_page_and_in_prometheus,
    the_idle_gauge_drops_what_the_pools_dropped_and_what_an_old_generation_held,
    a_killed_processs_idle_connections_leave_the_gauge,
    two_routes_to_one_upstream_count_each_idle_connection_once,
    a_graceful_stop_waits_for_a_request_waiting_on_its_upstream,
    a_request_still_waiting_at_the_graceful_timeout_is_cut_and_the_server_exits,
    a_fast_stop_closes_a_request_waiting_on_its_upstream_and_a_tunnel_at_once,
    a_proxied_request_costs_a_bounded_number_of_allocations,
);

/// `--proxy` on the command line replaces the file's `[[proxy]]` tables
/// (a flag wins over the file): the flag's route serves, the file's do
/// not, and the error log says so at start, naming the file. Not a matter
/// of the model: worker only.
#[test]
fn a_proxy_flag_over_proxy_tables_is_noted_at_start_and_the_tables_are_not_used() {
    let flag = Origin::start();
    flag.on("/f", Script::ok(b"flag\n"));
    let file = Origin::start();
    file.on("/t", Script::ok(b"table\n"));
    let toml = format!(
        "[[proxy]]\nprefix = \"/t\"\nupstreams = [\"{f}\"]\n\n\
         [[proxy]]\nprefix = \"/u/\"\nupstreams = [\"{f}\"]\n",
        f = file.url("")
    );
    let route = format!("/f={}", flag.url(""));
    let (server, dir) = serve_with_file("worker", &toml, &["--proxy", &route]);
    let path = dir.path().join("mpm.toml");
    let notice = format!(
        "mpm: --proxy given: the 2 [[proxy]] routes of {} are not used",
        path.display()
    );
    assert!(
        server.wait_for_stderr(&notice, Duration::from_secs(10)),
        "no notice {notice:?} in {}",
        server.stderr_text()
    );
    assert_eq!(ask(server.addr(), "GET", "/f", &[]).body, b"flag\n");
    assert_eq!(ask(server.addr(), "GET", "/t", &[]).status, 404);
    assert!(file.requests().is_empty(), "a table's route was used");
    // Without the flag, the tables serve, and no such line.
    let (server, _dir) = serve_with_file("worker", &toml, &[]);
    assert_eq!(ask(server.addr(), "GET", "/t", &[]).body, b"table\n");
    assert!(!server.stderr_text().contains("--proxy given"));
}

// ---------------------------------------------------------------------------
// Bad routes on the command line
// ---------------------------------------------------------------------------

fn assert_names(exit: &Exit, what: &str, mentions: &[&str]) {
    exit.assert_one_line_error(what);
    let line = exit.stderr.trim();
    for m in mentions {
        assert!(line.contains(m), "{what}: {line:?} does not mention {m:?}");
    }
}

#[test]
fn a_route_without_a_url_is_one_line_naming_the_form_and_exit_2() {
    let exit = run_mpm(
        &["serve", "--listen", "127.0.0.1:0", "--proxy", "api"],
        Duration::from_secs(10),
    );
    assert_names(&exit, "--proxy api", &["api", "PREFIX=URL"]);
}

#[test]
fn a_route_to_a_scheme_other_than_http_is_one_line_naming_the_schemes_and_exit_2() {
    let exit = run_mpm(
        &["serve", "--listen", "127.0.0.1:0", "--proxy", "/=ftp://x"],
        Duration::from_secs(10),
    );
    assert_names(
        &exit,
        "--proxy /=ftp://x",
        &["ftp://x", "http://", "https://"],
    );
}

// ---------------------------------------------------------------------------
// Under event: waiting holds no thread
// ---------------------------------------------------------------------------

/// Raise this test process's descriptor limit to what `n` sockets need.
fn allow_descriptors(n: u64) -> bool {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((_, hard)) if hard >= n => setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok(),
        _ => false,
    }
}

/// The threads of the server's processes (the master and its children).
fn server_threads(server: &Server) -> usize {
    std::iter::once(server.pid())
        .chain(tests::children(server.pid()))
        .map(threads)
        .sum()
}

#[test]
fn under_event_a_thousand_requests_parked_on_a_slow_upstream_add_no_thread() {
    const WAITING: usize = 1000;
    // A client's socket, the origin's, and its copy kept to shut it down.
    if !allow_descriptors(3 * WAITING as u64 + 512) {
        tests::skip(&format!(
            "this process may not open {} sockets (hard RLIMIT_NOFILE)",
            3 * WAITING
        ));
        return;
    }
    let origin = Origin::start();
    origin.on("/slow", Script::ok(b"at last\n").hold());
    let server = serve_all_to(
        "event",
        &origin,
        &[
            "--server-limit",
            "1",
            "--max-request-workers",
            "4000",
            "--keepalive-timeout",
            "120s",
        ],
    );
    // Warm: one request through, so that every thread the server makes at
    // its first proxied request exists before counting.
    let mut warm = RawConn::connect(server.addr());
    warm.send(&request("GET", "/slow", &[])).unwrap();
    assert!(origin.wait_until(Duration::from_secs(10), |o| o.holding() == 1));
    origin.release();
    assert_eq!(warm.read_response().unwrap().body, b"at last\n");
    let before = server_threads(&server);

    let mut clients: Vec<RawConn> = (0..WAITING)
        .map(|_| {
            let mut c = RawConn::connect(server.addr());
            c.send(&request("GET", "/slow", &[])).unwrap();
            c
        })
        .collect();
    assert!(
        origin.wait_until(Duration::from_secs(60), |o| o.holding() == WAITING),
        "{} of {WAITING} requests reached the origin",
        origin.holding()
    );
    let during = server_threads(&server);
    assert_eq!(
        during, before,
        "{WAITING} requests waiting on the upstream changed the server's threads"
    );
    // And none were made ahead for them (a model sized with a thread per
    // waiting request would pass the count above).
    assert!(
        during < WAITING / 10,
        "{during} threads hold {WAITING} waiting requests"
    );
    origin.release();
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert_eq!(r.body, b"at last\n", "client {i}");
    }
}

/// Under event and uring, an upload that arrives slowly waits for its
/// client on the loop, as a request waits for its upstream: hundreds of
/// them, each part sent and the rest to come (what the origin has of them
/// counted), add no thread; then every one is answered.
#[test]
fn under_event_slow_uploads_through_the_proxy_add_no_thread() {
    slow_uploads_add_no_thread("event");
}

#[test]
fn under_uring_slow_uploads_through_the_proxy_add_no_thread() {
    slow_uploads_add_no_thread("uring");
}

fn slow_uploads_add_no_thread(mpm: &str) {
    const UPLOADS: usize = 200;
    const SENT: usize = 100_000;
    const WHOLE: usize = 300_000;
    if !allow_descriptors(3 * UPLOADS as u64 + 512) {
        tests::skip(&format!(
            "this process may not open {} sockets (hard RLIMIT_NOFILE)",
            3 * UPLOADS
        ));
        return;
    }
    let origin = Origin::start();
    origin.on("/up", Script::ok(b"stored\n"));
    let server = serve_all_to(
        mpm,
        &origin,
        &["--server-limit", "1", "--max-request-workers", "4000"],
    );
    let first = pattern(SENT, 7);
    let rest = pattern(WHOLE - SENT, 8);
    let head = request("POST", "/up", &[&format!("Content-Length: {WHOLE}")]);
    // Warm: one upload through, so that every thread the server makes at
    // its first proxied upload exists before counting.
    let mut warm = RawConn::connect(server.addr());
    warm.send(&head).unwrap();
    warm.send(&first).unwrap();
    warm.send(&rest).unwrap();
    assert_eq!(warm.read_response().unwrap().body, b"stored\n");
    let before = server_threads(&server);
    let at_start = origin.body_bytes();

    let mut clients: Vec<RawConn> = (0..UPLOADS)
        .map(|_| {
            let mut c = RawConn::connect(server.addr());
            c.send(&head).unwrap();
            c.send(&first).unwrap();
            c
        })
        .collect();
    let expected = at_start + (UPLOADS * SENT) as u64;
    assert!(
        origin.wait_until(Duration::from_secs(60), |o| o.body_bytes() >= expected),
        "{} of {} bytes sent reached the origin",
        origin.body_bytes() - at_start,
        UPLOADS * SENT
    );
    let during = server_threads(&server);
    assert_eq!(
        during, before,
        "{UPLOADS} uploads waiting for their clients changed the server's threads"
    );
    // And none were made ahead for them (the loop's worker pool is made
    // at start, a few dozen threads; a model sized with a thread per
    // waiting upload would pass the count above).
    assert!(
        during < UPLOADS / 2,
        "{during} threads hold {UPLOADS} waiting uploads"
    );
    for c in clients.iter_mut() {
        c.send(&rest).unwrap();
    }
    for (i, c) in clients.iter_mut().enumerate() {
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert_eq!(r.body, b"stored\n", "client {i}");
    }
    let up = origin.requests_to("/up");
    assert_eq!(up.len(), UPLOADS + 1);
    assert!(up.iter().all(|u| u.body_len == WHOLE as u64));
}
