//! What every worker answers with: the status page at its path, and the
//! application's handler everywhere else.

use std::sync::Arc;

use mpm_core::scoreboard::Scoreboard;
use mpm_http::server_status::ServerStatus;
use mpm_http::{HttpHandler, Request, Response};

use crate::config::Config;

/// The status page, shared by every worker's [`Site`].
#[derive(Debug, Clone)]
pub(crate) struct StatusRoute {
    status: Option<(Arc<str>, ServerStatus)>,
}

impl StatusRoute {
    /// The status page `config` asks for, reading `scoreboard`.
    pub(crate) fn new(config: &Config, scoreboard: &'static Scoreboard) -> StatusRoute {
        let status = config.status_path.as_deref().map(|path| {
            (
                Arc::from(path),
                ServerStatus::new(scoreboard, config.mpm, config.status_remote),
            )
        });
        StatusRoute { status }
    }

    fn for_request(&self, request: &Request<'_>) -> Option<&ServerStatus> {
        match &self.status {
            Some((path, status)) if request.path() == &**path => Some(status),
            _ => None,
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
        if let Some(status) = self.status.for_request(request) {
            return status.handle(request);
        }
        self.app.handle(request)
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        if let Some(status) = self.status.for_request(request) {
            return status.answers_without_blocking(request);
        }
        self.app.answers_without_blocking(request)
    }

    fn streams_body(&self, request: &Request<'_>) -> bool {
        // The status page reads no body: only the application streams.
        self.status.for_request(request).is_none() && self.app.streams_body(request)
    }
}
