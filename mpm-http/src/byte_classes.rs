//! Tables of the bytes a part of a message may hold, one `bool` per byte
//! value: every request's Host and every field a response sets is checked
//! byte by byte, and a lookup is cheaper than a scan of a punctuation list.

/// A table of the ASCII letters and digits and the bytes of `extra`.
pub(crate) const fn alphanumeric_and(extra: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize] = true;
        i += 1;
    }
    t
}

/// RFC 9110 `tchar` (§5.6.2): the bytes a token (a method, a field name)
/// is made of.
pub(crate) const TCHAR: [bool; 256] = alphanumeric_and(b"!#$%&'*+-.^_`|~");

/// A token's character.
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_holds_letters_digits_and_the_extra_bytes_only() {
        let t = alphanumeric_and(b"-.");
        for b in 0..=255u8 {
            assert_eq!(
                t[usize::from(b)],
                b.is_ascii_alphanumeric() || b == b'-' || b == b'.'
            );
        }
    }
}
