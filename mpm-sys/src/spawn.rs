//! What a child started with [`std::process::Command`] does between fork
//! and exec. Each function installs a closure that makes only
//! async-signal-safe calls (`fcntl`, `dup2`, `prctl`) on numbers it copied
//! beforehand, allocating nothing: the one thing `pre_exec` asks. Limits,
//! CPU affinity and a descriptor at a fixed number are set the same way.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
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
    let moves = fds.iter().map(|(fd, to)| (fd.as_raw_fd(), *to)).collect();
    place_at(cmd, moves, Vec::new());
    cmd.spawn()
}

/// The child gets `fd` as its descriptor number `child_fd`, left open
/// across exec (as systemd passes a listening socket as descriptor 3).
/// The parent's `fd` is closed when `cmd` is dropped.
pub fn pass_fd(cmd: &mut Command, fd: OwnedFd, child_fd: RawFd) -> &mut Command {
    place_at(cmd, vec![(fd.as_raw_fd(), child_fd)], vec![fd]);
    cmd
}

/// The one set-up behind [`spawn_with_fds_at`] and [`pass_fd`]: each
/// `(from, to)` of `moves`, in order, makes the child's descriptor `to` a
/// copy of `from`, open across exec. `owned` stays open as long as `cmd`.
fn place_at(cmd: &mut Command, moves: Vec<(RawFd, RawFd)>, owned: Vec<OwnedFd>) {
    // SAFETY: between fork and exec the closure only calls dup2 and fcntl,
    // both async-signal-safe, on numbers copied before the fork (open: they
    // are borrowed until the spawn, or owned by the closure), and allocates
    // nothing; it changes the child's descriptor table only.
    unsafe {
        cmd.pre_exec(move || {
            let _keep_open = &owned;
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

/// The child starts with its descriptor limit (soft and hard) at `limit`.
pub fn limit_open_files(cmd: &mut Command, limit: u64) -> &mut Command {
    let lim = libc::rlimit {
        rlim_cur: limit as libc::rlim_t,
        rlim_max: limit as libc::rlim_t,
    };
    // SAFETY: the closure only calls setrlimit, async-signal-safe, on its
    // own copy of `lim`; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        })
    }
}

/// The child runs on CPU `cpu` only (as `taskset -c CPU` would start it).
/// A `cpu` past `CPU_SETSIZE` fails the spawn with `EINVAL`.
pub fn pin_to_cpu(cmd: &mut Command, cpu: usize) -> &mut Command {
    // SAFETY: the closure builds a set on its stack and calls
    // sched_setaffinity, async-signal-safe; CPU_SET is only reached with
    // `cpu` inside the set.
    unsafe {
        cmd.pre_exec(move || {
            if cpu >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        })
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
        // dash reads `>&12` as `>&1` and `2`: a descriptor past 9 is
        // reached by its /proc name instead.
        cmd.args(["-c", &format!("echo kept > /proc/self/fd/{fd}")])
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

    fn shell(cmd: &mut Command) -> String {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn the_child_starts_with_the_limit_the_cpu_and_the_descriptor_it_was_given() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -n; ulimit -Hn"]);
        assert_eq!(shell(limit_open_files(&mut cmd, 77)), "77\n77\n");

        let mut cmd = Command::new("sh");
        cmd.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        let first = {
            let mut parent = Command::new("sh");
            parent.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
            let list = shell(&mut parent);
            let list = list.split_whitespace().nth(1).unwrap().to_string();
            list.split([',', '-'])
                .next()
                .unwrap()
                .parse::<usize>()
                .unwrap()
        };
        assert_eq!(
            shell(pin_to_cpu(&mut cmd, first)).split_whitespace().nth(1),
            Some(first.to_string().as_str())
        );

        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "echo passed >&7"]);
            shell(pass_fd(&mut cmd, OwnedFd::from(w), 7));
            // Dropping `cmd` closes the parent's end: the read below ends.
        }
        let mut got = String::new();
        std::io::Read::read_to_string(&mut &r, &mut got).unwrap();
        assert_eq!(got, "passed\n");
    }
}
