//! What `mpm serve` answers with: the status page at its path, and a
//! document root or the welcome site everywhere else.

use std::sync::Arc;

use mpm_core::http::{HttpHandler, Request, Response};
use mpm_core::scoreboard::Scoreboard;
use mpm_core::server_status::ServerStatus;
use mpm_core::{Config, DefaultSite, Error, StaticFiles};

/// The handler `mpm serve` runs in every worker. Cheap to clone: each
/// worker gets a copy sharing the file cache and the scoreboard.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// The status page and its path, unless `--status-path off`.
    status: Option<(Arc<str>, ServerStatus)>,
    content: Content,
}

#[derive(Debug, Clone)]
enum Content {
    /// `--docroot DIR`.
    Files(StaticFiles),
    /// No docroot: the embedded welcome page.
    Welcome(DefaultSite),
}

impl Site {
    /// The site `config` asks for, its status page reading `scoreboard`.
    pub(crate) fn new(config: &Config, scoreboard: &'static Scoreboard) -> Result<Site, Error> {
        let content = match &config.docroot {
            Some(dir) => {
                Content::Files(StaticFiles::new(dir)?.in_memory_up_to(config.file_cache_max_size))
            }
            None => Content::Welcome(DefaultSite::new(config)),
        };
        let status = config.status_path.as_deref().map(|path| {
            (
                Arc::from(path),
                ServerStatus::new(scoreboard, config.mpm, config.status_remote),
            )
        });
        Ok(Site { status, content })
    }

    fn status_for(&self, request: &Request<'_>) -> Option<&ServerStatus> {
        match &self.status {
            Some((path, status)) if request.path() == &**path => Some(status),
            _ => None,
        }
    }
}

impl HttpHandler for Site {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        if let Some(status) = self.status_for(request) {
            return status.handle(request);
        }
        match &mut self.content {
            Content::Files(f) => f.handle(request),
            Content::Welcome(w) => w.handle(request),
        }
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        if let Some(status) = self.status_for(request) {
            return status.answers_without_blocking(request);
        }
        match &self.content {
            Content::Files(f) => f.answers_without_blocking(request),
            Content::Welcome(w) => w.answers_without_blocking(request),
        }
    }
}
