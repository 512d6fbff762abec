//! Runs the cells: for each variant, a server child per program its
//! scenarios need; each scenario measured by the bench engine, the server's
//! own counters and /proc; the server stopped before the next variant.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mpm_core::Error;

use super::experiments::Variant;
use super::perf::SyscallCount;
use super::proc_sample;
use super::report::Cell;
use super::scenario::{Load, Scenario, ServerBin, Tls};
use super::server_child::ServerChild;
use super::strace::SyscallTable;
use crate::bench::response_parser::{Feed, ResponseParser};
use crate::bench::{engine, Limit, Progress};

/// How a run is done.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `mpm`-based program to serve with (`--server-bin`).
    pub bin: PathBuf,
    /// The document root served.
    pub docroot: PathBuf,
    /// Each timed run.
    pub duration: Duration,
    /// Load before each timed run, not counted in req/s or latency.
    pub warmup: Duration,
    /// Count system calls by name with strace.
    pub per_syscall: bool,
    /// Set on Ctrl-C: finish nothing more, stop the servers.
    pub stop: Arc<AtomicBool>,
}

/// Measure every variant under every scenario; `on_cell` sees each cell as
/// it is done.
pub fn run_all(
    settings: &Settings,
    variants: &[Variant],
    scenarios: &[Scenario],
    mut on_cell: impl FnMut(&Cell),
) -> Result<Vec<Cell>, Error> {
    let mut cells = Vec::new();
    for variant in variants {
        // One server per program, in the order scenarios first need it.
        let mut bins: Vec<ServerBin> = Vec::new();
        for s in scenarios {
            if !bins.contains(&s.server) {
                bins.push(s.server);
            }
        }
        for bin in bins {
            let mine: Vec<&Scenario> = scenarios.iter().filter(|s| s.server == bin).collect();
            let blank = |s: &Scenario| Cell {
                variant: variant.label.clone(),
                mpm: variant.mpm.to_string(),
                allocator: variant.allocator.to_string(),
                scenario: s.name.clone(),
                idle_connections: s.idle_connections(),
                ..Cell::default()
            };
            let (path, mut args) = match bin {
                ServerBin::This => (
                    settings.bin.clone(),
                    vec![
                        "--docroot".to_string(),
                        settings.docroot.display().to_string(),
                    ],
                ),
                ServerBin::Example(name) => (example_path(&settings.bin, name), Vec::new()),
            };
            if !path.is_file() {
                for s in mine {
                    let mut c = blank(s);
                    c.skipped = Some(format!(
                        "{} is not built (cargo build --release -p mpm --examples)",
                        path.display()
                    ));
                    on_cell(&c);
                    cells.push(c);
                }
                continue;
            }
            args.extend([
                "--mpm".into(),
                variant.mpm.to_string(),
                "--allocator".into(),
                variant.allocator.to_string(),
            ]);
            args.extend(variant.flags.iter().cloned());
            let server = ServerChild::start(&path, &args)?;
            for s in mine {
                if settings.stop.load(Ordering::Relaxed) {
                    return Err(Error::config("interrupted; the servers were stopped"));
                }
                let mut c = blank(s);
                match s.load {
                    Load::Requests {
                        connections,
                        keepalive,
                    } => measure_load(settings, &server, s, connections, keepalive, &mut c)?,
                    Load::Idle { connections } => measure_idle(&server, s, connections, &mut c)?,
                    Load::SlowReader {
                        transfers,
                        chunk,
                        pause_us,
                    } => measure_slow_reader(&server, s, transfers, chunk, pause_us, &mut c)?,
                }
                on_cell(&c);
                cells.push(c);
            }
            server.stop()?;
        }
    }
    Ok(cells)
}

/// `target/release/examples/NAME` next to `target/release/mpm`.
fn example_path(bin: &Path, name: &str) -> PathBuf {
    bin.parent()
        .unwrap_or(Path::new("."))
        .join("examples")
        .join(name)
}

fn field(v: &serde_json::Value, name: &str) -> Option<f64> {
    v.get(name).and_then(serde_json::Value::as_f64)
}

/// The requests served between two status pages (the second status request
/// is counted in `after`, the first is not), and a function giving any
/// counter's growth over that window per request.
fn per_request<'a>(
    before: &'a serde_json::Value,
    after: &'a serde_json::Value,
) -> (f64, impl Fn(&str) -> Option<f64> + 'a) {
    let requests = match (
        field(before, "total_requests"),
        field(after, "total_requests"),
    ) {
        (Some(b), Some(a)) => (a - b - 1.0).max(1.0),
        _ => 1.0,
    };
    let per = move |name: &str| Some((field(after, name)? - field(before, name)?) / requests);
    (requests, per)
}

/// The server's own per-request counts of writes and context switches.
fn server_costs(cell: &mut Cell, per: &impl Fn(&str) -> Option<f64>) {
    cell.sends_per_req = per("send_calls");
    cell.send_waits_per_req = per("send_would_block");
    cell.ctx_switches_per_req = match (
        per("voluntary_ctxt_switches"),
        per("involuntary_ctxt_switches"),
    ) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
}

fn measure_load(
    settings: &Settings,
    server: &ServerChild,
    scenario: &Scenario,
    connections: usize,
    keepalive: bool,
    cell: &mut Cell,
) -> Result<(), Error> {
    let (addr, scheme, tls) = tls_target(server, scenario)?;
    let target = crate::bench::args::Target {
        host: addr.to_string(),
        addr,
        path: scenario.path.to_string(),
    };
    let mut load = engine::Load {
        addr,
        url: format!("{scheme}://{addr}{}", scenario.path),
        request: target.request(!keepalive, &[]),
        connections,
        threads: 1,
        limit: Limit::Duration(settings.warmup),
        keepalive,
        timeout: Duration::from_secs(10),
        tls,
    };
    let pid = server.pid();
    // The counters' window covers the warm-up too: perf needs a moment to
    // attach, and every per-request figure is over the same requests.
    let tree = proc_sample::tree(pid);
    let strace = if settings.per_syscall {
        SyscallTable::start(&tree)
    } else {
        None
    };
    let before = server.status()?;
    // perf refuses a pid that is gone: a process manager may have just
    // replaced a child, so try again with the tree as it is now.
    let perf = SyscallCount::start(&tree)
        .or_else(|| SyscallCount::start(&proc_sample::tree(pid)))
        .or_else(|| SyscallCount::start(&proc_sample::tree(pid)));
    let proc_before = proc_sample::sample(pid);
    let run = |load: &engine::Load| {
        engine::run(load, &Progress::new(Arc::clone(&settings.stop)))
            .map_err(|e| Error::io("running the load", e))
    };
    if !settings.warmup.is_zero() {
        run(&load)?;
    }
    load.limit = Limit::Duration(settings.duration);
    let summary = run(&load)?;
    let proc_after = proc_sample::sample(pid);
    let syscalls = perf.and_then(SyscallCount::finish);
    let after = server.status()?;
    let by_name = strace.and_then(SyscallTable::finish);
    let (requests, per) = per_request(&before, &after);
    cell.responses = summary.responses;
    cell.errors = summary.errors.total();
    cell.non_200 = summary
        .status
        .iter()
        .filter(|(s, _)| **s != 200)
        .map(|(_, n)| n)
        .sum();
    cell.requests_per_s = Some(summary.requests_per_s);
    let l = summary.latency_us;
    if summary.responses > 0 {
        (cell.p50_us, cell.p90_us, cell.p99_us, cell.p99_9_us) =
            (Some(l.p50), Some(l.p90), Some(l.p99), Some(l.p99_9));
    }
    cell.cpu_us_per_req =
        Some(proc_after.cpu_us.saturating_sub(proc_before.cpu_us) as f64 / requests);
    server_costs(cell, &per);
    cell.syscalls_per_req = syscalls.map(|n| n as f64 / requests);
    cell.allocations_per_req = per("allocations");
    cell.lock_waits_per_req = per("lock_contended");
    cell.lock_wait_us_per_req = per("lock_wait_us");
    cell.pss_kib = Some(proc_after.pss_kib);
    cell.syscalls_by_name = by_name.map(|rows| {
        rows.into_iter()
            .map(|(name, n)| (name, n as f64 / requests))
            .collect()
    });
    Ok(())
}

/// Fetch the scenario's file `transfers` times, one connection each,
/// reading `chunk` bytes every `pause_us` µs: what the server's writes and
/// wake-ups cost per transfer to a client slower than the network.
fn measure_slow_reader(
    server: &ServerChild,
    scenario: &Scenario,
    transfers: usize,
    chunk: usize,
    pause_us: u64,
    cell: &mut Cell,
) -> Result<(), Error> {
    let pid = server.pid();
    let request = crate::bench::args::Target {
        host: server.addr.to_string(),
        addr: server.addr,
        path: scenario.path.to_string(),
    }
    .request(true, &[]);
    let before = server.status()?;
    let proc_before = proc_sample::sample(pid);
    let started = std::time::Instant::now();
    let mut buf = vec![0u8; chunk.max(1)];
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut latencies = Vec::with_capacity(transfers);
    for _ in 0..transfers {
        let t = std::time::Instant::now();
        let fetched = (|| -> std::io::Result<usize> {
            let mut c = TcpStream::connect_timeout(&server.addr, Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(30)))?;
            c.write_all(&request)?;
            let (mut total, mut status_ok) = (0, false);
            loop {
                let n = c.read(&mut buf)?;
                if n == 0 {
                    return Ok(if status_ok { total } else { 0 });
                }
                if total == 0 {
                    status_ok = buf[..n].starts_with(b"HTTP/1.1 200");
                }
                total += n;
                std::thread::sleep(Duration::from_micros(pause_us));
            }
        })();
        match fetched {
            Ok(n) if n > 0 => ok += 1,
            _ => failed += 1,
        }
        latencies.push(t.elapsed().as_micros() as u64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let proc_after = proc_sample::sample(pid);
    let after = server.status()?;
    let (requests, per) = per_request(&before, &after);
    latencies.sort_unstable();
    cell.responses = ok;
    cell.errors = failed;
    cell.requests_per_s = Some(ok as f64 / elapsed.max(1e-9));
    cell.p50_us = latencies.get(latencies.len() / 2).copied();
    cell.p99_us = latencies.get(latencies.len() * 99 / 100).copied();
    cell.cpu_us_per_req =
        Some(proc_after.cpu_us.saturating_sub(proc_before.cpu_us) as f64 / requests);
    server_costs(cell, &per);
    Ok(())
}

/// Where a scenario's load goes: the plain listener, or the TLS one with
/// the client `--insecure` would make (resuming sessions or not).
fn tls_target(
    server: &ServerChild,
    scenario: &Scenario,
) -> Result<
    (
        std::net::SocketAddr,
        &'static str,
        Option<crate::bench::tls::TlsClient>,
    ),
    Error,
> {
    if scenario.tls == Tls::Off {
        return Ok((server.addr, "http", None));
    }
    let addr = server.tls_addr.ok_or_else(|| {
        Error::config(format!(
            "scenario {}: the server has no TLS listener (--listen-tls)",
            scenario.name
        ))
    })?;
    let client = crate::bench::tls::client("localhost", None, true, scenario.tls == Tls::Resumed)?;
    Ok((addr, "https", Some(client)))
}

/// A blocking connection, plain or TLS.
trait Duplex: Read + Write {}
impl<T: Read + Write> Duplex for T {}

/// One request on an open connection, blocking: its status.
fn exchange(conn: &mut dyn Duplex, request: &[u8], parser: &mut ResponseParser) -> Option<u16> {
    conn.write_all(request).ok()?;
    conn.flush().ok()?;
    parser.reset();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = conn.read(&mut buf).ok()?;
        if n == 0 {
            return parser.eof().map(|r| r.status);
        }
        match parser.feed(&buf[..n]) {
            Ok(Feed::More) => {}
            Ok(Feed::Done(r, _)) => return Some(r.status),
            Err(_) => return None,
        }
    }
}

fn measure_idle(
    server: &ServerChild,
    scenario: &Scenario,
    connections: usize,
    cell: &mut Cell,
) -> Result<(), Error> {
    let _ = mpm_master::raise_fd_limit();
    let pid = server.pid();
    let base = proc_sample::sample(pid);
    let request = crate::bench::args::Target {
        host: server.addr.to_string(),
        addr: server.addr,
        path: scenario.path.to_string(),
    }
    .request(false, &[]);
    let mut parser = ResponseParser::default();
    let mut held: Vec<Box<dyn Duplex>> = Vec::with_capacity(connections);
    let mut failed = 0u64;
    let (addr, _, tls) = tls_target(server, scenario)?;
    for _ in 0..connections {
        let conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).and_then(|c| {
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            Ok(c)
        });
        let conn: std::io::Result<Box<dyn Duplex>> = match (conn, &tls) {
            (Ok(c), None) => Ok(Box::new(c)),
            (Ok(c), Some(t)) => rustls::ClientConnection::new(t.config.clone(), t.name.clone())
                .map(|tc| Box::new(rustls::StreamOwned::new(tc, c)) as Box<dyn Duplex>)
                .map_err(std::io::Error::other),
            (Err(e), _) => Err(e),
        };
        match conn {
            Ok(mut c) => match exchange(&mut *c, &request, &mut parser) {
                Some(200) => held.push(c),
                _ => failed += 1,
            },
            Err(_) => failed += 1,
        }
    }
    // Let every process settle (parked connections, freed buffers).
    std::thread::sleep(Duration::from_millis(300));
    let s = proc_sample::sample(pid);
    // A sample spread over the connections, oldest to newest, is served again.
    let picks: Vec<usize> = if held.is_empty() {
        Vec::new()
    } else {
        let k = held.len().min(10);
        (0..k)
            .map(|i| {
                if k == 1 {
                    0
                } else {
                    i * (held.len() - 1) / (k - 1)
                }
            })
            .collect()
    };
    let served = picks
        .iter()
        .filter(|&&i| {
            held.get_mut(i)
                .and_then(|c| exchange(&mut **c, &request, &mut parser))
                == Some(200)
        })
        .count();
    cell.errors = failed;
    cell.pss_kib = Some(s.pss_kib);
    cell.rss_kib = Some(s.rss_kib);
    cell.processes = Some(s.processes);
    cell.threads = Some(s.threads);
    cell.pss_per_conn_kib =
        Some(s.pss_kib.saturating_sub(base.pss_kib) as f64 / connections.max(1) as f64);
    cell.idle_sample_served = Some(format!("{served}/{}", picks.len()));
    cell.responses = held.len() as u64;
    Ok(())
}
