//! Which CPU a thread runs on now: the part of a per-CPU structure (a
//! striped counter) a thread should write, so that cores do not take turns
//! at one cache line.

/// The CPU the calling thread runs on now; it may move at any time after,
/// so the answer is a hint (which stripe to use), never a guarantee. glibc
/// (2.35 and later) reads it from the thread's `rseq` area without a system
/// call, and asks the vDSO where `rseq` is not registered (under valgrind).
/// 0 where the kernel cannot say.
pub fn current() -> usize {
    // SAFETY: sched_getcpu takes no argument and writes no memory of the
    // caller's; it returns the CPU's number, or -1 with errno set.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;

    #[test]
    fn a_thread_pinned_to_a_cpu_is_told_that_cpu() {
        let allowed = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
        let cpus: Vec<usize> = (0..CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .collect();
        // On a thread of its own, pinned to each allowed CPU in turn (the
        // last one too: a count is not an index).
        std::thread::spawn(move || {
            for &cpu in [cpus[0], cpus[cpus.len() - 1]].iter() {
                let mut one = CpuSet::new();
                one.set(cpu).expect("a CPU number");
                sched_setaffinity(Pid::from_raw(0), &one).expect("pin");
                assert_eq!(current(), cpu);
            }
        })
        .join()
        .expect("the pinned thread");
    }
}
