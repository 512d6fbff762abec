//! State shared by every process of a server: memory mapped `MAP_SHARED`
//! before the serving processes are forked, so that a prefork child's write
//! is seen by every other child, by the next generation after a graceful
//! restart, and by the worker and event MPMs' processes alike.
//!
//! Three forms, all made once (in `App::check` or before `mpm::main`),
//! never unmapped, and `Copy` handles to them cheap to move into every
//! worker's handler:
//!
//! * [`Shared<T>`] — one value of a type made of atomics ([`ShmSafe`]).
//! * [`Counters`] — `n` counters, each on a cache line of its own.
//! * [`Table`] — a fixed-capacity map of small byte strings.
//!
//! # The rules
//!
//! * Made **before** the serving processes start: a mapping made in one
//!   child after fork is that child's alone. `App::check` runs again on a
//!   reload (SIGHUP): make the memory the first time only (keep it in a
//!   `OnceLock`), or every reload starts from empty.
//! * Holds **no pointers** and nothing that owns a resource: an address
//!   means something in one process only, a descriptor or a lock of the
//!   process's own makes no sense to the others. Only atomics (whose
//!   all-zero value is valid), which is what [`ShmSafe`] promises.
//! * Lives as long as the master (or the only process): a binary upgrade
//!   (`signal upgrade`) execs a new master with memory of its own, and the
//!   state starts again empty there.
//! * A process killed while it writes (SIGKILL, a crash) loses that one
//!   write: [`Table`]'s locks record their holder's pid, and the next
//!   process to want a dead holder's lock takes it over and drops the
//!   half-written entry.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicBool, AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicIsize, AtomicU16, AtomicU32,
    AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Types that may live in memory shared between processes.
///
/// # Safety
///
/// Implement it only for a type that (1) is valid when all its bytes are
/// zero, (2) holds no pointer, reference or handle (a `Box`, a `String`, a
/// file), and (3) changes only through atomics (no `Cell`, no plain field
/// written through a shared reference): other processes read and write it
/// at the same time. A `#[repr(C)]` struct of atomics and arrays of atomics
/// qualifies.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use mpm_core::shared::{Shared, ShmSafe};
///
/// #[derive(Debug)]
/// #[repr(C)]
/// struct Stats { hits: AtomicU64, misses: AtomicU64 }
/// // SAFETY: two atomics: zero is valid, no pointers, atomic mutation only.
/// unsafe impl ShmSafe for Stats {}
///
/// let stats = Shared::<Stats>::new().unwrap();
/// stats.hits.fetch_add(1, Ordering::Relaxed);
/// assert_eq!(stats.hits.load(Ordering::Relaxed), 1);
/// ```
pub unsafe trait ShmSafe: Sync + 'static {}

macro_rules! shm_safe {
    ($($t:ty),*) => { $(
        // SAFETY: an atomic integer: zero is valid, no pointer, atomic
        // mutation only.
        unsafe impl ShmSafe for $t {}
    )* };
}
shm_safe!(
    AtomicBool,
    AtomicU8,
    AtomicU16,
    AtomicU32,
    AtomicU64,
    AtomicUsize,
    AtomicI8,
    AtomicI16,
    AtomicI32,
    AtomicI64,
    AtomicIsize
);
// SAFETY: an array of ShmSafe values is zero-valid, pointer-free and
// mutated only through its elements' atomics.
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}

/// The most bytes one facility maps (what a configuration may ask for is
/// bounded, and the arithmetic checked): 16 GiB, touched lazily.
pub const MAX_BYTES: usize = 16 << 30;

/// Map `bytes` of zeroed memory shared with every process forked after.
fn map(bytes: usize, what: &str) -> Result<NonNull<u8>> {
    if bytes > MAX_BYTES {
        return Err(Error::config(format!(
            "{what}: {bytes} bytes of shared memory is more than the {MAX_BYTES} allowed"
        )));
    }
    let len = std::num::NonZeroUsize::new(bytes.max(1)).expect("at least one byte");
    use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
    // SAFETY: a fresh anonymous mapping (no existing memory is touched),
    // shared so that writes reach every process forked after it; the kernel
    // zeroes it, which is valid for every ShmSafe type.
    let base = unsafe {
        mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
        )
    }
    .map_err(|e| Error::io(format!("mapping shared memory for {what}"), e.into()))?;
    Ok(base.cast())
}

/// One `T` in memory every process of the server shares; see the
/// [module](self) for the rules.
#[derive(Debug)]
pub struct Shared<T: ShmSafe> {
    value: &'static T,
}

impl<T: ShmSafe> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ShmSafe> Copy for Shared<T> {}

impl<T: ShmSafe> Shared<T> {
    /// A zeroed `T` in new shared memory.
    pub fn new() -> Result<Shared<T>> {
        assert!(
            std::mem::align_of::<T>() <= 4096,
            "shared values are page-aligned at most"
        );
        let base = map(std::mem::size_of::<T>(), std::any::type_name::<T>())?;
        // SAFETY: the mapping is at least size_of::<T>() bytes, page-aligned
        // (enough for T, asserted above), zeroed (a valid T, by ShmSafe's
        // contract) and never unmapped, so the reference is good for 'static;
        // T changes only through atomics, so sharing it is sound.
        let value = unsafe { &*base.as_ptr().cast::<T>() };
        Ok(Shared { value })
    }
}

impl<T: ShmSafe> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

/// A counter on a cache line of its own, so that counters written by
/// different cores do not slow each other down.
#[derive(Debug)]
#[repr(C, align(128))]
struct Line(AtomicU64);

// SAFETY: one atomic, padded: zero-valid, pointer-free, atomic mutation.
unsafe impl ShmSafe for Line {}

/// `n` counters shared by every process, each a relaxed atomic on a line
/// of its own (128 bytes). Indexes past `n` panic, as a slice's do.
///
/// A counter every request adds to is one cache line every core writes: at
/// 64 cores that line moves between them on every add. For a per-request
/// total, count per worker in its handler and add in batches, or read the
/// status page's totals.
///
/// ```
/// let c = mpm_core::shared::Counters::new(2).unwrap();
/// c.add(0, 5);
/// assert_eq!(c.add(0, 1), 6);
/// assert_eq!((c.get(0), c.get(1)), (6, 0));
/// c.set(1, 9);
/// assert_eq!(c.get(1), 9);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Counters {
    lines: &'static [Line],
}

impl Counters {
    /// `n` counters, all zero.
    pub fn new(n: usize) -> Result<Counters> {
        let bytes = n
            .checked_mul(std::mem::size_of::<Line>())
            .ok_or_else(|| Error::config(format!("{n} shared counters: too many")))?;
        let base = map(bytes, "shared counters")?;
        // SAFETY: `n` zeroed, 128-aligned (the mapping is page-aligned)
        // Lines within a mapping of `bytes` bytes that is never unmapped.
        let lines = unsafe { std::slice::from_raw_parts(base.as_ptr().cast::<Line>(), n) };
        Ok(Counters { lines })
    }

    /// Add `n` to counter `i`; the new value.
    pub fn add(&self, i: usize, n: u64) -> u64 {
        self.lines[i]
            .0
            .fetch_add(n, Ordering::Relaxed)
            .wrapping_add(n)
    }

    /// Subtract `n` from counter `i` (wrapping); the new value.
    pub fn sub(&self, i: usize, n: u64) -> u64 {
        self.lines[i]
            .0
            .fetch_sub(n, Ordering::Relaxed)
            .wrapping_sub(n)
    }

    /// Counter `i`.
    pub fn get(&self, i: usize) -> u64 {
        self.lines[i].0.load(Ordering::Relaxed)
    }

    /// Set counter `i`.
    pub fn set(&self, i: usize, v: u64) {
        self.lines[i].0.store(v, Ordering::Relaxed);
    }

    /// How many counters there are.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Are there none?
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// Why [`Table::insert`] refused an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The key is empty or longer than the table's key limit.
    #[error("key of {len} bytes: keys are 1 to {max} bytes")]
    Key {
        /// The key's length.
        len: usize,
        /// The table's limit.
        max: usize,
    },
    /// The value is longer than the table's value limit.
    #[error("value of {len} bytes: values are at most {max} bytes")]
    Value {
        /// The value's length.
        len: usize,
        /// The table's limit.
        max: usize,
    },
    /// No room for another entry.
    #[error("the table is full ({capacity} entries)")]
    Full {
        /// The table's capacity.
        capacity: usize,
    },
}

/// The most bytes a [`Table`] key may have.
pub const MAX_KEY: usize = 4096;
/// The most bytes a [`Table`] value may have.
pub const MAX_VALUE: usize = 1 << 20;
/// The most entries a [`Table`] may be made for.
pub const MAX_CAPACITY: usize = 1 << 24;

const EMPTY: u64 = 0;
const FULL: u64 = 1;
const REMOVED: u64 = 2;
const WRITING: u64 = 3;

/// A slot's header: its state, key length and value length in one word.
fn meta(state: u64, key: usize, value: usize) -> u64 {
    state | (key as u64) << 8 | (value as u64) << 24
}

fn unmeta(m: u64) -> (u64, usize, usize) {
    (m & 0xff, ((m >> 8) & 0xffff) as usize, (m >> 24) as usize)
}

/// A fixed-capacity map from small byte strings to small byte strings,
/// shared by every process: a `PUT` served by one prefork child is what
/// the next `GET` finds, whichever child serves it.
///
/// # Limits
///
/// Made for `capacity` entries of keys up to `max_key` bytes (1 to
/// [`MAX_KEY`]) and values up to `max_value` bytes (at most
/// [`MAX_VALUE`]); every slot has room for the longest, so the memory is
/// about `3 × capacity × (max_key + max_value)` (checked, at most
/// [`MAX_BYTES`]; pages are touched only as entries land on them). An
/// insert beyond `capacity` entries is refused ([`TableError::Full`]).
///
/// # Concurrency
///
/// The keys are spread over up to 256 shards by a hash keyed at random when
/// the table is made; each shard has a lock of its own (a word in the
/// shared memory holding its holder's pid), held while one entry is copied
/// in or out, so processes and threads on different shards never meet.
/// Reads take the lock too (the copy is short): a value read is always one
/// that was written whole. A lock whose holder died is taken over (see the
/// [module](self)).
///
/// ```
/// use mpm_core::shared::{Table, TableError};
/// let t = Table::new(100, 16, 64).unwrap();
/// assert_eq!(t.insert(b"colour", b"blue"), Ok(false));
/// assert_eq!(t.insert(b"colour", b"green"), Ok(true)); // replaced
/// assert_eq!(t.get(b"colour").as_deref(), Some(&b"green"[..]));
/// assert_eq!(t.insert(b"k", &[0; 65]), Err(TableError::Value { len: 65, max: 64 }));
/// assert!(t.remove(b"colour"));
/// assert_eq!((t.get(b"colour"), t.len()), (None, 0));
///
/// // What a child writes, the parent (and every other child) reads.
/// # #[cfg(target_os = "linux")] {
/// match unsafe { libc::fork() } {
///     0 => { let _ = t.insert(b"from", b"child"); unsafe { libc::_exit(0) } }
///     pid => { unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) }; }
/// }
/// assert_eq!(t.get(b"from").as_deref(), Some(&b"child"[..]));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    base: &'static [AtomicU64],
    shards: usize,
    per_shard: usize,
    /// Words per slot: header, hash, then the key's and value's bytes.
    slot_words: usize,
    /// Words at the start of each shard: its lock and its entry count.
    shard_head: usize,
    capacity: usize,
    max_key: usize,
    max_value: usize,
    hasher: RandomState,
}

impl Table {
    /// A table for `capacity` entries, keys up to `max_key` bytes and
    /// values up to `max_value` bytes; see the type's limits.
    pub fn new(capacity: usize, max_key: usize, max_value: usize) -> Result<Table> {
        let bad = |m: String| Err(Error::config(format!("shared table: {m}")));
        if capacity == 0 || capacity > MAX_CAPACITY {
            return bad(format!("capacity {capacity}: must be 1 to {MAX_CAPACITY}"));
        }
        if max_key == 0 || max_key > MAX_KEY {
            return bad(format!("keys of {max_key} bytes: must be 1 to {MAX_KEY}"));
        }
        if max_value > MAX_VALUE {
            return bad(format!("values of {max_value} bytes: at most {MAX_VALUE}"));
        }
        let shards = capacity.div_ceil(16).next_power_of_two().min(256);
        // Three times the mean: the chance that `capacity` keys crowd one
        // shard past its slots is negligible (below 1e-9 for 16 a shard).
        let per_shard = capacity.div_ceil(shards) * 3 + 8;
        let slot_words = 2 + (max_key + max_value).div_ceil(8);
        let shard_head = 16; // lock and count on a line of their own
        let words = per_shard
            .checked_mul(slot_words)
            .and_then(|w| w.checked_add(shard_head))
            .and_then(|w| w.checked_mul(shards));
        let Some(bytes) = words.and_then(|w| w.checked_mul(8)) else {
            return bad("too large".to_string());
        };
        let base = map(bytes, "the shared table")?;
        // SAFETY: `bytes / 8` zeroed AtomicU64 words (page-aligned, so
        // 8-aligned) in a mapping that is never unmapped.
        let base =
            unsafe { std::slice::from_raw_parts(base.as_ptr().cast::<AtomicU64>(), bytes / 8) };
        Ok(Table {
            base,
            shards,
            per_shard,
            slot_words,
            shard_head,
            capacity,
            max_key,
            max_value,
            hasher: RandomState::new(),
        })
    }

    /// The most entries it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The longest key, in bytes.
    pub fn max_key(&self) -> usize {
        self.max_key
    }

    /// The longest value, in bytes.
    pub fn max_value(&self) -> usize {
        self.max_value
    }

    /// Entries held now (a sum over the shards, each exact when read).
    pub fn len(&self) -> usize {
        (0..self.shards)
            .map(|s| self.shard_words(s)[1].load(Ordering::Relaxed) as usize)
            .sum()
    }

    /// Does it hold nothing?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard_words(&self, shard: usize) -> &'static [AtomicU64] {
        let len = self.shard_head + self.per_shard * self.slot_words;
        &self.base[shard * len..(shard + 1) * len]
    }

    fn slot(&self, shard: &'static [AtomicU64], i: usize) -> &'static [AtomicU64] {
        let start = self.shard_head + i * self.slot_words;
        &shard[start..start + self.slot_words]
    }

    fn hash(&self, key: &[u8]) -> u64 {
        // Never 0, so that a slot's hash word tells nothing apart from state.
        self.hasher.hash_one(key) | 1
    }

    /// The value of `key`, copied out.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.get_into(key, &mut out).then_some(out)
    }

    /// Copy the value of `key` into `out` (replacing what it held); false
    /// if there is none.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        if key.is_empty() || key.len() > self.max_key {
            return false;
        }
        let hash = self.hash(key);
        let shard = self.lock(hash);
        let found = self.find(shard.words, hash, key);
        if let Some(i) = found {
            let slot = self.slot(shard.words, i);
            let (_, k, v) = unmeta(slot[0].load(Ordering::Relaxed));
            out.clear();
            read_bytes(&slot[2..], k, v, out);
        }
        found.is_some()
    }

    /// Set `key` to `value`; `Ok(true)` if it replaced a value.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> std::result::Result<bool, TableError> {
        if key.is_empty() || key.len() > self.max_key {
            return Err(TableError::Key {
                len: key.len(),
                max: self.max_key,
            });
        }
        if value.len() > self.max_value {
            return Err(TableError::Value {
                len: value.len(),
                max: self.max_value,
            });
        }
        let hash = self.hash(key);
        let shard = self.lock(hash);
        let (index, replaced) = match self.find(shard.words, hash, key) {
            Some(i) => (i, true),
            None => {
                if self.len() >= self.capacity {
                    return Err(TableError::Full {
                        capacity: self.capacity,
                    });
                }
                let free = (0..self.per_shard)
                    .map(|p| (hash as usize + p) % self.per_shard)
                    .find(|&i| {
                        let (state, _, _) =
                            unmeta(self.slot(shard.words, i)[0].load(Ordering::Relaxed));
                        state == EMPTY || state == REMOVED
                    });
                let Some(i) = free else {
                    return Err(TableError::Full {
                        capacity: self.capacity,
                    });
                };
                (i, false)
            }
        };
        let slot = self.slot(shard.words, index);
        // Marked while the bytes are copied: a process that dies here
        // leaves a slot the next lock holder drops.
        slot[0].store(meta(WRITING, key.len(), value.len()), Ordering::Relaxed);
        slot[1].store(hash, Ordering::Relaxed);
        write_bytes(&slot[2..], key, value);
        slot[0].store(meta(FULL, key.len(), value.len()), Ordering::Release);
        if !replaced {
            shard.words[1].fetch_add(1, Ordering::Relaxed);
        }
        Ok(replaced)
    }

    /// Remove `key`; whether it was there.
    pub fn remove(&self, key: &[u8]) -> bool {
        if key.is_empty() || key.len() > self.max_key {
            return false;
        }
        let hash = self.hash(key);
        let shard = self.lock(hash);
        let Some(i) = self.find(shard.words, hash, key) else {
            return false;
        };
        self.slot(shard.words, i)[0].store(meta(REMOVED, 0, 0), Ordering::Relaxed);
        shard.words[1].fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Where `key` is in its (locked) shard: linear probing from its hash,
    /// over removed slots, to the first empty one.
    fn find(&self, shard: &'static [AtomicU64], hash: u64, key: &[u8]) -> Option<usize> {
        let mut scratch = Vec::new();
        for p in 0..self.per_shard {
            let i = (hash as usize + p) % self.per_shard;
            let slot = self.slot(shard, i);
            let (state, k, _) = unmeta(slot[0].load(Ordering::Acquire));
            match state {
                EMPTY => return None,
                FULL if k == key.len() && slot[1].load(Ordering::Relaxed) == hash => {
                    scratch.clear();
                    read_bytes(&slot[2..], 0, k, &mut scratch);
                    if scratch == key {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// Take the lock of `hash`'s shard.
    fn lock(&self, hash: u64) -> ShardGuard {
        let words = self.shard_words((hash >> 32) as usize % self.shards);
        let me = u64::from(std::process::id());
        let lock = &words[0];
        let mut spins = 0u32;
        let mut since = Instant::now();
        loop {
            match lock.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return ShardGuard { words },
                Err(0) => {}
                Err(holder) => {
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                    // Held long: is its holder alive?
                    if since.elapsed() > Duration::from_millis(100) {
                        since = Instant::now();
                        if holder != me
                            && !alive(holder)
                            && lock
                                .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                                .is_ok()
                        {
                            self.repair(words);
                            return ShardGuard { words };
                        }
                    }
                }
            }
        }
    }

    /// A dead process held this shard: drop the entry it was writing and
    /// count the entries again.
    fn repair(&self, words: &'static [AtomicU64]) {
        let mut count = 0;
        for i in 0..self.per_shard {
            let slot = self.slot(words, i);
            match unmeta(slot[0].load(Ordering::Relaxed)).0 {
                WRITING => slot[0].store(meta(REMOVED, 0, 0), Ordering::Relaxed),
                FULL => count += 1,
                _ => {}
            }
        }
        words[1].store(count, Ordering::Relaxed);
    }
}

/// Does process `pid` still exist?
fn alive(pid: u64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// A held shard lock, released when dropped (a panic included).
struct ShardGuard {
    words: &'static [AtomicU64],
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        self.words[0].store(0, Ordering::Release);
    }
}

/// Copy `key` then `value` into `words`, eight bytes a word.
fn write_bytes(words: &[AtomicU64], key: &[u8], value: &[u8]) {
    let mut bytes = key.iter().chain(value).copied();
    for w in words {
        let mut chunk = [0u8; 8];
        let mut any = false;
        for b in chunk.iter_mut() {
            match bytes.next() {
                Some(v) => {
                    *b = v;
                    any = true;
                }
                None => break,
            }
        }
        if !any {
            break;
        }
        w.store(u64::from_le_bytes(chunk), Ordering::Relaxed);
    }
}

/// Append bytes `from..from + len` of `words` to `out`.
fn read_bytes(words: &[AtomicU64], from: usize, len: usize, out: &mut Vec<u8>) {
    out.reserve(len);
    let (mut at, end) = (from, from + len);
    while at < end {
        let word = words[at / 8].load(Ordering::Relaxed).to_le_bytes();
        let (lo, hi) = (at % 8, (end - (at - at % 8)).min(8));
        out.extend_from_slice(&word[lo..hi]);
        at += hi - lo;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_every_length_come_back_whole() {
        let t = Table::new(64, 20, 40).unwrap();
        for len in 0..=40usize {
            let key = format!("key-{len}");
            let value: Vec<u8> = (0..len as u8).collect();
            t.insert(key.as_bytes(), &value).unwrap();
            assert_eq!(t.get(key.as_bytes()), Some(value), "{len}");
        }
        assert_eq!(t.len(), 41);
    }

    #[test]
    fn a_full_table_refuses_new_keys_but_replaces_old_ones() {
        let t = Table::new(3, 8, 8).unwrap();
        for k in [b"a", b"b", b"c"] {
            t.insert(k, b"1").unwrap();
        }
        assert_eq!(t.insert(b"d", b"1"), Err(TableError::Full { capacity: 3 }));
        assert_eq!(t.insert(b"a", b"2"), Ok(true));
        assert!(t.remove(b"b"));
        assert_eq!(t.insert(b"d", b"1"), Ok(false));
        assert_eq!(t.get(b"a").as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn threads_on_one_table_lose_no_update() {
        let t = Table::new(1000, 16, 8).unwrap();
        let c = Counters::new(1).unwrap();
        std::thread::scope(|s| {
            for n in 0..4 {
                let t = t.clone();
                s.spawn(move || {
                    for i in 0..200 {
                        let key = format!("{n}-{i}");
                        t.insert(key.as_bytes(), &(i as u64).to_le_bytes()).unwrap();
                        c.add(0, 1);
                    }
                });
            }
        });
        assert_eq!((t.len(), c.get(0)), (800, 800));
        assert_eq!(t.get(b"3-199").as_deref(), Some(&199u64.to_le_bytes()[..]));
    }

    #[test]
    fn a_dead_holders_lock_is_taken_over_and_its_write_dropped() {
        let t = Table::new(16, 8, 8).unwrap();
        t.insert(b"kept", b"1").unwrap();
        let hash = t.hash(b"kept");
        let shard = t.shard_words((hash >> 32) as usize % t.shards);
        // A process that no longer exists holds the lock, mid-write.
        let slot = t.slot(shard, 5);
        slot[0].store(meta(WRITING, 3, 3), Ordering::Relaxed);
        shard[0].store(u64::from(i32::MAX as u32), Ordering::Relaxed);
        assert_eq!(t.get(b"kept").as_deref(), Some(&b"1"[..]));
        assert_eq!(unmeta(slot[0].load(Ordering::Relaxed)).0, REMOVED);
    }

    #[test]
    fn limits_from_configuration_are_refused_not_mapped() {
        assert!(Table::new(0, 8, 8).is_err());
        assert!(Table::new(MAX_CAPACITY + 1, 8, 8).is_err());
        assert!(Table::new(MAX_CAPACITY, MAX_KEY, MAX_VALUE).is_err()); // > MAX_BYTES
        assert!(Counters::new(usize::MAX).is_err());
    }
}
