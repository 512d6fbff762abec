//! What a waiting request costs each model: requests parked on a slow
//! upstream (an origin that answers after 10 s, behind `--proxy`), 100,
//! 1,000 and 10,000 of them, each model's server sized for them; its
//! memory, threads and processes idle and holding them.

use super::{first_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, PREFORK_CAP};
use crate::compare::shape::{self, Point};

/// `mpm compare --experiment waiting`.
pub(super) const WAITING: Experiment = Experiment {
    name: "waiting",
    question: "What does a waiting request cost each model: the memory, threads and processes \
               its server holds for requests parked on a slow upstream, at 100, 1,000 and \
               10,000 of them?",
    setup: "Compare starts an origin of its own (one epoll thread in compare's process) that \
            answers every request after 10 s, and each MPM's server with `--proxy \
            /=http://ORIGIN`, a server of its own for each count, sized for it \
            (`--max-request-workers` N + 64; prefork at most 256 processes, started small and \
            forking as connections wait). N connections each send one GET / and wait; once the \
            origin has received all of them (or their count stops growing for 1.5 s, or 8 s \
            after the first was sent) and 300 ms more, the server's tree is sampled from /proc \
            (PSS, processes, threads) against the same server idle just before. Per waiting \
            request: the PSS the requests added, and the threads and processes the tree held \
            (all of them: a pool made at start holds the requests as much as one that grew). A \
            request held is one the origin received; an answer before the origin's is \
            unexpected, a refused or closed connection an error. The connections are then \
            closed and the server stopped.",
    variants,
    scenarios,
    columns: &[
        Column::Waiting,
        Column::IdleFootprint,
        Column::WaitingFootprint,
        Column::KibPerWaiting,
        Column::ThreadsPerWaiting,
    ],
    findings,
    per_syscall: false,
};

fn variants(sel: &Selection) -> Vec<Variant> {
    // Sized per count by the scenario (Scenario::server_flags).
    let allocator = first_allocator(sel);
    sel.mpms
        .iter()
        .map(|&mpm| Variant::new(mpm, allocator, Vec::new()).labelled(mpm.to_string()))
        .collect()
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    sel.waiting
        .iter()
        .map(|&n| {
            let mut s = Scenario::waiting(n);
            // A given workload's first request is the one that waits.
            if let Some(first) = sel.workloads.first() {
                s.workload = first.clone();
            }
            s
        })
        .collect()
}

fn findings(report: &Report) -> String {
    let mut variants: Vec<&str> = Vec::new();
    for c in &report.cells {
        if !variants.contains(&c.variant.as_str()) {
            variants.push(&c.variant);
        }
    }
    let mut sentences = Vec::new();
    let mut costs = Vec::new();
    for v in variants {
        let mut points: Vec<Point> = report
            .cells
            .iter()
            .filter(|c| c.variant == v && c.valid)
            .filter_map(|c| {
                Some(Point {
                    asked: c.idle_connections?,
                    held: shape::held(c)?,
                    kib: c.median.pss_per_waiting_kib,
                    idle_kib: c.median.baseline_pss_kib,
                    idle_threads: c.median.baseline_threads,
                    idle_processes: c.median.baseline_processes,
                })
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        points.sort_by_key(|p| p.asked);
        sentences.push(shape::series_sentence(v, &points));
        // The answer at the most requests it held.
        if let Some(p) = points
            .iter()
            .filter(|p| p.held.waiting >= 1.0)
            .max_by(|a, b| a.held.waiting.total_cmp(&b.held.waiting))
        {
            let per_thread = p.held.threads / p.held.waiting;
            let kib = p.kib.map_or(String::new(), |k| format!("{k:.1} KiB and "));
            costs.push(format!(
                "{v} {kib}{per_thread:.3} threads ({} waiting)",
                shape::thousands(p.held.waiting)
            ));
        }
    }
    if sentences.is_empty() {
        return "No valid cell: no model held a waiting request here.".into();
    }
    format!(
        "{} What a waiting request costs, at the most each model held: {}. A model that parks \
         its waiting requests holds a fixed number of threads whatever their count; one that \
         gives each a thread or a process (prefork is capped at {PREFORK_CAP} here) pays a \
         thread's stack and buffers for each, and can hold no more than it has.",
        sentences.join(" "),
        costs.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::scenario::{Load, WAITING_DELAY};
    use mpm_core::allocator::AllocatorKind;
    use mpm_core::MpmKind;

    #[test]
    fn each_count_is_a_scenario_on_a_server_sized_for_it() {
        let sel = Selection {
            mpms: vec![MpmKind::Prefork, MpmKind::Event],
            allocators: vec![AllocatorKind::System],
            idle: vec![10],
            duration: std::time::Duration::from_secs(1),
            workloads: Vec::new(),
            upstream: None,
            connections: 1000,
            waiting: vec![100, 1000],
        };
        let s = scenarios(&sel);
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["waiting-100", "waiting-1000"]);
        assert_eq!(s[1].load, Load::Waiting { requests: 1000 });
        assert_eq!(s[1].upstream.map(|u| u.delay), Some(WAITING_DELAY));
        assert_ne!(s[0].server_key(), s[1].server_key(), "a server each");
        assert!(s[0].matches("waiting") && !s[0].matches("idle"));
        let flags = |mpm, i: usize| s[i].server_flags(mpm).join(" ");
        assert!(flags(MpmKind::Event, 1).contains("--max-request-workers 1064"));
        assert!(flags(MpmKind::Prefork, 1).contains("--max-request-workers 256"));
        assert!(flags(MpmKind::Prefork, 0).contains("--max-request-workers 164"));
        let v: Vec<String> = variants(&sel).into_iter().map(|v| v.label).collect();
        assert_eq!(v, ["prefork", "event"]);
    }
}
