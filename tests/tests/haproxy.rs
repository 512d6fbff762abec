//! Scale-out behind a real load balancer: HAProxy, configured by
//! `contrib/haproxy/haproxy.cfg`, balances two `mpm` instances of different
//! process models on loopback; one of them stops gracefully (or restarts)
//! while clients send, and no request fails.
//!
//! Skipped, with a message, where `haproxy` is not installed (`.ci/run`
//! installs it from the distribution's packages).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tests::load::Load;
use tests::{Server, TempDir};

fn haproxy() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("haproxy"))
        .find(|p| p.is_file())
}

fn config_template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("contrib/haproxy/haproxy.cfg")
}

/// HAProxy in the foreground, killed when dropped. What it says (a server
/// taken out, as a draining one is) is kept, not printed.
struct Balancer {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    /// Its port, held from before HAProxy binds it until it is killed.
    _port: tests::origin::DeadPort,
}

impl Balancer {
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_balancer(bin: &Path, servers: [SocketAddr; 2]) -> Balancer {
    // A port held for HAProxy (which binds with SO_REUSEADDR, as mpm
    // does), so that no other test's bind takes it before HAProxy does.
    let port = tests::origin::port_for_a_server();
    let addr = port.addr();
    let child = Command::new(bin)
        .arg("-db")
        .arg("-f")
        .arg(config_template())
        .env("MPM_FRONTEND", addr.to_string())
        .env("MPM_SERVER1", servers[0].to_string())
        .env("MPM_SERVER2", servers[1].to_string())
        .env("MPM_MAXCONN", "2000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
    let log = Arc::new(Mutex::new(String::new()));
    let mut stderr = child.stderr.take().unwrap();
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Balancer {
        child,
        addr,
        log,
        _port: port,
    }
}

fn instance(mpm: &str, root: &TempDir, name: &str, extra: &[&str]) -> Server {
    root.write("who", format!("{name}\n").as_bytes());
    let mut args = vec!["--drain-delay", "2"];
    args.extend(extra);
    Server::start(mpm, Some(root.path()), &args)
}

/// Wait until requests through the balancer reach both instances.
fn wait_until_both_serve(balancer: &Balancer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "HAProxy never sent to both instances (saw {seen:?})"
        );
        let url = format!("http://{}/who", balancer.addr);
        if let Ok(r) = tests::agent().get(&url).call() {
            if let Ok(body) = r.into_string() {
                seen.insert(body);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_instance_stopping_gracefully_behind_haproxy_loses_no_request() {
    let Some(bin) = haproxy() else {
        tests::skip("haproxy is not installed (apt-get install haproxy)");
        return;
    };
    let (root_a, root_b) = (TempDir::new("lb-a"), TempDir::new("lb-b"));
    let a = instance("event", &root_a, "a", &["--server-limit", "2"]);
    let mut b = instance("prefork", &root_b, "b", &["--start-servers", "4"]);
    let balancer = start_balancer(&bin, [a.addr(), b.addr()]);
    wait_until_both_serve(&balancer);

    let load = Load::start(balancer.addr, 8, "/who");
    std::thread::sleep(Duration::from_millis(1500));
    // A graceful stop: the requests in flight at the end of the drain
    // delay finish.
    b.graceful_stop();
    assert!(
        b.wait_for_stderr("draining", Duration::from_secs(10)),
        "{}",
        b.stderr_text()
    );
    let status = b
        .wait_exit(Duration::from_secs(30))
        .expect("b did not stop");
    assert!(status.success(), "{status}\n{}", b.stderr_text());
    std::thread::sleep(Duration::from_millis(1000));
    let tally = load.finish();
    let logs = format!(
        "a:\n{}\nb:\n{}\nhaproxy:\n{}",
        a.stderr_text(),
        b.stderr_text(),
        balancer.log()
    );
    tally.assert_no_failures(100, &logs);
    // HAProxy took b out on its health check, which the drain failed.
    let said = balancer.log();
    assert!(
        said.contains("mpm/mpm2 is DOWN") && said.contains("code: 503"),
        "{said}"
    );
    let to = |name: &[u8]| tally.bodies.get(name).copied().unwrap_or(0);
    assert!(
        to(b"a\n") > 0 && to(b"b\n") > 0,
        "both instances should have served: {:?}",
        tally.bodies
    );
}

#[test]
fn graceful_restarts_and_an_upgrade_behind_haproxy_lose_no_request() {
    let Some(bin) = haproxy() else {
        tests::skip("haproxy is not installed (apt-get install haproxy)");
        return;
    };
    let (root_a, root_b) = (TempDir::new("lb-a"), TempDir::new("lb-b"));
    let pid_file = root_b.path().join("b.pid");
    let mut a = instance("worker", &root_a, "a", &["--server-limit", "2"]);
    let b = instance(
        "prefork",
        &root_b,
        "b",
        &[
            "--start-servers",
            "4",
            "--pid-file",
            pid_file.to_str().unwrap(),
        ],
    );
    let balancer = start_balancer(&bin, [a.addr(), b.addr()]);
    wait_until_both_serve(&balancer);

    let load = Load::start(balancer.addr, 8, "/who");
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(400));
        a.signal(libc::SIGUSR1);
    }
    // And a binary upgrade of the other: the new master takes its sockets.
    let old = b.pid();
    tests::kill(old as libc::pid_t, libc::SIGUSR2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let new = loop {
        let now = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        match now {
            Some(p) if p != old => break p,
            _ => assert!(
                Instant::now() < deadline,
                "no upgrade:\n{}",
                b.stderr_text()
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(1500));
    let tally = load.finish();
    tests::kill(new as libc::pid_t, libc::SIGKILL);
    let logs = format!(
        "a:\n{}\nb:\n{}\nhaproxy:\n{}",
        a.stderr_text(),
        b.stderr_text(),
        balancer.log()
    );
    tally.assert_no_failures(100, &logs);
    assert!(tally.bodies.len() == 2, "{:?}", tally.bodies);
}
