//! Every allocator serves under every MPM, and says so: at start-up and on
//! the status page, with what it cost.

#![forbid(unsafe_code)]
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

/// The allocators this build of `mpm` has, as it lists them when refusing
/// an unknown one (with `--features jemalloc`, four).
fn built_allocators() -> Vec<String> {
    let exit = run_mpm(
        &["serve", "--allocator", "none-such"],
        Duration::from_secs(10),
    );
    let list = exit
        .stderr
        .split("(expected ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("{}", exit.stderr));
    let names: Vec<String> = list.split(", ").map(str::to_string).collect();
    assert!(names.len() >= 3, "{names:?}");
    names
}

fn every_allocator_serves_and_reports_itself(mpm: &str) {
    let root = TempDir::new("alloc");
    root.write("index.html", PAGE);
    for allocator in built_allocators() {
        let allocator = allocator.as_str();
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
        // Each worker's high-water mark is at least what it holds now.
        assert!(
            field(&json, "live_bytes_peak") >= field(&json, "live_bytes"),
            "{json}"
        );
        for name in ["voluntary_ctxt_switches", "live_bytes"] {
            assert!(field(&json, name) >= 0.0, "{name}");
        }
        // Totals only: a figure per request is a difference of two readings.
        assert!(!json.contains("_per_request"), "{json}");
        // Lock figures are the `locked` allocator's alone: absent, not zero, for the others.
        for name in ["lock_contended", "lock_wait_us"] {
            assert_eq!(
                json.contains(&format!("\"{name}\":")),
                allocator == "locked",
                "{allocator}: {name} in {json}"
            );
        }
    }
}

/// Allocations per request for `n` requests of `path` on one connection,
/// from the status page's counters before and after.
fn allocations_per_request(server: &Server, path: &str, n: usize) -> f64 {
    // Once first, so that every worker's caches (the open-file cache is
    // per thread) are warm.
    server.get(path);
    let before = field(&server.get("/server-status?json").text(), "allocations");
    let mut c = RawConn::connect(server.addr());
    for _ in 0..n {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        c.read_response().unwrap();
    }
    drop(c); // frees the only worker for the status request
    let after = field(&server.get("/server-status?json").text(), "allocations");
    (after - before) / n as f64
}

fn the_request_pool_takes_a_requests_scratch_off_the_allocator(mpm: &str) {
    let root = TempDir::new("pool");
    root.write("index.html", PAGE);
    let mut per_request = Vec::new();
    for pool in ["on", "off"] {
        // One worker in one process, so its arena is warm after the first
        // request (and the status page, whose own allocations count too,
        // has one process's slots).
        let server = Server::start(
            mpm,
            Some(root.path()),
            &[
                "--request-pool",
                pool,
                "--server-limit",
                "1",
                "--max-request-workers",
                "1",
                "--threads-per-child",
                "1",
            ],
        );
        // A missing file: the decoded path and the name opened are scratch.
        let missing = allocations_per_request(&server, "/no/such/../file.html", 400);
        // A cached page costs no allocation either way: its validators are shared.
        let cached = allocations_per_request(&server, "/index.html", 400);
        per_request.push((pool, missing, cached));
    }
    let (on, off) = (per_request[0], per_request[1]);
    assert!(on.2 < 0.2 && off.2 < 0.2, "cached page: {per_request:?}");
    assert!(
        off.1 >= 2.0,
        "without the pool the scratch is allocated: {per_request:?}"
    );
    assert!(
        on.1 < off.1 - 1.5,
        "the pool takes the scratch off the allocator: {per_request:?}"
    );
}

#[test]
fn an_unknown_allocator_is_one_line_and_exit_2() {
    let exit = run_mpm(
        &["serve", "--allocator", "tcmalloc"],
        Duration::from_secs(10),
    );
    exit.assert_one_line_error("--allocator tcmalloc");
    assert!(exit.stderr.contains("tcmalloc"));
}

tests::mpm_suite!(
    every_allocator_serves_and_reports_itself,
    the_request_pool_takes_a_requests_scratch_off_the_allocator,
);
