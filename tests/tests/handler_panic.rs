//! A handler that panics costs its own request a 500, nothing more: under
//! the threaded MPMs, driven as a library, every worker goes on to the next
//! connection. (The HTTP layer's own test, that the connection goes on to
//! its next request, is `mpm-http/tests/handler_panic.rs`.)

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_core::{Lifecycle, Listener, Mpm, MpmSettings, Phase};
use mpm_http::{HttpFactory, HttpHandler, HttpSettings, Request, Response};

struct Fragile;

impl HttpHandler for Fragile {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path().starts_with("/boom") {
            panic!("the handler fell over");
        }
        Response::new(200).body("fine")
    }
}

/// Under the threaded MPMs, with two workers: fifty panics, each answered
/// 500, and every worker goes on serving (a thread that died would leave
/// the later requests unanswered). Prefork children run the same HTTP layer,
/// so a panic there costs the request, not the child.
fn panics_cost_only_their_request_under(mpm: &RunMpm, boom: &str) {
    let settings = MpmSettings {
        max_request_workers: 2,
        threads_per_child: 2,
        ..MpmSettings::default()
    };
    let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 64).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let slots = mpm_core::scoreboard::Scoreboard::create(1, 2)
        .unwrap()
        .process_slots(0);
    std::thread::scope(|scope| {
        scope.spawn(|| mpm(&settings, listeners, &lifecycle, slots));
        assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
        for i in 0..50 {
            let path = if i % 2 == 0 { boom } else { "/ok" };
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(
                c,
                "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            let want = if i % 2 == 0 {
                "HTTP/1.1 500"
            } else {
                "HTTP/1.1 200"
            };
            assert!(out.starts_with(want), "request {i} for {path}: {out}");
        }
        lifecycle.stop();
    });
}

type Slots = &'static [mpm_core::scoreboard::Slot];
/// Runs one MPM until its lifecycle stops.
type RunMpm = dyn Fn(&MpmSettings, Vec<Listener>, &Lifecycle, Slots) + Sync;

fn factory() -> HttpFactory<fn() -> Fragile> {
    HttpFactory::new(HttpSettings::default(), || Fragile)
}

#[test]
fn under_the_worker_mpm_panics_cost_only_their_request() {
    let logged = mpm_core::error_log::expect("handler panicked on GET /boom/worker:");
    panics_cost_only_their_request_under(
        &|settings, listeners, lifecycle, slots| {
            mpm_worker::Worker
                .run(settings, listeners, factory(), lifecycle, slots)
                .unwrap();
        },
        "/boom/worker",
    );
    assert_eq!(logged.count(), 25, "each panic logged once");
}

#[test]
fn under_the_event_mpm_panics_cost_only_their_request() {
    let logged = mpm_core::error_log::expect("handler panicked on GET /boom/event:");
    let stopped = mpm_core::error_log::expect("accepted 50 connections;");
    panics_cost_only_their_request_under(
        &|settings, listeners, lifecycle, slots| {
            mpm_event::Event
                .run(settings, listeners, factory(), lifecycle, slots)
                .unwrap();
        },
        "/boom/event",
    );
    assert_eq!(logged.count(), 25, "each panic logged once");
    // A stopping event process says what its loop did.
    assert_eq!(stopped.count(), 1, "{:?}", stopped.lines());
}

/// A line protocol whose steps panic on request: `panic` in `readable`
/// (on a worker, or on the event loop with `inline`), `loop-panic` in the
/// event loop's `prefetch`. Anything else is answered `ok`.
struct Touchy;

#[derive(Default)]
struct Lines {
    data: Vec<u8>,
}

fn read_some(c: &mut Lines, s: &mut mpm_core::Stream) -> Option<usize> {
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(n) => {
            c.data.extend_from_slice(&buf[..n]);
            Some(n)
        }
        Err(_) => None,
    }
}

impl mpm_core::ConnectionHandler for Touchy {
    type Conn = Lines;

    fn connected(&mut self, _: &mpm_core::Stream) -> Lines {
        Lines::default()
    }

    fn prefetch(&mut self, c: &mut Lines, s: &mut mpm_core::Stream) -> mpm_core::Prefetch {
        use mpm_core::{Interest, Prefetch, Wait};
        if read_some(c, s) == Some(0) {
            return Prefetch::Wait(Interest::Close);
        }
        let text = String::from_utf8_lossy(&c.data).into_owned();
        if text.contains("loop-panic") {
            panic!("prefetch fell over on the loop: {}", text.trim());
        }
        match text.contains('\n') {
            true if text.contains("inline") => Prefetch::ReadyInline,
            true => Prefetch::Ready,
            false => Prefetch::Wait(Interest::Read(Wait::Request)),
        }
    }

    fn readable(&mut self, c: &mut Lines, s: &mut mpm_core::Stream) -> mpm_core::Interest {
        use mpm_core::{Interest, Wait};
        if !c.data.contains(&b'\n') && read_some(c, s).is_none_or(|n| n == 0) {
            return if s.take_would_block() && !s.is_blocking() {
                Interest::Read(Wait::Request)
            } else {
                Interest::Close
            };
        }
        let text = String::from_utf8_lossy(&c.data);
        if text.contains("panic") {
            panic!("readable fell over: {}", text.trim());
        }
        if c.data.contains(&b'\n') {
            c.data.clear();
            if s.write_all(b"ok\n").is_err() {
                return Interest::Close;
            }
        }
        Interest::Read(Wait::KeepAlive)
    }

    fn writable(&mut self, _: &mut Lines, _: &mut mpm_core::Stream) -> mpm_core::Interest {
        mpm_core::Interest::Close
    }
}

fn run_protocol(
    mpm: &str,
    settings: &MpmSettings,
    listeners: Vec<Listener>,
    lifecycle: &Lifecycle,
    slots: Slots,
) {
    match mpm {
        "prefork" => mpm_prefork::Prefork::new(mpm_prefork::AcceptMutex::Pthread)
            .unwrap()
            .run(settings, listeners, || Touchy, lifecycle, slots),
        "worker" => mpm_worker::Worker.run(settings, listeners, || Touchy, lifecycle, slots),
        "event" => mpm_event::Event.run(settings, listeners, || Touchy, lifecycle, slots),
        "uring" => mpm_uring::Uring.run(settings, listeners, || Touchy, lifecycle, slots),
        other => panic!("no MPM {other}"),
    }
    .unwrap();
}

/// Send `line` on a new connection and return what comes back before the
/// server closes it (or 3 bytes, for an `ok`).
fn say(addr: std::net::SocketAddr, line: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(line.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.ends_with(b"ok\n") {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{line:?}: {e}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// More panics in `ConnectionHandler` steps than there are workers, on
/// workers and (event) on the loop: each closes its own connection, and the
/// server goes on accepting and serving.
fn more_step_panics_than_workers_leave_the_server_serving(mpm: &str) {
    let settings = MpmSettings {
        max_request_workers: 2,
        threads_per_child: 2,
        async_request_worker_factor: 2,
        ..MpmSettings::default()
    };
    let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 64).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let slots = mpm_core::scoreboard::Scoreboard::create(1, 3)
        .unwrap()
        .process_slots(0);
    // Each line names the MPM, and so does its panic's log line: the
    // variants run at once in this process, each keeping its own lines.
    let mut panics = vec![format!("panic {mpm}\n"); 6];
    if matches!(mpm, "event" | "uring") {
        panics.extend(vec![format!("loop-panic {mpm}\n"); 3]);
        panics.extend(vec![format!("inline panic {mpm}\n"); 3]);
    }
    let pattern: &'static str = format!(" {mpm}' at tests/tests/handler_panic.rs").leak();
    let logged = mpm_core::error_log::expect(pattern);
    // A stopping event process says what its loop did: 2 connections a
    // panic (its own and the next hello), then the 4 clients.
    let told: &'static str = format!("accepted {} connections;", 2 * panics.len() + 4).leak();
    let told = mpm_core::error_log::expect(told);
    std::thread::scope(|scope| {
        scope.spawn(|| run_protocol(mpm, &settings, listeners, &lifecycle, slots));
        assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
        for line in &panics {
            assert_eq!(say(addr, line), "", "{mpm}: {line:?} was answered");
            assert_eq!(say(addr, "hello\n"), "ok\n", "{mpm}: after {line:?}");
        }
        // Still as many at once as the connection cap allows.
        let clients: Vec<_> = (0..4)
            .map(|_| scope.spawn(move || say(addr, "inline hello\n")))
            .collect();
        for c in clients {
            assert_eq!(c.join().unwrap(), "ok\n", "{mpm}");
        }
        lifecycle.stop();
    });
    // Prefork's children log (and keep the lines) in their own memory.
    if mpm != "prefork" {
        assert_eq!(logged.count(), panics.len(), "{mpm}: one line per panic");
    }
    drop(told);
}

tests::mpm_suite!(more_step_panics_than_workers_leave_the_server_serving);

/// Run by `each_panic_is_one_error_log_line_without_a_backtrace` in a child
/// process of this test binary (it does nothing otherwise): three request
/// handler panics and three step panics under worker and under event.
#[test]
fn child_of_the_panic_log_test() {
    if std::env::var_os("MPM_PANIC_LOG_CHILD").is_none() {
        return;
    }
    for mpm in ["worker", "event"] {
        // Request handlers that panic: each answered 500.
        let settings = MpmSettings {
            max_request_workers: 2,
            threads_per_child: 2,
            ..MpmSettings::default()
        };
        let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 64).unwrap();
        let addr = listeners[0].local_addr();
        let lifecycle = Lifecycle::new().unwrap();
        let slots = mpm_core::scoreboard::Scoreboard::create(1, 3)
            .unwrap()
            .process_slots(0);
        std::thread::scope(|scope| {
            scope.spawn(|| match mpm {
                "worker" => {
                    mpm_worker::Worker.run(&settings, listeners, factory(), &lifecycle, slots)
                }
                _ => mpm_event::Event.run(&settings, listeners, factory(), &lifecycle, slots),
            });
            assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
            for _ in 0..3 {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                c.write_all(b"GET /boom HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut out = String::new();
                c.read_to_string(&mut out).unwrap();
                assert!(out.starts_with("HTTP/1.1 500"), "{out}");
            }
            lifecycle.stop();
        });
        // Steps that panic: each closes its connection.
        let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 64).unwrap();
        let addr = listeners[0].local_addr();
        let lifecycle = Lifecycle::new().unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| run_protocol(mpm, &settings, listeners, &lifecycle, slots));
            assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
            for _ in 0..3 {
                assert_eq!(say(addr, "panic\n"), "");
            }
            lifecycle.stop();
        });
    }
}

#[test]
fn each_panic_is_one_error_log_line_without_a_backtrace() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_of_the_panic_log_test", "--nocapture"])
        .env("MPM_PANIC_LOG_CHILD", "1")
        // Asked for: the default hook would print one per panic.
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed:\n{stderr}");
    let panic_lines: Vec<&str> = stderr.lines().filter(|l| l.contains("panicked")).collect();
    // 2 MPMs × (3 request handlers + 3 steps).
    assert_eq!(panic_lines.len(), 12, "{stderr}");
    for line in &panic_lines {
        assert!(line.contains("[error]") && line.contains(" at "), "{line}");
    }
    assert!(!stderr.contains("stack backtrace"), "{stderr}");
    assert!(
        !stderr.contains("thread '"),
        "the default hook printed:\n{stderr}"
    );
}
