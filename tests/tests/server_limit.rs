//! A loop per core: `--server-limit auto` (the event MPM's default) starts a
//! serving process per CPU the server may use, `--cpu-affinity auto` pins
//! each to its own, and processes sharing a listening socket wake one at a
//! time (`EPOLLEXCLUSIVE`).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tests::{children, run_mpm, wait_for_children, RawConn, Server, TempDir};

/// CPUs this test may use, as the server counts them.
fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPUs a process may run on, from /proc (`Cpus_allowed_list`).
fn allowed_cpus(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// The serving processes of a server: the children of its master.
fn serving_processes(server: &Server, n: usize) -> Vec<u32> {
    wait_for_children(server.pid(), n, &[], Duration::from_secs(10)).unwrap_or_else(|| {
        panic!(
            "{} serving processes, not {n}:\n{}",
            children(server.pid()).len(),
            server.stderr_text()
        )
    })
}

fn docroot() -> TempDir {
    let root = TempDir::new("limit");
    root.write("index.html", b"page\n");
    root
}

#[test]
fn the_event_mpm_starts_a_serving_process_per_usable_cpu_by_default() {
    let root = docroot();
    let n = usable_cpus();
    for (mpm, extra) in [
        ("event", &[][..]),
        ("worker", &["--server-limit", "auto"][..]),
    ] {
        let server = Server::start(mpm, Some(root.path()), extra);
        let procs = serving_processes(&server, n);
        assert_eq!(procs.len(), n, "{mpm}");
        let said = server.stderr_text();
        assert!(
            said.contains("--server-limit auto: one per CPU this server may use")
                && said.contains(&format!("{n} serving process")),
            "{mpm}: the start-up line does not say how many and why:\n{said}"
        );
        assert_eq!(server.get("/index.html").body, b"page\n");
    }
}

#[test]
fn on_one_cpu_auto_means_one_serving_process() {
    let root = docroot();
    // `taskset -c FIRST`: the first CPU this test may use.
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let first = (0..nix::sched::CpuSet::count())
        .find(|&c| set.is_set(c).unwrap_or(false))
        .unwrap();
    let server = Server::start_with("event", Some(root.path()), &[], |cmd| {
        mpm_sys::spawn::pin_to_cpu(cmd, first);
    });
    assert_eq!(serving_processes(&server, 1).len(), 1);
    assert!(
        server
            .stderr_text()
            .contains("1 serving process under a master (--server-limit auto"),
        "{}",
        server.stderr_text()
    );
    assert_eq!(server.get("/index.html").body, b"page\n");
}

#[test]
fn cpu_affinity_auto_pins_each_serving_process_to_a_cpu_of_its_own() {
    let root = docroot();
    let n = usable_cpus();
    let server = Server::start(
        "event",
        Some(root.path()),
        &["--cpu-affinity", "auto", "--log-level", "info"],
    );
    let procs = serving_processes(&server, n);
    // Pinned before any thread starts; wait until each has said so.
    for pid in &procs {
        assert!(
            server.wait_for_stderr(&format!("serving process {pid} "), Duration::from_secs(10)),
            "{}",
            server.stderr_text()
        );
    }
    let mut cpus: Vec<String> = procs.iter().map(|&p| allowed_cpus(p)).collect();
    for c in &cpus {
        assert!(
            c.parse::<usize>().is_ok(),
            "a process may run on {c}, not one CPU"
        );
    }
    cpus.sort();
    cpus.dedup();
    assert_eq!(cpus.len(), n, "two processes share a CPU: {cpus:?}");
    // Without it, a process may run anywhere it was allowed to.
    let free = Server::start("event", Some(root.path()), &[]);
    for pid in serving_processes(&free, n) {
        assert_eq!(allowed_cpus(pid), allowed_cpus(std::process::id()));
    }
}

#[test]
fn bad_server_limits_are_one_line_and_exit_2() {
    for args in [
        &["check", "--mpm", "prefork", "--server-limit", "auto"][..],
        &["check", "--mpm", "event", "--server-limit", "lots"],
        &["check", "--mpm", "event", "--server-limit", "0"],
        &["check", "--mpm", "event", "--cpu-affinity", "sometimes"],
    ] {
        run_mpm(args, Duration::from_secs(10)).assert_one_line_error(&args.join(" "));
    }
    let ok = run_mpm(
        &["check", "--mpm", "event", "--server-limit", "AUTO"],
        Duration::from_secs(10),
    );
    assert!(ok.status.success(), "{}", ok.stderr);
}

/// How often a process's main thread (its event loop) went to sleep and
/// was woken: voluntary context switches, from /proc.
fn loop_wakeups(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_new_connection_wakes_one_of_the_processes_sharing_the_listener() {
    let root = docroot();
    let mut woken = Vec::new();
    for exclusive in ["on", "off"] {
        let server = Server::start(
            "event",
            Some(root.path()),
            &["--server-limit", "2", "--epoll-exclusive", exclusive],
        );
        let procs = serving_processes(&server, 2);
        std::thread::sleep(Duration::from_millis(200)); // both loops asleep
        let before: u64 = procs.iter().map(|&p| loop_wakeups(p)).sum();
        // One connection at a time, each arriving while both loops sleep.
        for _ in 0..40 {
            let mut c = RawConn::connect(server.addr());
            c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .unwrap();
            assert_eq!(c.read_response().unwrap().status, 200);
            std::thread::sleep(Duration::from_millis(5));
        }
        let after: u64 = procs.iter().map(|&p| loop_wakeups(p)).sum();
        woken.push(after - before);
    }
    eprintln!("loop wake-ups for 40 connections, exclusive and not: {woken:?}");
    // Exclusive: the one process woken takes the connection (about one
    // wake-up each). Without it both loops wake for every connection.
    assert!(
        woken[1] as f64 >= 1.4 * woken[0] as f64,
        "without EPOLLEXCLUSIVE the loops should wake about twice as often: {woken:?}"
    );
}

#[test]
fn a_burst_of_keepalive_connections_spreads_over_the_processes() {
    let root = docroot();
    let server = Server::start("event", Some(root.path()), &["--server-limit", "2"]);
    let procs = serving_processes(&server, 2);
    // Connections taken per process, and how many of its slots still read
    // "starting" (a loop's does until it has told the ledger it accepts).
    let per_process = || -> (std::collections::HashMap<u64, u64>, usize) {
        let json: serde_json::Value =
            serde_json::from_str(&server.get("/server-status?json").text()).unwrap();
        let mut per = std::collections::HashMap::new();
        let mut starting = 0;
        for w in json["workers"].as_array().unwrap() {
            *per.entry(w["pid"].as_u64().unwrap()).or_default() +=
                w["connections"].as_u64().unwrap();
            let ours = procs.iter().any(|&p| w["pid"] == u64::from(p));
            starting += usize::from(ours && w["state"] == "starting");
        }
        (per, starting)
    };
    // Both loops accepting before the burst: under a loaded machine a
    // process may show its slots long before its loop's first turn, and
    // until then its sibling rightly takes everything.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let before = loop {
        let (per, starting) = per_process();
        let all_there = procs.iter().all(|&p| per.contains_key(&u64::from(p)));
        if (all_there && starting == 0) || std::time::Instant::now() >= deadline {
            break per;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Forty connections at once, each held open after its first request.
    let mut held: Vec<RawConn> = (0..40).map(|_| RawConn::connect(server.addr())).collect();
    for c in &mut held {
        c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
    }
    for c in &mut held {
        assert_eq!(c.read_response().unwrap().status, 200);
    }
    let (after, _) = per_process();
    let mut taken: Vec<u64> = procs
        .iter()
        .map(|&p| after.get(&u64::from(p)).unwrap_or(&0) - before.get(&u64::from(p)).unwrap_or(&0))
        .collect();
    taken.sort();
    // Within the ledger's slack (two, and an eighth), give or take one.
    assert!(
        taken[1] - taken[0] <= 3 + taken[1] / 8,
        "40 connections spread as {taken:?}"
    );
}
