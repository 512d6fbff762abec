//! What an [`HttpHandler`](crate::HttpHandler) answers with.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

/// Header fields as (name, value) pairs, in the order they are sent; the
/// usual handful is kept inline, so building a response need not allocate.
pub(crate) type Fields = SmallVec<[(HeaderText, HeaderText); 6]>;

/// A header field's name or value: a `&'static str`, a `String`, or an
/// `Arc<str>` shared with a cache (an `ETag` formatted once per file).
///
/// Anything that converts into it can be given to [`Response::header`].
#[derive(Debug, Clone)]
pub struct HeaderText(Text);

#[derive(Debug, Clone)]
enum Text {
    Static(&'static str),
    Owned(String),
    Shared(Arc<str>),
}

impl Deref for HeaderText {
    type Target = str;
    fn deref(&self) -> &str {
        match &self.0 {
            Text::Static(s) => s,
            Text::Owned(s) => s,
            Text::Shared(s) => s,
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
        HeaderText(Text::Owned(s))
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
/// The HTTP layer adds `Date`, `Server`, the framing (`Content-Length` or
/// `Transfer-Encoding: chunked`) and `Connection`; fields of those names set
/// here are ignored.
///
/// ```
/// use mpm_http::Response;
/// let r = Response::new(200)
///     .header("Content-Type", "text/plain")
///     .body("hello\n");
/// assert_eq!(r.status(), 200);
/// ```
#[derive(Debug)]
pub struct Response {
    status: u16,
    headers: Fields,
    body: Body,
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
        }
    }
}

impl Body {
    /// The body's length when known in advance (not for a stream).
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
    pub fn new(status: u16) -> Response {
        Response {
            status,
            headers: SmallVec::new(),
            body: Body::Empty,
        }
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
        Response::new(status)
            .header("Content-Type", "text/html; charset=utf-8")
            .body(body)
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
    pub fn header(mut self, name: impl Into<HeaderText>, value: impl Into<HeaderText>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the body.
    pub fn body(mut self, body: impl Into<Body>) -> Response {
        self.body = body.into();
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The header fields set so far.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers.iter().map(|(n, v)| (&**n, &**v))
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

    pub(crate) fn into_parts(self) -> (u16, Fields, Body) {
        (self.status, self.headers, self.body)
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

/// The reason phrase for a status code ("Not Found" for 404).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
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
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}
