//! A handler that panics costs its own request a 500, nothing more: the
//! connection goes on to the next request, and the worker to the next
//! connection.

#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_core::http::{HttpFactory, HttpHandler, Request, Response};
use mpm_core::{Config, Lifecycle, Listener, Mpm, Phase};

struct Fragile;

impl HttpHandler for Fragile {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path() == "/boom" {
            panic!("the handler fell over");
        }
        Response::new(200).body("fine")
    }
}

#[test]
fn a_panicking_handler_answers_500_and_the_connection_serves_on() {
    let (addr, server) = common::serve_one(Fragile);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\nGET /ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    server.join().unwrap();
    let first = out.find("HTTP/1.1 500").expect("no 500 for the panic");
    let second = out
        .find("HTTP/1.1 200")
        .expect("the next request was not served");
    assert!(first < second);
    assert!(out.ends_with("fine"));
}

/// Under the threaded MPMs, with two workers: fifty panics, each answered
/// 500, and every worker goes on serving (a thread that died would leave
/// the later requests unanswered). Prefork children run the same HTTP layer,
/// so a panic there costs the request, not the child.
fn panics_cost_only_their_request_under(mpm: &RunMpm) {
    let config = Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        max_request_workers: 2,
        threads_per_child: 2,
        ..Config::default()
    };
    let listeners = Listener::bind_all(&config.listen, config.backlog).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let slots = mpm_core::scoreboard::Scoreboard::create(1, 2)
        .unwrap()
        .process_slots(0);
    std::thread::scope(|scope| {
        scope.spawn(|| mpm(&config, listeners, &lifecycle, slots));
        assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
        for i in 0..50 {
            let path = if i % 2 == 0 { "/boom" } else { "/ok" };
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
type RunMpm = dyn Fn(&Config, Vec<Listener>, &Lifecycle, Slots) + Sync;

fn factory(config: &Config) -> HttpFactory<fn() -> Fragile> {
    HttpFactory::new(config, || Fragile)
}

#[test]
fn under_the_worker_mpm_panics_cost_only_their_request() {
    panics_cost_only_their_request_under(&|config, listeners, lifecycle, slots| {
        mpm_worker::Worker
            .run(config, listeners, factory(config), lifecycle, slots)
            .unwrap();
    });
}

#[test]
fn under_the_event_mpm_panics_cost_only_their_request() {
    panics_cost_only_their_request_under(&|config, listeners, lifecycle, slots| {
        mpm_event::Event
            .run(config, listeners, factory(config), lifecycle, slots)
            .unwrap();
    });
}
