//! What each process model pays for HTTP/2's multiplexed streams: the same
//! page with the same requests in flight over HTTP/1.1 keep-alive
//! connections and over a tenth as many HTTP/2 connections of ten streams
//! each (h2c, and h2 over TLS), a 1 MiB file over h2c, and the memory of
//! idle h2c connections. Prefork serves one stream at a time per child and
//! refuses `--h2c on`: its cells are skipped with the server's reason.

use super::{cell, first_allocator, share_of, Experiment, Selection, Variant};
use crate::compare::report::{Cell, Column, Metrics, Report};
use crate::compare::scenario::{Scenario, Tls, FILE, PAGE};
use mpm_core::MpmKind;

/// `mpm compare --experiment h2`.
pub(super) const H2: Experiment = Experiment {
    name: "h2",
    question: "What does each process model pay for HTTP/2's multiplexed streams: requests a \
               second and p99 against HTTP/1.1 with as many requests in flight, the threads and \
               processes that serve them, and the memory of an idle HTTP/2 connection?",
    setup: "Each MPM with its defaults and the first selected allocator, `--h2c on` (HTTP/2 with \
            prior knowledge on the plain listener), a TLS listener offering h2 by ALPN (an ECDSA \
            P-256 certificate compare makes for the run) and `--max-request-workers` the largest \
            idle count + 64, at least 256 (under worker an HTTP/2 connection holds a thread). \
            Loads, all on compare's docroot: the 1456-byte page on 100 HTTP/1.1 keep-alive \
            connections (the baseline: 100 requests in flight), the same on 10 h2c connections \
            × 10 streams, and on 10 connections × 10 streams of h2 over TLS; the 1 MiB file on \
            4 h2c connections × 4 streams; then idle h2c connections, each having sent the \
            preface, its SETTINGS and one request (KiB each against the fresh server). The bench \
            engine drives HTTP/2 with the h2 crate's client. Prefork refuses `--h2c on` (one \
            stream at a time per child): its cells say so and are never counted.",
    variants,
    scenarios,
    columns: &[
        Column::ReqPerS,
        Column::P99,
        Column::CpuUsPerReq,
        Column::ProcsThreads,
        Column::PssMib,
        Column::PssPerConnKib,
        Column::IdleServed,
    ],
    findings,
    per_syscall: false,
};

/// HTTP/2 connections of the page loads, and streams in flight on each
/// (h2load's `-c` and `-m`): as many requests in flight as the baseline's.
const CONNECTIONS: usize = 10;
/// See [`CONNECTIONS`].
const STREAMS: usize = 10;
/// The model every other is a share of.
const REFERENCE: MpmKind = MpmKind::Event;

fn variants(sel: &Selection) -> Vec<Variant> {
    let workers = (sel.idle.iter().copied().max().unwrap_or(0) + 64).max(256);
    let Some((cert, key)) = super::tls::cert_files() else {
        return Vec::new();
    };
    let allocator = first_allocator(sel);
    sel.mpms
        .iter()
        .map(|&mpm| {
            let flags = vec![
                "--h2c".into(),
                "on".into(),
                "--max-request-workers".into(),
                workers.to_string(),
                "--listen-tls".into(),
                "127.0.0.1:0".into(),
                "--tls-cert".into(),
                cert.display().to_string(),
                "--tls-key".into(),
                key.display().to_string(),
            ];
            Variant::new(mpm, allocator, flags).labelled(mpm.to_string())
        })
        .collect()
}

/// Idle h2c connections, each first sent `idle`'s first request.
fn idle_h2c(mut idle: Scenario, n: usize) -> Scenario {
    idle.workload.h2_streams = Some(1);
    idle.name = format!("h2c-idle-{n}");
    idle.title = format!("{n} idle h2c connections");
    idle
}

/// The docroot's `path` on `connections` HTTP/2 connections × `streams`.
fn over_h2(name: &str, title: &str, path: &str, connections: usize, streams: usize) -> Scenario {
    let mut s = Scenario::keepalive(name, title, path, connections);
    s.workload.h2_streams = Some(streams);
    s
}

fn scenarios(sel: &Selection) -> Vec<Scenario> {
    // Given workloads (an application's own, `--workload`, `METHOD:/path`)
    // replace the docroot's loads, over h2c (10 streams a connection
    // unless a workload says `h2-streams`), with idle h2c connections that
    // each sent the first one's first request.
    let over_h2c = |mut w: crate::workload::Workload| {
        w.h2_streams.get_or_insert(STREAMS);
        Scenario::workload(w)
    };
    if let Some(s) = sel.given(over_h2c, idle_h2c) {
        return s;
    }
    let in_flight = CONNECTIONS * STREAMS;
    let mut s = vec![
        Scenario::keepalive(
            "h1-page",
            &format!("1456-byte page, HTTP/1.1, {in_flight} keep-alive connections"),
            PAGE,
            in_flight,
        ),
        over_h2(
            "h2c-page",
            &format!("1456-byte page, h2c, {CONNECTIONS} connections × {STREAMS} streams"),
            PAGE,
            CONNECTIONS,
            STREAMS,
        ),
        over_h2(
            "h2-tls-page",
            &format!("1456-byte page, h2 over TLS, {CONNECTIONS} connections × {STREAMS} streams"),
            PAGE,
            CONNECTIONS,
            STREAMS,
        )
        .over_tls(Tls::Full),
        over_h2(
            "h2c-file",
            "1 MiB file, h2c, 4 connections × 4 streams",
            FILE,
            4,
            4,
        ),
    ];
    s.extend(sel.idle.iter().map(|&n| idle_h2c(Scenario::idle(n), n)));
    s
}

/// The models measured, in the report's order.
fn models(report: &Report) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for c in &report.cells {
        if !v.contains(&c.variant.as_str()) {
            v.push(&c.variant);
        }
    }
    v
}

/// `P processes, T threads`, as measured with the cell.
fn held(c: &Cell) -> Option<String> {
    Some(format!(
        "{:.0} processes, {:.0} threads",
        c.median.processes?, c.median.threads?
    ))
}

fn findings(report: &Report) -> String {
    let reference = REFERENCE.to_string();
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        let mut parts = Vec::new();
        let base = cell(report, &reference, name);
        for model in models(report) {
            let Some(c) = cell(report, model, name) else {
                continue;
            };
            let threads = held(c).unwrap_or_default();
            if report.is_idle(name) {
                if let Some(k) = c.median.pss_per_conn_kib {
                    parts.push(format!("{model} {k:.1} KiB each ({threads})"));
                }
                continue;
            }
            let rps = |m: &Metrics| m.requests_per_s;
            match base {
                Some(b) if model != reference => {
                    if let Some(share) = share_of(c, b, rps) {
                        parts.push(format!("{model} {share} {reference}'s req/s ({threads})"));
                    }
                }
                _ => parts.push(format!(
                    "{model} {:.0} req/s ({threads})",
                    c.median.requests_per_s.unwrap_or(0.0)
                )),
            }
        }
        if !parts.is_empty() {
            out.push(format!("{title}: {}.", parts.join("; ")));
        }
    }
    // What multiplexing costs each model: h2c's req/s as a share of
    // HTTP/1.1's with as many requests in flight.
    let costs: Vec<String> = models(report)
        .into_iter()
        .filter_map(|m| {
            let (h1, h2) = (cell(report, m, "h1-page")?, cell(report, m, "h2c-page")?);
            let (a, b) = (
                h2.spread(|x| x.requests_per_s)?,
                h1.spread(|x| x.requests_per_s)?,
            );
            Some(if a.overlaps(&b) {
                format!("{m} no different")
            } else {
                format!("{m} {:.0} %", 100.0 * a.median / b.median.max(1e-9))
            })
        })
        .collect();
    if !costs.is_empty() {
        out.push(format!(
            "The page's req/s over h2c as a share of HTTP/1.1's with as many requests in \
             flight: {}.",
            costs.join(", ")
        ));
    }
    // A model that refused HTTP/2 is named once, with its reason.
    let mut refused: Vec<String> = Vec::new();
    for c in &report.cells {
        if let Some(why) = &c.skipped {
            let line = format!("{} was not measured: {why}", c.variant);
            if !refused.contains(&line) {
                refused.push(line);
            }
        }
    }
    if !refused.is_empty() {
        out.push(format!("{}.", refused.join("; ")));
    }
    if out.is_empty() {
        "Nothing was measured validly.".into()
    } else {
        out.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::scenario::{Load, ServerBin};
    use crate::workload::Workload;

    fn selection(workloads: Vec<Workload>) -> Selection {
        Selection::small(MpmKind::ALL.to_vec(), workloads)
    }

    #[test]
    fn every_model_asks_for_h2c_and_the_loads_go_over_http2_beside_their_baseline() {
        let sel = selection(Vec::new());
        let v = variants(&sel);
        assert_eq!(v.len(), MpmKind::ALL.len());
        for variant in &v {
            // Prefork too: its server refuses, and says why.
            let flags = variant.flags.join(" ");
            assert!(
                flags.contains("--h2c on") && flags.contains("--listen-tls"),
                "{flags}"
            );
        }
        let s = scenarios(&sel);
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "h1-page",
                "h2c-page",
                "h2-tls-page",
                "h2c-file",
                "h2c-idle-3"
            ]
        );
        let streams: Vec<Option<usize>> = s.iter().map(|s| s.workload.h2_streams).collect();
        assert_eq!(streams, [None, Some(10), Some(10), Some(4), Some(1)]);
        // As many requests in flight either way.
        assert_eq!(s[0].workload.connections, 10 * s[1].workload.connections);
        assert_eq!((s[2].tls, s[1].tls), (Tls::Full, Tls::Off));
        assert_eq!(s[4].load, Load::Idle { connections: 3 });
    }

    /// A cell of `model` under `scenario`, one run with these figures.
    fn measured(model: &str, scenario: &str, idle: Option<usize>, m: Metrics) -> Cell {
        let mut c = Cell::new((model, model, "system"), scenario, idle);
        c.add(crate::compare::report::Run {
            metrics: m,
            responses: 1000,
            ..Default::default()
        });
        c
    }

    fn load(rps: f64, threads: f64) -> Metrics {
        Metrics {
            requests_per_s: Some(rps),
            processes: Some(1.0),
            threads: Some(threads),
            ..Metrics::default()
        }
    }

    #[test]
    fn findings_give_shares_of_event_threads_and_kib_and_name_a_refusal_once() {
        let idle = Metrics {
            pss_per_conn_kib: Some(4.5),
            ..load(0.0, 5.0)
        };
        let mut prefork = Cell::new(("prefork", "prefork", "system"), "h2c-page", None);
        prefork.skip("the server did not start: mpm: error: --h2c on: prefork serves one stream");
        let mut prefork_idle = prefork.clone();
        prefork_idle.scenario = "h2c-idle-3".into();
        let report = Report {
            experiment: "h2".into(),
            question: String::new(),
            setup: String::new(),
            command: String::new(),
            started_unix: 0,
            machine: crate::compare::machine::Machine::default(),
            repetitions: 1,
            duration_s: 1.0,
            warnings: Vec::new(),
            findings: String::new(),
            recommendations: Vec::new(),
            valid_cells: 0,
            columns: H2.columns.to_vec(),
            scenarios: vec![
                ("h1-page".into(), "HTTP/1.1".into()),
                ("h2c-page".into(), "h2c".into()),
                ("h2c-idle-3".into(), "3 idle".into()),
            ],
            cells: vec![
                prefork,
                prefork_idle,
                measured("worker", "h1-page", None, load(1000.0, 258.0)),
                measured("worker", "h2c-page", None, load(600.0, 258.0)),
                measured("worker", "h2c-idle-3", Some(3), idle.clone()),
                measured("event", "h1-page", None, load(1000.0, 5.0)),
                measured("event", "h2c-page", None, load(800.0, 5.0)),
                measured("event", "h2c-idle-3", Some(3), idle),
            ],
        };
        let f = findings(&report);
        for says in [
            "h2c: worker 75 % of event's req/s (1 processes, 258 threads); event 800 req/s",
            "3 idle: worker 4.5 KiB each (1 processes, 5 threads)",
            "as many requests in flight: worker 60 %, event 80 %.",
        ] {
            assert!(f.contains(says), "{says}: {f}");
        }
        // Skipped, never a zero: named once, with the server's reason.
        assert_eq!(f.matches("prefork was not measured").count(), 1, "{f}");
        assert!(f.contains("--h2c on: prefork serves one stream"), "{f}");
        assert!(!f.contains("prefork 0"), "{f}");
    }

    #[test]
    fn given_workloads_go_over_h2c_keeping_their_own_streams() {
        let mine = Workload::get("api", "/api/users/1").h2(4);
        let s = scenarios(&selection(vec![Workload::get("home", "/"), mine]));
        let got: Vec<(&str, Option<usize>, ServerBin)> = s
            .iter()
            .map(|s| (s.name.as_str(), s.workload.h2_streams, s.server))
            .collect();
        assert_eq!(
            got,
            [
                ("home", Some(10), ServerBin::Program),
                ("api", Some(4), ServerBin::Program),
                ("h2c-idle-3", Some(1), ServerBin::Program),
            ]
        );
        assert_eq!(s[2].first_request().path, "/");
    }
}
