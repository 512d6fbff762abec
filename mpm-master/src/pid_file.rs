//! The pid file: written by `mpm serve --pid-file` once the listeners are
//! bound, read by `mpm signal`, moved to `.oldbin` during an upgrade.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use mpm_core::Error;

/// The pid in a pid file: one positive decimal number, surrounding
/// whitespace allowed.
pub fn read_pid(path: &Path) -> Result<i32, Error> {
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
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Write this process's pid and a newline to `path`. The text goes to a
    /// temporary file renamed over `path`, so `mpm signal` never reads a
    /// half-written file.
    pub fn write(path: &Path) -> Result<PidFile, Error> {
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
