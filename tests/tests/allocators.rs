//! Every allocator serves under every MPM, and says so: at start-up and on
//! the status page, with what it cost.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tests::{run_mpm, RawConn, Server, TempDir};

const PAGE: &[u8] = b"allocated\n";

/// A number field of the status page's JSON.
fn field(json: &str, name: &str) -> f64 {
    let at = json
        .find(&format!("\"{name}\":"))
        .unwrap_or_else(|| panic!("{name} in {json}"))
        + name.len()
        + 3;
    json[at..]
        .split([',', '}'])
        .next()
        .unwrap()
        .trim_matches('"')
        .parse()
        .unwrap()
}

fn every_allocator_serves_and_reports_itself(mpm: &str) {
    let root = TempDir::new("alloc");
    root.write("index.html", PAGE);
    for allocator in ["system", "mimalloc", "locked"] {
        let server = Server::start(
            mpm,
            Some(root.path()),
            &["--allocator", allocator, "--max-request-workers", "8"],
        );
        assert!(
            server
                .stderr_text()
                .contains(&format!("with the {allocator} allocator")),
            "{}",
            server.stderr_text()
        );
        let mut c = RawConn::connect(server.addr());
        for _ in 0..50 {
            c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            let r = c.read_response().unwrap();
            assert!(r.status == 200 && r.body == PAGE, "{allocator}");
        }
        let json = server.get("/server-status?json").text();
        assert!(
            json.contains(&format!("\"allocator\":\"{allocator}\"")),
            "{json}"
        );
        assert!(field(&json, "allocations") > 0.0, "{json}");
        assert!(field(&json, "allocations_per_request") > 0.0, "{json}");
        for name in [
            "lock_contended_per_request",
            "lock_wait_us_per_request",
            "ctxt_switches_per_request",
            "live_bytes",
        ] {
            assert!(field(&json, name) >= 0.0, "{name}");
        }
    }
}

#[test]
fn an_unknown_allocator_is_one_line_and_exit_2() {
    let exit = run_mpm(
        &["serve", "--allocator", "tcmalloc"],
        Duration::from_secs(10),
    );
    assert_eq!(exit.status.code(), Some(2), "{exit:?}");
    assert_eq!(exit.stderr.trim().lines().count(), 1, "{}", exit.stderr);
    assert!(exit.stderr.contains("tcmalloc"));
}

tests::mpm_suite!(every_allocator_serves_and_reports_itself);
