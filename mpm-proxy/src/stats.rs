//! Per-upstream counters, in the same shared slot as the upstream's health
//! ([`ProxyState`]): every process adds to them, the status page reads
//! them whole.
//!
//! What every proxied request counts (requests, connections opened and
//! reused, the idle gauge: four adds a request) is kept in a stripe per
//! CPU and summed when read: one line that every core wrote would move
//! between them on nearly every request at 64 cores (an add on a line
//! another core holds costs tens of nanoseconds even on 2). The counters
//! of rare events (failures, health checks) stay single words.

use crate::shared_state::{hot, now_ms, word, ProxyState, UpstreamState};

/// One upstream's counters and health, as the status page shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSnapshot {
    /// The route's prefix.
    pub route: String,
    /// The upstream's URL as configured, with the address it stands for
    /// when its host's name resolved to several (the [`crate::UpstreamUrl`]'s `Display`).
    pub url: String,
    /// May it take requests now (neither passive nor active checks have it down)?
    pub up: bool,
    /// Requests sent to it (each try of a retried request counts).
    pub requests: u64,
    /// Of those, failures: connect errors, timeouts, malformed answers.
    pub failures: u64,
    /// Times it was marked down (passive or active).
    pub marked_down: u64,
    /// Times an active check brought it back.
    pub marked_up: u64,
    /// Active checks run, and how many failed.
    pub checks: u64,
    /// Active checks that failed.
    pub checks_failed: u64,
    /// Connections opened to it.
    pub connections_opened: u64,
    /// Requests sent on a pooled connection (not a new one).
    pub connections_reused: u64,
    /// Idle connections to it in the pools now, summed over the processes.
    pub pool_idle: u64,
}

impl UpstreamState {
    /// A request (one try) is sent to it.
    pub fn count_request(&self) {
        self.count(hot::REQUESTS, 1);
    }

    /// A new connection to it was opened.
    pub fn count_opened(&self) {
        self.count(hot::OPENED, 1);
    }

    /// A request went on a pooled connection.
    pub fn count_reused(&self) {
        self.count(hot::REUSED, 1);
    }

    /// This process's pool held `before` idle connections to it and now
    /// holds `now`: the difference goes to the sum over the processes.
    pub fn count_pool_idle(&self, before: u64, now: u64) {
        if now > before {
            self.count(hot::POOL_IDLE, now - before);
        } else {
            self.uncount(hot::POOL_IDLE, before - now);
        }
    }
}

impl ProxyState {
    /// Every upstream's counters and health now, route by route in the
    /// table's order (longest prefix first).
    pub fn snapshot(&self) -> Vec<UpstreamSnapshot> {
        // Each live process's count, in its row (`idle_shares.rs`).
        let rows = self.idle_shares().live_rows();
        let now = now_ms();
        self.each()
            .map(|((route, url), u)| UpstreamSnapshot {
                route: route.clone(),
                url: url.clone(),
                up: u.is_up(now),
                requests: u.total(hot::REQUESTS),
                failures: u.get(word::FAILURES),
                marked_down: u.get(word::MARKED_DOWN),
                marked_up: u.get(word::MARKED_UP),
                checks: u.get(word::CHECKS),
                checks_failed: u.get(word::CHECKS_FAILED),
                connections_opened: u.total(hot::OPENED),
                connections_reused: u.total(hot::REUSED),
                // The live processes' rows, and the stripes of those that
                // found none: a gauge several processes add to and take
                // from, where a read between one's take and another's add
                // may be one off, never more, and below zero it reads 0 (a
                // wrapped sum, not 2^63 - 1 idle connections).
                pool_idle: u64::try_from(u.total(hot::POOL_IDLE) as i64)
                    .unwrap_or(0)
                    .saturating_add(rows.iter().map(|r| r.count(u.slot())).sum()),
            })
            .collect()
    }

    /// The totals over every upstream, in the shape the status page's
    /// sections take (`ServerStatus::with_section("proxy", ...)`), for the
    /// status page and Prometheus until they show upstreams one by one.
    pub fn totals(&self) -> Vec<(&'static str, u64)> {
        let snap = self.snapshot();
        let sum = |f: fn(&UpstreamSnapshot) -> u64| snap.iter().map(f).sum::<u64>();
        vec![
            ("upstreams", snap.len() as u64),
            ("upstreams_up", snap.iter().filter(|s| s.up).count() as u64),
            ("requests", sum(|s| s.requests)),
            ("failures", sum(|s| s.failures)),
            ("marked_down", sum(|s| s.marked_down)),
            ("marked_up", sum(|s| s.marked_up)),
            ("health_checks", sum(|s| s.checks)),
            ("health_checks_failed", sum(|s| s.checks_failed)),
            ("connections_opened", sum(|s| s.connections_opened)),
            ("connections_reused", sum(|s| s.connections_reused)),
            ("pool_idle", sum(|s| s.pool_idle)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ProxyRoute, RouteTable};

    #[test]
    fn counters_show_in_the_snapshot_and_the_totals() {
        let t = RouteTable::new(vec![
            ProxyRoute::from_flag("/stats-a/=http://a,http://b").unwrap(),
            ProxyRoute::from_flag("/stats-a/long/=http://c,http://d").unwrap(),
        ]);
        let s = ProxyState::with_slots(&t, &crate::Slots::new(8).unwrap()).unwrap();
        let (a, c) = (s.route(1)[0], s.route(0)[0]);
        a.count_request();
        a.count_request();
        a.count_opened();
        a.count_reused();
        a.count_pool_idle(0, 2);
        a.count_pool_idle(2, 1);
        c.count_request();
        assert_eq!(c.record_failure(now_ms()), Some(crate::Transition::Down));
        let snap = s.snapshot();
        assert_eq!(snap.len(), 4);
        assert_eq!(
            (snap[0].route.as_str(), snap[0].url.as_str()),
            ("/stats-a/long/", "http://c")
        );
        assert!(!snap[0].up && snap[0].failures == 1 && snap[0].marked_down == 1);
        let sa = &snap[2];
        assert_eq!(sa.url, "http://a");
        assert!(sa.up);
        assert_eq!(
            (
                sa.requests,
                sa.connections_opened,
                sa.connections_reused,
                sa.pool_idle
            ),
            (2, 1, 1, 1)
        );
        // A read that sums a take before the add it follows: 0, not a
        // wrapped count.
        let b = s.route(1)[1];
        b.count_pool_idle(1, 0);
        assert_eq!(s.snapshot()[3].pool_idle, 0);
        b.count_pool_idle(0, 1);
        let totals = s.totals();
        let get = |k: &str| totals.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        assert_eq!(get("upstreams"), Some(4));
        assert_eq!(get("upstreams_up"), Some(3));
        assert_eq!(get("requests"), Some(3));
        assert_eq!(get("failures"), Some(1));
    }
}
