//! `mpm compare`: each chosen MPM × allocator (or an experiment's own
//! variants) as a separate `serve` child, driven through the same
//! workloads by the bench engine several times over (interleaved across the
//! variants), measured by the server's own counters and /proc, every answer
//! checked, and written up as `report.json`, `report.md` and `index.html`
//! with SVG charts and a recommendation.
//!
//! * [`experiments`] — what is compared: the default `matrix`, `malloc`, …
//! * [`scenario`] — the loads (built in, or [`Workload`]s: the
//!   application's own, `--workload` files, `METHOD:/path`); [`run`] — the
//!   cells, measured; [`server_child`] — a server under test, always
//!   stopped and reaped.
//! * [`origin`] — the origin behind a proxy route (`--upstream-delay`, the
//!   `waiting` experiment): one epoll thread answering after a delay;
//!   [`shape`] — what a waiting request holds, said in words from the
//!   measured threads and processes.
//! * [`proc_sample`] — CPU, PSS, RSS, processes, threads from /proc;
//!   [`perf`] — system calls by `perf stat`, [`strace`] — by name, when
//!   present; [`machine`] — the machine and its load.
//! * [`report`] — the cells (median, min–max, validity) and their columns,
//!   JSON and Markdown; [`charts`] and [`html`] — the SVG charts and the page.

pub mod charts;
pub mod experiments;
pub mod html;
pub mod machine;
pub mod origin;
pub mod perf;
pub mod proc_sample;
pub mod report;
pub mod run;
pub mod scenario;
pub mod server_child;
pub mod shape;
pub mod strace;

use crate::output::out;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mpm_core::allocator::AllocatorKind;
use mpm_core::Seconds;
use mpm_core::{Error, MpmKind};

use crate::numbers::count;
use crate::workload::{Workload, MAX_CONNECTIONS};
use experiments::{Experiment, Selection, EXPERIMENTS};
use origin::Origin;
use report::{terminal_row, Report};
use scenario::{ServerBin, Upstream, UPSTREAM_BODY};

/// `mpm compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// What to compare: `matrix` (every MPM × allocator, the default) or an
    /// experiment (`--experiment list` lists them).
    #[arg(long, default_value = "matrix", value_name = "NAME")]
    pub experiment: String,
    /// Process models, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_name = "MPM,...")]
    pub mpm: Vec<MpmKind>,
    /// Allocators, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub allocator: Vec<AllocatorKind>,
    /// Scenarios, comma-separated: the experiment's by name (default: all;
    /// `idle` for every idle count), or a request to measure the program
    /// with, `METHOD:/path` (`get:/api/users/1`: any 2xx expected, 50
    /// keep-alive connections).
    #[arg(long, value_delimiter = ',', value_name = "NAME|METHOD:/PATH,...")]
    pub scenario: Vec<String>,
    /// Workload files (TOML: a mix of requests with method, path, headers,
    /// body, weight and expected statuses; connections, keep-alive, slow
    /// clients), comma-separated or repeated. Workloads (these, the
    /// `METHOD:/path` scenarios, or else the application's own) replace the
    /// experiment's scenarios, served by the program as `serve` runs it.
    #[arg(long, value_delimiter = ',', value_name = "FILE.toml,...")]
    pub workload: Vec<PathBuf>,
    /// Put every server behind a proxy route to an origin compare starts
    /// itself, answering each request after this delay (`20ms`; `0`: at
    /// once): the scenario becomes `upstream`, GET / through the proxy on
    /// `--connections` keep-alive connections (or the given workloads, sent
    /// through it), and the report adds, per model, the requests waiting on
    /// the origin mid-run, the threads and processes holding them, KiB per
    /// waiting request, upstream connections opened per 1,000 requests,
    /// and the shape in words.
    #[arg(long, value_name = "DURATION")]
    pub upstream_delay: Option<Seconds>,
    /// Bytes in each of the origin's answers (with `--upstream-delay`).
    #[arg(long, default_value_t = UPSTREAM_BODY, value_name = "BYTES", value_parser = count::<0, { origin::MAX_BODY }>)]
    pub upstream_body: usize,
    /// Clients of the `upstream` scenario, each a keep-alive connection
    /// with one request in flight: N concurrent requests.
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = count::<1, { MAX_CONNECTIONS }>)]
    pub connections: usize,
    /// Requests the `waiting` experiment holds, comma-separated: a server
    /// of each model sized for each count.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,1000,10000",
        value_name = "N,...",
        value_parser = count::<1, { MAX_CONNECTIONS }>
    )]
    pub waiting: Vec<usize>,
    /// Idle keep-alive connection counts to measure memory at, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,500",
        value_name = "N,...",
        value_parser = count::<1, { MAX_CONNECTIONS }>
    )]
    pub idle: Vec<usize>,
    /// Length of each timed run.
    #[arg(long, default_value = "2s")]
    pub duration: Seconds,
    /// Load before each timed run (counted in no figure).
    #[arg(long, default_value = "300ms")]
    pub warmup: Seconds,
    /// Runs of each cell, interleaved across the variants (A B C A B C):
    /// the report gives their median and min–max.
    #[arg(long, default_value_t = 3, value_name = "R", value_parser = count::<1, { MAX_REPEAT }>)]
    pub repeat: usize,
    /// Where the report goes.
    #[arg(long, default_value = "target/mpm-report", value_name = "DIR")]
    pub out: PathBuf,
    /// The mpm-based program to serve with (default: this one); examples an
    /// experiment needs are looked for in `examples/` next to it.
    #[arg(long, value_name = "PATH")]
    pub server_bin: Option<PathBuf>,
    /// `serve` flags for every server under test, after `--`
    /// (`-- --docroot /srv/www --threads-per-child 64`).
    #[arg(last = true, value_name = "SERVE_FLAGS")]
    pub serve_flags: Vec<String>,
}

/// The most repetitions `--repeat` takes.
pub const MAX_REPEAT: usize = 100;

/// A docroot of compare's own, removed when dropped.
struct Docroot(PathBuf);

impl Docroot {
    fn create() -> Result<Docroot, Error> {
        let dir = std::env::temp_dir().join(format!("mpm-compare-{}", std::process::id()));
        let shown = dir.display().to_string();
        let io = |e| Error::io(format!("creating {shown}"), e);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(io)?;
        let root = Docroot(dir);
        // The page of the peers' measurements: 1456 bytes.
        let mut page = b"<html><body>".to_vec();
        page.resize(1456 - 15, b'x');
        page.extend_from_slice(b"</body></html>\n");
        fs::write(root.0.join("index.html"), &page).map_err(io)?;
        let file: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        fs::write(root.0.join("1mib.bin"), &file).map_err(io)?;
        // The low-water-mark experiment's long transfer.
        let big: Vec<u8> = file.iter().copied().cycle().take(16 << 20).collect();
        fs::write(root.0.join("16mib.bin"), big).map_err(io)?;
        Ok(root)
    }
}

impl Drop for Docroot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        let _ = fs::remove_dir_all(scratch_dir());
    }
}

/// A directory for files the servers under test write (access logs),
/// beside the docroot rather than in it, and removed with it.
pub(crate) fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mpm-compare-{}-scratch", std::process::id()));
    let _ = fs::create_dir_all(&dir);
    dir
}

/// The workloads of a run: `--workload` files and `METHOD:/path`
/// scenarios, else the application's own; and the `--scenario` names left.
fn workloads(args: &CompareArgs, app: &[Workload]) -> Result<(Vec<Workload>, Vec<String>), Error> {
    let mut given = Vec::new();
    let mut names = Vec::new();
    for file in &args.workload {
        given.push(Workload::from_file(file)?);
    }
    for s in &args.scenario {
        match Workload::from_spec(s) {
            Some(w) => given.push(w?),
            None => names.push(s.clone()),
        }
    }
    if given.is_empty() {
        for w in app {
            w.validate()
                .map_err(|e| Error::config(format!("the application's {e}")))?;
            given.push(w.clone());
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for w in &given {
        if seen.contains(&w.name.as_str()) {
            return Err(Error::config(format!(
                "two workloads are named '{}': give one a name of its own",
                w.name
            )));
        }
        seen.push(&w.name);
    }
    Ok((given, names))
}

/// `mpm compare`, with the workloads the application ships (none for the
/// `mpm` binary): run, print a row per run of each cell, write the report.
/// Exit code 1 when no cell is valid.
pub fn command(args: &CompareArgs, app: &[Workload]) -> Result<i32, Error> {
    if args.experiment == "list" {
        for e in EXPERIMENTS {
            out(format_args!("{:<10} {}\n", e.name, e.question));
        }
        return Ok(0);
    }
    let experiment: &Experiment = experiments::find(&args.experiment).ok_or_else(|| {
        let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        Error::config(format!(
            "--experiment: unknown experiment '{}' (expected {})",
            args.experiment,
            names.join(", ")
        ))
    })?;
    if args.duration.0.is_zero() {
        return Err(Error::config("--duration: a duration above zero"));
    }
    // Bounded as --waiting is: a huge count once panicked ("capacity
    // overflow") making room for its connections.
    if let Some(&n) = args.idle.iter().find(|&&n| n == 0 || n > MAX_CONNECTIONS) {
        return Err(Error::config(format!(
            "--idle {n}: counts from 1 to {MAX_CONNECTIONS}"
        )));
    }
    if args.repeat == 0 || args.repeat > MAX_REPEAT {
        return Err(Error::config(format!(
            "--repeat {}: from 1 to {MAX_REPEAT}",
            args.repeat
        )));
    }
    let upstream = upstream(args, experiment)?;
    if let Some(&n) = args
        .waiting
        .iter()
        .find(|&&n| n == 0 || n > MAX_CONNECTIONS)
    {
        return Err(Error::config(format!(
            "--waiting {n}: counts from 1 to {MAX_CONNECTIONS}"
        )));
    }
    let (workloads, names) = workloads(args, app)?;
    let selection = Selection {
        upstream,
        connections: args.connections,
        waiting: args.waiting.clone(),
        mpms: if args.mpm.is_empty() {
            MpmKind::ALL.to_vec()
        } else {
            args.mpm.clone()
        },
        allocators: if args.allocator.is_empty() {
            AllocatorKind::ALL.to_vec()
        } else {
            args.allocator.clone()
        },
        idle: args.idle.clone(),
        duration: args.duration.0,
        workloads,
    };
    let all = (experiment.scenarios)(&selection);
    if let Some(bad) = names
        .iter()
        .find(|name| !all.iter().any(|s| s.matches(name)))
    {
        let known: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        return Err(Error::config(format!(
            "--scenario: '{bad}' is not a scenario of {} (expected {}, or METHOD:/path)",
            experiment.name,
            known.join(", ")
        )));
    }
    let scenarios: Vec<_> = all
        .into_iter()
        .filter(|s| names.is_empty() || names.iter().any(|n| s.matches(n)))
        .collect();
    let variants = (experiment.variants)(&selection);
    if variants.is_empty() {
        return Err(Error::config(format!(
            "nothing to compare: {} has no variant with the selected MPMs and allocators",
            experiment.name
        )));
    }
    let bin = match &args.server_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| Error::io("finding this program to run it as the server", e))?,
    };
    check_serve_flags(&bin, &args.serve_flags)?;
    let docroot = if scenarios.iter().any(|s| s.server == ServerBin::Docroot) {
        Some(Docroot::create()?)
    } else {
        None
    };
    // The origin behind the proxied scenarios (one per run: they share its
    // delay), started before any server so that they inherit the
    // descriptor limit raised for it.
    let origin = match scenarios.iter().find_map(|s| s.upstream) {
        Some(up) => {
            if scenarios
                .iter()
                .any(|s| s.upstream.is_some_and(|u| u != up))
            {
                return Err(Error::config(
                    "the selected scenarios need origins with different delays: select them \
                     in separate runs",
                ));
            }
            origin::raise_fd_limit();
            Some(Arc::new(Origin::start(up.delay, up.body)?))
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Ctrl-C (or a SIGTERM) ends the current run; the servers are then stopped.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Error::io("installing signal handlers", e))?;
    }
    let settings = run::Settings {
        bin,
        docroot: docroot.as_ref().map(|d| d.0.clone()).unwrap_or_default(),
        duration: args.duration.0,
        warmup: args.warmup.0,
        repeat: args.repeat,
        per_syscall: experiment.per_syscall,
        serve_flags: args.serve_flags.clone(),
        stop,
        origin: origin.clone(),
    };
    let estimate = estimate(
        &scenarios,
        variants.len(),
        args.repeat,
        args.duration.0,
        args.warmup.0,
    );
    eprintln!(
        "mpm compare: {} — {} variants × {} scenarios × {} runs of {:.1}s, about {}",
        experiment.name,
        variants.len(),
        scenarios.len(),
        args.repeat,
        args.duration.0.as_secs_f64(),
        describe_estimate(estimate)
    );
    let started = SystemTime::now();
    let watch = machine::Watch::start();
    // A proxied load shows what its waiting requests hold.
    let columns: Vec<report::Column> = if upstream.is_some() {
        shape::UPSTREAM_COLUMNS.to_vec()
    } else {
        experiment.columns.to_vec()
    };
    let cells = run::run_all(&settings, &variants, &scenarios, |label, cell| {
        let idle = cell.idle_connections.is_some();
        out(format_args!(
            "{}\n",
            terminal_row(label, cell, &columns, idle)
        ));
    })?;
    let (machine, mut warnings) = watch.finish();
    if args.repeat == 1 {
        warnings.push(
            "each cell ran once: there is no spread to tell a difference from noise \
             (--repeat 3 or more)"
                .into(),
        );
    }
    let valid_cells = cells.iter().filter(|c| c.valid).count();
    let mut report = Report {
        experiment: experiment.name.to_string(),
        question: experiment.question.to_string(),
        setup: experiment.setup.to_string(),
        command: std::iter::once("mpm".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        started_unix: started
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs(),
        machine,
        repetitions: args.repeat,
        duration_s: args.duration.0.as_secs_f64(),
        warnings,
        findings: String::new(),
        recommendations: Vec::new(),
        valid_cells,
        columns,
        scenarios: scenarios
            .iter()
            .map(|s| (s.name.clone(), s.title.clone()))
            .collect(),
        cells,
    };
    report.findings = (experiment.findings)(&report);
    if let Some(up) = upstream {
        let shapes = shape::load_findings(&report, up.delay);
        report.findings = format!("{shapes} {}", report.findings);
    }
    report.recommendations = experiments::recommend(&report);
    html::write_all(&report, &args.out)?;
    out(format_args!("\n{}\n\nWhich to choose:\n", report.findings));
    for r in &report.recommendations {
        out(format_args!("  {r}\n"));
    }
    for w in &report.warnings {
        eprintln!("mpm compare: warning: {w}");
    }
    eprintln!(
        "mpm compare: report in {} (index.html, report.md, report.json) after {:.0}s",
        args.out.display(),
        started.elapsed().unwrap_or(Duration::ZERO).as_secs_f64()
    );
    if valid_cells == 0 {
        eprintln!(
            "mpm compare: no valid cell: every one was skipped, or more than 0.1 % of its \
             answers were unexpected or failed (see the answers column)"
        );
        return Ok(1);
    }
    Ok(0)
}

/// `--upstream-delay` and `--upstream-body`, checked: the origin the
/// matrix's scenarios are proxied to, if one is asked for.
fn upstream(args: &CompareArgs, experiment: &Experiment) -> Result<Option<Upstream>, Error> {
    if args.connections == 0 || args.connections > MAX_CONNECTIONS {
        return Err(Error::config(format!(
            "--connections {}: from 1 to {MAX_CONNECTIONS}",
            args.connections
        )));
    }
    if args.upstream_body > origin::MAX_BODY {
        return Err(Error::config(format!(
            "--upstream-body {}: at most {} bytes",
            args.upstream_body,
            origin::MAX_BODY
        )));
    }
    let Some(delay) = args.upstream_delay else {
        return Ok(None);
    };
    if delay.0 > origin::MAX_DELAY {
        return Err(Error::config(format!(
            "--upstream-delay {:?}: at most {:?}",
            delay.0,
            origin::MAX_DELAY
        )));
    }
    if experiment.name != "matrix" {
        return Err(Error::config(format!(
            "--upstream-delay: with the default experiment (matrix) only; {} has scenarios of \
             its own",
            experiment.name
        )));
    }
    Ok(Some(Upstream {
        delay: delay.0,
        body: args.upstream_body,
    }))
}

/// What starting a variant's server and stopping it costs, beside its runs:
/// `serve` binding and its first worker answering, then SIGTERM and the exit.
/// Measured on a loaded 2-core machine: one event cell of 1 s (with the
/// 300 ms warm-up) took 2.1 s in all, three variants 7.3 s, two variants ×
/// two scenarios × two rounds 14.6 s: about a second a server.
const SERVER_START_AND_STOP: Duration = Duration::from_secs(1);

/// How long the whole comparison should take: each of `repeat` rounds starts
/// every variant's servers afresh (one per program its scenarios need) and
/// runs every scenario on them.
fn estimate(
    scenarios: &[scenario::Scenario],
    variants: usize,
    repeat: usize,
    duration: Duration,
    warmup: Duration,
) -> Duration {
    // One server per program, and one per waiting count.
    let mut bins: Vec<(ServerBin, Option<usize>)> = Vec::new();
    for s in scenarios {
        if !bins.contains(&s.server_key()) {
            bins.push(s.server_key());
        }
    }
    let per_variant: Duration = scenarios
        .iter()
        .map(|s| s.estimate(duration, warmup))
        .sum::<Duration>()
        + SERVER_START_AND_STOP * bins.len() as u32;
    per_variant * (variants * repeat.max(1)) as u32
}

/// The estimate as the start line says it: seconds below two minutes (a run
/// of 6 s is "about 6 s", not "about 1 min"), whole minutes above.
fn describe_estimate(total: Duration) -> String {
    let secs = total.as_secs_f64();
    if secs < 120.0 {
        format!("{:.0} s", secs.max(1.0))
    } else {
        format!("{:.0} min", secs / 60.0)
    }
}

/// The `serve` flags after `--`, checked once by the program's own `check`
/// before any server starts: a flag it refuses is then one line and exit 2,
/// not a report in which every cell says its server did not start. Only a
/// refusal (`check`'s exit 2) stops the run; anything else (a program
/// without `check`, which compare cannot tell from here) is left for the
/// servers to tell.
fn check_serve_flags(bin: &std::path::Path, flags: &[String]) -> Result<(), Error> {
    if flags.is_empty() {
        return Ok(());
    }
    let out = std::process::Command::new(bin)
        .arg("check")
        .args(flags)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("running {} check", bin.display()), e))?;
    if out.status.code() != Some(2) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let said = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("refused");
    // Its own words, without its program's prefix: compare adds its own.
    let said = said.split_once("error: ").map_or(said, |(_, rest)| rest);
    Err(Error::config(format!(
        "the serve flags after --: {said} (`{} check {}` says so)",
        bin.display(),
        flags.join(" ")
    )))
}

#[cfg(test)]
mod estimate_tests {
    use super::*;
    use scenario::Scenario;

    #[test]
    fn a_short_run_is_announced_in_seconds_and_a_long_one_in_minutes() {
        assert_eq!(describe_estimate(Duration::from_secs(6)), "6 s");
        assert_eq!(describe_estimate(Duration::from_millis(200)), "1 s");
        assert_eq!(describe_estimate(Duration::from_secs(119)), "119 s");
        assert_eq!(describe_estimate(Duration::from_secs(600)), "10 min");
    }

    #[test]
    fn the_estimate_counts_each_run_its_warmup_and_each_server_start() {
        let keepalive = Scenario::workload(Workload::get("keepalive", "/"));
        let (one, warmup) = (Duration::from_secs(1), Duration::from_millis(300));
        let each = one + warmup + SERVER_START_AND_STOP;
        assert_eq!(
            estimate(std::slice::from_ref(&keepalive), 1, 1, one, warmup),
            each
        );
        // Three variants, three rounds: nine servers, nine runs.
        assert_eq!(
            estimate(std::slice::from_ref(&keepalive), 3, 3, one, warmup),
            each * 9
        );
        // Two scenarios on one server: one start.
        let two = [keepalive.clone(), keepalive];
        assert_eq!(
            estimate(&two, 1, 1, one, warmup),
            (one + warmup) * 2 + SERVER_START_AND_STOP
        );
    }

    #[test]
    fn each_waiting_count_is_counted_as_a_server_of_its_own() {
        let (one, warmup) = (Duration::from_secs(1), Duration::ZERO);
        let w = [Scenario::waiting(100), Scenario::waiting(1000)];
        let runs: Duration = w.iter().map(|s| s.estimate(one, warmup)).sum();
        assert_eq!(
            estimate(&w, 1, 1, one, warmup),
            runs + SERVER_START_AND_STOP * 2
        );
    }
}

#[cfg(test)]
mod option_tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: CompareArgs,
    }

    fn parse(args: &[&str]) -> Result<CompareArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("compare").chain(args.iter().copied())).map(|c| c.args)
    }

    /// The error `mpm compare ARGS` stops with before starting anything.
    fn refused(args: &[&str]) -> Error {
        let args = parse(args).expect("parsed");
        command(&args, &[]).expect_err("refused")
    }

    #[test]
    fn a_delay_that_is_not_a_duration_is_refused_with_exit_2() {
        let e = parse(&["--upstream-delay", "soon"]).expect_err("not a duration");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.contains("--upstream-delay") && first.contains("is not a duration"),
            "{text}"
        );
        let ok = parse(&["--upstream-delay", "20ms"]).expect("a duration");
        assert_eq!(
            ok.upstream_delay.map(|s| s.0),
            Some(Duration::from_millis(20))
        );
        assert_eq!((ok.upstream_body, ok.connections), (1456, 1000));
        assert_eq!(ok.waiting, [100, 1000, 10_000]);
    }

    #[test]
    fn upstream_and_waiting_values_out_of_bounds_are_one_line_and_exit_2() {
        // Counts are refused as they are read, with their range.
        for (args, says) in [
            (
                &["--upstream-delay", "20ms", "--connections", "0"][..],
                "'0' is not a whole number from 1 to 100000",
            ),
            (
                &["--upstream-delay", "20ms", "--upstream-body", "999999999"],
                "'999999999' is not a whole number from 0 to 67108864",
            ),
            (
                &["--experiment", "waiting", "--waiting", "100,0"],
                "'0' is not a whole number from 1 to 100000",
            ),
            (
                &["--idle", "0"],
                "'0' is not a whole number from 1 to 100000",
            ),
            (
                &["--idle", "100,18446744073709551615"],
                "'18446744073709551615' is not a whole number from 1 to 100000",
            ),
            (
                &["--repeat", "x"],
                "'x' is not a whole number from 1 to 100",
            ),
        ] {
            let e = parse(args).expect_err("refused as read");
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            assert_eq!(e.exit_code(), 2, "{args:?}: {text}");
            assert!(first.contains(says), "{args:?}: {text}");
        }
        for (args, says) in [
            (&["--upstream-delay", "1000s"][..], "--upstream-delay"),
            (
                &["--upstream-delay", "20ms", "--experiment", "tls"],
                "with the default experiment (matrix) only",
            ),
        ] {
            let e = refused(args);
            let text = e.to_string();
            assert_eq!(e.exit_code(), 2, "{args:?}: {text}");
            assert!(
                text.contains(says) && !text.contains('\n'),
                "{args:?}: {text}"
            );
        }
    }

    #[test]
    fn an_upstream_delay_makes_the_matrix_a_proxied_load() {
        let args = parse(&["--upstream-delay", "20ms", "--connections", "300"]).expect("parsed");
        let matrix = experiments::find("matrix").expect("matrix");
        let up = upstream(&args, matrix).expect("valid").expect("asked for");
        let sel = Selection {
            mpms: vec![MpmKind::Worker],
            allocators: vec![AllocatorKind::System],
            idle: vec![100, 500],
            duration: Duration::from_secs(1),
            workloads: Vec::new(),
            upstream: Some(up),
            connections: args.connections,
            waiting: args.waiting.clone(),
        };
        let s = (matrix.scenarios)(&sel);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(
            (s[0].name.as_str(), s[0].workload.connections, s[0].upstream),
            ("upstream", 300, Some(up))
        );
        // The servers keep their floor of workers (the idle counts are not
        // run), fewer than the clients.
        let v = (matrix.variants)(&sel);
        assert!(
            v[0].flags.join(" ").contains("--max-request-workers 256"),
            "{v:?}"
        );
        // Given workloads go through the proxy instead.
        let sel = Selection {
            workloads: vec![Workload::get("api", "/api/users/1")],
            ..sel
        };
        let s = (matrix.scenarios)(&sel);
        assert_eq!((s[0].name.as_str(), s[0].upstream), ("api", Some(up)));
        assert!(upstream(&parse(&[]).expect("parsed"), matrix)
            .expect("valid")
            .is_none());
    }
}
