//! The lower trait alone carries a protocol that is not HTTP: the line-echo
//! example, served by the worker MPM in this process.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../../server/examples/line_protocol.rs"]
#[allow(dead_code)] // its own `main` runs it from the command line
mod line_echo;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_core::{Lifecycle, Listener, Mpm, MpmSettings, Phase};

#[test]
fn line_echo_answers_each_line_and_stops_cleanly() {
    let settings = MpmSettings {
        max_request_workers: 2,
        threads_per_child: 2,
        ..MpmSettings::default()
    };
    let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 64).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let server = {
        let lifecycle = lifecycle.clone();
        std::thread::spawn(move || {
            let slots = mpm_core::scoreboard::Scoreboard::create(1, 2)
                .unwrap()
                .process_slots(0);
            mpm_worker::Worker.run(
                &settings,
                listeners,
                || line_echo::LineEcho,
                &lifecycle,
                slots,
            )
        })
    };
    assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));

    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // A line split across writes is echoed once it is whole.
    s.write_all(b"hel").unwrap();
    s.write_all(b"lo\nsecond line\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "hello\n");
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "second line\n");

    // Stopping closes the idle connection instead of waiting out its timeout.
    lifecycle.stop();
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap(), 0);
    server.join().unwrap().unwrap();
    assert_eq!(lifecycle.phase(), Phase::Stopped);
}
