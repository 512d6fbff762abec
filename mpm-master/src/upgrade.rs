//! Binary upgrade without dropping a connection, as nginx does on SIGUSR2.
//!
//! The running master starts a new master (the `mpm` binary now at the path
//! it was started from, or `upgrade-binary`) as a child process that
//! inherits the listening sockets: their descriptor numbers are in
//! [`ENV_FDS`], and a pipe on which the new master says it is ready is in
//! [`ENV_READY_FD`]. The sockets are never closed, so connections that
//! arrive during the hand-over wait in the same accept queue and are served
//! by whichever generation accepts them.
//!
//! The new master reports ready once its first generation of children has
//! run for [`READY_AFTER`] without dying; the old master then drains (its
//! children stop accepting and finish their requests) and exits. If the new
//! master exits first, or is not ready within its ready timeout
//! ([`READY_TIMEOUT`] unless [`UpgradeSpec::ready_timeout`] says), the old one
//! logs it, stops the new one, and serves on: that is the rollback.
//!
//! The pid file follows nginx: the old master renames it to `FILE.oldbin`
//! when it starts the new one, the new master writes `FILE`, and a rollback
//! renames `FILE.oldbin` back.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use mpm_core::{Error, HandOver, Listener, Result};

/// The descriptor numbers of the inherited listening sockets, comma-separated.
pub const ENV_FDS: &str = "MPM_UPGRADE_FDS";
/// The descriptor on which the new master writes once it is ready.
pub const ENV_READY_FD: &str = "MPM_UPGRADE_READY_FD";
/// The old master's pid, for the new one to know whom it shares sockets with.
pub const ENV_PARENT: &str = "MPM_UPGRADE_PARENT";
/// The two descriptors of the [`HandOver`] channel (sending, receiving), by
/// which the old generation passes the new one its connections that have
/// not sent a byte yet.
pub const ENV_HAND_OVER: &str = "MPM_UPGRADE_HAND_OVER_FDS";
/// How long the old master waits for the new one to be ready, by default.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the new master's first children must live before it reports
/// ready: one that dies sooner counts as a crash at start.
pub const READY_AFTER: Duration = Duration::from_secs(1);

/// How to start a new master: set by the program that runs the process
/// manager, which alone knows its binary and arguments.
#[derive(Debug)]
pub struct UpgradeSpec {
    /// The binary to run.
    pub binary: PathBuf,
    /// Its arguments (without the program name): the old master's own.
    pub args: Vec<OsString>,
    /// The pid file, renamed to `.oldbin` while the new master starts.
    pub pid_file: Option<PathBuf>,
    /// How long the new master may take to be ready before the upgrade
    /// is rolled back.
    pub ready_timeout: Duration,
    /// The hand-over channel (a handle on it: [`HandOver::try_clone`]),
    /// whose descriptors are passed on too, so that the old children can
    /// hand the new ones what they hold unanswered.
    pub hand_over: Option<HandOver>,
}

/// The path of `pid_file` while an upgrade is under way: `FILE.oldbin`.
pub fn oldbin_path(pid_file: &Path) -> PathBuf {
    let mut p = pid_file.as_os_str().to_owned();
    p.push(".oldbin");
    PathBuf::from(p)
}

/// A new master started by this one, not yet known to be ready.
#[derive(Debug)]
pub struct Pending {
    /// Its pid.
    pub pid: Pid,
    ready: OwnedFd,
    deadline: Instant,
    timeout: Duration,
    pid_file: Option<PathBuf>,
}

/// What a [`Pending`] upgrade has come to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still starting.
    Waiting,
    /// The new master serves: this one should drain and exit.
    Ready,
    /// The new master failed (why): this one keeps serving.
    Failed(String),
}

impl UpgradeSpec {
    /// Start the new master with `listeners` inherited. Returns once it is
    /// running (not ready); watch it with [`Pending::check`].
    pub fn start(&self, listeners: &[Listener]) -> Result<Pending> {
        let (ready_read, ready_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|e| Error::io("creating the upgrade pipe", e.into()))?;
        let fds: Vec<RawFd> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
        let list = fds
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let write_fd = ready_write.as_raw_fd();
        let mut cmd = Command::new(&self.binary);
        cmd.args(&self.args)
            .env(ENV_FDS, list)
            .env(ENV_READY_FD, write_fd.to_string())
            .env(ENV_PARENT, std::process::id().to_string())
            // systemd's variables name this process: never the new one.
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES");
        match &self.hand_over {
            Some(h) => {
                let [send, receive] = h.raw_fds();
                cmd.env(ENV_HAND_OVER, format!("{send},{receive}"))
            }
            None => cmd.env_remove(ENV_HAND_OVER),
        };
        // Kept open across the exec, at the numbers the environment names.
        let mut inherit: Vec<BorrowedFd<'_>> = listeners.iter().map(AsFd::as_fd).collect();
        inherit.push(ready_write.as_fd());
        if let Some(h) = &self.hand_over {
            inherit.extend(h.fds());
        }
        if let Some(pid_file) = &self.pid_file {
            let _ = std::fs::rename(pid_file, oldbin_path(pid_file));
        }
        let child = match mpm_sys::spawn::spawn_inheriting(&mut cmd, &inherit) {
            Ok(c) => c,
            Err(e) => {
                self.restore_pid_file();
                return Err(Error::io(
                    format!("starting {} for the upgrade", self.binary.display()),
                    e,
                ));
            }
        };
        // Ours closed, the pipe reads end-of-file once the new master is gone.
        drop(ready_write);
        Ok(Pending {
            pid: Pid::from_raw(child.id() as i32),
            ready: ready_read,
            deadline: Instant::now()
                .checked_add(self.ready_timeout)
                .unwrap_or_else(|| Instant::now() + READY_TIMEOUT),
            timeout: self.ready_timeout,
            pid_file: self.pid_file.clone(),
        })
    }

    fn restore_pid_file(&self) {
        if let Some(pid_file) = &self.pid_file {
            let _ = std::fs::rename(oldbin_path(pid_file), pid_file);
        }
    }
}

impl Pending {
    /// The descriptor to poll: readable when the new master reports, or exits.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }

    /// Has the new master reported, failed, or run out of time?
    pub fn check(&self) -> Outcome {
        let mut buf = [0u8; 16];
        match nix::unistd::read(self.ready.as_raw_fd(), &mut buf) {
            Ok(0) => {
                return Outcome::Failed(format!(
                    "new master {} exited before it was ready",
                    self.pid
                ))
            }
            Ok(_) => return Outcome::Ready,
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Outcome::Failed(format!("reading the upgrade pipe: {e}")),
        }
        if Instant::now() >= self.deadline {
            return Outcome::Failed(format!(
                "new master {} was not ready within {:?}",
                self.pid, self.timeout
            ));
        }
        Outcome::Waiting
    }

    /// The upgrade failed: stop the new master (which, sharing the sockets
    /// with this one, leaves them listening) and take the pid file back.
    pub fn roll_back(self) {
        let _ = kill(self.pid, Signal::SIGTERM);
        if let Some(pid_file) = &self.pid_file {
            let _ = std::fs::rename(oldbin_path(pid_file), pid_file);
        }
    }

    /// The upgrade succeeded: the `.oldbin` pid file goes once this master has
    /// drained (see [`remove_oldbin`]).
    pub fn pid_file(&self) -> Option<&Path> {
        self.pid_file.as_deref()
    }
}

/// Remove `FILE.oldbin` if it still names this process.
pub fn remove_oldbin(pid_file: &Path) {
    let old = oldbin_path(pid_file);
    let ours = std::fs::read_to_string(&old)
        .is_ok_and(|t| t.trim().parse::<u32>().ok() == Some(std::process::id()));
    if ours {
        let _ = std::fs::remove_file(old);
    }
}

/// The side of the new master: the sockets and pipe an upgrading master
/// passed it.
#[derive(Debug)]
pub struct Inherited {
    /// The listening sockets, close-on-exec again.
    pub listeners: Vec<Listener>,
    /// The hand-over channel, shared with the old generation (if it passed one).
    pub hand_over: Option<HandOver>,
    ready: Option<OwnedFd>,
    parent: Option<u32>,
}

impl Inherited {
    /// The sockets passed by an upgrading master, if this process was started
    /// by one (`None` otherwise).
    pub fn from_env() -> Result<Option<Inherited>> {
        let Some(list) = std::env::var_os(ENV_FDS) else {
            return Ok(None);
        };
        let list = list.to_string_lossy().into_owned();
        let bad = |what: &str| Error::config(format!("{ENV_FDS}={list}: {what}"));
        // Left over in an environment (a shell started from a new master,
        // say), the numbers would name someone else's descriptors.
        let parent: Option<u32> = std::env::var(ENV_PARENT).ok().and_then(|s| s.parse().ok());
        let ppid = nix::unistd::getppid().as_raw() as u32;
        if parent != Some(ppid) {
            return Err(bad(&format!(
                "set, but this process was not started by an upgrading mpm master \
                 ({ENV_PARENT} is {parent:?}, the parent is {ppid}); unset it"
            )));
        }
        let mut listeners = Vec::new();
        for part in list.split(',').filter(|p| !p.is_empty()) {
            let fd: RawFd = part.parse().map_err(|_| bad("not descriptor numbers"))?;
            if fd < 3 || nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_err() {
                return Err(bad(&format!("descriptor {fd} is not open")));
            }
            let socket = std::net::TcpListener::from(claim(fd)?);
            listeners.push(Listener::from_std(socket)?);
        }
        if listeners.is_empty() {
            return Err(bad("no descriptors"));
        }
        let ready = match std::env::var(ENV_READY_FD)
            .ok()
            .and_then(|s| s.parse().ok())
        {
            Some(fd) if fd >= 3 && nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_ok() => {
                Some(claim(fd)?)
            }
            _ => None,
        };
        let hand_over = match std::env::var(ENV_HAND_OVER) {
            Err(_) => None,
            Ok(pair) => {
                let bad =
                    || Error::config(format!("{ENV_HAND_OVER}={pair}: not two open descriptors"));
                let (send, receive) = pair.split_once(',').ok_or_else(bad)?;
                let mut owned = Vec::new();
                for part in [send, receive] {
                    let fd: RawFd = part.parse().map_err(|_| bad())?;
                    if fd < 3 || nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_err() {
                        return Err(bad());
                    }
                    // `from_fds` checks what kind of socket.
                    owned.push(claim(fd)?);
                }
                let receive = owned.pop().ok_or_else(bad)?;
                let send = owned.pop().ok_or_else(bad)?;
                Some(HandOver::from_fds(send, receive)?)
            }
        };
        Ok(Some(Inherited {
            listeners,
            hand_over,
            ready,
            parent,
        }))
    }

    /// Split into the listeners and the readiness report (take
    /// [`hand_over`](Self::hand_over) first).
    pub fn into_parts(self) -> (Vec<Listener>, ReadyReport) {
        (
            self.listeners,
            ReadyReport {
                pipe: self.ready,
                parent: self.parent,
                then: None,
            },
        )
    }
}

/// How a new master tells the old one it is ready, and knows whether it
/// still shares the listening sockets with it.
#[derive(Default)]
pub struct ReadyReport {
    pipe: Option<OwnedFd>,
    parent: Option<u32>,
    then: Option<Box<dyn FnOnce()>>,
}

impl std::fmt::Debug for ReadyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyReport")
            .field("pipe", &self.pipe)
            .field("parent", &self.parent)
            .finish()
    }
}

impl ReadyReport {
    /// Also run `then` once the old master has been told (to tell systemd
    /// the new main pid, say: not before, or a rollback would leave systemd
    /// watching a process about to go).
    pub fn and_then(mut self, then: impl FnOnce() + 'static) -> Self {
        self.then = Some(Box::new(then));
        self
    }

    /// Is there an old master still to tell?
    pub fn is_pending(&self) -> bool {
        self.pipe.is_some()
    }

    /// Tell the old master (once): it then drains and exits.
    pub fn report(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            let _ = nix::unistd::write(&pipe, b"R");
            if let Some(then) = self.then.take() {
                then();
            }
        }
    }

    /// Is the old master still alive, so the listening sockets are shared
    /// with it? Stopping must then leave them listening: shutting them down
    /// would stop the old master's children too.
    pub fn shares_listeners(&self) -> bool {
        self.parent
            .is_some_and(|p| nix::unistd::getppid().as_raw() as u32 == p)
    }
}

/// Own descriptor `fd`, passed by the upgrading master for this process
/// alone, close-on-exec again.
fn claim(fd: RawFd) -> Result<OwnedFd> {
    mpm_sys::fd_passing::claim_inherited(fd)
        .map_err(|e| Error::io("taking an inherited descriptor", e))
}
