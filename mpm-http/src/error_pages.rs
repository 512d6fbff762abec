//! Custom error pages (nginx's `error_page`, httpd's `ErrorDocument`):
//! the body of mpm's built-in error page replaced by a page of the site's,
//! for the statuses configured, with the status kept.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::response::{HeaderText, Response};
use crate::Body;

/// One page: its bytes, kept in memory, and their type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The page.
    pub body: Arc<[u8]>,
    /// Its `Content-Type`.
    pub content_type: Cow<'static, str>,
}

/// The pages by status.
///
/// They replace the body of every built-in error page
/// ([`Response::error`](crate::Response::error)) the server answers with
/// such a status: the HTTP layer's own (400, 408, 413, 414, 431, 505, ...),
/// the static site's (403, 404, 405, 416, 301, ...), and a panicking
/// handler's 500. The status and the other header fields stay; a response
/// whose body a handler wrote itself is left alone, unless it asked to be
/// replaced ([`Response::set_intercept_errors`](crate::Response::set_intercept_errors),
/// the proxy's `intercept_errors`).
///
/// ```
/// use mpm_http::{ErrorPage, ErrorPages};
/// let mut pages = ErrorPages::new();
/// pages.insert(404, ErrorPage { body: b"<h1>gone fishing</h1>"[..].into(), content_type: "text/html".into() });
/// assert!(pages.get(404).is_some() && pages.get(500).is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorPages(Arc<BTreeMap<u16, ErrorPage>>);

impl ErrorPages {
    /// No custom pages.
    pub fn new() -> ErrorPages {
        ErrorPages::default()
    }

    /// Answer `status` with `page`.
    pub fn insert(&mut self, status: u16, page: ErrorPage) {
        Arc::make_mut(&mut self.0).insert(status, page);
    }

    /// The page for `status`, if any.
    pub fn get(&self, status: u16) -> Option<&ErrorPage> {
        self.0.get(&status)
    }

    /// Are there none?
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Put the page for its status into a built-in error response, or in
    /// place of a response that asked to be intercepted
    /// ([`Response::set_intercept_errors`]).
    pub(crate) fn apply(&self, parts: &mut Response) {
        if !(parts.stock || parts.intercept) || self.0.is_empty() {
            return;
        }
        let Some(page) = self.get(parts.status) else {
            return;
        };
        if parts.intercept && !parts.stock {
            intercepted(parts);
        }
        parts
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
        parts.headers.push((
            HeaderText::from("Content-Type"),
            HeaderText::from(page.content_type.clone()),
        ));
        parts.body = Body::Shared(Arc::clone(&page.body));
    }
}

/// A response replaced by an error page: nothing of it is kept but its
/// status, and a 401's `WWW-Authenticate` fields (as nginx keeps them).
fn intercepted(parts: &mut Response) {
    let keep = |name: &[u8]| parts.status == 401 && name.eq_ignore_ascii_case(b"www-authenticate");
    let mut kept: crate::response::Fields = parts
        .headers
        .iter()
        .filter(|(n, _)| keep(n.as_bytes()))
        .cloned()
        .collect();
    kept.extend(
        parts
            .wire
            .iter()
            .filter(|(n, _)| keep(n))
            .filter_map(|(n, v)| {
                let text = |b: &[u8]| {
                    std::str::from_utf8(b)
                        .ok()
                        .map(|s| HeaderText::from(s.to_string()))
                };
                Some((text(n)?, text(v)?))
            }),
    );
    parts.wire.give_back();
    parts.headers = kept;
    // The server's own `Server` field, as on its other pages (the
    // upstream's is gone with the rest).
    parts.has_server = false;
    parts.reason = None;
    // Its own body (an upstream's, say) is dropped: never sent.
    parts.body = Body::Empty;
    parts.stock = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(statuses: &[u16]) -> ErrorPages {
        let mut p = ErrorPages::new();
        for &s in statuses {
            p.insert(
                s,
                ErrorPage {
                    body: format!("page {s}").into_bytes().into(),
                    content_type: "text/html".into(),
                },
            );
        }
        p
    }

    fn upstreams(status: u16) -> Response {
        let mut r = Response::new(status);
        let _ = r.try_header_bytes(b"WWW-Authenticate", b"Basic realm=\"x\"");
        let _ = r.try_header_bytes(b"X-Upstream", b"b");
        let _ = r.try_header_bytes(b"Server", b"upstream/1");
        let _ = r.try_header_bytes(b"Content-Type", b"application/json");
        r.set_body(&b"{\"error\":1}"[..]);
        r.set_reason("Upstream Says");
        r
    }

    fn body_of(r: &Response) -> Vec<u8> {
        match r.body_ref() {
            Body::Shared(b) => b.to_vec(),
            Body::Bytes(b) => b.to_vec(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_intercepted_answer_is_replaced_whole_by_the_page_for_its_status() {
        let p = pages(&[401, 502]);
        let mut r = upstreams(502);
        r.set_intercept_errors();
        p.apply(&mut r);
        assert_eq!((r.status(), body_of(&r)), (502, b"page 502".to_vec()));
        let fields: Vec<(&str, &str)> = r.headers().collect();
        assert_eq!(
            fields,
            [("Content-Type", "text/html")],
            "nothing of the upstream's"
        );
        assert_eq!(r.reason_text(), "Bad Gateway");
        assert!(!r.has_server, "the layer writes its own Server");
        // A 401 keeps what the client needs to authenticate.
        let mut r = upstreams(401);
        r.set_intercept_errors();
        p.apply(&mut r);
        assert_eq!(
            r.header_value("www-authenticate"),
            Some("Basic realm=\"x\"")
        );
        assert_eq!(r.header_value("x-upstream"), None);
        assert_eq!(body_of(&r), b"page 401");
    }

    #[test]
    fn without_a_page_for_its_status_or_unasked_an_answer_goes_as_it_is() {
        let p = pages(&[404]);
        let mut r = upstreams(502);
        r.set_intercept_errors();
        p.apply(&mut r);
        assert_eq!(r.header_value("x-upstream"), Some("b"), "no page for 502");
        assert!(r.has_server, "the upstream's Server passes");
        assert_eq!(body_of(&r), b"{\"error\":1}");
        let mut r = upstreams(404);
        p.apply(&mut r);
        assert_eq!(body_of(&r), b"{\"error\":1}", "not asked");
        let mut r = Response::new(200);
        r.set_intercept_errors();
        assert!(!r.intercept, "below 300: never");
    }
}
