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

use bumpalo::Bump;

/// The pool a request's scratch allocations come from: the worker's arena
/// (`--request-pool on`) or the global allocator (`off`).
///
/// It is `Copy` and implements [`Allocator`](allocator_api2::alloc::Allocator),
/// so it goes wherever an allocator does:
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
///
/// The allocator itself is `mpm_sys`' [`BumpPool`](mpm_sys::bump_pool::BumpPool)
/// (implementing `Allocator` takes code the compiler cannot check, which
/// lives there):
/// [`RequestPool::heap`] is a pool that forwards to the global allocator
/// (what a request gets with `--request-pool off`), `is_arena` says whether
/// it bumps out of an arena, and `alloc_str` copies a string into it.
pub type RequestPool<'a> = mpm_sys::bump_pool::BumpPool<'a>;

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
        match &self.bump {
            Some(bump) => RequestPool::arena(bump),
            None => RequestPool::heap(),
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
