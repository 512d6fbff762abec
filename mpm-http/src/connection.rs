//! HTTP/1.1 over a [`ConnectionHandler`]: the step machine that runs on
//! blocking and non-blocking sockets alike, and the one `impl` of
//! [`HttpService`]. Turning bytes into requests is in `reading.rs`,
//! turning responses into bytes in `writing.rs`, the state they share in
//! `state.rs`; the imports go one way: this file, then reading, then
//! writing, then the state.

use std::io::{ErrorKind, Read};
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use mpm_core::panics::catch;
use mpm_core::waiting::{poll_once, Polled};
use mpm_core::{ConnectionHandler, Interest, Prefetch, Stream, Wait};

use crate::access_log::Record;
use crate::awaited_body::Upload;
use crate::chunked;
use crate::h2::{self, H2Conn, Preface};
use crate::head::{self, Framing, Parsed, Spans, SLOTS};
use crate::internal_redirect::Redirected;
use crate::page_cache;
use crate::reading::{deadline, BufferedKey, Gate, Reader, Received, Step};
use crate::request::{BodyFraming, Headers, Request};
use crate::request_pool::PoolArena;
use crate::settings::{HttpSettings, ServiceSettings};
use crate::state::{After, HttpConn, LaterState, Pending, Started, Waiting};
use crate::tunnel;
use crate::writing::{Flush, Sender};
use crate::{HttpHandler, Response};

/// The [`ConnectionHandler`] that speaks HTTP/1.1 and hands each request to
/// an [`HttpHandler`].
#[derive(Debug)]
pub struct HttpService<H> {
    /// The handler and this worker's request pool: what reads requests
    /// and answers them.
    pub(crate) reader: Reader<H>,
    /// The settings and the access-log writer: what sends the answers.
    pub(crate) sender: Sender,
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
            reader: Reader {
                handler,
                arena,
                prefetched: None,
                spans: Spans::new(),
                spare: None,
            },
            sender: Sender { settings, log },
        }
    }
}

/// Most bytes of pipelined responses gathered for one write.
pub(crate) const GATHER_MAX: usize = 64 * 1024;

impl<H: HttpHandler> ConnectionHandler for HttpService<H> {
    type Conn = HttpConn;

    fn connected(&mut self, _stream: &Stream) -> HttpConn {
        // The header timeout runs from the accept, as in mod_reqtimeout: a
        // client that connects and sends nothing is cut off as soon as one
        // that sends a head too slowly.
        let now = mpm_core::turn_clock::now();
        HttpConn {
            buf: Vec::new(),
            start: 0,
            filled: 0,
            out: Vec::new(),
            out_pos: 0,
            resp_start: 0,
            approved: false,
            for_a_worker: false,
            pending: None,
            waits_on: None,
            occasional: None,
            after: After::KeepAlive,
            served: 0,
            started: Started {
                head: Some(now),
                body: None,
            },
            deadline: Some(mpm_core::deadline(
                now,
                self.sender.settings.request_header_timeout,
            )),
            continue_sent: false,
            interim: false,
            pool: Arc::clone(&self.sender.settings.buffers),
            log: Record::default(),
        }
    }

    fn readable(&mut self, c: &mut HttpConn, s: &mut Stream) -> Interest {
        if c.is_h2() {
            return self.h2_step(c, s);
        }
        // Output still queued (a step that yielded): finish it first.
        if c.has_output() {
            return self.writable(c, s);
        }
        // An answer still to come, or a tunnel: nothing else is read.
        if c.is_waiting() {
            return self.resume(c, s);
        }
        let mut did_read = false;
        loop {
            // A connection's first bytes may be HTTP/2's preface.
            let mut partial_preface = false;
            if c.start < c.filled && c.served == 0 && self.h2_allowed(s) {
                match h2::preface(&c.buf[c.start..c.filled]) {
                    Preface::Yes => return self.start_h2(c, s),
                    Preface::Partial if did_read => return Interest::Read(Wait::Request),
                    Preface::Partial => partial_preface = true,
                    // Chose h2 by ALPN, then spoke something else.
                    Preface::No if chose_h2(s) => return h2::not_a_preface(s),
                    Preface::No => {}
                }
            }
            if c.start < c.filled && !partial_preface {
                // On the loop every request is asked whether it may block
                // (the first one already was, by prefetch); behind gathered
                // responses too, which must not wait for a slow one.
                let approved = std::mem::take(&mut c.approved);
                let gate = if (s.on_event_loop() && !approved) || c.has_output() {
                    Gate::NonBlocking
                } else {
                    Gate::Any
                };
                match self.reader.step(&mut self.sender, c, s, gate) {
                    // An answer to wait for, or a tunnel after this 101.
                    Step::Later => return self.resume(c, s),
                    Step::Responded if c.is_waiting() => return self.resume(c, s),
                    Step::Responded => {
                        // Pipelined requests answered together go out in one write.
                        if c.after == After::KeepAlive
                            && c.pending.is_none()
                            && !c.has_parts()
                            && c.start < c.filled
                            && c.out.len() - c.out_pos < GATHER_MAX
                        {
                            continue;
                        }
                        match self.sender.flush(c, s) {
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
                            stop => return stop.interest().unwrap_or(Interest::Close),
                        }
                    }
                    Step::Deferred => {
                        // What is gathered goes out before anything that may block.
                        if let Some(stop) = self.sender.flush_first(c, s) {
                            return stop;
                        }
                        if s.on_event_loop() {
                            // Back to the loop, which hands it to a worker.
                            c.for_a_worker = true;
                            return Interest::Yield;
                        }
                        continue; // now with nothing gathered: any request
                    }
                    Step::Incomplete => {
                        if c.has_output() {
                            // Before waiting for more input; then once more,
                            // for a `100 Continue` that had to wait its turn.
                            if let Some(stop) = self.sender.flush_first(c, s) {
                                return stop;
                            }
                            continue;
                        }
                    }
                    Step::Interim => match self.sender.write_queued(c, s) {
                        Flush::Done => {}
                        Flush::Failed => return Interest::Close,
                        // Blocked; or in memory, nothing to yield for, but
                        // it would resume.
                        stop => {
                            c.interim = true;
                            return stop.interest().unwrap_or(Interest::Close);
                        }
                    },
                }
            }
            if did_read {
                return Interest::Read(c.wait());
            }
            if let Some(deadline) = c.deadline {
                let now = mpm_core::turn_clock::now();
                if now >= deadline {
                    return self.sender.reject(c, s, 408);
                }
                // A blocking read waits no longer than the request may take,
                // so that a client who stops sending is cut off on time.
                if s.is_blocking() {
                    let wait = (deadline - now).min(self.sender.settings.timeout);
                    if s.set_read_timeout(wait.max(Duration::from_millis(1)))
                        .is_err()
                    {
                        return Interest::Close;
                    }
                }
            }
            c.make_room();
            if c.filled == c.buf.len() {
                let cap = self.sender.settings.max_buffer();
                if c.buf.len() >= cap {
                    // Only reachable with a body limit below the head limit.
                    return self.sender.reject(c, s, 413);
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
        if c.is_h2() {
            return self.h2_step(c, s);
        }
        if c.interim {
            // The rest of a `100 Continue`: then the body is read (an
            // awaited one by resuming its answer, which fills its pipe
            // from what may already be buffered).
            return match self.sender.write_queued(c, s) {
                Flush::Done if c.is_waiting() => {
                    c.interim = false;
                    self.resume(c, s)
                }
                Flush::Done => {
                    c.interim = false;
                    Interest::Read(c.wait())
                }
                stop => stop.interest().unwrap_or(Interest::Close),
            };
        }
        match self.sender.flush(c, s) {
            // A tunnel after the 101 just sent, or an answer still to come
            // behind the ones just sent.
            Flush::Done if c.is_waiting() => self.resume(c, s),
            Flush::Done => match c.after {
                After::KeepAlive if c.start < c.filled => self.readable(c, s),
                After::KeepAlive => Interest::Read(Wait::KeepAlive),
                After::Close => Interest::Close,
                After::Linger => Interest::Linger,
            },
            stop => stop.interest().unwrap_or(Interest::Close),
        }
    }

    fn prefetch(&mut self, c: &mut HttpConn, s: &mut Stream) -> Prefetch {
        c.approved = false;
        self.reader.prefetched = None;
        if std::mem::take(&mut c.for_a_worker) {
            return Prefetch::Ready;
        }
        if let Some(h) = c.occasional.as_mut().and_then(|o| o.h2.as_mut()) {
            return h.prefetch(s);
        }
        // Resuming a future, or moving bytes between two non-blocking
        // sockets, never blocks (the rule async code keeps): on the loop.
        // Nothing is read here: the client's bytes wait for their turn.
        if c.is_waiting() {
            return if !c.has_output() || self.writes_without_blocking(c) {
                Prefetch::ReadyInline
            } else {
                Prefetch::Ready
            };
        }
        // A response still going out (it yielded its turn): the question is
        // whether the rest can be written without blocking. Not reading
        // now: a peer that shut its side down still gets all of it.
        if c.has_output() {
            return if self.writes_without_blocking(c) {
                Prefetch::ReadyInline
            } else {
                Prefetch::Ready
            };
        }
        c.make_room();
        let mut closed = false;
        if c.filled < c.buf.len() {
            match s.read(&mut c.buf[c.filled..]) {
                Ok(0) if c.start == c.filled => return Prefetch::Wait(Interest::Close),
                // Closed after pipelining: answer what was whole, then close.
                Ok(0) => closed = true,
                Ok(n) => c.filled += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Prefetch::Wait(Interest::Close),
            }
        }
        if c.start == c.filled {
            return Prefetch::Wait(Interest::Read(c.wait()));
        }
        // HTTP/2's preface: its handshake never blocks, so on the loop.
        if c.served == 0 && self.h2_allowed(s) {
            match h2::preface(&c.buf[c.start..c.filled]) {
                Preface::Yes => return Prefetch::ReadyInline,
                Preface::Partial if closed => return Prefetch::Wait(Interest::Close),
                Preface::Partial => return Prefetch::Wait(Interest::Read(Wait::Request)),
                // The connection error never blocks.
                Preface::No if chose_h2(s) => return Prefetch::ReadyInline,
                Preface::No => {}
            }
        }
        // A full buffer may still hold whole requests (pipelined ones);
        // only a head or body larger than it needs a worker to grow it.
        let full = c.filled == c.buf.len();
        let limits = self.sender.settings.limits;
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let data = &c.buf[c.start..c.filled];
        let head = match head::parse(data, &mut slots, &limits) {
            Parsed::Reject(_) => return Prefetch::ReadyInline, // the error page never blocks
            Parsed::NewerMinor(at) => {
                // Served as HTTP/1.1; the worker parses it again.
                c.buf[c.start + at] = b'1';
                return Prefetch::Ready;
            }
            Parsed::Partial if closed => return Prefetch::Wait(Interest::Close),
            Parsed::Partial if full => return Prefetch::Ready,
            Parsed::Partial => {
                if mpm_core::turn_clock::now()
                    >= deadline(
                        &self.sender.settings,
                        &mut c.started,
                        Received::Head(data.len() as u64),
                    )
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
            awaited: None,
            params: &[],
            peer: s.peer_addr(),
            secure: s.has_transport(),
            pool: self.reader.arena.pool(),
            framing: BodyFraming::of(&head),
            internal: false,
        };
        // A body a future reads as it arrives (never blocking): the handler
        // runs as soon as the head is here, where it says it may.
        if head.framing != Framing::None
            && !s.is_blocking()
            && self.reader.handler.awaits_body(&req)
        {
            return if self.reader.handler.answers_without_blocking(&req) {
                Prefetch::ReadyInline
            } else {
                Prefetch::Ready
            };
        }
        // A streamed body is read by the worker that runs the handler, as
        // it arrives: hand the request over as soon as its head is here.
        if head.framing != Framing::None && self.reader.handler.streams_body(&req) {
            return Prefetch::Ready;
        }
        let complete = match head.framing {
            Framing::None => true,
            // Read whole (a streamed or awaited body went above): its
            // in-memory bound, past which it is answered 413 at once.
            Framing::Length(n) => {
                n > limits.whole_body || data.len() as u64 >= (head.len as u64).saturating_add(n)
            }
            Framing::Chunked => !matches!(
                chunked::decode(
                    &data[head.len..],
                    limits.whole_body,
                    &mut c.occasional.get_or_insert_with(Box::default).chunk_body
                ),
                Ok(None)
            ),
        };
        if !complete {
            if closed {
                return Prefetch::Wait(Interest::Close);
            }
            if full || (head.expect_continue && !c.continue_sent) {
                return Prefetch::Ready; // readable() grows the buffer, or sends 100 Continue
            }
            let received = (data.len() - head.len) as u64;
            if mpm_core::turn_clock::now()
                >= deadline(
                    &self.sender.settings,
                    &mut c.started,
                    Received::Body(received),
                )
            {
                return Prefetch::ReadyInline; // readable() answers 408
            }
            return Prefetch::Wait(Interest::Read(Wait::Request));
        }
        if self.reader.handler.answers_without_blocking(&req) {
            c.approved = true;
            // The step that runs it next need not parse the head again.
            if self.reader.spans.keep(&head, data) {
                self.reader.prefetched = Some(BufferedKey::of(c));
            }
            Prefetch::ReadyInline
        } else {
            Prefetch::Ready
        }
    }

    /// Nothing read, nothing written: the socket is the whole connection.
    fn can_hand_over(&self, c: &HttpConn) -> bool {
        c.served == 0 && c.start == c.filled && !c.has_output() && !c.is_waiting() && !c.is_h2()
    }

    /// In-memory output always; a file body when the next stretch of it
    /// (up to `--sendfile-max-chunk`) is in the page cache; a streamed body
    /// never (its reader may block); a polled body always (its source
    /// never blocks).
    fn writes_without_blocking(&self, c: &HttpConn) -> bool {
        // HTTP/2's frames are in memory; a stream whose body may block
        // sends the step to a worker from there.
        if c.is_h2() {
            return true;
        }
        match &c.pending {
            None | Some(Pending::Polled(_)) => true,
            Some(Pending::Stream { .. }) => false,
            Some(Pending::File { file, offset, end }) => {
                let next = (*end - *offset).min(self.sender.settings.sendfile_max_chunk);
                page_cache::resident(file, *offset, next)
            }
        }
    }

    fn parked(&mut self, c: &mut HttpConn) {
        if let Some(h) = c.occasional.as_mut().and_then(|o| o.h2.as_mut()) {
            h.release_buffers();
            return;
        }
        // A connection waiting on an answer or a tunnel keeps what its
        // occasional box holds (the answer to come, the tunnel); its
        // buffers went back when it began to wait.
        if !c.has_output() && !c.is_waiting() && c.release_buffers() {
            c.occasional = None;
        }
    }

    /// HTTP/2: GOAWAY(NO_ERROR) with the last stream processed. HTTP/1.1
    /// says nothing (the default's reasons).
    fn idle_at_stop(&mut self, c: &mut HttpConn, s: &mut Stream) {
        if let Some(h) = c.occasional.as_mut().and_then(|o| o.h2.as_mut()) {
            h.idle_at_stop(s);
        }
    }

    /// The client hung up while its request waited (on an upstream): as
    /// nginx, a line for it in the access log with status 499 when no
    /// answer had begun (else the answer's status and what of it was
    /// sent), and one in the error log at the info level; what it waited
    /// for is dropped with the connection (the upstream's connection
    /// closes with it). HTTP/2 waits always read the client: its end is
    /// met by the step (`h2/connection.rs`), not here.
    fn hung_up(&mut self, c: &mut HttpConn, s: &mut Stream) {
        if c.occasional.as_ref().is_some_and(|o| o.h2.is_some()) {
            return;
        }
        match c.take_waiting().map(|w| *w) {
            Some(Waiting::Answer(mut later)) => {
                mpm_core::log_info!(
                    "mpm: {}: the client closed the connection while its answer was awaited; \
                     what it waited on is dropped",
                    later.request
                );
                c.log = std::mem::take(&mut later.record);
                c.log.set_status(499);
            }
            _ => {
                // An answer on its way (its body awaited from an
                // upstream): logged with what was sent, as a timeout's.
                self.sender.finish_gathered(c, s);
            }
        }
        self.sender.log_done(c, s, true);
    }

    fn timed_out(&mut self, c: &mut HttpConn, s: &mut Stream) {
        if let Some(h) = c.occasional.as_mut().and_then(|o| o.h2.as_mut()) {
            h.timed_out(s);
            return;
        }
        // Responses cut short by the timeout are logged with what was sent.
        self.sender.finish_gathered(c, s);
        self.sender.log_done(c, s, true);
        // Mid-request with nothing being written: tell the client why we
        // close (not into a tunnel, nor ahead of an answer still to come).
        if c.start < c.filled && c.out_pos >= c.out.len() && c.pending.is_none() && !c.is_waiting()
        {
            self.sender
                .log_start(&mut c.log, &c.buf[c.start..c.filled], None, 408);
            if let Some(slot) = s.score_slot() {
                slot.record_status(408);
            }
            c.out.clear();
            c.out_pos = 0;
            c.resp_start = 0;
            // The built-in page (or the configured one), as every 408.
            let mut page = crate::Response::error(408);
            self.sender
                .queue(c, &mut page, false, false, crate::Version::Http11);
            if let Ok(n) = s.send(&c.out, false) {
                c.log.add_sent(n);
            }
            self.sender.log_done(c, s, true);
        }
    }
}

/// Did the client choose HTTP/2 by ALPN? Then its first bytes must be the
/// connection preface (RFC 9113 §3.4): anything else is a connection
/// error, never an HTTP/1.1 request. One that chose `http/1.1`, or none,
/// is read as HTTP/1.1 (or, sending the preface, as HTTP/2, as before).
fn chose_h2(s: &Stream) -> bool {
    s.alpn() == Some(b"h2")
}

impl<H: HttpHandler> HttpService<H> {
    /// Is HTTP/2 served on this connection: over TLS with `--http2 on`
    /// (the client chose `h2` by ALPN if it sends the preface), in clear
    /// with `--h2c on`?
    fn h2_allowed(&self, s: &Stream) -> bool {
        let h2 = &self.sender.settings.h2;
        if s.has_transport() {
            h2.tls
        } else {
            h2.cleartext
        }
    }

    /// The preface came: the connection speaks HTTP/2 from here, starting
    /// with the bytes already read.
    fn start_h2(&mut self, c: &mut HttpConn, s: &mut Stream) -> Interest {
        let h = H2Conn::new(
            &self.sender.settings.h2,
            self.sender.settings.limits,
            Arc::clone(&c.pool),
            &c.buf[c.start..c.filled],
        );
        c.consume(c.filled - c.start);
        c.release_buffers();
        c.deadline = None;
        c.set_h2(Box::new(h));
        self.h2_step(c, s)
    }

    /// One HTTP/2 step.
    fn h2_step(&mut self, c: &mut HttpConn, s: &mut Stream) -> Interest {
        let Some(mut h) = c.take_h2() else {
            return Interest::Close;
        };
        let stepped = h2::step(&mut self.reader, &mut self.sender, &mut h, s);
        c.set_h2(h);
        c.for_a_worker |= stepped.for_a_worker;
        stepped.interest
    }

    /// Go on with what the connection waits on: once the output queued
    /// before it is sent, poll the answer still to come (and send it as
    /// `handle`'s answer is sent, then read on), or pump the tunnel.
    fn resume(&mut self, c: &mut HttpConn, s: &mut Stream) -> Interest {
        // An awaited body's pipe is filled once before each poll.
        let mut filled = false;
        loop {
            if let Some(stop) = self.sender.flush_first(c, s) {
                return stop;
            }
            let buffered = c.start < c.filled;
            let Some(waiting) = c.waiting_mut() else {
                return self.writable(c, s);
            };
            let later = match waiting {
                Waiting::Tunnel(_) => {
                    return tunnel::pump(c, s, self.sender.settings.sendfile_max_chunk);
                }
                Waiting::Answer(later) => later,
                Waiting::Vacant => return Interest::Close,
            };
            // An internal redirect's request, the handler not asked yet:
            // asked here, off a loop if it may block.
            if let Some(r) = later.redirect.as_mut().filter(|r| r.pending) {
                let asked = r.answer(
                    &mut self.reader.handler,
                    self.reader.arena.pool(),
                    &self.sender.settings.limits,
                    (later.version, s.on_event_loop()),
                    (s.peer_addr(), s.has_transport()),
                );
                self.reader.arena.reset();
                let Some(mut answer) = asked else {
                    c.for_a_worker = true;
                    return Interest::Yield;
                };
                r.pending = false;
                later.answer = match answer.take_later() {
                    Some(again) => again,
                    None => Box::pin(std::future::ready(answer)),
                };
                continue;
            }
            if !filled && later.upload.is_some() {
                filled = true;
                if let Some(stop) = self.fill_upload(c, s) {
                    return stop;
                }
                continue;
            }
            // The answer is put where it stays, not returned through
            // `poll_once`'s and `catch`'s results: a response is some 450
            // bytes, and each move of it a copy.
            let mut ready = None;
            let polled = catch(|| match poll_once(later.answer.as_mut()) {
                Polled::Ready(answer) => {
                    ready = Some(answer);
                    Polled::Ready(())
                }
                Polled::Wait(wait) => Polled::Wait(wait),
                Polled::Again => Polled::Again,
            });
            match polled {
                // Waiting for the client's bytes while some are buffered
                // (the pipe was full when they came): into the pipe, and
                // poll again, rather than wait for input already here.
                Ok(Polled::Wait(wait))
                    if wait.client_read
                        && buffered
                        && later.upload.as_ref().is_some_and(|u| u.wants_input()) =>
                {
                    filled = false;
                    continue;
                }
                Ok(Polled::Wait(wait)) => {
                    // Waiting costs the connection's state, not its
                    // buffers (unless a pipelined request is in them).
                    c.release_buffers();
                    return Interest::Await(wait);
                }
                Ok(Polled::Again) => return Interest::Yield,
                Ok(Polled::Ready(())) => {}
                Err(p) => mpm_core::log_error!(
                    "mpm: the later answer to {} panicked: {p}; answered 500",
                    later.request
                ),
            }
            // Set unless it panicked.
            let answer = ready.get_or_insert_with(|| Response::error(500));
            let Some(mut boxed) = c.take_waiting() else {
                return Interest::Close;
            };
            // Taken in place, not moved out of its box.
            let Waiting::Answer(later) = &mut *boxed else {
                return Interest::Close;
            };
            if let Some(again) = answer.take_later() {
                // An answer that is itself later: it waits in the same box.
                later.answer = again;
                c.set_waiting(boxed);
                continue;
            }
            // An answer that redirects: its request is answered instead
            // (above, on the next pass), in the same box; unless the body
            // broke a limit, which the layer answers (`answer_later`).
            if later
                .upload
                .as_ref()
                .is_some_and(|u| u.outcome().1.is_some())
            {
                drop(answer.take_redirect());
            }
            match Redirected::follow(
                answer,
                later.redirect.as_deref(),
                &self.sender.settings.limits,
            ) {
                Some(Ok(r)) => {
                    later.redirect = Some(r);
                    // A body still arriving is not the new request's: no
                    // more of it is read (nor a `100 Continue` sent, if it
                    // was not yet), and the connection closes after the
                    // answer.
                    if let Some(upload) = later.upload.take() {
                        let (done, failed) = upload.outcome();
                        later.unfinished |= !done || failed.is_some();
                    }
                    c.set_waiting(boxed);
                    continue;
                }
                Some(Err(instead)) => *answer = instead,
                None => {}
            }
            if let Some(r) = later.redirect.as_deref() {
                r.finish(answer);
            }
            self.answer_later(c, s, later, answer);
            // The box is kept for the next answer to come; what it held
            // (the spent future) goes now, as it went when moved out.
            *boxed = Waiting::Vacant;
            self.reader.spare = Some(boxed);
            if !c.is_waiting() {
                // Sent as any answer, then keep-alive (a pipelined request
                // read from the buffer) or the close.
                return self.writable(c, s);
            }
            // A tunnel after this 101, or an answer that is itself later.
        }
    }

    /// Queue the answer a later future came to (not itself later), as
    /// `step` queues what `handle` returns.
    fn answer_later(
        &mut self,
        c: &mut HttpConn,
        s: &mut Stream,
        later: &mut LaterState,
        answer: &mut Response,
    ) {
        // An awaited body that broke a limit, or was cut, is answered by
        // the layer whatever the future made of it; one left on the wire
        // closes the connection after the answer.
        let mut unfinished = later.unfinished;
        if let Some(upload) = later.upload.take() {
            let (done, failed) = upload.outcome();
            if let Some(status) = failed {
                mpm_core::log_info!("mpm: {}: request body refused with {status}", later.request);
                *answer = Response::error(status);
            }
            unfinished |= !done || failed.is_some();
        }
        self.sender.begin_response(c);
        c.log = std::mem::take(&mut later.record);
        c.log.set_status(answer.status);
        self.sender
            .log_upstream(&mut c.log, answer.upstream.as_deref());
        if let Some(slot) = s.score_slot() {
            slot.record_status(answer.status);
        }
        // A server that began stopping meanwhile closes after this answer.
        let keep = later.keep && !s.is_draining() && !unfinished;
        let keep = self
            .sender
            .queue(c, answer, later.is_head, keep, later.version);
        c.after = crate::reading::after(keep, c, unfinished);
    }

    /// [`pump_upload`](Self::pump_upload) for the answer the connection
    /// waits on, its upload taken out of the box for the while.
    fn fill_upload(&mut self, c: &mut HttpConn, s: &mut Stream) -> Option<Interest> {
        let Some(Waiting::Answer(later)) = c.waiting_mut() else {
            return None;
        };
        let mut upload = later.upload.take()?;
        let stop = self.pump_upload(c, s, &mut upload);
        if let Some(Waiting::Answer(later)) = c.waiting_mut() {
            later.upload = Some(upload);
        }
        stop
    }

    /// Move what the client sent of an awaited body into its future's
    /// pipe (`awaited_body.rs`), as much as the pipe has room for: the
    /// bytes buffered first, then reads of the socket until it has no
    /// more (`WouldBlock`: the future then waits for the client's input).
    /// `100 Continue` goes out first, once. A close, a read error or the
    /// body's deadline fails the body (the future's next read says so).
    /// Returns where to stop instead of polling: the `100 Continue` could
    /// not be written whole yet, or the connection failed.
    fn pump_upload(
        &mut self,
        c: &mut HttpConn,
        s: &mut Stream,
        upload: &mut Upload,
    ) -> Option<Interest> {
        if upload.send_continue {
            upload.send_continue = false;
            c.queue_continue();
            match self.sender.write_queued(c, s) {
                Flush::Done => {}
                Flush::Failed => return Some(Interest::Close),
                // The rest once the socket has room; then the body is read.
                stop => {
                    c.interim = true;
                    return Some(stop.interest().unwrap_or(Interest::Close));
                }
            }
        }
        while upload.wants_input() {
            if c.start < c.filled {
                let used = upload.take_input(&c.buf[c.start..c.filled]);
                if used == 0 {
                    break;
                }
                c.consume(used);
                continue;
            }
            // Into the pipe itself when the body needs no decoding, else
            // into the connection's buffer first.
            let read = match upload.read_direct(|buf| s.read(buf)) {
                Some(read) => read.map(|n| (n, false)),
                None => {
                    c.make_room();
                    s.read(&mut c.buf[c.filled..]).map(|n| (n, true))
                }
            };
            match read {
                Ok((0, _)) => upload.fail(400),
                Ok((n, buffered)) => {
                    if buffered {
                        c.filled += n;
                    }
                    upload.received(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Nothing more for now: the deadline is the client's only
                // while the layer asks for its bytes.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let now = mpm_core::turn_clock::now();
                    upload.waiting(now);
                    if now >= upload.deadline() {
                        upload.fail(408);
                    }
                    break;
                }
                Err(_) => upload.fail(400),
            }
        }
        // A WouldBlock here is a wait for the client, not a timeout.
        s.take_would_block();
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    use mpm_core::{ConnectionHandler, Interest, Stream, Wait};

    use crate::{HttpHandler, HttpService, HttpSettings, Request, Response};

    /// Answers with the length of the body it was given.
    struct BodyLength;

    impl HttpHandler for BodyLength {
        fn handle(&mut self, req: &Request<'_>) -> Response {
            Response::new(200).body(req.body().len().to_string())
        }
    }

    fn pair() -> (TcpStream, Stream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (sock, peer) = listener.accept().unwrap();
        let stream = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
        (client, stream)
    }

    /// Answers later, after a timer.
    struct Later;

    impl HttpHandler for Later {
        fn handle(&mut self, _: &Request<'_>) -> Response {
            Response::later(async {
                mpm_core::waiting::sleep(Duration::from_millis(20)).await;
                Response::new(204)
            })
        }
    }

    #[test]
    fn a_connection_waiting_on_a_later_answer_keeps_it_and_is_not_handed_over() {
        let mut svc = HttpService::new(Later, &HttpSettings::default());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        let Interest::Await(wait) = svc.readable(&mut conn, &mut stream) else {
            panic!("not waiting on the answer");
        };
        assert_eq!(wait.fd, None, "a timer");
        // Parked meanwhile: the answer and the pipelined request stay.
        svc.parked(&mut conn);
        assert!(conn.is_waiting());
        assert!(
            conn.start < conn.filled,
            "the next request is still buffered"
        );
        assert!(!svc.can_hand_over(&conn));
        // The loop resumes it inline, reading nothing.
        stream.set_on_event_loop(true);
        assert_eq!(
            svc.prefetch(&mut conn, &mut stream),
            mpm_core::Prefetch::ReadyInline
        );
        std::thread::sleep(Duration::from_millis(25));
        // The answer; then the pipelined request, which this handler does
        // not say it answers without blocking: for a worker.
        assert_eq!(svc.readable(&mut conn, &mut stream), Interest::Yield);
        let mut got = [0u8; 512];
        let n = client.read(&mut got).unwrap();
        assert!(got[..n].starts_with(b"HTTP/1.1 204 No Content\r\n"));
    }

    /// Streams every body, and answers with what it read of it.
    struct StreamedEcho;

    impl HttpHandler for StreamedEcho {
        fn handle(&mut self, req: &Request<'_>) -> Response {
            let mut body = Vec::new();
            match req.body_reader().read_to_end(&mut body) {
                Ok(_) => Response::new(200).body(body),
                Err(e) => Response::new(500).body(e.to_string()),
            }
        }

        fn streams_body(&self, _: &Request<'_>) -> bool {
            true
        }
    }

    /// An embedder's handler reading a streamed chunked body whose data
    /// and last chunk came in one read gets the body's end at once (not a
    /// 408 after the body timeout, here 2 s), and the connection goes on:
    /// a next request, and one pipelined behind such a body, are served.
    #[test]
    fn a_streamed_chunked_body_read_with_its_last_chunk_ends_and_the_connection_goes_on() {
        let settings = HttpSettings {
            request_body_timeout: Duration::from_secs(2),
            ..HttpSettings::default()
        };
        let mut svc = HttpService::new(StreamedEcho, &settings);
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        let upload = b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
                       5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        client.write_all(upload).unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Read(Wait::KeepAlive)
        );
        let mut got = [0u8; 512];
        let n = client.read(&mut got).unwrap();
        let answer = String::from_utf8_lossy(&got[..n]);
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
        assert!(answer.ends_with("\r\n\r\nhello world"), "{answer}");

        // The same body with a request pipelined behind it, in one write.
        let mut both = upload.to_vec();
        both.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        client.write_all(&both).unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        assert_eq!(svc.readable(&mut conn, &mut stream), Interest::Close);
        drop(stream);
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
        let Some(end) = got.find("\r\n\r\nhello world") else {
            panic!("not the whole body: {got}");
        };
        let next = &got[end + 15..];
        assert!(
            next.starts_with("HTTP/1.1 200 ") && next.contains("Connection: close"),
            "the pipelined request: {got}"
        );
    }

    /// Streams every body: reads five bytes of it, and answers with the
    /// length the client announced.
    struct StreamedPeek;

    impl HttpHandler for StreamedPeek {
        fn handle(&mut self, req: &Request<'_>) -> Response {
            let mut five = [0u8; 5];
            match req.body_reader().read_exact(&mut five) {
                Ok(()) => Response::new(200).body(format!("{:?}", req.content_length())),
                Err(e) => Response::new(500).body(e.to_string()),
            }
        }

        fn streams_body(&self, _: &Request<'_>) -> bool {
            true
        }
    }

    /// The answer to `request` sent on a fresh connection of `svc`, whose
    /// client then stops sending (the rest of a large body never comes).
    fn answer_to<H: HttpHandler>(svc: &mut HttpService<H>, request: &[u8]) -> String {
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        client.write_all(request).unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        let _ = svc.readable(&mut conn, &mut stream);
        let mut got = [0u8; 512];
        let n = client.read(&mut got).unwrap();
        String::from_utf8_lossy(&got[..n]).into_owned()
    }

    /// `--limit-request-body 0`: no limit on a streamed body, whatever
    /// length it announces (past 2^31, and the 18 digits a length may
    /// have: nothing overflows), chunked as well; a body read whole is
    /// still held to `WHOLE_BODY_CAP` (413 past it, before any of it).
    #[test]
    fn with_no_body_limit_a_streamed_body_of_any_length_is_taken_and_a_whole_one_is_capped() {
        let settings = HttpSettings {
            limit_request_body: 0,
            ..HttpSettings::default()
        };
        let mut svc = HttpService::new(StreamedPeek, &settings);
        for length in [(1u64 << 31) + 1, 999_999_999_999_999_999] {
            let request =
                format!("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {length}\r\n\r\nhello");
            let answer = answer_to(&mut svc, request.as_bytes());
            assert!(answer.starts_with("HTTP/1.1 200 "), "{length}: {answer}");
            assert!(answer.ends_with(&format!("Some({length})")), "{answer}");
        }
        // A chunk past 2^31, the largest a size line may say.
        for size in ["80000001", "fffffffffffffff"] {
            let request = format!(
                "POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nhello"
            );
            let answer = answer_to(&mut svc, request.as_bytes());
            assert!(answer.starts_with("HTTP/1.1 200 "), "{size}: {answer}");
        }
        let mut svc = HttpService::new(BodyLength, &settings);
        let cap = crate::WHOLE_BODY_CAP;
        let over = format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\nhello",
            cap + 1
        );
        let answer = answer_to(&mut svc, over.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
        let chunked_over = format!(
            "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\nhello",
            cap + 1
        );
        let answer = answer_to(&mut svc, chunked_over.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
        let within = b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
        let answer = answer_to(&mut svc, within);
        assert!(answer.ends_with("\r\n\r\n5"), "{answer}");
    }

    #[test]
    fn a_parked_connection_drops_what_a_chunked_request_needed() {
        let mut svc = HttpService::new(BodyLength, &HttpSettings::default());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        assert!(
            conn.occasional.is_none(),
            "made before any request needs it"
        );
        client
            .write_all(
                b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
                  5\r\nhello\r\n0\r\n\r\n",
            )
            .unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Read(Wait::KeepAlive)
        );
        let mut got = [0u8; 512];
        let n = client.read(&mut got).unwrap();
        let answer = String::from_utf8_lossy(&got[..n]);
        assert!(answer.ends_with("\r\n\r\n5"), "{answer}");
        assert!(conn.occasional.is_some(), "the decoded body lived there");
        svc.parked(&mut conn);
        assert!(
            conn.occasional.is_none(),
            "an idle connection keeps none of it"
        );
    }
}
