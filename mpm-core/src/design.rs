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
//! ## The event loop reads ahead, and answers what cannot block
//!
//! httpd's event MPM hands a connection to a worker as soon as it is
//! readable, so a slow client still holds a thread while its headers
//! trickle in. mpm's listener calls
//! [`ConnectionHandler::prefetch`](crate::ConnectionHandler::prefetch) instead:
//! it reads without blocking and parses, and only a whole request goes to a
//! worker. When the handler says the answer cannot block
//! ([`Prefetch::ReadyInline`](crate::Prefetch::ReadyInline); for HTTP, a
//! cached file or an error page) the listener answers it itself, so a
//! keep-alive request for a small page costs one `read` and one `write` and
//! no thread switch. Connections are registered once, edge-triggered; an
//! edge that arrives while a worker holds the connection is remembered and
//! acted on when it comes back. Timeouts are one FIFO queue per timeout
//! value, linked through a table indexed by connection, so entering, leaving
//! and expiring are O(1).
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
//!
//! ## A layer between the handler and the socket
//!
//! TLS must wrap any protocol without the protocol knowing, and without the
//! models knowing either. The seam is [`Transport`](crate::Transport): a
//! layer's per-connection state, attached to the [`Stream`](crate::Stream)
//! for the length of one inner step (moving a `Box` in and out costs nothing)
//! and detached after, so that the models, the lingering close and the idle
//! checks always see the bare socket. While attached, `read`, `write`,
//! `send` and `sendfile` go through it, and it does its own socket I/O on
//! the stream handed back bare (so timeouts and send counts stay right).
//! What the layer buffers is its own: plaintext it decrypted but the inner
//! handler has not read counts against [`Stream::drained`](crate::Stream::drained)
//! (an edge-triggered poller would never report those bytes again), and
//! records it could not send turn the step's answer into
//! [`Interest::Write`](crate::Interest::Write) until they are. Which
//! listener a connection came from is told by its local address, so no
//! model needs to carry a listener's kind.
//!
//! ## Layers, and which way they point
//!
//! This crate is the contract and nothing else: it knows no protocol, no
//! process model and no configuration file. The HTTP layer (`mpm-http`) and
//! the models (`mpm-prefork`, `mpm-worker`, `mpm-event`) each depend on it
//! alone, so a protocol never learns which model runs it and a model never
//! parses a request; the master (`mpm-master`) forks and signals without
//! knowing either. Only the `mpm` crate sees every flag: it builds an
//! [`MpmSettings`](crate::MpmSettings) for the model and the protocol's own
//! settings, and hands each layer what it reads. Where a lower layer needs a
//! service from a higher one at run time (a prefork child flushing the HTTP
//! layer's buffered access log before it blocks), the higher one registers
//! it with the lower ([`buffered_output`](crate::buffered_output)), so that
//! the dependency still points down.
