//! A parsed request, as an [`HttpHandler`](crate::HttpHandler) receives it.

use std::borrow::Cow;
use std::io::{self, Read};
use std::net::SocketAddr;

use crate::awaited_body::AwaitedBody;
use crate::body::BodySource;
use crate::request_pool::RequestPool;

/// The HTTP version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: the connection closes after the response unless the client
    /// asked for `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: persistent by default.
    Http11,
    /// HTTP/2: one stream of a multiplexed connection (the access log
    /// says `HTTP/2.0`).
    Http2,
}

/// One request: its head, borrowed from the connection's buffer, and its
/// body: whole (already de-chunked and bounded by the body limit), or, for a
/// handler that [streams bodies](crate::HttpHandler::streams_body), read as
/// it arrives with [`body_reader`](Self::body_reader).
///
/// A [`Router`](crate::Router) adds the path parameters of the route that
/// matched ([`param`](Self::param)).
#[derive(Clone, Copy)]
pub struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) version: Version,
    pub(crate) headers: Headers<'a>,
    pub(crate) body: &'a [u8],
    /// The body still on the wire, for a streamed request.
    pub(crate) stream: Option<&'a (dyn BodySource + 'a)>,
    /// The body still on the wire, for a future to read
    /// ([`HttpHandler::awaits_body`](crate::HttpHandler::awaits_body)).
    pub(crate) awaited: Option<&'a AwaitedBody>,
    pub(crate) params: &'a [(&'a str, Cow<'a, str>)],
    pub(crate) peer: SocketAddr,
    /// Did it come over TLS?
    pub(crate) secure: bool,
    pub(crate) pool: RequestPool<'a>,
    /// How the body is framed, as the layer found when it parsed the head;
    /// `None` for a request made otherwise (a test's, HTTP/2's), whose
    /// fields are read for it instead.
    pub(crate) framing: Option<BodyFraming>,
    /// Made by the server for an internal redirect, not sent by a client.
    pub(crate) internal: bool,
}

/// A request body's framing, read once from the head: a proxy asks for it
/// several times a request (does the handler stream the body, how is it
/// forwarded), and each was a scan of the fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyFraming {
    /// The `Content-Length` announced.
    content_length: Option<u64>,
    /// `Transfer-Encoding: chunked` (the layer refuses any other).
    chunked: bool,
}

impl BodyFraming {
    /// The framing of a head the layer parsed.
    pub(crate) fn of(head: &crate::head::Head<'_, '_>) -> Option<BodyFraming> {
        Some(BodyFraming {
            content_length: head.content_length,
            chunked: matches!(head.framing, crate::head::Framing::Chunked),
        })
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("version", &self.version)
            .field("headers", &self.headers)
            .field("body", &self.body.len())
            .field("streamed", &self.stream.is_some())
            .field("params", &self.params)
            .field("peer", &self.peer)
            .finish()
    }
}

impl<'a> Request<'a> {
    /// Build a request by hand, for testing a handler without a server.
    ///
    /// ```
    /// use mpm_http::{Request, Version};
    /// let req = Request::for_test("GET", "/index.html?x=1", Version::Http11, &[("Host", "example")], b"");
    /// assert_eq!(req.path(), "/index.html");
    /// assert_eq!(req.query(), Some("x=1"));
    /// assert_eq!(req.header("host"), Some(&b"example"[..]));
    /// ```
    pub fn for_test(
        method: &'a str,
        target: &'a str,
        version: Version,
        headers: &'a [(&'a str, &'a str)],
        body: &'a [u8],
    ) -> Request<'a> {
        Request {
            method,
            target,
            version,
            headers: Headers::Pairs(headers),
            body,
            stream: None,
            awaited: None,
            params: &[],
            peer: SocketAddr::from(([127, 0, 0, 1], 0)),
            secure: false,
            pool: RequestPool::heap(),
            framing: None,
            internal: false,
        }
    }

    /// The same request as if the server made it for an internal redirect
    /// (for testing handlers that look at [`is_internal`](Self::is_internal)).
    pub fn with_internal(mut self, internal: bool) -> Self {
        self.internal = internal;
        self
    }

    /// The same request as if it came from `peer` (for testing handlers
    /// that look at the client's address).
    pub fn with_peer(mut self, peer: SocketAddr) -> Self {
        self.peer = peer;
        self
    }

    /// The same request as if it came over TLS (or not), for testing.
    pub fn with_tls(mut self, secure: bool) -> Self {
        self.secure = secure;
        self
    }

    /// Did the request come over TLS (an `https://` listener)? What a
    /// proxy forwards as `X-Forwarded-Proto: https`.
    pub fn is_tls(&self) -> bool {
        self.secure
    }

    /// The method, as sent (`GET`, `HEAD`, `POST`...).
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request target exactly as sent: origin form (`/a?b`), absolute
    /// form (`http://host/a?b`), `*`, or authority form.
    pub fn target(&self) -> &'a str {
        self.target
    }

    /// The path of the target, still percent-encoded, without the query.
    /// For an absolute-form target the scheme and authority are removed.
    pub fn path(&self) -> &'a str {
        let t = origin_form(self.target);
        // A byte scan: paths are short, and a char searcher costs more here.
        match t.bytes().position(|b| b == b'?') {
            Some(q) => &t[..q],
            None => t,
        }
    }

    /// Is the path exactly `path`? The same answer as `self.path() == path`,
    /// without scanning the target for its query: what a route checked on
    /// every request (the status page's) asks.
    ///
    /// ```
    /// use mpm_http::{Request, Version};
    /// let r = Request::for_test("GET", "/server-status?auto", Version::Http11, &[], b"");
    /// assert!(r.path_is("/server-status"));
    /// assert!(!r.path_is("/server"));
    /// assert!(!r.path_is("/server-status/x"));
    /// ```
    pub fn path_is(&self, path: &str) -> bool {
        origin_form(self.target)
            .strip_prefix(path)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'))
    }

    /// The query string after `?`, if any, as sent.
    pub fn query(&self) -> Option<&'a str> {
        origin_form(self.target).split_once('?').map(|(_, q)| q)
    }

    /// [`path`](Self::path) and [`query`](Self::query), cut from the
    /// target in one scan rather than one each: what a proxy, which wants
    /// both, asks.
    ///
    /// ```
    /// use mpm_http::{Request, Version};
    /// let r = Request::for_test("GET", "/a/b?x=1?y", Version::Http11, &[], b"");
    /// assert_eq!(r.path_and_query(), ("/a/b", Some("x=1?y")));
    /// let r = Request::for_test("GET", "/a", Version::Http11, &[], b"");
    /// assert_eq!(r.path_and_query(), ("/a", None));
    /// ```
    pub fn path_and_query(&self) -> (&'a str, Option<&'a str>) {
        let t = origin_form(self.target);
        match t.bytes().position(|b| b == b'?') {
            Some(q) => (&t[..q], Some(&t[q + 1..])),
            None => (t, None),
        }
    }

    /// The query's `name=value` pairs, decoded as a form is
    /// (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a byte,
    /// invalid UTF-8 replaced), in the order sent.
    ///
    /// ```
    /// use mpm_http::{Request, Version};
    /// let req = Request::for_test("GET", "/s?q=caf%C3%A9+au+lait&n=2&n=3", Version::Http11, &[], b"");
    /// assert_eq!(req.query_param("q").as_deref(), Some("café au lait"));
    /// assert_eq!(req.query_param("n").as_deref(), Some("2")); // the first
    /// assert_eq!(req.query_pairs().count(), 3);
    /// assert_eq!(req.query_param("missing"), None);
    /// ```
    pub fn query_pairs(&self) -> impl Iterator<Item = (Cow<'a, str>, Cow<'a, str>)> {
        form_urlencoded::parse(self.query().unwrap_or("").as_bytes())
    }

    /// The first value of query parameter `name`, decoded (see
    /// [`query_pairs`](Self::query_pairs)).
    pub fn query_param(&self, name: &str) -> Option<Cow<'a, str>> {
        self.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// The value of path parameter `name` in the route that matched
    /// (`/kv/{key}`), percent-decoded; `None` outside a
    /// [`Router`](crate::Router) or for a name the route does not have.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| &**v)
    }

    /// Every path parameter of the route that matched, in the route's order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params.iter().map(|(k, v)| (*k, &**v))
    }

    /// The same request with these path parameters (what a router does
    /// before calling a route's handler; also for testing one).
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use mpm_http::{Request, Version};
    /// let params = [("key", Cow::Borrowed("a b"))];
    /// let req = Request::for_test("GET", "/kv/a%20b", Version::Http11, &[], b"");
    /// assert_eq!(req.with_params(&params).param("key"), Some("a b"));
    /// ```
    pub fn with_params<'p>(&self, params: &'p [(&'p str, Cow<'p, str>)]) -> Request<'p>
    where
        'a: 'p,
    {
        Request { params, ..*self }
    }

    /// The HTTP version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The first value of the named header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The first value of the named header, if it is valid UTF-8, trimmed.
    pub fn header_str(&self, name: &str) -> Option<&'a str> {
        self.header(name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
    }

    /// Every header as (name, value), in the order received.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> {
        let (parsed, pairs): (&'a [httparse::Header<'a>], &'a [(&'a str, &'a str)]) =
            match self.headers {
                Headers::Parsed(h) => (h, &[]),
                Headers::Pairs(p) => (&[], p),
            };
        parsed
            .iter()
            .map(|h| (h.name, h.value))
            .chain(pairs.iter().map(|(n, v)| (*n, v.as_bytes())))
    }

    /// The request body (empty when there was none), when it was read whole
    /// before the handler ran. A streamed request's body is not here (this
    /// is empty): read it with [`body_reader`](Self::body_reader).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The body as a reader, whichever way it came: the bytes already read,
    /// or, for a streamed request, bytes from the connection as they arrive
    /// (de-chunked, with `--limit-request-body` and the body timeout
    /// enforced: past either, a read fails and the layer answers 413 or 408
    /// whatever the handler returns).
    ///
    /// ```
    /// use std::io::Read;
    /// use mpm_http::{Request, Version};
    /// let req = Request::for_test("PUT", "/up", Version::Http11, &[], b"payload");
    /// let mut got = String::new();
    /// req.body_reader().read_to_string(&mut got).unwrap();
    /// assert_eq!(got, "payload");
    /// ```
    pub fn body_reader(&self) -> BodyReader<'a> {
        BodyReader {
            rest: self.body,
            stream: self.stream,
        }
    }

    /// The body as it arrives, for the handler's [`Response::later`](
    /// crate::Response::later) future to read without a thread: there when
    /// the handler [awaits bodies](crate::HttpHandler::awaits_body) and
    /// the layer can give it one (under the event and uring MPMs, HTTP/1.1
    /// and HTTP/2);
    /// otherwise `None`, and the body is [streamed](Self::is_streamed) or
    /// was read whole. A clone of the one handle: take it once.
    pub fn awaited_body(&self) -> Option<AwaitedBody> {
        self.awaited.cloned()
    }

    /// Is the body being streamed (read from the connection as the handler
    /// reads it) rather than already read whole?
    pub fn is_streamed(&self) -> bool {
        self.stream.is_some()
    }

    /// The `Content-Length` the client announced, if any (a chunked body
    /// has none).
    pub fn content_length(&self) -> Option<u64> {
        match self.framing {
            Some(f) => f.content_length,
            None => self.header_str("content-length")?.parse().ok(),
        }
    }

    /// Does the body come chunked (`Transfer-Encoding`)?
    ///
    /// ```
    /// use mpm_http::{Request, Version};
    /// let te = [("Transfer-Encoding", "chunked")];
    /// assert!(Request::for_test("POST", "/", Version::Http11, &te, b"").is_chunked());
    /// assert!(!Request::for_test("GET", "/", Version::Http11, &[], b"").is_chunked());
    /// ```
    pub fn is_chunked(&self) -> bool {
        match self.framing {
            Some(f) => f.chunked,
            None => self.header("transfer-encoding").is_some(),
        }
    }

    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Did the server make this request for an internal redirect
    /// ([`Response::set_internal_redirect`](crate::Response::set_internal_redirect):
    /// an upstream's `X-Accel-Redirect`), rather than a client send it?
    /// What nginx's `internal` locations answer only: a client can never
    /// make a request that is.
    pub fn is_internal(&self) -> bool {
        self.internal
    }

    /// The pool for scratch that lives only as long as this request: the
    /// worker's arena with `--request-pool on`, the global allocator with
    /// `off` (see [`RequestPool`]).
    pub fn pool(&self) -> RequestPool<'a> {
        self.pool
    }
}

/// A request body as a [`Read`]: see [`Request::body_reader`].
pub struct BodyReader<'a> {
    rest: &'a [u8],
    stream: Option<&'a (dyn BodySource + 'a)>,
}

impl std::fmt::Debug for BodyReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyReader")
            .field("streamed", &self.stream.is_some())
            .finish()
    }
}

impl Read for BodyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.stream {
            Some(stream) => stream.read_body(buf),
            None => self.rest.read(buf),
        }
    }
}

/// Where a request's headers live: the parser's slots, or pairs given by hand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Headers<'a> {
    Parsed(&'a [httparse::Header<'a>]),
    Pairs(&'a [(&'a str, &'a str)]),
}

/// Strip `scheme://authority` from an absolute-form target.
#[inline]
fn origin_form(target: &str) -> &str {
    // Nearly every target is in origin form already: that check is
    // inlined where a route asks for the path, the rest is not.
    if target.starts_with('/') {
        target
    } else {
        absolute_origin_form(target)
    }
}

#[inline(never)]
fn absolute_origin_form(target: &str) -> &str {
    for scheme in ["http://", "https://"] {
        // By bytes: a target may have a multi-byte character where the
        // scheme would end (`ab:/xyé`), which slicing the text would panic on.
        if target.len() > scheme.len()
            && target.as_bytes()[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
        {
            let rest = &target[scheme.len()..];
            return match rest.find(['/', '?']) {
                Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
                // "http://host" or "http://host?q": the path is "/".
                _ => "/",
            };
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_form_targets_yield_their_path_and_query() {
        let r = Request::for_test(
            "GET",
            "http://example.com/a/b?c=d",
            Version::Http11,
            &[],
            b"",
        );
        assert_eq!(r.path(), "/a/b");
        assert_eq!(r.query(), Some("c=d"));
        let r = Request::for_test("GET", "HTTP://example.com", Version::Http11, &[], b"");
        assert_eq!(r.path(), "/");
    }

    #[test]
    fn path_is_answers_as_comparing_the_path_does() {
        let targets = [
            "/s",
            "/s?",
            "/s?a=b",
            "/s/",
            "/st",
            "/",
            "*",
            "http://h/s?x",
            "http://h",
            "https://h/s",
            "h:443",
        ];
        for t in targets {
            let r = Request::for_test("GET", t, Version::Http11, &[], b"");
            for p in ["/s", "/", "/st", "*", "h:443", ""] {
                assert_eq!(r.path_is(p), r.path() == p, "target {t:?}, path {p:?}");
            }
        }
    }
}
