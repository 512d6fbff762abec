//! The loop's rule, as the HTTP layer keeps it: a step that runs on an event
//! loop sends at most `sendfile_max_chunk` of a body and yields, never sends
//! a body that is not in the page cache, and never runs a pipelined request
//! that may block. Driven step by step on a non-blocking socket, as the
//! event MPM drives it, with nothing timed.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mpm_core::blocking::input_arrives_within;
use mpm_core::{ConnectionHandler, Interest, Stream, Wait};
use mpm_http::{HttpHandler, HttpService, HttpSettings, Request, Response};
use mpm_site::StaticFiles;

/// A connected pair: the client, and the server's side as the event MPM
/// holds it (non-blocking), with room for 4 MiB unsent.
fn pair() -> (TcpStream, Stream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (sock, peer) = listener.accept().unwrap();
    nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::SndBuf, &(4 << 20)).unwrap();
    let stream = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
    (client, stream)
}

/// Send `request` and wait until the server's side has it.
fn ask(client: &mut TcpStream, server: &Stream, request: &[u8]) {
    client.write_all(request).unwrap();
    assert!(input_arrives_within(server, Duration::from_secs(10)));
}

/// Everything the server's last step sent: over loopback, a send has
/// reached the peer's queue by the time it returns.
fn drain(client: &mut TcpStream) -> Vec<u8> {
    client.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    client.set_nonblocking(false).unwrap();
    got
}

/// Wait until the socket can take more bytes.
fn wait_writable(stream: &Stream) {
    use nix::poll::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(stream.socket().as_fd(), PollFlags::POLLOUT)];
    assert_eq!(poll(&mut fds, 10_000u16).unwrap(), 1);
}

fn head_len(bytes: &[u8]) -> usize {
    bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4
}

struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A docroot holding `big.bin` (2 MiB).
fn docroot(name: &str) -> (Root, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!("mpm-loop-rule-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body: Vec<u8> = (0..2u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), &body).unwrap();
    (Root(dir), body)
}

const BUDGET: u64 = 128 * 1024;

fn service(root: &Root) -> HttpService<StaticFiles> {
    let settings = HttpSettings {
        sendfile_max_chunk: BUDGET,
        ..HttpSettings::default()
    };
    HttpService::new(StaticFiles::new(&root.0).unwrap(), &settings)
}

/// Open (and cache) the file off the loop, as a worker would, with a HEAD.
fn warm(
    svc: &mut HttpService<StaticFiles>,
    conn: &mut mpm_http::HttpConn,
    client: &mut TcpStream,
    stream: &mut Stream,
) {
    ask(client, stream, b"HEAD /big.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    stream.set_on_event_loop(false);
    assert_eq!(svc.readable(conn, stream), Interest::Read(Wait::KeepAlive));
    let head = drain(client);
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
}

#[test]
fn on_the_loop_a_file_body_goes_out_one_budget_per_turn() {
    for sendfile in [true, false] {
        let (root, body) = docroot(if sendfile { "sendfile" } else { "copy" });
        let mut svc = HttpService::new(
            StaticFiles::new(&root.0).unwrap(),
            &HttpSettings {
                sendfile,
                sendfile_max_chunk: BUDGET,
                ..HttpSettings::default()
            },
        );
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        warm(&mut svc, &mut conn, &mut client, &mut stream);
        ask(
            &mut client,
            &stream,
            b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n",
        );
        stream.set_on_event_loop(true);
        let mut received = Vec::new();
        let mut turns = 0;
        loop {
            let next = svc.readable(&mut conn, &mut stream);
            let got = drain(&mut client);
            let body_part = if received.is_empty() {
                got.len() - head_len(&got)
            } else {
                got.len()
            };
            received.extend(got);
            turns += 1;
            if next == Interest::Read(Wait::KeepAlive) {
                assert!(body_part as u64 <= BUDGET);
                break;
            }
            // Each turn sends one budget of the body, then yields the loop.
            assert_eq!(next, Interest::Yield, "sendfile {sendfile}, turn {turns}");
            assert_eq!(
                body_part as u64, BUDGET,
                "sendfile {sendfile}, turn {turns}"
            );
        }
        assert_eq!(turns, body.len() / BUDGET as usize, "sendfile {sendfile}");
        assert!(received[head_len(&received)..] == body[..]);
    }
}

#[test]
fn off_the_loop_a_file_body_is_sent_without_yielding() {
    let (root, body) = docroot("worker");
    let mut svc = service(&root);
    let (mut client, mut stream) = pair();
    let mut conn = svc.connected(&stream);
    warm(&mut svc, &mut conn, &mut client, &mut stream);
    ask(
        &mut client,
        &stream,
        b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    stream.set_on_event_loop(false);
    // A reader drains while the worker writes: it writes until done.
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        while all.len() < body.len() + 100 {
            let n = client.read(&mut buf).unwrap();
            all.extend_from_slice(&buf[..n]);
            if n == 0 || all.ends_with(&body[body.len() - 16..]) {
                break;
            }
        }
        (all, body)
    });
    let mut next = svc.readable(&mut conn, &mut stream);
    while next == Interest::Write {
        wait_writable(&stream);
        next = svc.writable(&mut conn, &mut stream);
    }
    assert_eq!(next, Interest::Read(Wait::KeepAlive));
    let (all, body) = reader.join().unwrap();
    assert!(all[head_len(&all)..] == body[..]);
}

#[test]
fn on_the_loop_a_body_not_in_the_page_cache_is_left_to_a_worker() {
    let (root, body) = docroot("cold");
    let mut svc = service(&root);
    let (mut client, mut stream) = pair();
    let mut conn = svc.connected(&stream);
    warm(&mut svc, &mut conn, &mut client, &mut stream);
    // Drop the file's pages from the page cache.
    let file = std::fs::File::open(root.0.join("big.bin")).unwrap();
    file.sync_all().unwrap();
    mpm_sys::page_cache::drop_cached(&file, 0, 0).unwrap();
    ask(
        &mut client,
        &stream,
        b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    stream.set_on_event_loop(true);
    let next = svc.readable(&mut conn, &mut stream);
    if svc.writes_without_blocking(&conn) {
        eprintln!("skipped: this file system kept the file's pages");
        return;
    }
    // The head is queued (corked, MSG_MORE, for the body); the body waits
    // for a worker: nothing of it went out on the loop.
    assert_eq!(next, Interest::Yield);
    let got = drain(&mut client);
    assert!(
        got.windows(4)
            .position(|w| w == b"\r\n\r\n")
            .is_none_or(|i| i + 4 == got.len()),
        "body bytes were sent on the loop"
    );
    stream.set_on_event_loop(false);
    let mut all = got;
    let mut next = svc.readable(&mut conn, &mut stream);
    loop {
        all.extend(drain(&mut client));
        if next != Interest::Write {
            break;
        }
        wait_writable(&stream);
        next = svc.writable(&mut conn, &mut stream);
    }
    assert_eq!(next, Interest::Read(Wait::KeepAlive));
    assert!(all[head_len(&all)..] == body[..]);
}

/// `/fast` can be answered on the loop; `/slow` may block, and counts its calls.
struct FastSlow {
    slow_calls: Arc<AtomicUsize>,
}

impl HttpHandler for FastSlow {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path() == "/slow" {
            self.slow_calls.fetch_add(1, Ordering::SeqCst);
        }
        Response::new(200).body(req.path().to_string())
    }

    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        req.path() == "/fast"
    }
}

#[test]
fn on_the_loop_every_pipelined_request_is_asked_whether_it_may_block() {
    let slow_calls = Arc::new(AtomicUsize::new(0));
    let mut svc = HttpService::new(
        FastSlow {
            slow_calls: Arc::clone(&slow_calls),
        },
        &HttpSettings::default(),
    );
    let (mut client, mut stream) = pair();
    let mut conn = svc.connected(&stream);
    ask(
        &mut client,
        &stream,
        b"GET /fast HTTP/1.1\r\nHost: t\r\n\r\nGET /fast HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /slow HTTP/1.1\r\nHost: t\r\n\r\nGET /fast HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    stream.set_on_event_loop(true);
    // The loop answers the two fast ones (in one write) and stops before
    // the slow one, which it leaves, unread, to a worker.
    assert_eq!(svc.readable(&mut conn, &mut stream), Interest::Yield);
    assert_eq!(slow_calls.load(Ordering::SeqCst), 0);
    let first = String::from_utf8(drain(&mut client)).unwrap();
    assert_eq!(first.matches("HTTP/1.1 200").count(), 2, "{first}");
    // A worker takes the rest, in order.
    stream.set_on_event_loop(false);
    assert_eq!(
        svc.readable(&mut conn, &mut stream),
        Interest::Read(Wait::KeepAlive)
    );
    assert_eq!(slow_calls.load(Ordering::SeqCst), 1);
    let rest = String::from_utf8(drain(&mut client)).unwrap();
    let slow = rest.find("\r\n\r\n/slow").unwrap();
    let fast = rest.rfind("\r\n\r\n/fast").unwrap();
    assert!(slow < fast, "{rest}");
}
