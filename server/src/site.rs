//! What every worker answers with: the status page and the metrics at their
//! paths, and the application's handler everywhere else.

use std::sync::Arc;

use mpm_core::scoreboard::Scoreboard;
use mpm_http::{HttpHandler, Request, Response};
use mpm_status::ServerStatus;

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
    ) -> StatusRoute {
        let mut status = ServerStatus::new(scoreboard, config.mpm, config.status_remote);
        if let Some(stats) = tls {
            status = status.with_section("tls", Arc::new(move || stats.snapshot()));
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

/// One worker's handler: the status page, then the application's.
#[derive(Debug)]
pub(crate) struct Site<H> {
    status: StatusRoute,
    app: H,
}

impl<H> Site<H> {
    pub(crate) fn new(status: StatusRoute, app: H) -> Site<H> {
        Site { status, app }
    }
}

impl<H: HttpHandler> HttpHandler for Site<H> {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        match self.status.for_request(request) {
            Some(Route::Page) => self.status.status.handle(request),
            Some(Route::Metrics) => self.status.status.metrics(request),
            None => self.app.handle(request),
        }
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        match self.status.for_request(request) {
            Some(_) => self.status.status.answers_without_blocking(request),
            None => self.app.answers_without_blocking(request),
        }
    }

    fn streams_body(&self, request: &Request<'_>) -> bool {
        // The status page reads no body: only the application streams.
        self.status.for_request(request).is_none() && self.app.streams_body(request)
    }
}
