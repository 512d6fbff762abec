//! # mpm
//!
//! The `mpm` server as a library: hand [`main`] your [`App`] (any
//! `Fn() -> impl HttpHandler` will do) and your binary has the whole `mpm`
//! command line: `serve --mpm prefork|worker|event` with every flag and the
//! TOML file, the status page, `check`, `signal`, and (with the default
//! `bench` feature) `bench` and `compare`.
//!
//! ```no_run
//! use mpm::mpm_http::{HttpHandler, Request, Response};
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
//!   `docs/embedding.md` covers what may be shared), and the [`Workload`]s
//!   `myapp compare` measures it with.
//! * [`StaticSite`] — the `mpm` binary's own app: a docroot, or the welcome site.
//! * [`main`] — the command line; [`serve_protocol`] the same for a protocol
//!   other than HTTP.
//! * [`config`] — the flags and the TOML file: the only place that knows
//!   them all, and builds each layer's settings from them.
//! * The layers, re-exported: [`mpm_core`] (the handler contract and the
//!   `Mpm` trait), [`mpm_http`] (HTTP/1.1, the static site, the status
//!   page), the models [`mpm_prefork`], [`mpm_worker`] and [`mpm_event`],
//!   the master [`mpm_master`], and [`mpm_bench`] (its workloads always;
//!   `bench` and `compare` with the `bench` feature).
//!
//! # Driving a process model directly
//!
//! Without the command line: pick an MPM, give it its settings, listeners,
//! a handler factory and scoreboard slots, and run it. The lifecycle is
//! stopped here from the test; a real server stops on SIGTERM.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::TcpStream;
//! use std::time::Duration;
//! use mpm::mpm_core::{Lifecycle, Listener, Mpm, MpmSettings, Phase};
//! use mpm::mpm_http::{HttpFactory, HttpHandler, HttpSettings, Request, Response};
//!
//! struct Hello;
//! impl HttpHandler for Hello {
//!     fn handle(&mut self, req: &Request<'_>) -> Response {
//!         Response::new(200)
//!             .header("Content-Type", "text/plain")
//!             .body(format!("hello from {}\n", req.path()))
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let settings = MpmSettings { max_request_workers: 4, threads_per_child: 4, ..MpmSettings::default() };
//! let listeners = Listener::bind_all(&["127.0.0.1:0".parse()?], 128)?;
//! let addr = listeners[0].local_addr();
//! let lifecycle = Lifecycle::new()?;
//! let factory = HttpFactory::new(HttpSettings::default(), || Hello);
//! // One slot per worker thread, where the MPM keeps states and counters.
//! let slots = mpm::mpm_core::scoreboard::Scoreboard::create(1, 4)?.process_slots(0);
//! let server = {
//!     let lifecycle = lifecycle.clone();
//!     std::thread::spawn(move || {
//!         mpm::mpm_worker::Worker.run(&settings, listeners, factory, &lifecycle, slots)
//!     })
//! };
//! assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(5)));
//!
//! let mut s = TcpStream::connect(addr)?;
//! s.write_all(b"GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
//! let mut reply = String::new();
//! s.read_to_string(&mut reply)?;
//! assert!(reply.starts_with("HTTP/1.1 200 OK"));
//! assert!(reply.ends_with("hello from /hi\n"));
//!
//! lifecycle.stop();
//! server.join().unwrap()?;
//! # Ok(()) }
//! ```

/// Every allocation of a program built on this library goes through mpm's
/// dispatcher, so that `--allocator` picks system, mimalloc or locked at
/// launch. A program that needs a global allocator of its own turns off the
/// default `global-allocator` feature (and `--allocator` then says it cannot).
#[cfg(feature = "global-allocator")]
#[global_allocator]
static ALLOCATOR: mpm_core::allocator::MpmAllocator = mpm_core::allocator::MpmAllocator;

mod app;
mod cli;
pub mod config;
mod signal_command;
mod site;

pub use app::{App, SiteContent, StaticSite};
pub use cli::{main, serve_protocol};
pub use config::{Config, ConfigLayer};
/// What an [`App`] ships for `compare` to measure it with.
pub use mpm_bench::{Workload, WorkloadRequest};

pub use mpm_bench;
pub use mpm_core;
pub use mpm_event;
pub use mpm_http;
pub use mpm_master;
pub use mpm_prefork;
pub use mpm_worker;
