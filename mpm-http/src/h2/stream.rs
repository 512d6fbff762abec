//! One stream of a connection, from its HEADERS to its last DATA frame: the
//! request body gathered (its window opened as it is taken), or read as it
//! comes by the handler's thread (`Pump`) or its future (`awaited_body.rs`,
//! filled before each poll), the handler run (on a worker unless it
//! answers without blocking), an answer still
//! to come polled on each resume, and the response sent a window at a
//! time.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use mpm_core::panics::catch;
use mpm_core::scoreboard::Slot;
use mpm_core::waiting::{poll_once, Await, Polled};
use mpm_core::Stream;
use mpm_h2::{Reason, RequestHead};
use smallvec::SmallVec;

use super::connection::Link;
use super::request;
use super::response::{self, Chunk, Outgoing};
use crate::access_log::Record;
use crate::awaited_body::{AwaitedBody, Upload};
use crate::body::{BodySource, Timing};
use crate::internal_redirect::Redirected;
use crate::reading::Reader;
use crate::request::{Headers, Request, Version};
use crate::waiting::LaterAnswer;
use crate::writing::Sender;
use crate::{HttpHandler, Response};

/// Most bytes of a body asked of its source at a time.
const CHUNK: usize = 64 * 1024;

/// What one turn of a stream came to.
#[derive(Debug)]
pub(crate) enum Advance {
    /// It waits on the client (DATA, a window update): an event for it
    /// brings the step back.
    Idle,
    /// It waits on a descriptor of its own, or a timer.
    Wait(Await),
    /// It has more to do at once (a budget spent, a source that said so).
    Again,
    /// Its next move may block and the step runs on a loop.
    NeedsWorker,
    /// Finished (answered, reset, or refused).
    Done,
}

/// What a step lends each stream's turn.
pub(crate) struct Turn<'t, H> {
    pub(crate) reader: &'t mut Reader<H>,
    pub(crate) sender: &'t mut Sender,
    pub(crate) on_loop: bool,
    pub(crate) peer: SocketAddr,
    pub(crate) secure: bool,
    pub(crate) slot: Option<&'static Slot>,
    /// Body bytes this step may still hand to the codec (on a loop, the
    /// per-turn budget `--sendfile-max-chunk`).
    pub(crate) budget: u64,
}

/// What a stream's turn may reach of its connection: the codec, what
/// arrived for each stream, and the socket (a handler that reads its body
/// as it arrives drives the connection itself: `Pump`).
pub(crate) struct Wire<'w> {
    pub(crate) link: &'w mut Link,
    pub(crate) stream: &'w mut Stream,
}

/// What arrived for one stream and it has not taken yet.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) id: u32,
    /// Body octets received, not yet taken (bounded by the stream's
    /// receive window: the codec enforces it).
    pub(crate) body: Vec<u8>,
    /// The body ended (END_STREAM, or trailers).
    pub(crate) ended: bool,
    /// The stream was reset (by the client, or by the codec for an error
    /// of the client's).
    pub(crate) reset: bool,
}

enum Phase {
    /// The body is arriving; not yet asked whether the handler reads it as
    /// it comes.
    Arriving,
    /// The body is arriving, and is gathered for the handler.
    Receiving {
        got: Vec<u8>,
    },
    /// The handler reads the body as it comes: it runs now (off a loop).
    Streaming,
    /// The handler's future reads the body as it comes
    /// ([`HttpHandler::awaits_body`]): it runs now (on a loop if it
    /// answers without blocking).
    Awaiting,
    /// Whole: for the handler.
    Ready {
        body: Vec<u8>,
    },
    /// The handler's answer is a future.
    Later(LaterAnswer),
    /// The response is going out.
    Sending {
        out: Outgoing,
    },
    Done,
}

/// A stream in progress. Its head (one allocation, made by the codec) is
/// kept for its life: the access log's and the scoreboard's request line
/// and the error log's lines are made from it when they are written, not
/// kept in a string of their own.
pub(crate) struct StreamTask {
    id: u32,
    head: RequestHead,
    phase: Phase,
    record: Record,
    is_head: bool,
    /// The body its answer's future reads, filled from what arrives
    /// before each poll (`Awaiting`).
    upload: Option<Box<Upload>>,
    /// The internal redirect being followed, if an answer asked for one:
    /// the handler is asked for its request (`Ready` again) instead of the
    /// stream's own (`internal_redirect.rs`).
    redirect: Option<Box<Redirected>>,
}

/// `METHOD target HTTP/2.0`, for the error log.
struct Line<'h>(&'h RequestHead);

impl std::fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} HTTP/2.0",
            request::method(self.0),
            request::target(self.0)
        )
    }
}

/// `METHOD target HTTP/2.0`, for the access log and the scoreboard: on
/// the stack unless the target is long.
fn request_line(head: &RequestHead) -> SmallVec<[u8; 256]> {
    let mut line = SmallVec::new();
    line.extend_from_slice(request::method(head).as_bytes());
    line.push(b' ');
    line.extend_from_slice(request::target(head).as_bytes());
    line.extend_from_slice(b" HTTP/2.0");
    line
}

impl StreamTask {
    /// A stream the codec accepted, its head checked (`request::malformed`).
    pub(crate) fn new(id: u32, head: RequestHead, end_stream: bool) -> Self {
        let is_head = head.method() == b"HEAD";
        let phase = if end_stream {
            Phase::Ready { body: Vec::new() }
        } else {
            Phase::Arriving
        };
        StreamTask {
            id,
            head,
            phase,
            record: Record::default(),
            is_head,
            upload: None,
            redirect: None,
        }
    }

    /// Is it done?
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Go as far as it can now.
    pub(crate) fn advance<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        wire: &mut Wire<'_>,
    ) -> Advance {
        loop {
            let phase = std::mem::replace(&mut self.phase, Phase::Done);
            let (next, outcome) = match phase {
                Phase::Arriving => {
                    // A future reads it where waiting costs no thread.
                    if !wire.stream.is_blocking() && self.asks(turn, H::awaits_body) {
                        (Phase::Awaiting, None)
                    } else if self.asks(turn, H::streams_body) {
                        (Phase::Streaming, None)
                    } else {
                        let got = Vec::new();
                        (Phase::Receiving { got }, None)
                    }
                }
                Phase::Receiving { got } => self.receive(turn, wire.link, got),
                Phase::Streaming => self.stream_body(turn, wire),
                Phase::Awaiting => self.await_body(turn, wire.link),
                Phase::Ready { body } => self.answer(turn, wire.link, body, None),
                Phase::Later(answer) => self.poll_later(turn, wire.link, answer),
                Phase::Sending { out } => self.send(turn, wire.link, out),
                Phase::Done => (Phase::Done, Some(Advance::Done)),
            };
            self.phase = next;
            if let Some(outcome) = outcome {
                if matches!(outcome, Advance::Done) {
                    self.finish(turn);
                    wire.link.forget(self.id);
                }
                return outcome;
            }
        }
    }

    /// The body gathered whole, in memory: bounded by
    /// `--limit-request-body`, or by the whole-body cap where it is 0 (413
    /// past it: at once for a `content-length` past it, before the body).
    fn receive<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        link: &mut Link,
        mut got: Vec<u8>,
    ) -> (Phase, Option<Advance>) {
        let limit = turn.sender.settings.limits.whole_body;
        let announced = self.head.content_length().is_some_and(|n| n > limit);
        let Some(inbound) = link.inbound(self.id) else {
            return (Phase::Done, Some(Advance::Done));
        };
        if inbound.reset {
            return (Phase::Done, Some(Advance::Done));
        }
        let n = inbound.body.len();
        let ended = inbound.ended;
        if announced || (got.len() as u64).saturating_add(n as u64) > limit {
            inbound.body = Vec::new();
            link.codec.release_capacity(self.id, n);
            mpm_core::log_info!("mpm: {}: request body refused with 413", Line(&self.head));
            self.start_log(turn, 413);
            return (self.respond_with(turn, link, Response::error(413)), None);
        }
        if got.is_empty() {
            got = std::mem::take(&mut inbound.body);
        } else {
            got.extend_from_slice(&inbound.body);
            inbound.body.clear();
        }
        // Taken: the client may send as much again.
        if n > 0 {
            link.codec.release_capacity(self.id, n);
        }
        if ended {
            (Phase::Ready { body: got }, None)
        } else {
            (Phase::Receiving { got }, Some(Advance::Idle))
        }
    }

    /// One of the handler's questions about the request (does it read the
    /// body as it arrives, from its thread or its future?); a panic in it
    /// counts as no.
    fn asks<H: HttpHandler>(
        &self,
        turn: &mut Turn<'_, H>,
        question: fn(&H, &Request<'_>) -> bool,
    ) -> bool {
        let head = &self.head;
        let fields = request::fields(head);
        let req = Request {
            method: request::method(head),
            target: request::target(head),
            version: Version::Http2,
            headers: Headers::Parsed(&fields),
            body: &[],
            stream: None,
            awaited: None,
            params: &[],
            peer: turn.peer,
            secure: turn.secure,
            pool: turn.reader.arena.pool(),
            framing: None,
            internal: false,
        };
        catch(|| question(&turn.reader.handler, &req)).unwrap_or(false)
    }

    /// The handler run with its body to be read by its future: the answer
    /// is that future (the body fills its pipe as it arrives: `poll_later`),
    /// or one made at once, the body unread (the rest of it is dropped as
    /// it comes, its window given back).
    fn await_body<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        link: &mut Link,
    ) -> (Phase, Option<Advance>) {
        let settings = &turn.sender.settings;
        let timing = Timing::of(settings, Instant::now());
        let (upload, handle) =
            Upload::for_frames(settings.limits.body, self.head.content_length(), timing);
        let Some(mut answer) = self.run_with(turn, &[], (None, Some(&handle))) else {
            return (Phase::Awaiting, Some(Advance::NeedsWorker));
        };
        match answer.take_later() {
            Some(later) => {
                self.upload = Some(Box::new(upload));
                (Phase::Later(later), None)
            }
            None => (self.respond_with(turn, link, answer), None),
        }
    }

    /// Move what arrived of an awaited body into its future's pipe (as
    /// much as it takes), the stream's window opened by as much; its end,
    /// once all of it is taken; a 408 past the body's deadline, reckoned
    /// only while the pipe has room and nothing has arrived (time the
    /// layer does not take what is there is not the client's).
    fn fill_upload(&mut self, link: &mut Link) {
        let Some(up) = self.upload.as_mut() else {
            return;
        };
        if !up.wants_input() {
            return;
        }
        let Some(inbound) = link.inbound(self.id) else {
            return;
        };
        let taken = up.take_input(&inbound.body);
        inbound.body.drain(..taken);
        let (rest, ended) = (inbound.body.len(), inbound.ended);
        if taken > 0 {
            link.codec.release_capacity(self.id, taken);
            up.received(taken);
        }
        if ended && rest == 0 {
            up.end_of_frames();
        } else if rest == 0 && up.wants_input() {
            let now = mpm_core::turn_clock::now();
            up.waiting(now);
            if now >= up.deadline() {
                up.fail(408);
            }
        }
    }

    /// Does the stream hold more of an awaited body than its pipe took (or
    /// its end, not yet passed on) while the pipe has room for it?
    fn upload_has_more(&self, link: &mut Link) -> bool {
        self.upload.as_ref().is_some_and(|up| up.wants_input())
            && link
                .inbound(self.id)
                .is_some_and(|i| !i.body.is_empty() || i.ended)
    }

    /// A handler that reads the body as it comes: run now, off a loop, its
    /// reads driving the connection (`Pump`).
    fn stream_body<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        wire: &mut Wire<'_>,
    ) -> (Phase, Option<Advance>) {
        if turn.on_loop {
            return (Phase::Streaming, Some(Advance::NeedsWorker));
        }
        let settings = &turn.sender.settings;
        let pump = RefCell::new(Pump {
            wire,
            id: self.id,
            pending: Vec::new(),
            at: 0,
            got: 0,
            limit: settings.limits.body,
            deadline: mpm_core::deadline(Instant::now(), settings.request_body_timeout),
            failed: None,
            ended: false,
        });
        let (phase, outcome) = self.answer_pumped(turn, &pump);
        let pump = pump.into_inner();
        let failed = pump.failed;
        let link = &mut *pump.wire.link;
        match failed {
            Some(status) => {
                mpm_core::log_info!(
                    "mpm: {}: request body refused with {status}",
                    Line(&self.head)
                );
                // What the handler answered is dropped for the refusal.
                if let Phase::Sending { .. } = phase {
                    link.codec.reset(self.id, Reason::CANCEL);
                    return (Phase::Done, Some(Advance::Done));
                }
                self.record.set_status(status);
                (self.respond_with(turn, link, Response::error(status)), None)
            }
            None => (phase, outcome),
        }
    }

    /// The handler run with its body read as it comes.
    fn answer_pumped<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        pump: &RefCell<Pump<'_, '_>>,
    ) -> (Phase, Option<Advance>) {
        // Off a loop (`stream_body`): the handler runs.
        let Some(mut answer) = self.run(turn, &[], Some(pump)) else {
            return (Phase::Done, Some(Advance::Done));
        };
        match answer.take_later() {
            Some(later) => (Phase::Later(later), None),
            None => {
                let mut p = pump.borrow_mut();
                if p.failed.is_some() {
                    // The refusal is answered instead (stream_body).
                    return (Phase::Done, None);
                }
                let link = &mut *p.wire.link;
                (self.respond_with(turn, link, answer), None)
            }
        }
    }

    /// The handler's call, its access-log start and the scoreboard's line;
    /// `None` on a loop when the handler may block.
    fn run<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        body: &[u8],
        stream: Option<&dyn BodySource>,
    ) -> Option<Response> {
        self.run_with(turn, body, (stream, None))
    }

    /// [`run`](Self::run), with a body for the handler's future too.
    fn run_with<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        body: &[u8],
        (stream, awaited): (Option<&dyn BodySource>, Option<&AwaitedBody>),
    ) -> Option<Response> {
        if let Some(r) = self.redirect.as_deref() {
            // Its log line and the scoreboard's count were made with the
            // client's request.
            let answer = r.answer(
                &mut turn.reader.handler,
                turn.reader.arena.pool(),
                &turn.sender.settings.limits,
                (Version::Http2, turn.on_loop),
                (turn.peer, turn.secure),
            );
            turn.reader.arena.reset();
            return answer;
        }
        let head = &self.head;
        let fields = request::fields(head);
        let req = Request {
            method: request::method(head),
            target: request::target(head),
            version: Version::Http2,
            headers: Headers::Parsed(&fields),
            body,
            stream,
            awaited,
            params: &[],
            peer: turn.peer,
            secure: turn.secure,
            pool: turn.reader.arena.pool(),
            framing: None,
            internal: false,
        };
        if turn.on_loop
            && !catch(|| turn.reader.handler.answers_without_blocking(&req)).unwrap_or(false)
        {
            return None;
        }
        let handler = &mut turn.reader.handler;
        let answer = catch(|| handler.handle(&req));
        // The response owns all it holds: the request's scratch can go.
        turn.reader.arena.reset();
        let answer = answer.unwrap_or_else(|p| {
            mpm_core::log_error!("mpm: handler panicked on {}: {p}; answered 500", Line(head));
            Response::error(500)
        });
        let line = request_line(head);
        turn.sender
            .log_start(&mut self.record, &line, Some(&fields), 0);
        if let Some(slot) = turn.slot {
            slot.record_request(&line, answer.body_ref().len().unwrap_or(0));
        }
        Some(answer)
    }

    /// The handler's turn: on a loop only if it answers without blocking.
    fn answer<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        link: &mut Link,
        body: Vec<u8>,
        stream: Option<&dyn BodySource>,
    ) -> (Phase, Option<Advance>) {
        // A redirect's request for a stream the client reset meanwhile:
        // not asked (it may go to an upstream).
        if self.redirect.is_some() && link.inbound(self.id).is_some_and(|i| i.reset) {
            return (Phase::Done, Some(Advance::Done));
        }
        let Some(mut answer) = self.run(turn, &body, stream) else {
            return (Phase::Ready { body }, Some(Advance::NeedsWorker));
        };
        match answer.take_later() {
            Some(later) => (Phase::Later(later), None),
            None => (self.respond_with(turn, link, answer), None),
        }
    }

    fn start_log<H>(&mut self, turn: &mut Turn<'_, H>, status: u16) {
        let fields = request::fields(&self.head);
        let line = request_line(&self.head);
        turn.sender
            .log_start(&mut self.record, &line, Some(&fields), status);
    }

    /// An answer still to come: polled once a resume. A client that reset
    /// the stream meanwhile ends it (the future is dropped).
    fn poll_later<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        link: &mut Link,
        mut answer: LaterAnswer,
    ) -> (Phase, Option<Advance>) {
        if link.inbound(self.id).is_none_or(|i| i.reset) {
            // Given up by the client: dropped, and what it waited on with
            // it (an upstream's connection closes); its line says 499, as
            // nginx's.
            self.record.set_status(499);
            self.finish(turn);
            return (Phase::Done, Some(Advance::Done));
        }
        let polled = loop {
            self.fill_upload(link);
            match catch(|| poll_once(answer.as_mut())) {
                // Waiting for the client's bytes while some arrived that
                // the pipe had no room for: into it, and poll again (no
                // new frame would come to wake the stream).
                Ok(Polled::Wait(w)) if w.client_read && self.upload_has_more(link) => {}
                other => break other,
            }
        };
        match polled {
            Ok(Polled::Wait(wait)) => (Phase::Later(answer), Some(Advance::Wait(wait))),
            Ok(Polled::Again) => (Phase::Later(answer), Some(Advance::Again)),
            Ok(Polled::Ready(mut r)) => match r.take_later() {
                Some(again) => (Phase::Later(again), None),
                None => {
                    // An awaited body that broke a limit is answered by
                    // the layer, whatever the future made of it.
                    if let Some(status) = self.upload.take().and_then(|u| u.outcome().1) {
                        mpm_core::log_info!(
                            "mpm: {}: request body refused with {status}",
                            Line(&self.head)
                        );
                        r = Response::error(status);
                    }
                    (self.respond_with(turn, link, r), None)
                }
            },
            Err(p) => {
                mpm_core::log_error!(
                    "mpm: the later answer to {} panicked: {p}; answered 500",
                    Line(&self.head)
                );
                (self.respond_with(turn, link, Response::error(500)), None)
            }
        }
    }

    /// Send the head (written straight into the codec's output); the body
    /// follows in `send`.
    fn respond_with<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        link: &mut Link,
        answer: Response,
    ) -> Phase {
        let mut parts = answer;
        // An answer that redirects: the handler is asked for its request
        // (`run_with`), as for a stream whose body has come.
        match Redirected::follow(
            &mut parts,
            self.redirect.as_deref(),
            &turn.sender.settings.limits,
        ) {
            Some(Ok(r)) => {
                self.redirect = Some(r);
                return Phase::Ready { body: Vec::new() };
            }
            Some(Err(instead)) => parts = instead,
            None => {}
        }
        if let Some(r) = self.redirect.as_deref() {
            r.finish(&mut parts);
        }
        self.record.set_status(parts.status);
        turn.sender
            .log_upstream(&mut self.record, parts.upstream.as_deref());
        if let Some(slot) = turn.slot {
            slot.record_status(parts.status);
        }
        let (head, body) = response::head(&turn.sender.settings, parts, self.is_head);
        let out = Outgoing::new(body);
        let end = out.is_empty();
        let sent = link
            .codec
            .start_headers(self.id, head.status, end)
            .and_then(|mut block| {
                head.write(&mut block);
                block.finish()
            });
        match sent {
            Ok(()) if !end => Phase::Sending { out },
            _ => Phase::Done,
        }
    }

    /// The body, as the stream's and the connection's windows and the
    /// step's budget allow. A stream with no window waits for the codec's
    /// `SendCapacity`; one waiting on its source holds no window (the codec
    /// takes window only as DATA is written).
    fn send<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        link: &mut Link,
        mut out: Outgoing,
    ) -> (Phase, Option<Advance>) {
        loop {
            if turn.budget == 0 {
                return (Phase::Sending { out }, Some(Advance::Again));
            }
            if link.inbound(self.id).is_none_or(|i| i.reset) {
                self.record.set_body_sent(out.sent);
                return (Phase::Done, Some(Advance::Done));
            }
            let room = link.codec.send_capacity(self.id);
            if room == 0 {
                // The codec says when its window opens.
                link.codec.wait_capacity(self.id);
                return (Phase::Sending { out }, Some(Advance::Idle));
            }
            let max = room
                .min(CHUNK)
                .min(usize::try_from(turn.budget).unwrap_or(usize::MAX));
            let outcome = match out.next(max, turn.on_loop) {
                Chunk::Data(bytes, last) => {
                    turn.budget = turn.budget.saturating_sub(bytes.len() as u64);
                    match link.codec.send_data(self.id, bytes, last) {
                        Ok(_) if !last => None,
                        _ => Some(Advance::Done),
                    }
                }
                Chunk::End => {
                    let _ = link.codec.send_data(self.id, &[], true);
                    Some(Advance::Done)
                }
                Chunk::Wait(w) => Some(Advance::Wait(w)),
                Chunk::Again => Some(Advance::Again),
                Chunk::NeedsWorker => Some(Advance::NeedsWorker),
                Chunk::Failed(why) => {
                    mpm_core::log_error!("mpm: {}: {why}; stream reset", Line(&self.head));
                    link.codec.reset(self.id, Reason::INTERNAL_ERROR);
                    Some(Advance::Done)
                }
            };
            match outcome {
                None => continue,
                Some(Advance::Done) => {
                    self.record.set_body_sent(out.sent);
                    return (Phase::Done, Some(Advance::Done));
                }
                Some(other) => return (Phase::Sending { out }, Some(other)),
            }
        }
    }

    /// Its access-log line, once.
    fn finish<H>(&mut self, turn: &mut Turn<'_, H>) {
        if let Some(log) = &mut turn.sender.log
            && self.record.is_active()
        {
            log.write(&mut self.record, turn.peer.ip(), false);
        }
    }

    /// The client closed the connection before the stream's answer
    /// began: its line says 499, as nginx's.
    pub(crate) fn client_gone(&mut self) {
        if !matches!(self.phase, Phase::Sending { .. } | Phase::Done) {
            self.record.set_status(499);
        }
    }

    /// The connection ends with the stream unfinished: its line says so
    /// with what was sent.
    pub(crate) fn abandon<H>(&mut self, turn: &mut Turn<'_, H>) {
        if let Phase::Sending { out } = &self.phase {
            self.record.set_body_sent(out.sent);
        }
        self.phase = Phase::Done;
        self.finish(turn);
    }
}

/// A streamed request body, read from what arrived for the stream; with
/// nothing there, the connection is driven: its frames out (window
/// updates among them), one read of the socket within what is left of the
/// body timeout, the frames in. Other streams' frames are read on the
/// way (their body kept for them), and streams the client opens meanwhile
/// wait for the step to take them.
struct Pump<'w, 'x> {
    wire: &'x mut Wire<'w>,
    id: u32,
    /// Octets taken from the stream's inbound body, not yet given to the
    /// handler (from `at`).
    pending: Vec<u8>,
    at: usize,
    got: u64,
    limit: u64,
    deadline: Instant,
    /// A limit or the timeout was passed: the answer is this status.
    failed: Option<u16>,
    ended: bool,
}

impl BodySource for RefCell<Pump<'_, '_>> {
    fn read_body(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self.try_borrow_mut() {
            Ok(mut pump) => pump.read(buf),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "body is being read",
            )),
        }
    }
}

impl Pump<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.at < self.pending.len() {
                let n = buf.len().min(self.pending.len() - self.at);
                buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            if let Some(status) = self.failed {
                return Err(io::Error::other(format!(
                    "request body refused with {status}"
                )));
            }
            if self.ended || buf.is_empty() {
                return Ok(0);
            }
            let link = &mut *self.wire.link;
            let Some(inbound) = link.inbound(self.id) else {
                return Err(io::Error::other("the stream was reset"));
            };
            if inbound.reset {
                return Err(io::Error::other("the stream was reset"));
            }
            if !inbound.body.is_empty() {
                self.pending.clear();
                std::mem::swap(&mut self.pending, &mut inbound.body);
                self.at = 0;
                let n = self.pending.len();
                link.codec.release_capacity(self.id, n);
                self.got += n as u64;
                if self.got > self.limit {
                    self.failed = Some(413);
                    self.pending.clear();
                }
                continue;
            }
            if inbound.ended {
                self.ended = true;
                continue;
            }
            self.more()?;
        }
    }

    /// Frames out, one read of the socket, frames in.
    fn more(&mut self) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let w = &mut *self.wire;
        w.link.flush_within(w.stream, left)?;
        if left.is_zero() {
            self.failed = Some(408);
            return Ok(());
        }
        match w.link.read_within(w.stream, left) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => self.failed = Some(408),
            Err(e) => return Err(e),
        }
        if w.link.failed.is_some() {
            return Err(io::Error::other("the HTTP/2 connection failed"));
        }
        Ok(())
    }
}
