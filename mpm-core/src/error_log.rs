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
//!
//! The error log is also the [`log`] crate's logger ([`install`], done by
//! the server at start): what an application logs with `log::warn!` and
//! friends is written to the same place, in the same one-line format,
//! filtered by the same `--log-level` (`trace` lines at `debug`). A
//! program that installed a logger of its own before the server started
//! keeps it, and mpm's lines go to it too (said once, in the error log).
//!
//! Writing a line takes no lock: it is one `write(2)` on descriptor 2, so
//! that a prefork child (forked from the single-threaded master) or any
//! thread logs without waiting on another, and lines of several processes
//! never interleave inside one another. A level that is off costs one
//! relaxed load, in these macros as in `log`'s.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd};
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
    if LOGGER.load(Ordering::Relaxed) == OURS {
        log::set_max_level(max_level(level));
    }
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

/// Whose logger the `log` facade has: none installed by [`install`] yet,
/// this error log, or one the program installed before.
static LOGGER: AtomicU8 = AtomicU8::new(NONE);
const NONE: u8 = 0;
const OURS: u8 = 1;
const FOREIGN: u8 = 2;

/// The error log as the [`log`] facade's logger: records an application
/// logs with `log`'s macros are written as mpm's own lines are, at their
/// level (`[warn]`, `[trace]`...), when `--log-level` lets them through.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorLog;

static ERROR_LOG: ErrorLog = ErrorLog;

impl log::Log for ErrorLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        enabled(from_log(metadata.level()))
    }

    fn log(&self, record: &log::Record<'_>) {
        let level = record.level();
        if enabled(from_log(level)) {
            let name = match level {
                log::Level::Trace => "trace",
                other => from_log(other).name(),
            };
            write_line(name, &message(*record.args()));
        }
    }

    fn flush(&self) {}
}

/// mpm's level of a `log` record: `trace` counts as `debug`.
fn from_log(level: log::Level) -> LogLevel {
    match level {
        log::Level::Error => LogLevel::Error,
        log::Level::Warn => LogLevel::Warn,
        log::Level::Info => LogLevel::Info,
        log::Level::Debug | log::Level::Trace => LogLevel::Debug,
    }
}

/// The `log` level an mpm line goes out at through another logger: a
/// notice, which `log` lacks, as `info`.
fn to_log(level: LogLevel) -> log::Level {
    match level {
        LogLevel::Error => log::Level::Error,
        LogLevel::Warn => log::Level::Warn,
        LogLevel::Notice | LogLevel::Info => log::Level::Info,
        LogLevel::Debug => log::Level::Debug,
    }
}

/// The most `log`'s macros let through at `level`: the rest cost one
/// relaxed load and never reach the logger.
fn max_level(level: LogLevel) -> log::LevelFilter {
    match level {
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn | LogLevel::Notice => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Trace,
    }
}

/// Make the error log the [`log`] facade's logger, at the level in force
/// ([`set_level`] keeps the two in step). If the program installed a
/// logger of its own first, it is kept: mpm's lines go to it too (as
/// `info` for a notice), and one line in the error log says so. Returns
/// whether the error log is the logger. Call it once, at start, before any
/// fork; calling it again changes nothing.
pub fn install() -> bool {
    match LOGGER.load(Ordering::Relaxed) {
        OURS => return true,
        FOREIGN => return false,
        _ => {}
    }
    if log::set_logger(&ERROR_LOG).is_ok() {
        LOGGER.store(OURS, Ordering::Relaxed);
        log::set_max_level(max_level(level()));
        return true;
    }
    LOGGER.store(FOREIGN, Ordering::Relaxed);
    write_line(
        LogLevel::Notice.name(),
        &message(format_args!(
            "mpm: a logger was installed before mpm started: it is kept, and mpm's log \
             lines go to it, not to this error log"
        )),
    );
    false
}

/// Write one line at `level`, if enabled; the macros call this.
pub fn write(level: LogLevel, message: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    if LOGGER.load(Ordering::Relaxed) == FOREIGN {
        let text = self::message(message);
        log::logger().log(
            &log::Record::builder()
                .level(to_log(level))
                .target(program())
                .args(format_args!("{text}"))
                .build(),
        );
        return;
    }
    write_line(level.name(), &self::message(message));
}

/// The message as written: every layer words its lines `mpm: ...`; an
/// embedding program's own name goes in its place.
fn message(message: fmt::Arguments<'_>) -> String {
    let text = message.to_string();
    match PROGRAM.get() {
        Some(name) if name != "mpm" => match text.strip_prefix("mpm:") {
            Some(rest) => format!("{name}:{rest}"),
            None => text,
        },
        _ => text,
    }
}

/// `[time] [level] [pid N] message`, written whole in one `write(2)` on
/// descriptor 2 (stderr, or `--error-log FILE` put there by [`redirect`]),
/// with no lock; unless an [`expect`] guard keeps it.
fn write_line(level: &str, message: &str) {
    let line = format!(
        "[{}] [{level}] [pid {}] {message}\n",
        error_log_time(),
        std::process::id()
    );
    if EXPECTING.load(Ordering::Relaxed) > 0 && kept(&line) {
        return;
    }
    // One write(2) for the whole line, so that processes never interleave
    // inside it; a full or closed stderr loses the line and nothing else.
    // Not through std's stderr lock: nothing a thread could hold.
    let stderr = std::io::stderr();
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(stderr.as_fd(), rest) {
            Ok(n) if n > 0 => rest = rest.get(n..).unwrap_or_default(),
            Err(nix::errno::Errno::EINTR) => {}
            Ok(_) | Err(_) => return,
        }
    }
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

    #[test]
    fn an_applications_log_lines_are_written_as_mpms_own_at_its_level() {
        assert!(install(), "nothing else installed a logger here");
        assert!(install(), "installing again changes nothing");
        let kept = expect("from the application");
        log::warn!("app: from the application");
        // Below the level (warn, the default): stopped by `log`'s own check.
        log::info!("app: from the application, at info");
        log::debug!("app: from the application, at debug");
        let lines = kept.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(
            line.starts_with('[') && line.contains("] [warn] [pid "),
            "{line}"
        );
        assert!(line.ends_with("] app: from the application"), "{line}");
        assert_eq!(log::max_level(), log::LevelFilter::Warn);
    }
}
