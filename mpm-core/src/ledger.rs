//! How processes that share a listening socket spread its connections.
//!
//! Processes that wait on one socket with `EPOLLEXCLUSIVE` take turns by
//! who is asleep when a connection arrives. Under a burst (a load balancer
//! or a benchmark opening fifty keep-alive connections at once) the one
//! awake takes nearly all of them, and keeps them for as long as they live,
//! while its siblings idle. The ledger evens that out: every process
//! publishes, in shared memory made before the fork, how many connections
//! it holds; one that holds more than the fewest a sibling still accepting
//! holds (plus a slack) stops accepting until the others catch up. The
//! process holding the fewest may always accept; one that stopped for
//! balance looks again within milliseconds (the event MPM's loop does), so
//! some process always takes the queue.
//!
//! Each entry is written by its own process only, and padded to 128 bytes:
//! a process reads its siblings' lines only when it decides whether to
//! accept, never per request.

use std::fmt;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::error::Result;

/// An entry that does not accept: its process is at its cap, stopping, or gone.
const NOT_ACCEPTING: u64 = u64::MAX;

#[repr(C, align(128))]
struct Entry {
    pid: AtomicI32,
    open: AtomicU64,
}
// Zero is an unclaimed entry (pid 0), made not accepting at once.
mpm_sys::shm_safe!(Entry { pid, open });

/// The shared table, one entry per serving process. Made in the master
/// before it forks, never unmapped.
#[derive(Clone, Copy)]
pub struct ConnectionLedger {
    entries: &'static [Entry],
}

impl fmt::Debug for ConnectionLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionLedger")
            .field("processes", &self.entries.len())
            .finish()
    }
}

impl ConnectionLedger {
    /// A ledger for `processes` serving processes, in shared memory.
    pub fn create(processes: usize) -> Result<ConnectionLedger> {
        let n = processes.max(1);
        let entries = mpm_sys::shared_memory::leak_slice::<Entry>(n, "the connection ledger")?;
        for e in entries {
            e.open.store(NOT_ACCEPTING, Ordering::Relaxed);
        }
        Ok(ConnectionLedger { entries })
    }

    /// Serving process number `process`'s seat among the first `processes`
    /// (those of this configuration; a ledger made once serves restarts
    /// with fewer), or `None` past the end.
    pub fn seat(&self, process: usize, processes: usize) -> Option<LedgerSeat> {
        let entries = &self.entries[..processes.min(self.entries.len())];
        (process < entries.len()).then_some(LedgerSeat {
            entries,
            me: process,
        })
    }

    /// How many processes it has room for.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Has it no room at all? (Never: it holds at least one.)
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One serving process's place in a [`ConnectionLedger`].
#[derive(Clone, Copy)]
pub struct LedgerSeat {
    entries: &'static [Entry],
    me: usize,
}

impl fmt::Debug for LedgerSeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerSeat")
            .field("process", &self.me)
            .field("of", &self.entries.len())
            .finish()
    }
}

impl PartialEq for LedgerSeat {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.entries, other.entries) && self.me == other.me
    }
}

impl Eq for LedgerSeat {}

fn my_pid() -> i32 {
    std::process::id() as i32
}

impl LedgerSeat {
    /// Take the seat for this process (a replacement, or the next
    /// generation, takes over its predecessor's), not yet accepting.
    pub fn claim(&self) {
        let e = &self.entries[self.me];
        e.open.store(NOT_ACCEPTING, Ordering::Relaxed);
        e.pid.store(my_pid(), Ordering::Relaxed);
    }

    /// Publish how many connections this process holds, and whether it
    /// accepts more; ignored once another process took the seat.
    pub fn publish(&self, open: usize, accepting: bool) {
        let e = &self.entries[self.me];
        if e.pid.load(Ordering::Relaxed) == my_pid() {
            let v = if accepting {
                open as u64
            } else {
                NOT_ACCEPTING
            };
            e.open.store(v, Ordering::Relaxed);
        }
    }

    /// Give the seat up (this process stops), if it is still ours.
    pub fn release(&self) {
        self.publish(0, false);
    }

    /// May this process, holding `open` connections, take another? Yes
    /// unless a sibling that accepts holds fewer by more than a slack (two,
    /// and an eighth of `open`).
    pub fn may_accept(&self, open: usize) -> bool {
        let fewest = self.fewest_elsewhere();
        let open = open as u64;
        fewest.is_none_or(|f| open <= f.saturating_add(2 + open / 8))
    }

    fn fewest_elsewhere(&self) -> Option<u64> {
        self.entries
            .iter()
            .enumerate()
            .filter(|&(i, e)| i != self.me && e.pid.load(Ordering::Relaxed) != 0)
            .map(|(_, e)| e.open.load(Ordering::Relaxed))
            .filter(|&o| o != NOT_ACCEPTING)
            .min()
    }

    /// Mark as not accepting the seats of siblings that died without
    /// saying so (killed, crashed), so that nobody waits on them. A system
    /// call per sibling: for a process that has stopped accepting for
    /// balance, now and then.
    ///
    /// This one still trusts pids (`kill(pid, 0)`): a robust process mutex
    /// held for a process's life would tell death without one, but a seat is
    /// written by whichever thread serves, which may end before its process.
    /// A reused pid costs little here: a dead sibling's last count stays in
    /// the reckoning until the master starts its replacement, which claims
    /// the seat anew.
    pub fn forget_the_dead(&self) {
        for (i, e) in self.entries.iter().enumerate() {
            let pid = e.pid.load(Ordering::Relaxed);
            if i == self.me || pid == 0 {
                continue;
            }
            let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                == Err(nix::errno::Errno::ESRCH);
            if gone
                && e.pid
                    .compare_exchange(pid, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                e.open.store(NOT_ACCEPTING, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_holding_the_fewest_always_accepts_and_the_others_within_a_slack() {
        let ledger = ConnectionLedger::create(3).unwrap();
        let seats: Vec<LedgerSeat> = (0..3).map(|i| ledger.seat(i, 3).unwrap()).collect();
        assert!(ledger.seat(3, 3).is_none());
        assert!(ledger.seat(2, 2).is_none(), "a restart with two processes");
        // Unclaimed siblings do not count.
        assert!(seats[0].may_accept(1000));
        for s in &seats {
            s.claim();
        }
        seats[0].publish(40, true);
        seats[1].publish(10, true);
        seats[2].publish(0, false); // at its cap
        assert!(!seats[0].may_accept(40), "40 against 10");
        assert!(seats[1].may_accept(10));
        // Within the slack: 10 + 2 + 13/8.
        assert!(seats[0].may_accept(13));
        assert!(!seats[0].may_accept(14));
        // Nobody else accepts: accept.
        seats[1].publish(10, false);
        assert!(seats[0].may_accept(40));
    }

    #[test]
    fn a_dead_siblings_seat_is_forgotten() {
        let ledger = ConnectionLedger::create(2).unwrap();
        let (me, other) = (ledger.seat(0, 2).unwrap(), ledger.seat(1, 2).unwrap());
        me.claim();
        // A sibling that died holding none, without giving its seat up.
        let dead = std::process::Command::new("true").spawn().unwrap();
        let pid = dead.id() as i32;
        let mut dead = dead;
        dead.wait().unwrap();
        ledger.entries[1].pid.store(pid, Ordering::Relaxed);
        ledger.entries[1].open.store(0, Ordering::Relaxed);
        assert!(!me.may_accept(10));
        me.forget_the_dead();
        assert!(me.may_accept(10));
        let _ = other;
    }
}
