//! The frame checker: every octet the client sends passes it before `h2`
//! reads it, so that bad input gets the error code RFC 9113 and RFC 7541
//! name where `h2` 0.4 answers another (its codec maps a fixed-length
//! frame of the wrong length and every HPACK failure to PROTOCOL_ERROR)
//! or none at all (a pseudo-header field in trailers; SETTINGS and PING
//! floods, which our pipe only slows down).
//!
//! [`Checked`] is the I/O object `h2` owns: the [`Pipe`], whose reads go
//! through a [`FrameCheck`] (and whose writes past the scan of
//! `refusals.rs`, which counts the streams `h2` refuses). It splits the octets into frames (after the
//! 24 of the preface; a frame may straddle reads) and checks, per frame:
//!
//! * lengths of the fixed-length frames (RFC 9113 §6.3, 6.4, 6.5, 6.7,
//!   6.9: FRAME_SIZE_ERROR; a PRIORITY's is a stream error, answered as a
//!   connection error as §5.4.1 allows);
//! * SETTINGS values (§6.5.2: ENABLE_PUSH, INITIAL_WINDOW_SIZE as
//!   FLOW_CONTROL_ERROR, MAX_FRAME_SIZE);
//! * header blocks (HEADERS + CONTINUATION, §6.10) decoded alongside
//!   `h2`'s decoder, with the dynamic table (RFC 7541: COMPRESSION_ERROR
//!   for index 0 or past the tables, a size update after a field or over
//!   the 4,096 octets of SETTINGS_HEADER_TABLE_SIZE, a Huffman string with
//!   EOS or bad padding, a block ending inside a representation; §4.3);
//! * DATA or HEADERS on a stream the client ended (its END_STREAM or
//!   RST_STREAM): STREAM_CLOSED (§5.1), as a connection error (§5.4.1);
//! * a pseudo-header field in trailers (§8.1: PROTOCOL_ERROR);
//! * floods of frames `h2` must acknowledge ([`CONTROL_FLOOD`]):
//!   ENHANCE_YOUR_CALM.
//!
//! On a violation `h2` is given the octets before the offending frame and
//! no more; [`Verdict::answer`] then has `h2` send GOAWAY with the code
//! and its last stream id (`h2` writes whole frames, so the GOAWAY never
//! lands inside another frame) and the connection closes, lingering.
//!
//! Why a decoder of our own and not `fluke-hpack` (which the tests use):
//! that crate builds a `HashMap` Huffman decoder for every string, keeps
//! copies of every name and value in its table, and panics on a size
//! update cut short (`decode_integer(..).ok().unwrap()`). This one
//! allocates nothing: the dynamic table is kept as the lengths of each
//! entry's name and value and whether the name is a pseudo-header
//! (all that indices, sizes and the trailer rule need), 128 entries of 4
//! octets at most (4,096 / 32, RFC 7541 §4.1).
//!
//! Cost: no allocation but one `Arc` per connection (the verdict the
//! connection reads); DATA payloads are skipped unread, other frames are
//! looked at in their 9-octet header, header blocks decoded (strings sent
//! as they are passed over whole, Huffman-coded ones a symbol at a time).
//! The state is under 1 KiB per connection
//! (`the_checker_holds_under_a_kib_per_connection`), in the `h2`
//! connection's box, and the connection's own: no lock, nothing shared
//! between connections but the GOAWAY counter a cut adds to, so it costs
//! the same per connection at 64 cores as at 2.
//!
//! A violation in frames read while a handler reads its body as it
//! arrives (`stream.rs`'s pump reads the socket itself) is found as soon
//! as `h2` reads them, but answered at the connection's next step: the
//! handler meanwhile waits for body that `h2` will not get, up to its
//! body timeout.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use h2::Reason;
use mpm_core::Interest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::connection::{self, State, PREFACE};
use super::pipe::Pipe;
use super::refusals::Refusals;
use super::stats::{self, Count};
use super::stream::StreamTask;

/// PINGs and SETTINGS needing an ACK that a client may send since it last
/// opened a stream or sent DATA; one more is a flood (ENHANCE_YOUR_CALM).
/// 10,000 is nginx's bound on frames queued for a client and nghttp2's
/// (`NGHTTP2_MAX_OBQ_FLOOD_ITEM`). No real client comes near it between
/// two requests: a browser or curl sends one or two SETTINGS per
/// connection and a PING now and then; gRPC's keepalive PINGs come 10 s
/// apart at the least (27 hours for 10,000). The one that could is
/// gRPC's bandwidth probe, a PING per round trip while one response's
/// DATA flows: 10,000 round trips of a single download with no other
/// request get a GOAWAY, and the client a new connection.
pub(crate) const CONTROL_FLOOD: u32 = 10_000;

/// The dynamic table's largest size: SETTINGS_HEADER_TABLE_SIZE as the
/// server announces it, `h2`'s default (our settings never change it).
const TABLE_LIMIT: u32 = 4_096;

/// Client streams whose END_STREAM or RST_STREAM is remembered: the last
/// 512 opened (4 times nginx's 128 concurrent streams), 64 octets. A
/// frame on a stream older than that is left to `h2` (which answers
/// RST_STREAM STREAM_CLOSED for a stream it forgot).
const REMEMBERED: u32 = 512;

// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

// ---------------------------------------------------------------------------
// The I/O object `h2` reads through, and what the connection does with a
// violation
// ---------------------------------------------------------------------------

/// The pipe as `h2` sees it: its reads checked.
#[derive(Debug)]
pub(crate) struct Checked {
    pipe: Pipe,
    check: FrameCheck,
    failed: Arc<AtomicU32>,
    /// The server's side: its frames scanned for the streams `h2` refuses.
    refusals: Refusals,
}

/// The connection's side of a [`Checked`]: the code of a violation, once
/// there is one, and whether it was answered.
#[derive(Debug)]
pub(crate) struct Verdict {
    failed: Arc<AtomicU32>,
    answered: bool,
}

impl Checked {
    /// `h2`'s handle on `pipe`, and the verdict the connection keeps.
    pub(crate) fn new(pipe: Pipe) -> (Checked, Verdict) {
        let failed = Arc::new(AtomicU32::new(0));
        let verdict = Verdict {
            failed: failed.clone(),
            answered: false,
        };
        let checked = Checked {
            pipe,
            check: FrameCheck::default(),
            failed,
            refusals: Refusals::default(),
        };
        (checked, verdict)
    }
}

impl AsyncRead for Checked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let got = Pin::new(&mut this.pipe).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read == 0 || !matches!(got, Poll::Ready(Ok(()))) {
            return got;
        }
        let admitted = this.check.admit(&buf.filled()[before..]);
        if admitted < read {
            // What follows the offending frame's start is never `h2`'s.
            buf.set_filled(before + admitted);
            if let Some(reason) = this.check.failed() {
                this.failed.store(reason.into(), Ordering::Relaxed);
            }
            if admitted == 0 {
                // Not the end: the connection answers with a GOAWAY.
                return Poll::Pending;
            }
        }
        got
    }
}

impl AsyncWrite for Checked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let wrote = Pin::new(&mut this.pipe).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = wrote {
            this.refusals.sent(&buf[..n]);
        }
        wrote
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().pipe).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().pipe).poll_shutdown(cx)
    }
}

impl Verdict {
    /// The code of the violation found, if one was.
    pub(crate) fn failed(&self) -> Option<Reason> {
        match self.failed.load(Ordering::Relaxed) {
            0 => None,
            code => Some(Reason::from(code)),
        }
    }

    /// After a poll of the connection (which came to `ended`): a violation
    /// found and not yet answered has `h2` send GOAWAY with its code, once
    /// `h2` took the frames before it; the close that follows lingers, so
    /// that the client reads the GOAWAY before a reset.
    pub(crate) fn answer(
        &mut self,
        state: &mut State,
        accepted: &mut Vec<StreamTask>,
        cx: &mut Context<'_>,
        ended: Option<Interest>,
    ) -> Option<Interest> {
        if self.answered {
            if ended == Some(Interest::Close) {
                *state = State::Ended(Interest::Linger);
                return Some(Interest::Linger);
            }
            return ended;
        }
        if ended.is_some() {
            return ended;
        }
        let reason = self.failed()?;
        let State::Open(conn) = state else {
            return None;
        };
        conn.abrupt_shutdown(reason);
        self.answered = true;
        stats::add(if reason == Reason::ENHANCE_YOUR_CALM {
            Count::GoawayFlood
        } else {
            Count::GoawayProtocolError
        });
        mpm_core::log_info!(
            "mpm: HTTP/2 connection ended: GOAWAY {reason:?} for the client's frames"
        );
        let ended = connection::drive(state, accepted, cx);
        self.answer(state, accepted, cx, ended)
    }
}

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

/// The frame whose payload is passing.
#[derive(Debug, Default, Clone, Copy)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    len: u32,
    /// Payload octets passed so far.
    at: u32,
    /// A header block fragment's range in the payload (after the pad
    /// length and priority, before the padding).
    fragment: (u32, u32),
    /// A frame `h2` refuses whole (padding longer than the payload): its
    /// payload is not looked at.
    skip: bool,
}

impl Frame {
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// What a connection's client sent so far, as far as the checks need it.
#[derive(Debug)]
pub(crate) struct FrameCheck {
    /// Octets of the preface still to pass (the HTTP/1.1 side matched it).
    preface: u8,
    /// The frame header being gathered, and how much of it is there.
    head: [u8; 9],
    have: u8,
    frame: Frame,
    /// A SETTINGS parameter being gathered.
    setting: [u8; 6],
    setting_have: u8,
    /// The stream of a header block not ended yet (only CONTINUATION of
    /// that stream may come, RFC 9113 §6.10).
    block: Option<u32>,
    hpack: Hpack,
    streams: Ended,
    /// PINGs and SETTINGS to acknowledge since the last request or DATA.
    owed: u32,
    /// The violation found: nothing passes after it.
    failed: Option<Reason>,
}

impl Default for FrameCheck {
    fn default() -> Self {
        FrameCheck {
            preface: PREFACE.len() as u8,
            head: [0; 9],
            have: 0,
            frame: Frame::default(),
            setting: [0; 6],
            setting_have: 0,
            block: None,
            hpack: Hpack::default(),
            streams: Ended::default(),
            owed: 0,
            failed: None,
        }
    }
}

impl FrameCheck {
    /// How many of `bytes` (the client's next octets) `h2` may have: all,
    /// or those before the frame that broke a rule ([`Self::failed`] then
    /// says which code), or none once one did.
    pub(crate) fn admit(&mut self, bytes: &[u8]) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        let mut at = 0;
        if self.preface > 0 {
            let n = usize::from(self.preface).min(bytes.len());
            self.preface -= n as u8;
            at = n;
        }
        // Where the frame that is passing began in `bytes` (0: before).
        let mut start = at;
        while at < bytes.len() {
            if self.have < 9 {
                if self.have == 0 {
                    start = at;
                }
                let n = (9 - usize::from(self.have)).min(bytes.len() - at);
                let have = usize::from(self.have);
                self.head[have..have + n].copy_from_slice(&bytes[at..at + n]);
                self.have += n as u8;
                at += n;
                if self.have == 9 {
                    if let Err(reason) = self.begin() {
                        return self.fail(reason, start);
                    }
                    if self.frame.len == 0 {
                        if let Err(reason) = self.end() {
                            return self.fail(reason, start);
                        }
                    }
                }
                continue;
            }
            let n = ((self.frame.len - self.frame.at) as usize).min(bytes.len() - at);
            if let Err(reason) = self.payload(&bytes[at..at + n]) {
                return self.fail(reason, start);
            }
            at += n;
            if self.frame.at == self.frame.len {
                if let Err(reason) = self.end() {
                    return self.fail(reason, start);
                }
            }
        }
        bytes.len()
    }

    /// The violation found, if any.
    pub(crate) fn failed(&self) -> Option<Reason> {
        self.failed
    }

    fn fail(&mut self, reason: Reason, start: usize) -> usize {
        self.failed = Some(reason);
        start
    }

    /// A frame's header is in: the checks of its type that need no payload.
    fn begin(&mut self) -> Result<(), Reason> {
        let h = self.head;
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let mut f = Frame {
            kind: h[3],
            flags: h[4],
            stream,
            len,
            ..Frame::default()
        };
        if let Some(open) = self.block {
            // §6.10: nothing but the block's CONTINUATION.
            if f.kind != CONTINUATION || f.stream != open {
                return Err(Reason::PROTOCOL_ERROR);
            }
        }
        match f.kind {
            DATA => {
                // §5.1: half-closed (remote) or closed by the client.
                if self.streams.ended(stream) {
                    return Err(Reason::STREAM_CLOSED);
                }
                if len > 0 {
                    self.owed = 0;
                }
                if f.has(END_STREAM) {
                    self.streams.end(stream);
                }
            }
            HEADERS => {
                let mut trailers = false;
                if stream % 2 == 1 {
                    if self.streams.ended(stream) {
                        return Err(Reason::STREAM_CLOSED);
                    }
                    // A second block on an opened stream is its trailers.
                    trailers = !self.streams.open(stream);
                    if !trailers {
                        self.owed = 0;
                    }
                    if f.has(END_STREAM) {
                        self.streams.end(stream);
                    }
                }
                let prefix = u32::from(f.has(PADDED)) + if f.has(PRIORITY_FLAG) { 5 } else { 0 };
                f.skip = prefix > len;
                f.fragment = (prefix, len);
                self.hpack.begin(trailers);
                if !f.has(END_HEADERS) {
                    self.block = Some(stream);
                }
            }
            CONTINUATION => {
                if self.block != Some(stream) {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                f.fragment = (0, len);
            }
            // §6.3 (a stream error, answered as a connection error).
            PRIORITY if len != 5 => return Err(Reason::FRAME_SIZE_ERROR),
            RST_STREAM => {
                if len != 4 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                self.streams.end(stream);
            }
            SETTINGS => {
                if f.has(ACK) {
                    if len != 0 {
                        return Err(Reason::FRAME_SIZE_ERROR);
                    }
                } else {
                    if len % 6 != 0 {
                        return Err(Reason::FRAME_SIZE_ERROR);
                    }
                    self.owe()?;
                }
                self.setting_have = 0;
            }
            PING => {
                if len != 8 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                if !f.has(ACK) {
                    self.owe()?;
                }
            }
            WINDOW_UPDATE if len != 4 => return Err(Reason::FRAME_SIZE_ERROR),
            _ => {}
        }
        self.frame = f;
        Ok(())
    }

    /// One more frame `h2` must acknowledge.
    fn owe(&mut self) -> Result<(), Reason> {
        self.owed += 1;
        if self.owed > CONTROL_FLOOD {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    /// Some of the passing frame's payload.
    fn payload(&mut self, bytes: &[u8]) -> Result<(), Reason> {
        let f = &mut self.frame;
        match f.kind {
            HEADERS | CONTINUATION if !f.skip => {
                if let (0, HEADERS, true, Some(&pad)) = (f.at, f.kind, f.has(PADDED), bytes.first())
                {
                    // The pad length, before the fragment.
                    match f.len.checked_sub(u32::from(pad)) {
                        Some(end) if end >= f.fragment.0 => f.fragment.1 = end,
                        // h2 refuses it (PROTOCOL_ERROR).
                        _ => f.skip = true,
                    }
                }
                // The part of `bytes` in the fragment.
                let (from, to) = (f.at, f.at + bytes.len() as u32);
                let lo = f.fragment.0.clamp(from, to);
                let hi = f.fragment.1.clamp(from, to);
                if !f.skip && lo < hi {
                    self.hpack
                        .octets(&bytes[(lo - from) as usize..(hi - from) as usize])?;
                }
            }
            SETTINGS if !f.has(ACK) => {
                for &b in bytes {
                    self.setting[usize::from(self.setting_have)] = b;
                    self.setting_have += 1;
                    if self.setting_have == 6 {
                        self.setting_have = 0;
                        check_setting(self.setting)?;
                    }
                }
            }
            _ => {}
        }
        f.at += bytes.len() as u32;
        Ok(())
    }

    /// The passing frame's last octet is in.
    fn end(&mut self) -> Result<(), Reason> {
        self.have = 0;
        let f = self.frame;
        if matches!(f.kind, HEADERS | CONTINUATION) && f.has(END_HEADERS) {
            self.block = None;
            if !f.skip {
                self.hpack.end()?;
            }
        }
        Ok(())
    }
}

/// RFC 9113 §6.5.2: the values a parameter may not take.
fn check_setting(p: [u8; 6]) -> Result<(), Reason> {
    let id = u16::from_be_bytes([p[0], p[1]]);
    let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
    match id {
        // SETTINGS_ENABLE_PUSH
        0x2 if value > 1 => Err(Reason::PROTOCOL_ERROR),
        // SETTINGS_INITIAL_WINDOW_SIZE
        0x4 if value > 0x7fff_ffff => Err(Reason::FLOW_CONTROL_ERROR),
        // SETTINGS_MAX_FRAME_SIZE
        0x5 if !(16_384..=16_777_215).contains(&value) => Err(Reason::PROTOCOL_ERROR),
        _ => Ok(()),
    }
}

/// Which of the last [`REMEMBERED`] client streams the client ended: one
/// bit each, by stream id / 2 modulo the count. Ids only grow (§5.1.1), so
/// the window slides with the highest opened.
#[derive(Debug, Default)]
struct Ended {
    /// The highest client stream opened (0: none yet).
    max: u32,
    bits: [u64; (REMEMBERED / 64) as usize],
}

impl Ended {
    fn slot(id: u32) -> (usize, u64) {
        let i = (id >> 1) % REMEMBERED;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// A client stream opened and still within the window.
    fn known(&self, id: u32) -> bool {
        id % 2 == 1 && id <= self.max && (self.max - id) / 2 < REMEMBERED
    }

    fn ended(&self, id: u32) -> bool {
        let (w, bit) = Ended::slot(id);
        self.known(id) && self.bits[w] & bit != 0
    }

    fn end(&mut self, id: u32) {
        if self.known(id) {
            let (w, bit) = Ended::slot(id);
            self.bits[w] |= bit;
        }
    }

    /// HEADERS on client stream `id`: true if it opens it. The streams it
    /// skips (closed, §5.1.1) are left to `h2`: marked open here.
    fn open(&mut self, id: u32) -> bool {
        if id <= self.max {
            return false;
        }
        let first = if self.max == 0 { 1 } else { self.max + 2 };
        if (id - first) / 2 >= REMEMBERED {
            self.bits = [0; (REMEMBERED / 64) as usize];
        } else {
            let mut s = first;
            while s <= id {
                let (w, bit) = Ended::slot(s);
                self.bits[w] &= !bit;
                s += 2;
            }
        }
        self.max = id;
        true
    }
}

// ---------------------------------------------------------------------------
// HPACK (RFC 7541), decoded an octet at a time
// ---------------------------------------------------------------------------

/// The static table's names (RFC 7541 Appendix A): their lengths count in
/// an entry's size, and the first 14 are pseudo-header fields.
const STATIC_NAMES: [&str; 61] = [
    ":authority",
    ":method",
    ":method",
    ":path",
    ":path",
    ":scheme",
    ":scheme",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
];

/// Most entries the dynamic table can hold: 4,096 octets of entries of 32
/// at least (§4.1).
const MAX_ENTRIES: usize = (TABLE_LIMIT / 32) as usize;

/// What the representation being decoded is (§6).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Rep {
    #[default]
    Indexed,
    /// A literal; true: with incremental indexing (added to the table).
    Literal(bool),
    SizeUpdate,
}

/// The string being decoded: a literal's name or its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Name,
    Value,
}

/// What the integer being decoded is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Int {
    /// The representation's own (an index, or a table size).
    Rep,
    /// A string's length.
    Len(Part),
}

/// Where in a representation the decoder is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// At a representation's first octet.
    #[default]
    Start,
    /// In an integer's continuation octets.
    Int(Int),
    /// At a string's first octet (its Huffman flag and length).
    StrHead(Part),
    /// In a string's octets.
    Str(Part),
}

/// A connection's HPACK decoding state: the dynamic table (entries' sizes
/// only) and where in a header block the decoder is.
#[derive(Debug)]
struct Hpack {
    /// Each entry: its name's length (bits 0-11), its value's (12-23),
    /// whether the name is a pseudo-header (bit 24). An entry is at most
    /// 4,096 octets with its 32, so each length fits in 12 bits.
    entries: [u32; MAX_ENTRIES],
    /// The newest entry's slot, and how many there are.
    newest: usize,
    count: usize,
    /// The table's size and its maximum (the last size update's).
    size: u32,
    max: u32,
    /// The block is a trailer section: no pseudo-header fields (§8.1).
    trailers: bool,
    /// A field was decoded in this block: no size update may follow (§4.2).
    fields: bool,
    step: Step,
    rep: Rep,
    /// The integer being decoded, and the shift of its next octet.
    int: u32,
    shift: u32,
    /// The literal's name: its length and whether it is a pseudo-header.
    name_len: u32,
    name_pseudo: bool,
    /// The string being decoded: octets still to come, octets it decodes
    /// to so far, Huffman-coded or not, and the Huffman-coded bits not yet
    /// decoded (`pending` of them, the last in `acc`'s low bits).
    left: u32,
    decoded: u32,
    huffman: bool,
    acc: u64,
    pending: u32,
}

impl Default for Hpack {
    fn default() -> Self {
        Hpack {
            entries: [0; MAX_ENTRIES],
            newest: 0,
            count: 0,
            size: 0,
            max: TABLE_LIMIT,
            trailers: false,
            fields: false,
            step: Step::Start,
            rep: Rep::Indexed,
            int: 0,
            shift: 0,
            name_len: 0,
            name_pseudo: false,
            left: 0,
            decoded: 0,
            huffman: false,
            acc: 0,
            pending: 0,
        }
    }
}

const COMPRESSION: Reason = Reason::COMPRESSION_ERROR;

impl Hpack {
    /// A header block begins (a request's or trailers).
    fn begin(&mut self, trailers: bool) {
        self.trailers = trailers;
        self.fields = false;
    }

    /// The block ended: it must not end inside a representation (§4.3).
    fn end(&mut self) -> Result<(), Reason> {
        if self.step != Step::Start {
            return Err(COMPRESSION);
        }
        Ok(())
    }

    /// The block's next octets. A string sent as it is is passed over
    /// whole (past a name's first octet, which says whether it is a
    /// pseudo-header).
    fn octets(&mut self, mut bytes: &[u8]) -> Result<(), Reason> {
        while let Some((&b, rest)) = bytes.split_first() {
            if let Step::Str(part) = self.step {
                if !self.huffman && (part == Part::Value || self.decoded > 0) {
                    let n = (self.left as usize).min(bytes.len());
                    self.left -= n as u32;
                    self.decoded += n as u32;
                    bytes = &bytes[n..];
                    if self.left == 0 {
                        self.string_end(part)?;
                    }
                    continue;
                }
            }
            self.octet(b)?;
            bytes = rest;
        }
        Ok(())
    }

    /// The block's next octet.
    fn octet(&mut self, b: u8) -> Result<(), Reason> {
        match self.step {
            Step::Start => {
                let (rep, prefix) = if b & 0x80 != 0 {
                    (Rep::Indexed, 7)
                } else if b & 0x40 != 0 {
                    (Rep::Literal(true), 6)
                } else if b & 0x20 != 0 {
                    (Rep::SizeUpdate, 5)
                } else {
                    (Rep::Literal(false), 4)
                };
                self.rep = rep;
                self.int_start(b, prefix, Int::Rep)
            }
            Step::Int(of) => {
                // Four continuation octets at most: up to 2^28 and more,
                // past any size or index a block of ours can hold.
                if self.shift > 21 {
                    return Err(COMPRESSION);
                }
                self.int += u32::from(b & 0x7f) << self.shift;
                self.shift += 7;
                if b & 0x80 == 0 {
                    self.int_done(self.int, of)
                } else {
                    Ok(())
                }
            }
            Step::StrHead(part) => {
                self.huffman = b & 0x80 != 0;
                self.int_start(b, 7, Int::Len(part))
            }
            Step::Str(part) => self.string_octet(b, part),
        }
    }

    /// An integer's first octet, of an N-bit prefix (§5.1).
    fn int_start(&mut self, b: u8, prefix: u32, of: Int) -> Result<(), Reason> {
        let mask = (1u32 << prefix) - 1;
        let v = u32::from(b) & mask;
        if v < mask {
            return self.int_done(v, of);
        }
        self.int = v;
        self.shift = 0;
        self.step = Step::Int(of);
        Ok(())
    }

    fn int_done(&mut self, v: u32, of: Int) -> Result<(), Reason> {
        match (of, self.rep) {
            (Int::Rep, Rep::Indexed) => {
                let (_, pseudo) = self.lookup(v)?;
                self.step = Step::Start;
                self.field(pseudo)
            }
            (Int::Rep, Rep::Literal(_)) => {
                if v == 0 {
                    self.name_pseudo = false;
                    self.step = Step::StrHead(Part::Name);
                } else {
                    (self.name_len, self.name_pseudo) = self.lookup(v)?;
                    self.step = Step::StrHead(Part::Value);
                }
                Ok(())
            }
            (Int::Rep, Rep::SizeUpdate) => {
                // §4.2: at a block's start only; §6.3: within the setting.
                if self.fields || v > TABLE_LIMIT {
                    return Err(COMPRESSION);
                }
                self.max = v;
                self.evict_to(v);
                self.step = Step::Start;
                Ok(())
            }
            (Int::Len(part), _) => {
                self.left = v;
                self.decoded = 0;
                self.acc = 0;
                self.pending = 0;
                self.step = Step::Str(part);
                if v == 0 {
                    return self.string_end(part);
                }
                Ok(())
            }
        }
    }

    fn string_octet(&mut self, b: u8, part: Part) -> Result<(), Reason> {
        self.left -= 1;
        if !self.huffman {
            if part == Part::Name && self.decoded == 0 {
                self.name_pseudo = b == b':';
            }
            self.decoded += 1;
        } else {
            self.acc = self.acc << 8 | u64::from(b);
            self.pending += 8;
            // With 30 bits (the longest code) or more, a symbol is there.
            while self.pending >= 30 {
                match self.next_symbol() {
                    Some((symbol, len)) => self.symbol(symbol, len, part)?,
                    None => return Err(COMPRESSION),
                }
            }
        }
        if self.left == 0 {
            return self.string_end(part);
        }
        Ok(())
    }

    /// The symbol the pending bits begin with, and its code's length.
    fn next_symbol(&self) -> Option<(u16, u32)> {
        let top = |len: u32| (self.acc >> (self.pending - len)) as u32 & ((1 << len) - 1);
        if self.pending >= 8 {
            // The common symbols' codes are 8 bits or fewer: one lookup.
            let (symbol, len) = HUFFMAN_8[top(8) as usize];
            if len > 0 {
                return Some((symbol, u32::from(len)));
            }
        }
        (5..=self.pending.min(30)).find_map(|len| Some((huffman_symbol(top(len), len)?, len)))
    }

    fn symbol(&mut self, symbol: u16, len: u32, part: Part) -> Result<(), Reason> {
        // §5.2: EOS in a string is an error.
        if symbol == 256 {
            return Err(COMPRESSION);
        }
        if part == Part::Name && self.decoded == 0 {
            self.name_pseudo = symbol == u16::from(b':');
        }
        self.decoded += 1;
        self.pending -= len;
        Ok(())
    }

    fn string_end(&mut self, part: Part) -> Result<(), Reason> {
        if self.huffman {
            while let Some((symbol, len)) = self.next_symbol() {
                self.symbol(symbol, len, part)?;
            }
            // §5.2: padding of 7 bits at most, the EOS code's first (all
            // 1s; no symbol's code is 1s only, so none was decoded from it).
            let mask = (1u64 << self.pending) - 1;
            if self.pending > 7 || self.acc & mask != mask {
                return Err(COMPRESSION);
            }
        }
        match part {
            Part::Name => {
                self.name_len = self.decoded;
                self.step = Step::StrHead(Part::Value);
                Ok(())
            }
            Part::Value => {
                if self.rep == Rep::Literal(true) {
                    self.insert(self.name_len, self.decoded, self.name_pseudo);
                }
                self.step = Step::Start;
                self.field(self.name_pseudo)
            }
        }
    }

    /// A field decoded.
    fn field(&mut self, pseudo: bool) -> Result<(), Reason> {
        self.fields = true;
        if self.trailers && pseudo {
            // RFC 9113 §8.1: trailers carry no pseudo-header fields.
            return Err(Reason::PROTOCOL_ERROR);
        }
        Ok(())
    }

    /// The entry at `index` (§2.3.3): its name's length and whether the
    /// name is a pseudo-header. Index 0, or one past both tables, is an
    /// error (§6.1, §2.3.3).
    fn lookup(&self, index: u32) -> Result<(u32, bool), Reason> {
        let i = index as usize;
        if i == 0 {
            return Err(COMPRESSION);
        }
        if let Some(name) = STATIC_NAMES.get(i - 1) {
            return Ok((name.len() as u32, name.starts_with(':')));
        }
        let back = i - 1 - STATIC_NAMES.len();
        if back >= self.count {
            return Err(COMPRESSION);
        }
        let e = self.entries[(self.newest + MAX_ENTRIES - back) % MAX_ENTRIES];
        Ok((e & 0xfff, e >> 24 != 0))
    }

    /// A literal with incremental indexing joins the table (§4.4): the
    /// oldest entries go to make room; one larger than the table empties it.
    fn insert(&mut self, name: u32, value: u32, pseudo: bool) {
        let size = name.saturating_add(value).saturating_add(32);
        if size > self.max {
            self.count = 0;
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        self.newest = (self.newest + 1) % MAX_ENTRIES;
        self.entries[self.newest] = name | value << 12 | u32::from(pseudo) << 24;
        self.count += 1;
        self.size += size;
    }

    /// Evict the oldest entries until the table's size is `room` or less.
    fn evict_to(&mut self, room: u32) {
        while self.size > room && self.count > 0 {
            let oldest = (self.newest + MAX_ENTRIES + 1 - self.count) % MAX_ENTRIES;
            let e = self.entries[oldest];
            self.size -= (e & 0xfff) + (e >> 12 & 0xfff) + 32;
            self.count -= 1;
        }
    }
}

// ---------------------------------------------------------------------------
// The Huffman code (RFC 7541 Appendix B)
// ---------------------------------------------------------------------------

/// Each symbol's code and its length in bits; 256 is EOS.
#[rustfmt::skip]
const HUFFMAN: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28),
    (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30),
    (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28),
    (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28), (0xffffff5, 28),
    (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28),
    (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), (0x1ff9, 13), (0x15, 6),
    (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6),
    (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6),
    (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12),
    (0x3fc, 10), (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7),
    (0x62, 7), (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8),
    (0x73, 7), (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6),
    (0x6, 5), (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
    (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7), (0x79, 7), (0x7a, 7), (0x7b, 7),
    (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20),
    (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22),
    (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23),
    (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22),
    (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23),
    (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23),
    (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22),
    (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22),
    (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23), (0x1fffe0, 21),
    (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23),
    (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23),
    (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20),
    (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25), (0x3ffffe2, 26),
    (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27), (0x3ffffe5, 26),
    (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27),
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24), (0x1fffe4, 21),
    (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27),
    (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22),
    (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26),
    (0x7ffff4, 23), (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26),
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27),
    (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27),
    (0x7fffff0, 27), (0x3ffffee, 26), (0x3fffffff, 30),
];

/// The code as a canonical one (RFC 7541's is: the codes of one length
/// are consecutive, shorter ones first), to decode a code of `bits` bits
/// with three lookups instead of a tree: `first[len]`, the smallest code
/// of that length, `count[len]` of them, their symbols at `base[len]` in
/// `symbols`, in code order. The test `the_huffman_code_is_canonical`
/// decodes every symbol's code back to it.
struct Canonical {
    first: [u32; 31],
    count: [u32; 31],
    base: [u32; 31],
    symbols: [u16; 257],
}

const CANONICAL: Canonical = canonical();

/// The tables where the decoder reads them: a `static`, so that a lookup
/// reads it in place (a `const` array indexed at run time may be copied).
static TABLES: Canonical = CANONICAL;

const fn canonical() -> Canonical {
    let mut first = [u32::MAX; 31];
    let mut count = [0u32; 31];
    let mut i = 0;
    while i < HUFFMAN.len() {
        let (code, len) = HUFFMAN[i];
        let l = len as usize;
        count[l] += 1;
        if code < first[l] {
            first[l] = code;
        }
        i += 1;
    }
    let mut base = [0u32; 31];
    let mut acc = 0;
    let mut l = 0;
    while l < 31 {
        base[l] = acc;
        acc += count[l];
        l += 1;
    }
    let mut symbols = [0u16; 257];
    i = 0;
    while i < HUFFMAN.len() {
        let (code, len) = HUFFMAN[i];
        let l = len as usize;
        symbols[(base[l] + code - first[l]) as usize] = i as u16;
        i += 1;
    }
    Canonical {
        first,
        count,
        base,
        symbols,
    }
}

/// The symbol whose code is `code`, `bits` long, if one is.
fn huffman_symbol(code: u32, bits: u32) -> Option<u16> {
    symbol_of(&TABLES, code, bits)
}

const fn symbol_of(c: &Canonical, code: u32, bits: u32) -> Option<u16> {
    let l = bits as usize;
    if l >= c.count.len() {
        return None;
    }
    let offset = code.wrapping_sub(c.first[l]);
    if offset < c.count[l] {
        Some(c.symbols[(c.base[l] + offset) as usize])
    } else {
        None
    }
}

/// For each 8 bits, the symbol whose code of 8 bits or fewer they begin
/// with, and its length (0: a longer code).
static HUFFMAN_8: [(u16, u8); 256] = huffman_8();

const fn huffman_8() -> [(u16, u8); 256] {
    let mut table = [(0u16, 0u8); 256];
    let mut v = 0;
    while v < 256 {
        let mut len = 5;
        while len <= 8 {
            if let Some(symbol) = symbol_of(&CANONICAL, v as u32 >> (8 - len), len) {
                table[v] = (symbol, len as u8);
                break;
            }
            len += 1;
        }
        v += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use h2::Reason;

    use super::{huffman_symbol, FrameCheck, CONTROL_FLOOD, HUFFMAN, PREFACE};

    /// A frame: length, type, flags, stream, payload (RFC 9113 §4.1).
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// `:method GET`, `:scheme http`, `:path /`, `:authority a`.
    const GET: &[u8] = &[0x82, 0x86, 0x84, 0x41, 0x01, b'a'];

    fn headers(stream: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
        frame(1, 0x4 | u8::from(end_stream), stream, block)
    }

    /// Past the preface and an empty SETTINGS: what a checker admitted of
    /// `frames` sent in one read, and its verdict (a second checker, given
    /// them an octet at a time, must come to the same).
    fn check(frames: &[Vec<u8>]) -> (usize, Option<Reason>) {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(4, 0, 0, &[]));
        let before = bytes.len();
        for f in frames {
            bytes.extend(f);
        }
        let mut whole = FrameCheck::default();
        let n = whole.admit(&bytes);
        let mut by_octet = FrameCheck::default();
        let mut m = 0;
        for (i, b) in bytes.iter().enumerate() {
            if by_octet.admit(std::slice::from_ref(b)) == 0 && by_octet.failed().is_some() {
                break;
            }
            m = i + 1;
        }
        assert_eq!(whole.failed(), by_octet.failed(), "one read or many");
        if whole.failed().is_some() {
            // An octet at a time, those of the offending frame before the
            // one that breaks the rule were admitted already (and make no
            // frame of `h2`'s).
            assert!(m >= n, "{m} octets at a time, {n} at once");
        }
        (n.saturating_sub(before), whole.failed())
    }

    fn verdict(frames: &[Vec<u8>]) -> Option<Reason> {
        check(frames).1
    }

    #[test]
    fn a_request_with_a_body_and_trailers_passes_whole() {
        let frames = [
            headers(1, false, GET),
            frame(0, 0, 1, b"abc"),
            frame(6, 0, 0, b"12345678"),
            frame(8, 0, 1, &[0, 0, 1, 0]),
            frame(2, 0, 1, &[0, 0, 0, 0, 7]),
            // Trailers: `x-t: 1`, literal without indexing.
            headers(1, true, &[0x00, 0x03, b'x', b'-', b't', 0x01, b'1']),
            headers(3, true, GET),
        ];
        let total: usize = frames.iter().map(Vec::len).sum();
        assert_eq!(check(&frames), (total, None));
    }

    #[test]
    fn rfc9113_6_5_settings_of_a_length_not_a_multiple_of_6_is_a_frame_size_error() {
        assert_eq!(
            verdict(&[frame(4, 0, 0, &[0, 4, 0, 0, 0x10])]),
            Some(Reason::FRAME_SIZE_ERROR)
        );
    }

    #[test]
    fn rfc9113_6_5_settings_ack_with_a_payload_is_a_frame_size_error() {
        assert_eq!(
            verdict(&[frame(4, 1, 0, &[0, 4, 0, 0, 0x10, 0])]),
            Some(Reason::FRAME_SIZE_ERROR)
        );
    }

    #[test]
    fn rfc9113_6_fixed_length_frames_of_another_length_are_frame_size_errors() {
        for (kind, len) in [
            (2u8, 4usize),
            (3, 3),
            (6, 6),
            (8, 3),
            (2, 6),
            (3, 5),
            (6, 9),
            (8, 5),
        ] {
            let (admitted, failed) = check(&[
                frame(6, 0, 0, b"fine ok!"),
                frame(kind, 0, 1, &vec![0; len]),
            ]);
            assert_eq!(
                failed,
                Some(Reason::FRAME_SIZE_ERROR),
                "type {kind}, {len} octets"
            );
            assert_eq!(admitted, 17, "the PING before it is h2's");
        }
    }

    #[test]
    fn rfc9113_6_5_2_setting_values_out_of_range_are_errors() {
        let settings = |id: u16, value: u32| {
            let mut p = id.to_be_bytes().to_vec();
            p.extend(value.to_be_bytes());
            frame(4, 0, 0, &p)
        };
        assert_eq!(
            verdict(&[settings(4, 1 << 31)]),
            Some(Reason::FLOW_CONTROL_ERROR)
        );
        assert_eq!(verdict(&[settings(4, (1 << 31) - 1)]), None);
        assert_eq!(verdict(&[settings(2, 2)]), Some(Reason::PROTOCOL_ERROR));
        assert_eq!(
            verdict(&[settings(5, 16_383)]),
            Some(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(
            verdict(&[settings(5, 1 << 24)]),
            Some(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(verdict(&[settings(5, 16_384), settings(0xff, 7)]), None);
    }

    #[test]
    fn rfc9113_5_1_data_or_headers_on_a_stream_the_client_ended_is_stream_closed() {
        let ended = headers(1, true, GET);
        assert_eq!(
            verdict(&[ended.clone(), frame(0, 1, 1, b"test")]),
            Some(Reason::STREAM_CLOSED)
        );
        assert_eq!(
            verdict(&[ended.clone(), headers(1, true, &[0x00, 0x01, b'x', 0x00])]),
            Some(Reason::STREAM_CLOSED)
        );
        let reset = [headers(1, false, GET), frame(3, 0, 1, &[0, 0, 0, 8])];
        assert_eq!(
            verdict(&[reset[0].clone(), reset[1].clone(), headers(1, true, GET)]),
            Some(Reason::STREAM_CLOSED)
        );
        // Frames the half-closed (remote) state allows pass.
        assert_eq!(
            verdict(&[
                ended,
                frame(8, 0, 1, &[0, 0, 1, 0]),
                frame(2, 0, 1, &[0, 0, 0, 0, 1]),
                frame(3, 0, 1, &[0, 0, 0, 8])
            ]),
            None
        );
    }

    #[test]
    fn rfc9113_5_1_streams_past_the_remembered_window_are_left_to_h2() {
        let mut frames = vec![headers(1, true, GET)];
        for i in 1..=600u32 {
            frames.push(headers(1 + 2 * i, true, &[0xbe]));
        }
        frames.push(frame(0, 1, 1, b"x"));
        assert_eq!(verdict(&frames), None, "stream 1 is 600 streams back");
        frames.pop();
        frames.push(frame(0, 1, 1 + 2 * 400, b"x"));
        assert_eq!(verdict(&frames), Some(Reason::STREAM_CLOSED));
    }

    #[test]
    fn rfc9113_8_1_a_pseudo_header_field_in_trailers_is_a_protocol_error() {
        // `:method POST`, a literal of static index 2's name.
        let trailers = headers(1, true, &[0x02, 0x04, b'P', b'O', b'S', b'T']);
        let (admitted, failed) =
            check(&[headers(1, false, GET), frame(0, 0, 1, b"test"), trailers]);
        assert_eq!(failed, Some(Reason::PROTOCOL_ERROR));
        assert_eq!(
            admitted,
            9 + GET.len() + 13,
            "the request and its DATA are h2's"
        );
        // A literal name, Huffman-coded, that begins with ':'
        // (':' is 0b1011100, then EOS padding).
        let huffman_colon = [0x00, 0x81, 0b1011_1001, 0x01, b'1'];
        assert_eq!(
            verdict(&[headers(1, false, GET), headers(1, true, &huffman_colon)]),
            Some(Reason::PROTOCOL_ERROR)
        );
        // A dynamic entry whose name is a pseudo-header, indexed in trailers.
        let indexed = [0x44, 0x01, b'/', 0x82, 0x86, 0x41, 0x01, b'a'];
        assert_eq!(
            verdict(&[headers(1, false, &indexed), headers(1, true, &[0xbe])]),
            Some(Reason::PROTOCOL_ERROR)
        );
    }

    #[test]
    fn rfc9113_6_10_only_the_blocks_continuation_may_follow_an_unended_header_block() {
        let open = frame(1, 0, 1, GET);
        assert_eq!(
            verdict(&[open.clone(), frame(0, 0, 1, b"x")]),
            Some(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(
            verdict(&[open.clone(), frame(9, 4, 3, &[])]),
            Some(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(
            verdict(&[frame(9, 4, 1, &[])]),
            Some(Reason::PROTOCOL_ERROR),
            "no block open"
        );
        assert_eq!(
            verdict(&[open, frame(9, 0, 1, &[0x82]), frame(9, 4, 1, &[])]),
            None
        );
    }

    /// The request, then `extra` in the same block.
    fn block(extra: &[u8]) -> Vec<Vec<u8>> {
        let mut b = GET.to_vec();
        b.extend_from_slice(extra);
        vec![headers(1, true, &b)]
    }

    #[test]
    fn rfc7541_6_1_index_0_is_a_compression_error() {
        assert_eq!(verdict(&block(&[0x80])), Some(Reason::COMPRESSION_ERROR));
    }

    #[test]
    fn rfc7541_2_3_3_indices_past_both_tables_are_compression_errors() {
        assert_eq!(
            verdict(&block(&[0x80 | 70])),
            Some(Reason::COMPRESSION_ERROR)
        );
        assert_eq!(
            verdict(&block(&[0x40 | 63, 0x01, b'x'])),
            Some(Reason::COMPRESSION_ERROR)
        );
        // GET's `:authority a` is the dynamic table's one entry (62).
        assert_eq!(verdict(&block(&[0x80 | 61, 0x80 | 62])), None);
    }

    #[test]
    fn rfc7541_4_4_an_evicted_entry_is_no_longer_indexed() {
        // `x: <4,000 octets>` (4,033 with its 32), then `y: <100>`: the
        // first goes to make room, index 63 is past the table.
        let mut first = vec![0x40, 0x01, b'x', 0x7f];
        // 4,000 with a 7-bit prefix: 127, then 3,873 as 33 | 0x80, 30.
        first.extend([0xa1, 0x1e]);
        first.extend(vec![b'v'; 4000]);
        let mut second = vec![0x40, 0x01, b'y', 0x64];
        second.extend(vec![b'w'; 100]);
        let mut b = GET.to_vec();
        b.extend(&first);
        b.push(0x80 | 62);
        b.extend(&second);
        b.push(0x80 | 62);
        assert_eq!(verdict(&[headers(1, true, &b)]), None);
        b.push(0x80 | 63);
        assert_eq!(
            verdict(&[headers(1, true, &b)]),
            Some(Reason::COMPRESSION_ERROR)
        );
    }

    #[test]
    fn rfc7541_4_2_a_size_update_after_a_field_is_a_compression_error() {
        assert_eq!(verdict(&block(&[0x21])), Some(Reason::COMPRESSION_ERROR));
        let mut at_start = vec![0x20, 0x3f, 0xe1, 0x1f];
        at_start.extend(GET);
        assert_eq!(
            verdict(&[headers(1, true, &at_start)]),
            None,
            "4,096 at the start"
        );
    }

    #[test]
    fn rfc7541_6_3_a_size_update_over_the_setting_is_a_compression_error() {
        let mut b = vec![0x3f, 0xe2, 0x1f];
        b.extend(GET);
        assert_eq!(
            verdict(&[headers(1, true, &b)]),
            Some(Reason::COMPRESSION_ERROR)
        );
    }

    #[test]
    fn rfc7541_5_2_huffman_eos_and_bad_padding_are_compression_errors() {
        let literal = |value: &[u8]| {
            let mut b = vec![0x00, 0x01, b'x', 0x80 | value.len() as u8];
            b.extend_from_slice(value);
            block(&b)
        };
        // 'a' is 00011 (5 bits): padded with 1s it is fine.
        assert_eq!(verdict(&literal(&[0b0001_1111])), None);
        assert_eq!(
            verdict(&literal(&[0b0001_1000])),
            Some(Reason::COMPRESSION_ERROR),
            "0s"
        );
        assert_eq!(
            verdict(&literal(&[0b0001_1111, 0xff])),
            Some(Reason::COMPRESSION_ERROR),
            "11 bits"
        );
        // EOS (30 1s) then padding.
        assert_eq!(
            verdict(&literal(&[0xff, 0xff, 0xff, 0xff])),
            Some(Reason::COMPRESSION_ERROR)
        );
    }

    #[test]
    fn rfc9113_4_3_a_block_ending_inside_a_representation_is_a_compression_error() {
        assert_eq!(
            verdict(&block(&[0x00, 0x0a, b'x', b'y'])),
            Some(Reason::COMPRESSION_ERROR)
        );
        assert_eq!(
            verdict(&block(&[0xff])),
            Some(Reason::COMPRESSION_ERROR),
            "an integer cut short"
        );
    }

    #[test]
    fn rfc7541_c_4_requests_with_huffman_and_the_dynamic_table_decode() {
        // RFC 7541 C.4.1-C.4.3, as three requests' blocks.
        let c41 = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        let c42 = [
            0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
        ];
        let c43 = [
            0x82, 0x87, 0x85, 0xbf, 0x40, 0x88, 0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f,
            0x89, 0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf,
        ];
        let mut check = FrameCheck::default();
        let mut bytes = PREFACE.to_vec();
        for (i, b) in [&c41[..], &c42, &c43].into_iter().enumerate() {
            bytes.extend(headers(1 + 2 * i as u32, true, b));
        }
        assert_eq!(check.admit(&bytes), bytes.len());
        assert_eq!(check.failed(), None);
        // C.4.3's table: 3 entries, 164 octets.
        assert_eq!((check.hpack.count, check.hpack.size), (3, 164));
        // Index 64 is the third entry; 65 is past it.
        let mut more = headers(7, true, &[0x82, 0x86, 0x84, 0xc0]);
        assert_eq!(check.admit(&more), more.len());
        more = headers(9, true, &[0x82, 0x86, 0x84, 0xc1]);
        assert_eq!(check.admit(&more), 0);
        assert_eq!(check.failed(), Some(Reason::COMPRESSION_ERROR));
    }

    #[test]
    fn the_huffman_code_is_canonical() {
        for (symbol, &(code, len)) in HUFFMAN.iter().enumerate() {
            assert_eq!(huffman_symbol(code, u32::from(len)), Some(symbol as u16));
            for shorter in 1..u32::from(len) {
                assert_eq!(
                    huffman_symbol(code >> (u32::from(len) - shorter), shorter),
                    None
                );
            }
        }
    }

    #[test]
    fn the_checker_holds_under_a_kib_per_connection() {
        assert!(std::mem::size_of::<FrameCheck>() < 1024);
    }

    /// Hello, over a real socket, non-blocking as under event.
    struct Hello;

    impl crate::HttpHandler for Hello {
        fn handle(&mut self, _: &crate::Request<'_>) -> crate::Response {
            crate::Response::new(200).body("hi")
        }
    }

    #[test]
    fn a_bad_frame_after_a_request_is_answered_with_goaway_of_the_rfcs_code() {
        use std::io::{Read, Write};
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::Duration;

        use mpm_core::{ConnectionHandler, Interest, Stream};

        use crate::h2::{h2_counts, H2Count};
        use crate::{HttpService, HttpSettings};

        let cut = || {
            h2_counts()
                .iter()
                .find(|(c, _)| *c == H2Count::GoawayProtocolError)
                .map_or(0, |(_, n)| *n)
        };
        let before = cut();
        let mut settings = HttpSettings::default();
        settings.h2.cleartext = true;
        let mut svc = HttpService::new(Hello, &settings);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let (sock, peer) = listener.accept().unwrap();
        let mut stream = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
        let mut conn = svc.connected(&stream);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(4, 0, 0, &[]));
        bytes.extend(headers(1, true, GET));
        // A PING of 6 octets: FRAME_SIZE_ERROR (RFC 9113 §6.7).
        bytes.extend(frame(6, 0, 0, &[0; 6]));
        client.write_all(&bytes).unwrap();
        assert!(mpm_core::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        assert_eq!(
            svc.readable(&mut conn, &mut stream),
            Interest::Linger,
            "the close lingers, so that the GOAWAY is read"
        );
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let mut goaway = None;
        let mut at = 0;
        while at + 9 <= got.len() {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            if got[at + 3] == 7 {
                goaway = got.get(at + 9..at + 17).map(<[u8]>::to_vec);
            }
            at += 9 + len;
        }
        assert_eq!(
            goaway,
            Some(vec![0, 0, 0, 1, 0, 0, 0, 6]),
            "GOAWAY, last stream 1 (h2 took the request), FRAME_SIZE_ERROR"
        );
        assert!(cut() > before, "counted as a protocol error's GOAWAY");
    }

    #[test]
    fn a_flood_of_pings_or_settings_between_requests_is_enhance_your_calm() {
        let ping = frame(6, 0, 0, b"flooding");
        let settings = frame(4, 0, 0, &[]);
        let mut frames: Vec<Vec<u8>> = Vec::new();
        // The preface's SETTINGS counts too: CONTROL_FLOOD in all pass.
        for i in 1..CONTROL_FLOOD {
            frames.push(if i % 2 == 0 {
                ping.clone()
            } else {
                settings.clone()
            });
        }
        // ACKs are owed nothing.
        frames.push(frame(6, 1, 0, b"an ack!!"));
        assert_eq!(verdict(&frames), None);
        frames.push(ping.clone());
        assert_eq!(verdict(&frames), Some(Reason::ENHANCE_YOUR_CALM));
        // A request in between starts the count again.
        frames.insert(CONTROL_FLOOD as usize / 2, headers(1, true, GET));
        assert_eq!(verdict(&frames), None);
    }
}
