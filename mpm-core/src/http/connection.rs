//! HTTP/1.1 over a [`ConnectionHandler`]: parsing, framing, keep-alive and
//! pipelining, as a state machine that runs on blocking and non-blocking
//! sockets alike.

use std::io::{self, ErrorKind, Read, Write};
use std::mem::MaybeUninit;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer_pool::BufferPool;
use super::chunked::{self, ChunkError};
use super::date;
use super::head::{self, Framing, Head, Parsed, SLOTS};
use super::request::{Headers, Request, Version};
use super::request_pool::PoolArena;
use super::response::{reason_phrase, Body, HeaderText, Response};
use super::{HttpHandler, HttpSettings};
use crate::access_log::{Record, Writer};
use crate::connection_handler::{ConnectionHandler, Interest, Prefetch, Wait};
use crate::scoreboard::WorkerState;
use crate::stream::Stream;

/// Bytes read from a file per write when sendfile is off.
const COPY_CHUNK: usize = 64 * 1024;
/// Bytes per chunk of a streamed body.
const STREAM_CHUNK: usize = 16 * 1024;

/// The [`ConnectionHandler`] that speaks HTTP/1.1 and hands each request to
/// an [`HttpHandler`].
#[derive(Debug)]
pub struct HttpService<H> {
    handler: H,
    settings: Arc<HttpSettings>,
    /// This worker's request pool, reset after every request.
    arena: PoolArena,
    log: Option<Writer>,
}

impl<H: HttpHandler> HttpService<H> {
    /// Serve `handler` with these settings.
    pub fn new(handler: H, settings: Arc<HttpSettings>) -> Self {
        let arena = PoolArena::new(settings.request_pool);
        let log = settings.access_log.as_ref().map(|l| l.writer());
        HttpService {
            handler,
            settings,
            arena,
            log,
        }
    }
}

/// What to do once the response in progress is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    KeepAlive,
    Close,
    Linger,
}

/// A body still to be sent after the head.
enum Pending {
    File {
        file: Arc<std::fs::File>,
        offset: u64,
        end: u64,
    },
    Stream {
        reader: Box<dyn Read + Send>,
        chunked: bool,
    },
}

/// Per-connection HTTP state.
pub struct HttpConn {
    buf: Vec<u8>,
    /// Start of the bytes not yet consumed by a request.
    start: usize,
    /// End of the bytes received.
    filled: usize,
    out: Vec<u8>,
    out_pos: usize,
    pending: Option<Pending>,
    after: After,
    served: u64,
    started: Started,
    /// When the request in progress must be complete (header or body
    /// timeout); `None` between requests.
    deadline: Option<Instant>,
    continue_sent: bool,
    chunk_body: Vec<u8>,
    pool: Arc<BufferPool>,
    /// The access-log line of the response in progress.
    log: Record,
}

impl Drop for HttpConn {
    fn drop(&mut self) {
        self.pool.put_read(std::mem::take(&mut self.buf));
        self.pool.put_write(std::mem::take(&mut self.out));
    }
}

impl std::fmt::Debug for HttpConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConn")
            .field("buffered", &(self.filled - self.start))
            .field("served", &self.served)
            .finish()
    }
}

impl HttpConn {
    fn wait(&self) -> Wait {
        if self.start < self.filled || self.served == 0 {
            Wait::Request
        } else {
            Wait::KeepAlive
        }
    }

    /// Before a read: take a buffer from the pool if the connection parked
    /// without one, and move unconsumed bytes to its front.
    fn make_room(&mut self) {
        if self.buf.is_empty() {
            self.buf = self.pool.read_buffer();
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.filled {
            self.start = 0;
            self.filled = 0;
        }
    }
}

/// When the parts of the request in progress began to arrive.
#[derive(Debug, Default, Clone, Copy)]
struct Started {
    /// The head's first byte (or the accept, for a connection's first request).
    head: Option<Instant>,
    /// The head's end: the body's time starts there.
    body: Option<Instant>,
}

/// Did writing finish?
enum Flush {
    Done,
    Blocked,
    Failed,
}

/// What the parser made of the buffered bytes.
enum Step {
    /// A response is queued.
    Responded,
    /// More bytes are needed.
    Incomplete,
}

impl<H: HttpHandler> ConnectionHandler for HttpService<H> {
    type Conn = HttpConn;

    fn connected(&mut self, _stream: &Stream) -> HttpConn {
        // The header timeout runs from the accept, as in mod_reqtimeout: a
        // client that connects and sends nothing is cut off as soon as one
        // that sends a head too slowly.
        let now = Instant::now();
        HttpConn {
            buf: Vec::new(),
            start: 0,
            filled: 0,
            out: Vec::new(),
            out_pos: 0,
            pending: None,
            after: After::KeepAlive,
            served: 0,
            started: Started {
                head: Some(now),
                body: None,
            },
            deadline: now.checked_add(self.settings.request_header_timeout),
            continue_sent: false,
            chunk_body: Vec::new(),
            pool: Arc::clone(&self.settings.buffers),
            log: Record::default(),
        }
    }

    fn readable(&mut self, c: &mut HttpConn, s: &mut Stream) -> Interest {
        let mut did_read = false;
        loop {
            if c.start < c.filled {
                match self.step(c, s) {
                    Step::Responded => match self.flush(c, s) {
                        Flush::Done => match c.after {
                            After::KeepAlive => {
                                if c.start < c.filled {
                                    continue; // a pipelined request is waiting
                                }
                                return Interest::Read(Wait::KeepAlive);
                            }
                            After::Close => return Interest::Close,
                            After::Linger => return Interest::Linger,
                        },
                        Flush::Blocked => return Interest::Write,
                        Flush::Failed => return Interest::Close,
                    },
                    Step::Incomplete => {}
                }
            }
            if did_read {
                return Interest::Read(c.wait());
            }
            if let Some(deadline) = c.deadline {
                let now = Instant::now();
                if now >= deadline {
                    return self.reject(c, s, 408);
                }
                // A blocking read waits no longer than the request may take,
                // so that a client who stops sending is cut off on time.
                if s.is_blocking() {
                    let wait = (deadline - now).min(self.settings.timeout);
                    if s.set_read_timeout(wait.max(Duration::from_millis(1)))
                        .is_err()
                    {
                        return Interest::Close;
                    }
                }
            }
            c.make_room();
            if c.filled == c.buf.len() {
                let cap = self.settings.max_buffer();
                if c.buf.len() >= cap {
                    // Only reachable with a body limit below the head limit.
                    return self.reject(c, s, 413);
                }
                let grown = (c.buf.len() * 2).min(cap);
                c.buf.resize(grown, 0);
            }
            match s.read(&mut c.buf[c.filled..]) {
                Ok(0) => return Interest::Close,
                Ok(n) => {
                    c.filled += n;
                    did_read = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Read(c.wait()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Interest::Close,
            }
        }
    }

    fn writable(&mut self, c: &mut HttpConn, s: &mut Stream) -> Interest {
        match self.flush(c, s) {
            Flush::Done => match c.after {
                After::KeepAlive if c.start < c.filled => self.readable(c, s),
                After::KeepAlive => Interest::Read(Wait::KeepAlive),
                After::Close => Interest::Close,
                After::Linger => Interest::Linger,
            },
            Flush::Blocked => Interest::Write,
            Flush::Failed => Interest::Close,
        }
    }

    fn prefetch(&mut self, c: &mut HttpConn, s: &mut Stream) -> Prefetch {
        c.make_room();
        if c.filled < c.buf.len() {
            match s.read(&mut c.buf[c.filled..]) {
                Ok(0) => return Prefetch::Wait(Interest::Close),
                Ok(n) => c.filled += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Prefetch::Wait(Interest::Close),
            }
        } else {
            return Prefetch::Ready; // a large head or body: the worker grows the buffer
        }
        if c.start == c.filled {
            return Prefetch::Wait(Interest::Read(c.wait()));
        }
        let limits = self.settings.limits;
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let data = &c.buf[c.start..c.filled];
        let head = match head::parse(data, &mut slots, &limits) {
            Parsed::Reject(_) => return Prefetch::ReadyInline, // the error page never blocks
            Parsed::Partial => {
                if Instant::now() >= self.deadline(&mut c.started, None) {
                    return Prefetch::ReadyInline; // readable() answers 408
                }
                return Prefetch::Wait(Interest::Read(Wait::Request));
            }
            Parsed::Complete(head) => head,
        };
        let complete = match head.framing {
            Framing::None => true,
            Framing::Length(n) => n > limits.body || data.len() as u64 >= head.len as u64 + n,
            Framing::Chunked => !matches!(
                chunked::decode(&data[head.len..], limits.body, &mut c.chunk_body),
                Ok(None)
            ),
        };
        if !complete {
            if head.expect_continue && !c.continue_sent {
                return Prefetch::Ready; // readable() sends 100 Continue
            }
            let received = (data.len() - head.len) as u64;
            if Instant::now() >= self.deadline(&mut c.started, Some(received)) {
                return Prefetch::ReadyInline; // readable() answers 408
            }
            return Prefetch::Wait(Interest::Read(Wait::Request));
        }
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body: &[],
            peer: s.peer_addr(),
            pool: self.arena.pool(),
        };
        if self.handler.answers_without_blocking(&req) {
            Prefetch::ReadyInline
        } else {
            Prefetch::Ready
        }
    }

    fn writes_without_blocking(&self, c: &HttpConn) -> bool {
        !matches!(c.pending, Some(Pending::Stream { .. }))
    }

    fn parked(&mut self, c: &mut HttpConn) {
        if c.start == c.filled && c.pending.is_none() && c.out_pos >= c.out.len() {
            c.start = 0;
            c.filled = 0;
            c.pool.put_read(std::mem::take(&mut c.buf));
            c.pool.put_write(std::mem::take(&mut c.out));
            c.chunk_body = Vec::new();
        }
    }

    fn timed_out(&mut self, c: &mut HttpConn, s: &mut Stream) {
        // A response cut short by the timeout is logged with what was sent.
        self.log_done(c, s, true);
        // Mid-request with nothing being written: tell the client why we close.
        if c.start < c.filled && c.out_pos >= c.out.len() && c.pending.is_none() {
            self.log_start(&mut c.log, &c.buf[c.start..c.filled], None, 408);
            c.out.clear();
            c.out_pos = 0;
            self.write_head(c, 408, &[], Some(0), false);
            c.out.extend_from_slice(b"Connection: close\r\n\r\n");
            let _ = s.send(&c.out, false);
            self.log_done(c, s, true);
        }
    }
}

impl<H: HttpHandler> HttpService<H> {
    /// Parse one request from the buffer; if it is complete, run the handler
    /// and queue the response.
    fn step(&mut self, c: &mut HttpConn, s: &mut Stream) -> Step {
        let limits = self.settings.limits;
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let data = &c.buf[c.start..c.filled];
        let head = match head::parse(data, &mut slots, &limits) {
            Parsed::Partial => {
                c.deadline = Some(self.deadline(&mut c.started, None));
                return Step::Incomplete;
            }
            Parsed::Reject(status) => {
                let _ = self.reject(c, s, status);
                return Step::Responded;
            }
            Parsed::Complete(head) => head,
        };
        // Bound the body before reading any of it.
        let body_range = match head.framing {
            Framing::None => Some((head.len, head.len, head.len)),
            Framing::Length(n) if n > limits.body => {
                let _ = self.reject(c, s, 413);
                return Step::Responded;
            }
            Framing::Length(n) => {
                let end = head.len + n as usize;
                (data.len() >= end).then_some((head.len, end, end))
            }
            Framing::Chunked => {
                match chunked::decode(&data[head.len..], limits.body, &mut c.chunk_body) {
                    Ok(Some(used)) => Some((0, c.chunk_body.len(), head.len + used)),
                    Ok(None) => None,
                    Err(ChunkError::Invalid) => {
                        let _ = self.reject(c, s, 400);
                        return Step::Responded;
                    }
                    Err(ChunkError::TooLarge) => {
                        let _ = self.reject(c, s, 413);
                        return Step::Responded;
                    }
                }
            }
        };
        let Some((body_start, body_end, consumed)) = body_range else {
            let received = (data.len() - head.len) as u64;
            c.deadline = Some(self.deadline(&mut c.started, Some(received)));
            if head.expect_continue && !c.continue_sent && head.version == Version::Http11 {
                c.continue_sent = true;
                let _ = s.send(b"HTTP/1.1 100 Continue\r\n\r\n", false);
            }
            return Step::Incomplete;
        };
        let body = if head.framing == Framing::Chunked {
            &c.chunk_body[body_start..body_end]
        } else {
            &data[body_start..body_end]
        };
        let keep = self.settings.keepalive
            && head.wants_keep_alive()
            && !s.is_draining()
            && (self.settings.max_keepalive_requests == 0
                || c.served + 1 < self.settings.max_keepalive_requests);
        let is_head = head.method == "HEAD";
        let version = head.version;
        s.set_state(WorkerState::Writing);
        let response = self.call(&head, body, s);
        let (status, headers, body) = response.into_parts();
        self.log_start(&mut c.log, data, Some(head.headers), status);
        if let Some(slot) = s.score_slot() {
            let line_end = data.iter().position(|&b| b == b'\r').unwrap_or(0);
            slot.record_request(&data[..line_end], body.len().unwrap_or(0));
        }
        c.out.clear();
        c.out_pos = 0;
        let keep = self.queue(c, status, &headers, body, is_head, keep, version);
        c.served += 1;
        c.started = Started::default();
        c.deadline = None;
        c.continue_sent = false;
        c.consume(consumed);
        c.after = if keep {
            After::KeepAlive
        } else if c.start < c.filled {
            After::Linger
        } else {
            After::Close
        };
        Step::Responded
    }

    /// When the request in progress must have arrived: its head within the
    /// header timeout of its first byte; its body (`body_received` bytes of it
    /// so far) within the body timeout of the head's end, plus a second for
    /// every `request_body_min_rate` bytes received, as `mod_reqtimeout`'s
    /// `body=20,MinRate=500` does. A client sending at the minimum rate or
    /// faster never runs out of time; a trickle does.
    fn deadline(&self, c: &mut Started, body_received: Option<u64>) -> Instant {
        let now = Instant::now();
        // A timeout configured beyond what an Instant holds means "never".
        let after = |t: Instant, d: Duration| {
            t.checked_add(d)
                .unwrap_or_else(|| t + Duration::from_secs(100 * 365 * 86400))
        };
        match body_received {
            None => after(
                *c.head.get_or_insert(now),
                self.settings.request_header_timeout,
            ),
            Some(received) => {
                let started = *c.body.get_or_insert(now);
                let rate = self.settings.request_body_min_rate;
                // A second per `rate` bytes (none when the rate is 0).
                let earned = match (received.checked_div(rate), received.checked_rem(rate)) {
                    (Some(secs), Some(rest)) => {
                        Duration::from_secs(secs)
                            + Duration::from_millis(rest.saturating_mul(1000) / rate)
                    }
                    _ => Duration::ZERO,
                };
                after(
                    started,
                    self.settings.request_body_timeout.saturating_add(earned),
                )
            }
        }
    }

    /// Run the user's handler; a panic becomes a 500 for this request only.
    fn call(&mut self, head: &Head<'_, '_>, body: &[u8], s: &Stream) -> Response {
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body,
            peer: s.peer_addr(),
            pool: self.arena.pool(),
        };
        let handler = &mut self.handler;
        let answer = catch_unwind(AssertUnwindSafe(|| handler.handle(&req)));
        // The response owns all it holds: the request's scratch can go.
        self.arena.reset();
        match answer {
            Ok(r) => r,
            Err(_) => {
                crate::log_error!(
                    "mpm: handler panicked on {} {}; answered 500",
                    head.method,
                    head.target
                );
                Response::error(500)
            }
        }
    }

    /// Queue an error response, drop what was received, and close lingering.
    fn reject(&mut self, c: &mut HttpConn, s: &mut Stream, status: u16) -> Interest {
        self.log_start(
            &mut c.log,
            &c.buf[c.start..c.filled.max(c.start)],
            None,
            status,
        );
        c.out.clear();
        c.out_pos = 0;
        c.pending = None;
        let r = Response::error(status);
        let (status, headers, body) = r.into_parts();
        self.queue(c, status, &headers, body, false, false, Version::Http11);
        c.start = 0;
        c.filled = 0;
        c.started = Started::default();
        c.deadline = None;
        c.after = After::Linger;
        match self.flush(c, s) {
            Flush::Done => Interest::Linger,
            Flush::Blocked => Interest::Write,
            Flush::Failed => Interest::Close,
        }
    }

    /// Serialize a response into the connection's output. Returns whether
    /// the connection stays open after it.
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &self,
        c: &mut HttpConn,
        status: u16,
        headers: &[(HeaderText, HeaderText)],
        body: Body,
        is_head: bool,
        mut keep: bool,
        version: Version,
    ) -> bool {
        let no_body = is_head || status < 200 || status == 204 || status == 304;
        let length = if status < 200 || status == 204 || status == 304 {
            None
        } else {
            body.len()
        };
        let streamed = length.is_none() && !no_body;
        let chunked = streamed && version == Version::Http11;
        if streamed && !chunked {
            keep = false; // HTTP/1.0 stream: the close delimits the body
        }
        self.write_head(c, status, headers, length, chunked);
        // Connection header, then the blank line.
        match (keep, version) {
            (false, _) => c.out.extend_from_slice(b"Connection: close\r\n\r\n"),
            (true, Version::Http10) => c.out.extend_from_slice(b"Connection: keep-alive\r\n\r\n"),
            (true, Version::Http11) => c.out.extend_from_slice(b"\r\n"),
        }
        c.log.set_head_len(c.out.len());
        c.pending = None;
        if no_body {
            return keep;
        }
        match body {
            Body::Empty => {}
            Body::Bytes(b) => c.out.extend_from_slice(&b),
            Body::Shared(b) => c.out.extend_from_slice(&b),
            Body::File(f) => {
                if f.len > 0 {
                    c.pending = Some(Pending::File {
                        file: f.file,
                        offset: f.offset,
                        end: f.offset + f.len,
                    });
                }
            }
            Body::Stream(reader) => c.pending = Some(Pending::Stream { reader, chunked }),
        }
        keep
    }

    /// Status line and the fields every response carries; the caller adds
    /// `Connection` and the blank line.
    fn write_head(
        &self,
        c: &mut HttpConn,
        status: u16,
        headers: &[(HeaderText, HeaderText)],
        length: Option<u64>,
        chunked: bool,
    ) {
        if c.out.capacity() == 0 {
            c.out = c.pool.write_buffer();
        }
        let out = &mut c.out;
        let _ = write!(out, "HTTP/1.1 {status} {}\r\nDate: ", reason_phrase(status));
        date::append_now(out);
        out.extend_from_slice(b"\r\nServer: ");
        out.extend_from_slice(self.settings.server.as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in headers {
            if is_framing(name) || value.contains(['\r', '\n']) {
                continue;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let Some(n) = length {
            let _ = write!(out, "Content-Length: {n}\r\n");
        } else if chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
    }

    /// Write the queued response; once it is done (or failed), log it.
    fn flush(&mut self, c: &mut HttpConn, s: &mut Stream) -> Flush {
        let flushed = self.write_queued(c, s);
        if !matches!(flushed, Flush::Blocked) {
            let ends = !matches!(flushed, Flush::Done) || c.after != After::KeepAlive;
            self.log_done(c, s, ends);
        }
        flushed
    }

    /// Start the access-log line of the response being queued: the request
    /// line as received (the first line of the buffered bytes), with the
    /// request's fields when parsed.
    fn log_start(
        &self,
        record: &mut Record,
        data: &[u8],
        headers: Option<&[httparse::Header<'_>]>,
        status: u16,
    ) {
        let Some(log) = &self.log else {
            return;
        };
        let data = &data[..data.len().min(self.settings.limits.line)];
        let line = &data[..data
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(data.len())];
        let field = |name: &str| {
            headers?
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value)
        };
        let (referer, agent) = match log.format() {
            crate::log_format::LogFormat::Combined => (field("referer"), field("user-agent")),
            crate::log_format::LogFormat::Common => (None, None),
        };
        record.capture(log.format(), line, referer, agent, status);
    }

    /// Write the access-log line of the response just finished, if any.
    fn log_done(&mut self, c: &mut HttpConn, s: &Stream, conn_ends: bool) {
        if let Some(log) = &mut self.log {
            log.write(&mut c.log, s.peer_addr().ip(), conn_ends);
        }
    }

    /// Write the queued head and bytes, then any file or stream body, until
    /// done or the socket would block.
    fn write_queued(&mut self, c: &mut HttpConn, s: &mut Stream) -> Flush {
        loop {
            while c.out_pos < c.out.len() {
                let more = c.pending.is_some();
                match s.send(&c.out[c.out_pos..], more) {
                    Ok(0) => return Flush::Failed,
                    Ok(n) => {
                        c.out_pos += n;
                        c.log.add_sent(n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Flush::Blocked,
                    Err(_) => return Flush::Failed,
                }
            }
            c.out.clear();
            c.out_pos = 0;
            let Some(pending) = c.pending.as_mut() else {
                return Flush::Done;
            };
            match pending {
                Pending::File { file, offset, end } if self.settings.sendfile => {
                    while *offset < *end {
                        let want = (*end - *offset).min(1 << 30) as usize;
                        match s.sendfile(file, offset, want) {
                            Ok(0) => return Flush::Failed, // the file shrank
                            Ok(n) => c.log.add_sent(n),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return Flush::Blocked,
                            Err(_) => return Flush::Failed,
                        }
                    }
                    c.pending = None;
                }
                Pending::File { file, offset, end } => {
                    // emulate_sendfile: read a chunk at the offset, then write it.
                    if *offset >= *end {
                        c.pending = None;
                        continue;
                    }
                    let want = ((*end - *offset) as usize).min(COPY_CHUNK);
                    c.out.resize(want, 0);
                    match read_full_at(file, &mut c.out, *offset) {
                        Ok(n) if n == want => *offset += n as u64,
                        _ => return Flush::Failed,
                    }
                    // The last chunk goes without MSG_MORE: corked, it would
                    // wait for the kernel's 200 ms timer before leaving.
                    if *offset >= *end {
                        c.pending = None;
                    }
                }
                Pending::Stream { reader, chunked } => {
                    let header = if *chunked { 10 } else { 0 };
                    c.out.resize(header + STREAM_CHUNK, 0);
                    let n = loop {
                        match reader.read(&mut c.out[header..]) {
                            Ok(n) => break n,
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(_) => return Flush::Failed,
                        }
                    };
                    if !*chunked {
                        c.out.truncate(n);
                        if n == 0 {
                            c.pending = None;
                        }
                        continue;
                    }
                    c.out.truncate(header + n);
                    // Fill the reserved room with the size line, right-aligned.
                    let size = format!("{n:x}\r\n");
                    let at = header - size.len();
                    c.out[at..header].copy_from_slice(size.as_bytes());
                    c.out_pos = at;
                    if n == 0 {
                        c.out.extend_from_slice(b"\r\n");
                        c.pending = None;
                    } else {
                        c.out.extend_from_slice(b"\r\n");
                    }
                }
            }
        }
    }
}

fn is_framing(name: &str) -> bool {
    [
        "content-length",
        "transfer-encoding",
        "connection",
        "date",
        "server",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

fn read_full_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
