//! # mpm-worker
//!
//! The worker process model: a pool of `--threads-per-child` threads that take
//! turns holding a listener mutex to accept, then serve that connection to
//! completion with blocking I/O.
//!
//! * [`Worker`] (`run.rs`) — the [`Mpm`](mpm_core::Mpm): setup → spawn →
//!   serve → drain.
//! * [`accept`] — the accept strategy: one thread at a time waits over the
//!   listeners (and the stop pipe) under the listener mutex, then accepts;
//!   the loop is prefork's too ([`mpm_core::take_turns`]), the mutex this
//!   model's own.
//! * [`keepalive`] — one slot per thread recording the connection it
//!   holds, so a stopping server closes idle keep-alive connections at once
//!   and cuts off the rest after `--graceful-timeout`.
//!
//! With `--server-limit` above 1 the master of `mpm-master` runs the pool
//! in several processes.

#![forbid(unsafe_code)]

pub mod accept;
pub mod keepalive;
mod run;

pub use run::Worker;
