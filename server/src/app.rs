//! What an embedding program hands to [`main`](crate::main): who it is, its
//! own settings, and how to make the handler every worker runs.

use std::borrow::Cow;

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use mpm_bench::Workload;
use mpm_core::Error;
use mpm_http::{HttpHandler, Request, Response};
use mpm_site::{DefaultSite, Dotfiles, StaticFiles};

use crate::settings::{Config, ConfigLayer};

/// An application: who it is, its own settings, and the [`HttpHandler`]
/// each worker runs.
///
/// # When things are called
///
/// * [`identity`](Self::identity), [`defaults`](Self::defaults) and
///   [`hides`](Self::hides) shape the command line before it is parsed.
/// * [`check`](Self::check) runs in the master (or the only process), after
///   the configuration is read and before anything is bound or forked, and
///   again on every reload (SIGHUP); an error there is the command's
///   one-line error and exit code 2. Build what every worker will read here:
///   in prefork it is then shared copy-on-write by every child. State that
///   every process must *write* goes in shared memory made here
///   ([`mpm_core::shared`]), once (a reload must not make it anew).
/// * [`handler`](Self::handler) runs once per worker: after `fork()` in each
///   prefork child, and once per thread in worker and event (the event
///   listener thread has one too). Whatever it builds is that worker's alone:
///   a database connection, a cache, a counter, without locks. Never share
///   such a thing made before fork: a socket or a lock would then be shared
///   by processes that do not know it.
///
/// Any `Fn() -> H` closure (or function, such as `MyApp::new`) is an
/// application with no settings of its own whose handler ignores the
/// configuration.
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

    /// The application's own settings: flags in `serve --help` and `check
    /// --help`, and keys of the TOML file, beside mpm's ([`Settings`]);
    /// [`NoSettings`] for none.
    type Settings: Settings;

    /// The program's name, version, description and `Server` field (the
    /// default: this binary's file name, and mpm's version).
    fn identity(&self) -> Identity {
        Identity::of_binary()
    }

    /// Defaults of mpm's own settings for this application, where they
    /// differ from mpm's (`status_path: Some("off".into())`, a keep-alive
    /// timeout): under the file and the command line, over mpm's defaults.
    fn defaults(&self) -> ConfigLayer {
        ConfigLayer::default()
    }

    /// mpm's settings that mean nothing to this application, by flag name:
    /// left out of `--help`, and refused (one line, exit 2) on the command
    /// line and in the file. The default: the static site's
    /// ([`STATIC_SITE_SETTINGS`]).
    fn hides(&self) -> &'static [&'static str] {
        STATIC_SITE_SETTINGS
    }

    /// Check the configuration and the application's settings, and
    /// prepare shared state; see the type docs.
    fn check(&self, config: &Config, settings: &Self::Settings) -> Result<(), Error> {
        let _ = (config, settings);
        Ok(())
    }

    /// Make one worker's handler.
    fn handler(&self, config: &Config, settings: &Self::Settings) -> Self::Handler;

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
    /// use mpm::prelude::*;
    /// # struct Shop;
    /// # impl HttpHandler for Shop {
    /// #     fn handle(&mut self, _: &Request<'_>) -> Response {
    /// #         Response::new(200)
    /// #     }
    /// # }
    /// # struct MyApp;
    /// # impl App for MyApp {
    /// #     type Handler = Shop;
    /// #     type Settings = NoSettings;
    /// #     fn handler(&self, _: &Config, _: &NoSettings) -> Shop { Shop }
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

/// mpm's settings that belong to the static site (`mpm serve --docroot`):
/// what [`App::hides`] hides by default.
pub const STATIC_SITE_SETTINGS: &[&str] = &[
    "docroot",
    "dotfiles",
    "file-cache-max-size",
    "sendfile",
    "sendfile-max-chunk",
    "precompressed",
    "gzip",
    "gzip-types",
    "gzip-level",
    "gzip-min-length",
    "autoindex",
    "error-page",
    "expires",
];

/// An application's own settings: a struct deriving `clap::Args` (its flags,
/// with their help and defaults) and serde's `Serialize` and `Deserialize`
/// with `#[serde(rename_all = "kebab-case")]` (its keys in the TOML file,
/// named as the flags are). The command line wins over the file, and the
/// file over the flags' defaults; the merged value is checked in
/// [`App::check`] and handed to every worker's [`App::handler`].
///
/// Its flags share one command line and one file with mpm's: a setting
/// named like one of mpm's (`timeout`, `backlog`, `user`, `gzip`, or
/// `config`) is refused when the program starts, in one line naming both
/// (`the application's setting --timeout has the name of mpm's --timeout;
/// rename it`), exit code 2. Name it for the application (`kv-timeout`).
/// The struct's doc comment is not shown: `serve` and `check` keep their
/// own description in `--help`.
///
/// ```
/// #[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
/// #[serde(rename_all = "kebab-case")]
/// struct KvSettings {
///     /// Most keys the store holds.
///     #[arg(long, value_name = "N", default_value_t = 1024)]
///     max_keys: usize,
/// }
/// fn takes<S: mpm::Settings>() {}
/// takes::<KvSettings>();
/// ```
pub trait Settings:
    clap::Args + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

impl<T> Settings for T where
    T: clap::Args + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

/// The settings of an application that has none of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
pub struct NoSettings {}

/// Who the program is: the name `--help`, `--version` and every log line
/// show, its version and description, and the `Server` field of its
/// responses.
///
/// [`identity!`](crate::identity) fills it from the calling crate's
/// `Cargo.toml`:
///
/// ```
/// let me = mpm::identity!().server("kv");
/// assert_eq!(me.name, "mpm"); // this doctest is built as the `mpm` package
/// assert_eq!(me.server, "kv");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The program's name.
    pub name: Cow<'static, str>,
    /// Its version, as `--version` prints it.
    pub version: Cow<'static, str>,
    /// One line on what it is, for `--help`.
    pub about: Cow<'static, str>,
    /// The `Server` field of every response whose handler sets none
    /// (empty: no `Server` field); `NAME/VERSION` unless changed.
    pub server: Cow<'static, str>,
}

impl Identity {
    /// A program of this name and version (`Server: NAME/VERSION`).
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
    ) -> Identity {
        let (name, version) = (name.into(), version.into());
        Identity {
            server: format!("{name}/{version}").into(),
            name,
            version,
            about: Cow::Borrowed(""),
        }
    }

    /// With this description.
    pub fn about(mut self, about: impl Into<Cow<'static, str>>) -> Identity {
        self.about = about.into();
        self
    }

    /// With this `Server` field (empty: none).
    pub fn server(mut self, server: impl Into<Cow<'static, str>>) -> Identity {
        self.server = server.into();
        self
    }

    /// The running binary's file name, with mpm's version: what a program
    /// that does not say who it is gets.
    pub fn of_binary() -> Identity {
        let name = std::env::args_os()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "mpm".to_string());
        let version = format!("(built on mpm {})", env!("CARGO_PKG_VERSION"));
        let server = format!("{name} mpm/{}", env!("CARGO_PKG_VERSION"));
        Identity::new(name, version).server(server)
    }

    /// The `mpm` binary's own.
    pub fn mpm() -> Identity {
        Identity::new("mpm", env!("CARGO_PKG_VERSION")).about(
            "mpm: an HTTP server whose process model (prefork, worker, event, uring) is chosen \
             at launch, and a bench to measure what each one costs.",
        )
    }
}

/// The calling crate's [`Identity`], from its `Cargo.toml`: package name,
/// version and description.
///
/// ```
/// // In an application: `fn identity(&self) -> mpm::Identity { mpm::identity!() }`.
/// let me = mpm::identity!();
/// assert_eq!((&*me.name, &*me.version), ("mpm", env!("CARGO_PKG_VERSION")));
/// assert_eq!(me.server, format!("mpm/{}", env!("CARGO_PKG_VERSION")));
/// ```
#[macro_export]
macro_rules! identity {
    () => {
        $crate::Identity::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
            .about(env!("CARGO_PKG_DESCRIPTION"))
    };
}

impl<F, H> App for F
where
    F: Fn() -> H + Send + Sync + 'static,
    H: HttpHandler + 'static,
{
    type Handler = H;
    type Settings = NoSettings;

    fn handler(&self, _config: &Config, _settings: &NoSettings) -> H {
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
                    .serve_dotfiles(config.dotfiles == Dotfiles::Allow)
                    .precompressed(config.precompressed)
                    .gzip(config.gzip.clone())
                    .autoindex(config.autoindex)
                    .expires(config.expires.clone()),
            ),
            None => SiteContent::Welcome(DefaultSite::new(&config.about())),
        })
    }
}

impl App for StaticSite {
    type Handler = SiteContent;
    type Settings = NoSettings;

    fn identity(&self) -> Identity {
        Identity::mpm()
    }

    fn hides(&self) -> &'static [&'static str] {
        &[]
    }

    fn check(&self, config: &Config, _settings: &NoSettings) -> Result<(), Error> {
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

    fn handler(&self, config: &Config, _settings: &NoSettings) -> SiteContent {
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
