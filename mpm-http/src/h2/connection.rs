//! One HTTP/2 connection and its step: read what the socket has into a
//! buffer, hand it to the `mpm-h2` codec, route its events to the streams
//! (a new stream, body, a reset, a window opened), let every stream move,
//! write the codec's frames straight to the socket, and say what to wait
//! for.
//!
//! Buffers: the read buffer comes from the pool the HTTP/1.1 side uses
//! and goes back as soon as it holds no partial frame; what the socket did
//! not take of the codec's output stays in one buffer, dropped once sent.
//! An idle connection holds the codec's state (settings, windows, its
//! HPACK table) and no buffer.

use std::io::{self, ErrorKind, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpm_core::waiting::Await;
use mpm_core::{Interest, Prefetch, Stream, Wait};
use mpm_h2::{Connection, Event, Reason};

use super::request;
use super::settings::H2Settings;
use super::stats::{self, Count};
use super::stream::{Advance, Inbound, StreamTask, Turn, Wire};
use crate::buffer_pool::{BufferPool, READ_BUFFER};
use crate::head::Limits;
use crate::reading::Reader;
use crate::writing::Sender;
use crate::HttpHandler;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = mpm_h2::PREFACE;

/// Rounds of turns one step makes while events keep coming, before it
/// yields to the loop's other connections.
const ROUNDS: usize = 32;

/// When two streams wait on two different descriptors, the step can name
/// one to the model ([`Await`] holds one): it waits on that one and comes
/// back this soon to poll the other.
const SECOND_WAIT: Duration = Duration::from_millis(10);

/// The smallest output buffer given back to the pool: the codec's small
/// ones (a SETTINGS ACK's) are not worth keeping, and would hand an
/// HTTP/1.1 response a buffer it must grow.
const POOLED_OUTPUT: usize = 4 * 1024;

/// Room in the table of what arrived per stream, made at once when a
/// connection that was idle opens streams: a burst without regrowing.
const INBOUND_START: usize = 16;

/// The longest a step waits on an upstream before it looks again at
/// whether the server is stopping: one spurious resume a second for a
/// connection whose streams wait (each stream's future expects them).
const DRAIN_CHECK: Duration = Duration::from_secs(1);

/// What the first bytes of a connection say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Preface {
    /// The HTTP/2 connection preface.
    Yes,
    /// Its start, so far.
    Partial,
    /// Something else (HTTP/1.x).
    No,
}

/// Do `data`, a connection's first bytes, begin with the preface?
pub(crate) fn preface(data: &[u8]) -> Preface {
    let n = data.len().min(PREFACE.len());
    if data[..n] != PREFACE[..n] {
        Preface::No
    } else if n == PREFACE.len() {
        Preface::Yes
    } else {
        Preface::Partial
    }
}

/// What a client that chose `h2` by ALPN gets when its first bytes are
/// not the preface (HTTP/1.1, say): a connection error PROTOCOL_ERROR
/// (RFC 9113 §3.4). The server's preface (an empty SETTINGS, which must
/// come first, §3.4), then GOAWAY: last stream 0, PROTOCOL_ERROR, and
/// why in its debug data.
const NOT_A_PREFACE: &[u8] = b"\0\0\0\x04\0\0\0\0\0\
\0\0\x34\x07\0\0\0\0\0\0\0\0\0\0\0\0\x01\
ALPN chose h2; the connection preface is due";

/// A client chose `h2` by ALPN, then sent something other than the
/// preface: the GOAWAY of [`NOT_A_PREFACE`], sent if the socket takes it,
/// counted and logged (at info: the client's mistake, not the server's),
/// and a lingering close, so that the client reads the GOAWAY before a
/// reset for the bytes it sent. The connection was never HTTP/1.1: a
/// client that negotiated a protocol must speak it (RFC 7301 §3.2).
pub(crate) fn not_a_preface(s: &mut Stream) -> Interest {
    stats::add(Count::GoawayProtocolError);
    mpm_core::log_info!(
        "mpm: HTTP/2 connection ended: {} chose h2 by ALPN, then sent no connection preface: \
         GOAWAY PROTOCOL_ERROR",
        s.peer_addr()
    );
    let _ = s.send(NOT_A_PREFACE, false);
    Interest::Linger
}

/// The codec and what surrounds it that a stream's turn may reach: the
/// socket's buffers, what arrived for each stream, the streams opened
/// meanwhile.
pub(crate) struct Link {
    pub(crate) codec: Connection,
    pool: Arc<BufferPool>,
    /// Octets read and not yet consumed by the codec (a partial frame),
    /// `input[..filled]`; empty (no buffer) when there are none.
    input: Vec<u8>,
    filled: usize,
    /// The client shut its side (a read of 0).
    input_ended: bool,
    /// Frames the socket has not taken, from `out_pos`.
    output: Vec<u8>,
    out_pos: usize,
    /// What arrived for each open stream.
    inbound: Vec<Inbound>,
    /// Streams the codec opened, for the step to take.
    pub(crate) accepted: Vec<StreamTask>,
    /// An event came for some stream since the step last looked.
    moved: bool,
    /// The codec failed (a GOAWAY with an error is in the output): what
    /// the step returns once it is written.
    pub(crate) failed: Option<Interest>,
    /// The codec's counters as last added to the status page's.
    seen: mpm_h2::Stats,
    /// The request-line and field limits HTTP/1.1 heads are held to
    /// (`--limit-request-line`, `-fields`, `-field-size`), held to here
    /// too: HTTP/2's own bound is only the whole header list's size.
    limits: Limits,
}

impl Link {
    /// What arrived for `id`, while it is open.
    pub(crate) fn inbound(&mut self, id: u32) -> Option<&mut Inbound> {
        self.inbound.iter_mut().find(|i| i.id == id)
    }

    /// `id` is finished: what arrived for it is dropped (its window given
    /// back, so that the connection's does not shrink).
    pub(crate) fn forget(&mut self, id: u32) {
        if let Some(at) = self.inbound.iter().position(|i| i.id == id) {
            let gone = self.inbound.swap_remove(at);
            if !gone.body.is_empty() {
                self.codec.release_capacity(id, gone.body.len());
            }
        }
        if self.inbound.is_empty() {
            self.inbound = Vec::new();
        }
    }

    fn has_output(&self) -> bool {
        self.out_pos < self.output.len() || self.codec.has_output()
    }

    /// Bytes held by the connection's buffers (input, output).
    fn allocated(&self) -> usize {
        self.input.capacity() + self.output.capacity()
    }

    /// With no partial frame, the read buffer goes back to the pool.
    fn release_input(&mut self) {
        if self.filled == 0 && !self.input.is_empty() {
            self.pool.put_read(std::mem::take(&mut self.input));
        }
    }

    /// Room to read into: a buffer from the pool, grown to hold the
    /// frame that is partly there.
    fn room(&mut self) -> &mut [u8] {
        if self.input.is_empty() {
            self.input = self.pool.read_buffer();
        }
        if self.filled == self.input.len() {
            // A frame larger than the buffer: room for all of it (the
            // codec refuses one over our SETTINGS_MAX_FRAME_SIZE first).
            let need = if self.filled >= 9 {
                let len = u32::from_be_bytes([0, self.input[0], self.input[1], self.input[2]]);
                9 + len as usize
            } else {
                self.filled + READ_BUFFER
            };
            self.input.resize(need.max(self.filled + 1), 0);
        }
        &mut self.input[self.filled..]
    }

    /// One read of the socket (non-blocking, or as the socket blocks),
    /// its frames given to the codec: did bytes (or the end) come?
    fn read(&mut self, s: &mut Stream) -> Result<bool, ()> {
        if self.input_ended || self.failed.is_some() {
            return Ok(false);
        }
        let got = s.read(self.room());
        match got {
            Ok(0) => {
                self.input_ended = true;
                self.release_input();
                Ok(true)
            }
            Ok(n) => {
                self.filled += n;
                self.ingest();
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                self.release_input();
                Ok(false)
            }
            Err(_) => Err(()),
        }
    }

    /// One read within `left` (a worker's pump), its frames given to the
    /// codec.
    pub(crate) fn read_within(&mut self, s: &mut Stream, left: Duration) -> io::Result<()> {
        if self.input_ended {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "the client closed",
            ));
        }
        let n = s.read_within(self.room(), left)?;
        if n == 0 {
            self.input_ended = true;
            self.release_input();
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "the client closed",
            ));
        }
        self.filled += n;
        self.ingest();
        Ok(())
    }

    /// The codec reads what is buffered; its events go to the streams.
    fn ingest(&mut self) {
        let result = self.codec.recv(&self.input[..self.filled]);
        while let Some(event) = self.codec.poll_event() {
            self.moved = true;
            match event {
                Event::Request {
                    stream,
                    head,
                    end_stream,
                } => {
                    if let Some(why) = request::malformed(&head) {
                        mpm_core::log_debug!(
                            "mpm: HTTP/2 stream {stream} {:?} malformed: {why}",
                            request::target(&head)
                        );
                        self.codec.reset(stream, Reason::PROTOCOL_ERROR);
                        continue;
                    }
                    // 414, 431 or 413, as HTTP/1.1 answers, the connection
                    // going on.
                    if let Some(status) = request::over_limits(&head, &self.limits) {
                        let _ = self.codec.send_headers(stream, status, &[], true);
                        continue;
                    }
                    // RFC 9110 §10.1.1: a client that asked to hear 100
                    // before it sends its body waits for it (curl: a second).
                    // HTTP/1.1 sends it once the body is to be read; so does
                    // a stream, at once (one whose announced length is past
                    // the limit was answered 413 above).
                    if !end_stream
                        && head
                            .fields()
                            .iter()
                            .any(|(n, v)| n == b"expect" && v.eq_ignore_ascii_case(b"100-continue"))
                    {
                        let _ = self.codec.send_headers(stream, 100, &[], false);
                    }
                    if self.inbound.capacity() == 0 {
                        self.inbound.reserve(INBOUND_START);
                    }
                    self.inbound.push(Inbound {
                        id: stream,
                        body: Vec::new(),
                        ended: end_stream,
                        reset: false,
                    });
                    self.accepted
                        .push(StreamTask::new(stream, head, end_stream));
                }
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => {
                    let bytes = &self.input[data];
                    match self.inbound.iter_mut().find(|i| i.id == stream) {
                        Some(i) => {
                            i.body.extend_from_slice(bytes);
                            i.ended |= end_stream;
                        }
                        // A stream already answered: its window back.
                        None => self.codec.release_capacity(stream, bytes.len()),
                    }
                }
                Event::Trailers { stream, .. } => {
                    if let Some(i) = self.inbound(stream) {
                        i.ended = true;
                    }
                }
                Event::HeadersTooLarge { stream } => {
                    // 431 (RFC 6585 §5), the connection going on.
                    let _ = self.codec.send_headers(stream, 431, &[], true);
                }
                Event::Reset { stream, .. } => {
                    if let Some(i) = self.inbound(stream) {
                        i.reset = true;
                    }
                }
                Event::SendCapacity { .. } | Event::GoAway { .. } => {}
            }
        }
        match result {
            Ok(used) => {
                self.input.copy_within(used..self.filled, 0);
                self.filled -= used;
            }
            Err(e) => {
                self.filled = 0;
                let interest = if e.reason() == Some(Reason::NO_ERROR) {
                    Interest::Close
                } else {
                    mpm_core::log_info!("mpm: HTTP/2 connection ended: {e}");
                    Interest::Linger
                };
                self.failed = Some(interest);
            }
        }
        self.release_input();
        self.count();
    }

    /// What the codec counted since last time, to the status page.
    fn count(&mut self) {
        let now = *self.codec.stats();
        let was = std::mem::replace(&mut self.seen, now);
        let floods = |s: &mpm_h2::Stats| {
            s.control_floods
                + s.empty_frame_floods
                + s.continuation_floods
                + s.rapid_reset_floods
                + s.local_reset_floods
        };
        // Refused streams are counted apart, as when `h2` refused them
        // before the server saw them; so are the resets that refuse them.
        let refused = now.streams_refused - was.streams_refused;
        stats::add_n(
            Count::Streams,
            (now.streams_opened - was.streams_opened).saturating_sub(refused),
        );
        stats::add_n(Count::StreamsRefused, refused);
        stats::add_n(
            Count::StreamsReset,
            (now.streams_reset_by_us - was.streams_reset_by_us).saturating_sub(refused),
        );
        let flood = floods(&now) - floods(&was);
        stats::add_n(Count::GoawayFlood, flood);
        stats::add_n(
            Count::GoawayProtocolError,
            (now.connection_errors - was.connection_errors).saturating_sub(flood),
        );
    }

    /// Streams are about to answer: the codec writes their frames into a
    /// buffer from the pool (given back once written, or kept while
    /// streams stay open), not one of its own made per burst.
    fn lend_output(&mut self) {
        if self.codec.needs_buffer() {
            let back = self.codec.lend_buffer(self.pool.write_buffer());
            self.recycle(back);
        }
    }

    /// An output buffer all sent: back to the codec while streams are open
    /// (no allocation per step), else to the pool (an idle connection holds
    /// none).
    fn recycle(&mut self, buf: Vec<u8>) {
        let back = if self.codec.open_streams() > 0 && buf.capacity() > 0 {
            self.codec.lend_buffer(buf)
        } else {
            buf
        };
        if back.capacity() >= POOLED_OUTPUT {
            self.pool.put_write(back);
        }
    }

    /// The codec's frames to the socket, as much as it takes now.
    fn flush(&mut self, s: &mut Stream) -> io::Result<()> {
        self.count();
        if self.out_pos >= self.output.len() {
            // All of ours went: the codec's buffer is taken whole (a swap,
            // into a vector that holds none), ours goes back.
            let spent = std::mem::take(&mut self.output);
            self.out_pos = 0;
            self.codec.write_to(&mut self.output);
            self.recycle(spent);
        } else {
            self.codec.write_to(&mut self.output);
        }
        while self.out_pos < self.output.len() {
            match s.send(&self.output[self.out_pos..], false) {
                Ok(0) => return Err(io::Error::from(ErrorKind::WriteZero)),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out_pos = 0;
        let spent = std::mem::take(&mut self.output);
        self.recycle(spent);
        Ok(())
    }

    /// The codec's frames to the socket, all of them within `left` (a
    /// worker's pump).
    pub(crate) fn flush_within(&mut self, s: &mut Stream, left: Duration) -> io::Result<()> {
        self.count();
        self.codec.write_to(&mut self.output);
        if self.out_pos < self.output.len() {
            s.write_all_within(&self.output[self.out_pos..], left)?;
        }
        self.out_pos = 0;
        let spent = std::mem::take(&mut self.output);
        self.recycle(spent);
        Ok(())
    }
}

/// An HTTP/2 connection's state between steps.
pub(crate) struct H2Conn {
    link: Link,
    streams: Vec<StreamTask>,
    /// A GOAWAY for the server's stop was sent.
    goaway: bool,
    /// The last step waited for the client's input (not a yield, a write
    /// or an upstream): a blocking socket may block on its next read.
    expect_input: bool,
}

impl std::fmt::Debug for H2Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Conn")
            .field("streams", &self.streams.len())
            .field("goaway", &self.goaway)
            .finish()
    }
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        stats::sub(Count::ConnectionsOpen);
        self.link.release_input();
    }
}

/// What a step came to.
pub(crate) struct Stepped {
    pub(crate) interest: Interest,
    /// A stream's next move may block and the step ran on a loop.
    pub(crate) for_a_worker: bool,
}

impl From<Interest> for Stepped {
    fn from(interest: Interest) -> Stepped {
        Stepped {
            interest,
            for_a_worker: false,
        }
    }
}

impl H2Conn {
    /// A connection whose first bytes (`first`, the preface and whatever
    /// came with it) were read by the HTTP/1.1 side.
    pub(crate) fn new(
        settings: &H2Settings,
        limits: Limits,
        pool: Arc<BufferPool>,
        first: &[u8],
    ) -> H2Conn {
        stats::add(Count::Connections);
        stats::add(Count::ConnectionsOpen);
        let mut link = Link {
            codec: Connection::new(settings.codec()),
            pool,
            input: Vec::new(),
            filled: 0,
            input_ended: false,
            output: Vec::new(),
            out_pos: 0,
            inbound: Vec::new(),
            accepted: Vec::new(),
            moved: false,
            failed: None,
            seen: mpm_h2::Stats::default(),
            limits,
        };
        link.input = first.to_vec();
        link.filled = first.len();
        link.ingest();
        H2Conn {
            link,
            streams: Vec::new(),
            goaway: false,
            expect_input: false,
        }
    }

    /// With nothing buffered either way, the buffers are gone already (the
    /// read buffer went back at the last read, the output once sent):
    /// returns whether none is held.
    pub(crate) fn release_buffers(&mut self) -> bool {
        self.link.release_input();
        self.link.allocated() == 0
    }

    /// Bytes held by the connection's buffers.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.link.allocated()
    }

    /// What a wait for the client is bounded by: the keep-alive timeout
    /// with no stream open, the request timeout with one (a stream whose
    /// window the client never opens is cut off by it).
    fn wait(&self) -> Wait {
        if self.streams.is_empty() && self.link.accepted.is_empty() && self.link.filled == 0 {
            Wait::KeepAlive
        } else {
            Wait::Request
        }
    }

    /// Event loops: read what arrived and say whether a step is due. The
    /// step itself runs on the loop: a stream whose handler may block
    /// sends it to a worker from there.
    pub(crate) fn prefetch(&mut self, s: &mut Stream) -> Prefetch {
        if !self.expect_input || self.link.has_output() || self.link.moved {
            return Prefetch::ReadyInline;
        }
        match self.link.read(s) {
            Ok(true) if self.link.moved || self.link.failed.is_some() || self.link.input_ended => {
                Prefetch::ReadyInline
            }
            Ok(_) if self.link.has_output() => Prefetch::ReadyInline,
            Ok(_) => Prefetch::Wait(Interest::Read(self.wait())),
            Err(()) => Prefetch::Wait(Interest::Close),
        }
    }

    /// The server stops: GOAWAY (RFC 9113 §6.8), then the streams in
    /// flight finish and the connection ends. With streams open, in the
    /// codec's two steps (the largest id and a PING, then the last stream
    /// once the PING comes back), so that a request the client sent before
    /// it saw the first is still answered; idle, the connection is closed
    /// now, so the last GOAWAY goes at once.
    fn begin_stop(&mut self) {
        if self.goaway || self.link.failed.is_some() {
            return;
        }
        self.link.codec.goaway(true);
        if self.streams.is_empty() && self.link.accepted.is_empty() {
            self.link.codec.goaway(true);
        }
        self.goaway = true;
        stats::add(Count::GoawayStop);
    }

    /// The server stops and the connection is idle (no stream open): the
    /// GOAWAY(NO_ERROR) naming the last stream processed (RFC 9113 §6.8),
    /// sent if the socket takes it, before the model closes. Counted as a
    /// stop's GOAWAY unless the step already sent one (it saw the stop).
    pub(crate) fn idle_at_stop(&mut self, s: &mut Stream) {
        if self.link.failed.is_none() && !self.goaway {
            self.goaway = true;
            stats::add(Count::GoawayStop);
        }
        self.timed_out(s);
    }

    /// A wait timed out (no frame within the timeout, or a stream whose
    /// window never opened): a last GOAWAY, sent if the socket takes it.
    pub(crate) fn timed_out(&mut self, s: &mut Stream) {
        if self.link.failed.is_none() {
            self.link.codec.goaway(false);
            let _ = self.link.flush(s);
        }
    }
}

/// One step of the connection: see the module's notes.
pub(crate) fn step<H: HttpHandler>(
    reader: &mut Reader<H>,
    sender: &mut Sender,
    h: &mut H2Conn,
    s: &mut Stream,
) -> Stepped {
    // A blocking socket is read only when the step has nothing else to do
    // (its read may block): it waited for input, or input is there.
    let may_read = !s.is_blocking()
        || h.expect_input
        || !s.drained()
        || mpm_core::blocking::has_pending_input(s.socket());
    h.expect_input = false;
    // (On a blocking socket a read that timed out left the stream's
    // would-block flag set: the driver closes after this step.)
    if may_read && h.link.read(s).is_err() {
        return finish(h, reader, sender, s, Interest::Close);
    }
    if s.is_draining() {
        h.begin_stop();
    }
    let on_loop = s.on_event_loop();
    let mut budget = if on_loop {
        sender.settings.sendfile_max_chunk
    } else {
        u64::MAX
    };
    let mut rounds = 0;
    loop {
        rounds += 1;
        // Frames the socket has not taken yet go first: while it refuses
        // them no stream adds more (else a slow reader, or a loop whose
        // socket takes a bounded queue at a time as uring's does, would
        // have the output grow by a budget each step).
        if h.link.out_pos < h.link.output.len() {
            match h.link.flush(s) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Write.into(),
                Err(_) => return finish(h, reader, sender, s, Interest::Close),
            }
        }
        h.link.moved = false;
        h.streams.append(&mut h.link.accepted);
        if !h.streams.is_empty() && h.link.failed.is_none() {
            h.link.lend_output();
        }
        let mut turn = Turn {
            reader,
            sender,
            on_loop,
            peer: s.peer_addr(),
            secure: s.has_transport(),
            slot: s.score_slot(),
            budget,
        };
        let (mut again, mut worker) = (false, false);
        let mut wait: Option<(Await, usize)> = None;
        if h.link.failed.is_none() {
            for st in &mut h.streams {
                let mut wire = Wire {
                    link: &mut h.link,
                    stream: &mut *s,
                };
                match st.advance(&mut turn, &mut wire) {
                    Advance::Idle | Advance::Done => {}
                    Advance::Again => again = true,
                    Advance::NeedsWorker => worker = true,
                    Advance::Wait(w) => wait = Some(merge(wait, w)),
                }
            }
        }
        budget = turn.budget;
        h.streams.retain(|st| !st.is_done());
        match h.link.flush(s) {
            Ok(()) => {}
            // (On a blocking socket: the write timed out, the driver closes.)
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Write.into(),
            Err(_) => return finish(h, reader, sender, s, Interest::Close),
        }
        if let Some(interest) = h.link.failed {
            return finish(h, reader, sender, s, interest);
        }
        if h.link.codec.is_done() && h.link.accepted.is_empty() {
            return finish(h, reader, sender, s, Interest::Close);
        }
        // Something arrived for a stream (a window opened, body, a new
        // stream): another round.
        if (h.link.moved || !h.link.accepted.is_empty()) && rounds < ROUNDS {
            continue;
        }
        if worker && on_loop {
            return Stepped {
                interest: Interest::Yield,
                for_a_worker: true,
            };
        }
        if again || rounds >= ROUNDS {
            return Interest::Yield.into();
        }
        if wait.is_some() && h.link.input_ended {
            // The client closed the connection while streams wait (on
            // upstreams): nobody will read their answers. They end here,
            // and what they waited on with them (an upstream's connection
            // closes), as nginx ends them (499).
            for st in &mut h.streams {
                st.client_gone();
            }
            return finish(h, reader, sender, s, Interest::Close);
        }
        if let Some((mut w, _)) = wait {
            // Back within DRAIN_CHECK, so that a stop is answered with its
            // GOAWAY while streams wait (an event loop resumes a waiting
            // connection only when its wait ends).
            if !h.goaway {
                w.until = w.until.min(mpm_core::deadline(Instant::now(), DRAIN_CHECK));
            }
            return Interest::Await(w.or_client_input()).into();
        }
        if h.link.input_ended {
            // The client shut its side: nothing more will come.
            return finish(h, reader, sender, s, Interest::Close);
        }
        h.expect_input = true;
        return Interest::Read(h.wait()).into();
    }
}

/// Two streams' waits as one: the earliest deadline, the first descriptor;
/// with a second descriptor, back soon to poll its stream.
fn merge(acc: Option<(Await, usize)>, w: Await) -> (Await, usize) {
    let fds = usize::from(w.fd.is_some());
    let Some((mut kept, n)) = acc else {
        return (w, fds);
    };
    let until = kept.until.min(w.until);
    if kept.fd.is_none() && w.fd.is_some() {
        kept = w;
    }
    kept.until = until;
    let n = n + fds;
    if n > 1 {
        kept.until = kept
            .until
            .min(mpm_core::deadline(Instant::now(), SECOND_WAIT));
    }
    (kept, n)
}

/// The connection is over: every stream still open gets its log line.
fn finish<H>(
    h: &mut H2Conn,
    reader: &mut Reader<H>,
    sender: &mut Sender,
    s: &Stream,
    interest: Interest,
) -> Stepped {
    let mut turn = Turn {
        reader,
        sender,
        on_loop: s.on_event_loop(),
        peer: s.peer_addr(),
        secure: s.has_transport(),
        slot: s.score_slot(),
        budget: 0,
    };
    h.streams.append(&mut h.link.accepted);
    for st in &mut h.streams {
        st.abandon(&mut turn);
    }
    h.streams.clear();
    h.link.inbound = Vec::new();
    interest.into()
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

    use super::{preface, Preface, PREFACE};
    use crate::{HttpHandler, HttpService, HttpSettings, Request, Response};

    struct Hello;

    impl HttpHandler for Hello {
        fn handle(&mut self, req: &Request<'_>) -> Response {
            Response::new(200).body(format!(
                "hi {} {}",
                req.path(),
                req.header_str("host").unwrap_or("-")
            ))
        }
    }

    /// The client's socket and the server's, non-blocking as under event.
    fn pair() -> (TcpStream, Stream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let (sock, peer) = listener.accept().unwrap();
        let stream = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
        (client, stream)
    }

    /// A frame: length, type, flags, stream, payload (RFC 9113 §4.1).
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// The preface, an empty SETTINGS, and one GET of `block` (a header
    /// block, HPACK) that ends its stream.
    /// Write `bytes` from the client and wait until the server's side can
    /// read them.
    fn send(client: &mut TcpStream, stream: &Stream, bytes: &[u8]) {
        client.write_all(bytes).unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            stream,
            Duration::from_secs(10)
        ));
    }

    fn request(block: &[u8]) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(4, 0, 0, &[]));
        bytes.extend(frame(1, 0x5, 1, block));
        bytes
    }

    /// `:method GET`, `:scheme http`, `:path /`, `:authority a` (HPACK's
    /// static table, the authority a literal).
    const GET_SLASH: &[u8] = &[0x82, 0x86, 0x84, 0x41, 0x01, b'a'];

    /// Every frame the server sent within the client's read timeout.
    fn frames(client: &mut TcpStream) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        parse(&got)
    }

    /// Frames: type, flags, stream, payload.
    fn parse(got: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 9 <= got.len() {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            let sid = u32::from_be_bytes(got[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
            let payload = got[at + 9..(at + 9 + len).min(got.len())].to_vec();
            out.push((got[at + 3], got[at + 4], sid, payload));
            at += 9 + len;
        }
        out
    }

    fn h2c() -> HttpSettings {
        let mut s = HttpSettings::default();
        s.h2.cleartext = true;
        s
    }

    #[test]
    fn the_preface_is_recognised_from_its_first_bytes() {
        assert_eq!(preface(b"PRI * HT"), Preface::Partial);
        assert_eq!(preface(PREFACE), Preface::Yes);
        assert_eq!(preface(b"POST / HTTP/1.1\r\n"), Preface::No);
        assert_eq!(preface(b"PRI * HTTP/1.1\r\n\r\n"), Preface::No);
    }

    #[test]
    fn a_stream_is_answered_by_the_handler_and_an_idle_connection_keeps_no_buffers() {
        let mut svc = HttpService::new(Hello, &h2c());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        send(&mut client, &stream, &request(GET_SLASH));
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Read(Wait::KeepAlive),
            "answered, nothing open: idle"
        );
        let frames = frames(&mut client);
        let data: Vec<u8> = frames
            .iter()
            .filter(|f| f.0 == 0 && f.2 == 1)
            .flat_map(|f| f.3.clone())
            .collect();
        assert_eq!(data, b"hi / a", "the :authority is the host");
        assert!(
            frames.iter().any(|f| f.0 == 1 && f.2 == 1),
            "a HEADERS frame"
        );
        svc.parked(&mut conn);
        let h = conn.occasional.as_ref().unwrap().h2.as_ref().unwrap();
        assert_eq!(h.allocated(), 0, "an idle connection holds no buffers");
        assert!(
            !svc.can_hand_over(&conn),
            "its HPACK state is this process's"
        );
    }

    #[test]
    fn on_a_loop_a_handler_that_may_block_is_run_by_a_worker() {
        let mut svc = HttpService::new(Hello, &h2c());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        send(&mut client, &stream, &request(GET_SLASH));
        stream.set_on_event_loop(true);
        assert_eq!(
            svc.prefetch(&mut conn, &mut stream),
            mpm_core::Prefetch::ReadyInline,
            "the preface: the handshake never blocks"
        );
        assert_eq!(svc.readable(&mut conn, &mut stream), Interest::Yield);
        assert_eq!(
            svc.prefetch(&mut conn, &mut stream),
            mpm_core::Prefetch::Ready,
            "Hello does not say it answers without blocking: a worker"
        );
        stream.set_on_event_loop(false);
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Read(Wait::KeepAlive)
        );
        assert!(frames(&mut client)
            .iter()
            .any(|f| f.0 == 0 && f.3 == b"hi / a"));
    }

    /// Reads its body as it arrives, and answers with it.
    struct Echo;

    impl HttpHandler for Echo {
        fn handle(&mut self, req: &Request<'_>) -> Response {
            let mut got = Vec::new();
            match req.body_reader().read_to_end(&mut got) {
                Ok(_) => Response::new(200).body(got),
                Err(_) => Response::new(299),
            }
        }

        fn streams_body(&self, _: &Request<'_>) -> bool {
            true
        }
    }

    #[test]
    fn a_handler_reads_a_body_as_its_frames_arrive() {
        let mut svc = HttpService::new(Echo, &h2c());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        let sender = {
            let mut client = client.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut first = PREFACE.to_vec();
                first.extend(frame(4, 0, 0, &[]));
                // HEADERS without END_STREAM: a body follows.
                first.extend(frame(1, 0x4, 1, GET_SLASH));
                first.extend(frame(0, 0, 1, b"abc"));
                client.write_all(&first).unwrap();
                // The handler is reading by now, and waits for the rest.
                std::thread::sleep(Duration::from_millis(100));
                client.write_all(&frame(0, 0x1, 1, b"defg")).unwrap();
            })
        };
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Read(Wait::KeepAlive)
        );
        sender.join().unwrap();
        let data: Vec<u8> = frames(&mut client)
            .iter()
            .filter(|f| f.0 == 0 && f.2 == 1)
            .flat_map(|f| f.3.clone())
            .collect();
        assert_eq!(data, b"abcdefg");
    }

    /// A body far larger than socket buffers.
    struct Big;

    impl HttpHandler for Big {
        fn handle(&mut self, _: &Request<'_>) -> Response {
            Response::new(200).body(vec![7u8; 4 << 20])
        }
    }

    #[test]
    fn a_write_the_socket_refused_goes_on_when_the_model_calls_writable() {
        let mut svc = HttpService::new(Big, &h2c());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        // A window as large as the body: only the socket holds it back.
        let mut first = PREFACE.to_vec();
        first.extend(frame(4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
        first.extend(frame(8, 0, 0, &0x7fff_0000u32.to_be_bytes()));
        first.extend(frame(1, 0x5, 1, GET_SLASH));
        send(&mut client, &stream, &first);
        let mut next = svc.readable(&mut conn, &mut stream);
        let (mut got, mut writes) = (Vec::new(), 0);
        let mut buf = vec![0u8; 1 << 20];
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while next != Interest::Read(Wait::KeepAlive) {
            assert!(std::time::Instant::now() < deadline, "stuck at {next:?}");
            next = match next {
                // The loop finds the socket writable and calls this.
                Interest::Write => {
                    writes += 1;
                    let n = client.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..n]);
                    svc.writable(&mut conn, &mut stream)
                }
                Interest::Yield => svc.readable(&mut conn, &mut stream),
                other => panic!("{other:?}"),
            };
        }
        assert!(
            writes > 0,
            "the socket never refused: the test proves nothing"
        );
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let data = parse(&got);
        let body: usize = data
            .iter()
            .filter(|f| f.0 == 0 && f.2 == 1)
            .map(|f| f.3.len())
            .sum();
        assert_eq!(body, 4 << 20, "the whole body");
        assert!(
            data.iter().any(|f| f.0 == 0 && f.1 & 1 == 1),
            "and its end (END_STREAM)"
        );
    }

    #[test]
    fn a_path_not_in_origin_form_is_reset_with_protocol_error() {
        let mut svc = HttpService::new(Hello, &h2c());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        // `:path x`: a literal of the static table's `:path` (index 4).
        let block = [0x82, 0x86, 0x04, 0x01, b'x', 0x41, 0x01, b'a'];
        send(&mut client, &stream, &request(&block));
        let _ = svc.readable(&mut conn, &mut stream);
        let frames = frames(&mut client);
        assert!(
            frames
                .iter()
                .any(|f| f.0 == 3 && f.2 == 1 && f.3 == [0, 0, 0, 1]),
            "RST_STREAM(PROTOCOL_ERROR) on stream 1: {frames:?}"
        );
        assert!(
            !frames.iter().any(|f| f.0 == 7),
            "no GOAWAY: a stream error"
        );
    }

    #[test]
    fn a_header_list_over_the_limit_is_answered_431_and_the_connection_goes_on() {
        let mut settings = h2c();
        // A plain GET is 166 octets as RFC 9113 counts; with `x-big`, 403.
        settings.h2.max_header_list_size = 300;
        let mut svc = HttpService::new(Hello, &settings);
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        // GET / with `x-big: ` and 200 octets (a literal, new name).
        let mut big = GET_SLASH.to_vec();
        big.extend([0x00, 5]);
        big.extend(b"x-big");
        big.extend([0x7f, 200 - 127]);
        big.extend([b'v'; 200]);
        let mut bytes = request(&big);
        // Then stream 3, a plain GET.
        bytes.extend(frame(1, 0x5, 3, GET_SLASH));
        send(&mut client, &stream, &bytes);
        let _ = svc.readable(&mut conn, &mut stream);
        let frames = frames(&mut client);
        // `:status 431`: a literal of the static table's `:status` (index 8).
        let h1 = frames
            .iter()
            .find(|f| f.0 == 1 && f.2 == 1)
            .expect("HEADERS on 1");
        assert_eq!(h1.3, [0x08, 3, b'4', b'3', b'1'], "431 on stream 1");
        assert!(h1.1 & 1 == 1, "and the stream ended");
        let data: Vec<u8> = frames
            .iter()
            .filter(|f| f.0 == 0 && f.2 == 3)
            .flat_map(|f| f.3.clone())
            .collect();
        assert_eq!(
            data, b"hi / a",
            "stream 3 answered: the connection went on: {frames:?}"
        );
        assert!(!frames.iter().any(|f| f.0 == 7), "no GOAWAY");
    }

    #[test]
    fn an_idle_connection_at_a_stop_gets_goaway_no_error_naming_its_last_stream() {
        let mut svc = HttpService::new(Hello, &h2c());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        send(&mut client, &stream, &request(GET_SLASH));
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Read(Wait::KeepAlive)
        );
        svc.parked(&mut conn);
        let _ = frames(&mut client);
        svc.idle_at_stop(&mut conn, &mut stream);
        let frames = frames(&mut client);
        assert_eq!(
            frames
                .iter()
                .filter(|f| f.0 == 7)
                .map(|f| f.3.clone())
                .collect::<Vec<_>>(),
            [vec![0, 0, 0, 1, 0, 0, 0, 0]],
            "one GOAWAY: last stream 1, NO_ERROR"
        );
    }

    /// A layer that passes bytes through and says ALPN chose `alpn`.
    struct Chose(&'static [u8]);

    impl mpm_core::Transport for Chose {
        fn read(&mut self, raw: &mut Stream, buf: &mut [u8]) -> std::io::Result<usize> {
            raw.read(buf)
        }
        fn write(&mut self, raw: &mut Stream, buf: &[u8], more: bool) -> std::io::Result<usize> {
            raw.send(buf, more)
        }
        fn holds_input(&self) -> bool {
            false
        }
        fn alpn(&self) -> Option<&[u8]> {
            Some(self.0)
        }
        fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
            self
        }
    }

    #[test]
    fn a_client_that_chose_h2_by_alpn_and_sends_http_1_1_gets_goaway_protocol_error() {
        let mut settings = HttpSettings::default();
        settings.h2.tls = true;
        for (alpn, on_loop) in [(&b"h2"[..], false), (b"h2", true), (b"http/1.1", false)] {
            let mut svc = HttpService::new(Hello, &settings);
            let (mut client, mut stream) = pair();
            let mut conn = svc.connected(&stream);
            client
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap();
            assert!(mpm_core::blocking::input_arrives_within(
                &stream,
                Duration::from_secs(10)
            ));
            stream.attach(Box::new(Chose(alpn)));
            stream.set_on_event_loop(on_loop);
            if on_loop {
                assert_eq!(
                    svc.prefetch(&mut conn, &mut stream),
                    mpm_core::Prefetch::ReadyInline,
                    "the error is answered on the loop"
                );
            }
            let next = svc.readable(&mut conn, &mut stream);
            let mut got = [0u8; 256];
            let n = client.read(&mut got).unwrap();
            if alpn == b"http/1.1" {
                assert!(got[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &got[..n]);
                continue;
            }
            assert_eq!(next, Interest::Linger);
            let frames = parse(&got[..n]);
            assert_eq!((frames[0].0, frames[0].3.len()), (4, 0), "SETTINGS first");
            assert_eq!(frames[1].0, 7, "then GOAWAY");
            assert_eq!(frames[1].3[..8], [0, 0, 0, 0, 0, 0, 0, 1], "PROTOCOL_ERROR");
            assert_eq!(frames.len(), 2, "{frames:?}");
        }
    }

    #[test]
    fn without_h2c_the_preface_on_a_plain_connection_is_not_http2() {
        let mut svc = HttpService::new(Hello, &HttpSettings::default());
        let (mut client, mut stream) = pair();
        let mut conn = svc.connected(&stream);
        send(&mut client, &stream, &request(GET_SLASH));
        let _ = svc.readable(&mut conn, &mut stream);
        let mut got = [0u8; 64];
        let n = client.read(&mut got).unwrap();
        assert!(got[..n].starts_with(b"HTTP/1.1 "), "{:?}", &got[..n]);
        assert!(!conn.is_h2());
    }
}
