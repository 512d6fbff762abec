//! Internal redirects: an answer that says "answer as for this other
//! target instead" (nginx's internal redirect; what an upstream's
//! `X-Accel-Redirect` asks a proxy for). The handler sets an
//! [`InternalRedirect`] on its response
//! ([`Response::set_internal_redirect`](crate::Response::set_internal_redirect));
//! the layer makes the request it names ([`Redirected`]), asks the handler
//! again (on an event loop only if it answers without blocking: else a
//! worker does), and answers with that, keeping a few fields of the first
//! answer. HTTP/1.1 (`connection.rs`) and HTTP/2 (`h2/stream.rs`) both
//! come here.

use std::mem::MaybeUninit;

use crate::byte_classes::is_tchar;
use crate::head::{self, Limits, Parsed, SLOTS};
use crate::request::{Headers, Request, Version};
use crate::response::{Fields, HeaderText, Response};
use crate::HttpHandler;

/// The most internal redirects one request goes through (nginx's
/// `NGX_HTTP_MAX_URI_CHANGES`): past it, a cycle is assumed and the answer
/// is 500.
pub(crate) const MAX_REDIRECTS: u8 = 10;

/// The fields of the first answer that the redirected answer keeps, as
/// nginx keeps them from an upstream's answer (`Set-Cookie` each, the
/// others where the answer has none of its own).
const KEPT: [&str; 4] = [
    "set-cookie",
    "content-disposition",
    "cache-control",
    "expires",
];

/// Another request the server answers instead of the one it was asked:
/// a `GET` (a `HEAD` if the client's was one) of `target`, with the fields
/// given. See [`Response::set_internal_redirect`](crate::Response::set_internal_redirect).
///
/// ```
/// use mpm_http::InternalRedirect;
/// let r = InternalRedirect::new("/protected/report.pdf")
///     .head()
///     .field(b"Range", b"bytes=0-99");
/// assert_eq!(r.target(), "/protected/report.pdf");
/// ```
#[derive(Debug, Clone)]
pub struct InternalRedirect {
    target: String,
    head: bool,
    /// `Name: value` lines, each ended by CRLF.
    fields: Vec<u8>,
    /// A field given was not one: following it answers 500.
    bad_field: bool,
}

impl InternalRedirect {
    /// A `GET` of `target` (a path, with its query if any), with no fields
    /// yet.
    pub fn new(target: impl Into<String>) -> InternalRedirect {
        InternalRedirect {
            target: target.into(),
            head: false,
            fields: Vec::new(),
            bad_field: false,
        }
    }

    /// A `HEAD` instead of a `GET`: the client's request was one.
    pub fn head(mut self) -> InternalRedirect {
        self.head = true;
        self
    }

    /// A field of the request made (the client's own, usually: `Range`,
    /// `If-None-Match`, `Accept-Encoding` mean the same of the new
    /// target). The body's framing (`Content-Length`, `Transfer-Encoding`,
    /// `Expect`) is never added: the request has no body. A field that is
    /// not one (a name that is not a token, a value with a CR, LF or NUL)
    /// is not added, and following the redirect answers 500.
    pub fn field(mut self, name: &[u8], value: &[u8]) -> InternalRedirect {
        let framing = |n: &[u8]| {
            ["content-length", "transfer-encoding", "expect"]
                .iter()
                .any(|f| n.eq_ignore_ascii_case(f.as_bytes()))
        };
        if name.is_empty()
            || !name.iter().all(|&b| is_tchar(b))
            || value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0))
        {
            self.bad_field = true;
        } else if !framing(name) {
            self.fields.extend_from_slice(name);
            self.fields.extend_from_slice(b": ");
            self.fields.extend_from_slice(value);
            self.fields.extend_from_slice(b"\r\n");
        }
        self
    }

    /// The target.
    pub fn target(&self) -> &str {
        &self.target
    }
}

/// A redirect being followed: the request it makes (as a head's text,
/// parsed again each time the handler is asked), what the answer keeps
/// of the answers before, and how many redirects led here.
#[derive(Debug)]
pub(crate) struct Redirected {
    text: Box<[u8]>,
    keep: Fields,
    /// The upstream of the first answer, for the access log when the last
    /// answer has none.
    upstream: Option<(HeaderText, Option<u16>, std::time::Duration)>,
    pub(crate) count: u8,
    /// The handler has not been asked yet.
    pub(crate) pending: bool,
}

impl Redirected {
    /// Follow the redirect `answer` carries (if it carries one: `None`
    /// otherwise), the `before`-th of its request; `Err` with the answer
    /// to give instead (404: a target the server would refuse from a
    /// client, not a path; 500: too many redirects, or a field that is
    /// not one), logged, with this answer's kept fields.
    #[inline]
    pub(crate) fn follow(
        answer: &mut Response,
        before: Option<&Redirected>,
        limits: &Limits,
    ) -> Option<Result<Box<Redirected>, Response>> {
        // Asked of every answer: the rest out of its way.
        answer.internal_redirect()?;
        Redirected::follow_redirect(answer, before, limits)
    }

    #[inline(never)]
    fn follow_redirect(
        answer: &mut Response,
        before: Option<&Redirected>,
        limits: &Limits,
    ) -> Option<Result<Box<Redirected>, Response>> {
        let redirect = answer.take_redirect()?;
        let mut keep: Fields = before.map(|b| b.keep.clone()).unwrap_or_default();
        let kept_before = keep.len();
        for (n, v) in answer.headers() {
            if KEPT.iter().any(|k| n.eq_ignore_ascii_case(k)) {
                keep.push((
                    HeaderText::from(n.to_string()),
                    HeaderText::from(v.to_string()),
                ));
            }
        }
        // Its cookies only (an error page is no download, and no cache's);
        // those of the answers before are the caller's to add (`finish`).
        // The upstream that asked, for the access log.
        let failed = |status: u16| {
            let mut r = Response::error(status);
            for (n, v) in &keep[kept_before..] {
                if n.eq_ignore_ascii_case("set-cookie") {
                    let _ = r.try_header(n.clone(), v.clone());
                }
            }
            if let Some((a, s, t)) = answer.upstream_info() {
                r.set_upstream(a.to_string(), s, t);
            }
            Some(Err(r))
        };
        let count = before.map_or(0, |b| b.count).saturating_add(1);
        if count > MAX_REDIRECTS {
            mpm_core::log_error!(
                "mpm: internal redirect to '{}': more than {MAX_REDIRECTS} for one request (a cycle?); answered 500",
                redirect.target
            );
            return failed(500);
        }
        let method: &[u8] = if redirect.head { b"HEAD " } else { b"GET " };
        let t = redirect.target.as_bytes();
        // As HTTP/1.0, which needs no `Host` (an HTTP/2 request may have
        // none); the request is given the client's version once parsed.
        let mut text = Vec::with_capacity(method.len() + t.len() + 13 + redirect.fields.len() + 2);
        text.extend_from_slice(method);
        text.extend_from_slice(t);
        text.extend_from_slice(b" HTTP/1.0\r\n");
        let line = text.len();
        text.extend_from_slice(b"\r\n");
        // The target alone, as the layer reads a client's: one it would
        // refuse (not a path, too long, a byte no target has) is 404.
        // No space or control: the request line is the target's alone (a
        // CRLF in it would end the line and start fields of its making).
        let is_path =
            t.first() == Some(&b'/') && !t.iter().any(|&b| b <= b' ' || b == 0x7f || b == b'#');
        if !is_path || !parses(&text, limits) {
            mpm_core::log_info!(
                "mpm: internal redirect to {:?}: not a path the server takes; answered 404",
                redirect.target
            );
            return failed(404);
        }
        // Refused as nginx refuses an unsafe one: a target is often a
        // prefix and a name the application was given (by a client,
        // maybe), and a `..` in it would climb out of that prefix.
        if climbs(t) {
            mpm_core::log_info!(
                "mpm: internal redirect to {:?}: a `..` segment; answered 404",
                redirect.target
            );
            return failed(404);
        }
        text.truncate(line);
        text.extend_from_slice(&redirect.fields);
        text.extend_from_slice(b"\r\n");
        let fields_ok = !redirect.bad_field && parses(&text, limits);
        if !fields_ok {
            mpm_core::log_error!(
                "mpm: internal redirect to '{}': a field of its request is not one, or too many; answered 500",
                redirect.target
            );
            return failed(500);
        }
        let upstream = before.and_then(|b| b.upstream.clone()).or_else(|| {
            answer
                .upstream_info()
                .map(|(a, s, t)| (HeaderText::from(a.to_string()), s, t))
        });
        Some(Ok(Box::new(Redirected {
            text: text.into_boxed_slice(),
            keep,
            upstream,
            count,
            pending: true,
        })))
    }

    /// Ask `handler` for the answer to the redirect's request (HTTP
    /// `version`, from `peer`); `None` when it may block and `on_loop`
    /// says it must not (a worker asks again). A panic answers 500.
    pub(crate) fn answer<H: HttpHandler>(
        &self,
        handler: &mut H,
        pool: crate::RequestPool<'_>,
        limits: &Limits,
        (version, on_loop): (Version, bool),
        (peer, secure): (std::net::SocketAddr, bool),
    ) -> Option<Response> {
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let head = match head::parse(&self.text, &mut slots, limits) {
            Parsed::Complete(head) => head,
            _ => {
                mpm_core::log_error!(
                    "mpm: internal redirect: its request is not one ({:?}); answered 500",
                    String::from_utf8_lossy(&self.text)
                );
                return Some(Response::error(500));
            }
        };
        let req = Request {
            method: head.method,
            target: head.target,
            version,
            headers: Headers::Parsed(head.headers),
            body: &[],
            stream: None,
            awaited: None,
            params: &[],
            peer,
            secure,
            pool,
            framing: None,
            internal: true,
        };
        if on_loop
            && !mpm_core::panics::catch(|| handler.answers_without_blocking(&req)).unwrap_or(false)
        {
            return None;
        }
        Some(
            mpm_core::panics::catch(|| handler.handle(&req)).unwrap_or_else(|p| {
                mpm_core::log_error!(
                    "mpm: handler panicked on {} {} (an internal redirect): {p}; answered 500",
                    head.method,
                    head.target
                );
                Response::error(500)
            }),
        )
    }

    /// The answer to the redirect's request, given what it keeps of the
    /// answers before: their `Set-Cookie` fields, and the others where it
    /// has none and is no error (an error page is no download, and no
    /// cache's); their upstream for the access log, where it has none.
    pub(crate) fn finish(&self, answer: &mut Response) {
        let error = answer.status() >= 400;
        for (n, v) in &self.keep {
            let cookie = n.eq_ignore_ascii_case("set-cookie");
            if cookie || (!error && answer.header_value(n).is_none()) {
                let _ = answer.try_header(n.clone(), v.clone());
            }
        }
        if answer.upstream_info().is_none() {
            if let Some((a, s, t)) = &self.upstream {
                answer.set_upstream(a.clone(), *s, *t);
            }
        }
    }
}

/// Has `target`'s path a `..` segment, written plainly or escaped
/// (`%2e%2E`, `.%2e`)?
fn climbs(target: &[u8]) -> bool {
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    path.split(|&b| b == b'/').any(|seg| {
        let mut dots = 0;
        let mut rest = seg;
        while !rest.is_empty() {
            if rest[0] == b'.' {
                rest = &rest[1..];
            } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"%2e") {
                rest = &rest[3..];
            } else {
                return false;
            }
            dots += 1;
        }
        dots == 2
    })
}

/// Does the layer take `text` as a whole request head?
fn parses(text: &[u8], limits: &Limits) -> bool {
    let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
    matches!(head::parse(text, &mut slots, limits), Parsed::Complete(_))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn limits() -> Limits {
        crate::settings::ServiceSettings::new(&crate::HttpSettings::default()).limits
    }

    fn redirecting(target: &str) -> Response {
        let mut r = Response::new(200)
            .header("Set-Cookie", "a=1")
            .header("Content-Disposition", "attachment")
            .header("Cache-Control", "private")
            .header("X-Other", "dropped");
        r.set_internal_redirect(
            InternalRedirect::new(target)
                .field(b"Range", b"bytes=0-1")
                .field(b"Content-Length", b"5")
                .field(b"transfer-encoding", b"chunked")
                .field(b"Expect", b"100-continue"),
        );
        r
    }

    #[allow(clippy::result_large_err)] // follow's own result, unwrapped
    fn follow(r: &mut Response, before: Option<&Redirected>) -> Result<Box<Redirected>, Response> {
        Redirected::follow(r, before, &limits()).unwrap()
    }

    #[test]
    fn the_request_made_is_a_get_of_the_target_with_the_fields_but_no_framing() {
        let r = follow(&mut redirecting("/p/a?x=1"), None).unwrap();
        assert_eq!(
            &*r.text,
            &b"GET /p/a?x=1 HTTP/1.0\r\nRange: bytes=0-1\r\n\r\n"[..]
        );
        assert_eq!((r.count, r.pending), (1, true));
        let mut head = Response::new(200);
        head.set_internal_redirect(InternalRedirect::new("/p").head());
        let r = follow(&mut head, None).unwrap();
        assert!(r.text.starts_with(b"HEAD /p HTTP/1.0\r\n"));
        assert!(Redirected::follow(&mut Response::new(200), None, &limits()).is_none());
    }

    #[test]
    fn a_target_the_server_would_refuse_is_404_a_bad_field_and_the_eleventh_redirect_500() {
        let long = format!("/{}", "a".repeat(10_000));
        for bad in [
            "",
            "p/a",
            "@named",
            "/a b",
            "/a#frag",
            "/a\r\nX: y",
            "/a HTTP/1.0\r\nX-Evil: 1",
            "/a HTTP/1.1\r\nHost: evil\r\nContent-Length: 5\r\nX: y",
            "/a HTTP/1.0\r\n\r\nGET /b",
            "/a\tb",
            "/a\"b",
            long.as_str(),
            "/protected/../secret",
            "/protected/%2e%2E/secret",
            "/protected/.%2e/secret",
            "/protected/..",
            "/../a",
        ] {
            let got = follow(&mut redirecting(bad), None).unwrap_err();
            assert_eq!(got.status(), 404, "{bad:?}");
            assert_eq!(
                got.header_value("set-cookie"),
                Some("a=1"),
                "kept on a failure too"
            );
            assert_eq!(
                got.header_value("content-disposition"),
                None,
                "not on an error page"
            );
        }
        for good in [
            "/caf\u{e9}",
            "/a?b=c&d",
            "/a%20b",
            "/{x}|^",
            "/a/..b/c.../.../",
            "/a/./b",
            "/a?up=/../b",
        ] {
            assert!(follow(&mut redirecting(good), None).is_ok(), "{good:?}");
        }
        let fields = mpm_core::error_log::expect("a field of its request is not one");
        for (name, value) in [
            (&b"X-A"[..], &b"1\r\nContent-Length: 5"[..]),
            (b"X A", b"1"),
            (b"", b"1"),
            (b"X-A", b"a\0b"),
        ] {
            let mut r = Response::new(200);
            r.set_internal_redirect(InternalRedirect::new("/a").field(name, value));
            assert_eq!(follow(&mut r, None).unwrap_err().status(), 500);
        }
        assert_eq!(fields.count(), 4);
        let mut before = follow(&mut redirecting("/a"), None).unwrap();
        for n in 2..=MAX_REDIRECTS {
            before = follow(&mut redirecting("/a"), Some(&before)).unwrap();
            assert_eq!(before.count, n);
        }
        let cycle = mpm_core::error_log::expect("(a cycle?); answered 500");
        let got = follow(&mut redirecting("/a"), Some(&before)).unwrap_err();
        assert_eq!(got.status(), 500);
        assert_eq!(cycle.count(), 1);
    }

    #[test]
    fn the_answer_keeps_the_cookies_and_fields_it_lacks_of_the_answers_before() {
        let first = follow(&mut redirecting("/a"), None).unwrap();
        let second = follow(&mut redirecting("/b"), Some(&first)).unwrap();
        let mut answer = Response::new(200)
            .header("Set-Cookie", "own=1")
            .header("Cache-Control", "max-age=60");
        second.finish(&mut answer);
        let values = |name: &str| -> Vec<String> {
            answer
                .headers()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_string())
                .collect()
        };
        assert_eq!(values("set-cookie"), ["own=1", "a=1", "a=1"]);
        assert_eq!(values("cache-control"), ["max-age=60"], "its own kept");
        assert_eq!(values("content-disposition"), ["attachment"]);
        assert!(values("x-other").is_empty());
        // An error page (the target missing, say) keeps the cookies only.
        let mut missing = Response::error(404);
        second.finish(&mut missing);
        assert_eq!(missing.header_value("set-cookie"), Some("a=1"));
        assert_eq!(missing.header_value("content-disposition"), None);
        assert_eq!(missing.header_value("cache-control"), None);
    }
}
