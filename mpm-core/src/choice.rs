//! Settings that take one of a few names (`--mpm event`, `--poller poll`):
//! the names, in plain Rust, for whoever reads them from a command line or
//! a file. This crate knows no command-line or file format; the `mpm`
//! package adapts every [`Choice`] to both.

/// A setting whose value is one of a fixed set of names.
pub trait Choice: Copy + PartialEq + 'static {
    /// Every value, in the order help and errors list them.
    const ALL: &'static [Self];

    /// The name of this value, as written on the command line.
    fn name(self) -> &'static str;

    /// Other names accepted for a value (`on` for `allow`); none by default.
    fn aliases() -> &'static [(&'static str, Self)] {
        &[]
    }

    /// The value named `s`, ignoring case (aliases included); else the
    /// one-line complaint listing the valid names.
    fn from_name(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .map(|&v| (v.name(), v))
            .chain(Self::aliases().iter().copied())
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|(_, v)| v)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
                format!("invalid value '{s}' (expected {})", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MpmKind;

    #[test]
    fn a_choice_is_read_by_its_name_in_any_case_and_a_bad_one_lists_the_names() {
        assert_eq!(MpmKind::from_name("EVENT"), Ok(MpmKind::Event));
        let err = MpmKind::from_name("wroker").unwrap_err();
        assert!(err.contains("prefork, worker, event"), "{err}");
    }
}
