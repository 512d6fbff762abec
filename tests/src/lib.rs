//! Harness for the integration suite: find (or build) the `mpm` binary, start
//! servers on ephemeral ports, talk to them with `ureq` or a raw socket, and
//! make throw-away document roots; [`origin`] is an upstream for the
//! reverse-proxy tests.
//!
//! Every behaviour is tested against every process model in [`MPMS`], through
//! [`mpm_suite!`], which makes one `#[test]` per model and behaviour
//! (`worker::pipelined_requests_are_answered_in_order`).
//!
//! Nothing here waits by sleeping for readiness: a server is ready once it has
//! printed its `listening on` line, and every read has a timeout so that a
//! broken server fails a test instead of hanging it.

#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

pub mod h2;
pub mod load;
pub mod origin;
pub mod tls;

pub use tls::{transport, with_transport, Transport};

/// Every process model the suite runs against. When a model lands, add it
/// here and to the list in [`mpm_suite!`] (a generated test checks that the
/// two agree).
pub const MPMS: &[&str] = &["prefork", "worker", "event", "uring"];

/// Generate one `#[test]` per process model for each named behaviour;
/// with `over transports:` first, one per model and transport
/// (`event::tls::pipelined_requests_are_answered_in_order`), the server
/// started by [`Server::start`] then listening with TLS
/// ([`Transport::Tls`]) and every client of this harness speaking it.
///
/// Each name is a function `fn name(mpm: &str)` in the calling file; the
/// macro makes a module per model (`worker`, later `prefork` and `event`)
/// holding a test of that name which calls it with the model's name. Invoke
/// it once per test file.
///
/// ```text
/// fn pipelined_requests_are_answered_in_order(mpm: &str) { /* ... */ }
/// tests::mpm_suite!(pipelined_requests_are_answered_in_order);
/// ```
#[macro_export]
macro_rules! mpm_suite {
    (over transports: $($test:ident),* $(,)?) => {
        $crate::mpm_suite!(@models_t [prefork, worker, event, uring] [$($test),*]);
    };
    (@models_t [$($mpm:ident),*] $tests:tt) => {
        $(
            mod $mpm {
                $crate::mpm_suite!(@transport $mpm plain $tests);
                $crate::mpm_suite!(@transport $mpm tls $tests);
            }
        )*

        #[test]
        fn mpm_suite_covers_every_mpm() {
            assert_eq!(
                &[$(stringify!($mpm)),*][..],
                $crate::MPMS,
                "mpm_suite! and MPMS list different process models"
            );
        }
    };
    (@transport $mpm:ident $transport:ident [$($test:ident),*]) => {
        mod $transport {
            $(
                #[test]
                fn $test() {
                    $crate::with_transport(
                        $crate::Transport::named(stringify!($transport)),
                        || super::super::$test(stringify!($mpm)),
                    );
                }
            )*
        }
    };
    ($($test:ident),* $(,)?) => {
        // The models with a module; keep in step with `MPMS`.
        $crate::mpm_suite!(@models [prefork, worker, event, uring] [$($test),*]);
    };
    (@models [$($mpm:ident),*] $tests:tt) => {
        $( $crate::mpm_suite!(@one $mpm $tests); )*

        #[test]
        fn mpm_suite_covers_every_mpm() {
            assert_eq!(
                &[$(stringify!($mpm)),*][..],
                $crate::MPMS,
                "mpm_suite! and MPMS list different process models"
            );
        }
    };
    (@one $mpm:ident [$($test:ident),*]) => {
        mod $mpm {
            $(
                #[test]
                fn $test() {
                    super::$test(stringify!($mpm));
                }
            )*
        }
    };
}

/// How long a server may take to print its `listening on` line.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Server::stop`] waits for the process to exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Read and write timeout of every client socket: a test never hangs longer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response body a client in this suite accepts.
const MAX_BODY: u64 = 64 << 20;

// ---------------------------------------------------------------------------
// The binary
// ---------------------------------------------------------------------------

static MPM_BIN: OnceLock<PathBuf> = OnceLock::new();

/// The `mpm` binary of the profile this test binary was built with, built
/// first (once per process) if it is missing or older than the sources.
///
/// `cargo test --workspace` builds it (and the examples) before any test
/// runs, because the `mpm` package has an integration test of its own
/// (`server/tests/command_line.rs`); the build here is for a run of this
/// crate alone (`cargo test -p tests`) after the sources changed.
///
/// `CARGO_BIN_EXE_mpm` is not set for this crate (the binary belongs to the
/// `server` package), so it is found next to the test executable:
/// `target/<profile>/deps/<test>` means `target/<profile>/mpm`.
pub fn mpm_bin() -> &'static Path {
    MPM_BIN.get_or_init(locate_or_build)
}

fn locate_or_build() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut profile_dir = exe
        .parent()
        .expect("the test binary is in a directory")
        .to_path_buf();
    if profile_dir.file_name().is_some_and(|n| n == "deps") {
        profile_dir.pop();
    }
    let bin = profile_dir.join("mpm");
    let root = workspace_root();
    // The examples are built with the binary; one missing means a stale build.
    let examples = profile_dir.join("examples").join("json_api");
    let fresh = match (
        modified(&bin).min(modified(&examples)),
        newest_source(&root),
    ) {
        (Some(built), Some(source)) => built >= source,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if !fresh {
        build(&profile_dir, &root);
    }
    assert!(
        bin.is_file(),
        "{} does not exist even after `cargo build -p mpm --bin mpm`",
        bin.display()
    );
    bin
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The newest modification time among the files the binary is built from:
/// everything in the workspace but build output, git, and this crate.
fn newest_source(root: &Path) -> Option<SystemTime> {
    fn walk(dir: &Path, top: bool, newest: &mut Option<SystemTime>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                // Build output, git, this crate, and the fuzz targets (their
                // own crate, not part of the binary).
                let skip = name == "target"
                    || name.starts_with('.')
                    || (top && (name == "tests" || name == "fuzz"));
                if !skip {
                    walk(&entry.path(), false, newest);
                }
            } else if kind.is_file()
                && [".rs", ".toml", ".lock", ".html"]
                    .iter()
                    .any(|ext| name.ends_with(ext))
            {
                if let Some(t) = modified(&entry.path()) {
                    if newest.is_none_or(|n| t > n) {
                        *newest = Some(t);
                    }
                }
            }
        }
    }
    let mut newest = None;
    walk(root, true, &mut newest);
    newest
}

/// `cargo build -p mpm --bin mpm` for the profile `profile_dir` holds.
fn build(profile_dir: &Path, root: &Path) {
    let cargo = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .or_else(|| option_env!("CARGO").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("cargo"));
    let mut cmd = Command::new(&cargo);
    // The examples too: the suite runs them as servers.
    cmd.current_dir(root)
        .args(["build", "-p", "mpm", "--bin", "mpm", "--examples"]);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    // Build where this test binary lives, even under a custom target directory.
    if let Some(target) = profile_dir.parent() {
        if target.join("CACHEDIR.TAG").is_file() {
            cmd.arg("--target-dir").arg(target);
        }
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", cargo.display()));
    assert!(
        out.status.success(),
        "`cargo build -p mpm --bin mpm` failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------

/// What a server printed on stderr, shared with the thread that reads it.
#[derive(Default)]
struct Log {
    state: Mutex<LogState>,
    changed: Condvar,
}

#[derive(Default)]
struct LogState {
    text: String,
    closed: bool,
}

impl Log {
    fn push(&self, line: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.text.push_str(line);
        self.changed.notify_all();
    }

    fn close(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.closed = true;
        self.changed.notify_all();
    }

    fn text(&self) -> String {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .text
            .clone()
    }

    /// Wait until `done` holds for the state, or `timeout` passes.
    fn wait_until(&self, timeout: Duration, done: impl Fn(&LogState) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if done(&s) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Forward a server's stderr to the test's (so a failing test shows it),
/// keep a copy, and report the first `listening on` address (the first TLS
/// one, if `tls`).
fn forward_stderr(
    stderr: ChildStderr,
    pid: u32,
    log: &Log,
    ready: mpsc::Sender<SocketAddr>,
    tls: bool,
) {
    let mut reader = BufReader::new(stderr);
    let mut ready = Some(ready);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        eprint!("[mpm {pid}] {text}");
        // Record before announcing readiness, so the line is in the log.
        log.push(&text);
        let scheme_ok = !tls
            || text.contains(" listening on https://")
            || text.contains(" listening on tls://");
        if let Some(addr) = listening_addr(&text).filter(|_| scheme_ok) {
            if let Some(tx) = ready.take() {
                let _ = tx.send(addr);
            }
        }
    }
    log.close();
}

/// The address in `mpm: worker MPM listening on http://127.0.0.1:PORT serving ...`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split(" listening on ").nth(1)?;
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    rest.split_whitespace().next()?.parse().ok()
}

/// Send `signal` to process `pid`, as `kill(2)`: an error (no such process,
/// or a signal number that is none) is ignored, as a test that signals a
/// process checks what it does, not whether it was still there.
pub fn kill(pid: i32, signal: i32) {
    use nix::sys::signal::Signal;
    if let Ok(signal) = Signal::try_from(signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// Say in the run's output that the calling test did not run its body, and
/// why (a tool that is not installed, no root, a descriptor limit). A
/// passing test's output is kept from the terminal by the test runner, so
/// this writes past it, straight to stderr:
/// `skipped: haproxy::graceful_restarts_...: haproxy is not installed`.
pub fn skip(why: &str) {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("a test");
    let _ = writeln!(io::stderr().lock(), "skipped: {name}: {why}");
}

/// A turn on the CPU for a test that loads it (a `compare` run, a load
/// that measures): at most one such test per core runs at once in a test
/// process, however many tests run side by side (`.cargo/config.toml` runs
/// eight), so that they do not starve each other's servers into measuring
/// nothing. The turn ends when the guard is dropped.
pub fn cpu_turn() -> CpuTurn {
    let (lock, freed) = &CPU_TURNS;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut busy = lock.lock().unwrap_or_else(|e| e.into_inner());
    while *busy >= cores {
        busy = freed.wait(busy).unwrap_or_else(|e| e.into_inner());
    }
    *busy += 1;
    CpuTurn(())
}

static CPU_TURNS: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A test's turn on the CPU ([`cpu_turn`]).
#[derive(Debug)]
pub struct CpuTurn(());

impl Drop for CpuTurn {
    fn drop(&mut self) {
        let (lock, freed) = &CPU_TURNS;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        freed.notify_one();
    }
}

/// A running `mpm serve`, killed when dropped.
pub struct Server {
    child: Child,
    addr: SocketAddr,
    mpm: String,
    log: Arc<Log>,
    exited: Option<ExitStatus>,
    tls: bool,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("mpm", &self.mpm)
            .field("pid", &self.child.id())
            .field("addr", &self.addr)
            .finish()
    }
}

impl Server {
    /// Start `mpm serve --mpm MPM --listen 127.0.0.1:0 [--docroot DIR] EXTRA...`
    /// and wait until it listens. Panics (with its stderr) if it does not.
    pub fn start(mpm: &str, docroot: Option<&Path>, extra: &[&str]) -> Server {
        Server::try_start(mpm, docroot, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), with the server's descriptor limit
    /// (soft and hard) set to `limit`, so that it runs out of descriptors.
    pub fn start_with_fd_limit(
        mpm: &str,
        docroot: Option<&Path>,
        extra: &[&str],
        limit: u64,
    ) -> Server {
        let mut cmd = Command::new(mpm_bin());
        mpm_sys::spawn::limit_open_files(&mut cmd, limit);
        Server::spawn(cmd, mpm, docroot, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start one of the `server` package's examples (built with the binary) as
    /// `EXAMPLE serve --mpm MPM --listen 127.0.0.1:0 EXTRA...`.
    pub fn start_example(example: &str, mpm: &str, extra: &[&str]) -> Server {
        let bin = mpm_bin()
            .parent()
            .expect("the binary is in a directory")
            .join("examples")
            .join(example);
        Server::spawn(Command::new(bin), mpm, None, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start another program built on mpm (`BIN serve --mpm MPM --listen
    /// 127.0.0.1:0 EXTRA...`) and wait until it listens.
    pub fn start_program(bin: &Path, mpm: &str, extra: &[&str]) -> Server {
        Server::spawn(Command::new(bin), mpm, None, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), after `setup` has adjusted the command
    /// (its environment, descriptors it inherits).
    pub fn start_with(
        mpm: &str,
        docroot: Option<&Path>,
        extra: &[&str],
        setup: impl FnOnce(&mut Command),
    ) -> Server {
        let mut cmd = Command::new(mpm_bin());
        setup(&mut cmd);
        Server::spawn(cmd, mpm, docroot, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), with a command of the caller's (a
    /// wrapper that sets something up, then `exec`s [`mpm_bin`] with the
    /// arguments that follow its own); the server's arguments are added.
    pub fn start_command(
        cmd: Command,
        mpm: &str,
        docroot: Option<&Path>,
        extra: &[&str],
    ) -> Server {
        Server::spawn(cmd, mpm, docroot, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), but say why the server did not come up.
    pub fn try_start(mpm: &str, docroot: Option<&Path>, extra: &[&str]) -> Result<Server, String> {
        Server::spawn(Command::new(mpm_bin()), mpm, docroot, extra)
    }

    fn spawn(
        mut cmd: Command,
        mpm: &str,
        docroot: Option<&Path>,
        extra: &[&str],
    ) -> Result<Server, String> {
        let tls = transport() == Transport::Tls;
        if tls {
            cmd.args(["serve", "--mpm", mpm, "--listen", "https://127.0.0.1:0"]);
            // The suite's certificate, unless the test brings its own.
            if !extra.contains(&"--tls-cert") {
                let m = tls::material();
                cmd.arg("--tls-cert")
                    .arg(&m.cert)
                    .arg("--tls-key")
                    .arg(&m.key);
            }
        } else {
            cmd.args(["serve", "--mpm", mpm, "--listen", "127.0.0.1:0"]);
        }
        if let Some(dir) = docroot {
            cmd.arg("--docroot").arg(dir);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", mpm_bin().display()))?;
        let pid = child.id();
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Log::default());
        let (tx, rx) = mpsc::channel();
        let reader_log = Arc::clone(&log);
        std::thread::Builder::new()
            .name(format!("mpm-{pid}-stderr"))
            .spawn(move || forward_stderr(stderr, pid, &reader_log, tx, tls))
            .map_err(|e| format!("starting the stderr reader: {e}"))?;
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            mpm: mpm.to_string(),
            log,
            exited: None,
            tls,
        };
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(addr) => {
                server.addr = addr;
                // Set at every start: a port a stopped TLS server had may
                // be a plain server's now.
                tls::register(addr, tls);
                Ok(server)
            }
            // Disconnected: stderr closed (the process exited) before listening.
            Err(_) => {
                let status = server
                    .wait_exit(Duration::from_secs(2))
                    .map_or_else(|| "still running".to_string(), |s| s.to_string());
                Err(format!(
                    "mpm serve --mpm {mpm} did not start listening ({status}); stderr:\n{}",
                    server.stderr_text()
                ))
            }
        }
    }

    /// The process model it runs.
    pub fn mpm(&self) -> &str {
        &self.mpm
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` (`https://` for a TLS server) followed by `path`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Does it listen with TLS?
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// A raw connection to it.
    pub fn connect(&self) -> RawConn {
        RawConn::connect(self.addr)
    }

    /// `GET path` with a fresh `ureq` agent.
    pub fn get(&self, path: &str) -> Reply {
        fetch(&agent(), "GET", &self.url(path), &[], None)
    }

    /// `METHOD path` with headers (and a body) with a fresh `ureq` agent.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Reply {
        fetch(&agent(), method, &self.url(path), headers, body)
    }

    /// Everything it printed on stderr so far.
    pub fn stderr_text(&self) -> String {
        self.log.text()
    }

    /// Wait until its stderr contains `needle`; false after `timeout`.
    pub fn wait_for_stderr(&self, needle: &str, timeout: Duration) -> bool {
        self.log.wait_until(timeout, |s| s.text.contains(needle))
    }

    /// Send a signal, unless the process has already been reaped (its pid
    /// could then belong to someone else).
    pub fn signal(&mut self, signal: i32) {
        if self.exited.is_none() {
            let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
            // The pid is our unreaped child, so it cannot name another process.
            kill(pid, signal);
        }
    }

    /// Send SIGTERM (a fast stop: every connection closes now) without
    /// waiting.
    pub fn terminate(&mut self) {
        self.signal(libc::SIGTERM);
    }

    /// Is the process still running?
    pub fn is_running(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Wait for the process to exit; `None` if it is still running after
    /// `timeout`. Once it has exited, its stderr has been read to the end.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.exited.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => self.exited = Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) | Err(_) => return None,
            }
        }
        // The reader sees end-of-file once the process (the only writer) is gone.
        self.log.wait_until(Duration::from_secs(5), |s| s.closed);
        self.exited
    }

    /// Send SIGWINCH (a graceful stop: requests in flight finish) without
    /// waiting.
    pub fn graceful_stop(&mut self) {
        self.signal(libc::SIGWINCH);
    }

    /// Send SIGTERM (a fast stop) and wait for the exit status. Panics if
    /// the process is still running after a generous timeout.
    pub fn stop(&mut self) -> ExitStatus {
        self.terminate();
        self.wait_stopped("SIGTERM")
    }

    /// Send SIGWINCH (a graceful stop) and wait for the exit status. Panics
    /// if the process is still running after a generous timeout.
    pub fn stop_gracefully(&mut self) -> ExitStatus {
        self.graceful_stop();
        self.wait_stopped("SIGWINCH")
    }

    fn wait_stopped(&mut self, signal: &str) -> ExitStatus {
        match self.wait_exit(STOP_TIMEOUT) {
            Some(status) => status,
            None => panic!(
                "mpm {} did not exit within {STOP_TIMEOUT:?} of {signal}; stderr:\n{}",
                self.mpm,
                self.stderr_text()
            ),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.tls {
            tls::register(self.addr, false);
        }
        if self.exited.is_some() {
            return;
        }
        self.terminate();
        if self.wait_exit(Duration::from_secs(2)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How a command run to completion ended.
#[derive(Debug)]
pub struct Exit {
    /// Its exit status.
    pub status: ExitStatus,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

impl Exit {
    /// The contract for bad input: exit status 2 and exactly one line on
    /// stderr saying what is wrong. `what` names the case in a failure.
    pub fn assert_one_line_error(&self, what: &str) {
        assert_eq!(self.status.code(), Some(2), "{what}: {}", self.stderr);
        assert_eq!(
            self.stderr.trim().lines().count(),
            1,
            "{what}: {}",
            self.stderr
        );
    }
}

/// Run `mpm ARGS...` to completion (killing it after `timeout`) and collect
/// its output. For commands expected to fail at once.
pub fn run_mpm(args: &[&str], timeout: Duration) -> Exit {
    run_program(mpm_bin(), args, timeout)
}

/// Run `BIN ARGS...` to completion (killing it after `timeout`) and collect
/// its output, as [`run_mpm`] does.
pub fn run_program(bin: &Path, args: &[&str], timeout: Duration) -> Exit {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut killed = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                killed = true;
                break child.wait().expect("waiting for a killed child");
            }
        }
    };
    let exit = Exit {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    assert!(
        !killed,
        "{} {args:?} was still running after {timeout:?}; stderr:\n{}",
        bin.display(),
        exit.stderr
    );
    exit
}

/// Read a child's pipe to its end on a thread, so the child never blocks
/// on a full pipe while it is waited for.
fn read_all<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

/// A response read by either client.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The header fields, in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

/// The first value of a field in `fields` (case-insensitive name): a
/// reply's, or what the test origin saw.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl Reply {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        field(&self.headers, name)
    }

    /// How many times a header occurs.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A `ureq` agent that does not follow redirects and never waits long,
/// and trusts the suite's certificate authority for `https://` URLs.
pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .tls_config(tls::client_config())
        .redirects(0)
        .timeout_connect(IO_TIMEOUT)
        .timeout_read(IO_TIMEOUT)
        .timeout_write(IO_TIMEOUT)
        .build()
}

/// One request with `ureq`; 4xx and 5xx are replies like any other.
/// Panics on a transport error.
pub fn fetch(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let mut req = agent.request(method, url);
    for (name, value) in headers {
        req = req.set(name, value);
    }
    let result = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    let headers = response
        .headers_names()
        .into_iter()
        .flat_map(|n| {
            response
                .all(&n)
                .into_iter()
                .map(|v| (n.clone(), v.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut body = Vec::new();
    response
        .into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut body)
        .unwrap_or_else(|e| panic!("{method} {url}: reading the body: {e}"));
    Reply {
        status,
        headers,
        body,
    }
}

/// A raw client connection, for what an HTTP client library will not send:
/// malformed requests, pipelining, and exact control of the connection.
///
/// It keeps bytes read past one response for the next, so pipelined
/// responses are read one at a time.
#[derive(Debug)]
pub struct RawConn {
    stream: tls::Io,
    buf: Vec<u8>,
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl RawConn {
    /// Connect, with [`IO_TIMEOUT`] on reads and writes; with TLS (the
    /// handshake done) if a TLS server listens there.
    pub fn connect(addr: SocketAddr) -> RawConn {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(IO_TIMEOUT))
            .expect("write timeout");
        let stream = if tls::is_registered(addr) {
            tls::Io::handshake(stream, "localhost")
                .unwrap_or_else(|e| panic!("TLS handshake with {addr}: {e}"))
        } else {
            tls::Io::Plain(stream)
        };
        RawConn {
            stream,
            buf: Vec::new(),
        }
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        self.stream.tcp()
    }

    /// Shrink the socket's receive buffer, so that most of a large response
    /// stays unsent on the server's side until this client reads it.
    pub fn set_recv_buffer(&self, bytes: usize) {
        use nix::sys::socket::{setsockopt, sockopt::RcvBuf};
        setsockopt(self.stream(), RcvBuf, &bytes).unwrap_or_else(|e| panic!("SO_RCVBUF: {e}"));
    }

    /// Write all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Bytes received but not yet consumed by a response.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Read once more from the socket into the buffer; 0 at end of file.
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn take(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("closed after {} of {n} bytes", self.buf.len()),
                ));
            }
        }
        let rest = self.buf.split_off(n);
        Ok(std::mem::replace(&mut self.buf, rest))
    }

    fn take_line(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let mut line = self.take(i + 2)?;
                line.truncate(i);
                return Ok(line);
            }
            if self.buf.len() > 64 * 1024 {
                return Err(invalid("line longer than 64 KiB"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed in the middle of a line",
                ));
            }
        }
    }

    /// Read a status line and header fields; the body stays unread.
    pub fn read_head(&mut self) -> io::Result<Reply> {
        let line = self.take_line()?;
        let line = String::from_utf8(line).map_err(|_| invalid("status line is not UTF-8"))?;
        let mut parts = line.splitn(3, ' ');
        let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
            return Err(invalid(format!("bad status line {line:?}")));
        };
        if !version.starts_with("HTTP/1.") {
            return Err(invalid(format!("bad status line {line:?}")));
        }
        let status = code
            .parse()
            .map_err(|_| invalid(format!("bad status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let field = self.take_line()?;
            if field.is_empty() {
                break;
            }
            let field = String::from_utf8(field).map_err(|_| invalid("header is not UTF-8"))?;
            let Some((name, value)) = field.split_once(':') else {
                return Err(invalid(format!("bad header field {field:?}")));
            };
            headers.push((name.to_string(), value.trim().to_string()));
            if headers.len() > 200 {
                return Err(invalid("more than 200 header fields"));
            }
        }
        Ok(Reply {
            status,
            headers,
            body: Vec::new(),
        })
    }

    /// Read one whole response to a `GET` (or any method with a body).
    pub fn read_response(&mut self) -> io::Result<Reply> {
        self.read_response_to("GET")
    }

    /// Read one whole response to a request with this method: a `HEAD`
    /// response has no body whatever its `Content-Length` says.
    pub fn read_response_to(&mut self, method: &str) -> io::Result<Reply> {
        let mut reply = self.read_head()?;
        let bodiless = method.eq_ignore_ascii_case("HEAD")
            || (100..200).contains(&reply.status)
            || reply.status == 204
            || reply.status == 304;
        if bodiless {
            return Ok(reply);
        }
        let chunked = reply
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        reply.body = if chunked {
            self.read_chunked()?
        } else if let Some(len) = reply.header("content-length") {
            let len: u64 = len
                .parse()
                .map_err(|_| invalid(format!("bad Content-Length {len:?}")))?;
            if len > MAX_BODY {
                return Err(invalid(format!("Content-Length {len} is too large")));
            }
            self.take(len as usize)?
        } else {
            self.read_to_end()?
        };
        Ok(reply)
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.take_line()?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size)
                .ok()
                .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                .ok_or_else(|| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailer fields, then the blank line.
                while !self.take_line()?.is_empty() {}
                return Ok(body);
            }
            if body.len() as u64 + size > MAX_BODY {
                return Err(invalid("chunked body is too large"));
            }
            body.extend(self.take(size as usize)?);
            if !self.take_line()?.is_empty() {
                return Err(invalid("chunk not followed by CRLF"));
            }
        }
    }

    /// Read until the server closes; the bytes received.
    pub fn read_to_end(&mut self) -> io::Result<Vec<u8>> {
        while self.fill()? > 0 {
            if self.buf.len() as u64 > MAX_BODY {
                return Err(invalid("more than MAX_BODY before end of file"));
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }

    /// Up to `max` body bytes: what is buffered, else one read (empty at
    /// end of file).
    pub fn read_some(&mut self, max: usize) -> io::Result<Vec<u8>> {
        if self.buf.is_empty() {
            let mut chunk = vec![0u8; max.max(1)];
            let n = loop {
                match self.stream.read(&mut chunk) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            chunk.truncate(n);
            return Ok(chunk);
        }
        let n = max.min(self.buf.len());
        self.take(n)
    }

    /// Does the server close the connection within `within`, sending
    /// nothing more? False if bytes arrive or the wait times out.
    pub fn closed_by_peer(&mut self, within: Duration) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let _ = self.stream().set_read_timeout(Some(within));
        let result = self.fill();
        let _ = self.stream().set_read_timeout(Some(IO_TIMEOUT));
        match result {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
            ),
        }
    }
}

/// A client that connects now, then says nothing for `delay` before it
/// sends its request and reads one response: what a browser's spare
/// connection, or a slow client, does to a server in the middle of a
/// restart or an upgrade.
#[derive(Debug)]
pub struct SilentClient {
    /// How long it kept silent.
    pub delay: Duration,
    /// When it connected.
    pub connected: Instant,
    thread: std::thread::JoinHandle<io::Result<Reply>>,
}

impl SilentClient {
    /// Connect to `addr` now; send `request` `delay` later, on a thread.
    pub fn connect(addr: SocketAddr, request: &'static [u8], delay: Duration) -> SilentClient {
        let mut conn = RawConn::connect(addr);
        let connected = Instant::now();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(delay);
            conn.send(request)?;
            conn.read_response()
        });
        SilentClient {
            delay,
            connected,
            thread,
        }
    }

    /// Has it sent its request yet?
    pub fn has_sent(&self) -> bool {
        self.connected.elapsed() >= self.delay
    }

    /// Its response (or why there was none).
    pub fn reply(self) -> io::Result<Reply> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the client thread panicked")))
    }
}

/// Send `request` on a new connection and read one response.
pub fn exchange(addr: SocketAddr, request: &[u8]) -> io::Result<Reply> {
    let mut conn = RawConn::connect(addr);
    conn.send(request)?;
    conn.read_response()
}

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// Where test directories go: `$TMPDIR` if set, else `/dev/shm` when it is
/// a writable directory (memory: making a docroot costs no disk I/O, which
/// on a loaded machine takes milliseconds a file), else the temp directory.
fn scratch_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        if std::env::var_os("TMPDIR").is_some() {
            return std::env::temp_dir();
        }
        let shm = Path::new("/dev/shm");
        let probe = shm.join(format!("mpm-tests-probe-{}", std::process::id()));
        match fs::create_dir(&probe) {
            Ok(()) => {
                let _ = fs::remove_dir(&probe);
                shm.to_path_buf()
            }
            Err(_) => std::env::temp_dir(),
        }
    })
}

/// A directory under `/dev/shm` (or the temp directory), removed when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new, empty directory named after this process, a counter and `label`.
    pub fn new(label: &str) -> TempDir {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let path = scratch_root().join(format!("mpm-tests-{}-{n}-{label}", std::process::id()));
        // A leftover from a crashed run with a recycled pid.
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir { path }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write a file (creating its directories); its full path.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = self.path.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|e| panic!("creating {rel}'s dir: {e}"));
        }
        fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Make a directory (and its parents); its full path.
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let path = self.path.join(rel);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        path
    }

    /// Make a symbolic link at `rel` pointing to `target` (as given: relative
    /// targets resolve from the link's directory).
    pub fn symlink(&self, target: impl AsRef<Path>, rel: &str) -> PathBuf {
        let path = self.path.join(rel);
        std::os::unix::fs::symlink(target.as_ref(), &path)
            .unwrap_or_else(|e| panic!("linking {}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// `len` bytes of deterministic, incompressible-looking content (xorshift64*),
/// different for each `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The files every suite serves, and their contents.
pub mod site {
    use super::{pattern, TempDir};

    /// `/index.html`.
    pub const INDEX_HTML: &str = "<!DOCTYPE html>\n<title>home</title><h1>home page</h1>\n";
    /// `/hello.txt`.
    pub const HELLO_TXT: &str = "hello, world\n";
    /// `/sub/index.html`.
    pub const SUB_INDEX_HTML: &str = "<!DOCTYPE html>\n<p>the sub directory's index</p>\n";
    /// `/sub/page.html`.
    pub const SUB_PAGE_HTML: &str = "<p>a page in sub</p>\n";
    /// `/noindex/other.txt`, in a directory without an index.
    pub const OTHER_TXT: &str = "other\n";
    /// Length of `/hundred.bin`, the file range tests cut.
    pub const HUNDRED_LEN: usize = 100;
    /// Length of `/small.bin`: one Ethernet-sized segment's worth.
    pub const SMALL_LEN: usize = 1456;
    /// Length of `/big.bin`: far more than socket buffers hold.
    pub const BIG_LEN: usize = 8 << 20;

    /// `/image.png`: a PNG signature and some bytes.
    pub fn image_png() -> Vec<u8> {
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(pattern(200, 1));
        png
    }

    /// `/hundred.bin`.
    pub fn hundred() -> Vec<u8> {
        pattern(HUNDRED_LEN, 2)
    }

    /// `/small.bin`.
    pub fn small() -> Vec<u8> {
        pattern(SMALL_LEN, 3)
    }

    /// `/big.bin`.
    pub fn big() -> Vec<u8> {
        pattern(BIG_LEN, 4)
    }

    /// A document root with the small files.
    pub fn docroot() -> TempDir {
        let dir = TempDir::new("root");
        dir.write("index.html", INDEX_HTML.as_bytes());
        dir.write("hello.txt", HELLO_TXT.as_bytes());
        dir.write("image.png", &image_png());
        dir.write("sub/index.html", SUB_INDEX_HTML.as_bytes());
        dir.write("sub/page.html", SUB_PAGE_HTML.as_bytes());
        dir.write("noindex/other.txt", OTHER_TXT.as_bytes());
        dir.write("hundred.bin", &hundred());
        dir
    }

    /// [`docroot`] plus `/zero.bin` (empty), `/small.bin` and `/big.bin`.
    pub fn docroot_with_big_files() -> TempDir {
        let dir = docroot();
        dir.write("zero.bin", b"");
        dir.write("small.bin", &small());
        dir.write("big.bin", &big());
        dir
    }
}

// ---------------------------------------------------------------------------
// Process trees
// ---------------------------------------------------------------------------

/// The pids of a process's children, from /proc.
pub fn children(pid: u32) -> Vec<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// How many threads a process has, from /proc.
pub fn threads(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Wait until `pid` has `n` children, none of them in `old`; `None` if it
/// has not within `within`.
pub fn wait_for_children(pid: u32, n: usize, old: &[u32], within: Duration) -> Option<Vec<u32>> {
    let deadline = Instant::now() + within;
    loop {
        let now = children(pid);
        if now.len() == n && now.iter().all(|c| !old.contains(c)) {
            return Some(now);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
