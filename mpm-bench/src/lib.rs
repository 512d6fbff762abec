//! # mpm-bench
//!
//! Measuring what a process model costs, as commands of the `mpm` binary
//! (and of any program built on the `mpm` crate with its `bench` feature).
//!
//! * [`bench`](mod@bench) — `mpm bench`, the load generator: epoll client
//!   state machines, an HDR histogram, every response checked.
//! * [`compare`] — `mpm compare`: each MPM × allocator (or an experiment's
//!   variants) as a separate server child, driven through the same
//!   scenarios, with a report and charts.
//!
//! It knows the core's names (process models, allocators, pollers) and
//! starts servers as commands: it links no model and no protocol.

pub mod bench;
pub mod compare;
