//! Hardening that every MPM shares: private dotfiles, a docroot that no
//! spelling of a path escapes, request-smuggling shapes refused, and serving
//! processes that never run as root.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tests::{children, run_mpm, RawConn, Server, TempDir};

fn docroot() -> TempDir {
    let root = TempDir::new("hardening");
    root.write("index.html", b"public\n");
    root.write(".env", b"SECRET=1\n");
    root.mkdir(".git");
    root.write(".git/config", b"[core]\n");
    root.mkdir(".well-known");
    root.write(".well-known/acme", b"token\n");
    root
}

fn status(server: &Server, path: &str) -> u16 {
    let mut c = RawConn::connect(server.addr());
    c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    c.read_response().unwrap().status
}

fn dotfiles_are_private_except_well_known(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for path in ["/.env", "/.git/config", "/%2eenv", "/x/../.env", "/.git/"] {
        assert_eq!(status(&server, path), 403, "{path}");
    }
    assert_eq!(status(&server, "/.well-known/acme"), 200);
    assert_eq!(status(&server, "/index.html"), 200);
    let open = Server::start(mpm, Some(root.path()), &["--dotfiles", "allow"]);
    assert_eq!(status(&open, "/.env"), 200);
}

/// Every way of spelling a climb out of the docroot: dot-dot, encoded dots
/// and separators (once and twice), backslashes, NUL, absolute form.
fn no_spelling_of_a_path_escapes_the_docroot(mpm: &str) {
    let outside = TempDir::new("hardening-outside");
    outside.write("secret.txt", b"TOP SECRET\n");
    let sibling = outside
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let root = docroot();
    root.mkdir("sub");
    root.write("sub/page.html", b"sub page\n");
    let server = Server::start(mpm, Some(root.path()), &[]);
    let mut paths = vec![
        "/../../../../etc/passwd".to_string(),
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd".to_string(),
        "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd".to_string(),
        "/..%2f..%2f..%2fetc%2fpasswd".to_string(),
        "/sub%2f..%2f..%2f..%2fetc/passwd".to_string(),
        "/%252e%252e/%252e%252e/etc/passwd".to_string(),
        "/.%2e/.%2e/.%2e/etc/passwd".to_string(),
        "/%2e./%2e./etc/passwd".to_string(),
        "/..\\..\\..\\etc\\passwd".to_string(),
        "/%5c..%5c..%5c..%5cetc%5cpasswd".to_string(),
        "/sub/..%5c..%5c..%5cetc/passwd".to_string(),
        "/index.html%00.txt".to_string(),
        "/%00/../../etc/passwd".to_string(),
        "/sub/%00".to_string(),
        "//etc/passwd".to_string(),
        "/./.././../etc/passwd".to_string(),
        "/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd".to_string(),
        "http://t/../../etc/passwd".to_string(),
        "http://t/%2e%2e/%2e%2e/etc/passwd".to_string(),
    ];
    for prefix in ["/..", "/%2e%2e", "/sub/../..", "/sub/..%2f.."] {
        paths.push(format!("{prefix}/{sibling}/secret.txt"));
    }
    for path in &paths {
        let mut c = RawConn::connect(server.addr());
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
            .unwrap();
        let r = c.read_response().unwrap();
        assert!(
            [400, 403, 404].contains(&r.status),
            "{mpm}: GET {path} answered {}",
            r.status
        );
        let text = r.text();
        assert!(
            !text.contains("root:") && !text.contains("TOP SECRET"),
            "{mpm}: GET {path} leaked {text}"
        );
    }
    // Dot-dot that stays inside is resolved, not refused.
    assert_eq!(status(&server, "/sub/../index.html"), 200);
    assert_eq!(status(&server, "/sub/%2e%2e/index.html"), 200);
    assert_eq!(status(&server, "/sub/page.html"), 200);
}

/// Absolute-form targets (RFC 9112 section 3.2.2) are served on 1.1.
fn absolute_form_targets_are_served(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for target in ["http://t/index.html", "HTTP://t/index.html?x=1"] {
        let mut c = RawConn::connect(server.addr());
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
            .unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(r.status, 200, "{target}");
        assert_eq!(r.body, b"public\n");
    }
}

/// The request-smuggling shapes of the issue, each followed on the same
/// connection by a request that must never be answered.
const SMUGGLING: &[(&str, &[u8])] = &[
    (
        "CL+TE",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "TE+CL",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    ),
    (
        "two different Content-Lengths",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    ),
    (
        "a Content-Length list that disagrees",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\n\r\nhello!",
    ),
    (
        "a Transfer-Encoding other than chunked",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n\r\n",
    ),
    (
        "chunked not last",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
    ),
    (
        "Transfer-Encoding on HTTP/1.0",
        b"POST /index.html HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "obs-fold",
        b"GET /index.html HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n",
    ),
    (
        "obs-fold of Transfer-Encoding",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "a bare CR in a field",
        b"GET /index.html HTTP/1.1\r\nHost: t\rX-A: b\r\n\r\n",
    ),
    (
        "a bare CR ending the request line",
        b"GET /index.html HTTP/1.1\rHost: t\r\n\r\n",
    ),
    (
        "whitespace before the colon",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "a tab before the colon",
        b"GET /index.html HTTP/1.1\r\nHost\t: t\r\n\r\n",
    ),
    ("NUL in a field value", b"GET /index.html HTTP/1.1\r\nHost: t\0\r\n\r\n"),
    ("NUL in a field name", b"GET /index.html HTTP/1.1\r\nHost: t\r\nX\0A: b\r\n\r\n"),
    ("NUL in the target", b"GET /index.html\0 HTTP/1.1\r\nHost: t\r\n\r\n"),
    (
        "a chunk size that is not hex",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n\r\n0\r\n\r\n",
    ),
    (
        "a chunk size with 0x",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "a negative chunk size",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "a chunk size that overflows",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "a chunk longer than its size",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n",
    ),
    (
        "chunk lines ended by bare LF",
        b"POST /index.html HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n",
    ),
];

fn request_smuggling_shapes_are_refused_with_400_and_closed(mpm: &str) {
    let root = docroot();
    let server = Server::start(mpm, Some(root.path()), &[]);
    for (what, shape) in SMUGGLING {
        let mut c = RawConn::connect(server.addr());
        let mut bytes = shape.to_vec();
        bytes.extend_from_slice(b"GET /.env HTTP/1.1\r\nHost: t\r\n\r\n");
        c.send(&bytes).unwrap();
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("{mpm}: {what}: no response: {e}"));
        assert_eq!(r.status, 400, "{mpm}: {what}");
        assert_eq!(r.header("connection"), Some("close"), "{mpm}: {what}");
        assert!(
            c.closed_by_peer(Duration::from_secs(5)),
            "{mpm}: {what}: the connection stayed open, or the smuggled request was answered"
        );
    }
    assert_eq!(status(&server, "/index.html"), 200);
}

/// The real uid of a process, from /proc.
fn uid(pid: u32) -> u32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn serving_processes_run_as_the_configured_user(mpm: &str) {
    if !nix::unistd::geteuid().is_root() {
        tests::skip("only root can change user");
        return;
    }
    let root = docroot();
    // Every server has a master: it keeps root (to bind again on restart)
    // and its children drop, with one serving process or two.
    for (extra, want) in [
        (&["--server-limit", "2"][..], 2),
        (&["--server-limit", "1"][..], 1),
    ] {
        if mpm == "prefork" && want == 1 {
            continue; // prefork sizes itself with its spares
        }
        let args = [&["--user", "nobody", "--group", "nogroup"][..], extra].concat();
        let server = Server::start(mpm, Some(root.path()), &args);
        assert_eq!(status(&server, "/index.html"), 200);
        // Children fork after the `listening on` line: wait for them.
        let kids = tests::wait_for_children(server.pid(), want, &[], Duration::from_secs(10))
            .unwrap_or_else(|| children(server.pid()));
        assert_eq!(uid(server.pid()), 0, "{mpm}: the master should keep root");
        assert!(!kids.is_empty());
        for k in kids {
            // A child drops as its first act after fork: give it that moment.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while uid(k) != 65534 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert_eq!(uid(k), 65534, "{mpm}: child {k} runs as root");
        }
    }
}

#[test]
fn an_unknown_user_is_one_line_and_exit_2() {
    let exit = run_mpm(
        &[
            "serve",
            "--user",
            "no-such-user-here",
            "--listen",
            "127.0.0.1:0",
        ],
        Duration::from_secs(10),
    );
    exit.assert_one_line_error("--user no-such-user-here");
    assert!(exit.stderr.contains("no-such-user-here"), "{}", exit.stderr);
}

tests::mpm_suite!(
    dotfiles_are_private_except_well_known,
    no_spelling_of_a_path_escapes_the_docroot,
    absolute_form_targets_are_served,
    request_smuggling_shapes_are_refused_with_400_and_closed,
    serving_processes_run_as_the_configured_user,
);

/// The accept mutex's lock file has no name: with `TMPDIR` pointing at a
/// directory where a local user has planted a link at the old lock path
/// (`mpm-accept-PID.lock`, planted here for the server's own pid before it
/// runs), nothing is followed or truncated, and the children hold a `memfd`.
#[test]
fn the_accept_mutex_lock_file_has_no_path_to_plant_a_link_at() {
    let tmp = TempDir::new("lock-tmpdir");
    let victim = tmp.write("victim.txt", b"precious\n");
    let root = docroot();
    for kind in ["fcntl", "flock"] {
        // The link is planted by a shell that then becomes the server
        // (`exec` keeps its pid, `$$`), so it is there before the server runs.
        let mut plant = std::process::Command::new("sh");
        plant
            .env("TMPDIR", tmp.path())
            .args(["-c", r#"ln -s "$1" "$2$$.lock"; shift 2; exec "$@""#, "sh"])
            .arg(&victim)
            .arg(tmp.path().join("mpm-accept-"))
            .arg(tests::mpm_bin());
        let mut server = Server::start_command(
            plant,
            "prefork",
            Some(root.path()),
            &["--accept-mutex", kind, "--start-servers", "2"],
        );
        let pid = server.pid();
        assert!(
            tmp.path()
                .join(format!("mpm-accept-{pid}.lock"))
                .is_symlink(),
            "the link was not planted"
        );
        assert_eq!(status(&server, "/index.html"), 200);
        let kids = tests::wait_for_children(pid, 2, &[], Duration::from_secs(10))
            .unwrap_or_else(|| children(pid));
        let holds_memfd = kids.iter().any(|k| {
            std::fs::read_dir(format!("/proc/{k}/fd"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .any(|t| t.to_string_lossy().starts_with("/memfd:mpm-accept-mutex"))
        });
        assert!(holds_memfd, "{kind}: no child holds the nameless lock file");
        assert!(server.stop().success());
        // Once truncated through the link by the master, which stays root.
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n", "{kind}");
        assert!(
            tmp.path()
                .join(format!("mpm-accept-{pid}.lock"))
                .is_symlink(),
            "{kind}: the planted link was touched"
        );
    }
}
