//! Binary upgrade on SIGUSR2: a new master takes the listening sockets over
//! while clients keep sending, no request fails, the pid file names the new
//! master and the old one exits; a new binary that fails leaves the old
//! master serving (rollback).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use tests::load::Load;
use tests::{RawConn, Server, TempDir};

const PAGE: &[u8] = b"upgraded or not, served\n";
const REQUEST: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n";

fn extra(mpm: &str) -> Vec<&'static str> {
    if mpm == "prefork" {
        vec![
            "--start-servers",
            "3",
            "--min-spare",
            "1",
            "--max-spare",
            "8",
        ]
    } else {
        vec!["--server-limit", "2", "--max-request-workers", "32"]
    }
}

fn start(mpm: &str, root: &TempDir, pid_file: &Path, more: &[&str]) -> Server {
    root.write("index.html", PAGE);
    let mut args = extra(mpm);
    args.extend(["--pid-file", pid_file.to_str().unwrap()]);
    args.extend(more);
    Server::start(mpm, Some(root.path()), &args)
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Gone, or a zombie nobody has reaped yet (the old master's orphan).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// A master not ours to wait for (the old master started it): stopped with
/// SIGTERM when dropped, killed if it does not go.
struct Adopted(u32);

impl Adopted {
    fn stop(&self) -> bool {
        tests::kill(self.0 as libc::pid_t, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if process_gone(self.0) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        if !self.stop() {
            tests::kill(self.0 as libc::pid_t, libc::SIGKILL);
        }
    }
}

fn an_upgrade_under_load_fails_no_request_and_the_old_master_exits(mpm: &str) {
    let root = TempDir::new("upgrade");
    let pid_file = root.path().join("mpm.pid");
    let mut server = start(mpm, &root, &pid_file, &[]);
    let old = server.pid();
    assert_eq!(read_pid(&pid_file), Some(old));
    let load = Load::start(server.addr(), 6, "/index.html");
    std::thread::sleep(Duration::from_millis(300));
    // Connected, the request not yet sent: it must be served by one
    // generation or the other, whichever accepted it.
    let mut waiting = RawConn::connect(server.addr());
    // `mpm signal upgrade` sends SIGUSR2 to the pid in the pid file.
    let sent = tests::run_mpm(
        &[
            "signal",
            "upgrade",
            "--pid-file",
            pid_file.to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    assert!(sent.status.success(), "{}", sent.stderr);

    let deadline = Instant::now() + Duration::from_secs(20);
    let new = loop {
        match read_pid(&pid_file) {
            Some(p) if p != old => break p,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "the pid file still names {old}:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let new = Adopted(new);
    assert!(
        server.wait_for_stderr("drains", Duration::from_secs(20)),
        "the new master never reported ready:\n{}",
        server.stderr_text()
    );
    waiting.send(REQUEST).unwrap();
    let r = waiting.read_response().unwrap_or_else(|e| {
        panic!(
            "a connection made during the hand-over was dropped: {e}\n{}",
            server.stderr_text()
        )
    });
    assert_eq!((r.status, &r.body[..]), (200, PAGE));

    let deadline = Instant::now() + Duration::from_secs(20);
    while server.is_running() {
        assert!(
            Instant::now() < deadline,
            "the old master did not exit:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.wait_exit(Duration::ZERO).unwrap().success());
    // The new generation alone serves now.
    std::thread::sleep(Duration::from_millis(300));
    let tally = load.finish();
    tally.assert_no_failures(50, &server.stderr_text());
    assert!(
        !tests::children(new.0).is_empty(),
        "the new master has no children"
    );
    assert!(!root.path().join("mpm.pid.oldbin").exists());
    let mut c = RawConn::connect(server.addr());
    c.send(REQUEST).unwrap();
    assert_eq!(c.read_response().unwrap().body, PAGE);
    assert!(new.stop(), "the new master did not stop on SIGTERM");
    assert!(!pid_file.exists(), "the new master left its pid file");
}

fn rolls_back(mpm: &str, binary: &Path) {
    let root = TempDir::new("upgrade-rollback");
    let pid_file = root.path().join("mpm.pid");
    let mut server = start(
        mpm,
        &root,
        &pid_file,
        &["--upgrade-binary", binary.to_str().unwrap()],
    );
    let load = Load::start(server.addr(), 4, "/index.html");
    std::thread::sleep(Duration::from_millis(200));
    let before = tests::children(server.pid());
    server.signal(libc::SIGUSR2);
    assert!(
        server.wait_for_stderr("upgrade failed", Duration::from_secs(40)),
        "no rollback:\n{}",
        server.stderr_text()
    );
    std::thread::sleep(Duration::from_millis(300));
    let tally = load.finish();
    tally.assert_no_failures(50, &server.stderr_text());
    assert!(server.is_running());
    assert_eq!(read_pid(&pid_file), Some(server.pid()));
    assert!(!root.path().join("mpm.pid.oldbin").exists());
    // Its children were never told to go.
    let now = tests::children(server.pid());
    assert!(
        before.iter().all(|c| now.contains(c)),
        "children {before:?} replaced by {now:?}"
    );
    assert!(server.stop().success());
}

fn an_upgrade_to_a_binary_that_fails_leaves_the_old_master_serving(mpm: &str) {
    rolls_back(mpm, Path::new("/bin/false"));
}

fn an_upgrade_whose_new_master_rejects_the_configuration_rolls_back(mpm: &str) {
    // The real binary, given a bad flag: it exits 2 before it is ready.
    let dir = TempDir::new("upgrade-script");
    let script = dir.write(
        "bad-upgrade.sh",
        format!(
            "#!/bin/sh\nexec '{}' \"$@\" --threads-per-child 0\n",
            tests::mpm_bin().display()
        )
        .as_bytes(),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    rolls_back(mpm, &script);
}

/// The slow one (the old master waits out its 30 s ready timeout): one MPM.
#[test]
fn an_upgrade_to_a_binary_that_never_becomes_ready_rolls_back_after_the_timeout() {
    let dir = TempDir::new("upgrade-hang");
    let script = dir.write("hang.sh", b"#!/bin/sh\nexec sleep 600\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = TempDir::new("upgrade-hang-root");
    let pid_file = root.path().join("mpm.pid");
    let mut server = start(
        "worker",
        &root,
        &pid_file,
        // The ready timeout, shortened from its 30 s: the behaviour is the same.
        &[
            "--upgrade-binary",
            script.to_str().unwrap(),
            "--upgrade-timeout",
            "2s",
        ],
    );
    server.signal(libc::SIGUSR2);
    assert!(server.wait_for_stderr("upgrade: started", Duration::from_secs(10)));
    let hung: u32 = server
        .stderr_text()
        .split(" as pid ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|p| p.trim().parse().ok())
        .expect("the new master's pid in the log");
    assert!(
        root.path().join("mpm.pid.oldbin").exists(),
        "no .oldbin while the new master starts"
    );
    assert!(
        server.wait_for_stderr("was not ready within", Duration::from_secs(45)),
        "{}",
        server.stderr_text()
    );
    let mut c = RawConn::connect(server.addr());
    c.send(REQUEST).unwrap();
    assert_eq!(c.read_response().unwrap().body, PAGE);
    assert_eq!(read_pid(&pid_file), Some(server.pid()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !process_gone(hung) {
        assert!(
            Instant::now() < deadline,
            "the hung new master was not stopped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.stop().success());
}

/// A new master that is still starting: a second SIGUSR2 is ignored, and
/// a SIGTERM to the old master stops the new one too and gives the pid
/// file back (docs/operations.md, "Rollback").
#[test]
fn during_an_upgrade_sigusr2_is_ignored_and_sigterm_stops_the_new_master_too() {
    let dir = TempDir::new("upgrade-pending");
    let script = dir.write("hang.sh", b"#!/bin/sh\nexec sleep 600\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = TempDir::new("upgrade-pending-root");
    let pid_file = root.path().join("mpm.pid");
    let mut server = start(
        "worker",
        &root,
        &pid_file,
        &["--upgrade-binary", script.to_str().unwrap()],
    );
    server.signal(libc::SIGUSR2);
    assert!(server.wait_for_stderr("upgrade: started", Duration::from_secs(10)));
    let pending: u32 = server
        .stderr_text()
        .split(" as pid ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|p| p.trim().parse().ok())
        .expect("the new master's pid in the log");
    server.signal(libc::SIGUSR2);
    assert!(
        server.wait_for_stderr(
            &format!("SIGUSR2 ignored: new master {pending} is starting"),
            Duration::from_secs(10)
        ),
        "{}",
        server.stderr_text()
    );
    assert_eq!(
        server.stderr_text().matches("upgrade: started").count(),
        1,
        "a second new master was started"
    );
    // The old master still serves meanwhile.
    let mut c = RawConn::connect(server.addr());
    c.send(REQUEST).unwrap();
    assert_eq!(c.read_response().unwrap().body, PAGE);
    assert!(server.stop().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !process_gone(pending) {
        assert!(
            Instant::now() < deadline,
            "the pending new master outlived the old one's SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !root.path().join("mpm.pid.oldbin").exists(),
        "FILE.oldbin left behind"
    );
}

#[test]
fn an_upgraded_master_tells_systemd_it_is_the_main_process() {
    use std::os::unix::net::UnixDatagram;
    let root = TempDir::new("upgrade-notify");
    let path = root.path().join("notify.sock");
    let notify = UnixDatagram::bind(&path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    root.write("index.html", PAGE);
    let pid_file = root.path().join("mpm.pid");
    let mut server = Server::start_with(
        "worker",
        Some(root.path()),
        &[
            "--server-limit",
            "2",
            "--pid-file",
            pid_file.to_str().unwrap(),
        ],
        |cmd| {
            cmd.env("NOTIFY_SOCKET", &path);
        },
    );
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(first.contains("READY=1"), "{first}");
    server.signal(libc::SIGUSR2);
    let n = notify.recv(&mut buf).unwrap();
    let second = String::from_utf8_lossy(&buf[..n]).into_owned();
    let new = second
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no MAINPID in {second:?}"));
    assert_ne!(new, server.pid());
    assert!(second.contains("READY=1"), "{second}");
    let new = Adopted(new);
    // Sent once the old master was told: it is on its way out.
    assert!(server.wait_for_stderr("upgrade done", Duration::from_secs(20)));
    assert_eq!(read_pid(&pid_file), Some(new.0));
    assert!(new.stop());
}

/// How long clients opened around a hand-over keep silent before they send
/// their request: the three run at once.
const DELAYS: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_secs(2),
    Duration::from_secs(15),
];
const CLOSE_REQUEST: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

/// Connections accepted by the old generation but silent when the upgrade
/// comes, and connections opened while it goes on, send their request 0.1,
/// 2 and 15 s after connecting: every one is answered, and the old master
/// does not wait for them (it used to keep them for the whole graceful
/// timeout, then close them unanswered).
fn silent_connections_around_an_upgrade_are_served_and_the_old_master_does_not_wait(mpm: &str) {
    let root = TempDir::new("upgrade-silent");
    let pid_file = root.path().join("mpm.pid");
    // Long enough that an old process waiting on a silent client would
    // still be there when the 15 s ones send.
    let mut server = start(mpm, &root, &pid_file, &["--graceful-timeout", "30s"]);
    let old = server.pid();
    let addr = server.addr();
    // Accepted by the old generation before the upgrade begins.
    let mut early: Vec<_> = (0..6)
        .map(|i| tests::SilentClient::connect(addr, CLOSE_REQUEST, DELAYS[i % 3]))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    server.signal(libc::SIGUSR2);
    // And during the hand-over, until the old master is gone.
    let mut during = Vec::new();
    while server.is_running() {
        during.push(tests::SilentClient::connect(
            addr,
            CLOSE_REQUEST,
            DELAYS[during.len() % 3],
        ));
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            signalled.elapsed() < Duration::from_secs(25),
            "the old master did not exit:\n{}",
            server.stderr_text()
        );
    }
    let gone_after = signalled.elapsed();
    assert!(
        early
            .iter()
            .filter(|c| c.delay == DELAYS[2])
            .all(|c| !c.has_sent()),
        "the old master ({old}) waited {gone_after:?}, for the silent clients:\n{}",
        server.stderr_text()
    );
    assert!(server.wait_exit(Duration::ZERO).unwrap().success());
    let new = Adopted(read_pid(&pid_file).expect("the new master's pid"));
    assert_ne!(new.0, old);
    early.append(&mut during);
    for c in early {
        let delay = c.delay;
        let r = c.reply().unwrap_or_else(|e| {
            panic!(
                "a client silent for {delay:?} was dropped: {e}\n{}",
                server.stderr_text()
            )
        });
        assert_eq!((r.status, &r.body[..]), (200, PAGE), "silent for {delay:?}");
    }
    assert!(new.stop(), "the new master did not stop on SIGTERM");
}

/// `mpm signal upgrade` on a server started with the defaults (worker's one
/// serving process, event's one per CPU, prefork's eight): a new master
/// takes over and the old one exits 0 (docs/operations.md, first section).
fn an_upgrade_works_on_a_server_started_with_the_defaults(mpm: &str) {
    let root = TempDir::new("upgrade-defaults");
    root.write("index.html", PAGE);
    let pid_file = root.path().join("mpm.pid");
    let mut server = Server::start(
        mpm,
        Some(root.path()),
        &["--pid-file", pid_file.to_str().unwrap()],
    );
    let old = server.pid();
    let sent = tests::run_mpm(
        &[
            "signal",
            "upgrade",
            "--pid-file",
            pid_file.to_str().unwrap(),
        ],
        Duration::from_secs(10),
    );
    assert!(sent.status.success(), "{}", sent.stderr);
    let deadline = Instant::now() + Duration::from_secs(20);
    let new = loop {
        match read_pid(&pid_file) {
            Some(p) if p != old => break Adopted(p),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "the pid file still names {old}:\n{}",
            server.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = server
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the old master did not exit:\n{}", server.stderr_text()));
    assert!(status.success(), "{status}\n{}", server.stderr_text());
    let mut c = RawConn::connect(server.addr());
    c.send(REQUEST).unwrap();
    assert_eq!(c.read_response().unwrap().body, PAGE);
    assert!(new.stop(), "the new master did not stop on SIGTERM");
}

tests::mpm_suite!(
    an_upgrade_under_load_fails_no_request_and_the_old_master_exits,
    an_upgrade_works_on_a_server_started_with_the_defaults,
    an_upgrade_to_a_binary_that_fails_leaves_the_old_master_serving,
    an_upgrade_whose_new_master_rejects_the_configuration_rolls_back,
    silent_connections_around_an_upgrade_are_served_and_the_old_master_does_not_wait,
);

#[test]
fn upgrade_variables_left_in_an_environment_are_refused_in_one_line() {
    let out = std::process::Command::new(tests::mpm_bin())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("MPM_UPGRADE_FDS", "3")
        .env("MPM_UPGRADE_PARENT", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("MPM_UPGRADE_FDS"), "{err}");
}
