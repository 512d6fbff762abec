//! The proxy as the server holds it: [`ReverseProxy`], built once from the
//! routes (in the master, before it forks, so that the upstreams' shared
//! state is every process's), and [`Proxy`], one worker's handler made
//! from it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use mpm_upstream::{Pool, Target};

use crate::balance::InFlight;
use crate::config::{check_routes, ClientCert, ProxyRoute, UpstreamUrl};
use crate::error::{Error, Result};
use crate::handler::{Call, LazyTidy};
use crate::health::{http_probe, Checker, Probe};
use crate::path::RouteTable;
use crate::plan::Picker;
use crate::shared_state::{ProxyState, UpstreamState};
use crate::stats::UpstreamSnapshot;
use crate::{DEFAULT_KEEPALIVE, DEFAULT_KEEPALIVE_TIMEOUT};

/// The upstream connection pools' settings (`--proxy-keepalive`,
/// `--proxy-keepalive-timeout`): per upstream, per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Idle connections kept per upstream (0: none, each closed after its
    /// request).
    pub keepalive: usize,
    /// How long an idle connection is kept.
    pub keepalive_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            keepalive: DEFAULT_KEEPALIVE,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
        }
    }
}

/// Everything the workers of a server share: the routes, each upstream's
/// state in shared memory, the health checker, and, per process, the
/// in-flight counts least-conn reads and the pool of upstream connections.
/// Cheap to clone.
///
/// An embedder mounts it among its routes (build it before the server
/// forks, in `App::check` or `main`):
///
/// ```no_run
/// use mpm_http::{Request, Routes};
/// use mpm_proxy::{PoolSettings, ProxyRoute, ReverseProxy};
///
/// let api = ReverseProxy::new(
///     vec![ProxyRoute::from_flag("/api/=http://127.0.0.1:8081/v1/")?],
///     PoolSettings::default(),
/// )?;
/// let routes = Routes::new()
///     .get("/health", |_: &mut (), _: &Request<'_>| "ok")
///     .mount("/api/", api.worker()); // /api/users → http://127.0.0.1:8081/v1/users
/// # let _ = routes;
/// # Ok::<(), mpm_proxy::Error>(())
/// ```
#[derive(Clone)]
pub struct ReverseProxy {
    pub(crate) table: Arc<RouteTable>,
    /// Shared by every worker and every request's future, not copied.
    pub(crate) state: Arc<ProxyState>,
    /// Per route, this process's requests in flight per upstream. Made
    /// before fork: each process then counts in its own copy.
    pub(crate) in_flight: Arc<Vec<InFlight>>,
    pub(crate) pools: PoolSettings,
    /// Per route, per upstream: where to connect (the host name resolved
    /// when the proxy was built: at start, and on every reload).
    pub(crate) targets: Arc<Vec<Vec<Target>>>,
    /// This process's pool of upstream connections, made by the first
    /// worker of each process (a pool made before a fork would be shared
    /// by processes that do not know it).
    pool: Arc<Mutex<Option<ProcessPool>>>,
    /// Per route, per upstream: the idle connections this process's pool
    /// held when last looked at, so that the shared gauge gets the
    /// difference, for a process that found no row of shares free
    /// (`idle_shares.rs`; made before fork: each process counts in its
    /// copy).
    pub(crate) idle_seen: Arc<Vec<Vec<Arc<AtomicU64>>>>,
    checker: Checker,
    probe: Probe,
}

impl std::fmt::Debug for ReverseProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReverseProxy")
            .field("routes", &self.table.routes().len())
            .field("pools", &self.pools)
            .finish()
    }
}

impl ReverseProxy {
    /// The proxy of `routes` (checked together: no prefix twice), its
    /// upstreams' state in the server's shared memory (kept from the last
    /// one built for upstreams still listed: call this again on a reload).
    /// A host name that resolves to several addresses is an upstream per
    /// address ([`one_upstream_per_address`](crate::one_upstream_per_address)).
    pub fn new(routes: Vec<ProxyRoute>, pools: PoolSettings) -> Result<ReverseProxy> {
        check_routes(&routes)?;
        let routes = crate::one_upstream_per_address(routes, crate::system_resolver)?;
        let table = RouteTable::new(routes);
        let state = ProxyState::new(&table)?;
        ReverseProxy::with_state(table, state, pools)
    }

    /// The proxy of `table` with its state made elsewhere (a test's own
    /// [`Slots`](crate::Slots)). Host names are resolved here (blocking):
    /// one that does not resolve is an error, as with nginx.
    pub fn with_state(
        table: RouteTable,
        state: ProxyState,
        pools: PoolSettings,
    ) -> Result<ReverseProxy> {
        let in_flight = table
            .routes()
            .iter()
            .map(|r| InFlight::new(r.upstreams.len()))
            .collect();
        // Each upstream's connections in a pool group of its own: two
        // routes to one address would otherwise take each other's idle
        // connections, and each would count them in its `pool_idle`.
        let mut group = 0;
        let targets = table
            .routes()
            .iter()
            .map(|r| {
                // The route's CA and client certificate files read once,
                // one configuration its https:// upstreams share.
                let https = r.upstreams.iter().any(|u| u.url.is_tls());
                let tls = match tls_config(r.ca_file.as_deref(), r.client_cert.as_ref()) {
                    Some(made) if https => {
                        Some(made.map_err(|e| Error::config(format!("route {}: {e}", r.prefix)))?)
                    }
                    _ => None,
                };
                r.upstreams
                    .iter()
                    .map(|u| {
                        group += 1;
                        resolve(&u.url, tls.as_ref()).map(|t| t.in_group(group))
                    })
                    .collect()
            })
            .collect::<Result<Vec<Vec<Target>>>>()?;
        let idle_seen = table
            .routes()
            .iter()
            .map(|r| {
                r.upstreams
                    .iter()
                    .map(|_| Arc::new(AtomicU64::new(0)))
                    .collect()
            })
            .collect();
        Ok(ReverseProxy {
            idle_seen: Arc::new(idle_seen),
            table: Arc::new(table),
            state: Arc::new(state),
            in_flight: Arc::new(in_flight),
            pools,
            targets: Arc::new(targets),
            pool: Arc::new(Mutex::new(None)),
            checker: Checker::new(),
            probe: http_probe(),
        })
    }

    /// This process's upstream connection pool, made on first use in each
    /// process.
    pub(crate) fn pool(&self) -> Arc<Pool> {
        let me = std::process::id();
        let mut pool = self.pool.lock();
        match &*pool {
            Some((pid, p)) if *pid == me => p.clone(),
            _ => {
                let p = Arc::new(Pool::new(mpm_upstream::PoolSettings {
                    idle_per_upstream: self.pools.keepalive,
                    idle_timeout: self.pools.keepalive_timeout,
                }));
                *pool = Some((me, p.clone()));
                idle_back_at_exit(&self.state, &self.idle_seen);
                p
            }
        }
    }

    /// What this process's checker thread does besides the checks: close
    /// the idle connections of `pool` past `keepalive_timeout` (nginx closes
    /// them on a timer; the pool alone would close them only when its
    /// upstream is next asked for one, so a route gone quiet kept them, and
    /// counted them idle, for good), and set the idle gauges to what is
    /// left. Holds the pool weakly: it ends with the process's handlers.
    fn tidy(&self, pool: &Arc<Pool>) -> impl Fn() + Send + Sync + 'static {
        let pool = Arc::downgrade(pool);
        let (state, idle_seen, targets) = (
            self.state.clone(),
            self.idle_seen.clone(),
            self.targets.clone(),
        );
        move || {
            let Some(pool) = pool.upgrade() else {
                return;
            };
            // Not while the process gives its shares back at exit (a count
            // set after would stay in the gauges for good).
            let _exit = IDLE_SHARES.lock();
            if GAVE_BACK.load(std::sync::atomic::Ordering::Relaxed) || pool.prune() == 0 {
                return;
            }
            for (r, route) in targets.iter().enumerate() {
                for (u, target) in route.iter().enumerate() {
                    let Some(&up) = state.route(r).get(u) else {
                        continue;
                    };
                    let idle = pool.stats(&target.key()).idle_now;
                    crate::handler::set_idle(&state, &idle_seen, (r, u, up), idle);
                }
            }
        }
    }

    /// The same proxy with active checks done by `probe` (the upstream
    /// client's, for TLS upstreams; a test's).
    pub fn with_probe(mut self, probe: Probe) -> ReverseProxy {
        self.probe = probe;
        self
    }

    /// The routes, longest prefix first.
    pub fn table(&self) -> &RouteTable {
        &self.table
    }

    /// The upstreams' shared state.
    pub fn state(&self) -> &ProxyState {
        &self.state
    }

    /// The pools' settings.
    pub fn pools(&self) -> PoolSettings {
        self.pools
    }

    /// Every upstream's counters and health, for the status page.
    pub fn snapshot(&self) -> Vec<UpstreamSnapshot> {
        self.state.snapshot()
    }

    /// One worker's handler. The first made in a process starts that
    /// process's health-check thread, if a route has active checks.
    pub fn worker(&self) -> Proxy {
        // Made here, in the serving process, not before its fork; kept by
        // the worker, so that a request takes no process-wide lock for it.
        let pool = self.pool();
        // A prefork child keeps its one thread: its pool's idle timeouts
        // are looked at on its requests' way (and a child that serves
        // nothing more keeps its idle connections until it does, as
        // httpd's prefork keeps them past their `ttl`).
        let one_thread = mpm_core::serves_on_one_thread();
        self.checker.ensure_running(
            &self.table,
            &self.state,
            self.probe.clone(),
            (!one_thread).then(|| Box::new(self.tidy(&pool)) as Box<dyn Fn() + Send>),
        );
        let lazy_tidy = one_thread.then(|| LazyTidy {
            next: AtomicU64::new(0),
            run: Box::new(self.tidy(&pool)),
        });
        Proxy {
            call: Arc::new(Call {
                picker: Picker::new(self),
                pool,
                targets: self.targets.clone(),
                state: self.state.clone(),
                idle_seen: self.idle_seen.clone(),
                lazy_tidy,
            }),
            shared: self.clone(),
        }
    }
}

/// A pool and the process it belongs to.
type ProcessPool = (u32, Arc<Pool>);

/// What this process counts in the shared gauges of idle connections
/// (`pool_idle`): per upstream, its slot and this process's share.
type IdleShares = Vec<(UpstreamState, Arc<AtomicU64>)>;

/// What this process counts in the idle gauges, taken out of them when it
/// exits: each proxy's state (its row of counts there), and the shares it
/// added to the stripes when it found no row free.
static IDLE_SHARES: Mutex<(Vec<ProxyState>, IdleShares)> = Mutex::new((Vec::new(), Vec::new()));

/// When this process exits (a graceful restart's old generation, a
/// prefork child retired), its pools' idle connections close with it:
/// its counts leave each upstream's `pool_idle` then (its row freed, its
/// stripe shares taken back), or the gauge would count them for as long
/// as the server runs. (A process killed, not exiting, has its row freed
/// by the next reader of the gauge: `idle_shares.rs`.)
fn idle_back_at_exit(state: &ProxyState, seen: &[Vec<Arc<AtomicU64>>]) {
    let mut shares = IDLE_SHARES.lock();
    if shares.0.is_empty() {
        // Once a process: a child's registration is its own (made after
        // the fork), and a process with nothing in the list gives back
        // nothing.
        let _ = mpm_sys::at_exit::at_exit(give_back_idle_shares);
    }
    shares.0.push(state.clone());
    let states = (0..seen.len()).flat_map(|i| state.route(i).iter().copied());
    shares.1.extend(states.zip(seen.iter().flatten().cloned()));
}

/// This process gave its idle shares back (it exits): the proxy thread's
/// tidy step counts nothing more. Read and set under `IDLE_SHARES`'s lock.
static GAVE_BACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn give_back_idle_shares() {
    let shares = IDLE_SHARES.lock();
    GAVE_BACK.store(true, std::sync::atomic::Ordering::Relaxed);
    // Each row of this process freed (its counts leave the gauges).
    for state in &shares.0 {
        state.idle_shares().release_mine();
    }
    for (state, seen) in &shares.1 {
        let had = seen.swap(0, std::sync::atomic::Ordering::Relaxed);
        state.count_pool_idle(had, 0);
    }
}

/// Where to connect to `url`: its host name resolved now (an address is
/// its own answer), the first address taken; over TLS with `tls` (its
/// route's CA file and client certificate) if given, else the Mozilla
/// roots.
fn resolve(url: &UpstreamUrl, tls: Option<&mpm_upstream::TlsConfig>) -> Result<Target> {
    let bad = |e: mpm_upstream::Error| Error::config(format!("upstream '{url}': {e}"));
    let mut upstream = mpm_upstream::Upstream::parse(url.as_str()).map_err(bad)?;
    if let (Some(config), true) = (tls, upstream.is_tls()) {
        upstream.set_tls_config(config.clone()).map_err(bad)?;
    }
    // One address of several, as `one_upstream_per_address` made it.
    if let Some(a) = url.address() {
        return Ok(upstream.target(a));
    }
    upstream.resolve().map_err(bad)?;
    match upstream.targets().next() {
        Some(t) => Ok(t),
        None => Err(Error::config(format!(
            "upstream '{url}': its host has no address"
        ))),
    }
}

/// One worker's proxy: the shared [`ReverseProxy`] and the worker's own
/// round-robin positions.
#[derive(Debug)]
pub struct Proxy {
    pub(crate) shared: ReverseProxy,
    /// What its requests' exchanges need (its balancers, this process's
    /// pool of upstream connections, the upstreams' addresses): one `Arc`
    /// each request's future clones, rather than one for each part, and
    /// which no other worker's requests touch.
    pub(crate) call: Arc<Call>,
}

/// Another worker's handler from the same proxy (balancing positions of its
/// own): what a [`Routes::mount`](mpm_http::Routes::mount) makes for each
/// worker.
impl Clone for Proxy {
    fn clone(&self) -> Proxy {
        self.shared.worker()
    }
}

impl Proxy {
    /// The proxy this worker's handler was made from.
    pub fn shared(&self) -> &ReverseProxy {
        &self.shared
    }
}

/// The TLS configuration of a route's `ca_file` and `client_cert`: `None`
/// with neither (the Mozilla roots, no client certificate).
pub(crate) fn tls_config(
    ca_file: Option<&std::path::Path>,
    client: Option<&ClientCert>,
) -> Option<mpm_upstream::Result<mpm_upstream::TlsConfig>> {
    if ca_file.is_none() && client.is_none() {
        return None;
    }
    Some(mpm_upstream::TlsConfig::new(
        ca_file,
        client.map(|c| (c.cert.as_path(), c.key.as_path())),
    ))
}
