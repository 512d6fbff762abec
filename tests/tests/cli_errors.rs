//! Bad command lines and configuration files: each is one line on stderr and
//! exit code 2, before anything is served; a good configuration file is
//! honoured, and the command line wins over it.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::time::Duration;

use tests::{mpm_suite, run_mpm, site, Exit, Server, TempDir};

/// Long enough for a start that fails, short enough if one wrongly serves.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// Assert a failed run printed exactly one `mpm: ...` line mentioning
/// every one of `mentions`, nothing on stdout, and exited with code 2.
fn assert_one_line_exit_2(what: &str, exit: &Exit, mentions: &[&str]) {
    let lines: Vec<&str> = exit.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one line on stderr, got:\n{}",
        exit.stderr
    );
    let line = lines[0];
    assert!(line.starts_with("mpm: "), "{what}: {line:?}");
    for m in mentions {
        assert!(line.contains(m), "{what}: {line:?} does not mention {m:?}");
    }
    assert_eq!(exit.status.code(), Some(2), "{what}: {}", exit.status);
    assert!(exit.stdout.is_empty(), "{what}: stdout {:?}", exit.stdout);
}

/// `mpm serve --mpm MPM --listen 127.0.0.1:0 ARGS...`, run to its exit.
fn serve(mpm: &str, args: &[&str]) -> Exit {
    let mut all = vec!["serve", "--mpm", mpm, "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    run_mpm(&all, EXIT_WITHIN)
}

// --- Not tied to one process model --------------------------------------------

#[test]
fn unknown_mpm_is_one_line_and_exit_2() {
    let exit = run_mpm(
        &["serve", "--mpm", "bogus", "--listen", "127.0.0.1:0"],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2("--mpm bogus", &exit, &["bogus"]);
}

#[test]
fn unknown_flag_is_one_line_and_exit_2() {
    let exit = run_mpm(
        &["serve", "--listen", "127.0.0.1:0", "--no-such-flag", "1"],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2("--no-such-flag", &exit, &["--no-such-flag"]);
}

#[test]
fn one_line_errors_keep_the_missing_name_the_valid_values_and_a_suggestion() {
    let bench = run_mpm(&["bench"], EXIT_WITHIN);
    assert_one_line_exit_2(
        "bench without a URL",
        &bench,
        &["<URL>", "usage: mpm bench"],
    );
    let signal = run_mpm(
        &["signal", "relaod", "--pid-file", "/nonexistent"],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2(
        "a misspelt action",
        &signal,
        &[
            "'relaod'",
            "stop, restart, reload, graceful, graceful-stop, upgrade",
            "'reload'",
        ],
    );
    let flag = run_mpm(&["serve", "--lisen", "127.0.0.1:0"], EXIT_WITHIN);
    assert_one_line_exit_2("a misspelt flag", &flag, &["'--lisen'", "'--listen'"]);
    let value = run_mpm(&["serve", "--accept-mutex", "fcnlt"], EXIT_WITHIN);
    assert_one_line_exit_2(
        "a misspelt value",
        &value,
        &["fcntl, flock, pthread, none", "'fcntl'"],
    );
    let dir = TempDir::new("config");
    let key = dir.write("key.toml", b"mpm = \"worker\"\nbaklog = 3\n");
    let exit = run_mpm(&["check", "--config", key.to_str().unwrap()], EXIT_WITHIN);
    assert_one_line_exit_2(
        "a misspelt key",
        &exit,
        &["line 2", "`baklog`", "did you mean `backlog`"],
    );
    // Not every key listed: one line a person reads (it was 857 characters).
    assert!(exit.stderr.len() < 240, "{}", exit.stderr);
    let enum_value = dir.write("value.toml", b"mpm = \"wroker\"\n");
    let exit = run_mpm(
        &["check", "--config", enum_value.to_str().unwrap()],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2(
        "a misspelt value in the file",
        &exit,
        &["prefork, worker, event", "did you mean 'worker'"],
    );
}

#[test]
fn serve_help_shows_every_default() {
    let help = run_mpm(&["serve", "--help"], EXIT_WITHIN);
    assert!(help.status.success(), "{help:?}");
    let text = help.stdout;
    for shown in [
        "[default: worker]",
        "[default: 127.0.0.1:8080]",
        "[default: 1024]",
        "[default: 60s]",
        "[default: 20s]",
        "[default: /server-status]",
        "[default: pthread]",
    ] {
        assert!(text.contains(shown), "serve --help lacks {shown}:\n{text}");
    }
    // Every setting's entry says its default.
    let entries: Vec<&str> = text.split("\n      --").skip(1).collect();
    assert!(entries.len() > 40, "{text}");
    for entry in entries {
        let flag = entry.split_whitespace().next().unwrap_or_default();
        if ["help", "config"].contains(&flag) {
            continue;
        }
        assert!(
            entry.contains("[default: "),
            "--{flag} shows no default:\n{entry}"
        );
    }
}

#[test]
fn sizes_and_durations_beyond_their_bounds_are_one_line_and_exit_2() {
    // Once a segmentation fault on the first /server-status.
    let exit = run_mpm(
        &["check", "--threads-per-child", "72057594037927936"],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2(
        "a huge --threads-per-child",
        &exit,
        &["--threads-per-child", "at most"],
    );
    for (flag, value) in [
        ("--server-limit", "1000000"),
        ("--max-request-workers", "18446744073709551615"),
        ("--limit-request-line", "18446744073709551615"),
        ("--file-cache-max-size", "18446744073709551615"),
        ("--keepalive-timeout", "1e300"),
    ] {
        let exit = run_mpm(&["check", flag, value], EXIT_WITHIN);
        assert_one_line_exit_2(
            &format!("{flag} {value}"),
            &exit,
            &[flag.trim_start_matches('-')],
        );
    }
    // The integer form in a file once skipped the duration cap, and the
    // event loop panicked on the first keep-alive request.
    let dir = TempDir::new("config");
    let file = dir.write("huge.toml", b"keepalive-timeout = 18446744073709551615\n");
    let exit = run_mpm(&["check", "--config", file.to_str().unwrap()], EXIT_WITHIN);
    assert_one_line_exit_2("an integer beyond TOML's", &exit, &["line 1"]);
    let file = dir.write("long.toml", b"keepalive-timeout = 9223372036854775807\n");
    let exit = run_mpm(&["check", "--config", file.to_str().unwrap()], EXIT_WITHIN);
    assert_one_line_exit_2(
        "an integer duration past the bound",
        &exit,
        &["too long a duration"],
    );
}

#[test]
fn a_negative_number_is_the_settings_value_and_named_with_it() {
    // clap once took `-1` for a short flag: "unexpected argument '-1'
    // found", naming neither the setting nor the values it takes.
    for (flag, value, values) in [
        ("--backlog", "-1", "from 1 to 4294967295"),
        ("--proxy-keepalive", "-1", "from 0 to 10000"),
        ("--keepalive-timeout", "-5", "try 5, 2.5s or 500ms"),
        // Not a number: clap took it for a flag of its own ("unexpected
        // argument '-5'"), naming neither the setting nor what it takes.
        ("--keepalive-timeout", "-5s", "try 5, 2.5s or 500ms"),
        ("--gzip-level", "-3x", "from 1 to 9"),
        ("--server-limit", "-2", "or auto"),
    ] {
        let exit = run_mpm(&["check", flag, value], EXIT_WITHIN);
        let quoted = format!("'{value}'");
        assert_one_line_exit_2(&format!("{flag} {value}"), &exit, &[flag, &quoted, values]);
    }
    // A flag whose value was left out is still told so, not given the next.
    let exit = run_mpm(
        &["check", "--keepalive-timeout", "--listen", "127.0.0.1:0"],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2(
        "a value left out",
        &exit,
        &["a value is required for '--keepalive-timeout"],
    );
}

#[test]
fn a_number_too_large_for_its_type_is_told_the_settings_own_range() {
    // Once "from 0 to 4294967295" for a setting that takes 1 to 9.
    for (flag, value, values) in [
        ("--gzip-level", "4294967296", "from 1 to 9"),
        (
            "--proxy-keepalive",
            "18446744073709551616",
            "from 0 to 10000",
        ),
    ] {
        let exit = run_mpm(&["check", flag, value], EXIT_WITHIN);
        assert_one_line_exit_2(&format!("{flag} {value}"), &exit, &[flag, values]);
    }
    let dir = TempDir::new("config");
    for (text, says) in [
        ("proxy-keepalive = -1\n", "proxy-keepalive: '-1' is not a whole number from 0 to 10000"),
        ("gzip-level = 4294967296\n", "from 1 to 9"),
        (
            "[[proxy]]\nprefix = \"/a/\"\nupstreams = [{ url = \"http://127.0.0.1:9\", weight = 4294967296 }]\n",
            "weight: '4294967296' is not a whole number from 1 to 1000",
        ),
        (
            "[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://127.0.0.1:9\"]\nhealth_rise = -1\n",
            "health_rise: '-1' is not a whole number from 1 to 10000",
        ),
    ] {
        let file = dir.write("bounds.toml", text.as_bytes());
        let exit = run_mpm(&["check", "--config", file.to_str().unwrap()], EXIT_WITHIN);
        assert_one_line_exit_2(text, &exit, &[says]);
    }
}

#[test]
fn workers_too_many_for_the_processes_name_the_flags_given() {
    // Once "--threads-per-child 262144: at most 20000" (and prefork's
    // "--server-limit 262144"), naming a flag that was not given.
    let exit = run_mpm(
        &[
            "check",
            "--mpm",
            "worker",
            "--max-request-workers",
            "262144",
        ],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2(
        "worker",
        &exit,
        &[
            "--max-request-workers 262144",
            "--server-limit 1",
            "at most 20000",
        ],
    );
    let exit = run_mpm(
        &[
            "check",
            "--mpm",
            "prefork",
            "--max-request-workers",
            "262144",
        ],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2(
        "prefork",
        &exit,
        &["--max-request-workers 262144", "at most 20000"],
    );
    // A count given is named as given.
    let exit = run_mpm(&["check", "--threads-per-child", "20001"], EXIT_WITHIN);
    assert_one_line_exit_2(
        "--threads-per-child 20001",
        &exit,
        &["--threads-per-child 20001", "at most 20000"],
    );
}

#[test]
fn check_refuses_the_log_and_pid_files_serve_cannot_open() {
    // `check` once said OK to each of these, which `serve` refused.
    let dir = TempDir::new("outputs");
    let missing = dir.path().join("no-such-dir").join("x");
    let missing = missing.to_str().unwrap();
    let a_dir = dir.path().to_str().unwrap();
    for flag in ["--pid-file", "--access-log", "--error-log"] {
        for (value, says) in [
            (missing, "no directory"),
            (a_dir, "a directory, expected a file"),
            ("", "expected a file name"),
        ] {
            for command in ["check", "serve"] {
                let exit = run_mpm(
                    &[command, "--listen", "127.0.0.1:0", flag, value],
                    EXIT_WITHIN,
                );
                assert_one_line_exit_2(
                    &format!("{command} {flag} '{value}'"),
                    &exit,
                    &[flag, says],
                );
            }
        }
    }
}

#[test]
fn a_bad_tls_session_cache_is_refused_without_a_tls_listener_too() {
    // Once read only with a TLS listener: any word passed without one.
    let exit = run_mpm(&["check", "--tls-session-cache", "lots"], EXIT_WITHIN);
    assert_one_line_exit_2(
        "--tls-session-cache lots",
        &exit,
        &["--tls-session-cache 'lots'", "from 1 to", "or off"],
    );
}

#[test]
fn listen_takes_a_host_name_for_every_address_it_has() {
    let check = run_mpm(&["check", "--listen", "localhost:8080"], EXIT_WITHIN);
    assert!(check.status.success(), "{check:?}");
    assert!(check.stdout.contains("127.0.0.1:8080"), "{}", check.stdout);
    // Held (not merely free a moment ago) until the server listens on it.
    let held = tests::origin::port_for_a_server();
    let port = held.addr().port();
    let named = format!("localhost:{port}");
    let server = Server::start("worker", None, &["--listen", &named]);
    drop(held);
    let r = tests::exchange(
        format!("127.0.0.1:{port}").parse().unwrap(),
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    drop(server);
    let unknown = run_mpm(
        &["check", "--listen", "no-such-host.invalid:80"],
        EXIT_WITHIN,
    );
    assert_one_line_exit_2("an unknown host", &unknown, &["no-such-host.invalid"]);
}

// --- For each process model ----------------------------------------------------

fn unparsable_listen_address_is_one_line_and_exit_2(mpm: &str) {
    let exit = run_mpm(&["serve", "--mpm", mpm, "--listen", "nowhere"], EXIT_WITHIN);
    assert_one_line_exit_2("--listen nowhere", &exit, &["nowhere"]);
}

fn address_in_use_is_one_line_and_exit_2(mpm: &str) {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let exit = run_mpm(&["serve", "--mpm", mpm, "--listen", &addr], EXIT_WITHIN);
    assert_one_line_exit_2("an address in use", &exit, &[&addr]);
}

fn missing_docroot_is_one_line_and_exit_2(mpm: &str) {
    let dir = TempDir::new("gone");
    let missing = dir.path().join("not-here");
    let missing = missing.to_str().unwrap();
    let exit = serve(mpm, &["--docroot", missing]);
    assert_one_line_exit_2("a missing docroot", &exit, &[missing]);
}

fn zero_max_request_workers_is_one_line_and_exit_2(mpm: &str) {
    let exit = serve(mpm, &["--max-request-workers", "0"]);
    assert_one_line_exit_2("--max-request-workers 0", &exit, &["max-request-workers"]);
}

fn bad_body_timeout_flags_are_one_line_and_exit_2(mpm: &str) {
    let exit = serve(mpm, &["--request-body-timeout", "0s"]);
    assert_one_line_exit_2(
        "--request-body-timeout 0s",
        &exit,
        &["request-body-timeout"],
    );
    let exit = serve(mpm, &["--request-body-min-rate", "fast"]);
    assert_one_line_exit_2(
        "--request-body-min-rate fast",
        &exit,
        &["request-body-min-rate"],
    );
}

fn config_file_with_an_unknown_key_is_one_line_and_exit_2(mpm: &str) {
    let dir = TempDir::new("config");
    let file = dir.write("mpm.toml", b"keepalive-timeout = \"2s\"\n\nbogus-key = 1\n");
    let file = file.to_str().unwrap();
    let exit = serve(mpm, &["--config", file]);
    assert_one_line_exit_2("an unknown key", &exit, &[file, "bogus-key", "line 3"]);
}

fn config_file_with_a_bad_value_is_one_line_and_exit_2(mpm: &str) {
    let dir = TempDir::new("config");
    let file = dir.write(
        "mpm.toml",
        b"max-request-workers = 4\nkeepalive-timeout = \"soon\"\n",
    );
    let file = file.to_str().unwrap();
    let exit = serve(mpm, &["--config", file]);
    assert_one_line_exit_2("a bad value", &exit, &[file, "soon"]);
}

fn config_file_is_honoured_and_flags_override_it(mpm: &str) {
    let dir = TempDir::new("config");
    let file = dir.write(
        "mpm.toml",
        b"keepalive-timeout = \"300ms\"\nmax-request-workers = 3\nsendfile = \"off\"\n",
    );
    let file = file.to_str().unwrap();
    // The welcome page reports the configuration it runs with.
    let server = Server::start(mpm, None, &["--config", file, "--max-request-workers", "5"]);
    let page = server.get("/").text();
    assert!(page.contains("300ms idle timeout"), "file ignored:\n{page}");
    assert!(page.contains("--sendfile off"), "file ignored:\n{page}");
    assert!(
        page.contains("5 request workers"),
        "the command line did not win:\n{page}"
    );
    // And the file's keep-alive timeout is the one in force.
    let root = site::docroot();
    let server = Server::start(mpm, Some(root.path()), &["--config", file]);
    let mut conn = server.connect();
    conn.send(b"GET /hello.txt HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    assert_eq!(conn.read_response().unwrap().status, 200);
    assert!(
        conn.closed_by_peer(Duration::from_secs(8)),
        "keepalive-timeout from the file was not applied"
    );
}

mpm_suite!(
    unparsable_listen_address_is_one_line_and_exit_2,
    address_in_use_is_one_line_and_exit_2,
    missing_docroot_is_one_line_and_exit_2,
    zero_max_request_workers_is_one_line_and_exit_2,
    bad_body_timeout_flags_are_one_line_and_exit_2,
    config_file_with_an_unknown_key_is_one_line_and_exit_2,
    config_file_with_a_bad_value_is_one_line_and_exit_2,
    config_file_is_honoured_and_flags_override_it,
);

/// `mpm check | head -0`: a reader that closes its end before the report
/// is written ends the report, not with a panic (`println!`'s, with a
/// backtrace where `RUST_BACKTRACE` is set), and the verdict (exit 0)
/// stands.
#[test]
fn check_whose_reader_went_away_ends_quietly_with_its_verdict() {
    let mut child = std::process::Command::new(tests::mpm_bin())
        .args(["check", "--listen", "127.0.0.1:9"])
        .env("RUST_BACKTRACE", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader gone before a byte is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
