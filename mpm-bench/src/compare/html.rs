//! The report as files: `report.json`, `report.md`, the SVG charts and an
//! `index.html` that shows the tables and the charts.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use mpm_core::Error;

use super::charts;
use super::report::Report;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The charts for a report: file name, caption, SVG.
pub fn charts(report: &Report) -> Result<Vec<(String, String, String)>, Error> {
    let mut out = Vec::new();
    let fail = |e: String| Error::config(e);
    let loads: Vec<&(String, String)> = report
        .scenarios
        .iter()
        .filter(|(n, _)| !n.starts_with("idle-"))
        .collect();
    for (name, title) in &loads {
        let bars: Vec<(String, f64)> = report
            .scenario_cells(name)
            .filter_map(|c| Some((c.variant.clone(), c.requests_per_s?)))
            .collect();
        if bars.is_empty() {
            continue;
        }
        let caption = format!("req/s: {title}");
        out.push((
            format!("reqs-{name}.svg"),
            caption.clone(),
            charts::bars(&caption, "requests per second", &bars).map_err(fail)?,
        ));
    }
    // Memory against connection count, one line per variant.
    let idle: Vec<_> = report
        .cells
        .iter()
        .filter(|c| c.skipped.is_none())
        .filter_map(|c| {
            Some((
                c.variant.clone(),
                c.idle_connections? as f64,
                c.pss_kib? as f64 / 1024.0,
            ))
        })
        .collect();
    if !idle.is_empty() {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (v, x, y) in idle {
            match series.iter_mut().find(|s| s.0 == v) {
                Some(s) => s.1.push((x, y)),
                None => series.push((v, vec![(x, y)])),
            }
        }
        for s in &mut series {
            s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        out.push((
            "memory.svg".into(),
            "PSS of the server's process tree against idle keep-alive connections".into(),
            charts::lines(
                "memory: PSS against idle connections",
                ("idle keep-alive connections", "PSS MiB (whole tree)"),
                &series,
                None,
            )
            .map_err(fail)?,
        ));
    }
    // Latency percentiles of the first load scenario.
    if let Some((name, title)) = loads.first() {
        let series: Vec<(String, Vec<(f64, f64)>)> = report
            .scenario_cells(name)
            .filter_map(|c| {
                let ps = [c.p50_us?, c.p90_us?, c.p99_us?, c.p99_9_us?];
                Some((
                    c.variant.clone(),
                    ps.iter()
                        .enumerate()
                        .map(|(i, us)| (i as f64, *us as f64 / 1000.0))
                        .collect(),
                ))
            })
            .collect();
        if !series.is_empty() {
            let caption = format!("latency percentiles: {title}");
            out.push((
                "latency.svg".into(),
                caption.clone(),
                charts::lines(
                    &caption,
                    ("percentile", "latency ms"),
                    &series,
                    Some(&["p50", "p90", "p99", "p99.9"]),
                )
                .map_err(fail)?,
            ));
        }
    }
    Ok(out)
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
         </style></head><body>\n<h1>mpm compare: {name}</h1>\n\
         <p><b>Question.</b> {q}</p>\n<p><b>Setup.</b> {s}</p>\n<p><code>{cmd}</code> on {cpus} CPUs, \
         {d:.1} s per timed run.</p>\n<h2>What the numbers say</h2>\n<p>{f}</p>\n",
        name = esc(&report.experiment),
        q = esc(&report.question),
        s = esc(&report.setup),
        cmd = esc(&report.command),
        cpus = report.cpus,
        d = report.duration_s,
        f = esc(&report.findings),
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
        let cols = report.columns_for(name.starts_with("idle-"));
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
                        let _ = write!(h, "<td>{}</td>", esc(&c.value(cell)));
                    }
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    h.push_str("<p>Also: <a href=\"report.json\">report.json</a>, <a href=\"report.md\">report.md</a>.</p>\n</body></html>\n");
    h
}
