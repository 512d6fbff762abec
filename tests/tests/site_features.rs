//! What nginx and httpd users turn on first, over the wire under every
//! process model: gzip on the fly and precompressed siblings, directory
//! listings, Prometheus metrics, error pages, `Cache-Control` rules; all off
//! by default, and each bad value one line and exit 2.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::time::Duration;

use tests::{mpm_suite, run_mpm, site, Reply, Server, TempDir};

/// Long enough for a start that fails.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("not gzip ({} bytes): {e}", bytes.len()));
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

/// Text that compresses, `lines` lines of it.
fn text(lines: usize) -> Vec<u8> {
    (0..lines)
        .map(|i| format!("<p>paragraph {i}: the quick brown fox jumps over the lazy dog</p>\n"))
        .collect::<String>()
        .into_bytes()
}

/// `METHOD path` with these header lines, keep-alive, on `conn`.
fn ask(conn: &mut tests::RawConn, method: &str, path: &str, headers: &[&str]) -> Reply {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    conn.send(req.as_bytes()).unwrap();
    conn.read_response_to(method)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

// --- Compression -------------------------------------------------------------

fn gzip_bodies_decompress_to_the_file_with_vary_and_an_etag_of_their_own(mpm: &str) {
    let root = TempDir::new("gzip");
    let page = text(100); // kept in memory: compressed once
    let big = text(20_000); // beyond --file-cache-max-size: compressed as sent
    root.write("page.html", &page);
    root.write("big.txt", &big);
    root.write("image.png", &site::image_png());
    let server = Server::start(mpm, Some(root.path()), &["--gzip", "on"]);
    let mut c = server.connect();

    let identity = ask(&mut c, "GET", "/page.html", &[]);
    assert_eq!(identity.header("content-encoding"), None);
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"));
    assert_eq!(identity.body, page);
    for _ in 0..2 {
        let r = ask(
            &mut c,
            "GET",
            "/page.html",
            &["Accept-Encoding: gzip, deflate"],
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_ne!(r.header("etag"), identity.header("etag"));
        assert!(r.body.len() < page.len() / 4, "{} bytes", r.body.len());
        assert_eq!(gunzip(&r.body), page, "the page, byte for byte");
        assert_eq!(
            r.header("content-length"),
            Some(r.body.len().to_string().as_str())
        );
    }
    let gz = ask(&mut c, "GET", "/page.html", &["Accept-Encoding: gzip"]);
    let etag = gz.header("etag").unwrap().to_string();
    // HEAD: the same fields, no body.
    let head = ask(&mut c, "HEAD", "/page.html", &["Accept-Encoding: gzip"]);
    for name in ["content-encoding", "content-length", "etag", "vary"] {
        assert_eq!(head.header(name), gz.header(name), "HEAD differs in {name}");
    }
    // 304 for the gzip body's own validator.
    let not_modified = ask(
        &mut c,
        "GET",
        "/page.html",
        &["Accept-Encoding: gzip", &format!("If-None-Match: {etag}")],
    );
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("vary"), Some("Accept-Encoding"));
    // q=0 refuses gzip.
    let refused = ask(&mut c, "GET", "/page.html", &["Accept-Encoding: gzip;q=0"]);
    assert_eq!(refused.header("content-encoding"), None);
    assert_eq!(refused.body, page);
    // A range is cut from the file itself.
    let part = ask(
        &mut c,
        "GET",
        "/page.html",
        &["Accept-Encoding: gzip", "Range: bytes=5-14"],
    );
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-encoding"), None);
    assert_eq!(part.body, &page[5..15]);
    // A large file: compressed as it is sent, chunked; the connection goes on.
    let r = ask(&mut c, "GET", "/big.txt", &["Accept-Encoding: gzip"]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(gunzip(&r.body), big, "the large file, byte for byte");
    // Not a compressible type: as it is, with no Vary.
    let png = ask(&mut c, "GET", "/image.png", &["Accept-Encoding: gzip"]);
    assert_eq!(png.header("content-encoding"), None);
    assert_eq!(png.header("vary"), None);
    assert_eq!(png.body, site::image_png());
}

fn precompressed_siblings_are_served_to_clients_that_accept_them(mpm: &str) {
    let root = TempDir::new("precompressed");
    let css = text(50);
    let gz = gzip(&css);
    root.write("style.css", &css);
    root.write("style.css.gz", &gz);
    root.write("style.css.br", b"\x0b\x02\x80pretend-brotli\x03");
    root.write("plain.js", b"let x = 1;\n");
    let server = Server::start(mpm, Some(root.path()), &["--precompressed", "on"]);
    let mut c = server.connect();
    let br = ask(&mut c, "GET", "/style.css", &["Accept-Encoding: gzip, br"]);
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert!(br.header("content-type").unwrap().starts_with("text/css"));
    assert_eq!(
        br.body, b"\x0b\x02\x80pretend-brotli\x03",
        "the sibling as it is"
    );
    let g = ask(
        &mut c,
        "GET",
        "/style.css",
        &["Accept-Encoding: br;q=0, gzip"],
    );
    assert_eq!(g.header("content-encoding"), Some("gzip"));
    assert_eq!(g.body, gz);
    assert_eq!(gunzip(&g.body), css);
    let plain = ask(&mut c, "GET", "/style.css", &[]);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, css);
    let etags = [&br, &g, &plain].map(|r| r.header("etag").unwrap().to_string());
    assert!(etags[0] != etags[1] && etags[1] != etags[2] && etags[0] != etags[2]);
    // No sibling: the file, and no Vary.
    let js = ask(&mut c, "GET", "/plain.js", &["Accept-Encoding: gzip, br"]);
    assert_eq!(js.header("content-encoding"), None);
    assert_eq!(js.header("vary"), None);
}

// --- Listings ----------------------------------------------------------------

fn directory_listings_escape_hostile_names_in_html_and_json(mpm: &str) {
    let root = TempDir::new("autoindex");
    let hostile = [
        "<script>alert(1)<\\script>.txt",
        "a&b\"c'd.html",
        "%2e%2e%2f.txt",
        "naïve café.txt",
        "sp ace",
    ];
    for name in hostile {
        root.write(&format!("pub/{name}"), b"x");
    }
    root.write("pub/.env", b"SECRET=1");
    root.mkdir("pub/sub");
    root.symlink("/etc", "pub/etc-link");
    let server = Server::start(mpm, Some(root.path()), &["--autoindex", "on"]);
    let r = server.get("/pub/");
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(!html.contains("<script>"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;\\script&gt;.txt"),
        "{html}"
    );
    assert!(html.contains("a&amp;b&quot;c&#39;d.html"), "{html}");
    assert!(html.contains("href=\"%252e%252e%252f.txt\""), "{html}");
    assert!(
        !html.contains(".env") && !html.contains("etc-link"),
        "{html}"
    );
    // Each link leads to its file.
    for name in hostile {
        let href = html
            .split("href=\"")
            .skip(1)
            .map(|h| h.split('"').next().unwrap())
            .find(|h| {
                percent_decode(h) == name.as_bytes()
                    || percent_decode(h) == [name, "/"].concat().as_bytes()
            })
            .unwrap_or_else(|| panic!("no link to {name:?} in {html}"));
        let got = server.get(&format!("/pub/{href}"));
        assert_eq!(
            (got.status, got.text().as_str()),
            (200, "x"),
            "{name:?} via {href}"
        );
    }
    let json = server.get("/pub/?format=json");
    assert_eq!(json.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let mut expected = hostile.to_vec();
    expected.sort_unstable();
    expected.insert(0, "sub");
    assert_eq!(names, expected, "directories first, then by name");
    assert_eq!(v[0]["type"], "directory");
    assert_eq!(v[1]["type"], "file");
    assert_eq!(v[1]["size"], 1);
    // Off by default elsewhere: a server without --autoindex answers 403.
    let plain = Server::start(mpm, Some(root.path()), &[]);
    assert_eq!(plain.get("/pub/").status, 403);
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

// --- Metrics -----------------------------------------------------------------

fn metrics_parse_with_a_real_parser_and_count_what_was_served(mpm: &str) {
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &["--metrics-path", "/metrics"]);
    let mut c = server.connect();
    for _ in 0..5 {
        assert_eq!(ask(&mut c, "GET", "/hello.txt", &[]).status, 200);
    }
    for _ in 0..3 {
        assert_eq!(ask(&mut c, "GET", "/missing", &[]).status, 404);
    }
    // The layer's own 400, on a connection of its own (it closes).
    let bad = tests::exchange(
        server.addr(),
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    )
    .unwrap();
    assert_eq!(bad.status, 400);
    for path in ["/metrics", "/server-status?format=prometheus"] {
        let r = server.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let text = r.text();
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .unwrap_or_else(|e| panic!("{path}: {e}\n{text}"));
        // Every sample line parsed, each with HELP and a TYPE.
        let lines = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .count();
        assert_eq!(
            scrape.samples.len(),
            lines,
            "{path}: a line did not parse:\n{text}"
        );
        for s in &scrape.samples {
            assert!(
                scrape.docs.contains_key(&s.metric),
                "{} has no HELP",
                s.metric
            );
            assert!(
                !matches!(s.value, prometheus_parse::Value::Untyped(_)),
                "{} has no TYPE",
                s.metric
            );
        }
        let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
            let s = scrape
                .samples
                .iter()
                .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
                .unwrap_or_else(|| panic!("{path}: no {name} {label:?}:\n{text}"));
            match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{name}: {other:?}"),
            }
        };
        let info = scrape
            .samples
            .iter()
            .find(|s| s.metric == "mpm_info")
            .unwrap();
        assert_eq!(info.labels.get("mpm"), Some(mpm));
        // 8 answered by the site before any scrape, and one scrape per path before.
        let requests = value("mpm_requests_total", None);
        assert!(
            (8.0..=10.0).contains(&requests),
            "{path}: {requests} requests"
        );
        assert!(value("mpm_responses_total", Some(("class", "2xx"))) >= 5.0);
        assert_eq!(
            value("mpm_responses_total", Some(("class", "4xx"))),
            4.0,
            "3 404s and a 400"
        );
        assert_eq!(value("mpm_responses_total", Some(("class", "5xx"))), 0.0);
        assert!(value("mpm_connections_total", None) >= 2.0);
        assert!(value("mpm_response_bytes_total", None) >= 5.0 * 13.0);
        assert!(value("mpm_processes", None) >= 1.0);
        assert!(
            value("mpm_workers", Some(("state", "busy"))) >= 1.0,
            "the scrape itself"
        );
        assert!(value("mpm_uptime_seconds", None) >= 0.0);
        assert_eq!(value("mpm_draining", None), 0.0);
    }
}

// --- Error pages and caching ---------------------------------------------------

fn error_pages_replace_the_built_in_page_and_keep_the_status(mpm: &str) {
    let root = site::docroot();
    let not_found = "<!DOCTYPE html><h1>Nothing here</h1>\n";
    let client = "<!DOCTYPE html><h1>Your request was not understood</h1>\n";
    root.write("errors/404.html", not_found.as_bytes());
    root.write("errors/4xx.html", client.as_bytes());
    root.write(".env", b"x");
    let server = Server::start(
        mpm,
        Some(root.path()),
        &[
            "--error-page",
            "404=/errors/404.html",
            "--error-page",
            "400,403,405,414=/errors/4xx.html",
        ],
    );
    let r = server.get("/no/such/page");
    assert_eq!((r.status, r.text().as_str()), (404, not_found));
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert_eq!(
        r.header("content-length"),
        Some(not_found.len().to_string().as_str())
    );
    let r = server.get("/.env");
    assert_eq!((r.status, r.text().as_str()), (403, client));
    let r = server.request("POST", "/hello.txt", &[], Some(b"x"));
    assert_eq!((r.status, r.text().as_str()), (405, client));
    assert!(r.header("allow").is_some(), "the status's own fields stay");
    // The HTTP layer's own errors: a malformed request, a request line too long.
    let r = tests::exchange(
        server.addr(),
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    )
    .unwrap();
    assert_eq!((r.status, r.text().as_str()), (400, client));
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(9000));
    let r = tests::exchange(server.addr(), long.as_bytes()).unwrap();
    assert_eq!((r.status, r.text().as_str()), (414, client));
    // HEAD: the status and length, no body.
    let mut c = server.connect();
    let head = ask(&mut c, "HEAD", "/nope", &[]);
    assert_eq!(head.status, 404);
    assert_eq!(
        head.header("content-length"),
        Some(not_found.len().to_string().as_str())
    );
    // Statuses without a page keep the built-in one; pages are served too.
    let r = ask(&mut c, "GET", "/hundred.bin", &["Range: bytes=500-"]);
    assert_eq!(r.status, 416);
    assert!(r.text().contains("416"), "{}", r.text());
    assert_eq!(ask(&mut c, "GET", "/errors/404.html", &[]).status, 200);
}

fn cache_control_follows_the_expires_rules(mpm: &str) {
    let root = site::docroot();
    root.write("app.css", b"body{}");
    let server = Server::start(
        mpm,
        Some(root.path()),
        &[
            "--expires",
            ".css=30d",
            "--expires",
            "image/*=7d",
            "--expires",
            "text/html=epoch",
        ],
    );
    let mut c = server.connect();
    let css = ask(&mut c, "GET", "/app.css", &[]);
    assert_eq!(css.header("cache-control"), Some("max-age=2592000"));
    let etag = css.header("etag").unwrap().to_string();
    let again = ask(
        &mut c,
        "GET",
        "/app.css",
        &[&format!("If-None-Match: {etag}")],
    );
    assert_eq!(again.status, 304);
    assert_eq!(again.header("cache-control"), Some("max-age=2592000"));
    let png = ask(&mut c, "GET", "/image.png", &[]);
    assert_eq!(png.header("cache-control"), Some("max-age=604800"));
    let html = ask(&mut c, "GET", "/", &[]);
    assert_eq!(html.header("cache-control"), Some("no-cache"));
    let txt = ask(&mut c, "GET", "/hello.txt", &[]);
    assert_eq!(txt.header("cache-control"), None);
    assert_eq!(
        ask(&mut c, "GET", "/missing.css", &[]).header("cache-control"),
        None
    );
}

fn every_feature_is_off_by_default_and_a_toml_file_turns_them_on(mpm: &str) {
    let root = site::docroot();
    root.write("page.html", &text(100));
    root.write("page.html.gz", &gzip(&text(100)));
    root.write("errors/404.html", b"custom 404\n");
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut c = server.connect();
    let r = ask(&mut c, "GET", "/page.html", &["Accept-Encoding: gzip, br"]);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), None);
    assert_eq!(r.header("cache-control"), None);
    assert_eq!(ask(&mut c, "GET", "/noindex/", &[]).status, 403);
    assert_eq!(ask(&mut c, "GET", "/metrics", &[]).status, 404);
    assert!(!ask(&mut c, "GET", "/nope", &[]).text().contains("custom"));
    drop(server);

    let dir = TempDir::new("site-config");
    let file = dir.write(
        "mpm.toml",
        b"gzip = \"on\"\ngzip-level = 9\ngzip-min-length = 10\ngzip-types = [\"text/html\"]\n\
          precompressed = true\nautoindex = \"on\"\nerror-page = [\"404=/errors/404.html\"]\n\
          expires = [\"text/html=1h\"]\nmetrics-path = \"/metrics\"\n",
    );
    let server = Server::start(
        mpm,
        Some(root.path()),
        &["--config", file.to_str().unwrap()],
    );
    let mut c = server.connect();
    let r = ask(&mut c, "GET", "/page.html", &["Accept-Encoding: gzip"]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&r.body), text(100));
    assert_eq!(r.header("cache-control"), Some("max-age=3600"));
    assert!(ask(&mut c, "GET", "/noindex/", &[])
        .text()
        .contains("other.txt"));
    assert_eq!(ask(&mut c, "GET", "/metrics", &[]).status, 200);
    let r = ask(&mut c, "GET", "/nope", &[]);
    assert_eq!((r.status, r.text().as_str()), (404, "custom 404\n"));
}

mpm_suite!(
    gzip_bodies_decompress_to_the_file_with_vary_and_an_etag_of_their_own,
    precompressed_siblings_are_served_to_clients_that_accept_them,
    directory_listings_escape_hostile_names_in_html_and_json,
    metrics_parse_with_a_real_parser_and_count_what_was_served,
    error_pages_replace_the_built_in_page_and_keep_the_status,
    cache_control_follows_the_expires_rules,
    every_feature_is_off_by_default_and_a_toml_file_turns_them_on,
);

// --- Bad values: one line, exit 2 --------------------------------------------

#[test]
fn bad_site_feature_values_are_one_line_and_exit_2() {
    let root = site::docroot();
    let docroot = root.path().to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--gzip", "maybe"], "--gzip"),
        (&["--gzip", "on", "--gzip-level", "0"], "--gzip-level"),
        (&["--gzip", "on", "--gzip-level", "12"], "between 1"),
        (&["--gzip-types", "html"], "'html'"),
        (&["--gzip-min-length", "lots"], "--gzip-min-length"),
        (&["--autoindex", "sometimes"], "--autoindex"),
        (&["--precompressed", "2"], "--precompressed"),
        (&["--error-page", "404"], "CODES=PATH"),
        (&["--error-page", "404=errors/404.html"], "starting with /"),
        (&["--error-page", "404=/no/such.html"], "no such file"),
        (&["--error-page", "200=/index.html"], "300 to 599"),
        (&["--error-page", "304=/index.html"], "no body"),
        (&["--error-page", "abc=/index.html"], "'abc'"),
        (&["--expires", "css=30d"], "css=30d"),
        (&["--expires", ".css=soon"], ".css=soon"),
        (&["--metrics-path", "metrics"], "--metrics-path"),
        (&["--internal", "protected/"], "a path prefix"),
        (&["--internal", "/pro tected/"], "a path prefix"),
    ];
    for (args, mention) in cases {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--docroot", docroot];
        all.extend_from_slice(args);
        let exit = run_mpm(&all, EXIT_WITHIN);
        exit.assert_one_line_error(&format!("{args:?}"));
        assert!(exit.stderr.contains(mention), "{args:?}: {}", exit.stderr);
    }
    // Error pages are files of the docroot: none without one.
    let exit = run_mpm(
        &["check", "--error-page", "404=/errors/404.html"],
        EXIT_WITHIN,
    );
    exit.assert_one_line_error("--error-page without --docroot");
    assert!(exit.stderr.contains("--docroot"), "{}", exit.stderr);
    // The same in a file, naming the file and the key's line.
    let dir = TempDir::new("bad-site-config");
    for (toml, mention) in [
        (
            "gzip-level = 10\ngzip = \"on\"\n",
            "line 1: gzip-level: 10: at most 9",
        ),
        ("\nautoindex = \"perhaps\"\n", "line 2"),
        ("expires = [\".css=1 fortnight\"]\n", "fortnight"),
        ("error-page = [\"404=/missing.html\"]\n", "no such file"),
    ] {
        let file = dir.write("mpm.toml", toml.as_bytes());
        let file = file.to_str().unwrap();
        let exit = run_mpm(
            &["check", "--config", file, "--docroot", docroot],
            EXIT_WITHIN,
        );
        exit.assert_one_line_error(toml);
        assert!(exit.stderr.contains(mention), "{toml}: {}", exit.stderr);
    }
}

// --- A large directory --------------------------------------------------------

/// Peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The serving processes of a server: its children under prefork, else itself.
fn serving(server: &Server) -> Vec<u32> {
    let kids = tests::children(server.pid());
    if kids.is_empty() {
        vec![server.pid()]
    } else {
        kids
    }
}

#[test]
fn a_directory_of_100000_entries_is_listed_streamed_under_every_mpm() {
    const N: usize = 100_000;
    let root = TempDir::new("big-listing");
    let dir = root.mkdir("many");
    for i in 0..N {
        std::fs::File::create(dir.join(format!("f{i:06}"))).unwrap();
    }
    // One server per model, listed at once: the directory is made once.
    std::thread::scope(|scope| {
        for mpm in tests::MPMS {
            let root = &root;
            scope.spawn(move || list_many(mpm, root, N));
        }
    });
}

/// List `/many/` (N entries) from a server of `mpm`.
fn list_many(mpm: &str, root: &TempDir, n: usize) {
    let _turn = tests::cpu_turn();
    let server = Server::start(
        mpm,
        Some(root.path()),
        &[
            "--autoindex",
            "on",
            "--start-servers",
            "2",
            "--min-spare",
            "1",
            "--max-spare",
            "2",
        ],
    );
    // Warm: a first small listing, so that start-up is in the baseline.
    assert_eq!(server.get("/").status, 200);
    let before: Vec<(u32, u64)> = serving(&server)
        .into_iter()
        .map(|p| (p, peak_rss(p)))
        .collect();
    let started = std::time::Instant::now();
    let mut c = server.connect();
    c.send(b"GET /many/ HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let r = c.read_response().unwrap();
    let took = started.elapsed();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "streamed");
    let html = r.text();
    assert_eq!(html.matches("<tr><td><a href=\"f").count(), n, "{mpm}");
    assert!(html.find("f000000").unwrap() < html.find("f099999").unwrap());
    // Bounded: the server never held the listing whole (its peak memory
    // grew by less than the page, which a server building it whole would
    // need at least), and it took nothing like a minute.
    let grown = before
        .iter()
        .map(|&(pid, was)| peak_rss(pid).saturating_sub(was))
        .max()
        .unwrap_or(0);
    assert!(
        grown < html.len() as u64,
        "{mpm}: peak memory grew by {grown} bytes for a {}-byte listing",
        html.len()
    );
    assert!(took < Duration::from_secs(60), "{mpm}: {took:?}");
    // The JSON too (its shape is checked on a small directory above).
    let json = server.get("/many/?format=json").text();
    assert!(json.starts_with('[') && json.ends_with("]\n"), "{mpm}");
    assert_eq!(json.matches("{\"name\":\"f").count(), n, "{mpm}");
}
