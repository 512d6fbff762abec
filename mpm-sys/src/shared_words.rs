//! Atomic words in memory shared with every process forked after they are
//! made: counters and flags all the processes of a server read and write.

use std::io;
use std::sync::atomic::AtomicU64;

use rustix::mm::{MapFlags, ProtFlags};

/// `N` atomic words, zero, in a fresh anonymous shared mapping that is never
/// unmapped: every process forked after this call sees the same words.
pub fn shared_words<const N: usize>() -> io::Result<&'static [AtomicU64; N]> {
    let len = std::mem::size_of::<[AtomicU64; N]>().max(1);
    // SAFETY: a new mapping at an address the kernel chooses, so no existing
    // memory is affected; `len` is not zero.
    let p = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
        )
    }?;
    // SAFETY: the mapping is readable and writable for `len` bytes, zeroed by
    // the kernel (all zero is a valid `[AtomicU64; N]`), page-aligned (so
    // aligned for it) and never unmapped (nothing keeps its address to), so
    // the shared reference is valid for ever; atomics make sharing sound.
    Ok(unsafe { &*p.cast::<[AtomicU64; N]>() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn shared_words_start_at_zero_and_keep_what_is_stored() {
        let words = shared_words::<3>().unwrap();
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        words[2].fetch_add(5, Ordering::Relaxed);
        words[0].store(u64::MAX, Ordering::Relaxed);
        assert_eq!(words[2].load(Ordering::Relaxed), 5);
        assert_eq!(words[0].load(Ordering::Relaxed), u64::MAX);
        assert_eq!(shared_words::<0>().unwrap().len(), 0);
    }
}
