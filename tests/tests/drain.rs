//! `--drain-delay`: a server told to stop serves on for a while with its
//! status page answering 503, so that a load balancer's health check takes
//! it out of the rotation before it stops listening.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tests::{Server, TempDir};

fn start(mpm: &str, root: &TempDir, delay: &str) -> Server {
    root.write("index.html", b"serving\n");
    let mut args = vec!["--drain-delay", delay];
    if mpm != "prefork" {
        args.extend(["--server-limit", "2"]);
    }
    Server::start(mpm, Some(root.path()), &args)
}

fn a_stopping_server_fails_health_checks_and_serves_on_for_its_drain_delay(mpm: &str) {
    let root = TempDir::new("drain");
    let mut server = start(mpm, &root, "2");
    let r = server.get("/server-status?json");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("\"draining\":false"), "{}", r.text());
    let asked = Instant::now();
    server.terminate();
    assert!(
        server.wait_for_stderr("draining", Duration::from_secs(10)),
        "{}",
        server.stderr_text()
    );
    let r = server.get("/server-status?json");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("\"draining\":true"), "{}", r.text());
    // Prometheus keeps its data: 200, saying it drains (docs/operations.md).
    let r = server.get("/server-status?format=prometheus");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().lines().any(|l| l == "mpm_draining 1"),
        "{}",
        r.text()
    );
    // New connections are still accepted and answered meanwhile.
    let r = server.get("/index.html");
    assert_eq!((r.status, r.text().as_str()), (200, "serving\n"));
    assert!(server.is_running());
    let status = server.wait_exit(Duration::from_secs(30)).unwrap();
    assert!(status.success(), "{status}\n{}", server.stderr_text());
    assert!(
        asked.elapsed() >= Duration::from_secs(2),
        "stopped before its drain delay"
    );
}

fn a_second_stop_signal_cuts_the_drain_delay_short(mpm: &str) {
    let root = TempDir::new("drain-cut");
    let mut server = start(mpm, &root, "300");
    server.terminate();
    assert!(server.wait_for_stderr("draining", Duration::from_secs(10)));
    server.terminate();
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("still draining after a second SIGTERM");
    assert!(status.success(), "{status}\n{}", server.stderr_text());
}

/// SIGWINCH (`mpm signal graceful-stop`) drains first too, as SIGTERM does
/// (docs/operations.md, "Many hosts behind HAProxy").
fn a_graceful_stop_drains_first_too(mpm: &str) {
    let root = TempDir::new("drain-graceful");
    let mut server = start(mpm, &root, "1");
    let asked = Instant::now();
    server.graceful_stop();
    assert!(
        server.wait_for_stderr("draining", Duration::from_secs(10)),
        "{}",
        server.stderr_text()
    );
    let r = server.get("/server-status?json");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("\"draining\":true"), "{}", r.text());
    let status = server.wait_exit(Duration::from_secs(30)).unwrap();
    assert!(status.success(), "{status}\n{}", server.stderr_text());
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "stopped before its drain delay"
    );
}

tests::mpm_suite!(
    a_stopping_server_fails_health_checks_and_serves_on_for_its_drain_delay,
    a_graceful_stop_drains_first_too,
    a_second_stop_signal_cuts_the_drain_delay_short,
);
