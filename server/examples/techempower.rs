//! TechEmpower's plaintext and JSON tests, by their rules: `/plaintext`
//! answers `Hello, World!` as `text/plain`, `/json` a `{"message":"Hello,
//! World!"}` object serialized anew for every request as
//! `application/json`; every response carries `Server`, `Date` and
//! `Content-Length` (the HTTP layer adds them). Neither answer can block, so
//! the event MPM answers both on its loops, and pipelined requests (the
//! plaintext test sends 16 per write) get their responses in one write.
//!
//! ```text
//! cargo run --release -p mpm --example techempower -- serve --mpm event --listen 127.0.0.1:8080
//! curl -i http://127.0.0.1:8080/plaintext
//! curl -i http://127.0.0.1:8080/json
//! python3 ../shared/bench/rust_peers/rust_peers.py --ours target/release/examples/techempower
//! ```

#![forbid(unsafe_code)]

use mpm::prelude::*;
use serde::Serialize;

/// The JSON test's message, serialized per request as the rules ask.
#[derive(Serialize)]
struct Message {
    message: &'static str,
}

/// The two endpoints. No state: one value serves every worker.
#[derive(Debug, Clone, Copy, Default)]
struct TechEmpower;

impl HttpHandler for TechEmpower {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        match req.path() {
            "/plaintext" => Response::new(200)
                .header("Content-Type", "text/plain")
                .body(&b"Hello, World!"[..]),
            // Serialized for every request (serde_json), as the rules ask.
            "/json" => Response::json(
                200,
                &Message {
                    message: "Hello, World!",
                },
            ),
            _ => Response::error(404),
        }
    }

    /// Nothing here waits: the event MPM answers every request on its loop.
    fn answers_without_blocking(&self, _req: &Request<'_>) -> bool {
        true
    }
}

// `--allocator` picks one at launch.
#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    std::process::exit(mpm::main(|| TechEmpower));
}
