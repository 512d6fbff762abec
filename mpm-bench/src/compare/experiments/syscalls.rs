//! Which system calls does a request cost under each model, by name (the
//! `truss -c` view the FreeBSD lists argued with)?

use super::{mpm_by_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, FILE, PAGE};
use mpm_core::MpmKind;

/// `mpm compare --experiment syscalls`.
pub(super) const SYSCALLS: Experiment = Experiment {
    name: "syscalls",
    question: "Which system calls does one request cost under each process model, and how many \
               of each?",
    setup: "Each MPM with the first selected allocator, max-request-workers 64 (prefork: 24 \
            children), under the keep-alive page (20 connections), a connection per request (20 \
            at once) and the 1 MiB file on 5 keep-alive connections. `strace -c -f` is attached to \
            the server's processes for the run (counts by name, divided by the requests the \
            server counted), and perf counts the total when present. Tracing slows the server \
            many times over: req/s here is not a throughput figure.",
    variants,
    scenarios,
    columns: &[
        Column::SyscallsPerReq,
        Column::SyscallsByName,
        Column::CtxSwitchesPerReq,
        Column::ReqPerS,
    ],
    findings,
    per_syscall: true,
};

fn variants(sel: &Selection) -> Vec<Variant> {
    let first = &sel.allocators[..sel.allocators.len().min(1)];
    mpm_by_allocator(sel, first, |mpm| {
        let mut flags = vec!["--max-request-workers".into(), "64".into()];
        if mpm == MpmKind::Prefork {
            flags.extend(["--start-servers".into(), "24".into()]);
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
            "keepalive",
            "keep-alive, 1456-byte page, 20 connections",
            PAGE,
            20,
        ),
        Scenario::close(
            "close",
            "a connection per request, 1456-byte page, 20 at once",
            PAGE,
            20,
        ),
        Scenario::keepalive("file", "keep-alive, 1 MiB file, 5 connections", FILE, 5),
    ]
}

fn findings(report: &Report) -> String {
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        let parts: Vec<String> = report
            .scenario_cells(name)
            .filter_map(|c| {
                let by_name = c.syscalls_by_name.as_ref()?;
                let total: f64 = by_name.iter().map(|(_, n)| n).sum();
                let top: Vec<String> = by_name
                    .iter()
                    .take(3)
                    .map(|(s, n)| format!("{s} {n:.2}"))
                    .collect();
                Some(format!("{} {total:.1} ({})", c.variant, top.join(", ")))
            })
            .collect();
        if !parts.is_empty() {
            out.push(format!(
                "{title}, system calls per request: {}.",
                parts.join("; ")
            ));
        }
    }
    if out.is_empty() {
        "strace is not installed or may not attach (ptrace_scope): no counts by name.".into()
    } else {
        out.join(" ")
    }
}
