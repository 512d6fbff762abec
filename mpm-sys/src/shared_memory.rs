//! Memory mapped `MAP_SHARED` before the serving processes are forked, so
//! that what one process writes every other reads.
//!
//! What lives there holds no pointers and changes only through atomics: an
//! address means something in one process only. [`ShmSafe`] is that
//! promise; the atomics and arrays of them have it, and [`shm_safe!`](crate::shm_safe!)
//! gives it to a struct whose every field has it (checked at compile time),
//! so that no crate but this one writes an `unsafe impl`.
//!
//! Two lifetimes: [`leak`], [`leak_slice`] and [`leak_with_header`] map
//! memory that is never unmapped (a scoreboard, an application's tables,
//! which live as long as the process), so their references are `'static`;
//! a [`SharedBox`] is unmapped when dropped (an accept mutex's clock,
//! remade by a restart), and lends references only for as long as it lives.

use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicBool, AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicIsize, AtomicU16, AtomicU32,
    AtomicU64, AtomicU8, AtomicUsize,
};

use crate::error::{Error, Result};

/// Types that may live in memory shared between processes.
///
/// # Safety
///
/// Implement it only for a type that (1) is valid when all its bytes are
/// zero, (2) holds no pointer, reference or handle (a `Box`, a `String`, a
/// file), and (3) changes only through atomics (no `Cell`, no plain field
/// written through a shared reference): other processes read and write it
/// at the same time. Outside this crate, use [`shm_safe!`](crate::shm_safe!), which checks
/// each field instead of trusting the author.
pub unsafe trait ShmSafe: Sync + 'static {}

macro_rules! shm_safe_atomics {
    ($($t:ty),*) => { $(
        // SAFETY: an atomic integer: zero is valid, no pointer, atomic
        // mutation only.
        unsafe impl ShmSafe for $t {}
    )* };
}
shm_safe_atomics!(
    AtomicBool,
    AtomicU8,
    AtomicU16,
    AtomicU32,
    AtomicU64,
    AtomicUsize,
    AtomicI8,
    AtomicI16,
    AtomicI32,
    AtomicI64,
    AtomicIsize
);
// SAFETY: an array of ShmSafe values is zero-valid, pointer-free and
// mutated only through its elements' atomics.
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}

/// Declare a struct [`ShmSafe`] because every one of its fields is: the
/// fields are listed (all of them: a pattern naming fewer does not compile)
/// and each must be `ShmSafe`, so a struct of atomics qualifies and one with
/// a `Box`, a `Cell` or a plain integer does not.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// #[derive(Debug)]
/// #[repr(C)]
/// struct Stats { hits: AtomicU64, misses: [AtomicU64; 2] }
/// mpm_sys::shm_safe!(Stats { hits, misses });
///
/// let stats = mpm_sys::shared_memory::leak::<Stats>("stats").unwrap();
/// stats.hits.fetch_add(1, Ordering::Relaxed);
/// assert_eq!(stats.hits.load(Ordering::Relaxed), 1);
/// ```
///
/// ```compile_fail
/// struct Plain { n: u64 } // a plain integer is written without atomics
/// mpm_sys::shm_safe!(Plain { n });
/// ```
///
/// ```compile_fail
/// use std::sync::atomic::AtomicU64;
/// struct Partly { a: AtomicU64, b: Box<u8> } // b is left out: refused
/// mpm_sys::shm_safe!(Partly { a });
/// ```
#[macro_export]
macro_rules! shm_safe {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        const _: () = {
            #[allow(dead_code)]
            fn every_field_is_shm_safe(value: &$ty) {
                fn shm_safe<T: $crate::shared_memory::ShmSafe + ?Sized>(_: &T) {}
                // No `..`: every field must be named, so none escapes the check.
                let $ty { $($field),+ } = value;
                $(shm_safe($field);)+
            }
        };
        // SAFETY: every field is ShmSafe (checked by the function above,
        // whose pattern names them all), so the struct is zero-valid,
        // pointer-free and changed only through atomics; Sync follows from
        // the fields' being Sync.
        unsafe impl $crate::shared_memory::ShmSafe for $ty {}
    };
}

/// The most bytes one mapping may have (what a configuration may ask for is
/// bounded, and the arithmetic checked): 16 GiB, touched lazily.
pub const MAX_BYTES: usize = 16 << 30;

/// The alignment every mapping has (a page), and so the most a shared type
/// may ask for.
const PAGE: usize = 4096;

/// Map `bytes` of zeroed memory shared with every process forked after.
pub(crate) fn map(bytes: usize, what: &str) -> Result<NonNull<u8>> {
    if bytes > MAX_BYTES {
        return Err(Error::TooLarge {
            what: what.to_string(),
            detail: format!("{bytes} bytes of shared memory is more than the {MAX_BYTES} allowed"),
        });
    }
    let len = std::num::NonZeroUsize::MIN.saturating_add(bytes.saturating_sub(1));
    use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
    // SAFETY: a fresh anonymous mapping at an address the kernel picks: no
    // existing memory is touched. Shared, so that writes reach every process
    // forked after; the kernel zeroes it.
    let base = unsafe {
        mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
        )
    }
    .map_err(|e| Error::os(format!("mapping shared memory for {what}"), e))?;
    Ok(base.cast())
}

/// Bytes of `n` values of `T`, checked.
fn bytes_of<T>(n: usize, what: &str) -> Result<usize> {
    n.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::TooLarge {
            what: what.to_string(),
            detail: format!("{n} entries of shared memory: too many"),
        })
}

/// One zeroed `T` in memory every process forked after shares, never
/// unmapped; `what` names it in errors.
pub fn leak<T: ShmSafe>(what: &str) -> Result<&'static T> {
    const {
        assert!(
            std::mem::align_of::<T>() <= PAGE,
            "shared values are page-aligned at most"
        )
    };
    let base = map(std::mem::size_of::<T>(), what)?;
    // SAFETY: the mapping is at least size_of::<T>() bytes, page-aligned
    // (enough for T, asserted above), zeroed (a valid T, by ShmSafe's
    // contract) and never unmapped, so the reference is good for 'static;
    // T changes only through atomics, so sharing it is sound.
    Ok(unsafe { base.cast::<T>().as_ref() })
}

/// `n` zeroed `T`s in memory every process forked after shares, never
/// unmapped; at most [`MAX_BYTES`].
pub fn leak_slice<T: ShmSafe>(n: usize, what: &str) -> Result<&'static [T]> {
    let (_, slice) = leak_with_header::<[AtomicU8; 0], T>(n, what)?;
    Ok(slice)
}

/// A zeroed `H` followed by `n` zeroed `T`s in one mapping every process
/// forked after shares, never unmapped; at most [`MAX_BYTES`]. The header
/// takes the room of a whole number of `T`s, so every `T` is aligned.
pub fn leak_with_header<H: ShmSafe, T: ShmSafe>(
    n: usize,
    what: &str,
) -> Result<(&'static H, &'static [T])> {
    const {
        assert!(
            std::mem::align_of::<H>() <= PAGE,
            "shared values are page-aligned at most"
        );
        assert!(
            std::mem::align_of::<T>() <= PAGE,
            "shared values are page-aligned at most"
        );
    };
    // The header's room, rounded up to T's alignment (a power of two).
    let align = std::mem::align_of::<T>();
    let head = std::mem::size_of::<H>().next_multiple_of(align);
    let bytes = bytes_of::<T>(n, what)?
        .checked_add(head)
        .ok_or_else(|| Error::TooLarge {
            what: what.to_string(),
            detail: "the size overflows".to_string(),
        })?;
    let base = map(bytes, what)?;
    // SAFETY: the mapping is `bytes` = head + n × size_of::<T>() long
    // (checked arithmetic above), page-aligned, zeroed (valid H and Ts by
    // ShmSafe's contract), and never unmapped, so the references are good
    // for 'static. H sits at the start (page-aligned, enough for H); the
    // slice starts `head` bytes in, a multiple of T's alignment, and ends
    // exactly at the mapping's end. Both change only through atomics.
    unsafe {
        let header = base.cast::<H>().as_ref();
        let first = base.as_ptr().add(head).cast::<T>();
        Ok((header, std::slice::from_raw_parts(first, n)))
    }
}

/// One zeroed `T` in shared memory that is unmapped when this owner is
/// dropped: every reference it lends lives no longer than it. Processes
/// forked while it lived keep their own copy of the mapping until they
/// exit (or drop theirs).
#[derive(Debug)]
pub struct SharedBox<T: ShmSafe> {
    value: NonNull<T>,
}

// SAFETY: a SharedBox only lends `&T`, and T is Sync (ShmSafe requires it):
// sending the owner to another thread or sharing it is as sound as sharing
// `&T`; the mapping is not tied to the thread that made it.
unsafe impl<T: ShmSafe> Send for SharedBox<T> {}
// SAFETY: as above.
unsafe impl<T: ShmSafe> Sync for SharedBox<T> {}

impl<T: ShmSafe> SharedBox<T> {
    /// A zeroed `T` in new shared memory; `what` names it in errors.
    pub fn new(what: &str) -> Result<SharedBox<T>> {
        const {
            assert!(
                std::mem::align_of::<T>() <= PAGE,
                "shared values are page-aligned at most"
            )
        };
        let value = map(std::mem::size_of::<T>(), what)?.cast::<T>();
        Ok(SharedBox { value })
    }
}

impl<T: ShmSafe> std::ops::Deref for SharedBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mapping holds a zeroed (so valid, by ShmSafe) and
        // aligned T, and stays mapped until `self` is dropped, which the
        // borrow of `self` outlives.
        unsafe { self.value.as_ref() }
    }
}

impl<T: ShmSafe> Drop for SharedBox<T> {
    fn drop(&mut self) {
        let len = std::mem::size_of::<T>().max(1);
        // SAFETY: the mapping was made by `new` with this length, is
        // unmapped only here, once, and no reference into it is left: every
        // one was borrowed from `self`, which is being dropped.
        let _ = unsafe { nix::sys::mman::munmap(self.value.cast(), len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[derive(Debug)]
    #[repr(C, align(128))]
    struct Line {
        n: AtomicU64,
        flags: [AtomicU8; 3],
    }
    crate::shm_safe!(Line { n, flags });

    #[test]
    fn a_header_and_its_entries_are_aligned_zeroed_and_apart() {
        let (head, lines) = leak_with_header::<AtomicU32, Line>(5, "test").unwrap();
        assert_eq!(lines.len(), 5);
        assert_eq!(head.load(Ordering::Relaxed), 0);
        for l in lines {
            assert_eq!(l as *const Line as usize % 128, 0);
            assert_eq!(l.n.load(Ordering::Relaxed), 0);
        }
        head.store(7, Ordering::Relaxed);
        assert_eq!(lines[0].n.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn sizes_past_the_bound_are_refused_not_mapped() {
        let err = leak_slice::<AtomicU64>(usize::MAX, "huge").unwrap_err();
        assert!(err.is_too_large(), "{err}");
        let err = leak_slice::<AtomicU64>(MAX_BYTES / 8 + 1, "big").unwrap_err();
        assert!(err.to_string().starts_with("big: "), "{err}");
    }

    #[test]
    fn a_shared_box_is_written_through_and_unmapped_when_dropped() {
        let b = SharedBox::<AtomicU64>::new("clock").unwrap();
        b.store(5, Ordering::Relaxed);
        assert_eq!(b.load(Ordering::Relaxed), 5);
        drop(b);
    }
}
