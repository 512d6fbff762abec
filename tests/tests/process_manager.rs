//! The process manager: a single-threaded master, children that are replaced
//! when they die, graceful restarts that lose no request, and a clean stop.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tests::{children, threads, wait_for_children, RawConn, Server, TempDir};

const PAGE: &[u8] = b"served by a child\n";

fn docroot() -> TempDir {
    let root = TempDir::new("pm");
    root.write("index.html", PAGE);
    root
}

fn start(mpm: &str, root: &TempDir) -> Server {
    Server::start(
        mpm,
        Some(root.path()),
        &["--server-limit", "2", "--max-request-workers", "16"],
    )
}

/// One GET as a careful HTTP client makes it: on a reused keep-alive
/// connection that the server closed between requests, retry once on a new
/// connection (RFC 9112 section 9.3.1 allows it for idempotent requests).
fn get(addr: SocketAddr, conn: &mut Option<RawConn>, keep_alive: bool) -> Result<(), String> {
    let request: &[u8] = if keep_alive {
        b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n"
    } else {
        b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    };
    for attempt in 0..2 {
        let reused = conn.is_some();
        let c = conn.get_or_insert_with(|| RawConn::connect(addr));
        match c.send(request).and_then(|()| c.read_response()) {
            Ok(r) if r.status == 200 && r.body == PAGE => {
                if !keep_alive || r.header("connection") == Some("close") {
                    *conn = None;
                }
                return Ok(());
            }
            Ok(r) => return Err(format!("status {} body {:?}", r.status, r.text())),
            Err(_) if reused && attempt == 0 => *conn = None,
            Err(e) => return Err(format!("{e}")),
        }
    }
    Err("retry failed".into())
}

fn the_master_is_single_threaded_and_children_serve(mpm: &str) {
    let root = docroot();
    let server = start(mpm, &root);
    let kids = wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    assert_eq!(threads(server.pid()), 1, "the master started a thread");
    assert_eq!(kids.len(), 2);
    for _ in 0..20 {
        assert_eq!(server.get("/index.html").body, PAGE);
    }
}

fn graceful_restarts_under_load_lose_no_request(mpm: &str) {
    let root = docroot();
    let mut server = start(mpm, &root);
    let first = wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let addr = server.addr();
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (done, served, failures) = (
                Arc::clone(&done),
                Arc::clone(&served),
                Arc::clone(&failures),
            );
            std::thread::spawn(move || {
                // A bounded loop: half the clients keep connections alive.
                let keep = i % 2 == 0;
                let mut conn = None;
                for _ in 0..20_000 {
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                    match get(addr, &mut conn, keep) {
                        Ok(()) => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failures.lock().unwrap().push(e),
                    }
                }
            })
        })
        .collect();
    let mut old = first;
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(300));
        server.signal(libc::SIGUSR1);
        old = wait_for_children(server.pid(), 2, &old, Duration::from_secs(15))
            .unwrap_or_else(|| panic!("restart {round}: no new generation took over"));
    }
    std::thread::sleep(Duration::from_millis(300));
    done.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(
        served.load(Ordering::Relaxed) > 100,
        "the clients hardly ran"
    );
    assert!(server.stderr_text().contains("graceful restart"));
}

fn a_killed_child_is_replaced_and_serving_goes_on(mpm: &str) {
    let root = docroot();
    let server = start(mpm, &root);
    let kids = wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    let victim = kids[0];
    let killed = Instant::now();
    tests::kill(victim as i32, libc::SIGKILL);
    let now = wait_for_children(server.pid(), 2, &[victim], Duration::from_secs(10))
        .expect("the killed child was not replaced");
    let took = killed.elapsed();
    eprintln!("child {victim} replaced by {:?} in {took:?}", now);
    assert!(took < Duration::from_secs(2), "replacement took {took:?}");
    assert!(server.wait_for_stderr("was killed by SIGKILL", Duration::from_secs(5)));
    let mut conn = None;
    for _ in 0..20 {
        get(server.addr(), &mut conn, false).unwrap();
    }
}

fn sigterm_stops_the_master_and_every_child(mpm: &str) {
    let root = docroot();
    let mut server = start(mpm, &root);
    let kids = wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    let mut conn = None;
    get(server.addr(), &mut conn, true).unwrap();
    let status = server.stop();
    assert!(status.success(), "{status}");
    for k in kids {
        assert!(
            !std::path::Path::new(&format!("/proc/{k}")).exists()
                || std::fs::read_to_string(format!("/proc/{k}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "child {k} outlived the master"
        );
    }
}

fn sighup_restarts_the_children_on_the_reread_configuration(mpm: &str) {
    let first = TempDir::new("hup-a");
    first.write("index.html", b"first docroot\n");
    let second = TempDir::new("hup-b");
    second.write("index.html", b"second docroot\n");
    let conf_dir = TempDir::new("hup-conf");
    let write_conf = |root: &TempDir| {
        conf_dir.write(
            "mpm.toml",
            format!(
                "docroot = \"{}\"\nserver-limit = 2\nmax-request-workers = 16\n",
                root.path().display()
            )
            .as_bytes(),
        )
    };
    let conf = write_conf(&first);
    let mut server = Server::start(mpm, None, &["--config", conf.to_str().unwrap()]);
    assert_eq!(server.get("/index.html").body, b"first docroot\n");
    let before = wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    write_conf(&second);
    server.signal(libc::SIGHUP);
    assert!(server.wait_for_stderr("restart", Duration::from_secs(10)));
    // The new set serves the new docroot, on the same listening socket.
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.get("/index.html").body != b"second docroot\n" {
        assert!(
            Instant::now() < deadline,
            "the new configuration never took effect"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let now = children(server.pid());
    assert!(
        now.iter().all(|c| !before.contains(c)),
        "{before:?} survived: {now:?}"
    );
    assert!(server.stop().success());
}

/// Shared mappings in a process: the scoreboard, the accept mutex.
fn shared_mappings(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|perms| perms.ends_with('s'))
        })
        .count()
}

/// Every SIGHUP once mapped a new scoreboard (and, for prefork, a new accept
/// mutex) and never unmapped the old: the master's mappings grew by one or
/// two per restart. Now the scoreboard is laid out again and the mutex
/// unmapped with its lock.
fn restarts_leave_no_shared_memory_behind(mpm: &str) {
    let root = docroot();
    let mut server = start(mpm, &root);
    // --server-limit 2: two children, prefork too.
    let want = 2;
    let mut kids = wait_for_children(server.pid(), want, &[], Duration::from_secs(10)).unwrap();
    let before = shared_mappings(server.pid());
    for round in 0..5 {
        server.signal(libc::SIGHUP);
        kids = wait_for_children(server.pid(), want, &kids, Duration::from_secs(15))
            .unwrap_or_else(|| panic!("round {round}: no new set:\n{}", server.stderr_text()));
        let mut c = RawConn::connect(server.addr());
        c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        assert_eq!(c.read_response().unwrap().body, PAGE);
    }
    assert_eq!(
        shared_mappings(server.pid()),
        before,
        "the master's shared mappings changed over five restarts"
    );
    assert!(server.stop().success());
}

/// Times a process has given up its CPU of its own accord (a sleep).
fn voluntary_switches(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("voluntary_ctxt_switches in /proc/PID/status")
}

/// With nothing to do, the master sleeps until a signal, a child's exit or a
/// stop: it looks once a second at most. (It woke every 10 ms once, its
/// poll ending at a spawn time long past.) Counted, not timed: at most 8
/// wake-ups in 3 s, where the old master made about 300.
fn an_idle_master_sleeps(mpm: &str) {
    let root = docroot();
    let mut server = start(mpm, &root);
    wait_for_children(server.pid(), 2, &[], Duration::from_secs(10)).unwrap();
    assert_eq!(server.get("/index.html").body, PAGE);
    // Past the start's first maintenance and the children's first turns.
    std::thread::sleep(Duration::from_millis(1500));
    let before = voluntary_switches(server.pid());
    std::thread::sleep(Duration::from_secs(3));
    let woke = voluntary_switches(server.pid()) - before;
    assert!(woke <= 8, "the idle master woke {woke} times in 3 s");
    assert!(server.stop().success());
}

tests::mpm_suite!(
    an_idle_master_sleeps,
    the_master_is_single_threaded_and_children_serve,
    graceful_restarts_under_load_lose_no_request,
    a_killed_child_is_replaced_and_serving_goes_on,
    sigterm_stops_the_master_and_every_child,
    sighup_restarts_the_children_on_the_reread_configuration,
    restarts_leave_no_shared_memory_behind,
);
