//! The deadlines of connections parked on a wait of their own
//! ([`Parked::Await`](crate::event_loop::Parked::Await)): each its own
//! moment, so not the fixed-duration queues of `timeout_queues`. A binary
//! heap, earliest first, that knows where each connection's entry lies:
//! one leaves it in O(log n) when its wait ends early (nearly always), and
//! nothing is allocated once the heap has grown to the connections that
//! wait at once. (A `BTreeSet` did this before, allocating and freeing a
//! node whenever it emptied, and running through some 1.5 KiB of code a
//! request.)

use std::time::Instant;

const NONE: u32 = u32::MAX;

/// At most one deadline per connection token.
#[derive(Debug, Default)]
pub(crate) struct AwaitDeadlines {
    /// `(deadline, token)`, a min-heap: ties go to the lower token.
    heap: Vec<(Instant, usize)>,
    /// Where each token's entry is in `heap`, or `NONE`.
    at: Vec<u32>,
}

impl AwaitDeadlines {
    /// Connection `t` waits until `until` (instead of any deadline it had).
    pub(crate) fn insert(&mut self, until: Instant, t: usize) {
        self.remove(t);
        if self.at.len() <= t {
            self.at.resize(t + 1, NONE);
        }
        let i = self.heap.len();
        self.heap.push((until, t));
        self.place(i, t);
        self.sift_up(i);
    }

    /// Connection `t` waits no more.
    pub(crate) fn remove(&mut self, t: usize) {
        let Some(&i) = self.at.get(t) else { return };
        if i == NONE {
            return;
        }
        self.at[t] = NONE;
        let i = i as usize;
        let Some(last) = self.heap.pop() else { return };
        if i < self.heap.len() {
            // The last entry fills the hole, then finds its place.
            self.heap[i] = last;
            self.place(i, last.1);
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    /// The earliest deadline, with its connection.
    pub(crate) fn first(&self) -> Option<(Instant, usize)> {
        self.heap.first().copied()
    }

    fn place(&mut self, i: usize, t: usize) {
        self.at[t] = i as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent] <= self.heap[i] {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.heap[l] < self.heap[least] {
                least = l;
            }
            if r < self.heap.len() && self.heap[r] < self.heap[least] {
                least = r;
            }
            if least == i {
                break;
            }
            self.swap(i, least);
            i = least;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.place(a, self.heap[a].1);
        self.place(b, self.heap[b].1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;

    #[test]
    fn deadlines_come_out_earliest_first_whatever_leaves_meanwhile() {
        let t0 = Instant::now();
        let mut d = AwaitDeadlines::default();
        let mut model = BTreeSet::new();
        let mut until = [None; 64];
        // A fixed pseudo-random walk of waits that begin, move and end.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = (x % 64) as usize;
            if x & (1 << 40) == 0 {
                let at = t0 + Duration::from_millis(x >> 50);
                if let Some(old) = until[t].replace(at) {
                    model.remove(&(old, t));
                }
                model.insert((at, t));
                d.insert(at, t);
            } else {
                if let Some(old) = until[t].take() {
                    model.remove(&(old, t));
                }
                d.remove(t);
            }
            assert_eq!(d.first(), model.first().copied());
        }
        while let Some((at, t)) = d.first() {
            assert_eq!(model.pop_first(), Some((at, t)));
            d.remove(t);
        }
        assert!(model.is_empty());
    }
}
