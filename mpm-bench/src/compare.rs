//! `mpm compare`: each chosen MPM × allocator (or an experiment's own
//! variants) as a separate `mpm serve` child, driven through the same
//! scenarios by the bench engine, measured by the server's own counters and
//! /proc, and written up as `report.json`, `report.md` and `index.html` with
//! SVG charts.
//!
//! * [`experiments`] — what is compared: the default `matrix`, `malloc`, …
//! * [`scenario`] — the loads; [`run`] — the cells, measured;
//!   [`server_child`] — a server under test, always stopped and reaped.
//! * [`proc_sample`] — CPU, PSS, RSS, processes, threads from /proc;
//!   [`perf`] — system calls by `perf stat`, [`strace`] — by name, when present.
//! * [`report`] — the cells and their columns, JSON and Markdown;
//!   [`charts`] and [`html`] — the SVG charts and the page.

pub mod charts;
pub mod experiments;
pub mod html;
pub mod perf;
pub mod proc_sample;
pub mod report;
pub mod run;
pub mod scenario;
pub mod server_child;
pub mod strace;

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mpm_core::allocator::AllocatorKind;
use mpm_core::Seconds;
use mpm_core::{Error, MpmKind};

use experiments::{Experiment, Selection, EXPERIMENTS};
use report::{terminal_row, Report};

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
    /// Scenarios by name, comma-separated (default: all; `idle` for every idle count).
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub scenario: Vec<String>,
    /// Idle keep-alive connection counts to measure memory at, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,500",
        value_name = "N,..."
    )]
    pub idle: Vec<usize>,
    /// Length of each timed run.
    #[arg(long, default_value = "2s")]
    pub duration: Seconds,
    /// Load before each timed run (counted in the per-request figures, not in req/s).
    #[arg(long, default_value = "300ms")]
    pub warmup: Seconds,
    /// Where the report goes.
    #[arg(long, default_value = "target/mpm-report", value_name = "DIR")]
    pub out: PathBuf,
    /// The mpm-based program to serve with (default: this one); examples an
    /// experiment needs are looked for in `examples/` next to it.
    #[arg(long, value_name = "PATH")]
    pub server_bin: Option<PathBuf>,
}

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

/// `mpm compare`: run, print a row per cell, write the report.
pub fn command(args: &CompareArgs) -> Result<i32, Error> {
    if args.experiment == "list" {
        for e in EXPERIMENTS {
            println!("{:<10} {}", e.name, e.question);
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
    if args.idle.contains(&0) {
        return Err(Error::config("--idle: counts above zero"));
    }
    let selection = Selection {
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
    };
    let all = (experiment.scenarios)(&selection);
    if let Some(bad) = args
        .scenario
        .iter()
        .find(|name| !all.iter().any(|s| s.matches(name)))
    {
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        return Err(Error::config(format!(
            "--scenario: '{bad}' is not a scenario of {} (expected {})",
            experiment.name,
            names.join(", ")
        )));
    }
    let scenarios: Vec<_> = all
        .into_iter()
        .filter(|s| args.scenario.is_empty() || args.scenario.iter().any(|n| s.matches(n)))
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
    let docroot = Docroot::create()?;
    let stop = Arc::new(AtomicBool::new(false));
    // Ctrl-C (or a SIGTERM) ends the current run; the servers are then stopped.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Error::io("installing signal handlers", e))?;
    }
    let settings = run::Settings {
        bin,
        docroot: docroot.0.clone(),
        duration: args.duration.0,
        warmup: args.warmup.0,
        per_syscall: experiment.per_syscall,
        stop,
    };
    eprintln!(
        "mpm compare: {} — {} variants × {} scenarios, {:.1}s each",
        experiment.name,
        variants.len(),
        scenarios.len(),
        args.duration.0.as_secs_f64()
    );
    let started = SystemTime::now();
    let cells = run::run_all(&settings, &variants, &scenarios, |cell| {
        let idle = cell.idle_connections.is_some();
        println!("{}", terminal_row(cell, experiment.columns, idle));
    })?;
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
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        duration_s: args.duration.0.as_secs_f64(),
        findings: String::new(),
        columns: experiment.columns.to_vec(),
        scenarios: scenarios
            .iter()
            .map(|s| (s.name.clone(), s.title.clone()))
            .collect(),
        cells,
    };
    report.findings = (experiment.findings)(&report);
    html::write_all(&report, &args.out)?;
    println!("\n{}", report.findings);
    eprintln!(
        "mpm compare: report in {} (index.html, report.md, report.json) after {:.0}s",
        args.out.display(),
        started.elapsed().unwrap_or(Duration::ZERO).as_secs_f64()
    );
    Ok(0)
}
