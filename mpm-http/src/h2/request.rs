//! A stream's request as the handler sees it: the checks of RFC 9113 §8.3
//! that `mpm-h2` leaves to the server (it checks the pseudo-header fields'
//! presence, order and repetition, field names and values, the
//! connection-specific fields and `content-length`; what a `:path` or a
//! `host` must say is the server's), and the header list an
//! [`HttpHandler`](crate::HttpHandler) reads (the `:authority` as `host`
//! when the client sent no `Host`, as §8.3.1 says a server must treat it).

use mpm_h2::RequestHead;
use smallvec::SmallVec;

use crate::byte_classes::is_tchar;
use crate::head::{valid_host, valid_target, Limits};

/// What makes a request malformed beyond what `mpm-h2` checks. Each is
/// answered `RST_STREAM(PROTOCOL_ERROR)`.
pub(crate) fn malformed(head: &RequestHead) -> Option<&'static str> {
    let method = head.method();
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Some(":method not a token");
    }
    let connect = method == b"CONNECT";
    match head.path() {
        // §8.3.1: `:path` is required (but for CONNECT), never empty, and
        // in origin form, or `*` for OPTIONS (`mpm-h2` checks the first
        // two).
        None => {}
        Some(b"*") if method == b"OPTIONS" => {}
        Some(p) if !p.starts_with(b"/") && !connect => return Some(":path not in origin form"),
        // What HTTP/1.1's request line refuses (a space, a control, a
        // fragment, `"<>`): such a `:path` would be another request line
        // (`/x HTTP/1.0`) once an HTTP/1.1 upstream is sent it.
        Some(p) if p.iter().any(|&b| b <= b' ' || b == 0x7f) => {
            return Some(":path with a space or a control character")
        }
        Some(p) => match std::str::from_utf8(p) {
            Err(_) => return Some(":path not UTF-8"),
            // In origin form here (`*` and CONNECT are above, and
            // `mpm-h2` refuses a CONNECT with a `:path`), which any
            // method may use.
            Ok(p) if !valid_target("GET", p) => return Some(":path not a request target"),
            Ok(_) => {}
        },
    }
    // §8.3.1: the authority without userinfo, as a Host value: HTTP/1.1
    // answers 400 to a Host that is not `uri-host [ ":" port ]`.
    match head.authority() {
        Some(a) if std::str::from_utf8(a).is_err() => return Some(":authority not UTF-8"),
        Some(a) if connect && !valid_target("CONNECT", std::str::from_utf8(a).unwrap_or("")) => {
            return Some(":authority of a CONNECT not host:port")
        }
        Some(a) if !connect && !valid_host(a) => return Some(":authority not host[:port]"),
        _ => {}
    }
    let mut hosts = head.fields().iter().filter(|(n, _)| *n == b"host");
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some("more than one host");
    }
    match (head.authority(), host) {
        // HTTP/1.1 answers 400 to a request without Host (RFC 9112 §3.2),
        // and nginx to an HTTP/2 one without either.
        (None, None) => return Some("neither :authority nor host"),
        (_, Some((_, h))) if !valid_host(h) => return Some("host not host[:port]"),
        _ => {}
    }
    // §8.3.1: a Host that names another entity than `:authority`.
    if let (Some(authority), Some((_, host))) = (head.authority(), host)
        && !host.eq_ignore_ascii_case(authority)
    {
        return Some("host differs from :authority");
    }
    None
}

/// The status HTTP/1.1 answers a head past `limits` with, applied to an
/// HTTP/2 one (whose only bound of its own is its whole header list's
/// size): 414 for a request line (method, `:path`) longer than
/// `--limit-request-line`, 431 for more fields than
/// `--limit-request-fields` or one longer than `--limit-request-field-size`
/// (counted as `name: value`, as HTTP/1.1 counts it), 413 for a
/// `content-length` past `--limit-request-body` (answered before any of
/// the body is sent, as HTTP/1.1 answers it; none with 0, no limit: a body
/// to be read whole is held to its own bound when the stream knows how its
/// handler reads it, `StreamTask::receive`).
pub(crate) fn over_limits(head: &RequestHead, limits: &Limits) -> Option<u16> {
    let path = head.path().or(head.authority()).unwrap_or(b"");
    // method SP target SP HTTP/1.1, as the line would be.
    if head.method().len() + path.len() + 10 > limits.line {
        return Some(414);
    }
    let fields = head.fields();
    if fields.len() > limits.fields
        || fields
            .iter()
            .any(|(n, v)| n.len() + v.len() + 2 > limits.field_size)
    {
        return Some(431);
    }
    if head.content_length().is_some_and(|n| n > limits.body) {
        return Some(413);
    }
    None
}

/// The method, as the handler reads it (checked a token by [`malformed`]).
pub(crate) fn method(head: &RequestHead) -> &str {
    std::str::from_utf8(head.method()).unwrap_or("")
}

/// The request target: the `:path` (origin form or `*`), or the authority
/// of a CONNECT.
pub(crate) fn target(head: &RequestHead) -> &str {
    let raw = match head.path() {
        Some(p) => p,
        None => head.authority().unwrap_or(b""),
    };
    std::str::from_utf8(raw).unwrap_or("")
}

/// The header list as the handler reads it: every field in order, then
/// `host` from `:authority` when there was none. Values that are not UTF-8
/// are kept as bytes, as HTTP/1.1's are (names are tokens: `mpm-h2`
/// checked them). Sixteen fields are kept inline: most requests need no
/// allocation for them.
pub(crate) fn fields(head: &RequestHead) -> SmallVec<[httparse::Header<'_>; 16]> {
    let mut has_host = false;
    let mut fields: SmallVec<[httparse::Header<'_>; 16]> = head
        .fields()
        .iter()
        .filter_map(|(name, value)| {
            has_host |= name == b"host";
            Some(httparse::Header {
                name: std::str::from_utf8(name).ok()?,
                value,
            })
        })
        .collect();
    if !has_host && let Some(authority) = head.authority() {
        fields.push(httparse::Header {
            name: "host",
            value: authority,
        });
    }
    fields
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use mpm_h2::{Fields, RequestHead};

    use super::{fields, malformed, over_limits, target};
    use crate::head::Limits;

    fn head(
        method: &str,
        path: Option<&str>,
        authority: Option<&str>,
        headers: &[(&str, &str)],
    ) -> RequestHead {
        let mut f = Fields::default();
        f.push(b":method", method.as_bytes());
        if method != "CONNECT" {
            f.push(b":scheme", b"https");
        }
        if let Some(a) = authority {
            f.push(b":authority", a.as_bytes());
        }
        if let Some(p) = path {
            f.push(b":path", p.as_bytes());
        }
        for (n, v) in headers {
            f.push(n.as_bytes(), v.as_bytes());
        }
        RequestHead::parse(f).unwrap()
    }

    #[test]
    fn a_path_must_be_in_origin_form_or_the_asterisk_of_options() {
        assert_eq!(malformed(&head("GET", Some("/a?b"), Some("h"), &[])), None);
        assert_eq!(malformed(&head("OPTIONS", Some("*"), Some("h"), &[])), None);
        assert_eq!(
            malformed(&head("GET", Some("*"), Some("h"), &[])),
            Some(":path not in origin form")
        );
        assert_eq!(
            malformed(&head("GET", Some("https://h/"), Some("h"), &[])),
            Some(":path not in origin form")
        );
    }

    #[test]
    fn what_http_1_1_refuses_in_a_target_or_a_host_is_malformed() {
        for path in [
            "/a b", "/a\tb", "/a\u{1}", "/a\u{7f}", "/a#f", "/a\"b", "/a<b>",
        ] {
            assert!(
                malformed(&head("GET", Some(path), Some("h"), &[])).is_some(),
                "{path:?} passed"
            );
        }
        // What browsers send unencoded passes, as over HTTP/1.1.
        assert_eq!(
            malformed(&head("GET", Some("/a{b}|c^`"), Some("h"), &[])),
            None
        );
        for authority in ["a.example x", "evil@a.example", "a.example/x", "h:port"] {
            assert!(
                malformed(&head("GET", Some("/"), Some(authority), &[])).is_some(),
                "{authority:?} passed"
            );
            assert!(
                malformed(&head("GET", Some("/"), None, &[("host", authority)])).is_some(),
                "host {authority:?} passed"
            );
        }
        assert_eq!(
            malformed(&head("GET", Some("/"), None, &[])),
            Some("neither :authority nor host")
        );
        assert_eq!(
            malformed(&head("GET", Some("/"), None, &[("host", "h:81")])),
            None
        );
        assert_eq!(
            malformed(&head("GET", Some("/"), Some("[::1]:8443"), &[])),
            None
        );
        assert!(malformed(&head("CONNECT", None, Some("a.example"), &[])).is_some());
        assert_eq!(
            malformed(&head("CONNECT", None, Some("a.example:443"), &[])),
            None
        );
    }

    #[test]
    fn http_1_1s_limits_hold_an_http2_head_too() {
        let limits = Limits {
            line: 40,
            fields: 2,
            field_size: 20,
            body: 0,
            whole_body: 0,
        };
        let ok = head("GET", Some("/x"), Some("h"), &[("a", "1"), ("b", "2")]);
        assert_eq!(over_limits(&ok, &limits), None);
        let long_line = head("GET", Some(&format!("/{}", "x".repeat(30))), Some("h"), &[]);
        assert_eq!(over_limits(&long_line, &limits), Some(414));
        // `host` from `:authority` is not a field the client sent.
        let many = head(
            "GET",
            Some("/x"),
            Some("h"),
            &[("a", "1"), ("b", "2"), ("c", "3")],
        );
        assert_eq!(over_limits(&many, &limits), Some(431));
        // `name: value` as HTTP/1.1 counts it: 20 fits, 21 does not.
        let fits = head("GET", Some("/x"), Some("h"), &[("name", &"v".repeat(14))]);
        assert_eq!(over_limits(&fits, &limits), None);
        let long = head("GET", Some("/x"), Some("h"), &[("name", &"v".repeat(15))]);
        assert_eq!(over_limits(&long, &limits), Some(431));
        // An announced body past the limit (0 here), before any of it.
        let post = head("POST", Some("/x"), Some("h"), &[("content-length", "1")]);
        assert_eq!(over_limits(&post, &limits), Some(413));
        let empty = head("POST", Some("/x"), Some("h"), &[("content-length", "0")]);
        assert_eq!(over_limits(&empty, &limits), None);
    }

    #[test]
    fn a_host_naming_another_authority_is_malformed() {
        assert_eq!(
            malformed(&head(
                "GET",
                Some("/"),
                Some("a.example"),
                &[("host", "A.example")]
            )),
            None
        );
        assert_eq!(
            malformed(&head(
                "GET",
                Some("/"),
                Some("a.example"),
                &[("host", "b.example")]
            )),
            Some("host differs from :authority")
        );
    }

    #[test]
    fn the_authority_is_the_host_a_handler_reads() {
        let p = head(
            "GET",
            Some("/x?y"),
            Some("a.example:8443"),
            &[("accept", "*/*")],
        );
        let f = fields(&p);
        assert_eq!(target(&p), "/x?y");
        assert!(f
            .iter()
            .any(|h| h.name == "host" && h.value == b"a.example:8443"));
        assert!(f.iter().any(|h| h.name == "accept"));
        let c = head("CONNECT", None, Some("a.example:443"), &[]);
        assert_eq!(target(&c), "a.example:443");
    }
}
