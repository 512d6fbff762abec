//! A JSON API with the endpoints where process models differ most: one that
//! burns CPU, one that blocks, and one that does neither.
//!
//! ```text
//! cargo run --release -p mpm --example json_api -- serve --mpm event --listen 127.0.0.1:8080
//! curl 'http://127.0.0.1:8080/api/cpu?n=20000'    # counts primes: CPU-bound
//! curl 'http://127.0.0.1:8080/api/sleep?ms=20'    # sleeps: blocking, like a slow database
//! curl 'http://127.0.0.1:8080/api/hello'          # neither: answered on the event loop
//! ```

#![forbid(unsafe_code)]

use std::time::Duration;

use mpm::prelude::*;

/// The API. It keeps no state, so one value serves every worker.
#[derive(Debug, Clone, Copy, Default)]
struct Api;

fn json(status: u16, body: String) -> Response {
    Response::new(status)
        .header("Content-Type", "application/json")
        .body(body)
}

/// `name=value` from a query string, as a number.
fn param(req: &Request<'_>, name: &str) -> Option<u64> {
    req.query()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// Primes below `n`, by trial division: deliberately plain CPU work.
fn count_primes(n: u64) -> u64 {
    (2..n)
        .filter(|&k| (2..).take_while(|d| d * d <= k).all(|d| k % d != 0))
        .count() as u64
}

impl HttpHandler for Api {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        match (req.method(), req.path()) {
            ("GET", "/api/hello") => json(200, r#"{"hello":"world"}"#.to_string()),
            ("GET", "/api/cpu") => {
                let n = param(req, "n").unwrap_or(20_000).min(5_000_000);
                json(200, format!(r#"{{"n":{n},"primes":{}}}"#, count_primes(n)))
            }
            ("GET", "/api/sleep") => {
                let ms = param(req, "ms").unwrap_or(20).min(10_000);
                std::thread::sleep(Duration::from_millis(ms));
                json(200, format!(r#"{{"slept_ms":{ms}}}"#))
            }
            ("POST", "/api/echo") => json(200, format!(r#"{{"bytes":{}}}"#, req.body().len())),
            (_, "/api/hello" | "/api/cpu" | "/api/sleep" | "/api/echo") => {
                Response::error(405).header("Allow", "GET, POST")
            }
            _ => json(404, r#"{"error":"no such endpoint"}"#.to_string()),
        }
    }

    // Only the trivial endpoint is safe on the event loop: the CPU-bound and
    // the sleeping ones would stall every other connection there.
    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        req.path() == "/api/hello"
    }
}

// `--allocator` picks one at launch (compare's malloc experiment does).
#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    std::process::exit(mpm::main(|| Api));
}
