//! The HTTP contract of `mpm serve`, against every process model: the welcome
//! site, static files, validators, ranges, confinement, sendfile, keep-alive,
//! pipelining, request bodies, malformed input, limits, timeouts and
//! concurrency.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tests::site::{self, HELLO_TXT, INDEX_HTML, SUB_INDEX_HTML, SUB_PAGE_HTML};
use tests::{agent, exchange, fetch, mpm_suite, Reply, Server, TempDir};

/// A `GET` as a raw request, keep-alive by default.
fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").into_bytes()
}

/// Assert the response is the small file at `path` with `body`.
fn assert_ok(reply: &Reply, path: &str, body: &[u8]) {
    assert_eq!(reply.status, 200, "GET {path}: {}", reply.text());
    assert_eq!(reply.body, body, "GET {path}: wrong body");
}

/// The status the server answers to a path sent verbatim.
fn raw_status(server: &Server, path: &str) -> Reply {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    exchange(server.addr(), request.as_bytes())
        .unwrap_or_else(|e| panic!("GET {path}: no response: {e}"))
}

/// The server still answers a fresh, ordinary request.
fn assert_still_serving(server: &Server) {
    assert_ok(
        &server.get("/hello.txt"),
        "/hello.txt",
        HELLO_TXT.as_bytes(),
    );
}

// --- 1. The welcome site -----------------------------------------------------

fn welcome_site_names_the_mpm_and_has_no_other_pages(mpm: &str) {
    let server = Server::start(mpm, None, &[]);
    let home = server.get("/");
    assert_eq!(home.status, 200);
    assert!(
        home.header("content-type")
            .unwrap()
            .starts_with("text/html"),
        "{:?}",
        home.header("content-type")
    );
    assert!(
        home.text().contains(&format!("<code>{mpm}</code>")),
        "the welcome page does not name the {mpm} MPM:\n{}",
        home.text()
    );
    let missing = server.get("/nope");
    assert_eq!(missing.status, 404);
    assert!(missing.text().contains("404"), "{}", missing.text());
}

// --- 2. Static files -----------------------------------------------------------

fn files_are_served_with_type_validators_date_and_server(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let png = site::image_png();
    let cases: [(&str, &[u8], &str); 4] = [
        ("/index.html", INDEX_HTML.as_bytes(), "text/html"),
        ("/hello.txt", HELLO_TXT.as_bytes(), "text/plain"),
        ("/image.png", &png, "image/png"),
        ("/sub/page.html", SUB_PAGE_HTML.as_bytes(), "text/html"),
    ];
    for (path, body, mime) in cases {
        let r = server.get(path);
        assert_ok(&r, path, body);
        let content_type = r.header("content-type").unwrap_or_default();
        assert!(
            content_type.starts_with(mime),
            "{path}: Content-Type {content_type:?}, expected {mime}"
        );
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str()),
            "{path}"
        );
        let etag = r.header("etag").unwrap_or_default();
        assert!(
            etag.len() > 2 && etag.ends_with('"'),
            "{path}: ETag {etag:?}"
        );
        for name in ["last-modified", "date"] {
            let value = r.header(name).unwrap_or_default();
            assert!(value.ends_with(" GMT"), "{path}: {name} {value:?}");
        }
        let server_header = r.header("server").unwrap_or_default();
        assert!(
            server_header.starts_with("mpm"),
            "{path}: Server {server_header:?}"
        );
    }
}

fn head_answers_the_get_headers_without_a_body(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let full = server.get("/hello.txt");
    let mut conn = server.connect();
    // HEAD then GET in one write: a body after the HEAD response would be
    // read as the start of the GET's response.
    let mut requests = b"HEAD /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n".to_vec();
    requests.extend(get("/index.html"));
    conn.send(&requests).unwrap();
    let head = conn.read_response_to("HEAD").unwrap();
    assert_eq!(head.status, 200);
    for name in ["content-length", "content-type", "etag", "last-modified"] {
        assert!(head.header(name).is_some(), "HEAD lacks {name}");
        assert_eq!(
            head.header(name),
            full.header(name),
            "HEAD and GET differ in {name}"
        );
    }
    assert!(head.header("date").is_some() && head.header("server").is_some());
    assert_eq!(
        head.header("content-length"),
        Some(HELLO_TXT.len().to_string().as_str())
    );
    let next = conn.read_response().unwrap();
    assert_ok(&next, "/index.html after HEAD", INDEX_HTML.as_bytes());
}

fn directory_without_trailing_slash_redirects_to_it(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = raw_status(&server, "/sub");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/sub/"));
    let r = raw_status(&server, "/noindex?x=1");
    assert_eq!(r.status, 301);
    let location = r.header("location").unwrap_or_default();
    assert!(
        location.split('?').next().unwrap().ends_with('/'),
        "Location {location:?}"
    );
}

fn directory_with_index_serves_the_index(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = server.get("/sub/");
    assert_ok(&r, "/sub/", SUB_INDEX_HTML.as_bytes());
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert_ok(&server.get("/"), "/", INDEX_HTML.as_bytes());
}

fn directory_without_index_is_forbidden(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = server.get("/noindex/");
    assert_eq!(r.status, 403);
    assert!(
        !r.text().contains("other.txt"),
        "a listing leaked: {}",
        r.text()
    );
}

fn missing_files_are_not_found(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for path in ["/missing.txt", "/sub/missing.html", "/hello.txt/more"] {
        assert_eq!(server.get(path).status, 404, "{path}");
    }
}

fn methods_other_than_get_and_head_get_405_with_allow(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for (method, body) in [
        ("POST", Some(&b"x=1"[..])),
        ("PUT", Some(&b"new content"[..])),
        ("DELETE", None),
    ] {
        let r = server.request(method, "/hello.txt", &[], body);
        assert_eq!(r.status, 405, "{method}");
        let allow = r.header("allow").unwrap_or_default();
        assert!(allow.contains("GET"), "{method}: Allow {allow:?}");
    }
    // Still there, unchanged.
    assert_still_serving(&server);
}

fn options_answers_204_with_allow(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = server.request("OPTIONS", "/hello.txt", &[], None);
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    let allow = r.header("allow").unwrap_or_default();
    assert!(
        allow.contains("GET") && allow.contains("HEAD"),
        "Allow {allow:?}"
    );
}

// --- 3. Conditional requests -------------------------------------------------

/// Send a conditional GET and an ordinary one on one connection: the first
/// reply, checked to have no body by the second being read correctly.
fn conditional(server: &Server, condition: &str) -> Reply {
    let mut conn = server.connect();
    let mut requests =
        format!("GET /hello.txt HTTP/1.1\r\nHost: test\r\n{condition}\r\n\r\n").into_bytes();
    requests.extend(get("/index.html"));
    conn.send(&requests).unwrap();
    let reply = conn.read_response().unwrap();
    let next = conn.read_response().unwrap();
    assert_ok(
        &next,
        "/index.html after a conditional GET",
        INDEX_HTML.as_bytes(),
    );
    reply
}

fn if_none_match_with_the_etag_answers_304(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let etag = server.get("/hello.txt").header("etag").unwrap().to_string();
    let r = conditional(&server, &format!("If-None-Match: {etag}"));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = conditional(&server, "If-None-Match: \"something-else\"");
    assert_ok(&r, "/hello.txt with another ETag", HELLO_TXT.as_bytes());
}

fn if_modified_since_the_last_modified_answers_304(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let lm = server
        .get("/hello.txt")
        .header("last-modified")
        .unwrap()
        .to_string();
    let r = conditional(&server, &format!("If-Modified-Since: {lm}"));
    assert_eq!(r.status, 304);
}

fn stale_if_modified_since_answers_200(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = conditional(&server, "If-Modified-Since: Mon, 01 Jan 2001 00:00:00 GMT");
    assert_ok(&r, "/hello.txt modified since 2001", HELLO_TXT.as_bytes());
}

// --- 4. Ranges ---------------------------------------------------------------

fn byte_range_answers_206_with_content_range(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let file = site::hundred();
    let r = server.request("GET", "/hundred.bin", &[("Range", "bytes=0-9")], None);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 0-9/100"));
    assert_eq!(r.header("content-length"), Some("10"));
    assert_eq!(r.body, &file[..10]);
}

fn suffix_range_answers_the_last_bytes(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let file = site::hundred();
    let r = server.request("GET", "/hundred.bin", &[("Range", "bytes=-5")], None);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 95-99/100"));
    assert_eq!(r.body, &file[95..]);
}

fn range_starting_past_the_end_answers_416(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = server.request("GET", "/hundred.bin", &[("Range", "bytes=100-")], None);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */100"));
}

fn if_range_with_another_etag_answers_the_whole_file(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let file = site::hundred();
    let r = server.request(
        "GET",
        "/hundred.bin",
        &[("Range", "bytes=0-9"), ("If-Range", "\"not-the-etag\"")],
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, file);
    // And with the right one, the range.
    let etag = server
        .get("/hundred.bin")
        .header("etag")
        .unwrap()
        .to_string();
    let r = server.request(
        "GET",
        "/hundred.bin",
        &[("Range", "bytes=0-9"), ("If-Range", &etag)],
        None,
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &file[..10]);
}

// --- 5. Confinement ----------------------------------------------------------

const SECRET: &str = "outside the docroot: must never be served";

fn paths_and_symlinks_never_escape_the_docroot(mpm: &str) {
    let outside = TempDir::new("outside");
    let secret = outside.write("secret.txt", SECRET.as_bytes());
    let root = site::docroot();
    root.symlink(&secret, "leak.txt");
    root.symlink(outside.path(), "leakdir");
    let server = Server::start(mpm, Some(root.path()), &[]);
    // The sibling directory by climbing: `/../mpm-tests-...-outside/secret.txt`.
    let sibling = outside.path().file_name().unwrap().to_str().unwrap();
    let climbs = [
        "/../etc/passwd".to_string(),
        "/%2e%2e/%2e%2e/etc/passwd".to_string(),
        "/a/%2f..".to_string(),
        "/%00".to_string(),
        "/sub/../../x".to_string(),
        format!("/../{sibling}/secret.txt"),
        format!("/%2e%2e/{sibling}/secret.txt"),
        format!("/sub/..%2f..%2f{sibling}/secret.txt"),
        "/leak.txt".to_string(),
        "/leakdir/secret.txt".to_string(),
        "/leakdir/".to_string(),
    ];
    for path in &climbs {
        let r = raw_status(&server, path);
        assert!(
            [400, 403, 404].contains(&r.status),
            "GET {path} answered {}, expected 400, 403 or 404",
            r.status
        );
        let text = r.text();
        assert!(
            !text.contains(SECRET) && !text.contains("root:x:0:0"),
            "GET {path} leaked: {text}"
        );
    }
    assert_still_serving(&server);
}

fn symlinks_that_stay_inside_the_docroot_are_served(mpm: &str) {
    let root = site::docroot();
    root.symlink("hello.txt", "alias.txt");
    root.symlink("sub", "aliasdir");
    let server = Server::start(mpm, Some(root.path()), &[]);
    assert_ok(
        &server.get("/alias.txt"),
        "/alias.txt",
        HELLO_TXT.as_bytes(),
    );
    assert_ok(
        &server.get("/aliasdir/page.html"),
        "/aliasdir/page.html",
        SUB_PAGE_HTML.as_bytes(),
    );
}

// --- 6. sendfile on and off ----------------------------------------------------

fn sendfile_on_and_off_send_identical_bytes(mpm: &str) {
    let root = site::docroot_with_big_files();
    let files: [(&str, Vec<u8>); 3] = [
        ("/zero.bin", Vec::new()),
        ("/small.bin", site::small()),
        ("/big.bin", site::big()),
    ];
    // With the in-memory cache off, every body takes the sendfile or the
    // read+write path; with it on (the default), small ones come from memory.
    let no_cache = ["--file-cache-max-size", "0"];
    let on = Server::start(
        mpm,
        Some(root.path()),
        &[&["--sendfile", "on"][..], &no_cache].concat(),
    );
    let off = Server::start(
        mpm,
        Some(root.path()),
        &[&["--sendfile", "off"][..], &no_cache].concat(),
    );
    let cached = Server::start(mpm, Some(root.path()), &[]);
    for server in [&on, &off, &cached] {
        for (path, content) in &files {
            let r = server.get(path);
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(
                r.header("content-length"),
                Some(content.len().to_string().as_str())
            );
            assert!(r.body == *content, "{path}: body differs from the file");
        }
        // All of them on one connection: each body is framed exactly.
        let mut conn = server.connect();
        let mut requests = Vec::new();
        for (path, _) in &files {
            requests.extend(get(path));
        }
        requests.extend(get("/hello.txt"));
        conn.send(&requests).unwrap();
        for (path, content) in &files {
            let r = conn.read_response().unwrap();
            assert!(r.status == 200 && r.body == *content, "{path} pipelined");
        }
        assert_ok(
            &conn.read_response().unwrap(),
            "/hello.txt",
            HELLO_TXT.as_bytes(),
        );
    }
}

fn ranges_of_a_large_file_are_identical_with_sendfile_on_and_off(mpm: &str) {
    let root = site::docroot_with_big_files();
    let big = site::big();
    let (start, end) = (3_000_001usize, 5_123_456usize);
    let range = format!("bytes={start}-{end}");
    let on = Server::start(mpm, Some(root.path()), &["--sendfile", "on"]);
    let off = Server::start(mpm, Some(root.path()), &["--sendfile", "off"]);
    let mut bodies = Vec::new();
    for server in [&on, &off] {
        let r = server.request("GET", "/big.bin", &[("Range", &range)], None);
        assert_eq!(r.status, 206);
        let expected = format!("bytes {start}-{end}/{}", big.len());
        assert_eq!(r.header("content-range"), Some(expected.as_str()));
        assert!(
            r.body == big[start..=end],
            "the range's bytes differ from the file"
        );
        bodies.push(r.body);
    }
    assert!(bodies[0] == bodies[1]);
}

// --- 7. Keep-alive and pipelining ----------------------------------------------

fn pipelined_requests_are_answered_in_order(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    let expected = [
        ("/hello.txt", HELLO_TXT.as_bytes()),
        ("/sub/page.html", SUB_PAGE_HTML.as_bytes()),
        ("/index.html", INDEX_HTML.as_bytes()),
    ];
    let mut requests = Vec::new();
    for (path, _) in expected {
        requests.extend(get(path));
    }
    conn.send(&requests).unwrap();
    for (path, body) in expected {
        assert_ok(&conn.read_response().unwrap(), path, body);
    }
}

fn a_keepalive_connection_serves_sequential_requests(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    for i in 0..5 {
        conn.send(&get("/hello.txt")).unwrap();
        let r = conn
            .read_response()
            .unwrap_or_else(|e| panic!("request {i} on the kept connection: {e}"));
        assert_ok(&r, "/hello.txt", HELLO_TXT.as_bytes());
        assert_ne!(r.header("connection"), Some("close"), "request {i}");
    }
}

fn http10_without_keepalive_is_closed_after_the_response(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    conn.send(b"GET /hello.txt HTTP/1.0\r\n\r\n").unwrap();
    assert_ok(
        &conn.read_response().unwrap(),
        "/hello.txt",
        HELLO_TXT.as_bytes(),
    );
    assert!(conn.closed_by_peer(Duration::from_secs(5)), "still open");
}

fn http10_with_keepalive_keeps_the_connection(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    for path in ["/hello.txt", "/index.html"] {
        let request = format!("GET {path} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        conn.send(request.as_bytes()).unwrap();
        let r = conn.read_response().unwrap();
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("keep-alive")),
            "{path}: Connection {:?}",
            r.header("connection")
        );
    }
}

fn connection_close_on_http11_closes_after_the_response(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    conn.send(b"GET /hello.txt HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = conn.read_response().unwrap();
    assert_ok(&r, "/hello.txt", HELLO_TXT.as_bytes());
    assert!(r
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close")));
    assert!(conn.closed_by_peer(Duration::from_secs(5)), "still open");
}

// --- 8. Request bodies ---------------------------------------------------------

fn content_length_body_is_consumed_before_the_next_request(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    // The body looks like a request: if it were parsed as one, a third
    // response (or a different second one) would appear.
    let body = get("/index.html");
    let mut requests = format!(
        "POST /hello.txt HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    requests.extend(&body);
    requests.extend(get("/hello.txt"));
    conn.send(&requests).unwrap();
    assert_eq!(conn.read_response().unwrap().status, 405);
    assert_ok(
        &conn.read_response().unwrap(),
        "/hello.txt",
        HELLO_TXT.as_bytes(),
    );
    assert!(!conn.closed_by_peer(Duration::from_millis(200)) && conn.buffered() == 0);
}

fn chunked_body_is_consumed_before_the_next_request(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    let mut requests =
        b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n\
        5\r\nhello\r\n1a;ext=1\r\nGET /index.html HTTP/1.1\r\n\r\n0\r\nX-Trailer: t\r\n\r\n"
            .to_vec();
    requests.extend(get("/hello.txt"));
    conn.send(&requests).unwrap();
    assert_eq!(conn.read_response().unwrap().status, 405);
    assert_ok(
        &conn.read_response().unwrap(),
        "/hello.txt",
        HELLO_TXT.as_bytes(),
    );
}

fn body_over_the_limit_is_refused_with_413(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &["--limit-request-body", "1024"]);
    // Under the limit: the method is what is refused.
    let r = server.request("POST", "/hello.txt", &[], Some(&[b'a'; 1000]));
    assert_eq!(r.status, 405);
    let mut big =
        b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nContent-Length: 2000\r\n\r\n".to_vec();
    big.extend([b'a'; 2000]);
    assert_eq!(exchange(server.addr(), &big).unwrap().status, 413);
    let mut chunked =
        b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n"
            .to_vec();
    chunked.extend([b'a'; 2000]);
    chunked.extend(b"\r\n0\r\n\r\n");
    assert_eq!(exchange(server.addr(), &chunked).unwrap().status, 413);
    assert_still_serving(&server);
}

// --- 9. Malformed requests and limits ----------------------------------------

/// Send `request` to a server started with `flags`: it must answer `status`,
/// close the connection, and go on serving.
fn assert_refused(mpm: &str, flags: &[&str], request: &[u8], status: u16) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), flags);
    let mut conn = server.connect();
    conn.send(request).unwrap();
    let r = conn.read_response().unwrap_or_else(|e| {
        panic!(
            "no {status} response to {:?}: {e}",
            String::from_utf8_lossy(request)
        )
    });
    assert_eq!(
        r.status,
        status,
        "wrong status for {:?}",
        String::from_utf8_lossy(request)
    );
    assert!(r.text().contains(&status.to_string()), "{}", r.text());
    assert!(
        conn.closed_by_peer(Duration::from_secs(5)),
        "the connection stayed open after {status}"
    );
    assert_still_serving(&server);
}

fn garbage_request_line_is_400(mpm: &str) {
    assert_refused(mpm, &[], b"\x16\x03\x01 what is this\r\n\r\n", 400);
}

fn http11_without_host_is_400(mpm: &str) {
    assert_refused(mpm, &[], b"GET /hello.txt HTTP/1.1\r\n\r\n", 400);
}

fn two_host_headers_are_400(mpm: &str) {
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
    assert_refused(mpm, &[], request, 400);
}

fn content_length_with_transfer_encoding_is_400_and_closes(mpm: &str) {
    let request = b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\
        Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n";
    assert_refused(mpm, &[], request, 400);
}

fn conflicting_content_lengths_are_400(mpm: &str) {
    let request = b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\n\
        Content-Length: 4\r\n\r\nabcd";
    assert_refused(mpm, &[], request, 400);
}

/// `--add-header` (nginx's `add_header`) adds its field to successes and
/// redirects, `--add-header-always` to every answer, errors included.
fn added_fields_reach_successes_and_always_ones_every_answer(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(
        mpm,
        Some(root.path()),
        &[
            "--add-header",
            "Strict-Transport-Security: max-age=63072000",
            "--add-header-always",
            "X-Frame-Options: DENY",
        ],
    );
    let hsts = "strict-transport-security";
    for (path, status, with_hsts) in [
        ("/hello.txt", 200, true),
        ("/sub", 301, true),
        ("/missing", 404, false),
    ] {
        let r = raw_status(&server, path);
        assert_eq!(r.status, status, "{path}");
        assert_eq!(
            r.header(hsts),
            with_hsts.then_some("max-age=63072000"),
            "{path}"
        );
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
    }
}

/// RFC 9110 §10.1.1: an expectation the server cannot meet (anything but
/// `100-continue`) is a 417, and the request is not served.
fn an_expectation_other_than_100_continue_is_417(mpm: &str) {
    assert_refused(
        mpm,
        &[],
        b"GET /hello.txt HTTP/1.1\r\nHost: test\r\nExpect: 200-ok\r\n\r\n",
        417,
    );
}

fn unsupported_http_version_is_505(mpm: &str) {
    assert_refused(
        mpm,
        &[],
        b"GET /hello.txt HTTP/2.0\r\nHost: test\r\n\r\n",
        505,
    );
}

fn request_line_over_the_limit_is_414(mpm: &str) {
    let request = format!("GET /{} HTTP/1.1\r\nHost: test\r\n\r\n", "a".repeat(200));
    assert_refused(
        mpm,
        &["--limit-request-line", "100"],
        request.as_bytes(),
        414,
    );
}

fn header_field_over_the_limit_is_431(mpm: &str) {
    let request = format!(
        "GET /hello.txt HTTP/1.1\r\nHost: test\r\nX-Long: {}\r\n\r\n",
        "b".repeat(200)
    );
    assert_refused(
        mpm,
        &["--limit-request-field-size", "100"],
        request.as_bytes(),
        431,
    );
}

fn more_header_fields_than_the_limit_is_431(mpm: &str) {
    let mut request = "GET /hello.txt HTTP/1.1\r\nHost: test\r\n".to_string();
    for i in 0..20 {
        request.push_str(&format!("X-Field-{i}: v\r\n"));
    }
    request.push_str("\r\n");
    assert_refused(
        mpm,
        &["--limit-request-fields", "10"],
        request.as_bytes(),
        431,
    );
}

fn transfer_encoding_other_than_chunked_is_400(mpm: &str) {
    let request = b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_refused(mpm, &[], request, 400);
}

fn bad_chunk_size_is_400(mpm: &str) {
    let request = b"POST /hello.txt HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n\
        zz\r\nhello\r\n0\r\n\r\n";
    assert_refused(mpm, &[], request, 400);
}

// --- 10. Timeouts ------------------------------------------------------------

fn idle_keepalive_connection_is_closed_after_the_keepalive_timeout(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &["--keepalive-timeout", "300ms"]);
    let mut conn = server.connect();
    conn.send(&get("/hello.txt")).unwrap();
    assert_ok(
        &conn.read_response().unwrap(),
        "/hello.txt",
        HELLO_TXT.as_bytes(),
    );
    // Generous bound: this is about closing at all, not about speed.
    assert!(
        conn.closed_by_peer(Duration::from_secs(8)),
        "an idle connection outlived a 300ms keep-alive timeout by seconds"
    );
    assert_still_serving(&server);
}

fn partial_request_head_times_out_with_408_while_others_are_served(mpm: &str) {
    let root = site::docroot();
    let flags = ["--request-header-timeout", "1s", "--timeout", "1s"];
    let server = Server::start(mpm, Some(root.path()), &flags);
    let mut stalled = server.connect();
    stalled
        .send(b"GET /hello.txt HTTP/1.1\r\nHost: test\r\nX-Partial: ")
        .unwrap();
    // Someone else is served while that head is pending.
    assert_still_serving(&server);
    match stalled.read_response() {
        Ok(r) => assert_eq!(r.status, 408, "a stalled head got {}", r.status),
        // Closing without a word is acceptable too.
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ),
            "the stalled connection was neither answered nor closed: {e}"
        ),
    }
    assert!(stalled.closed_by_peer(Duration::from_secs(5)));
    assert_still_serving(&server);
}

// --- 13. Concurrency ---------------------------------------------------------

fn many_concurrent_clients_all_get_correct_responses(mpm: &str) {
    const CLIENTS: usize = 16;
    const REQUESTS: usize = 50;
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let files = [
        ("/hello.txt", HELLO_TXT.as_bytes().to_vec()),
        ("/index.html", INDEX_HTML.as_bytes().to_vec()),
        ("/image.png", site::image_png()),
        ("/hundred.bin", site::hundred()),
    ];
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (server, files) = (&server, &files);
            scope.spawn(move || {
                // Half keep their connection (ureq pools it), half close each time.
                let keep = agent();
                for i in 0..REQUESTS {
                    let (path, body) = &files[(client + i) % files.len()];
                    let reply = if client % 2 == 0 {
                        fetch(&keep, "GET", &server.url(path), &[], None)
                    } else {
                        let request = format!(
                            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
                        );
                        exchange(server.addr(), request.as_bytes())
                            .unwrap_or_else(|e| panic!("client {client} request {i} {path}: {e}"))
                    };
                    assert_eq!(reply.status, 200, "client {client} request {i} {path}");
                    assert!(reply.body == *body, "client {client} request {i} {path}");
                }
            });
        }
    });
}

// --- 14. The rest of RFC 9110/9112 for a static origin ------------------------

/// Send `request` on a fresh connection, then an ordinary GET on the same
/// one: the first reply (to `method`), checked to be framed exactly by the
/// second being read whole.
fn exchange_then_get(server: &Server, method: &str, request: &str) -> Reply {
    let mut conn = server.connect();
    let mut bytes = request.as_bytes().to_vec();
    bytes.extend(get("/index.html"));
    conn.send(&bytes).unwrap();
    let reply = conn
        .read_response_to(method)
        .unwrap_or_else(|e| panic!("{request:?}: {e}"));
    let next = conn.read_response().unwrap();
    assert_eq!(next.status, 200, "/index.html after {request:?}");
    reply
}

fn preconditions_follow_rfc_9110_order_and_answer_412(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let first = server.get("/hello.txt");
    let etag = first.header("etag").unwrap().to_string();
    let lm = first.header("last-modified").unwrap().to_string();
    let past = "Mon, 01 Jan 2001 00:00:00 GMT";
    let future = "Fri, 01 Jan 2100 00:00:00 GMT";
    let weak = format!("W/{etag}");
    // (method, fields, status): each evaluated in §13.2.2's order.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16);
    let cases: Vec<Case<'_>> = vec![
        ("GET", vec![("If-Match", &etag)], 200),
        ("GET", vec![("If-Match", "\"other\"")], 412),
        ("GET", vec![("If-Match", "*")], 200),
        // If-Match compares strongly: a weak tag never matches.
        ("GET", vec![("If-Match", &weak)], 412),
        (
            "GET",
            vec![("If-Match", "\"other\""), ("If-Match", &etag)],
            200,
        ),
        ("HEAD", vec![("If-Match", "\"other\"")], 412),
        ("GET", vec![("If-Unmodified-Since", past)], 412),
        ("GET", vec![("If-Unmodified-Since", &lm)], 200),
        ("GET", vec![("If-Unmodified-Since", future)], 200),
        ("GET", vec![("If-Unmodified-Since", "not a date")], 200),
        // If-Unmodified-Since is ignored when If-Match is present.
        (
            "GET",
            vec![("If-Match", &etag), ("If-Unmodified-Since", past)],
            200,
        ),
        // If-Match is evaluated before If-None-Match.
        (
            "GET",
            vec![("If-Match", "\"other\""), ("If-None-Match", &etag)],
            412,
        ),
        (
            "GET",
            vec![("If-Unmodified-Since", past), ("If-None-Match", &etag)],
            412,
        ),
        ("HEAD", vec![("If-None-Match", &etag)], 304),
        (
            "GET",
            vec![("If-Match", &etag), ("If-None-Match", &etag)],
            304,
        ),
        // If-Modified-Since is ignored when If-None-Match is present.
        (
            "GET",
            vec![("If-None-Match", "\"other\""), ("If-Modified-Since", &lm)],
            200,
        ),
        ("GET", vec![("If-Modified-Since", &lm)], 304),
        // A failed precondition wins over a range.
        (
            "GET",
            vec![("If-Match", "\"other\""), ("Range", "bytes=0-1")],
            412,
        ),
        (
            "GET",
            vec![("If-Match", &etag), ("Range", "bytes=0-1")],
            206,
        ),
        // A method the resource refuses answers 405 whatever the
        // preconditions (§13.2.1: refusals take precedence).
        ("DELETE", vec![("If-Match", "\"other\"")], 405),
        ("POST", vec![("If-None-Match", &etag)], 405),
    ];
    for (method, fields, status) in cases {
        let mut request = format!("{method} /hello.txt HTTP/1.1\r\nHost: test\r\n");
        for (name, value) in &fields {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        let r = exchange_then_get(&server, method, &request);
        assert_eq!(r.status, status, "{method} with {fields:?}");
        if status == 200 && method == "GET" {
            assert_eq!(r.body, HELLO_TXT.as_bytes(), "{method} with {fields:?}");
        }
        if status == 412 && method == "GET" {
            assert!(r.text().contains("412 Precondition Failed"), "{}", r.text());
        }
    }
}

fn a_host_that_is_not_uri_host_and_port_is_400(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for host in [
        "test:8080",
        "[::1]:80",
        "127.0.0.1",
        "xn--bcher-kva.example",
    ] {
        let r = exchange_then_get(
            &server,
            "GET",
            &format!("GET /hello.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        );
        assert_ok(&r, &format!("with Host: {host}"), HELLO_TXT.as_bytes());
    }
    for host in ["a b", "a/b", "user@a", "a:b", "[::1", "a%zz", "a:80:81"] {
        let request = format!("GET /hello.txt HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let mut conn = server.connect();
        conn.send(request.as_bytes()).unwrap();
        let r = conn.read_response().unwrap();
        assert_eq!(r.status, 400, "Host: {host}");
        assert!(conn.closed_by_peer(Duration::from_secs(5)), "Host: {host}");
    }
    assert_still_serving(&server);
}

fn methods_are_case_sensitive_unknown_ones_get_501_known_ones_405(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for (method, status) in [
        ("get", 501),
        ("Get", 501),
        ("BREW", 501),
        ("PROPFIND", 405),
        ("PATCH", 405),
        ("TRACE", 405),
        ("PUT", 405),
    ] {
        let r = exchange_then_get(
            &server,
            method,
            &format!("{method} /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n"),
        );
        assert_eq!(r.status, status, "{method}");
        if status == 405 {
            assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"), "{method}");
        } else {
            assert_eq!(r.header("allow"), None, "{method}");
        }
    }
    // The welcome site and the status page answer the same way.
    let welcome = Server::start(mpm, None, &[]);
    for path in ["/", "/server-status"] {
        let r = exchange_then_get(
            &welcome,
            "brew",
            &format!("brew {path} HTTP/1.1\r\nHost: test\r\n\r\n"),
        );
        assert_eq!(r.status, 501, "{path}");
    }
}

fn a_higher_http1_minor_version_is_served_as_http11(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    for _ in 0..2 {
        // Persistent, as 1.1 is: the second request goes on the same connection.
        conn.send(b"GET /hello.txt HTTP/1.7\r\nHost: test\r\n\r\n")
            .unwrap();
        let r = conn.read_response().unwrap();
        assert_ok(&r, "/hello.txt as HTTP/1.7", HELLO_TXT.as_bytes());
        assert_eq!(r.header("connection"), None);
    }
    assert_refused(
        mpm,
        &[],
        b"GET /hello.txt HTTP/3.0\r\nHost: test\r\n\r\n",
        505,
    );
}

fn targets_outside_the_four_forms_are_400(mpm: &str) {
    for request in [
        &b"GET /hello.txt#top HTTP/1.1\r\nHost: test\r\n\r\n"[..],
        b"GET * HTTP/1.1\r\nHost: test\r\n\r\n",
        b"GET hello.txt HTTP/1.1\r\nHost: test\r\n\r\n",
        b"GET http://user@test/hello.txt HTTP/1.1\r\nHost: test\r\n\r\n",
        b"CONNECT /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n",
        b"GET /<x> HTTP/1.1\r\nHost: test\r\n\r\n",
    ] {
        assert_refused(mpm, &[], request, 400);
    }
}

fn options_asterisk_answers_for_the_server(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    let r = exchange_then_get(
        &server,
        "OPTIONS",
        "OPTIONS * HTTP/1.1\r\nHost: test\r\n\r\n",
    );
    assert_eq!(r.status, 204);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    // A method the server knows with a form it may use: 405, not 400.
    let r = exchange_then_get(
        &server,
        "CONNECT",
        "CONNECT test:443 HTTP/1.1\r\nHost: test:443\r\n\r\n",
    );
    assert_eq!(r.status, 405);
}

/// The parts of a `multipart/byteranges` body: (Content-Range, bytes).
fn byteranges(reply: &Reply) -> Vec<(String, Vec<u8>)> {
    let ct = reply.header("content-type").unwrap_or_default();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("Content-Type {ct:?}"));
    assert_eq!(
        reply.header("content-length"),
        Some(reply.body.len().to_string().as_str()),
        "Content-Length is the body's"
    );
    let delimiter = format!("\r\n--{boundary}");
    let body = &reply.body[..];
    let mut parts = Vec::new();
    let mut at = 0;
    loop {
        let rest = &body[at..];
        assert!(
            rest.starts_with(delimiter.as_bytes()),
            "no delimiter at {at}"
        );
        let after = &rest[delimiter.len()..];
        if after == b"--\r\n" {
            return parts;
        }
        let head_end = after.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&after[2..head_end]).into_owned();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        assert!(head.contains("Content-Type: "), "{head}");
        let (first, last) = range
            .strip_prefix("bytes ")
            .and_then(|r| r.split_once('/'))
            .and_then(|(r, _)| r.split_once('-'))
            .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()))
            .unwrap();
        let data_at = head_end + 4;
        let data = after[data_at..data_at + (last - first + 1)].to_vec();
        parts.push((range, data));
        at += delimiter.len() + data_at + (last - first + 1);
    }
}

fn several_ranges_answer_206_multipart_byteranges(mpm: &str) {
    let root = site::docroot_with_big_files();
    let hundred = site::hundred();
    let big = site::big();
    // From memory (small files are cached), from the file by sendfile, and
    // by read+write.
    for flags in [
        &[][..],
        &["--file-cache-max-size", "0"],
        &["--sendfile", "off"],
    ] {
        let server = Server::start(mpm, Some(root.path()), flags);
        let r = server.request(
            "GET",
            "/hundred.bin",
            &[("Range", "bytes=50-59, 0-9,-5")],
            None,
        );
        assert_eq!(r.status, 206, "{flags:?}");
        assert_eq!(r.header("content-range"), None);
        let parts = byteranges(&r);
        let expect = [
            ("bytes 0-9/100".to_string(), hundred[..10].to_vec()),
            ("bytes 50-59/100".to_string(), hundred[50..60].to_vec()),
            ("bytes 95-99/100".to_string(), hundred[95..].to_vec()),
        ];
        assert_eq!(parts, expect, "{flags:?}");
        // Overlapping and adjacent ranges are merged: one part left is a
        // plain 206.
        let r = server.request(
            "GET",
            "/hundred.bin",
            &[("Range", "bytes=0-9,5-19,20-29")],
            None,
        );
        assert_eq!(r.status, 206);
        assert_eq!(r.header("content-range"), Some("bytes 0-29/100"));
        assert_eq!(r.body, &hundred[..30]);
        // A large file, two far-apart ranges, pipelined with a plain GET.
        let mut conn = server.connect();
        let mut requests =
            b"GET /big.bin HTTP/1.1\r\nHost: test\r\nRange: bytes=1000000-1099999,7000000-7000009\r\n\r\n"
                .to_vec();
        requests.extend(get("/hello.txt"));
        conn.send(&requests).unwrap();
        let r = conn.read_response().unwrap();
        assert_eq!(r.status, 206);
        let parts = byteranges(&r);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].1 == big[1_000_000..1_100_000]);
        assert!(parts[1].1 == big[7_000_000..7_000_010]);
        assert_ok(
            &conn.read_response().unwrap(),
            "/hello.txt",
            HELLO_TXT.as_bytes(),
        );
        // HEAD ignores Range; more ranges than the bound answer the whole file.
        let many: Vec<String> = (0..101).map(|i| format!("{0}-{0}", i * 2)).collect();
        let r = server.request(
            "GET",
            "/big.bin",
            &[("Range", &format!("bytes={}", many.join(",")))],
            None,
        );
        assert_eq!(r.status, 200, "a range attack gets the file once");
        assert!(r.body == big);
    }
}

fn a_file_truncated_after_it_was_served_is_announced_with_its_new_length(mpm: &str) {
    let root = site::docroot();
    // Larger than what is kept in memory: its body goes from the descriptor.
    let content = tests::pattern(64 * 1024, 9);
    let path = root.write("shrinks.bin", &content);
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut conn = server.connect();
    conn.send(&get("/shrinks.bin")).unwrap();
    let r = conn.read_response().unwrap();
    assert_eq!(r.header("content-length"), Some("65536"));
    assert!(r.body == content);
    // Cut in place, within the open-file cache's second: the same process
    // answers on this connection, from its cached descriptor.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    conn.send(&get("/shrinks.bin")).unwrap();
    let r = conn.read_response().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-length"),
        Some("1000"),
        "the old length was announced"
    );
    assert!(r.body == content[..1000]);
    // And the connection is still in step.
    conn.send(&get("/hello.txt")).unwrap();
    assert_ok(
        &conn.read_response().unwrap(),
        "/hello.txt",
        HELLO_TXT.as_bytes(),
    );
}

mpm_suite!(
    over transports:
    welcome_site_names_the_mpm_and_has_no_other_pages,
    an_expectation_other_than_100_continue_is_417,
    added_fields_reach_successes_and_always_ones_every_answer,
    files_are_served_with_type_validators_date_and_server,
    head_answers_the_get_headers_without_a_body,
    directory_without_trailing_slash_redirects_to_it,
    directory_with_index_serves_the_index,
    directory_without_index_is_forbidden,
    missing_files_are_not_found,
    methods_other_than_get_and_head_get_405_with_allow,
    options_answers_204_with_allow,
    if_none_match_with_the_etag_answers_304,
    if_modified_since_the_last_modified_answers_304,
    stale_if_modified_since_answers_200,
    byte_range_answers_206_with_content_range,
    suffix_range_answers_the_last_bytes,
    range_starting_past_the_end_answers_416,
    if_range_with_another_etag_answers_the_whole_file,
    paths_and_symlinks_never_escape_the_docroot,
    symlinks_that_stay_inside_the_docroot_are_served,
    sendfile_on_and_off_send_identical_bytes,
    ranges_of_a_large_file_are_identical_with_sendfile_on_and_off,
    pipelined_requests_are_answered_in_order,
    a_keepalive_connection_serves_sequential_requests,
    http10_without_keepalive_is_closed_after_the_response,
    http10_with_keepalive_keeps_the_connection,
    connection_close_on_http11_closes_after_the_response,
    content_length_body_is_consumed_before_the_next_request,
    chunked_body_is_consumed_before_the_next_request,
    body_over_the_limit_is_refused_with_413,
    garbage_request_line_is_400,
    http11_without_host_is_400,
    two_host_headers_are_400,
    content_length_with_transfer_encoding_is_400_and_closes,
    conflicting_content_lengths_are_400,
    unsupported_http_version_is_505,
    request_line_over_the_limit_is_414,
    header_field_over_the_limit_is_431,
    more_header_fields_than_the_limit_is_431,
    transfer_encoding_other_than_chunked_is_400,
    bad_chunk_size_is_400,
    idle_keepalive_connection_is_closed_after_the_keepalive_timeout,
    partial_request_head_times_out_with_408_while_others_are_served,
    many_concurrent_clients_all_get_correct_responses,
    preconditions_follow_rfc_9110_order_and_answer_412,
    a_host_that_is_not_uri_host_and_port_is_400,
    methods_are_case_sensitive_unknown_ones_get_501_known_ones_405,
    a_higher_http1_minor_version_is_served_as_http11,
    targets_outside_the_four_forms_are_400,
    options_asterisk_answers_for_the_server,
    several_ranges_answer_206_multipart_byteranges,
    a_file_truncated_after_it_was_served_is_announced_with_its_new_length,
);
