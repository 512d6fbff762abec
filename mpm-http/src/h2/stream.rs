//! One stream of a connection, from its HEADERS to its last DATA frame: the
//! request body gathered (its window opened as it is taken), the handler
//! run (on a worker unless it answers without blocking), an answer still
//! to come polled on each resume, and the response sent a window at a
//! time.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use mpm_core::panics::catch;
use mpm_core::scoreboard::Slot;
use mpm_core::waiting::{poll_once, Await, Polled};
use mpm_core::Stream;

use super::connection::State;
use super::pipe::Pipe;
use super::request;
use super::response::{self, Chunk, Outgoing};
use super::stats::{self, Count};
use super::wake::Flag;
use crate::access_log::Record;
use crate::body::BodySource;
use crate::reading::Reader;
use crate::request::{Headers, Request, Version};
use crate::waiting::LaterAnswer;
use crate::writing::Sender;
use crate::{HttpHandler, Response};

/// Most bytes of a body asked of its source, and reserved of the window, at
/// a time.
const CHUNK: usize = 64 * 1024;

/// What one turn of a stream came to.
#[derive(Debug)]
pub(crate) enum Advance {
    /// It waits on the client (DATA, a window update): `h2` wakes the step.
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
    /// Body bytes this step may still hand to `h2` (on a loop, the
    /// per-turn budget `--sendfile-max-chunk`).
    pub(crate) budget: u64,
}

/// What a stream's turn may reach of its connection: a handler that reads
/// its body as it arrives drives the connection itself (`Pump`).
pub(crate) struct Wire<'w> {
    pub(crate) state: &'w mut State,
    pub(crate) pipe: &'w Pipe,
    /// Where streams the connection accepts meanwhile go.
    pub(crate) accepted: &'w mut Vec<StreamTask>,
    pub(crate) stream: &'w mut Stream,
    pub(crate) flag: &'w Arc<Flag>,
}

enum Phase {
    /// The body is arriving; not yet asked whether the handler reads it as
    /// it comes.
    Arriving {
        head: http::request::Parts,
        body: RecvStream,
    },
    /// The body is arriving, and is gathered for the handler.
    Receiving {
        head: http::request::Parts,
        body: RecvStream,
        got: Vec<u8>,
    },
    /// The handler reads the body as it comes: it runs now (off a loop).
    Streaming {
        head: http::request::Parts,
        body: RecvStream,
    },
    /// Whole: for the handler.
    Ready {
        head: http::request::Parts,
        body: Vec<u8>,
    },
    /// The handler's answer is a future.
    Later(LaterAnswer),
    /// The response is going out.
    Sending {
        send: SendStream<Bytes>,
        out: Outgoing,
    },
    Done,
}

/// A stream in progress.
pub(crate) struct StreamTask {
    respond: SendResponse<Bytes>,
    phase: Phase,
    record: Record,
    /// `METHOD target HTTP/2.0`: the access log's and the scoreboard's line.
    line: String,
    is_head: bool,
}

impl StreamTask {
    /// A stream `h2` accepted. A malformed request (RFC 9113 §8.1.1) is
    /// reset with `PROTOCOL_ERROR` at once.
    pub(crate) fn new(req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) -> Self {
        stats::add(Count::Streams);
        let (head, body) = req.into_parts();
        let line = format!("{} {} HTTP/2.0", head.method, request::target(&head));
        let is_head = head.method == http::Method::HEAD;
        let phase = if let Some(why) = request::malformed(&head) {
            mpm_core::log_debug!("mpm: HTTP/2 stream {line:?} malformed: {why}");
            respond.send_reset(Reason::PROTOCOL_ERROR);
            stats::add(Count::StreamsReset);
            Phase::Done
        } else if body.is_end_stream() {
            Phase::Ready {
                head,
                body: Vec::new(),
            }
        } else {
            Phase::Arriving { head, body }
        };
        StreamTask {
            respond,
            phase,
            record: Record::default(),
            line,
            is_head,
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
        cx: &mut Context<'_>,
    ) -> Advance {
        loop {
            let phase = std::mem::replace(&mut self.phase, Phase::Done);
            let (next, outcome) = match phase {
                Phase::Arriving { head, body } => {
                    if self.streams_body(turn, &head) {
                        (Phase::Streaming { head, body }, None)
                    } else {
                        let got = Vec::new();
                        (Phase::Receiving { head, body, got }, None)
                    }
                }
                Phase::Receiving { head, body, got } => self.receive(turn, cx, head, body, got),
                Phase::Streaming { head, body } => self.stream_body(turn, wire, head, body),
                Phase::Ready { head, body } => self.answer(turn, head, body, None),
                Phase::Later(answer) => self.poll_later(turn, cx, answer),
                Phase::Sending { send, out } => self.send(turn, cx, send, out),
                Phase::Done => (Phase::Done, Some(Advance::Done)),
            };
            self.phase = next;
            if let Some(outcome) = outcome {
                if matches!(outcome, Advance::Done) {
                    self.finish(turn);
                }
                return outcome;
            }
        }
    }

    /// The body gathered, bounded by `--limit-request-body` (413 past it).
    fn receive<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        cx: &mut Context<'_>,
        head: http::request::Parts,
        mut body: RecvStream,
        mut got: Vec<u8>,
    ) -> (Phase, Option<Advance>) {
        let limit = turn.sender.settings.limits.body;
        loop {
            match body.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let n = data.len();
                    // Taken: the client may send as much again.
                    let _ = body.flow_control().release_capacity(n);
                    if got.len() as u64 + n as u64 > limit {
                        mpm_core::log_info!("mpm: {}: request body refused with 413", self.line);
                        self.start_log(turn, &head, 413);
                        return (self.respond_with(turn, Response::error(413)), None);
                    }
                    got.extend_from_slice(&data);
                }
                // Reset by the client, or the connection failed.
                Poll::Ready(Some(Err(_))) => return (Phase::Done, Some(Advance::Done)),
                Poll::Ready(None) => return (Phase::Ready { head, body: got }, None),
                Poll::Pending => {
                    return (Phase::Receiving { head, body, got }, Some(Advance::Idle));
                }
            }
        }
    }

    /// Does the handler read this request's body as it arrives?
    fn streams_body<H: HttpHandler>(
        &self,
        turn: &mut Turn<'_, H>,
        head: &http::request::Parts,
    ) -> bool {
        let fields = request::fields(head);
        let req = Request {
            method: head.method.as_str(),
            target: request::target(head),
            version: Version::Http2,
            headers: Headers::Parsed(&fields),
            body: &[],
            stream: None,
            params: &[],
            peer: turn.peer,
            secure: turn.secure,
            pool: turn.reader.arena.pool(),
        };
        catch(|| turn.reader.handler.streams_body(&req)).unwrap_or(false)
    }

    /// A handler that reads the body as it comes: run now, off a loop, its
    /// reads driving the connection (`Pump`).
    fn stream_body<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        wire: &mut Wire<'_>,
        head: http::request::Parts,
        body: RecvStream,
    ) -> (Phase, Option<Advance>) {
        if turn.on_loop {
            return (Phase::Streaming { head, body }, Some(Advance::NeedsWorker));
        }
        let settings = &turn.sender.settings;
        let pump = RefCell::new(Pump {
            wire,
            body,
            pending: Bytes::new(),
            got: 0,
            limit: settings.limits.body,
            deadline: mpm_core::deadline(Instant::now(), settings.request_body_timeout),
            failed: None,
            ended: false,
        });
        let (phase, outcome) = self.answer(turn, head, Vec::new(), Some(&pump));
        let failed = pump.into_inner().failed;
        match failed {
            Some(status) => {
                mpm_core::log_info!("mpm: {}: request body refused with {status}", self.line);
                // What the handler answered is dropped for the refusal.
                if let Phase::Sending { mut send, .. } = phase {
                    send.send_reset(Reason::CANCEL);
                    return (Phase::Done, Some(Advance::Done));
                }
                self.record.set_status(status);
                (self.respond_with(turn, Response::error(status)), None)
            }
            None => (phase, outcome),
        }
    }

    /// The handler's turn: on a loop only if it answers without blocking.
    fn answer<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        head: http::request::Parts,
        body: Vec<u8>,
        stream: Option<&dyn BodySource>,
    ) -> (Phase, Option<Advance>) {
        let fields = request::fields(&head);
        let req = Request {
            method: head.method.as_str(),
            target: request::target(&head),
            version: Version::Http2,
            headers: Headers::Parsed(&fields),
            body: &body,
            stream,
            params: &[],
            peer: turn.peer,
            secure: turn.secure,
            pool: turn.reader.arena.pool(),
        };
        if turn.on_loop
            && !catch(|| turn.reader.handler.answers_without_blocking(&req)).unwrap_or(false)
        {
            return (Phase::Ready { head, body }, Some(Advance::NeedsWorker));
        }
        let handler = &mut turn.reader.handler;
        let answer = catch(|| handler.handle(&req));
        // The response owns all it holds: the request's scratch can go.
        turn.reader.arena.reset();
        let mut answer = answer.unwrap_or_else(|p| {
            mpm_core::log_error!("mpm: handler panicked on {}: {p}; answered 500", self.line);
            Response::error(500)
        });
        turn.sender
            .log_start(&mut self.record, self.line.as_bytes(), Some(&fields), 0);
        if let Some(slot) = turn.slot {
            slot.record_request(self.line.as_bytes(), answer.body_ref().len().unwrap_or(0));
        }
        match answer.take_later() {
            Some(later) => (Phase::Later(later), None),
            None => (self.respond_with(turn, answer), None),
        }
    }

    fn start_log<H>(&mut self, turn: &mut Turn<'_, H>, head: &http::request::Parts, status: u16) {
        let fields = request::fields(head);
        turn.sender.log_start(
            &mut self.record,
            self.line.as_bytes(),
            Some(&fields),
            status,
        );
    }

    /// An answer still to come: polled once a resume. A client that reset
    /// the stream meanwhile ends it (the future is dropped).
    fn poll_later<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        cx: &mut Context<'_>,
        mut answer: LaterAnswer,
    ) -> (Phase, Option<Advance>) {
        if self.respond.poll_reset(cx).is_ready() {
            return (Phase::Done, Some(Advance::Done));
        }
        match catch(|| poll_once(answer.as_mut())) {
            Ok(Polled::Wait(wait)) => (Phase::Later(answer), Some(Advance::Wait(wait))),
            Ok(Polled::Again) => (Phase::Later(answer), Some(Advance::Again)),
            Ok(Polled::Ready(mut r)) => match r.take_later() {
                Some(again) => (Phase::Later(again), None),
                None => (self.respond_with(turn, r), None),
            },
            Err(p) => {
                mpm_core::log_error!(
                    "mpm: the later answer to {} panicked: {p}; answered 500",
                    self.line
                );
                (self.respond_with(turn, Response::error(500)), None)
            }
        }
    }

    /// Send the head; the body follows in `send`.
    fn respond_with<H>(&mut self, turn: &mut Turn<'_, H>, answer: Response) -> Phase {
        let parts = answer.into_parts();
        self.record.set_status(parts.status);
        turn.sender
            .log_upstream(&mut self.record, parts.upstream.as_deref());
        if let Some(slot) = turn.slot {
            slot.record_status(parts.status);
        }
        let (head, body) = response::head(&turn.sender.settings, parts, self.is_head);
        let out = Outgoing::new(body);
        let end = out.is_empty();
        match self.respond.send_response(head, end) {
            Ok(send) if !end => Phase::Sending { send, out },
            _ => Phase::Done,
        }
    }

    /// The body, as the stream's window and the step's budget allow.
    fn send<H>(
        &mut self,
        turn: &mut Turn<'_, H>,
        cx: &mut Context<'_>,
        mut send: SendStream<Bytes>,
        mut out: Outgoing,
    ) -> (Phase, Option<Advance>) {
        loop {
            if turn.budget == 0 {
                return (Phase::Sending { send, out }, Some(Advance::Again));
            }
            send.reserve_capacity(CHUNK);
            let room = send.capacity();
            if room == 0 {
                match send.poll_capacity(cx) {
                    Poll::Ready(Some(Ok(_))) => continue,
                    Poll::Ready(Some(Err(_))) | Poll::Ready(None) => {
                        self.record.set_body_sent(out.sent);
                        return (Phase::Done, Some(Advance::Done));
                    }
                    Poll::Pending => return (Phase::Sending { send, out }, Some(Advance::Idle)),
                }
            }
            let max = room.min(usize::try_from(turn.budget).unwrap_or(usize::MAX));
            let outcome = match out.next(max, turn.on_loop) {
                Chunk::Data(bytes, last) => {
                    turn.budget = turn.budget.saturating_sub(bytes.len() as u64);
                    if send.send_data(bytes, last).is_err() || last {
                        Some(Advance::Done)
                    } else {
                        None
                    }
                }
                Chunk::End => {
                    let _ = send.send_data(Bytes::new(), true);
                    Some(Advance::Done)
                }
                Chunk::Wait(w) => {
                    // Waiting on its source (an upstream), it holds no
                    // window: what it reserved goes back to the connection,
                    // for the other streams meanwhile.
                    send.reserve_capacity(0);
                    Some(Advance::Wait(w))
                }
                Chunk::Again => Some(Advance::Again),
                Chunk::NeedsWorker => Some(Advance::NeedsWorker),
                Chunk::Failed(why) => {
                    mpm_core::log_error!("mpm: {}: {why}; stream reset", self.line);
                    send.send_reset(Reason::INTERNAL_ERROR);
                    stats::add(Count::StreamsReset);
                    Some(Advance::Done)
                }
            };
            match outcome {
                None => continue,
                Some(Advance::Done) => {
                    self.record.set_body_sent(out.sent);
                    return (Phase::Done, Some(Advance::Done));
                }
                Some(other) => return (Phase::Sending { send, out }, Some(other)),
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

    /// The connection ends with the stream unfinished: its line says so
    /// with what was sent.
    pub(crate) fn abandon<H>(&mut self, turn: &mut Turn<'_, H>) {
        if let Phase::Sending { out, .. } = &self.phase {
            self.record.set_body_sent(out.sent);
        }
        self.phase = Phase::Done;
        self.finish(turn);
    }
}

/// A streamed request body, read from the stream's DATA frames; with none
/// there, the connection is driven: its frames out (window updates among
/// them), one read of the socket within what is left of the body timeout,
/// the frames in. Other streams' frames are read on the way, and streams
/// the client opens meanwhile wait for the step to take them.
struct Pump<'w, 'x> {
    wire: &'x mut Wire<'w>,
    body: RecvStream,
    /// Bytes of the last frame not yet given to the handler.
    pending: Bytes,
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
        let waker = self.wire.flag.waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            if !self.pending.is_empty() {
                let n = buf.len().min(self.pending.len());
                buf[..n].copy_from_slice(&self.pending.split_to(n));
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
            match self.body.poll_data(&mut cx) {
                Poll::Ready(Some(Ok(data))) => {
                    let _ = self.body.flow_control().release_capacity(data.len());
                    self.got += data.len() as u64;
                    if self.got > self.limit {
                        self.failed = Some(413);
                        continue;
                    }
                    self.pending = data;
                }
                Poll::Ready(Some(Err(e))) => return Err(io::Error::other(e)),
                Poll::Ready(None) => self.ended = true,
                Poll::Pending => self.more(&mut cx)?,
            }
        }
    }

    /// Frames out, one read of the socket, frames in.
    fn more(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let w = &mut *self.wire;
        let _ = super::connection::drive(w.state, w.accepted, cx);
        let left = self.deadline.saturating_duration_since(Instant::now());
        let stream = &mut *w.stream;
        w.pipe
            .write_to(|b| stream.write_all_within(b, left).map(|()| b.len()))?;
        if w.flag.take() || w.pipe.take_blocked() {
            return Ok(());
        }
        if left.is_zero() {
            self.failed = Some(408);
            return Ok(());
        }
        let mut chunk = [0u8; 16 * 1024];
        let room = w.pipe.input_room().clamp(1, chunk.len());
        match stream.read_within(&mut chunk[..room], left) {
            Ok(0) => w.pipe.end_input(),
            Ok(n) => w.pipe.push_input(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => self.failed = Some(408),
            Err(e) => return Err(e),
        }
        let _ = super::connection::drive(w.state, w.accepted, cx);
        Ok(())
    }
}
