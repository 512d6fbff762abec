//! Each process's count of idle pooled connections (`pool_idle`), kept
//! where a process that dies without exiting cannot leave it behind.
//!
//! The gauge is a sum over the serving processes. Each process writes its
//! pool's count for each upstream into a row of shared memory of its own,
//! and a reader of the gauge (the status page) sums the rows of the
//! processes that are alive. A process that exits frees its row (an exit
//! handler); one killed (SIGKILL, the OOM killer) or crashed runs no
//! handler, and its row is freed by the next reader that finds its process
//! gone (`kill(pid, 0)`, as the connection ledger does,
//! `mpm_core::ledger`). Nothing is subtracted from anything: a row is
//! counted or not, so whichever generation reads, and wherever a process
//! is killed, the sum is of live processes' counts.
//!
//! A row is claimed by a process the first time it counts (a request,
//! after its fork: a row claimed before one would be its children's
//! together) and written by that process only; a claim zeroes the row's
//! words of the slots in use, and a slot given to a new upstream (a
//! reload) is zeroed in every row ever claimed, so a row never brings a
//! count from a process before it. A dead process's pid reused by a live
//! one before anyone looked keeps its row counted until that process ends.
//! A process that finds no free row counts in the upstream's stripes
//! instead ([`ProxyState`]), given back when it exits, not if it is killed.
//!
//! Memory: [`ROWS`] rows of a word for each upstream slot, mapped once
//! (16 MiB of address space for the server's 4,096 slots) and touched only
//! as used: a row's words of the slots in use (a page for the first 512).
//! Nothing is shared on a request's path: a process's row is its own,
//! found by a load of its own memory once claimed.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Rows: processes that can hold a pool at once with their counts kept
/// this way (prefork's default of 256 children, over a graceful restart's
/// two generations). Past it, a process counts in the stripes (see the
/// module).
pub(crate) const ROWS: usize = 512;

/// An owner word's flag while its row is being made ready (claimed, or
/// freed after its process died) by the pid in its low half: not counted.
const BUSY: u64 = 1 << 63;

/// The low half of [`IdleShares::mine`] when no row was free.
const NO_ROW: u64 = 0xffff_ffff;

/// The rows, in shared memory made before the fork. `Copy`: `'static`
/// references.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleShares {
    /// Per row: its process's pid, 0 when free, [`BUSY`] with a pid while
    /// that pid makes it ready.
    owners: &'static [AtomicU64],
    /// Row `r`'s word for upstream slot `s` is `words[r * slots + s]`.
    words: &'static [AtomicU64],
    slots: usize,
    /// Shared: the slots ever given out (a slot's index + 1, at most), and
    /// the rows ever claimed (the same): what a claim and a new slot zero.
    used: &'static [AtomicU64],
    /// This process's row, in its own memory (each process has its copy
    /// after a fork): the fork epoch it was claimed in (high half) and
    /// the row's index + 1 (low half), [`NO_ROW`] when none was free; 0,
    /// or another epoch, when not claimed yet.
    mine: &'static AtomicU64,
}

/// [`IdleShares::used`]'s words.
const SLOTS_USED: usize = 0;
const ROWS_USED: usize = 1;

/// One process's row: a word per upstream slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    index: usize,
    words: &'static [AtomicU64],
}

impl Row {
    /// The word holding this row's count for slot `slot`, if the row has
    /// one (every slot of the memory it was claimed in does).
    pub(crate) fn word(&self, slot: usize) -> Option<&'static AtomicU64> {
        self.words.get(slot)
    }

    /// Its count for slot `slot`.
    pub(crate) fn count(&self, slot: usize) -> u64 {
        self.word(slot).map_or(0, |w| w.load(Ordering::Relaxed))
    }
}

fn my_pid() -> u64 {
    u64::from(std::process::id())
}

fn is_gone(pid: u64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH)
}

impl IdleShares {
    /// Rows for `slots` upstream slots, in new shared memory.
    pub(crate) fn new(slots: usize) -> Result<IdleShares> {
        let owners = mpm_core::shared::words(ROWS, "the proxy's idle-count owners")
            .map_err(Error::Shared)?;
        // At most 512 × 4,096 words (16 MiB): no overflow.
        let words = mpm_core::shared::words(ROWS * slots, "the proxy's idle counts")
            .map_err(Error::Shared)?;
        let used =
            mpm_core::shared::words(2, "the proxy's idle-count bounds").map_err(Error::Shared)?;
        Ok(IdleShares {
            owners,
            words,
            slots,
            used,
            mine: Box::leak(Box::new(AtomicU64::new(0))),
        })
    }

    /// Slot `slot` is in use; `fresh`: given to a new upstream now (by the
    /// process that builds the states), so its word is zeroed in every row
    /// ever claimed: a process of an older configuration counted another
    /// upstream there.
    pub(crate) fn slot_in_use(&self, slot: usize, fresh: bool) {
        if slot >= self.slots {
            return;
        }
        self.used[SLOTS_USED].fetch_max(slot as u64 + 1, Ordering::AcqRel);
        if fresh {
            for r in 0..self.rows_used() {
                self.words[r * self.slots + slot].store(0, Ordering::Relaxed);
            }
        }
    }

    fn rows_used(&self) -> usize {
        (self.used[ROWS_USED].load(Ordering::Acquire) as usize).min(ROWS)
    }

    /// The word of this process's row for upstream slot `slot`: its count
    /// of that upstream's idle connections. The row is claimed on the first
    /// call in a process (after freeing the rows of processes gone, if none
    /// is free); `None` when none could be.
    pub(crate) fn word(&self, slot: usize) -> Option<&'static AtomicU64> {
        self.my_row(true)?.word(slot)
    }

    /// This process's row: claimed now if `claim` and it has none yet.
    fn my_row(&self, claim: bool) -> Option<Row> {
        self.row_in(mpm_sys::fork::epoch(), claim)
    }

    /// [`my_row`](Self::my_row) in a process of fork epoch `epoch`.
    fn row_in(&self, epoch: u64, claim: bool) -> Option<Row> {
        let seen = self.mine.load(Ordering::Acquire);
        let epoch = epoch & 0xffff_ffff;
        if seen != 0 && seen >> 32 == epoch {
            let index = seen & 0xffff_ffff;
            return (index != NO_ROW).then(|| self.row(index as usize - 1));
        }
        if !claim {
            return None;
        }
        let claimed = self.claim_free().or_else(|| {
            self.live_rows();
            self.claim_free()
        });
        let low = claimed.map_or(NO_ROW, |r| r.index as u64 + 1);
        match self.mine.compare_exchange(
            seen,
            epoch << 32 | low,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => claimed,
            Err(_) => {
                // Another thread of this process claimed one meanwhile.
                if let Some(r) = claimed {
                    self.free(r.index, my_pid());
                }
                self.row_in(epoch, false)
            }
        }
    }

    /// A free row, made ready (its words of the slots in use zeroed, not
    /// counted meanwhile) and taken for this process.
    fn claim_free(&self) -> Option<Row> {
        let me = my_pid();
        let index = self.owners.iter().position(|o| {
            o.compare_exchange(0, BUSY | me, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        self.used[ROWS_USED].fetch_max(index as u64 + 1, Ordering::AcqRel);
        let row = self.row(index);
        self.zero_used(row);
        self.owners[index].store(me, Ordering::Release);
        Some(row)
    }

    fn zero_used(&self, row: Row) {
        let n = (self.used[SLOTS_USED].load(Ordering::Acquire) as usize).min(self.slots);
        for w in &row.words[..n] {
            w.store(0, Ordering::Relaxed);
        }
    }

    fn row(&self, index: usize) -> Row {
        Row {
            index,
            words: &self.words[index * self.slots..(index + 1) * self.slots],
        }
    }

    /// Free row `index` if `owner` (a pid, or a busy mark) still holds it.
    fn free(&self, index: usize, owner: u64) {
        let _ = self.owners[index].compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// At this process's exit: its row freed, so its counts are no longer
    /// in the gauge (its pools' connections close with it).
    pub(crate) fn release_mine(&self) {
        if let Some(row) = self.my_row(false) {
            self.free(row.index, my_pid());
        }
    }

    /// The rows of live processes, whose counts make the gauge; the rows of
    /// processes gone are freed on the way. A system call per row held:
    /// for the status page, not for requests.
    pub(crate) fn live_rows(&self) -> Vec<Row> {
        let me = my_pid();
        let mut live = Vec::new();
        for (index, owner) in self.owners.iter().enumerate().take(self.rows_used()) {
            let held = owner.load(Ordering::Acquire);
            if held == 0 {
                continue;
            }
            let pid = held & !BUSY;
            if pid == me || !is_gone(pid) {
                if held & BUSY == 0 {
                    live.push(self.row(index));
                }
                continue;
            }
            // Its process is gone (or, busy, the one making it ready is):
            // one reader frees it, however many look at once.
            if owner
                .compare_exchange(held, BUSY | me, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                owner.store(0, Ordering::Release);
            }
        }
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_state::{ProxyState, Slots};
    use crate::{ProxyRoute, RouteTable};

    fn state_of(slots: &Slots, flags: &[&str]) -> ProxyState {
        let t = RouteTable::new(
            flags
                .iter()
                .map(|f| ProxyRoute::from_flag(f).unwrap())
                .collect(),
        );
        ProxyState::with_slots(&t, slots).unwrap()
    }

    fn state(slots: &Slots) -> ProxyState {
        state_of(slots, &["/shares-a/=http://a,http://b"])
    }

    /// A pid that names no process: a child's, once it exited and was
    /// reaped.
    fn dead_pid() -> u64 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = u64::from(child.id());
        child.wait().unwrap();
        pid
    }

    /// Row `r` held by `pid`, counting `n` for `slot`.
    fn held(shares: &IdleShares, r: usize, pid: u64, slot: usize, n: u64) {
        shares.owners[r].store(pid, Ordering::Relaxed);
        shares.used[ROWS_USED].fetch_max(r as u64 + 1, Ordering::Relaxed);
        shares
            .row(r)
            .word(slot)
            .unwrap()
            .store(n, Ordering::Relaxed);
    }

    fn idle(state: &ProxyState) -> Vec<u64> {
        state.snapshot().iter().map(|s| s.pool_idle).collect()
    }

    #[test]
    fn the_gauge_sums_the_rows_of_live_processes_and_frees_a_dead_ones() {
        let slots = Slots::new(4).unwrap();
        let state = state(&slots);
        let shares = state.idle_shares();
        let b = state.route(0)[1].slot();
        held(&shares, 3, dead_pid(), b, 2);
        // init (pid 1) lives as long as the machine: a sibling's row.
        held(&shares, 4, 1, b, 5);
        let mine = shares.word(b).unwrap();
        assert_eq!(
            shares.owners[0].load(Ordering::Relaxed),
            my_pid(),
            "the first free row"
        );
        mine.store(1, Ordering::Relaxed);
        assert_eq!(idle(&state), [0, 6], "this process's and the sibling's");
        assert_eq!(
            shares.owners[3].load(Ordering::Relaxed),
            0,
            "the dead one's freed"
        );
        assert!(
            std::ptr::eq(shares.word(b).unwrap(), mine),
            "one row a process"
        );
        // A claim of the freed row starts it from zero.
        shares.owners[3].store(BUSY | 7, Ordering::Relaxed);
        assert_eq!(
            idle(&state),
            [0, 6],
            "a row being made ready is not counted"
        );
        shares.owners[3].store(0, Ordering::Relaxed);
        for r in [1, 2] {
            shares.owners[r].store(1, Ordering::Relaxed);
        }
        let other = shares.claim_free().unwrap();
        assert_eq!(
            (other.index, other.count(b)),
            (3, 0),
            "the dead process's 2 is not the next one's"
        );
        shares.free(other.index, my_pid());
        for r in [1, 2] {
            shares.owners[r].store(0, Ordering::Relaxed);
        }
        // Its exit frees the row, and its count leaves the gauge.
        shares.release_mine();
        assert_eq!(idle(&state), [0, 5]);
        assert_eq!(shares.owners[0].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_reload_that_gives_a_slot_to_a_new_upstream_starts_it_from_zero_in_every_row() {
        let slots = Slots::new(8).unwrap();
        let old = state_of(&slots, &["/r/=http://a", "/x/=http://x"]);
        let x = old.route(1)[0].slot();
        let shares = old.idle_shares();
        // Processes of the first configuration counting x: one killed, one
        // still held by a live pid (its row not yet freed).
        held(&shares, 5, dead_pid(), x, 2);
        held(&shares, 6, 1, x, 3);
        // x is dropped; its slot is held back for a reload, then y gets it.
        let _ = state_of(&slots, &["/r/=http://a"]);
        let new = state_of(&slots, &["/r/=http://a", "/y/=http://y"]);
        let y = new.route(1)[0].slot();
        assert_eq!(y, x, "y is given x's slot");
        assert_eq!(idle(&new), [0, 0], "nothing of x's counts");
        shares.row(6).word(y).unwrap().store(1, Ordering::Relaxed);
        assert_eq!(idle(&new), [0, 1], "then what is counted for y");
    }

    #[test]
    fn a_dead_process_is_never_counted_whoever_reads_and_whenever_it_died() {
        let slots = Slots::new(8).unwrap();
        let old = state_of(&slots, &["/r/=http://a"]);
        let new = state_of(&slots, &["/r/=http://a", "/n/=http://c"]);
        let c = new.route(1)[0].slot();
        let shares = new.idle_shares();
        held(&shares, 5, dead_pid(), c, 2);
        // An old generation's status page frees it: nothing of c is left.
        let _ = old.snapshot();
        assert_eq!(shares.owners[5].load(Ordering::Relaxed), 0);
        assert_eq!(idle(&new), [0, 0]);
        // One that died while freeing another's row: the next reader ends it.
        held(&shares, 2, BUSY | dead_pid(), c, 4);
        assert_eq!(idle(&new), [0, 0]);
        assert_eq!(shares.owners[2].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_row_claimed_before_a_fork_is_not_the_childs() {
        let state = state(&Slots::new(2).unwrap());
        let shares = state.idle_shares();
        let parent = shares.row_in(7, true).unwrap();
        assert_eq!(shares.row_in(7, false).unwrap().index, parent.index);
        // The child holds a copy of the parent's memory, its claim too.
        assert!(shares.row_in(8, false).is_none(), "not the child's");
        let child = shares.row_in(8, true).unwrap();
        assert_ne!(child.index, parent.index, "the child's row is its own");
        assert_eq!(shares.row_in(8, false).unwrap().index, child.index);
    }

    #[test]
    fn with_every_row_taken_by_live_processes_none_is_claimed() {
        let state = state(&Slots::new(2).unwrap());
        let shares = state.idle_shares();
        for o in shares.owners {
            o.store(1, Ordering::Relaxed); // init: alive as long as we are
        }
        shares.used[ROWS_USED].store(ROWS as u64, Ordering::Relaxed);
        assert!(shares.word(0).is_none());
        assert!(shares.word(0).is_none(), "and not looked for again");
    }
}
