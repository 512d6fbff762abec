//! # Design notes
//!
//! Why the pieces are shaped the way they are. Nothing here is code.
//!
//! ## One handler, driven by readiness
//!
//! The three process models differ in who waits for a socket: a blocking
//! thread (prefork, worker) or an epoll set (event). A handler that owned its
//! loop would have to be written twice. [`ConnectionHandler`](crate::ConnectionHandler)
//! therefore does one step at a time and returns what it waits for next
//! ([`Interest`](crate::Interest)). The rule that makes one implementation serve
//! both: a step does *at most one read that may block*, and treats
//! `WouldBlock` as "return and wait". On a blocking socket the read simply
//! blocks and `WouldBlock` only ever means the socket timeout expired, which
//! [`Stream`](crate::Stream) records so the driver can call
//! [`timed_out`](crate::ConnectionHandler::timed_out).
//!
//! ## Timeouts are named, not timed
//!
//! A step says *which* wait follows ([`Wait::Request`](crate::Wait::Request) or
//! [`Wait::KeepAlive`](crate::Wait::KeepAlive)), not a deadline. A blocking
//! driver turns that into `SO_RCVTIMEO` (set only when it changes, so a
//! keep-alive connection costs one `setsockopt` after its first request, not
//! one per request); an event loop can keep one ordered queue per wait kind
//! and expire them in O(1), as httpd's event MPM does. The total time to
//! receive a request head or body is the HTTP layer's own check
//! (`--request-header-timeout`, `--request-body-timeout` with its minimum
//! rate), since a trickling client resets a per-read timeout with every
//! byte; a blocking driver's read waits no longer than that deadline, and the
//! event loop's request queue uses the shortest of the limits.
//!
//! ## Stopping without waiting on idle clients
//!
//! A thread blocked in `read` on an idle keep-alive connection would hold up a
//! stop for the whole keep-alive timeout. The blocking driver reports each
//! idle wait to an [`IdlePark`](crate::blocking::IdlePark); the worker MPM keeps
//! one slot per thread and, on stop, shuts idle sockets down for reading, so
//! the blocked read returns end-of-file at once. Busy connections finish
//! their request and are answered with `Connection: close`, because
//! [`Stream::is_draining`](crate::Stream::is_draining) is set. A thread clears
//! its slot before closing the descriptor, under the slot's lock, so the
//! stopping thread never shuts down a descriptor number that was reused.
//!
//! ## Responses are written whole
//!
//! The HTTP layer serialises the head (and any in-memory body) into one
//! buffer per connection, reused across requests, and writes it with one
//! `send`. A file body follows by `sendfile(2)`, the head sent with
//! `MSG_MORE` so both share packets; `--sendfile off` reads 64 KiB chunks with
//! `pread` and writes them, as httpd's `emulate_sendfile` did. Static files
//! are opened with `openat2(RESOLVE_BENEATH)`, so confinement is checked by
//! the kernel in the same call that opens, and kept in a small open-file
//! cache for a second, so a hot file costs no `open`, `stat` or `close`:
//! a keep-alive request for a small page is `read`, `send`, `sendfile`.
//!
//! ## The event loop reads ahead, and answers what cannot block
//!
//! httpd's event MPM hands a connection to a worker as soon as it is
//! readable, so a slow client still holds a thread while its headers
//! trickle in. mpm's listener calls
//! [`ConnectionHandler::prefetch`](crate::ConnectionHandler::prefetch) instead:
//! it reads without blocking and parses, and only a whole request goes to a
//! worker. When the handler says the answer cannot block
//! ([`HttpHandler::answers_without_blocking`](crate::http::HttpHandler::answers_without_blocking):
//! a cached file, an error page) the listener answers it itself, so a
//! keep-alive request for a small page costs one `read` and one `write` and
//! no thread switch. Connections are registered once, edge-triggered; an
//! edge that arrives while a worker holds the connection is remembered and
//! acted on when it comes back. Timeouts are one FIFO queue per timeout
//! value, linked through a table indexed by connection, so entering, leaving
//! and expiring are O(1).
//!
//! ## A master that can fork safely
//!
//! The process manager's master never starts a thread: `fork()` then copies
//! a process in which no lock is held by a thread the child lacks, and the
//! child may allocate freely. Signals reach the master as flags and a byte on
//! a pipe (signal-hook); they are blocked across each `fork()` and unblocked
//! in the child only once its own handlers replace the inherited ones, so a
//! signal sent to a newborn child is neither lost nor run by the master's
//! handlers. Prefork children stay single-threaded too: their stop handlers
//! do not restart system calls, so a child waiting for the accept mutex
//! notices it was told to go.
//!
//! ## The scoreboard is taken over, never outgrown
//!
//! Every counter in a [`Slot`](crate::scoreboard::Slot) only ever adds. After
//! a graceful restart the new generation claims the old generation's slots at
//! once; the old processes keep adding to the same counters while they
//! finish, and stop writing state and request lines once the slot carries
//! another pid. Totals stay exact and the table never fills, however many
//! generations are still finishing.
//!
//! ## Scratch lives in the request pool; the common path needs none
//!
//! httpd hands every request a pool and clears it when the request ends. In
//! Rust the same promise is a lifetime: [`Request::pool`](crate::http::Request::pool)
//! is an allocator borrowed for the request, so nothing bumped out of it can
//! outlive the answer, and the worker resets its arena once the handler has
//! returned (the [`Response`](crate::http::Response) owns what it carries).
//! What a request needs only briefly (the decoded, normalised path and its
//! NUL-terminated copy for `openat2`) comes from there. The hot path needs
//! no pool at all: a response keeps its first header fields inline, a cached
//! file's validators are shared `Arc<str>`s, and error pages are made once,
//! so a keep-alive request for a cached page costs the allocator nothing.
//!
//! ## Listeners are watched by a poller made once
//!
//! Prefork and worker wait for a connection under a mutex, one waiter at a
//! time; the waiter watches every listener and the stop pipe with a
//! [`ListenerPoller`](crate::listener_poller::ListenerPoller) built once per
//! child or process (its own `dup`s of the descriptors, so it can sit under
//! the mutex beside them). With epoll the set is registered once; with
//! `poll` and `select`, as in the 2000 measurements, the whole set crosses
//! into the kernel on every wait.
//!
//! ## Logs are written whole, by whoever holds the line
//!
//! The access log is opened by the process that binds and inherited, like
//! the listening sockets, so that `--user` never needs write access to the
//! log directory. Each `write(2)` carries whole lines to an `O_APPEND` file,
//! so no process or thread can tear another's line. A line's request fields
//! are copied (escaped) into the connection when the request is answered,
//! since the request's bytes are reused by then, and written when the
//! response is done, with the body bytes that actually went out. Buffers are
//! per worker, so workers never wait on each other; whoever cannot flush
//! while blocked (a worker idle on a keep-alive connection) is flushed by a
//! thread, except in prefork, whose children flush before they block.
//! Rotation swaps the file under the same descriptor number (`dup3`), so a
//! reopen never races a write on a closed descriptor.
