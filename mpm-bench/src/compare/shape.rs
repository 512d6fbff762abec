//! What a waiting request holds, said in words: from the threads and
//! processes of a server's tree measured while requests waited on the
//! upstream, never from the model's name. A model that parks a waiting
//! request on its loop holds fewer threads than it has waiting requests;
//! one that gives each a thread (httpd's worker and event under mod_proxy)
//! or a process (prefork) holds at least one apiece, and its ceiling is
//! then threads (or processes) / the upstream's delay.

use std::time::Duration;

use super::report::{Cell, Column, Report};

/// The columns of a proxied load (`--upstream-delay`).
pub const UPSTREAM_COLUMNS: &[Column] = &[
    Column::ReqPerS,
    Column::P50,
    Column::P99,
    Column::CpuUsPerReq,
    Column::Waiting,
    Column::WaitingFootprint,
    Column::KibPerWaiting,
    Column::ThreadsPerWaiting,
    Column::UpstreamConnsPer1k,
];

/// A server's tree sampled while requests waited on the upstream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held {
    /// Requests waiting on the upstream then.
    pub waiting: f64,
    /// Threads in the tree.
    pub threads: f64,
    /// Processes in the tree.
    pub processes: f64,
    /// Clients with a request in flight, if a load (each may be waiting on
    /// the upstream, or queued in the server for a thread or a process).
    pub clients: Option<f64>,
}

/// Share of a unit's count the waiting requests must reach for a saturated
/// server (clients queued beyond them) to be read as holding one apiece:
/// all its threads busy, a few of them the master's and the loops'.
const BUSY: f64 = 0.8;

/// `12,345`.
pub fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 thread`, `3 threads`, `2 processes`.
fn plural(n: f64, one: &str) -> String {
    if n.round() == 1.0 {
        format!("1 {one}")
    } else if one.ends_with('s') {
        format!("{} {one}es", thousands(n))
    } else {
        format!("{} {one}s", thousands(n))
    }
}

/// The shape of `label`'s server holding `h`, in one sentence; `delay` is
/// the upstream's, for the ceiling of a server that holds a thread or a
/// process per waiting request.
pub fn sentence(label: &str, h: &Held, delay: Duration) -> String {
    let (w, t, p) = (h.waiting.round(), h.threads.round(), h.processes.round());
    if w < 1.0 {
        return format!(
            "{label}: no request was waiting on the upstream when the server was sampled: \
             nothing to tell its shape from."
        );
    }
    let held = format!(
        "{label}: {} waiting on the upstream held {} in {}",
        plural(w, "request"),
        plural(t, "thread"),
        plural(p, "process")
    );
    if t < w {
        return if t * 4.0 <= w {
            format!("{held} (no thread per waiting request).")
        } else {
            format!(
                "{held}: fewer threads than waiting requests, so not a thread per waiting request."
            )
        };
    }
    // At least a thread (or a process) per waiting request: one apiece, or
    // a pool larger than the requests? Clients queued beyond the waiting
    // requests (a tenth of them or more: a few are always between two
    // requests), with every unit busy, say one apiece.
    let (unit, units, count) = if p >= w {
        ("process", "processes", p)
    } else {
        ("thread", "threads", t)
    };
    let queued = h.clients.map_or(0.0, |c| (c - w).max(0.0));
    let saturated = h.clients.is_some_and(|c| queued >= 0.1 * c) && w >= BUSY * count;
    if saturated {
        let ceiling = if delay.is_zero() {
            String::new()
        } else {
            format!(
                "; its ceiling is {units} / delay = {} / {} ms = {} req/s",
                thousands(count),
                delay.as_millis(),
                thousands(count / delay.as_secs_f64())
            )
        };
        let whose = if unit == "process" {
            "prefork's shape, httpd's too"
        } else {
            "httpd's shape"
        };
        return format!(
            "{held}, while {} more {} waited for one: 1 {unit} per waiting request \
             ({whose}){ceiling}.",
            thousands(queued),
            if queued.round() == 1.0 {
                "client"
            } else {
                "clients"
            }
        );
    }
    match h.clients {
        Some(_) if queued > 0.0 && w < BUSY * count => format!(
            "{held}, while {} more {} not at the upstream (queued in the server, for the CPU, \
             or between requests) with most of its {units} free: these counts cannot tell a \
             {unit} per waiting request from a pool larger than the requests waiting.",
            thousands(queued),
            if queued.round() == 1.0 {
                "client's request was"
            } else {
                "clients' requests were"
            }
        ),
        Some(_) => format!(
            "{held}: at least one {unit} per waiting request, but with nearly every client's \
             request at the upstream these counts cannot tell a {unit} per request from a pool \
             larger than the load (more --connections than {} would).",
            thousands(count)
        ),
        None => format!("{held}: at least one {unit} per waiting request."),
    }
}

/// The cell's tree while its requests waited, if measured.
pub fn held(c: &Cell) -> Option<Held> {
    let m = &c.median;
    Some(Held {
        waiting: m.waiting_requests?,
        threads: m.threads?,
        processes: m.processes?,
        clients: m.clients,
    })
}

/// A proxied load's findings: for each valid cell, its shape in words, its
/// KiB per waiting request, and the upstream connections it opened.
pub fn load_findings(report: &Report, delay: Duration) -> String {
    let mut out = Vec::new();
    for c in report.cells.iter().filter(|c| c.valid) {
        let Some(h) = held(c) else { continue };
        let mut s = sentence(&c.variant, &h, delay);
        let m = &c.median;
        let mut figures = Vec::new();
        if let Some(k) = m.pss_per_waiting_kib.filter(|_| h.waiting >= 1.0) {
            figures.push(format!("{k:.1} KiB of PSS per waiting request"));
        }
        if let Some(u) = m.upstream_conns_per_1k {
            figures.push(format!(
                "{u:.1} upstream connections opened per 1,000 requests"
            ));
        }
        if !figures.is_empty() {
            s.pop();
            s.push_str(&format!("; {}.", figures.join(", ")));
        }
        out.push(s);
    }
    if out.is_empty() {
        "No valid cell sampled requests waiting on the upstream.".into()
    } else {
        out.join(" ")
    }
}

/// One count of the waiting experiment for one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Requests sent.
    pub asked: usize,
    /// What the tree held with those that reached the origin.
    pub held: Held,
    /// PSS they added, per waiting request, KiB.
    pub kib: Option<f64>,
    /// PSS of the tree before them (sized for `asked`), KiB.
    pub idle_kib: Option<f64>,
    /// Threads of the tree before them, if measured.
    pub idle_threads: Option<f64>,
    /// Processes of the tree before them, if measured.
    pub idle_processes: Option<f64>,
}

/// Idle PSS growth per request a server was sized for, below which the
/// sizing is said to cost nothing (KiB): noise between two servers.
const SIZING_NOISE_KIB: f64 = 1.0;

fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The waiting experiment's sentence for one model over its counts
/// (sorted by requests sent): what it held, whether it could hold them
/// all, and what each waiting request cost.
pub fn series_sentence(label: &str, points: &[Point]) -> String {
    let reached: Vec<&Point> = points.iter().filter(|p| p.held.waiting >= 1.0).collect();
    let Some(last) = reached.last() else {
        return format!("{label}: no request reached the upstream at any count.");
    };
    let counts: Vec<String> = reached.iter().map(|p| thousands(p.held.waiting)).collect();
    let threads: Vec<String> = reached.iter().map(|p| thousands(p.held.threads)).collect();
    let procs: Vec<String> = reached
        .iter()
        .map(|p| thousands(p.held.processes))
        .collect();
    // The same count at every step is said once: "in 3 processes".
    let counts_of = |v: &[String], one: f64, unit: &str| {
        if v.windows(2).all(|w| w[0] == w[1]) {
            plural(one, unit)
        } else {
            format!(
                "{} {unit}{}",
                list(v),
                if unit.ends_with('s') { "es" } else { "s" }
            )
        }
    };
    let (w, t, pr) = (last.held.waiting, last.held.threads, last.held.processes);
    // As many threads as requests or more: one apiece only if the tree
    // grew for them (from idle, or with the counts it was sized for); a
    // pool made at start and larger than the requests (the event loop's
    // workers, at a count under them) says nothing either way.
    let grew_from_idle =
        last.idle_threads.is_none_or(|i| t > i) || last.idle_processes.is_some_and(|i| pr > i);
    let grew_with_counts = reached.len() >= 2 && t > reached[0].held.threads;
    let shape = if t * 4.0 <= w {
        "no thread per waiting request"
    } else if t < w {
        "fewer threads than waiting requests"
    } else if !grew_from_idle && !grew_with_counts {
        "threads made at start, more than the requests waiting: these counts cannot tell a \
         thread per waiting request from a pool larger than them"
    } else if pr >= w {
        "a process per waiting request"
    } else {
        "a thread per waiting request"
    };
    let mut s = format!(
        "{label}: {} waiting requests held {} in {} ({shape})",
        list(&counts),
        counts_of(&threads, t, "thread"),
        counts_of(&procs, pr, "process"),
    );
    let kib: Vec<String> = reached
        .iter()
        .filter_map(|p| p.kib.map(|k| format!("{k:.1}")))
        .collect();
    if kib.len() == reached.len() {
        s.push_str(&format!(
            ", {} KiB of PSS added per waiting request",
            list(&kib)
        ));
    }
    let short: Vec<String> = points
        .iter()
        .filter(|p| p.held.waiting < 0.99 * p.asked as f64)
        .map(|p| {
            format!(
                "{} (it reached {})",
                thousands(p.asked as f64),
                thousands(p.held.waiting)
            )
        })
        .collect();
    // A server sized for more requests that is bigger before any arrives
    // (threads made at start) pays for them up front, beside what the
    // waiting requests add.
    let sized: Vec<(usize, f64)> = points
        .iter()
        .filter_map(|p| Some((p.asked, p.idle_kib?)))
        .collect();
    if let (Some(&(n0, k0)), Some(&(n1, k1))) = (sized.first(), sized.last()) {
        let per = (k1 - k0) / (n1 as f64 - n0 as f64).max(1.0);
        if n1 > n0 && per >= SIZING_NOISE_KIB {
            s.push_str(&format!(
                "; sized for them, it was {per:.1} KiB bigger idle per request it was sized for \
                 (from {} to {})",
                thousands(n0 as f64),
                thousands(n1 as f64)
            ));
        }
    }
    if !short.is_empty() {
        s.push_str(&format!("; it could not hold {}", list(&short)));
    }
    s.push('.');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(waiting: f64, threads: f64, processes: f64, clients: Option<f64>) -> Held {
        Held {
            waiting,
            threads,
            processes,
            clients,
        }
    }

    const DELAY: Duration = Duration::from_millis(20);

    #[test]
    fn a_loop_that_parks_waiting_requests_holds_no_thread_for_them() {
        let s = sentence("event", &held(1000.0, 3.0, 3.0, Some(1000.0)), DELAY);
        assert_eq!(
            s,
            "event: 1,000 requests waiting on the upstream held 3 threads in 3 processes (no \
             thread per waiting request)."
        );
        // A pool smaller than the requests, but not by much.
        let s = sentence("x", &held(100.0, 70.0, 3.0, Some(100.0)), DELAY);
        assert!(
            s.ends_with(
                "fewer threads than waiting requests, so not a thread per waiting request."
            ),
            "{s}"
        );
    }

    #[test]
    fn threads_all_busy_with_clients_queued_are_a_thread_per_waiting_request() {
        let s = sentence("worker", &held(256.0, 259.0, 2.0, Some(1000.0)), DELAY);
        assert_eq!(
            s,
            "worker: 256 requests waiting on the upstream held 259 threads in 2 processes, \
             while 744 more clients waited for one: 1 thread per waiting request (httpd's \
             shape); its ceiling is threads / delay = 259 / 20 ms = 12,950 req/s."
        );
    }

    #[test]
    fn processes_all_busy_are_a_process_per_waiting_request() {
        let s = sentence("prefork", &held(255.0, 257.0, 257.0, Some(1000.0)), DELAY);
        assert!(
            s.contains("held 257 threads in 257 processes, while 745 more clients")
                && s.contains("1 process per waiting request (prefork's shape, httpd's too)")
                && s.contains("processes / delay = 257 / 20 ms = 12,850 req/s"),
            "{s}"
        );
    }

    #[test]
    fn a_pool_larger_than_the_load_is_not_called_a_thread_per_request() {
        // Every client at the upstream, more threads than clients: a pool
        // or a thread apiece, the counts cannot say.
        let s = sentence("event", &held(50.0, 70.0, 3.0, Some(50.0)), DELAY);
        assert!(
            s.contains("cannot tell a thread per request from a pool"),
            "{s}"
        );
        assert!(s.contains("more --connections than 70"), "{s}");
        // Clients queued, but most threads free: not saturated either
        // (a server short of CPU, not of threads).
        let s = sentence("event", &held(39.0, 204.0, 1.0, Some(300.0)), DELAY);
        assert!(
            s.contains("while 261 more clients' requests were not at the upstream")
                && s.contains("with most of its threads free: these counts cannot tell"),
            "{s}"
        );
    }

    #[test]
    fn nothing_waiting_is_said_so() {
        let s = sentence("event", &held(0.0, 3.0, 3.0, Some(10.0)), DELAY);
        assert!(s.contains("no request was waiting"), "{s}");
    }

    #[test]
    fn numbers_have_thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1234567.4), "1,234,567");
    }

    fn point(asked: usize, waiting: f64, threads: f64, processes: f64, kib: f64) -> Point {
        Point {
            asked,
            held: held(waiting, threads, processes, None),
            kib: Some(kib),
            idle_kib: Some(10_000.0),
            idle_threads: None,
            idle_processes: None,
        }
    }

    /// A pool made at start and larger than the requests is not read as a
    /// thread apiece (event's 67 threads holding 20 waiting requests once
    /// were); a tree that grew for them is.
    #[test]
    fn a_pool_larger_than_the_requests_it_held_is_not_a_thread_apiece() {
        let idle = |p: Point, threads: f64, processes: f64| Point {
            idle_threads: Some(threads),
            idle_processes: Some(processes),
            ..p
        };
        let event = [idle(point(20, 20.0, 67.0, 3.0, 16.0), 67.0, 3.0)];
        let s = series_sentence("event", &event);
        assert!(
            s.contains("cannot tell a thread per waiting request"),
            "{s}"
        );
        assert!(!s.contains("(a thread per waiting request)"), "{s}");
        let prefork = [idle(point(20, 20.0, 24.0, 24.0, 129.0), 9.0, 9.0)];
        let s = series_sentence("prefork", &prefork);
        assert!(s.contains("(a process per waiting request)"), "{s}");
        // Threads made at start for each count (worker sized N + 64): the
        // tree grows with the counts.
        let worker = [
            idle(point(100, 100.0, 166.0, 2.0, 40.0), 166.0, 2.0),
            idle(point(1000, 1000.0, 1066.0, 2.0, 38.0), 1066.0, 2.0),
        ];
        let s = series_sentence("worker", &worker);
        assert!(s.contains("(a thread per waiting request)"), "{s}");
    }

    #[test]
    fn the_waiting_series_says_the_shape_and_what_could_not_be_held() {
        let event = [
            point(100, 100.0, 70.0, 3.0, 12.0),
            point(1000, 1000.0, 70.0, 3.0, 5.5),
            point(10000, 10000.0, 71.0, 3.0, 4.25),
        ];
        assert_eq!(
            series_sentence("event", &event),
            "event: 100, 1,000 and 10,000 waiting requests held 70, 70 and 71 threads in 3 \
             processes (no thread per waiting request), 12.0, 5.5 and 4.2 KiB of PSS added per \
             waiting request."
        );
        let prefork = [
            point(100, 100.0, 102.0, 102.0, 300.0),
            point(1000, 256.0, 258.0, 258.0, 310.0),
        ];
        let s = series_sentence("prefork", &prefork);
        assert!(
            s.contains("(a process per waiting request)")
                && s.ends_with("it could not hold 1,000 (it reached 256)."),
            "{s}"
        );
        let worker = [point(100, 100.0, 166.0, 2.0, 40.0)];
        assert!(series_sentence("worker", &worker).contains("(a thread per waiting request)"));
        // Threads made at start: the idle tree grows with the sizing.
        let worker = [
            Point {
                idle_kib: Some(10_000.0),
                ..point(100, 100.0, 166.0, 2.0, 40.0)
            },
            Point {
                idle_kib: Some(19_000.0),
                ..point(1000, 1000.0, 1066.0, 2.0, 38.0)
            },
        ];
        let s = series_sentence("worker", &worker);
        assert!(
            s.contains(
                "it was 10.0 KiB bigger idle per request it was sized for (from 100 to 1,000)"
            ),
            "{s}"
        );
        assert!(!series_sentence("event", &event).contains("bigger idle"));
        assert!(series_sentence("none", &[point(5, 0.0, 3.0, 1.0, 0.0)]).contains("no request"));
    }
}
