//! Is writev slower than copy+write for log lines? The 2004 httpd
//! measurement found copying a line's pieces into one buffer and writing it
//! 10–20 % faster than gathering them with writev; buffered logs write far
//! less often.

use super::{cell, change, first_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, PAGE};

/// `mpm compare --experiment logwrite`.
pub(super) const LOGWRITE: Experiment = Experiment {
    name: "logwrite",
    question: "What does an access log cost a request, written with writev, with copy+write, or \
               buffered?",
    setup: "Each MPM with no access log, then a combined-format log written per line with \
            `--log-write writev` and with `--log-write copy`, then buffered (`--log-buffer 65536`, \
            flushed when full and within a second). Each log is a file in compare's temporary \
            directory. Loads: the 1456-byte page on 50 keep-alive connections, and a connection \
            per request, 20 at once. The criterion micro-benchmark of one line \
            (`cargo bench -p mpm-http --bench log_write`) isolates the write itself.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::CpuUsPerReq,
        Column::SyscallsPerReq,
        Column::P99,
    ],
    findings,
    per_syscall: false,
};

/// The logging setups: label and flags (after `--access-log FILE`).
const SETUPS: [(&str, &[&str]); 4] = [
    ("no log", &[]),
    ("writev", &["--log-write", "writev"]),
    ("copy", &["--log-write", "copy"]),
    ("buffered 64 KiB", &["--log-buffer", "65536"]),
];

fn label(mpm: impl std::fmt::Display, setup: &str) -> String {
    format!("{mpm} {setup}")
}

fn variants(sel: &Selection) -> Vec<Variant> {
    let allocator = first_allocator(sel);
    // Beside compare's docroot (removed with it), under a name no one serves.
    let dir = super::super::scratch_dir();
    let mut out = Vec::new();
    for &mpm in &sel.mpms {
        for (name, flags) in SETUPS {
            let mut f: Vec<String> = Vec::new();
            if name != "no log" {
                let file = dir.join(format!("access-{mpm}-{}.log", name.replace(' ', "-")));
                f.extend([
                    "--access-log".into(),
                    file.display().to_string(),
                    "--log-format".into(),
                    "combined".into(),
                ]);
                f.extend(flags.iter().map(|s| s.to_string()));
            }
            out.push(Variant::new(mpm, allocator, f).labelled(label(mpm, name)));
        }
    }
    out
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    if let Some(given) = super::given_workloads(sel) {
        return given;
    }
    vec![
        Scenario::keepalive(
            "keepalive",
            "1456-byte page, 50 keep-alive connections",
            PAGE,
            50,
        ),
        Scenario::close(
            "close",
            "1456-byte page, a connection per request, 20 at once",
            PAGE,
            20,
        ),
    ]
}

fn findings(report: &Report) -> String {
    let mut mpms: Vec<&str> = report.cells.iter().map(|c| c.mpm.as_str()).collect();
    mpms.dedup();
    let mut out = Vec::new();
    for mpm in mpms {
        for scenario in ["keepalive", "close"] {
            let get = |setup: &str| cell(report, &label(mpm, setup), scenario);
            let Some(none) = get("no log") else {
                continue;
            };
            let Some(base) = none.median.cpu_us_per_req else {
                continue;
            };
            let cpu = |m: &crate::compare::report::Metrics| m.cpu_us_per_req;
            let parts: Vec<String> = SETUPS[1..]
                .iter()
                .filter_map(|(name, _)| {
                    let c = get(name)?;
                    let more = match change(c, none, cpu)? {
                        s if s.starts_with("no") => "no difference".to_string(),
                        _ => format!("+{:.2} µs", c.median.cpu_us_per_req? - base),
                    };
                    Some(format!(
                        "{name} {more} ({:.0} req/s)",
                        c.median.requests_per_s?
                    ))
                })
                .collect();
            if let (Some(w), Some(c)) = (
                get("writev").and_then(|c| c.median.cpu_us_per_req),
                get("copy").and_then(|c| c.median.cpu_us_per_req),
            ) {
                out.push(format!(
                    "{mpm}, {scenario}: CPU a request without a log {base:.2} µs; {}. Copy's log \
                     costs {:.0} % of writev's.",
                    parts.join(", "),
                    100.0 * (c - base).max(0.0) / (w - base).max(1e-9)
                ));
            }
        }
    }
    if out.is_empty() {
        "Nothing to compare.".into()
    } else {
        out.push(
            "CPU per request is read from /proc in clock ticks: use a longer --duration for \
             differences under a microsecond."
                .into(),
        );
        out.join(" ")
    }
}
