//! # mpm-core
//!
//! Everything a process model runs, and nothing about how it runs it.
//!
//! * [`ConnectionHandler`] — the protocol-agnostic contract every MPM drives,
//!   one readiness step at a time; [`HandlerFactory`] builds one per worker.
//! * [`http`] — HTTP/1.1 on top of it: users write an [`http::HttpHandler`].
//! * [`StaticFiles`] and [`DefaultSite`] — the handlers `mpm serve` runs.
//! * [`Mpm`] — the contract each process-model crate implements, with
//!   [`Lifecycle`] phases to wait on and [`Listener`]s bound before it starts.
//! * [`process_manager`] — the single-threaded master that forks serving
//!   processes, replaces dead ones, and handles stop and graceful restart.
//! * [`upgrade`] — hand the listening sockets to a new binary (SIGUSR2)
//!   without dropping a connection, with rollback.
//! * [`allocator`] — system, mimalloc or a global-locked malloc, chosen at
//!   launch, with allocations and lock waits counted per worker.
//! * [`scoreboard`] — one slot per worker in shared memory: states,
//!   counters, request lines, read by the master and the status page.
//! * [`server_status`] — that status page (httpd's `mod_status`), in HTML or JSON.
//! * [`listener_poller`] — how prefork and worker wait on their listeners:
//!   epoll, poll or select (`--poller`).
//! * [`blocking`] — the loop prefork and worker use to drive a handler on a
//!   blocking socket.
//! * [`Config`] — flags and TOML settings with httpd's names.
//! * [`raise_fd_limit`] — lift the soft descriptor limit for many connections;
//!   [`drop_privileges`] — serve as `--user`/`--group` after binding as root.
//! * [`access_log`] — the access log (common/combined, buffered or not,
//!   reopened for rotation), in the formats of [`log_format`];
//!   [`error_log`] — leveled error-log lines (`log_warn!` and friends).
//! * [`Error`] — this crate's one error type.
//!
//! The [`http::HttpHandler`] documentation has a runnable embedding example;
//! [`design`] explains why the pieces are shaped as they are.

#![warn(missing_docs)]

pub mod access_log;
pub mod allocator;
pub mod blocking;
pub mod config;
mod connection_handler;
mod default_site;
pub mod design;
mod error;
pub mod error_log;
mod fd_limit;
pub mod http;
mod lifecycle;
mod listener;
pub mod listener_poller;
pub mod log_format;
pub mod mime;
mod mpm;
mod privileges;
pub mod process_manager;
pub mod scoreboard;
pub mod server_status;
mod static_files;
mod stream;
pub mod upgrade;

pub use config::{Config, ConfigLayer, MpmKind};
pub use connection_handler::{ConnectionHandler, HandlerFactory, Interest, Prefetch, Wait};
pub use default_site::DefaultSite;
pub use error::{Error, Result};
pub use fd_limit::raise_fd_limit;
pub use lifecycle::{Lifecycle, Phase};
pub use listener::Listener;
pub use mpm::Mpm;
pub use privileges::drop_privileges;
pub use static_files::{StaticFiles, DEFAULT_IN_MEMORY};
pub use stream::Stream;
