//! # mpm-prefork
//!
//! The prefork process model: a single-threaded master (the process manager
//! of `mpm-master`, sizing children between `--min-spare` and `--max-spare`
//! idle ones) forks single-threaded children, each serving one connection at
//! a time, that take turns to accept.
//!
//! * [`Prefork`] (`run.rs`) — the [`Mpm`](mpm_core::Mpm): what each child
//!   runs, setup → serve → drain.
//! * [`accept`] — the accept strategy: the turn under an [`AcceptMutex`]
//!   (`fcntl`, `flock`, a robust `pthread` mutex in shared memory, or `none`,
//!   every idle child waiting in `accept`).
//! * `keepalive.rs` — idle keep-alive connections: the wait that a stop
//!   cuts short.
//!
//! A child records in its scoreboard slot how long queued connections
//! waited for its turn to accept (only that: see [`accept`]), and retires
//! after `--max-connections-per-child` connections.

#![forbid(unsafe_code)]

pub mod accept;
mod keepalive;
mod run;

pub use accept::AcceptMutex;
pub use run::Prefork;
