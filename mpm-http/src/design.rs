//! # Design notes
//!
//! Why the HTTP layer is shaped the way it is. Nothing here is code; the
//! notes on the contract it runs on are `mpm_core::design`.
//!
//! ## Responses are written whole, pipelined ones together
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
//! When several requests arrive together (TechEmpower's plaintext test
//! pipelines sixteen per write), their responses are appended to the same
//! buffer and sent with one `send`, under every model, up to 64 KiB, and
//! only while each next request is one the handler answers without blocking
//! ([`HttpHandler::answers_without_blocking`](crate::HttpHandler::answers_without_blocking)):
//! what is gathered goes out before a request that may block is run, so a
//! fast answer never waits behind a slow one. A response with a file or
//! streamed body ends the gathering (its head goes first, then the body).
//! Each response keeps its own access-log line, written once its bytes are
//! sent, with the bytes that went out. The bytes on the wire are those the
//! same requests get one at a time.
//!
//! ## On an event loop, a body goes a budget at a time, from memory only
//!
//! A step on the loop sends at most `--sendfile-max-chunk` of a file body
//! (512 KiB by default), then returns `Interest::Yield`: the loop serves its
//! other connections and comes back next turn. It sends (or, with
//! `--sendfile off`, reads) a stretch of the file only if that stretch is in
//! the page cache, asked of `cachestat(2)` or probed with
//! `preadv2(RWF_NOWAIT)` (`page_cache.rs`); otherwise it yields and the loop
//! hands the connection to a worker, which may wait on the disk. A streamed
//! body (its reader may block) is never pulled on the loop. Off the loop
//! none of this applies, but each `sendfile` still asks for at most the
//! chunk.
//!
//! ## Waiting on another server holds no thread under event
//!
//! An answer that comes from another server is a future
//! ([`Response::later`](crate::Response::later)), a body read from one a
//! [`PollRead`](crate::PollRead), an upgraded connection a
//! [`Tunnel`](crate::Tunnel). None of them blocks: each step polls or
//! moves what is ready and returns
//! [`Interest::Await`](mpm_core::Interest::Await) with the descriptor it
//! waits on. The event loop parks the connection with it and resumes it
//! through `prefetch`, which runs the step on the loop itself (polling a
//! future and moving bytes between non-blocking sockets never blocks: the
//! rule async code follows, as in tokio); prefork and worker wait in
//! `poll(2)`, a thread or process per waiting request, as httpd's
//! mod_proxy. There is no runtime and no waker: mpm's I/O futures record
//! what they wait for, and a pending future with nothing recorded is
//! polled again next turn. While an answer waits, the connection reads no
//! further request: pipelined ones wait in its buffer and are answered in
//! order after it. A polled body moves one buffer (64 KiB) from the source
//! to the client at a time, and the source is not read while the client is
//! slow, so memory stays bounded both ways; a tunnel pumps through two
//! buffers, the connection's read buffer toward the upstream and one of
//! 16 KiB toward the client. What this costs an idle connection is one
//! pointer, in the box of occasional state it already had.
//!
//! ## Each worker has its own open-file table
//!
//! The static site's cache of open files (`mpm-site`) is two-level: each
//! `StaticFiles` clone (one per worker thread, and one for the event loop)
//! has a table of its own, read
//! with no lock, and fills it from a table every clone of the process
//! shares, split into 16 shards each behind its own lock. A hit on a hot
//! file touches nothing another thread writes but the reference counts of
//! its descriptor and body; the shared table is read when a worker's entry
//! is missing or a second old, and written when a file is opened. The event
//! loop asks the shared table whether a file is open before answering it
//! inline, so a file opened by a worker is answered by the loop from then
//! on.
//!
//! ## Scratch lives in the request pool; the common path needs none
//!
//! httpd hands every request a pool and clears it when the request ends. In
//! Rust the same promise is a lifetime: [`Request::pool`](crate::Request::pool)
//! is an allocator borrowed for the request, so nothing bumped out of it can
//! outlive the answer, and the worker resets its arena once the handler has
//! returned (the [`Response`](crate::Response) owns what it carries).
//! What a request needs only briefly (the decoded, normalised path and its
//! NUL-terminated copy for `openat2`) comes from there. The hot path needs
//! no pool at all: a response keeps its first header fields inline, a cached
//! file's validators are shared `Arc<str>`s, and error pages are made once,
//! so a keep-alive request for a cached page costs the allocator nothing.
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
//!
//! ## HTTP/2: hyperium's `h2`, driven without a runtime
//!
//! **Why `h2`.** It is the HTTP/2 of hyper, tonic and reqwest, kept by the
//! same people, passes h2spec in its CI, and carries the fixes of the
//! known floods: rapid reset (`max_pending_accept_reset_streams`, 20
//! streams reset before they were accepted; CVE-2023-44487), streams the
//! server had to reset itself (`max_local_error_reset_streams`, 1,024),
//! the CONTINUATION flood (0.4.4 on: a header block is cut at the header
//! list size), SETTINGS and PING answered one at a time (a flood of them
//! is read no faster than it is answered: the pipe below reads no more
//! while 64 KiB wait), HPACK tables bounded at 4 KiB. Each limit cut off
//! is a GOAWAY `h2` sends and the status page counts (`h2` section). A
//! sans-IO crate would need none of the buffers below; those we found are
//! young: `shiguredo_http2` (a canary release of 2026, no h2spec record),
//! `httpsd` (0.1.0, a whole server), and `httpbis` is tokio-bound and
//! unmaintained. So the framing, HPACK, flow control and the limits are
//! `h2`'s, and ours are the request's meaning (RFC 9113 §8.3 checks it
//! leaves to the server: `:path` in origin form, a `Host` that names
//! another authority; `request.rs`) and everything the HTTP/1.1 side
//! already does for a response (`Date`, `Server`, error pages, the
//! access log, the scoreboard).
//!
//! **The shape.** `h2` needs only tokio's `AsyncRead` and `AsyncWrite`
//! traits (tokio with no runtime feature). Its connection owns an I/O
//! object that is two memory buffers (`pipe.rs`), not the socket: the
//! step reads what the [`Stream`](mpm_core::Stream) has into the input
//! (one read, as the contract allows; a blocking socket is read only when
//! the step has nothing else to do), polls the connection and every
//! stream with a waker that only sets a flag (`wake.rs`; polled again
//! while it is set), writes the output to the `Stream` (past 64 KiB `h2`'s
//! writes are `Pending` until the socket took it; what the socket does
//! not take waits for `Interest::Write`), and returns what to wait for.
//! The socket's I/O, TLS included, stays where every model and the
//! scoreboard see it, and the connection's state is `Send`: it moves
//! between the loop and the workers as an HTTP/1.1 one does. An idle
//! connection gives the pipe's buffers back (`parked`); what it keeps is
//! `h2`'s own state, its codec's buffers among it (16 KiB to write, 8 KiB
//! to read, allocated when the connection is made): 23 KiB per idle h2
//! connection under event, measured with 1,000 connections of one request
//! each (a debug build, `--server-limit 1`; the same for 1,000 idle
//! HTTP/1.1 connections is 1.4 KiB; `bench/h2/idle_memory.py` says how). Less needs `h2` to give those back
//! when idle, or a sans-IO codec.
//!
//! **Streams and threads.** A stream's body is gathered whole (its window
//! opened as its bytes are taken, up to `--limit-request-body`: 413 past
//! it), unless the handler reads it as it arrives
//! ([`streams_body`](crate::HttpHandler::streams_body)): then it runs at
//! once, on a worker, and its reads drive the connection (frames out,
//! one read of the socket within the body timeout, frames in; the
//! connection's other streams wait meanwhile, their frames buffered by
//! `h2` within their windows). The request is run by the same
//! [`HttpHandler`](crate::HttpHandler):
//! on the loop when it answers without blocking, else the step yields and
//! a worker runs it. Within one step, handlers that run to completion run
//! one after another (the step is one thread's); answers that are futures
//! ([`Response::later`](crate::Response::later), the reverse proxy) are
//! polled on every resume, so any number of streams wait on upstreams at
//! once, and under event no thread holds them: the step returns
//! `Interest::Await` for one descriptor (the contract names one), with the
//! client's input, and comes back within 10 ms when a second stream waits
//! on another descriptor, and within a second to see whether the server
//! stops (its GOAWAY is sent then). The budget of streams in flight is
//! SETTINGS_MAX_CONCURRENT_STREAMS (`--h2-max-concurrent-streams`, 128 as
//! nginx): `h2` refuses one more with `REFUSED_STREAM` (counted from its
//! frames as they are written: `streams_refused`). Bodies go a window
//! at a time: bytes without a copy, a file read in chunks of at most the
//! window (on a loop only what the page cache holds, and
//! `--sendfile-max-chunk` a turn), a reader on a worker only.
//!
//! **The models.** Event: between frames the connection waits on the loop
//! with no thread and, idle, no pipe buffers; when the server stops, the
//! loop asks it for its last word before closing it idle
//! (`ConnectionHandler::idle_at_stop`): GOAWAY(NO_ERROR) with the last
//! stream processed, as nginx sends (uring the same). Worker: the connection holds
//! its thread for its life, as under httpd's worker MPM with mod_http2:
//! with 4 threads, 4 idle h2 connections leave a fifth unanswered until
//! one closes (`bench/h2/threads_held.py`).
//! Prefork: `--http2` is off (ALPN offers `http/1.1` only) and `--h2c on`
//! is refused at start: a child would hold its process for the
//! connection's life and serve its streams one at a time, so six HTTP/1.1
//! connections a browser opens cost what one h2 connection would and
//! serve six requests at once (mod_http2 under prefork serves one stream
//! at a time for the same reason).
//!
//! **At 64 cores.** Everything of a connection is its own (the pipe's
//! mutex is taken by the one thread in its step); what cores share is one
//! atomic add per stream and per connection on the status page's counters
//! (`stats.rs`), a line every process writes.
