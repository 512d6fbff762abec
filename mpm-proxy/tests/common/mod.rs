//! Shared by the proxy's tests: the proxy served with the blocking driver
//! (as a prefork child or a worker thread serves), and small std-thread
//! origins that answer as a test says and record what they were sent.

#![allow(clippy::unwrap_used, dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mpm_core::blocking::{serve_blocking, NoPark, Timeouts};
use mpm_core::{Interest, Stream};
use mpm_http::{HttpService, HttpSettings};
use mpm_proxy::{PoolSettings, ProxyRoute, ProxyState, ReverseProxy, RouteTable, Slots};

/// Serve `proxy` on an ephemeral port as one worker does (a prefork
/// child): one handler, its connections one after another.
pub(crate) fn serve(proxy: ReverseProxy) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut service = HttpService::new(proxy.worker(), &HttpSettings::default());
        let timeouts = Timeouts {
            request: Duration::from_secs(10),
            keepalive: Duration::from_millis(300),
            linger: Duration::from_millis(100),
            first_request: Duration::from_secs(10),
            inherited: false,
        };
        for sock in listener.incoming() {
            let Ok(sock) = sock else { return };
            let peer = sock.peer_addr().unwrap();
            let stream = Stream::new(sock, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
            serve_blocking(&mut service, stream, &timeouts, &mut NoPark);
        }
    });
    addr
}

/// Serve one connection to `proxy` as the event loop drives it (every wake
/// through `prefetch`; an `Interest::Await` waited on with `poll`, no
/// worker); the address, and the serving thread, which returns every
/// interest the steps returned.
pub(crate) fn serve_on_a_loop(
    proxy: ReverseProxy,
) -> (SocketAddr, std::thread::JoinHandle<Vec<Interest>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let mut h = HttpService::new(proxy.worker(), &HttpSettings::default());
        let (sock, peer) = listener.accept().unwrap();
        let s = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
        mpm_core::blocking::drive_like_a_loop(&mut h, s, Duration::from_secs(10))
    });
    (addr, server)
}

/// A pattern of the error log's lines that names `what`, for one test's
/// `expect` (a pattern two tests share would take each other's lines).
pub(crate) fn naming(what: impl std::fmt::Display) -> &'static str {
    Box::leak(what.to_string().into_boxed_str())
}

/// A proxy of `routes` with shared state of its own (tests run side by side).
pub(crate) fn proxy_of(routes: Vec<ProxyRoute>) -> ReverseProxy {
    let table = RouteTable::new(routes);
    let state = ProxyState::with_slots(&table, &Slots::new(16).unwrap()).unwrap();
    ReverseProxy::with_state(table, state, PoolSettings::default()).unwrap()
}

/// A proxy of routes in the flag form.
pub(crate) fn proxy(flags: &[&str]) -> ReverseProxy {
    proxy_of(
        flags
            .iter()
            .map(|f| ProxyRoute::from_flag(f).unwrap())
            .collect(),
    )
}

/// What an origin saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Connections accepted.
    pub(crate) connections: AtomicUsize,
    /// Every request head (and body), as received.
    pub(crate) requests: Mutex<Vec<Vec<u8>>>,
}

/// An origin on an ephemeral port: each request's head (and its body, by
/// Content-Length) read, then `answer(request)` written; connections kept
/// alive unless the answer says `Connection: close` or is `None` (close
/// without answering).
pub(crate) fn origin<F>(answer: F) -> (SocketAddr, Arc<Seen>)
where
    F: Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
{
    origin_on(TcpListener::bind("127.0.0.1:0").unwrap(), answer)
}

/// [`origin`] on a listener of the test's.
pub(crate) fn origin_on<F>(listener: TcpListener, answer: F) -> (SocketAddr, Arc<Seen>)
where
    F: Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
{
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let answer = Arc::new(answer);
    let s = seen.clone();
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { return };
            s.connections.fetch_add(1, Ordering::SeqCst);
            let (s, answer) = (s.clone(), answer.clone());
            std::thread::spawn(move || loop {
                let Some(request) = read_request(&mut sock) else {
                    return;
                };
                s.requests.lock().unwrap().push(request.clone());
                match answer(&request) {
                    Some(bytes) => {
                        if sock.write_all(&bytes).is_err() {
                            return;
                        }
                        if contains(&bytes, b"Connection: close") {
                            return;
                        }
                    }
                    None => return,
                }
            });
        }
    });
    (addr, seen)
}

/// An origin answering every request `200` with `body`.
pub(crate) fn plain_origin(body: &'static str) -> (SocketAddr, Arc<Seen>) {
    origin(move |_| {
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nServer: origin/1\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
}

/// One request from `sock`: its head and its Content-Length body; `None`
/// at the end of the stream.
pub(crate) fn read_request(sock: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match sock.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let start = buf.len();
    buf.resize(start + len, 0);
    sock.read_exact(&mut buf[start..]).ok()?;
    Some(buf)
}

/// Does `hay` contain `needle`?
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A client connection to the proxy.
pub(crate) fn client(addr: SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// Read one response: its head, and its body by Content-Length or chunked
/// (de-chunked), or none for `HEAD`.
pub(crate) fn read_response(c: &mut TcpStream, head_request: bool) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = c.read(&mut byte).unwrap();
        assert_eq!(
            n,
            1,
            "the connection closed in a head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let lower = head.to_ascii_lowercase();
    if head_request || head.starts_with("HTTP/1.1 304") || head.starts_with("HTTP/1.1 101") {
        return (head, Vec::new());
    }
    if lower.contains("transfer-encoding: chunked") {
        let mut body = Vec::new();
        loop {
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                c.read_exact(&mut byte).unwrap();
                line.push(byte[0]);
            }
            let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).unwrap();
            let mut chunk = vec![0u8; size + 2];
            c.read_exact(&mut chunk).unwrap();
            if size == 0 {
                return (head, body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    let len = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    (head, body)
}

/// Send `request` on a new connection and read the answer.
pub(crate) fn get(addr: SocketAddr, request: &str) -> (String, Vec<u8>) {
    let mut c = client(addr);
    c.write_all(request.as_bytes()).unwrap();
    read_response(&mut c, request.starts_with("HEAD "))
}

/// An address nothing listens on.
pub(crate) fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}
