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
//!   open, move them, die with its parent).
//! * [`signals`] — signal dispositions changed in place.
//! * [`clock`] — the monotonic clock in nanoseconds, and local time.
//! * [`alloc_shim`] — the `GlobalAlloc` that dispatches to the allocator
//!   chosen at launch and reports to an observer.
//! * [`Error`] — this crate's one error type.

pub mod alloc_shim;
pub mod clock;
mod error;
pub mod fd_passing;
pub mod fork;
pub mod process_mutex;
pub mod shared_memory;
pub mod signals;
pub mod socket;
pub mod spawn;

pub use error::{Error, Result};
