//! `Response::later`: an answer that waits on another server (here a
//! timer, or a socket the test writes to) without blocking the step, under
//! the blocking driver (the thread waits in poll) and the loop driver (the
//! connection is parked with the wait, resumed through `prefetch`).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{read_response, serve_http, Driver, DRIVERS};
use mpm_core::waiting::{block_until, ready, sleep, Await};
use mpm_core::{ConnectionHandler, Interest, Stream, Wait};
use mpm_http::{HttpHandler, HttpService, HttpSettings, Request, Response};

/// Answers `/later` after 50 ms, `/boom` with a future that panics, and
/// everything else at once.
struct Sleepy;

impl HttpHandler for Sleepy {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        let path = req.path().to_string();
        match req.path() {
            "/later" => Response::later(async move {
                sleep(Duration::from_millis(50)).await;
                Response::new(200)
                    .header("Content-Type", "text/plain")
                    .body(format!("slept for {path}"))
            }),
            "/boom" => Response::later(async {
                sleep(Duration::from_millis(1)).await;
                panic!("the answer fell over")
            }),
            _ => Response::new(200).body(format!("at once for {path}")),
        }
    }

    // The handler itself returns at once: under event, the loop runs it.
    fn answers_without_blocking(&self, _: &Request<'_>) -> bool {
        true
    }
}

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

#[test]
fn a_later_answer_that_sleeps_is_sent_when_the_sleep_is_over() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Sleepy);
        let mut c = connect(addr);
        let began = Instant::now();
        c.write_all(b"GET /later HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (head, body) = read_response(&mut c);
        assert!(
            head.starts_with("HTTP/1.1 200 OK\r\n"),
            "{driver:?}: {head}"
        );
        assert!(head.contains("Content-Length: 16\r\n"), "{head}");
        assert!(head.contains("Connection: close\r\n"), "{head}");
        assert_eq!(body, b"slept for /later");
        assert!(began.elapsed() >= Duration::from_millis(50), "{driver:?}");
        let seen = server.join().unwrap();
        if driver == Driver::Loop {
            assert!(
                seen.iter()
                    .any(|i| matches!(i, Interest::Await(a) if a.fd.is_none())),
                "the sleep was a wait on a timer, not a blocked step: {seen:?}"
            );
        }
    }
}

#[test]
fn keep_alive_goes_on_after_a_later_answer_and_pipelined_requests_keep_their_order() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Sleepy);
        let mut c = connect(addr);
        // Three at once: the second waits behind the first's later answer.
        c.write_all(
            b"GET /now1 HTTP/1.1\r\nHost: a\r\n\r\n\
              GET /later HTTP/1.1\r\nHost: a\r\n\r\n\
              GET /now2 HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .unwrap();
        for expected in ["at once for /now1", "slept for /later", "at once for /now2"] {
            let (head, body) = read_response(&mut c);
            assert!(
                head.starts_with("HTTP/1.1 200 OK\r\n"),
                "{driver:?}: {head}"
            );
            assert!(!head.contains("Connection: close"), "{head}");
            assert_eq!(String::from_utf8(body).unwrap(), expected, "{driver:?}");
        }
        // And the connection still serves, a later answer again.
        c.write_all(b"GET /later HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (head, body) = read_response(&mut c);
        assert!(head.contains("Connection: close\r\n"), "{head}");
        assert_eq!(body, b"slept for /later");
        drop(c);
        server.join().unwrap();
    }
}

#[test]
fn head_on_a_later_answer_has_its_length_and_no_body() {
    for driver in DRIVERS {
        let (addr, server) = serve_http(driver, Sleepy);
        let mut c = connect(addr);
        c.write_all(b"HEAD /later HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut all = Vec::new();
        c.read_to_end(&mut all).unwrap();
        let all = String::from_utf8(all).unwrap();
        assert!(all.starts_with("HTTP/1.1 200 OK\r\n"), "{driver:?}: {all}");
        assert!(all.contains("Content-Length: 16\r\n"), "{all}");
        assert!(all.ends_with("\r\n\r\n"), "no body after the head: {all:?}");
        server.join().unwrap();
    }
}

#[test]
fn a_panic_in_a_later_answer_costs_that_request_a_500_and_the_connection_serves_on() {
    for driver in DRIVERS {
        let logged = mpm_core::error_log::expect("the later answer to GET /boom panicked");
        let (addr, server) = serve_http(driver, Sleepy);
        let mut c = connect(addr);
        c.write_all(
            b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\nGET /ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let (head, _) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 500 "), "{driver:?}: {head}");
        let (head, body) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert_eq!(body, b"at once for /ok");
        server.join().unwrap();
        assert_eq!(logged.count(), 1, "{driver:?}: the panic is one line");
    }
}

/// Answers with what arrives on its end of a socket pair (the "upstream").
struct Relay {
    upstream: Option<UnixStream>,
}

impl HttpHandler for Relay {
    fn handle(&mut self, _: &Request<'_>) -> Response {
        let Some(mut upstream) = self.upstream.take() else {
            return Response::error(503);
        };
        Response::later(async move {
            let fd = upstream.as_raw_fd();
            let until = Instant::now() + Duration::from_secs(10);
            let mut got = [0u8; 64];
            loop {
                match upstream.read(&mut got) {
                    Ok(n) => {
                        return Response::new(200).body(got[..n].to_vec()).upstream(
                            "unix:relay",
                            Some(200),
                            Duration::from_millis(20),
                        );
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if ready(Await::readable(fd, until)).await.is_err() {
                            return Response::error(504);
                        }
                    }
                    Err(_) => return Response::error(502),
                }
            }
        })
    }

    fn answers_without_blocking(&self, _: &Request<'_>) -> bool {
        true
    }
}

#[test]
fn a_later_answer_waiting_on_a_socket_returns_await_on_it_and_answers_once_bytes_come() {
    let (mut upstream_end, ours) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let fd = ours.as_raw_fd();
    let mut svc = HttpService::new(
        Relay {
            upstream: Some(ours),
        },
        &HttpSettings::default(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = connect(listener.local_addr().unwrap());
    let (sock, peer) = listener.accept().unwrap();
    // Non-blocking, as on the event loop: nothing in the step may block.
    let mut stream = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
    let mut conn = svc.connected(&stream);
    client
        .write_all(b"GET /relay HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(mpm_core::blocking::input_arrives_within(
        &stream,
        Duration::from_secs(10)
    ));
    let Interest::Await(wait) = svc.readable(&mut conn, &mut stream) else {
        panic!("the step did not wait on the upstream");
    };
    assert_eq!((wait.fd, wait.read), (Some(fd), true));
    // Nothing came: a spurious resume waits again, on the same socket.
    let again = svc.readable(&mut conn, &mut stream);
    assert!(
        matches!(again, Interest::Await(a) if a.fd == Some(fd)),
        "{again:?}"
    );
    upstream_end.write_all(b"from upstream").unwrap();
    assert!(block_until(&wait, Some(stream.as_raw_fd())));
    assert_eq!(
        svc.readable(&mut conn, &mut stream),
        Interest::Read(Wait::KeepAlive)
    );
    let (head, body) = read_response(&mut client);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(body, b"from upstream");
}

#[test]
fn the_access_log_has_the_later_answers_status_and_its_upstream() {
    use mpm_http::access_log::{AccessLog, LogWrite};
    use mpm_http::log_format::LogFormat;
    use mpm_http::HttpFactory;

    let path = std::env::temp_dir().join(format!("mpm-later-log-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let log = AccessLog::open_path(&path, LogFormat::Upstream, LogWrite::Copy, 0, true).unwrap();
    for driver in DRIVERS {
        let (mut upstream_end, ours) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let ours = parking_lot::Mutex::new(Some(ours));
        let factory = HttpFactory::new(HttpSettings::default(), move || Relay {
            upstream: ours.lock().take(),
        })
        .access_log(Some(Arc::clone(&log)));
        let (addr, server) = common::serve_by(driver, move || {
            use mpm_core::HandlerFactory;
            factory.build()
        });
        let mut c = connect(addr);
        c.write_all(b"GET /relay HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        upstream_end.write_all(b"relayed").unwrap();
        let (_, body) = read_response(&mut c);
        assert_eq!(body, b"relayed");
        server.join().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let line = text.lines().last().unwrap();
        assert!(
            line.ends_with("\"GET /relay HTTP/1.1\" 200 7 \"-\" \"-\" \"unix:relay\" 200 0.020"),
            "{driver:?}: {line}"
        );
    }
    let _ = std::fs::remove_file(&path);
}
