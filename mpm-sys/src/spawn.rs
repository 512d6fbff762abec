//! What a child started with [`std::process::Command`] does between fork
//! and exec. Each function installs a closure that makes only
//! async-signal-safe calls (`fcntl`, `dup2`, `prctl`) on numbers it copied
//! beforehand, allocating nothing: the one thing `pre_exec` asks.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use nix::sys::signal::Signal;

/// Spawn `cmd` with `fds` (open now, borrowed until it has started) kept
/// open in the child across exec, at the same numbers: their close-on-exec
/// flag is cleared in the child only.
pub fn spawn_inheriting(cmd: &mut Command, fds: &[BorrowedFd<'_>]) -> io::Result<Child> {
    let numbers: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: between fork and exec the closure only calls fcntl, which is
    // async-signal-safe, on numbers copied before the fork, and allocates
    // nothing; it changes the child's descriptor flags only. The
    // descriptors are open in the parent while borrowed, and the child is
    // spawned before the borrow ends.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &numbers {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Spawn `cmd` with each descriptor of `fds` (borrowed until it has
/// started) placed at its target number in the child, open across exec.
/// Targets are placed in order: a later source must not sit at an earlier
/// target.
pub fn spawn_with_fds_at(cmd: &mut Command, fds: &[(BorrowedFd<'_>, RawFd)]) -> io::Result<Child> {
    let moves: Vec<(RawFd, RawFd)> = fds.iter().map(|(fd, to)| (fd.as_raw_fd(), *to)).collect();
    // SAFETY: between fork and exec the closure only calls dup2 and fcntl,
    // both async-signal-safe, on numbers copied before the fork, and
    // allocates nothing; it changes the child's descriptor table only.
    unsafe {
        cmd.pre_exec(move || {
            for &(from, to) in &moves {
                // dup2 onto itself keeps close-on-exec set: clear it instead.
                let rc = if from == to {
                    libc::fcntl(from, libc::F_SETFD, 0)
                } else {
                    libc::dup2(from, to)
                };
                if rc < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Have the child started by `cmd` get `signal` when the thread that
/// started it dies (`PR_SET_PDEATHSIG`), so that it does not outlive it.
pub fn die_with_parent(cmd: &mut Command, signal: Signal) {
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe, allocates
    // nothing, and touches no memory of the parent; it is all the closure
    // does between fork and exec.
    unsafe {
        cmd.pre_exec(move || nix::sys::prctl::set_pdeathsig(signal).map_err(io::Error::from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::process::Stdio;

    #[test]
    fn an_inherited_descriptor_is_open_in_the_child() {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let fd = write.as_raw_fd();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("echo kept >&{fd}")])
            .stdout(Stdio::null());
        let status = spawn_inheriting(&mut cmd, &[write.as_fd()])
            .unwrap()
            .wait()
            .unwrap();
        drop(write);
        assert!(status.success());
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut out).unwrap();
        assert_eq!(out, "kept\n");
    }

    #[test]
    fn a_descriptor_is_placed_at_its_target() {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo placed >&7"]).stdout(Stdio::null());
        let status = spawn_with_fds_at(&mut cmd, &[(write.as_fd(), 7)])
            .unwrap()
            .wait()
            .unwrap();
        drop(write);
        assert!(status.success());
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut out).unwrap();
        assert_eq!(out, "placed\n");
    }
}
