//! A parsed request, as an [`HttpHandler`](crate::HttpHandler) receives it.

use std::net::SocketAddr;

use crate::request_pool::RequestPool;

/// The HTTP version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: the connection closes after the response unless the client
    /// asked for `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: persistent by default.
    Http11,
}

/// One request: its head, borrowed from the connection's buffer, and its
/// whole body (already de-chunked and bounded by the body limit).
#[derive(Debug)]
pub struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) version: Version,
    pub(crate) headers: Headers<'a>,
    pub(crate) body: &'a [u8],
    pub(crate) peer: SocketAddr,
    pub(crate) pool: RequestPool<'a>,
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
            peer: SocketAddr::from(([127, 0, 0, 1], 0)),
            pool: RequestPool::heap(),
        }
    }

    /// The same request as if it came from `peer` (for testing handlers
    /// that look at the client's address).
    pub fn with_peer(mut self, peer: SocketAddr) -> Self {
        self.peer = peer;
        self
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
        match t.find('?') {
            Some(q) => &t[..q],
            None => t,
        }
    }

    /// The query string after `?`, if any.
    pub fn query(&self) -> Option<&'a str> {
        origin_form(self.target).split_once('?').map(|(_, q)| q)
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

    /// The request body (empty when there was none).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The pool for scratch that lives only as long as this request: the
    /// worker's arena with `--request-pool on`, the global allocator with
    /// `off` (see [`RequestPool`]).
    pub fn pool(&self) -> RequestPool<'a> {
        self.pool
    }
}

/// Where a request's headers live: the parser's slots, or pairs given by hand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Headers<'a> {
    Parsed(&'a [httparse::Header<'a>]),
    Pairs(&'a [(&'a str, &'a str)]),
}

/// Strip `scheme://authority` from an absolute-form target.
fn origin_form(target: &str) -> &str {
    if target.starts_with('/') {
        return target;
    }
    for scheme in ["http://", "https://"] {
        if target.len() > scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme) {
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
}
