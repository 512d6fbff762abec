//! # mpm-event
//!
//! The event process model: per process, a listener thread owns an epoll set
//! over the listening sockets and every connection that is waiting (idle
//! keep-alive, the rest of a request, room to write, a lingering close), and a
//! pool of worker threads runs handlers. An idle connection costs memory, not
//! a thread. By default (`--server-limit auto`) there is such a process per
//! CPU the server may use, sharing the listening sockets.
//!
//! * [`Event`] (`run.rs`) — the [`Mpm`](mpm_core::Mpm): setup → spawn →
//!   serve → drain.
//! * `accept.rs` — the accept strategy: non-blocking accepts, paused while
//!   every worker is busy, the connection cap is reached, or (with siblings
//!   sharing the listeners, registered `EPOLLEXCLUSIVE`) this process holds
//!   more than its share of connections ([`mpm_core::ConnectionLedger`]).
//! * `keepalive.rs` — idle keep-alive connections, parked without a thread,
//!   and how a stop closes them.
//! * [`event_loop`] — the listener thread: reads and parses request heads
//!   without blocking ([`ConnectionHandler::prefetch`](mpm_core::ConnectionHandler::prefetch)),
//!   hands a worker only a whole request, finishes large writes itself on
//!   `EPOLLOUT`, drains lingering closes, and steps connections that yielded
//!   once per turn, after the others.
//! * `upstream_registry.rs` — the upstream sockets the loop keeps
//!   registered for good, edge-triggered (a wait on one costs no system
//!   call), told apart from a later socket with the same number by stamp;
//!   it tells the pool whether an idle one turned readable (no peek at
//!   reuse).
//! * [`worker_pool`] (in `mpm_core::loop_parts`) — the workers, and the channel and eventfd by which
//!   connections come back to the loop.
//! * [`timeout_queues`] (in `mpm_core::loop_parts`) — keep-alive, request, write and linger timeouts, each
//!   an ordered queue expired in O(1).
//!
//! A request whose answer cannot block (a cached static file, an error page)
//! is answered on the listener thread itself: a keep-alive request then costs
//! no thread switch at all. Everything else goes to a worker, so a handler may
//! block as it likes. Nothing slow runs on the loop: each pipelined request is
//! asked, a body goes a budget per turn and only from the page cache, and a
//! panic in any step (on the loop or a worker) closes that connection alone
//! (see `mpm_core::design`).

#![forbid(unsafe_code)]

mod accept;
mod await_deadlines;
pub mod event_loop;
mod keepalive;
mod run;
mod upstream_registry;
// Shared with the uring model: they live in the core's loop parts.
pub use mpm_core::loop_parts::{timeout_queues, worker_pool};

pub use run::Event;
