//! The command line: `serve`, `check`, `signal`, `bench` and `compare`, for the `mpm` binary and
//! for any program that embeds an [`App`] with [`main`].

use std::path::PathBuf;

use clap::builder::Resettable;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use std::sync::Arc;

use mpm_core::allocator::{self, AllocatorKind};
use mpm_core::scoreboard::Scoreboard;
use mpm_core::{
    ConnectionLedger, Error, HandOver, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind,
};
use mpm_http::access_log::AccessLog;
use mpm_http::HttpFactory;
use mpm_master::pid_file::PidFile;
use mpm_master::upgrade::{Inherited, ReadyReport, UpgradeSpec};
use mpm_master::{Exit, ProcessManager, Sizing};
use mpm_prefork::AcceptMutex;

use crate::app::{App, Identity, NoSettings, Settings, STATIC_SITE_SETTINGS};
use crate::settings::{Config, ConfigLayer, CpuAffinity, TomlFile};
use crate::signal_command::SignalArgs;
use crate::site::{Site, StatusRoute};

/// mpm: an HTTP server whose process model (prefork, worker, event, uring) is chosen
/// at launch, and a bench to measure what each one costs.
#[derive(Debug, Parser)]
#[command(name = "mpm", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve until SIGTERM or SIGINT (stop now) or SIGWINCH (stop gracefully).
    Serve(Box<ServeArgs>),
    /// Check the configuration (flags and file) and exit: 0 if it is good,
    /// 2 with one line saying what is wrong, as `apachectl configtest`.
    Check(Box<ServeArgs>),
    /// Signal a running server through its pid file, as `apachectl -k` does.
    Signal(SignalArgs),
    /// Load an HTTP server (wrk's and ab's job): latency percentiles, statuses, errors.
    #[cfg(feature = "bench")]
    Bench(Box<mpm_bench::bench::BenchArgs>),
    /// Measure each MPM × allocator (or an experiment's variants) under the same
    /// loads, and write a report with charts.
    #[cfg(feature = "bench")]
    Compare(Box<mpm_bench::compare::CompareArgs>),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Read settings from a TOML file whose keys are these flags' names;
    /// flags given on the command line win.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    #[command(flatten)]
    layer: ConfigLayer,
}

/// Run the command line with `app` as what every worker serves; returns the
/// process exit code, for `std::process::exit`.
///
/// ```no_run
/// use mpm::prelude::*;
///
/// struct Hello;
/// impl HttpHandler for Hello {
///     fn handle(&mut self, _req: &Request<'_>) -> Response {
///         Response::new(200).body("hello\n")
///     }
/// }
///
/// fn main() {
///     // `serve --mpm event`, `check`, `signal`: the whole `mpm` command line.
///     std::process::exit(mpm::main(|| Hello));
/// }
/// ```
pub fn main<A: App>(app: A) -> i32 {
    let identity = app.identity();
    command_line(&HttpApp {
        server: identity.server.to_string(),
        identity,
        app: Arc::new(app),
    })
}

/// Like [`main`], for a protocol other than HTTP: every worker runs a
/// [`ConnectionHandler`](mpm_core::ConnectionHandler) made by `factory`
/// (there is no status page). `mpm-core`'s `line_echo` example, under any
/// MPM, is `std::process::exit(mpm::serve_protocol(|| LineEcho))`.
pub fn serve_protocol<F: HandlerFactory + Clone>(factory: F) -> i32 {
    command_line(&Protocol(factory))
}

/// What `serve` runs in every worker.
trait Service {
    /// The factory every worker calls.
    type Factory: HandlerFactory;
    /// The program's own settings.
    type Settings: Settings;
    /// Who the program is.
    fn identity(&self) -> Identity;
    /// Its defaults for mpm's settings.
    fn defaults(&self) -> ConfigLayer;
    /// mpm's settings it has no use for.
    fn hides(&self) -> &'static [&'static str];
    /// Check a configuration (once, before anything is bound or forked).
    fn check(&self, config: &Config, settings: &Self::Settings) -> Result<(), Error>;
    /// The factory for a run with this configuration, scoreboard, access
    /// log and TLS counters (for the status page).
    fn factory(
        &self,
        config: &Config,
        settings: &Self::Settings,
        scoreboard: &'static Scoreboard,
        access_log: Option<&Arc<AccessLog>>,
        tls: Option<mpm_tls::Stats>,
        proxy: Option<&mpm_proxy::ReverseProxy>,
    ) -> Self::Factory;
    /// Is the protocol HTTP (ALPN `http/1.1`, plain HTTP on a TLS port
    /// answered 400)?
    fn is_http(&self) -> bool;
    /// The URL scheme and a few words on what is served, for the log.
    fn describe(&self, config: &Config) -> (&'static str, String);
    /// The loads `compare` measures it with by default.
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
    fn workloads(&self) -> Vec<mpm_bench::Workload>;
}

/// An HTTP application, with the status page in front of it.
struct HttpApp<A> {
    app: Arc<A>,
    identity: Identity,
    server: String,
}

/// How a worker makes its handler in an [`HttpApp`].
type MakeSite<H> = Box<dyn Fn() -> Site<H> + Send + Sync>;

impl<A: App> Service for HttpApp<A> {
    type Factory = HttpFactory<MakeSite<A::Handler>>;
    type Settings = A::Settings;

    fn identity(&self) -> Identity {
        self.identity.clone()
    }

    fn defaults(&self) -> ConfigLayer {
        self.app.defaults()
    }

    fn hides(&self) -> &'static [&'static str] {
        self.app.hides()
    }

    fn check(&self, config: &Config, settings: &A::Settings) -> Result<(), Error> {
        self.app.check(config, settings)
    }

    fn describe(&self, config: &Config) -> (&'static str, String) {
        let mut what = self.app.describe(config);
        // The proxy's routes come first: the application serves the rest.
        for route in &config.proxy {
            let urls: Vec<&str> = route.upstreams.iter().map(|u| u.url.as_str()).collect();
            what.push_str(&format!(
                ", proxying {} to {}",
                route.prefix,
                urls.join(",")
            ));
        }
        ("http://", what)
    }

    fn is_http(&self) -> bool {
        true
    }

    fn workloads(&self) -> Vec<mpm_bench::Workload> {
        self.app.workloads()
    }

    fn factory(
        &self,
        config: &Config,
        settings: &A::Settings,
        scoreboard: &'static Scoreboard,
        access_log: Option<&Arc<AccessLog>>,
        tls: Option<mpm_tls::Stats>,
        proxy: Option<&mpm_proxy::ReverseProxy>,
    ) -> Self::Factory {
        let status = StatusRoute::new(config, scoreboard, tls, proxy);
        let (app, for_workers) = (Arc::clone(&self.app), config.clone());
        let settings = settings.clone();
        let proxy = proxy.cloned();
        let internal = crate::internal::InternalPaths::new(&config.internal);
        // Each worker's proxy (the first in a process starts its health
        // checker and makes its connection pool: after the fork).
        let make: MakeSite<A::Handler> = Box::new(move || {
            Site::new(
                status.clone(),
                proxy.as_ref().map(|p| p.worker()),
                app.handler(&for_workers, &settings),
                internal.clone(),
            )
        });
        let mut http = config.http_settings();
        http.server = self.server.clone();
        HttpFactory::new(http, make).access_log(access_log.cloned())
    }
}

/// A bare protocol's handler factory.
struct Protocol<F>(F);

impl<F: HandlerFactory + Clone> Service for Protocol<F> {
    type Factory = F;
    type Settings = NoSettings;

    fn identity(&self) -> Identity {
        Identity::of_binary()
    }

    fn defaults(&self) -> ConfigLayer {
        ConfigLayer::default()
    }

    fn hides(&self) -> &'static [&'static str] {
        STATIC_SITE_SETTINGS
    }

    fn check(&self, _config: &Config, _settings: &NoSettings) -> Result<(), Error> {
        Ok(())
    }

    fn is_http(&self) -> bool {
        false
    }

    fn factory(
        &self,
        _config: &Config,
        _settings: &NoSettings,
        _scoreboard: &'static Scoreboard,
        _access_log: Option<&Arc<AccessLog>>,
        _tls: Option<mpm_tls::Stats>,
        _proxy: Option<&mpm_proxy::ReverseProxy>,
    ) -> F {
        self.0.clone()
    }

    fn describe(&self, _config: &Config) -> (&'static str, String) {
        ("", "a protocol handler".to_string())
    }

    fn workloads(&self) -> Vec<mpm_bench::Workload> {
        Vec::new()
    }
}

fn command_line<S: Service>(service: &S) -> i32 {
    let me = service.identity();
    mpm_core::error_log::set_program(&me.name);
    // mpm's error log is the `log` facade's logger: an application's
    // `log::warn!` lines join mpm's, in its format (a logger the program
    // installed first is kept).
    mpm_core::error_log::install();
    let hidden = service.hides();
    let about = if me.about.is_empty() {
        format!("{}: an HTTP service built on mpm", me.name)
    } else {
        me.about.to_string()
    };
    let heading = format!("Options of {}", me.name);
    let mut command = Cli::command()
        .name(me.name.to_string())
        .bin_name(me.name.to_string())
        .version(me.version.to_string())
        .about(about);
    if let Some(clash) = clash::<S::Settings>() {
        eprintln!("{}: {clash}", me.name);
        return 2;
    }
    for sub in ["serve", "check"] {
        command = command.mut_subcommand(sub, |c| shape::<S::Settings>(c, hidden, &heading));
    }
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = loop {
        match command.try_get_matches_from_mut(&argv) {
            // Each retry joins two words into one: it ends.
            Err(e) => match negative_value(&argv, &e) {
                Some(joined) => argv = joined,
                None => break Err(e),
            },
            ok => break ok,
        }
    };
    let matches = match parsed {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return 0;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
                return 2;
            }
            eprintln!("{}: {}", me.name, one_line(&e));
            return 2;
        }
    };
    let result = Cli::from_arg_matches(&matches)
        .map_err(|e| Error::config(one_line(&e)))
        .and_then(|cli| {
            let sub = matches.subcommand().map(|(_, m)| m);
            match cli.command {
                Command::Serve(args) => {
                    let run = Invocation::new(*args, sub, service, &me.name)?;
                    serve(run, service).map(|()| 0)
                }
                Command::Check(args) => {
                    let run = Invocation::new(*args, sub, service, &me.name)?;
                    check(&run, service).map(|()| 0)
                }
                Command::Signal(args) => crate::signal_command::signal(args).map(|()| 0),
                #[cfg(feature = "bench")]
                Command::Bench(args) => mpm_bench::bench::command(&args),
                #[cfg(feature = "bench")]
                Command::Compare(args) => mpm_bench::compare::command(&args, &service.workloads()),
            }
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}: error: {e}", me.name);
            e.exit_code()
        }
    }
}

/// The first of the application's settings named like one of mpm's (or
/// `--config`), as the one line that refuses it: the two would be one flag
/// and one file key.
fn clash<T: clap::Args>() -> Option<String> {
    let own = T::augment_args(clap::Command::new("settings"));
    let names: Vec<String> = own
        .get_arguments()
        .map(|a| {
            a.get_long()
                .map_or_else(|| flag_name(a.get_id().as_str()), str::to_string)
        })
        .collect();
    names
        .iter()
        .find(|n| *n == "config" || crate::settings::SETTINGS.iter().any(|s| s.name() == **n))
        .map(|n| format!("the application's setting --{n} has the name of mpm's --{n}; rename it"))
}

/// `serve` and `check` as this program has them: its own settings after
/// mpm's, under a heading of their own, and mpm's that do not apply hidden.
/// The commands keep their own description: clap would take the settings
/// struct's doc comment for it.
fn shape<T: clap::Args>(c: clap::Command, hidden: &[&str], heading: &str) -> clap::Command {
    let (about, long_about) = (c.get_about().cloned(), c.get_long_about().cloned());
    let mut c = T::augment_args(c.next_help_heading(heading.to_string()))
        .about(about.map_or(Resettable::Reset, Resettable::Value))
        .long_about(long_about.map_or(Resettable::Reset, Resettable::Value));
    for flag in hidden {
        let id = flag.replace('-', "_");
        if c.get_arguments().any(|a| a.get_id() == id.as_str()) {
            c = c.mut_arg(id, |a| a.hide(true));
        }
    }
    c
}

/// The flag (and file key) name of an argument id: `max_keys` is `max-keys`.
fn flag_name(id: &str) -> String {
    id.replace('_', "-")
}

/// A `serve` or `check` as given: mpm's flags and the file's path, and the
/// program's own settings with what it needs to merge them with the file's.
struct Invocation<T> {
    args: ServeArgs,
    /// The program's settings from the command line (and the flags' defaults).
    settings: T,
    /// Its settings' names (as flags and file keys), and those given on the
    /// command line, which the file does not override.
    keys: Vec<String>,
    given: Vec<String>,
    /// mpm's settings the program hides.
    hidden: &'static [&'static str],
    defaults: ConfigLayer,
    name: String,
}

impl<T: Settings> Invocation<T> {
    fn new<S: Service<Settings = T>>(
        args: ServeArgs,
        matches: Option<&ArgMatches>,
        service: &S,
        name: &str,
    ) -> Result<Invocation<T>, Error> {
        let matches = matches.ok_or_else(|| Error::config("no subcommand"))?;
        let settings = T::from_arg_matches(matches).map_err(|e| Error::config(one_line(&e)))?;
        let own = T::augment_args(clap::Command::new("settings"));
        let keys: Vec<String> = own
            .get_arguments()
            .map(|a| flag_name(a.get_id().as_str()))
            .collect();
        let given = own
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
            .map(flag_name)
            .collect();
        let hidden = service.hides();
        for flag in hidden {
            let id = flag.replace('-', "_");
            if matches.try_get_raw(&id).is_ok()
                && matches.value_source(&id) == Some(ValueSource::CommandLine)
            {
                return Err(Error::config(format!("--{flag}: not a setting of {name}")));
            }
        }
        // The file's keys reach the settings through serde: its names must
        // be the flags'.
        if let Ok(table) = toml::Table::try_from(&settings) {
            if let Some(k) = table.keys().find(|k| !keys.contains(k)) {
                return Err(Error::config(format!(
                    "{name}'s settings: key `{k}` is not one of its flags' names \
                     (derive Deserialize with #[serde(rename_all = \"kebab-case\")])"
                )));
            }
        }
        Ok(Invocation {
            args,
            settings,
            keys,
            given,
            hidden,
            defaults: service.defaults(),
            name: name.to_string(),
        })
    }

    /// Read the file (if any) and merge: the command line over the file,
    /// over the program's defaults, over mpm's.
    fn load(&self) -> Result<(Config, T), Error> {
        self.load_noting(&mut Vec::new())
    }

    /// [`load`](Self::load), with the notices the error log is to carry
    /// about the merge pushed to `notes`: what the command line replaced
    /// that the reader of the file may not expect (its `[[proxy]]` tables).
    fn load_noting(&self, notes: &mut Vec<String>) -> Result<(Config, T), Error> {
        let Some(path) = &self.args.config else {
            let config = Config::resolve(self.args.layer.clone().or(self.defaults.clone()))?;
            return Ok((config, self.settings.clone()));
        };
        let fail = |m: String| Error::config(format!("config {}: {m}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let file = TomlFile::parse(&text).map_err(fail)?;
        let mut own = toml::Table::new();
        let mut mpm = Vec::new();
        for (key, value) in &file.table {
            if self.hidden.contains(&key.as_str()) {
                return Err(fail(format!(
                    "line {}: `{key}` is not a setting of {}",
                    file.line(key),
                    self.name
                )));
            }
            if self.keys.contains(key) {
                own.insert(key.clone(), value.clone());
            } else {
                mpm.push(key);
            }
        }
        let file_layer = file.layer(mpm).map_err(fail)?;
        // A flag wins over the file: `--proxy` replaces every route of the
        // file, which would otherwise be silently unused.
        let (flag_routes, file_routes) = (self.args.layer.proxy.len(), file_layer.proxy.len());
        if flag_routes > 0 && file_routes > 0 {
            notes.push(format!(
                "mpm: --proxy given: the {file_routes} [[proxy]] {} of {} {} not used",
                if file_routes == 1 { "route" } else { "routes" },
                path.display(),
                if file_routes == 1 { "is" } else { "are" },
            ));
        }
        let config = Config::resolve(
            self.args
                .layer
                .clone()
                .or(file_layer)
                .or(self.defaults.clone()),
        )?;
        if own.is_empty() {
            return Ok((config, self.settings.clone()));
        }
        // The program's settings from the command line (and its flags'
        // defaults), with the file's keys over them, except those given on
        // the command line. Read from the file's parsed document, so that a
        // bad value's error carries its span, and so its line.
        let ours = toml::to_string(&self.settings)
            .map_err(|e| fail(format!("{}'s settings: {e}", self.name)))?;
        let parse = |t| toml::de::DeTable::parse(t).map_err(|e| fail(e.message().to_string()));
        let mut merged = parse(&ours)?.into_inner();
        let document = parse(&text)?;
        let mut from_file = Vec::new();
        for (key, value) in document.get_ref().iter() {
            let name = key.get_ref().to_string();
            if own.contains_key(&name) && !self.given.contains(&name) {
                from_file.push((value.span(), name));
                merged.insert(key.clone(), value.clone());
            }
        }
        let merged = toml::Spanned::new(0..0, toml::de::DeValue::Table(merged));
        let settings = T::deserialize(toml::de::ValueDeserializer::from(merged)).map_err(|e| {
            let msg = e.message().trim().replace('\n', " ");
            let at = e.span().and_then(|at| {
                from_file
                    .iter()
                    .find(|(value, _)| value.start <= at.start && at.end <= value.end)
            });
            match at {
                Some((_, key)) => fail(format!("line {}: {key}: {msg}", file.line(key))),
                None => fail(msg),
            }
        })?;
        Ok((config, settings))
    }
}

/// A value that starts with `-` and a digit, not a number (`--keepalive-timeout
/// -5s`, `--listen -1.2.3.4`), is taken by clap for a flag of its own:
/// "unexpected argument '-5' found", which names neither the setting nor
/// what it takes. Given such an error, the command line with that value
/// joined to its flag (`--keepalive-timeout=-5s`), which clap hands to the
/// flag's parser whatever the value's first letter, so that the setting's
/// own check speaks; `None` for any other error.
fn negative_value(argv: &[std::ffi::OsString], e: &clap::Error) -> Option<Vec<std::ffi::OsString>> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unknown)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let digit_after_dash = |t: &str| {
        t.strip_prefix('-')
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
    };
    if !digit_after_dash(unknown) {
        return None;
    }
    // The value as given (clap names only its first letters), and the flag
    // before it.
    let at = argv.iter().position(|a| {
        a.to_str()
            .is_some_and(|a| a.starts_with(unknown.as_str()) && digit_after_dash(a))
    })?;
    let flag = argv.get(at.checked_sub(1)?)?.to_str()?;
    if !flag.starts_with("--") || flag.contains('=') || flag == "--" {
        return None;
    }
    let mut joined: Vec<std::ffi::OsString> = argv[..at - 1].to_vec();
    joined.push(format!("{flag}={}", argv[at].to_str()?).into());
    joined.extend(argv[at + 1..].iter().cloned());
    Some(joined)
}

/// Clap's messages span lines (usage, tips); keep one line that names the
/// problem with its useful part: the missing arguments' names (and the
/// usage), the valid values, and clap's suggestion, or ours when it has
/// none ("did you mean").
fn one_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let message = e.to_string();
    let mut lines = message.lines();
    let first = lines.next().unwrap_or("invalid arguments").trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let mut line = format!("error: {first}");
    // "the following required arguments were not provided:" lists them on
    // the lines below, indented.
    if first.ends_with(':') {
        let missing: Vec<&str> = lines
            .clone()
            .map(str::trim_end)
            .take_while(|l| l.starts_with("  "))
            .map(str::trim)
            .collect();
        if !missing.is_empty() {
            line.push(' ');
            line.push_str(&missing.join(", "));
        }
    }
    let valid = match e.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(v)) => v.clone(),
        _ => Vec::new(),
    };
    if !valid.is_empty() {
        line.push_str(&format!(" (expected {})", valid.join(", ")));
    }
    if let Some(tip) = message.lines().find(|l| l.trim_start().starts_with("tip:")) {
        line.push_str(" (");
        line.push_str(tip.trim().trim_start_matches("tip: "));
        line.push(')');
    } else if let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidValue) {
        if let Some(guess) = crate::settings::did_you_mean(bad, valid.iter().map(String::as_str)) {
            line.push_str(&format!(" (did you mean '{guess}'?)"));
        }
    }
    if let Some(usage) = message
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .filter(|_| first.contains("not provided"))
    {
        line.push_str(&format!(" (usage: {usage})"));
    }
    line
}

/// A new scoreboard sized for `config`.
fn scoreboard(config: &Config) -> Result<&'static Scoreboard, Error> {
    Scoreboard::create(config.server_limit, config.slots_per_process())
}

/// `--mpm uring` where io_uring is refused: the one line saying why, and
/// what to use instead.
fn uring_refused(config: &Config) -> Result<(), Error> {
    if config.mpm != MpmKind::Uring {
        return Ok(());
    }
    mpm_uring::available()
        .map(drop)
        .map_err(|e| Error::config(format!("--mpm uring: {e}")))
}

/// The reverse proxy of `config`'s routes (none without routes, or for a
/// protocol that is not HTTP): its upstreams' host names resolved and CA
/// files loaded, as `serve` makes it and `check` tries it.
fn reverse_proxy(config: &Config, is_http: bool) -> Result<Option<mpm_proxy::ReverseProxy>, Error> {
    match (&config.proxy[..], is_http) {
        ([], _) | (_, false) => Ok(None),
        (routes, true) => mpm_proxy::ReverseProxy::new(routes.to_vec(), config.proxy_pools())
            .map(Some)
            .map_err(|e| Error::config(format!("--proxy: {e}"))),
    }
}

fn check<S: Service>(run: &Invocation<S::Settings>, service: &S) -> Result<(), Error> {
    let (config, settings) = run.load()?;
    service.check(&config, &settings)?;
    // Whichever model is chosen, say whether uring could run here (after
    // the verdict on the configuration; instead of it, when uring is the
    // model chosen and it cannot run).
    let uring = match mpm_uring::available() {
        Ok(f) => format!("{}: uring available here: {}", run.name, f.describe()),
        Err(e) => format!("{}: uring not available here: {e}", run.name),
    };
    let refused = uring_refused(&config);
    if refused.is_err() {
        out(&uring);
    }
    refused?;
    // Every certificate loaded as `serve` would: readable, the key matching,
    // in date; then its names and expiry.
    let certs = match config.tls_settings(service.is_http()) {
        Some(tls) => mpm_tls::CertStore::load(&tls.certs)?,
        None => mpm_tls::CertStore::empty(),
    };
    // The proxy's upstreams resolved and their CA files loaded as `serve`
    // would.
    reverse_proxy(&config, service.is_http())?;
    let mut listen: Vec<String> = config.listen.iter().map(ToString::to_string).collect();
    listen.extend(config.listen_tls.iter().map(|a| format!("https://{a}")));
    out(format_args!(
        "{}: configuration OK: {} MPM, server-limit {}, threads-per-child {}, listening on {}",
        run.name,
        config.mpm,
        config.server_limit,
        config.threads_per_child,
        listen.join(", ")
    ));
    out(&uring);
    for cert in certs.certs() {
        out(format_args!(
            "{}: certificate {}",
            run.name,
            cert.describe()
        ));
    }
    Ok(())
}

/// `text` and a newline on standard output. A reader that went away
/// (`| head -1`) ends what it reads, not this program: the error is
/// dropped, where `println!` would panic.
fn out(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn serve<S: Service>(given: Invocation<S::Settings>, service: &S) -> Result<(), Error> {
    let mut notes = Vec::new();
    let (mut config, mut settings) = given.load_noting(&mut notes)?;
    mpm_core::error_log::set_level(config.log_level);
    service.check(&config, &settings)?;
    uring_refused(&config)?;
    run_again_if_needed(&config)?;
    // TLS: the sessions every process shares are made once (before any
    // fork, kept across restarts); the certificates with each configuration.
    let mut sessions = None;
    let mut tls = make_tls(&config, service.is_http(), &mut sessions)?;
    // Opened here, by the process that binds, before any fork or --user.
    let mut logs = Logs::open(&config)?;
    for note in notes.drain(..) {
        mpm_core::log_notice!("{note}");
    }
    // The binary a SIGUSR2 upgrade starts: the path this one was started
    // from, read now, while it names this binary (once a new one is moved
    // over it, /proc/self/exe names the deleted old file).
    let started_as = std::env::current_exe()
        .map_err(|e| Error::io("finding this program's path for upgrades", e))?;
    // Sockets passed by an upgrading master, then by systemd (socket
    // activation), come first; with --reuseport the master only reserves
    // the addresses, and each prefork child listens on a socket of its own.
    let mut ready_report = None;
    // Plain addresses first, then TLS ones: the order a binary upgrade
    // hands them over in, which says which is which.
    let all: Vec<std::net::SocketAddr> = config
        .listen
        .iter()
        .chain(&config.listen_tls)
        .copied()
        .collect();
    let mut names: Option<Vec<String>> = None;
    let mut hand_over = None;
    let listeners = if let Some(mut inherited) = Inherited::from_env()? {
        hand_over = inherited.hand_over.take();
        let (listeners, report) = inherited.into_parts();
        mpm_core::log_notice!(
            "mpm: upgrade: serving on {} listening sockets passed by the old master \
             (--listen is not used)",
            listeners.len()
        );
        ready_report = Some(report);
        listeners
    } else if let Some((inherited, fd_names)) = systemd_listeners()? {
        names = fd_names;
        mpm_core::log_notice!(
            "mpm: serving on {} listening sockets passed by systemd (--listen is not used)",
            inherited.len()
        );
        inherited
    } else if config.reuseport {
        Listener::reserve_all(&all)?
    } else {
        Listener::bind_all(&all, config.backlog)?
    };
    let tls_listeners = tls_listeners(&config, &listeners, names.as_deref());
    // How one generation passes the next the connections it holds that have
    // not sent a byte: shared with the old master after an upgrade.
    let hand_over = match hand_over {
        Some(h) => h,
        None => HandOver::new()?,
    };
    // Written by the first `run`; removed when `serve` returns.
    let mut pid_file = None;
    // Mapped once: a restart lays it out again for the new configuration.
    let scoreboard = scoreboard(&config)?;
    // As many seats as there could be processes: a restart may change them.
    let ledger = Some(ConnectionLedger::create(scoreboard.slots().len())?);
    loop {
        let site = (service, &settings, scoreboard, &logs);
        let tls_run = (tls.as_ref(), &tls_listeners);
        let pid = &mut pid_file;
        let upgrade = Upgrade {
            spec: UpgradeSpec {
                binary: config
                    .upgrade_binary
                    .clone()
                    .unwrap_or_else(|| started_as.clone()),
                args: std::env::args_os().skip(1).collect(),
                pid_file: config.pid_file.clone(),
                ready_timeout: config.upgrade_timeout,
                hand_over: Some(hand_over.try_clone()?),
            },
            // Only the first run reports to the master that started this one.
            report: ready_report.take(),
        };
        let listeners = (&listeners[..], &hand_over, ledger, upgrade);
        let exit = match config.mpm {
            MpmKind::Worker => run(mpm_worker::Worker, &config, site, listeners, tls_run, pid)?,
            MpmKind::Prefork => run(
                // With --reuseport each child listens on a socket of its
                // own, so no two children wait on one socket: no mutex.
                mpm_prefork::Prefork::new(if config.reuseport {
                    AcceptMutex::None
                } else {
                    config.accept_mutex
                })?,
                &config,
                site,
                listeners,
                tls_run,
                pid,
            )?,
            MpmKind::Event => run(mpm_event::Event, &config, site, listeners, tls_run, pid)?,
            MpmKind::Uring => run(mpm_uring::Uring, &config, site, listeners, tls_run, pid)?,
        };
        if exit == Exit::Upgraded {
            mpm_core::log_notice!("mpm: upgrade done: the new master serves; this one exits");
            return Ok(());
        }
        if exit == Exit::Stopped {
            return Ok(());
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Reloading]);
        // SIGHUP: read the configuration again; a bad one keeps the old.
        // The logs are opened again too (rotation, or a new path).
        notes.clear();
        let reloaded = given
            .load_noting(&mut notes)
            .and_then(|(new, own)| service.check(&new, &own).map(|()| (new, own)))
            .and_then(|(new, own)| {
                make_tls(&new, service.is_http(), &mut sessions).map(|t| (new, own, t))
            })
            .and_then(|(new, own, t)| Logs::open(&new).map(|logs| (new, own, t, logs)));
        match reloaded {
            Ok((new, own, new_tls, new_logs)) => {
                logs = new_logs;
                for note in notes.drain(..) {
                    mpm_core::log_notice!("{note}");
                }
                tls = new_tls;
                settings = own;
                mpm_core::error_log::set_level(new.log_level);
                if new.listen != config.listen
                    || new.listen_tls != config.listen_tls
                    || new.backlog != config.backlog
                {
                    mpm_core::log_warn!(
                        "mpm: restart: listening addresses change only with a full stop; \
                         keeping {:?}",
                        config.listen
                    );
                }
                let mut new = Config {
                    listen: config.listen.clone(),
                    listen_tls: config.listen_tls.clone(),
                    backlog: config.backlog,
                    ..new
                };
                if !scoreboard.reuse(new.server_limit, new.slots_per_process()) {
                    mpm_core::log_warn!(
                        "mpm: restart: the new configuration needs {} × {} scoreboard slots, more \
                         than the {} made at start; the number of processes and workers grows \
                         only with a full stop: keeping --mpm {}, --server-limit {}, \
                         --threads-per-child {} and --max-request-workers {}",
                        new.server_limit,
                        new.slots_per_process(),
                        scoreboard.slots().len(),
                        config.mpm,
                        config.server_limit,
                        config.threads_per_child,
                        config.max_request_workers
                    );
                    new.mpm = config.mpm;
                    new.server_limit = config.server_limit;
                    new.threads_per_child = config.threads_per_child;
                    new.max_request_workers = config.max_request_workers;
                    let _ = scoreboard.reuse(new.server_limit, new.slots_per_process());
                }
                config = new;
            }
            Err(e) => {
                mpm_core::log_error!("mpm: restart: {e}; keeping the previous configuration");
                // The same layout, its slots cleared for the new set.
                let _ = scoreboard.reuse(config.server_limit, config.slots_per_process());
            }
        }
    }
}

/// How a run upgrades on SIGUSR2, and reports to the master that started
/// it (if one did).
struct Upgrade {
    spec: UpgradeSpec,
    report: Option<ReadyReport>,
}

/// Serve on `listeners` until stopped (or, under the process manager,
/// until SIGHUP asks for a restart or SIGUSR2 for an upgrade). Writes the
/// pid file into `pid_file` unless an earlier run has.
fn run<M: Mpm, S: Service>(
    mpm: M,
    config: &Config,
    (service, own, scoreboard, logs): (&S, &S::Settings, &'static Scoreboard, &Logs),
    (listeners, hand_over, ledger, upgrade): (
        &[Listener],
        &HandOver,
        Option<ConnectionLedger>,
        Upgrade,
    ),
    (tls, tls_listeners): (Option<&Arc<mpm_tls::Tls>>, &mpm_tls::TlsListeners),
    pid_file: &mut Option<PidFile>,
) -> Result<Exit, Error> {
    let fds =
        mpm_master::raise_fd_limit().map_err(|e| Error::io("raising the descriptor limit", e))?;
    if (fds as usize) < config.max_request_workers * 2 + 64 {
        mpm_core::log_warn!(
            "mpm: warning: only {fds} descriptors allowed; {} workers may need more (ulimit -n)",
            config.max_request_workers
        );
    }
    let lifecycle = Lifecycle::new()?;
    // HTTP/2's counters, in memory every serving process shares.
    if config.http2 || config.h2c {
        mpm_http::install_h2_stats()?;
    }
    // The reverse proxy's routes, with their host names resolved and their
    // health and counters in memory every serving process shares: made
    // before any fork, again for each configuration read.
    let proxy = reverse_proxy(config, service.is_http())?;
    // A graceful restart reopens the logs and loads the certificates again
    // (renewed in place): the new generation hands them out, the old one
    // finishes its connections with what they have.
    let reopen = &|| {
        logs.reopen("graceful restart");
        reload_certificates(tls, "graceful restart");
    };
    let upgrading = upgrade.report.is_some();
    // Every server has a master, as httpd's and nginx's do: it forks the
    // serving processes (one, with --server-limit 1), replaces any that die,
    // and turns SIGHUP, SIGUSR1 and SIGUSR2 into restarts and upgrades.
    // Made now, so its signal handlers are in place before the pid file and
    // the `listening on` lines tell anyone the server is up.
    let sizing = match mpm.kind() {
        MpmKind::Prefork => Sizing::Spare {
            start: config.start_servers,
            min_spare: config.min_spare,
            max_spare: config.max_spare,
            max: config.server_limit,
            scoreboard,
        },
        _ => Sizing::Fixed(config.server_limit),
    };
    let manager = ProcessManager::with_sizing(listeners, sizing, config.graceful_timeout)?
        .on_graceful_restart(reopen)
        .upgrade_with(upgrade.spec)
        .drain_first(config.drain_delay, scoreboard);
    let manager = match upgrade.report {
        Some(report) => manager.report_ready(report.and_then(|| {
            let _ = sd_notify::notify(
                false,
                &[
                    sd_notify::NotifyState::Ready,
                    sd_notify::NotifyState::MainPid(std::process::id()),
                ],
            );
        })),
        None => manager,
    };
    // Before the `listening on` lines, so that whoever waits for them finds it.
    if let (None, Some(path)) = (&*pid_file, &config.pid_file) {
        *pid_file = Some(PidFile::write(path)?);
    }
    mpm_core::log_notice!("mpm: {} MPM: {}", mpm.kind(), describe_processes(config));
    let (scheme, what) = service.describe(config);
    let allocator = mpm_core::allocator::active().map_or("program's own", |k| k.name());
    for l in listeners {
        let scheme = match (tls_listeners.is_tls(l.local_addr()), service.is_http()) {
            (false, _) => scheme,
            (true, true) => "https://",
            (true, false) => "tls://",
        };
        mpm_core::log_notice!(
            "mpm: {} MPM listening on {scheme}{} serving {what} with the {allocator} allocator",
            mpm.kind(),
            l.local_addr()
        );
    }
    let tls_stats = tls.map(|t| t.stats());
    let wrap = |factory| mpm_tls::TlsFactory::new(factory, tls.cloned(), tls_listeners.clone());
    // For systemd's Type=notify: up (the listeners queue connections from
    // here). A new master after an upgrade says so once its children serve,
    // naming itself the main process (the unit needs NotifyAccess=all).
    if !upgrading {
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    }
    let settings = config.mpm_settings();
    // Event and uring processes sharing the listeners keep a ledger of the
    // connections each holds (mapped once, before any fork), to spread
    // them evenly.
    let ledger = ledger.filter(|_| {
        matches!(mpm.kind(), MpmKind::Event | MpmKind::Uring)
            && !config.reuseport
            && config.server_limit > 1
    });
    // A single-threaded master forks the serving processes: no thread may
    // start here before it does.
    let exit = manager.run(&lifecycle, &|mine, child_lifecycle, process| {
        // Before any thread starts: they all inherit the mask.
        pin(config, process)?;
        // The master keeps root (to bind again on restart); children serve
        // as --user. With --reuseport a child (prefork, event) binds a
        // socket of its own first, and drops right after.
        let mut mine = if config.reuseport {
            let sockets = mine
                .iter()
                .map(|l| Listener::bind_reuseport(l.local_addr(), config.backlog))
                .collect::<Result<Vec<_>, _>>()?;
            mpm_master::drop_privileges(config.run_as)?;
            sockets
        } else {
            mpm_master::drop_privileges(config.run_as)?;
            mine
        };
        // Connections an older generation hands over arrive here, taken like
        // any other.
        mine.push(Listener::hand_over(hand_over.try_clone()?));
        let factory = wrap(service.factory(
            config,
            own,
            scoreboard,
            logs.access.as_ref(),
            tls_stats,
            proxy.as_ref(),
        ));
        let slots = scoreboard.process_slots(process);
        let settings = mpm_core::MpmSettings {
            ledger: ledger.and_then(|l| l.seat(process, config.server_limit)),
            ..settings.clone()
        };
        let served = mpm.run(&settings, mine, factory, child_lifecycle, slots);
        mpm_http::access_log::flush_all();
        served
    })?;
    if exit == Exit::Stopped {
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
        mpm_core::log_notice!("mpm: stopped");
    }
    Ok(exit)
}

/// The start-up line's account of the serving processes: how many, and why.
fn describe_processes(config: &Config) -> String {
    let n = config.server_limit;
    let count = if config.mpm == MpmKind::Prefork {
        format!(
            "{} serving processes at start, up to {n}, under a master (--start-servers, \
             --server-limit)",
            config.start_servers.min(n)
        )
    } else {
        let why = if config.server_limit_auto {
            format!(
                "--server-limit auto: one per CPU this server may use, {n} by its affinity \
                 mask and CPU quota"
            )
        } else {
            format!("--server-limit {n}")
        };
        let processes = if n == 1 { "process" } else { "processes" };
        format!("{n} serving {processes} under a master ({why})")
    };
    match config.cpu_affinity {
        CpuAffinity::Auto => format!("{count}; each pinned to one CPU (--cpu-affinity auto)"),
        CpuAffinity::Off => count,
    }
}

/// Pin serving process `process` to its CPU, if `--cpu-affinity auto`.
fn pin(config: &Config, process: usize) -> Result<(), Error> {
    if config.cpu_affinity == CpuAffinity::Auto {
        let cpu = mpm_master::cpus::pin_to_cpu(process)?;
        mpm_core::log_info!(
            "mpm: serving process {} (number {process}) runs on CPU {cpu}",
            std::process::id()
        );
    }
    Ok(())
}

/// Listening sockets passed by systemd (`LISTEN_FDS`, from fd 3 on), if
/// any, with their names (`FileDescriptorName=`, from `LISTEN_FDNAMES`).
#[allow(clippy::type_complexity)]
fn systemd_listeners() -> Result<Option<(Vec<Listener>, Option<Vec<String>>)>, Error> {
    let names = std::env::var("LISTEN_FDNAMES")
        .ok()
        .map(|n| n.split(':').map(str::to_string).collect());
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Ok(None);
    }
    let mut listeners = Vec::with_capacity(fds.len());
    for i in 0..fds.len() {
        let socket = fds
            .take_tcp_listener(i)
            .map_err(|e| Error::io(format!("socket {i} passed by systemd"), e))?
            .ok_or_else(|| {
                Error::config(format!(
                    "socket {i} passed by systemd is not a TCP listener"
                ))
            })?;
        listeners.push(Listener::from_std(socket)?);
    }
    Ok(Some((listeners, names)))
}

/// The TLS of `config`, for a protocol that is HTTP or not: the sessions
/// every process shares are made the first time, the certificates loaded
/// every time. `None` without TLS listeners.
fn make_tls(
    config: &Config,
    http: bool,
    sessions: &mut Option<mpm_tls::Sessions>,
) -> Result<Option<Arc<mpm_tls::Tls>>, Error> {
    let Some(settings) = config.tls_settings(http) else {
        return Ok(None);
    };
    let shared = match sessions {
        Some(s) => s,
        None => sessions.insert(mpm_tls::Sessions::new(&settings)?),
    };
    Ok(Some(Arc::new(mpm_tls::Tls::new(&settings, shared)?)))
}

/// Which of `listeners` serve TLS. Bound here: the TLS addresses come after
/// the plain ones. Handed over by an old master: in the same order, when
/// there are as many as configured. Passed by systemd: those named `https`
/// or `tls` (`FileDescriptorName=`), and those on a `--listen-tls` address.
fn tls_listeners(
    config: &Config,
    listeners: &[Listener],
    names: Option<&[String]>,
) -> mpm_tls::TlsListeners {
    let plain = config.listen.len();
    let positional = names.is_none() && listeners.len() == plain + config.listen_tls.len();
    mpm_tls::TlsListeners::new(listeners.iter().enumerate().map(|(i, l)| {
        let addr = l.local_addr();
        let named = names
            .and_then(|n| n.get(i))
            .is_some_and(|n| n == "https" || n == "tls");
        let listed = config.listen_tls.iter().any(|t| {
            *t == addr || (t.ip().is_unspecified() && t.port() == addr.port() && t.port() != 0)
        });
        (
            addr,
            if positional {
                i >= plain
            } else {
                named || listed
            },
        )
    }))
}

/// Load the certificates again; one that does not load keeps those in
/// force, and says so in one line.
fn reload_certificates(tls: Option<&Arc<mpm_tls::Tls>>, why: &str) {
    let Some(tls) = tls else {
        return;
    };
    match tls.reload() {
        Ok(()) => mpm_core::log_notice!("mpm: {why}: TLS certificates loaded again"),
        Err(e) => mpm_core::log_error!("mpm: {why}: {e}; keeping the certificates in force"),
    }
}

/// The allocator is fixed at a process's first allocation, and glibc reads
/// its tunables when a process starts: when the configuration asks for a
/// different allocator, or for prefork with glibc's malloc, run this program
/// again with the environment set (before anything is bound).
///
/// For prefork, glibc's per-thread cache is turned off
/// (`GLIBC_TUNABLES=glibc.malloc.tcache_count=0`, unless `GLIBC_TUNABLES` is
/// already set): it keeps the master's freed chunks scattered over its heap,
/// and every child's first allocations then take them, copying a page each.
/// Without it a child's share of memory (PSS) is about a fifth smaller
/// (86 KiB per idle connection against 106, in one run of `bench/peers.py`
/// quoted in docs/benchmarks.md); a prefork child is single-threaded, and
/// serving a cached page allocates three times, so the cache gains it little.
fn run_again_if_needed(config: &Config) -> Result<(), Error> {
    let mut env: Vec<(&str, &str)> = Vec::new();
    let active = allocator::active();
    if let Some(want) = config.allocator {
        match active {
            None => {
                return Err(Error::config(
                    "--allocator needs mpm::MpmAllocator as the program's \
                     #[global_allocator]",
                ))
            }
            Some(have) if have != want => env.push((allocator::ENV, want.name())),
            Some(_) => {}
        }
    }
    let system_malloc =
        config.allocator.or(active).unwrap_or(AllocatorKind::System) != AllocatorKind::Mimalloc;
    if cfg!(target_env = "gnu")
        && config.mpm == MpmKind::Prefork
        && system_malloc
        && std::env::var_os("GLIBC_TUNABLES").is_none()
    {
        env.push(("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0"));
    }
    if env.is_empty() {
        return Ok(());
    }
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("finding this program to run it again", e))?;
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .envs(env)
        .exec();
    Err(Error::io("running this program again", err))
}

/// The logs of a run: opened by the process that binds, reopened for rotation.
#[derive(Debug, Clone)]
struct Logs {
    access: Option<Arc<AccessLog>>,
    error: Option<PathBuf>,
}

impl Logs {
    /// Open what `config` asks for; a path that cannot be opened is one line
    /// and exit 2.
    fn open(config: &Config) -> Result<Logs, Error> {
        if let Some(path) = &config.error_log {
            mpm_core::error_log::redirect(path)?;
        }
        Ok(Logs {
            access: match &config.access_log {
                Some(path) => Some(AccessLog::open_path(
                    path,
                    config.log_format,
                    config.log_write,
                    config.log_buffer,
                    // Prefork children stay single-threaded: no flusher thread.
                    config.mpm != MpmKind::Prefork,
                )?),
                None => None,
            },
            error: config.error_log.clone(),
        })
    }

    /// Open the files again (they were moved away to rotate them); on
    /// failure the old files are written on.
    fn reopen(&self, why: &str) {
        if let Some(path) = &self.error {
            if let Err(e) = mpm_core::error_log::redirect(path) {
                mpm_core::log_error!("mpm: {why}: {e}; the error log stays where it was");
            }
        }
        if let Some(log) = &self.access {
            match log.reopen() {
                Ok(()) => {
                    mpm_core::log_info!("mpm: {why}: access log {} reopened", log.path().display())
                }
                Err(e) => {
                    mpm_core::log_error!("mpm: {why}: {e}; still writing to the file it had")
                }
            }
        }
    }
}
