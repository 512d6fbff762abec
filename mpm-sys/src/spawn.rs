//! What a child started with [`std::process::Command`] does between fork and
//! exec, each step made only of async-signal-safe system calls (the child of
//! a threaded parent may call nothing else): limits, CPU affinity, a
//! descriptor at a fixed number. `Command::pre_exec` is `unsafe` for that
//! reason; these are its safe uses.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

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

/// The child gets `fd` as its descriptor number `child_fd`, left open
/// across exec (as systemd passes a listening socket as descriptor 3).
/// The parent's `fd` is closed when `cmd` is dropped.
pub fn pass_fd(cmd: &mut Command, fd: OwnedFd, child_fd: i32) -> &mut Command {
    // SAFETY: in the child, the closure calls only fcntl or dup2, both
    // async-signal-safe, on `fd` (open: the closure owns it) and on the
    // child's own descriptor number `child_fd`, which dup2 replaces: the
    // parent's descriptors are not touched.
    unsafe {
        cmd.pre_exec(move || {
            let from = fd.as_raw_fd();
            let rc = if from == child_fd {
                // Already in place: only clear close-on-exec.
                libc::fcntl(from, libc::F_SETFD, 0)
            } else {
                libc::dup2(from, child_fd)
            };
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
