//! What an embedding program hands to [`main`](crate::main): how to make the
//! handler every worker runs.

use parking_lot::Mutex;

use mpm_bench::Workload;
use mpm_core::Error;
use mpm_http::{DefaultSite, Dotfiles, HttpHandler, Request, Response, StaticFiles};

use crate::config::Config;

/// An application: the [`HttpHandler`] each worker runs, and how to make it.
///
/// # When things are called
///
/// * [`check`](Self::check) runs once in the master (or the only process),
///   after the configuration is read and before anything is bound or forked;
///   an error there is the command's one-line error and exit code 2. Build
///   what every worker will read here (or before calling `main`): in prefork
///   it is then shared copy-on-write by every child.
/// * [`handler`](Self::handler) runs once per worker: after `fork()` in each
///   prefork child, and once per thread in worker and event (the event
///   listener thread has one too). Whatever it builds is that worker's alone:
///   a database connection, a cache, a counter, without locks. Never share
///   such a thing made before fork: a socket or a lock would then be shared
///   by processes that do not know it.
///
/// Any `Fn() -> H` closure (or function, such as `MyApp::new`) is an
/// application whose handler ignores the configuration.
///
/// # What a handler may do
///
/// Block (on disk, a database, a sleep): the MPM's workers absorb it. Panic:
/// that request gets a 500, the worker goes on. Report that it never blocks
/// for some requests with [`HttpHandler::answers_without_blocking`]: the
/// event MPM then answers them on its listener thread, with no hand-off.
pub trait App: Send + Sync + 'static {
    /// The handler each worker runs.
    type Handler: HttpHandler + 'static;

    /// Check the configuration and prepare shared state; see the type docs.
    fn check(&self, config: &Config) -> Result<(), Error> {
        let _ = config;
        Ok(())
    }

    /// Make one worker's handler.
    fn handler(&self, config: &Config) -> Self::Handler;

    /// A few words on what is served, for the start-up log.
    fn describe(&self, config: &Config) -> String {
        let _ = config;
        "the application".to_string()
    }

    /// The loads `myapp compare` measures this application with when it
    /// is given none (`--workload FILE`, `--scenario get:/path`): its own
    /// endpoints, with the statuses each should answer, so that the
    /// comparison of process models is of *this* code. Each is checked when
    /// compare starts (a bad one is a one-line error). None by default:
    /// `myapp compare` then measures compare's own static files.
    ///
    /// ```
    /// use mpm::{Workload, WorkloadRequest};
    /// # struct Shop;
    /// # impl mpm::mpm_http::HttpHandler for Shop {
    /// #     fn handle(&mut self, _: &mpm::mpm_http::Request<'_>) -> mpm::mpm_http::Response {
    /// #         mpm::mpm_http::Response::new(200)
    /// #     }
    /// # }
    /// # struct App;
    /// # impl mpm::App for App {
    /// #     type Handler = Shop;
    /// #     fn handler(&self, _: &mpm::Config) -> Shop { Shop }
    /// fn workloads(&self) -> Vec<Workload> {
    ///     vec![Workload::new("browse")
    ///         .request(WorkloadRequest::get("/items/7").weight(9).expect(&[200]))
    ///         .request(WorkloadRequest::post("/items", r#"{"name":"lamp"}"#).expect(&[201]))]
    /// }
    /// # }
    /// ```
    fn workloads(&self) -> Vec<Workload> {
        Vec::new()
    }
}

impl<F, H> App for F
where
    F: Fn() -> H + Send + Sync + 'static,
    H: HttpHandler + 'static,
{
    type Handler = H;

    fn handler(&self, _config: &Config) -> H {
        self()
    }
}

/// The application of the `mpm` binary itself: `--docroot` served by
/// [`StaticFiles`], or the embedded welcome site when there is none.
///
/// The files handler is made once (in [`App::check`]) and cloned for every
/// worker, so all the workers of a process share one open-file cache.
#[derive(Debug, Default)]
pub struct StaticSite {
    made: Mutex<Option<(Config, SiteContent)>>,
}

/// The handler [`StaticSite`] gives each worker.
#[derive(Debug, Clone)]
pub enum SiteContent {
    /// `--docroot DIR`.
    Files(StaticFiles),
    /// No docroot: the embedded welcome page.
    Welcome(DefaultSite),
}

impl SiteContent {
    fn new(config: &Config) -> Result<SiteContent, Error> {
        Ok(match &config.docroot {
            Some(dir) => SiteContent::Files(
                StaticFiles::new(dir)?
                    .in_memory_up_to(config.file_cache_max_size)
                    .serve_dotfiles(config.dotfiles == Dotfiles::Allow),
            ),
            None => SiteContent::Welcome(DefaultSite::new(&config.about())),
        })
    }
}

impl App for StaticSite {
    type Handler = SiteContent;

    fn check(&self, config: &Config) -> Result<(), Error> {
        let content = SiteContent::new(config)?;
        *self.made.lock() = Some((config.clone(), content));
        Ok(())
    }

    fn describe(&self, config: &Config) -> String {
        match &config.docroot {
            Some(d) => format!("docroot {}", d.display()),
            None => "the embedded welcome site".to_string(),
        }
    }

    fn handler(&self, config: &Config) -> SiteContent {
        let mut made = self.made.lock();
        match &*made {
            Some((for_config, content)) if for_config == config => content.clone(),
            _ => {
                // Not checked with this configuration: make it now, falling
                // back to the welcome page if the docroot went away.
                let content = SiteContent::new(config)
                    .unwrap_or_else(|_| SiteContent::Welcome(DefaultSite::new(&config.about())));
                *made = Some((config.clone(), content.clone()));
                content
            }
        }
    }
}

impl HttpHandler for SiteContent {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        match self {
            SiteContent::Files(f) => f.handle(request),
            SiteContent::Welcome(w) => w.handle(request),
        }
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        match self {
            SiteContent::Files(f) => f.answers_without_blocking(request),
            SiteContent::Welcome(w) => w.answers_without_blocking(request),
        }
    }
}
