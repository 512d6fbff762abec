//! `mpm signal`, which reads the pid file `mpm serve --pid-file` writes
//! (`mpm_master::pid_file`) and signals the server as `apachectl -k` does.

use std::io;
use std::path::PathBuf;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use mpm_core::Error;
use mpm_master::pid_file::read_pid;

use crate::settings::TomlFile;

/// What to ask of a running server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Action {
    /// SIGTERM: stop now, closing every connection (nginx's -s stop).
    Stop,
    /// SIGHUP: restart, reading the configuration again.
    Restart,
    /// SIGHUP, as `restart`: what an nginx user types.
    Reload,
    /// SIGUSR1: graceful restart (new children at once, old ones finish).
    Graceful,
    /// SIGWINCH: graceful stop, requests in flight finishing within
    /// --graceful-timeout.
    GracefulStop,
    /// SIGUSR2: binary upgrade (a new master takes the listening sockets).
    Upgrade,
}

impl Action {
    fn signal(self) -> Signal {
        match self {
            Action::Stop => Signal::SIGTERM,
            Action::Restart | Action::Reload => Signal::SIGHUP,
            Action::Graceful => Signal::SIGUSR1,
            Action::GracefulStop => Signal::SIGWINCH,
            Action::Upgrade => Signal::SIGUSR2,
        }
    }
}

/// `mpm signal`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct SignalArgs {
    /// What to do: stop (SIGTERM), restart or reload (SIGHUP), graceful
    /// (SIGUSR1), graceful-stop (SIGWINCH) or upgrade (SIGUSR2).
    #[arg(value_enum)]
    action: Action,
    /// The pid file the server was started with (`mpm serve --pid-file`).
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Take the pid file from this settings file's `pid-file` key instead.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
}

/// The `pid-file` key of a settings file. Only that key is read: the file
/// may hold a program's own keys beside mpm's, which `signal` knows nothing of.
fn pid_file_of(config: &std::path::Path) -> Result<PathBuf, Error> {
    let fail = |m: String| Error::config(format!("config {}: {m}", config.display()));
    let text = std::fs::read_to_string(config).map_err(|e| fail(e.to_string()))?;
    let file = TomlFile::parse(&text).map_err(fail)?;
    file.layer([&"pid-file".to_string()])
        .map_err(fail)?
        .pid_file
        .ok_or_else(|| fail("no pid-file key; give --pid-file FILE".to_string()))
}

/// Send the action's signal to the pid in the pid file. A missing,
/// unreadable or malformed pid file is the user's to fix (exit 2); a pid
/// that names no process, or one we may not signal, is a failure (exit 1).
pub(crate) fn signal(args: SignalArgs) -> Result<(), Error> {
    let path = match (args.pid_file, &args.config) {
        (Some(p), _) => p,
        (None, Some(config)) => pid_file_of(config)?,
        (None, None) => {
            return Err(Error::config(
                "no pid file: give --pid-file FILE (as given to mpm serve)",
            ))
        }
    };
    let pid = read_pid(&path)?;
    let sig = args.action.signal();
    kill(Pid::from_raw(pid), sig).map_err(|e| {
        let context = format!(
            "sending {} to pid {pid} from {}",
            sig.as_str(),
            path.display()
        );
        if e == Errno::ESRCH {
            let stale = "no such process: is the server running, or is the pid file stale?";
            Error::io(context, io::Error::new(io::ErrorKind::NotFound, stale))
        } else {
            Error::io(context, e.into())
        }
    })
}
