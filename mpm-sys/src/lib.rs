//! # mpm-sys
//!
//! Every `unsafe` operation of mpm, each behind a safe API whose `SAFETY`
//! line holds for every input; every other crate has
//! `#![forbid(unsafe_code)]`. Calls that `rustix` or `nix` already wrap
//! safely are made there, not here.
//!
//! * [`open_beneath`] — open a path without leaving a directory
//!   (`openat2(RESOLVE_BENEATH)`, or a walk from the directory's descriptor
//!   before Linux 5.6): the static site's confinement.
//! * [`page_cache`] — what the page cache holds of a file (`cachestat`),
//!   reads that never wait for the disk (`preadv2(RWF_NOWAIT)`), eviction.
//! * [`bump_pool`] — a bump arena or the global allocator, as an
//!   `Allocator`: the request pool.
//! * [`shared_words`] — atomic words shared with forked children.
//! * [`spawn`] — a child's set-up between fork and exec: limits, CPU,
//!   a descriptor at a fixed number.
//! * [`at_exit`] — a function run at exit.

pub mod at_exit;
pub mod bump_pool;
pub mod open_beneath;
pub mod page_cache;
pub mod shared_words;
pub mod spawn;
