//! The results of a comparison: one [`Cell`] per variant × scenario, the
//! columns an experiment shows, and the report as JSON, Markdown and
//! terminal rows.

use std::fmt::Write as _;

use serde::Serialize;

/// What was measured for one variant under one scenario. `None` is "n/a"
/// (not measured, or not measurable here), `null` in JSON.
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
    /// Complete responses in the timed run.
    pub responses: u64,
    /// Requests that failed (all kinds) in the timed run.
    pub errors: u64,
    /// Responses with a status other than 200 in the timed run.
    pub non_200: u64,
    /// Responses per second.
    pub requests_per_s: Option<f64>,
    /// Median latency, µs.
    pub p50_us: Option<u64>,
    /// 90th percentile, µs.
    pub p90_us: Option<u64>,
    /// 99th percentile, µs.
    pub p99_us: Option<u64>,
    /// 99.9th percentile, µs.
    pub p99_9_us: Option<u64>,
    /// Server CPU time (user + system, whole tree) per request, µs.
    pub cpu_us_per_req: Option<f64>,
    /// Server system calls per request (perf).
    pub syscalls_per_req: Option<f64>,
    /// Allocations per request (the server's own counters).
    pub allocations_per_req: Option<f64>,
    /// Contended allocator-lock acquisitions per request (`locked`).
    pub lock_waits_per_req: Option<f64>,
    /// Time waited for the allocator lock per request, µs.
    pub lock_wait_us_per_req: Option<f64>,
    /// Context switches of the serving threads per request.
    pub ctx_switches_per_req: Option<f64>,
    /// Idle connections held (idle scenarios).
    pub idle_connections: Option<usize>,
    /// PSS of the server's whole process tree, KiB.
    pub pss_kib: Option<u64>,
    /// PSS added per idle connection, KiB.
    pub pss_per_conn_kib: Option<f64>,
    /// RSS summed over the tree, KiB.
    pub rss_kib: Option<u64>,
    /// Processes in the tree.
    pub processes: Option<usize>,
    /// Threads in the tree.
    pub threads: Option<usize>,
    /// Idle connections sampled afterwards that were still served (`n/m`).
    pub idle_sample_served: Option<String>,
    /// System calls per request by name, most frequent first (strace).
    pub syscalls_by_name: Option<Vec<(String, f64)>>,
    /// Writes to client sockets (send, sendfile, writev) per request, by
    /// the server's own count.
    pub sends_per_req: Option<f64>,
    /// Of those, the ones that found the socket full (EAGAIN) per request:
    /// each a wait for a wake-up.
    pub send_waits_per_req: Option<f64>,
}

/// A column of a results table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Column {
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
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "n/a".to_string(), f)
}

impl Column {
    /// Its heading.
    pub fn title(self) -> &'static str {
        match self {
            Column::ReqPerS => "req/s",
            Column::P50 => "p50 ms",
            Column::P99 => "p99 ms",
            Column::CpuUsPerReq => "CPU µs/req",
            Column::SyscallsPerReq => "syscalls/req",
            Column::AllocsPerReq => "allocs/req",
            Column::LockWaitsPerReq => "lock waits/req",
            Column::LockWaitUsPerReq => "lock wait µs/req",
            Column::CtxSwitchesPerReq => "ctx switches/req",
            Column::PssMib => "PSS MiB",
            Column::PssPerConnKib => "PSS KiB/conn",
            Column::RssMib => "RSS MiB",
            Column::ProcsThreads => "procs/threads",
            Column::IdleServed => "sample served",
            Column::SyscallsByName => "syscalls/req by name",
            Column::SendsPerReq => "send calls/req",
            Column::SendWaitsPerReq => "full-socket returns/req",
        }
    }

    /// Its value in `cell`, formatted.
    pub fn value(self, c: &Cell) -> String {
        let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
        let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
        match self {
            Column::ReqPerS => opt(c.requests_per_s, |v| format!("{v:.0}")),
            Column::P50 => opt(c.p50_us, ms),
            Column::P99 => opt(c.p99_us, ms),
            Column::CpuUsPerReq => opt(c.cpu_us_per_req, |v| format!("{v:.1}")),
            Column::SyscallsPerReq => opt(c.syscalls_per_req, |v| format!("{v:.2}")),
            Column::AllocsPerReq => opt(c.allocations_per_req, |v| format!("{v:.1}")),
            Column::LockWaitsPerReq => opt(c.lock_waits_per_req, |v| format!("{v:.3}")),
            Column::LockWaitUsPerReq => opt(c.lock_wait_us_per_req, |v| format!("{v:.2}")),
            Column::CtxSwitchesPerReq => opt(c.ctx_switches_per_req, |v| format!("{v:.2}")),
            Column::SendsPerReq => opt(c.sends_per_req, |v| format!("{v:.1}")),
            Column::SendWaitsPerReq => opt(c.send_waits_per_req, |v| format!("{v:.1}")),
            Column::PssMib => opt(c.pss_kib, mib),
            Column::PssPerConnKib => opt(c.pss_per_conn_kib, |v| format!("{v:.1}")),
            Column::RssMib => opt(c.rss_kib, mib),
            Column::ProcsThreads => match (c.processes, c.threads) {
                (Some(p), Some(t)) => format!("{p}/{t}"),
                _ => "n/a".into(),
            },
            Column::IdleServed => opt(c.idle_sample_served.clone(), |v| v),
            Column::SyscallsByName => opt(c.syscalls_by_name.as_ref(), |v| {
                let top: Vec<String> = v
                    .iter()
                    .take(6)
                    .map(|(name, n)| format!("{name} {n:.2}"))
                    .collect();
                top.join(", ")
            }),
        }
    }

    /// Does the column mean anything for this cell's kind of scenario?
    pub fn applies(self, idle: bool) -> bool {
        let idle_only = matches!(
            self,
            Column::PssPerConnKib | Column::IdleServed | Column::RssMib | Column::ProcsThreads
        );
        let load_only = !idle_only && self != Column::PssMib;
        (idle || !idle_only) && (!idle || !load_only)
    }
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
    /// CPUs online.
    pub cpus: usize,
    /// Length of each timed run, seconds.
    pub duration_s: f64,
    /// What the numbers say (computed from them).
    pub findings: String,
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

    /// The columns shown for a scenario.
    pub fn columns_for(&self, idle: bool) -> Vec<Column> {
        self.columns
            .iter()
            .copied()
            .filter(|c| c.applies(idle))
            .collect()
    }

    /// As pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// As Markdown: a table per scenario, then the findings.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# mpm compare: {}\n", self.experiment);
        let _ = writeln!(s, "**Question.** {}\n", self.question);
        let _ = writeln!(s, "**Setup.** {}\n", self.setup);
        let _ = writeln!(
            s,
            "`{}` on {} CPUs, {:.1} s per timed run.\n",
            self.command, self.cpus, self.duration_s
        );
        for (name, title) in &self.scenarios {
            let idle = name.starts_with("idle-");
            let cols = self.columns_for(idle);
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
                            let _ = write!(s, " {} |", c.value(cell));
                        }
                    }
                }
                s.push('\n');
            }
            s.push('\n');
        }
        let _ = writeln!(s, "## What the numbers say\n\n{}", self.findings);
        s
    }
}

/// One terminal line for a finished cell.
pub fn terminal_row(cell: &Cell, columns: &[Column], idle: bool) -> String {
    let mut line = format!("{:<20} {:<22}", cell.variant, cell.scenario);
    if let Some(why) = &cell.skipped {
        line.push_str(" skipped: ");
        line.push_str(why);
        return line;
    }
    for c in columns.iter().filter(|c| c.applies(idle)) {
        let _ = write!(line, "  {} {}", c.title(), c.value(cell));
    }
    if cell.errors > 0 || cell.non_200 > 0 {
        let _ = write!(line, "  ({} errors, {} non-200)", cell.errors, cell.non_200);
    }
    line
}
