//! What does a send low-water mark save? In 1998 a 32 KiB `SO_SNDLOWAT`
//! cut a FreeBSD server's write calls for one transfer from 1493 to 259.

use super::{cell, first_allocator, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, BIG_FILE, FILE};

/// `mpm compare --experiment lowat`.
pub(super) const LOWAT: Experiment = Experiment {
    name: "lowat",
    question: "How many write calls and wake-ups does a transfer to a slow reader cost, with and \
               without a send low-water mark?",
    setup: "Each MPM with `--send-lowat 0` (the kernel's default) and `--send-lowat 32768`. On \
            Linux that is TCP_NOTSENT_LOWAT: SO_SNDLOWAT is fixed at one byte and cannot be set, \
            and the Linux option bounds the *unsent* bytes the kernel queues rather than making \
            a writer wait for a minimum of free space, as the BSD option does. The reader takes \
            16 KiB every millisecond (about 16 MB/s, far below loopback's speed): the 1 MiB file \
            10 times and the 16 MiB file twice, one connection each, sent by sendfile. Writes and \
            full-socket returns are the server's own counts; context switches are its threads'.",
    variants,
    scenarios,
    columns: &[
        Column::SendsPerReq,
        Column::SendWaitsPerReq,
        Column::CtxSwitchesPerReq,
        Column::P50,
    ],
    findings,
    per_syscall: false,
};

/// The marks compared; 0 leaves the kernel's.
const MARKS: [u32; 2] = [0, 32 * 1024];

fn label(mpm: impl std::fmt::Display, mark: u32) -> String {
    match mark {
        0 => format!("{mpm} no mark"),
        m => format!("{mpm} lowat {} KiB", m / 1024),
    }
}

fn variants(sel: &Selection) -> Vec<Variant> {
    let allocator = first_allocator(sel);
    let mut out = Vec::new();
    for &mpm in &sel.mpms {
        for mark in MARKS {
            let flags = vec!["--send-lowat".to_string(), mark.to_string()];
            out.push(Variant::new(mpm, allocator, flags).labelled(label(mpm, mark)));
        }
    }
    out
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    if let Some(given) = super::given_workloads(sel) {
        return given;
    }
    vec![
        Scenario::slow_reader(
            "1mib-slow",
            "1 MiB file to a reader of 16 KiB a millisecond",
            FILE,
            10,
            16 * 1024,
            1000,
        ),
        Scenario::slow_reader(
            "16mib-slow",
            "16 MiB file to a reader of 16 KiB a millisecond",
            BIG_FILE,
            2,
            16 * 1024,
            1000,
        ),
    ]
}

fn findings(report: &Report) -> String {
    let mut mpms: Vec<&str> = report.cells.iter().map(|c| c.mpm.as_str()).collect();
    mpms.dedup();
    let mut out = Vec::new();
    for mpm in mpms {
        for scenario in ["1mib-slow", "16mib-slow"] {
            let get = |mark| cell(report, &label(mpm, mark), scenario);
            let (Some(off), Some(on)) = (get(MARKS[0]), get(MARKS[1])) else {
                continue;
            };
            let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0}"));
            out.push(format!(
                "{mpm}, {scenario}: {} write calls and {} full-socket returns a transfer without \
                 a mark, {} and {} with 32 KiB; context switches {} → {}.",
                f(off.median.sends_per_req),
                f(off.median.send_waits_per_req),
                f(on.median.sends_per_req),
                f(on.median.send_waits_per_req),
                f(off.median.ctx_switches_per_req),
                f(on.median.ctx_switches_per_req),
            ));
        }
    }
    if out.is_empty() {
        "Nothing to compare.".into()
    } else {
        out.push(
            "A blocking writer (prefork, worker) makes one sendfile call that the kernel puts \
             to sleep and wakes as the socket drains, so its wake-ups show as context switches; \
             a non-blocking one (event) returns to epoll at each full socket."
                .into(),
        );
        out.join(" ")
    }
}
