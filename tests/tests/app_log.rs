//! An application's log lines (the `log` crate's macros) go to mpm's error
//! log, in its one-line format, next to mpm's own, in every MPM.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tests::{exchange, TempDir};

/// The error log's text once it contains `needle`; panics after 20 s.
fn wait_for(path: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the error log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `[Tue Dec 01 21:34:26.123456 2026] [LEVEL] [pid N] MESSAGE`: mpm's format.
fn is_mpm_line(line: &str, level: &str, message: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let Some((time, rest)) = rest.split_once("] ") else {
        return false;
    };
    let Some(rest) = rest.strip_prefix(&format!("[{level}] [pid ")) else {
        return false;
    };
    let Some((pid, text)) = rest.split_once("] ") else {
        return false;
    };
    time.len() == "Tue Dec 01 21:34:26.123456 2026".len()
        && pid.parse::<u32>().is_ok()
        && text.starts_with(message)
}

struct Shop(Child);

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn an_applications_log_lines_go_to_the_error_log_in_mpms_format(mpm: &str) {
    let logs = TempDir::new("app-log");
    let errors = logs.path().join("error.log");
    let shop = tests::mpm_bin()
        .parent()
        .unwrap()
        .join("examples")
        .join("shop");
    let child = Command::new(shop)
        .args(["serve", "--mpm", mpm, "--listen", "127.0.0.1:0"])
        .arg("--error-log")
        .arg(&errors)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _shop = Shop(child);
    let text = wait_for(&errors, " listening on ");
    let addr: SocketAddr = text
        .split(" listening on http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in the error log:\n{text}"));

    // The handler logs a warning with `log::warn!` when an item comes
    // without a body.
    let reply = exchange(
        addr,
        b"POST /api/items HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(reply.status, 400);
    let text = wait_for(&errors, "an item was posted without a body");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.iter().any(|l| is_mpm_line(
            l,
            "warn",
            "shop: an item was posted without a body; answered 400"
        )),
        "the application's line is not in mpm's format:\n{text}"
    );
    // Next to mpm's own lines (named after the program), in the same format.
    assert!(
        lines
            .iter()
            .any(|l| is_mpm_line(l, "notice", "shop: ") && l.contains(" listening on ")),
        "mpm's own lines are not there:\n{text}"
    );
}

tests::mpm_suite!(an_applications_log_lines_go_to_the_error_log_in_mpms_format);
