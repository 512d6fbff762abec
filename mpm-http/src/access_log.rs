//! The access log: one line per response, in httpd's common or combined
//! format ([`LogFormat`]), appended to `--access-log FILE`.
//!
//! # Who opens the file
//!
//! The process that binds opens it (`O_APPEND|O_CLOEXEC`, mode 0644), before
//! it forks and before `--user` drops root, exactly as httpd's parent does:
//! children inherit the descriptor, so a log directory only root may write
//! still works, and a child never opens anything.
//!
//! # Whole lines, never torn
//!
//! Every `write(2)` carries whole lines to an `O_APPEND` file, so lines from
//! many threads and processes never interleave inside a line. Unbuffered
//! (`--log-buffer 0`), each response is one `writev` of its pieces
//! (`--log-write writev`, what httpd 2.0 did) or one `write` of the pieces
//! copied into a reused buffer (`--log-write copy`, what it does since the
//! 2004 measurement that found copying faster).
//!
//! # Buffering
//!
//! With `--log-buffer BYTES`, each worker (a thread, or a prefork child) has
//! a buffer of its own behind an uncontended lock, so workers never wait on
//! each other. A buffer is written when the next line would not fit, when its
//! oldest line is a second old, and when its worker exits (a graceful stop or
//! restart loses nothing). A worker blocked on an idle connection cannot
//! write its own buffer, so in threaded processes a flusher thread writes
//! buffers whose oldest line is [`FLUSH_INTERVAL`] old, like nginx's
//! `flush=`. A prefork child must stay single-threaded: it writes its buffer
//! whenever a connection ends, and its idle keep-alive wait wakes for the
//! flush deadline ([`flush_due_in`], [`flush_stale`]).
//!
//! # Rotation
//!
//! [`AccessLog::reopen`] opens the path again and `dup3`s the new file onto
//! the same descriptor number, so a thread writing at that instant writes to
//! the old file or the new one, whole. The server reopens on a graceful
//! restart (SIGUSR1) and a restart (SIGHUP), as httpd does: `mv` the log,
//! signal, and the new generation writes to a new file while the old one
//! finishes (and flushes) into the moved file.
//!
//! # A full disk
//!
//! A failed write never stops serving: the lines are dropped and counted,
//! and the error log gets one line when writing starts failing and one when
//! it works again (with the count), however many processes share the log:
//! that state lives in shared memory mapped before the fork.

use std::fmt;
use std::fs::File;
use std::io::IoSlice;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::log_format::{clf_now, escape_into, LogFormat};

/// Lines reach the file at most this long after they are logged, even when
/// the server goes idle.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// How often the flusher thread looks at the buffers.
const FLUSH_CHECK: Duration = Duration::from_millis(200);
/// Largest `--log-buffer`.
pub const MAX_LOG_BUFFER: usize = 16 << 20;

/// How an unbuffered line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogWrite {
    /// One `writev(2)` gathering the line's pieces where they lie.
    Writev,
    /// The pieces copied into one reused buffer, then one `write(2)`.
    #[default]
    Copy,
}

impl LogWrite {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LogWrite::Writev => "writev",
            LogWrite::Copy => "copy",
        }
    }
}

impl mpm_core::Choice for LogWrite {
    const ALL: &'static [Self] = &[LogWrite::Writev, LogWrite::Copy];

    fn name(self) -> &'static str {
        LogWrite::name(self)
    }
}

impl fmt::Display for LogWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether writing works, shared by every process of a server.
#[derive(Debug)]
struct Health {
    failing: &'static AtomicU64,
    dropped: &'static AtomicU64,
}

static HEALTH: OnceLock<&'static Health> = OnceLock::new();

/// The health record, in shared memory when it can be mapped (made before
/// the first fork, since the log is opened by the process that binds).
fn health() -> &'static Health {
    HEALTH.get_or_init(|| {
        let [failing, dropped] =
            mpm_sys::shared_memory::leak::<[AtomicU64; 2]>("the access log's health")
                .unwrap_or_else(|_| Box::leak(Box::new([AtomicU64::new(0), AtomicU64::new(0)])));
        Box::leak(Box::new(Health { failing, dropped }))
    })
}

/// An open access log, shared by every worker of a process (and inherited
/// by forked children).
#[derive(Debug)]
pub struct AccessLog {
    path: PathBuf,
    file: File,
    format: LogFormat,
    write: LogWrite,
    buffer: usize,
    threaded: bool,
    health: &'static Health,
}

fn open_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // std opens with O_CLOEXEC; append(true) is O_APPEND.
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
}

impl AccessLog {
    /// Open `path` for appending. `threaded`: the serving processes may start
    /// a flusher thread (not prefork, whose children stay single-threaded).
    pub fn open_path(
        path: &Path,
        format: LogFormat,
        write: LogWrite,
        buffer: usize,
        threaded: bool,
    ) -> Result<Arc<AccessLog>> {
        let file = open_file(path).map_err(|e| Error::access_log(path, e))?;
        // A prefork child, with no flusher thread, flushes through the core.
        mpm_core::buffered_output::register(mpm_core::buffered_output::Flusher {
            name: "access log",
            due_in: flush_due_in,
            flush_stale,
            flush_now,
        });
        Ok(Arc::new(AccessLog {
            path: path.to_path_buf(),
            file,
            format,
            write,
            buffer: buffer.min(MAX_LOG_BUFFER),
            threaded,
            health: health(),
        }))
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The line format.
    pub fn format(&self) -> LogFormat {
        self.format
    }

    /// Open the path again (after the file was moved away) and put the new
    /// file behind the same descriptor, atomically for every writer.
    pub fn reopen(&self) -> Result<()> {
        let context = || format!("reopening the access log {}", self.path.display());
        let new = open_file(&self.path).map_err(|e| Error::io(context(), e))?;
        nix::unistd::dup3(
            new.as_raw_fd(),
            self.file.as_raw_fd(),
            nix::fcntl::OFlag::O_CLOEXEC,
        )
        .map_err(|e| Error::io(context(), e.into()))?;
        Ok(())
    }

    /// A writer for one worker (with its own buffer, when buffering).
    pub fn writer(self: &Arc<Self>) -> Writer {
        let buffer = (self.buffer > 0).then(|| {
            let b = Arc::new(Mutex::new(LineBuffer {
                log: Arc::clone(self),
                buf: Vec::new(),
                lines: 0,
                since: None,
            }));
            BUFFERS.lock().push(Arc::clone(&b));
            if self.threaded {
                start_flusher();
            }
            b
        });
        Writer {
            log: Arc::clone(self),
            buffer,
            scratch: Vec::new(),
        }
    }

    /// Write `bytes` (whole lines, `lines` of them) with one `write(2)`
    /// (more only if the kernel takes part of it).
    fn write_bytes(&self, mut bytes: &[u8], lines: u64) {
        while !bytes.is_empty() {
            match nix::unistd::write(&self.file, bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return self.failed(e.into(), lines),
            }
        }
        self.succeeded();
    }

    /// Write the pieces of one line with one `writev(2)`.
    fn writev(&self, pieces: &[&[u8]]) {
        let mut slices = [IoSlice::new(&[]); MAX_PIECES];
        for (s, p) in slices.iter_mut().zip(pieces) {
            *s = IoSlice::new(p);
        }
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let n = loop {
            match nix::sys::uio::writev(&self.file, &slices[..pieces.len()]) {
                Ok(n) => break n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return self.failed(e.into(), 1),
            }
        };
        if n < total {
            // The kernel took part of it (a nearly full disk): the rest,
            // copied, so the line is at least complete.
            let rest: Vec<u8> = pieces.concat().split_off(n);
            return self.write_bytes(&rest, 1);
        }
        self.succeeded();
    }

    fn failed(&self, e: std::io::Error, lines: u64) {
        self.health.dropped.fetch_add(lines, Ordering::Relaxed);
        if self.health.failing.swap(1, Ordering::AcqRel) == 0 {
            mpm_core::log_error!(
                "mpm: access log {}: {e}; serving goes on, and lines are dropped (and counted) \
                 until writing works again",
                self.path.display()
            );
        }
    }

    fn succeeded(&self) {
        if self.health.failing.load(Ordering::Relaxed) != 0
            && self.health.failing.swap(0, Ordering::AcqRel) != 0
        {
            let lost = self.health.dropped.swap(0, Ordering::Relaxed);
            mpm_core::log_warn!(
                "mpm: access log {} is written again; {} lost",
                self.path.display(),
                mpm_core::plural(lost, "line was", "lines were")
            );
        }
    }
}

/// What one response's line needs, captured when the request is answered
/// (the request's bytes are gone by the time the response is written) and
/// written when the response is done. Its storage is reused from one
/// request to the next on a connection.
#[derive(Debug, Default)]
pub struct Record {
    active: bool,
    status: u16,
    head_len: u64,
    sent: u64,
    fields: Vec<u8>,
    request: (u32, u32),
    referer: Option<(u32, u32)>,
    user_agent: Option<(u32, u32)>,
    /// One more than where in `fields` the upstream's text begins (it runs
    /// to the end): `"$upstream_addr" $upstream_status
    /// $upstream_response_time` written out; 0 for none. One number, not
    /// three fields: every connection carries a record.
    upstream_from: u32,
}

impl Record {
    /// Start a line: the request line as received (empty for none), the
    /// `Referer` and `User-Agent` fields (kept for `combined` only) and the
    /// status. Bytes sent are counted from here.
    pub fn capture(
        &mut self,
        format: LogFormat,
        request_line: &[u8],
        referer: Option<&[u8]>,
        user_agent: Option<&[u8]>,
        status: u16,
    ) {
        self.fields.clear();
        self.request = push_escaped(&mut self.fields, request_line);
        if format != LogFormat::Common {
            self.referer = referer.map(|v| push_escaped(&mut self.fields, v));
            self.user_agent = user_agent.map(|v| push_escaped(&mut self.fields, v));
        } else {
            self.referer = None;
            self.user_agent = None;
        }
        self.status = status;
        self.head_len = 0;
        self.sent = 0;
        self.upstream_from = 0;
        self.active = true;
    }

    /// The status, when it was not known at [`capture`](Self::capture)
    /// (an answer that came later).
    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// The upstream the answer came from (for the `upstream` format):
    /// its address, the status it answered, how long the exchange took.
    pub fn set_upstream(&mut self, addr: &str, status: Option<u16>, time: Duration) {
        self.upstream_from = self.fields.len() as u32 + 1;
        self.fields.push(b'"');
        escape_into(&mut self.fields, addr.as_bytes());
        self.fields.extend_from_slice(b"\" ");
        match status {
            Some(s) => self
                .fields
                .extend_from_slice(Small::number(u64::from(s)).as_bytes()),
            None => self.fields.push(b'-'),
        }
        self.fields.push(b' ');
        self.fields
            .extend_from_slice(Small::seconds(time).as_bytes());
    }

    /// The upstream's text, if the answer came from one.
    fn upstream(&self) -> Option<&[u8]> {
        let from = (self.upstream_from as usize).checked_sub(1)?;
        self.fields.get(from..)
    }

    /// Is a line waiting for its response to finish?
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The response head is this long: bytes sent beyond it are the body.
    pub(crate) fn set_head_len(&mut self, len: usize) {
        self.head_len = len as u64;
    }

    /// `n` more bytes of the response were written.
    pub(crate) fn add_sent(&mut self, n: usize) {
        self.sent += n as u64;
    }

    /// `n` bytes of the response were written in all, head included.
    pub(crate) fn set_sent(&mut self, n: usize) {
        self.sent = n as u64;
    }

    /// Body bytes sent: `body` more than the head (for [`Writer::write`]
    /// callers that send the response themselves).
    pub fn set_body_sent(&mut self, body: u64) {
        self.sent = self.head_len + body;
    }

    fn get(&self, range: (u32, u32)) -> &[u8] {
        &self.fields[range.0 as usize..range.1 as usize]
    }
}

/// Append `value`, escaped, to `fields`; where it lies.
fn push_escaped(fields: &mut Vec<u8>, value: &[u8]) -> (u32, u32) {
    let start = fields.len() as u32;
    escape_into(fields, value);
    (start, fields.len() as u32)
}

/// Most pieces a line is made of.
const MAX_PIECES: usize = 16;

/// A small text on the stack: an address or a number.
struct Small {
    buf: [u8; 48],
    len: usize,
}

impl Small {
    fn ip(ip: IpAddr) -> Small {
        use std::io::Write;
        let mut buf = [0u8; 48];
        let mut w = &mut buf[..];
        let _ = write!(w, "{ip}");
        let len = 48 - w.len();
        Small { buf, len }
    }

    fn number(mut n: u64) -> Small {
        let mut buf = [0u8; 48];
        let mut i = 20;
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        buf.copy_within(i..20, 0);
        Small { buf, len: 20 - i }
    }

    /// Seconds with milliseconds, as nginx writes times: `0.021`.
    fn seconds(d: Duration) -> Small {
        let ms = d.as_millis().min(u128::from(u64::MAX)) as u64;
        let mut s = Small::number(ms / 1000);
        let frac = ms % 1000;
        s.buf[s.len] = b'.';
        s.buf[s.len + 1] = b'0' + (frac / 100) as u8;
        s.buf[s.len + 2] = b'0' + (frac / 10 % 10) as u8;
        s.buf[s.len + 3] = b'0' + (frac % 10) as u8;
        s.len += 4;
        s
    }

    fn dash() -> Small {
        Small {
            buf: [b'-'; 48],
            len: 1,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// One worker's handle on the access log: writes lines (buffered or not)
/// without allocating once warm.
pub struct Writer {
    log: Arc<AccessLog>,
    buffer: Option<Arc<Mutex<LineBuffer>>>,
    scratch: Vec<u8>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.log.path)
            .field("buffered", &self.buffer.is_some())
            .finish()
    }
}

impl Writer {
    /// The log's format.
    pub fn format(&self) -> LogFormat {
        self.log.format
    }

    /// Write the line of a finished response for `client`, if one is
    /// active. `going_idle`: the connection ends here, so a worker with no
    /// flusher thread writes its buffer out now.
    pub fn write(&mut self, record: &mut Record, client: IpAddr, going_idle: bool) {
        if !record.active {
            return;
        }
        record.active = false;
        let host = Small::ip(client);
        let time = clf_now();
        let status = Small::number(u64::from(record.status));
        let body = record.sent.saturating_sub(record.head_len);
        let bytes = if body == 0 {
            Small::dash()
        } else {
            Small::number(body)
        };
        let request = match record.get(record.request) {
            [] => &b"-"[..],
            r => r,
        };
        let mut pieces: [&[u8]; MAX_PIECES] = [
            host.as_bytes(),
            b" - - ",
            &time,
            b" \"",
            request,
            b"\" ",
            status.as_bytes(),
            b" ",
            bytes.as_bytes(),
            b"\n",
            b"",
            b"",
            b"",
            b"",
            b"",
            b"",
        ];
        let dash = &b"-"[..];
        let count = match self.log.format {
            LogFormat::Common => 10,
            LogFormat::Combined | LogFormat::Upstream => {
                pieces[9] = b" \"";
                pieces[10] = record.referer.map_or(dash, |r| record.get(r));
                pieces[11] = b"\" \"";
                pieces[12] = record.user_agent.map_or(dash, |r| record.get(r));
                pieces[13] = b"\"\n";
                14
            }
        };
        let count = if self.log.format == LogFormat::Upstream {
            pieces[13] = b"\" ";
            pieces[14] = record.upstream().unwrap_or(b"\"-\" - -");
            pieces[15] = b"\n";
            16
        } else {
            count
        };
        let pieces = &pieces[..count];
        match &self.buffer {
            Some(buffer) => {
                let mut b = buffer.lock();
                b.append(pieces);
                if going_idle && !self.log.threaded {
                    b.flush();
                }
            }
            None => match self.log.write {
                LogWrite::Writev => self.log.writev(pieces),
                LogWrite::Copy => {
                    self.scratch.clear();
                    for p in pieces {
                        self.scratch.extend_from_slice(p);
                    }
                    self.log.write_bytes(&self.scratch, 1);
                }
            },
        }
    }

    /// Write out whatever this writer has buffered.
    pub fn flush(&self) {
        if let Some(b) = &self.buffer {
            b.lock().flush();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            b.lock().flush();
            BUFFERS.lock().retain(|other| !Arc::ptr_eq(other, &b));
        }
    }
}

/// One worker's buffered lines.
struct LineBuffer {
    log: Arc<AccessLog>,
    buf: Vec<u8>,
    lines: u64,
    since: Option<Instant>,
}

impl LineBuffer {
    fn append(&mut self, pieces: &[&[u8]]) {
        let cap = self.log.buffer;
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        if self.buf.len() + len > cap {
            self.flush();
        }
        if self.buf.capacity() < cap {
            self.buf.reserve_exact(cap - self.buf.len());
        }
        for p in pieces {
            self.buf.extend_from_slice(p);
        }
        self.lines += 1;
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if len > cap || now.duration_since(since) >= FLUSH_INTERVAL {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.log.write_bytes(&self.buf, self.lines);
            self.buf.clear();
        }
        self.lines = 0;
        self.since = None;
    }

    fn due_in(&self) -> Option<Duration> {
        self.since
            .map(|t| FLUSH_INTERVAL.saturating_sub(t.elapsed()))
    }
}

/// Every buffer of this process, for the flusher and for exit.
static BUFFERS: Mutex<Vec<Arc<Mutex<LineBuffer>>>> = Mutex::new(Vec::new());
static FLUSHER: Once = Once::new();

/// Start this process's flusher thread, once (never in prefork children,
/// nor in a master, which builds no writer).
fn start_flusher() {
    FLUSHER.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("mpm-log-flush".into())
            .spawn(|| loop {
                std::thread::sleep(FLUSH_CHECK);
                flush_stale();
            });
        if let Err(e) = spawned {
            mpm_core::log_error!(
                "mpm: starting the access log flusher: {e}; lines are written when buffers fill"
            );
        }
    });
}

/// Write out every buffer of this process whose oldest line is about due.
pub fn flush_stale() {
    for b in BUFFERS.lock().iter() {
        let mut b = b.lock();
        if b.due_in().is_some_and(|d| d <= FLUSH_CHECK) {
            b.flush();
        }
    }
}

/// How long until a buffered line of this process is due (`None`: nothing
/// is buffered). A single-threaded worker's idle wait wakes then and calls
/// [`flush_stale`].
pub fn flush_due_in() -> Option<Duration> {
    BUFFERS
        .lock()
        .iter()
        .filter_map(|b| b.try_lock().and_then(|b| b.due_in()))
        .min()
}

/// Write out every buffer of this process now (a prefork child does after
/// each connection, before it waits for the next one).
pub fn flush_now() {
    for b in BUFFERS.lock().iter() {
        b.lock().flush();
    }
}

/// Write out every buffer of this process, at exit. A buffer held by a
/// worker stuck past the graceful timeout is waited on only briefly.
pub fn flush_all() {
    let buffers: Vec<_> = BUFFERS.lock().clone();
    for b in buffers {
        if let Some(mut b) = b.try_lock_for(Duration::from_millis(100)) {
            b.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The health record is per process: tests that write take turns.
    static WRITES: Mutex<()> = Mutex::new(());

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("mpm-access-log-{}-{name}", std::process::id()))
    }

    fn line(log: &Arc<AccessLog>, format_line: impl Fn(&mut Record)) -> String {
        let mut w = log.writer();
        let mut r = Record::default();
        format_line(&mut r);
        w.write(&mut r, "192.0.2.7".parse().unwrap(), true);
        drop(w);
        let text = std::fs::read_to_string(log.path()).unwrap();
        text.lines().last().unwrap().to_string()
    }

    #[test]
    fn a_failing_log_counts_dropped_lines_until_a_write_works_again() {
        let _turn = WRITES.lock();
        // One line when writing starts failing, one when it works again.
        let failing = mpm_core::error_log::expect("access log /dev/full: No space left");
        let recovered = mpm_core::error_log::expect("is written again; 3 lines were lost");
        let path = temp("recovers");
        let full = AccessLog::open_path(
            Path::new("/dev/full"),
            LogFormat::Common,
            LogWrite::Copy,
            0,
            true,
        )
        .unwrap();
        let ok = AccessLog::open_path(&path, LogFormat::Common, LogWrite::Writev, 0, true).unwrap();
        let (mut w_full, mut w_ok) = (full.writer(), ok.writer());
        let mut r = Record::default();
        let client = "192.0.2.7".parse().unwrap();
        for _ in 0..3 {
            r.capture(LogFormat::Common, b"GET / HTTP/1.1", None, None, 200);
            w_full.write(&mut r, client, true);
        }
        assert_eq!(full.health.failing.load(Ordering::Relaxed), 1);
        assert_eq!(full.health.dropped.load(Ordering::Relaxed), 3);
        r.capture(LogFormat::Common, b"GET / HTTP/1.1", None, None, 200);
        w_ok.write(&mut r, client, true);
        assert_eq!(full.health.failing.load(Ordering::Relaxed), 0);
        assert_eq!(full.health.dropped.load(Ordering::Relaxed), 0);
        assert_eq!((failing.count(), recovered.count()), (1, 1));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn common_and_combined_lines_have_httpd_shape() {
        let _turn = WRITES.lock();
        for (write, buffer) in [
            (LogWrite::Writev, 0),
            (LogWrite::Copy, 0),
            (LogWrite::Copy, 4096),
        ] {
            let path = temp(&format!("shape-{write}-{buffer}"));
            let _ = std::fs::remove_file(&path);
            let log = AccessLog::open_path(&path, LogFormat::Common, write, buffer, true).unwrap();
            let l = line(&log, |r| {
                r.capture(LogFormat::Common, b"GET /a\"b HTTP/1.1", None, None, 200);
                r.set_head_len(100);
                r.add_sent(112);
            });
            assert!(l.starts_with("192.0.2.7 - - ["), "{l}");
            assert!(l.ends_with("] \"GET /a\\\"b HTTP/1.1\" 200 12"), "{l}");
            let log =
                AccessLog::open_path(&path, LogFormat::Combined, write, buffer, true).unwrap();
            let l = line(&log, |r| {
                r.capture(LogFormat::Combined, b"", None, Some(b"curl/8"), 400);
            });
            assert!(l.ends_with("] \"-\" 400 - \"-\" \"curl/8\""), "{l}");
            let log =
                AccessLog::open_path(&path, LogFormat::Upstream, write, buffer, true).unwrap();
            let l = line(&log, |r| {
                r.capture(LogFormat::Upstream, b"GET /api HTTP/1.1", None, None, 200);
                r.set_upstream("10.0.0.1:8080", Some(201), Duration::from_micros(21_600));
            });
            assert!(
                l.ends_with(
                    "] \"GET /api HTTP/1.1\" 200 - \"-\" \"-\" \"10.0.0.1:8080\" 201 0.021"
                ),
                "{l}"
            );
            let l = line(&log, |r| {
                r.capture(LogFormat::Upstream, b"GET / HTTP/1.1", None, None, 404);
            });
            assert!(l.ends_with(" 404 - \"-\" \"-\" \"-\" - -"), "{l}");
            let l = line(&log, |r| {
                r.capture(LogFormat::Upstream, b"GET / HTTP/1.1", None, None, 502);
                r.set_upstream("a:1, b:2", None, Duration::from_millis(3_004));
            });
            assert!(
                l.ends_with(" 502 - \"-\" \"-\" \"a:1, b:2\" - 3.004"),
                "{l}"
            );
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        assert_eq!(Small::number(0).as_bytes(), b"0");
        assert_eq!(Small::number(1456).as_bytes(), b"1456");
        assert_eq!(
            Small::number(u64::MAX).as_bytes(),
            u64::MAX.to_string().as_bytes()
        );
    }
}
