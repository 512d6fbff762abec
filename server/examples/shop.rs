//! A small catalogue API that ships the workloads `compare` measures it
//! with (`App::workloads`), and counts what it is sent.
//!
//! ```text
//! cargo build --release -p mpm --examples
//! target/release/examples/shop compare                      # its own workloads, every MPM × allocator
//! target/release/examples/shop compare --workload server/examples/shop.toml
//! target/release/examples/shop serve --mpm event --listen 127.0.0.1:8080
//! curl http://127.0.0.1:8080/api/items/7
//! curl -d '{"name":"lamp"}' http://127.0.0.1:8080/api/items  # 201
//! curl -X POST http://127.0.0.1:8080/api/items              # 400, and a warning in the error log
//! curl 'http://127.0.0.1:8080/api/search?q=lamp'            # scans the catalogue: CPU
//! curl 'http://127.0.0.1:8080/api/slow?ms=10'               # waits, like a slow database
//! curl http://127.0.0.1:8080/api/counts                     # what this process was sent
//! ```
//!
//! The counts are the serving process's (shared by its threads, not by
//! other processes): read them from a server of one process
//! (`--server-limit 1` under worker or event) to see every request.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mpm::prelude::*;

/// What this process was sent, by endpoint.
#[derive(Debug, Default)]
struct Counts {
    get_item: AtomicU64,
    post_item: AtomicU64,
    post_bytes: AtomicU64,
    search: AtomicU64,
    slow: AtomicU64,
    other: AtomicU64,
    /// Requests carrying an `X-Workload` header.
    marked: AtomicU64,
}

impl Counts {
    fn json(&self) -> String {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            r#"{{"get_item":{},"post_item":{},"post_bytes":{},"search":{},"slow":{},"other":{},"marked":{}}}"#,
            n(&self.get_item),
            n(&self.post_item),
            n(&self.post_bytes),
            n(&self.search),
            n(&self.slow),
            n(&self.other),
            n(&self.marked)
        )
    }
}

/// The catalogue, built once before any worker: shared by all of them.
#[derive(Debug)]
struct Catalogue {
    names: Vec<String>,
}

impl Catalogue {
    fn new() -> Catalogue {
        let things = [
            "lamp", "desk", "chair", "shelf", "rug", "clock", "vase", "mirror",
        ];
        let colours = ["red", "oak", "steel", "white", "green", "black"];
        let names = (0..1000)
            .map(|i| {
                format!(
                    "{} {} {i}",
                    colours[i % colours.len()],
                    things[i % things.len()]
                )
            })
            .collect();
        Catalogue { names }
    }
}

/// The application: the shared catalogue and counts, and its workloads.
#[derive(Debug)]
struct Shop {
    catalogue: Arc<Catalogue>,
    counts: Arc<Counts>,
}

/// One worker's handler.
#[derive(Debug)]
struct ShopHandler {
    catalogue: Arc<Catalogue>,
    counts: Arc<Counts>,
}

fn json(status: u16, body: String) -> Response {
    Response::new(status)
        .header("Content-Type", "application/json")
        .body(body)
}

fn param<'a>(req: &Request<'a>, name: &str) -> Option<&'a str> {
    req.query()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl HttpHandler for ShopHandler {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        let c = &self.counts;
        if req.header("x-workload").is_some() {
            c.marked.fetch_add(1, Ordering::Relaxed);
        }
        let item = req.path().strip_prefix("/api/items/");
        match (req.method(), req.path(), item) {
            ("GET", _, Some(id)) => {
                c.get_item.fetch_add(1, Ordering::Relaxed);
                match id
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| self.catalogue.names.get(i))
                {
                    Some(name) => json(200, format!(r#"{{"id":{id},"name":"{name}"}}"#)),
                    None => json(404, r#"{"error":"no such item"}"#.into()),
                }
            }
            ("POST", "/api/items", _) => {
                c.post_item.fetch_add(1, Ordering::Relaxed);
                c.post_bytes
                    .fetch_add(req.body().len() as u64, Ordering::Relaxed);
                if req.body().is_empty() {
                    // Through the `log` facade: written to mpm's error log,
                    // in its format, with mpm's own lines.
                    mpm::log::warn!("shop: an item was posted without a body; answered 400");
                    return json(400, r#"{"error":"a body is needed"}"#.into());
                }
                json(201, format!(r#"{{"created":{}}}"#, req.body().len()))
            }
            ("GET", "/api/search", _) => {
                c.search.fetch_add(1, Ordering::Relaxed);
                let q = param(req, "q").unwrap_or("");
                let hits = self
                    .catalogue
                    .names
                    .iter()
                    .filter(|n| n.contains(q))
                    .count();
                json(
                    200,
                    format!(r#"{{"q":"{}","hits":{hits}}}"#, q.escape_default()),
                )
            }
            ("GET", "/api/slow", _) => {
                c.slow.fetch_add(1, Ordering::Relaxed);
                let ms = param(req, "ms")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(10u64);
                std::thread::sleep(Duration::from_millis(ms.min(1000)));
                json(200, format!(r#"{{"slept_ms":{}}}"#, ms.min(1000)))
            }
            ("GET", "/api/counts", _) => json(200, c.json()),
            _ => {
                c.other.fetch_add(1, Ordering::Relaxed);
                json(404, r#"{"error":"not found"}"#.into())
            }
        }
    }

    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        // Everything but the slow endpoint is memory only.
        req.path() != "/api/slow"
    }
}

impl App for Shop {
    type Handler = ShopHandler;
    type Settings = NoSettings;

    fn handler(&self, _config: &Config, _settings: &NoSettings) -> ShopHandler {
        ShopHandler {
            catalogue: Arc::clone(&self.catalogue),
            counts: Arc::clone(&self.counts),
        }
    }

    fn describe(&self, _config: &Config) -> String {
        "the shop API".into()
    }

    /// What `shop compare` measures with no flags: browsing (reads,
    /// searches and new items, with the status each must answer), the same
    /// with a fifth of the clients on a slow link, and an endpoint that
    /// waits on a slow backend.
    fn workloads(&self) -> Vec<Workload> {
        let browse = Workload::new("browse")
            .title(
                "browsing: 8 item reads, a search and a new item in 10, 50 keep-alive connections",
            )
            .request(
                WorkloadRequest::get("/api/items/7")
                    .weight(8)
                    .expect(&[200]),
            )
            .request(WorkloadRequest::get("/api/search?q=lamp").expect(&[200]))
            .request(
                WorkloadRequest::post("/api/items", r#"{"name":"desk lamp","price":25}"#)
                    .header("Content-Type", "application/json")
                    .expect(&[201]),
            );
        let slow_clients = Workload {
            name: "browse-slow-clients".into(),
            title: Some("browsing, a fifth of the clients sending 16 bytes every 10 ms".into()),
            ..browse.clone()
        }
        .slow_clients(0.2, Duration::from_millis(10), 16);
        let backend = Workload::new("slow-backend")
            .title("a 10 ms backend wait per request, 50 keep-alive connections")
            .request(WorkloadRequest::get("/api/slow?ms=10").expect(&[200]));
        vec![browse, slow_clients, backend]
    }
}

// `--allocator` picks one at launch (compare's matrix does).
#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    std::process::exit(mpm::main(Shop {
        catalogue: Arc::new(Catalogue::new()),
        counts: Arc::new(Counts::default()),
    }));
}
