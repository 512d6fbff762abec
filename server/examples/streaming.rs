//! A handler that streams a large response: the body is produced as it is
//! sent, with chunked encoding (or, to an HTTP/1.0 client, until the
//! connection closes), never held whole in memory.
//!
//! ```text
//! cargo run -p mpm --example streaming -- serve --listen 127.0.0.1:8080
//! curl -s 'http://127.0.0.1:8080/lines?count=100000' | wc -l
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

#[derive(Debug, Clone, Copy)]
struct Streamer;

impl HttpHandler for Streamer {
    fn handle(&mut self, req: &Request<'_>) -> Response {
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
}

// `--allocator` picks one at launch (compare's malloc experiment does).
#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    std::process::exit(mpm::main(|| Streamer));
}
