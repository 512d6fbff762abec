//! Per-worker state done right: what is built before `main` is shared by
//! every worker (copy-on-write across prefork's fork); what the factory
//! builds belongs to one worker, which uses it without a lock.
//!
//! ```text
//! cargo run -p mpm --example per_worker_state -- serve --mpm prefork --listen 127.0.0.1:8080
//! curl http://127.0.0.1:8080/whoami
//! ```

#![forbid(unsafe_code)]

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mpm::prelude::*;

/// Read-only data every worker reads: built once, before any fork.
#[derive(Debug)]
struct Catalogue {
    words: Vec<&'static str>,
}

/// A stand-in for a database connection pool: it holds descriptors, which
/// must never be shared between processes, so each worker opens its own.
#[derive(Debug)]
struct Pool {
    connections: Vec<File>,
}

impl Pool {
    fn open(size: usize) -> Pool {
        Pool {
            connections: (0..size)
                .filter_map(|_| File::open("/dev/null").ok())
                .collect(),
        }
    }
}

/// Numbers the workers of one process as their handlers are made.
static NEXT_WORKER: AtomicU64 = AtomicU64::new(1);

/// One worker's handler.
#[derive(Debug)]
struct Worker {
    catalogue: Arc<Catalogue>,
    pool: Pool,
    id: u64,
    served: u64,
}

impl HttpHandler for Worker {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path() != "/whoami" {
            return Response::error(404);
        }
        self.served += 1; // this worker's own: no lock, no atomic
        let word = self.catalogue.words[(self.served as usize) % self.catalogue.words.len()];
        Response::new(200)
            .header("Content-Type", "application/json")
            .body(format!(
                r#"{{"pid":{},"worker":{},"served":{},"pool":{},"word":"{word}"}}"#,
                std::process::id(),
                self.id,
                self.served,
                self.pool.connections.len()
            ))
    }
}

fn main() {
    let catalogue = Arc::new(Catalogue {
        words: vec!["prefork", "worker", "event"],
    });
    // The factory: called after fork in each prefork child, once per thread
    // in worker and event.
    let factory = move || Worker {
        catalogue: Arc::clone(&catalogue),
        pool: Pool::open(2),
        id: NEXT_WORKER.fetch_add(1, Ordering::Relaxed),
        served: 0,
    };
    std::process::exit(mpm::main(factory));
}
