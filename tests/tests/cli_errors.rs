//! Bad command lines and configuration files: each is one line on stderr and
//! exit code 2, before anything is served; a good configuration file is
//! honoured, and the command line wins over it.

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
