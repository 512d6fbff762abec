//! What a server's process tree costs, read from /proc: CPU time, PSS, RSS,
//! processes and threads.

use std::fs;

/// A process and all its descendants (through every thread's `children`).
pub fn tree(root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        out.push(pid);
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            if let Ok(children) = fs::read_to_string(task.path().join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
        }
    }
    out
}

/// One reading of a process tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// User and system CPU time of the tree (and of children it has reaped), in µs.
    pub cpu_us: u64,
    /// Proportional set size summed over the tree, in KiB.
    pub pss_kib: u64,
    /// Resident set size summed over the tree, in KiB (shared pages counted in each).
    pub rss_kib: u64,
    /// Processes in the tree.
    pub processes: usize,
    /// Threads in the tree.
    pub threads: usize,
}

/// Read `root`'s tree now.
pub fn sample(root: i32) -> Sample {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .unwrap_or(100) as u64;
    let mut s = Sample::default();
    for pid in tree(root) {
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        s.processes += 1;
        // Fields after the command name (which may hold spaces), from field 3.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        // The threads' own CPU from the scheduler's run time, in ns: utime
        // and stime (fields 14, 15) are sampled at each tick, and a process
        // that runs in bursts shorter than a tick (each of 256 prefork
        // children answering now and then) is charged almost nothing there
        // (0.04 s for 2 s of CPU, measured). Children it has reaped count
        // through cutime and cstime (fields 16, 17), as ticks: no finer
        // figure survives them.
        s.cpu_us += run_time_ns(pid).map_or_else(
            || (14..=15).filter_map(field).sum::<u64>() * 1_000_000 / ticks,
            |ns| ns / 1_000,
        );
        let reaped: u64 = (16..=17).filter_map(field).sum();
        s.cpu_us += reaped * 1_000_000 / ticks;
        s.threads += field(20).unwrap_or(1) as usize;
        s.pss_kib += kib_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:");
        s.rss_kib += kib_field(&format!("/proc/{pid}/status"), "VmRSS:");
    }
    s
}

/// The scheduler's run time of every thread of `pid`, in ns; `None` if
/// the kernel keeps no schedstat.
fn run_time_ns(pid: i32) -> Option<u64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(ns) = text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            total += ns;
            any = true;
        }
    }
    any.then_some(total)
}

fn kib_field(path: &str, name: &str) -> u64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_threads_and_cpu() {
        let spin: u64 = (0..2_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0);
        let s = sample(std::process::id() as i32);
        assert_eq!(s.processes, 1);
        assert!(s.threads >= 1);
        assert!(s.pss_kib > 0 && s.rss_kib >= s.pss_kib, "{s:?}");
    }
}
