//! What an [`HttpHandler`](crate::HttpHandler) answers with.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::Read;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use smallvec::SmallVec;

use crate::internal_redirect::InternalRedirect;

use crate::byte_classes::is_tchar;
use crate::waiting::{LaterAnswer, PollRead, Tunnel};
use crate::wire_fields::WireFields;

/// Header fields as (name, value) pairs, in the order they are sent; the
/// usual handful is kept inline, so building a response need not allocate.
pub(crate) type Fields = SmallVec<[(HeaderText, HeaderText); 6]>;

/// A header field's name or value: a `&'static str`, a `String`, or an
/// `Arc<str>` shared with a cache (an `ETag` formatted once per file).
///
/// Anything that converts into it can be given to [`Response::header`].
#[derive(Debug, Clone)]
pub struct HeaderText(Text);

/// Three words, no more: a response keeps six fields inline and is moved
/// whole several times on its way out (the future's poll, the layer's
/// hands), so a word saved here is twelve saved in every move. Hence a
/// `Box<str>` for owned text rather than a `String` (no capacity), and a
/// slice's length in 16 bits (a longer one is copied).
#[derive(Debug, Clone)]
enum Text {
    Static(&'static str),
    Owned(Box<str>),
    Shared(Arc<str>),
    /// A range of a text shared with others (start, length), checked to
    /// fall on character boundaries when made ([`HeaderText::slice_of`]):
    /// a part of an upstream's head (the proxy's reason phrase) kept
    /// without a copy. (Its fields go as bytes:
    /// [`Response::try_header_bytes`].)
    Slice(Arc<str>, u32, u16),
}

impl Deref for HeaderText {
    type Target = str;
    fn deref(&self) -> &str {
        match &self.0 {
            Text::Static(s) => s,
            Text::Owned(s) => s,
            Text::Shared(s) => s,
            // Checked when made, so never the empty fallback.
            Text::Slice(text, start, len) => {
                let start = *start as usize;
                text.get(start..start + usize::from(*len))
                    .unwrap_or_default()
            }
        }
    }
}

impl HeaderText {
    /// Its bytes, for the layer's checks and for writing it: a slice's
    /// character boundaries were checked when it was made, and taken as
    /// bytes it is not checked again (as taken as `str` it is), every
    /// field of every response.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Text::Static(s) => s.as_bytes(),
            Text::Owned(s) => s.as_bytes(),
            Text::Shared(s) => s.as_bytes(),
            Text::Slice(text, start, len) => {
                let start = *start as usize;
                text.as_bytes()
                    .get(start..start + usize::from(*len))
                    .unwrap_or_default()
            }
        }
    }

    /// The part at `range` of `text`, sharing it (no copy; a part over
    /// 64 KiB is copied): `None` if the range is outside it or not on
    /// character boundaries.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mpm_http::HeaderText;
    /// let head: Arc<str> = Arc::from("Server: up\r\n");
    /// assert_eq!(&*HeaderText::slice_of(&head, 8..10).unwrap(), "up");
    /// assert!(HeaderText::slice_of(&head, 8..99).is_none());
    /// ```
    pub fn slice_of(text: &Arc<str>, range: std::ops::Range<usize>) -> Option<HeaderText> {
        let part = text.get(range.clone())?;
        match (u32::try_from(range.start), u16::try_from(part.len())) {
            (Ok(start), Ok(len)) => Some(HeaderText(Text::Slice(Arc::clone(text), start, len))),
            _ => Some(HeaderText(Text::Owned(part.into()))),
        }
    }
}

impl From<&'static str> for HeaderText {
    fn from(s: &'static str) -> Self {
        HeaderText(Text::Static(s))
    }
}

impl From<String> for HeaderText {
    fn from(s: String) -> Self {
        HeaderText(Text::Owned(s.into_boxed_str()))
    }
}

impl From<Arc<str>> for HeaderText {
    fn from(s: Arc<str>) -> Self {
        HeaderText(Text::Shared(s))
    }
}

impl From<&Arc<str>> for HeaderText {
    fn from(s: &Arc<str>) -> Self {
        HeaderText(Text::Shared(Arc::clone(s)))
    }
}

impl From<Cow<'static, str>> for HeaderText {
    fn from(s: Cow<'static, str>) -> Self {
        match s {
            Cow::Borrowed(s) => s.into(),
            Cow::Owned(s) => s.into(),
        }
    }
}

/// A response: status, header fields, body.
///
/// The HTTP layer writes `Date`, the framing (`Content-Length` or
/// `Transfer-Encoding: chunked`) and `Connection`: those are its fields, and
/// setting one here is refused (see [`header`](Self::header): the response
/// becomes a 500). `Server` is
/// the application's default (the `mpm` crate's `Identity`) unless the
/// handler sets one; a handler that wants the connection closed after this
/// response says so with [`close`](Self::close).
///
/// ```
/// use mpm_http::Response;
/// let r = Response::new(200)
///     .header("Content-Type", "text/plain")
///     .header("Server", "kv/1.0")
///     .body("hello\n");
/// assert_eq!(r.status(), 200);
/// assert_eq!(r.header_value("server"), Some("kv/1.0"));
///
/// // A status without a registered phrase gets the handler's.
/// let r = Response::new(299).reason("Nearly OK");
/// assert_eq!(r.reason_text(), "Nearly OK");
/// ```
#[derive(Debug)]
pub struct Response {
    // The layer reads these in place (crate-visible), where the response
    // was built or received: its 472 bytes are not moved into another
    // struct to be written.
    pub(crate) status: u16,
    pub(crate) reason: Option<HeaderText>,
    pub(crate) headers: Fields,
    /// Fields given as bytes ([`try_header_bytes`](Self::try_header_bytes)),
    /// as they are written; sent after `headers`.
    pub(crate) wire: WireFields,
    pub(crate) body: Body,
    pub(crate) close: bool,
    pub(crate) has_server: bool,
    /// The body is the built-in error page (`Response::error`), which a
    /// configured error page replaces.
    pub(crate) stock: bool,
    /// A configured error page for its status replaces the whole response
    /// ([`set_intercept_errors`](Self::set_intercept_errors)).
    pub(crate) intercept: bool,
    /// A field or reason phrase was refused: this is the 500 that replaced
    /// the response, and the builder calls after it leave it alone.
    refused: bool,
    /// The answer is still to come (`Response::later`).
    later: Option<Later>,
    /// Another target the server answers for instead
    /// ([`set_internal_redirect`](Self::set_internal_redirect)).
    redirect: Option<Box<InternalRedirect>>,
    /// After this `101`, the connection carries bytes both ways.
    pub(crate) tunnel: Option<Box<dyn Tunnel>>,
    /// What the answer came from, for the access log.
    pub(crate) upstream: UpstreamInfo,
}

/// The future of a [`Response::later`].
struct Later(LaterAnswer);

impl fmt::Debug for Later {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Later")
    }
}

/// The upstream an answer came from, if any, kept inline: a box would be
/// an allocation of every proxied request. Read as the `Option<Box<_>>`
/// it replaced was, with `as_deref`.
#[derive(Debug)]
pub(crate) struct UpstreamInfo(Option<Upstream>);

impl UpstreamInfo {
    /// The upstream, if one was recorded.
    pub(crate) fn as_deref(&self) -> Option<&Upstream> {
        self.0.as_ref()
    }
}

/// The upstream an answer came from, for the access log's
/// `$upstream_addr`, `$upstream_status` and `$upstream_response_time`.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    /// Shared with the proxy's target, which formats it once.
    pub(crate) addr: HeaderText,
    pub(crate) status: Option<u16>,
    pub(crate) time: Duration,
}

/// Why a header field was refused by [`Response::try_header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// A field the HTTP layer writes itself (`Content-Length`,
    /// `Transfer-Encoding`, `Connection`, `Date`).
    LayerField(String),
    /// The name is not an HTTP token (empty, or with a space, colon or
    /// control character).
    InvalidName(String),
    /// The value holds CR, LF, NUL or another control character: it would
    /// end the field (or the head) early, which is how responses get split.
    InvalidValue(String),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::LayerField(n) if n.eq_ignore_ascii_case("connection") => write!(
                f,
                "header `{n}` is the HTTP layer's: ask for a close with Response::close()"
            ),
            HeaderError::LayerField(n) => write!(f, "header `{n}` is written by the HTTP layer"),
            HeaderError::InvalidName(n) => write!(f, "header name {n:?} is not an HTTP token"),
            HeaderError::InvalidValue(n) => {
                write!(
                    f,
                    "the value of header `{n}` holds CR, LF or another control character"
                )
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// The fields the layer writes; see [`Response`].
pub(crate) fn is_layer_field(name: &[u8]) -> bool {
    // Told by the length first: every field of every response is asked,
    // and most are none of these four.
    let known = match name.len() {
        4 => "date",
        10 => "connection",
        14 => "content-length",
        17 => "transfer-encoding",
        _ => return false,
    };
    name.eq_ignore_ascii_case(known.as_bytes())
}

/// RFC 9110 `token`: what a field name is made of.
pub(crate) fn is_token(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| is_tchar(b))
}

/// The bytes a field value may hold: visible characters, spaces, tabs and
/// obs-text; no CR, LF, NUL or other controls. A table, as a name's bytes are: every
/// value a proxy passes on is checked, byte by byte.
const FIELD_VALUE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b == 0x09 || (b >= 0x20 && b != 0x7f);
        b += 1;
    }
    t
};

/// RFC 9110 `field-value` (see [`FIELD_VALUE`]).
pub(crate) fn is_field_value(value: &[u8]) -> bool {
    value.iter().all(|&b| FIELD_VALUE[usize::from(b)])
}

/// A response body.
pub enum Body {
    /// No body (`Content-Length: 0`, or none at all for 1xx/204/304).
    Empty,
    /// Bytes in memory.
    Bytes(Cow<'static, [u8]>),
    /// Bytes shared between responses (a cached page).
    Shared(Arc<[u8]>),
    /// A region of an open file, sent with `sendfile(2)` (or read+write when
    /// the server runs with `--sendfile off`).
    File(FileBody),
    /// Bytes produced as they are read, sent with chunked encoding to
    /// HTTP/1.1 clients (and delimited by closing the connection for 1.0).
    Stream(Box<dyn Read + Send>),
    /// Pieces sent one after the other, each bytes or a region of a file
    /// (by `sendfile`): a `multipart/byteranges` answer, say. The length is
    /// known: it is sent with `Content-Length`.
    Parts(Vec<Part>),
    /// Bytes read from a non-blocking source (an upstream's response body)
    /// as the client takes them, a buffer at a time, without holding a
    /// thread while the source waits: see [`PollRead`]. Sent with
    /// `Content-Length` when its [`len`](PollRead::len) is known, else as
    /// [`Stream`](Body::Stream) is. Under the event MPM it is sent from the
    /// loop (`--sendfile-max-chunk` bytes a turn, as a file).
    Polled(Box<dyn PollRead>),
}

/// One piece of a [`Body::Parts`].
#[derive(Debug)]
pub enum Part {
    /// Bytes in memory.
    Bytes(Cow<'static, [u8]>),
    /// A region of an open file.
    File(FileBody),
}

impl Part {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::File(f) => f.len,
        }
    }

    /// Is it empty?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A region of an open file.
///
/// The file is shared so that an open-file cache can serve many responses
/// from one descriptor: `sendfile` and `pread` take the offset explicitly and
/// never move the file position.
#[derive(Debug)]
pub struct FileBody {
    /// The open file.
    pub file: Arc<File>,
    /// First byte to send.
    pub offset: u64,
    /// Number of bytes to send.
    pub len: u64,
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Body::Shared(b) => write!(f, "Shared({} bytes)", b.len()),
            Body::File(fb) => write!(f, "File({} bytes at {})", fb.len, fb.offset),
            Body::Stream(_) => f.write_str("Stream"),
            Body::Parts(p) => write!(f, "Parts({} parts)", p.len()),
            Body::Polled(p) => match p.len() {
                Some(n) => write!(f, "Polled({n} bytes)"),
                None => f.write_str("Polled"),
            },
        }
    }
}

impl Body {
    /// The body's length when known in advance (not for a stream, nor a
    /// polled source that does not know its own).
    pub fn len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Bytes(b) => Some(b.len() as u64),
            Body::Shared(b) => Some(b.len() as u64),
            Body::File(f) => Some(f.len),
            Body::Stream(_) => None,
            Body::Parts(p) => p
                .iter()
                .try_fold(0u64, |sum, part| sum.checked_add(part.len())),
            Body::Polled(p) => p.len(),
        }
    }

    /// Is this body known to be empty?
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

impl From<&'static str> for Body {
    fn from(s: &'static str) -> Body {
        Body::Bytes(Cow::Borrowed(s.as_bytes()))
    }
}

impl From<String> for Body {
    fn from(s: String) -> Body {
        Body::Bytes(Cow::Owned(s.into_bytes()))
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Body {
        Body::Bytes(Cow::Owned(v))
    }
}

impl From<&'static [u8]> for Body {
    fn from(v: &'static [u8]) -> Body {
        Body::Bytes(Cow::Borrowed(v))
    }
}

impl From<Arc<[u8]>> for Body {
    fn from(v: Arc<[u8]>) -> Body {
        Body::Shared(v)
    }
}

impl FileBody {
    /// The whole of `file`, whose length is `len`.
    pub fn whole(file: impl Into<Arc<File>>, len: u64) -> FileBody {
        FileBody {
            file: file.into(),
            offset: 0,
            len,
        }
    }
}

impl From<FileBody> for Body {
    fn from(f: FileBody) -> Body {
        Body::File(f)
    }
}

impl Response {
    /// A response with this status and an empty body.
    ///
    /// A status outside 100..=999 (not three digits) cannot be sent: it is
    /// answered as 500, with a warning logged (and a panic in debug builds).
    pub fn new(status: u16) -> Response {
        let status = if (100..=999).contains(&status) {
            status
        } else {
            debug_assert!(false, "HTTP status {status} is not three digits");
            mpm_core::log_warn!("mpm: HTTP status {status} is not three digits; answered 500");
            500
        };
        Response {
            status,
            reason: None,
            headers: SmallVec::new(),
            wire: WireFields::default(),
            body: Body::Empty,
            close: false,
            has_server: false,
            stock: false,
            intercept: false,
            refused: false,
            later: None,
            redirect: None,
            tunnel: None,
            upstream: UpstreamInfo(None),
        }
    }

    /// An answer still to come: the handler returns at once, and the
    /// connection polls `answer` (with
    /// [`poll_once`](mpm_core::waiting::poll_once)) until it is ready; what
    /// it returns is then sent exactly as if [`handle`](crate::HttpHandler::handle)
    /// had returned it (status, fields, framing, `HEAD`, keep-alive, the
    /// access-log line). Meanwhile the connection reads no further request
    /// (pipelined ones stay buffered, answered in order after it).
    ///
    /// The future waits without a thread: an I/O future of mpm's (an
    /// upstream client's, [`mpm_core::waiting::ready`],
    /// [`sleep`](mpm_core::waiting::sleep)) records what it waits for and
    /// returns `Pending`; the connection then waits for that
    /// ([`Interest::Await`](mpm_core::Interest::Await)): under prefork and
    /// worker the thread waits in `poll(2)`, under event the loop parks the
    /// connection and no thread waits. A future pending on anything else
    /// (one that recorded no wait) is polled again on the next turn.
    ///
    /// **The rule async code follows, as in tokio:** a poll never blocks.
    /// The event loop resumes the connection and polls the future on the
    /// loop itself, so a future that blocks (a blocking socket, a file
    /// read, a lock held long, `std::thread::sleep`) stalls every
    /// connection of the loop. Do blocking work in
    /// [`handle`](crate::HttpHandler::handle) instead (on a worker), or
    /// with non-blocking sockets and [`mpm_core::waiting`].
    ///
    /// The future is `'static`: it cannot borrow the request. Copy into it
    /// what the answer needs (the path, a header, `request.body()`, read
    /// whole before `handle` runs); a body read as it arrives
    /// ([`streams_body`](crate::HttpHandler::streams_body)) is read in
    /// `handle`, before the later answer is returned.
    ///
    /// The future has its own deadlines: the server's timeouts do not
    /// bound it (an upstream client answers 504 on its own). A client that
    /// closes meanwhile is noticed once the future completes. A panic in
    /// the future answers 500, as one in `handle` does, and the connection
    /// serves on. The handler should say
    /// [`answers_without_blocking`](crate::HttpHandler::answers_without_blocking)
    /// for such requests, so that under event no worker is taken at all.
    ///
    /// `status()` of the returned value is 0 (not known yet); builder calls
    /// on it (`header`, `body`, ...) are ignored: the future's response is
    /// the answer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mpm_core::waiting::{block_on, sleep};
    /// use mpm_http::Response;
    ///
    /// let r = Response::later(async {
    ///     sleep(Duration::from_millis(5)).await; // parks, holds no thread
    ///     Response::new(200).body("later\n")
    /// });
    /// assert!(r.is_later());
    /// // A test can run the answer to its end itself:
    /// assert_eq!(block_on(r.into_later().unwrap()).status(), 200);
    /// ```
    pub fn later(answer: impl Future<Output = Response> + Send + 'static) -> Response {
        let mut r = Response::new(200);
        r.status = 0;
        r.refused = true; // builder calls leave it alone
        r.later = Some(Later(Box::pin(answer)));
        r
    }

    /// Is this an answer still to come ([`later`](Self::later))?
    pub fn is_later(&self) -> bool {
        self.later.is_some()
    }

    /// The future of a [`later`](Self::later) answer, taken out (to run it
    /// in a test, or to wrap it).
    pub fn into_later(self) -> Option<Pin<Box<dyn Future<Output = Response> + Send + 'static>>> {
        self.later.map(|l| l.0)
    }

    /// Answer with what the server answers `redirect`'s request instead
    /// (nginx's internal redirect, which an upstream's `X-Accel-Redirect`
    /// asks for): the handlers are asked again, as for a request that came
    /// in, and on an event loop only if they answer it without blocking;
    /// that request is [internal](crate::Request::is_internal). This
    /// response's status and body are dropped; its `Set-Cookie`,
    /// `Content-Disposition`, `Cache-Control` and `Expires` fields are
    /// kept for the answer (as nginx keeps them), the last three where the
    /// answer has none of its own. A target the layer would refuse from a
    /// client (not a path, too long) is answered 404; more than 10
    /// redirects for one request, 500 (nginx's limits). Set it on the
    /// answer itself: a [`later`](Self::later) one's future may answer
    /// with a response that redirects, but a redirect set on the
    /// `Response::later` value is not followed.
    ///
    /// ```
    /// use mpm_http::{InternalRedirect, Response};
    /// let mut r = Response::new(200).header("Content-Disposition", "attachment");
    /// r.set_internal_redirect(InternalRedirect::new("/protected/report.pdf"));
    /// assert_eq!(r.internal_redirect().map(|r| r.target()), Some("/protected/report.pdf"));
    /// ```
    pub fn set_internal_redirect(&mut self, redirect: InternalRedirect) {
        self.redirect = Some(Box::new(redirect));
    }

    /// The redirect [`set_internal_redirect`](Self::set_internal_redirect)
    /// set, if any.
    #[inline]
    pub fn internal_redirect(&self) -> Option<&InternalRedirect> {
        self.redirect.as_deref()
    }

    /// The redirect, taken out.
    pub(crate) fn take_redirect(&mut self) -> Option<Box<InternalRedirect>> {
        self.redirect.take()
    }

    /// After this `101 Switching Protocols` (the answer to an `Upgrade`
    /// request, a WebSocket), the connection becomes a tunnel: once the
    /// head is written, bytes go both ways between the client and
    /// `tunnel` (the upstream), those the client already sent after its
    /// request head first, through two bounded buffers, waiting on both
    /// sockets without a thread under the event MPM. When one side closes,
    /// the other's writing is shut down, and the connection ends when both
    /// are done; after [`idle_timeout`](Tunnel::idle_timeout) with nothing
    /// moved either way, it closes. The access log has one line, at the
    /// `101`.
    ///
    /// The handler sets `Upgrade` (and the protocol's fields, as
    /// `Sec-WebSocket-Accept`); the layer writes `Connection: Upgrade`.
    /// Upgrading is HTTP/1.1's: a handler does not tunnel an HTTP/1.0
    /// request (RFC 9110 §7.8). The tunnel may come out of a
    /// [`later`](Self::later) answer (a proxy's, once its upstream said
    /// 101).
    /// On a status other than 101 the tunnel is refused as a bad field is
    /// (see [`header`](Self::header)): the response becomes a 500.
    pub fn tunnel(mut self, tunnel: Box<dyn Tunnel>) -> Response {
        if self.refused {
            return self;
        }
        if self.status != 101 {
            return Response::refusal(&format_args!(
                "a tunnel follows a 101 answer, not a {}",
                self.status
            ));
        }
        self.tunnel = Some(tunnel);
        self
    }

    /// Does the connection become a [`tunnel`](Self::tunnel) after this?
    pub fn is_tunnel(&self) -> bool {
        self.tunnel.is_some()
    }

    /// Record the upstream this answer came from, for the access log
    /// (format `upstream`): its address (`$upstream_addr`; several,
    /// `"a, b"`, when one was tried after another), the status it answered
    /// (`$upstream_status`; `None`: no answer, a 502 or 504 of ours) and
    /// how long the exchange took (`$upstream_response_time`).
    pub fn upstream(
        mut self,
        addr: impl Into<HeaderText>,
        status: Option<u16>,
        time: Duration,
    ) -> Response {
        self.set_upstream(addr, status, time);
        self
    }

    /// [`upstream`](Self::upstream) in place: a response is over 400
    /// bytes, and a builder that takes and gives it back by value may
    /// copy it twice (a proxied answer is recorded so on every request).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mpm_http::Response;
    /// let mut r = Response::new(200);
    /// r.set_upstream("10.0.0.2:80", Some(200), Duration::from_millis(3));
    /// assert_eq!(r.upstream_info(), Some(("10.0.0.2:80", Some(200), Duration::from_millis(3))));
    /// ```
    pub fn set_upstream(
        &mut self,
        addr: impl Into<HeaderText>,
        status: Option<u16>,
        time: Duration,
    ) {
        self.upstream = UpstreamInfo(Some(Upstream {
            addr: addr.into(),
            status,
            time,
        }));
    }

    /// The upstream recorded with [`upstream`](Self::upstream): address,
    /// status and time.
    pub fn upstream_info(&self) -> Option<(&str, Option<u16>, Duration)> {
        self.upstream
            .as_deref()
            .map(|u| (&*u.addr, u.status, u.time))
    }

    /// A small HTML page explaining an error status, as httpd sends. Each
    /// page is made once per process and shared after that.
    pub fn error(status: u16) -> Response {
        static PAGES: [OnceLock<Arc<[u8]>>; 500] = [const { OnceLock::new() }; 500];
        let page = |status: u16| -> Arc<[u8]> {
            let reason = reason_phrase(status);
            format!(
                "<!DOCTYPE html>\n<html><head><title>{status} {reason}</title></head>\
                 <body><h1>{status} {reason}</h1></body></html>\n"
            )
            .into_bytes()
            .into()
        };
        let body = match PAGES.get(usize::from(status).wrapping_sub(100)) {
            Some(cell) => Arc::clone(cell.get_or_init(|| page(status))),
            None => page(status),
        };
        let mut r = Response::new(status)
            .header("Content-Type", "text/html; charset=utf-8")
            .body(body);
        r.stock = true;
        r
    }

    /// The answer to a method this resource does not allow: 405 with
    /// `Allow` for a method HTTP defines (RFC 9110 §9, PATCH and WebDAV's),
    /// 501 for one the server does not implement at all (§15.6.2). Method
    /// names are case-sensitive: `get` is not `GET`.
    ///
    /// ```
    /// use mpm_http::Response;
    /// assert_eq!(Response::method_not_allowed("POST", "GET, HEAD").status(), 405);
    /// assert_eq!(Response::method_not_allowed("get", "GET, HEAD").status(), 501);
    /// ```
    pub fn method_not_allowed(method: &str, allow: &'static str) -> Response {
        if is_known_method(method) {
            Response::error(405).header("Allow", allow)
        } else {
            Response::error(501)
        }
    }

    /// Add a header field.
    ///
    /// A field the layer writes (`Content-Length`, `Transfer-Encoding`,
    /// `Connection`, `Date`), a name that is not a token, or a value with CR,
    /// LF or another control character is refused here, where it is set, the
    /// same way in debug and release builds: the response becomes the
    /// built-in 500 (or the configured error page for 500), one error-log
    /// line names the field and why, and the builder calls after it
    /// (`header`, `reason`, `body`) leave that 500 alone, so that what the
    /// handler meant for the 200 is never sent under the 500. As axum
    /// answers a header that does not convert, a response that cannot be
    /// sent as built is an error of the server's, not a response with a
    /// field quietly missing. [`try_header`](Self::try_header) returns the
    /// refusal instead, for values that come from outside (a client, a
    /// file).
    ///
    /// ```
    /// use mpm_http::Response;
    /// let r = Response::new(200).header("X-Name", "a\r\nb").body("meant for the 200");
    /// assert_eq!(r.status(), 500);
    /// assert_eq!(Response::new(200).header("X-Name", "ab").status(), 200);
    /// ```
    ///
    /// `Server` replaces the application's default for this response.
    pub fn header(mut self, name: impl Into<HeaderText>, value: impl Into<HeaderText>) -> Response {
        if self.refused {
            return self;
        }
        match self.try_header(name, value) {
            Ok(_) => self,
            Err(e) => Response::refusal(&e),
        }
    }

    /// The 500 that replaces a response a builder call refused, logged.
    fn refusal(why: &dyn fmt::Display) -> Response {
        mpm_core::log_error!("mpm: {why}; answered 500");
        let mut r = Response::error(500);
        r.refused = true;
        r
    }

    /// Add a header field, or say why it is refused (see
    /// [`header`](Self::header)) and leave the response as it was.
    ///
    /// ```
    /// use mpm_http::{HeaderError, Response};
    /// let user_input = "evil\r\nSet-Cookie: x=1";
    /// let mut r = Response::new(200);
    /// let refused = r.try_header("X-Name", user_input).unwrap_err();
    /// assert_eq!(refused, HeaderError::InvalidValue("X-Name".into()));
    /// assert_eq!(r.header_value("x-name"), None);
    /// assert!(r.try_header("Content-Length", "5").is_err());
    /// assert!(r.try_header("X-Name", "plain").is_ok());
    /// ```
    pub fn try_header(
        &mut self,
        name: impl Into<HeaderText>,
        value: impl Into<HeaderText>,
    ) -> Result<&mut Response, HeaderError> {
        let (name, value) = (name.into(), value.into());
        // Each text looked at once, as bytes: the checks are of bytes.
        self.check_field(name.as_bytes(), value.as_bytes())?;
        self.headers.push((name, value));
        Ok(self)
    }

    /// Add a field given as bytes, kept as it is written (`Name: value`
    /// and CRLF) rather than as a pair of [`HeaderText`]s: for a proxy
    /// passing on an upstream's fields, which it has as bytes. Checked and
    /// refused as [`try_header`](Self::try_header) checks and refuses; a
    /// value past ASCII (obs-text) is kept and sent as it came. Sent after
    /// the fields added as text. [`headers`](Self::headers) lists those of
    /// these that are UTF-8.
    ///
    /// ```
    /// use mpm_http::{HeaderError, Response};
    /// let mut r = Response::new(200);
    /// r.try_header_bytes(b"Content-Type", b"text/plain").unwrap();
    /// r.try_header_bytes(b"X-Latin-1", b"caf\xe9").unwrap();
    /// assert_eq!(r.header_value("content-type"), Some("text/plain"));
    /// assert!(r.try_header_bytes(b"Content-Length", b"5").is_err());
    /// let refused = r.try_header_bytes(b"X-A", b"a\r\nSet-Cookie: x=1").unwrap_err();
    /// assert_eq!(refused, HeaderError::InvalidValue("X-A".into()));
    /// ```
    pub fn try_header_bytes(&mut self, name: &[u8], value: &[u8]) -> Result<(), HeaderError> {
        self.check_field(name, value)?;
        self.wire.push_checked(name, value);
        Ok(())
    }

    /// The checks of a field about to be added, whichever way it is given
    /// (see [`header`](Self::header)); a `Server` noted as the handler's.
    fn check_field(&mut self, name: &[u8], value: &[u8]) -> Result<(), HeaderError> {
        let named = || String::from_utf8_lossy(name).into_owned();
        if !is_token(name) {
            return Err(HeaderError::InvalidName(named()));
        }
        if is_layer_field(name) {
            return Err(HeaderError::LayerField(named()));
        }
        if !is_field_value(value) {
            return Err(HeaderError::InvalidValue(named()));
        }
        if name.eq_ignore_ascii_case(b"server") {
            self.has_server = true;
        }
        Ok(())
    }

    /// Close the connection once this response is sent (`Connection:
    /// close`), whatever the client asked.
    pub fn close(mut self) -> Response {
        self.close = true;
        self
    }

    /// Will the connection close after this response (as asked with
    /// [`close`](Self::close))?
    pub fn closes(&self) -> bool {
        self.close
    }

    /// Send this reason phrase instead of the registered one (or instead of
    /// none, for a status without one). A phrase with CR, LF or another
    /// control character is refused as a header value is (see
    /// [`header`](Self::header)): the response becomes a 500.
    pub fn reason(mut self, phrase: impl Into<HeaderText>) -> Response {
        self.set_reason(phrase);
        self
    }

    /// Answer with the server's error page for this response's status
    /// instead of this response, when one is configured for it
    /// (`--error-page`): nginx's `proxy_intercept_errors`, for a status of
    /// 300 or more. The whole response is replaced: the status stays, the
    /// page is the body, and of its fields only a 401's `WWW-Authenticate`
    /// ones are kept (the client needs them to authenticate), as nginx
    /// keeps them. Without a page for the status it goes as it is.
    ///
    /// ```
    /// use mpm_http::Response;
    /// let mut r = Response::new(503).header("X-Upstream", "b");
    /// r.set_intercept_errors();
    /// assert_eq!(r.status(), 503);
    /// ```
    pub fn set_intercept_errors(&mut self) {
        if self.status >= 300 {
            self.intercept = true;
        }
    }

    /// [`reason`](Self::reason) in place (a refused phrase makes this
    /// response the 500 as `reason` does): a response is over 400 bytes,
    /// and a builder that takes and gives it back by value may copy it
    /// twice; a proxy building its answer in place would copy it whole for
    /// the one call.
    ///
    /// ```
    /// use mpm_http::Response;
    /// let mut r = Response::new(299);
    /// r.set_reason("Fine");
    /// assert_eq!(r.reason_text(), "Fine");
    /// r.set_reason("a\nb");
    /// assert_eq!(r.status(), 500);
    /// ```
    pub fn set_reason(&mut self, phrase: impl Into<HeaderText>) {
        if self.refused {
            return;
        }
        let phrase = phrase.into();
        if !is_field_value(phrase.as_bytes()) {
            *self = Response::refusal(&format_args!(
                "the reason phrase {:?} holds a control character",
                &*phrase
            ));
            return;
        }
        self.reason = Some(phrase);
    }

    /// The reason phrase sent: the handler's, else the registered one
    /// (empty for an unregistered status, as RFC 9112 allows).
    pub fn reason_text(&self) -> &str {
        self.reason
            .as_deref()
            .unwrap_or_else(|| reason_phrase(self.status))
    }

    /// Set the body (unless a refused field made this response a 500: see
    /// [`header`](Self::header)).
    pub fn body(mut self, body: impl Into<Body>) -> Response {
        self.set_body(body);
        self
    }

    /// [`body`](Self::body) in place: a response is over 400 bytes, and a
    /// builder that takes and gives it back by value may copy it twice (a
    /// proxied answer's body is set so on every request). Left alone, as
    /// `body` leaves it, if a refused field made this response a 500.
    ///
    /// ```
    /// use mpm_http::Response;
    /// let mut r = Response::new(200);
    /// r.set_body("hello\n");
    /// assert_eq!(r.body_ref().len(), Some(6));
    /// ```
    pub fn set_body(&mut self, body: impl Into<Body>) {
        if self.refused {
            return;
        }
        self.body = body.into();
        self.stock = false;
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The header fields set so far (of those given as bytes, the ones
    /// that are UTF-8).
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        let wire = self.wire.iter().filter_map(|(n, v)| {
            Some((std::str::from_utf8(n).ok()?, std::str::from_utf8(v).ok()?))
        });
        self.headers.iter().map(|(n, v)| (&**n, &**v)).chain(wire)
    }

    /// The first value of the named header (case-insensitive).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The body.
    pub fn body_ref(&self) -> &Body {
        &self.body
    }

    /// The body, taken out (to read a streamed one in a test).
    pub fn into_body(self) -> Body {
        self.body
    }

    /// The future of a later answer, taken out.
    pub(crate) fn take_later(&mut self) -> Option<LaterAnswer> {
        self.later.take().map(|l| l.0)
    }
}

/// Is `method` one this server knows of, though a resource may not allow
/// it: RFC 9110's, PATCH (RFC 5789) and WebDAV's (RFC 4918)? Exact match:
/// methods are case-sensitive.
pub fn is_known_method(method: &str) -> bool {
    matches!(
        method,
        "GET"
            | "HEAD"
            | "POST"
            | "PUT"
            | "DELETE"
            | "CONNECT"
            | "OPTIONS"
            | "TRACE"
            | "PATCH"
            | "PROPFIND"
            | "PROPPATCH"
            | "MKCOL"
            | "COPY"
            | "MOVE"
            | "LOCK"
            | "UNLOCK"
    )
}

/// The reason phrase registered for a status code ("Not Found" for 404),
/// from the IANA HTTP Status Code Registry (RFC 9110 and the RFCs it
/// lists); empty for a code without one. A handler may send its own with
/// [`Response::reason`].
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        // Registered as "(Unused)"; every server sends RFC 2324's phrase.
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_name_is_made_of_rfc_9110_tchars_only() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_tchar(b), tchar, "{b:#04x}");
        }
    }

    #[test]
    fn a_header_text_is_three_words_so_that_moving_a_response_copies_less() {
        assert_eq!(std::mem::size_of::<HeaderText>(), 3 * 8);
        assert_eq!(std::mem::size_of::<Option<HeaderText>>(), 3 * 8);
        // Six inline header pairs of them, and the rest: 560 bytes with
        // four-word texts. (472 with the buffer of fields given as bytes,
        // which saves a proxied answer a pair of texts a field; 480 with
        // an internal redirect's pointer.)
        assert!(
            std::mem::size_of::<Response>() <= 480,
            "{}",
            std::mem::size_of::<Response>()
        );
    }

    #[test]
    fn a_slice_past_64_kib_is_a_copy_of_the_same_text() {
        let long: Arc<str> = Arc::from(format!("X: {}\r\n", "v".repeat(70_000)));
        let value = HeaderText::slice_of(&long, 3..70_003).unwrap();
        assert_eq!(value.len(), 70_000);
        assert!(value.bytes().all(|b| b == b'v'));
        let short = HeaderText::slice_of(&long, 0..1).unwrap();
        assert_eq!(&*short, "X");
        assert!(HeaderText::slice_of(&long, 3..70_100).is_none());
    }

    #[test]
    fn layer_fields_and_split_values_are_refused_where_they_are_set() {
        let mut r = Response::new(200);
        for name in ["Content-Length", "transfer-encoding", "Connection", "DATE"] {
            let e = r.try_header(name, "x").unwrap_err();
            assert_eq!(e, HeaderError::LayerField(name.into()));
        }
        let e = r.try_header("X-A", "a\nb").unwrap_err();
        assert_eq!(e, HeaderError::InvalidValue("X-A".into()));
        let e = r.try_header("X A", "v").unwrap_err();
        assert_eq!(e, HeaderError::InvalidName("X A".into()));
        assert!(e.to_string().contains("token"));
        assert_eq!(r.headers().count(), 0);
        r.try_header("Server", "kv/1").unwrap();
        assert!(r.has_server);
    }

    // The same in every build (there is no debug_assert behind it): run
    // under `cargo test --release` too.
    #[test]
    fn a_refused_field_makes_the_response_a_500_and_keeps_it_one() {
        // Each refusal logs one line: kept here, not printed among the results.
        let _refusals = mpm_core::error_log::expect("; answered 500");
        for (name, value) in [("X A", "v"), ("Content-Length", "5"), ("X-A", "a\r\nb")] {
            let r = Response::new(200)
                .header("X-Before", "1")
                .header(name, value)
                .header("X-After", "2")
                .reason("Fine")
                .body("meant for the 200");
            assert_eq!(r.status(), 500, "{name}: {value:?}");
            assert!(
                r.stock && r.refused,
                "the built-in page, which error pages replace"
            );
            assert_eq!(r.reason_text(), "Internal Server Error");
            assert_eq!(r.header_value("x-before"), None);
            assert_eq!(r.header_value("x-after"), None);
            let Body::Shared(page) = r.body_ref() else {
                panic!("expected the built-in page, got {:?}", r.body_ref())
            };
            assert!(page.starts_with(b"<!DOCTYPE html>"));
        }
        // A phrase that would split the head: the same.
        assert_eq!(Response::new(299).reason("a\nb").status(), 500);
        // Valid fields are kept, and a refused one can still be handled.
        let mut r = Response::new(200).header("X-A", "b");
        assert_eq!((r.status(), r.header_value("x-a")), (200, Some("b")));
        assert!(r.try_header("X A", "v").is_err());
        assert_eq!(r.status(), 200);
    }

    #[test]
    fn every_registered_status_has_its_phrase_and_others_the_handlers() {
        assert_eq!(reason_phrase(418), "I'm a teapot");
        assert_eq!(reason_phrase(422), "Unprocessable Content");
        assert_eq!(reason_phrase(299), "");
        assert_eq!(Response::new(299).reason("Fine").reason_text(), "Fine");
        assert_eq!(Response::new(404).reason_text(), "Not Found");
    }
}
