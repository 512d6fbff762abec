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
        Some(p) if std::str::from_utf8(p).is_err() => return Some(":path not UTF-8"),
        Some(_) => {}
    }
    if head
        .authority()
        .is_some_and(|a| std::str::from_utf8(a).is_err())
    {
        return Some(":authority not UTF-8");
    }
    let mut hosts = head.fields().iter().filter(|(n, _)| *n == b"host");
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some("more than one host");
    }
    // §8.3.1: a Host that names another entity than `:authority`.
    if let (Some(authority), Some((_, host))) = (head.authority(), host)
        && !host.eq_ignore_ascii_case(authority)
    {
        return Some("host differs from :authority");
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

    use super::{fields, malformed, target};

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
