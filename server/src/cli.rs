//! Command-line parsing and the `serve` command.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use mpm_core::http::HttpFactory;
use mpm_core::process_manager::{Exit, ProcessManager, Sizing};
use mpm_core::scoreboard::Scoreboard;
use mpm_core::{
    Config, ConfigLayer, DefaultSite, Error, Lifecycle, Listener, Mpm, MpmKind, StaticFiles,
};

use crate::site::Site;

/// mpm: an HTTP server whose process model (prefork, worker, event) is chosen
/// at launch, and a bench to measure what each one costs.
#[derive(Debug, Parser)]
#[command(name = "mpm", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a document root (or the embedded welcome site) until SIGTERM or SIGINT.
    Serve(ServeArgs),
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

/// Run the command line; returns the process exit code.
pub(crate) fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
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
            eprintln!("mpm: {}", one_line(&e.to_string()));
            return 2;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => serve(args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("mpm: error: {e}");
            e.exit_code()
        }
    }
}

/// Clap's messages span lines (usage, tips); keep the one that names the problem.
fn one_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or("invalid arguments").trim();
    let mut line = first.to_string();
    // "invalid value 'x' for '--mpm <MPM>': unknown MPM ..." already says it all;
    // for unknown flags, add clap's suggestion when it made one.
    if let Some(tip) = message.lines().find(|l| l.trim_start().starts_with("tip:")) {
        line.push_str(" (");
        line.push_str(tip.trim().trim_start_matches("tip: "));
        line.push(')');
    }
    line
}

fn load(args: &ServeArgs) -> Result<Config, Error> {
    let file = match &args.config {
        Some(path) => ConfigLayer::from_file(path)?,
        None => ConfigLayer::default(),
    };
    Config::resolve(args.layer.clone().or(file))
}

fn site(config: &Config) -> Result<Site, Error> {
    Ok(match &config.docroot {
        Some(dir) => {
            Site::Files(StaticFiles::new(dir)?.in_memory_up_to(config.file_cache_max_size))
        }
        None => Site::Welcome(DefaultSite::new(config)),
    })
}

fn serve(args: ServeArgs) -> Result<(), Error> {
    let mut config = load(&args)?;
    let listeners = Listener::bind_all(&config.listen, config.backlog)?;
    loop {
        let site = site(&config)?;
        let exit = match config.mpm {
            MpmKind::Worker => run(mpm_worker::Worker, &config, site, &listeners)?,
            MpmKind::Prefork => run(
                mpm_prefork::Prefork::new(&config)?,
                &config,
                site,
                &listeners,
            )?,
            MpmKind::Event => run(mpm_event::Event, &config, site, &listeners)?,
        };
        if exit == Exit::Stopped {
            return Ok(());
        }
        // SIGHUP: read the configuration again; a bad one keeps the old.
        match load(&args) {
            Ok(new) => {
                if new.listen != config.listen || new.backlog != config.backlog {
                    eprintln!(
                        "mpm: restart: listening addresses change only with a full stop; \
                         keeping {:?}",
                        config.listen
                    );
                }
                config = Config {
                    listen: config.listen.clone(),
                    backlog: config.backlog,
                    ..new
                };
            }
            Err(e) => eprintln!("mpm: restart: {e}; keeping the previous configuration"),
        }
    }
}

/// Serve on `listeners` until stopped (or, under the process manager,
/// until SIGHUP asks for a restart).
fn run<M: Mpm>(mpm: M, config: &Config, site: Site, listeners: &[Listener]) -> Result<Exit, Error> {
    mpm.available()?;
    let fds =
        mpm_core::raise_fd_limit().map_err(|e| Error::io("raising the descriptor limit", e))?;
    if (fds as usize) < config.max_request_workers * 2 + 64 {
        eprintln!(
            "mpm: warning: only {fds} descriptors allowed; {} workers may need more (ulimit -n)",
            config.max_request_workers
        );
    }
    let lifecycle = Lifecycle::new()?;
    let what = match &config.docroot {
        Some(d) => format!("docroot {}", d.display()),
        None => "the embedded welcome site".to_string(),
    };
    for l in listeners {
        eprintln!(
            "mpm: {} MPM listening on http://{} serving {what}",
            mpm.kind(),
            l.local_addr()
        );
    }
    let per_process = match mpm.kind() {
        MpmKind::Prefork => 1,
        MpmKind::Worker => config.threads_per_child,
        // The listener thread answers requests too: it has a slot of its own.
        MpmKind::Event => config.threads_per_child + 1,
    };
    let scoreboard = Scoreboard::create(config.server_limit, per_process)?;
    let exit = if config.server_limit > 1 || mpm.kind() == MpmKind::Prefork {
        // A single-threaded master forks the serving processes: no thread
        // may start here before it does.
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
        let manager = ProcessManager::with_sizing(listeners, sizing, config.graceful_timeout);
        manager.run(&lifecycle, &|mine, child_lifecycle, process| {
            let site = site.clone();
            let factory = HttpFactory::new(config, move || site.clone());
            let slots = scoreboard.process_slots(process);
            mpm.run(config, mine, factory, child_lifecycle, slots)
        })?
    } else {
        lifecycle.stop_on_signals()?;
        let factory = HttpFactory::new(config, move || site.clone());
        let mine = listeners
            .iter()
            .map(Listener::try_clone)
            .collect::<Result<Vec<_>, _>>()?;
        mpm.run(
            config,
            mine,
            factory,
            &lifecycle,
            scoreboard.process_slots(0),
        )?;
        Exit::Stopped
    };
    if exit == Exit::Stopped {
        eprintln!("mpm: stopped");
    }
    Ok(exit)
}
