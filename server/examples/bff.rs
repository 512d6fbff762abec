//! A backend-for-frontend: `GET /dashboard/{id}` calls two services, a
//! profile and the user's orders, *at the same time*, and merges their
//! JSON into one answer, without holding a thread while they answer. Under
//! `--mpm event` the request is parked on the event loop with its two
//! upstream sockets; under worker and prefork the same code blocks its
//! thread or process, as httpd's would.
//!
//! ```text
//! cargo run --release -p mpm --example bff -- serve --mpm event --listen 127.0.0.1:8080
//! curl http://127.0.0.1:8080/dashboard/7
//! # {"id":"7","profile":{"id":"7","name":"user 7"},"orders":{"id":"7","orders":[...]}}
//! ```
//!
//! Out of the box the two services are this same server's `/demo/...`
//! routes, reached at the address the request was sent to (its `Host`, when
//! that is an IP address and port), which answer after 20 ms as a real
//! backend would (a timer, not a sleeping thread). Point them elsewhere with `--profiles-upstream` and
//! `--orders-upstream` (resolved once, at start and on reload: never a DNS
//! lookup per request).

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use mpm::prelude::*;
use mpm::upstream::{Client, Upstream};
use serde_json::{json, Value};

/// Where the two services are (by default, this server's own demo routes).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct BffSettings {
    /// The profile service's base URL (default: this server's /demo).
    #[arg(long, value_name = "URL")]
    profiles_upstream: Option<String>,
    /// The orders service's base URL (default: this server's /demo).
    #[arg(long, value_name = "URL")]
    orders_upstream: Option<String>,
}

/// The two services, resolved once and shared by every worker; `None`:
/// this server's own demo routes, at the address each request came to.
#[derive(Debug, Clone)]
struct Services {
    client: Client,
    profiles: Option<Arc<Upstream>>,
    orders: Option<Arc<Upstream>>,
}

/// A service's URL, its host name resolved now (at start, not per request).
fn service(given: &Option<String>) -> Result<Option<Arc<Upstream>>, Error> {
    let Some(url) = given else { return Ok(None) };
    let mut upstream =
        Upstream::parse(url).map_err(|e| Error::config(format!("bff: {url}: {e}")))?;
    upstream
        .resolve()
        .map_err(|e| Error::config(format!("bff: {url}: {e}")))?;
    Ok(Some(Arc::new(upstream)))
}

fn resolve(settings: &BffSettings) -> Result<Services, Error> {
    Ok(Services {
        client: Client::new(),
        profiles: service(&settings.profiles_upstream)?,
        orders: service(&settings.orders_upstream)?,
    })
}

/// This server's demo routes at the address `req` was sent to (an
/// address, never a name: no lookup on the loop).
fn own_demo(req: &Request<'_>) -> Option<Arc<Upstream>> {
    let host = std::str::from_utf8(req.header("host")?).ok()?;
    host.parse::<std::net::SocketAddr>().ok()?;
    let mut u = Upstream::parse(&format!("http://{host}/demo")).ok()?;
    u.resolve().ok()?;
    Some(Arc::new(u))
}

/// GET `path` on `upstream` and read its JSON; an error becomes a JSON
/// string saying what failed, so one slow service degrades the page
/// instead of failing it.
async fn fetch(client: Client, upstream: Option<Arc<Upstream>>, path: String) -> Value {
    let Some(upstream) = upstream else {
        return json!({ "error": "no address for the service (send Host as IP:port)" });
    };
    // The upstream's own path (`/demo`) is put in front of `path`.
    let answer = client
        .request_to("GET", &upstream, &path)
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    match answer {
        Ok(r) if r.status() == 200 => match r.bytes().await {
            Ok(body) => serde_json::from_slice(&body)
                .unwrap_or_else(|e| json!({ "error": format!("not JSON: {e}") })),
            Err(e) => json!({ "error": e.to_string() }),
        },
        Ok(r) => json!({ "error": format!("status {}", r.status()) }),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

fn dashboard(s: &mut Services, req: &Request<'_>) -> Response {
    let id = req.param("id").unwrap_or("0").to_owned();
    let own = || own_demo(req);
    let profiles = s.profiles.clone().or_else(own);
    let orders = s.orders.clone().or_else(own);
    let client = s.client.clone();
    // What the future needs is moved into it: it outlives this call, and
    // is polled on the event loop whenever one of its sockets is ready.
    Response::later(async move {
        let profile = fetch(client.clone(), profiles, format!("/profiles/{id}"));
        let orders = fetch(client, orders, format!("/orders/{id}"));
        // Both calls in flight at once.
        let (profile, orders) = join(profile, orders).await;
        let merged = json!({ "id": id, "profile": profile, "orders": orders });
        Response::new(200)
            .header("Content-Type", "application/json")
            .body(merged.to_string())
    })
}

/// The demo services: answer after 20 ms, on a timer (no thread waits).
fn demo(kind: &'static str) -> impl Fn(&mut Services, &Request<'_>) -> Response + Send + Sync {
    move |_, req| {
        let id = req.param("id").unwrap_or("0").to_owned();
        Response::later(async move {
            mpm::waiting::sleep(Duration::from_millis(20)).await;
            let body = match kind {
                "profile" => json!({ "id": id, "name": format!("user {id}") }),
                _ => {
                    json!({ "id": id, "orders": [{ "sku": "lamp", "qty": 1 }, { "sku": "rug", "qty": 2 }] })
                }
            };
            Response::new(200)
                .header("Content-Type", "application/json")
                .body(body.to_string())
        })
    }
}

/// Two futures polled together until both are done (`futures::join!`,
/// written out: the example needs no other crate).
async fn join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let (mut a, mut b) = (Box::pin(a), Box::pin(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(move |cx| {
        if ra.is_none() {
            if let std::task::Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let std::task::Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => std::task::Poll::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                std::task::Poll::Pending
            }
        }
    })
    .await
}

struct Bff {
    routes: Routes<Services>,
    /// Resolved by `check`, before any worker starts.
    services: std::sync::OnceLock<Services>,
}

impl App for Bff {
    type Handler = Router<Services>;
    type Settings = BffSettings;

    fn handler(&self, config: &Config, settings: &BffSettings) -> Router<Services> {
        let _ = config;
        let services = match self.services.get() {
            Some(s) => s.clone(),
            // `check` runs first and fills it; resolving again is the same.
            None => resolve(settings).unwrap_or_else(|e| panic!("bff: {e}")),
        };
        self.routes.with_state(services)
    }

    fn check(&self, config: &Config, settings: &BffSettings) -> Result<(), Error> {
        let _ = config;
        let services = resolve(settings)?;
        let _ = self.services.set(services);
        Ok(())
    }

    fn describe(&self, _: &Config) -> String {
        "a backend-for-frontend (GET /dashboard/{id})".into()
    }
}

#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    let routes = Routes::new()
        .get("/dashboard/{id}", dashboard)
        .get("/demo/profiles/{id}", demo("profile"))
        .get("/demo/orders/{id}", demo("orders"));
    std::process::exit(mpm::main(Bff {
        routes,
        services: std::sync::OnceLock::new(),
    }));
}
