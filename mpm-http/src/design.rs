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
//! A request body can be waited for the same way
//! ([`awaits_body`](crate::HttpHandler::awaits_body), on a non-blocking
//! socket): the connection moves what the client sent (de-chunked; over
//! HTTP/2, the stream's DATA, its window opened by what is taken) into a
//! pipe of at most 64 KiB before each poll of the answer's future
//! (`awaited_body.rs`), the future takes it with
//! [`AwaitedBody`](crate::AwaitedBody) and, finding it empty, waits for the
//! client's input; a full pipe is read no further, so the client's bytes
//! wait in its socket. A slow upload then holds no thread either.
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
//! ## HTTP/2: our own sans-IO codec, `mpm-h2`
//!
//! **Why our own.** The server first drove hyperium's `h2` over an
//! in-memory pipe, with a frame checker in front for the error codes `h2`
//! gets wrong and the floods it only slows down. Two of issue 28's goals
//! were out of reach that way: an idle h2c connection cost 23.4 KiB of
//! RSS under `--mpm event` against 0.94 KiB for HTTP/1.1
//! (`bench/h2/idle_memory.py`; the goal is at most half of nginx's
//! 16.5 KiB), because `h2` keeps a 16 KiB write buffer and an 8 KiB read
//! buffer per connection for its life; and 6.6 µs of CPU per request
//! against h2o's 3.7, from its task and waker machinery and the copies
//! through those buffers. `mpm-h2` keeps no buffer of its own when idle
//! (its state and its HPACK table) and reports body as a range of the
//! caller's input. On it, an idle h2c connection costs 4.6–4.8 KiB of RSS
//! under event (the same command), and ours-event spent 3.3–5.3 µs of CPU
//! per request against h2o's 3.5–5.7 in the same runs of
//! `bench/peers.py --h2` (docs/benchmarks.md, HTTP/2): about h2o's. With
//! a request's allocations cut from 17.8 to 1.55 (docs/design.md), six
//! runs gave 3.8–4.6 µs against h2o's 3.9–5.2, the mean 0.90× h2o's. The framing, HPACK, stream states, flow control, the
//! checks of RFC 9113 §8 on a request head, and the flood limits (rapid
//! reset, streams the server had to reset, CONTINUATION, frames in a row
//! that carry no request: PING, SETTINGS, PRIORITY, empty DATA...) are
//! the codec's, each cut off with the GOAWAY the RFC names and counted in
//! its `Stats`, which the status page's counters are made from. Ours are
//! the request's meaning beyond what the codec checks (`:path` in origin
//! form, a `Host` that names another authority; `request.rs`) and
//! everything the HTTP/1.1 side already does for a response (`Date`,
//! `Server`, error pages, the access log, the scoreboard).
//!
//! **The shape.** The step reads what the [`Stream`](mpm_core::Stream)
//! has into a read buffer from the pool the HTTP/1.1 side uses (one read,
//! as the contract allows; a blocking socket is read only when the step
//! has nothing else to do), hands it to the codec, and routes its events:
//! a request head becomes a stream, body is copied to what the stream has
//! not taken yet (bounded by its window, which opens again as the handler
//! takes it), resets and windows opened bring the step round again. The
//! read buffer goes back to the pool as soon as it holds no partial
//! frame. Every stream then moves as far as it can, the codec writing
//! its frames (response heads as HPACK, field by field, with no list of
//! them) into a buffer from the same pool, lent while streams are open;
//! they are written straight to the socket, what it does not take waits
//! for `Interest::Write`, and the buffer goes back to the pool once sent
//! with no stream open. The
//! socket's I/O, TLS included, stays where every model and the
//! scoreboard see it, and the connection's state is `Send`: it moves
//! between the loop and the workers as an HTTP/1.1 one does. An idle
//! connection holds the codec's state and no buffer.
//!
//! **Streams and threads.** A stream's body is gathered whole (its window
//! opened as its bytes are taken, up to `--limit-request-body`, or 1 MiB
//! where it is 0: 413 past it), unless the handler reads it as it arrives
//! ([`streams_body`](crate::HttpHandler::streams_body)): then it runs at
//! once, on a worker, and its reads drive the connection (frames out,
//! one read of the socket within the body timeout, frames in; the
//! connection's other streams wait meanwhile, their body kept for them
//! within their windows); or, where the socket does not block (event,
//! uring), by its future ([`awaits_body`](crate::HttpHandler::awaits_body)):
//! the stream's DATA fills the future's pipe as it comes, its window opened
//! by what is taken, and the stream waits without a thread, the others
//! going on. The request is run by the same
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
//! nginx): the codec refuses one more with `REFUSED_STREAM` (counted:
//! `streams_refused`). A stream whose window is closed waits for the
//! codec to say it opened; one waiting on its source (an upstream) holds
//! no window, which the codec takes only as DATA is written. Bodies go a window
//! at a time: bytes without a copy, a file read in chunks of at most the
//! window (on a loop only what the page cache holds, and
//! `--sendfile-max-chunk` a turn), a reader on a worker only.
//!
//! **The models.** Event: between frames the connection waits on the loop
//! with no thread and, idle, no buffers; when the server stops, the
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
//! **At 64 cores.** Everything of a connection is its own: the codec
//! holds no lock and shares nothing. What cores share is the buffer
//! pool's lock (one pool per process), taken once per read that finds the
//! connection without a buffer (as the HTTP/1.1 side takes it per
//! request) and twice per burst of streams for the output buffer, not per
//! stream; and the status
//! page's counters (`stats.rs`), added to once per step that the codec
//! counted something in, a line every process writes.
