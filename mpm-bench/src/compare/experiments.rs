//! Experiments: each one a question, a setup, the server variants and
//! scenarios that answer it, the columns worth showing, and a paragraph
//! computed from the results. One file each; add a file and a line in
//! [`EXPERIMENTS`] to add one.
//!
//! Findings read valid cells only ([`cell`]), and compare them with
//! [`change`] and [`share_of`], which say "no difference" when the runs'
//! ranges overlap; [`recommend`] writes the closing section every report
//! ends with.

mod h2;
mod logwrite;
mod lowat;
mod malloc;
mod matrix;
mod poller;
mod sendfile;
mod syscalls;
mod tls;
mod uring;
mod waiting;

use std::time::Duration;

use mpm_core::allocator::AllocatorKind;
use mpm_core::MpmKind;

use super::report::{Cell, Column, Metrics, Report, Spread};
use super::scenario::{Scenario, Upstream};

/// Every experiment `--experiment` knows; the first is the default.
pub const EXPERIMENTS: &[&Experiment] = &[
    &matrix::MATRIX,
    &malloc::MALLOC,
    &sendfile::SENDFILE,
    &poller::POLLER,
    &lowat::LOWAT,
    &logwrite::LOGWRITE,
    &syscalls::SYSCALLS,
    &tls::TLS,
    &waiting::WAITING,
    &uring::URING,
    &h2::H2,
];

/// The experiment named `name`.
pub fn find(name: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().copied().find(|e| e.name == name)
}

/// What the command line selected; experiments build their variants and
/// scenarios from it.
#[derive(Debug, Clone)]
pub struct Selection {
    /// `--mpm` (default: every [`MpmKind`]).
    pub mpms: Vec<MpmKind>,
    /// `--allocator` (default: every [`AllocatorKind`]).
    pub allocators: Vec<AllocatorKind>,
    /// `--idle`: idle connection counts.
    pub idle: Vec<usize>,
    /// `--duration` of each timed run.
    pub duration: Duration,
    /// `--upstream-delay` and `--upstream-body`: the matrix's loads go
    /// through a proxy route to compare's origin.
    pub upstream: Option<Upstream>,
    /// `--connections`: clients of the proxied load.
    pub connections: usize,
    /// `--waiting`: the waiting experiment's counts.
    pub waiting: Vec<usize>,
    /// The workloads given (`--workload`, `--scenario METHOD:/path`, or the
    /// application's own): when there are any, they replace the
    /// experiment's own scenarios.
    pub workloads: Vec<crate::workload::Workload>,
}

impl Selection {
    /// The scenarios of the given workloads, when there are any: each
    /// workload as `load` makes it, then for each `--idle` count the idle
    /// connections that each sent the first workload's first request, as
    /// `idle` makes them (over the experiment's protocol). `None` without
    /// workloads: the experiment's own scenarios then.
    pub(crate) fn given(
        &self,
        load: impl Fn(crate::workload::Workload) -> Scenario,
        idle: impl Fn(Scenario, usize) -> Scenario,
    ) -> Option<Vec<Scenario>> {
        let first = self.workloads.first()?;
        let mut s: Vec<Scenario> = self.workloads.iter().cloned().map(load).collect();
        s.extend(
            self.idle
                .iter()
                .map(|&n| idle(Scenario::idle_after(first, n), n)),
        );
        Some(s)
    }
}

#[cfg(test)]
impl Selection {
    /// A small selection for the experiments' unit tests: these models,
    /// the system allocator, 3 idle connections, 1 s runs.
    pub(crate) fn small(
        mpms: Vec<MpmKind>,
        workloads: Vec<crate::workload::Workload>,
    ) -> Selection {
        Selection {
            mpms,
            allocators: vec![AllocatorKind::System],
            idle: vec![3],
            duration: Duration::from_secs(1),
            workloads,
            upstream: None,
            connections: 1000,
            waiting: vec![100],
        }
    }
}

/// A server to measure: a label and the `serve` flags that make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Its name in tables and charts.
    pub label: String,
    /// Its process model.
    pub mpm: MpmKind,
    /// Its allocator.
    pub allocator: AllocatorKind,
    /// Extra `serve` flags (besides `--mpm`, `--allocator`, `--listen`, `--docroot`).
    pub flags: Vec<String>,
}

impl Variant {
    /// `MPM/ALLOCATOR` with `flags`.
    pub fn new(mpm: MpmKind, allocator: AllocatorKind, flags: Vec<String>) -> Variant {
        Variant {
            label: format!("{mpm}/{allocator}"),
            mpm,
            allocator,
            flags,
        }
    }

    /// The same with a label of its own.
    pub fn labelled(self, label: impl Into<String>) -> Variant {
        Variant {
            label: label.into(),
            ..self
        }
    }
}

/// One experiment: data, plus a function that reads the results.
#[derive(Debug)]
pub struct Experiment {
    /// `--experiment NAME`.
    pub name: &'static str,
    /// The question it answers.
    pub question: &'static str,
    /// How it answers it.
    pub setup: &'static str,
    /// The servers to compare.
    pub variants: fn(&Selection) -> Vec<Variant>,
    /// The loads to run against each.
    pub scenarios: fn(&Selection) -> Vec<Scenario>,
    /// The columns its tables show.
    pub columns: &'static [Column],
    /// A short paragraph computed from the results (ratios, not adjectives).
    pub findings: fn(&Report) -> String,
    /// Count each system call by name per request (`strace -c -f` on the
    /// server's tree, which slows it: req/s is then not comparable).
    pub per_syscall: bool,
}

/// The given workloads as scenarios (served by the program itself), when
/// there are any: they replace an experiment's own loads.
pub fn given_workloads(sel: &Selection) -> Option<Vec<Scenario>> {
    (!sel.workloads.is_empty()).then(|| {
        sel.workloads
            .iter()
            .cloned()
            .map(Scenario::workload)
            .collect()
    })
}

/// The allocator an experiment about something else runs with: the first
/// selected (the system one unless `--allocator` says otherwise).
pub fn first_allocator(sel: &Selection) -> AllocatorKind {
    sel.allocators
        .first()
        .copied()
        .unwrap_or(AllocatorKind::System)
}

/// Every selected MPM × allocator, with per-MPM extra flags.
pub fn mpm_by_allocator(
    sel: &Selection,
    allocators: &[AllocatorKind],
    flags: impl Fn(MpmKind) -> Vec<String>,
) -> Vec<Variant> {
    let mut out = Vec::new();
    for &mpm in &sel.mpms {
        for &a in allocators.iter().filter(|a| sel.allocators.contains(a)) {
            out.push(Variant::new(mpm, a, flags(mpm)));
        }
    }
    out
}

/// The cell for `variant` under `scenario`, if it was measured and is valid.
pub fn cell<'a>(report: &'a Report, variant: &str, scenario: &str) -> Option<&'a Cell> {
    report
        .cells
        .iter()
        .find(|c| c.variant == variant && c.scenario == scenario && c.valid)
}

/// `a` against `b` on `metric`: `"no difference"` when their runs' ranges
/// overlap, else the change of the medians (`"+12.5 %"`).
pub fn change(a: &Cell, b: &Cell, metric: fn(&Metrics) -> Option<f64>) -> Option<String> {
    let (x, y) = (a.spread(metric)?, b.spread(metric)?);
    Some(if x.overlaps(&y) {
        "no difference".into()
    } else {
        format!("{:+.1} %", 100.0 * (x.median / y.median.max(1e-9) - 1.0))
    })
}

/// `a` as a share of `b` on `metric`: `"no different from"` when their
/// runs' ranges overlap, else `"78 % of"`.
pub fn share_of(a: &Cell, b: &Cell, metric: fn(&Metrics) -> Option<f64>) -> Option<String> {
    let (x, y) = (a.spread(metric)?, b.spread(metric)?);
    Some(if x.overlaps(&y) {
        "no different from".into()
    } else {
        format!("{:.0} % of", 100.0 * x.median / y.median.max(1e-9))
    })
}

/// The variants of `name` that were not valid, for a "not ranked" note.
fn invalid_note(report: &Report, name: &str) -> String {
    let bad: Vec<&str> = report
        .scenario_cells(name)
        .filter(|c| c.invalid.is_some())
        .map(|c| c.variant.as_str())
        .collect();
    if bad.is_empty() {
        String::new()
    } else {
        format!(
            " Not ranked, their answers being invalid: {}.",
            bad.join(", ")
        )
    }
}

/// Valid cells of `name` with `metric`, best first (`higher`: the most).
fn ranked<'a>(
    report: &'a Report,
    name: &'a str,
    metric: fn(&Metrics) -> Option<f64>,
    higher: bool,
) -> Vec<(&'a Cell, Spread)> {
    let mut v: Vec<(&Cell, Spread)> = report
        .scenario_cells(name)
        .filter(|c| c.valid)
        .filter_map(|c| Some((c, c.spread(metric)?)))
        .collect();
    v.sort_by(|a, b| {
        let o = a.1.median.total_cmp(&b.1.median);
        if higher {
            o.reverse()
        } else {
            o
        }
    });
    v
}

/// The best of `ranked` and whether it is clearly best (its range overlaps
/// no other's), with those it cannot be told from.
fn leader<'a>(ranked: &[(&'a Cell, Spread)]) -> Option<(&'a Cell, Spread, Vec<&'a Cell>)> {
    let (best, s) = *ranked.first()?;
    let tied = ranked[1..]
        .iter()
        .filter(|(_, o)| o.overlaps(&s))
        .map(|(c, _)| *c)
        .collect();
    Some((best, s, tied))
}

fn names(cells: &[&Cell]) -> String {
    let n: Vec<&str> = cells.iter().map(|c| c.variant.as_str()).collect();
    n.join(", ")
}

fn rps(m: &Metrics) -> Option<f64> {
    m.requests_per_s
}

fn pss(m: &Metrics) -> Option<f64> {
    m.pss_kib
}

/// For each load scenario: the fastest valid variant, those within its
/// spread, and every other as a percentage of it; invalid ones are named
/// as not ranked.
pub fn fastest_per_scenario(report: &Report) -> String {
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        if report.is_idle(name) {
            continue;
        }
        let r = ranked(report, name, rps, true);
        let note = invalid_note(report, name);
        let Some((best, s, tied)) = leader(&r) else {
            if !note.is_empty() {
                out.push(format!("{title}: no valid cell.{note}"));
            }
            continue;
        };
        if r.len() < 2 {
            out.push(format!(
                "{title}: only {} was measured validly.{note}",
                best.variant
            ));
            continue;
        }
        let rest: Vec<String> = r[1..]
            .iter()
            .filter(|(c, _)| !tied.iter().any(|t| t.variant == c.variant))
            .map(|(c, o)| {
                format!(
                    "{} {:.0} %",
                    c.variant,
                    100.0 * o.median / s.median.max(1e-9)
                )
            })
            .collect();
        let lead = if tied.is_empty() {
            format!("{} is fastest ({:.0} req/s)", best.variant, s.median)
        } else {
            format!(
                "{} ({:.0} req/s) and {} are the fastest, with no difference between them \
                 within the runs' spread",
                best.variant,
                s.median,
                names(&tied)
            )
        };
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!("; {}", rest.join(", "))
        };
        out.push(format!("{title}: {lead}{rest}.{note}"));
    }
    out.join(" ")
}

/// For each load scenario: the variant that needs the least server CPU a
/// request, and those within its spread.
pub fn least_cpu_per_scenario(report: &Report) -> String {
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        if report.is_idle(name) {
            continue;
        }
        let r = ranked(report, name, |m| m.cpu_us_per_req, false);
        let Some((best, s, tied)) = leader(&r) else {
            continue;
        };
        if r.len() < 2 {
            continue;
        }
        let most = r.last().map_or(s.median, |(_, m)| m.median);
        let with = if tied.is_empty() {
            String::new()
        } else {
            format!(" (no difference from {})", names(&tied))
        };
        out.push(format!(
            "{title}: {} needs the least server CPU a request, {:.1} µs{with}, against {:.1} µs \
             at most.",
            best.variant, s.median, most
        ));
    }
    out.join(" ")
}

/// The closing section: per workload, the fastest variant and the leanest
/// (least memory) when the difference exceeds the spread, and one sentence
/// on the trade-off between them; per idle count, the leanest.
pub fn recommend(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        let note = invalid_note(report, name);
        let lean = ranked(report, name, pss, false);
        if report.is_idle(name) {
            let Some((least, s, tied)) = leader(&lean) else {
                out.push(format!("{title}: no valid cell, nothing to choose.{note}"));
                continue;
            };
            let per = least
                .median
                .pss_per_conn_kib
                .map_or(String::new(), |k| format!(", {k:.1} KiB a connection"));
            let most = lean.last().map(|(c, m)| (c.variant.as_str(), m.median));
            let text = match (tied.is_empty(), most) {
                (_, _) if lean.len() < 2 => format!(
                    "{title}: only {} was measured validly ({:.1} MiB{per}).",
                    least.variant,
                    s.median / 1024.0
                ),
                (true, Some((hi, m))) => format!(
                    "{title}: {} is the leanest ({:.1} MiB{per}); {hi} needs the most ({:.1} MiB, \
                     {:.1}×).",
                    least.variant,
                    s.median / 1024.0,
                    m / 1024.0,
                    m / s.median.max(1.0)
                ),
                _ => format!(
                    "{title}: no variant is clearly leanest: {} and {} are within each other's \
                     spread ({:.1} MiB).",
                    least.variant,
                    names(&tied),
                    s.median / 1024.0
                ),
            };
            out.push(format!("{text}{note}"));
            continue;
        }
        let fast = ranked(report, name, rps, true);
        let (Some((f, fs, ftied)), Some((l, ls, ltied))) = (leader(&fast), leader(&lean)) else {
            out.push(format!("{title}: no valid cell, nothing to choose.{note}"));
            continue;
        };
        if fast.len() < 2 {
            out.push(format!(
                "{title}: only {} was measured validly ({:.0} req/s).{note}",
                f.variant, fs.median
            ));
            continue;
        }
        // The fastest group and the leanest group: each the leader and
        // those its runs cannot tell from it.
        let fastest: Vec<&Cell> = std::iter::once(f).chain(ftied.iter().copied()).collect();
        let leanest: Vec<&Cell> = std::iter::once(l).chain(ltied.iter().copied()).collect();
        let group = |g: &[&Cell]| match g {
            [one] => format!("{} is", one.variant),
            many => format!("{} are", names(many)),
        };
        let tied = if fastest.len() > 1 || leanest.len() > 1 {
            " Variants named together are within each other's spread."
        } else {
            ""
        };
        let mib = |c: &Cell| c.median.pss_kib.map_or(0.0, |k| k / 1024.0);
        // A variant in both groups is as fast as any and as lean as any.
        let both = fastest
            .iter()
            .find(|c| leanest.iter().any(|x| x.variant == c.variant));
        let text = match both {
            Some(b) if fastest.len() == 1 && leanest.len() == 1 => format!(
                "{title}: {} is both the fastest ({:.0} req/s) and the leanest ({:.1} MiB): no \
                 trade-off to make.",
                b.variant,
                fs.median,
                mib(b)
            ),
            Some(b) => format!(
                "{title}: {} is among the fastest ({:.0} req/s) and the leanest ({:.1} MiB) at \
                 once: no trade-off to make ({} the fastest, {} the leanest).",
                b.variant,
                b.median.requests_per_s.unwrap_or(0.0),
                mib(b),
                group(&fastest),
                group(&leanest)
            ),
            None => {
                let l_rps = l.median.requests_per_s.unwrap_or(0.0);
                format!(
                    "{title}: {} the fastest ({:.0} req/s, {:.1} MiB); {} the leanest ({:.1} MiB, \
                     {:.0} req/s): {:.0} % more requests a second cost {:.1}× the memory, so \
                     whichever of throughput and memory runs short first decides.",
                    group(&fastest),
                    fs.median,
                    mib(f),
                    group(&leanest),
                    ls.median / 1024.0,
                    l_rps,
                    100.0 * (fs.median / l_rps.max(1e-9) - 1.0),
                    mib(f) / (ls.median / 1024.0).max(1e-9)
                )
            }
        };
        out.push(format!("{text}{tied}{note}"));
    }
    if out.is_empty() {
        out.push("Nothing was measured.".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything() -> Selection {
        Selection {
            mpms: MpmKind::ALL.to_vec(),
            allocators: AllocatorKind::ALL.to_vec(),
            idle: vec![10, 20],
            duration: Duration::from_secs(1),
            workloads: Vec::new(),
            upstream: None,
            connections: 1000,
            waiting: vec![100],
        }
    }

    #[test]
    fn every_experiment_has_unique_names_labels_and_columns() {
        let sel = everything();
        let mut names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        names.dedup();
        assert_eq!(names.len(), EXPERIMENTS.len());
        assert_eq!(EXPERIMENTS[0].name, "matrix", "the default comes first");
        for e in EXPERIMENTS {
            let mut labels: Vec<String> = (e.variants)(&sel).into_iter().map(|v| v.label).collect();
            assert!(!labels.is_empty(), "{}", e.name);
            labels.sort();
            labels.dedup();
            assert_eq!(
                labels.len(),
                (e.variants)(&sel).len(),
                "{}: labels repeat",
                e.name
            );
            let scenarios = (e.scenarios)(&sel);
            let mut s: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
            s.sort_unstable();
            s.dedup();
            assert_eq!(
                s.len(),
                scenarios.len(),
                "{}: scenario names repeat",
                e.name
            );
            assert!(!e.columns.is_empty() && !e.question.is_empty() && !e.setup.is_empty());
        }
    }

    #[test]
    fn the_matrix_follows_the_kinds_and_the_selection() {
        let sel = everything();
        let v = (MATRIX_FOR_TESTS.variants)(&sel);
        assert_eq!(v.len(), MpmKind::ALL.len() * AllocatorKind::ALL.len());
        let narrow = Selection {
            mpms: vec![MpmKind::Event],
            allocators: vec![AllocatorKind::Locked],
            ..sel
        };
        let v = (MATRIX_FOR_TESTS.variants)(&narrow);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].label, "event/locked");
    }

    const MATRIX_FOR_TESTS: &Experiment = &matrix::MATRIX;

    use crate::compare::report::Run;

    /// A cell of `variant` under `load` with one run per req/s figure, all
    /// at `pss_mib`; `unexpected` answers in each run of 1000.
    fn measured(variant: &str, rps: &[f64], pss_mib: f64, unexpected: u64) -> Cell {
        let mut c = Cell::new((variant, "event", "system"), "load", None);
        for &r in rps {
            c.add(Run {
                metrics: Metrics {
                    requests_per_s: Some(r),
                    pss_kib: Some(pss_mib * 1024.0),
                    ..Metrics::default()
                },
                responses: 1000,
                unexpected,
                ..Run::default()
            });
        }
        c
    }

    fn report_of(cells: Vec<Cell>) -> Report {
        Report {
            experiment: "matrix".into(),
            question: String::new(),
            setup: String::new(),
            command: String::new(),
            started_unix: 0,
            machine: crate::compare::machine::Machine::default(),
            repetitions: 3,
            duration_s: 1.0,
            warnings: Vec::new(),
            findings: String::new(),
            recommendations: Vec::new(),
            valid_cells: 0,
            columns: vec![Column::ReqPerS],
            scenarios: vec![("load".into(), "the load".into())],
            cells,
        }
    }

    #[test]
    fn a_difference_inside_the_runs_spread_is_no_difference() {
        let r = report_of(vec![
            measured("a", &[100.0, 110.0, 120.0], 10.0, 0),
            measured("b", &[115.0, 125.0, 130.0], 10.5, 0),
        ]);
        let f = fastest_per_scenario(&r);
        assert!(f.contains("no difference between them"), "{f}");
        let advice = recommend(&r).join(" ");
        assert!(
            advice.contains("a is among the fastest (110 req/s) and the leanest (10.0 MiB)")
                && advice.contains("(b, a are the fastest, a is the leanest)")
                && advice.contains("within each other's spread"),
            "{advice}"
        );
        let (a, b) = (&r.cells[0], &r.cells[1]);
        assert_eq!(
            change(a, b, |m| m.requests_per_s).as_deref(),
            Some("no difference")
        );
    }

    #[test]
    fn the_closing_section_names_the_fastest_and_the_leanest_with_the_trade_off() {
        let r = report_of(vec![
            measured("prefork/system", &[200.0, 205.0, 210.0], 60.0, 0),
            measured("event/system", &[100.0, 105.0, 110.0], 5.0, 0),
        ]);
        let advice = recommend(&r).join(" ");
        assert!(
            advice.contains("prefork/system is the fastest (205 req/s")
                && advice.contains("event/system is the leanest (5.0 MiB")
                && advice.contains("95 % more requests a second cost 12.0× the memory"),
            "{advice}"
        );
        let f = fastest_per_scenario(&r);
        assert!(
            f.contains("prefork/system is fastest (205 req/s); event/system 51 %"),
            "{f}"
        );
    }

    #[test]
    fn invalid_cells_are_never_ranked() {
        let r = report_of(vec![
            measured("fast but wrong", &[900.0, 950.0, 990.0], 1.0, 400),
            measured("event/system", &[100.0, 105.0, 110.0], 5.0, 0),
            measured("worker/system", &[50.0, 52.0, 55.0], 8.0, 0),
        ]);
        assert!(!r.cells[0].valid);
        let f = fastest_per_scenario(&r);
        assert!(f.starts_with("the load: event/system is fastest"), "{f}");
        assert!(
            f.contains("Not ranked, their answers being invalid: fast but wrong"),
            "{f}"
        );
        let advice = recommend(&r).join(" ");
        assert!(
            advice.contains("event/system is both the fastest"),
            "{advice}"
        );
        assert!(!advice.contains("wrong is"), "{advice}");
    }
}
