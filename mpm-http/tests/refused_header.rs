//! A handler that sets a field the layer refuses (a value that would split
//! the head, a name that is not a token, a field of the layer's) gets a 500
//! for that request, with one error-log line naming the field, in debug
//! and release builds alike; nothing it meant for the response is sent, and
//! the connection goes on to the next request.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_http::{HttpHandler, Request, Response};

struct Careless;

impl HttpHandler for Careless {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path() == "/split" {
            // What a value taken from a client without try_header does.
            return Response::new(200)
                .header("X-Name", "evil\r\nSet-Cookie: x=1")
                .body("meant for the 200");
        }
        Response::new(200).body("fine")
    }
}

#[test]
fn a_refused_field_answers_500_logged_and_the_connection_serves_on() {
    let logged = mpm_core::error_log::expect("the value of header `X-Name`");
    let (addr, server) = common::serve_one(Careless);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(
        b"GET /split HTTP/1.1\r\nHost: a\r\n\r\nGET /ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    server.join().unwrap();
    let first = out
        .find("HTTP/1.1 500")
        .expect("no 500 for the refused field");
    let second = out
        .find("HTTP/1.1 200")
        .expect("the next request was not served");
    assert!(first < second);
    assert!(!out.contains("Set-Cookie"), "{out}");
    assert!(!out.contains("meant for the 200"), "{out}");
    assert!(out.ends_with("fine"));
    assert_eq!(logged.count(), 1, "the refusal is logged once");
}
