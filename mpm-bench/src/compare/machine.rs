//! The machine a comparison ran on, and how busy it was: CPUs, memory and
//! kernel; the load average before and after; and how much CPU other
//! programs took meanwhile (the whole machine's busy time from /proc/stat,
//! less what compare and its servers used).

use std::fs;

use serde::Serialize;

/// What the report says about the machine.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The CPU's model name.
    pub cpu_model: String,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// The kernel (`uname -sr`).
    pub kernel: String,
    /// Load average (1, 5, 15 minutes) before the first run.
    pub load_before: [f64; 3],
    /// Load average after the last run.
    pub load_after: [f64; 3],
    /// The share of the machine's CPU time other programs used during the
    /// comparison (0 to 1), when /proc/stat could be read.
    pub others_cpu_share: Option<f64>,
}

/// A reading taken before the runs, finished after them.
#[derive(Debug)]
pub struct Watch {
    machine: Machine,
    busy_before: Option<(u64, u64)>,
    ours_before: f64,
}

impl Watch {
    /// Describe the machine and read its load now.
    pub fn start() -> Watch {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown CPU".to_string(), |(_, v)| v.trim().to_string());
        let memory_mib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map_or(0, |kib| kib / 1024);
        let read = |p| fs::read_to_string(p).map(|s| s.trim().to_string());
        let kernel = match (
            read("/proc/sys/kernel/ostype"),
            read("/proc/sys/kernel/osrelease"),
        ) {
            (Ok(os), Ok(release)) => format!("{os} {release}"),
            _ => "unknown kernel".into(),
        };
        Watch {
            machine: Machine {
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                cpu_model,
                memory_mib,
                kernel,
                load_before: load_average(),
                load_after: [0.0; 3],
                others_cpu_share: None,
            },
            busy_before: busy_ticks(),
            ours_before: our_cpu_seconds(),
        }
    }

    /// Read the load again; the description, and warnings about it.
    pub fn finish(mut self) -> (Machine, Vec<String>) {
        let m = &mut self.machine;
        m.load_after = load_average();
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&t| t > 0)
            .unwrap_or(100) as f64;
        if let (Some((busy0, all0)), Some((busy1, all1))) = (self.busy_before, busy_ticks()) {
            let all = all1.saturating_sub(all0) as f64 / ticks;
            let busy = busy1.saturating_sub(busy0) as f64 / ticks;
            let ours = our_cpu_seconds() - self.ours_before;
            if all > 0.0 {
                m.others_cpu_share = Some(((busy - ours) / all).clamp(0.0, 1.0));
            }
        }
        let warnings = self.machine.warnings();
        (self.machine, warnings)
    }
}

impl Machine {
    /// What makes the figures unreliable: a load average above the CPU
    /// count, other programs taking more than 5 % of the CPU.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let peak = self.load_before[0].max(self.load_after[0]);
        if peak > self.cpus as f64 {
            warnings.push(format!(
                "the load average ({:.2} before, {:.2} after) exceeded the {} CPUs: runs waited \
                 for a CPU, and the figures carry that noise (compare within a table, and mind \
                 the spread)",
                self.load_before[0], self.load_after[0], self.cpus
            ));
        }
        if let Some(share) = self.others_cpu_share.filter(|s| *s > 0.05) {
            warnings.push(format!(
                "other programs used {:.0} % of the machine's CPU time during the comparison",
                share * 100.0
            ));
        }
        warnings
    }

    /// One sentence for the report.
    pub fn describe(&self) -> String {
        let others = self.others_cpu_share.map_or(String::new(), |s| {
            format!(
                "; other programs took {:.0} % of its CPU meanwhile",
                s * 100.0
            )
        });
        format!(
            "{} CPUs ({}), {:.1} GiB, {}; load average {:.2} before, {:.2} after{others}.",
            self.cpus,
            self.cpu_model,
            self.memory_mib as f64 / 1024.0,
            self.kernel,
            self.load_before[0],
            self.load_after[0]
        )
    }
}

fn load_average() -> [f64; 3] {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut out = [0.0; 3];
    for (slot, v) in out.iter_mut().zip(text.split_whitespace()) {
        *slot = v.parse().unwrap_or(0.0);
    }
    out
}

/// The machine's busy and total CPU ticks since boot (/proc/stat's `cpu` line).
fn busy_ticks() -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let all: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((all.saturating_sub(idle), all))
}

/// CPU seconds used by this process and the children it has waited for
/// (the servers, perf, strace, and what they waited for in turn).
fn our_cpu_seconds() -> f64 {
    let secs = |who| {
        nix::sys::resource::getrusage(who).map_or(0.0, |u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
    };
    secs(nix::sys::resource::UsageWho::RUSAGE_SELF)
        + secs(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_machine_is_described_with_its_load() {
        let w = super::Watch::start();
        let (m, _) = w.finish();
        assert!(m.cpus >= 1);
        assert!(m.memory_mib > 0);
        assert!(m.kernel.starts_with("Linux"), "{}", m.kernel);
        assert!(m.describe().contains("load average"));
    }

    #[test]
    fn a_load_above_the_cpus_or_busy_neighbours_are_warned_about() {
        let quiet = super::Machine {
            cpus: 16,
            load_before: [0.5; 3],
            load_after: [3.0; 3],
            others_cpu_share: Some(0.01),
            ..super::Machine::default()
        };
        assert!(quiet.warnings().is_empty());
        let busy = super::Machine {
            cpus: 2,
            load_after: [3.5; 3],
            others_cpu_share: Some(0.3),
            ..quiet
        };
        let w = busy.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("exceeded the 2 CPUs") && w[1].contains("30 %"),
            "{w:?}"
        );
    }
}
