//! # mpm-master
//!
//! The master: what runs above the serving processes, knowing the core's
//! contract and no protocol or model.
//!
//! * [`process_manager`] — the single-threaded master that forks serving
//!   processes, replaces dead ones, and handles stop and graceful restart;
//!   [`Sizing`] says how many it keeps; `signals.rs` turns signals into flags.
//! * [`upgrade`] — hand the listening sockets to a new binary (SIGUSR2)
//!   without dropping a connection, with rollback.
//! * [`cpus`] — the CPUs the server may use: how many processes
//!   `--server-limit auto` starts, and pinning them (`--cpu-affinity auto`).
//! * [`drop_privileges`] — serve as `--user`/`--group` after binding as root.
//! * [`raise_fd_limit`] — lift the soft descriptor limit for many connections.
//! * [`pid_file`] — the pid file `mpm signal` reads.

#![forbid(unsafe_code)]

pub mod cpus;
pub mod design;
mod fd_limit;
pub mod pid_file;
mod privileges;
pub mod process_manager;
mod signals;
mod sizing;
pub mod upgrade;

pub use fd_limit::raise_fd_limit;
pub use privileges::drop_privileges;
pub use process_manager::{Exit, ProcessManager};
pub use sizing::Sizing;
