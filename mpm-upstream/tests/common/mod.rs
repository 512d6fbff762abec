//! Small upstreams for the tests: std threads on loopback, each answering
//! as a test scripts it.

#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An upstream on 127.0.0.1 running `serve` on every accepted connection
/// (a thread each), counting its accepts.
pub struct Upstream {
    pub addr: SocketAddr,
    accepts: Arc<AtomicUsize>,
}

impl Upstream {
    pub fn start(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let accepts = Arc::new(AtomicUsize::new(0));
        let counted = accepts.clone();
        let serve = Arc::new(serve);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let serve = serve.clone();
                std::thread::spawn(move || serve(conn));
            }
        });
        Upstream { addr, accepts }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
}

/// Read one request head (and a Content-Length body) from `conn`; `None`
/// when the client closed first.
pub fn read_request(conn: &mut impl Read) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).ok()?;
    Some(head)
}

/// Serve each request on the connection with the same `answer`, until
/// the client closes.
pub fn answer_every(answer: &'static [u8]) -> impl Fn(TcpStream) + Send + Sync + 'static {
    move |mut conn| {
        while read_request(&mut conn).is_some() {
            if conn.write_all(answer).is_err() {
                return;
            }
        }
    }
}

/// A deadline `secs` seconds away.
pub fn in_secs(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}
