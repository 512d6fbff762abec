//! The server connection: frames in, events out, responses in, frames out
//! (RFC 9113 §3.4 to §6, §8). No I/O, no threads, no wakers: the caller
//! reads the socket into a buffer of its own and gives it to
//! [`Connection::recv`], takes [`Event`]s, answers through `send_*`, and
//! writes what [`Connection::write_to`] hands it.

use std::collections::VecDeque;
use std::ops::Range;

use crate::error::{Error, Reason};
use crate::frame::{self, Head, HEADER_LEN, PREFACE};
use crate::head::{self, RequestHead};
use crate::hpack::{self, Block, Decoder, Fields};
use crate::settings::{
    PeerSettings, Settings, DEFAULT_WINDOW, MAX_FRAME_SIZE, MAX_WINDOW, MIN_FRAME_SIZE,
};
use crate::stats::Stats;

/// What the peer did, for the caller to act on ([`Connection::poll_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A request's head opened `stream`; `end_stream`: it has no body.
    Request {
        /// The stream (odd, increasing).
        stream: u32,
        /// Method, scheme, authority, path and fields, checked (§8.3.1).
        head: RequestHead,
        /// No DATA follows.
        end_stream: bool,
    },
    /// Body for `stream`: `data` is where its octets lie in the slice
    /// given to the [`Connection::recv`] call that queued this event (take
    /// the events before dropping that slice). Give the octets back to the
    /// flow-control windows with [`Connection::release_capacity`] once
    /// consumed.
    Data {
        /// The stream.
        stream: u32,
        /// The payload's place in `recv`'s input (padding left out).
        data: Range<usize>,
        /// The body ends here.
        end_stream: bool,
    },
    /// Trailers ended `stream`'s body (§8.1).
    Trailers {
        /// The stream.
        stream: u32,
        /// The trailer fields, checked.
        fields: Fields,
    },
    /// A request head larger than SETTINGS_MAX_HEADER_LIST_SIZE opened
    /// `stream`: answer 431 (RFC 6585), or reset it. Its body, if any,
    /// is discarded.
    HeadersTooLarge {
        /// The stream.
        stream: u32,
    },
    /// `stream` is gone: reset by the peer (its `reason`), or by us for a
    /// stream error in what the peer sent after its head (content-length
    /// broken, a window overrun). Drop what is pending for it.
    Reset {
        /// The stream.
        stream: u32,
        /// The RST_STREAM's code.
        reason: Reason,
    },
    /// `stream`'s send window opened after a `send_data` took less than
    /// it was given: send more.
    SendCapacity {
        /// The stream.
        stream: u32,
    },
    /// The peer sent GOAWAY: it opens no more streams.
    GoAway {
        /// Its code (NO_ERROR for a graceful close).
        reason: Reason,
    },
}

/// One stream's state (§5.1): open while either side may still send.
#[derive(Debug)]
struct Stream {
    id: u32,
    /// The peer has not ended its side (open or half-closed (local)).
    recv_open: bool,
    /// We have not ended ours (open or half-closed (remote)).
    send_open: bool,
    /// A final (non-1xx) response head went out.
    headers_sent: bool,
    /// A `send_data` took less than it was given.
    blocked: bool,
    /// The head was too large: DATA is dropped, not reported.
    discard: bool,
    /// What we may still send (i64: a SETTINGS change may make it negative, §6.9.2).
    send_window: i64,
    /// What the peer may still send.
    recv_window: i64,
    /// Released by the caller, not yet announced in a WINDOW_UPDATE.
    released: u32,
    content_length: Option<u64>,
    received: u64,
}

/// Where the connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for the client's preface (§3.4).
    Preface,
    /// Waiting for the client's first frame, which must be SETTINGS.
    FirstSettings,
    Open,
    /// A connection error (or our non-graceful GOAWAY): nothing more is read.
    Closed(Error),
}

/// A header block being gathered across CONTINUATION frames (§6.10).
#[derive(Debug)]
struct Gathering {
    stream: u32,
    end_stream: bool,
    bad_priority: bool,
    block: Vec<u8>,
}

/// How many stream ids we reset are remembered, so that the peer's frames
/// already on the way for them are dropped rather than answered (§5.4.2).
/// 16 ids (64 octets): a client rarely has more streams reset by us with
/// frames still on the way; one past it gets STREAM_CLOSED for them.
const RESETS_REMEMBERED: usize = 16;

/// The largest stream id: a graceful stop's first GOAWAY names it.
const MAX_STREAM_ID: u32 = 0x7fff_ffff;

/// The payload of a graceful stop's PING, told from a client's own by it.
const STOP_PING: [u8; 8] = *b"mpm-stop";

/// The output buffer's first allocation when a response starts: a few
/// small responses' frames, or a 16 KiB DATA frame, without growing.
const OUTPUT_START: usize = 16 * 1024 + 64;

/// The stream table's and the event queue's first allocation when a
/// connection that was idle gets a stream: room for a client's usual
/// burst (browsers and h2load open 6 to 10 streams at once) in one
/// allocation, not four doublings from one.
const STREAMS_START: usize = 16;

/// An event queued, the queue made with room for a burst the first time.
fn queue(events: &mut VecDeque<Event>, event: Event) {
    if events.capacity() == 0 {
        events.reserve(STREAMS_START);
    }
    events.push_back(event);
}

/// A sans-IO HTTP/2 server connection.
#[derive(Debug)]
pub struct Connection {
    settings: Settings,
    peer: PeerSettings,
    state: State,
    /// Our SETTINGS were acknowledged (the stream window we announced
    /// holds from then on).
    acked: bool,
    decoder: Decoder,
    /// Where header blocks are decoded, reused while streams are open: a
    /// request head is copied out of it in one allocation.
    scratch: Block,
    streams: Vec<Stream>,
    /// The highest stream id the peer opened (GOAWAY's last stream id).
    last_stream: u32,
    /// Stream ids we reset lately (0: none).
    resets: [u32; RESETS_REMEMBERED],
    next_reset: usize,
    gathering: Option<Gathering>,
    send_window: i64,
    recv_window: i64,
    /// Released connection window not yet announced.
    released: u32,
    /// Our GOAWAY went out: no new streams.
    going_away: bool,
    /// Our first, graceful GOAWAY (the largest stream id) and its PING went
    /// out: the final GOAWAY waits for that PING's ACK.
    stop_ping: bool,
    /// The peer's GOAWAY came: it opens no more streams.
    peer_gone: bool,
    events: VecDeque<Event>,
    out: Vec<u8>,
    idle_frames: u32,
    early_resets: u32,
    local_resets: u32,
    stats: Stats,
}

impl Connection {
    /// A connection that has not read the preface yet; our SETTINGS (and
    /// the connection window's opening) are already in the output, as
    /// §3.4 lets a server send them first.
    pub fn new(settings: Settings) -> Connection {
        let mut s = settings;
        s.max_frame_size = s.max_frame_size.clamp(MIN_FRAME_SIZE, MAX_FRAME_SIZE);
        s.initial_window_size = s.initial_window_size.min(MAX_WINDOW);
        s.connection_window_size = s.connection_window_size.clamp(DEFAULT_WINDOW, MAX_WINDOW);
        let mut out = Vec::with_capacity(64);
        let mut pairs: Vec<(u16, u32)> = vec![
            (frame::SETTINGS_ENABLE_PUSH, 0),
            (
                frame::SETTINGS_MAX_CONCURRENT_STREAMS,
                s.max_concurrent_streams,
            ),
            (frame::SETTINGS_MAX_HEADER_LIST_SIZE, s.max_header_list_size),
        ];
        if s.header_table_size != 4_096 {
            pairs.push((frame::SETTINGS_HEADER_TABLE_SIZE, s.header_table_size));
        }
        if s.initial_window_size != DEFAULT_WINDOW {
            pairs.push((frame::SETTINGS_INITIAL_WINDOW_SIZE, s.initial_window_size));
        }
        if s.max_frame_size != MIN_FRAME_SIZE {
            pairs.push((frame::SETTINGS_MAX_FRAME_SIZE, s.max_frame_size));
        }
        frame::write_head(&mut out, pairs.len() * 6, frame::SETTINGS, 0, 0);
        for (id, value) in pairs {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&value.to_be_bytes());
        }
        if s.connection_window_size > DEFAULT_WINDOW {
            frame::write_window_update(&mut out, 0, s.connection_window_size - DEFAULT_WINDOW);
        }
        Connection {
            decoder: Decoder::new(s.header_table_size as usize),
            scratch: Block::default(),
            recv_window: i64::from(s.connection_window_size),
            settings: s,
            peer: PeerSettings::default(),
            state: State::Preface,
            acked: false,
            streams: Vec::new(),
            last_stream: 0,
            resets: [0; RESETS_REMEMBERED],
            next_reset: 0,
            gathering: None,
            send_window: i64::from(DEFAULT_WINDOW),
            released: 0,
            going_away: false,
            stop_ping: false,
            peer_gone: false,
            events: VecDeque::new(),
            out,
            idle_frames: 0,
            early_resets: 0,
            local_resets: 0,
            stats: Stats::default(),
        }
    }

    /// Read the whole frames at the start of `input`; the answer is how
    /// many octets were consumed (a partial frame stays for the caller to
    /// complete). On a connection error the GOAWAY is queued: write the
    /// output, then close. Take the [`Event`]s before the next call.
    pub fn recv(&mut self, input: &[u8]) -> Result<usize, Error> {
        let mut pos = 0;
        loop {
            match &self.state {
                State::Closed(e) => return Err(e.clone()),
                State::Preface => {
                    let n = input.len().min(PREFACE.len());
                    if input[..n] != PREFACE[..n] {
                        return Err(self.fail(Reason::PROTOCOL_ERROR, "not the HTTP/2 preface"));
                    }
                    if n < PREFACE.len() {
                        return Ok(0);
                    }
                    pos = PREFACE.len();
                    self.state = State::FirstSettings;
                }
                State::FirstSettings | State::Open => {}
            }
            let rest = &input[pos..];
            if rest.len() < HEADER_LEN {
                break;
            }
            let head = Head::parse(rest);
            if head.len > self.settings.max_frame_size as usize {
                return Err(self.fail(
                    Reason::FRAME_SIZE_ERROR,
                    "a frame over our SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2)",
                ));
            }
            if rest.len() < HEADER_LEN + head.len {
                break;
            }
            if self.state == State::FirstSettings {
                if head.kind != frame::SETTINGS || head.flags & frame::ACK != 0 {
                    return Err(self.fail(
                        Reason::PROTOCOL_ERROR,
                        "the preface not followed by SETTINGS (RFC 9113 §3.4)",
                    ));
                }
                self.state = State::Open;
            }
            let start = pos + HEADER_LEN;
            let payload = &input[start..start + head.len];
            self.stats.frames_received += 1;
            self.frame(head, payload, start)?;
            pos = start + head.len;
        }
        Ok(pos)
    }

    /// The next thing the peer did, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front();
        if e.is_none() && self.streams.is_empty() {
            self.drop_buffers();
        }
        e
    }

    /// Frames are waiting to be written.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Move the frames to send into `dst` (appended; when `dst` is empty
    /// the buffers are swapped, no copy).
    pub fn write_to(&mut self, dst: &mut Vec<u8>) {
        // (`output_room` below: the buffer an idle connection dropped comes
        // back whole at the next response, not doubled up from 8 octets.)
        if dst.is_empty() {
            std::mem::swap(dst, &mut self.out);
        } else {
            dst.extend_from_slice(&self.out);
            self.out.clear();
        }
        if self.streams.is_empty() {
            self.out = Vec::new();
            self.drop_buffers();
        }
    }

    /// Idle: hold no queue, no stream table, no scratch (and, once written,
    /// no output buffer).
    fn drop_buffers(&mut self) {
        if self.events.is_empty() {
            self.events = VecDeque::new();
        }
        self.streams = Vec::new();
        self.scratch = Block::default();
    }

    /// The codec holds no buffer with room for a response's frames: one
    /// given with [`Connection::lend_buffer`] now spares it an allocation.
    pub fn needs_buffer(&self) -> bool {
        self.out.capacity() < OUTPUT_START
    }

    /// Give the codec an empty buffer for the frames it will write (a
    /// pool's, so that a busy connection allocates none of its own). It is
    /// kept when it is larger than the codec's own, whose frames move into
    /// it; the one not kept comes back, empty, for the pool. An idle
    /// connection drops what it holds once [`Connection::write_to`] took its
    /// frames: take the buffer back then (`write_to` into an empty vector
    /// swaps it out) rather than lend it.
    pub fn lend_buffer(&mut self, mut buf: Vec<u8>) -> Vec<u8> {
        buf.clear();
        if buf.capacity() <= self.out.capacity() {
            return buf;
        }
        buf.extend_from_slice(&self.out);
        let mut old = std::mem::replace(&mut self.out, buf);
        old.clear();
        old
    }

    /// Room for a step's frames in one allocation: the output buffer was
    /// dropped when the connection went idle, and growing it again from
    /// nothing a doubling at a time copied it over and over (a tenth of the
    /// CPU of a small response over TLS, by `perf`).
    fn output_room(&mut self) {
        if self.out.capacity() == 0 {
            self.out.reserve(OUTPUT_START);
        }
    }

    /// Nothing more will happen: a connection error, our non-graceful
    /// GOAWAY, or a GOAWAY (either side's) with every stream finished.
    /// Write the output, then close.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Closed(_))
            || ((self.going_away || self.peer_gone) && self.streams.is_empty())
    }

    /// Streams open (either side still sending).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// What the connection counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The heap the connection holds, its HPACK table included (see
    /// [`Connection::hpack_table_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        self.streams.capacity() * std::mem::size_of::<Stream>()
            + self.events.capacity() * std::mem::size_of::<Event>()
            + self
                .events
                .iter()
                .map(|e| match e {
                    Event::Request { head, .. } => head.heap_bytes(),
                    Event::Trailers { fields, .. } => fields.heap_bytes(),
                    _ => 0,
                })
                .sum::<usize>()
            + self.out.capacity()
            + self.scratch.heap_bytes()
            + self.gathering.as_ref().map_or(0, |g| g.block.capacity())
            + self.decoder.heap_bytes()
    }

    /// The heap the HPACK decoder's dynamic table holds (bounded by
    /// SETTINGS_HEADER_TABLE_SIZE's octets, plus a pointer and length per
    /// entry).
    pub fn hpack_table_bytes(&self) -> usize {
        self.decoder.heap_bytes()
    }

    // -----------------------------------------------------------------
    // Sending
    // -----------------------------------------------------------------

    /// Send a response head on `stream`: `status`, then `fields` (names
    /// in any case: they go out in lowercase; no connection-specific ones:
    /// the caller's to keep). A 1xx status may come before the final one.
    /// [`Connection::start_headers`] writes one field at a time instead.
    pub fn send_headers(
        &mut self,
        stream: u32,
        status: u16,
        fields: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> Result<(), Error> {
        let mut block = self.start_headers(stream, status, end_stream)?;
        for (name, value) in fields {
            block.field(name, value);
        }
        block.finish()
    }

    /// Start a response head on `stream`, written straight into the
    /// output as HPACK as each field is added: no list of fields, no copy
    /// of a name to lowercase it. The checks of [`Connection::send_headers`]
    /// are made here; [`HeaderBlock::finish`] sends it.
    pub fn start_headers(
        &mut self,
        stream: u32,
        status: u16,
        end_stream: bool,
    ) -> Result<HeaderBlock<'_>, Error> {
        self.output_room();
        let informational = (100..200).contains(&status);
        let s = self.sendable(stream)?;
        if s.headers_sent {
            return Err(Error::Misuse(stream, "a response head sent twice"));
        }
        if informational && end_stream {
            return Err(Error::Misuse(
                stream,
                "a 1xx response cannot end the stream",
            ));
        }
        let at = self.out.len();
        frame::write_head(&mut self.out, 0, frame::HEADERS, 0, stream);
        hpack::encode_status(status, &mut self.out);
        Ok(HeaderBlock {
            conn: self,
            stream,
            at,
            end_stream,
            informational,
            done: false,
            broken: false,
        })
    }

    /// Send trailers on `stream`, ending it (§8.1).
    pub fn send_trailers(&mut self, stream: u32, fields: &[(&[u8], &[u8])]) -> Result<(), Error> {
        let s = self.sendable(stream)?;
        if !s.headers_sent {
            return Err(Error::Misuse(stream, "trailers before the response head"));
        }
        let max_frame = self.peer.max_frame_size as usize;
        let at = self.out.len();
        frame::write_head(&mut self.out, 0, frame::HEADERS, 0, stream);
        for (name, value) in fields {
            hpack::encode_field(name, value, &mut self.out);
        }
        self.finish_block(at, stream, true, max_frame);
        self.end_sending(stream);
        Ok(())
    }

    /// Send as much of `data` on `stream` as the stream's and the
    /// connection's windows allow, in frames of the peer's largest size;
    /// the answer is how much went. `end_stream` ends the stream if all of
    /// `data` went. When less went, an [`Event::SendCapacity`] comes once
    /// the peer opens the window.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, Error> {
        let conn_window = self.send_window;
        let max_frame = self.peer.max_frame_size as usize;
        let s = self.sendable(stream)?;
        if !s.headers_sent {
            return Err(Error::Misuse(stream, "DATA before the response head"));
        }
        let window = s.send_window.min(conn_window).max(0) as usize;
        let n = data.len().min(window);
        let all = n == data.len();
        s.blocked = !all;
        s.send_window -= n as i64;
        self.send_window -= n as i64;
        let mut chunks = data[..n].chunks(max_frame).peekable();
        if n == 0 && all && end_stream {
            frame::write_head(&mut self.out, 0, frame::DATA, frame::END_STREAM, stream);
        }
        self.output_room();
        self.out
            .reserve(n + n.div_ceil(max_frame.max(1)) * HEADER_LEN);
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let flags = if last && all && end_stream {
                frame::END_STREAM
            } else {
                0
            };
            frame::write_head(&mut self.out, chunk.len(), frame::DATA, flags, stream);
            self.out.extend_from_slice(chunk);
        }
        if all && end_stream {
            self.end_sending(stream);
        }
        Ok(n)
    }

    /// What `send_data` on `stream` would take now.
    pub fn send_capacity(&self, stream: u32) -> usize {
        self.streams
            .iter()
            .find(|s| s.id == stream && s.send_open)
            .map_or(0, |s| s.send_window.min(self.send_window).max(0) as usize)
    }

    /// `stream` has more to send and [`Connection::send_capacity`] is 0:
    /// an [`Event::SendCapacity`] comes once the peer opens its window.
    pub fn wait_capacity(&mut self, stream: u32) {
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.id == stream && s.send_open)
        {
            s.blocked = true;
        }
    }

    /// Reset `stream` with `reason` (CANCEL, INTERNAL_ERROR, ...); a stream
    /// already gone is left alone.
    pub fn reset(&mut self, stream: u32, reason: Reason) {
        if let Some(i) = self.index(stream) {
            self.streams.swap_remove(i);
            self.write_reset(stream, reason);
        }
    }

    /// `n` octets of `stream`'s body were consumed: give them back to the
    /// peer's windows (a WINDOW_UPDATE once half a window is due, so that
    /// small reads do not each cost a frame).
    pub fn release_capacity(&mut self, stream: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(MAX_WINDOW);
        let threshold = (self.settings.initial_window_size / 2).max(1);
        if let Some(i) = self.index(stream) {
            let s = &mut self.streams[i];
            if s.recv_open {
                s.released = s.released.saturating_add(n);
                if s.released >= threshold {
                    let inc = s.released;
                    s.recv_window += i64::from(inc);
                    s.released = 0;
                    frame::write_window_update(&mut self.out, stream, inc);
                }
            }
        }
        self.release_connection(n);
    }

    /// Send GOAWAY. Graceful, in the two steps RFC 9113 §6.8 asks of a
    /// server: first a GOAWAY with the largest stream id and a PING (the
    /// streams the client opens meanwhile, before it saw the GOAWAY, are
    /// still taken), then, when the PING's ACK comes (or at a second
    /// graceful call, for a client that does not answer), the GOAWAY naming
    /// the last stream: newer ones are refused, the others finish, and
    /// [`Connection::is_done`] says when the last ended. Not graceful: the
    /// final GOAWAY, and every stream is dropped now.
    pub fn goaway(&mut self, graceful: bool) {
        if matches!(self.state, State::Closed(_)) {
            return;
        }
        if graceful && !self.going_away && !self.stop_ping {
            self.output_room();
            frame::write_goaway(&mut self.out, MAX_STREAM_ID, Reason::NO_ERROR.0);
            frame::write_head(&mut self.out, 8, frame::PING, 0, 0);
            self.out.extend_from_slice(&STOP_PING);
            self.stop_ping = true;
            return;
        }
        self.last_goaway();
        if !graceful {
            self.streams.clear();
            self.state = State::Closed(Error::Connection {
                reason: Reason::NO_ERROR,
                why: "our GOAWAY",
            });
        }
    }

    /// The GOAWAY naming the last stream the peer opened: from now on no
    /// new stream is taken.
    fn last_goaway(&mut self) {
        if !self.going_away {
            frame::write_goaway(&mut self.out, self.last_stream, Reason::NO_ERROR.0);
        }
        self.going_away = true;
        self.stop_ping = false;
    }

    // -----------------------------------------------------------------
    // Receiving, a frame at a time
    // -----------------------------------------------------------------

    fn frame(&mut self, head: Head, payload: &[u8], offset: usize) -> Result<(), Error> {
        if let Some(g) = &self.gathering {
            if head.kind != frame::CONTINUATION || head.stream != g.stream {
                return Err(self.fail(
                    Reason::PROTOCOL_ERROR,
                    "a header block interrupted before its END_HEADERS (RFC 9113 §6.10)",
                ));
            }
        }
        match head.kind {
            frame::DATA => self.data(head, payload, offset),
            frame::HEADERS => self.headers(head, payload),
            frame::PRIORITY => self.priority(head, payload),
            frame::RST_STREAM => self.rst_stream(head, payload),
            frame::SETTINGS => self.settings_frame(head, payload),
            frame::PUSH_PROMISE => Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "PUSH_PROMISE from a client (RFC 9113 §8.4)",
            )),
            frame::PING => self.ping(head, payload),
            frame::GOAWAY => self.goaway_frame(head, payload),
            frame::WINDOW_UPDATE => self.window_update(head, payload),
            frame::CONTINUATION => self.continuation(head, payload),
            // Unknown types are ignored (§4.1), but count as idle frames.
            _ => self.idle_frame(false),
        }
    }

    /// A frame that asks work of us but carries no request: past the
    /// limit in a row, a flood.
    fn idle_frame(&mut self, empty: bool) -> Result<(), Error> {
        self.idle_frames += 1;
        if self.idle_frames > self.settings.idle_frame_limit {
            if empty {
                self.stats.empty_frame_floods += 1;
            } else {
                self.stats.control_floods += 1;
            }
            return Err(self.fail(
                Reason::ENHANCE_YOUR_CALM,
                "too many frames that carry no request (a flood)",
            ));
        }
        Ok(())
    }

    fn data(&mut self, head: Head, payload: &[u8], offset: usize) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(self.fail(Reason::PROTOCOL_ERROR, "DATA on stream 0 (RFC 9113 §6.1)"));
        }
        let Some((body, pad_start)) = unpad(head, payload) else {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "padding as long as the frame (RFC 9113 §6.1)",
            ));
        };
        let len = payload.len();
        // Every octet counts against the connection window (§6.9.1).
        if len as i64 > self.recv_window {
            return Err(self.fail(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection window (RFC 9113 §6.9.1)",
            ));
        }
        self.recv_window -= len as i64;
        let end_stream = head.flags & frame::END_STREAM != 0;
        if body.is_empty() && !end_stream {
            self.idle_frame(true)?;
        } else {
            self.idle_frames = 0;
        }
        let Some(i) = self.index(head.stream) else {
            self.release_connection(len as u32);
            if head.stream > self.last_stream {
                return Err(self.fail(
                    Reason::PROTOCOL_ERROR,
                    "DATA on an idle stream (RFC 9113 §5.1)",
                ));
            }
            if !self.reset_lately(head.stream) {
                self.write_reset(head.stream, Reason::STREAM_CLOSED);
            }
            return Ok(());
        };
        let s = &mut self.streams[i];
        if !s.recv_open {
            self.release_connection(len as u32);
            return self.stream_error(i, Reason::STREAM_CLOSED);
        }
        if len as i64 > s.recv_window {
            self.release_connection(len as u32);
            return self.stream_error(i, Reason::FLOW_CONTROL_ERROR);
        }
        s.recv_window -= len as i64;
        s.received += body.len() as u64;
        let bad_length = match s.content_length {
            Some(cl) => s.received > cl || (end_stream && s.received != cl),
            None => false,
        };
        // Padding is not the caller's to release: give it back now.
        let padding = (len - body.len()) as u32;
        let discard = s.discard;
        if end_stream {
            s.recv_open = false;
        }
        if padding > 0 {
            s.recv_window += i64::from(padding);
            self.release_connection(padding);
        }
        if bad_length {
            self.release_connection(body.len() as u32);
            return self.stream_error(i, Reason::PROTOCOL_ERROR);
        }
        if discard {
            self.release_connection(body.len() as u32);
            if let Some(s) = self.streams.get_mut(i) {
                s.recv_window += body.len() as i64;
            }
        } else {
            let start = offset + pad_start;
            queue(
                &mut self.events,
                Event::Data {
                    stream: head.stream,
                    data: start..start + body.len(),
                    end_stream,
                },
            );
        }
        if end_stream {
            self.maybe_close(head.stream);
        }
        Ok(())
    }

    fn headers(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "HEADERS on stream 0 (RFC 9113 §6.2)",
            ));
        }
        let Some((mut block, _)) = unpad(head, payload) else {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "padding as long as the frame (RFC 9113 §6.2)",
            ));
        };
        let mut bad_priority = false;
        if head.flags & frame::PRIORITY_FLAG != 0 {
            if block.len() < 5 {
                return Err(if head.flags & frame::PADDED != 0 {
                    self.fail(
                        Reason::PROTOCOL_ERROR,
                        "padding that leaves no room for the priority (RFC 9113 §6.2)",
                    )
                } else {
                    self.fail(
                        Reason::FRAME_SIZE_ERROR,
                        "HEADERS too short for its priority (RFC 9113 §6.2)",
                    )
                });
            }
            bad_priority = frame::u31(block) == head.stream;
            block = &block[5..];
        }
        let end_stream = head.flags & frame::END_STREAM != 0;
        if head.flags & frame::END_HEADERS == 0 {
            self.gathering = Some(Gathering {
                stream: head.stream,
                end_stream,
                bad_priority,
                block: block.to_vec(),
            });
            return self.check_gathered();
        }
        self.header_block(head.stream, end_stream, bad_priority, block)
    }

    fn continuation(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        let Some(g) = self.gathering.as_mut() else {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "CONTINUATION without a header block (RFC 9113 §6.10)",
            ));
        };
        g.block.extend_from_slice(payload);
        if head.flags & frame::END_HEADERS == 0 {
            if payload.is_empty() {
                self.idle_frame(true)?;
            }
            return self.check_gathered();
        }
        let Some(g) = self.gathering.take() else {
            return Ok(());
        };
        self.header_block(g.stream, g.end_stream, g.bad_priority, &g.block)
    }

    /// A header block never ending is a flood (CONTINUATION, CVE-2024-27316):
    /// bound what is gathered by what a list within our limit can take.
    fn check_gathered(&mut self) -> Result<(), Error> {
        let bound =
            4 * self.settings.max_header_list_size as usize + self.settings.max_frame_size as usize;
        if self
            .gathering
            .as_ref()
            .is_some_and(|g| g.block.len() > bound)
        {
            self.stats.continuation_floods += 1;
            return Err(self.fail(
                Reason::ENHANCE_YOUR_CALM,
                "a header block past its bound (CONTINUATION flood)",
            ));
        }
        Ok(())
    }

    fn header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        bad_priority: bool,
        block: &[u8],
    ) -> Result<(), Error> {
        // Decoded whatever becomes of the stream: the table must follow
        // the peer's (RFC 7541 §2.2).
        self.scratch.clear();
        let fits = match self.decoder.decode(
            block,
            &mut self.scratch,
            self.settings.max_header_list_size as usize,
        ) {
            Ok(fits) => fits,
            Err(_) => {
                return Err(self.fail(
                    Reason::COMPRESSION_ERROR,
                    "a header block that does not decode (RFC 7541)",
                ))
            }
        };
        if id % 2 == 0 {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "a client stream with an even id (RFC 9113 §5.1.1)",
            ));
        }
        if let Some(i) = self.index(id) {
            // Trailers, or a second HEADERS on a stream the peer ended.
            if !self.streams[i].recv_open {
                return self.stream_error(i, Reason::STREAM_CLOSED);
            }
            if !end_stream || bad_priority || !fits || head::trailers(&self.scratch).is_err() {
                return self.stream_error(i, Reason::PROTOCOL_ERROR);
            }
            let s = &mut self.streams[i];
            s.recv_open = false;
            if s.content_length.is_some_and(|cl| cl != s.received) {
                return self.stream_error(i, Reason::PROTOCOL_ERROR);
            }
            if !s.discard {
                let fields = self.scratch.freeze(0);
                queue(&mut self.events, Event::Trailers { stream: id, fields });
            }
            self.maybe_close(id);
            return Ok(());
        }
        if id <= self.last_stream {
            if self.reset_lately(id) {
                return Ok(());
            }
            return Err(self.fail(
                Reason::STREAM_CLOSED,
                "HEADERS on a closed stream (RFC 9113 §5.1)",
            ));
        }
        // A new stream.
        self.last_stream = id;
        self.stats.streams_opened += 1;
        self.idle_frames = 0;
        if bad_priority {
            self.local_reset(id, Reason::PROTOCOL_ERROR)?;
            return Ok(());
        }
        if self.going_away || self.streams.len() >= self.settings.max_concurrent_streams as usize {
            self.stats.streams_refused += 1;
            self.write_reset(id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        let (head, discard) = if fits {
            match head::request(&self.scratch) {
                Ok(h) => (Some(h), false),
                Err(_) => {
                    self.local_reset(id, Reason::PROTOCOL_ERROR)?;
                    return Ok(());
                }
            }
        } else {
            (None, true)
        };
        let recv_initial = self.recv_initial();
        if self.streams.capacity() == 0 {
            self.streams.reserve(STREAMS_START);
        }
        self.streams.push(Stream {
            id,
            recv_open: !end_stream,
            send_open: true,
            headers_sent: false,
            blocked: false,
            discard,
            send_window: i64::from(self.peer.initial_window_size),
            recv_window: i64::from(recv_initial),
            released: 0,
            content_length: head.as_ref().and_then(RequestHead::content_length),
            received: 0,
        });
        match head {
            Some(head) => {
                if end_stream && head.content_length().is_some_and(|cl| cl != 0) {
                    let i = self.streams.len() - 1;
                    self.streams.swap_remove(i);
                    return self.local_reset(id, Reason::PROTOCOL_ERROR);
                }
                queue(
                    &mut self.events,
                    Event::Request {
                        stream: id,
                        head,
                        end_stream,
                    },
                );
            }
            None => queue(&mut self.events, Event::HeadersTooLarge { stream: id }),
        }
        Ok(())
    }

    fn priority(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "PRIORITY on stream 0 (RFC 9113 §6.3)",
            ));
        }
        self.idle_frame(false)?;
        if payload.len() != 5 {
            return self.stream_error_id(head.stream, Reason::FRAME_SIZE_ERROR);
        }
        if frame::u31(payload) == head.stream {
            return self.stream_error_id(head.stream, Reason::PROTOCOL_ERROR);
        }
        // Priorities are ignored (§5.3.2 lets a server).
        Ok(())
    }

    fn rst_stream(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "RST_STREAM on stream 0 (RFC 9113 §6.4)",
            ));
        }
        if payload.len() != 4 {
            return Err(self.fail(
                Reason::FRAME_SIZE_ERROR,
                "RST_STREAM not 4 octets long (RFC 9113 §6.4)",
            ));
        }
        if head.stream > self.last_stream {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream (RFC 9113 §6.4)",
            ));
        }
        let reason = Reason(frame::u32_at(payload));
        let Some(i) = self.index(head.stream) else {
            // A closed stream: nothing to do, but a flood of them is one.
            return self.idle_frame(false);
        };
        {
            let s = self.streams.swap_remove(i);
            self.stats.streams_reset_by_peer += 1;
            queue(
                &mut self.events,
                Event::Reset {
                    stream: s.id,
                    reason,
                },
            );
            if !s.headers_sent {
                self.early_resets += 1;
                if self.early_resets > self.settings.rapid_reset_limit {
                    self.stats.rapid_reset_floods += 1;
                    return Err(self.fail(
                        Reason::ENHANCE_YOUR_CALM,
                        "streams reset before their answer, too many (rapid reset)",
                    ));
                }
            }
        }
        Ok(())
    }

    fn settings_frame(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream != 0 {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "SETTINGS on a stream (RFC 9113 §6.5)",
            ));
        }
        if head.flags & frame::ACK != 0 {
            if !payload.is_empty() {
                return Err(self.fail(
                    Reason::FRAME_SIZE_ERROR,
                    "a SETTINGS ACK with a payload (RFC 9113 §6.5)",
                ));
            }
            if !self.acked {
                self.acked = true;
                // Our stream window holds from now on (it was the RFC's
                // default while the peer might not have seen ours).
                let delta = i64::from(self.settings.initial_window_size)
                    - i64::from(DEFAULT_WINDOW.max(self.settings.initial_window_size));
                for s in &mut self.streams {
                    s.recv_window += delta;
                }
            }
            return Ok(());
        }
        if payload.len() % 6 != 0 {
            return Err(self.fail(
                Reason::FRAME_SIZE_ERROR,
                "SETTINGS not a multiple of 6 octets (RFC 9113 §6.5)",
            ));
        }
        self.idle_frame(false)?;
        for pair in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([pair[0], pair[1]]);
            let value = frame::u32_at(&pair[2..]);
            match id {
                frame::SETTINGS_ENABLE_PUSH if value > 1 => {
                    return Err(self.fail(
                        Reason::PROTOCOL_ERROR,
                        "SETTINGS_ENABLE_PUSH neither 0 nor 1 (RFC 9113 §6.5.2)",
                    ));
                }
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if value > MAX_WINDOW {
                        return Err(self.fail(
                            Reason::FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1 (RFC 9113 §6.5.2)",
                        ));
                    }
                    let delta = i64::from(value) - i64::from(self.peer.initial_window_size);
                    self.peer.initial_window_size = value;
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > i64::from(MAX_WINDOW) {
                            // Checked below, outside the borrow.
                        }
                    }
                    if self
                        .streams
                        .iter()
                        .any(|s| s.send_window > i64::from(MAX_WINDOW))
                    {
                        return Err(self.fail(
                            Reason::FLOW_CONTROL_ERROR,
                            "a stream window over 2^31-1 (RFC 9113 §6.9.2)",
                        ));
                    }
                    if delta > 0 {
                        self.wake_blocked(None);
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&value) {
                        return Err(self.fail(
                            Reason::PROTOCOL_ERROR,
                            "SETTINGS_MAX_FRAME_SIZE out of range (RFC 9113 §6.5.2)",
                        ));
                    }
                    self.peer.max_frame_size = value;
                }
                // The header table (our encoder keeps none), the
                // concurrency (we open no streams), the list size
                // (advisory) and unknown settings (§6.5.2) change nothing.
                _ => {}
            }
        }
        frame::write_head(&mut self.out, 0, frame::SETTINGS, frame::ACK, 0);
        self.stats.settings += 1;
        Ok(())
    }

    fn ping(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream != 0 {
            return Err(self.fail(Reason::PROTOCOL_ERROR, "PING on a stream (RFC 9113 §6.7)"));
        }
        if payload.len() != 8 {
            return Err(self.fail(
                Reason::FRAME_SIZE_ERROR,
                "PING not 8 octets long (RFC 9113 §6.7)",
            ));
        }
        if head.flags & frame::ACK != 0 {
            // The only PING we send is a graceful stop's: its ACK says the
            // client saw the first GOAWAY. Any other ACK is ignored.
            if self.stop_ping && payload == STOP_PING {
                self.last_goaway();
            }
            return Ok(());
        }
        self.idle_frame(false)?;
        frame::write_head(&mut self.out, 8, frame::PING, frame::ACK, 0);
        self.out.extend_from_slice(payload);
        self.stats.pings += 1;
        Ok(())
    }

    fn goaway_frame(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if head.stream != 0 {
            return Err(self.fail(Reason::PROTOCOL_ERROR, "GOAWAY on a stream (RFC 9113 §6.8)"));
        }
        if payload.len() < 8 {
            return Err(self.fail(
                Reason::FRAME_SIZE_ERROR,
                "GOAWAY shorter than 8 octets (RFC 9113 §6.8)",
            ));
        }
        self.peer_gone = true;
        queue(
            &mut self.events,
            Event::GoAway {
                reason: Reason(frame::u32_at(&payload[4..])),
            },
        );
        Ok(())
    }

    fn window_update(&mut self, head: Head, payload: &[u8]) -> Result<(), Error> {
        if payload.len() != 4 {
            return Err(self.fail(
                Reason::FRAME_SIZE_ERROR,
                "WINDOW_UPDATE not 4 octets long (RFC 9113 §6.9)",
            ));
        }
        let inc = frame::u31(payload);
        if head.stream == 0 {
            if inc == 0 {
                return Err(self.fail(
                    Reason::PROTOCOL_ERROR,
                    "a WINDOW_UPDATE of 0 on the connection (RFC 9113 §6.9)",
                ));
            }
            self.send_window += i64::from(inc);
            if self.send_window > i64::from(MAX_WINDOW) {
                return Err(self.fail(
                    Reason::FLOW_CONTROL_ERROR,
                    "the connection window over 2^31-1 (RFC 9113 §6.9.1)",
                ));
            }
            self.wake_blocked(None);
            return Ok(());
        }
        if head.stream > self.last_stream {
            return Err(self.fail(
                Reason::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream (RFC 9113 §5.1)",
            ));
        }
        let Some(i) = self.index(head.stream) else {
            // A closed stream: nothing to do, but a flood of them is one.
            return self.idle_frame(false);
        };
        if inc == 0 {
            return self.stream_error(i, Reason::PROTOCOL_ERROR);
        }
        let s = &mut self.streams[i];
        s.send_window += i64::from(inc);
        if s.send_window > i64::from(MAX_WINDOW) {
            return self.stream_error(i, Reason::FLOW_CONTROL_ERROR);
        }
        self.wake_blocked(Some(head.stream));
        Ok(())
    }

    // -----------------------------------------------------------------
    // Helpers
    // -----------------------------------------------------------------

    fn index(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// The stream window the peer may fill: ours once it acknowledged our
    /// SETTINGS, until then the larger of ours and the RFC's default.
    fn recv_initial(&self) -> u32 {
        if self.acked {
            self.settings.initial_window_size
        } else {
            self.settings.initial_window_size.max(DEFAULT_WINDOW)
        }
    }

    fn sendable(&mut self, stream: u32) -> Result<&mut Stream, Error> {
        if matches!(self.state, State::Closed(_)) {
            return Err(Error::StreamClosed(stream));
        }
        self.streams
            .iter_mut()
            .find(|s| s.id == stream && s.send_open)
            .ok_or(Error::StreamClosed(stream))
    }

    /// Split a header block written at `at` (header placeholder first)
    /// into HEADERS and CONTINUATION frames no larger than `max_frame`.
    fn finish_block(&mut self, at: usize, stream: u32, end_stream: bool, max_frame: usize) {
        let block_len = self.out.len() - at - HEADER_LEN;
        let es = if end_stream { frame::END_STREAM } else { 0 };
        if block_len <= max_frame {
            frame::patch_len(&mut self.out, at, block_len);
            self.out[at + 4] = es | frame::END_HEADERS;
            return;
        }
        let block = self.out.split_off(at + HEADER_LEN);
        self.out.truncate(at);
        let mut chunks = block.chunks(max_frame).enumerate().peekable();
        while let Some((i, chunk)) = chunks.next() {
            let last = chunks.peek().is_none();
            let (kind, mut flags) = if i == 0 {
                (frame::HEADERS, es)
            } else {
                (frame::CONTINUATION, 0)
            };
            if last {
                flags |= frame::END_HEADERS;
            }
            frame::write_head(&mut self.out, chunk.len(), kind, flags, stream);
            self.out.extend_from_slice(chunk);
        }
    }

    /// Our side of `stream` ended: close it, or, if the peer is still
    /// sending, tell it to stop (§8.1: NO_ERROR after a complete response).
    fn end_sending(&mut self, stream: u32) {
        let Some(i) = self.index(stream) else { return };
        let s = &mut self.streams[i];
        s.send_open = false;
        self.early_resets = self.early_resets.saturating_sub(1);
        if s.recv_open {
            self.streams.swap_remove(i);
            frame::write_rst(&mut self.out, stream, Reason::NO_ERROR.0);
            self.remember_reset(stream);
        } else {
            self.streams.swap_remove(i);
        }
    }

    fn maybe_close(&mut self, stream: u32) {
        if let Some(i) = self.index(stream) {
            let s = &self.streams[i];
            if !s.recv_open && !s.send_open {
                self.streams.swap_remove(i);
            }
        }
    }

    fn wake_blocked(&mut self, only: Option<u32>) {
        let conn_open = self.send_window > 0;
        for s in &mut self.streams {
            if s.blocked
                && s.send_open
                && s.send_window > 0
                && conn_open
                && only.is_none_or(|id| id == s.id)
            {
                s.blocked = false;
                queue(&mut self.events, Event::SendCapacity { stream: s.id });
            }
        }
    }

    fn release_connection(&mut self, n: u32) {
        self.released = self.released.saturating_add(n);
        if self.released >= self.settings.connection_window_size / 2 {
            let inc = self.released;
            self.recv_window += i64::from(inc);
            self.released = 0;
            frame::write_window_update(&mut self.out, 0, inc);
        }
    }

    fn write_reset(&mut self, stream: u32, reason: Reason) {
        frame::write_rst(&mut self.out, stream, reason.0);
        self.stats.streams_reset_by_us += 1;
        self.remember_reset(stream);
    }

    fn remember_reset(&mut self, stream: u32) {
        self.resets[self.next_reset] = stream;
        self.next_reset = (self.next_reset + 1) % RESETS_REMEMBERED;
    }

    fn reset_lately(&self, stream: u32) -> bool {
        self.resets.contains(&stream)
    }

    /// Reset a stream the caller never heard of, for a malformed request;
    /// too many is a flood.
    fn local_reset(&mut self, id: u32, reason: Reason) -> Result<(), Error> {
        self.write_reset(id, reason);
        self.local_resets += 1;
        if self.local_resets > self.settings.local_reset_limit {
            self.stats.local_reset_floods += 1;
            return Err(self.fail(Reason::ENHANCE_YOUR_CALM, "too many malformed requests"));
        }
        Ok(())
    }

    /// A stream error on the stream at `i` (§5.4.2): reset it, tell the caller.
    fn stream_error(&mut self, i: usize, reason: Reason) -> Result<(), Error> {
        let s = self.streams.swap_remove(i);
        self.write_reset(s.id, reason);
        queue(
            &mut self.events,
            Event::Reset {
                stream: s.id,
                reason,
            },
        );
        self.local_resets += 1;
        if self.local_resets > self.settings.local_reset_limit {
            self.stats.local_reset_floods += 1;
            return Err(self.fail(
                Reason::ENHANCE_YOUR_CALM,
                "too many streams reset for errors",
            ));
        }
        Ok(())
    }

    fn stream_error_id(&mut self, id: u32, reason: Reason) -> Result<(), Error> {
        match self.index(id) {
            Some(i) => self.stream_error(i, reason),
            None => self.local_reset(id, reason),
        }
    }

    /// A connection error (§5.4.1): GOAWAY queued, the connection closed.
    fn fail(&mut self, reason: Reason, why: &'static str) -> Error {
        let e = Error::Connection { reason, why };
        frame::write_goaway(&mut self.out, self.last_stream, reason.0);
        self.stats.connection_errors += 1;
        self.streams.clear();
        self.gathering = None;
        self.state = State::Closed(e.clone());
        e
    }
}

/// A response head being written into the connection's output (RFC 9113
/// §8.3.2), from [`Connection::start_headers`]: `:status`, then each field
/// in HPACK as it is added (a literal without indexing, its name indexed
/// when the static table has it, lowercased as it is written).
/// [`HeaderBlock::finish`] frames it (HEADERS, and CONTINUATION past the
/// peer's frame size) and sends it; dropped unfinished, none of it is sent.
#[derive(Debug)]
pub struct HeaderBlock<'c> {
    conn: &'c mut Connection,
    stream: u32,
    /// Where the HEADERS frame's header is in the output.
    at: usize,
    end_stream: bool,
    informational: bool,
    done: bool,
    /// A [`HeaderBlock::field_with`] writer took octets away.
    broken: bool,
}

impl HeaderBlock<'_> {
    /// A field: `name` in any case (it goes out in lowercase; no
    /// connection-specific one, RFC 9113 §8.2.2: the caller's to keep).
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> &mut Self {
        hpack::encode_field(name, value, &mut self.conn.out);
        self
    }

    /// A field whose value `write` appends to the vector it is given (and
    /// does nothing else to it): a date or a number formatted straight
    /// into the output, with no buffer of its own.
    pub fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        let out = &mut self.conn.out;
        hpack::encode_name(name, out);
        // The length comes first (§5.2): one octet held for it, made more
        // after the fact for a value of 127 octets or more.
        let len_at = out.len();
        out.push(0);
        let start = out.len();
        write(out);
        if out.len() < start {
            self.broken = true;
            return self;
        }
        let (octets, len) = hpack::integer_octets(out.len() - start, 7, 0);
        if len == 1 {
            out[len_at] = octets[0];
        } else {
            drop(out.splice(len_at..start, octets[..len].iter().copied()));
        }
        self
    }

    /// Frame the head and send it (ending the stream if it was started
    /// so).
    pub fn finish(mut self) -> Result<(), Error> {
        self.done = true;
        let stream = self.stream;
        let conn = &mut *self.conn;
        if self.broken {
            conn.out.truncate(self.at);
            return Err(Error::Misuse(
                stream,
                "a field's writer took octets out of the output",
            ));
        }
        if !self.informational {
            if let Some(s) = conn.streams.iter_mut().find(|s| s.id == stream) {
                s.headers_sent = true;
            }
        }
        let max_frame = conn.peer.max_frame_size as usize;
        conn.finish_block(self.at, stream, self.end_stream, max_frame);
        if self.end_stream {
            conn.end_sending(stream);
        }
        Ok(())
    }
}

impl Drop for HeaderBlock<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.conn.out.truncate(self.at);
        }
    }
}

/// The payload without its padding (§6.1, §6.2), and where the rest
/// starts in it; `None` when the padding is as long as the frame.
fn unpad(head: Head, payload: &[u8]) -> Option<(&[u8], usize)> {
    if head.flags & frame::PADDED == 0 {
        return Some((payload, 0));
    }
    let (&pad, rest) = payload.split_first()?;
    let pad = usize::from(pad);
    if pad >= payload.len() {
        return None;
    }
    let body = rest.get(..rest.len().checked_sub(pad)?)?;
    Some((body, 1))
}
