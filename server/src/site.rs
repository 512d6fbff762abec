//! What `mpm serve` answers with: a document root, or the welcome site.

use mpm_core::http::{HttpHandler, Request, Response};
use mpm_core::{DefaultSite, StaticFiles};

/// The handler `mpm serve` runs in every worker.
#[derive(Debug, Clone)]
pub(crate) enum Site {
    /// `--docroot DIR`.
    Files(StaticFiles),
    /// No docroot: the embedded welcome page.
    Welcome(DefaultSite),
}

impl HttpHandler for Site {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        match self {
            Site::Files(f) => f.handle(request),
            Site::Welcome(w) => w.handle(request),
        }
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        match self {
            Site::Files(f) => f.answers_without_blocking(request),
            Site::Welcome(w) => w.answers_without_blocking(request),
        }
    }
}
