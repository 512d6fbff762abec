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
