//! Whole-number flags of `bench` and `compare`: a value that is not one,
//! or is out of the flag's range, is told the range in one line (clap's own
//! words were "invalid digit found in string").

/// A count from `MIN` to `MAX`.
pub(crate) fn count<const MIN: usize, const MAX: usize>(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (MIN..=MAX).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not a whole number from {MIN} to {MAX}")),
    }
}

/// A count from 1 to `u64::MAX`.
pub(crate) fn positive(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "'{s}' is not a whole number from 1 to {}",
            u64::MAX
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_that_is_no_count_in_range_is_told_the_range() {
        assert_eq!(count::<1, 256>("256"), Ok(256));
        for bad in ["0", "257", "abc", "-1", " 3", "99999999999999999999999"] {
            assert_eq!(
                count::<1, 256>(bad),
                Err(format!("'{bad}' is not a whole number from 1 to 256"))
            );
        }
        assert_eq!(positive("18446744073709551615"), Ok(u64::MAX));
        assert!(positive("0")
            .unwrap_err()
            .contains("from 1 to 18446744073709551615"));
    }
}
