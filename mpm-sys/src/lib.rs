//! # mpm-sys
//!
//! The one crate of mpm allowed `unsafe`: every operating-system call no
//! safe wrapper (`rustix`, `nix`) covers, and every layout of memory shared
//! between processes, behind safe functions. Every other crate carries
//! `#![forbid(unsafe_code)]`. Each `unsafe` block here has a `SAFETY` line
//! that holds for every input of the safe function around it.
//!
//! * [`shared_memory`] — zeroed memory mapped `MAP_SHARED` before a fork, for
//!   types made of atomics ([`ShmSafe`](shared_memory::ShmSafe)).
//! * [`process_mutex`] — one robust, process-shared mutex for every shared
//!   table: it sleeps in the kernel, and tells the next locker when a
//!   holder died holding it.
//! * [`fork`] — `fork(2)`, refused unless the process has one thread.
//! * [`fd_passing`] — descriptors received over a Unix socket
//!   (`SCM_RIGHTS`), and descriptors inherited at exec, owned.
//! * [`socket`] — the socket calls std and socket2 lack: `accept4`,
//!   `TCP_NOTSENT_LOWAT`, a peek for pending input.
//! * [`spawn`] — what a child does between fork and exec (keep descriptors
//!   open, move them, die with its parent, limits, CPU affinity).
//! * [`signals`] — signal dispositions changed in place.
//! * [`open_beneath`] — open a path without leaving a directory
//!   (`openat2(RESOLVE_BENEATH)`, or a walk from the directory's descriptor
//!   before Linux 5.6): the static site's confinement.
//! * [`page_cache`] — what the page cache holds of a file (`cachestat`),
//!   reads that never wait for the disk (`preadv2(RWF_NOWAIT)`), eviction.
//! * [`bump_pool`] — a bump arena or the global allocator, as an
//!   `Allocator`: the request pool.
//! * [`ring`] — io_uring behind a safe API: a ring with a provided-buffer
//!   ring, multishot accept and receive, owned sends, and [`ring::probe`],
//!   which says why io_uring is refused where it is.
//! * [`at_exit`] — a function run at exit.
//! * [`clock`] — the monotonic clock in nanoseconds, and local time.
//! * [`cpu`] — the CPU a thread runs on: which stripe of a per-CPU counter
//!   it writes.
//! * [`alloc_shim`] — the `GlobalAlloc` that dispatches to the allocator
//!   chosen at launch and reports to an observer.
//! * [`Error`] — this crate's one error type.

pub mod alloc_shim;
pub mod at_exit;
pub mod bump_pool;
pub mod clock;
pub mod cpu;
mod error;
pub mod fd_passing;
pub mod fork;
pub mod open_beneath;
pub mod page_cache;
pub mod process_mutex;
pub mod readiness;
pub mod ring;
pub mod shared_memory;
pub mod signals;
pub mod socket;
pub mod spawn;

pub use error::{Error, Result};
