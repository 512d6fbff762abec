//! The time of an event loop's turn, for the deadlines and time stamps a
//! step takes while it runs on the loop.
//!
//! A loop (event, uring) reads the clock once when its turn begins, after
//! its wait returns, and compares its timeouts with that time; it sets it
//! here too ([`begin_turn`]). A step run on that thread then reads it with
//! [`now`] instead of the clock, as nginx's handlers read the time its loop
//! cached (`ngx_current_msec`). A proxied request took several precise
//! reads (a deadline per upstream wait, the pool's idle ages, the header
//! timeout), twenty nanoseconds or more each on a VM: 1.2% of an event
//! process's CPU samples under `wrk -c50` through `--proxy`, 0.35% after
//! (`perf record -p` on its processes).
//!
//! The time is at most one turn old: a deadline set from it ends at most a
//! turn early, an elapsed time measured from it is at most a turn long. On
//! any other thread (a worker of prefork, worker, or of an event loop's
//! pool) nothing is set and [`now`] is the clock. [`block_on`] clears it
//! while it blocks, so a step that waits on a loop thread (it should not)
//! still sees time pass.
//!
//! [`block_on`]: crate::waiting::block_on

use std::cell::Cell;
use std::time::Instant;

thread_local! {
    static TURN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Now, to the turn: the time this thread's loop read when its turn began,
/// or the clock on a thread that runs no loop.
#[inline]
pub fn now() -> Instant {
    TURN.with(Cell::get).unwrap_or_else(Instant::now)
}

/// A loop's turn begins at `now` (the time it read after its wait): what
/// [`now`] returns on this thread until the next turn.
#[inline]
pub fn begin_turn(now: Instant) {
    TURN.with(|t| t.set(Some(now)));
}

/// This thread runs no turn from here on (until [`begin_turn`]): [`now`]
/// reads the clock. Returns the turn's time it had, to give back to
/// [`restore`].
pub fn leave_turn() -> Option<Instant> {
    TURN.with(|t| t.take())
}

/// Put back what [`leave_turn`] took.
pub fn restore(turn: Option<Instant>) {
    TURN.with(|t| t.set(turn));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_thread_without_a_loop_reads_the_clock() {
        let a = now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now() >= a + Duration::from_millis(2));
    }

    #[test]
    fn on_a_loop_thread_now_is_the_turns_time_until_the_next_turn() {
        std::thread::spawn(|| {
            let t = Instant::now();
            begin_turn(t);
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(now(), t, "the turn's time, not the clock's");
            let t2 = Instant::now();
            begin_turn(t2);
            assert_eq!(now(), t2);
            let had = leave_turn();
            assert_eq!(had, Some(t2));
            std::thread::sleep(Duration::from_millis(2));
            assert!(
                now() >= t2 + Duration::from_millis(2),
                "out of a turn: the clock"
            );
            restore(had);
            assert_eq!(now(), t2);
        })
        .join()
        .unwrap();
    }
}
