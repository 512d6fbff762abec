//! # mpm
//!
//! The `mpm` server as a library: hand [`main`] your [`App`] (any
//! `Fn() -> impl HttpHandler` will do) and your binary has the whole `mpm`
//! command line: `serve --mpm prefork|worker|event` with every flag and the
//! TOML file, the status page, `check`, and `signal`.
//!
//! ```no_run
//! use mpm::mpm_core::http::{HttpHandler, Request, Response};
//!
//! #[derive(Default)]
//! struct Counter { served: u64 }
//!
//! impl HttpHandler for Counter {
//!     fn handle(&mut self, _req: &Request<'_>) -> Response {
//!         self.served += 1; // this worker's own count: no lock
//!         Response::new(200).body(format!("request {} on this worker\n", self.served))
//!     }
//! }
//!
//! fn main() {
//!     std::process::exit(mpm::main(Counter::default));
//! }
//! ```
//!
//! * [`App`] — how each worker's handler is made, and when (the guide in
//!   `docs/embedding.md` covers what may be shared).
//! * [`StaticSite`] — the `mpm` binary's own app: a docroot, or the welcome site.
//! * [`main`] — the command line; [`serve_protocol`] the same for a protocol
//!   other than HTTP.
//! * [`bench`](mod@bench) — `mpm bench`, the load generator; [`compare`] — `mpm compare`,
//!   the MPM × allocator matrix and the experiments, with their reports.
//! * [`mpm_core`] — re-exported: the handler traits, the HTTP types, the MPM contract.

/// Every allocation of a program built on this library goes through mpm's
/// dispatcher, so that `--allocator` picks system, mimalloc or locked at
/// launch. A program that needs a global allocator of its own turns off the
/// default `global-allocator` feature (and `--allocator` then says it cannot).
#[cfg(feature = "global-allocator")]
#[global_allocator]
static ALLOCATOR: mpm_core::allocator::MpmAllocator = mpm_core::allocator::MpmAllocator;

mod app;
pub mod bench;
pub mod cli;
pub mod compare;
mod signal_command;
mod site;

pub use app::{App, SiteContent, StaticSite};
pub use cli::{main, serve_protocol};
pub use mpm_core;
