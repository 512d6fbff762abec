//! A handler that panics costs its own request a 500, nothing more: the
//! connection goes on to the next request. (That the worker goes on to the
//! next connection, under each MPM, is `tests/tests/handler_panic.rs`.)

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_http::{HttpHandler, Request, Response};

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
    let logged = mpm_core::error_log::expect("handler panicked on GET /boom");
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
    assert_eq!(logged.count(), 1, "the panic is logged once");
}
