//! One stream of a connection, from its HEADERS to its last DATA frame: the
//! request body gathered (its window opened as it is taken), the handler
//! run (on a worker unless it answers without blocking), an answer still
//! to come polled on each resume, and the response sent a window at a
//! time.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use mpm_core::panics::catch;
use mpm_core::scoreboard::Slot;
use mpm_core::waiting::{poll_once, Await, Polled};

use super::request;
use super::response::{self, Chunk, Outgoing};
use super::stats::{self, Count};
use crate::access_log::Record;
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

enum Phase {
    /// The body is arriving.
    Receiving {
        head: http::request::Parts,
        body: RecvStream,
        got: Vec<u8>,
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
            Phase::Receiving {
                head,
                body,
                got: Vec::new(),
            }
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
        cx: &mut Context<'_>,
    ) -> Advance {
        loop {
            let phase = std::mem::replace(&mut self.phase, Phase::Done);
            let (next, outcome) = match phase {
                Phase::Receiving { head, body, got } => self.receive(turn, cx, head, body, got),
                Phase::Ready { head, body } => self.answer(turn, head, body),
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

    /// The handler's turn: on a loop only if it answers without blocking.
    fn answer<H: HttpHandler>(
        &mut self,
        turn: &mut Turn<'_, H>,
        head: http::request::Parts,
        body: Vec<u8>,
    ) -> (Phase, Option<Advance>) {
        let fields = request::fields(&head);
        let req = Request {
            method: head.method.as_str(),
            target: request::target(&head),
            version: Version::Http2,
            headers: Headers::Parsed(&fields),
            body: &body,
            stream: None,
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
                Chunk::Wait(w) => Some(Advance::Wait(w)),
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
