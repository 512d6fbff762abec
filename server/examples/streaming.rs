//! Bodies never held whole in memory, both ways.
//!
//! `GET /lines` streams a large response: the body is produced as it is
//! sent, with chunked encoding (or, to an HTTP/1.0 client, until the
//! connection closes). `POST /count` reads an upload as it arrives and
//! answers its length and checksum: under the event and uring MPMs its
//! future reads it ([`HttpHandler::awaits_body`]), and an upload waiting
//! for its client holds no thread; under prefork and worker the handler
//! reads it on its thread ([`HttpHandler::streams_body`]).
//!
//! ```text
//! cargo run -p mpm --example streaming -- serve --listen 127.0.0.1:8080
//! curl -s 'http://127.0.0.1:8080/lines?count=100000' | wc -l
//! head -c 100000000 /dev/urandom | curl -s -T - http://127.0.0.1:8080/count
//! ```

#![forbid(unsafe_code)]

use std::io::Read;

use mpm::prelude::*;

/// Produces `count` numbered lines, on demand.
#[derive(Debug)]
struct Lines {
    next: u64,
    count: u64,
    pending: Vec<u8>,
}

impl Read for Lines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.len() < buf.len() && self.next < self.count {
            self.pending.extend_from_slice(
                format!("line {} of {}\n", self.next + 1, self.count).as_bytes(),
            );
            self.next += 1;
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        Ok(n)
    }
}

/// An upload's length and its Adler-32 checksum, as it goes by.
#[derive(Debug)]
struct Tally {
    len: u64,
    a: u32,
    b: u32,
}

impl Tally {
    fn new() -> Tally {
        Tally { len: 0, a: 1, b: 0 }
    }

    fn add(&mut self, bytes: &[u8]) {
        const MOD: u32 = 65_521;
        for &x in bytes {
            self.a = (self.a + u32::from(x)) % MOD;
            self.b = (self.b + self.a) % MOD;
        }
        self.len += bytes.len() as u64;
    }

    fn answer(&self) -> Response {
        Response::new(200)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(format!(
                "{} bytes, adler32 {:08x}\n",
                self.len,
                (self.b << 16) | self.a
            ))
    }
}

/// `POST /count` over a body still arriving.
fn count(req: &Request<'_>) -> Response {
    if let Some(mut body) = req.awaited_body() {
        // The answer is a future: it reads each piece as the client sends
        // it, and waits for the next without a thread.
        return Response::later(async move {
            let mut tally = Tally::new();
            loop {
                match body.chunk().await {
                    Ok(Some(piece)) => tally.add(&piece),
                    Ok(None) => return tally.answer(),
                    // A body past the limit, too slow, or cut: the layer
                    // answers 413, 408 or 400 itself.
                    Err(_) => return Response::error(400),
                }
            }
        });
    }
    // Read here, on this thread (or, without a body, nothing to read).
    let mut tally = Tally::new();
    let mut reader = req.body_reader();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return tally.answer(),
            Ok(n) => tally.add(&buf[..n]),
            Err(_) => return Response::error(400),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Streamer;

impl HttpHandler for Streamer {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path() == "/count" {
            return match req.method() {
                "POST" | "PUT" => count(req),
                _ => Response::error(405).header("Allow", "POST, PUT"),
            };
        }
        if req.path() != "/lines" {
            return Response::error(404);
        }
        let count = req
            .query()
            .and_then(|q| q.strip_prefix("count="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(1000u64)
            .min(100_000_000);
        Response::new(200)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(Body::Stream(Box::new(Lines {
                next: 0,
                count,
                pending: Vec::new(),
            })))
    }

    // An upload to `/count` is read as it arrives: by the answer's future
    // where the layer can give it the body (under event and uring), else
    // on the handler's thread.
    fn awaits_body(&self, req: &Request<'_>) -> bool {
        req.path() == "/count"
    }

    fn streams_body(&self, req: &Request<'_>) -> bool {
        req.path() == "/count"
    }

    // The future never blocks, so the loop may run the handler; a body the
    // handler reads on its thread is sent to a worker by the layer itself.
    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        req.path() == "/count"
    }
}

// `--allocator` picks one at launch (compare's malloc experiment does).
#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    std::process::exit(mpm::main(|| Streamer));
}
