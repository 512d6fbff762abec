//! Each process's share of the idle-connection gauge (`pool_idle`), kept
//! where a process that dies without exiting cannot take it with it.
//!
//! The gauge is a sum over the processes, kept in the upstream's stripes
//! ([`ProxyState`]): a process adds what its pool gains and takes off what
//! it loses, and remembers what it holds (its *share*, per upstream). A
//! process that exits gives its shares back (an exit handler). One killed
//! (SIGKILL, the OOM killer) or crashed runs no handler, and its share
//! would stay in the gauge for as long as the server runs. So the shares
//! are kept in shared memory, a row per process: a reader of the gauge
//! (the status page) first looks for rows whose process is gone, takes
//! their shares back and frees them.
//!
//! A row is claimed by a process the first time it counts (a request,
//! after its fork: a row claimed before one would be its children's
//! together), written by that process only, and freed by its exit handler
//! or by whoever finds its process gone. Death is told by `kill(pid, 0)`,
//! as the connection ledger does (`mpm_core::ledger`): a dead process's
//! pid reused by a live one before anyone looked keeps its row counted
//! until that process ends. A process that finds no free row keeps its
//! shares in its own memory, as before: given back at exit, not if killed.
//!
//! Memory: [`ROWS`] rows of a word for each upstream slot, mapped once
//! (16 MiB for the server's 4,096 slots) and touched only as used: a
//! process writes the page of its row that holds its upstreams' words.
//! Nothing is shared on a request's path: a process's row is its own, and
//! finding it is a load of this process's memory.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::shared_state::{ProxyState, UpstreamState};

/// Rows: processes that can hold a pool at once with their shares
/// counted this way (prefork's default of 256 children, over a graceful
/// restart's two generations). Past it, a process keeps its shares in its
/// own memory (see the module).
pub(crate) const ROWS: usize = 512;

/// An owner word's value while a reader takes a dead process's row back.
const RECLAIMING: u64 = u64::MAX;

/// The rows, in shared memory made before the fork. `Copy`: `'static`
/// references.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleShares {
    /// Per row: its process's pid, 0 when free.
    owners: &'static [AtomicU64],
    /// Row `r`'s word for upstream slot `s` is `words[r * slots + s]`.
    words: &'static [AtomicU64],
    slots: usize,
    /// This process's row, in its own memory (each process has its copy
    /// after a fork): the fork epoch it was claimed in (high half) and
    /// the row's index + 1 (low half), [`NO_ROW`] when none was free; 0,
    /// or another epoch, when not claimed yet.
    mine: &'static AtomicU64,
}

/// The low half of [`IdleShares::mine`] when no row was free.
const NO_ROW: u64 = 0xffff_ffff;

/// One process's row: a word per upstream slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    index: usize,
    words: &'static [AtomicU64],
}

impl Row {
    /// The word holding this process's share of slot `slot`'s gauge, if
    /// the row has one (every slot of the memory it was claimed in does).
    pub(crate) fn word(&self, slot: usize) -> Option<&'static AtomicU64> {
        self.words.get(slot)
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
        let owners = mpm_core::shared::words(ROWS, "the proxy's idle-share owners")
            .map_err(Error::Shared)?;
        // At most 512 × 4,096 words (16 MiB): no overflow.
        let words = mpm_core::shared::words(ROWS * slots, "the proxy's idle shares")
            .map_err(Error::Shared)?;
        Ok(IdleShares {
            owners,
            words,
            slots,
            mine: Box::leak(Box::new(AtomicU64::new(0))),
        })
    }

    /// The word of this process's row for upstream slot `slot`: its share
    /// of that upstream's gauge. The row is claimed on the first call in
    /// a process (after taking back the rows of processes gone, as
    /// `state` knows them, if none is free); `None` when none could be.
    pub(crate) fn word(&self, slot: usize, state: &ProxyState) -> Option<&'static AtomicU64> {
        self.my_row(Some(state))?.word(slot)
    }

    /// This process's row: claimed now if `state` is given and it has
    /// none yet.
    fn my_row(&self, claim_with: Option<&ProxyState>) -> Option<Row> {
        self.row_in(mpm_sys::fork::epoch(), claim_with)
    }

    /// [`my_row`](Self::my_row) in a process of fork epoch `epoch`.
    fn row_in(&self, epoch: u64, claim_with: Option<&ProxyState>) -> Option<Row> {
        let seen = self.mine.load(Ordering::Acquire);
        if seen >> 32 == epoch & 0xffff_ffff && seen != 0 {
            let index = seen & 0xffff_ffff;
            return (index != NO_ROW).then(|| self.row(index as usize - 1));
        }
        let state = claim_with?;
        let claimed = self.claim_free().or_else(|| {
            self.reclaim_dead(state);
            self.claim_free()
        });
        let low = claimed.map_or(NO_ROW, |r| r.index as u64 + 1);
        match self.mine.compare_exchange(
            seen,
            (epoch & 0xffff_ffff) << 32 | low,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => claimed,
            Err(_) => {
                // Another thread of this process claimed one meanwhile.
                if let Some(r) = claimed {
                    self.release(r);
                }
                self.row_in(epoch, None)
            }
        }
    }

    /// Are both the rows of one memory?
    pub(crate) fn same(&self, other: &IdleShares) -> bool {
        std::ptr::eq(self.owners, other.owners)
    }

    /// At this process's exit: take its shares of `upstreams`' gauges
    /// back, and free its row.
    pub(crate) fn give_back(&self, upstreams: impl Iterator<Item = UpstreamState>) {
        let Some(row) = self.my_row(None) else {
            return;
        };
        for u in upstreams {
            if let Some(w) = row.word(u.slot()) {
                let had = w.swap(0, Ordering::Relaxed);
                u.count_pool_idle(had, 0);
            }
        }
        self.release(row);
    }

    fn claim_free(&self) -> Option<Row> {
        let me = my_pid();
        let index = self.owners.iter().position(|o| {
            o.compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        Some(self.row(index))
    }

    fn row(&self, index: usize) -> Row {
        Row {
            index,
            words: &self.words[index * self.slots..(index + 1) * self.slots],
        }
    }

    /// Free `row`, if this process still holds it: its words are already
    /// zero (its exit handler took each share back).
    fn release(&self, row: Row) {
        let _ = self.owners[row.index].compare_exchange(
            my_pid(),
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Take back the shares of processes that are gone without giving
    /// them back, from the gauges of `state`'s upstreams, and free their
    /// rows. A system call per live row: for the status page, not for
    /// requests.
    pub(crate) fn reclaim_dead(&self, state: &ProxyState) {
        for (index, owner) in self.owners.iter().enumerate() {
            let pid = owner.load(Ordering::Acquire);
            if pid == 0 || pid == RECLAIMING || pid == my_pid() || !is_gone(pid) {
                continue;
            }
            // One reader takes it back, however many look at once.
            if owner
                .compare_exchange(pid, RECLAIMING, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let row = self.row(index);
            for (_, upstream) in state.each() {
                if let Some(w) = row.word(upstream.slot()) {
                    let had = w.swap(0, Ordering::Relaxed);
                    upstream.count_pool_idle(had, 0);
                }
            }
            // Slots `state` does not have (an upstream a reload removed)
            // start from zero when given out again; their words too, so
            // that the row's next process starts from nothing.
            for w in row.words {
                if w.load(Ordering::Relaxed) != 0 {
                    w.store(0, Ordering::Relaxed);
                }
            }
            owner.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_state::Slots;
    use crate::{ProxyRoute, RouteTable};

    fn state(slots: &Slots) -> ProxyState {
        let t = RouteTable::new(vec![
            ProxyRoute::from_flag("/shares-a/=http://a,http://b").unwrap()
        ]);
        ProxyState::with_slots(&t, slots).unwrap()
    }

    #[test]
    fn a_dead_processs_share_is_taken_back_from_the_gauge_and_its_row_freed() {
        let slots = Slots::new(4).unwrap();
        let state = state(&slots);
        let shares = state.idle_shares();
        let b = state.route(0)[1];
        // A process gone without exiting: a child that exits at once,
        // reaped, whose pid then names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = u64::from(child.id());
        child.wait().unwrap();
        shares.owners[3].store(dead, Ordering::Relaxed);
        let row = shares.row(3);
        row.word(b.slot()).unwrap().store(2, Ordering::Relaxed);
        b.count_pool_idle(0, 2);
        // This process's own row, claimed and counted, stays.
        let mine = shares.word(b.slot(), &state).unwrap();
        assert_eq!(
            shares.owners[0].load(Ordering::Relaxed),
            my_pid(),
            "the first free row"
        );
        mine.store(1, Ordering::Relaxed);
        b.count_pool_idle(0, 1);
        assert_eq!(state.snapshot()[1].pool_idle, 1, "the dead share is gone");
        assert_eq!(shares.owners[3].load(Ordering::Relaxed), 0, "row freed");
        assert!(row.words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        // A live process's row (this one's) is never taken.
        assert_eq!(state.snapshot()[1].pool_idle, 1);
        assert!(
            std::ptr::eq(shares.word(b.slot(), &state).unwrap(), mine),
            "one row a process"
        );
        // Its exit gives the share back and frees the row.
        shares.give_back(state.route(0).iter().copied());
        assert_eq!(state.snapshot()[1].pool_idle, 0);
        assert_eq!(shares.owners[0].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_row_claimed_before_a_fork_is_not_the_childs() {
        let state = state(&Slots::new(2).unwrap());
        let shares = state.idle_shares();
        let parent = shares.row_in(7, Some(&state)).unwrap();
        assert_eq!(shares.row_in(7, None).unwrap().index, parent.index);
        // The child holds a copy of the parent's memory, its claim too.
        let child = shares.row_in(8, Some(&state)).unwrap();
        assert_ne!(child.index, parent.index, "the child's row is its own");
        assert_eq!(shares.row_in(8, None).unwrap().index, child.index);
    }

    #[test]
    fn with_every_row_taken_by_live_processes_none_is_claimed() {
        let state = state(&Slots::new(2).unwrap());
        let shares = state.idle_shares();
        for o in shares.owners {
            o.store(1, Ordering::Relaxed); // init: alive as long as we are
        }
        assert!(shares.word(0, &state).is_none());
        assert!(shares.word(0, &state).is_none(), "and not looked for again");
    }
}
