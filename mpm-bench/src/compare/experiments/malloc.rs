//! Why was threaded Apache 2.0 slower than prefork? Its malloc took a
//! process-wide lock. (Replaces `scripts/malloc_experiment.py`.)

use super::{cell, mpm_by_allocator, share_of, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, ServerBin, PAGE};
use mpm_core::allocator::AllocatorKind;
use mpm_core::MpmKind;

/// `mpm compare --experiment malloc`.
pub(super) const MALLOC: Experiment = Experiment {
    name: "malloc",
    question: "Does a global allocator lock (the 2001 libc malloc) slow threaded process models \
               down, and does a per-thread allocator (mimalloc) win it back, at what memory?",
    setup: "Each MPM with the system allocator (glibc malloc), mimalloc, and `locked` (glibc \
            malloc behind one global mutex), max-request-workers 64 (prefork: 64 children). \
            Loads: the cached 1456-byte page on 50 keep-alive connections (no allocation a \
            request); the same with a connection per request, 20 at once; and the `streaming` \
            example's /lines?count=200 on 50 keep-alive connections (some 200 small allocations \
            a request; the example must be built next to mpm: `cargo build --release -p mpm \
            --examples`). Allocation and lock counters are the server's own (/server-status?json), \
            context switches are its threads' from /proc, PSS is its whole tree's after the load.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::AllocsPerReq,
        Column::LockWaitsPerReq,
        Column::LockWaitUsPerReq,
        Column::CtxSwitchesPerReq,
        Column::PssMib,
    ],
    findings,
    per_syscall: false,
};

fn variants(sel: &Selection) -> Vec<Variant> {
    mpm_by_allocator(sel, &AllocatorKind::ALL, |mpm| {
        let mut flags = vec!["--max-request-workers".into(), "64".into()];
        if mpm == MpmKind::Prefork {
            flags.extend(["--start-servers".into(), "64".into()]);
        }
        flags
    })
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    if let Some(given) = super::given_workloads(sel) {
        return given;
    }
    vec![
        Scenario::keepalive(
            "page",
            "keep-alive cached page (no allocation a request)",
            PAGE,
            50,
        ),
        Scenario::close("close", "a connection per request, 20 at once", PAGE, 20),
        Scenario::keepalive(
            "alloc",
            "allocation-heavy: streaming /lines?count=200, keep-alive",
            "/lines?count=200",
            50,
        )
        .served_by(ServerBin::Example("streaming")),
    ]
}

fn findings(report: &Report) -> String {
    let mut out = Vec::new();
    let mpms: Vec<&str> = {
        let mut m: Vec<&str> = report.cells.iter().map(|c| c.mpm.as_str()).collect();
        m.dedup();
        m
    };
    let names: Vec<&str> = report.scenarios.iter().map(|(n, _)| n.as_str()).collect();
    for scenario in names {
        for mpm in &mpms {
            let get = |a: &str| cell(report, &format!("{mpm}/{a}"), scenario);
            let Some(system) = get("system") else {
                continue;
            };
            let rps = |m: &crate::compare::report::Metrics| m.requests_per_s;
            let mut parts = Vec::new();
            if let Some(l) = get("locked") {
                if let Some(share) = share_of(l, system, rps) {
                    parts.push(format!(
                        "locked {share} system's req/s ({:.2} contended waits, {:.1} µs waited a \
                         request)",
                        l.median.lock_waits_per_req.unwrap_or(0.0),
                        l.median.lock_wait_us_per_req.unwrap_or(0.0)
                    ));
                }
            }
            if let Some(m) = get("mimalloc") {
                let pss = match (m.median.pss_kib, system.median.pss_kib) {
                    (Some(a), Some(b)) => {
                        format!(", PSS {:.1} MiB against {:.1}", a / 1024.0, b / 1024.0)
                    }
                    _ => String::new(),
                };
                if let Some(share) = share_of(m, system, rps) {
                    parts.push(format!("mimalloc {share} system's req/s{pss}"));
                }
            }
            if !parts.is_empty() {
                out.push(format!(
                    "{mpm}, {scenario} ({:.0} allocations a request): {}.",
                    system.median.allocations_per_req.unwrap_or(0.0),
                    parts.join("; ")
                ));
            }
        }
    }
    if out.is_empty() {
        "Run with the system allocator and another one to compare.".into()
    } else {
        out.join(" ")
    }
}
