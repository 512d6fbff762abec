//! System calls by name, counted by `strace -c -f` attached to a server's
//! processes (like FreeBSD's `truss -c`), when strace is installed and
//! allowed. Tracing slows the server many times over: the counts are right,
//! its speed meanwhile is not.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `strace -c -f -p ...`.
#[derive(Debug)]
pub struct SyscallTable {
    child: Option<Child>,
    out: PathBuf,
}

impl SyscallTable {
    /// Attach to `pids` (their threads, and anything they start); `None`
    /// when strace is missing or cannot attach.
    pub fn start(pids: &[i32]) -> Option<SyscallTable> {
        let out = std::env::temp_dir().join(format!(
            "mpm-compare-strace-{}-{}",
            std::process::id(),
            pids.first().copied().unwrap_or(0)
        ));
        let mut cmd = Command::new("strace");
        cmd.args(["-c", "-f", "-q", "-o"]).arg(&out);
        for p in pids {
            cmd.args(["-p", &p.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // strace attaches to each thread in turn before tracing: give it
        // time in proportion (an strace that cannot attach exits at once).
        std::thread::sleep(Duration::from_millis(200 + 5 * pids.len() as u64));
        match child.try_wait() {
            Ok(None) => Some(SyscallTable {
                child: Some(child),
                out,
            }),
            _ => None,
        }
    }

    /// Detach: each system call's name and count, most frequent first.
    pub fn finish(mut self) -> Option<Vec<(String, u64)>> {
        let child = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = child.wait_with_output();
        let text = std::fs::read_to_string(&self.out).ok()?;
        Some(parse(&text))
    }
}

impl Drop for SyscallTable {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.out);
    }
}

/// The rows of strace's summary table (`% time seconds usecs/call calls
/// [errors] syscall`), without the total.
fn parse(text: &str) -> Vec<(String, u64)> {
    let mut rows: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 5 || f[0].parse::<f64>().is_err() {
                return None;
            }
            let name = *f.last()?;
            let calls = f[3].parse().ok()?;
            (name != "total").then(|| (name.to_string(), calls))
        })
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

#[cfg(test)]
mod tests {
    #[test]
    fn strace_summaries_are_parsed_by_name() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
                    ------ ----------- ----------- --------- --------- ----------------\n\
                     54.12    0.122575          12      5000           read\n\
                     44.09    0.099865          19      5100        10 write\n\
                    ------ ----------- ----------- --------- --------- ----------------\n\
                    100.00    0.226437          40     10100        10 total\n";
        assert_eq!(
            super::parse(text),
            vec![("write".to_string(), 5100), ("read".to_string(), 5000)]
        );
    }
}
