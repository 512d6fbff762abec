//! The error log: leveled lines on stderr (or `--error-log FILE`), each
//! prefixed as httpd's are: `[Mon Nov 30 20:32:29.123456 2026] [warn] [pid 42] mpm: ...`.
//!
//! The level is set once at start-up ([`set_level`], `--log-level`) and read
//! with one relaxed load per message. As in httpd, `notice` lines (start,
//! stop, restarts) are written whatever the level, so `--log-level error`
//! hides warnings but never the server's own life story.
//!
//! Use the macros: [`log_error!`](crate::log_error), [`log_warn!`](crate::log_warn),
//! [`log_notice!`](crate::log_notice), [`log_info!`](crate::log_info),
//! [`log_debug!`](crate::log_debug).

use std::fmt;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// How much the error log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something is wrong but serving goes on (httpd's default level).
    #[default]
    Warn,
    /// The server's life: listening, stopping, restarts. Always written.
    Notice,
    /// Routine events worth knowing (logs reopened).
    Info,
    /// Details for debugging.
    Debug,
}

impl LogLevel {
    /// The name used on the command line and in the log.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Notice => "notice",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }

    fn from_u8(v: u8) -> LogLevel {
        match v {
            0 => LogLevel::Error,
            1 => LogLevel::Warn,
            2 => LogLevel::Notice,
            3 => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }
}

impl crate::Choice for LogLevel {
    const ALL: &'static [Self] = &[
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Notice,
        LogLevel::Info,
        LogLevel::Debug,
    ];

    fn name(self) -> &'static str {
        LogLevel::name(self)
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Warn as u8);

/// Set the level of this process (and of the children it forks from now on).
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// The level in force.
pub fn level() -> LogLevel {
    LogLevel::from_u8(LEVEL.load(Ordering::Relaxed))
}

/// Would a message at `level` be written?
pub fn enabled(level: LogLevel) -> bool {
    level == LogLevel::Notice || level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// The program's name, when it is not `mpm` (a program embedding it).
static PROGRAM: OnceLock<String> = OnceLock::new();

/// Name the program: every line a layer writes as `mpm: ...` then starts
/// with this name instead. Set once, at start-up, before any fork.
pub fn set_program(name: &str) {
    let _ = PROGRAM.set(name.to_string());
}

/// The program's name, as its log lines start (`mpm` unless set).
pub fn program() -> &'static str {
    PROGRAM.get().map_or("mpm", String::as_str)
}

/// Write one line at `level`, if enabled; the macros call this.
pub fn write(level: LogLevel, message: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    // Every layer words its lines `mpm: ...`; an embedding program's own
    // name goes in its place.
    let renamed;
    let message: &dyn fmt::Display = match PROGRAM.get() {
        Some(name) if name != "mpm" => {
            let text = message.to_string();
            renamed = match text.strip_prefix("mpm:") {
                Some(rest) => format!("{name}:{rest}"),
                None => text,
            };
            &renamed
        }
        _ => &message,
    };
    let line = format!(
        "[{}] [{}] [pid {}] {message}\n",
        error_log_time(),
        level.name(),
        std::process::id()
    );
    if EXPECTING.load(Ordering::Relaxed) > 0 && kept(&line) {
        return;
    }
    // One write(2) for the whole line, so that processes never interleave
    // inside it; a full or closed stderr loses the line and nothing else.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Patterns of lines expected by [`expect`] guards alive now, with the
/// lines each kept.
static EXPECTED: Mutex<Vec<(u64, &'static str, Vec<String>)>> = Mutex::new(Vec::new());
/// How many guards are alive: a message pays one relaxed load when none is.
static EXPECTING: AtomicUsize = AtomicUsize::new(0);
static NEXT_GUARD: AtomicU64 = AtomicU64::new(0);

/// Keep `line` for the first guard whose pattern it contains.
fn kept(line: &str) -> bool {
    // Bounded: in a child forked while another thread held the lock, the
    // line is written rather than waited on for ever.
    let Some(mut guards) = EXPECTED.try_lock_for(Duration::from_millis(100)) else {
        return false;
    };
    match guards.iter_mut().find(|(_, p, _)| line.contains(p)) {
        Some((_, _, lines)) => {
            lines.push(line.trim_end().to_string());
            true
        }
        None => false,
    }
}

/// Lines this process logs that contain `pattern` are kept by the guard
/// (and not written) while it lives: for code that provokes a line on
/// purpose, a test above all, and then asserts it, so that expected errors
/// do not scroll past looking like failures. Other lines are written as
/// ever.
///
/// ```
/// let panics = mpm_core::error_log::expect("handler panicked");
/// mpm_core::log_error!("mpm: handler panicked on GET /boom; answered 500");
/// assert_eq!(panics.count(), 1);
/// assert!(panics.lines()[0].ends_with("mpm: handler panicked on GET /boom; answered 500"));
/// ```
pub fn expect(pattern: &'static str) -> Expected {
    let id = NEXT_GUARD.fetch_add(1, Ordering::Relaxed);
    EXPECTED.lock().push((id, pattern, Vec::new()));
    EXPECTING.fetch_add(1, Ordering::Relaxed);
    Expected { id }
}

/// The guard [`expect`] returns: the lines it kept.
#[derive(Debug)]
pub struct Expected {
    id: u64,
}

impl Expected {
    /// The lines kept so far, as they would have been written.
    pub fn lines(&self) -> Vec<String> {
        EXPECTED
            .lock()
            .iter()
            .find(|(id, _, _)| *id == self.id)
            .map(|(_, _, lines)| lines.clone())
            .unwrap_or_default()
    }

    /// How many lines were kept.
    pub fn count(&self) -> usize {
        self.lines().len()
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        EXPECTED.lock().retain(|(id, _, _)| *id != self.id);
        EXPECTING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `Mon Nov 30 20:32:29.123456 2026`, httpd's error-log time stamp, now.
fn error_log_time() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let tm = crate::local_time::local_time(now.as_secs() as i64);
    format!(
        "{} {} {:02} {:02}:{:02}:{:02}.{:06} {}",
        crate::local_time::DAYS[tm.tm_wday.clamp(0, 6) as usize],
        String::from_utf8_lossy(crate::local_time::MONTHS[tm.tm_mon.clamp(0, 11) as usize]),
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_micros(),
        tm.tm_year + 1900
    )
}

/// Send the error log (this process's stderr, and its children's) to `path`,
/// opened for appending. Called again, it reopens the file (rotation).
pub fn redirect(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
        .map_err(|e| Error::config(format!("--error-log {}: {e}", path.display())))?;
    // dup2 swaps the descriptor behind fd 2 in one step: a thread writing at
    // that moment writes whole to the old file or the new one.
    nix::unistd::dup2(file.as_raw_fd(), libc::STDERR_FILENO)
        .map_err(|e| Error::io(format!("--error-log {}", path.display()), e.into()))?;
    Ok(())
}

/// Log at `error` level: `log_error!("mpm: {what} failed")`.
#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => {
        $crate::error_log::write($crate::error_log::LogLevel::Error, format_args!($($arg)*))
    };
}

/// Log at `warn` level.
#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => {
        $crate::error_log::write($crate::error_log::LogLevel::Warn, format_args!($($arg)*))
    };
}

/// Log at `notice` level: always written.
#[macro_export]
macro_rules! log_notice {
    ($($arg:tt)*) => {
        $crate::error_log::write($crate::error_log::LogLevel::Notice, format_args!($($arg)*))
    };
}

/// Log at `info` level.
#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => {
        $crate::error_log::write($crate::error_log::LogLevel::Info, format_args!($($arg)*))
    };
}

/// Log at `debug` level.
#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => {
        $crate::error_log::write($crate::error_log::LogLevel::Debug, format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notice_is_written_at_every_level_and_debug_only_at_debug() {
        assert!(LogLevel::Error < LogLevel::Warn && LogLevel::Info < LogLevel::Debug);
        use crate::Choice;
        assert_eq!(LogLevel::from_name("WARN"), Ok(LogLevel::Warn));
        assert!(LogLevel::from_name("loud").is_err());
        // The default, warn: notices yes, info no.
        assert!(enabled(LogLevel::Notice) && enabled(LogLevel::Error));
        assert!(!enabled(LogLevel::Info) && !enabled(LogLevel::Debug));
    }
}
