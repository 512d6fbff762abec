//! The request pool: an arena for what lives only as long as one request,
//! like httpd's `r->pool`.
//!
//! With `--request-pool on` each worker keeps one [`bumpalo::Bump`]; what a
//! request needs for scratch (the decoded path, the name opened beneath the
//! docroot, a handler's own temporary strings) is bumped out of it, and the
//! whole arena is reset, not freed, once the handler has answered. After the
//! first few requests have grown it to size, a request costs the global
//! allocator nothing. With `off`, the same code asks the global allocator
//! for each object, as it would without a pool.
//!
//! A handler reaches the pool through [`Request::pool`](crate::Request::pool)
//! and uses it as an allocator (`allocator_api2`'s collections take it), so a
//! value from the pool cannot outlive the request: the borrow checker sees to
//! that, since the [`Response`](crate::Response) a handler returns owns
//! everything in it.

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};
use bumpalo::Bump;

/// The pool a request's scratch allocations come from: the worker's arena
/// (`--request-pool on`) or the global allocator (`off`).
///
/// It is `Copy` and implements [`Allocator`], so it goes wherever an
/// allocator does:
///
/// ```
/// use mpm_http::allocator_api2::vec::Vec;
/// use mpm_http::{Request, Version};
///
/// let req = Request::for_test("GET", "/a/b", Version::Http11, &[], b"");
/// // Scratch that dies with the request.
/// let mut segments = Vec::new_in(req.pool());
/// segments.extend(req.path().split('/').filter(|s| !s.is_empty()));
/// assert_eq!(segments.as_slice(), ["a", "b"]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RequestPool<'a> {
    arena: Option<&'a Bump>,
}

impl<'a> RequestPool<'a> {
    /// A pool that hands every allocation to the global allocator (what a
    /// request gets with `--request-pool off`).
    pub const fn heap() -> RequestPool<'static> {
        RequestPool { arena: None }
    }

    /// Does this pool bump out of an arena (`--request-pool on`)?
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
// life (the arena, or the global allocator), so every pointer it frees or
// grows came from the allocator it forwards to; both uphold the trait's
// contract themselves.
unsafe impl Allocator for RequestPool<'_> {
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

/// A worker's arena, reset after every request; or nothing, when the pool
/// is off.
#[derive(Debug, Default)]
pub(crate) struct PoolArena {
    bump: Option<Bump>,
}

impl PoolArena {
    /// An arena when `on`, else a pool that forwards to the global allocator.
    pub(crate) fn new(on: bool) -> PoolArena {
        PoolArena {
            bump: on.then(Bump::new),
        }
    }

    /// The pool for the next request.
    pub(crate) fn pool(&self) -> RequestPool<'_> {
        RequestPool {
            arena: self.bump.as_ref(),
        }
    }

    /// Forget everything the last request took, keeping the arena's
    /// largest chunk for the next one.
    pub(crate) fn reset(&mut self) {
        if let Some(bump) = &mut self.bump {
            bump.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allocator_api2::vec::Vec;

    #[test]
    fn an_arena_pool_reuses_its_memory_after_reset() {
        let mut arena = PoolArena::new(true);
        let first = {
            let mut v: Vec<u8, _> = Vec::with_capacity_in(100, arena.pool());
            v.extend_from_slice(b"scratch");
            v.as_ptr() as usize
        };
        arena.reset();
        let v: Vec<u8, _> = Vec::with_capacity_in(100, arena.pool());
        assert_eq!(
            v.as_ptr() as usize,
            first,
            "the reset arena hands out the same bytes"
        );
        assert!(arena.pool().is_arena());
    }

    #[test]
    fn a_heap_pool_grows_and_frees_through_the_global_allocator() {
        let arena = PoolArena::new(false);
        assert!(!arena.pool().is_arena());
        let mut v: Vec<u32, _> = Vec::new_in(arena.pool());
        for i in 0..10_000 {
            v.push(i);
        }
        assert_eq!(v.iter().map(|&x| x as u64).sum::<u64>(), 49_995_000);
    }

    #[test]
    fn an_arena_pool_grows_a_vector_past_its_first_chunk() {
        let arena = PoolArena::new(true);
        let mut v: Vec<u64, _> = Vec::new_in(arena.pool());
        for i in 0..100_000u64 {
            v.push(i);
        }
        assert_eq!(v[99_999], 99_999);
        let s = arena.pool().alloc_str("copied");
        assert_eq!(&s[..], b"copied");
    }
}
