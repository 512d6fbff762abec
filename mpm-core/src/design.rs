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
//! Closing an idle connection is the model's act, but what to say first is
//! the protocol's: [`ConnectionHandler::idle_at_stop`](crate::ConnectionHandler::idle_at_stop)
//! is called just before a model closes an idle connection at a drain
//! (an event loop's parked ones, or one a blocking driver's parker
//! refuses). HTTP/1.1 says nothing, as before; HTTP/2 sends GOAWAY, so a
//! client knows which of its streams were processed. A worker thread blocked
//! in the idle read learns of the stop from the read's end instead, with
//! [`Stream::is_draining`](crate::Stream::is_draining) set, and its protocol
//! says the same there. The hook costs a call per idle connection per stop,
//! on the thread that closes it: nothing any core shares.
//!
//! ## Two stops, one drain
//!
//! A stop is graceful (SIGWINCH, `mpm signal graceful-stop`,
//! [`Lifecycle::stop`](crate::Lifecycle::stop)) or fast (SIGTERM, SIGINT,
//! `mpm signal stop`, [`Lifecycle::stop_now`](crate::Lifecycle::stop_now)),
//! as nginx's and httpd's are: a download in flight finishes, or is cut
//! now. Both are one [`Drain`](crate::Drain), the fast one with no grace:
//! stop accepting; close idle connections after
//! [`STOP_GRACE`](crate::STOP_GRACE); cut what is in flight at the
//! deadline; abandon, in one log line, a worker still busy
//! [`ABANDON_AFTER`](crate::ABANDON_AFTER) later (a handler looping without
//! I/O), and exit anyway. Every model keeps these moments and words: worker
//! in [`Drain::wait`](crate::Drain::wait), event in its loop then
//! [`Drain::join`](crate::Drain::join); a prefork child, single-threaded,
//! has no thread to keep a deadline while it blocks in a write, so its
//! stream fails once the fast-stop flag is up, and a wait on an upstream
//! ends on the fast stop's pipe
//! ([`Stream::cut_on`](crate::Stream::cut_on), [`FastStop`](crate::FastStop)),
//! and the master, which tells
//! children a fast stop with SIGTERM and a graceful one with SIGWINCH,
//! sends the SIGTERM at the graceful deadline.
//!
//! ## What a model provides
//!
//! A model is a small crate on this skeleton ([`Mpm`](crate::Mpm)'s four
//! steps). It brings only what differs:
//!
//! * **how it waits for connections**: its lock, if its workers take turns
//!   to accept ([`take_turns::Turn`](crate::take_turns::Turn), then
//!   [`take_turns::accept`](crate::take_turns::accept) is the whole accept
//!   loop, as prefork's and worker's are), or its own loop (event's epoll,
//!   an `io_uring` ring's multishot accept);
//! * **how it drives a connection**: blocking
//!   ([`blocking::serve_blocking`](crate::blocking::serve_blocking) with an
//!   [`IdlePark`](crate::blocking::IdlePark)) or by readiness (its loop
//!   calling the [`ConnectionHandler`](crate::ConnectionHandler)'s steps;
//!   completions would call the same steps);
//! * **how it finds its connections at a stop**: to close the idle ones and
//!   cut the rest, the three closures or the loop's own sets that the
//!   [`Drain`](crate::Drain)'s moments act on.
//!
//! What it gets for nothing: listeners, the lifecycle and both stops, the
//! drain's timings and log lines, the scoreboard, the hand-over to the next
//! generation, and the master's processes, signals and upgrades.
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
//! ## Nothing slow ever runs on a loop
//!
//! A loop holds every parked connection of its process, so anything it
//! waits for, every one of them waits for. The rule, in the
//! [`ConnectionHandler`](crate::ConnectionHandler) contract and kept by the
//! layers, has four parts:
//!
//! * **Every request is asked.** The inline decision is made per unit of
//!   work, pipelined ones included: a step on the loop
//!   ([`Stream::on_event_loop`](crate::Stream::on_event_loop)) that finds its
//!   next request may block sends what it has and returns
//!   [`Interest::Yield`](crate::Interest::Yield); the loop asks
//!   [`prefetch`](crate::ConnectionHandler::prefetch) again on its next turn,
//!   which hands it to a worker. (Before, a fast request pipelined ahead of
//!   a 3-second one ran both on the loop, and every other client of the
//!   process waited the three seconds.)
//! * **A body has a budget per turn.** A large body written from the loop
//!   goes at most `--sendfile-max-chunk` (512 KiB) per turn, as nginx's
//!   `sendfile_max_chunk`; then the step yields, the loop serves what else
//!   is ready, and resumes it on the next turn: a fast downloader gets a
//!   turn like everyone else, never all of them, and is never starved.
//!   Connections with more to do are kept on a list stepped once per turn,
//!   after the poll, so the same holds for a client flooding pipelined
//!   requests. Between two of them the loop polls again without sleeping
//!   and serves what became ready, so a small request waits for one
//!   budget, not for every resumed download's (eight downloads in a
//!   process were 4 MiB ahead of it).
//! * **The disk is read only from the page cache.** `sendfile` and `pread`
//!   on the loop run only when the range is cached (`cachestat(2)`, or
//!   `preadv2(RWF_NOWAIT)` probes before Linux 6.5; reads use `RWF_NOWAIT`
//!   themselves); otherwise a worker does them. `mincore(2)` cannot answer
//!   this: it reports every page of a file the caller may not write as
//!   resident.
//! * **A lingering close ends.** Every model closes a lingering connection
//!   [`LINGER_TIME`](crate::LINGER_TIME) after it began and after
//!   [`LINGER_BYTES`](crate::LINGER_BYTES) read, however the peer trickles;
//!   on the loop its timeout is queued once and never pushed back.
//!
//! ## A panic costs one connection
//!
//! Every step a model runs (on a worker, on the loop, and in the blocking
//! driver of prefork and worker) is wrapped in
//! [`panics::catch`](crate::panics::catch): the connection is closed, its
//! slab slot, in-flight count and idle-park entry are returned, and the
//! worker goes on. Before, a worker thread that unwound out of the event
//! pool never returned its connection, so as many panics as workers stopped
//! accepting for good, and the worker MPM's connection table kept the dead
//! connection's descriptor number for the stop to shut down (by then,
//! perhaps, another connection's). While `catch` runs, the panic hook only
//! records the message and place, so each panic is one error-log line
//! (`connection handler panicked in readable: 'why' at file:line; closed
//! the connection from ADDR`, or the HTTP layer's `handler panicked on GET
//! /x: ...; answered 500`), never a backtrace per panic.
//!
//! ## A loop per core, sharing one accept queue
//!
//! `--server-limit auto`, the event default, starts one serving process
//! per CPU the server may use (its affinity mask and cgroup CPU quota, as
//! `std::thread::available_parallelism` reads them), like nginx's
//! `worker_processes auto`; `--cpu-affinity auto` pins process N to the Nth
//! of those CPUs. A process, not a thread, per loop: nothing but the
//! listening sockets and the scoreboard is shared, a crash costs one loop,
//! and the master already knows how to replace, restart and upgrade
//! processes.
//!
//! The worker MPM keeps one process by default (`auto` is there for it):
//! its threads already run on every core, and a second process adds a
//! second waiter on the listeners and a second listener mutex for nothing;
//! in a run here a second process cost more CPU per request (17.7 against
//! 22.3 µs keep-alive, 72.9 against 80.0 µs for a connection per request,
//! `scripts/event_scaling.py scaling --mpm worker`, on a loaded machine).
//!
//! The processes share each listening socket, registered with
//! `EPOLLEXCLUSIVE`, rather than each binding a `SO_REUSEPORT` socket of
//! its own. One accept queue means no connection is ever stranded: a
//! process that stops (graceful restart, upgrade, crash) leaves what is
//! queued to its siblings and successors, where a `SO_REUSEPORT` socket
//! resets the connections queued on it when it closes (unless the host sets
//! `net.ipv4.tcp_migrate_req`, Linux 5.14+); a process at its connection cap
//! takes its socket out of its epoll set and its siblings take the load,
//! where a reuseport socket keeps receiving its hash share; and systemd's
//! and an upgrading master's inherited sockets work as they are.
//! `EPOLLEXCLUSIVE` makes a new connection wake one sleeping process
//! instead of all (measured: 1.25 loop wake-ups per connection against
//! 2.85 without it, two processes, connections arriving one at a time).
//!
//! What a shared queue does not do by itself is spread a burst: the process
//! awake when fifty keep-alive connections arrive took 46 of them and kept
//! them. Two things even it out. A process that shares its sockets accepts
//! one connection per wake-up (nginx's `multi_accept off`), so a sibling
//! woken meanwhile gets the next. And a [`ConnectionLedger`](crate::ConnectionLedger)
//! in shared memory holds how many connections each process has: one that
//! holds more than the fewest a sibling still accepting holds, by more than
//! two and an eighth, stops accepting until they even out (measured: 25/26
//! for that burst, 1.00-1.02 max/min for a connection per request). The
//! process holding the fewest may always accept, and one paused for balance
//! looks again within 5 ms (nothing else would wake it when its siblings
//! catch up), so some process always takes the queue; a seat
//! whose process died unannounced is forgotten (`kill(pid, 0)`) before
//! anyone waits on it; and since an exclusive wake-up is lost if the
//! process woken stops accepting before it takes the connection, an idle
//! loop looks at its sockets once per idle wait (a second at most).
//! `--reuseport on` is there for those who prefer the kernel's hash spread
//! and accept its cost (`scripts/event_scaling.py balance` measures both).
//!
//! ## What cores still share, and 64 of them
//!
//! Here there are two cores; the design is for sixteen to sixty-four.
//! Per request, a loop touches only its own process's memory: its epoll
//! set, its slab, its timeout queues, its handler (each worker thread's
//! handler has its own open-file table, filled from a sharded shared one
//! once a second per file), and its own scoreboard slot, which is aligned
//! and padded to 128 bytes so no two workers' counters share a line or an
//! adjacent-line prefetch pair. What cores do share:
//!
//! * **The accept queue** of each listening socket: one lock in the kernel,
//!   taken once per connection (not per request), by whichever process is
//!   woken. At 64 processes a connection-per-request load of several
//!   hundred thousand a second would contend there; that load is where
//!   `--reuseport on` (64 queues) pays for its drop-on-exit.
//! * **The ledger**: each process writes its own 128-byte line when its
//!   connection count changes and reads its siblings' (64 lines) only when
//!   it decides whether to accept: per connection, not per request.
//! * **A hot file's reference counts**: the `Arc`s of its descriptor and of
//!   its in-memory body are shared by the threads of one process (a loop
//!   and its workers), so per process, not per machine; per-thread copies
//!   of the metadata keep the rest thread-private.
//! * **The access log**, when on: one `O_APPEND` file, one `write` per
//!   line or per buffer.
//! * **The hand-over socket** a stopping generation passes silent
//!   connections through: registered with `EPOLLEXCLUSIVE` like the
//!   listeners, used only around restarts.
//!
//! Locks that remain are per process, so with a loop per core they are
//! taken by one core (and its workers, when a request is handed off): the
//! HTTP layer's pool of idle connections' buffers, the shards of the shared
//! open-file table (touched once a second per file and thread), and a
//! worker's own access-log buffer (shared with the flusher thread alone).
//!
//! A loop that hands work to its pool uses a channel and an eventfd of its
//! process; the pool is sized per process (`--max-request-workers` divided
//! among the processes), so 64 processes of 4 worker threads hold 256
//! requests that may block, as one of 256 would.
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
//! This crate is the contract and nothing else: it knows no protocol, runs
//! no process model and reads no configuration file. [`MpmKind`](crate::MpmKind)
//! names the four models (the `--mpm` value, what [`Mpm::kind`](crate::Mpm::kind)
//! reports), but each model's code is a crate of its own;
//! [`MpmSettings`](crate::MpmSettings) is plain data with no `clap` or `serde`
//! derive, and this crate depends on neither. The HTTP layer (`mpm-http`)
//! and the models (`mpm-prefork`, `mpm-worker`, `mpm-event`, `mpm-uring`) each depend on
//! it and on no other layer (but `mpm-sys`, beneath it, for a system call),
//! so a protocol never learns which model runs it and a model never parses
//! a request; the master (`mpm-master`) forks and signals without knowing
//! either. Only the `mpm` crate knows every flag and the TOML file (each
//! setting declared once, in `server/src/settings/table.rs`): it builds an
//! [`MpmSettings`](crate::MpmSettings) for the model and the protocol's own
//! settings, and hands each layer what it reads. Where a lower layer needs a
//! service from a higher one at run time (a prefork child flushing the HTTP
//! layer's buffered access log before it blocks), the higher one registers
//! it with the lower ([`buffered_output`](crate::buffered_output)), so that
//! the dependency still points down.
