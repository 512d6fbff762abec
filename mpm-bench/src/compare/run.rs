//! Runs the cells: each round starts, for every variant in turn, a fresh
//! server child per program its scenarios need, measures each scenario once
//! (idle ones first, against the fresh server's memory), and stops it; R
//! rounds interleave the variants (A B C A B C), so that a machine that
//! drifts — another program starting, a CPU warming — affects all of them.
//!
//! Every per-request figure is a difference of the server's counters over
//! the timed run (status page and /proc read just before and just after
//! it; the warm-up is outside the window), divided by the requests the
//! server answered in it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpm_core::Error;

use super::experiments::Variant;
use super::origin::Origin;
use super::perf::SyscallCount;
use super::proc_sample::{self, Sample};
use super::report::{Cell, Metrics, Run};
use super::scenario::{Load, Scenario, ServerBin, Tls};
use super::server_child::ServerChild;
use super::strace::SyscallTable;
use crate::bench::h2;
use crate::bench::response_parser::{Feed, ResponseParser};
use crate::bench::tls::TlsClient;
use crate::bench::{engine, Limit, Progress};

/// How a run is done.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `mpm`-based program to serve with (`--server-bin`).
    pub bin: PathBuf,
    /// The document root the built-in scenarios are served from.
    pub docroot: PathBuf,
    /// Each timed run.
    pub duration: Duration,
    /// Load before each timed run, not counted in any figure.
    pub warmup: Duration,
    /// Runs of each cell.
    pub repeat: usize,
    /// Count system calls by name with strace.
    pub per_syscall: bool,
    /// `serve` flags given after `--`, for every server.
    pub serve_flags: Vec<String>,
    /// Set on Ctrl-C: finish nothing more, stop the servers.
    pub stop: Arc<AtomicBool>,
    /// Compare's origin, when a scenario is proxied to it: the servers of
    /// proxied scenarios get `--proxy /=http://ORIGIN`.
    pub origin: Option<Arc<Origin>>,
}

/// Measure every variant under every scenario, `settings.repeat` times
/// over; `on_run` sees each cell after each of its runs, with a label
/// (`run 2/3`). The cells come variant by variant, scenarios in order.
pub fn run_all(
    settings: &Settings,
    variants: &[Variant],
    scenarios: &[Scenario],
    mut on_run: impl FnMut(&str, &Cell),
) -> Result<Vec<Cell>, Error> {
    let mut cells: Vec<Cell> = variants
        .iter()
        .flat_map(|v| {
            scenarios.iter().map(move |s| {
                Cell::new(
                    (&v.label, &v.mpm.to_string(), &v.allocator.to_string()),
                    &s.name,
                    s.idle_connections(),
                )
            })
        })
        .collect();
    // One server per program (and per waiting count: each is sized for
    // its requests), in the order scenarios first need it.
    let mut bins: Vec<(ServerBin, Option<usize>)> = Vec::new();
    for s in scenarios {
        if !bins.contains(&s.server_key()) {
            bins.push(s.server_key());
        }
    }
    let repeat = settings.repeat.max(1);
    for round in 0..repeat {
        let label = format!("run {}/{repeat}", round + 1);
        for (vi, variant) in variants.iter().enumerate() {
            for &key in &bins {
                let bin = key.0;
                // Idle scenarios first: their baseline is the fresh server.
                let mut mine: Vec<usize> = (0..scenarios.len())
                    .filter(|&i| scenarios[i].server_key() == key)
                    .collect();
                mine.sort_by_key(|&i| scenarios[i].idle_connections().is_none());
                let index = |si: usize| vi * scenarios.len() + si;
                if mine.iter().all(|&si| cells[index(si)].skipped.is_some()) {
                    continue;
                }
                let (path, mut args) = match bin {
                    ServerBin::Docroot => (
                        settings.bin.clone(),
                        vec![
                            "--docroot".to_string(),
                            settings.docroot.display().to_string(),
                        ],
                    ),
                    ServerBin::Program => (settings.bin.clone(), Vec::new()),
                    ServerBin::Example(name) => (example_path(&settings.bin, name), Vec::new()),
                };
                if !path.is_file() {
                    for &si in &mine {
                        let c = &mut cells[index(si)];
                        c.skip(format!(
                            "{} is not built (cargo build --release -p mpm --examples)",
                            path.display()
                        ));
                        on_run(&label, c);
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
                args.extend(scenarios[mine[0]].server_flags(variant.mpm));
                let origin = settings
                    .origin
                    .as_ref()
                    .filter(|_| mine.iter().any(|&si| scenarios[si].upstream.is_some()));
                if let Some(o) = origin {
                    args.extend(o.proxy_flags());
                }
                // The counters are read from the status page: where compare
                // expects it, whatever the program's own default.
                args.extend(["--status-path".into(), "/server-status".into()]);
                args.extend(settings.serve_flags.iter().cloned());
                let server = match ServerChild::start(&path, &args) {
                    Ok(s) => s,
                    Err(e) => {
                        // This variant cannot run here (an allocator the
                        // program lacks, a flag it refuses): say so, go on.
                        let text = e.to_string();
                        let why = match text.split_once("did not start: ") {
                            Some((_, last)) => format!("the server did not start: {last}"),
                            None => text,
                        };
                        for &si in &mine {
                            let c = &mut cells[index(si)];
                            c.skip(why.clone());
                            on_run(&label, c);
                        }
                        continue;
                    }
                };
                let mut baseline = None;
                let mut waited = false;
                for &si in &mine {
                    if settings.stop.load(Ordering::Relaxed) {
                        return Err(Error::config("interrupted; the servers were stopped"));
                    }
                    let s = &scenarios[si];
                    let run = match s.load {
                        Load::Requests => measure_load(settings, &server, s)?,
                        Load::Idle { connections } => {
                            measure_idle(&server, s, connections, &mut baseline)?
                        }
                        Load::SlowReader {
                            transfers,
                            chunk,
                            pause_us,
                        } => Measured::Run(Box::new(measure_slow_reader(
                            &server, s, transfers, chunk, pause_us,
                        )?)),
                        Load::Waiting { requests } => {
                            waited = true;
                            let origin = origin.ok_or_else(|| {
                                Error::config(format!("{}: no origin to proxy to", s.name))
                            })?;
                            Measured::Run(Box::new(measure_waiting(&server, origin, s, requests)?))
                        }
                    };
                    let c = &mut cells[index(si)];
                    match run {
                        Measured::Run(run) => c.add(*run),
                        // Another protocol's figures are not this one's:
                        // not run, as a variant that could not start.
                        Measured::Refused(why) => c.skip(why),
                    }
                    on_run(&label, c);
                }
                if waited {
                    // Its requests were cut, not answered: a server that
                    // takes its time to drain them has been measured
                    // already, and is killed with its group if it must be.
                    let _ = server.stop();
                } else {
                    server.stop()?;
                }
            }
        }
    }
    Ok(cells)
}

/// What one run of a cell came to.
enum Measured {
    /// Its figures.
    Run(Box<Run>),
    /// The server would not speak the scenario's protocol (HTTP/2 over TLS
    /// to a server that chose `http/1.1` by ALPN): why, and no figure.
    Refused(String),
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
/// is not counted in `after`, the first is), and a function giving any
/// counter's growth over that window per request: `None` when the page
/// does not report it (a figure that is not this model's or allocator's).
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

/// The server's own per-request counts over the window.
fn server_costs(m: &mut Metrics, per: &impl Fn(&str) -> Option<f64>) {
    m.sends_per_req = per("send_calls");
    m.send_waits_per_req = per("send_would_block");
    m.ctx_switches_per_req = match (
        per("voluntary_ctxt_switches"),
        per("involuntary_ctxt_switches"),
    ) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    m.allocations_per_req = per("allocations");
    m.lock_waits_per_req = per("lock_contended");
    m.lock_wait_us_per_req = per("lock_wait_us");
    m.accept_waits_per_req = per("accept_waits");
    m.accept_wait_us_per_req = per("accept_wait_ms").map(|ms| ms * 1000.0);
}

fn cpu_per_request(before: &Sample, after: &Sample, requests: f64) -> Option<f64> {
    Some(after.cpu_us.saturating_sub(before.cpu_us) as f64 / requests)
}

fn measure_load(
    settings: &Settings,
    server: &ServerChild,
    scenario: &Scenario,
) -> Result<Measured, Error> {
    let (addr, scheme, tls) = tls_target(server, scenario)?;
    let host = addr.to_string();
    let mut load = engine::Load::from_workload(
        addr,
        &host,
        &scenario.workload,
        Limit::Duration(settings.warmup),
    );
    load.url = format!("{scheme}://{host} ({})", scenario.workload.name);
    load.tls = tls;
    // A proxied load: the tree before it, as the baseline of what its
    // waiting requests add.
    let origin = settings
        .origin
        .as_deref()
        .filter(|_| scenario.upstream.is_some());
    let idle = origin.map(|_| proc_sample::sample(server.pid()));
    // A refusal (HTTP/2 not chosen by ALPN) ends the cell's run as such.
    let run = |load: &engine::Load| {
        let progress = Progress::new(Arc::clone(&settings.stop));
        let summary = engine::run(load, &progress).map_err(|e| Error::io("running the load", e))?;
        Ok::<_, Error>(match progress.refused() {
            Some(why) => Err(why.to_string()),
            None => Ok(summary),
        })
    };
    if !settings.warmup.is_zero() {
        if let Err(why) = run(&load)? {
            return Ok(Measured::Refused(why));
        }
    }
    // The window: tracers attached first (they wait until they are), then
    // the counters read just before and just after the timed run.
    let pid = server.pid();
    let tree = proc_sample::tree(pid);
    let strace = if settings.per_syscall {
        SyscallTable::start(&tree)
    } else {
        None
    };
    // perf refuses a pid that is gone: a process manager may have just
    // replaced a child, so try again with the tree as it is now.
    let perf = SyscallCount::start(&tree)
        .or_else(|| SyscallCount::start(&proc_sample::tree(pid)))
        .or_else(|| SyscallCount::start(&proc_sample::tree(pid)));
    let before = server.status()?;
    let proc_before = proc_sample::sample(pid);
    load.limit = Limit::Duration(settings.duration);
    let opened_before = origin.map(Origin::connections);
    // Mid-run, the tree and the requests waiting on the origin, sampled
    // together: what the server holds for the requests in flight.
    let (summary, mid) = std::thread::scope(|scope| {
        let sampler = origin.map(|o| {
            let half = settings.duration / 2;
            scope.spawn(move || {
                std::thread::sleep(half);
                (proc_sample::sample(pid), o.waiting())
            })
        });
        let summary = run(&load);
        (summary, sampler.and_then(|t| t.join().ok()))
    });
    let summary = match summary? {
        Ok(summary) => summary,
        Err(why) => return Ok(Measured::Refused(why)),
    };
    let proc_after = proc_sample::sample(pid);
    let after = server.status()?;
    let syscalls = perf.and_then(SyscallCount::finish);
    let by_name = strace.and_then(SyscallTable::finish);
    let (requests, per) = per_request(&before, &after);
    let mut m = Metrics {
        requests_per_s: Some(summary.requests_per_s),
        cpu_us_per_req: cpu_per_request(&proc_before, &proc_after, requests),
        syscalls_per_req: syscalls.map(|n| n as f64 / requests),
        pss_kib: Some(proc_after.pss_kib as f64),
        // What served the load (an HTTP/2 connection may hold a thread).
        processes: Some(proc_after.processes as f64),
        threads: Some(proc_after.threads as f64),
        ..Metrics::default()
    };
    if summary.responses > 0 {
        let l = summary.latency_us;
        m.p50_us = Some(l.p50 as f64);
        m.p90_us = Some(l.p90 as f64);
        m.p99_us = Some(l.p99 as f64);
        m.p99_9_us = Some(l.p99_9 as f64);
    }
    server_costs(&mut m, &per);
    if let (Some(o), Some(idle), Some((held, waiting))) = (origin, idle, mid) {
        let opened = o.connections() - opened_before.unwrap_or(0);
        m.upstream_conns_per_1k = Some(1000.0 * opened as f64 / requests);
        m.clients = Some(scenario.workload.connections as f64);
        waiting_figures(&mut m, &idle, &held, waiting);
    }
    Ok(Measured::Run(Box::new(Run {
        metrics: m,
        responses: summary.responses,
        errors: summary.errors.total(),
        unexpected: summary.unexpected,
        statuses: summary.status,
        syscalls_by_name: by_name.map(|rows| {
            rows.into_iter()
                .map(|(name, n)| (name, n as f64 / requests))
                .collect()
        }),
        idle_sample: None,
    })))
}

/// The tree idle and holding `waiting` requests: its footprint both ways,
/// and per waiting request the PSS added and the threads and processes
/// held (all of them: a pool made at start holds the requests as much as
/// one that grew for them).
fn waiting_figures(m: &mut Metrics, idle: &Sample, held: &Sample, waiting: u64) {
    m.baseline_pss_kib = Some(idle.pss_kib as f64);
    m.baseline_processes = Some(idle.processes as f64);
    m.baseline_threads = Some(idle.threads as f64);
    m.pss_kib = Some(held.pss_kib as f64);
    m.rss_kib = Some(held.rss_kib as f64);
    m.processes = Some(held.processes as f64);
    m.threads = Some(held.threads as f64);
    m.waiting_requests = Some(waiting as f64);
    if waiting > 0 {
        let w = waiting as f64;
        m.pss_per_waiting_kib = Some((held.pss_kib as f64 - idle.pss_kib as f64) / w);
        m.threads_per_waiting = Some(held.threads as f64 / w);
        m.processes_per_waiting = Some(held.processes as f64 / w);
    }
}

/// The longest a waiting scenario waits for its requests to reach the
/// origin (which answers at 10 s): then the tree is sampled with those
/// that did.
const WAIT_AT_MOST: Duration = Duration::from_secs(8);
/// Once every request is sent, how long the count at the origin may stay
/// still before the tree is sampled: a server that holds no more (prefork
/// at its process cap) is not waited on for the whole bound.
const WAIT_STILL: Duration = Duration::from_millis(1500);

/// Open `requests` connections at once, each sending the scenario's
/// request to the proxied route, and sample the tree once the origin has
/// them all (or once their count stops growing, or after
/// [`WAIT_AT_MOST`]), against the tree before them. Requests held are
/// those that reached the origin; an answer before it (the origin answers
/// after 10 s) is unexpected, a refused or closed connection an error.
fn measure_waiting(
    server: &ServerChild,
    origin: &Origin,
    scenario: &Scenario,
    requests: usize,
) -> Result<Run, Error> {
    let pid = server.pid();
    let idle = settled(pid);
    let request = scenario
        .first_request()
        .to_bytes(&server.addr.to_string(), false);
    let (mut run, mut socks) = park(server.addr, &request, requests, origin)?;
    // Let every process settle (threads parked, buffers freed), as idle does.
    std::thread::sleep(Duration::from_millis(300));
    let mut held = proc_sample::sample(pid);
    if held.processes == 0 {
        // Every descriptor this process may open is a parked connection
        // or the origin's end of one, and /proc cannot be read: give back
        // a few (a few requests of thousands) and read again. A tree that
        // still cannot be read makes the run invalid, never a zero.
        socks.truncate(socks.len().saturating_sub(64));
        std::thread::sleep(Duration::from_millis(100));
        held = proc_sample::sample(pid);
    }
    drop(socks);
    if held.processes == 0 || idle.processes == 0 {
        // Counted as failed requests: the cell is invalid and ranked nowhere.
        eprintln!(
            "mpm compare: could not read the server's processes from /proc with {requests} \
             requests parked (descriptors exhausted? raise the hard limit: ulimit -Hn); \
             this run is invalid"
        );
        run.errors += requests as u64;
        return Ok(run);
    }
    waiting_figures(
        &mut run.metrics,
        &idle,
        &held,
        run.responses - run.unexpected,
    );
    Ok(run)
}

/// The tree once its thread count has stopped changing (a worker sized
/// for 10,000 requests is still starting threads when its processes are
/// all there), within 10 s.
fn settled(pid: i32) -> Sample {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = proc_sample::sample(pid);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = proc_sample::sample(pid);
        if (now.threads, now.processes) == (last.threads, last.processes) {
            return now;
        }
        last = now;
    }
    last
}

/// A waiting scenario's connection and whether its request is sent; None
/// once done with (answered, closed or refused).
type Parked = Option<(socket2::Socket, bool)>;

/// Open `requests` connections to `addr` at once, each sending `request`,
/// until `origin` has received all of them (or their count stops growing
/// for [`WAIT_STILL`] once every one is sent, or [`WAIT_AT_MOST`] has
/// passed): the run (responses: the requests held at the origin and the
/// answers that came before it; unexpected: those answers; errors: refused
/// and closed connections) and the connections, still open.
fn park(
    addr: SocketAddr,
    request: &[u8],
    requests: usize,
    origin: &Origin,
) -> Result<(Run, Vec<Parked>), Error> {
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
    use socket2::{Domain, Socket, Type};
    let before = origin.requests();
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
        .map_err(|e| Error::io("a waiting scenario's epoll set", std::io::Error::from(e)))?;
    let mut run = Run::default();
    let mut socks: Vec<Parked> = Vec::with_capacity(requests);
    let connect = |i: usize| -> std::io::Result<Socket> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        s.set_nonblocking(true)?;
        match s.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        epoll
            .add(&s, EpollEvent::new(EpollFlags::EPOLLOUT, i as u64))
            .map_err(std::io::Error::from)?;
        Ok(s)
    };
    for i in 0..requests {
        match connect(i) {
            Ok(s) => socks.push(Some((s, false))),
            Err(_) => {
                run.errors += 1;
                socks.push(None);
            }
        }
    }
    let started = Instant::now();
    let mut events = vec![EpollEvent::empty(); 1024];
    let (mut last, mut still_since) = (0, Instant::now());
    let mut buf = [0u8; 4096];
    let reached = || origin.requests().saturating_sub(before);
    loop {
        let done = reached() + run.errors + run.unexpected;
        if done >= requests as u64 || started.elapsed() >= WAIT_AT_MOST {
            break;
        }
        if done != last {
            (last, still_since) = (done, Instant::now());
        } else if socks.iter().flatten().all(|(_, sent)| *sent)
            && still_since.elapsed() >= WAIT_STILL
        {
            break;
        }
        let n = epoll.wait(&mut events, 20u16).unwrap_or(0);
        for ev in &events[..n] {
            let i = ev.data() as usize;
            let Some((s, sent)) = socks.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            let alive = if !*sent {
                // Connected, or refused: the request is far below a
                // socket buffer, so it goes whole or not at all.
                let ok = matches!(s.take_error(), Ok(None))
                    && s.send(request).is_ok_and(|w| w == request.len());
                *sent = ok;
                let mut ev = EpollEvent::new(EpollFlags::EPOLLIN, i as u64);
                ok && epoll.modify(&*s, &mut ev).is_ok()
            } else {
                // Anything now is an answer before the origin's (an error
                // page) or a close.
                use std::io::Read as _;
                match (&*s).read(&mut buf) {
                    Ok(n) if n > 0 => {
                        run.unexpected += 1;
                        if let Some(status) = status_of(&buf[..n]) {
                            *run.statuses.entry(status).or_insert(0) += 1;
                        }
                        let _ = epoll.delete(&*s);
                        socks[i] = None;
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    _ => false,
                }
            };
            if !alive {
                run.errors += 1;
                let _ = epoll.delete(&*s);
                socks[i] = None;
            }
        }
    }
    // (A proxy that retried a request would count it twice.)
    let held = reached().min(requests as u64);
    run.responses = held + run.unexpected;
    Ok((run, socks))
}

/// The status code of a response head, if it has one.
fn status_of(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let code = line.split(|&b| b == b' ').nth(1)?;
    std::str::from_utf8(code).ok()?.trim().parse().ok()
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
) -> Result<Run, Error> {
    let pid = server.pid();
    let (addr, _, tls) = tls_target(server, scenario)?;
    let first = scenario.first_request();
    let request = first.to_bytes(&addr.to_string(), true);
    let before = server.status()?;
    let proc_before = proc_sample::sample(pid);
    let started = Instant::now();
    let mut buf = vec![0u8; chunk.max(1)];
    let mut run = Run::default();
    let mut latencies = Vec::with_capacity(transfers);
    for _ in 0..transfers {
        let t = Instant::now();
        let fetched = (|| -> std::io::Result<Option<u16>> {
            let mut c = connect(addr, tls.as_ref(), Duration::from_secs(30))?;
            c.write_all(&request)?;
            c.flush()?;
            let mut status = None;
            loop {
                let n = c.read(&mut buf)?;
                if n == 0 {
                    return Ok(status);
                }
                if status.is_none() {
                    status = status_of(&buf[..n]);
                }
                std::thread::sleep(Duration::from_micros(pause_us));
            }
        })();
        match fetched {
            Ok(Some(status)) => {
                run.responses += 1;
                *run.statuses.entry(status).or_insert(0) += 1;
                run.unexpected += u64::from(!first.expect.accepts(status));
            }
            _ => run.errors += 1,
        }
        latencies.push(t.elapsed().as_micros() as f64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let proc_after = proc_sample::sample(pid);
    let after = server.status()?;
    let (requests, per) = per_request(&before, &after);
    latencies.sort_by(f64::total_cmp);
    let m = &mut run.metrics;
    m.requests_per_s = Some(run.responses as f64 / elapsed.max(1e-9));
    m.p50_us = latencies.get(latencies.len() / 2).copied();
    m.p99_us = latencies.get(latencies.len() * 99 / 100).copied();
    m.cpu_us_per_req = cpu_per_request(&proc_before, &proc_after, requests);
    server_costs(m, &per);
    Ok(run)
}

/// Where a scenario's load goes: the plain listener, or the TLS one with
/// the client `--insecure` would make (resuming sessions or not).
fn tls_target(
    server: &ServerChild,
    scenario: &Scenario,
) -> Result<(SocketAddr, &'static str, Option<TlsClient>), Error> {
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

/// A blocking connection to `addr`, over TLS with `tls`, whose reads
/// give up after `read_timeout`.
fn connect(
    addr: SocketAddr,
    tls: Option<&TlsClient>,
    read_timeout: Duration,
) -> std::io::Result<Box<dyn Duplex>> {
    let c = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    c.set_read_timeout(Some(read_timeout))?;
    Ok(match tls {
        None => Box::new(c),
        Some(t) => {
            let tc = rustls::ClientConnection::new(Arc::clone(&t.config), t.name.clone())
                .map_err(std::io::Error::other)?;
            Box::new(rustls::StreamOwned::new(tc, c))
        }
    })
}

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

/// A connection held idle: HTTP/1.1 (plain or TLS), or HTTP/2.
enum Held {
    Http1(Box<dyn Duplex>),
    Http2(Box<h2::Held>),
}

impl Held {
    /// Send `request` and read its answer: the status.
    fn exchange(&mut self, request: &[u8], parser: &mut ResponseParser) -> Option<u16> {
        match self {
            Held::Http1(c) => exchange(&mut **c, request, parser),
            Held::Http2(c) => c.exchange(request, Duration::from_secs(10)),
        }
    }
}

/// Hold `connections` idle keep-alive connections and read the tree's
/// memory (HTTP/2 ones when the workload says `h2-streams`: each has sent
/// the preface, its SETTINGS and one request). The baseline is the server's tree before its first idle
/// scenario (idle scenarios run first on a fresh server, so it is the
/// server as it starts, with the processes it will hold them with): the
/// figure per connection is what they add to it, first use of a process
/// included.
fn measure_idle(
    server: &ServerChild,
    scenario: &Scenario,
    connections: usize,
    baseline: &mut Option<Sample>,
) -> Result<Measured, Error> {
    let _ = mpm_master::raise_fd_limit();
    let pid = server.pid();
    let base = *baseline.get_or_insert_with(|| proc_sample::sample(pid));
    let (addr, _, tls) = tls_target(server, scenario)?;
    let first = scenario.first_request();
    let request = first.to_bytes(&addr.to_string(), false);
    let mut parser = ResponseParser::default();
    let mut held = Vec::with_capacity(connections);
    let mut run = Run::default();
    let h2 = scenario.workload.h2_streams.is_some();
    let timeout = Duration::from_secs(10);
    for _ in 0..connections {
        let opened = if h2 {
            match h2::Held::connect(addr, tls.as_ref(), timeout) {
                Ok(c) => Some(Held::Http2(Box::new(c))),
                Err(h2::ConnectError::Refused(why)) => return Ok(Measured::Refused(why)),
                Err(_) => None,
            }
        } else {
            connect(addr, tls.as_ref(), timeout).ok().map(Held::Http1)
        };
        let Some(mut c) = opened else {
            run.errors += 1;
            continue;
        };
        match c.exchange(&request, &mut parser) {
            Some(status) => {
                run.responses += 1;
                *run.statuses.entry(status).or_insert(0) += 1;
                if first.expect.accepts(status) {
                    held.push(c);
                } else {
                    run.unexpected += 1;
                }
            }
            None => run.errors += 1,
        }
    }
    // Let every process settle (parked connections, freed buffers).
    std::thread::sleep(Duration::from_millis(300));
    let s = proc_sample::sample(pid);
    // A sample spread over the connections, oldest to newest, is served again.
    let k = held.len().min(10);
    let picks: Vec<usize> = (0..k)
        .map(|i| {
            if k == 1 {
                0
            } else {
                i * (held.len() - 1) / (k - 1)
            }
        })
        .collect();
    let served = picks
        .iter()
        .filter(|&&i| {
            held.get_mut(i)
                .and_then(|c| c.exchange(&request, &mut parser))
                .is_some_and(|status| first.expect.accepts(status))
        })
        .count();
    // A held connection no longer served is an answer gone missing.
    run.unexpected += (picks.len() - served) as u64;
    run.idle_sample = Some((served, picks.len()));
    let m = &mut run.metrics;
    m.pss_kib = Some(s.pss_kib as f64);
    m.rss_kib = Some(s.rss_kib as f64);
    m.processes = Some(s.processes as f64);
    m.threads = Some(s.threads as f64);
    m.baseline_pss_kib = Some(base.pss_kib as f64);
    m.baseline_processes = Some(base.processes as f64);
    m.pss_per_conn_kib = Some((s.pss_kib as f64 - base.pss_kib as f64) / connections.max(1) as f64);
    Ok(Measured::Run(Box::new(run)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_line_gives_its_code() {
        assert_eq!(super::status_of(b"HTTP/1.1 404 Not Found\r\n"), Some(404));
        assert_eq!(super::status_of(b"garbage"), None);
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn requests_parked_at_the_origin_are_held_and_counted() {
        let origin = Origin::start(Duration::from_secs(30), 10).expect("origin");
        // Sent straight to the origin: every one reaches it and waits.
        let (run, socks) = park(origin.addr(), GET, 40, &origin).expect("parked");
        assert_eq!((run.responses, run.unexpected, run.errors), (40, 0, 0));
        assert_eq!(socks.iter().flatten().count(), 40, "all still open");
        assert_eq!(origin.waiting(), 40);
    }

    #[test]
    fn an_answer_before_the_origins_is_unexpected_and_a_refusal_an_error() {
        let counted = Origin::start(Duration::from_secs(30), 10).expect("origin");
        // A "server" that answers at once and never reaches the origin.
        let quick = Origin::start(Duration::ZERO, 10).expect("origin");
        let (run, _) = park(quick.addr(), GET, 5, &counted).expect("parked");
        assert_eq!((run.responses, run.unexpected, run.errors), (5, 5, 0));
        assert_eq!(run.statuses.get(&200), Some(&5));
        // Nothing listening: each connection refused.
        let gone = quick.addr();
        drop(quick);
        let (run, _) = park(gone, GET, 3, &counted).expect("parked");
        assert_eq!((run.responses, run.errors), (0, 3));
    }
}
