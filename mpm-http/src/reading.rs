//! Turning buffered bytes into requests: parse a head, bound and collect its
//! body, enforce the header and body deadlines, run the handler.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use mpm_core::panics::catch;
use mpm_core::scoreboard::WorkerState;
use mpm_core::{Interest, Stream};

use crate::chunked::{self, ChunkError};
use crate::connection::{After, Flush, Gate, HttpConn, HttpService, Started, Step};
use crate::head::{self, Framing, Head, Parsed, SLOTS};
use crate::request::{Headers, Request, Version};
use crate::response::Response;
use crate::HttpHandler;

impl<H: HttpHandler> HttpService<H> {
    /// Parse one request from the buffer; if it is complete and `gate`
    /// allows, run the handler and queue the response (behind any already
    /// queued).
    pub(crate) fn step(&mut self, c: &mut HttpConn, s: &mut Stream, gate: Gate) -> Step {
        self.begin_response(c);
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
            // Not ahead of responses still queued: the caller sends those
            // first and asks again.
            if head.expect_continue
                && !c.continue_sent
                && head.version == Version::Http11
                && !c.has_output()
            {
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
        if gate == Gate::NonBlocking && !self.answers_without_blocking(&head, body, s) {
            return Step::Deferred;
        }
        s.set_state(WorkerState::Writing);
        let response = self.call(&head, body, s);
        let (status, headers, body) = response.into_parts();
        self.log_start(&mut c.log, data, Some(head.headers), status);
        if let Some(slot) = s.score_slot() {
            let line_end = data.iter().position(|&b| b == b'\r').unwrap_or(0);
            slot.record_request(&data[..line_end], body.len().unwrap_or(0));
        }
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

    /// Does the user's handler answer this request without blocking? A
    /// panic in it counts as no (a worker then runs the request, and the
    /// handler's panic there answers 500).
    fn answers_without_blocking(&self, head: &Head<'_, '_>, body: &[u8], s: &Stream) -> bool {
        let req = Request {
            method: head.method,
            target: head.target,
            version: head.version,
            headers: Headers::Parsed(head.headers),
            body,
            peer: s.peer_addr(),
            pool: self.arena.pool(),
        };
        catch(|| self.handler.answers_without_blocking(&req)).unwrap_or(false)
    }

    /// Run the user's handler; a panic becomes a 500 for this request only,
    /// and one error-log line.
    pub(crate) fn call(&mut self, head: &Head<'_, '_>, body: &[u8], s: &Stream) -> Response {
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
        let answer = catch(|| handler.handle(&req));
        // The response owns all it holds: the request's scratch can go.
        self.arena.reset();
        match answer {
            Ok(r) => r,
            Err(p) => {
                mpm_core::log_error!(
                    "mpm: handler panicked on {} {}: {p}; answered 500",
                    head.method,
                    head.target
                );
                Response::error(500)
            }
        }
    }

    /// Queue an error response (behind any already queued), drop what was
    /// received, and close lingering.
    pub(crate) fn reject(&mut self, c: &mut HttpConn, s: &mut Stream, status: u16) -> Interest {
        self.begin_response(c);
        self.log_start(
            &mut c.log,
            &c.buf[c.start..c.filled.max(c.start)],
            None,
            status,
        );
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
            Flush::Yield => Interest::Yield,
            Flush::Failed => Interest::Close,
        }
    }
}
