//! What every worker answers with: the status page and the metrics at their
//! paths, and the application's handler everywhere else.

use std::sync::Arc;

use mpm_core::scoreboard::Scoreboard;
use mpm_http::{HttpHandler, Request, Response};
use mpm_status::{ServerStatus, Value};

use crate::internal::InternalPaths;
use crate::settings::Config;

/// The status page and the metrics, shared by every worker's [`Site`].
#[derive(Debug, Clone)]
pub(crate) struct StatusRoute {
    status: ServerStatus,
    page: Option<Arc<str>>,
    metrics: Option<Arc<str>>,
}

/// Which of the two a request is for.
enum Route {
    Page,
    Metrics,
}

impl StatusRoute {
    /// The status page and metrics `config` asks for, reading `scoreboard`
    /// (and the TLS layer's counters, when it has listeners).
    pub(crate) fn new(
        config: &Config,
        scoreboard: &'static Scoreboard,
        tls: Option<mpm_tls::Stats>,
        proxy: Option<&mpm_proxy::ReverseProxy>,
    ) -> StatusRoute {
        let mut status = ServerStatus::new(scoreboard, config.mpm, config.status_remote);
        if let Some(stats) = tls {
            status = status.with_section("tls", Arc::new(move || stats.snapshot()));
        }
        if config.mpm == mpm_core::MpmKind::Uring {
            // The ring's features in use here (1) or not (0): what the
            // kernel offered when the server started. Readings, not counts:
            // gauges.
            if let Ok(f) = mpm_uring::available() {
                let flags = [
                    ("multishot_accept", f.multishot_accept),
                    ("multishot_recv", f.multishot_recv),
                    ("provided_buffer_ring", f.buffer_ring),
                    ("single_issuer", f.single_issuer),
                    ("defer_taskrun", f.defer_taskrun),
                    ("coop_taskrun", f.coop_taskrun),
                ]
                .map(|(name, on)| (name, Value::Gauge(u64::from(on))));
                status = status.with_section_values("io_uring", Arc::new(move || flags.to_vec()));
            }
        }
        if config.http2 || config.h2c {
            // Connections open go down as well as up: a gauge.
            status = status.with_section_values(
                "h2",
                Arc::new(|| {
                    mpm_http::h2_counts()
                        .iter()
                        .map(|&(c, n)| {
                            let v = if c.is_gauge() {
                                Value::Gauge(n)
                            } else {
                                Value::Counter(n)
                            };
                            (c.name(), v)
                        })
                        .collect()
                }),
            );
        }
        if let Some(proxy) = proxy.cloned() {
            status = status.with_table("proxy", Arc::new(move || upstream_rows(&proxy)));
        }
        StatusRoute {
            status,
            page: config.status_path.as_deref().map(Arc::from),
            metrics: config.metrics_path.as_deref().map(Arc::from),
        }
    }

    fn for_request(&self, request: &Request<'_>) -> Option<Route> {
        let is = |p: &Option<std::sync::Arc<str>>| p.as_deref().is_some_and(|p| request.path_is(p));
        if is(&self.page) {
            Some(Route::Page)
        } else if is(&self.metrics) {
            Some(Route::Metrics)
        } else {
            None
        }
    }
}

/// The reverse proxy's upstreams as the status page's rows.
fn upstream_rows(proxy: &mpm_proxy::ReverseProxy) -> Vec<mpm_status::TableRow> {
    use mpm_status::Value::{Counter, Gauge};
    proxy
        .snapshot()
        .into_iter()
        .map(|u| mpm_status::TableRow {
            labels: vec![("route", u.route), ("upstream", u.url)],
            values: vec![
                ("up", Gauge(u64::from(u.up))),
                ("requests", Counter(u.requests)),
                ("failures", Counter(u.failures)),
                ("marked_down", Counter(u.marked_down)),
                ("marked_up", Counter(u.marked_up)),
                ("checks", Counter(u.checks)),
                ("checks_failed", Counter(u.checks_failed)),
                ("connections_opened", Counter(u.connections_opened)),
                ("connections_reused", Counter(u.connections_reused)),
                ("pool_idle", Gauge(u.pool_idle)),
            ],
        })
        .collect()
}

/// One worker's handler: the status page, then the reverse proxy's
/// routes (the longest prefix that matches), then the application's.
#[derive(Debug)]
pub(crate) struct Site<H> {
    status: StatusRoute,
    proxy: Option<mpm_proxy::Proxy>,
    app: H,
    /// `--internal`: answered 404 unless an internal redirect asks.
    internal: InternalPaths,
}

impl<H> Site<H> {
    pub(crate) fn new(
        status: StatusRoute,
        proxy: Option<mpm_proxy::Proxy>,
        app: H,
        internal: InternalPaths,
    ) -> Site<H> {
        Site {
            status,
            proxy,
            app,
            internal,
        }
    }

    /// The proxy, if one of its routes takes this request.
    fn proxy_for(&self, request: &Request<'_>) -> Option<&mpm_proxy::Proxy> {
        self.proxy.as_ref().filter(|p| p.takes(request))
    }
}

impl<H: HttpHandler> HttpHandler for Site<H> {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        if self.internal.refuses(request) {
            return Response::error(404);
        }
        match self.status.for_request(request) {
            Some(Route::Page) => self.status.status.handle(request),
            Some(Route::Metrics) => self.status.status.metrics(request),
            None => match self.proxy.as_mut().filter(|p| p.takes(request)) {
                Some(proxy) => proxy.handle(request),
                None => self.app.handle(request),
            },
        }
    }

    // `--internal` is asked in `handle` only, once a request: a refused
    // request is answered 404 there whatever these say (on a worker, or
    // with its body unread and the connection closed after).
    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        match self.status.for_request(request) {
            Some(_) => self.status.status.answers_without_blocking(request),
            None => match self.proxy_for(request) {
                Some(proxy) => proxy.answers_without_blocking(request),
                None => self.app.answers_without_blocking(request),
            },
        }
    }

    fn streams_body(&self, request: &Request<'_>) -> bool {
        // The status page reads no body: only the application streams.
        self.status.for_request(request).is_none()
            && match self.proxy_for(request) {
                Some(proxy) => proxy.streams_body(request),
                None => self.app.streams_body(request),
            }
    }

    fn awaits_body(&self, request: &Request<'_>) -> bool {
        self.status.for_request(request).is_none()
            && match self.proxy_for(request) {
                Some(proxy) => proxy.awaits_body(request),
                None => self.app.awaits_body(request),
            }
    }
}
