//! System calls counted by `perf stat -e raw_syscalls:sys_enter` over a
//! server's processes, when perf is installed and allowed; otherwise the
//! column says n/a.

use std::process::{Child, Command, Stdio};

/// A running `perf stat`, attached to a set of processes.
#[derive(Debug)]
pub struct SyscallCount {
    child: Option<Child>,
    ctl: Option<std::fs::File>,
}

impl SyscallCount {
    /// Start counting the system calls of `pids` (and their threads); `None`
    /// when perf is missing or cannot attach.
    ///
    /// perf starts with its counters disabled and is told to enable them
    /// through a control pipe; its acknowledgement means every process is
    /// attached and counted (attaching to hundreds of prefork children takes
    /// a while, and a fixed pause would undercount).
    pub fn start(pids: &[i32]) -> Option<SyscallCount> {
        use std::os::fd::{AsFd, AsRawFd, OwnedFd};
        let list: Vec<String> = pids.iter().map(ToString::to_string).collect();
        let (ctl_read, ctl_write): (OwnedFd, OwnedFd) = nix::unistd::pipe().ok()?;
        let (ack_read, ack_write): (OwnedFd, OwnedFd) = nix::unistd::pipe().ok()?;
        let mut cmd = Command::new("perf");
        cmd.args([
            "stat",
            "-x",
            ",",
            "-e",
            "raw_syscalls:sys_enter",
            "-D",
            "-1",
        ])
        .args(["--control", "fd:3,4", "-p"])
        .arg(list.join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        // The child finds the two pipe ends at descriptors 3 and 4.
        let child = mpm_sys::spawn::spawn_with_fds_at(
            &mut cmd,
            &[(ctl_read.as_fd(), 3), (ack_write.as_fd(), 4)],
        )
        .ok()?;
        drop((ctl_read, ack_write));
        let mut counting = SyscallCount {
            child: Some(child),
            ctl: None,
        };
        let mut ctl = std::fs::File::from(ctl_write);
        std::io::Write::write_all(&mut ctl, b"enable\n").ok()?;
        // Wait (at most 30 s) for "ack": a perf that failed closes the pipe.
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&ack_read),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(30_000u16)) {
            Ok(n) if n > 0 => {}
            _ => return None,
        }
        let mut ack = [0u8; 16];
        let n = nix::unistd::read(ack_read.as_raw_fd(), &mut ack).ok()?;
        if !ack[..n].starts_with(b"ack") {
            return None;
        }
        // Keep the control pipe open until perf is stopped.
        counting.ctl = Some(ctl);
        Some(counting)
    }

    /// Stop counting: the number of system calls, if perf reported one.
    pub fn finish(mut self) -> Option<u64> {
        let child = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let out = child.wait_with_output().ok()?;
        parse(&String::from_utf8_lossy(&out.stderr))
    }
}

impl Drop for SyscallCount {
    fn drop(&mut self) {
        // Only reached when finish() was not: never leave perf running.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The count from perf's CSV line (`12345,,raw_syscalls:sys_enter,...`).
fn parse(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find(|l| l.contains("raw_syscalls:sys_enter"))
        .and_then(|l| l.split(',').next())
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn perf_csv_lines_are_parsed_and_unsupported_is_none() {
        assert_eq!(
            super::parse("29,,raw_syscalls:sys_enter,599650,100.00,,\n"),
            Some(29)
        );
        assert_eq!(
            super::parse("<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n"),
            None
        );
    }
}
