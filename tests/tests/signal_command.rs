//! `mpm serve --pid-file` and `mpm signal`: the file holds the master's pid
//! while it runs and is gone after a clean stop; `mpm signal` stops and
//! restarts servers through it; a bad pid file is one line and exit 2.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tests::{run_mpm, site, wait_for_children, Exit, Server, TempDir};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

fn signal(action: &str, pid_file: &Path) -> Exit {
    run_mpm(
        &["signal", action, "--pid-file", pid_file.to_str().unwrap()],
        COMMAND_TIMEOUT,
    )
}

fn start(mpm: &str, root: &TempDir, pid_file: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--pid-file", pid_file.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(mpm, Some(root.path()), &args)
}

fn pid_file_in(dir: &TempDir) -> PathBuf {
    dir.path().join("mpm.pid")
}

fn assert_stops_cleanly(server: &mut Server) {
    let status = server
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("still running; stderr:\n{}", server.stderr_text()));
    assert!(
        status.success(),
        "{status}; stderr:\n{}",
        server.stderr_text()
    );
}

fn the_pid_file_holds_the_pid_and_stop_removes_it(mpm: &str) {
    let root = site::docroot();
    let run = TempDir::new("run");
    let pid_file = pid_file_in(&run);
    let mut server = start(mpm, &root, &pid_file, &[]);
    // Written before the server says it listens.
    let text = std::fs::read_to_string(&pid_file).unwrap();
    assert_eq!(text, format!("{}\n", server.pid()));
    assert_eq!(server.get("/hello.txt").status, 200);
    let exit = signal("stop", &pid_file);
    assert!(exit.status.success(), "{exit:?}");
    assert_stops_cleanly(&mut server);
    assert!(!pid_file.exists(), "the pid file outlived the server");
    // Signals are logged by name, not number.
    assert!(
        server.stderr_text().contains("received SIGTERM: stopping"),
        "{}",
        server.stderr_text()
    );
}

fn graceful_restart_replaces_the_children(mpm: &str) {
    let root = site::docroot();
    let run = TempDir::new("run");
    let pid_file = pid_file_in(&run);
    let mut server = start(mpm, &root, &pid_file, &["--server-limit", "2"]);
    // The master writes the file, not a child.
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        server.pid().to_string()
    );
    let first = wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    let exit = signal("graceful", &pid_file);
    assert!(exit.status.success(), "{exit:?}");
    assert!(
        server.wait_for_stderr("graceful restart", Duration::from_secs(10)),
        "{}",
        server.stderr_text()
    );
    let second = wait_for_children(server.pid(), 2, &first, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no new generation; stderr:\n{}", server.stderr_text()));
    assert_eq!(server.get("/hello.txt").text(), site::HELLO_TXT);
    // The status page shows the new generation once its workers hold slots.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let json = server.get("/server-status?json").text();
        let top = &json[..json.find(r#""workers":["#).unwrap()];
        if top.contains(r#""generation":2,"#) {
            break;
        }
        assert!(Instant::now() < deadline, "{json}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // restart (SIGHUP) replaces them too, and the server keeps serving.
    let exit = signal("restart", &pid_file);
    assert!(exit.status.success(), "{exit:?}");
    wait_for_children(server.pid(), 2, &second, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no new set after restart:\n{}", server.stderr_text()));
    assert_eq!(server.get("/hello.txt").text(), site::HELLO_TXT);
    // Children exiting in restarts leave the master's pid file alone.
    assert!(pid_file.exists());
    let exit = signal("graceful-stop", &pid_file);
    assert!(exit.status.success(), "{exit:?}");
    assert_stops_cleanly(&mut server);
    assert!(!pid_file.exists());
}

/// On a server started with the defaults (one serving process, under the
/// master every server has), `reload` (what nginx users type: SIGHUP, the
/// configuration read again), `restart` and `graceful` each replace the
/// serving processes, exit 0, and the server goes on serving.
fn reload_restart_and_graceful_work_on_a_server_started_with_the_defaults(mpm: &str) {
    let root = site::docroot();
    let run = TempDir::new("run");
    let pid_file = pid_file_in(&run);
    let mut server = start(mpm, &root, &pid_file, &[]);
    // prefork's spares; event's loop per CPU; worker's one process.
    let want = match mpm {
        "prefork" => 8,
        "event" | "uring" => std::thread::available_parallelism().map_or(1, |n| n.get()),
        _ => 1,
    };
    let mut before = wait_for_children(server.pid(), want, &[], Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no children:\n{}", server.stderr_text()));
    for action in ["reload", "restart", "graceful"] {
        let exit = signal(action, &pid_file);
        assert!(exit.status.success(), "{action}: {exit:?}");
        before = wait_for_children(server.pid(), want, &before, Duration::from_secs(15))
            .unwrap_or_else(|| {
                panic!(
                    "{action}: the serving processes were not replaced:\n{}",
                    server.stderr_text()
                )
            });
        assert_eq!(server.get("/hello.txt").text(), site::HELLO_TXT, "{action}");
    }
    assert!(
        !server.stderr_text().contains("ignored"),
        "{}",
        server.stderr_text()
    );
    assert!(signal("graceful-stop", &pid_file).status.success());
    assert_stops_cleanly(&mut server);
    assert!(!pid_file.exists());
}

tests::mpm_suite!(
    the_pid_file_holds_the_pid_and_stop_removes_it,
    graceful_restart_replaces_the_children,
    reload_restart_and_graceful_work_on_a_server_started_with_the_defaults,
);

fn assert_one_line_error(exit: &Exit, code: i32, needle: &str) {
    assert_eq!(exit.status.code(), Some(code), "{exit:?}");
    let err = exit.stderr.trim_end();
    assert!(!err.contains('\n'), "more than one line: {err:?}");
    assert!(err.starts_with("mpm: "), "{err:?}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
}

#[test]
fn bad_pid_files_are_one_line_and_exit_2() {
    let dir = TempDir::new("badpid");
    let missing = dir.path().join("missing.pid");
    assert_one_line_error(&signal("stop", &missing), 2, "missing.pid");
    let garbage = dir.write("garbage.pid", b"not a pid\n");
    assert_one_line_error(&signal("stop", &garbage), 2, "not a process id");
    // Zero or negative would signal a process group.
    for text in ["0\n", "-1\n", ""] {
        let bad = dir.write("group.pid", text.as_bytes());
        assert_one_line_error(&signal("graceful", &bad), 2, "not a process id");
    }
    // A directory is unreadable as a pid file.
    assert_one_line_error(&signal("stop", dir.path()), 2, "pid file");
    let none = run_mpm(&["signal", "stop"], COMMAND_TIMEOUT);
    assert_one_line_error(&none, 2, "--pid-file");
    let unknown = run_mpm(
        &["signal", "relaod", "--pid-file", "/nonexistent"],
        COMMAND_TIMEOUT,
    );
    // The valid actions, and the one meant.
    assert_one_line_error(&unknown, 2, "relaod");
    assert!(
        unknown.stderr.contains("graceful-stop"),
        "{}",
        unknown.stderr
    );
    assert!(unknown.stderr.contains("'reload'"), "{}", unknown.stderr);
}

#[test]
fn a_stale_pid_file_is_one_line_and_exit_1() {
    let dir = TempDir::new("stalepid");
    // Above any pid_max Linux allows, so no process has it.
    let stale = dir.write("stale.pid", b"2147483647\n");
    assert_one_line_error(&signal("stop", &stale), 1, "no such process");
}

#[test]
fn a_pid_file_that_cannot_be_written_is_one_line_and_exit_2() {
    let exit = run_mpm(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pid-file",
            "/nonexistent-dir/mpm.pid",
        ],
        COMMAND_TIMEOUT,
    );
    assert_one_line_error(&exit, 2, "/nonexistent-dir/mpm.pid");
}

/// `mpm signal ACTION --config FILE.toml` takes the pid file from the
/// file's `pid-file` key, whatever other keys the file holds (a program's
/// own among them); a file without the key is one line and exit 2
/// (docs/operations.md, "Signals").
#[test]
fn signal_takes_the_pid_file_from_a_settings_files_pid_file_key() {
    let root = site::docroot();
    let run = TempDir::new("signal-config");
    let pid_file = pid_file_in(&run);
    let mut server = start("worker", &root, &pid_file, &[]);
    let toml = format!(
        "pid-file = {:?}\nlisten = [\"127.0.0.1:0\"]\nan-applications-key = 3\n",
        pid_file.to_str().unwrap()
    );
    let config = run.write("mpm.toml", toml.as_bytes());
    let config = config.to_str().unwrap();
    let without = run.write("other.toml", b"listen = [\"127.0.0.1:0\"]\n");
    assert_one_line_error(
        &run_mpm(
            &["signal", "stop", "--config", without.to_str().unwrap()],
            COMMAND_TIMEOUT,
        ),
        2,
        "no pid-file key",
    );
    let exit = run_mpm(&["signal", "stop", "--config", config], COMMAND_TIMEOUT);
    assert!(exit.status.success(), "{exit:?}");
    assert_stops_cleanly(&mut server);
    assert!(
        server.stderr_text().contains("received SIGTERM: stopping"),
        "{}",
        server.stderr_text()
    );
}
