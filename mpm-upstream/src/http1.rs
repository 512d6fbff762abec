//! HTTP/1.1 on a [`Connection`]: the request head and body going out, the
//! response head and body coming in, with bounded memory both ways.
//!
//! The pieces are separate so that a reverse proxy can stream: it writes
//! the head with [`write_request_head`], the body with a [`BodyWriter`] as
//! the client sends it, reads the answer's head with
//! [`read_response_head`], and relays the body a buffer at a time through
//! a [`BodyReader`], which decodes the framing (`Content-Length`, chunked,
//! until close), so the caller sees the body's bytes only and re-frames
//! them for its own client.

use std::cell::{Cell, RefCell};
use std::io;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpm_core::waiting::ready;

use crate::connection::Connection;
use crate::error::{Error, Phase, Result};

/// How large a response head may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLimits {
    /// Bytes, status line and fields together. Default 64 KiB.
    pub max_bytes: usize,
    /// Header fields. Default 100.
    pub max_fields: usize,
}

impl Default for HeadLimits {
    fn default() -> HeadLimits {
        HeadLimits {
            max_bytes: 64 * 1024,
            max_fields: 100,
        }
    }
}

/// Where a part of a [`ResponseHead`] lies in its bytes.
type Span = (u32, u32);

/// A response's status line and fields, kept as the bytes received: the
/// reason and each field are ranges of them, so that reading a head costs
/// one allocation (the bytes), not two a field.
///
/// The ranges are on the heap, not inline: a head is returned up several
/// calls (the parse, the read, the caller's future), and with 16 fields'
/// ranges inline it was 330 bytes, a `memcpy` call each time it moved
/// (about 600 instructions a proxied response); at 96 bytes a move is a
/// few vector stores. Their list is the one of the head dropped last on
/// the thread (`SPARE_FIELDS`), not an allocation of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub version_minor: u8,
    /// The status code.
    pub status: u16,
    /// The head as received, status line to the blank line.
    bytes: HeadBytes,
    reason: Span,
    /// Each field's name and value, in the order sent.
    fields: Vec<[Span; 2]>,
    /// Which of the fields framing and keep-alive depend on the head has
    /// ([`Known`] bits), noted as it is parsed: the questions asked of
    /// every response ([`BodyFraming::for_response`],
    /// [`keep_alive`](Self::keep_alive), [`connection`](Self::connection))
    /// scan its fields only for a field it has, not once each.
    known: u8,
    /// The `Content-Length` the head says, read as it is parsed (when
    /// [`Known::CONTENT_LENGTH`] is set and [`Known::BAD_LENGTH`] is not):
    /// the framing of a response needs no second pass over its fields.
    length: u64,
    /// What was read past the head: the start of the body (give it to
    /// [`BodyReader::new`], or [`BodyReader::for_response`] takes it).
    pub bytes_after_head: Vec<u8>,
}

/// A head's bytes: as text when they are UTF-8 (nearly always: field
/// values past ASCII are rare and obsolete), checked once for the whole
/// head, so that each part is a slice of a `str` with no check of its own
/// (a head's names are read many times: framing, keep-alive, what
/// passes).
#[derive(Clone, Debug, PartialEq, Eq)]
enum HeadBytes {
    Text(Arc<str>),
    Raw(Arc<[u8]>),
}

impl HeadBytes {
    fn of(bytes: &[u8]) -> HeadBytes {
        match std::str::from_utf8(bytes) {
            Ok(text) => HeadBytes::Text(Arc::from(text)),
            Err(_) => HeadBytes::Raw(Arc::from(bytes)),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            HeadBytes::Text(t) => t.as_bytes(),
            HeadBytes::Raw(b) => b,
        }
    }

    /// The text at `span`; empty if it is not UTF-8.
    fn text(&self, span: Span) -> &str {
        match self {
            HeadBytes::Text(t) => t.get(range(span)).unwrap_or_default(),
            HeadBytes::Raw(b) => b
                .get(range(span))
                .and_then(|p| std::str::from_utf8(p).ok())
                .unwrap_or_default(),
        }
    }
}

/// The bits of [`ResponseHead::known`].
struct Known;

impl Known {
    const CONTENT_LENGTH: u8 = 1;
    const TRANSFER_ENCODING: u8 = 2;
    const CONNECTION: u8 = 4;
    /// A `Content-Length` that is not one number: not digits, or two
    /// different ones (a refusal, if the framing is asked for).
    const BAD_LENGTH: u8 = 8;

    /// The bit of a field named `name` (a token, as httparse checked it),
    /// 0 for any other.
    fn of(name: &[u8]) -> u8 {
        // By length first: most names match none of them at that.
        match name.len() {
            14 if token_is(name, b"content-length") => Known::CONTENT_LENGTH,
            17 if token_is(name, b"transfer-encoding") => Known::TRANSFER_ENCODING,
            10 if token_is(name, b"connection") => Known::CONNECTION,
            _ => 0,
        }
    }
}

/// Whether the token `name` is `lower` (lowercase letters and `-`, at
/// least 8 bytes) in any case, eight bytes at a time: a token's bytes are
/// letters, digits and `` !#$%&'*+-.^_`|~ ``, and setting their 0x20 bit
/// lowercases a letter and makes no other of them a letter or `-`. The
/// comparison a byte of `eq_ignore_ascii_case` was 90 instructions a
/// response for its `Content-Length` alone.
fn token_is(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    let word = |bytes: &[u8], at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map(u64::from_le_bytes)
    };
    if name.len() != lower.len() || name.len() < 8 {
        return name.eq_ignore_ascii_case(lower);
    }
    // Whole words, the last one overlapping the one before it.
    let last = name.len() - 8;
    (0..last)
        .step_by(8)
        .chain([last])
        .all(|at| match (word(name, at), word(lower, at)) {
            (Some(n), Some(l)) => n | CASE == l,
            _ => false,
        })
}

thread_local! {
    /// The field ranges of the last head dropped on this thread, emptied,
    /// for the next head parsed on it. A proxy drops a head as soon as it
    /// has made its answer of it, before it reads another: one list kept
    /// saves an allocation and a free a response (about 190 instructions
    /// under callgrind), with no list of lists to manage.
    static SPARE_FIELDS: Cell<Vec<[Span; 2]>> = const { Cell::new(Vec::new()) };
}

/// The largest list of field ranges kept for the next head (1 KiB): a
/// head with more fields than that is rare, and its list is freed.
const SPARE_FIELDS_MAX: usize = 64;

impl Drop for ResponseHead {
    fn drop(&mut self) {
        let mut fields = std::mem::take(&mut self.fields);
        if fields.capacity() <= SPARE_FIELDS_MAX {
            fields.clear();
            // Gone at the thread's end: then the list is just freed.
            let _ = SPARE_FIELDS.try_with(|spare| spare.set(fields));
        }
    }
}

impl ResponseHead {
    /// A complete head at the start of `buf` and its length, or `None` for
    /// more to read; an error for a head that is not HTTP/1.x or over
    /// `limits`.
    pub fn parse(buf: &[u8], limits: HeadLimits) -> Result<Option<(ResponseHead, usize)>> {
        parse_head(buf, limits)
    }

    fn part(&self, span: Span) -> &[u8] {
        self.bytes.as_bytes().get(range(span)).unwrap_or_default()
    }

    /// The reason phrase, as sent (empty if it was not UTF-8).
    pub fn reason(&self) -> &str {
        self.bytes.text(self.reason)
    }

    /// The fields in the order sent: names as sent, values as bytes.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> + Clone + '_ {
        // httparse took each name as a token: ASCII, never the empty
        // fallback.
        self.fields
            .iter()
            .map(|&[n, v]| (self.bytes.text(n), self.part(v)))
    }

    /// How many fields it has.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Has it no field?
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The head's bytes as received, status line to the blank line.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_bytes()
    }

    /// The head as text, shared, when it is UTF-8 (nearly always): a
    /// caller that keeps parts of it (a proxy passing fields on) takes
    /// them as ranges of it with [`reason_range`](Self::reason_range) and
    /// [`header_ranges`](Self::header_ranges), without a copy. `None` for
    /// a head with bytes past ASCII that are not UTF-8 (obsolete text in a
    /// value).
    pub fn text(&self) -> Option<&Arc<str>> {
        match &self.bytes {
            HeadBytes::Text(t) => Some(t),
            HeadBytes::Raw(_) => None,
        }
    }

    /// Where the reason phrase is in [`bytes`](Self::bytes).
    pub fn reason_range(&self) -> Range<usize> {
        range(self.reason)
    }

    /// Where each field's name and value are in [`bytes`](Self::bytes), in
    /// the order sent.
    pub fn header_ranges(&self) -> impl Iterator<Item = (Range<usize>, Range<usize>)> + '_ {
        self.fields.iter().map(|&[n, v]| (range(n), range(v)))
    }

    /// The first field named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|&&[n, _]| self.part(n).eq_ignore_ascii_case(name.as_bytes()))
            .map(|&[_, v]| self.part(v))
    }

    /// Every field named `name` (any case), in order.
    pub fn headers_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
        self.values_named(&self.fields, name)
    }

    /// The values of the fields among `fields` named `name`: the names
    /// compared as bytes (a name is ASCII), each value sliced only for a
    /// match.
    fn values_named<'a>(
        &'a self,
        fields: &'a [[Span; 2]],
        name: &'a str,
    ) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
        fields
            .iter()
            .filter(move |&&[n, _]| self.part(n).eq_ignore_ascii_case(name.as_bytes()))
            .map(|&[_, v]| self.part(v))
    }

    /// The fields among the [`Known`] ones named `name`: none, without a
    /// scan, when the head has no such field.
    fn known_named<'a>(
        &'a self,
        bit: u8,
        name: &'a str,
    ) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
        let fields: &[[Span; 2]] = if self.known & bit != 0 {
            &self.fields
        } else {
            &[]
        };
        self.values_named(fields, name)
    }

    /// The length its `Content-Length` says, when it has one to use: one
    /// number (the field repeated, or a list, with the same number is one),
    /// and no `Transfer-Encoding` beside it (which overrides it, RFC 9112
    /// §6.3). `None` for no such field, a value that is not digits,
    /// different numbers, or an encoded (chunked) answer: what the answer
    /// to a `HEAD` says of the `GET`'s body, when it says anything.
    pub fn content_length(&self) -> Option<u64> {
        let bad = Known::BAD_LENGTH | Known::TRANSFER_ENCODING;
        (self.known & Known::CONTENT_LENGTH != 0 && self.known & bad == 0).then_some(self.length)
    }

    /// The values of its `Connection` fields, in order (none, nearly
    /// always, found without a scan).
    pub fn connection(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        self.known_named(Known::CONNECTION, "connection")
    }

    /// Whether the upstream keeps the connection open after this response:
    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with
    /// `Connection: keep-alive`.
    pub fn keep_alive(&self) -> bool {
        // No `Connection` field (nearly always): the version says it, with
        // no iterator over no fields made.
        if self.known & Known::CONNECTION == 0 {
            return self.version_minor != 0;
        }
        let has = |token: &str| {
            self.connection()
                .flat_map(|v| v.split(|b| *b == b','))
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        };
        if self.version_minor == 0 {
            has("keep-alive")
        } else {
            !has("close")
        }
    }
}

fn range((start, len): Span) -> Range<usize> {
    start as usize..start as usize + len as usize
}

/// Append a request head to `out`: `METHOD TARGET HTTP/1.1`, then the
/// fields as given, then the blank line. The caller writes every field it
/// wants (`Host` included) verbatim; this only refuses what would break the
/// message's framing: a CR, LF or NUL anywhere, a space in the method or
/// target, a field name that is empty or holds a colon or white space.
pub fn write_request_head<I, N, V>(
    out: &mut Vec<u8>,
    method: &str,
    target: &str,
    headers: I,
) -> Result<()>
where
    I: IntoIterator<Item = (N, V)>,
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let breaks = |b: &u8| matches!(b, b'\r' | b'\n' | 0);
    let invalid = |what: &str| Error::InvalidRequest(what.to_string());
    if method.is_empty() || method.bytes().any(|b| breaks(&b) || b == b' ') {
        return Err(invalid(
            "the method is empty or has a space, CR, LF or NUL in it",
        ));
    }
    if target.is_empty() || target.bytes().any(|b| breaks(&b) || b == b' ') {
        return Err(invalid(
            "the target is empty or has a space, CR, LF or NUL in it",
        ));
    }
    let start = out.len();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        let (name, value) = (name.as_ref(), value.as_ref());
        if name.is_empty()
            || name
                .iter()
                .any(|b| breaks(b) || *b == b':' || b.is_ascii_whitespace())
        {
            out.truncate(start);
            return Err(Error::InvalidRequest(format!(
                "the field name {:?} is empty or has a colon, white space, CR, LF or NUL in it",
                String::from_utf8_lossy(name)
            )));
        }
        if value.iter().any(breaks) {
            out.truncate(start);
            return Err(Error::InvalidRequest(format!(
                "the value of the field {:?} has a CR, LF or NUL in it",
                String::from_utf8_lossy(name)
            )));
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Send `bytes` (a request head, and a body small enough to hold) on
/// `conn`, waiting until `until`. The upstream resetting or having closed
/// the connection is [`Error::Closed`] (nothing of an answer came: a pooled
/// connection the upstream closed just now, an idempotent request may go
/// again); the deadline is an [`Error::Timeout`] in [`Phase::Send`].
///
/// Not an `async fn`: only the write's own future is kept, in every
/// waiting request's (see [`Connection::write_all_or`]).
pub fn write_request<'a>(
    conn: &'a mut Connection,
    bytes: &'a [u8],
    until: Instant,
) -> impl std::future::Future<Output = Result<()>> + 'a {
    conn.write_all_or(bytes, until, |e| {
        if is_reset(&e) {
            Error::Closed
        } else {
            Error::io_in(Phase::Send, e)
        }
    })
}

/// How much a head read asks the socket for at a time.
const HEAD_READ: usize = 16 * 1024;

thread_local! {
    /// Where this thread reads response heads: made once per thread that
    /// reads one, so that a head that arrives whole (nearly all) costs no
    /// read buffer of its own, only its bytes kept
    /// ([`ResponseHead::bytes`]) and those read past it.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// What one read of a head's bytes came to.
enum HeadRead {
    /// A whole head (`1xx` interim ones skipped), what followed it in
    /// [`ResponseHead::bytes_after_head`].
    Head(ResponseHead),
    /// `read` bytes read (0: the end of the stream), what is left of them
    /// now at the end of the caller's buffer: all of them but an interim
    /// answer's `skipped` bytes.
    More { read: usize, skipped: usize },
}

/// Read once into this thread's scratch buffer; a head complete in what
/// came is returned with the bytes after it, copied out; anything else
/// goes to the end of `buf` (empty on entry), which the caller reads on
/// into. `interim`: the bytes of interim answers skipped before, which
/// count against `limits` with the head's own.
fn read_head_into_scratch(
    conn: &mut Connection,
    buf: &mut Vec<u8>,
    limits: HeadLimits,
    interim: usize,
) -> Result<io::Result<HeadRead>> {
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        if scratch.len() < HEAD_READ {
            scratch.resize(HEAD_READ, 0);
        }
        let n = match conn.try_read(&mut scratch[..]) {
            Ok(n) => n,
            Err(e) => return Ok(Err(e)),
        };
        let got = &scratch[..n];
        if n > 0 {
            if let Some((mut head, len)) = parse_head(got, limits)? {
                if interim + len > limits.max_bytes {
                    return Err(too_large(limits));
                }
                if !is_interim(head.status) {
                    // A buffer this thread gave back (the last answer's body,
                    // once copied out): no allocation of its own.
                    head.bytes_after_head = mpm_core::byte_spares::copy_of(&got[len..]);
                    return Ok(Ok(HeadRead::Head(head)));
                }
                // An interim answer: the rest is parsed from `buf` (and
                // `n` bytes came: not the end of the stream).
                buf.extend_from_slice(&got[len..]);
                return Ok(Ok(HeadRead::More {
                    read: n,
                    skipped: len,
                }));
            }
        }
        buf.extend_from_slice(got);
        Ok(Ok(HeadRead::More {
            read: n,
            skipped: 0,
        }))
    })
}

/// An interim answer, read and skipped: `1xx` but `101 Switching
/// Protocols`.
fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// How long [`read_response_head`] waits for the upstream's bytes:
///
/// * a [`Duration`]: the longest the upstream may stay silent, before the
///   first byte and between two reads. Each read that brings bytes (an
///   interim answer's among them) starts it again, as nginx's
///   `proxy_read_timeout` does, so that a head that comes slowly but
///   steadily is read whole; what bounds a head that never ends is its
///   size ([`HeadLimits`]).
/// * an [`Instant`]: when the whole head must have come, however steadily
///   it comes (a deadline for a whole exchange, as [`Client`]'s).
///
/// [`Client`]: crate::Client
pub trait HeadTimeout: Copy {
    /// When the upstream must have sent bytes, for a wait that begins now
    /// (at the start, or after a read that brought some).
    fn next_deadline(self) -> Instant;
}

impl HeadTimeout for Duration {
    fn next_deadline(self) -> Instant {
        mpm_core::deadline(mpm_core::turn_clock::now(), self)
    }
}

impl HeadTimeout for Instant {
    fn next_deadline(self) -> Instant {
        self
    }
}

/// Read a response head from `conn` into `buf` (which may already hold
/// bytes), waiting as `timeout` says: a [`Duration`] is the longest
/// silence between two reads (nginx's `proxy_read_timeout`), an
/// [`Instant`] the deadline of the whole head ([`HeadTimeout`]). Interim
/// `1xx` responses other than `101 Switching Protocols` are read and
/// skipped; their bytes count against `limits.max_bytes` with the final
/// head's, so that interim answers without end are refused rather than
/// waited on forever. On return `buf` is empty: the bytes past the head
/// are in [`ResponseHead::bytes_after_head`].
///
/// A head that arrives in one read (nearly all) is read into a buffer the
/// thread keeps, so that `buf` stays empty and a request waiting for its
/// answer holds no read buffer; one that arrives in pieces is gathered in
/// `buf`.
///
/// Errors: [`Error::Closed`] when the upstream closed or reset the
/// connection before a byte came; [`Error::BadResponse`] for a garbage
/// status line, a head (interim answers included) over `limits`, or a
/// close in the middle of the head; [`Error::Timeout`] in [`Phase::Read`].
///
/// An `async` block rather than an `async fn`, which would keep its
/// arguments twice in the future of every request waiting for its answer.
#[allow(clippy::manual_async_fn)] // see above: its future's size
pub fn read_response_head<'a>(
    conn: &'a mut Connection,
    buf: &'a mut Vec<u8>,
    limits: HeadLimits,
    timeout: impl HeadTimeout + 'a,
) -> impl std::future::Future<Output = Result<ResponseHead>> + 'a {
    async move {
        // The bytes of the interim answers skipped so far. Whether any
        // byte came is whether some were skipped or are in `buf` (not a
        // flag of its own: this future is in every waiting request's).
        let mut interim = 0;
        let any_byte = |buf: &Vec<u8>, interim: usize| interim > 0 || !buf.is_empty();
        let mut deadline = timeout.next_deadline();
        // A request just sent has no answer yet: wait for one before the first
        // read rather than spend a read on EAGAIN (a system call per proxied
        // request). TLS may hold decrypted bytes already: it reads first.
        if buf.is_empty() && !conn.is_tls() {
            ready(conn.wait_readable(deadline))
                .await
                .map_err(|e| Error::io_in(Phase::Read, e))?;
        }
        loop {
            if !buf.is_empty() {
                if let Some((head, len)) = parse_head(buf, limits)? {
                    if interim + len > limits.max_bytes {
                        return Err(too_large(limits));
                    }
                    buf.drain(..len);
                    if is_interim(head.status) {
                        interim += len;
                        continue;
                    }
                    let mut head = head;
                    head.bytes_after_head = std::mem::take(buf);
                    return Ok(head);
                }
                if interim + buf.len() >= limits.max_bytes {
                    return Err(too_large(limits));
                }
            }
            let got = loop {
                let got = if buf.is_empty() {
                    match read_head_into_scratch(conn, buf, limits, interim)? {
                        Ok(HeadRead::Head(head)) => return Ok(head),
                        Ok(HeadRead::More { read, skipped }) => {
                            interim += skipped;
                            Ok(read)
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    let start = buf.len();
                    buf.resize(start + HEAD_READ, 0);
                    let got = conn.try_read(&mut buf[start..]);
                    buf.truncate(start + *got.as_ref().unwrap_or(&0));
                    got
                };
                match got {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // A request waiting for its answer holds no read
                        // buffer meanwhile (unless a head came in pieces).
                        if let Err(e) = ready(conn.wait_readable(deadline)).await {
                            break Err(e);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other,
                }
            };
            // A TLS upstream's close without close_notify is an
            // `UnexpectedEof` error: in a head, it is a close as any other.
            let got = match got {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            };
            match got {
                Ok(0) if any_byte(buf, interim) => {
                    return Err(Error::BadResponse(
                        "the upstream closed the connection in the middle of the response head"
                            .to_string(),
                    ))
                }
                Ok(0) => return Err(Error::Closed),
                // Bytes came: a silence starts again.
                Ok(_) => deadline = timeout.next_deadline(),
                Err(e) if !any_byte(buf, interim) && is_reset(&e) => return Err(Error::Closed),
                Err(e) => return Err(Error::io_in(Phase::Read, e)),
            }
        }
    }
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

fn too_large(limits: HeadLimits) -> Error {
    Error::BadResponse(format!(
        "its head is larger than {} bytes",
        limits.max_bytes
    ))
}

/// A complete head at the start of `buf` and its length, or `None` for
/// more to read.
fn parse_head(buf: &[u8], limits: HeadLimits) -> Result<Option<(ResponseHead, usize)>> {
    // The default limit's fields on the stack (3.2 KiB, a parse's life),
    // left uninitialised (httparse writes those it fills): no allocation
    // and no 3.2 KiB written a response; a larger limit allocates.
    let mut on_stack = [MaybeUninit::<httparse::Header<'_>>::uninit(); 100];
    let mut on_heap = Vec::new();
    let fields: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_fields <= on_stack.len() {
        &mut on_stack[..limits.max_fields]
    } else {
        on_heap.resize(limits.max_fields, MaybeUninit::uninit());
        &mut on_heap
    };
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        fields,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::BadResponse(format!(
                "its head has more than {} fields",
                limits.max_fields
            )))
        }
        Err(e) => {
            let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
            let shown: String = String::from_utf8_lossy(&line[..line.len().min(60)])
                .trim_end()
                .to_string();
            return Err(Error::BadResponse(format!(
                "{e} in a head starting {shown:?}"
            )));
        }
    };
    if len > limits.max_bytes {
        return Err(too_large(limits));
    }
    // Each part as a range of the head: where httparse's slice of `buf`
    // begins. A head is at most `buf`, so the offsets fit what they are
    // checked against; one that did not would be empty, never another's.
    let head_bytes = &buf[..len];
    let span = |part: &[u8]| -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(head_bytes.as_ptr() as usize);
        match (u32::try_from(start), u32::try_from(part.len())) {
            (Ok(s), Ok(l)) if start + part.len() <= len => (s, l),
            _ => (0, 0),
        }
    };
    // A plain loop: collected through an iterator adapter, each field
    // was a call of its own.
    let mut known = 0;
    let mut length = None;
    let mut fields = SPARE_FIELDS.try_with(Cell::take).unwrap_or_default();
    fields.reserve_exact(response.headers.len());
    for h in response.headers.iter() {
        let bit = Known::of(h.name.as_bytes());
        if bit == Known::CONTENT_LENGTH {
            // Each comma-separated value a number, all the same one.
            for value in h.value.split(|b| *b == b',') {
                match (decimal(value.trim_ascii()), length) {
                    (Some(n), None) => length = Some(n),
                    (Some(n), Some(l)) if n == l => {}
                    _ => known |= Known::BAD_LENGTH,
                }
            }
        }
        known |= bit;
        fields.push([span(h.name.as_bytes()), span(h.value)]);
    }
    let head = ResponseHead {
        version_minor: response.version.unwrap_or(1),
        status: response.code.unwrap_or(0),
        reason: span(response.reason.unwrap_or("").as_bytes()),
        fields,
        known,
        length: length.unwrap_or(0),
        bytes: HeadBytes::of(head_bytes),
        bytes_after_head: Vec::new(),
    };
    Ok(Some((head, len)))
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: a `HEAD` request's answer, `1xx`, `204`, `304`, a `CONNECT`'s
    /// `2xx`.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Everything until the upstream closes the connection (which then
    /// cannot be reused).
    UntilClose,
}

impl BodyFraming {
    /// The framing of `head`, the answer to a `method` request. Both
    /// `Transfer-Encoding` and `Content-Length`, or a `Content-Length` that
    /// is not one number, is a [`Error::BadResponse`]: a message framed two
    /// ways is how responses are smuggled. So is a `Transfer-Encoding`
    /// other than `chunked` alone (as nginx refuses it): no other transfer
    /// coding is decoded, and its bytes would be read as the content.
    pub fn for_response(method: &str, head: &ResponseHead) -> Result<BodyFraming> {
        let status = head.status;
        if method.eq_ignore_ascii_case("HEAD")
            || (100..200).contains(&status)
            || status == 204
            || status == 304
            || (method.eq_ignore_ascii_case("CONNECT") && (200..300).contains(&status))
        {
            return Ok(BodyFraming::None);
        }
        // Read in place, field by field: no list of them made per response,
        // and no scan for a field the head was seen without.
        let has_te = head.known & Known::TRANSFER_ENCODING != 0;
        let has_cl = head.known & Known::CONTENT_LENGTH != 0;
        if has_te && has_cl {
            return Err(Error::BadResponse(
                "it has both Transfer-Encoding and Content-Length (RFC 9112 §6.3: a smuggling attempt, or a broken upstream)"
                    .to_string(),
            ));
        }
        if has_te {
            // `chunked` alone, as nginx takes it: any other transfer coding
            // (`gzip`, `chunked, gzip`, `xchunked`) would reach the reader
            // still coded, the coding's name dropped with the hop-by-hop
            // field that carried it (RFC 9112 §6.1: the coding is the
            // message's), so it is refused rather than passed as content.
            let mut codings = head
                .headers_named("transfer-encoding")
                .flat_map(|v| v.split(|b| *b == b','))
                .map(|t| t.trim_ascii())
                .filter(|t| !t.is_empty());
            return match (codings.next(), codings.next()) {
                (Some(t), None) if t.eq_ignore_ascii_case(b"chunked") => Ok(BodyFraming::Chunked),
                _ => {
                    let te: Vec<&[u8]> = head.headers_named("transfer-encoding").collect();
                    Err(Error::BadResponse(format!(
                        "its Transfer-Encoding {:?} is not chunked alone (no other transfer \
                         coding is decoded)",
                        String::from_utf8_lossy(&te.join(&b", "[..]))
                    )))
                }
            };
        }
        if !has_cl {
            return Ok(BodyFraming::UntilClose);
        }
        // Read as the head was parsed.
        if head.known & Known::BAD_LENGTH != 0 {
            let cl: Vec<&[u8]> = head.headers_named("content-length").collect();
            return Err(Error::BadResponse(format!(
                "its Content-Length {:?} is not one number",
                String::from_utf8_lossy(&cl.join(&b", "[..]))
            )));
        }
        Ok(BodyFraming::Length(head.length))
    }
}

/// The number `digits` (ASCII digits only, at least one) says, `None` for
/// anything else or one past `u64`: read from the bytes, with no UTF-8
/// check of its own.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Longest chunk-size line (with its extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;
/// Most trailer bytes accepted (they are read and dropped).
const MAX_TRAILERS: usize = 64 * 1024;
/// How much a framing line read asks the socket for at a time.
const LINE_READ: usize = 8 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Length { left: u64 },
    UntilClose,
    ChunkSize,
    ChunkData { left: u64 },
    ChunkEnd,
    Trailers { seen: usize },
    Done,
}

/// A response body, decoded from its framing as it is read: the caller
/// gets the body's bytes, never chunk sizes or trailers (trailers are read
/// and dropped). Memory is bounded: the reader keeps at most a framing
/// line's worth of bytes; body bytes go from the socket to the caller's
/// buffer.
#[derive(Debug)]
pub struct BodyReader {
    framing: BodyFraming,
    state: State,
    buf: Vec<u8>,
    pos: usize,
    keep_alive: bool,
}

impl BodyReader {
    /// A reader of a body framed as `framing`, whose first bytes are
    /// `already_read` (the head's [`bytes_after_head`]); `keep_alive`:
    /// whether the upstream keeps the connection ([`ResponseHead::keep_alive`]).
    ///
    /// [`bytes_after_head`]: ResponseHead::bytes_after_head
    pub fn new(framing: BodyFraming, already_read: Vec<u8>, keep_alive: bool) -> BodyReader {
        let state = match framing {
            BodyFraming::None | BodyFraming::Length(0) => State::Done,
            BodyFraming::Length(n) => State::Length { left: n },
            BodyFraming::Chunked => State::ChunkSize,
            BodyFraming::UntilClose => State::UntilClose,
        };
        BodyReader {
            framing,
            state,
            buf: already_read,
            pos: 0,
            keep_alive,
        }
    }

    /// The reader of the body of `head`, the answer to a `method` request:
    /// its framing ([`BodyFraming::for_response`]), taking the bytes read
    /// past the head.
    pub fn for_response(method: &str, head: &mut ResponseHead) -> Result<BodyReader> {
        let framing = BodyFraming::for_response(method, head)?;
        Ok(BodyReader::new(
            framing,
            std::mem::take(&mut head.bytes_after_head),
            head.keep_alive(),
        ))
    }

    /// The framing.
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }

    /// Whether the body was read to its end.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The whole body, when all of it was read with the head (a short
    /// `Content-Length` answer, nearly always): taken out as it is, no
    /// copy, the reader then at its end. `None` otherwise (nothing taken).
    pub fn take_whole(&mut self) -> Option<Vec<u8>> {
        match self.state {
            State::Length { left } if self.pos == 0 && self.buf.len() as u64 == left => {
                self.state = State::Done;
                Some(std::mem::take(&mut self.buf))
            }
            _ => None,
        }
    }

    /// Whether the connection may go back to the pool: the body read to its
    /// end, a framing other than until-close, nothing read past the body,
    /// and the upstream did not say `Connection: close`.
    pub fn reusable(&self) -> bool {
        self.is_done()
            && self.framing != BodyFraming::UntilClose
            && self.keep_alive
            && self.pos >= self.buf.len()
    }

    /// Read body bytes into `out` (which must not be empty): `Ok(0)` at the
    /// end of the body; `WouldBlock` when the socket has nothing now; an
    /// `UnexpectedEof` error when the upstream closed before the end its
    /// framing announced (never a clean end); `InvalidData` for a broken
    /// chunked framing.
    pub fn try_read(&mut self, conn: &mut Connection, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "BodyReader::try_read needs room for at least one byte",
            ));
        }
        loop {
            match self.state {
                State::Done => return Ok(0),
                State::Length { left } => {
                    let n = self.data(conn, out, left)?;
                    if n == 0 {
                        return Err(short(format!(
                            "the upstream closed the connection {left} bytes short of its Content-Length"
                        )));
                    }
                    self.state = match left - n as u64 {
                        0 => State::Done,
                        left => State::Length { left },
                    };
                    return Ok(n);
                }
                State::UntilClose => {
                    let n = self.data(conn, out, u64::MAX)?;
                    if n == 0 {
                        self.state = State::Done;
                    }
                    return Ok(n);
                }
                State::ChunkData { left } => {
                    let n = self.data(conn, out, left)?;
                    if n == 0 {
                        return Err(short(
                            "the upstream closed the connection in the middle of a chunk".into(),
                        ));
                    }
                    self.state = match left - n as u64 {
                        0 => State::ChunkEnd,
                        left => State::ChunkData { left },
                    };
                    return Ok(n);
                }
                State::ChunkSize => {
                    let line = self.line(conn, MAX_CHUNK_LINE)?;
                    let size = chunk_size(&self.buf[line.0..line.1])?;
                    self.state = match size {
                        0 => State::Trailers { seen: 0 },
                        n => State::ChunkData { left: n },
                    };
                }
                State::ChunkEnd => {
                    let line = self.line(conn, 0)?;
                    if line.0 != line.1 {
                        return Err(broken("a chunk is longer than its size says"));
                    }
                    self.state = State::ChunkSize;
                }
                State::Trailers { seen } => {
                    let line = self.line(conn, MAX_TRAILERS.saturating_sub(seen))?;
                    self.state = if line.0 == line.1 {
                        State::Done
                    } else {
                        State::Trailers {
                            seen: seen + (line.1 - line.0) + 2,
                        }
                    };
                }
            }
        }
    }

    /// Read body bytes into `out`, waiting until `until`: `Ok(0)` at the
    /// end. A close before the framing's end is an [`Error::Io`] of kind
    /// `UnexpectedEof`; a broken chunked framing a [`Error::BadResponse`];
    /// the deadline an [`Error::Timeout`] in [`Phase::Read`].
    pub async fn read(
        &mut self,
        conn: &mut Connection,
        out: &mut [u8],
        until: Instant,
    ) -> Result<usize> {
        loop {
            match self.try_read(conn, out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready(conn.wait_readable(until))
                        .await
                        .map_err(|e| Error::io_in(Phase::Read, e))?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(Error::BadResponse(e.to_string()))
                }
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }

    /// Up to `limit` body bytes: from what is buffered, else straight from
    /// the socket into `out`.
    fn data(&mut self, conn: &mut Connection, out: &mut [u8], limit: u64) -> io::Result<usize> {
        let want = out.len().min(usize::try_from(limit).unwrap_or(usize::MAX));
        let buffered = self.buf.len() - self.pos;
        if buffered > 0 {
            let n = want.min(buffered);
            out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.buf.len() {
                self.buf.clear();
                self.pos = 0;
            }
            return Ok(n);
        }
        conn.try_read(&mut out[..want])
    }

    /// The next CRLF-ended line (without its CRLF), as a range of `buf`,
    /// consumed; at most `max` bytes before the CRLF.
    fn line(&mut self, conn: &mut Connection, max: usize) -> io::Result<(usize, usize)> {
        loop {
            if let Some(i) = self.buf[self.pos..].iter().position(|b| *b == b'\n') {
                let (start, lf) = (self.pos, self.pos + i);
                if lf == start || self.buf[lf - 1] != b'\r' {
                    return Err(broken("a line of the chunked framing ends in a bare LF"));
                }
                if lf - 1 - start > max {
                    return Err(broken("a line of the chunked framing is too long"));
                }
                self.pos = lf + 1;
                return Ok((start, lf - 1));
            }
            if self.buf.len() - self.pos > max + 1 {
                return Err(broken("a line of the chunked framing is too long"));
            }
            // Keep what is buffered, at the front, and read more after it.
            self.buf.drain(..self.pos);
            self.pos = 0;
            let start = self.buf.len();
            self.buf.resize(start + LINE_READ, 0);
            let got = conn.try_read(&mut self.buf[start..]);
            self.buf.truncate(start + *got.as_ref().unwrap_or(&0));
            if got? == 0 {
                return Err(short(
                    "the upstream closed the connection in the middle of the chunked framing"
                        .into(),
                ));
            }
        }
    }
}

/// The size of a chunk-size line: hex digits, then nothing or extensions
/// (ignored).
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(broken("a chunk size is not a hexadecimal number"));
    }
    let rest = line[digits..].trim_ascii_start();
    if !rest.is_empty() && rest[0] != b';' {
        return Err(broken(
            "a chunk size is followed by something other than an extension",
        ));
    }
    let text =
        std::str::from_utf8(&line[..digits]).map_err(|_| broken("a chunk size is not ASCII"))?;
    u64::from_str_radix(text, 16).map_err(|_| broken("a chunk size is not a hexadecimal number"))
}

fn broken(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

fn short(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, why)
}

/// How a request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFraming {
    /// `Content-Length` bytes (the caller wrote the field).
    Length(u64),
    /// `Transfer-Encoding: chunked` (the caller wrote the field).
    Chunked,
}

/// A request body going out, framed as its head said: the caller writes
/// the body's bytes, this counts them or makes the chunks. Memory is
/// bounded: only a chunk's size line is kept, the bytes go from the
/// caller's buffer to the socket.
#[derive(Debug)]
pub struct BodyWriter {
    framing: RequestFraming,
    left: u64,
    chunk_left: u64,
    pending: Vec<u8>,
    ended: bool,
}

impl BodyWriter {
    /// A writer of a body framed as `framing`.
    pub fn new(framing: RequestFraming) -> BodyWriter {
        BodyWriter {
            framing,
            left: match framing {
                RequestFraming::Length(n) => n,
                RequestFraming::Chunked => 0,
            },
            chunk_left: 0,
            pending: Vec::new(),
            ended: false,
        }
    }

    /// Write some of `data` (as [`std::io::Write::write`]: a call after a
    /// partial write passes the rest): `WouldBlock` when the socket takes
    /// nothing. More bytes than the `Content-Length` is an `InvalidInput`
    /// error.
    pub fn try_write(&mut self, conn: &mut Connection, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        self.flush_pending(conn)?;
        match self.framing {
            RequestFraming::Length(_) => {
                if data.len() as u64 > self.left {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the request body is longer than its Content-Length",
                    ));
                }
                let n = conn.try_write(data)?;
                self.left -= n as u64;
                Ok(n)
            }
            RequestFraming::Chunked => {
                if self.chunk_left == 0 {
                    self.chunk_left = data.len() as u64;
                    self.pending = format!("{:x}\r\n", data.len()).into_bytes();
                    self.flush_pending(conn)?;
                }
                let take = data
                    .len()
                    .min(usize::try_from(self.chunk_left).unwrap_or(usize::MAX));
                let n = conn.try_write(&data[..take])?;
                self.chunk_left -= n as u64;
                if self.chunk_left == 0 {
                    self.pending.extend_from_slice(b"\r\n");
                    match self.flush_pending(conn) {
                        Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                        _ => {}
                    }
                }
                Ok(n)
            }
        }
    }

    /// End the body (the last chunk, for chunked) and send what is
    /// pending: `WouldBlock` while some remains. A body shorter than its
    /// `Content-Length` is an `InvalidInput` error.
    pub fn try_finish(&mut self, conn: &mut Connection) -> io::Result<()> {
        self.flush_pending(conn)?;
        match self.framing {
            RequestFraming::Length(_) if self.left > 0 => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the request body ended {} bytes short of its Content-Length",
                        self.left
                    ),
                ))
            }
            RequestFraming::Chunked if !self.ended => {
                if self.chunk_left > 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the request body ended in the middle of a chunk",
                    ));
                }
                self.ended = true;
                self.pending.extend_from_slice(b"0\r\n\r\n");
                self.flush_pending(conn)?;
            }
            _ => {}
        }
        conn.try_flush()
    }

    /// Write all of `data`, waiting until `until`.
    pub async fn write_all(
        &mut self,
        conn: &mut Connection,
        mut data: &[u8],
        until: Instant,
    ) -> Result<()> {
        while !data.is_empty() {
            match self.try_write(conn, data) {
                Ok(n) => data = &data[n..],
                Err(e) => self.wait_or_fail(conn, e, until).await?,
            }
        }
        Ok(())
    }

    /// End the body and send it all, waiting until `until`.
    pub async fn finish(&mut self, conn: &mut Connection, until: Instant) -> Result<()> {
        loop {
            match self.try_finish(conn) {
                Ok(()) => return Ok(()),
                Err(e) => self.wait_or_fail(conn, e, until).await?,
            }
        }
    }

    async fn wait_or_fail(&self, conn: &Connection, e: io::Error, until: Instant) -> Result<()> {
        match e.kind() {
            io::ErrorKind::WouldBlock => ready(conn.wait_writable(until))
                .await
                .map_err(|e| Error::io_in(Phase::Send, e)),
            io::ErrorKind::Interrupted => Ok(()),
            io::ErrorKind::InvalidInput => Err(Error::InvalidRequest(e.to_string())),
            _ => Err(Error::Io(e)),
        }
    }

    fn flush_pending(&mut self, conn: &mut Connection) -> io::Result<()> {
        while !self.pending.is_empty() {
            let n = conn.try_write(&self.pending)?;
            self.pending.drain(..n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, fields: &[(&str, &str)]) -> ResponseHead {
        head_of(1, status, fields)
    }

    fn head_of(minor: u8, status: u16, fields: &[(&str, &str)]) -> ResponseHead {
        let mut text = format!("HTTP/1.{minor} {status} X\r\n");
        for (n, v) in fields {
            text.push_str(&format!("{n}: {v}\r\n"));
        }
        text.push_str("\r\n");
        let (head, len) = ResponseHead::parse(text.as_bytes(), HeadLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(len, text.len());
        head
    }

    #[test]
    fn head_204_and_304_have_no_body_whatever_their_content_length() {
        let cl = [("Content-Length", "10")];
        assert_eq!(
            BodyFraming::for_response("HEAD", &head(200, &cl)).unwrap(),
            BodyFraming::None
        );
        assert_eq!(
            BodyFraming::for_response("GET", &head(304, &cl)).unwrap(),
            BodyFraming::None
        );
        assert_eq!(
            BodyFraming::for_response("GET", &head(204, &[])).unwrap(),
            BodyFraming::None
        );
        assert_eq!(
            BodyFraming::for_response("GET", &head(200, &cl)).unwrap(),
            BodyFraming::Length(10)
        );
    }

    #[test]
    fn framing_follows_transfer_encoding_then_content_length_then_close() {
        let get = |f: &[(&str, &str)]| BodyFraming::for_response("GET", &head(200, f));
        assert_eq!(
            get(&[("Transfer-Encoding", "Chunked")]).unwrap(),
            BodyFraming::Chunked
        );
        // Any other coding would be passed on still coded: refused, as
        // nginx refuses it (502 through the proxy).
        for te in [
            "gzip, chunked",
            "gzip",
            "chunked, gzip",
            "xchunked",
            "chunked, chunked",
        ] {
            let e = get(&[("Transfer-Encoding", te)]).unwrap_err().to_string();
            assert!(e.contains("is not chunked alone"), "{te}: {e}");
        }
        assert_eq!(get(&[]).unwrap(), BodyFraming::UntilClose);
        assert_eq!(
            get(&[("Content-Length", "5"), ("content-length", "5")]).unwrap(),
            BodyFraming::Length(5)
        );
    }

    /// The head read from a plain connection whose peer writes `parts`,
    /// pausing between them (so that each comes in a read of its own),
    /// then closes; one deadline for the whole head.
    fn head_read_from(parts: &[&[u8]]) -> Result<ResponseHead> {
        let parts = parts.iter().map(|p| p.to_vec()).collect();
        let until = Instant::now() + Duration::from_secs(5);
        head_read_spaced(parts, Duration::from_millis(30), until)
    }

    /// The head read from a plain connection whose peer writes `parts`,
    /// each `gap` after the one before, then closes; read with `timeout`
    /// (a read timeout, or a deadline: [`HeadTimeout`]).
    fn head_read_spaced(
        parts: Vec<Vec<u8>>,
        gap: Duration,
        timeout: impl HeadTimeout,
    ) -> Result<ResponseHead> {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let sock = mpm_core::waiting::block_on(crate::connect::connect_tcp(addr, until)).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        peer.set_nodelay(true).unwrap();
        let writer = std::thread::spawn(move || {
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    std::thread::sleep(gap);
                }
                // The reader may have given up: then the writes fail.
                if peer.write_all(p).is_err() {
                    return;
                }
            }
        });
        let target = crate::pool::Target::plain(addr);
        let mut conn = Connection::plain(sock, Arc::new(target.key()));
        let mut buf = Vec::new();
        let got = mpm_core::waiting::block_on(read_response_head(
            &mut conn,
            &mut buf,
            HeadLimits::default(),
            timeout,
        ));
        drop(conn);
        writer.join().unwrap();
        got
    }

    /// nginx's `proxy_read_timeout`: the longest wait between two reads,
    /// not for the whole head. A head trickled a byte every 30 ms, 720 ms
    /// in all, is read whole with a read timeout of 500 ms; so is a final
    /// head after interim answers 60 ms apart, 480 ms in all, with one of
    /// 400 ms. (Each gap well inside the timeout, so that a loaded machine
    /// that sleeps a writer longer than asked does not fail it.)
    #[test]
    fn a_head_trickled_within_the_read_timeout_between_reads_is_read_whole() {
        let ms = Duration::from_millis;
        let bytes = b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n".iter();
        let head = head_read_spaced(bytes.map(|b| vec![*b]).collect(), ms(30), ms(500)).unwrap();
        assert_eq!((head.status, head.header("a")), (200, Some(&b"b"[..])));
        let mut parts = vec![b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n".to_vec(); 8];
        parts.push(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec());
        let head = head_read_spaced(parts, ms(60), ms(400)).unwrap();
        assert_eq!(head.status, 204);
    }

    #[test]
    fn a_head_that_stalls_longer_than_the_read_timeout_is_a_read_timeout() {
        let ms = Duration::from_millis;
        let parts = vec![b"HTTP/1.1 200 OK\r\n".to_vec(), b"A: b\r\n\r\n".to_vec()];
        let e = head_read_spaced(parts, ms(300), ms(100)).unwrap_err();
        assert!(matches!(e, Error::Timeout { phase: Phase::Read }), "{e:?}");
        // An interim answer, then a stall.
        let parts = vec![
            b"HTTP/1.1 103 Early Hints\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
        ];
        let e = head_read_spaced(parts, ms(300), ms(100)).unwrap_err();
        assert!(matches!(e, Error::Timeout { phase: Phase::Read }), "{e:?}");
    }

    /// With the read timeout restarted by every read, interim answers
    /// without end would hold a request forever: they count against the
    /// head's size limit.
    #[test]
    fn interim_answers_count_against_the_heads_size_limit() {
        let many = b"HTTP/1.1 103 Early Hints\r\n\r\n".repeat(3000);
        let e = head_read_spaced(vec![many], Duration::ZERO, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(&e, Error::BadResponse(m) if m.contains("larger than")),
            "{e:?}"
        );
    }

    #[test]
    fn a_head_read_whole_keeps_the_body_after_it_and_skips_an_interim_answer() {
        let whole =
            head_read_from(&[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"]).unwrap();
        assert_eq!(
            (whole.status, whole.bytes_after_head.as_slice()),
            (200, &b"hello"[..])
        );
        assert_eq!(whole.header("content-length"), Some(&b"5"[..]));
        let interim = head_read_from(&[
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
        ])
        .unwrap();
        assert_eq!(
            (interim.status, interim.bytes_after_head.as_slice()),
            (201, &b"ok"[..])
        );
        let pieces = head_read_from(&[
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2",
            b"04 No Content\r\nX-A: b",
            b"\r\n\r\n",
        ])
        .unwrap();
        assert_eq!(pieces.status, 204);
        assert_eq!(pieces.header("x-a"), Some(&b"b"[..]));
        assert!(pieces.bytes_after_head.is_empty());
        assert!(matches!(head_read_from(&[]), Err(Error::Closed)));
        let cut = head_read_from(&[b"HTTP/1.1 200 OK\r\nX-A"]).unwrap_err();
        assert!(matches!(cut, Error::BadResponse(_)), "{cut:?}");
    }

    #[test]
    fn a_usable_content_length_is_one_number_and_no_transfer_encoding() {
        let length = |f: &[(&str, &str)]| head(200, f).content_length();
        assert_eq!(length(&[("Content-Length", "42")]), Some(42));
        assert_eq!(length(&[("Content-Length", "0")]), Some(0));
        assert_eq!(
            length(&[("content-length", "7"), ("Content-Length", "7, 7")]),
            Some(7)
        );
        for unusable in [
            &[][..],
            &[("Transfer-Encoding", "chunked")],
            &[("Content-Length", "5, 6")],
            &[("Content-Length", "5"), ("Content-Length", "6")],
            &[("Content-Length", "+5")],
            &[("Content-Length", "five")],
            &[("Transfer-Encoding", "chunked"), ("Content-Length", "5")],
        ] {
            assert_eq!(length(unusable), None, "{unusable:?}");
        }
    }

    #[test]
    fn a_response_framed_two_ways_is_refused() {
        let get = |f: &[(&str, &str)]| BodyFraming::for_response("GET", &head(200, f));
        let both = get(&[("Transfer-Encoding", "chunked"), ("Content-Length", "5")]);
        assert!(matches!(both, Err(Error::BadResponse(m)) if m.contains("6.3")));
        for cl in ["5, 6", "-1", "", "0x10", "+5"] {
            assert!(
                matches!(get(&[("Content-Length", cl)]), Err(Error::BadResponse(_))),
                "{cl:?}"
            );
        }
    }

    #[test]
    fn the_fields_noted_as_a_head_is_parsed_are_found_in_any_case_and_place() {
        let get = |f: &[(&str, &str)]| BodyFraming::for_response("GET", &head(200, f));
        let many = [("X-A", "1"), ("cOnTeNt-LeNgTh", "7"), ("X-B", "2")];
        assert_eq!(get(&many).unwrap(), BodyFraming::Length(7));
        let both = [
            ("Server", "up"),
            ("TRANSFER-ENCODING", "chunked"),
            ("content-length", "5"),
        ];
        assert!(get(&both).is_err());
        let h = head(200, &[("X-A", "1"), ("CONNECTION", "close, x-a")]);
        assert!(!h.keep_alive());
        assert_eq!(h.connection().collect::<Vec<_>>(), [&b"close, x-a"[..]]);
        assert_eq!(
            head(200, &[("X-Connection", "close")]).connection().count(),
            0
        );
    }

    #[test]
    fn the_known_names_match_in_any_case_and_nothing_else() {
        for (name, bit) in [
            (&b"content-length"[..], Known::CONTENT_LENGTH),
            (b"Content-Length", Known::CONTENT_LENGTH),
            (b"CONTENT-LENGTH", Known::CONTENT_LENGTH),
            (b"Transfer-Encoding", Known::TRANSFER_ENCODING),
            (b"tRANSFER-eNCODING", Known::TRANSFER_ENCODING),
            (b"Connection", Known::CONNECTION),
            (b"CONNECTION", Known::CONNECTION),
            (b"Content-Lengtx", 0),
            (b"xontent-length", 0),
            (b"Content_Length", 0),
            (b"Transfer-Encodinh", 0),
            (b"Connectioo", 0),
            (b"Keep-Alive", 0),
            (b"Server", 0),
        ] {
            assert_eq!(Known::of(name), bit, "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn a_content_length_is_digits_that_fit_64_bits() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"0012"), Some(12));
        assert_eq!(decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"18446744073709551616",
            b"1 2",
            b"+1",
            b"1a",
            b"\xd9\xa1",
        ] {
            assert_eq!(decimal(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_field() {
        assert!(head(200, &[]).keep_alive());
        assert!(!head(200, &[("Connection", "foo, Close")]).keep_alive());
        assert!(!head_of(0, 200, &[]).keep_alive());
        assert!(head_of(0, 200, &[("connection", "keep-alive")]).keep_alive());
    }

    #[test]
    fn a_head_keeps_its_bytes_and_each_field_is_a_range_of_them() {
        let text =
            b"HTTP/1.1 404 Not Here\r\nServer: up\r\nX-Empty:\r\nSet-Cookie: a=1\r\n\r\nbody";
        let (h, len) = ResponseHead::parse(text, HeadLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(len, text.len() - 4);
        assert_eq!(h.bytes().len(), len, "the head's bytes, not the body's");
        assert_eq!((h.status, h.reason()), (404, "Not Here"));
        assert_eq!(&h.bytes()[h.reason_range()], b"Not Here");
        let fields: Vec<(&str, &[u8])> = h.headers().collect();
        assert_eq!(
            fields,
            [
                ("Server", &b"up"[..]),
                ("X-Empty", b""),
                ("Set-Cookie", b"a=1")
            ]
        );
        for ((n, v), (name, value)) in h.header_ranges().zip(h.headers()) {
            assert_eq!(&h.bytes()[n], name.as_bytes());
            assert_eq!(&h.bytes()[v], value);
        }
        assert_eq!(
            h.text().map(|t| t.len()),
            Some(len),
            "UTF-8: shared as text"
        );
        // A value past ASCII that is not UTF-8: the head is kept as bytes.
        let raw = b"HTTP/1.1 200 OK\r\nX-Old: caf\xe9\r\nServer: up\r\n\r\n";
        let (h, _) = ResponseHead::parse(raw, HeadLimits::default())
            .unwrap()
            .unwrap();
        assert!(h.text().is_none());
        assert_eq!(h.header("x-old"), Some(&b"caf\xe9"[..]));
        assert_eq!((h.reason(), h.header("server")), ("OK", Some(&b"up"[..])));
        // More fields than are kept inline.
        let many: Vec<(String, String)> = (0..40)
            .map(|i| (format!("X-{i}"), format!("{i}")))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let h = head(200, &many);
        assert_eq!(h.len(), 40);
        assert_eq!(h.header("x-39"), Some(&b"39"[..]));
    }

    #[test]
    fn a_head_is_small_enough_to_move_without_a_memcpy_call() {
        // A head is moved up several calls: past 128 bytes each move is a
        // call to memcpy (see `ResponseHead`).
        assert!(std::mem::size_of::<ResponseHead>() <= 128);
    }

    #[test]
    fn a_request_head_refuses_what_would_split_it() {
        let mut out = Vec::new();
        write_request_head(&mut out, "GET", "/x?y", [("Host", "a"), ("X-A", "b c")]).unwrap();
        assert_eq!(out, b"GET /x?y HTTP/1.1\r\nHost: a\r\nX-A: b c\r\n\r\n");
        let before = out.clone();
        for (m, t, n, v) in [
            ("GE T", "/", "a", "b"),
            ("GET", "/ x", "a", "b"),
            ("GET", "/\r\n", "a", "b"),
            ("GET", "/", "a:", "b"),
            ("GET", "/", "a", "b\r\nEvil: 1"),
            ("GET", "/", "a", "b\0"),
            ("GET", "/", "", "b"),
        ] {
            let got = write_request_head(&mut out, m, t, [(n, v)]);
            assert!(
                matches!(got, Err(Error::InvalidRequest(_))),
                "{m} {t} {n} {v}"
            );
            assert_eq!(
                out, before,
                "nothing of a refused head is left in the buffer"
            );
        }
    }

    #[test]
    fn chunk_sizes_take_extensions_and_refuse_the_rest() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"1A ;name=value").unwrap(), 26);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        for bad in [
            &b""[..],
            b"x",
            b"1 2",
            b"-1",
            b"11111111111111111",
            b"1a\tz",
        ] {
            assert!(
                chunk_size(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
