//! An outsider's program: `tests/outsider`, a crate outside the workspace
//! that depends on the `mpm` package by path and uses only its public API
//! (a key-value service with routes, flags of its own, shared state and a
//! streamed upload). Built once with cargo, then run under every MPM: what
//! an embedder gets from the public API must hold for all three.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tests::{mpm_bin, run_program, RawConn, Reply, Server, TempDir};

/// The outsider's binary, built (once per test process) into this
/// workspace's target directory, so that the dependencies it shares with
/// the workspace are compiled once.
fn kv_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile_dir = mpm_bin().parent().unwrap().to_path_buf();
        let target = profile_dir.parent().unwrap();
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("outsider/Cargo.toml");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.arg("build")
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        // Run as from a shell: what cargo sets for this test (the tests
        // package's CARGO_* variables, the library path) would reach the
        // environment the shared dependencies were built in, and the
        // workspace's next `cargo test` would compile them (ring, rustls and
        // what uses them) again.
        for (name, _) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            if (name.starts_with("CARGO_") && name != "CARGO_HOME")
                || matches!(name, "LD_LIBRARY_PATH" | "OUT_DIR")
            {
                cmd.env_remove(name);
            }
        }
        let out = cmd.output().expect("running cargo");
        assert!(
            out.status.success(),
            "building tests/outsider failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        profile_dir.join("kv")
    })
}

fn start(mpm: &str, extra: &[&str]) -> Server {
    Server::start_program(kv_bin(), mpm, extra)
}

fn request(conn: &mut RawConn, method: &str, path: &str, body: &[u8]) -> Reply {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n");
    if !body.is_empty() || method == "PUT" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    conn.send(&bytes).unwrap();
    conn.read_response().unwrap()
}

#[test]
fn the_program_names_itself_in_help_version_and_errors() {
    let version = run_program(kv_bin(), &["--version"], Duration::from_secs(10));
    assert_eq!(version.stdout.trim(), "kv 0.3.1");
    let help = run_program(kv_bin(), &["--help"], Duration::from_secs(10));
    assert!(
        help.stdout.contains("A key-value service on mpm"),
        "{}",
        help.stdout
    );
    assert!(help.stdout.contains("Usage: kv"), "{}", help.stdout);
    let serve = run_program(kv_bin(), &["serve", "--help"], Duration::from_secs(10));
    assert!(serve.stdout.contains("Options of kv:"), "{}", serve.stdout);
    assert!(serve.stdout.contains("--max-keys <N>"), "{}", serve.stdout);
    // The settings struct's doc comment does not become the commands'
    // description: serve and check keep their own.
    for text in [&help.stdout, &serve.stdout] {
        assert!(!text.contains("The service's own settings"), "{text}");
        assert!(text.contains("Serve until SIGTERM or SIGINT"), "{text}");
    }
    // The static site's settings mean nothing here: not listed, refused.
    for hidden in [
        "--docroot",
        "--dotfiles",
        "--sendfile",
        "--file-cache-max-size",
    ] {
        assert!(!serve.stdout.contains(hidden), "{hidden} listed");
    }
    let docroot = run_program(
        kv_bin(),
        &["check", "--docroot", "/nonexistent"],
        Duration::from_secs(10),
    );
    docroot.assert_one_line_error("--docroot");
    assert_eq!(
        docroot.stderr.trim(),
        "kv: error: --docroot: not a setting of kv"
    );
}

#[test]
fn its_own_settings_are_checked_and_read_from_the_file_under_the_command_line() {
    let t = Duration::from_secs(10);
    let bad = run_program(kv_bin(), &["check", "--max-keys", "0"], t);
    bad.assert_one_line_error("--max-keys 0");
    assert!(
        bad.stderr.contains("--max-keys must be at least 1"),
        "{}",
        bad.stderr
    );
    let junk = run_program(kv_bin(), &["check", "--max-keys", "many"], t);
    junk.assert_one_line_error("--max-keys many");

    let dir = TempDir::new("kv-config");
    let file = dir.write("kv.toml", b"max-request-workers = 3\nmax-keys = 0\n");
    let file = file.to_str().unwrap();
    // The file's value is checked as the flag's is...
    run_program(kv_bin(), &["check", "--config", file], t).assert_one_line_error("file max-keys 0");
    // ...and the command line wins over it.
    let ok = run_program(kv_bin(), &["check", "--config", file, "--max-keys", "5"], t);
    assert_eq!(ok.status.code(), Some(0), "{}", ok.stderr);
    assert!(
        ok.stdout.starts_with("kv: configuration OK"),
        "{}",
        ok.stdout
    );
    // A key of the wrong type, and one the program hides, name their line.
    let typed = dir.write("typed.toml", b"mpm = \"worker\"\nmax-keys = \"lots\"\n");
    let e = run_program(kv_bin(), &["check", "--config", typed.to_str().unwrap()], t);
    e.assert_one_line_error("max-keys = \"lots\"");
    assert!(
        e.stderr.contains("max-keys") || e.stderr.contains("usize"),
        "{}",
        e.stderr
    );
    // The line comes from the parser's span of the value at fault.
    assert!(e.stderr.contains("line 2: max-keys: "), "{}", e.stderr);
    let hidden = dir.write("hidden.toml", b"mpm = \"worker\"\ndocroot = \"/srv\"\n");
    let e = run_program(
        kv_bin(),
        &["check", "--config", hidden.to_str().unwrap()],
        t,
    );
    e.assert_one_line_error("docroot in the file");
    assert!(
        e.stderr
            .contains("line 2: `docroot` is not a setting of kv"),
        "{}",
        e.stderr
    );
}

/// Four connections held open at once: under prefork, four children; under
/// worker and event, two processes.
fn store_is_shared_by_every_process(mpm: &str) {
    let processes = match mpm {
        "prefork" => ["--start-servers", "4"],
        _ => ["--server-limit", "2"],
    };
    let server = start(
        mpm,
        &[&["--max-request-workers", "4"][..], &processes].concat(),
    );
    let mut conns: Vec<RawConn> = (0..4).map(|_| server.connect()).collect();
    let mut pids = HashSet::new();
    for (i, c) in conns.iter_mut().enumerate() {
        let r = request(
            c,
            "PUT",
            &format!("/kv/key-{i}"),
            format!("value {i}").as_bytes(),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        pids.insert(r.header("x-kv-pid").unwrap().to_string());
    }
    // Every connection (every process) reads what every other one wrote.
    for c in conns.iter_mut() {
        for i in 0..4 {
            let r = request(c, "GET", &format!("/kv/key-{i}"), b"");
            assert_eq!((r.status, r.text()), (200, format!("value {i}")));
        }
    }
    let r = request(&mut conns[0], "PUT", "/kv/key-1", b"changed");
    assert_eq!(r.status, 200, "a replaced value is 200");
    assert_eq!(
        request(&mut conns[3], "GET", "/kv/key-1", b"").text(),
        "changed"
    );
    assert_eq!(
        request(&mut conns[2], "DELETE", "/kv/key-2", b"").status,
        204
    );
    assert_eq!(request(&mut conns[1], "GET", "/kv/key-2", b"").status, 404);
    let stats = request(&mut conns[1], "GET", "/stats", b"").text();
    assert!(stats.contains(r#""keys":3,"puts":5,"gets":18"#), "{stats}");
    if mpm == "prefork" {
        // A prefork child serves one connection at a time: four processes.
        assert_eq!(pids.len(), 4, "{pids:?}");
    }
}

fn routes_answer_404_405_and_decode_their_parameters(mpm: &str) {
    let server = start(mpm, &[]);
    let mut c = server.connect();
    assert_eq!(
        request(&mut c, "PUT", "/kv/caf%C3%A9%2F1", b"x").status,
        201
    );
    let r = request(&mut c, "GET", "/kv/caf%C3%A9%2F1", b"");
    assert_eq!((r.status, r.text()), (200, "x".to_string()));
    let r = request(&mut c, "GET", "/kv/missing?default=caf%C3%A9+au+lait", b"");
    assert_eq!(r.text(), "café au lait");
    let r = request(&mut c, "GET", "/kv/missing", b"");
    assert_eq!(
        (r.status, r.text()),
        (404, r#"{"error":"no such key"}"#.to_string())
    );
    let r = request(&mut c, "POST", "/kv/x", b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, PUT, DELETE, OPTIONS"));
    assert_eq!(request(&mut c, "GET", "/nowhere", b"").status, 404);
    // The value limit is the program's own flag: 413 with the reason.
    let r = request(&mut c, "PUT", "/kv/big", &[b'v'; 5000]);
    assert_eq!(r.status, 413, "{}", r.text());
    // Its identity is on every response; the status page is off by default.
    assert_eq!(r.header("server"), Some("kv/0.3.1"));
    assert_eq!(request(&mut c, "GET", "/server-status", b"").status, 404);
    // Any status has its phrase; a handler may close the connection.
    c.send(b"GET /teapot HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let teapot = c.read_response().unwrap();
    assert_eq!(teapot.status, 418);
    assert_eq!(teapot.header("content-length"), Some("0"));
    let mut c = server.connect();
    c.send(b"GET /bye HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_by_peer(Duration::from_secs(5)));
}

fn fnv1a(bytes: &[u8]) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn uploads_are_streamed_with_the_body_limit_and_timeout_enforced(mpm: &str) {
    let server = start(
        mpm,
        &[
            "--limit-request-body",
            "4000000",
            "--request-body-timeout",
            "1",
            "--request-body-min-rate",
            "0",
        ],
    );
    let body = tests::pattern(3 << 20, 7);
    // By Content-Length, in pieces, with 100-continue.
    let mut c = server.connect();
    c.send(
        format!(
            "PUT /upload/a HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(c.read_head().unwrap().status, 100);
    for piece in body.chunks(256 * 1024) {
        c.send(piece).unwrap();
    }
    let r = c.read_response().unwrap();
    let want = format!(
        r#"{{"name":"a","bytes":{},"fnv1a":"{}","streamed":true}}"#,
        body.len(),
        fnv1a(&body)
    );
    assert_eq!((r.status, r.text()), (201, want));
    // Chunked, on the same connection, followed by a pipelined request.
    let mut req =
        b"PUT /upload/b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in body[..1 << 20].chunks(100_000) {
        req.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        req.extend_from_slice(piece);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\nGET /kv/none?default=next HTTP/1.1\r\nHost: t\r\n\r\n");
    c.send(&req).unwrap();
    let r = c.read_response().unwrap();
    assert!(r.text().contains(&fnv1a(&body[..1 << 20])), "{}", r.text());
    assert_eq!(c.read_response().unwrap().text(), "next");
    // The handler answers while the body is still arriving: it read what
    // it needed, and the rest is never waited for (the connection closes).
    let mut c = server.connect();
    c.send(b"PUT /upload/e?limit=1000 HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n")
        .unwrap();
    c.send(&body[..70_000]).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!(
        (r.status, r.text()),
        (413, "upload over its limit of 1000 bytes\n".into())
    );
    assert_eq!(r.header("connection"), Some("close"));
    // Past --limit-request-body: 413, whatever the handler would answer.
    let mut c = server.connect();
    let mut req =
        b"PUT /upload/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in body.chunks(500_000).chain(body.chunks(500_000)) {
        req.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        req.extend_from_slice(piece);
        req.extend_from_slice(b"\r\n");
    }
    let _ = c.send(&req); // the server may stop reading at the limit
    assert_eq!(c.read_response().unwrap().status, 413);
    // A body that stops arriving: 408 once the body timeout passes.
    let started = Instant::now();
    let mut c = server.connect();
    c.send(b"PUT /upload/d HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\nonly this")
        .unwrap();
    assert_eq!(c.read_response().unwrap().status, 408);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    let _ = c.stream().flush();
    // The server still serves.
    assert_eq!(
        request(&mut server.connect(), "GET", "/kv/x?default=up", b"").text(),
        "up"
    );
}

tests::mpm_suite!(
    store_is_shared_by_every_process,
    routes_answer_404_405_and_decode_their_parameters,
    uploads_are_streamed_with_the_body_limit_and_timeout_enforced,
);

/// `.ci/run` lints the outsider in the workspace's target directory: the
/// one `CARGO_TARGET_DIR` names when it is set, never a hard-coded `target`
/// (which wrote some 300 MB into the checkout of a CI that set it).
#[test]
fn ci_lints_the_outsider_where_cargo_target_dir_says() {
    let ci = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/run");
    let script = std::fs::read_to_string(&ci).unwrap();
    let target_dirs: Vec<&str> = script
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split("--target-dir ").skip(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or(""))
        .collect();
    assert!(
        !target_dirs.is_empty(),
        "{} lints the outsider with no --target-dir",
        ci.display()
    );
    for dir in target_dirs {
        assert_eq!(
            dir,
            "\"${CARGO_TARGET_DIR:-target}\"",
            "in {}",
            ci.display()
        );
    }
}

/// The guide's `Cargo.toml` (docs/embedding.md, "The smallest program")
/// names every crate its examples use by path (`clap::Args`,
/// `serde::Deserialize`): an outsider who copies it builds them all, where
/// it once lacked `clap` and `serde` (8 errors for the kv service).
#[test]
fn the_guides_cargo_toml_names_every_crate_its_examples_use() {
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/embedding.md");
    let text = std::fs::read_to_string(&guide).unwrap();
    let (mut toml, mut rust) = (String::new(), String::new());
    let mut block: Option<&str> = None;
    for line in text.lines() {
        match (block, line.strip_prefix("```")) {
            (None, Some(lang)) => {
                block = Some(if lang.starts_with("toml") {
                    "toml"
                } else if lang.starts_with("rust") {
                    "rust"
                } else {
                    "other"
                })
            }
            (Some(_), Some(_)) => block = None,
            (Some("toml"), None) => toml.push_str(&format!("{line}\n")),
            (Some("rust"), None) => rust.push_str(&format!("{line}\n")),
            _ => {}
        }
    }
    let declared: HashSet<&str> = toml
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim()))
        .collect();
    // The first segment of each path: `clap::Args` names `clap`, not `Args`.
    let mut used = HashSet::new();
    let bytes = rust.as_bytes();
    for (at, _) in rust.match_indices("::") {
        let start = rust[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &rust[start..at];
        let leads = start < 2 || &bytes[start - 2..start] != b"::";
        if leads && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            used.insert(name);
        }
    }
    let builtin = ["std", "core", "alloc", "crate", "self", "super", "mpm"];
    let missing: Vec<&&str> = used
        .iter()
        .filter(|n| !builtin.contains(n) && !declared.contains(**n))
        .collect();
    assert!(
        missing.is_empty(),
        "{} uses {missing:?} but its Cargo.toml does not name them (it names {declared:?})",
        guide.display()
    );
    assert!(
        declared.contains("clap") && declared.contains("serde"),
        "{declared:?}"
    );
}
