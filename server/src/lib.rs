#![doc = include_str!("../../docs/embedding.md")]
#![forbid(unsafe_code)]

mod app;
mod cli;
mod internal;
pub mod settings;
mod signal_command;
mod site;

pub use app::{App, Identity, NoSettings, Settings, SiteContent, StaticSite, STATIC_SITE_SETTINGS};
pub use cli::{main, serve_protocol};
/// The logging facade whose logger [`main`] makes mpm's error log: lines an
/// application logs with `log::warn!` and friends are written with mpm's.
pub use log;
/// The loads an [`App`] ships for `myapp compare` to measure it with
/// ([`App::workloads`]), and the format of `--workload` files.
pub use mpm_bench::{Workload, WorkloadRequest};
/// The global allocator that makes `--allocator` work: a program installs
/// it itself, in one line (see the guide above).
pub use mpm_core::allocator::MpmAllocator;
/// State shared by every process of the server (prefork's children, every
/// generation): [`shared::Table`], [`shared::Counters`], [`shared::Shared`].
pub use mpm_core::shared;
/// Waiting without a thread: [`waiting::sleep`], and the contract's
/// [`waiting::Await`] for a protocol of one's own.
pub use mpm_core::waiting;
/// The error type of `App::check` and of the shared-memory constructors.
pub use mpm_core::Error;
/// The HTTP/1.1 client a handler calls other services with, without
/// holding a thread under the event MPM: [`upstream::Client`] in a
/// [`Response::later`](mpm_http::Response::later) answer.
pub use mpm_upstream as upstream;
/// The settings under their former name.
pub use settings as config;
pub use settings::{Config, ConfigLayer};

/// What an embedder uses, in one import: `use mpm::prelude::*;`.
pub mod prelude {
    pub use crate::{App, Config, ConfigLayer, Identity, NoSettings, Settings};
    pub use mpm_bench::{Workload, WorkloadRequest};
    pub use mpm_core::shared::{Counters, Shared, ShmSafe, Table, TableError};
    pub use mpm_core::Error;
    #[cfg(feature = "json")]
    pub use mpm_http::Json;
    pub use mpm_http::{
        AwaitedBody, Body, BodyReader, FileBody, HeaderError, HttpHandler, InternalRedirect,
        IntoResponse, Rejection, Request, Response, Router, Routes, Version,
    };
}

/// The layers `mpm` is built from, for what the prelude does not cover: a
/// protocol of your own on [`mpm_core::ConnectionHandler`], driving a
/// process model directly, the static site (`mpm_site`), the status page
/// (`mpm_status`), the reverse proxy (`mpm_proxy`: a route of a program's
/// own that proxies), the bench (`mpm_bench`: its workloads always,
/// `bench` and `compare` with the `bench` feature).
///
/// # Driving a process model directly
///
/// Without the command line: pick an MPM, give it its settings, listeners,
/// a handler factory and scoreboard slots, and run it. The lifecycle is
/// stopped here from the test; a real server stops on SIGTERM.
///
/// ```
/// use std::io::{Read, Write};
/// use std::net::TcpStream;
/// use std::time::Duration;
/// use mpm::layers::mpm_core::{Lifecycle, Listener, Mpm, MpmSettings, Phase};
/// use mpm::layers::mpm_http::{HttpFactory, HttpHandler, HttpSettings, Request, Response};
///
/// struct Hello;
/// impl HttpHandler for Hello {
///     fn handle(&mut self, req: &Request<'_>) -> Response {
///         Response::new(200)
///             .header("Content-Type", "text/plain")
///             .body(format!("hello from {}\n", req.path()))
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let settings = MpmSettings { max_request_workers: 4, threads_per_child: 4, ..MpmSettings::default() };
/// let listeners = Listener::bind_all(&["127.0.0.1:0".parse()?], 128)?;
/// let addr = listeners[0].local_addr();
/// let lifecycle = Lifecycle::new()?;
/// let factory = HttpFactory::new(HttpSettings::default(), || Hello);
/// // One slot per worker thread, where the MPM keeps states and counters.
/// let slots = mpm::layers::mpm_core::scoreboard::Scoreboard::create(1, 4)?.process_slots(0);
/// let server = {
///     let lifecycle = lifecycle.clone();
///     std::thread::spawn(move || {
///         mpm::layers::mpm_worker::Worker.run(&settings, listeners, factory, &lifecycle, slots)
///     })
/// };
/// assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(5)));
///
/// let mut s = TcpStream::connect(addr)?;
/// s.write_all(b"GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
/// let mut reply = String::new();
/// s.read_to_string(&mut reply)?;
/// assert!(reply.starts_with("HTTP/1.1 200 OK"));
/// assert!(reply.ends_with("hello from /hi\n"));
///
/// lifecycle.stop();
/// server.join().unwrap()?;
/// # Ok(()) }
/// ```
pub mod layers {
    pub use mpm_bench;
    pub use mpm_core;
    pub use mpm_event;
    pub use mpm_http;
    pub use mpm_master;
    pub use mpm_prefork;
    pub use mpm_proxy;
    pub use mpm_site;
    pub use mpm_status;
    pub use mpm_tls;
    pub use mpm_upstream;
    pub use mpm_uring;
    pub use mpm_worker;
}
