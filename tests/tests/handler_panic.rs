//! A handler that panics costs its own request a 500, nothing more: under
//! the threaded MPMs, driven as a library, every worker goes on to the next
//! connection. (The HTTP layer's own test, that the connection goes on to
//! its next request, is `mpm-http/tests/handler_panic.rs`.)

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
    let logged = mpm_core::error_log::expect("handler panicked on GET /boom/worker;");
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
    let logged = mpm_core::error_log::expect("handler panicked on GET /boom/event;");
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
