//! However a pipelined stream of requests is split into reads, the HTTP layer
//! answers the same requests, in order.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mpm_http::{HttpHandler, Request, Response};
use proptest::prelude::*;

/// Answers with what it understood of the request.
struct Echo;

impl HttpHandler for Echo {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        Response::new(200).body(format!(
            "{} {} [{}]",
            req.method(),
            req.path(),
            String::from_utf8_lossy(req.body())
        ))
    }
}

const STREAM: &[u8] = b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n\
POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello\
POST /three HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n\
HEAD /four HTTP/1.1\r\nHost: a\r\n\r\n\
GET /five HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";

/// Serve one connection, feeding it `STREAM` cut at `cuts`; return all it sent back.
fn exchange(cuts: &[usize]) -> String {
    let (addr, server) = common::serve_one(Echo);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&STREAM.len())) {
        let cut = cut.clamp(at, STREAM.len());
        c.write_all(&STREAM[at..cut]).unwrap();
        at = cut;
        // Give the server a chance to read this piece alone.
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    server.join().unwrap();
    String::from_utf8(out).unwrap()
}

/// The bodies of the responses in `raw`, in order (Date differs between runs).
fn bodies(raw: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = raw;
    while let Some(i) = rest.find("HTTP/1.1 ") {
        rest = &rest[i..];
        let head_end = rest.find("\r\n\r\n").unwrap() + 4;
        let head = &rest[..head_end];
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The fourth request is HEAD: its Content-Length describes a body not sent.
        let take = if found.len() == 3 { 0 } else { len };
        found.push(rest[head_end..head_end + take].to_string());
        rest = &rest[head_end + take..];
    }
    found
}

#[test]
fn a_pipelined_stream_in_one_write_is_answered_in_order() {
    let got = bodies(&exchange(&[]));
    assert_eq!(
        got,
        [
            "GET /one []",
            "POST /two [hello]",
            "POST /three [abcde]",
            "",
            "GET /five []"
        ]
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn any_split_of_a_pipelined_stream_gives_the_same_responses(
        mut cuts in proptest::collection::vec(0..STREAM.len(), 0..8)
    ) {
        cuts.sort_unstable();
        let got = bodies(&exchange(&cuts));
        prop_assert_eq!(
            got,
            vec!["GET /one []", "POST /two [hello]", "POST /three [abcde]", "", "GET /five []"]
        );
    }
}
