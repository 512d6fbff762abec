//! Hardening that every MPM shares: private dotfiles, and serving processes
//! that never run as root.

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

/// The real uid of a process, from /proc.
fn uid(pid: u32) -> u32 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn serving_processes_run_as_the_configured_user(mpm: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can change user");
        return;
    }
    let root = docroot();
    // Under a master (prefork always; the others with --server-limit 2) the
    // master keeps root and the children drop; a single process drops itself.
    for extra in [&["--server-limit", "2"][..], &[]] {
        if mpm == "prefork" && extra.is_empty() {
            continue;
        }
        let args = [&["--user", "nobody", "--group", "nogroup"][..], extra].concat();
        let server = Server::start(mpm, Some(root.path()), &args);
        assert_eq!(status(&server, "/index.html"), 200);
        // Children fork after the `listening on` line: wait for them.
        let want = 2; // --server-limit 2
        let kids = if extra.is_empty() {
            Vec::new()
        } else {
            tests::wait_for_children(server.pid(), want, &[], Duration::from_secs(10))
                .unwrap_or_else(|| children(server.pid()))
        };
        if extra.is_empty() && mpm != "prefork" {
            assert_eq!(
                uid(server.pid()),
                65534,
                "{mpm}: the single process kept root"
            );
        } else {
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
    assert_eq!(exit.status.code(), Some(2), "{exit:?}");
    assert!(exit.stderr.trim().lines().count() == 1 && exit.stderr.contains("no-such-user-here"));
}

tests::mpm_suite!(
    dotfiles_are_private_except_well_known,
    serving_processes_run_as_the_configured_user,
);
