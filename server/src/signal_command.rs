//! The pid file `mpm serve --pid-file` writes, and `mpm signal`, which
//! reads it and signals the server as `apachectl -k` does.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use mpm_core::{ConfigLayer, Error};

/// What to ask of a running server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Action {
    /// SIGTERM: stop, finishing requests in flight within --graceful-timeout.
    Stop,
    /// SIGHUP: restart.
    Restart,
    /// SIGUSR1: graceful restart (new children at once, old ones finish).
    Graceful,
    /// SIGWINCH: graceful stop.
    GracefulStop,
    /// SIGUSR2: binary upgrade (a new master takes the listening sockets).
    Upgrade,
}

impl Action {
    fn signal(self) -> Signal {
        match self {
            Action::Stop => Signal::SIGTERM,
            Action::Restart => Signal::SIGHUP,
            Action::Graceful => Signal::SIGUSR1,
            Action::GracefulStop => Signal::SIGWINCH,
            Action::Upgrade => Signal::SIGUSR2,
        }
    }
}

/// `mpm signal`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct SignalArgs {
    /// What to do: stop (SIGTERM), restart (SIGHUP), graceful (SIGUSR1),
    /// graceful-stop (SIGWINCH) or upgrade (SIGUSR2).
    #[arg(value_enum)]
    action: Action,
    /// The pid file the server was started with (`mpm serve --pid-file`).
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Take the pid file from this settings file's `pid-file` key instead.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
}

/// Send the action's signal to the pid in the pid file. A missing,
/// unreadable or malformed pid file is the user's to fix (exit 2); a pid
/// that names no process, or one we may not signal, is a failure (exit 1).
pub(crate) fn signal(args: SignalArgs) -> Result<(), Error> {
    let path = match (args.pid_file, &args.config) {
        (Some(p), _) => p,
        (None, Some(config)) => ConfigLayer::from_file(config)?.pid_file.ok_or_else(|| {
            Error::config(format!(
                "config {}: no pid-file key; give --pid-file FILE",
                config.display()
            ))
        })?,
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

/// The pid in a pid file: one positive decimal number, surrounding
/// whitespace allowed.
fn read_pid(path: &Path) -> Result<i32, Error> {
    let text =
        fs::read(path).map_err(|e| Error::config(format!("pid file {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&text);
    let trimmed = text.trim();
    match trimmed.parse::<i32>() {
        // Zero and negative pids would signal process groups, never one server.
        Ok(pid) if pid > 0 => Ok(pid),
        _ => {
            let shown: String = trimmed.chars().take(40).collect();
            Err(Error::config(format!(
                "pid file {}: {shown:?} is not a process id",
                path.display()
            )))
        }
    }
}

/// A pid file written by this process, removed when dropped: at a clean
/// exit, or any error return, of the process that wrote it.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Write this process's pid and a newline to `path`. The text goes to a
    /// temporary file renamed over `path`, so `mpm signal` never reads a
    /// half-written file.
    pub(crate) fn write(path: &Path) -> Result<PidFile, Error> {
        let pid = std::process::id();
        let fail = |e: io::Error| Error::config(format!("--pid-file {}: {e}", path.display()));
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{pid}.tmp"));
        let tmp = PathBuf::from(tmp);
        fs::write(&tmp, format!("{pid}\n")).map_err(fail)?;
        if let Err(e) = fs::rename(&tmp, path) {
            let _ = fs::remove_file(&tmp);
            return Err(fail(e));
        }
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // A forked child that unwinds through here must leave the master's
        // file alone; so must anyone after another server took the file over.
        if std::process::id() != self.pid {
            return;
        }
        let ours = fs::read_to_string(&self.path)
            .is_ok_and(|t| t.trim().parse::<u32>().ok() == Some(self.pid));
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("mpm-signal-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_pid_file_holds_our_pid_and_goes_away_when_dropped() {
        let path = temp("pid");
        let file = PidFile::write(&path).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
        assert_eq!(read_pid(&path).unwrap(), std::process::id() as i32);
        drop(file);
        assert!(!path.exists());
    }

    #[test]
    fn garbage_zero_and_negative_pids_are_refused_in_one_line() {
        let path = temp("garbage");
        for text in ["", "abc\n", "0\n", "-1\n", "12 34\n", "99999999999\n"] {
            fs::write(&path, text).unwrap();
            let err = read_pid(&path).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{text:?}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
        fs::write(&path, " 42 \n").unwrap();
        assert_eq!(read_pid(&path).unwrap(), 42);
        let _ = fs::remove_file(&path);
        assert_eq!(read_pid(&path).unwrap_err().exit_code(), 2);
    }
}
