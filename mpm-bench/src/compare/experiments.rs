//! Experiments: each one a question, a setup, the server variants and
//! scenarios that answer it, the columns worth showing, and a paragraph
//! computed from the results. One file each; add a file and a line in
//! [`EXPERIMENTS`] to add one.

mod logwrite;
mod lowat;
mod malloc;
mod matrix;
mod poller;
mod sendfile;
mod syscalls;
mod tls;

use std::time::Duration;

use mpm_core::allocator::AllocatorKind;
use mpm_core::MpmKind;

use super::report::{Cell, Column, Report};
use super::scenario::Scenario;

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

/// The cell for `variant` under `scenario`, if it was measured.
pub fn cell<'a>(report: &'a Report, variant: &str, scenario: &str) -> Option<&'a Cell> {
    report
        .cells
        .iter()
        .find(|c| c.variant == variant && c.scenario == scenario && c.skipped.is_none())
}

/// For each load scenario: the fastest variant, and every other as a
/// percentage of it.
pub fn fastest_per_scenario(report: &Report) -> String {
    let mut out = Vec::new();
    for (name, title) in &report.scenarios {
        let mut cells: Vec<(&str, f64)> = report
            .scenario_cells(name)
            .filter_map(|c| Some((c.variant.as_str(), c.requests_per_s?)))
            .collect();
        if cells.len() < 2 {
            continue;
        }
        cells.sort_by(|a, b| b.1.total_cmp(&a.1));
        let best = cells[0];
        let rest: Vec<String> = cells[1..]
            .iter()
            .map(|(v, r)| format!("{v} {:.0} %", 100.0 * r / best.1.max(1e-9)))
            .collect();
        out.push(format!(
            "{title}: {} is fastest ({:.0} req/s); {}.",
            best.0,
            best.1,
            rest.join(", ")
        ));
    }
    out.join(" ")
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
}
