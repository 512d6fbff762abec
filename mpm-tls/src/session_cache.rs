//! The stateful session cache, in memory every serving process shares (as
//! httpd's `SSLSessionCache shmcb` and nginx's `ssl_session_cache shared:`):
//! a client that resumes by session ID (TLS 1.2 without tickets) or by a
//! stateful ticket finds its session whichever process it reaches.
//!
//! A fixed table made before forking: sessions are spread over buckets of
//! [`WAYS`] entries by a hash keyed at random (the same in every process,
//! since it is made before the fork). A bucket is locked while one entry is
//! copied in or out, with one of up to [`LOCKS`] robust process mutexes
//! (mpm-sys's [`ProcessMutex`], the lock every shared table uses: a waiter
//! sleeps, and a holder that dies leaves it to the next). A full bucket
//! evicts its entry closest to expiry, so the cache never refuses a session
//! and never grows.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mpm_sys::process_mutex::ProcessMutex;
use rustls::server::StoresServerSessions;

use crate::error::{Error, Result};
use crate::stats::{Kind, Stats};

/// Entries per bucket.
pub const WAYS: usize = 4;
/// The longest key kept: TLS 1.2 session IDs and rustls's stateful TLS 1.3
/// tickets are 32 bytes.
pub const MAX_KEY: usize = 32;
/// The longest session kept (rustls's encoding of one is a few hundred bytes).
pub const MAX_VALUE: usize = 1024;
/// The most sessions a cache may be made for.
pub const MAX_SESSIONS: usize = 1 << 22;

const KEY_WORDS: usize = MAX_KEY / 8;
const VALUE_WORDS: usize = MAX_VALUE / 8;
/// meta, expiry, hash, key, value.
const ENTRY_WORDS: usize = 3 + KEY_WORDS + VALUE_WORDS;
/// The entries.
const BUCKET_WORDS: usize = WAYS * ENTRY_WORDS;
/// The most locks a cache has: buckets beyond share them (bucket `b` takes
/// lock `b % LOCKS`), which keeps the locks' memory, touched when they are
/// made, to 64 KiB, and contention between them negligible.
pub const LOCKS: usize = 1024;

const FULL: u64 = 1;

/// The shared cache; see the [module](self).
#[derive(Clone)]
pub struct SharedSessionCache {
    words: &'static [AtomicU64],
    locks: &'static [ProcessMutex],
    buckets: usize,
    timeout: u64,
    hasher: RandomState,
    stats: Option<Stats>,
}

impl fmt::Debug for SharedSessionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSessionCache")
            .field("sessions", &(self.buckets * WAYS))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl SharedSessionCache {
    /// A cache for about `sessions` sessions (1 to [`MAX_SESSIONS`]), each
    /// kept at most `timeout`. About 1 KiB of shared memory a session,
    /// touched only as sessions land on it.
    pub fn new(sessions: usize, timeout: Duration, stats: Option<Stats>) -> Result<Self> {
        if sessions == 0 || sessions > MAX_SESSIONS {
            return Err(Error::Config(format!(
                "--tls-session-cache {sessions}: must be 1 to {MAX_SESSIONS} sessions (or off)"
            )));
        }
        let buckets = sessions.div_ceil(WAYS);
        let words = buckets
            .checked_mul(BUCKET_WORDS)
            .ok_or_else(|| Error::Config("--tls-session-cache: too large".into()))?;
        let words = mpm_core::shared::words(words, "the TLS session cache")?;
        let locks = ProcessMutex::leak(buckets.min(LOCKS), "the TLS session cache's locks")
            .map_err(mpm_core::Error::from)?;
        Ok(SharedSessionCache {
            words,
            locks,
            buckets,
            timeout: timeout.as_secs().max(1),
            hasher: RandomState::new(),
            stats,
        })
    }

    /// How many sessions it holds at most.
    pub fn capacity(&self) -> usize {
        self.buckets * WAYS
    }

    /// The bucket of `hash`, and its lock.
    fn bucket(&self, hash: u64) -> (&'static [AtomicU64], &'static ProcessMutex) {
        let b = (hash % self.buckets as u64) as usize;
        let words = &self.words[b * BUCKET_WORDS..(b + 1) * BUCKET_WORDS];
        (words, &self.locks[b % self.locks.len()])
    }

    fn entry(bucket: &'static [AtomicU64], way: usize) -> &'static [AtomicU64] {
        let start = way * ENTRY_WORDS;
        &bucket[start..start + ENTRY_WORDS]
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key) | 1
    }

    /// The way holding `key`, alive, in a locked bucket.
    fn find(bucket: &'static [AtomicU64], hash: u64, key: &[u8], now: u64) -> Option<usize> {
        (0..WAYS).find(|&w| {
            let e = Self::entry(bucket, w);
            let (state, k, _) = unmeta(e[0].load(Ordering::Relaxed));
            state == FULL
                && k == key.len()
                && e[2].load(Ordering::Relaxed) == hash
                && e[1].load(Ordering::Relaxed) > now
                && read_bytes(&e[3..3 + KEY_WORDS], k) == key
        })
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        if key.is_empty() || key.len() > MAX_KEY {
            return None;
        }
        let hash = self.hash(key);
        let (bucket, lock) = self.bucket(hash);
        // A holder that died left nothing half-written to repair: `put`
        // marks an entry empty before it copies into it.
        let _held = lock.lock().ok()?;
        let way = Self::find(bucket, hash, key, now_secs())?;
        let e = Self::entry(bucket, way);
        let (_, _, v) = unmeta(e[0].load(Ordering::Relaxed));
        let value = read_bytes(&e[3 + KEY_WORDS..], v);
        if remove {
            e[0].store(0, Ordering::Relaxed);
        }
        if let Some(s) = &self.stats {
            s.add(Kind::CacheHits);
        }
        Some(value)
    }
}

impl StoresServerSessions for SharedSessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if key.is_empty() || key.len() > MAX_KEY || value.len() > MAX_VALUE {
            return false;
        }
        let hash = self.hash(&key);
        let (bucket, lock) = self.bucket(hash);
        // As in `lookup`: nothing to repair after a dead holder.
        let Ok(_held) = lock.lock() else {
            return false;
        };
        let now = now_secs();
        let way = Self::find(bucket, hash, &key, now).unwrap_or_else(|| {
            // A free or expired way, else the one closest to expiry.
            (0..WAYS)
                .min_by_key(|&w| {
                    let e = Self::entry(bucket, w);
                    match unmeta(e[0].load(Ordering::Relaxed)).0 {
                        FULL => e[1].load(Ordering::Relaxed),
                        _ => 0,
                    }
                })
                .unwrap_or(0)
        });
        let e = Self::entry(bucket, way);
        // Marked empty while the bytes are copied: a process killed here
        // leaves no half-written session behind.
        e[0].store(0, Ordering::Relaxed);
        e[1].store(now + self.timeout, Ordering::Relaxed);
        e[2].store(hash, Ordering::Relaxed);
        write_bytes(&e[3..3 + KEY_WORDS], &key);
        write_bytes(&e[3 + KEY_WORDS..], &value);
        e[0].store(meta(FULL, key.len(), value.len()), Ordering::Release);
        if let Some(s) = &self.stats {
            s.add(Kind::CacheStores);
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

fn meta(state: u64, key: usize, value: usize) -> u64 {
    state | (key as u64) << 8 | (value as u64) << 16
}

fn unmeta(m: u64) -> (u64, usize, usize) {
    (
        m & 0xff,
        ((m >> 8) & 0xff) as usize,
        ((m >> 16) & 0xffff) as usize,
    )
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn write_bytes(words: &[AtomicU64], bytes: &[u8]) {
    for (w, chunk) in words.iter().zip(bytes.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
}

fn read_bytes(words: &[AtomicU64], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for w in words.iter().take(len.div_ceil(8)) {
        out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_come_back_and_take_removes_them() {
        let c = SharedSessionCache::new(16, Duration::from_secs(300), None).unwrap();
        assert!(c.put(b"id-1".to_vec(), b"session one".to_vec()));
        assert_eq!(c.get(b"id-1").as_deref(), Some(&b"session one"[..]));
        assert!(c.put(b"id-1".to_vec(), b"replaced".to_vec()));
        assert_eq!(c.take(b"id-1").as_deref(), Some(&b"replaced"[..]));
        assert_eq!(c.get(b"id-1"), None);
        assert!(!c.put(vec![1; MAX_KEY + 1], b"x".to_vec()));
        assert!(!c.put(b"k".to_vec(), vec![0; MAX_VALUE + 1]));
        let long = vec![7u8; MAX_VALUE];
        assert!(c.put(vec![9; MAX_KEY], long.clone()));
        assert_eq!(c.get(&[9; MAX_KEY]), Some(long));
    }

    #[test]
    fn a_full_cache_evicts_instead_of_refusing() {
        let c = SharedSessionCache::new(8, Duration::from_secs(300), None).unwrap();
        for i in 0..1000u32 {
            assert!(c.put(i.to_le_bytes().to_vec(), b"s".to_vec()));
        }
        // The newest is always there.
        assert!(c.get(&999u32.to_le_bytes()).is_some());
    }

    // A session stored in a child is found in the parent: in
    // tests/session_cache_across_processes.rs, a binary without the test
    // harness's threads, since fork refuses a threaded process.

    #[test]
    fn sizes_from_configuration_are_bounded() {
        assert!(SharedSessionCache::new(0, Duration::from_secs(1), None).is_err());
        assert!(SharedSessionCache::new(MAX_SESSIONS + 1, Duration::from_secs(1), None).is_err());
    }
}
