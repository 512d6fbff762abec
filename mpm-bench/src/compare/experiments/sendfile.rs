//! Is `sendfile(2)` worth it? The same files sent with sendfile and with
//! read+write (httpd's `EnableSendfile`, nginx's `sendfile`).

use super::{cell, first_allocator, share_of, Experiment, Selection, Variant};
use crate::compare::report::{Column, Report};
use crate::compare::scenario::{Scenario, FILE, PAGE};

/// `mpm compare --experiment sendfile`.
pub(super) const SENDFILE: Experiment = Experiment {
    name: "sendfile",
    question: "What does sendfile(2) save against read+write, for a small page and a 1 MiB file, \
               with a connection per request and with keep-alive?",
    setup: "Each MPM with `--sendfile on` and `--sendfile off` (read into a buffer, then write), \
            both with `--file-cache-max-size 0` so that the small page too is read from its file \
            for each request rather than kept in memory. Loads: the 1456-byte page and the 1 MiB \
            file, each with a connection per request one at a time and 20 at a time, and on \
            keep-alive connections (50 for the page, 10 for the file). The first selected \
            allocator is used.",
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

fn variants(sel: &Selection) -> Vec<Variant> {
    let allocator = first_allocator(sel);
    let mut out = Vec::new();
    for &mpm in &sel.mpms {
        for on in ["on", "off"] {
            let flags = ["--sendfile", on, "--file-cache-max-size", "0"];
            out.push(
                Variant::new(mpm, allocator, flags.map(String::from).to_vec())
                    .labelled(format!("{mpm} sendfile {on}")),
            );
        }
    }
    out
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    if let Some(given) = super::given_workloads(sel) {
        return given;
    }
    vec![
        Scenario::close(
            "page-close-1",
            "1456-byte page, a connection per request, 1 at a time",
            PAGE,
            1,
        ),
        Scenario::close(
            "page-close-20",
            "1456-byte page, a connection per request, 20 at a time",
            PAGE,
            20,
        ),
        Scenario::keepalive(
            "page-keepalive",
            "1456-byte page, 50 keep-alive connections",
            PAGE,
            50,
        ),
        Scenario::close(
            "file-close-1",
            "1 MiB file, a connection per request, 1 at a time",
            FILE,
            1,
        ),
        Scenario::close(
            "file-close-20",
            "1 MiB file, a connection per request, 20 at a time",
            FILE,
            20,
        ),
        Scenario::keepalive(
            "file-keepalive",
            "1 MiB file, 10 keep-alive connections",
            FILE,
            10,
        ),
    ]
}

fn findings(report: &Report) -> String {
    let mut out = Vec::new();
    let mut mpms: Vec<&str> = report.cells.iter().map(|c| c.mpm.as_str()).collect();
    mpms.dedup();
    for (name, _) in &report.scenarios {
        let parts: Vec<String> = mpms
            .iter()
            .filter_map(|mpm| {
                let on = cell(report, &format!("{mpm} sendfile on"), name)?;
                let off = cell(report, &format!("{mpm} sendfile off"), name)?;
                let rps = share_of(off, on, |m| m.requests_per_s)?;
                let cpu = match share_of(off, on, |m| m.cpu_us_per_req) {
                    Some(s) if s.starts_with("no") => ", the same CPU per request".to_string(),
                    Some(_) => match (on.median.cpu_us_per_req, off.median.cpu_us_per_req) {
                        (Some(a), Some(b)) if a > 0.0 => {
                            format!(", {:.2}× the CPU per request", b / a)
                        }
                        _ => String::new(),
                    },
                    None => String::new(),
                };
                Some(format!(
                    "{mpm} without sendfile {rps} the req/s with it{cpu}"
                ))
            })
            .collect();
        if !parts.is_empty() {
            out.push(format!("{name}: {}.", parts.join("; ")));
        }
    }
    if out.is_empty() {
        "Nothing to compare: both variants of an MPM must be measured.".into()
    } else {
        out.join(" ")
    }
}
