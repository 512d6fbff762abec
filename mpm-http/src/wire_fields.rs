//! Header fields kept as they are written: `Name: value` and CRLF each,
//! one after the other in one buffer.
//!
//! A proxy passes on an upstream's fields, which are bytes already: kept
//! as a pair of [`HeaderText`](crate::HeaderText)s each, every field cost
//! two shared-text references (taken and dropped), a pair pushed into the
//! response and written out again field by field. Kept here, a field is
//! checked and copied once, and the whole block is written with one copy.
//! The buffer is one the thread gave back ([`mpm_core::byte_spares`]) and
//! is given back once written, so a proxied answer allocates nothing for
//! its fields.

/// Fields in their wire form. Every field in it was checked as
/// [`Response::try_header`](crate::Response::try_header) checks one (a
/// token for a name, no CR, LF or other control in a value, none of the
/// layer's own fields), so the block splits back into exactly the fields
/// pushed: a name holds no `:`, a value no CR or LF.
#[derive(Debug, Default)]
pub(crate) struct WireFields(Vec<u8>);

/// The least room taken for a response's fields: a buffer of the thread's,
/// or a new one this size.
const ROOM: usize = 256;

impl WireFields {
    /// Append a field whose name and value were checked.
    pub(crate) fn push_checked(&mut self, name: &[u8], value: &[u8]) {
        if self.0.capacity() == 0 {
            self.0 = mpm_core::byte_spares::take(ROOM);
        }
        self.0.reserve(name.len() + value.len() + 4);
        self.0.extend_from_slice(name);
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value);
        self.0.extend_from_slice(b"\r\n");
    }

    /// The fields as they are written, each ending in CRLF.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Each field's name and value, in the order pushed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.0.split(|&b| b == b'\n').filter_map(|line| {
            let line = line.strip_suffix(b"\r")?;
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line.get(colon + 2..).unwrap_or_default()))
        })
    }

    /// Give the buffer back to the thread, for the next response's fields
    /// or body copy.
    pub(crate) fn give_back(&mut self) {
        mpm_core::byte_spares::give(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_splits_back_into_the_fields_pushed() {
        let mut w = WireFields::default();
        assert!(w.as_bytes().is_empty());
        w.push_checked(b"Server", b"up/1");
        w.push_checked(b"X-Empty", b"");
        w.push_checked(b"X-Colon", b"a: b:c");
        w.push_checked(b"X-Bytes", b"caf\xe9");
        assert_eq!(
            w.as_bytes(),
            &b"Server: up/1\r\nX-Empty: \r\nX-Colon: a: b:c\r\nX-Bytes: caf\xe9\r\n"[..]
        );
        let fields: Vec<_> = w.iter().collect();
        assert_eq!(
            fields,
            vec![
                (&b"Server"[..], &b"up/1"[..]),
                (&b"X-Empty"[..], &b""[..]),
                (&b"X-Colon"[..], &b"a: b:c"[..]),
                (&b"X-Bytes"[..], &b"caf\xe9"[..]),
            ]
        );
        w.give_back();
        assert!(w.as_bytes().is_empty());
        assert_eq!(w.iter().count(), 0);
    }
}
