//! Turning responses into bytes: the head with the fields the layer owns,
//! then in-memory bytes, a file by sendfile (or read+write), or a stream
//! (chunked on HTTP/1.1); and the access-log line of each response. A
//! [`Sender`] (the settings and the access-log writer) does it; it knows
//! nothing of the handler.

use std::io::{self, ErrorKind, Read};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use mpm_core::waiting::{Await, Polled};
use mpm_core::{Interest, Stream};

use crate::access_log::{Record, Writer};
use crate::date;
use crate::page_cache;
use crate::request::Version;
use crate::response::{reason_phrase, Body, HeaderText, Part, Response, Upstream};
use crate::settings::ServiceSettings;
use crate::state::{After, Gathered, HttpConn, Pending, PolledBody, Started, TunnelState, Waiting};

/// Bytes read from a file per write when sendfile is off.
const COPY_CHUNK: usize = 64 * 1024;
/// Bytes per chunk of a streamed body.
const STREAM_CHUNK: usize = 16 * 1024;
/// Most bytes of a polled body moved per read of its source: one buffer,
/// the same as a file's when sendfile is off.
const POLLED_CHUNK: usize = 64 * 1024;

/// What sends responses: the service's settings, and this worker's
/// access-log writer.
#[derive(Debug)]
pub(crate) struct Sender {
    pub(crate) settings: Arc<ServiceSettings>,
    pub(crate) log: Option<Writer>,
}

/// Did writing finish?
pub(crate) enum Flush {
    Done,
    Blocked,
    /// On an event loop: the per-turn budget is spent, or the rest is not in
    /// the page cache; resume later (perhaps on a worker).
    Yield,
    /// A polled body's source has nothing yet: wait for it.
    Await(Await),
    Failed,
}

impl Flush {
    /// What the connection waits for when writing stopped short.
    #[inline]
    pub(crate) fn interest(self) -> Option<Interest> {
        match self {
            Flush::Done => None,
            Flush::Blocked => Some(Interest::Write),
            Flush::Yield => Some(Interest::Yield),
            Flush::Await(a) => Some(Interest::Await(a)),
            Flush::Failed => Some(Interest::Close),
        }
    }
}

// Not generic over the handler (as these were when they were methods of
// `HttpService<H>`), so compiled once here: the small ones are `#[inline]`
// so that the step machine, instantiated in the caller's crate, can still
// inline them without LTO.
impl Sender {
    /// Serialize a response into the connection's output (its body taken
    /// out of it; lent, not moved: it is 472 bytes). Returns whether the
    /// connection stays open after it.
    pub(crate) fn queue(
        &self,
        c: &mut HttpConn,
        response: &mut Response,
        is_head: bool,
        keep: bool,
        version: Version,
    ) -> bool {
        self.settings.error_pages.apply(response);
        let status = response.status;
        let body = std::mem::replace(&mut response.body, Body::Empty);
        let mut keep = keep && !response.close;
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
        let head = Head {
            status,
            reason: response.reason.as_deref(),
            headers: &response.headers,
            wire: response.wire.as_bytes(),
            has_server: response.has_server,
        };
        self.write_head(c, &head, length, chunked);
        response.wire.give_back();
        if let Some(tunnel) = response.tunnel.take() {
            // A 101: the connection becomes the tunnel once this is sent.
            c.out.extend_from_slice(b"Connection: Upgrade\r\n\r\n");
            c.log.set_head_len(c.out.len() - c.resp_start);
            c.pending = None;
            c.clear_parts();
            c.set_waiting(Box::new(Waiting::Tunnel(TunnelState {
                tunnel,
                down: Vec::new(),
                down_pos: 0,
                client_ended: false,
                upstream_ended: false,
                upstream_shut: false,
                client_shut: false,
                last_moved: std::time::Instant::now(),
            })));
            return false;
        }
        // Connection header, then the blank line.
        match (keep, version) {
            (false, _) => c.out.extend_from_slice(b"Connection: close\r\n\r\n"),
            (true, Version::Http10) => c.out.extend_from_slice(b"Connection: keep-alive\r\n\r\n"),
            (true, Version::Http11 | Version::Http2) => c.out.extend_from_slice(b"\r\n"),
        }
        c.log.set_head_len(c.out.len() - c.resp_start);
        c.pending = None;
        c.clear_parts();
        if no_body {
            return keep;
        }
        match body {
            Body::Empty => {}
            Body::Bytes(b) => {
                c.out.extend_from_slice(&b);
                // Copied: the buffer (a proxied body's) serves the next.
                if let std::borrow::Cow::Owned(b) = b {
                    mpm_core::byte_spares::give(b);
                }
            }
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
            Body::Polled(source) => {
                c.pending = Some(Pending::Polled(Box::new(PolledBody {
                    source,
                    chunked,
                    left: length,
                    sent: 0,
                    gathered: false,
                })))
            }
            Body::Parts(parts) => {
                c.occasional
                    .get_or_insert_with(Box::default)
                    .parts
                    .extend(parts);
                self.next_part(c);
            }
        }
        keep
    }

    /// Queue the next piece of a [`Body::Parts`]: bytes go into the output
    /// (with those after them, up to a file region), a file region becomes
    /// the pending body; the pieces after it wait in `c.occasional`.
    #[inline]
    pub(crate) fn next_part(&self, c: &mut HttpConn) {
        while let Some(part) = c.occasional.as_mut().and_then(|o| o.parts.pop_front()) {
            match part {
                Part::Bytes(b) => c.out.extend_from_slice(&b),
                Part::File(f) if f.len == 0 => {}
                Part::File(f) => {
                    c.pending = Some(Pending::File {
                        file: f.file,
                        offset: f.offset,
                        end: f.offset.saturating_add(f.len),
                    });
                    return;
                }
            }
        }
    }

    /// Status line and the fields every response carries; the caller adds
    /// `Connection` and the blank line.
    pub(crate) fn write_head(
        &self,
        c: &mut HttpConn,
        head: &Head<'_>,
        length: Option<u64>,
        chunked: bool,
    ) {
        if c.out.capacity() == 0 {
            c.out = c.pool.write_buffer();
        }
        let out = &mut c.out;
        let status = head.status;
        let reason = head.reason.unwrap_or_else(|| reason_phrase(status));
        // Written by hand: core::fmt was 5% of a pipelined loop's CPU.
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\r\nDate: ");
        date::append_now(out);
        out.extend_from_slice(b"\r\n");
        if !head.has_server && !self.settings.server.is_empty() {
            out.extend_from_slice(b"Server: ");
            out.extend_from_slice(self.settings.server.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        // Response::header refused the layer's fields and split values.
        for (name, value) in head.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        // Checked as they were added, each ending in CRLF.
        out.extend_from_slice(head.wire);
        // The server's own (`--add-header`), checked at start.
        for (name, value) in self.settings.added_fields.for_status(status) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let Some(n) = length {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        } else if chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
    }

    /// A response is about to be queued: behind what `out` still holds
    /// (pipelined responses gathered for one write), whose last log line is
    /// then kept aside until its bytes are sent; or at the start of an
    /// empty buffer.
    #[inline]
    pub(crate) fn begin_response(&self, c: &mut HttpConn) {
        if !c.has_output() {
            c.out.clear();
            c.out_pos = 0;
        } else if c.log.is_active() {
            let g = c.occasional.get_or_insert_with(Box::default);
            let spare = g.spare.pop().unwrap_or_default();
            let record = std::mem::replace(&mut c.log, spare);
            g.waiting.push_back(Gathered {
                record,
                start: c.resp_start,
                end: c.out.len(),
            });
        }
        c.resp_start = c.out.len();
    }

    /// Queue an error response (behind any already queued), drop what was
    /// received, and close lingering.
    pub(crate) fn reject(&mut self, c: &mut HttpConn, s: &mut Stream, status: u16) -> Interest {
        if c.pending.is_some() || c.has_parts() {
            // A body still going out cannot be followed: the error replaces it.
            self.finish_gathered(c, s);
            c.out.clear();
            c.out_pos = 0;
            c.pending = None;
            c.clear_parts();
        }
        self.begin_response(c);
        self.log_start(
            &mut c.log,
            &c.buf[c.start..c.filled.max(c.start)],
            None,
            status,
        );
        if let Some(slot) = s.score_slot() {
            slot.record_status(status);
        }
        self.queue(
            c,
            &mut Response::error(status),
            false,
            false,
            Version::Http11,
        );
        c.start = 0;
        c.filled = 0;
        c.started = Started::default();
        c.deadline = None;
        c.after = After::Linger;
        self.flush(c, s).interest().unwrap_or(Interest::Linger)
    }

    /// Write the queued responses; once they are done (or failed), log them.
    pub(crate) fn flush(&mut self, c: &mut HttpConn, s: &mut Stream) -> Flush {
        let flushed = self.write_queued(c, s);
        match flushed {
            Flush::Blocked | Flush::Yield | Flush::Await(_) => {}
            Flush::Done => {
                let ends = c.after != After::KeepAlive;
                self.log_done(c, s, ends);
            }
            Flush::Failed => {
                self.finish_gathered(c, s);
                self.log_done(c, s, true);
            }
        }
        flushed
    }

    /// Send what is queued before doing anything else: `None` once it is
    /// all sent, or what to wait for if it could not be.
    #[inline]
    pub(crate) fn flush_first(&mut self, c: &mut HttpConn, s: &mut Stream) -> Option<Interest> {
        if !c.has_output() {
            return None;
        }
        self.flush(c, s).interest()
    }

    /// `n` bytes of `out` from `out_pos` were sent: the gathered responses
    /// they complete are logged, and the rest counts for the current one.
    fn account(&mut self, c: &mut HttpConn, s: &Stream, n: usize) {
        let (from, to) = (c.out_pos, c.out_pos + n);
        if let Some(gathering) = c.occasional.as_deref_mut() {
            while gathering.waiting.front().is_some_and(|g| g.end <= to) {
                if let Some(mut g) = gathering.waiting.pop_front() {
                    g.record.set_sent(g.end - g.start);
                    if let Some(log) = &mut self.log {
                        log.write(&mut g.record, s.peer_addr().ip(), false);
                    }
                    gathering.spare.push(g.record);
                }
            }
        }
        c.log.add_sent(to.saturating_sub(from.max(c.resp_start)));
    }

    /// The connection failed or timed out with gathered responses unsent:
    /// log each with the bytes of it that did go out.
    pub(crate) fn finish_gathered(&mut self, c: &mut HttpConn, s: &Stream) {
        let Some(gathering) = c.occasional.as_deref_mut() else {
            return;
        };
        while let Some(mut g) = gathering.waiting.pop_front() {
            let sent = c.out_pos.clamp(g.start, g.end) - g.start;
            g.record.set_sent(sent);
            if let Some(log) = &mut self.log {
                log.write(&mut g.record, s.peer_addr().ip(), false);
            }
            gathering.spare.push(g.record);
        }
    }

    /// Start the access-log line of the response being queued: the request
    /// line as received (the first line of the buffered bytes), with the
    /// request's fields when parsed.
    pub(crate) fn log_start(
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
            crate::log_format::LogFormat::Combined | crate::log_format::LogFormat::Upstream => {
                (field("referer"), field("user-agent"))
            }
            crate::log_format::LogFormat::Common => (None, None),
        };
        record.capture(log.format(), line, referer, agent, status);
    }

    /// Add the upstream an answer came from to its access-log line (only
    /// the `upstream` format writes it).
    pub(crate) fn log_upstream(&self, record: &mut Record, upstream: Option<&Upstream>) {
        if let (Some(log), Some(u)) = (&self.log, upstream)
            && log.format() == crate::log_format::LogFormat::Upstream
        {
            record.set_upstream(&u.addr, u.status, u.time);
        }
    }

    /// Write the access-log line of the response just finished, if any.
    #[inline]
    pub(crate) fn log_done(&mut self, c: &mut HttpConn, s: &Stream, conn_ends: bool) {
        if let Some(log) = &mut self.log {
            log.write(&mut c.log, s.peer_addr().ip(), conn_ends);
        }
    }

    /// A polled body whose first bytes are at hand (a proxied answer read
    /// with its head) goes out in the head's write: one `send` for a small
    /// answer, not two. Only a body of announced length (no chunk framing
    /// to put between), only once; what the source says otherwise (wait,
    /// end, error) is left for the body's own turn, which asks again.
    fn gather_polled(&mut self, c: &mut HttpConn, budget: &mut u64) {
        if c.out_pos >= c.out.len() {
            return;
        }
        let Some(Pending::Polled(body)) = c.pending.as_mut() else {
            return;
        };
        if body.gathered || body.chunked || body.sent > 0 {
            return;
        }
        body.gathered = true;
        let Some(left) = body.left.filter(|&l| l > 0) else {
            return;
        };
        let want = POLLED_CHUNK
            .min(usize::try_from(left).unwrap_or(usize::MAX))
            .min(usize::try_from(*budget).unwrap_or(usize::MAX));
        let start = c.out.len();
        c.out.resize(start + want, 0);
        match body.source.poll_read(&mut c.out[start..]) {
            Polled::Ready(Ok(n)) if n > 0 => {
                let n = n.min(want);
                c.out.truncate(start + n);
                body.sent += n as u64;
                *budget = budget.saturating_sub(n as u64);
                let left = left - n as u64;
                body.left = Some(left);
                if left == 0 {
                    c.pending = None;
                }
            }
            _ => c.out.truncate(start),
        }
    }

    /// Write the queued heads and bytes, then any file or stream body, until
    /// done or the socket would block.
    ///
    /// On an event loop a body is sent only from the page cache (else
    /// [`Flush::Yield`], and a worker sends it), never from a stream, and at
    /// most `--sendfile-max-chunk` bytes of it per call (then
    /// [`Flush::Yield`]: the loop serves the others and resumes this one).
    /// Elsewhere each `sendfile` asks for at most that much.
    pub(crate) fn write_queued(&mut self, c: &mut HttpConn, s: &mut Stream) -> Flush {
        let on_loop = s.on_event_loop();
        let chunk = self.settings.sendfile_max_chunk;
        // File bytes this call may still send (on the loop).
        let mut budget = chunk;
        loop {
            self.gather_polled(c, &mut budget);
            if c.out_pos == 0 && !c.out.is_empty() {
                // Held by the stream as it is (a loop holding its sends),
                // the buffer swapped for the queue's rather than copied.
                let n = c.out.len();
                if s.hold_whole(&mut c.out) {
                    self.account(c, s, n);
                    c.out_pos = c.out.len();
                }
            }
            while c.out_pos < c.out.len() {
                // Not before a polled body: its next bytes may be long in
                // coming (an event stream), and corked bytes would wait.
                let more = c
                    .pending
                    .as_ref()
                    .is_some_and(|p| !matches!(p, Pending::Polled(_)));
                match s.send(&c.out[c.out_pos..], more) {
                    Ok(0) => return Flush::Failed,
                    Ok(n) => {
                        self.account(c, s, n);
                        c.out_pos += n;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Flush::Blocked,
                    Err(_) => return Flush::Failed,
                }
            }
            c.out.clear();
            c.out_pos = 0;
            c.resp_start = 0;
            if c.pending.is_none() && c.has_parts() {
                self.next_part(c);
                continue;
            }
            let Some(pending) = c.pending.as_mut() else {
                return Flush::Done;
            };
            match pending {
                Pending::File { file, offset, end } if self.settings.sendfile => {
                    while *offset < *end {
                        let mut want = (*end - *offset).min(chunk).min(1 << 30);
                        if on_loop {
                            if budget == 0 {
                                return Flush::Yield;
                            }
                            want = want.min(budget);
                            // sendfile reads the disk itself when it must.
                            if !page_cache::resident(file, *offset, want) {
                                c.for_a_worker = true;
                                return Flush::Yield;
                            }
                        }
                        match s.sendfile(file, offset, want as usize) {
                            Ok(0) => return Flush::Failed, // the file shrank
                            Ok(n) => {
                                c.log.add_sent(n);
                                budget = budget.saturating_sub(n as u64);
                            }
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
                    let mut want = ((*end - *offset) as usize).min(COPY_CHUNK);
                    if on_loop {
                        if budget == 0 {
                            return Flush::Yield;
                        }
                        want = want.min(usize::try_from(budget).unwrap_or(usize::MAX));
                    }
                    c.out.resize(want, 0);
                    let read = if on_loop {
                        page_cache::read_cached_at(file, &mut c.out, *offset)
                    } else {
                        read_full_at(file, &mut c.out, *offset).map(Some)
                    };
                    match read {
                        // Not in the page cache: a worker reads it.
                        Ok(None) => {
                            c.out.clear();
                            c.for_a_worker = true;
                            return Flush::Yield;
                        }
                        Ok(Some(n)) if n > 0 && (n == want || on_loop) => {
                            c.out.truncate(n);
                            *offset += n as u64;
                            budget = budget.saturating_sub(n as u64);
                        }
                        _ => return Flush::Failed, // the file shrank, or the read failed
                    }
                    // The last chunk goes without MSG_MORE: corked, it would
                    // wait for the kernel's 200 ms timer before leaving.
                    if *offset >= *end {
                        c.pending = None;
                    }
                }
                Pending::Stream { .. } if on_loop => {
                    // The reader may block: a worker pulls it.
                    c.for_a_worker = true;
                    return Flush::Yield;
                }
                Pending::Polled(body) => {
                    if on_loop && budget == 0 {
                        return Flush::Yield;
                    }
                    let header = if body.chunked { 10 } else { 0 };
                    let mut want = POLLED_CHUNK;
                    if let Some(left) = body.left {
                        want = want.min(usize::try_from(left).unwrap_or(usize::MAX));
                    }
                    if on_loop {
                        want = want.min(usize::try_from(budget).unwrap_or(usize::MAX));
                    }
                    if want == 0 {
                        // The announced length is all sent: the source is
                        // not asked for more.
                        c.pending = None;
                        continue;
                    }
                    c.out.resize(header + want, 0);
                    let n = match body.source.poll_read(&mut c.out[header..]) {
                        Polled::Ready(Ok(n)) => n.min(want),
                        Polled::Ready(Err(e)) if e.kind() == ErrorKind::Interrupted => {
                            c.out.clear();
                            continue;
                        }
                        Polled::Ready(Err(e)) => {
                            c.out.clear();
                            mpm_core::log_error!(
                                "mpm: a response body's source failed after {} bytes ({e}); \
                                 cut the connection to {}",
                                body.sent,
                                s.peer_addr()
                            );
                            return Flush::Failed;
                        }
                        Polled::Wait(wait) => {
                            c.out.clear();
                            return Flush::Await(wait);
                        }
                        Polled::Again => {
                            c.out.clear();
                            return Flush::Yield;
                        }
                    };
                    if n == 0 && body.left.is_some_and(|l| l > 0) {
                        c.out.clear();
                        mpm_core::log_error!(
                            "mpm: a response body's source ended after {} bytes, {} short of \
                             its Content-Length; cut the connection to {}",
                            body.sent,
                            body.left.unwrap_or(0),
                            s.peer_addr()
                        );
                        return Flush::Failed;
                    }
                    body.sent += n as u64;
                    budget = budget.saturating_sub(n as u64);
                    if let Some(left) = &mut body.left {
                        *left -= n as u64;
                    }
                    if !body.chunked {
                        c.out.truncate(n);
                        if n == 0 || body.left == Some(0) {
                            c.pending = None;
                        }
                        continue;
                    }
                    let chunked_end = n == 0;
                    frame_chunk(&mut c.out, &mut c.out_pos, header, n);
                    if chunked_end {
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
                    frame_chunk(&mut c.out, &mut c.out_pos, header, n);
                    if n == 0 {
                        c.pending = None;
                    }
                }
            }
        }
    }
}

/// What a response head is written from.
pub(crate) struct Head<'r> {
    pub(crate) status: u16,
    /// The handler's reason phrase, if it gave one.
    pub(crate) reason: Option<&'r str>,
    pub(crate) headers: &'r [(HeaderText, HeaderText)],
    /// The fields given as bytes, as they are written.
    pub(crate) wire: &'r [u8],
    /// Did the handler set `Server` itself?
    pub(crate) has_server: bool,
}

/// Frame the `n` bytes read into `out` after `header` reserved bytes as one
/// chunk (the last one when `n` is 0): the size line right-aligned in the
/// reserved room, where sending starts, and the CRLF after the data.
fn frame_chunk(out: &mut Vec<u8>, out_pos: &mut usize, header: usize, n: usize) {
    out.truncate(header + n);
    let size = format!("{n:x}\r\n");
    let at = header - size.len();
    out[at..header].copy_from_slice(size.as_bytes());
    *out_pos = at;
    out.extend_from_slice(b"\r\n");
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
