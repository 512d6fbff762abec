//! Shared by the HTTP-layer tests: serve one connection with the blocking
//! driver, in a thread, without an MPM.

#![allow(clippy::unwrap_used, dead_code)]

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mpm_core::blocking::{drive_like_a_loop, serve_blocking, NoPark, Timeouts};
use mpm_core::{ConnectionHandler, Interest, Stream};
use mpm_http::{HttpHandler, HttpService, HttpSettings};

/// Listen on an ephemeral port and serve the first connection with
/// `handler` under the default settings; the address and the serving thread.
pub(crate) fn serve_one<H: HttpHandler + Send + 'static>(
    handler: H,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (sock, peer) = listener.accept().unwrap();
        let stream = Stream::new(sock, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
        let timeouts = Timeouts {
            request: Duration::from_secs(5),
            keepalive: Duration::from_secs(5),
            linger: Duration::from_millis(100),
            first_request: Duration::from_secs(5),
            inherited: false,
        };
        serve_blocking(
            &mut HttpService::new(handler, &HttpSettings::default()),
            stream,
            &timeouts,
            &mut NoPark,
        );
    });
    (addr, server)
}

/// Which driver serves a test's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// `serve_blocking`, as a prefork child or a worker thread.
    Blocking,
    /// A non-blocking socket driven as the event loop drives it: every
    /// wake through `prefetch`, which says whether the step runs on the
    /// loop or on a worker; `Interest::Await` waited on with `block_until`.
    Loop,
}

pub(crate) const DRIVERS: [Driver; 2] = [Driver::Blocking, Driver::Loop];

/// Listen on an ephemeral port and serve the first connection with the
/// service `make` builds, by `driver`; the address, and the serving thread,
/// which returns every interest the steps returned (the loop driver's; the
/// blocking driver's are not seen).
pub(crate) fn serve_by<S, F>(driver: Driver, make: F) -> (SocketAddr, JoinHandle<Vec<Interest>>)
where
    S: ConnectionHandler,
    F: FnOnce() -> S + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let mut service = make();
        let (sock, peer) = listener.accept().unwrap();
        let draining = Arc::new(AtomicBool::new(false));
        match driver {
            Driver::Blocking => {
                let stream = Stream::new(sock, peer, true, draining).unwrap();
                let timeouts = Timeouts {
                    request: Duration::from_secs(10),
                    keepalive: Duration::from_secs(10),
                    linger: Duration::from_millis(100),
                    first_request: Duration::from_secs(10),
                    inherited: false,
                };
                serve_blocking(&mut service, stream, &timeouts, &mut NoPark);
                Vec::new()
            }
            Driver::Loop => {
                let stream = Stream::new(sock, peer, false, draining).unwrap();
                drive_like_a_loop(&mut service, stream, Duration::from_secs(10))
            }
        }
    });
    (addr, server)
}

/// Serve `handler` under the default settings by `driver`.
pub(crate) fn serve_http<H: HttpHandler + Send + 'static>(
    driver: Driver,
    handler: H,
) -> (SocketAddr, JoinHandle<Vec<Interest>>) {
    serve_by(driver, move || {
        HttpService::new(handler, &HttpSettings::default())
    })
}

/// Read one response from `c`: its head, and its body as its framing
/// says (Content-Length, chunked, or to the close).
pub(crate) fn read_response(c: &mut impl Read) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut byte).unwrap() == 0 {
            panic!(
                "the connection closed mid-head: {:?}",
                String::from_utf8_lossy(&head)
            );
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let field = |name: &str| {
        head.lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            })
            .map(|(_, v)| v.trim().to_string())
    };
    let status: u16 = head[9..12].parse().unwrap();
    let mut body = Vec::new();
    if status == 101 || status == 204 || status == 304 {
        return (head, body);
    }
    if let Some(n) = field("content-length") {
        let n: usize = n.parse().unwrap();
        body.resize(n, 0);
        c.read_exact(&mut body).unwrap();
    } else if field("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                assert_eq!(c.read(&mut byte).unwrap(), 1, "cut in a chunk's size line");
                line.push(byte[0]);
            }
            let size =
                usize::from_str_radix(std::str::from_utf8(&line[..line.len() - 2]).unwrap(), 16)
                    .unwrap();
            let at = body.len();
            body.resize(at + size + 2, 0);
            c.read_exact(&mut body[at..]).unwrap();
            body.truncate(at + size);
            if size == 0 {
                break;
            }
        }
    } else {
        c.read_to_end(&mut body).unwrap();
    }
    (head, body)
}
