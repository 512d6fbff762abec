//! The lower trait alone carries a protocol that is not HTTP: the line-echo
//! example, served by the worker MPM in this process.

#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../examples/line_protocol.rs"]
mod line_echo;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_core::{Config, Lifecycle, Listener, Mpm, Phase};

#[test]
fn line_echo_answers_each_line_and_stops_cleanly() {
    let config = Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        max_request_workers: 2,
        threads_per_child: 2,
        ..Config::default()
    };
    let listeners = Listener::bind_all(&config.listen, config.backlog).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let server = {
        let (config, lifecycle) = (config.clone(), lifecycle.clone());
        std::thread::spawn(move || {
            let slots = mpm_core::scoreboard::Scoreboard::create(1, 2)
                .unwrap()
                .process_slots(0);
            mpm_worker::Worker.run(
                &config,
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
