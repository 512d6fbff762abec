//! epoll or io_uring? The same handler under the event model (an epoll
//! loop per process: readiness, then a system call per read and write) and
//! the uring model (a ring per process: multishot accept, multishot receive
//! into provided buffers, sends gathered and submitted once per turn).

use super::{cell, first_allocator, share_of, Experiment, Selection, Variant};
use crate::compare::report::{Column, Metrics, Report};
use crate::compare::scenario::{Scenario, FILE, PAGE};
use mpm_core::MpmKind;

/// `mpm compare --experiment uring`.
pub(super) const URING: Experiment = Experiment {
    name: "uring",
    question: "epoll or io_uring: for the same handler, which costs less CPU, fewer system calls \
               and less memory per connection, for which load?",
    setup: "The event MPM (epoll) and the uring MPM (io_uring), each with its defaults and the \
            first selected allocator. Loads: the 1456-byte page on 50 keep-alive connections, \
            the same with 16 requests pipelined on each, a connection per request 20 at a time, \
            the 1 MiB file on 10 keep-alive connections, and 10,000 idle keep-alive connections \
            (KiB each). Where io_uring is refused (a container's seccomp profile, \
            kernel.io_uring_disabled), the uring MPM exits at once naming the cause, and its \
            cells say so.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::P99,
        Column::CpuUsPerReq,
        Column::SyscallsPerReq,
        Column::CtxSwitchesPerReq,
        Column::PssPerConnKib,
    ],
    findings,
    per_syscall: false,
};

/// The two models compared: epoll's first.
const MODELS: [MpmKind; 2] = [MpmKind::Event, MpmKind::Uring];

fn variants(sel: &Selection) -> Vec<Variant> {
    let allocator = first_allocator(sel);
    MODELS
        .iter()
        .map(|&mpm| Variant::new(mpm, allocator, Vec::new()).labelled(mpm.to_string()))
        .collect()
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    if let Some(given) = super::given_workloads(sel) {
        return given;
    }
    vec![
        Scenario::keepalive(
            "page-keepalive",
            "1456-byte page, 50 keep-alive connections",
            PAGE,
            50,
        ),
        Scenario::pipelined(
            "page-pipelined",
            "1456-byte page, 50 keep-alive connections, 16 pipelined",
            PAGE,
            50,
            16,
        ),
        Scenario::close(
            "page-close",
            "1456-byte page, a connection per request, 20 at a time",
            PAGE,
            20,
        ),
        Scenario::keepalive(
            "file-keepalive",
            "1 MiB file, 10 keep-alive connections",
            FILE,
            10,
        ),
        Scenario::idle(10_000),
    ]
}

fn findings(report: &Report) -> String {
    let (epoll, uring) = (MODELS[0].to_string(), MODELS[1].to_string());
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        let (Some(e), Some(u)) = (cell(report, &epoll, name), cell(report, &uring, name)) else {
            continue;
        };
        let said = |metric: fn(&Metrics) -> Option<f64>, what: &str| {
            share_of(u, e, metric).map(|s| format!("{s} event's {what}"))
        };
        let parts: Vec<String> = if report.is_idle(name) {
            said(|m| m.pss_per_conn_kib, "KiB per idle connection")
                .into_iter()
                .collect()
        } else {
            [
                said(|m| m.requests_per_s, "req/s"),
                said(|m| m.cpu_us_per_req, "CPU per request"),
                said(|m| m.syscalls_per_req, "system calls per request"),
                said(|m| m.ctx_switches_per_req, "context switches per request"),
            ]
            .into_iter()
            .flatten()
            .collect()
        };
        if !parts.is_empty() {
            out.push(format!("{title}: uring {}.", parts.join(", ")));
        }
    }
    if out.is_empty() {
        "Nothing to compare: both models must be measured validly (is io_uring refused here? \
         `mpm check` says)."
            .into()
    } else {
        out.join(" ")
    }
}
