//! Whether an upstream may take requests: passive health (failures seen by
//! requests) and active checks (a `GET` every interval), both kept in the
//! memory every process shares ([`ProxyState`]), so that one process
//! marking an upstream down is seen by every other at once.
//!
//! **Passive**, as nginx's `max_fails`/`fail_timeout`: `max_fails`
//! failures within `fail_timeout` mark the upstream down for
//! `fail_timeout`; then it is tried again (one more failure, with
//! `max_fails=1`, marks it down again). A failure is a connect error, a
//! timeout, or a malformed or missing answer; a 5xx the upstream sends is
//! an answer, not a failure. The counting is a few atomics: two processes
//! failing at once may count one failure fewer, never mark a healthy
//! upstream down.
//!
//! **Active** (nginx has these only in its paid edition): every
//! `interval`, one `GET path` per upstream with `Connection: close`; `rise`
//! passes in a row bring a down upstream back (clearing a passive mark
//! too), `fall` failures in a row take it down. Upstreams start up.
//!
//! **One check per interval across all processes.** Each serving process
//! runs one checker thread ([`Checker::ensure_running`], started lazily by
//! the handler factory), asleep until the next check is due (or a second:
//! the same thread closes the process's idle upstream connections past
//! their timeout, which no request may come to do). The due time
//! is one word per upstream in shared memory; a checker that finds a check
//! due moves the word to the next interval with a compare-and-swap, and
//! only the one whose swap succeeds runs the check. At 64 cores (64 event
//! processes) that is 64 sleeping threads waking once per interval, each
//! reading a word and at most one swapping it: no lock, no traffic
//! between checks, and still one check per upstream per interval, whichever
//! process dies or restarts.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{ActiveHealth, UpstreamUrl};
use crate::path::RouteTable;
use crate::shared_state::{ms, now_ms, word, ProxyState, UpstreamState};

/// A change of an upstream's health, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// It was up and is now marked down.
    Down,
    /// It was down and is now back.
    Up,
}

impl UpstreamState {
    /// May it take requests at `now` (ms, [`now_ms`])?
    pub fn is_up(&self, now: u64) -> bool {
        self.get(word::DOWN_UNTIL) <= now && self.get(word::ACTIVE_DOWN) == 0
    }

    /// [`is_up`](Self::is_up), with the clock (`now`) read only for an
    /// upstream once marked down: one never marked down is up at any time,
    /// and most never are, so most requests read no clock.
    pub fn is_up_with(&self, now: impl FnOnce() -> u64) -> bool {
        if self.get(word::ACTIVE_DOWN) != 0 {
            return false;
        }
        match self.get(word::DOWN_UNTIL) {
            0 => true,
            until => until <= now(),
        }
    }

    /// A request to it failed at `now`: count the failure (and the request
    /// failed, for the status page); `Some(Down)` if this one marked it
    /// down.
    pub fn record_failure(&self, now: u64) -> Option<Transition> {
        self.add(word::FAILURES, 1);
        if self.max_fails == 0 {
            return None;
        }
        let window = self.fail_timeout_ms;
        let start = self.at(word::WINDOW_START);
        let began = start.load(Ordering::Relaxed);
        if began == 0 || now.saturating_sub(began) >= window {
            // A new window: whoever moves its start resets the count.
            if start
                .compare_exchange(began, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                self.at(word::FAILS).store(0, Ordering::Relaxed);
            }
        }
        let fails = self.at(word::FAILS).fetch_add(1, Ordering::Relaxed) + 1;
        if fails < u64::from(self.max_fails) {
            return None;
        }
        self.at(word::FAILS).store(0, Ordering::Relaxed);
        start.store(0, Ordering::Relaxed);
        let was = self
            .at(word::DOWN_UNTIL)
            .fetch_max(now.saturating_add(window), Ordering::Relaxed);
        // Active checks bring it back after `rise` passes in a row from
        // now on: those before it failed do not count.
        self.at(word::OK_STREAK).store(0, Ordering::Relaxed);
        // Only the failure that found it up reports the change.
        (was <= now).then(|| {
            self.add(word::MARKED_DOWN, 1);
            Transition::Down
        })
    }

    /// Take the check due at `now`, if one is: true for the one caller
    /// (of every process) that moved the due time on by `interval_ms`.
    pub fn claim_check(&self, now: u64, interval_ms: u64) -> bool {
        let next = self.at(word::NEXT_CHECK);
        let due = next.load(Ordering::Relaxed);
        now >= due
            && next
                .compare_exchange(
                    due,
                    now.saturating_add(interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// When its next active check is due (ms; 0: at once).
    pub fn next_check(&self) -> u64 {
        self.get(word::NEXT_CHECK)
    }

    /// An active check passed or failed: count it, and move the upstream
    /// up after `rise` passes in a row or down after `fall` failures in a
    /// row; the change, if this result made one.
    pub fn record_check(&self, passed: bool, rise: u32, fall: u32) -> Option<Transition> {
        self.add(word::CHECKS, 1);
        if passed {
            self.at(word::FAIL_STREAK).store(0, Ordering::Relaxed);
            let streak = self.at(word::OK_STREAK).fetch_add(1, Ordering::Relaxed) + 1;
            if streak < u64::from(rise) {
                return None;
            }
            let was_active_down = self.at(word::ACTIVE_DOWN).swap(0, Ordering::Relaxed) == 1;
            let now = now_ms();
            let was_passive_down = self.at(word::DOWN_UNTIL).swap(0, Ordering::Relaxed) > now;
            (was_active_down || was_passive_down).then(|| {
                self.add(word::MARKED_UP, 1);
                Transition::Up
            })
        } else {
            self.add(word::CHECKS_FAILED, 1);
            self.at(word::OK_STREAK).store(0, Ordering::Relaxed);
            let streak = self.at(word::FAIL_STREAK).fetch_add(1, Ordering::Relaxed) + 1;
            if streak < u64::from(fall) {
                return None;
            }
            let was = self.at(word::ACTIVE_DOWN).swap(1, Ordering::Relaxed);
            (was == 0).then(|| {
                self.add(word::MARKED_DOWN, 1);
                Transition::Down
            })
        }
    }
}

/// What an active check does: true if `url` answered `health.path` with
/// an expected status within `health.timeout`.
pub type Probe = Arc<dyn Fn(&UpstreamUrl, &ActiveHealth) -> bool + Send + Sync>;

/// The built-in probe: a `GET` with `Connection: close`, blocking (the
/// checker is a thread of its own, not a step): over plain TCP with std's
/// sockets, over TLS with the upstream client (the certificate verified
/// as the proxy's requests are: the route's CA file, or the Mozilla roots).
pub fn http_probe() -> Probe {
    Arc::new(|url: &UpstreamUrl, health: &ActiveHealth| {
        let status = if url.is_tls() {
            tls_probe(url, health)
        } else {
            probe_once(url, health)
        };
        status.is_some_and(|s| health.expect_status.matches(s))
    })
}

/// The status a TLS upstream answers `health.path` with, if it answers.
fn tls_probe(url: &UpstreamUrl, health: &ActiveHealth) -> Option<u16> {
    let pool = mpm_upstream::Pool::new(mpm_upstream::PoolSettings {
        idle_per_upstream: 0,
        ..mpm_upstream::PoolSettings::default()
    });
    let client = mpm_upstream::Client::with_pool(Arc::new(pool));
    // Verified as the route's requests are: against its CA file if it has one.
    let mut upstream =
        mpm_upstream::Upstream::parse(&format!("https://{}", url.authority())).ok()?;
    if let Some(config) =
        crate::reverse_proxy::tls_config(health.ca_file.as_deref(), health.client_cert.as_ref())
    {
        upstream.set_tls_config(config.ok()?).ok()?;
    }
    match url.address() {
        // One address of several: checked there, not at the name's first.
        Some(a) => upstream.pin(a),
        None => upstream.resolve().ok()?,
    }
    let answer = mpm_core::waiting::block_on(async {
        client
            .request_to("GET", &upstream, &health.path)
            .header("Connection", "close")
            .header("User-Agent", "mpm-health-check")
            .timeout(health.timeout)
            .send()
            .await
    });
    answer.ok().map(|r| r.status())
}

/// The status a plain upstream answers `health.path` with, if it answers
/// within `health.timeout`.
fn probe_once(url: &UpstreamUrl, health: &ActiveHealth) -> Option<u16> {
    let deadline = Instant::now() + health.timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let addr = match url.address() {
        Some(a) => a,
        None => (url.host(), url.port()).to_socket_addrs().ok()?.next()?,
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()?).ok()?;
    stream.set_write_timeout(left()).ok()?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: mpm-health-check\r\nConnection: close\r\n\r\n",
        health.path,
        url.authority()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        stream.set_read_timeout(Some(left()?)).ok()?;
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut fields);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => return response.code,
            Ok(httparse::Status::Partial) if buf.len() < 16 * 1024 => {}
            _ => return None,
        }
    }
}

/// The per-process checker thread of a route table.
#[derive(Debug, Clone, Default)]
pub struct Checker {
    /// The process that started the thread: after a fork the child finds
    /// its parent's id here and starts one of its own.
    started_by: Arc<Mutex<Option<u32>>>,
}

/// The longest a checker sleeps before it looks again (a new due time
/// written by another process is seen within this).
const MAX_NAP: Duration = Duration::from_secs(1);

impl Checker {
    /// A checker not yet started.
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Start this process's checker thread for `table` (whose state is
    /// `state`) unless it runs already, or there is nothing for it to do
    /// (no route has active checks, and no `tidy`). Besides the checks, it
    /// calls `tidy` at least once a second: the proxy's chores that no
    /// request may come to do (closing the idle upstream connections past
    /// their timeout). The thread ends when the last `Arc` of `table` is
    /// dropped. Called by the handler factory in every serving process
    /// (after fork).
    pub fn ensure_running(
        &self,
        table: &Arc<RouteTable>,
        state: &ProxyState,
        probe: Probe,
        tidy: Option<Box<dyn Fn() + Send>>,
    ) {
        let checks = table.routes().iter().any(|r| r.health.is_some());
        if !checks && tidy.is_none() {
            return;
        }
        let tidy = tidy.unwrap_or_else(|| Box::new(|| {}));
        let me = std::process::id();
        let mut started = self.started_by.lock();
        if *started == Some(me) {
            return;
        }
        let (table, state) = (Arc::downgrade(table), state.clone());
        let spawned = std::thread::Builder::new()
            .name("mpm-proxy".into())
            .spawn(move || run(&table, &state, &probe, checks, &*tidy));
        match spawned {
            Ok(_) => *started = Some(me),
            Err(e) => mpm_core::log_error!(
                "proxy: cannot start the thread of active checks and idle timeouts: {e}"
            ),
        }
    }
}

/// The checker's loop: run the checks due (those this process wins) and
/// the chores, then sleep until the next is due (at most [`MAX_NAP`]).
fn run(table: &Weak<RouteTable>, state: &ProxyState, probe: &Probe, checks: bool, tidy: &dyn Fn()) {
    while let Some(table) = table.upgrade() {
        let nap = if checks {
            check_due(&table, state, probe, now_ms)
        } else {
            MAX_NAP
        };
        drop(table);
        tidy();
        std::thread::sleep(nap);
    }
}

/// Run every check due now that this process claims; how long until the
/// next one is due (at most [`MAX_NAP`]). `now` is the clock (a test's
/// own).
fn check_due(
    table: &RouteTable,
    state: &ProxyState,
    probe: &Probe,
    now: impl Fn() -> u64,
) -> Duration {
    let mut next = now().saturating_add(ms(MAX_NAP));
    for (i, route) in table.routes().iter().enumerate() {
        let Some(health) = &route.health else {
            continue;
        };
        for (spec, up) in route.upstreams.iter().zip(state.route(i)) {
            if up.claim_check(now(), ms(health.interval)) {
                let passed = probe(&spec.url, health);
                match up.record_check(passed, health.rise, health.fall) {
                    Some(Transition::Down) => mpm_core::log_warn!(
                        "proxy: upstream {} of {} is down: {} failed health checks in a row (GET {})",
                        spec.url, route.prefix, health.fall, health.path
                    ),
                    Some(Transition::Up) => mpm_core::log_notice!(
                        "proxy: upstream {} of {} is back: {} passed health checks in a row",
                        spec.url, route.prefix, health.rise
                    ),
                    None => {}
                }
            }
            next = next.min(up.next_check());
        }
    }
    Duration::from_millis(next.saturating_sub(now()).max(10))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64};

    use super::*;
    use crate::config::ProxyRoute;

    fn state(flag: &str, max_fails: u32, fail_timeout: Duration) -> (RouteTable, ProxyState) {
        let mut r = ProxyRoute::from_flag(flag).unwrap();
        for u in &mut r.upstreams {
            u.max_fails = max_fails;
            u.fail_timeout = fail_timeout;
        }
        let t = RouteTable::new(vec![r]);
        let s = ProxyState::with_slots(&t, &crate::Slots::new(8).unwrap()).unwrap();
        (t, s)
    }

    #[test]
    fn a_routes_only_upstream_is_never_marked_down_by_failures() {
        let (_, s) = state("/alone/=http://a", 1, Duration::from_secs(10));
        let u = s.route(0)[0];
        let t0 = 1_000_000;
        for i in 0..5 {
            assert_eq!(u.record_failure(t0 + i), None);
        }
        assert!(
            u.is_up(t0 + 5),
            "as nginx: a group of one ignores max_fails"
        );
        assert_eq!(u.get(word::FAILURES), 5, "failures are still counted");
    }

    #[test]
    fn max_fails_within_fail_timeout_mark_down_for_fail_timeout() {
        let (_, s) = state("/passive-a/=http://a,http://b", 3, Duration::from_secs(10));
        let u = s.route(0)[0];
        let t0 = 1_000_000;
        assert_eq!(u.record_failure(t0), None);
        assert_eq!(u.record_failure(t0 + 1_000), None);
        assert!(u.is_up(t0 + 1_000));
        assert_eq!(u.record_failure(t0 + 2_000), Some(Transition::Down));
        assert!(!u.is_up(t0 + 2_000) && !u.is_up(t0 + 11_999));
        assert!(u.is_up(t0 + 12_000), "tried again after fail_timeout");
        assert_eq!(u.get(word::MARKED_DOWN), 1);
        assert_eq!(u.get(word::FAILURES), 3);
    }

    #[test]
    fn failures_spread_wider_than_fail_timeout_never_mark_down() {
        let (_, s) = state("/passive-b/=http://a,http://b", 2, Duration::from_secs(10));
        let u = s.route(0)[0];
        for k in 0..10 {
            assert_eq!(
                u.record_failure(1_000_000 + k * 10_000),
                None,
                "failure {k}"
            );
        }
        assert!(u.is_up(1_200_000));
    }

    #[test]
    fn max_fails_zero_never_marks_down() {
        let (_, s) = state("/passive-c/=http://a,http://b", 0, Duration::from_secs(10));
        let u = s.route(0)[0];
        for _ in 0..100 {
            assert_eq!(u.record_failure(5_000), None);
        }
        assert!(u.is_up(5_000));
        assert_eq!(
            u.get(word::FAILURES),
            100,
            "still counted for the status page"
        );
    }

    #[test]
    fn a_failure_while_down_reports_no_second_transition() {
        let (_, s) = state("/passive-d/=http://a,http://b", 1, Duration::from_secs(10));
        let u = s.route(0)[0];
        assert_eq!(u.record_failure(50_000), Some(Transition::Down));
        assert_eq!(
            u.record_failure(51_000),
            None,
            "already down: extended, not reported"
        );
        assert!(!u.is_up(60_500), "the later failure extended it");
        assert!(u.is_up(61_000));
    }

    #[test]
    fn active_checks_fall_and_rise_in_a_row() {
        let (_, s) = state("/active-a/=http://a,http://b", 1, Duration::from_secs(10));
        let u = s.route(0)[0];
        let now = now_ms();
        assert_eq!(u.record_check(false, 2, 3), None);
        assert_eq!(u.record_check(false, 2, 3), None);
        assert_eq!(u.record_check(true, 2, 3), None, "a pass breaks the run");
        assert_eq!(u.record_check(false, 2, 3), None);
        assert_eq!(u.record_check(false, 2, 3), None);
        assert_eq!(u.record_check(false, 2, 3), Some(Transition::Down));
        assert!(!u.is_up(now));
        assert_eq!(u.record_check(false, 2, 3), None);
        assert_eq!(u.record_check(true, 2, 3), None);
        assert_eq!(u.record_check(true, 2, 3), Some(Transition::Up));
        assert!(u.is_up(now));
        assert_eq!((u.get(word::CHECKS), u.get(word::CHECKS_FAILED)), (9, 6));
    }

    #[test]
    fn a_passing_check_brings_back_a_passively_downed_upstream() {
        let (_, s) = state("/active-b/=http://a,http://b", 1, Duration::from_secs(3600));
        let u = s.route(0)[0];
        let now = now_ms();
        assert_eq!(u.record_failure(now), Some(Transition::Down));
        assert!(!u.is_up(now));
        assert_eq!(u.record_check(true, 1, 3), Some(Transition::Up));
        assert!(u.is_up(now_ms()));
    }

    #[test]
    fn a_passively_downed_upstream_needs_rise_passes_after_its_mark() {
        let (_, s) = state("/active-c/=http://a,http://b", 1, Duration::from_secs(3600));
        let u = s.route(0)[0];
        // Up and passing its checks for a while...
        for _ in 0..5 {
            assert_eq!(u.record_check(true, 2, 3), None);
        }
        // ...until its requests fail: the passes before do not count.
        assert_eq!(u.record_failure(now_ms()), Some(Transition::Down));
        assert_eq!(
            u.record_check(true, 2, 3),
            None,
            "one pass of health_rise = 2"
        );
        assert!(!u.is_up(now_ms()));
        assert_eq!(u.record_check(true, 2, 3), Some(Transition::Up));
        assert!(u.is_up(now_ms()));
    }

    #[test]
    fn one_check_per_interval_whoever_asks() {
        let (_, s) = state("/claim-a/=http://a,http://b", 1, Duration::from_secs(10));
        let u = s.route(0)[0];
        assert!(u.claim_check(1_000, 5_000), "due at once at first");
        assert!(!u.claim_check(1_000, 5_000), "claimed");
        assert!(!u.claim_check(5_999, 5_000));
        assert!(u.claim_check(6_000, 5_000));
        // Many threads (as many processes would) at one due time: one wins.
        let wins = AtomicU32::new(0);
        std::thread::scope(|sc| {
            for _ in 0..8 {
                sc.spawn(|| {
                    if u.claim_check(11_000, 5_000) {
                        wins.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(wins.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_checker_runs_due_checks_once_and_sleeps_until_the_next() {
        let mut r = ProxyRoute::from_flag("/checker-a/=http://a,http://b").unwrap();
        r.health = Some(ActiveHealth {
            interval: Duration::from_secs(5),
            fall: 1,
            ..ActiveHealth::default()
        });
        let t = RouteTable::new(vec![r]);
        let s = ProxyState::with_slots(&t, &crate::Slots::new(8).unwrap()).unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        // a passes, b fails.
        let probe: Probe = Arc::new(move |url, _| {
            c.fetch_add(1, Ordering::Relaxed);
            url.host() == "a"
        });
        let clock = AtomicU64::new(2_000_000);
        let now = || clock.load(Ordering::Relaxed);
        let down = mpm_core::error_log::expect("of /checker-a/ is down");
        let nap = check_due(&t, &s, &probe, now);
        assert_eq!(down.count(), 1, "one line when b goes down");
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        assert_eq!(nap, Duration::from_secs(1), "at most MAX_NAP");
        assert!(s.route(0)[0].is_up(now()) && !s.route(0)[1].is_up(now()));
        // A second checker (another process) at the same time finds nothing due.
        check_due(&t, &s, &probe, now);
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        clock.store(2_005_000, Ordering::Relaxed);
        check_due(&t, &s, &probe, now);
        assert_eq!(calls.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn the_http_probe_reads_the_status_of_a_real_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let origin = std::thread::spawn(move || {
            for status in ["200 OK", "503 Service Unavailable"] {
                let (mut c, _) = listener.accept().unwrap();
                let mut buf = [0u8; 1024];
                let n = c.read(&mut buf).unwrap();
                assert!(buf[..n].starts_with(b"GET /healthz HTTP/1.1\r\n"));
                write!(c, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").unwrap();
            }
        });
        let url: UpstreamUrl = format!("http://127.0.0.1:{port}").parse().unwrap();
        let health = ActiveHealth {
            path: "/healthz".into(),
            ..ActiveHealth::default()
        };
        let probe = http_probe();
        assert!(probe(&url, &health));
        assert!(!probe(&url, &health), "503 is not in 200-399");
        origin.join().unwrap();
        // Nothing listens there now.
        assert!(!probe(&url, &health));
    }

    #[test]
    fn an_upstream_never_marked_down_is_up_without_reading_the_clock() {
        let (_, s) = state("/=http://a,http://b", 1, Duration::from_secs(10));
        let u = s.route(0)[0];
        assert!(u.is_up_with(|| unreachable!("the clock is not read")));
        let t0 = 1_000_000;
        u.record_failure(t0);
        for t in [t0 + 1, t0 + 9_999, t0 + 10_000, t0 + 20_000] {
            assert_eq!(u.is_up_with(|| t), u.is_up(t), "at {t}");
        }
        assert!(!u.is_up_with(|| t0 + 1) && u.is_up_with(|| t0 + 10_000));
    }
}
