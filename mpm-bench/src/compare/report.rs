//! The results of a comparison: one [`Cell`] per variant × scenario, each
//! the median and min–max of its repeated [`Run`]s and valid only when its
//! answers were what its requests expected; the columns an experiment
//! shows; and the report as JSON, Markdown and terminal rows.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::machine::Machine;

/// The most unexpected answers and errors a valid cell may have: 0.1 %.
pub const INVALID_ABOVE: f64 = 0.001;

macro_rules! metrics {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// What one run of a cell measured, or (in a [`Cell`]) the median,
        /// the least or the most of its runs. `None` is "n/a" (`null` in
        /// JSON): not measured, not measurable here, or not a figure of this
        /// model (accept mutex waits under event, lock waits of an allocator
        /// without a lock).
        #[derive(Debug, Clone, Default, PartialEq, Serialize)]
        pub struct Metrics {
            $($(#[$doc])* pub $name: Option<f64>,)*
        }

        impl Metrics {
            /// Each figure over `runs`, sorted, reduced by `pick`; `None`
            /// where no run has it.
            fn reduce(runs: &[Metrics], pick: fn(&[f64]) -> f64) -> Metrics {
                Metrics {
                    $($name: {
                        let mut v: Vec<f64> = runs.iter().filter_map(|r| r.$name).collect();
                        v.sort_by(f64::total_cmp);
                        (!v.is_empty()).then(|| pick(&v))
                    },)*
                }
            }

            /// Every figure by name, for checks over all of them.
            pub fn fields(&self) -> Vec<(&'static str, Option<f64>)> {
                vec![$((stringify!($name), self.$name)),*]
            }
        }
    };
}

metrics! {
    /// Responses per second (the timed run).
    requests_per_s,
    /// Median latency, µs.
    p50_us,
    /// 90th percentile, µs.
    p90_us,
    /// 99th percentile, µs.
    p99_us,
    /// 99.9th percentile, µs.
    p99_9_us,
    /// Server CPU time (user + system, whole tree) per request, µs.
    cpu_us_per_req,
    /// Server system calls per request (perf).
    syscalls_per_req,
    /// Allocations per request (the server's own counters).
    allocations_per_req,
    /// Contended allocator-lock acquisitions per request (`locked` only).
    lock_waits_per_req,
    /// Time waited for the allocator lock per request, µs (`locked` only).
    lock_wait_us_per_req,
    /// Accepts that waited for the accept (listener) mutex while a
    /// connection was queued, per request (prefork and worker only).
    accept_waits_per_req,
    /// Time connections waited for the mutex to be handed over, per request, µs.
    accept_wait_us_per_req,
    /// Context switches of the serving threads per request.
    ctx_switches_per_req,
    /// Writes to client sockets (send, sendfile, writev) per request.
    sends_per_req,
    /// Of those, the ones that found the socket full (EAGAIN), per request.
    send_waits_per_req,
    /// PSS of the server's whole process tree, KiB.
    pss_kib,
    /// PSS added per idle connection over the baseline, KiB.
    pss_per_conn_kib,
    /// The tree's PSS before any idle connection, KiB.
    baseline_pss_kib,
    /// Processes in the tree then: the baseline has the processes that
    /// hold the connections when this equals `processes`.
    baseline_processes,
    /// RSS summed over the tree, KiB.
    rss_kib,
    /// Processes in the tree.
    processes,
    /// Threads in the tree.
    threads,
    /// Threads in the tree before any connection (waiting scenarios, and
    /// proxied loads: before the warm-up).
    baseline_threads,
    /// Concurrent clients of a proxied load (its connections).
    clients,
    /// Requests waiting on compare's origin when the tree was sampled
    /// (mid-run for a proxied load; held, for a waiting scenario).
    waiting_requests,
    /// PSS the waiting requests added over the baseline, per waiting request, KiB.
    pss_per_waiting_kib,
    /// Threads in the tree per waiting request (all of them, not those added).
    threads_per_waiting,
    /// Processes in the tree per waiting request.
    processes_per_waiting,
    /// Connections the origin accepted per 1,000 requests the server
    /// answered over the timed run: near 0 when the proxy keeps its
    /// upstream connections alive, 1,000 when it opens one per request.
    upstream_conns_per_1k,
}

fn median(sorted: &[f64]) -> f64 {
    // The lower middle for an even count: always one of the runs.
    sorted[(sorted.len() - 1) / 2]
}

fn least(sorted: &[f64]) -> f64 {
    sorted[0]
}

fn most(sorted: &[f64]) -> f64 {
    sorted[sorted.len() - 1]
}

/// One repetition of one cell, as measured.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Its figures.
    pub metrics: Metrics,
    /// Complete responses (idle: answers to each connection's first request).
    pub responses: u64,
    /// Requests that failed, all kinds.
    pub errors: u64,
    /// Responses with a status their request did not expect (idle: and
    /// sampled connections no longer served).
    pub unexpected: u64,
    /// Responses by status.
    pub statuses: BTreeMap<u16, u64>,
    /// System calls per request by name (strace).
    pub syscalls_by_name: Option<Vec<(String, f64)>>,
    /// Idle connections sampled afterwards, and how many were still served.
    pub idle_sample: Option<(usize, usize)>,
}

/// One variant under one scenario, over every repetition.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cell {
    /// The variant's label (`event/system`).
    pub variant: String,
    /// Its process model.
    pub mpm: String,
    /// Its allocator.
    pub allocator: String,
    /// The scenario's name.
    pub scenario: String,
    /// Why it was not run, if it was not.
    pub skipped: Option<String>,
    /// Idle connections held (idle scenarios).
    pub idle_connections: Option<usize>,
    /// Repetitions measured.
    pub runs: usize,
    /// Complete responses, over every run.
    pub responses: u64,
    /// Requests that failed (all kinds), over every run.
    pub errors: u64,
    /// Responses whose status their request did not expect, over every run.
    pub unexpected: u64,
    /// Responses by status, over every run.
    pub statuses: BTreeMap<u16, u64>,
    /// Measured, and at most 0.1 % of its answers unexpected or failed:
    /// only valid cells are ranked and summarised.
    pub valid: bool,
    /// Why it is not valid (`None` when valid or skipped).
    pub invalid: Option<String>,
    /// The median of the runs (flattened: `requests_per_s` and the rest).
    #[serde(flatten)]
    pub median: Metrics,
    /// The least of the runs.
    pub min: Metrics,
    /// The most of the runs.
    pub max: Metrics,
    /// Each run, in the order they ran.
    pub each_run: Vec<Metrics>,
    /// System calls per request by name, most frequent first (median of the runs).
    pub syscalls_by_name: Option<Vec<(String, f64)>>,
    /// Idle connections sampled afterwards that were still served (`n/m`, all runs).
    pub idle_sample_served: Option<String>,
    #[serde(skip)]
    by_name_runs: Vec<Vec<(String, f64)>>,
    #[serde(skip)]
    sample: Option<(usize, usize)>,
}

impl Cell {
    /// An empty cell for `variant` (label, MPM, allocator) under `scenario`.
    pub fn new(
        (variant, mpm, allocator): (&str, &str, &str),
        scenario: &str,
        idle: Option<usize>,
    ) -> Cell {
        Cell {
            variant: variant.into(),
            mpm: mpm.into(),
            allocator: allocator.into(),
            scenario: scenario.into(),
            idle_connections: idle,
            ..Cell::default()
        }
    }

    /// Add one repetition.
    pub fn add(&mut self, run: Run) {
        self.runs += 1;
        self.responses += run.responses;
        self.errors += run.errors;
        self.unexpected += run.unexpected;
        for (s, n) in run.statuses {
            *self.statuses.entry(s).or_insert(0) += n;
        }
        if let Some(rows) = run.syscalls_by_name {
            self.by_name_runs.push(rows);
        }
        if let Some((served, of)) = run.idle_sample {
            let (s, o) = self.sample.unwrap_or((0, 0));
            self.sample = Some((s + served, o + of));
        }
        self.each_run.push(run.metrics);
        self.summarise();
    }

    /// The median and spread, and whether the cell is valid.
    fn summarise(&mut self) {
        self.median = Metrics::reduce(&self.each_run, median);
        self.min = Metrics::reduce(&self.each_run, least);
        self.max = Metrics::reduce(&self.each_run, most);
        self.idle_sample_served = self.sample.map(|(s, o)| format!("{s}/{o}"));
        if !self.by_name_runs.is_empty() {
            let mut names: Vec<&str> = self
                .by_name_runs
                .iter()
                .flat_map(|r| r.iter().map(|(n, _)| n.as_str()))
                .collect();
            names.sort_unstable();
            names.dedup();
            let mut rows: Vec<(String, f64)> = names
                .iter()
                .map(|name| {
                    let mut v: Vec<f64> = self
                        .by_name_runs
                        .iter()
                        .map(|r| r.iter().find(|(n, _)| n == name).map_or(0.0, |(_, c)| *c))
                        .collect();
                    v.sort_by(f64::total_cmp);
                    (name.to_string(), median(&v))
                })
                .collect();
            rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            self.syscalls_by_name = Some(rows);
        }
        let (valid, why) = validity(self);
        self.valid = valid;
        self.invalid = why;
    }

    /// Mark it not run.
    pub fn skip(&mut self, why: impl Into<String>) {
        self.skipped = Some(why.into());
        self.valid = false;
        self.invalid = None;
    }

    /// `metric`'s median, least and most over the runs, if measured.
    pub fn spread(&self, metric: fn(&Metrics) -> Option<f64>) -> Option<Spread> {
        Some(Spread {
            median: metric(&self.median)?,
            min: metric(&self.min)?,
            max: metric(&self.max)?,
        })
    }
}

/// Is the cell valid, and if not, why (with the counts)?
fn validity(c: &Cell) -> (bool, Option<String>) {
    if c.skipped.is_some() {
        return (false, None);
    }
    let attempts = c.responses + c.errors;
    let bad = c.unexpected + c.errors;
    if attempts == 0 {
        return (false, Some("no request was answered".into()));
    }
    if bad as f64 > INVALID_ABOVE * attempts as f64 {
        let statuses: Vec<String> = c
            .statuses
            .iter()
            .map(|(s, n)| format!("{s} ×{n}"))
            .collect();
        let shown = if statuses.is_empty() {
            String::new()
        } else {
            format!("; statuses {}", statuses.join(", "))
        };
        return (
            false,
            Some(format!(
                "{} unexpected and {} failed of {attempts} ({:.2} %){shown}",
                c.unexpected,
                c.errors,
                100.0 * bad as f64 / attempts as f64
            )),
        );
    }
    (true, None)
}

/// A figure over the runs of a cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The least.
    pub min: f64,
    /// The most.
    pub max: f64,
}

impl Spread {
    /// Do the two ranges overlap? Then the runs cannot tell them apart:
    /// "no difference".
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}

/// A column of a results table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Column {
    /// Were the answers what the requests expected?
    Answers,
    /// Responses per second.
    ReqPerS,
    /// Median latency.
    P50,
    /// 99th percentile latency.
    P99,
    /// Server CPU µs per request.
    CpuUsPerReq,
    /// System calls per request.
    SyscallsPerReq,
    /// Allocations per request.
    AllocsPerReq,
    /// Contended lock waits per request.
    LockWaitsPerReq,
    /// Lock wait µs per request.
    LockWaitUsPerReq,
    /// Accept mutex wait µs per request.
    AcceptWaitUsPerReq,
    /// Context switches per request.
    CtxSwitchesPerReq,
    /// PSS of the tree, MiB.
    PssMib,
    /// PSS per idle connection, KiB.
    PssPerConnKib,
    /// RSS of the tree, MiB.
    RssMib,
    /// Processes / threads.
    ProcsThreads,
    /// Idle connections sampled and still served.
    IdleServed,
    /// The most frequent system calls per request, by name.
    SyscallsByName,
    /// Socket writes per request.
    SendsPerReq,
    /// Socket writes that found the socket full, per request.
    SendWaitsPerReq,
    /// Requests waiting on the upstream (of the clients, or of those sent).
    Waiting,
    /// PSS, processes and threads before the load or the waiting requests.
    IdleFootprint,
    /// PSS, processes and threads with the requests waiting.
    WaitingFootprint,
    /// PSS added per waiting request, KiB.
    KibPerWaiting,
    /// Threads and processes per waiting request.
    ThreadsPerWaiting,
    /// Upstream connections opened per 1,000 requests.
    UpstreamConnsPer1k,
}

/// "n/a": not measured, or not a figure of this variant.
pub const NA: &str = "n/a";

fn ranged(c: &Cell, metric: fn(&Metrics) -> Option<f64>, f: impl Fn(f64) -> String) -> String {
    match c.spread(metric) {
        None => NA.to_string(),
        Some(s) if c.runs > 1 && f(s.min) != f(s.max) => {
            format!("{} ({}–{})", f(s.median), f(s.min), f(s.max))
        }
        Some(s) => f(s.median),
    }
}

fn one(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| NA.to_string(), f)
}

impl Column {
    /// Its heading.
    pub fn title(self) -> &'static str {
        match self {
            Column::Answers => "answers",
            Column::ReqPerS => "req/s",
            Column::P50 => "p50 ms",
            Column::P99 => "p99 ms",
            Column::CpuUsPerReq => "CPU µs/req",
            Column::SyscallsPerReq => "syscalls/req",
            Column::AllocsPerReq => "allocs/req",
            Column::LockWaitsPerReq => "lock waits/req",
            Column::LockWaitUsPerReq => "lock wait µs/req",
            Column::AcceptWaitUsPerReq => "accept wait µs/req",
            Column::CtxSwitchesPerReq => "ctx switches/req",
            Column::PssMib => "PSS MiB",
            Column::PssPerConnKib => "PSS KiB/conn",
            Column::RssMib => "RSS MiB",
            Column::ProcsThreads => "procs/threads",
            Column::IdleServed => "sample served",
            Column::SyscallsByName => "syscalls/req by name",
            Column::SendsPerReq => "send calls/req",
            Column::SendWaitsPerReq => "full-socket returns/req",
            Column::Waiting => "waiting on upstream",
            Column::IdleFootprint => "idle PSS MiB, procs/threads",
            Column::WaitingFootprint => "waiting PSS MiB, procs/threads",
            Column::KibPerWaiting => "KiB/waiting req",
            Column::ThreadsPerWaiting => "threads, procs/waiting req",
            Column::UpstreamConnsPer1k => "upstream conns/1k req",
        }
    }

    /// Its value in `cell`, formatted: the median, with the runs' min–max
    /// in brackets for the figures a choice rests on. An invalid cell shows
    /// only why it is invalid.
    pub fn value(self, c: &Cell) -> String {
        if self == Column::Answers {
            return match (&c.invalid, c.valid) {
                (Some(why), _) => format!("INVALID: {why}"),
                (None, true) => format!("ok ({} unexpected, {} failed)", c.unexpected, c.errors),
                (None, false) => NA.into(),
            };
        }
        if !c.valid {
            return "–".into();
        }
        let ms = |us: f64| format!("{:.3}", us / 1000.0);
        let mib = |k: f64| format!("{:.1}", k / 1024.0);
        let m = &c.median;
        match self {
            Column::Answers => unreachable!("handled above"),
            Column::ReqPerS => ranged(c, |m| m.requests_per_s, |v| format!("{v:.0}")),
            Column::P50 => ranged(c, |m| m.p50_us, ms),
            Column::P99 => ranged(c, |m| m.p99_us, ms),
            Column::CpuUsPerReq => ranged(c, |m| m.cpu_us_per_req, |v| format!("{v:.1}")),
            Column::SyscallsPerReq => one(m.syscalls_per_req, |v| format!("{v:.2}")),
            Column::AllocsPerReq => one(m.allocations_per_req, |v| format!("{v:.1}")),
            Column::LockWaitsPerReq => one(m.lock_waits_per_req, |v| format!("{v:.3}")),
            Column::LockWaitUsPerReq => one(m.lock_wait_us_per_req, |v| format!("{v:.2}")),
            Column::AcceptWaitUsPerReq => one(m.accept_wait_us_per_req, |v| format!("{v:.2}")),
            Column::CtxSwitchesPerReq => one(m.ctx_switches_per_req, |v| format!("{v:.2}")),
            Column::SendsPerReq => one(m.sends_per_req, |v| format!("{v:.1}")),
            Column::SendWaitsPerReq => one(m.send_waits_per_req, |v| format!("{v:.1}")),
            Column::PssMib => ranged(c, |m| m.pss_kib, mib),
            Column::PssPerConnKib => ranged(c, |m| m.pss_per_conn_kib, |v| format!("{v:.1}")),
            Column::RssMib => one(m.rss_kib, mib),
            Column::ProcsThreads => match (m.processes, m.threads) {
                (Some(p), Some(t)) => format!("{p:.0}/{t:.0}"),
                _ => NA.into(),
            },
            Column::IdleServed => one_text(c.idle_sample_served.clone()),
            Column::Waiting => match (m.waiting_requests, c.idle_connections, m.clients) {
                (None, _, _) => NA.into(),
                (Some(w), Some(n), _) => format!("{w:.0} of {n}"),
                (Some(w), None, Some(n)) => format!("{w:.0} of {n:.0}"),
                (Some(w), None, None) => format!("{w:.0}"),
            },
            Column::IdleFootprint => {
                footprint(m.baseline_pss_kib, m.baseline_processes, m.baseline_threads)
            }
            Column::WaitingFootprint => footprint(m.pss_kib, m.processes, m.threads),
            Column::KibPerWaiting => ranged(c, |m| m.pss_per_waiting_kib, |v| format!("{v:.1}")),
            Column::ThreadsPerWaiting => match (m.threads_per_waiting, m.processes_per_waiting) {
                (Some(t), Some(p)) => format!("{t:.3}, {p:.3}"),
                _ => NA.into(),
            },
            Column::UpstreamConnsPer1k => one(m.upstream_conns_per_1k, |v| format!("{v:.1}")),
            Column::SyscallsByName => match &c.syscalls_by_name {
                None => NA.into(),
                Some(v) => {
                    let top: Vec<String> = v
                        .iter()
                        .take(6)
                        .map(|(name, n)| format!("{name} {n:.2}"))
                        .collect();
                    top.join(", ")
                }
            },
        }
    }

    /// Does the column mean anything for this cell's kind of scenario?
    pub fn applies(self, idle: bool) -> bool {
        if self == Column::Answers {
            return true;
        }
        let idle_only = matches!(
            self,
            Column::PssPerConnKib | Column::IdleServed | Column::RssMib
        );
        // Figures of a tree holding connections, whether they are idle,
        // waiting requests, or a proxied load's clients (or what served a
        // load: the processes and threads HTTP/2 connections held).
        let both = matches!(
            self,
            Column::PssMib
                | Column::ProcsThreads
                | Column::Waiting
                | Column::IdleFootprint
                | Column::WaitingFootprint
                | Column::KibPerWaiting
                | Column::ThreadsPerWaiting
        );
        let load_only = !idle_only && !both;
        (idle || !idle_only) && (!idle || !load_only)
    }
}

/// `PSS MiB, procs/threads`, or n/a when any is missing.
fn footprint(pss_kib: Option<f64>, procs: Option<f64>, threads: Option<f64>) -> String {
    match (pss_kib, procs, threads) {
        (Some(k), Some(p), Some(t)) => format!("{:.1}, {p:.0}/{t:.0}", k / 1024.0),
        _ => NA.into(),
    }
}

fn one_text(v: Option<String>) -> String {
    v.unwrap_or_else(|| NA.to_string())
}

/// A whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The experiment's name.
    pub experiment: String,
    /// The question it answers.
    pub question: String,
    /// How it is set up.
    pub setup: String,
    /// The command that produced it.
    pub command: String,
    /// When it started (seconds since the Unix epoch).
    pub started_unix: u64,
    /// The machine it ran on, and how busy it was.
    pub machine: Machine,
    /// Runs of each cell, interleaved across the variants.
    pub repetitions: usize,
    /// Length of each timed run, seconds.
    pub duration_s: f64,
    /// What may make the figures unreliable (a busy machine, a single run).
    pub warnings: Vec<String>,
    /// What the numbers say (computed from the valid cells).
    pub findings: String,
    /// Per workload: the fastest and the leanest variant, when the
    /// difference exceeds the spread, and the trade-off between them.
    pub recommendations: Vec<String>,
    /// Cells measured and valid.
    pub valid_cells: usize,
    /// The columns the experiment shows.
    pub columns: Vec<Column>,
    /// Scenario names and titles, in order.
    pub scenarios: Vec<(String, String)>,
    /// Every cell, variant by variant.
    pub cells: Vec<Cell>,
}

impl Report {
    /// The cells of one scenario, in variant order.
    pub fn scenario_cells<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells.iter().filter(move |c| c.scenario == name)
    }

    /// The columns shown for a scenario (the answers first).
    pub fn columns_for(&self, idle: bool) -> Vec<Column> {
        std::iter::once(Column::Answers)
            .chain(
                self.columns
                    .iter()
                    .copied()
                    .filter(|c| *c != Column::Answers),
            )
            .filter(|c| c.applies(idle))
            .collect()
    }

    /// Is `name` an idle scenario?
    pub fn is_idle(&self, name: &str) -> bool {
        self.scenario_cells(name)
            .any(|c| c.idle_connections.is_some())
    }

    /// As pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// How the figures were taken, in a sentence.
    pub fn method(&self) -> String {
        format!(
            "`{}`: {} run{} of {:.1} s per cell, interleaved across the variants (each round \
             starts every variant's server afresh); figures are the median, with the least and \
             the most of the runs in brackets, and a difference inside that range is reported as \
             none. A cell is invalid, and neither ranked nor summarised, when more than 0.1 % of \
             its answers were unexpected or failed.",
            self.command,
            self.repetitions,
            if self.repetitions == 1 { "" } else { "s" },
            self.duration_s
        )
    }

    /// As Markdown: the setup, a table per scenario, the findings and the
    /// recommendations.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# mpm compare: {}\n", self.experiment);
        let _ = writeln!(s, "**Question.** {}\n", self.question);
        let _ = writeln!(s, "**Setup.** {}\n", self.setup);
        let _ = writeln!(s, "**Method.** {}\n", self.method());
        let _ = writeln!(s, "**Machine.** {}\n", self.machine.describe());
        for w in &self.warnings {
            let _ = writeln!(s, "> **Warning.** {w}\n");
        }
        for (name, title) in &self.scenarios {
            let cols = self.columns_for(self.is_idle(name));
            let _ = writeln!(s, "## {title} (`{name}`)\n");
            let _ = write!(s, "| variant |");
            for c in &cols {
                let _ = write!(s, " {} |", c.title());
            }
            let _ = write!(s, "\n|---|");
            for _ in &cols {
                s.push_str("---|");
            }
            s.push('\n');
            for cell in self.scenario_cells(name) {
                let _ = write!(s, "| {} |", cell.variant);
                match &cell.skipped {
                    Some(why) => {
                        let _ = write!(s, " skipped: {why} |");
                        for _ in 1..cols.len() {
                            s.push_str(" |");
                        }
                    }
                    None => {
                        for c in &cols {
                            let _ = write!(s, " {} |", c.value(cell).replace('|', "\\|"));
                        }
                    }
                }
                s.push('\n');
            }
            s.push('\n');
        }
        let _ = writeln!(s, "## What the numbers say\n\n{}\n", self.findings);
        let _ = writeln!(s, "## Which to choose\n");
        for r in &self.recommendations {
            let _ = writeln!(s, "- {r}");
        }
        s
    }
}

/// One terminal line for a finished run of a cell.
pub fn terminal_row(label: &str, cell: &Cell, columns: &[Column], idle: bool) -> String {
    let mut line = format!("{label:<8} {:<20} {:<22}", cell.variant, cell.scenario);
    if let Some(why) = &cell.skipped {
        line.push_str(" skipped: ");
        line.push_str(why);
        return line;
    }
    let last = cell.each_run.last().cloned().unwrap_or_default();
    let run = Cell {
        median: last.clone(),
        min: last.clone(),
        max: last,
        runs: 1,
        valid: true,
        ..cell.clone()
    };
    for c in columns
        .iter()
        .filter(|c| c.applies(idle) && **c != Column::Answers)
    {
        let _ = write!(line, "  {} {}", c.title(), c.value(&run));
    }
    if cell.errors > 0 || cell.unexpected > 0 {
        let _ = write!(
            line,
            "  ({} unexpected, {} errors so far)",
            cell.unexpected, cell.errors
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rps: f64, responses: u64, unexpected: u64) -> Run {
        Run {
            metrics: Metrics {
                requests_per_s: Some(rps),
                ..Metrics::default()
            },
            responses,
            unexpected,
            statuses: [(200, responses - unexpected), (404, unexpected)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            ..Run::default()
        }
    }

    #[test]
    fn runs_give_median_min_and_max() {
        let mut c = Cell::new(("a", "event", "system"), "s", None);
        for r in [300.0, 100.0, 200.0] {
            c.add(run(r, 1000, 0));
        }
        let s = c.spread(|m| m.requests_per_s).expect("measured");
        assert_eq!((s.min, s.median, s.max), (100.0, 200.0, 300.0));
        assert_eq!(c.runs, 3);
        assert_eq!(c.each_run.len(), 3);
        assert!(c.valid, "{c:?}");
        assert_eq!(Column::ReqPerS.value(&c), "200 (100–300)");
        assert!(s.overlaps(&Spread {
            median: 320.0,
            min: 290.0,
            max: 400.0
        }));
        assert!(!s.overlaps(&Spread {
            median: 320.0,
            min: 301.0,
            max: 400.0
        }));
    }

    #[test]
    fn more_than_a_thousandth_unexpected_makes_a_cell_invalid() {
        let mut ok = Cell::new(("a", "event", "system"), "s", None);
        ok.add(run(1.0, 10_000, 10));
        assert!(ok.valid, "exactly 0.1 % is still valid");
        let mut bad = Cell::new(("a", "event", "system"), "s", None);
        bad.add(run(1.0, 10_000, 11));
        assert!(!bad.valid);
        let why = bad.invalid.clone().expect("a reason");
        assert!(
            why.contains("11 unexpected") && why.contains("404 ×11"),
            "{why}"
        );
        assert!(Column::Answers.value(&bad).starts_with("INVALID"));
        assert_eq!(Column::ReqPerS.value(&bad), "–", "never shown as a figure");
        let mut none = Cell::new(("a", "event", "system"), "s", None);
        none.add(Run::default());
        assert!(!none.valid && none.invalid.is_some());
    }
}
