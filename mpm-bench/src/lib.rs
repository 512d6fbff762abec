//! # mpm-bench
//!
//! Measuring what a process model costs, as commands of the `mpm` binary
//! (and of any program built on the `mpm` crate with its `bench` feature).
//!
//! * [`workload`] — what a client sends and how: a mix of requests with
//!   weights and expected statuses, concurrency, keep-alive or not, slow
//!   clients; read from TOML or built in code (an application's own).
//! * `bench` — `mpm bench`, the load generator: epoll client
//!   state machines, an HDR histogram, every response checked.
//! * `compare` — `mpm compare`: each MPM × allocator (or an experiment's
//!   variants) as a separate server child, driven through the same
//!   workloads several times over, with a report and charts.
//!
//! `bench` and `compare` come with the `commands` feature (on by default);
//! without it the crate is only [`workload`]. It knows the core's names
//! (process models, allocators, pollers) and starts servers as commands: it
//! links no model and no protocol.

#![forbid(unsafe_code)]

#[cfg(feature = "commands")]
pub mod bench;
#[cfg(feature = "commands")]
pub mod compare;
#[cfg(feature = "commands")]
mod numbers;
#[cfg(feature = "commands")]
mod output;
pub mod workload;

pub use workload::{Expect, SlowClients, Workload, WorkloadRequest};
