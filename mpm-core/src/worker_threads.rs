//! The threads a threaded model starts: named, with a small stack, and all
//! stopped cleanly when one cannot start.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Stack size of a worker thread: handlers run on it, so it is not tiny,
/// but thousands of threads (worker MPM) must fit.
const STACK: usize = 512 * 1024;

/// A model's worker threads.
#[derive(Debug, Default)]
pub struct WorkerThreads {
    handles: Vec<JoinHandle<()>>,
}

impl WorkerThreads {
    /// Start `count` threads named `{name}-{i}`, each running `body(i)`.
    ///
    /// If one cannot start, `unwind` is called (it must make the threads
    /// already running return: stop the lifecycle, close their channel),
    /// they are joined, and the error says which thread failed.
    pub fn spawn<B, T>(
        name: &str,
        count: usize,
        mut body: B,
        unwind: impl FnOnce(),
    ) -> Result<WorkerThreads>
    where
        B: FnMut(usize) -> T,
        T: FnOnce() + Send + 'static,
    {
        let mut threads = WorkerThreads {
            handles: Vec::with_capacity(count),
        };
        for i in 0..count {
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(STACK)
                .spawn(body(i));
            match spawned {
                Ok(h) => threads.handles.push(h),
                Err(e) => {
                    unwind();
                    threads.join();
                    return Err(Error::io(format!("starting worker thread {i}"), e));
                }
            }
        }
        Ok(threads)
    }

    /// Have all of them returned?
    pub fn all_finished(&self) -> bool {
        self.handles.iter().all(JoinHandle::is_finished)
    }

    /// Wait for every thread.
    pub fn join(self) {
        for h in self.handles {
            let _ = h.join();
        }
    }

    /// Wait up to `within` for the threads to return, then join those that
    /// did: one stuck in a handler past the graceful timeout is left behind
    /// rather than waited on.
    pub fn join_within(self, within: Duration) {
        self.join_until(crate::deadline(Instant::now(), within));
    }

    /// Wait until `give_up` at most for the threads to return, then join
    /// those that did. Returns how many were left behind, still running.
    pub fn join_until(self, give_up: Instant) -> usize {
        while !self.all_finished() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut stuck = 0;
        for h in self.handles {
            if h.is_finished() {
                let _ = h.join();
            } else {
                stuck += 1;
            }
        }
        stuck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's `Duration::MAX` is "as long as can be": no overflow panic
    /// adding it to now, and threads that finish are joined at once.
    #[test]
    fn joining_within_duration_max_does_not_panic() {
        let threads = WorkerThreads::spawn("t", 2, |_| || {}, || {}).unwrap();
        threads.join_within(Duration::MAX);
    }
}
