//! [`Pool`]: idle keep-alive connections to upstreams, one pool per
//! process, shared by that process's threads.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxBuildHasher;

use crate::connect::connect_tcp;
use crate::connection::Connection;
use crate::error::Result;
use crate::tls::{TlsConfig, TlsStream};

/// Where a connection goes: an address, and TLS with a server name or not.
#[derive(Clone, Debug)]
pub struct Target {
    addr: SocketAddr,
    /// `addr` written out once, for the log lines of every request to it.
    shown: Arc<str>,
    tls: Option<(String, TlsConfig)>,
    /// What the pool files its connections under, made once: looked up
    /// on every request to the target, a TLS one's name not copied each
    /// time. Shared with each connection opened to it: a connection holds
    /// a pointer, not the 72-byte key, and it is moved many times a
    /// request (out of the pool, into the request's future, its body,
    /// back).
    key: Arc<PoolKey>,
}

impl Target {
    /// Plain TCP to `addr`.
    pub fn plain(addr: SocketAddr) -> Target {
        Target {
            addr,
            shown: Arc::from(addr.to_string()),
            tls: None,
            key: Arc::new(PoolKey {
                addr,
                server_name: None,
                config: None,
                group: 0,
            }),
        }
    }

    /// TLS to `addr`, verifying (and sending in SNI) `server_name`.
    pub fn tls(addr: SocketAddr, server_name: &str, config: TlsConfig) -> Target {
        let key = PoolKey {
            addr,
            server_name: Some(server_name.to_string()),
            config: Some(config.id()),
            group: 0,
        };
        Target {
            tls: Some((server_name.to_string(), config)),
            key: Arc::new(key),
            ..Target::plain(addr)
        }
    }

    /// The address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address written out (`127.0.0.1:8080`, `[::1]:443`), made once
    /// with the target and shared: what an access-log line of each request
    /// to it shows, without formatting it each time.
    pub fn addr_text(&self) -> &Arc<str> {
        &self.shown
    }

    /// What the pool files its connections under.
    pub fn key(&self) -> PoolKey {
        PoolKey::clone(&self.key)
    }

    /// The same target, its connections filed apart from those of every
    /// other group (a target made by [`plain`](Self::plain) or
    /// [`tls`](Self::tls) is in group 0): the reverse proxy gives each of
    /// its upstreams its own, so that the idle connections it counts for
    /// one are never also another's to the same address.
    pub fn in_group(mut self, group: usize) -> Target {
        let mut key = PoolKey::clone(&self.key);
        key.group = group;
        self.key = Arc::new(key);
        self
    }
}

/// What the pool files connections under: the address and, for TLS, the
/// server name (and the configuration: two CA files make two keys).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The upstream's address.
    pub addr: SocketAddr,
    /// The TLS server name, `None` for plain TCP.
    pub server_name: Option<String>,
    config: Option<usize>,
    /// Connections of another group are never handed out ([`Target::in_group`]).
    group: usize,
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.server_name {
            Some(name) => write!(f, "{} (TLS {name})", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

/// How many idle connections a pool keeps and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// Idle connections kept per [`PoolKey`]; the oldest is closed past
    /// it. 0 turns keep-alive off. Default 32 (nginx's `keepalive` is
    /// per worker process too).
    pub idle_per_upstream: usize,
    /// An idle connection older than this is closed instead of reused.
    /// Default 60 s (nginx's `keepalive_timeout` for upstreams).
    pub idle_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> PoolSettings {
        PoolSettings {
            idle_per_upstream: 32,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Counters of one [`PoolKey`], for a status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections opened.
    pub opened: u64,
    /// Checkouts served by an idle connection.
    pub reused: u64,
    /// Idle connections now.
    pub idle_now: u64,
    /// Idle connections found closed by the upstream (or with bytes
    /// nobody asked for) at checkout, and dropped.
    pub dropped_stale: u64,
    /// Idle connections closed for being idle past the timeout or past
    /// the number kept.
    pub expired: u64,
}

/// Keep-alive connections to upstreams, for one process.
///
/// Shared by the process's threads: one `parking_lot::Mutex`, taken for a
/// push or a pop (and the counters) only, never across I/O; the liveness
/// check and closing happen outside it. Processes do not share a pool (a
/// socket belongs to one process), so it is one lock per process, not one
/// every core takes. There is no reaper thread: idle connections past the
/// timeout are closed when their key is next used, or by
/// [`prune`](Pool::prune).
///
/// Create a pool in the process that uses it: one filled before a `fork`
/// would share its sockets with the children.
pub struct Pool {
    settings: PoolSettings,
    /// Hashed with FxHash rather than SipHash: a key is looked up twice a
    /// request (the checkout, the give-back), and SipHash was 1.7% of an
    /// event process's user time proxying; the keys are the configured
    /// upstreams (or an embedder's), not chosen by clients.
    slots: Mutex<HashMap<PoolKey, Slot, FxBuildHasher>>,
}

#[derive(Default)]
struct Slot {
    /// Oldest first: reuse takes the newest (warmest), expiry the oldest.
    idle: VecDeque<(Connection, Instant)>,
    stats: PoolStats,
}

impl Pool {
    /// A pool with these settings.
    pub fn new(settings: PoolSettings) -> Pool {
        Pool {
            settings,
            slots: Mutex::new(HashMap::default()),
        }
    }

    /// The process's pool with default settings, made on first use: what
    /// [`Client::new`](crate::Client::new) uses.
    pub fn process_default() -> Arc<Pool> {
        static POOL: OnceLock<Arc<Pool>> = OnceLock::new();
        POOL.get_or_init(|| Arc::new(Pool::new(PoolSettings::default())))
            .clone()
    }

    /// The settings.
    pub fn settings(&self) -> PoolSettings {
        self.settings
    }

    /// A connection to `target`: an idle one that is still fresh (its
    /// upstream neither closed it nor sent anything since), or a new one,
    /// opened (TCP, then the TLS handshake) by `until`.
    ///
    /// Every idle connection is checked before reuse, however recently it
    /// was given back: an upstream that sends bytes after a complete answer
    /// (a body longer than its `Content-Length`, written apart) would have
    /// them read as the next request's answer, another client's. (A
    /// 20 ms window without the check, taken for its system call, gave
    /// such bytes to the next GET: found by a fuzz of hostile upstreams.)
    /// On an event loop that keeps the socket registered the check is the
    /// loop's word, no system call; elsewhere a peek (see
    /// `Connection::is_fresh`). A request that can be sent again (an
    /// idempotent one whose body is still at hand) is sent again on a new
    /// connection on [`Error::Closed`](crate::Error::Closed).
    pub async fn connect(&self, target: &Target, until: Instant) -> Result<Connection> {
        self.connect_counted(target, until).await.0
    }

    /// As [`connect`](Self::connect), and how many idle connections to
    /// `target` the pool holds once it has taken one out (and dropped
    /// those it found closed or expired on the way), whether a connection
    /// came of it or not: what a gauge of them reads (as
    /// [`give_back`](Self::give_back)'s count), without a lock of its own
    /// on a reuse.
    pub async fn connect_counted(
        &self,
        target: &Target,
        until: Instant,
    ) -> (Result<Connection>, u64) {
        let key = &target.key;
        loop {
            let (candidate, expired, left) = self.pop_idle(key);
            drop(expired);
            let Some(mut conn) = candidate else {
                break;
            };
            // Counted reused as it was taken (one lock a request, not
            // two); the rare stale one is counted back.
            if conn.is_fresh() {
                return (Ok(conn), left);
            }
            self.count(key, |s| {
                s.reused -= 1;
                s.dropped_stale += 1;
            });
        }
        // Boxed: the opening's state (a TCP connect, a TLS handshake) is
        // over 2 KiB, and inline it would be in every request's future for
        // as long as the request waits, a pooled connection or not.
        let opened = Box::pin(Self::open(target, until)).await;
        // Counted after the opening (others may have given connections
        // back meanwhile), in the same lock as the count of opened ones.
        let left = {
            let mut slots = self.slots.lock();
            let slot = slots.entry(PoolKey::clone(key)).or_default();
            if opened.is_ok() {
                slot.stats.opened += 1;
            }
            slot.idle.len() as u64
        };
        (opened, left)
    }

    /// A new connection to `target`: TCP, then the TLS handshake.
    async fn open(target: &Target, until: Instant) -> Result<Connection> {
        let sock = connect_tcp(target.addr, until).await?;
        let key = Arc::clone(&target.key);
        Ok(match &target.tls {
            None => Connection::plain(sock, key),
            Some((name, config)) => {
                let stream = TlsStream::handshake(sock, name, config, until).await?;
                Connection::tls(stream, key)
            }
        })
    }

    /// Take back `conn` for reuse. Give back only a connection whose last
    /// response was read to its end and may be kept alive
    /// ([`BodyReader::reusable`](crate::BodyReader::reusable)); drop any
    /// other. Returns how many idle connections to its upstream the pool
    /// holds now (what a gauge of them reads, without a lock of its own).
    pub fn give_back(&self, mut conn: Connection) -> u64 {
        conn.served_one();
        let now = mpm_core::turn_clock::now();
        let mut closing = Vec::new();
        let idle = {
            let mut slots = self.slots.lock();
            let slot = slots.entry(conn.key().clone()).or_default();
            slot.idle.push_back((conn, now));
            while slot.idle.len() > self.settings.idle_per_upstream {
                if let Some(old) = slot.idle.pop_front() {
                    closing.push(old);
                }
                slot.stats.expired += 1;
            }
            slot.idle.len() as u64
        };
        // Closed outside the lock.
        drop(closing);
        idle
    }

    /// Close the idle connections past the idle timeout, for every key
    /// (outside the pool's lock); how many it closed.
    pub fn prune(&self) -> usize {
        let mut closing = Vec::new();
        let now = Instant::now();
        {
            let mut slots = self.slots.lock();
            for slot in slots.values_mut() {
                self.expire(slot, now, &mut closing);
            }
        }
        let n = closing.len();
        drop(closing);
        n
    }

    /// The counters of `key` (zeros for one never used).
    pub fn stats(&self, key: &PoolKey) -> PoolStats {
        let slots = self.slots.lock();
        slots.get(key).map(Slot::snapshot).unwrap_or_default()
    }

    /// The counters of every key used so far.
    pub fn all_stats(&self) -> Vec<(PoolKey, PoolStats)> {
        let slots = self.slots.lock();
        slots
            .iter()
            .map(|(k, s)| (k.clone(), s.snapshot()))
            .collect()
    }

    /// The newest idle connection to `key` within the idle timeout (its
    /// age to the turn, as when it was given back: no read of the clock a
    /// request); the expired ones, to close outside the lock.
    /// Also how many idle connections are left.
    fn pop_idle(&self, key: &PoolKey) -> (Option<Connection>, Vec<(Connection, Instant)>, u64) {
        let mut expired = Vec::new();
        let now = mpm_core::turn_clock::now();
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(key) else {
            return (None, expired, 0);
        };
        // The newest first.
        let mut taken = None;
        while let Some((conn, since)) = slot.idle.pop_back() {
            let idle_for = now.saturating_duration_since(since);
            if idle_for < self.settings.idle_timeout {
                slot.stats.reused += 1;
                taken = Some(conn);
                break;
            }
            // Past the timeout, and so are those given back before it.
            expired.push((conn, since));
            slot.stats.expired += 1;
        }
        // The older ones past the timeout (none were looked at if the
        // newest was past it: they are gone with it).
        if !slot.idle.is_empty() {
            self.expire(slot, now, &mut expired);
        }
        (taken, expired, slot.idle.len() as u64)
    }

    fn expire(&self, slot: &mut Slot, now: Instant, into: &mut Vec<(Connection, Instant)>) {
        while slot.idle.front().is_some_and(|(_, since)| {
            now.saturating_duration_since(*since) >= self.settings.idle_timeout
        }) {
            if let Some(old) = slot.idle.pop_front() {
                into.push(old);
            }
            slot.stats.expired += 1;
        }
    }

    fn count(&self, key: &PoolKey, f: impl FnOnce(&mut PoolStats)) {
        let mut slots = self.slots.lock();
        f(&mut slots.entry(key.clone()).or_default().stats);
    }
}

impl Slot {
    fn snapshot(&self) -> PoolStats {
        PoolStats {
            idle_now: self.idle.len() as u64,
            ..self.stats
        }
    }
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::new(PoolSettings::default())
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}
