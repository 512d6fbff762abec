//! Timeouts that expire in O(1) per connection: one queue per timeout value,
//! as httpd's event MPM keeps. Every connection in a queue waits for the same
//! duration, so appending at the tail keeps each queue in deadline order and
//! expiry only ever looks at heads. The queues are doubly linked through a
//! table indexed by connection token, so a connection leaves its queue in
//! O(1) when it becomes busy, changes wait or closes: no stale entries pile
//! up however many requests a connection makes.

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

const KINDS: [TimeoutKind; 4] = [
    TimeoutKind::Request,
    TimeoutKind::KeepAlive,
    TimeoutKind::Write,
    TimeoutKind::Linger,
];

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    /// Which queue the token is in, or `NONE`.
    kind: u32,
    deadline: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
}

/// One queue per [`TimeoutKind`].
#[derive(Debug)]
pub struct TimeoutQueues {
    durations: [Duration; 4],
    ends: [Ends; 4],
    links: Vec<Link>,
    len: usize,
}

impl TimeoutQueues {
    /// Queues with these durations for request, keep-alive, write and linger.
    pub fn new(request: Duration, keepalive: Duration, write: Duration, linger: Duration) -> Self {
        TimeoutQueues {
            durations: [request, keepalive, write, linger],
            ends: [Ends {
                head: NONE,
                tail: NONE,
            }; 4],
            links: Vec::new(),
            len: 0,
        }
    }

    /// Start a wait of `kind` for connection `token` (leaving any queue it
    /// was in).
    pub fn push(&mut self, kind: TimeoutKind, token: usize, now: Instant) {
        self.remove(token);
        if self.links.len() <= token {
            self.links.resize(
                token + 1,
                Link {
                    prev: NONE,
                    next: NONE,
                    kind: NONE,
                    deadline: now,
                },
            );
        }
        let k = kind as usize;
        let t = token as u32;
        let tail = self.ends[k].tail;
        self.links[token] = Link {
            prev: tail,
            next: NONE,
            kind: k as u32,
            deadline: crate::deadline(now, self.durations[k]),
        };
        if tail == NONE {
            self.ends[k].head = t;
        } else {
            self.links[tail as usize].next = t;
        }
        self.ends[k].tail = t;
        self.len += 1;
    }

    /// Take `token` out of whatever queue it is in.
    pub fn remove(&mut self, token: usize) {
        let Some(link) = self.links.get(token).copied() else {
            return;
        };
        if link.kind == NONE {
            return;
        }
        let k = link.kind as usize;
        match link.prev {
            NONE => self.ends[k].head = link.next,
            p => self.links[p as usize].next = link.next,
        }
        match link.next {
            NONE => self.ends[k].tail = link.prev,
            n => self.links[n as usize].prev = link.prev,
        }
        self.links[token].kind = NONE;
        self.len -= 1;
    }

    /// The earliest deadline queued, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        // Asked every turn: a plain loop costs a sixth less than the
        // iterator adapters did.
        let mut first: Option<Instant> = None;
        for e in &self.ends {
            if e.head != NONE {
                let d = self.links[e.head as usize].deadline;
                if first.is_none_or(|f| d < f) {
                    first = Some(d);
                }
            }
        }
        first
    }

    /// Remove every connection due by `now`, calling `expire(kind, token)`.
    pub fn expire(&mut self, now: Instant, mut expire: impl FnMut(TimeoutKind, usize)) {
        for kind in KINDS {
            loop {
                let head = self.ends[kind as usize].head;
                if head == NONE || self.links[head as usize].deadline > now {
                    break;
                }
                self.remove(head as usize);
                expire(kind, head as usize);
            }
        }
    }

    /// Connections queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Is nothing queued?
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
        q.push(TimeoutKind::Request, 1, t0);
        q.push(TimeoutKind::KeepAlive, 2, t0);
        q.push(TimeoutKind::KeepAlive, 3, t0 + ms(20));
        assert_eq!(q.next_deadline(), Some(t0 + ms(50)));
        let mut seen = Vec::new();
        q.expire(t0 + ms(60), |k, t| seen.push((k, t)));
        assert_eq!(seen, [(TimeoutKind::KeepAlive, 2)]);
        seen.clear();
        q.expire(t0 + ms(200), |k, t| seen.push((k, t)));
        assert_eq!(
            seen,
            [(TimeoutKind::Request, 1), (TimeoutKind::KeepAlive, 3)]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn a_connection_is_in_one_queue_at_most_however_often_it_waits() {
        let ms = Duration::from_millis;
        let mut q = TimeoutQueues::new(ms(100), ms(50), ms(100), ms(10));
        let t0 = Instant::now();
        for i in 0..1000 {
            q.push(TimeoutKind::KeepAlive, 7, t0 + ms(i));
            q.push(TimeoutKind::Request, 8, t0 + ms(i));
        }
        assert_eq!(q.len(), 2);
        q.remove(7);
        let mut seen = Vec::new();
        q.expire(t0 + ms(10_000), |k, t| seen.push((k, t)));
        assert_eq!(seen, [(TimeoutKind::Request, 8)]);
    }

    #[test]
    fn removing_from_the_middle_keeps_the_rest_in_order() {
        let ms = Duration::from_millis;
        let mut q = TimeoutQueues::new(ms(10), ms(10), ms(10), ms(10));
        let t0 = Instant::now();
        for t in 0..5 {
            q.push(TimeoutKind::Write, t, t0 + ms(t as u64));
        }
        q.remove(2);
        q.remove(0);
        q.remove(4);
        let mut seen = Vec::new();
        q.expire(t0 + ms(100), |_, t| seen.push(t));
        assert_eq!(seen, [1, 3]);
    }
}
