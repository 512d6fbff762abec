//! # mpm-worker
//!
//! The worker process model: a pool of `--threads-per-child` threads that take
//! turns holding a listener mutex to accept, then serve that connection to
//! completion with blocking I/O.
//!
//! * [`listener_mutex`] — the accept turn: one thread at a time waits in
//!   `poll` over the listeners (and the stop pipe), then accepts.
//! * [`connection_slots`] — one slot per thread recording the connection it
//!   holds, so a stopping server closes idle keep-alive connections at once
//!   and cuts off the rest after `--graceful-timeout`.
//! * [`Worker`] — the [`Mpm`] itself.
//!
//! Today the pool runs in one process; the shared process manager (a later
//! issue) runs it as several processes.

pub mod connection_slots;
pub mod listener_mutex;
mod worker;

pub use worker::Worker;

#[doc(no_inline)]
pub use mpm_core::Mpm;
