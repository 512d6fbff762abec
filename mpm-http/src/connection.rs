//! HTTP/1.1 over a [`ConnectionHandler`]: the step machine that runs on
//! blocking and non-blocking sockets alike. Turning bytes into requests is
//! in `reading.rs`, turning responses into bytes in `writing.rs`.

use std::io::{ErrorKind, Read};
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpm_core::{ConnectionHandler, Interest, Prefetch, Stream, Wait};

use crate::access_log::{Record, Writer};
use crate::buffer_pool::BufferPool;
use crate::chunked;
use crate::head::{self, Framing, Parsed, SLOTS};
use crate::reading::Received;
use crate::request::{Headers, Request};
use crate::request_pool::PoolArena;
use crate::settings::{HttpSettings, ServiceSettings};
use crate::HttpHandler;

/// The [`ConnectionHandler`] that speaks HTTP/1.1 and hands each request to
/// an [`HttpHandler`].
#[derive(Debug)]
pub struct HttpService<H> {
    pub(crate) handler: H,
    pub(crate) settings: Arc<ServiceSettings>,
    /// This worker's request pool, reset after every request.
    pub(crate) arena: PoolArena,
    pub(crate) log: Option<Writer>,
}

impl<H: HttpHandler> HttpService<H> {
    /// Serve `handler` with these settings (one service, a buffer pool of
    /// its own; an [`HttpFactory`](crate::HttpFactory) shares one pool among
    /// its workers).
    pub fn new(handler: H, settings: &HttpSettings) -> Self {
        Self::with_settings(handler, Arc::new(ServiceSettings::new(settings)))
    }

    pub(crate) fn with_settings(handler: H, settings: Arc<ServiceSettings>) -> Self {
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
pub(crate) enum After {
    KeepAlive,
    Close,
    Linger,
}

/// A body still to be sent after the head.
pub(crate) enum Pending {
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
    pub(crate) buf: Vec<u8>,
    /// Start of the bytes not yet consumed by a request.
    pub(crate) start: usize,
    /// End of the bytes received.
    pub(crate) filled: usize,
    pub(crate) out: Vec<u8>,
    pub(crate) out_pos: usize,
    pub(crate) pending: Option<Pending>,
    /// What follows the pending body of a [`Body::Parts`](crate::Body::Parts).
    pub(crate) parts: std::collections::VecDeque<crate::response::Part>,
    pub(crate) after: After,
    pub(crate) served: u64,
    pub(crate) started: Started,
    /// When the request in progress must be complete (header or body
    /// timeout); `None` between requests.
    pub(crate) deadline: Option<Instant>,
    pub(crate) continue_sent: bool,
    /// The queued bytes are an interim response: once written, read on.
    pub(crate) interim: bool,
    pub(crate) chunk_body: Vec<u8>,
    pub(crate) pool: Arc<BufferPool>,
    /// The access-log line of the response in progress.
    pub(crate) log: Record,
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
    pub(crate) fn wait(&self) -> Wait {
        if self.start < self.filled || self.served == 0 {
            Wait::Request
        } else {
            Wait::KeepAlive
        }
    }

    /// Before a read: take a buffer from the pool if the connection parked
    /// without one, and move unconsumed bytes to its front.
    pub(crate) fn make_room(&mut self) {
        if self.buf.is_empty() {
            self.buf = self.pool.read_buffer();
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.filled {
            self.start = 0;
            self.filled = 0;
        }
    }
}

/// When the parts of the request in progress began to arrive.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Started {
    /// The head's first byte (or the accept, for a connection's first request).
    pub(crate) head: Option<Instant>,
    /// The head's end: the body's time starts there.
    pub(crate) body: Option<Instant>,
}

/// Did writing finish?
pub(crate) enum Flush {
    Done,
    Blocked,
    Failed,
}

/// What the parser made of the buffered bytes.
pub(crate) enum Step {
    /// A response is queued.
    Responded,
    /// An interim response (`100 Continue`) is queued; then more bytes
    /// are needed.
    Interim,
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
            parts: std::collections::VecDeque::new(),
            after: After::KeepAlive,
            served: 0,
            started: Started {
                head: Some(now),
                body: None,
            },
            deadline: Some(mpm_core::deadline(
                now,
                self.settings.request_header_timeout,
            )),
            continue_sent: false,
            interim: false,
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
                    Step::Interim => match self.write_queued(c, s) {
                        Flush::Done => {}
                        Flush::Blocked => {
                            c.interim = true;
                            return Interest::Write;
                        }
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
        if c.interim {
            // The rest of a `100 Continue`: then the body is read.
            return match self.write_queued(c, s) {
                Flush::Done => {
                    c.interim = false;
                    Interest::Read(c.wait())
                }
                Flush::Blocked => Interest::Write,
                Flush::Failed => Interest::Close,
            };
        }
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
            Parsed::NewerMinor(at) => {
                // Served as HTTP/1.1; the worker parses it again.
                c.buf[c.start + at] = b'1';
                return Prefetch::Ready;
            }
            Parsed::Partial => {
                if Instant::now()
                    >= self.deadline(&mut c.started, Received::Head(data.len() as u64))
                {
                    return Prefetch::ReadyInline; // readable() answers 408
                }
                return Prefetch::Wait(Interest::Read(Wait::Request));
            }
            Parsed::Complete(head) => head,
        };
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body: &[],
            stream: None,
            params: &[],
            peer: s.peer_addr(),
            pool: self.arena.pool(),
        };
        // A streamed body is read by the worker that runs the handler, as
        // it arrives: hand the request over as soon as its head is here.
        if head.framing != Framing::None && self.handler.streams_body(&req) {
            return Prefetch::Ready;
        }
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
            if Instant::now() >= self.deadline(&mut c.started, Received::Body(received)) {
                return Prefetch::ReadyInline; // readable() answers 408
            }
            return Prefetch::Wait(Interest::Read(Wait::Request));
        }
        if self.handler.answers_without_blocking(&req) {
            Prefetch::ReadyInline
        } else {
            Prefetch::Ready
        }
    }

    /// Nothing read, nothing written: the socket is the whole connection.
    fn can_hand_over(&self, c: &HttpConn) -> bool {
        c.served == 0 && c.start == c.filled && c.out_pos >= c.out.len() && c.pending.is_none()
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
            if let Some(slot) = s.score_slot() {
                slot.record_status(408);
            }
            c.out.clear();
            c.out_pos = 0;
            // The built-in page (or the configured one), as every 408.
            let page = crate::Response::error(408).into_parts();
            self.queue(c, page, false, false, crate::Version::Http11);
            if let Ok(n) = s.send(&c.out, false) {
                c.log.add_sent(n);
            }
            self.log_done(c, s, true);
        }
    }
}
