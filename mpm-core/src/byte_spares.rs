//! Byte buffers a thread gives back and takes again, so that a short-lived
//! copy of a few KiB costs no allocation of its own.
//!
//! A proxied answer's body, when it comes with the upstream's head, is
//! copied out of the thread's read buffer, then into the client's output,
//! and freed. At 1 KiB and over, glibc's allocator serves such a block
//! outside its per-thread cache, at several hundred instructions for the
//! allocation and the free (callgrind: about a twentieth of a proxied
//! request's). [`copy_of`] takes a buffer the thread gave back
//! ([`give`]) instead. Nothing is shared between threads: at 64 cores each
//! keeps its own few.

use std::cell::RefCell;

/// The most buffers a thread keeps.
const KEPT: usize = 4;

/// The largest buffer kept: a larger one is freed when given back (a head
/// read brings at most 16 KiB with it).
pub const KEPT_MAX: usize = 16 * 1024;

thread_local! {
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer holding a copy of `bytes`: one this thread gave back, if one
/// has room (the smallest: [`take`]), else a new one.
pub fn copy_of(bytes: &[u8]) -> Vec<u8> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let mut v = take(bytes.len());
    v.extend_from_slice(bytes);
    v
}

/// An empty buffer with room for at least `min` bytes: the smallest this
/// thread gave back that has it (a response's few fields should not take
/// the buffer a body copy needs next), else a new one of `min`.
pub fn take(min: usize) -> Vec<u8> {
    let spare = SPARES.with(|s| {
        let mut s = s.borrow_mut();
        let (i, _) = s
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= min)
            .min_by_key(|(_, v)| v.capacity())?;
        Some(s.swap_remove(i))
    });
    match spare {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(min),
    }
}

/// Give `buf` back for a later [`copy_of`] or [`take`] on this thread: kept if the
/// thread keeps fewer than a few and it is at most [`KEPT_MAX`] bytes.
pub fn give(buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > KEPT_MAX {
        return;
    }
    SPARES.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < KEPT {
            s.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_for_a_copy_that_fits() {
        let first = copy_of(&[7u8; 1500]);
        let at = first.as_ptr();
        give(first);
        let again = copy_of(&[9u8; 1400]);
        assert_eq!(again.as_ptr(), at, "the same buffer");
        assert_eq!(again, vec![9u8; 1400]);
    }

    #[test]
    fn too_large_or_too_many_buffers_are_not_kept() {
        give(vec![0u8; KEPT_MAX + 1]);
        SPARES.with(|s| assert!(s.borrow().is_empty()));
        for _ in 0..KEPT + 3 {
            give(vec![0u8; 100]);
        }
        SPARES.with(|s| assert_eq!(s.borrow().len(), KEPT));
        // One too small for a copy is left for a smaller one.
        let big = copy_of(&[1u8; 200]);
        assert_eq!(big.len(), 200);
        SPARES.with(|s| assert_eq!(s.borrow().len(), KEPT));
    }

    #[test]
    fn take_finds_the_smallest_buffer_with_room_and_empties_it() {
        SPARES.with(|s| s.borrow_mut().clear());
        give(vec![1u8; 4000]);
        give(vec![2u8; 300]);
        give(vec![3u8; 100]);
        let small = take(200);
        assert!(small.is_empty());
        assert_eq!(small.capacity(), 300, "the 300, not the 4000");
        let none_fits = take(5000);
        assert!(none_fits.capacity() >= 5000);
        SPARES.with(|s| assert_eq!(s.borrow().len(), 2));
    }

    #[test]
    fn an_empty_copy_allocates_nothing() {
        assert_eq!(copy_of(&[]).capacity(), 0);
    }
}
