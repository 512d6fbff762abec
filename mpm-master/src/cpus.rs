//! The CPUs a server may run on: how many serving processes
//! `--server-limit auto` starts, and which CPU `--cpu-affinity auto` pins
//! each one to.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use mpm_core::{Error, Result};

/// How many CPUs this process may use: its affinity mask, narrowed by a
/// cgroup CPU quota, as `std::thread::available_parallelism` reads them
/// (at least 1).
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPUs in this process's affinity mask, in order.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| Error::io("reading the CPU affinity mask", e.into()))?;
    Ok((0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
}

/// Pin the calling process (every thread it starts from now on, too) to
/// the `index`-th CPU of those it may run on, in turn when there are more
/// processes than CPUs: serving process N on CPU N. Returns the CPU.
pub fn pin_to_cpu(index: usize) -> Result<usize> {
    let cpus = allowed_cpus()?;
    let Some(&cpu) = cpus.get(index % cpus.len().max(1)) else {
        return Err(Error::config("no CPU in this process's affinity mask"));
    };
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| Error::io(format!("choosing CPU {cpu}"), e.into()))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| Error::io(format!("pinning to CPU {cpu}"), e.into()))?;
    Ok(cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_only() {
        // On a thread of its own: the test process's other threads keep
        // their mask.
        std::thread::spawn(|| {
            let before = allowed_cpus().unwrap();
            assert!(!before.is_empty());
            assert!(usable_cpus() <= before.len());
            let cpu = pin_to_cpu(before.len() + 1).unwrap();
            assert_eq!(cpu, before[1 % before.len()]);
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
        })
        .join()
        .unwrap();
    }
}
