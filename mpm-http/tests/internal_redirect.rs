//! Internal redirects (`Response::set_internal_redirect`, what an
//! upstream's `X-Accel-Redirect` becomes): the layer answers the target's
//! request instead, under the blocking driver and the loop driver, from an
//! answer made at once or a later one; on a loop, a target that may block
//! goes to a worker; a body that broke a limit is refused whatever its
//! answer redirects to.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{read_response, serve_by, serve_http, Driver, DRIVERS};
use mpm_core::Interest;
use mpm_http::{HttpHandler, HttpService, HttpSettings, InternalRedirect, Request, Response};

/// `/now` and `/later` redirect to `/target` (or `/slow`, which may block)
/// keeping the client's `Range`; `/up` reads its body from its future and
/// redirects; the targets say whether their request is internal.
struct Site;

impl HttpHandler for Site {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        let redirecting = |to: &str| {
            let mut r = Response::new(200)
                .header("Set-Cookie", "first=1")
                .header("X-First", "dropped")
                .body("the first answer's body");
            let mut redirect = InternalRedirect::new(to);
            if let Some(range) = req.header("range") {
                redirect = redirect.field(b"Range", range);
            }
            r.set_internal_redirect(redirect);
            r
        };
        match req.path() {
            "/now" => redirecting("/target?q=1"),
            "/now-slow" => redirecting("/slow"),
            "/later" => {
                let r = redirecting("/target?q=2");
                Response::later(async move { r })
            }
            // Redirects at once, reading none of its body.
            "/early" => {
                let _unread = req.awaited_body();
                let r = redirecting("/target");
                Response::later(async move { r })
            }
            "/up" => {
                let mut body = req.awaited_body().unwrap();
                Response::later(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = body.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                    let mut r = Response::new(200);
                    r.set_internal_redirect(InternalRedirect::new("/target"));
                    r
                })
            }
            "/target" | "/slow" => Response::new(200).body(format!(
                "{} {} internal={} range={:?}",
                req.path(),
                req.query().unwrap_or(""),
                req.is_internal(),
                req.header_str("range")
            )),
            _ => Response::error(404),
        }
    }

    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        req.path() != "/slow"
    }

    fn awaits_body(&self, req: &Request<'_>) -> bool {
        req.path() == "/up" || req.path() == "/early"
    }
}

fn get(c: &mut TcpStream, path: &str, fields: &str) -> (String, String) {
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{fields}\r\n").as_bytes())
        .unwrap();
    let (head, body) = read_response(c);
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn a_redirect_is_answered_with_its_targets_answer_and_the_first_answers_cookie() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Site);
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for (path, query) in [("/now", "q=1"), ("/later", "q=2")] {
            let (head, body) = get(&mut c, path, "Range: bytes=0-1\r\n");
            assert!(
                head.starts_with("HTTP/1.1 200"),
                "{driver:?} {path}: {head}"
            );
            assert_eq!(
                body,
                format!("/target {query} internal=true range=Some(\"bytes=0-1\")"),
                "{driver:?} {path}"
            );
            assert!(head.contains("Set-Cookie: first=1\r\n"), "{head}");
            assert!(!head.contains("X-First"), "{head}");
        }
        // The connection went on after both; a client's own request to
        // the target is not internal.
        let (_, body) = get(&mut c, "/target", "");
        assert_eq!(body, "/target  internal=false range=None");
        drop(c);
        server.join().unwrap();
    }
}

#[test]
fn on_a_loop_a_redirect_whose_target_may_block_is_answered_by_a_worker() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Site);
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (head, body) = get(&mut c, "/now-slow", "");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, "/slow  internal=true range=None");
        drop(c);
        let interests = server.join().unwrap();
        if driver == Driver::Loop {
            assert!(
                interests.contains(&Interest::Yield),
                "handed to a worker: {interests:?}"
            );
        }
    }
}

/// A body still coming when its answer redirects is not the new request's:
/// none of it is read as a request, and the connection closes after the
/// answer (its `100 Continue` went out when the handler took the body). (The loop driver: a body read
/// by the answer's future, which is what can answer before it came.)
#[test]
fn a_body_still_coming_when_its_answer_redirects_is_not_read_and_the_connection_closes() {
    use std::io::Read;
    let (addr, server) = serve_http(Driver::Loop, Site);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Body bytes that look like a request: never answered as one.
    c.write_all(
        b"POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n\
          GET /target HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut all = Vec::new();
    let _ = c.read_to_end(&mut all);
    let all = String::from_utf8_lossy(&all);
    assert_eq!(all.matches("HTTP/1.1 200").count(), 1, "{all}");
    assert!(all.contains("Connection: close\r\n"), "{all}");
    assert!(
        all.ends_with("\r\n\r\n/target  internal=true range=None"),
        "{all}"
    );
    drop(c);
    assert_eq!(server.join().unwrap().last(), Some(&Interest::Linger));
}

#[test]
fn an_upload_past_the_limit_is_refused_whatever_its_answer_redirects_to() {
    for driver in DRIVERS {
        let (addr, server) = serve_by(driver, || {
            let s = HttpSettings {
                limit_request_body: 10,
                ..HttpSettings::default()
            };
            HttpService::new(Site, &s)
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let chunk = "x".repeat(100);
        c.write_all(
            format!(
                "POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
                chunk.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let (head, _) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 413"), "{driver:?}: {head}");
        drop(c);
        let _ = server.join();
    }
}
