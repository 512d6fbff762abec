//! The static site's opt-in features, driven through `StaticFiles` directly
//! (no server): content codings with their validators, `Vary`, `HEAD`, 304
//! and ranges; directory listings; `Cache-Control` rules. That the same
//! holds over the wire under every MPM is `tests/tests/site_features.rs`.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use mpm_http::{Body, HttpHandler, Part, Request, Response, Version};
use mpm_site::{CacheRules, Gzip, StaticFiles};

struct Root(PathBuf);

impl Root {
    fn new(label: &str) -> Root {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("mpm-http-site-{}-{n}-{label}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Root(p)
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn get(site: &mut StaticFiles, method: &str, target: &str, headers: &[(&str, &str)]) -> Response {
    site.handle(&Request::for_test(
        method,
        target,
        Version::Http11,
        headers,
        b"",
    ))
}

/// The body's bytes, whatever form it takes.
fn body(r: Response) -> Vec<u8> {
    match r.into_body() {
        Body::Empty => Vec::new(),
        Body::Bytes(b) => b.to_vec(),
        Body::Shared(b) => b.to_vec(),
        Body::File(f) => {
            let mut buf = vec![0; f.len as usize];
            f.file.read_exact_at(&mut buf, f.offset).unwrap();
            buf
        }
        Body::Stream(mut reader) => {
            let mut out = Vec::new();
            reader.read_to_end(&mut out).unwrap();
            out
        }
        Body::Polled(_) => panic!("the site answers no polled body"),
        Body::Parts(parts) => parts
            .into_iter()
            .flat_map(|part| match part {
                Part::Bytes(b) => b.to_vec(),
                Part::File(f) => {
                    let mut buf = vec![0; f.len as usize];
                    f.file.read_exact_at(&mut buf, f.offset).unwrap();
                    buf
                }
            })
            .collect(),
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn text(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("line {i} of some text that compresses\n"))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn gzip_is_chosen_by_q_value_with_its_own_etag_and_vary() {
    let root = Root::new("gzip");
    let page = text(200);
    root.write("page.html", &page);
    root.write("image.png", &text(200));
    root.write("tiny.txt", b"short\n");
    let mut site = StaticFiles::new(root.path())
        .unwrap()
        .gzip(Some(Gzip::default()));

    let plain = get(&mut site, "GET", "/page.html", &[]);
    assert_eq!(plain.header_value("content-encoding"), None);
    assert_eq!(plain.header_value("vary"), Some("Accept-Encoding"));
    let plain_etag = plain.header_value("etag").unwrap().to_string();
    assert_eq!(body(plain), page);

    let gz = get(
        &mut site,
        "GET",
        "/page.html",
        &[("Accept-Encoding", "gzip, br")],
    );
    assert_eq!(gz.header_value("content-encoding"), Some("gzip"));
    assert_eq!(gz.header_value("vary"), Some("Accept-Encoding"));
    assert_eq!(gz.header_value("accept-ranges"), None);
    let gz_etag = gz.header_value("etag").unwrap().to_string();
    assert_ne!(gz_etag, plain_etag);
    assert!(gz_etag.ends_with("-gz\""), "{gz_etag}");
    let compressed = body(gz);
    assert!(compressed.len() < page.len() / 4);
    assert_eq!(gunzip(&compressed), page);

    // Refused with q=0: the file as it is.
    let refused = get(
        &mut site,
        "GET",
        "/page.html",
        &[("Accept-Encoding", "gzip;q=0")],
    );
    assert_eq!(refused.header_value("content-encoding"), None);
    // Not a listed type, or too small: no coding, no Vary.
    for path in ["/image.png", "/tiny.txt"] {
        let r = get(&mut site, "GET", path, &[("Accept-Encoding", "gzip")]);
        assert_eq!(r.header_value("content-encoding"), None, "{path}");
        assert_eq!(r.header_value("vary"), None, "{path}");
    }

    // 304 for each coding's own validator, with Vary; not across codings.
    let r = get(
        &mut site,
        "GET",
        "/page.html",
        &[("Accept-Encoding", "gzip"), ("If-None-Match", &gz_etag)],
    );
    assert_eq!(r.status(), 304);
    assert_eq!(r.header_value("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header_value("etag"), Some(gz_etag.as_str()));
    let r = get(
        &mut site,
        "GET",
        "/page.html",
        &[("If-None-Match", &gz_etag)],
    );
    assert_eq!(
        r.status(),
        200,
        "the gzip validator matched the identity body"
    );

    // HEAD: the GET's fields, Content-Length included (the body is kept).
    let head = get(
        &mut site,
        "HEAD",
        "/page.html",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(head.header_value("content-encoding"), Some("gzip"));
    assert_eq!(head.header_value("etag"), Some(gz_etag.as_str()));
    assert_eq!(head.body_ref().len(), Some(compressed.len() as u64));
}

#[test]
fn a_range_of_a_gzipped_file_is_cut_from_the_file_itself() {
    let root = Root::new("range");
    let page = text(200);
    root.write("page.txt", &page);
    let mut site = StaticFiles::new(root.path())
        .unwrap()
        .gzip(Some(Gzip::default()));
    let r = get(
        &mut site,
        "GET",
        "/page.txt",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=10-19")],
    );
    assert_eq!(r.status(), 206);
    assert_eq!(r.header_value("content-encoding"), None);
    assert_eq!(r.header_value("vary"), Some("Accept-Encoding"));
    assert_eq!(
        r.header_value("content-range"),
        Some(format!("bytes 10-19/{}", page.len()).as_str())
    );
    assert_eq!(body(r), &page[10..20]);
}

#[test]
fn a_large_file_is_gzipped_as_it_is_sent() {
    let root = Root::new("stream");
    let big = text(20_000); // beyond the in-memory size
    root.write("big.txt", &big);
    let mut site = StaticFiles::new(root.path())
        .unwrap()
        .in_memory_up_to(1024)
        .gzip(Some(Gzip::default()));
    let r = get(&mut site, "GET", "/big.txt", &[("Accept-Encoding", "gzip")]);
    assert_eq!(r.header_value("content-encoding"), Some("gzip"));
    assert_eq!(r.body_ref().len(), None, "a stream: chunked on the wire");
    assert!(!site.answers_without_blocking(&Request::for_test(
        "GET",
        "/big.txt",
        Version::Http11,
        &[("Accept-Encoding", "gzip")],
        b""
    )));
    assert_eq!(gunzip(&body(r)), big);
    // HEAD compresses nothing and announces no length.
    let head = get(
        &mut site,
        "HEAD",
        "/big.txt",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(head.header_value("content-encoding"), Some("gzip"));
    assert!(body(head).is_empty());
}

#[test]
fn precompressed_siblings_are_served_when_accepted_and_fresh() {
    let root = Root::new("siblings");
    let css = text(100);
    root.write("style.css", &css);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&css).unwrap();
    let gz = gz.finish().unwrap();
    root.write("style.css.gz", &gz);
    root.write("style.css.br", b"pretend brotli bytes");
    // A sibling older than its file is stale.
    root.write("old.css", &css);
    root.write("old.css.gz", &gz);
    let older = fs::File::options()
        .write(true)
        .open(root.path().join("old.css.gz"))
        .unwrap();
    older
        .set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000))
        .unwrap();
    let mut site = StaticFiles::new(root.path()).unwrap().precompressed(true);

    let br = get(
        &mut site,
        "GET",
        "/style.css",
        &[("Accept-Encoding", "gzip, br")],
    );
    assert_eq!(br.header_value("content-encoding"), Some("br"));
    assert!(br
        .header_value("content-type")
        .unwrap()
        .starts_with("text/css"));
    let br_etag = br.header_value("etag").unwrap().to_string();
    assert_eq!(body(br), b"pretend brotli bytes");

    let g = get(
        &mut site,
        "GET",
        "/style.css",
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(g.header_value("content-encoding"), Some("gzip"));
    assert_eq!(g.header_value("accept-ranges"), Some("bytes"));
    let gz_etag = g.header_value("etag").unwrap().to_string();
    assert_eq!(gunzip(&body(g)), css);

    let plain = get(&mut site, "GET", "/style.css", &[]);
    let plain_etag = plain.header_value("etag").unwrap().to_string();
    assert_eq!(body(plain), css);
    let tags = [&br_etag, &gz_etag, &plain_etag];
    assert!(
        tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2],
        "{tags:?}"
    );

    // A range of the sibling, for a client resuming the gzip download.
    let r = get(
        &mut site,
        "GET",
        "/style.css",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")],
    );
    assert_eq!(r.status(), 206);
    assert_eq!(r.header_value("content-encoding"), Some("gzip"));
    assert_eq!(body(r), &gz[..10]);
    // Several ranges of it: multipart, each part of the sibling's bytes.
    let r = get(
        &mut site,
        "GET",
        "/style.css",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-1,4-5")],
    );
    assert_eq!(r.status(), 206);
    assert_eq!(r.header_value("content-encoding"), Some("gzip"));
    assert!(r
        .header_value("content-type")
        .unwrap()
        .starts_with("multipart/byteranges"));
    let parts = body(r);
    let total = format!("/{}", gz.len());
    assert_eq!(
        String::from_utf8_lossy(&parts)
            .matches(total.as_str())
            .count(),
        2,
        "each part's Content-Range names the sibling's length"
    );
    // A precondition compares with the sibling's own validator.
    let r = get(
        &mut site,
        "GET",
        "/style.css",
        &[("Accept-Encoding", "gzip"), ("If-Match", &gz_etag)],
    );
    assert_eq!(r.status(), 200);
    let r = get(&mut site, "GET", "/style.css", &[("If-Match", &gz_etag)]);
    assert_eq!(r.status(), 412, "the gzip validator is not the file's");

    let stale = get(&mut site, "GET", "/old.css", &[("Accept-Encoding", "gzip")]);
    assert_eq!(stale.header_value("content-encoding"), None);
    assert_eq!(body(stale), css);
}

#[test]
fn listings_escape_sort_and_hide_what_is_not_served() {
    let root = Root::new("listing");
    root.write("dir/b.txt", b"bb");
    root.write("dir/a <script>&\".txt", b"a");
    root.write("dir/.secret", b"s");
    root.write("dir/zsub/x", b"x");
    fs::create_dir_all(root.path().join("dir/asub")).unwrap();
    std::os::unix::fs::symlink("/etc", root.path().join("dir/escape")).unwrap();
    std::os::unix::fs::symlink("b.txt", root.path().join("dir/inside")).unwrap();
    let mut site = StaticFiles::new(root.path()).unwrap().autoindex(true);

    let html = get(&mut site, "GET", "/dir/", &[]);
    assert_eq!(html.status(), 200);
    assert_eq!(
        html.header_value("content-type"),
        Some("text/html; charset=utf-8")
    );
    let page = String::from_utf8(body(html)).unwrap();
    assert!(
        page.contains("<a href=\"a%20%3Cscript%3E%26%22.txt\">a &lt;script&gt;&amp;&quot;.txt</a>"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    assert!(
        !page.contains(".secret") && !page.contains("escape"),
        "{page}"
    );
    assert!(page.contains("href=\"inside\""), "{page}");
    assert!(page.contains("<a href=\"../\">"), "{page}");
    // Directories first, then names in order.
    let order: Vec<usize> = ["asub/", "zsub/", "a%20", "b.txt", "inside"]
        .iter()
        .map(|n| page.find(&format!("href=\"{n}")).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{page}");
    assert!(page.contains("<td class=\"size\">2</td>"), "{page}");

    let json = get(&mut site, "GET", "/dir/?format=json", &[]);
    assert_eq!(json.header_value("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&body(json)).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["asub", "zsub", "a <script>&\".txt", "b.txt", "inside"]
    );
    assert_eq!(v[0]["type"], "directory");
    assert_eq!(v[3]["type"], "file");
    assert_eq!(v[3]["size"], 2);
    assert!(v[3]["mtime"].as_str().unwrap().ends_with(" GMT"));

    // Dotfiles allowed: listed too. Off: 403 as before.
    let mut open = StaticFiles::new(root.path())
        .unwrap()
        .autoindex(true)
        .serve_dotfiles(true);
    assert!(String::from_utf8(body(get(&mut open, "GET", "/dir/", &[])))
        .unwrap()
        .contains(".secret"));
    let mut off = StaticFiles::new(root.path()).unwrap();
    assert_eq!(get(&mut off, "GET", "/dir/", &[]).status(), 403);
}

#[test]
fn cache_control_follows_the_rules_on_200_206_and_304() {
    let root = Root::new("expires");
    root.write("app.css", b"body{}");
    root.write("index.html", b"<p>hi</p>");
    let rules = CacheRules::parse(&[".css=30d", "text/html=epoch"]).unwrap();
    let mut site = StaticFiles::new(root.path()).unwrap().expires(rules);
    let css = get(&mut site, "GET", "/app.css", &[]);
    assert_eq!(css.header_value("cache-control"), Some("max-age=2592000"));
    let etag = css.header_value("etag").unwrap().to_string();
    let not_modified = get(&mut site, "GET", "/app.css", &[("If-None-Match", &etag)]);
    assert_eq!(not_modified.status(), 304);
    assert_eq!(
        not_modified.header_value("cache-control"),
        Some("max-age=2592000")
    );
    let part = get(&mut site, "GET", "/app.css", &[("Range", "bytes=0-1")]);
    assert_eq!(part.status(), 206);
    assert_eq!(part.header_value("cache-control"), Some("max-age=2592000"));
    assert_eq!(
        get(&mut site, "GET", "/", &[]).header_value("cache-control"),
        Some("no-cache")
    );
    assert_eq!(
        get(&mut site, "GET", "/missing", &[]).header_value("cache-control"),
        None
    );
}

#[test]
fn a_hot_page_is_compressed_once_and_kept_while_it_is_unchanged() {
    let root = Root::new("hot");
    root.write("hot.html", &text(200));
    let mut site = StaticFiles::new(root.path())
        .unwrap()
        .gzip(Some(Gzip::default()));
    let shared = |site: &mut StaticFiles| match get(
        site,
        "GET",
        "/hot.html",
        &[("Accept-Encoding", "gzip")],
    )
    .into_body()
    {
        Body::Shared(bytes) => bytes,
        other => panic!("expected the kept compressed body, got {other:?}"),
    };
    let first = shared(&mut site);
    let ask = Request::for_test(
        "GET",
        "/hot.html",
        Version::Http11,
        &[("Accept-Encoding", "gzip")],
        b"",
    );
    // Compressed now: an event loop may answer it.
    assert!(site.answers_without_blocking(&ask));
    assert!(std::sync::Arc::ptr_eq(&first, &shared(&mut site)));
    // The cache checks the file again after a second; unchanged, the
    // compressed body is carried over, not made again.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(std::sync::Arc::ptr_eq(&first, &shared(&mut site)));
    // Changed: compressed anew.
    root.write("hot.html", &text(300));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let changed = shared(&mut site);
    assert!(!std::sync::Arc::ptr_eq(&first, &changed));
    assert_eq!(gunzip(&changed), text(300));
}
