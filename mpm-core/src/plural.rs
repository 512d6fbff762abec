//! Counted nouns in log lines: "1 child", "2 children", never "1 children".

use std::fmt::Display;

/// `n` and the noun that agrees with it: `one` when `n` is 1, `many` otherwise
/// (`plural(1, "request", "requests")` is `"1 request"`, 0 takes `many`).
pub fn plural<N>(n: N, one: &str, many: &str) -> String
where
    N: Copy + Display + PartialEq + From<u8>,
{
    format!("{n} {}", if n == N::from(1) { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn one_takes_the_singular_and_every_other_count_the_plural() {
        assert_eq!(plural(1u64, "request", "requests"), "1 request");
        assert_eq!(plural(0u64, "request", "requests"), "0 requests");
        assert_eq!(plural(2usize, "child", "children"), "2 children");
        assert_eq!(plural(1usize, "child", "children"), "1 child");
        assert_eq!(plural(11u32, "time", "times"), "11 times");
    }
}
