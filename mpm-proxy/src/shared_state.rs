//! Every upstream's state in memory every process of the server shares
//! ([`mpm_core::shared`]): its health (`health.rs`) and its counters
//! (`stats.rs`), in a slot of its own.
//!
//! The memory ([`Slots`]) is mapped once, in the first process that builds
//! a [`ProxyState`] (the master, before it forks: the `mpm` crate's
//! `App::check` or wherever it builds the application), and never
//! unmapped: a reload (SIGHUP) builds a new `ProxyState` in the same
//! memory, and an upstream that was in the old configuration (same route
//! prefix, same URL) keeps its slot, so its health and counters carry
//! over; an upstream no longer listed gives its slot back, and a new one
//! starts from zero. A slot given back is given out again only from the
//! reload after next, so that the old generation still serving during a
//! graceful restart never counts in a new upstream's slot; with reloads
//! faster than an old generation ends, at worst its counts land on the
//! new upstream until it exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::config::ProxyRoute;
use crate::error::{Error, Result};
use crate::idle_shares::IdleShares;
use crate::path::RouteTable;

/// The most upstreams, over every route, the shared state has slots for.
pub const MAX_UPSTREAMS: usize = 4096;

/// Words in one upstream's slot: 256 bytes (health on the first line, read
/// by every request and written rarely; the counters of rare events on the
/// third). What every request counts is in the slot's stripes instead.
pub(crate) const SLOT_WORDS: usize = 32;

/// Words in one stripe of an upstream: 128 bytes (two cache lines, as the
/// CPU fetches them in pairs), one stripe per CPU
/// ([`mpm_core::shared::stripe_count`]). The counters every request adds
/// to are there: each core writes its own stripe, and a read sums them, so
/// that cores do not take one line in turn on every request (at 64 cores
/// a single line would move on nearly every add). One stripe holds all of
/// an upstream's such counters, written by the same request on the same
/// CPU, where [`mpm_core::shared::Counters`] would give each counter
/// stripes of its own: four times the lines for the 4,096 upstreams.
pub(crate) const STRIPE_WORDS: usize = 16;

/// The words of a slot, by name.
pub(crate) mod word {
    /// Passive: failures counted in the current window.
    pub(crate) const FAILS: usize = 0;
    /// Passive: when the current failure window began (ms, 0: none).
    pub(crate) const WINDOW_START: usize = 1;
    /// Passive: marked down until then (ms).
    pub(crate) const DOWN_UNTIL: usize = 2;
    /// Active: 1 while the checks say down.
    pub(crate) const ACTIVE_DOWN: usize = 3;
    /// Active: passed checks in a row.
    pub(crate) const OK_STREAK: usize = 4;
    /// Active: failed checks in a row.
    pub(crate) const FAIL_STREAK: usize = 5;
    /// Active: when the next check is due (ms); taken by compare-and-swap.
    pub(crate) const NEXT_CHECK: usize = 6;

    /// Counters of rare events, on the third line.
    pub(crate) const FAILURES: usize = 17;
    pub(crate) const MARKED_DOWN: usize = 18;
    pub(crate) const MARKED_UP: usize = 19;
    pub(crate) const CHECKS: usize = 20;
    pub(crate) const CHECKS_FAILED: usize = 21;
}

/// The words of a stripe, by name: what every request counts.
pub(crate) mod hot {
    pub(crate) const REQUESTS: usize = 0;
    pub(crate) const OPENED: usize = 1;
    pub(crate) const REUSED: usize = 2;
    /// A gauge: idle pooled connections of the processes that found no
    /// row of their own (`idle_shares.rs`), summed over them (a stripe
    /// below zero wraps; the sum does not).
    pub(crate) const POOL_IDLE: usize = 3;
}

/// Shared memory for upstreams' slots, and which (route prefix, URL) has
/// which. The server uses one, [`Slots::global`], made by the first
/// process that builds a [`ProxyState`] (the master, before it forks) and
/// kept across reloads; a test may make its own. Clones share both.
#[derive(Debug, Clone)]
pub struct Slots {
    memory: &'static [AtomicU64],
    /// Each slot's stripes: slot `i`'s are `hot[i * per_slot..][..per_slot]`
    /// with `per_slot` = stripes × [`STRIPE_WORDS`].
    hot: &'static [AtomicU64],
    /// Words of one slot's stripes.
    per_slot: usize,
    /// Each process's share of the idle gauges.
    idle: IdleShares,
    /// Kept by the process that builds the states (the master).
    registry: Arc<Mutex<Registry>>,
}

#[derive(Debug, Default)]
struct Registry {
    slots: HashMap<(String, String), usize>,
    free: Vec<usize>,
    /// Slots given back by the last state built: reused only from the one
    /// after, so that a new upstream does not share a slot with the one it
    /// replaced while the old generation still serves (a graceful
    /// restart's, counting and marking in it for the old upstream).
    released: Vec<usize>,
    next: usize,
}

/// The server's slots, mapped once.
static GLOBAL: OnceLock<Slots> = OnceLock::new();

impl Slots {
    /// Room for `capacity` upstreams (at most [`MAX_UPSTREAMS`]), in new
    /// shared memory, never unmapped.
    pub fn new(capacity: usize) -> Result<Slots> {
        let capacity = capacity.min(MAX_UPSTREAMS);
        let memory = mpm_core::shared::words(capacity * SLOT_WORDS, "the proxy's upstream state")
            .map_err(Error::Shared)?;
        // At most 4096 × 64 × 16 words (32 MiB, touched only as slots are
        // used): no overflow.
        let per_slot = mpm_core::shared::stripe_count() * STRIPE_WORDS;
        let hot = mpm_core::shared::words(capacity * per_slot, "the proxy's upstream counters")
            .map_err(Error::Shared)?;
        Ok(Slots {
            memory,
            hot,
            per_slot,
            idle: IdleShares::new(capacity)?,
            registry: Arc::new(Mutex::new(Registry::default())),
        })
    }

    /// The server's slots: room for [`MAX_UPSTREAMS`] (1 MiB, and 128 bytes
    /// an upstream for each stripe: its pages touched only as slots are
    /// used), made on first use.
    pub fn global() -> Result<Slots> {
        if let Some(s) = GLOBAL.get() {
            return Ok(s.clone());
        }
        let made = Slots::new(MAX_UPSTREAMS)?;
        Ok(GLOBAL.get_or_init(|| made).clone())
    }

    /// How many upstreams it has room for.
    pub fn capacity(&self) -> usize {
        self.memory.len() / SLOT_WORDS
    }
}

/// One upstream's slot: a `Copy` handle to its words.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamState {
    /// Its index in the [`Slots`].
    slot: usize,
    words: &'static [AtomicU64],
    /// Its stripes, one per CPU ([`STRIPE_WORDS`] each).
    hot: &'static [AtomicU64],
    pub(crate) max_fails: u32,
    pub(crate) fail_timeout_ms: u64,
}

impl UpstreamState {
    /// Its index in the [`Slots`].
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    pub(crate) fn get(&self, w: usize) -> u64 {
        self.words[w].load(Ordering::Relaxed)
    }

    pub(crate) fn at(&self, w: usize) -> &'static AtomicU64 {
        &self.words[w]
    }

    pub(crate) fn add(&self, w: usize, n: u64) {
        self.words[w].fetch_add(n, Ordering::Relaxed);
    }

    /// Add `n` to counter `h` of [`hot`], in this CPU's stripe.
    pub(crate) fn count(&self, h: usize, n: u64) {
        self.stripe_word(h).fetch_add(n, Ordering::Relaxed);
    }

    /// Take `n` from counter `h` of [`hot`], in this CPU's stripe (wrapping).
    pub(crate) fn uncount(&self, h: usize, n: u64) {
        self.stripe_word(h).fetch_sub(n, Ordering::Relaxed);
    }

    /// Counter `h` of [`hot`]: the sum of its stripes.
    pub(crate) fn total(&self, h: usize) -> u64 {
        self.hot
            .iter()
            .skip(h)
            .step_by(STRIPE_WORDS)
            .fold(0u64, |sum, w| sum.wrapping_add(w.load(Ordering::Relaxed)))
    }

    fn stripe_word(&self, h: usize) -> &'static AtomicU64 {
        let stripe = mpm_core::shared::current_stripe(self.hot.len() / STRIPE_WORDS);
        &self.hot[stripe * STRIPE_WORDS + h]
    }

    fn clear(&self) {
        for w in self.words.iter().chain(self.hot) {
            w.store(0, Ordering::Relaxed);
        }
    }
}

/// The shared state of every upstream of a [`RouteTable`], in the table's
/// order: `state.route(i)[j]` is upstream `j` of `table.routes()[i]`.
/// Cheap to clone; made before the serving processes start.
#[derive(Debug, Clone)]
pub struct ProxyState {
    routes: Vec<Vec<UpstreamState>>,
    /// Each process's share of the idle gauges, in the same memory.
    idle: IdleShares,
    /// Prefix and URL of each, for the status page.
    names: Vec<Vec<(String, String)>>,
}

impl ProxyState {
    /// The state of `table`'s upstreams in the server's [`Slots`]: see
    /// [`with_slots`](Self::with_slots).
    pub fn new(table: &RouteTable) -> Result<ProxyState> {
        ProxyState::with_slots(table, &Slots::global()?)
    }

    /// The state of `table`'s upstreams in `slots`: those of the same
    /// prefix and URL as in the last state built there keep theirs (health
    /// and counters carry over a reload), others start from zero. Errors:
    /// more upstreams than `slots` has room for, or no shared memory.
    pub fn with_slots(table: &RouteTable, slots: &Slots) -> Result<ProxyState> {
        let count: usize = table.routes().iter().map(|r| r.upstreams.len()).sum();
        if count > slots.capacity() {
            return Err(Error::TooManyUpstreams {
                count,
                max: slots.capacity(),
            });
        }
        let memory = slots.memory;
        let per_slot = slots.per_slot;
        let mut registry = slots.registry.lock();
        let wanted: Vec<Vec<(String, String)>> = table.routes().iter().map(names).collect();
        // Slots of upstreams no longer listed go back first.
        let keep: std::collections::HashSet<&(String, String)> = wanted.iter().flatten().collect();
        let gone: Vec<(String, String)> = registry
            .slots
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        let held_back = std::mem::take(&mut registry.released);
        registry.free.extend(held_back);
        for k in gone {
            if let Some(s) = registry.slots.remove(&k) {
                registry.released.push(s);
            }
        }
        let mut routes = Vec::with_capacity(wanted.len());
        for (route, keys) in table.routes().iter().zip(&wanted) {
            let mut states = Vec::with_capacity(keys.len());
            for (spec, key) in route.upstreams.iter().zip(keys) {
                let (slot, fresh) = match registry.slots.get(key) {
                    Some(&s) => (s, false),
                    None => {
                        let capacity = slots.capacity();
                        let s = match registry.free.pop() {
                            Some(s) => s,
                            None if registry.next < capacity => {
                                registry.next += 1;
                                registry.next - 1
                            }
                            // Every slot taken or held back: one just given
                            // back is given out now (there are at most as
                            // many upstreams as slots, checked above).
                            None => match registry.released.pop() {
                                Some(s) => s,
                                None => {
                                    return Err(Error::TooManyUpstreams {
                                        count,
                                        max: capacity,
                                    })
                                }
                            },
                        };
                        registry.slots.insert(key.clone(), s);
                        (s, true)
                    }
                };
                let state = UpstreamState {
                    slot,
                    words: &memory[slot * SLOT_WORDS..(slot + 1) * SLOT_WORDS],
                    hot: &slots.hot[slot * per_slot..(slot + 1) * per_slot],
                    // A route's only upstream is never taken out by its
                    // failures, as nginx ignores max_fails for a group of
                    // one: there is no other to send the request to, and
                    // one timeout would turn the next 10 s into 502s.
                    max_fails: if route.upstreams.len() == 1 {
                        0
                    } else {
                        spec.max_fails
                    },
                    fail_timeout_ms: ms(spec.fail_timeout),
                };
                slots.idle.slot_in_use(slot, fresh);
                if fresh {
                    state.clear();
                } else if state.max_fails == 0 {
                    // Its failures take it out no more (now a route's only
                    // upstream, or `max_fails = 0`): a passive mark kept
                    // from the last configuration would refuse every
                    // request to it until it ran out.
                    for w in [word::FAILS, word::WINDOW_START, word::DOWN_UNTIL] {
                        state.words[w].store(0, Ordering::Relaxed);
                    }
                }
                states.push(state);
            }
            routes.push(states);
        }
        Ok(ProxyState {
            routes,
            idle: slots.idle,
            names: wanted,
        })
    }

    /// Each process's share of the idle gauges.
    pub(crate) fn idle_shares(&self) -> IdleShares {
        self.idle
    }

    /// The upstreams of the table's route `i`.
    pub fn route(&self, i: usize) -> &[UpstreamState] {
        self.routes.get(i).map_or(&[], Vec::as_slice)
    }

    /// Every route's upstreams with their (prefix, URL), in table order.
    pub(crate) fn each(&self) -> impl Iterator<Item = (&(String, String), &UpstreamState)> {
        self.names
            .iter()
            .flatten()
            .zip(self.routes.iter().flatten())
    }
}

fn names(route: &ProxyRoute) -> Vec<(String, String)> {
    route
        .upstreams
        .iter()
        .map(|u| (route.prefix.clone(), u.url.to_string()))
        .collect()
}

/// A duration in whole milliseconds (bounded by the configuration's checks).
pub(crate) fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds on the system's monotonic clock: the same clock in every
/// process (an `Instant` means nothing to another process), never 0, never
/// going back when the wall clock is set. To the kernel tick (1 to 10 ms
/// old): health's times are whole milliseconds of settings in seconds, and
/// the coarse clock is read without the TSC (each request reads it once).
pub fn now_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    let ms = u64::try_from(t.tv_sec).unwrap_or(0) * 1000
        + u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000_000;
    ms.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(flags: &[&str]) -> RouteTable {
        RouteTable::new(
            flags
                .iter()
                .map(|f| ProxyRoute::from_flag(f).unwrap())
                .collect(),
        )
    }

    #[test]
    fn a_reload_keeps_the_state_of_an_upstream_still_listed_and_clears_a_new_one() {
        let slots = Slots::new(4).unwrap();
        let first =
            ProxyState::with_slots(&table(&["/keep-a/=http://a,http://b"]), &slots).unwrap();
        first.route(0)[0].count(hot::REQUESTS, 5);
        first.route(0)[1].count(hot::REQUESTS, 7);
        let second =
            ProxyState::with_slots(&table(&["/keep-a/=http://a,http://c"]), &slots).unwrap();
        assert_eq!(second.route(0)[0].total(hot::REQUESTS), 5, "kept");
        assert_eq!(
            second.route(0)[1].total(hot::REQUESTS),
            0,
            "the new upstream starts at zero"
        );
    }

    #[test]
    fn a_slot_given_back_is_given_out_again_only_from_the_reload_after_next() {
        let slots = Slots::new(3).unwrap();
        let slot_of = |s: &ProxyState, url: &str| {
            s.each()
                .find(|(k, _)| k.1.contains(url))
                .map(|(_, u)| u.slot())
                .unwrap()
        };
        let first = ProxyState::with_slots(&table(&["/r/=http://a,http://x"]), &slots).unwrap();
        let x = slot_of(&first, "//x");
        // The old generation may still count in x's slot: y gets another.
        let second = ProxyState::with_slots(&table(&["/r/=http://a,http://y"]), &slots).unwrap();
        assert_ne!(slot_of(&second, "//y"), x);
        // A reload later, x's slot is free: z gets it.
        let third =
            ProxyState::with_slots(&table(&["/r/=http://a,http://y,http://z"]), &slots).unwrap();
        assert_eq!(slot_of(&third, "//z"), x);
        // With every slot taken, one just given back is given out at once.
        let fourth =
            ProxyState::with_slots(&table(&["/r/=http://a,http://y,http://w"]), &slots).unwrap();
        assert_eq!(slot_of(&fourth, "//w"), x, "z's, given back now");
    }

    #[test]
    fn a_reload_that_leaves_an_upstream_alone_on_its_route_lifts_its_passive_mark() {
        let slots = Slots::new(4).unwrap();
        let two = ProxyState::with_slots(&table(&["/lone-a/=http://a,http://b"]), &slots).unwrap();
        let a = two.route(0)[0];
        let now = now_ms();
        assert!(a.record_failure(now).is_some());
        assert!(!a.is_up(now));
        // As nginx: a group of one is never considered unavailable.
        let one = ProxyState::with_slots(&table(&["/lone-a/=http://a"]), &slots).unwrap();
        assert!(
            one.route(0)[0].is_up(now),
            "the only upstream was left down"
        );
    }

    #[test]
    fn what_every_request_counts_is_summed_over_the_stripes() {
        let slots = Slots::new(2).unwrap();
        let state = ProxyState::with_slots(&table(&["/=http://a,http://b"]), &slots).unwrap();
        let (a, b) = (state.route(0)[0], state.route(0)[1]);
        let stripes = a.hot.len() / STRIPE_WORDS;
        assert_eq!(stripes, mpm_core::shared::stripe_count());
        a.count(hot::REQUESTS, 2);
        // A pooled connection taken on one CPU and given back on another:
        // one stripe wraps below zero, the gauge does not.
        a.hot[hot::POOL_IDLE].fetch_sub(1, Ordering::Relaxed);
        a.hot[(stripes - 1) * STRIPE_WORDS + hot::POOL_IDLE].fetch_add(3, Ordering::Relaxed);
        a.uncount(hot::POOL_IDLE, 1);
        assert_eq!((a.total(hot::REQUESTS), a.total(hot::POOL_IDLE)), (2, 1));
        assert_eq!(
            b.total(hot::REQUESTS),
            0,
            "another upstream's stripes are its own"
        );
        // Counted from threads on whichever CPUs they run on.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        b.count(hot::REQUESTS, 1);
                    }
                });
            }
        });
        assert_eq!(b.total(hot::REQUESTS), 4000);
    }

    #[test]
    fn too_many_upstreams_are_refused() {
        let urls: Vec<String> = (0..=MAX_UPSTREAMS)
            .map(|i| format!("http://h{i}"))
            .collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let mut r = ProxyRoute::new("/", &["http://x"]).unwrap();
        r.upstreams = urls
            .iter()
            .map(|u| crate::UpstreamSpec::new(u).unwrap())
            .collect();
        let e = ProxyState::new(&RouteTable::new(vec![r])).unwrap_err();
        assert!(matches!(e, Error::TooManyUpstreams { .. }), "{e}");
        let e = ProxyState::with_slots(&table(&["/=http://a,http://b"]), &Slots::new(1).unwrap());
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("2 upstreams in all: at most 1"));
    }

    #[test]
    fn the_clock_is_monotonic_milliseconds_to_the_tick() {
        let a = now_ms();
        std::thread::sleep(std::time::Duration::from_millis(25));
        // 25 ms passed; each read lags by at most a tick (10 ms at HZ=100).
        let b = now_ms();
        assert!(b >= a + 15, "{a} then {b}");
    }
}
