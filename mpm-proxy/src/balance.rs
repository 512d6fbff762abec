//! Choosing an upstream for a request: weighted round-robin (smooth, as
//! nginx's), least connections, and a consistent hash. Every way skips the
//! upstreams the caller says are not eligible (marked down, or already
//! tried by this request), and finds none when none is: nginx's "no live
//! upstreams", which the handler answers 502.
//!
//! A [`Balancer`] is one worker's (its round-robin position is its own, as
//! each nginx worker process has its own); the in-flight counts least-conn
//! reads ([`InFlight`]) are one process's, shared by its threads. Neither is
//! shared across processes: at 64 cores a count every request writes in
//! memory every process shares would be one cache line every core fights
//! over, and per-process balance is what nginx does.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::config::{Balance, ProxyRoute};

/// Ring points per unit of weight, for [`Balance::Hash`].
const POINTS_PER_WEIGHT: usize = 100;
/// The most ring points one upstream gets: weights are honoured on the
/// ring up to 100:1.
const MAX_POINTS_PER_UPSTREAM: usize = 10_000;
/// The most ring points a route gets in all (weights scaled down past it).
const MAX_RING_POINTS: usize = 1 << 20;

/// Requests in flight to each upstream of a route, from this process: what
/// [`Balance::LeastConn`] compares. Clones share the counts.
#[derive(Debug, Clone)]
pub struct InFlight {
    counts: Arc<[AtomicU32]>,
}

impl InFlight {
    /// Counts for `n` upstreams, all zero.
    pub fn new(n: usize) -> InFlight {
        InFlight {
            counts: (0..n).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Count a request to upstream `i` until the guard is dropped.
    pub fn start(&self, i: usize) -> InFlightGuard {
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        InFlightGuard {
            counts: self.counts.clone(),
            i,
        }
    }

    /// Count a request to upstream `i` until the guard is dropped, if
    /// fewer than `max` are in flight to it (0: no limit); `None` when
    /// `max` are. Taken whole, so that threads counting at once never
    /// pass `max` together.
    pub fn try_start(&self, i: usize, max: u32) -> Option<InFlightGuard> {
        if max == 0 {
            return Some(self.start(i));
        }
        let c = self.counts.get(i)?;
        c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()?;
        Some(InFlightGuard {
            counts: self.counts.clone(),
            i,
        })
    }

    /// Requests in flight to upstream `i`.
    pub fn get(&self, i: usize) -> u32 {
        self.counts.get(i).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// One request counted in [`InFlight`] while it lives.
#[derive(Debug)]
pub struct InFlightGuard {
    counts: Arc<[AtomicU32]>,
    i: usize,
}

impl InFlightGuard {
    /// The upstream counted.
    pub fn upstream(&self) -> usize {
        self.i
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some(c) = self.counts.get(self.i) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// One worker's choice of upstream for one route.
#[derive(Debug, Clone)]
pub struct Balancer {
    how: How,
    weights: Vec<u32>,
    /// Smooth weighted round-robin's running weights (nginx's `current_weight`).
    current: Vec<i64>,
    in_flight: InFlight,
}

#[derive(Debug, Clone)]
enum How {
    RoundRobin,
    LeastConn,
    Hash(Ring),
}

impl Balancer {
    /// The balancer `route` asks for; `in_flight` is the process's counts
    /// for the route (least-conn reads them; the handler counts in them).
    pub fn new(route: &ProxyRoute, in_flight: InFlight) -> Balancer {
        let weights: Vec<u32> = route.upstreams.iter().map(|u| u.weight).collect();
        let how = match &route.balance {
            Balance::RoundRobin => How::RoundRobin,
            Balance::LeastConn => How::LeastConn,
            Balance::Hash(_) => {
                let names: Vec<&str> = route.upstreams.iter().map(|u| u.url.as_str()).collect();
                How::Hash(Ring::new(&names, &weights))
            }
        };
        Balancer {
            how,
            current: vec![0; weights.len()],
            weights,
            in_flight,
        }
    }

    /// The process's in-flight counts for the route.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The upstream for a request, among those `eligible` says may take
    /// it; `key` is what a hash route hashes (ignored otherwise). `None`
    /// when no upstream is eligible.
    pub fn pick(&mut self, key: &[u8], eligible: impl Fn(usize) -> bool) -> Option<usize> {
        match &self.how {
            How::RoundRobin => self.smooth(eligible),
            How::LeastConn => {
                // The fewest in flight per unit of weight: a/wa < b/wb
                // compared as a*wb < b*wa, in integers.
                let load: Vec<(u64, u64)> = (0..self.weights.len())
                    .map(|i| (u64::from(self.in_flight.get(i)), u64::from(self.weights[i])))
                    .collect();
                let best = (0..load.len()).filter(|&i| eligible(i)).min_by(|&a, &b| {
                    let ((la, wa), (lb, wb)) = (load[a], load[b]);
                    (la * wb).cmp(&(lb * wa))
                })?;
                let (lb, wb) = load[best];
                // Ties go by weighted round-robin, as nginx's least_conn.
                self.smooth(|i| eligible(i) && load[i].0 * wb == lb * load[i].1)
            }
            // No key (a header hash whose header is missing or empty):
            // weighted round-robin, as nginx's `hash` does, rather than
            // every such request on the one upstream of the empty key.
            How::Hash(_) if key.is_empty() => self.smooth(eligible),
            How::Hash(ring) => ring.find(hash(key), eligible),
        }
    }

    /// nginx's smooth weighted round-robin among the upstreams `take`
    /// accepts: each gains its weight, the highest is chosen and loses the
    /// sum. Upstreams not taken keep their running weight.
    fn smooth(&mut self, take: impl Fn(usize) -> bool) -> Option<usize> {
        let mut total: i64 = 0;
        let mut best: Option<usize> = None;
        for i in 0..self.weights.len() {
            if !take(i) {
                continue;
            }
            self.current[i] += i64::from(self.weights[i]);
            total += i64::from(self.weights[i]);
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        self.current[b] -= total;
        Some(b)
    }
}

/// A consistent-hash ring: each upstream at many points (by weight), a key
/// going to the first point at or after its hash. The points depend on the
/// upstream's URL only, so that removing an upstream (or its being down)
/// moves only the keys that were its own, and every process and worker
/// places a key alike.
#[derive(Debug, Clone)]
struct Ring {
    /// (point, upstream), sorted by point.
    points: Vec<(u64, usize)>,
}

impl Ring {
    fn new(names: &[&str], weights: &[u32]) -> Ring {
        let want: Vec<usize> = weights
            .iter()
            .map(|&w| (w as usize * POINTS_PER_WEIGHT).min(MAX_POINTS_PER_UPSTREAM))
            .collect();
        let sum: usize = want.iter().sum();
        let scale = |n: usize| {
            if sum > MAX_RING_POINTS {
                (n * MAX_RING_POINTS / sum).max(1)
            } else {
                n
            }
        };
        let mut points = Vec::new();
        for (i, (name, &n)) in names.iter().zip(&want).enumerate() {
            for v in 0..scale(n) {
                let mut key = Vec::with_capacity(name.len() + 12);
                key.extend_from_slice(name.as_bytes());
                key.push(b'#');
                key.extend_from_slice(v.to_string().as_bytes());
                points.push((hash(&key), i));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// The first eligible upstream at or after `h` round the ring.
    fn find(&self, h: u64, eligible: impl Fn(usize) -> bool) -> Option<usize> {
        let start = self.points.partition_point(|&(p, _)| p < h);
        let n = self.points.len();
        (0..n)
            .map(|k| self.points[(start + k) % n].1)
            .find(|&i| eligible(i))
    }
}

/// A hash that is the same in every process and every run (std's is keyed
/// at random per process): FNV-1a, finished by splitmix64 so that nearby
/// keys spread over the ring.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HashKey;

    fn route(balance: Balance, weights: &[u32]) -> ProxyRoute {
        let urls: Vec<String> = (0..weights.len())
            .map(|i| format!("http://10.0.0.{i}"))
            .collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let mut r = ProxyRoute::new("/", &urls).unwrap();
        for (u, &w) in r.upstreams.iter_mut().zip(weights) {
            u.weight = w;
        }
        r.balance = balance;
        r
    }

    fn balancer(balance: Balance, weights: &[u32]) -> Balancer {
        Balancer::new(&route(balance, weights), InFlight::new(weights.len()))
    }

    #[test]
    fn round_robin_is_smooth_as_nginx() {
        // nginx's own example: weights 5, 1, 1 give a a b a c a a.
        let mut b = balancer(Balance::RoundRobin, &[5, 1, 1]);
        let order: Vec<usize> = (0..7).map(|_| b.pick(b"", |_| true).unwrap()).collect();
        assert_eq!(order, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn round_robin_follows_the_weights_and_skips_the_ineligible() {
        let mut b = balancer(Balance::RoundRobin, &[3, 2, 1]);
        let mut n = [0; 3];
        for _ in 0..600 {
            n[b.pick(b"", |_| true).unwrap()] += 1;
        }
        assert_eq!(n, [300, 200, 100]);
        let mut n = [0; 3];
        for _ in 0..400 {
            n[b.pick(b"", |i| i != 0).unwrap()] += 1;
        }
        assert_eq!(n[0], 0, "a down upstream is skipped");
        assert!(
            (266..=267).contains(&n[1]) && n[1] + n[2] == 400,
            "2:1 among the rest: {n:?}"
        );
    }

    #[test]
    fn no_eligible_upstream_is_none() {
        for how in [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::Hash(HashKey::ClientAddr),
        ] {
            let mut b = balancer(how.clone(), &[1, 1]);
            assert_eq!(b.pick(b"k", |_| false), None, "{how}");
        }
    }

    #[test]
    fn least_conn_takes_the_fewest_in_flight_per_weight() {
        let mut b = balancer(Balance::LeastConn, &[1, 1, 1]);
        let flight = b.in_flight().clone();
        let _g1 = flight.start(0);
        let _g2 = flight.start(0);
        let _g3 = flight.start(1);
        assert_eq!(b.pick(b"", |_| true), Some(2));
        {
            let _g4 = flight.start(2);
            let _g5 = flight.start(2);
            assert_eq!(b.pick(b"", |_| true), Some(1));
        }
        assert_eq!(flight.get(2), 0, "a guard's drop ends its count");
        // Weighted: 2 in flight at weight 3 is less loaded than 1 at weight 1.
        let mut w = balancer(Balance::LeastConn, &[3, 1]);
        let f = w.in_flight().clone();
        let _a = (f.start(0), f.start(0), f.start(1));
        assert_eq!(w.pick(b"", |_| true), Some(0));
    }

    #[test]
    fn least_conn_ties_go_round_by_weight() {
        let mut b = balancer(Balance::LeastConn, &[2, 1]);
        let mut n = [0; 2];
        for _ in 0..300 {
            n[b.pick(b"", |_| true).unwrap()] += 1;
        }
        assert_eq!(n, [200, 100]);
    }

    fn keys() -> impl Iterator<Item = Vec<u8>> {
        (0..10_000u32).map(|k| format!("203.0.113.{k}").into_bytes())
    }

    #[test]
    fn hashing_sends_a_key_to_one_upstream_and_spreads_keys() {
        let mut b = balancer(Balance::Hash(HashKey::ClientAddr), &[1, 1, 1, 1]);
        let mut n = [0; 4];
        for k in keys() {
            let i = b.pick(&k, |_| true).unwrap();
            assert_eq!(b.pick(&k, |_| true), Some(i), "stable");
            n[i] += 1;
        }
        for c in n {
            assert!((1800..3200).contains(&c), "spread over four: {n:?}");
        }
    }

    #[test]
    fn removing_an_upstream_moves_only_its_keys() {
        let four = route(Balance::Hash(HashKey::ClientAddr), &[1, 1, 1, 1]);
        let mut three = four.clone();
        three.upstreams.remove(2);
        let mut b4 = Balancer::new(&four, InFlight::new(4));
        let mut b3 = Balancer::new(&three, InFlight::new(3));
        let mut moved = 0;
        for k in keys() {
            let before = b4.pick(&k, |_| true).unwrap();
            let after = b3.pick(&k, |_| true).unwrap();
            let after_url = &three.upstreams[after].url;
            if before == 2 {
                moved += 1;
            } else {
                assert_eq!(
                    &four.upstreams[before].url, after_url,
                    "a key not on the removed one stays"
                );
            }
            // The same when it is only down.
            let down = b4.pick(&k, |i| i != 2).unwrap();
            assert_eq!(&four.upstreams[down].url, after_url);
        }
        assert!(
            (1800..3200).contains(&moved),
            "about a quarter moved: {moved}"
        );
    }

    #[test]
    fn an_empty_hash_key_goes_round_robin_as_nginx() {
        let mut b = balancer(Balance::Hash(HashKey::Header("X-User".into())), &[1, 1, 1]);
        let mut n = [0; 3];
        for _ in 0..300 {
            n[b.pick(b"", |_| true).unwrap()] += 1;
        }
        assert_eq!(n, [100, 100, 100], "requests without the header spread");
        assert_eq!(b.pick(b"", |i| i == 2), Some(2), "down ones skipped");
    }

    #[test]
    fn hash_weights_shift_the_share() {
        let mut b = balancer(Balance::Hash(HashKey::ClientAddr), &[3, 1]);
        let heavy = keys().filter(|k| b.pick(k, |_| true) == Some(0)).count();
        assert!(
            (6500..8500).contains(&heavy),
            "about three quarters: {heavy}"
        );
    }

    /// `hash(b"abc")`, as this build computes it; a change would move
    /// every key of every hash route on an upgrade.
    const PINNED: u64 = 996_580_060_897_260_808;

    #[test]
    fn the_hash_is_the_same_everywhere() {
        // A fixed value: every process and every build must agree.
        assert_ne!(hash(b"a"), hash(b"b"));
        assert_eq!(hash(b"abc"), PINNED);
    }
}
