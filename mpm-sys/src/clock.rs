//! Clocks std does not expose: the monotonic clock as a number every
//! process of a server reads alike, and local time broken down.

/// Nanoseconds on the system-wide monotonic clock: comparable between the
/// processes of a server (an `Instant` is not: it cannot be shared).
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// `secs` since the epoch as local time (`localtime_r`, which reads the
/// time zone once; the environment is not changed under it by safe code).
pub fn local_time(secs: i64) -> libc::tm {
    // SAFETY: an all-zero `tm` is a valid value (the pointer field is null);
    // localtime_r only writes into it and reads `t`, both valid locals.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let t: libc::time_t = secs;
        libc::localtime_r(&t, &mut tm);
        tm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_never_goes_back() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn local_time_breaks_a_day_down() {
        let tm = local_time(86_400 * 365);
        assert!((1970..=1971).contains(&(tm.tm_year + 1900)));
    }
}
