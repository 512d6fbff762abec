//! Durations as people write them in flags and files (`5`, `2.5s`, `500ms`,
//! `2m`), and the one way a deadline is computed from a configured duration.
//!
//! Every duration a user can set goes through [`Seconds`], which refuses
//! anything longer than [`Seconds::MAX`], whether it was written as text, a
//! float or an integer; every deadline a server computes from a setting goes
//! through [`deadline`], which never panics, whatever the duration (a library
//! user may build settings by hand with `Duration::MAX`).

use std::str::FromStr;
use std::time::{Duration, Instant};

/// A duration given as seconds (`5`, `2.5`) or with a unit (`500ms`, `5s`, `2m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl Seconds {
    /// The longest duration a setting may take: a billion seconds (about 31
    /// years), "never" for any practical server, and far inside what an
    /// `Instant` can be moved by.
    pub const MAX: Duration = Duration::from_secs(1_000_000_000);

    /// `d` as a setting, or the one-line complaint about it: refused if it
    /// is longer than [`Seconds::MAX`]. `shown` is how the user wrote it.
    pub fn bounded(d: Duration, shown: &str) -> Result<Seconds, String> {
        if d > Self::MAX {
            return Err(format!(
                "'{shown}' is too long a duration (at most {} seconds)",
                Self::MAX.as_secs()
            ));
        }
        Ok(Seconds(d))
    }
}

/// `from` + `after`, for a deadline: a duration too long for an `Instant` (a
/// hand-built `Duration::MAX`) means "as late as can be", never a panic.
pub fn deadline(from: Instant, after: Duration) -> Instant {
    from.checked_add(after.min(Seconds::MAX))
        .or_else(|| from.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(from)
}

impl FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else {
            (t, 1.0)
        };
        let not = || format!("'{s}' is not a duration (try 5, 2.5s or 500ms)");
        let value: f64 = num.trim().parse().map_err(|_| not())?;
        if !value.is_finite() || value < 0.0 {
            return Err(not());
        }
        let secs = value * scale;
        if secs > Self::MAX.as_secs_f64() {
            return Self::bounded(Duration::MAX, s);
        }
        Self::bounded(Duration::from_secs_f64(secs), s)
    }
}

impl Seconds {
    /// A file's integer form (`timeout = 5`): whole seconds, bounded as the
    /// text form is.
    pub fn from_whole(n: u64) -> Result<Seconds, String> {
        Seconds::bounded(Duration::from_secs(n), &n.to_string())
    }

    /// A file's float form (`timeout = 2.5`): seconds, bounded as the text
    /// form is.
    pub fn from_float(f: f64) -> Result<Seconds, String> {
        f.to_string().parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_seconds() {
        assert_eq!("5".parse::<Seconds>().unwrap().0, Duration::from_secs(5));
        assert_eq!(
            "250ms".parse::<Seconds>().unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!("2m".parse::<Seconds>().unwrap().0, Duration::from_secs(120));
        assert!("soon".parse::<Seconds>().is_err());
        assert!("-1".parse::<Seconds>().is_err());
    }

    #[test]
    fn every_form_of_a_duration_is_bounded_the_same_way() {
        // Text, a float and the integer form (which once skipped the cap).
        assert!("1e300".parse::<Seconds>().is_err());
        assert!("18446744073709551615".parse::<Seconds>().is_err());
        assert_eq!(
            "1000000000".parse::<Seconds>().unwrap().0,
            Seconds::MAX,
            "the bound itself is allowed"
        );
        // The forms a file writes: an integer, a float, text.
        assert!(Seconds::from_whole(18446744073709551615).is_err());
        assert!(Seconds::from_whole(1000000001).is_err());
        assert!(Seconds::from_float(1e300).is_err());
        assert!("18446744073709551615s".parse::<Seconds>().is_err());
        assert_eq!(Seconds::from_whole(5), Ok(Seconds(Duration::from_secs(5))));
    }

    #[test]
    fn a_deadline_never_overflows() {
        let now = Instant::now();
        assert!(deadline(now, Duration::MAX) > now + Duration::from_secs(86_400));
        assert_eq!(
            deadline(now, Duration::from_secs(3)),
            now + Duration::from_secs(3)
        );
    }
}
