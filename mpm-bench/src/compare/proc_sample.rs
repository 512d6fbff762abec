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
        // utime, stime, cutime, cstime: fields 14 to 17.
        let t: u64 = (14..=17).filter_map(field).sum();
        s.cpu_us += t * 1_000_000 / ticks;
        s.threads += field(20).unwrap_or(1) as usize;
        s.pss_kib += kib_field(&format!("/proc/{pid}/smaps_rollup"), "Pss:");
        s.rss_kib += kib_field(&format!("/proc/{pid}/status"), "VmRSS:");
    }
    s
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
