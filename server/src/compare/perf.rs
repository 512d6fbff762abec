//! System calls counted by `perf stat -e raw_syscalls:sys_enter` over a
//! server's processes, when perf is installed and allowed; otherwise the
//! column says n/a.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `perf stat`, attached to a set of processes.
#[derive(Debug)]
pub struct SyscallCount {
    child: Option<Child>,
}

impl SyscallCount {
    /// Start counting the system calls of `pids` (and their threads); `None`
    /// when perf is missing or cannot attach.
    pub fn start(pids: &[i32]) -> Option<SyscallCount> {
        let list: Vec<String> = pids.iter().map(ToString::to_string).collect();
        let mut child = Command::new("perf")
            .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p"])
            .arg(list.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        // perf needs a moment to attach; one that fails exits at once.
        std::thread::sleep(Duration::from_millis(100));
        match child.try_wait() {
            Ok(None) => Some(SyscallCount { child: Some(child) }),
            _ => {
                let _ = child.wait();
                None
            }
        }
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
