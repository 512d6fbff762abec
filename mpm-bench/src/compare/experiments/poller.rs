//! Is poll slower than select with a hundred listeners? The 2000 httpd
//! measurement found the poll-based `ap_poll` 1.3 % slower at one listener
//! and 6.7 % slower at a hundred.

use super::{cell, change, first_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, PAGE};
use mpm_core::listener_poller::PollerKind;
use mpm_core::MpmKind;

/// `mpm compare --experiment poller`.
pub(super) const POLLER: Experiment = Experiment {
    name: "poller",
    question: "Does the way a waiting worker watches its listeners (epoll, poll, select) cost \
               anything with one listening port, and with a hundred?",
    setup: "Prefork and worker (the event MPM's loop is always epoll) with `--poller epoll`, \
            `poll` and `select`, each with 1 and with 100 listening ports (99 more on \
            127.0.0.1:0; the load goes to one of them), max-request-workers 20. A waiting worker \
            watches the listeners only when it is its turn to accept, so the load is a \
            connection per request for the 1456-byte page, one at a time and 20 at a time.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::P50,
        Column::P99,
        Column::CpuUsPerReq,
        Column::SyscallsPerReq,
    ],
    findings,
    per_syscall: false,
};

/// Listening ports in the two settings.
const PORTS: [usize; 2] = [1, 100];

fn variants(sel: &Selection) -> Vec<Variant> {
    let allocator = first_allocator(sel);
    let mut out = Vec::new();
    // Event and uring have a loop of their own, not a poller.
    for &mpm in sel
        .mpms
        .iter()
        .filter(|m| !matches!(m, MpmKind::Event | MpmKind::Uring))
    {
        for ports in PORTS {
            for poller in PollerKind::ALL {
                let mut flags = vec![
                    "--poller".to_string(),
                    poller.to_string(),
                    "--max-request-workers".into(),
                    "20".into(),
                ];
                for _ in 1..ports {
                    flags.extend(["--listen".into(), "127.0.0.1:0".into()]);
                }
                out.push(Variant::new(mpm, allocator, flags).labelled(label(mpm, ports, poller)));
            }
        }
    }
    out
}

fn label(mpm: MpmKind, ports: usize, poller: PollerKind) -> String {
    format!(
        "{mpm} {ports} port{} {poller}",
        if ports == 1 { "" } else { "s" }
    )
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    if let Some(given) = super::given_workloads(sel) {
        return given;
    }
    vec![
        Scenario::close(
            "close-1",
            "1456-byte page, a connection per request, 1 at a time",
            PAGE,
            1,
        ),
        Scenario::close(
            "close-20",
            "1456-byte page, a connection per request, 20 at a time",
            PAGE,
            20,
        ),
    ]
}

fn findings(report: &Report) -> String {
    let mut out = Vec::new();
    for mpm in [MpmKind::Prefork, MpmKind::Worker] {
        for ports in PORTS {
            for scenario in ["close-1", "close-20"] {
                let get = |p: PollerKind| cell(report, &label(mpm, ports, p), scenario);
                let Some(base) = get(PollerKind::Epoll) else {
                    continue;
                };
                let epoll = base.median.requests_per_s.unwrap_or(0.0);
                let others: Vec<String> = [PollerKind::Poll, PollerKind::Select]
                    .into_iter()
                    .filter_map(|p| {
                        Some(format!(
                            "{p} {}",
                            change(get(p)?, base, |m| m.requests_per_s)?
                        ))
                    })
                    .collect();
                if !others.is_empty() {
                    out.push(format!(
                        "{mpm}, {ports} port(s), {scenario}: against epoll's {epoll:.0} req/s, {}.",
                        others.join(", ")
                    ));
                }
            }
        }
    }
    if out.is_empty() {
        "Select prefork or worker (--mpm) to run this experiment.".into()
    } else {
        out.push(
            "A difference inside the runs' spread is reported as none; more --repeat or a \
             longer --duration narrows the spread."
                .into(),
        );
        out.join(" ")
    }
}
