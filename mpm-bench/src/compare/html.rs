//! The report as files: `report.json`, `report.md`, the SVG charts and an
//! `index.html` that shows the tables and the charts.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use mpm_core::Error;

use super::charts::{self, Bar, Point, Series};
use super::report::{Cell, Metrics, Report};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What a bar or a line shows for a cell that has no figure.
fn note(c: &Cell) -> Option<String> {
    if let Some(why) = &c.skipped {
        return Some(format!(
            "skipped: {}",
            why.chars().take(40).collect::<String>()
        ));
    }
    c.invalid.as_ref().map(|_| {
        let mut parts = Vec::new();
        if c.unexpected > 0 || c.errors == 0 {
            parts.push(format!("{} unexpected", c.unexpected));
        }
        if c.errors > 0 {
            parts.push(format!("{} failed", c.errors));
        }
        format!("invalid: {}", parts.join(", "))
    })
}

/// The charts for a report: file name, caption, SVG.
pub fn charts(report: &Report) -> Result<Vec<(String, String, String)>, Error> {
    let mut out = Vec::new();
    let fail = |e: String| Error::config(e);
    let loads: Vec<&(String, String)> = report
        .scenarios
        .iter()
        .filter(|(n, _)| !report.is_idle(n))
        .collect();
    let mut files: Vec<String> = Vec::new();
    for (name, title) in &loads {
        let bars: Vec<Bar> = report
            .scenario_cells(name)
            .map(|c| Bar {
                label: c.variant.clone(),
                value: c
                    .valid
                    .then(|| c.spread(|m| m.requests_per_s))
                    .flatten()
                    .map(|s| (s.median, s.min, s.max)),
                note: note(c),
            })
            .collect();
        if bars.is_empty() {
            continue;
        }
        let caption = format!("req/s: {title}");
        let mut file = format!("reqs-{}.svg", file_name(name));
        if files.contains(&file) {
            file = format!("reqs-{}-{}.svg", file_name(name), files.len());
        }
        files.push(file.clone());
        out.push((
            file,
            caption.clone(),
            charts::bars(&caption, "requests per second (median, min–max)", &bars).map_err(fail)?,
        ));
    }
    // Memory against connection count, one line per variant.
    let mut series: Vec<Series> = Vec::new();
    for c in report.cells.iter().filter(|c| c.idle_connections.is_some()) {
        let i = match series.iter().position(|s| s.name == c.variant) {
            Some(i) => i,
            None => {
                series.push(Series {
                    name: c.variant.clone(),
                    points: Vec::new(),
                    note: None,
                });
                series.len() - 1
            }
        };
        let s = &mut series[i];
        match (c.valid, c.spread(|m| m.pss_kib), c.idle_connections) {
            (true, Some(p), Some(n)) => s.points.push(Point {
                x: n as f64,
                y: p.median / 1024.0,
                lo: p.min / 1024.0,
                hi: p.max / 1024.0,
            }),
            _ => s.note = note(c).map(|n| format!("idle-{}: {n}", c.idle_connections.unwrap_or(0))),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    if !series.is_empty() {
        // The waiting experiment's connections each hold a request parked
        // on the upstream, not an idle keep-alive connection.
        let (held, short) = if report.experiment == "waiting" {
            ("requests waiting on the upstream", "waiting requests")
        } else {
            ("idle keep-alive connections", "idle connections")
        };
        out.push((
            "memory.svg".into(),
            format!("PSS of the server's process tree against {held}"),
            charts::lines(
                &format!("memory: PSS against {short}"),
                (held, "PSS MiB, whole tree (median, min–max)"),
                &series,
                None,
            )
            .map_err(fail)?,
        ));
    }
    // Latency percentiles of the first load scenario with a valid cell.
    let first = loads
        .iter()
        .find(|(n, _)| report.scenario_cells(n).any(|c| c.valid))
        .or(loads.first());
    if let Some((name, title)) = first {
        let series: Vec<Series> = report
            .scenario_cells(name)
            .map(|c| {
                let metrics: [fn(&Metrics) -> Option<f64>; 4] =
                    [|m| m.p50_us, |m| m.p90_us, |m| m.p99_us, |m| m.p99_9_us];
                let points = if c.valid {
                    metrics
                        .iter()
                        .enumerate()
                        .filter_map(|(i, f)| {
                            let s = c.spread(*f)?;
                            Some(Point {
                                x: i as f64,
                                y: s.median / 1000.0,
                                lo: s.min / 1000.0,
                                hi: s.max / 1000.0,
                            })
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                Series {
                    name: c.variant.clone(),
                    points,
                    note: note(c),
                }
            })
            .collect();
        if !series.is_empty() {
            let caption = format!("latency percentiles: {title}");
            out.push((
                "latency.svg".into(),
                caption.clone(),
                charts::lines(
                    &caption,
                    ("percentile", "latency ms (median, min–max)"),
                    &series,
                    Some(&["p50", "p90", "p99", "p99.9"]),
                )
                .map_err(fail)?,
            ));
        }
    }
    Ok(out)
}

fn file_name(scenario: &str) -> String {
    let mut out = String::with_capacity(scenario.len());
    for c in scenario.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// Write `report.json`, `report.md`, the charts and `index.html` into `dir`.
pub fn write_all(report: &Report, dir: &Path) -> Result<(), Error> {
    let io = |what: &str, e| Error::io(format!("writing {}", dir.join(what).display()), e);
    fs::create_dir_all(dir).map_err(|e| io("", e))?;
    fs::write(dir.join("report.json"), report.to_json()).map_err(|e| io("report.json", e))?;
    fs::write(dir.join("report.md"), report.to_markdown()).map_err(|e| io("report.md", e))?;
    let charts = charts(report)?;
    for (file, _, svg) in &charts {
        fs::write(dir.join(file), svg).map_err(|e| io(file, e))?;
    }
    fs::write(dir.join("index.html"), page(report, &charts)).map_err(|e| io("index.html", e))?;
    Ok(())
}

fn page(report: &Report, charts: &[(String, String, String)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>mpm compare: {name}</title><style>\
         body{{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}img{{max-width:100%;display:block;margin:1em 0}}\
         .invalid{{color:#b00}}.warning{{background:#fff3cd;padding:.5em}}\
         </style></head><body>\n<h1>mpm compare: {name}</h1>\n\
         <p><b>Question.</b> {q}</p>\n<p><b>Setup.</b> {s}</p>\n<p><b>Method.</b> {method}</p>\n\
         <p><b>Machine.</b> {machine}</p>\n",
        name = esc(&report.experiment),
        q = esc(&report.question),
        s = esc(&report.setup),
        method = esc(&report.method()),
        machine = esc(&report.machine.describe()),
    );
    for w in &report.warnings {
        let _ = writeln!(h, "<p class=\"warning\"><b>Warning.</b> {}</p>", esc(w));
    }
    let _ = writeln!(
        h,
        "<h2>What the numbers say</h2>\n<p>{}</p>",
        esc(&report.findings)
    );
    h.push_str("<h2>Charts</h2>\n");
    for (file, caption, _) in charts {
        let _ = writeln!(
            h,
            "<figure><img src=\"{f}\" alt=\"{c}\"><figcaption>{c}</figcaption></figure>",
            f = esc(file),
            c = esc(caption)
        );
    }
    h.push_str("<h2>Tables</h2>\n");
    for (name, title) in &report.scenarios {
        let cols = report.columns_for(report.is_idle(name));
        let _ = write!(
            h,
            "<h3>{} (<code>{}</code>)</h3>\n<table><tr><th>variant</th>",
            esc(title),
            esc(name)
        );
        for c in &cols {
            let _ = write!(h, "<th>{}</th>", esc(c.title()));
        }
        h.push_str("</tr>\n");
        for cell in report.scenario_cells(name) {
            let _ = write!(h, "<tr><td>{}</td>", esc(&cell.variant));
            match &cell.skipped {
                Some(why) => {
                    let _ = write!(
                        h,
                        "<td colspan=\"{}\">skipped: {}</td>",
                        cols.len(),
                        esc(why)
                    );
                }
                None => {
                    for c in &cols {
                        let v = c.value(cell);
                        if v.starts_with("INVALID") {
                            let _ = write!(h, "<td class=\"invalid\">{}</td>", esc(&v));
                        } else {
                            let _ = write!(h, "<td>{}</td>", esc(&v));
                        }
                    }
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>Which to choose</h2>\n<ul>\n");
    for r in &report.recommendations {
        let _ = writeln!(h, "<li>{}</li>", esc(r));
    }
    h.push_str("</ul>\n");
    h.push_str("<p>Also: <a href=\"report.json\">report.json</a>, <a href=\"report.md\">report.md</a>.</p>\n</body></html>\n");
    h
}
