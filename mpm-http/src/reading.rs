//! Turning buffered bytes into requests: parse a head, bound and collect its
//! body, enforce the header and body deadlines, run the handler.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use mpm_core::scoreboard::WorkerState;
use mpm_core::{Interest, Stream};

use crate::body::{self, BodySource, BodyStream, Timing};
use crate::chunked::{self, ChunkError};
use crate::connection::{After, Flush, HttpConn, HttpService, Started, Step};
use crate::head::{self, Framing, Head, Parsed, SLOTS};
use crate::request::{Headers, Request, Version};
use crate::response::Response;
use crate::HttpHandler;

impl<H: HttpHandler> HttpService<H> {
    /// Parse one request from the buffer; if it is complete, run the handler
    /// and queue the response.
    pub(crate) fn step(&mut self, c: &mut HttpConn, s: &mut Stream) -> Step {
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
        if matches!(head.framing, Framing::Length(n) if n > limits.body) {
            let _ = self.reject(c, s, 413);
            return Step::Responded;
        }
        // A handler that reads the body as it arrives is called now.
        let streamed = head.framing != Framing::None && self.streams_body(&head, s);
        let body_range = match head.framing {
            _ if streamed => Some((head.len, head.len, head.len)),
            Framing::None => Some((head.len, head.len, head.len)),
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
        let body = if streamed {
            &[][..]
        } else if head.framing == Framing::Chunked {
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
        let (mut response, mut consumed, mut keep, mut outcome) = (None, consumed, keep, None);
        if streamed {
            let timing = Timing {
                started: *c.started.body.get_or_insert_with(Instant::now),
                body_timeout: self.settings.request_body_timeout,
                min_rate: self.settings.request_body_min_rate,
                timeout: self.settings.timeout,
            };
            let framing = match head.framing {
                Framing::Length(n) => body::Framing::Length(n),
                _ => body::Framing::Chunked(chunked::Decoder::new(limits.body)),
            };
            let send_continue =
                head.expect_continue && !c.continue_sent && version == Version::Http11;
            let peer = s.peer_addr();
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
        let response = match response {
            Some(r) => r,
            None => self.call(&head, body, None, s.peer_addr()),
        }
        .into_parts();
        self.log_start(&mut c.log, data, Some(head.headers), response.status);
        if let Some(slot) = s.score_slot() {
            let line_end = data.iter().position(|&b| b == b'\r').unwrap_or(0);
            slot.record_request(&data[..line_end], response.body.len().unwrap_or(0));
            slot.record_status(response.status);
        }
        c.out.clear();
        c.out_pos = 0;
        let keep = self.queue(c, response, is_head, keep, version);
        c.served += 1;
        c.started = Started::default();
        c.deadline = None;
        c.continue_sent = false;
        c.consume(consumed);
        let unfinished = outcome
            .as_ref()
            .is_some_and(|o| !o.done || o.failed.is_some());
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
        c.after = if keep {
            After::KeepAlive
        } else if c.start < c.filled || unfinished {
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
    pub(crate) fn deadline(&self, c: &mut Started, body_received: Option<u64>) -> Instant {
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
                // A second per `rate` bytes (none when the rate is 0).
                let earned = body::earned(received, self.settings.request_body_min_rate);
                after(
                    started,
                    self.settings.request_body_timeout.saturating_add(earned),
                )
            }
        }
    }

    /// Does the handler read this request's body as it arrives?
    fn streams_body(&self, head: &Head<'_, '_>, s: &Stream) -> bool {
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
        self.handler.streams_body(&req)
    }

    /// Run the user's handler; a panic becomes a 500 for this request only.
    pub(crate) fn call(
        &mut self,
        head: &Head<'_, '_>,
        body: &[u8],
        stream: Option<&dyn BodySource>,
        peer: std::net::SocketAddr,
    ) -> Response {
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body,
            stream,
            params: &[],
            peer,
            pool: self.arena.pool(),
        };
        let handler = &mut self.handler;
        let answer = catch_unwind(AssertUnwindSafe(|| handler.handle(&req)));
        // The response owns all it holds: the request's scratch can go.
        self.arena.reset();
        match answer {
            Ok(r) => r,
            Err(_) => {
                mpm_core::log_error!(
                    "mpm: handler panicked on {} {}; answered 500",
                    head.method,
                    head.target
                );
                Response::error(500)
            }
        }
    }

    /// Queue an error response, drop what was received, and close lingering.
    pub(crate) fn reject(&mut self, c: &mut HttpConn, s: &mut Stream, status: u16) -> Interest {
        self.log_start(
            &mut c.log,
            &c.buf[c.start..c.filled.max(c.start)],
            None,
            status,
        );
        if let Some(slot) = s.score_slot() {
            slot.record_status(status);
        }
        c.out.clear();
        c.out_pos = 0;
        c.pending = None;
        let r = Response::error(status).into_parts();
        self.queue(c, r, false, false, Version::Http11);
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
}
