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

pub mod args;
pub mod engine;
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
/// Exit code 1 when not a single request was answered.
pub fn command(args: &BenchArgs) -> Result<i32, Error> {
    let load = args.load()?;
    let _ = mpm_master::raise_fd_limit();
    let progress = Arc::new(Progress::default());
    // Ctrl-C ends the run early and still prints what was measured.
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&progress.stop));
    let summary = with_progress_bar(&load, &progress)?;
    if args.json {
        println!("{}", summary.to_json());
    } else {
        print!("{}", summary.to_text());
    }
    Ok(if summary.responses == 0 { 1 } else { 0 })
}

/// Run `load`, with an indicatif bar on stderr when it is a terminal.
pub fn with_progress_bar(load: &Load, progress: &Arc<Progress>) -> Result<Summary, Error> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let (len, template) = match load.limit {
            Limit::Requests(n) => (n, "{bar:40} {pos}/{len} requests  {per_sec}  {elapsed}"),
            Limit::Duration(d) => (
                d.as_millis() as u64,
                "{bar:40} {elapsed}/{len}ms  {msg} requests",
            ),
        };
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
                match limit {
                    Limit::Requests(_) => bar.set_position(finished),
                    Limit::Duration(_) => {
                        bar.set_position(start.elapsed().as_millis() as u64);
                        bar.set_message(finished.to_string());
                    }
                }
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
