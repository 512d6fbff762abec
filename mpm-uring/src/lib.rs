//! # mpm-uring
//!
//! The uring process model: per process, one io_uring and a loop on it,
//! with a pool of worker threads behind the loop, as event has an epoll
//! set. By default (`--server-limit auto`) there is such a process per CPU.
//! The loop does its I/O by completion, not readiness:
//!
//! * **multishot accept** on each listening socket: one submission, then a
//!   completion per connection;
//! * **multishot receive into a provided-buffer ring** (`mpm_sys::ring`):
//!   the kernel picks a buffer when bytes arrive, the loop copies them into
//!   the connection's input queue ([`mpm_core::Stream`] in ring mode) and
//!   the buffer goes straight back, so an idle connection holds no receive
//!   buffer, only its input queue's bytes, which are freed once read;
//! * **sends gathered**: what the handler writes on the loop is queued on
//!   the stream, and each connection's output goes out as one send per turn
//!   of the loop, all of a turn's sends in the loop's one `io_uring_enter`.
//!
//! A keep-alive request answered on the loop (a cached static file, an
//! error page) so costs no system call of its own: its receive stays armed
//! across requests, its answer is one submission in the turn's one enter.
//!
//! File bodies: there is no `sendfile` in a ring. Reading every body into
//! the gathered output and sending it from there served a 1 MiB file at
//! about half event's rate (one process, `wrk -c 10`; a copy through user
//! memory where `sendfile(2)` makes none). So a body goes out by
//! `sendfile(2)` directly, on the non-blocking socket, when no send of the
//! connection is in flight (the gathered head first, with `MSG_MORE`); only
//! behind a send in flight is it read (from the page cache: a loop sends
//! only cached files) into the gathered output.
//!
//! * [`Uring`] (`run.rs`) — the [`Mpm`](mpm_core::Mpm): setup → spawn →
//!   serve → drain, and the refusal when io_uring is not available here.
//! * `ring_loop.rs` — the loop: completions, timeouts, the stop.
//! * `steps.rs` — a connection's steps on the loop and its hand-offs.
//! * `accept.rs` — multishot accept, paused and resumed.
//! * The worker pool and the timeout queues are event's, shared from
//!   [`mpm_core::loop_parts`].
//!
//! ## The hand-off rule
//!
//! A connection goes to a worker only when the ring holds none of its I/O:
//! its multishot receive has ended (the loop cancels it and waits for its
//! last completion, the one without `F_MORE`; bytes that arrived meanwhile
//! join its input queue) and no send of it is in flight. The worker then
//! reads and writes the socket itself (input queue first, output gathered
//! on the loop first). It comes back with output perhaps gathered: the loop
//! sends that, and arms the receive again when the connection next waits
//! for input. When a connection's input queue passes
//! [`INPUT_CAP`] (a pipelining flood, an upload the handler is not reading
//! yet) its receive is cancelled, and armed again once the handler has read
//! the queue down, so memory stays bounded. A close or a lingering close
//! waits for the connection's output to be sent first.
//!
//! ## Accepting: a shared listener
//!
//! Sibling processes share each listening socket, as under event: one
//! accept queue, so no connection is lost when a process exits or stops
//! accepting, and a graceful restart hands the same sockets on. Each
//! process arms a multishot accept on it while it may accept; it cancels it
//! (and arms it again later) while every worker is busy, the connection cap
//! is reached, or it holds more than its share of connections by the
//! [`ConnectionLedger`](mpm_core::ConnectionLedger), as event does. With
//! `--reuseport` each process has a socket of its own instead. The share is
//! weighed as the loop reads its completions, and a multishot accept, once
//! woken, goes on taking what is queued: a burst arriving while the loop is
//! busy can go mostly to one process before it sees its share passed
//! (event weighs it before each `accept`); the split evens out as
//! connections end.
//!
//! The kernel wakes one waiting accept per connection (the waits are
//! exclusive), and an accept being cancelled still takes its wake-up; so
//! when a cancelled accept ends, the loop takes what is queued on that
//! listener itself (the connections it was woken for), else they would
//! wait, with a sibling listening idle, for the next connection to arrive.
//!
//! ## On 16 to 64 cores
//!
//! Nothing is shared between processes on a request's path: each has its
//! ring, its buffers, its connections; the only shared line is the ledger's
//! seat, written when the process's count changes. Within a process the
//! loop is one thread; workers meet it on a channel and an eventfd, as
//! under event. Memory grows with connections only by what they have
//! queued, not by a receive buffer each.
//!
//! The loop's rule holds as under event: nothing slow runs on the loop; a
//! step that may block goes to a worker, and a panic in any step closes
//! that connection alone.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accept;
mod ring_loop;
mod run;
mod steps;

pub use ring_loop::{LoopStats, INPUT_CAP};
pub use run::{available, Uring};
