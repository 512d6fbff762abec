//! `kv`: a key-value service on mpm, under any process model.
//!
//! ```text
//! kv serve --mpm prefork --listen 127.0.0.1:8080 --max-keys 10000
//! curl -X PUT --data-binary 'blue' http://127.0.0.1:8080/kv/colour
//! curl http://127.0.0.1:8080/kv/colour
//! curl -T big.iso http://127.0.0.1:8080/upload/big.iso    # streamed, never held whole
//! ```
//!
//! Every process sees the same store: it lives in shared memory made before
//! the serving processes start.

#![forbid(unsafe_code)]

use std::io::Read;
use std::sync::OnceLock;

use mpm::prelude::*;

/// The service's own settings: flags beside mpm's, and keys of its TOML file.
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct KvSettings {
    /// Most keys the store holds.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_keys: usize,
    /// Longest value accepted, in bytes (413 beyond it).
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    max_value: usize,
}

/// The store and the counters, in memory every process shares.
#[derive(Debug, Clone)]
struct Store {
    table: Table,
    counters: Counters,
}

const PUTS: usize = 0;
const GETS: usize = 1;
const UPLOADED: usize = 2;

/// The application: made once, before `mpm::main`.
#[derive(Debug, Default)]
struct Kv {
    store: OnceLock<Store>,
}

impl App for Kv {
    type Handler = Pid<Router<Store>>;
    type Settings = KvSettings;

    fn identity(&self) -> Identity {
        mpm::identity!()
    }

    fn defaults(&self) -> ConfigLayer {
        // The status page stays out of the service's URL space unless asked for.
        ConfigLayer {
            status_path: Some("off".into()),
            ..ConfigLayer::default()
        }
    }

    fn check(&self, _config: &Config, settings: &KvSettings) -> Result<(), Error> {
        if settings.max_keys == 0 {
            return Err(Error::config("--max-keys must be at least 1"));
        }
        if self.store.get().is_none() {
            // The first check only: a reload keeps the store and its data.
            let store = Store {
                table: Table::new(settings.max_keys, 256, settings.max_value)?,
                counters: Counters::new(3)?,
            };
            let _ = self.store.set(store);
        }
        Ok(())
    }

    fn handler(&self, _config: &Config, _settings: &KvSettings) -> Self::Handler {
        let store = self.store.get().expect("check made the store").clone();
        Pid(routes().with_state(store))
    }

    fn describe(&self, _config: &Config) -> String {
        "a key-value store".into()
    }
}

fn routes() -> Routes<Store> {
    Routes::new()
        // A lookup copies a few bytes under a shard's lock: never blocks, so
        // the event MPM answers it on its loop.
        .get("/kv/{key}", get)
        .inline()
        .put("/kv/{key}", put)
        .delete("/kv/{key}", delete)
        .get("/stats", stats)
        .inline()
        .put("/upload/{name}", upload)
        .streamed()
        .get("/bye", |_: &mut Store, _: &Request<'_>| {
            Response::new(200).close()
        })
        .get("/teapot", |_: &mut Store, _: &Request<'_>| {
            Response::new(418)
        })
}

fn get(store: &mut Store, req: &Request<'_>) -> Response {
    store.counters.add(GETS, 1);
    let key = req.param("key").unwrap_or_default();
    match store.table.get(key.as_bytes()) {
        Some(value) => Response::new(200)
            .header("Content-Type", "application/octet-stream")
            .body(value),
        None => match req.query_param("default") {
            Some(d) => (200, d.into_owned()).into_response(),
            None => Response::json(404, &serde_json_error("no such key")),
        },
    }
}

fn put(store: &mut Store, req: &Request<'_>) -> Result<Response, Rejection> {
    let key = req.param("key").unwrap_or_default();
    let replaced = store
        .table
        .insert(key.as_bytes(), req.body())
        .map_err(|e| match e {
            TableError::Full { .. } => Rejection::new(507, e.to_string()),
            _ => Rejection::new(413, e.to_string()),
        })?;
    store.counters.add(PUTS, 1);
    Ok(Response::new(if replaced { 200 } else { 201 }))
}

fn delete(store: &mut Store, req: &Request<'_>) -> Response {
    let key = req.param("key").unwrap_or_default();
    Response::new(if store.table.remove(key.as_bytes()) {
        204
    } else {
        404
    })
}

#[derive(serde::Serialize)]
struct Stats {
    keys: usize,
    puts: u64,
    gets: u64,
    uploaded: u64,
}

fn stats(store: &mut Store, _req: &Request<'_>) -> Json<Stats> {
    let c = &store.counters;
    Json(Stats {
        keys: store.table.len(),
        puts: c.get(PUTS),
        gets: c.get(GETS),
        uploaded: c.get(UPLOADED),
    })
}

#[derive(serde::Serialize)]
struct Uploaded<'a> {
    name: &'a str,
    bytes: u64,
    fnv1a: String,
    streamed: bool,
}

/// Read the body as it arrives, 64 KiB at a time: its size and FNV-1a hash.
/// `?limit=N` refuses an upload past N bytes as soon as they have arrived.
fn upload(store: &mut Store, req: &Request<'_>) -> Result<Response, Rejection> {
    let limit: u64 = match req.query_param("limit") {
        Some(n) => n
            .parse()
            .map_err(|_| Rejection::new(400, "limit: not a number"))?,
        None => u64::MAX,
    };
    let mut body = req.body_reader();
    let (mut bytes, mut hash) = (0u64, 0xcbf2_9ce4_8422_2325u64);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = body
            .read(&mut buf)
            .map_err(|e| Rejection::new(400, e.to_string()))?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        bytes += n as u64;
        if bytes > limit {
            return Err(Rejection::new(
                413,
                format!("upload over its limit of {limit} bytes"),
            ));
        }
    }
    store.counters.add(UPLOADED, bytes);
    let name = req.param("name").unwrap_or_default();
    let fnv1a = format!("{hash:016x}");
    let streamed = req.is_streamed();
    Ok(Response::json(
        201,
        &Uploaded {
            name,
            bytes,
            fnv1a,
            streamed,
        },
    ))
}

fn serde_json_error(message: &str) -> impl serde::Serialize + '_ {
    #[derive(serde::Serialize)]
    struct E<'a> {
        error: &'a str,
    }
    E { error: message }
}

/// A wrapper: every response says which process served it.
#[derive(Debug)]
struct Pid<H>(H);

impl<H: HttpHandler> HttpHandler for Pid<H> {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        self.0
            .handle(req)
            .header("X-Kv-Pid", std::process::id().to_string())
    }

    // A wrapper forwards what the router says of each route.
    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        self.0.answers_without_blocking(req)
    }

    fn streams_body(&self, req: &Request<'_>) -> bool {
        self.0.streams_body(req)
    }
}

fn main() {
    std::process::exit(mpm::main(Kv::default()));
}
