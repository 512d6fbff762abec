//! Turning buffered bytes into requests: parse a head, bound and collect its
//! body, enforce the header and body deadlines, run the handler. A
//! [`Reader`] (the handler and its request pool) does it, and hands what to
//! send to the [`Sender`] it is lent.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use mpm_core::panics::{catch, catch_into};
use mpm_core::scoreboard::WorkerState;
use mpm_core::Stream;

use crate::awaited_body::{AwaitedBody, Upload};
use crate::body::{self, BodySource, BodyStream, Timing};
use crate::chunked::{self, ChunkError};
use crate::head::{self, Framing, Head, Parsed, Spans, KEPT_FIELDS, SLOTS};
use crate::request::{BodyFraming, Headers, Request, Version};
use crate::request_pool::PoolArena;
use crate::response::Response;
use crate::settings::ServiceSettings;
use crate::state::{After, HttpConn, LaterState, RequestName, Started, Waiting};
use crate::writing::Sender;
use crate::HttpHandler;

/// What reads requests and answers them: the user's handler, and this
/// worker's request pool, reset after every request.
#[derive(Debug)]
pub(crate) struct Reader<H> {
    pub(crate) handler: H,
    pub(crate) arena: PoolArena,
    /// Which bytes `spans` describe: a head the last prefetch parsed and
    /// approved. The step that runs next on them makes the head from the
    /// spans rather than parsing it again; any change (a read, a request
    /// consumed, another connection) makes the key differ, and it parses.
    pub(crate) prefetched: Option<BufferedKey>,
    pub(crate) spans: Spans,
    /// A box for what a connection waits on, vacated by the last answer
    /// that came: see [`Waiting::Vacant`].
    pub(crate) spare: Option<Box<Waiting>>,
}

/// Which buffered bytes of which connection: its buffer (two live
/// connections never share one), the unconsumed range, and its count of
/// requests served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BufferedKey {
    buf: usize,
    start: usize,
    filled: usize,
    served: u64,
}

impl BufferedKey {
    pub(crate) fn of(c: &HttpConn) -> BufferedKey {
        BufferedKey {
            buf: c.buf.as_ptr() as usize,
            start: c.start,
            filled: c.filled,
            served: c.served,
        }
    }
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
    /// A whole request is buffered, but answering it may block and the
    /// [`Gate`] said not to: nothing was consumed.
    Deferred,
    /// The handler answered [`Response::later`](crate::Response::later):
    /// the request is consumed, its answer waits in `c.waiting`.
    Later,
}

/// Which requests a step may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Any.
    Any,
    /// Only those the handler answers without blocking: on an event loop,
    /// and behind gathered responses, which must not wait on a slow one.
    NonBlocking,
}

/// How much of the request in progress has arrived.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Received {
    /// Bytes of a head not complete yet.
    Head(u64),
    /// Bytes of the body, the head being complete.
    Body(u64),
}

/// A second for every `rate` bytes of `received` (none when `rate` is 0).
fn earned(received: u64, rate: u64) -> Duration {
    match (received.checked_div(rate), received.checked_rem(rate)) {
        (Some(secs), Some(rest)) => {
            Duration::from_secs(secs) + Duration::from_millis(rest.saturating_mul(1000) / rate)
        }
        _ => Duration::ZERO,
    }
}

/// The request line within `data`: from the method to the end of
/// ` HTTP/1.x`, as httparse read it (it skips empty lines before the line,
/// and puts one space between the parts); a scan for the CR otherwise.
/// Every request's line goes to the scoreboard.
fn request_line(data: &[u8], method: &str, target: &str) -> std::ops::Range<usize> {
    let offset = |part: &str| (part.as_ptr() as usize).checked_sub(data.as_ptr() as usize);
    let start = offset(method).filter(|&m| m <= data.len()).unwrap_or(0);
    let end = offset(target).and_then(|t| t.checked_add(target.len() + b" HTTP/1.1".len()));
    match end {
        Some(end) if end >= start && data.get(end) == Some(&b'\r') => start..end,
        _ => {
            let line = data.get(start..).unwrap_or_default();
            start..start + line.iter().position(|&b| b == b'\r').unwrap_or(0)
        }
    }
}

impl<H: HttpHandler> Reader<H> {
    /// Parse one request from the buffer (or make it from what prefetch
    /// found in the same bytes); if it is complete and `gate` allows, run
    /// the handler and queue the response with `out` (behind any already
    /// queued).
    pub(crate) fn step(
        &mut self,
        out: &mut Sender,
        c: &mut HttpConn,
        s: &mut Stream,
        gate: Gate,
    ) -> Step {
        out.begin_response(c);
        let limits = out.settings.limits;
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let mut kept;
        let data = &c.buf[c.start..c.filled];
        // Good for this step only: whatever it does changes the bytes.
        let made = match self.prefetched.take() {
            Some(key) if key == BufferedKey::of(c) => {
                kept = [httparse::EMPTY_HEADER; KEPT_FIELDS];
                self.spans.head(data, &mut kept)
            }
            _ => None,
        };
        // The head made from the spans goes straight on: not through a
        // `Parsed` of its own (a copy of it).
        let head = match made {
            Some(head) => head,
            None => match head::parse(data, &mut slots, &limits) {
                Parsed::NewerMinor(at) => {
                    // Served as HTTP/1.1 (RFC 9110 §2.5): parse it as one.
                    c.buf[c.start + at] = b'1';
                    return self.step(out, c, s, gate);
                }
                Parsed::Partial => {
                    c.deadline = Some(deadline(
                        &out.settings,
                        &mut c.started,
                        Received::Head(data.len() as u64),
                    ));
                    return Step::Incomplete;
                }
                Parsed::Reject(status) => {
                    let _ = out.reject(c, s, status);
                    return Step::Responded;
                }
                Parsed::Complete(head) => head,
            },
        };
        // Bound the body before reading any of it.
        if matches!(head.framing, Framing::Length(n) if n > limits.body) {
            let _ = out.reject(c, s, 413);
            return Step::Responded;
        }
        // A handler that reads the body as it arrives is called now: from
        // its future where the socket does not block (awaited_body.rs),
        // else on its thread.
        let awaited =
            head.framing != Framing::None && !s.is_blocking() && self.awaits_body(&head, s);
        let streamed = !awaited && head.framing != Framing::None && self.streams_body(&head, s);
        // A body read whole is held in memory: bounded even where the
        // limit is lifted (`--limit-request-body 0`) for the others.
        if !streamed
            && !awaited
            && matches!(head.framing, Framing::Length(n) if n > limits.whole_body)
        {
            let _ = out.reject(c, s, 413);
            return Step::Responded;
        }
        let body_range = match head.framing {
            _ if streamed || awaited => Some((head.len, head.len, head.len)),
            Framing::None => Some((head.len, head.len, head.len)),
            Framing::Length(n) => {
                // n is at most the whole-body limit, so this fits; checked all the same.
                let end = usize::try_from(n)
                    .ok()
                    .and_then(|n| head.len.checked_add(n))
                    .unwrap_or(usize::MAX);
                (data.len() >= end).then_some((head.len, end, end))
            }
            Framing::Chunked => {
                let decoded = &mut c.occasional.get_or_insert_with(Box::default).chunk_body;
                match chunked::decode(&data[head.len..], limits.whole_body, decoded) {
                    Ok(Some(used)) => Some((0, decoded.len(), head.len + used)),
                    Ok(None) => None,
                    Err(ChunkError::Invalid) => {
                        let _ = out.reject(c, s, 400);
                        return Step::Responded;
                    }
                    Err(ChunkError::TooLarge) => {
                        let _ = out.reject(c, s, 413);
                        return Step::Responded;
                    }
                }
            }
        };
        let Some((body_start, body_end, consumed)) = body_range else {
            let received = (data.len() - head.len) as u64;
            c.deadline = Some(deadline(
                &out.settings,
                &mut c.started,
                Received::Body(received),
            ));
            // Queued and written like any response, so that a partial write
            // is finished before anything else goes out; and not ahead of
            // responses still queued: the caller sends those first and asks
            // again.
            if head.expect_continue
                && !c.continue_sent
                && head.version == Version::Http11
                && !c.has_output()
            {
                c.continue_sent = true;
                c.queue_continue();
                return Step::Interim;
            }
            return Step::Incomplete;
        };
        let body = if streamed || awaited {
            &[][..]
        } else if head.framing == Framing::Chunked {
            c.occasional
                .as_ref()
                .map_or(&[][..], |o| &o.chunk_body[body_start..body_end])
        } else {
            &data[body_start..body_end]
        };
        let keep = out.settings.keepalive
            && head.wants_keep_alive()
            && !s.is_draining()
            && (out.settings.max_keepalive_requests == 0
                || c.served + 1 < out.settings.max_keepalive_requests);
        let is_head = head.method == "HEAD";
        let version = head.version;
        // A body read as it arrives reads the socket (and may answer `100
        // Continue` itself): never on the loop, never behind gathered answers.
        if gate == Gate::NonBlocking && (streamed || !self.answers_without_blocking(&head, body, s))
        {
            return Step::Deferred;
        }
        s.set_state(WorkerState::Writing);
        let (mut response, mut consumed, mut keep, mut outcome) = (None, consumed, keep, None);
        let mut upload = None;
        if awaited {
            // The body's bytes stay in the connection's buffer: the
            // connection moves them into the future's pipe as it resumes.
            let (framing, timing, send_continue) =
                read_as_it_comes(&head, out, &mut c.started, c.continue_sent, limits.body);
            let (up, handle) = Upload::new(framing, timing, data.len() - head.len, send_continue);
            let peer = (s.peer_addr(), s.has_transport());
            self.call_into(&mut response, &head, b"", (None, Some(&handle)), peer);
            upload = Some(up);
        }
        if streamed {
            let (framing, timing, send_continue) =
                read_as_it_comes(&head, out, &mut c.started, c.continue_sent, limits.body);
            let peer = (s.peer_addr(), s.has_transport());
            let source = RefCell::new(BodyStream::new(
                s,
                &data[head.len..],
                framing,
                timing,
                send_continue,
            ));
            let r = self.call(&head, b"", Some(&source as &dyn BodySource), peer);
            let done = source.into_inner().finish();
            consumed = head.len + done.pre_used;
            if let Some(status) = done.failed {
                mpm_core::log_info!(
                    "mpm: {} {}: request body refused with {status}",
                    head.method,
                    head.target
                );
            }
            response = Some(match done.failed {
                Some(status) => Response::error(status),
                None => r,
            });
            // A body not read to its end is still on the wire: close (after
            // a linger), rather than read it as the next request.
            keep &= done.done && done.failed.is_none();
            outcome = Some(done);
        }
        if response.is_none() {
            let peer = (s.peer_addr(), s.has_transport());
            self.call_into(&mut response, &head, body, (None, None), peer);
        }
        // Answered in place: a response is some 450 bytes, and each move
        // of it a copy.
        let response = response.get_or_insert_with(|| Response::error(500));
        let line = request_line(data, head.method, head.target);
        // A streamed body not read to its end; an awaited one may still
        // be read by the answer's future (judged when it is ready).
        let streamed_unfinished = outcome
            .as_ref()
            .is_some_and(|o| !o.done || o.failed.is_some());
        let unfinished =
            streamed_unfinished || upload.as_ref().is_some_and(|u| u.outcome() != (true, None));
        let mut later = None;
        if response.internal_redirect().is_some() && !response.is_later() {
            // Followed where a later answer is (`resume`), the handler
            // asked again there: on a worker if it may block.
            let redirecting = std::mem::replace(response, Response::new(200));
            *response = Response::later(std::future::ready(redirecting));
        }
        let keep = match response.take_later() {
            // A later answer: its log line and slot are started now, while
            // the request's bytes are here; the status comes with it.
            Some(answer) => {
                let mut record = std::mem::take(&mut c.log);
                out.log_start(&mut record, data, Some(head.headers), 0);
                if let Some(slot) = s.score_slot() {
                    slot.record_request(&data[line], 0);
                }
                // Made in its box at once: moving it there later is a copy
                // of some 300 bytes.
                later = Some(self.boxed(Waiting::Answer(LaterState {
                    answer,
                    record,
                    request: RequestName::new(head.method, head.target),
                    is_head,
                    keep,
                    version,
                    unfinished: streamed_unfinished,
                    upload: upload.map(Box::new),
                    redirect: None,
                })));
                keep
            }
            None => {
                // Answered at once, its awaited body unread: it closes after.
                let keep = keep && !unfinished;
                out.log_start(&mut c.log, data, Some(head.headers), response.status);
                out.log_upstream(&mut c.log, response.upstream.as_deref());
                if let Some(slot) = s.score_slot() {
                    slot.record_request(&data[line], response.body.len().unwrap_or(0));
                    slot.record_status(response.status);
                }
                out.queue(c, response, is_head, keep, version)
            }
        };
        c.served += 1;
        c.started = Started::default();
        c.deadline = None;
        c.continue_sent = false;
        c.consume(consumed);
        if let Some(o) = outcome.filter(|o| !o.leftover.is_empty()) {
            // Read past the body from the socket: every buffered byte was
            // used, and these come first now.
            c.make_room();
            if c.buf.len() < c.filled + o.leftover.len() {
                c.buf.resize(c.filled + o.leftover.len(), 0);
            }
            c.buf[c.filled..c.filled + o.leftover.len()].copy_from_slice(&o.leftover);
            c.filled += o.leftover.len();
        }
        if let Some(later) = later {
            c.set_waiting(later);
            return Step::Later;
        }
        c.after = after(keep, c, unfinished);
        Step::Responded
    }
}

/// How a body read as it arrives (streamed or awaited) is framed, the
/// clocks it is read against, and whether `100 Continue` is owed first.
fn read_as_it_comes(
    head: &Head<'_, '_>,
    out: &Sender,
    started: &mut Started,
    continue_sent: bool,
    limit: u64,
) -> (body::Framing, Timing, bool) {
    let timing = Timing::of(
        &out.settings,
        *started.body.get_or_insert_with(Instant::now),
    );
    let framing = match head.framing {
        Framing::Length(n) => body::Framing::Length(n),
        _ => body::Framing::Chunked(chunked::Decoder::new(limit)),
    };
    let send_continue = head.expect_continue && !continue_sent && head.version == Version::Http11;
    (framing, timing, send_continue)
}

/// What follows a response: keep-alive, or a close (lingering when input
/// is left unread: pipelined requests, or a streamed body not read to its end).
pub(crate) fn after(keep: bool, c: &HttpConn, unfinished: bool) -> After {
    if keep {
        After::KeepAlive
    } else if c.start < c.filled || unfinished {
        After::Linger
    } else {
        After::Close
    }
}

/// When the request in progress must have arrived, as `mod_reqtimeout`'s
/// `header=20-40,MinRate=500 body=20,MinRate=500` has it: its head
/// within the header timeout of its first byte (of the accept, for a
/// connection's first request), plus a second for every
/// `request_header_min_rate` bytes of it received, but never past the
/// header maximum; its body within the body timeout of the head's end,
/// plus a second for every `request_body_min_rate` bytes received. A
/// client sending at the minimum rate or faster never runs out of time
/// (up to the head's maximum); a trickle is cut off at the first
/// allowance.
#[inline]
pub(crate) fn deadline(settings: &ServiceSettings, c: &mut Started, received: Received) -> Instant {
    let now = mpm_core::turn_clock::now();
    // A timeout configured beyond what an Instant holds means "never".
    let after = mpm_core::deadline;
    match received {
        Received::Head(bytes) => {
            let allowed = settings
                .request_header_timeout
                .saturating_add(earned(bytes, settings.request_header_min_rate))
                .min(
                    settings
                        .request_header_max_timeout
                        .max(settings.request_header_timeout),
                );
            after(*c.head.get_or_insert(now), allowed)
        }
        Received::Body(bytes) => {
            let started = *c.body.get_or_insert(now);
            let allowed = settings
                .request_body_timeout
                .saturating_add(body::earned(bytes, settings.request_body_min_rate));
            after(started, allowed)
        }
    }
}

impl<H> Reader<H> {
    /// `waiting` in a box: the spare one if there is one.
    pub(crate) fn boxed(&mut self, waiting: Waiting) -> Box<Waiting> {
        match self.spare.take() {
            Some(mut spare) => {
                *spare = waiting;
                spare
            }
            None => Box::new(waiting),
        }
    }
}

impl<H: HttpHandler> Reader<H> {
    /// Does the user's handler answer this request without blocking? A
    /// panic in it counts as no (a worker then runs the request, and the
    /// handler's panic there answers 500).
    fn answers_without_blocking(&self, head: &Head<'_, '_>, body: &[u8], s: &Stream) -> bool {
        self.ask(head, body, s, H::answers_without_blocking)
    }

    /// Does the handler read this request's body as it arrives?
    fn streams_body(&self, head: &Head<'_, '_>, s: &Stream) -> bool {
        self.ask(head, &[], s, H::streams_body)
    }

    /// Does it read it from its future (`HttpHandler::awaits_body`)?
    fn awaits_body(&self, head: &Head<'_, '_>, s: &Stream) -> bool {
        self.ask(head, &[], s, H::awaits_body)
    }

    /// One of the handler's questions about a request (before it runs);
    /// a panic in it counts as no.
    fn ask(
        &self,
        head: &Head<'_, '_>,
        body: &[u8],
        s: &Stream,
        question: fn(&H, &Request<'_>) -> bool,
    ) -> bool {
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body,
            stream: None,
            awaited: None,
            params: &[],
            peer: s.peer_addr(),
            secure: s.has_transport(),
            pool: self.arena.pool(),
            framing: BodyFraming::of(head),
            internal: false,
        };
        catch(|| question(&self.handler, &req)).unwrap_or(false)
    }

    /// Run the user's handler; a panic becomes a 500 for this request only,
    /// and one error-log line.
    pub(crate) fn call(
        &mut self,
        head: &Head<'_, '_>,
        body: &[u8],
        stream: Option<&dyn BodySource>,
        peer: (std::net::SocketAddr, bool),
    ) -> Response {
        let mut answer = None;
        self.call_into(&mut answer, head, body, (stream, None), peer);
        // Filled, whether the handler panicked or not.
        answer.unwrap_or_else(|| Response::error(500))
    }

    /// [`call`](Self::call), the response put in `answer` rather than
    /// returned (a copy less of some 450 bytes).
    pub(crate) fn call_into(
        &mut self,
        answer: &mut Option<Response>,
        head: &Head<'_, '_>,
        body: &[u8],
        (stream, awaited): (Option<&dyn BodySource>, Option<&AwaitedBody>),
        (peer, secure): (std::net::SocketAddr, bool),
    ) {
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body,
            stream,
            awaited,
            params: &[],
            peer,
            secure,
            pool: self.arena.pool(),
            framing: BodyFraming::of(head),
            internal: false,
        };
        let handler = &mut self.handler;
        let caught = catch_into(answer, || handler.handle(&req));
        // The response owns all it holds: the request's scratch can go.
        self.arena.reset();
        if let Err(p) = caught {
            mpm_core::log_error!(
                "mpm: handler panicked on {} {}: {p}; answered 500",
                head.method,
                head.target
            );
            *answer = Some(Response::error(500));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::request_line;

    #[test]
    fn the_request_line_is_the_method_to_the_version() {
        for (data, line) in [
            (
                &b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n"[..],
                "GET /a HTTP/1.1",
            ),
            (b"OPTIONS * HTTP/1.0\r\n\r\n", "OPTIONS * HTTP/1.0"),
            (
                b"GET http://h/x?y HTTP/1.1\r\nHost: h\r\n\r\n",
                "GET http://h/x?y HTTP/1.1",
            ),
            // Empty lines before a request are skipped, as httparse skips them.
            (
                b"\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n",
                "GET /b HTTP/1.1",
            ),
        ] {
            let text = std::str::from_utf8(data).unwrap_or_default();
            let at = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(0);
            let mut words = text[at..].split(' ');
            let method = words.next().unwrap_or_default();
            let target = words.next().unwrap_or_default();
            let range = request_line(data, method, target);
            assert_eq!(&data[range], line.as_bytes(), "{text:?}");
        }
        // Parts that are not slices of the data: whatever the addresses, the
        // range stays within it.
        let data = b"GET / HTTP/1.1\r\n".to_vec();
        let (method, target) = (String::from("GET"), String::from("/"));
        let range = request_line(&data, &method, &target);
        assert!(
            range.start <= range.end && range.end <= data.len(),
            "{range:?}"
        );
    }
}
