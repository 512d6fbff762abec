//! # mpm-prefork
//!
//! The prefork process model: a single-threaded master (the process manager
//! of `mpm-core`, sizing children between `--min-spare` and `--max-spare`
//! idle ones) forks single-threaded children, each serving one connection at
//! a time, that take turns to accept.
//!
//! * [`accept_mutex`] — the turn: `fcntl`, `flock`, a robust `pthread` mutex in
//!   shared memory, or `none` (every idle child waits in `accept`).
//! * [`Prefork`] — the [`Mpm`](mpm_core::Mpm): what each child runs.
//!
//! A child records in its scoreboard slot how long it waited for the accept
//! mutex, and retires after `--max-connections-per-child` connections.

pub mod accept_mutex;
mod prefork;

pub use prefork::Prefork;
