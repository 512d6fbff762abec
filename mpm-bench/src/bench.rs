//! `mpm bench`: an event-driven HTTP load generator (wrk's and ab's job),
//! also the engine `mpm compare` drives its scenarios with.
//!
//! * [`args`] — the command line, the URL, the request bytes.
//! * [`engine`] — the epoll client: connections as state machines.
//! * `response_parser` — responses read incrementally (head, then
//!   `Content-Length`, chunked or until-close bodies).
//! * [`summary`] — the HDR latency histogram, statuses, errors; text and JSON.
//! * [`tls`] — `https://`: the rustls client, `--cacert` or `--insecure`,
//!   handshake errors by kind.
//! * `h2` — `--h2`: HTTP/2, with prior knowledge on `http://` and by ALPN
//!   over TLS, several streams per connection (`--streams`), on `h2`'s
//!   client side without a runtime.

pub mod args;
pub mod engine;
pub(crate) mod h2;
pub(crate) mod response_parser;
pub mod summary;
pub mod tls;

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mpm_core::Error;

pub use args::BenchArgs;
pub use engine::{Limit, Load, Progress};
pub use summary::Summary;

/// `mpm bench`: run the load, show progress on a terminal, print the summary.
/// Fails at once (one line, exit 1) when no connection can be made at all;
/// exit code 1, with a warning, when no answer was a success (a status its
/// request expects: any 2xx by default): a run that measured only errors
/// ranks nothing.
pub fn command(args: &BenchArgs) -> Result<i32, Error> {
    let load = args.load()?;
    let _ = mpm_master::raise_fd_limit();
    let progress = Arc::new(Progress::default());
    // Ctrl-C ends the run early and still prints what was measured.
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&progress.stop));
    let summary = with_progress_bar(&load, &progress)?;
    if let Some(why) = progress.refused() {
        // A flag the server does not honour: exit 2, as a bad flag.
        return Err(Error::config(format!("{}: {why}", load.url)));
    }
    if let Some(why) = progress.never_connected() {
        return Err(Error::io(
            format!("{}: no connection to {} could be made", load.url, load.addr),
            std::io::Error::other(format!("{why}; is the server up?")),
        ));
    }
    if args.json {
        crate::output::out(format_args!("{}\n", summary.to_json()));
    } else {
        crate::output::out(summary.to_text());
    }
    // A success is what its request expects: any 2xx unless --expect or
    // the workload says otherwise.
    if summary.responses > 0 && summary.unexpected == summary.responses {
        let statuses: Vec<String> = summary
            .status
            .iter()
            .map(|(code, n)| format!("{n} × {code}"))
            .collect();
        eprintln!(
            "mpm: warning: no response was a success (what its request expects: any 2xx \
             unless --expect or the workload says): {}; check the URL",
            statuses.join(", ")
        );
        return Ok(1);
    }
    Ok(if summary.responses == 0 { 1 } else { 0 })
}

/// Run `load`, with an indicatif bar on stderr when it is a terminal.
pub fn with_progress_bar(load: &Load, progress: &Arc<Progress>) -> Result<Summary, Error> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let (len, template) = bar_layout(load.limit);
        let bar = indicatif::ProgressBar::new(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar
    });
    let watcher = bar.map(|bar| {
        let p = Arc::clone(progress);
        let limit = load.limit;
        let start = std::time::Instant::now();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d2 = Arc::clone(&done);
        let handle = std::thread::spawn(move || {
            while !d2.load(Ordering::Relaxed) {
                let finished = p.finished.load(Ordering::Relaxed);
                let (position, message) = bar_state(limit, start.elapsed(), finished);
                bar.set_position(position);
                bar.set_message(message);
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        (done, handle)
    });
    let result = engine::run(load, progress);
    if let Some((done, handle)) = watcher {
        done.store(true, Ordering::Relaxed);
        let _ = handle.join();
    }
    result.map_err(|e| Error::io("running the load", e))
}

/// The bar's length and template: its position and length are in one unit,
/// requests for `-n`, tenths of a second for `-d` (shown as seconds).
fn bar_layout(limit: Limit) -> (u64, &'static str) {
    match limit {
        Limit::Requests(n) => (n, "{bar:40} {pos}/{len} requests  {msg}"),
        Limit::Duration(d) => (tenths(d), "{bar:40} {msg}"),
    }
}

/// Where the bar stands after `elapsed` with `finished` requests done, and
/// what it says beside it.
fn bar_state(limit: Limit, elapsed: Duration, finished: u64) -> (u64, String) {
    let secs = elapsed.as_secs_f64();
    match limit {
        Limit::Requests(_) => (finished, format!("{secs:.1}s")),
        Limit::Duration(d) => (
            tenths(elapsed).min(tenths(d)),
            format!("{secs:.1}s/{:.1}s  {finished} requests", d.as_secs_f64()),
        ),
    }
}

fn tenths(d: Duration) -> u64 {
    u64::try_from(d.as_millis() / 100).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_bar_counts_in_one_unit() {
        // A duration: tenths of a second for position and length alike,
        // seconds in the text (it once said "3s/10000ms").
        let ten = Limit::Duration(Duration::from_secs(10));
        assert_eq!(bar_layout(ten).0, 100);
        assert_eq!(
            bar_state(ten, Duration::from_millis(3_040), 42),
            (30, "3.0s/10.0s  42 requests".to_string())
        );
        // A request count: requests.
        let n = Limit::Requests(500);
        assert_eq!(bar_layout(n), (500, "{bar:40} {pos}/{len} requests  {msg}"));
        assert_eq!(bar_state(n, Duration::from_millis(1_500), 120).0, 120);
    }
}
