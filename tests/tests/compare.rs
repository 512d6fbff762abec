//! `mpm compare`, run small: one MPM, one allocator, short runs. The report
//! must be valid JSON with measured cells (median within the runs' min and
//! max), index.html must show SVG charts that carry the variants and the
//! data, an application's own workloads must be what is measured, and
//! answers a request did not expect must make a cell invalid everywhere.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tests::{mpm_bin, run_mpm, run_program, TempDir};

fn report(dir: &TempDir) -> Value {
    let text = fs::read_to_string(dir.path().join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every figure of a cell's `min` is at most its median, which is at most
/// its `max`; and each run is among them.
fn assert_spread(cell: &Value) {
    let (min, max) = (&cell["min"], &cell["max"]);
    let fields = min.as_object().unwrap();
    assert!(!fields.is_empty(), "{cell}");
    for (name, lo) in fields {
        let (Some(lo), Some(mid), Some(hi)) =
            (lo.as_f64(), cell[name].as_f64(), max[name].as_f64())
        else {
            assert!(
                cell[name].is_null() && max[name].is_null(),
                "{name}: {cell}"
            );
            continue;
        };
        assert!(lo <= mid && mid <= hi, "{name}: {lo} {mid} {hi} in {cell}");
        for run in cell["each_run"].as_array().unwrap() {
            let v = run[name].as_f64().unwrap();
            assert!(lo <= v && v <= hi, "{name}: run {v} outside {lo}..{hi}");
        }
    }
}

#[test]
fn a_tiny_comparison_writes_a_report_with_charts_medians_and_spread() {
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
            "200ms",
            "--warmup",
            "50ms",
            "--repeat",
            "3",
            "--out",
            out,
        ],
        Duration::from_secs(120),
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let r = report(&out_dir);
    assert_eq!(r["experiment"], "matrix");
    assert_eq!(r["repetitions"], 3);
    assert_eq!(r["valid_cells"], 3);
    let m = &r["machine"];
    assert!(m["cpus"].as_u64().unwrap() >= 1 && m["memory_mib"].as_u64().unwrap() > 0);
    assert!(m["kernel"].as_str().unwrap().starts_with("Linux"), "{m}");
    assert_eq!(m["load_before"].as_array().unwrap().len(), 3);
    assert_eq!(m["load_after"].as_array().unwrap().len(), 3);
    let cells = r["cells"].as_array().unwrap();
    let names: Vec<&str> = cells
        .iter()
        .map(|c| c["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["keepalive", "idle-4", "idle-12"]);
    for cell in cells {
        assert_eq!(cell["runs"], 3, "{cell}");
        assert_eq!(cell["each_run"].as_array().unwrap().len(), 3, "{cell}");
        assert_eq!(cell["valid"], true, "{cell}");
        assert!(cell["invalid"].is_null(), "{cell}");
        assert_spread(cell);
    }
    let load = &cells[0];
    assert_eq!(load["variant"], "event/system");
    assert!(load["requests_per_s"].as_f64().unwrap() > 0.0, "{load}");
    assert_eq!(
        (load["errors"].as_u64(), load["unexpected"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(load["allocations_per_req"].as_f64().is_some(), "{load}");
    assert!(load["cpu_us_per_req"].as_f64().is_some(), "{load}");
    // Event has no accept mutex: the figure is absent, not zero.
    assert!(load["accept_wait_us_per_req"].is_null(), "{load}");
    assert!(
        load["lock_waits_per_req"].is_null(),
        "system has no allocator lock: {load}"
    );
    for (cell, n) in [(&cells[1], 4), (&cells[2], 12)] {
        assert_eq!(cell["idle_connections"], n);
        assert_eq!(
            cell["responses"].as_u64(),
            Some(3 * n),
            "every idle connection was served once in each run"
        );
        assert!(cell["pss_kib"].as_f64().unwrap() > 0.0);
        // A loop per CPU by default, under the master every server has.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            cell["processes"].as_f64(),
            Some(cpus as f64 + 1.0),
            "event runs a loop per CPU, under its master"
        );
        // The baseline has the processes that hold the connections.
        assert_eq!(cell["baseline_processes"], cell["processes"], "{cell}");
        assert!(cell["pss_per_conn_kib"].as_f64().is_some(), "{cell}");
        let sample = cell["idle_sample_served"].as_str().unwrap();
        let (served, of) = sample.split_once('/').unwrap();
        assert_eq!(
            served, of,
            "every sampled idle connection still served: {sample}"
        );
    }
    assert!(r["findings"].as_str().is_some());
    let advice = r["recommendations"].as_array().unwrap();
    assert_eq!(advice.len(), 3, "one line per scenario: {advice:?}");

    let html = fs::read_to_string(out_dir.path().join("index.html")).unwrap();
    for svg in ["reqs-keepalive.svg", "memory.svg", "latency.svg"] {
        assert!(
            html.contains(&format!("src=\"{svg}\"")),
            "index.html lacks {svg}"
        );
        assert!(out_dir.path().join(svg).is_file(), "{svg} not written");
    }
    assert!(html.contains("<table>") && html.contains("event/system"));
    assert!(html.contains("Which to choose") && html.contains("Machine."));
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
    assert!(
        md.contains("| event/system | ok (0 unexpected, 0 failed) |"),
        "{md}"
    );
    assert!(
        md.contains("## Which to choose") && md.contains("**Machine.**"),
        "{md}"
    );
}

/// `BIN compare ARGS` with one short run per cell (exit code checked): the
/// report, and the directory it is in.
fn short_compare(bin: &Path, label: &str, args: &[&str], code: i32) -> (Value, TempDir) {
    // 200 ms runs: several at once on a small machine would measure nothing.
    let _turn = tests::cpu_turn();
    let out_dir = TempDir::new(label);
    let mut all: Vec<&str> = vec!["compare"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--duration",
        "200ms",
        "--warmup",
        "0s",
        "--repeat",
        "1",
        "--out",
    ]);
    all.push(out_dir.path().to_str().unwrap());
    let run = run_program(bin, &all, Duration::from_secs(180));
    assert_eq!(run.status.code(), Some(code), "stderr: {}", run.stderr);
    (report(&out_dir), out_dir)
}

/// The same with an example built next to the binary.
fn compare_example(example: &str, label: &str, args: &[&str], code: i32) -> (Value, TempDir) {
    let bin = mpm_bin().parent().unwrap().join("examples").join(example);
    short_compare(&bin, label, args, code)
}

#[test]
fn an_application_is_measured_on_its_own_workloads_with_no_flags() {
    let (r, _dir) = compare_example(
        "shop",
        "compare-shop",
        &["--mpm", "event", "--allocator", "system", "--idle", "3"],
        0,
    );
    let names: Vec<&str> = r["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["browse", "browse-slow-clients", "slow-backend", "idle-3"],
        "the shop's own workloads, then idle connections"
    );
    for c in r["cells"].as_array().unwrap() {
        assert_eq!(c["valid"], true, "{c}");
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
    }
    // The browse mix answered its POSTs with 201, as the workload expects.
    let browse = &r["cells"][0];
    assert!(browse["statuses"]["201"].as_u64().unwrap() > 0, "{browse}");
}

#[test]
fn an_endpoint_answering_404_makes_every_cell_invalid_and_compare_exit_1() {
    let (r, dir) = compare_example(
        "shop",
        "compare-404",
        &[
            "--mpm",
            "event,worker",
            "--allocator",
            "system",
            "--scenario",
            "get:/api/nope",
            "--idle",
            "3",
        ],
        1,
    );
    assert_eq!(r["valid_cells"], 0, "{r}");
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "two variants × the path and idle-3");
    for c in cells {
        assert_eq!(c["valid"], false, "{c}");
        let why = c["invalid"].as_str().unwrap();
        assert!(why.contains("404"), "{why}");
    }
    // Never ranked or summarised: no variant is called fastest or leanest.
    let findings = r["findings"].as_str().unwrap();
    assert!(!findings.contains("fastest"), "{findings}");
    for advice in r["recommendations"].as_array().unwrap() {
        assert!(
            advice.as_str().unwrap().contains("no valid cell"),
            "{advice}"
        );
    }
    // Shown, with the count, in every table and chart.
    let md = fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert_eq!(md.matches("| INVALID: ").count(), 4, "{md}");
    let html = fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert_eq!(
        html.matches("<td class=\"invalid\">INVALID: ").count(),
        4,
        "{html}"
    );
    for svg in ["reqs-get-api-nope.svg", "latency.svg", "memory.svg"] {
        let text = fs::read_to_string(dir.path().join(svg)).unwrap();
        assert!(text.contains("invalid: "), "{svg}: {text}");
    }
}

/// A program without mpm's allocator cannot run the allocator variants:
/// each is skipped with the server's own one-line reason, and with nothing
/// valid left the run exits 1.
#[test]
fn a_variant_whose_server_cannot_start_is_skipped_with_its_reason() {
    let (r, _dir) = compare_example(
        "per_worker_state",
        "compare-skipped",
        &[
            "--mpm",
            "event",
            "--allocator",
            "mimalloc",
            "--scenario",
            "get:/whoami",
            "--idle",
            "1",
        ],
        1,
    );
    for c in r["cells"].as_array().unwrap() {
        let why = c["skipped"].as_str().unwrap_or_else(|| panic!("{c}"));
        assert!(
            why.starts_with("the server did not start: ") && why.contains("MpmAllocator"),
            "{why}"
        );
        assert_eq!(c["valid"], false);
    }
}

#[test]
fn bad_workloads_and_repeats_are_one_line_and_exit_2() {
    let dir = TempDir::new("compare-bad");
    let bad = dir.write("bad.toml", b"[[request]]\npath = \"/\"\nweight = 0\n");
    let bad = bad.to_str().unwrap();
    for args in [
        &["compare", "--workload", bad][..],
        &["compare", "--workload", "/nonexistent/w.toml"],
        &["compare", "--scenario", "get:/a b"],
        &["compare", "--repeat", "0"],
        &["bench", "--workload", bad, "http://127.0.0.1:1/"],
        &["bench", "--workload", bad, "http://127.0.0.1:1/path"],
    ] {
        let out = run_mpm(args, Duration::from_secs(10));
        out.assert_one_line_error(&format!("{args:?}"));
    }
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
            "--repeat",
            "1",
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
    let r = run_experiment(
        "compare-sendfile",
        &[
            "--experiment",
            "sendfile",
            "--mpm",
            "event",
            "--scenario",
            "file-close-1",
        ],
    );
    let cells = r["cells"].as_array().unwrap();
    let labels: Vec<&str> = cells
        .iter()
        .map(|c| c["variant"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["event sendfile on", "event sendfile off"]);
    for c in cells {
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert_eq!(c["unexpected"], 0, "{c}");
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

/// Flags after `--` that `serve` refuses are told once, before any server
/// starts (they were a report whose every cell said the server did not
/// start, and exit 1).
#[test]
fn serve_flags_the_server_refuses_are_one_line_and_exit_2() {
    for (flags, says) in [
        (&["--bogus"][..], "--bogus"),
        (&["--threads-per-child", "0"], "--threads-per-child 0"),
    ] {
        let args: Vec<&str> = ["compare", "--mpm", "worker", "--allocator", "system", "--"]
            .iter()
            .chain(flags)
            .copied()
            .collect();
        let out = run_mpm(&args, Duration::from_secs(20));
        out.assert_one_line_error(&format!("{args:?}"));
        assert!(
            out.stderr.contains("the serve flags after --") && out.stderr.contains(says),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// Run `mpm compare` with `args` and a short timing; the report.
fn run_experiment(label: &str, args: &[&str]) -> Value {
    let (r, _dir) = short_compare(mpm_bin(), label, args, 0);
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

/// epoll against io_uring on the same handler: both models, the pipelined
/// load answered in full by each, and the findings comparing them.
#[test]
fn the_uring_experiment_measures_event_and_uring_on_a_pipelined_load() {
    let r = run_experiment(
        "compare-uring",
        &["--experiment", "uring", "--scenario", "page-pipelined"],
    );
    assert_eq!(labels(&r), ["event", "uring"]);
    for c in r["cells"].as_array().unwrap() {
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert_eq!(c["unexpected"], 0, "{c}");
    }
    let findings = r["findings"].as_str().unwrap();
    assert!(findings.contains("16 pipelined: uring"), "{findings}");
}

/// What each model pays for multiplexed streams: worker and event answer
/// the page over h2c and over TLS (h2 by ALPN) in full, report the threads
/// that served it, and hold idle h2c connections still served afterwards,
/// in KiB each; prefork, which refuses `--h2c on`, is skipped with the
/// server's own reason, counted nowhere and named once in the findings.
#[test]
fn the_h2_experiment_measures_worker_and_event_and_skips_prefork_with_its_reason() {
    let r = run_experiment(
        "compare-h2",
        &[
            "--experiment",
            "h2",
            "--mpm",
            "prefork,worker,event",
            "--allocator",
            "system",
            "--scenario",
            "h2c-page,h2-tls-page,idle",
            "--idle",
            "5",
        ],
    );
    let cells = r["cells"].as_array().unwrap();
    let got: Vec<(&str, &str)> = cells
        .iter()
        .map(|c| {
            (
                c["variant"].as_str().unwrap(),
                c["scenario"].as_str().unwrap(),
            )
        })
        .collect();
    let mut want = Vec::new();
    for m in ["prefork", "worker", "event"] {
        for s in ["h2c-page", "h2-tls-page", "h2c-idle-5"] {
            want.push((m, s));
        }
    }
    assert_eq!(got, want);
    for c in cells {
        if c["variant"] == "prefork" {
            let why = c["skipped"].as_str().unwrap_or_else(|| panic!("{c}"));
            assert!(
                why.starts_with("the server did not start: ")
                    && why.contains("--h2c on: prefork serves one stream at a time"),
                "{why}"
            );
            assert_eq!(
                (c["valid"].clone(), c["responses"].clone()),
                (false.into(), 0.into())
            );
            assert_eq!(c["errors"], 0, "{c}");
            continue;
        }
        assert_eq!(c["valid"], true, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert_eq!(c["unexpected"], 0, "{c}");
        assert!(c["threads"].as_f64().is_some_and(|t| t >= 1.0), "{c}");
        if c["scenario"] == "h2c-idle-5" {
            assert_eq!(c["responses"], 5, "{c}");
            assert_eq!(c["idle_sample_served"], "5/5", "{c}");
            assert!(c["pss_per_conn_kib"].as_f64().is_some(), "{c}");
        } else {
            assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        }
    }
    let findings = r["findings"].as_str().unwrap();
    assert!(
        findings.contains("10 connections × 10 streams: worker"),
        "{findings}"
    );
    assert!(findings.contains("event's req/s"), "{findings}");
    assert!(findings.contains("KiB each"), "{findings}");
    assert_eq!(
        findings.matches("prefork was not measured").count(),
        1,
        "{findings}"
    );
}

/// Issue 26's question: requests parked on a slow upstream (an origin
/// compare starts, answering after 10 s), each held to the end; prefork
/// grows a process for each, event's loop holds them with the threads it
/// had idle, and the words say so (not "a thread per waiting request" for
/// a pool larger than the requests).
#[test]
fn the_waiting_experiment_holds_requests_on_a_slow_upstream_and_says_what_each_costs() {
    let r = run_experiment(
        "compare-waiting",
        &[
            "--experiment",
            "waiting",
            "--mpm",
            "event,prefork",
            "--waiting",
            "20",
        ],
    );
    assert_eq!(labels(&r), ["event", "prefork"]);
    let cell = |v: &str| {
        r["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["variant"] == v)
            .unwrap()
            .clone()
    };
    let (event, prefork) = (cell("event"), cell("prefork"));
    assert_eq!(event["valid"], true, "{event}");
    assert_eq!(event["waiting_requests"].as_f64(), Some(20.0), "{event}");
    assert!(event["pss_per_waiting_kib"].as_f64().is_some(), "{event}");
    assert_eq!(
        event["threads"], event["baseline_threads"],
        "no thread added: {event}"
    );
    // Prefork forks as they wait (a busy machine may hold fewer by the
    // sample): a process apiece, and the master.
    let held = prefork["waiting_requests"].as_f64().unwrap_or(0.0);
    assert!(held >= 1.0, "{prefork}");
    assert!(
        prefork["processes"].as_f64().unwrap_or(0.0) > held,
        "a process apiece: {prefork}"
    );
    let findings = r["findings"].as_str().unwrap();
    assert!(
        findings.contains("(a process per waiting request)"),
        "{findings}"
    );
    assert!(
        !findings.contains("threads in 3 processes (a thread per waiting request)"),
        "{findings}"
    );
}

/// `--upstream-delay`: every model behind a proxy route to compare's own
/// origin; each cell answered through it, the requests waiting on the
/// upstream counted mid-run, and the shape said in words.
#[test]
fn an_upstream_delay_puts_every_model_behind_a_proxy_and_counts_the_requests_waiting() {
    let r = run_experiment(
        "compare-upstream",
        &[
            "--upstream-delay",
            "20ms",
            "--connections",
            "20",
            "--mpm",
            "event,worker",
            "--allocator",
            "system",
        ],
    );
    assert_eq!(labels(&r), ["event/system", "worker/system"]);
    for c in r["cells"].as_array().unwrap() {
        assert_eq!(c["scenario"], "upstream", "{c}");
        assert_eq!(c["valid"], true, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert!(c["responses"].as_u64() > Some(0), "{c}");
        assert!(c["waiting_requests"].as_f64() >= Some(1.0), "{c}");
        assert!(c["upstream_conns_per_1k"].as_f64().is_some(), "{c}");
    }
    let findings = r["findings"].as_str().unwrap();
    assert!(
        findings.contains("waiting on the upstream held"),
        "{findings}"
    );
}

/// The FreeBSD lists' `truss -c` question: the server's system calls a
/// request, by name, from `strace -c -f` attached for the run.
#[test]
fn the_syscalls_experiment_counts_a_requests_system_calls_by_name() {
    if !Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        tests::skip("strace is not installed (apt-get install strace)");
        return;
    }
    let r = run_experiment(
        "compare-syscalls",
        &[
            "--experiment",
            "syscalls",
            "--mpm",
            "event",
            "--allocator",
            "system",
            "--scenario",
            "keepalive",
        ],
    );
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1, "{r}");
    let c = &cells[0];
    assert_eq!(c["valid"], true, "{c}");
    assert!(c["syscalls_per_req"].as_f64() > Some(0.0), "{c}");
    let names: Vec<&str> = c["syscalls_by_name"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap())
        .collect();
    // A keep-alive request is received and answered: a receive and a send
    // among the calls counted, whichever the kernel's names for them.
    assert!(
        names
            .iter()
            .any(|n| ["recvfrom", "read", "recvmsg", "readv"].contains(n))
            && names
                .iter()
                .any(|n| ["sendto", "write", "writev", "sendmsg", "sendfile"].contains(n)),
        "{names:?}"
    );
    assert!(
        r["findings"]
            .as_str()
            .unwrap()
            .contains("system calls per request"),
        "{r}"
    );
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
        assert_eq!(c["unexpected"], 0, "{c}");
    }
}

#[test]
fn the_tls_experiment_measures_handshakes_and_idle_tls_connections() {
    // Longer than the others: fifty handshakes of a debug build take a while.
    let out_dir = TempDir::new("compare-tls");
    let run = run_mpm(
        &[
            "compare",
            "--experiment",
            "tls",
            "--mpm",
            "event",
            "--allocator",
            "system",
            "--scenario",
            "tls-keepalive,tls-full,tls-resumed,idle",
            "--idle",
            "20",
            "--duration",
            "1s",
            "--warmup",
            "500ms",
            "--repeat",
            "1",
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        Duration::from_secs(180),
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let r = report(&out_dir);
    let cells = r["cells"].as_array().unwrap();
    let names: Vec<&str> = cells
        .iter()
        .map(|c| c["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["tls-keepalive", "tls-full", "tls-resumed", "tls-idle-20"]
    );
    for c in cells {
        assert_eq!(c["valid"], true, "{c}");
    }
    for c in &cells[..3] {
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(c["errors"], 0, "{c}");
        assert_eq!(c["unexpected"], 0, "{c}");
    }
    assert_eq!(cells[3]["idle_sample_served"], "10/10", "{}", cells[3]);
    assert!(
        cells[3]["pss_per_conn_kib"].as_f64().is_some(),
        "{}",
        cells[3]
    );
}
