//! `mpm compare`, run small: one MPM, one allocator, short runs. The report
//! must be valid JSON with measured cells, and index.html must show SVG
//! charts that carry the variants and the data.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::time::Duration;

use serde_json::Value;
use tests::{mpm_bin, run_mpm, TempDir};

fn report(dir: &TempDir) -> Value {
    let text = fs::read_to_string(dir.path().join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_tiny_comparison_writes_a_report_with_charts() {
    let _turn = tests::cpu_turn();
    let out_dir = TempDir::new("compare");
    let out = out_dir.path().to_str().unwrap();
    let run = run_mpm(
        &[
            "compare",
            "--mpm",
            "event",
            "--allocator",
            "system",
            "--scenario",
            "keepalive,idle",
            "--idle",
            "4,12",
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
            "--out",
            out,
        ],
        Duration::from_secs(120),
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let r = report(&out_dir);
    assert_eq!(r["experiment"], "matrix");
    let cells = r["cells"].as_array().unwrap();
    let names: Vec<&str> = cells
        .iter()
        .map(|c| c["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["keepalive", "idle-4", "idle-12"]);
    let load = &cells[0];
    assert_eq!(load["variant"], "event/system");
    assert!(load["requests_per_s"].as_f64().unwrap() > 0.0, "{load}");
    assert_eq!(load["errors"], 0);
    assert!(
        load["allocations_per_req"].as_f64().unwrap() > 0.0,
        "{load}"
    );
    assert!(load["cpu_us_per_req"].as_f64().is_some(), "{load}");
    for (cell, n) in [(&cells[1], 4), (&cells[2], 12)] {
        assert_eq!(cell["idle_connections"], n);
        assert_eq!(
            cell["responses"], n,
            "every idle connection was served once"
        );
        assert!(cell["pss_kib"].as_u64().unwrap() > 0);
        assert_eq!(
            cell["processes"], 2,
            "event runs in one process, under its master"
        );
        let sample = cell["idle_sample_served"].as_str().unwrap();
        let (served, of) = sample.split_once('/').unwrap();
        assert_eq!(
            served, of,
            "every sampled idle connection still served: {sample}"
        );
    }
    assert!(r["findings"].as_str().is_some());

    let html = fs::read_to_string(out_dir.path().join("index.html")).unwrap();
    for svg in ["reqs-keepalive.svg", "memory.svg", "latency.svg"] {
        assert!(
            html.contains(&format!("src=\"{svg}\"")),
            "index.html lacks {svg}"
        );
        assert!(out_dir.path().join(svg).is_file(), "{svg} not written");
    }
    assert!(html.contains("<table>") && html.contains("event/system"));
    let bars = fs::read_to_string(out_dir.path().join("reqs-keepalive.svg")).unwrap();
    assert!(
        bars.starts_with("<svg") && bars.contains("event/system"),
        "{bars}"
    );
    // The background and one bar at least.
    assert!(bars.matches("<rect").count() >= 2, "no bar in {bars}");
    let memory = fs::read_to_string(out_dir.path().join("memory.svg")).unwrap();
    assert!(memory.contains("<polyline"), "no line in memory.svg");
    assert!(memory.contains("event/system") && memory.contains("idle keep-alive connections"));
    let latency = fs::read_to_string(out_dir.path().join("latency.svg")).unwrap();
    assert!(latency.contains("p99.9") && latency.contains("<polyline"));
    let md = fs::read_to_string(out_dir.path().join("report.md")).unwrap();
    assert!(md.contains("| event/system |"));
}

#[test]
fn the_malloc_experiment_counts_allocations_and_lock_waits() {
    let _turn = tests::cpu_turn();
    let out_dir = TempDir::new("compare-malloc");
    let examples = mpm_bin()
        .parent()
        .unwrap()
        .join("examples")
        .join("streaming");
    assert!(examples.is_file(), "the harness builds the examples");
    let run = run_mpm(
        &[
            "compare",
            "--experiment",
            "malloc",
            "--mpm",
            "worker",
            "--allocator",
            "locked",
            "--scenario",
            "alloc",
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let r = report(&out_dir);
    let cell = &r["cells"][0];
    assert_eq!(cell["variant"], "worker/locked");
    assert!(cell["skipped"].is_null(), "{cell}");
    // /lines?count=200 allocates a couple of hundred times a request.
    assert!(
        cell["allocations_per_req"].as_f64().unwrap() > 100.0,
        "{cell}"
    );
    assert!(cell["lock_waits_per_req"].as_f64().is_some(), "{cell}");
}

#[test]
fn the_sendfile_experiment_measures_both_ways_of_sending() {
    let _turn = tests::cpu_turn();
    let out_dir = TempDir::new("compare-sendfile");
    let run = run_mpm(
        &[
            "compare",
            "--experiment",
            "sendfile",
            "--mpm",
            "event",
            "--scenario",
            "file-close-1",
            "--duration",
            "200ms",
            "--warmup",
            "0s",
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let r = report(&out_dir);
    let cells = r["cells"].as_array().unwrap();
    let labels: Vec<&str> = cells
        .iter()
        .map(|c| c["variant"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["event sendfile on", "event sendfile off"]);
    for c in cells {
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert_eq!(c["non_200"], 0, "{c}");
    }
}

#[test]
fn unknown_experiments_and_scenarios_are_one_line_and_exit_2() {
    for args in [
        &["compare", "--experiment", "nope"][..],
        &["compare", "--scenario", "nope"],
        &["compare", "--mpm", "apache"],
    ] {
        let out = run_mpm(args, Duration::from_secs(10));
        out.assert_one_line_error(&format!("{args:?}"));
    }
}

/// Run `mpm compare` with `args` and a short timing; the report.
fn run_experiment(label: &str, args: &[&str]) -> Value {
    let _turn = tests::cpu_turn();
    let out_dir = TempDir::new(label);
    let mut all: Vec<&str> = vec!["compare"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--duration", "200ms", "--warmup", "0s", "--out"]);
    all.push(out_dir.path().to_str().unwrap());
    let run = run_mpm(&all, Duration::from_secs(180));
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let r = report(&out_dir);
    assert!(r["findings"].as_str().is_some_and(|f| !f.is_empty()), "{r}");
    r
}

fn labels(r: &Value) -> Vec<String> {
    r["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["variant"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_poller_experiment_runs_every_poller_at_one_and_a_hundred_ports() {
    let r = run_experiment(
        "compare-poller",
        &[
            "--experiment",
            "poller",
            "--mpm",
            "worker",
            "--scenario",
            "close-20",
        ],
    );
    assert_eq!(
        labels(&r),
        [
            "worker 1 port epoll",
            "worker 1 port poll",
            "worker 1 port select",
            "worker 100 ports epoll",
            "worker 100 ports poll",
            "worker 100 ports select",
        ]
    );
    for c in r["cells"].as_array().unwrap() {
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
    }
}

#[test]
fn the_lowat_experiment_counts_the_servers_writes_per_transfer() {
    let r = run_experiment(
        "compare-lowat",
        &[
            "--experiment",
            "lowat",
            "--mpm",
            "event",
            "--scenario",
            "1mib-slow",
        ],
    );
    assert_eq!(labels(&r), ["event no mark", "event lowat 32 KiB"]);
    for c in r["cells"].as_array().unwrap() {
        assert_eq!(c["responses"], 10, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        // A 1 MiB body takes at least one write, and a slow reader fills the socket.
        assert!(c["sends_per_req"].as_f64().unwrap() >= 1.0, "{c}");
        assert!(c["send_waits_per_req"].as_f64().is_some(), "{c}");
    }
}

#[test]
fn the_logwrite_experiment_measures_each_way_of_writing_the_log() {
    let r = run_experiment(
        "compare-logwrite",
        &[
            "--experiment",
            "logwrite",
            "--mpm",
            "prefork",
            "--scenario",
            "keepalive",
        ],
    );
    assert_eq!(
        labels(&r),
        [
            "prefork no log",
            "prefork writev",
            "prefork copy",
            "prefork buffered 64 KiB"
        ]
    );
    for c in r["cells"].as_array().unwrap() {
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert_eq!(c["non_200"], 0, "{c}");
    }
}
