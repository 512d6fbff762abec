//! The default comparison: every MPM × allocator under a small keep-alive
//! page, a connection per request, a 1 MiB file, and idle connections.

use super::{fastest_per_scenario, mpm_by_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, FILE, PAGE};
use mpm_core::allocator::AllocatorKind;
use mpm_core::MpmKind;

/// `mpm compare` (`--experiment matrix`).
pub(super) const MATRIX: Experiment = Experiment {
    name: "matrix",
    question: "What does each process model cost, with each allocator: throughput, latency, \
               CPU, system calls and allocations per request, and memory per idle connection?",
    setup: "Each MPM × allocator serves compare's docroot (a 1456-byte page, a 1 MiB file) as \
            its own `mpm serve` child, with max-request-workers raised above the largest idle \
            count (prefork forks that many children at start, so its memory for idle connections is \
            paid before they arrive: compare PSS totals, not the increase per connection). The bench engine drives each load after \
            a warm-up; per-request figures come from the server's /server-status?json counters \
            and /proc over its whole process tree, system calls from perf when present.",
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
    let workers = (sel.idle.iter().copied().max().unwrap_or(0) + 64).max(256);
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
    // Memory: per idle connection at the largest count, per variant.
    if let Some((name, _)) = report
        .scenarios
        .iter()
        .filter(|(n, _)| n.starts_with("idle-"))
        .max_by_key(|(n, _)| n.trim_start_matches("idle-").parse::<usize>().unwrap_or(0))
    {
        // The whole tree's PSS, not the increase per connection: prefork
        // forks its children up front, so its memory is there before any
        // connection arrives.
        let mut per: Vec<(&str, f64)> = report
            .scenario_cells(name)
            .filter_map(|c| Some((c.variant.as_str(), c.pss_kib? as f64 / 1024.0)))
            .collect();
        per.sort_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(lo), Some(hi)) = (per.first(), per.last()) {
            text.push_str(&format!(
                " Holding {} idle connections, {} needs the least memory ({:.1} MiB PSS over its \
                 processes), {} the most ({:.1} MiB, {:.0}×).",
                name.trim_start_matches("idle-"),
                lo.0,
                lo.1,
                hi.0,
                hi.1,
                hi.1 / lo.1.max(0.01)
            ));
        }
    }
    if text.is_empty() {
        "Too few variants measured to compare.".into()
    } else {
        text
    }
}
