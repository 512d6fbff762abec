//! An allocator that is either a bump arena or the global allocator, chosen
//! per value: what `mpm-http`'s request pool is (`--request-pool on|off`).

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};
use bumpalo::Bump;

/// A bump arena ([`BumpPool::arena`]) or the global allocator
/// ([`BumpPool::heap`]), as an [`Allocator`] `allocator_api2`'s collections
/// take. It is `Copy`: a copy forwards to the same allocator.
#[derive(Debug, Clone, Copy)]
pub struct BumpPool<'a> {
    arena: Option<&'a Bump>,
}

impl<'a> BumpPool<'a> {
    /// A pool that hands every allocation to the global allocator.
    pub const fn heap() -> BumpPool<'static> {
        BumpPool { arena: None }
    }

    /// A pool that bumps out of `arena`.
    pub const fn arena(arena: &'a Bump) -> BumpPool<'a> {
        BumpPool { arena: Some(arena) }
    }

    /// Does this pool bump out of an arena?
    pub fn is_arena(&self) -> bool {
        self.arena.is_some()
    }

    /// Copy `s` into the pool.
    pub fn alloc_str(self, s: &str) -> allocator_api2::vec::Vec<u8, Self> {
        let mut v = allocator_api2::vec::Vec::with_capacity_in(s.len(), self);
        v.extend_from_slice(s.as_bytes());
        v
    }
}

// SAFETY: each pool value forwards to exactly one allocator for its whole
// life (the arena, or the global allocator: `arena` is private and never
// changes, and copies share it), so every pointer it frees or grows came
// from the allocator it forwards to; both uphold the trait's contract
// themselves.
unsafe impl Allocator for BumpPool<'_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        match self.arena {
            Some(bump) => bump.allocate(layout),
            None => Global.allocate(layout),
        }
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        match self.arena {
            // SAFETY: the caller's contract (ptr from this allocator, with
            // this layout) is passed on unchanged.
            Some(bump) => unsafe { bump.deallocate(ptr, layout) },
            // SAFETY: as above.
            None => unsafe { Global.deallocate(ptr, layout) },
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        match self.arena {
            // SAFETY: the caller's contract is passed on unchanged.
            Some(bump) => unsafe { bump.grow(ptr, old, new) },
            // SAFETY: as above.
            None => unsafe { Global.grow(ptr, old, new) },
        }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        match self.arena {
            // SAFETY: the caller's contract is passed on unchanged.
            Some(bump) => unsafe { bump.shrink(ptr, old, new) },
            // SAFETY: as above.
            None => unsafe { Global.shrink(ptr, old, new) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allocator_api2::vec::Vec;

    #[test]
    fn an_arena_pool_shrinks_and_grows_in_place_and_a_heap_pool_frees() {
        let bump = Bump::new();
        let pool = BumpPool::arena(&bump);
        let mut v: Vec<u8, _> = Vec::with_capacity_in(1000, pool);
        v.extend_from_slice(&[3; 10]);
        v.shrink_to_fit();
        v.extend_from_slice(&[4; 5000]);
        assert_eq!(v.len(), 5010);
        assert_eq!((v[9], v[10]), (3, 4));
        let mut h: Vec<u8, _> = Vec::with_capacity_in(1000, BumpPool::heap());
        h.push(1);
        h.shrink_to_fit();
        assert_eq!(h.as_slice(), [1]);
        assert!(!BumpPool::heap().is_arena() && pool.is_arena());
    }
}
