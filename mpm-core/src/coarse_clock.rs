//! The wall clock at the kernel tick's resolution, for what every request
//! reads but needs only to the second or so: the `Date` header and the
//! scoreboard's time of the last request.
//!
//! `CLOCK_REALTIME_COARSE` is the time of the last tick (1 to 10 ms old),
//! read from the vDSO without touching the TSC: a few nanoseconds, against
//! a precise read's twenty or more on a VM. Two reads per request were 3%
//! of the event loop's CPU on pipelined plaintext.

use std::time::{SystemTime, UNIX_EPOCH};

use nix::time::{clock_gettime, ClockId};

/// Milliseconds since the Unix epoch, to the last tick.
pub fn unix_millis() -> u64 {
    match clock_gettime(ClockId::CLOCK_REALTIME_COARSE) {
        Ok(t) => (t.tv_sec() as u64)
            .saturating_mul(1000)
            .saturating_add(t.tv_nsec() as u64 / 1_000_000),
        // A kernel without the coarse clock (before 2.6.32): the precise one.
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    }
}

/// Whole seconds since the Unix epoch, to the last tick.
pub fn unix_secs() -> u64 {
    unix_millis() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_time_is_within_a_tick_of_the_precise_clock() {
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let coarse = unix_millis();
        // The coarse clock lags by at most a tick (10 ms at HZ=100); a
        // generous bound keeps a preempted test from failing.
        assert!(coarse.abs_diff(precise) < 1000, "{coarse} vs {precise}");
        assert_eq!(unix_secs(), unix_millis() / 1000);
    }
}
