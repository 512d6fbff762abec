//! # mpm-core
//!
//! The contract between a process model and a protocol, and what every
//! model needs to keep it. Nothing here knows HTTP, and nothing here reads
//! configuration: the `mpm` crate builds an [`MpmSettings`] and hands it in.
//!
//! **The contract**
//! * [`ConnectionHandler`] — the protocol-agnostic handler every MPM drives,
//!   one readiness step at a time; [`HandlerFactory`] builds one per worker.
//! * [`Mpm`] — what each process-model crate implements, in the order
//!   setup → spawn → serve → drain; [`MpmKind`] names the models and
//!   [`MpmSettings`] is all a model reads.
//! * [`Lifecycle`] — the [`Phase`]s a server goes through, which embedders
//!   and tests wait on, and the stop request.
//! * [`Error`] — this crate's one error type.
//!
//! **What every model uses**
//! * [`Listener`] — listening sockets, bound before any worker starts, and
//!   [`listener_poller`] — how prefork and worker wait on them: epoll, poll
//!   or select (`--poller`).
//! * [`Stream`] — the accepted socket as a handler sees it, and [`Transport`],
//!   the seam a layer between them (TLS) plugs into.
//! * [`HandOver`] — how a stopping generation passes connections that have
//!   not sent a byte to the next one (`SCM_RIGHTS`).
//! * [`take_turns`] — the one accept function of prefork and worker, whose
//!   workers take turns on a mutex ([`take_turns::Turn`]) to wait on the
//!   listeners.
//! * [`blocking`] — the loop prefork and worker use to drive a handler on a
//!   blocking socket.
//! * [`WorkerThreads`] — a threaded model's workers, started and stopped together.
//! * [`ConnectionLedger`] — how many connections each process sharing a
//!   listening socket holds, so that they spread evenly.
//! * [`Drain`] — the one way every model stops, with one grace period
//!   ([`STOP_GRACE`]), one deadline and one answer to a stuck worker
//!   ([`ABANDON_AFTER`]); a fast stop is the same drain with no grace.
//! * [`scoreboard`] — one slot per worker in shared memory: states,
//!   counters, request lines, read by the master and the status page.
//! * [`allocator`] — system, mimalloc or a global-locked malloc, chosen at
//!   launch, with allocations and lock waits counted per worker.
//! * [`shared`] — state an application shares across every process and
//!   generation: values of atomics, counters, a table of small byte strings.
//! * [`buffered_output`] — what a layer buffers per worker (a buffered access
//!   log), flushed by a model with no thread to spare for it.
//! * [`coarse_clock`] — the wall clock to the kernel tick, for what every
//!   request reads but needs only to the second (`Date`, the scoreboard);
//!   [`turn_clock`] — the time of an event loop's turn, which a step on the
//!   loop reads for its deadlines instead of the clock.
//! * [`error_log`] — leveled error-log lines (`log_warn!` and friends), and
//!   [`local_time`], the time stamps it and the access log write.
//! * [`Seconds`] — durations as flags and files write them, bounded; and
//!   [`deadline`], the one way a deadline is computed from a setting.
//! * [`waiting`] — a step waiting on a descriptor of its own (an upstream
//!   socket) without holding a thread on an event loop: [`Await`], and the
//!   futures glue that lets `async` code run on it.
//! * [`byte_spares`] — byte buffers a thread gives back and takes again,
//!   so that a short-lived copy (a proxied body) allocates nothing.
//! * [`held_sends`] — writes to an upstream held to the end of an event
//!   loop's turn and sent together (a client's answers are held by its
//!   [`Stream`]).
//! * [`loop_parts`] — what the event-loop models (event, uring) share: the
//!   worker pool behind a loop, and its O(1) timeout queues.
//! * [`panics`] — a panic in a step caught and logged in one line, costing
//!   that connection only.
//!
//! The [`ConnectionHandler`] documentation has a runnable line protocol;
//! [`design`] explains why the pieces are shaped as they are.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod allocator;
pub mod blocking;
pub mod buffered_output;
pub mod byte_spares;
mod choice;
pub mod coarse_clock;
mod connection_handler;
pub mod design;
mod drain;
mod duration;
mod error;
pub mod error_log;
mod hand_over;
pub mod held_sends;
mod ledger;
mod lifecycle;
mod listener;
pub mod listener_poller;
pub mod local_time;
pub mod loop_parts;
mod mpm;
pub mod panics;
mod plural;
pub mod scoreboard;
mod settings;
pub mod shared;
mod stream;
pub mod take_turns;
pub mod turn_clock;
pub mod waiting;
mod worker_threads;

pub use choice::Choice;
pub use connection_handler::{ConnectionHandler, HandlerFactory, Interest, Prefetch, Wait};
pub use drain::{Drain, ABANDON_AFTER, STOP_GRACE};
pub use duration::{deadline, Seconds};
pub use error::{Error, Result};
pub use hand_over::HandOver;
pub use ledger::{ConnectionLedger, LedgerSeat};
pub use lifecycle::{signal_name, FastStop, Lifecycle, Phase};
pub use listener::Listener;
pub use mpm::{serves_on_one_thread, set_serves_on_one_thread, Mpm, MpmKind};
pub use plural::plural;
pub use settings::MpmSettings;
pub use stream::{
    RingQueues, Stream, Transport, HOLD_MAX, LINGER_BYTES, LINGER_TIME, RING_OUTPUT_CAP,
};
pub use waiting::Await;
pub use worker_threads::WorkerThreads;
