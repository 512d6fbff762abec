//! Timeouts that expire in O(1) per connection: one FIFO queue per timeout
//! value, as httpd's event MPM keeps. Every entry in a queue has the same
//! duration, so entries are pushed in deadline order and expired from the
//! front; an entry whose connection has moved on since (its generation
//! changed) is skipped when it comes up, never searched for.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The kinds of wait the event loop times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// Mid-request, or a new connection: `--timeout`.
    Request = 0,
    /// Idle between requests: `--keepalive-timeout`.
    KeepAlive = 1,
    /// Waiting to write: `--timeout`.
    Write = 2,
    /// Lingering close: two seconds.
    Linger = 3,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    deadline: Instant,
    token: usize,
    generation: u64,
}

/// One queue per [`TimeoutKind`].
#[derive(Debug)]
pub struct TimeoutQueues {
    durations: [Duration; 4],
    queues: [VecDeque<Entry>; 4],
}

impl TimeoutQueues {
    /// Queues with these durations for request, keep-alive, write and linger.
    pub fn new(request: Duration, keepalive: Duration, write: Duration, linger: Duration) -> Self {
        TimeoutQueues {
            durations: [request, keepalive, write, linger],
            queues: Default::default(),
        }
    }

    /// Start a wait of `kind` for the connection `token` in `generation`.
    pub fn push(&mut self, kind: TimeoutKind, token: usize, generation: u64, now: Instant) {
        let i = kind as usize;
        self.queues[i].push_back(Entry {
            deadline: now + self.durations[i],
            token,
            generation,
        });
    }

    /// The earliest deadline queued, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queues
            .iter()
            .filter_map(|q| q.front().map(|e| e.deadline))
            .min()
    }

    /// Remove every entry due by `now`, calling `expire(kind, token, generation)`
    /// for each; the caller ignores entries whose generation is stale.
    pub fn expire(&mut self, now: Instant, mut expire: impl FnMut(TimeoutKind, usize, u64)) {
        const KINDS: [TimeoutKind; 4] = [
            TimeoutKind::Request,
            TimeoutKind::KeepAlive,
            TimeoutKind::Write,
            TimeoutKind::Linger,
        ];
        for kind in KINDS {
            let q = &mut self.queues[kind as usize];
            while q.front().is_some_and(|e| e.deadline <= now) {
                if let Some(e) = q.pop_front() {
                    expire(kind, e.token, e.generation);
                }
            }
        }
    }

    /// Entries queued (stale ones included), for the tests.
    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Is nothing queued?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_in_deadline_order_per_kind() {
        let ms = Duration::from_millis;
        let mut q = TimeoutQueues::new(ms(100), ms(50), ms(100), ms(10));
        let t0 = Instant::now();
        q.push(TimeoutKind::Request, 1, 0, t0);
        q.push(TimeoutKind::KeepAlive, 2, 0, t0);
        q.push(TimeoutKind::KeepAlive, 3, 7, t0 + ms(20));
        assert_eq!(q.next_deadline(), Some(t0 + ms(50)));
        let mut seen = Vec::new();
        q.expire(t0 + ms(60), |k, t, g| seen.push((k, t, g)));
        assert_eq!(seen, [(TimeoutKind::KeepAlive, 2, 0)]);
        seen.clear();
        q.expire(t0 + ms(200), |k, t, g| seen.push((k, t, g)));
        assert_eq!(
            seen,
            [(TimeoutKind::Request, 1, 0), (TimeoutKind::KeepAlive, 3, 7)]
        );
        assert!(q.is_empty());
    }
}
