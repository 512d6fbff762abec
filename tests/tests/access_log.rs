//! The access log under every MPM: line shapes (common and combined), every
//! write mode and buffer setting serving the right bytes and logging every
//! request, buffered lines reaching the file while idle, nothing lost on a
//! graceful stop, restart or rotation, and a full disk that does not stop
//! serving and is reported once.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tests::site::{self, HELLO_TXT};
use tests::{mpm_suite, run_mpm, Server, TempDir};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait until the log has at least `n` lines; the lines.
fn wait_lines(path: &Path, n: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let got = lines(path);
        if got.len() >= n || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The part of a line after the time stamp, having checked what precedes it:
/// `127.0.0.1 - - [30/Nov/2026:20:40:52 +0000] `.
fn after_time(line: &str) -> &str {
    let rest = line
        .strip_prefix("127.0.0.1 - - [")
        .unwrap_or_else(|| panic!("bad start: {line:?}"));
    let (time, rest) = rest.split_at(26);
    let b = time.as_bytes();
    assert!(
        b[2] == b'/' && b[6] == b'/' && b[11] == b':' && b[20] == b' ',
        "bad time in {line:?}"
    );
    assert!(matches!(b[21], b'+' | b'-'), "bad zone in {line:?}");
    rest.strip_prefix("] ")
        .unwrap_or_else(|| panic!("bad time end: {line:?}"))
}

fn start(mpm: &str, root: &Path, log: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--access-log", log.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(mpm, Some(root), &args)
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.path().join("access.log")
}

fn common_lines_show_status_and_body_bytes(mpm: &str) {
    let root = site::docroot();
    let logs = TempDir::new("logs");
    let log = log_path(&logs);
    let server = start(mpm, root.path(), &log, &[]);
    let mut c = server.connect();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let ok = c.read_response().unwrap();
    assert_eq!(ok.status, 200);
    let etag = ok.header("etag").unwrap().to_string();
    c.send(
        format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    assert_eq!(c.read_response().unwrap().status, 304);
    c.send(b"HEAD /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response_to("HEAD").unwrap().status, 200);
    c.send(b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let missing = c.read_response().unwrap();
    assert_eq!(missing.status, 404);
    // Lines are written once a response is sent: wait, so that the next
    // connection's line comes after these.
    assert_eq!(wait_lines(&log, 4, Duration::from_secs(10)).len(), 4);
    // A repeated Host: 400, answered by the HTTP layer itself.
    let mut bad = server.connect();
    bad.send(b"GET /x\"y HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        .unwrap();
    let refused = bad.read_response().unwrap();
    assert_eq!(refused.status, 400);

    let got = wait_lines(&log, 5, Duration::from_secs(10));
    let tails: Vec<&str> = got.iter().map(|l| after_time(l)).collect();
    assert_eq!(
        tails,
        [
            format!("\"GET /hello.txt HTTP/1.1\" 200 {}", HELLO_TXT.len()),
            "\"GET /hello.txt HTTP/1.1\" 304 -".to_string(),
            "\"HEAD /hello.txt HTTP/1.1\" 200 -".to_string(),
            format!("\"GET /missing HTTP/1.1\" 404 {}", missing.body.len()),
            format!("\"GET /x\\\"y HTTP/1.1\" 400 {}", refused.body.len()),
        ]
    );
}

fn error_answers_of_the_http_layer_are_logged(mpm: &str) {
    let root = site::docroot();
    let logs = TempDir::new("logs");
    let log = log_path(&logs);
    let server = start(
        mpm,
        root.path(),
        &log,
        &[
            "--limit-request-body",
            "10",
            "--timeout",
            "1s",
            "--request-header-timeout",
            "1s",
            "--limit-request-line",
            "100",
            "--limit-request-fields",
            "5",
        ],
    );
    // 413: a body over the limit.
    let mut c = server.connect();
    c.send(b"POST /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n")
        .unwrap();
    let too_large = c.read_response().unwrap();
    assert_eq!(too_large.status, 413);
    assert_eq!(wait_lines(&log, 1, Duration::from_secs(10)).len(), 1);
    // 408: a head that never ends.
    let mut slow = server.connect();
    slow.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    let timed_out = slow.read_response().unwrap();
    assert_eq!(timed_out.status, 408);
    let got = wait_lines(&log, 2, Duration::from_secs(10));
    let tails: Vec<&str> = got.iter().map(|l| after_time(l)).collect();
    assert_eq!(
        tails,
        [
            format!("\"POST /hello.txt HTTP/1.1\" 413 {}", too_large.body.len()),
            match timed_out.body.len() {
                0 => "\"GET /hello.txt HTTP/1.1\" 408 -".to_string(),
                n => format!("\"GET /hello.txt HTTP/1.1\" 408 {n}"),
            },
        ]
    );
    // 400, 414, 431 and 505, each on its own connection (docs/operations.md,
    // "Logs": every error the HTTP layer answers itself is logged).
    let many_fields: String = (0..10).map(|i| format!("X-{i}: 1\r\n")).collect();
    let long = "a".repeat(200);
    std::fs::write(&log, b"").unwrap();
    for (request, status) in [
        (
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_string(),
            400,
        ),
        (format!("GET /{long} HTTP/1.1\r\nHost: t\r\n\r\n"), 414),
        (
            format!("GET / HTTP/1.1\r\nHost: t\r\n{many_fields}\r\n"),
            431,
        ),
        ("GET / HTTP/3.0\r\nHost: t\r\n\r\n".to_string(), 505),
    ] {
        let mut c = server.connect();
        c.send(request.as_bytes()).unwrap();
        let answer = c.read_response().unwrap();
        assert_eq!(answer.status, status, "{request:?}");
        let got = wait_lines(&log, 1, Duration::from_secs(10));
        assert!(
            got.len() == 1 && got[0].ends_with(&format!("\" {status} {}", answer.body.len())),
            "{status} is not the line logged: {got:#?}"
        );
        std::fs::write(&log, b"").unwrap();
    }
}

fn combined_lines_add_referer_and_user_agent_escaped(mpm: &str) {
    let root = site::docroot();
    let logs = TempDir::new("logs");
    let log = log_path(&logs);
    let server = start(mpm, root.path(), &log, &["--log-format", "combined"]);
    let mut c = server.connect();
    c.send(
        b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nReferer: http://r/\"q\"\r\n\
          User-Agent: agent\\1 caf\xc3\xa9\r\n\r\n",
    )
    .unwrap();
    assert_eq!(c.read_response().unwrap().status, 200);
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().status, 200);
    let got = wait_lines(&log, 2, Duration::from_secs(10));
    assert_eq!(got.len(), 2, "{got:?}");
    let n = HELLO_TXT.len();
    assert_eq!(
        after_time(&got[0]),
        format!(
            "\"GET /hello.txt HTTP/1.1\" 200 {n} \"http://r/\\\"q\\\"\" \"agent\\\\1 caf\\xc3\\xa9\""
        )
    );
    assert_eq!(
        after_time(&got[1]),
        format!("\"GET /hello.txt HTTP/1.1\" 200 {n} \"-\" \"-\"")
    );
}

/// Fetch a mix of files on one keep-alive connection, checking every byte.
fn fetch_mix(server: &Server, rounds: usize) -> usize {
    let mut c = server.connect();
    let small = site::small();
    let mut sent = 0;
    for i in 0..rounds {
        let (path, want): (&str, &[u8]) = match i % 3 {
            0 => ("/hello.txt", HELLO_TXT.as_bytes()),
            1 => ("/small.bin", &small),
            _ => ("/zero.bin", b""),
        };
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(r.status, 200, "{path}");
        assert!(r.body == want, "{path}: wrong bytes");
        sent += 1;
    }
    sent
}

fn every_write_mode_serves_correct_bytes_and_logs_every_request_to_a_graceful_stop(mpm: &str) {
    let root = site::docroot_with_big_files();
    for mode in [
        &["--log-write", "writev", "--log-buffer", "0"][..],
        &["--log-write", "copy", "--log-buffer", "0"],
        &["--log-buffer", "4096"],
        &["--log-buffer", "1000000"],
    ] {
        let logs = TempDir::new("logs");
        let log = log_path(&logs);
        let mut server = start(mpm, root.path(), &log, mode);
        let mut served = fetch_mix(&server, 30);
        // The big file, whose body goes by sendfile, logged with its length.
        let big = server.get("/big.bin");
        assert!(big.body == site::big(), "{mode:?}: /big.bin differs");
        served += 1;
        assert!(server.stop_gracefully().success());
        let got = lines(&log);
        assert_eq!(got.len(), served, "{mode:?}: {got:?}");
        for l in &got {
            let tail = after_time(l);
            assert!(tail.starts_with("\"GET /") && tail.contains(" 200 "), "{l}");
        }
        assert!(
            got.iter()
                .any(|l| l.ends_with(&format!(" 200 {}", site::BIG_LEN))),
            "no line for /big.bin with its length"
        );
        assert!(got.iter().filter(|l| l.ends_with(" 200 -")).count() == 10);
    }
}

fn buffered_lines_reach_the_file_within_a_second_when_idle(mpm: &str) {
    let root = site::docroot();
    let logs = TempDir::new("logs");
    let log = log_path(&logs);
    let server = start(mpm, root.path(), &log, &["--log-buffer", "65536"]);
    let mut c = server.connect();
    for _ in 0..3 {
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(c.read_response().unwrap().status, 200);
    }
    // The connection stays open and idle: the buffer is flushed by time.
    let got = wait_lines(&log, 3, Duration::from_secs(10));
    assert_eq!(got.len(), 3, "buffered lines never reached the file");
    drop(c);
}

/// Keep fetching on new connections until told to stop; count the answers.
fn client_loop(server: &Server, stop: &AtomicBool, served: &AtomicUsize) {
    while !stop.load(Ordering::Relaxed) {
        // A connection each: no pooled connection to a child that restarts.
        let r = server.get("/hello.txt");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), HELLO_TXT);
        served.fetch_add(1, Ordering::Relaxed);
    }
}

/// `mv` the log while a client loop runs, signal, keep going: the lines in
/// the old and new files are the requests served, none torn.
fn rotate(mpm: &str, extra: &[&str], signal: i32) {
    let root = site::docroot();
    let logs = TempDir::new("logs");
    let log = log_path(&logs);
    let moved = logs.path().join("access.log.1");
    let mut server = start(mpm, root.path(), &log, extra);
    let stop = AtomicBool::new(false);
    let served = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let client = s.spawn(|| client_loop(&server, &stop, &served));
        let wait_served = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while served.load(Ordering::Relaxed) < n && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait_served(50);
        std::fs::rename(&log, &moved).unwrap();
        let pid = libc::pid_t::try_from(server.pid()).unwrap();
        tests::kill(pid, signal);
        let at = served.load(Ordering::Relaxed);
        // Until the new file has lines of its own.
        let deadline = Instant::now() + Duration::from_secs(20);
        while lines(&log).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        wait_served(at + 50);
        stop.store(true, Ordering::Relaxed);
        client.join().unwrap();
    });
    assert!(server.stop().success());
    let (old, new) = (lines(&moved), lines(&log));
    // Lines buffered at the signal may all land in the new file (one
    // process reopens under its buffers), so only the new file must have some.
    assert!(!new.is_empty(), "nothing was written to the reopened log");
    for l in old.iter().chain(&new) {
        assert_eq!(
            after_time(l),
            "\"GET /hello.txt HTTP/1.1\" 200 13",
            "torn: {l:?}"
        );
    }
    assert_eq!(
        old.len() + new.len(),
        served.load(Ordering::Relaxed),
        "old {} + new {} lines",
        old.len(),
        new.len()
    );
}

fn rotation_by_graceful_restart_loses_no_line(mpm: &str) {
    // A master (prefork always has one), buffered lines in the old children.
    rotate(
        mpm,
        &["--server-limit", "2", "--log-buffer", "4096"],
        libc::SIGUSR1,
    );
}

fn rotation_with_one_serving_process_loses_no_line(mpm: &str) {
    // One serving process (prefork: its spares) under the master every
    // server has (event's default is one per CPU: asked for one here).
    let one: &[&str] = if matches!(mpm, "event" | "uring") {
        &["--server-limit", "1", "--log-buffer", "4096"]
    } else {
        &["--log-buffer", "4096"]
    };
    rotate(mpm, one, libc::SIGUSR1);
}

fn rotation_by_restart_sighup_loses_no_line(mpm: &str) {
    rotate(mpm, &["--server-limit", "2"], libc::SIGHUP);
}

fn a_full_disk_keeps_serving_and_is_logged_once(mpm: &str) {
    let root = site::docroot_with_big_files();
    for extra in [&["--log-buffer", "0"][..], &["--log-buffer", "512"]] {
        let mut server = start(mpm, root.path(), Path::new("/dev/full"), extra);
        for _ in 0..3 {
            assert_eq!(fetch_mix(&server, 12), 12);
        }
        assert!(
            server.wait_for_stderr("access log /dev/full", Duration::from_secs(10)),
            "no error-log line about the full disk"
        );
        assert!(server.stop().success());
        let text = server.stderr_text();
        let about: Vec<&str> = text.lines().filter(|l| l.contains("/dev/full")).collect();
        assert_eq!(about.len(), 1, "{about:#?}");
        assert!(about[0].contains("[error]") && about[0].contains("No space left"));
    }
}

fn pipelined_answers_sent_in_one_write_are_each_logged_in_order(mpm: &str) {
    let root = site::docroot();
    let logs = TempDir::new("logs");
    let log = log_path(&logs);
    let server = start(mpm, root.path(), &log, &[]);
    let mut c = server.connect();
    // Open (and cache) the files first: then the pipelined answers need
    // nothing slow and go out together.
    for path in ["/hello.txt", "/index.html"] {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        c.read_response().unwrap();
    }
    let paths = [
        "/hello.txt",
        "/index.html",
        "/nope",
        "/hello.txt",
        "/index.html",
    ];
    let all: String = paths
        .iter()
        .map(|p| format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n"))
        .collect();
    c.send(all.as_bytes()).unwrap();
    let mut expected = Vec::new();
    for path in paths {
        let r = c.read_response().unwrap();
        expected.push(format!(
            "\"GET {path} HTTP/1.1\" {} {}",
            r.status,
            r.body.len()
        ));
    }
    let got = wait_lines(&log, 2 + paths.len(), Duration::from_secs(10));
    let got: Vec<&str> = got[2..].iter().map(|l| after_time(l)).collect();
    assert_eq!(got, expected, "{mpm}");
}

fn notices_show_at_the_error_level_and_lines_carry_level_and_pid(mpm: &str) {
    let server = Server::start(mpm, None, &["--log-level", "error"]);
    let text = server.stderr_text();
    let listening = text.lines().find(|l| l.contains(" listening on ")).unwrap();
    assert!(listening.starts_with('['), "{listening}");
    assert!(listening.contains("] [notice] [pid "), "{listening}");
}

mpm_suite!(
    common_lines_show_status_and_body_bytes,
    error_answers_of_the_http_layer_are_logged,
    combined_lines_add_referer_and_user_agent_escaped,
    every_write_mode_serves_correct_bytes_and_logs_every_request_to_a_graceful_stop,
    buffered_lines_reach_the_file_within_a_second_when_idle,
    rotation_by_graceful_restart_loses_no_line,
    rotation_with_one_serving_process_loses_no_line,
    rotation_by_restart_sighup_loses_no_line,
    a_full_disk_keeps_serving_and_is_logged_once,
    pipelined_answers_sent_in_one_write_are_each_logged_in_order,
    notices_show_at_the_error_level_and_lines_carry_level_and_pid,
);

#[test]
fn bad_log_settings_are_one_line_and_exit_2() {
    let logs = TempDir::new("logs");
    let dir = logs.path().to_str().unwrap();
    for (args, needle) in [
        (
            vec!["--access-log", "/no/such/dir/access.log"],
            "/no/such/dir",
        ),
        (vec!["--access-log", dir], dir),
        (vec!["--log-format", "json"], "json"),
        (vec!["--log-write", "mmap"], "mmap"),
        (vec!["--log-buffer", "999999999"], "--log-buffer"),
        (vec!["--log-level", "loud"], "loud"),
        (
            vec!["--error-log", "/no/such/dir/error.log"],
            "/no/such/dir",
        ),
    ] {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend(&args);
        let exit = run_mpm(&all, Duration::from_secs(20));
        exit.assert_one_line_error(&format!("{args:?}"));
        assert!(exit.stderr.contains(needle), "{args:?}: {}", exit.stderr);
    }
}

#[test]
fn the_error_log_goes_to_its_file() {
    let logs = TempDir::new("logs");
    let errors = logs.path().join("error.log");
    let mut child = std::process::Command::new(tests::mpm_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--error-log"])
        .arg(&errors)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&errors)
        .unwrap_or_default()
        .contains(" listening on ")
    {
        assert!(
            Instant::now() < deadline,
            "no listening line in the error log"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    tests::kill(pid, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&errors).unwrap();
    assert!(
        text.contains("[notice]") && text.contains("stopped"),
        "{text}"
    );
}

#[test]
fn log_settings_are_toml_keys_and_bad_values_there_are_one_line() {
    let dir = TempDir::new("logs");
    let log = dir.path().join("access.log");
    let good = dir.write(
        "good.toml",
        format!(
            "access-log = {:?}\nlog-format = \"combined\"\nlog-write = \"writev\"\n\
             log-buffer = 8192\nlog-level = \"info\"\n",
            log.to_str().unwrap()
        )
        .as_bytes(),
    );
    let exit = run_mpm(
        &["check", "--config", good.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert!(exit.status.success(), "{}", exit.stderr);
    let bad = dir.write("bad.toml", b"log-format = \"json\"\n");
    let exit = run_mpm(
        &["check", "--config", bad.to_str().unwrap()],
        Duration::from_secs(20),
    );
    exit.assert_one_line_error("a bad log setting in the file");
    assert!(
        exit.stderr.contains("json") && exit.stderr.contains("line 1"),
        "{}",
        exit.stderr
    );
}

/// `--error-log FILE` is reopened with the access log (docs/operations.md,
/// "Logs"): moved away, then SIGUSR1, and the master's next lines go to a
/// new file at the path.
#[test]
fn the_error_log_is_reopened_by_a_graceful_restart() {
    let logs = TempDir::new("logs");
    let errors = logs.path().join("error.log");
    let moved = logs.path().join("error.log.1");
    let mut child = std::process::Command::new(tests::mpm_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--error-log"])
        .arg(&errors)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for("no listening line in the error log", &|| {
        std::fs::read_to_string(&errors)
            .unwrap_or_default()
            .contains(" listening on ")
    });
    std::fs::rename(&errors, &moved).unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    tests::kill(pid, libc::SIGUSR1);
    wait_for("the error log was not opened again", &|| errors.exists());
    tests::kill(pid, libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    let old = std::fs::read_to_string(&moved).unwrap();
    let new = std::fs::read_to_string(&errors).unwrap();
    assert!(old.contains("received SIGUSR1"), "{old}");
    assert!(
        new.contains("received SIGTERM") && new.contains("stopped") && !old.contains("stopped"),
        "old:\n{old}\nnew:\n{new}"
    );
}
