//! The default comparison: every MPM × allocator under a small keep-alive
//! page, a connection per request, a 1 MiB file, and idle connections; or,
//! given workloads (an application's own, `--workload`, `METHOD:/path`),
//! under those and idle connections that each sent the first one's first
//! request.

use super::{
    fastest_per_scenario, least_cpu_per_scenario, mpm_by_allocator, Experiment, Selection, Variant,
};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, FILE, PAGE};
use mpm_core::allocator::AllocatorKind;
use mpm_core::MpmKind;

/// `mpm compare` (`--experiment matrix`).
pub(super) const MATRIX: Experiment = Experiment {
    name: "matrix",
    question: "What does each process model cost, with each allocator: throughput, latency, \
               CPU, system calls and allocations per request, and memory per idle connection?",
    setup: "Each MPM × allocator serves compare's docroot (a 1456-byte page, a 1 MiB file), or \
            the program's own endpoints when workloads are given, as its own `serve` child, with \
            max-request-workers raised above the largest idle count (prefork forks that many \
            children at start, all kept). The bench engine drives each load after a warm-up; \
            per-request figures are differences of the server's /server-status?json counters and \
            of /proc over its whole process tree across the timed run, system calls from perf \
            when present. Idle connections are measured first on each fresh server, against its \
            memory before them with the same processes: PSS per connection is what they add.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::P50,
        Column::P99,
        Column::CpuUsPerReq,
        Column::SyscallsPerReq,
        Column::AllocsPerReq,
        Column::LockWaitsPerReq,
        Column::AcceptWaitUsPerReq,
        Column::PssMib,
        Column::PssPerConnKib,
        Column::RssMib,
        Column::ProcsThreads,
        Column::IdleServed,
    ],
    findings,
    per_syscall: false,
};

fn variants(sel: &Selection) -> Vec<Variant> {
    // Behind a proxy, no idle connection is held: the servers keep the
    // floor of 256 workers, fewer than the clients by default, so that a
    // model that holds a worker per waiting request shows it.
    let held = if sel.upstream.is_some() {
        0
    } else {
        sel.idle.iter().copied().max().unwrap_or(0)
    };
    let workers = (held + 64).max(256);
    mpm_by_allocator(sel, &AllocatorKind::ALL, |mpm| {
        let mut flags = vec!["--max-request-workers".into(), workers.to_string()];
        if mpm == MpmKind::Prefork {
            // Every child up front: spawning them at the spare-server rate
            // would take most of a run.
            // ... and all kept: no idle child is stopped during the runs.
            flags.extend(["--start-servers".into(), workers.to_string()]);
            flags.extend(["--max-spare".into(), workers.to_string()]);
        }
        flags
    })
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    // `--upstream-delay`: every route is the proxy's, so the loads are the
    // proxied ones alone (the docroot's files and idle connections would
    // be the origin's answers too).
    if let Some(up) = sel.upstream {
        if sel.workloads.is_empty() {
            return vec![Scenario::upstream(up, sel.connections)];
        }
        return sel
            .workloads
            .iter()
            .cloned()
            .map(|w| Scenario::workload(w).through(up))
            .collect();
    }
    if let Some(s) = sel.given(Scenario::workload, |idle, _| idle) {
        return s;
    }
    let mut s = vec![
        Scenario::keepalive(
            "keepalive",
            "keep-alive, 1456-byte page, 50 connections",
            PAGE,
            50,
        ),
        Scenario::close(
            "close",
            "a connection per request, 1456-byte page, 20 at once",
            PAGE,
            20,
        ),
        Scenario::keepalive("file", "keep-alive, 1 MiB file, 10 connections", FILE, 10),
    ];
    s.extend(sel.idle.iter().map(|&n| Scenario::idle(n)));
    s
}

fn findings(report: &Report) -> String {
    let mut text = fastest_per_scenario(report);
    let cpu = least_cpu_per_scenario(report);
    if !cpu.is_empty() {
        text.push(' ');
        text.push_str(&cpu);
    }
    if text.is_empty() {
        "Too few variants measured to compare.".into()
    } else {
        text
    }
}
