//! A stream's request as the handler sees it: the checks RFC 9113 §8.3
//! asks of the pseudo-header fields that `h2` leaves to the server, and the
//! header list an [`HttpHandler`](crate::HttpHandler) reads (the
//! `:authority` as `host` when the client sent no `Host`, as §8.3.1 says
//! a server must treat it).

/// What makes a request malformed beyond what `h2` checks (it refuses
/// connection-specific fields, `te` other than `trailers`, upper-case
/// names, pseudo-fields that are unknown, repeated or after the regular
/// ones, a missing `:method` or `:scheme`, and a `content-length` the
/// DATA frames do not match). Each is answered `RST_STREAM(PROTOCOL_ERROR)`.
pub(crate) fn malformed(parts: &http::request::Parts) -> Option<&'static str> {
    let connect = parts.method == http::Method::CONNECT;
    match parts.uri.path_and_query().map(|p| p.as_str()) {
        // §8.3.1: `:path` is required (but for CONNECT), never empty, and
        // in origin form, or `*` for OPTIONS.
        None if !connect => return Some("no :path"),
        None => {}
        Some(_) if connect => return Some(":path in CONNECT"),
        Some("*") if parts.method == http::Method::OPTIONS => {}
        Some(p) if !p.starts_with('/') => return Some(":path not in origin form"),
        Some(_) => {}
    }
    // §8.3.1: a Host that names another entity than `:authority`.
    if let (Some(authority), Some(host)) =
        (parts.uri.authority(), parts.headers.get(http::header::HOST))
        && !host
            .as_bytes()
            .eq_ignore_ascii_case(authority.as_str().as_bytes())
    {
        return Some("host differs from :authority");
    }
    if parts.headers.get_all(http::header::HOST).iter().count() > 1 {
        return Some("more than one host");
    }
    None
}

/// The request target: the `:path` (origin form or `*`), or the authority
/// of a CONNECT.
pub(crate) fn target(parts: &http::request::Parts) -> &str {
    match parts.uri.path_and_query() {
        Some(p) => p.as_str(),
        None => parts.uri.authority().map_or("", |a| a.as_str()),
    }
}

/// The header list as the handler reads it: every field in order, then
/// `host` from `:authority` when there was none. Values that are not UTF-8
/// are kept as bytes, as HTTP/1.1's are.
pub(crate) fn fields(parts: &http::request::Parts) -> Vec<httparse::Header<'_>> {
    let mut fields: Vec<httparse::Header<'_>> = parts
        .headers
        .iter()
        .map(|(name, value)| httparse::Header {
            name: name.as_str(),
            value: value.as_bytes(),
        })
        .collect();
    if !parts.headers.contains_key(http::header::HOST)
        && let Some(authority) = parts.uri.authority()
    {
        fields.push(httparse::Header {
            name: "host",
            value: authority.as_str().as_bytes(),
        });
    }
    fields
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{fields, malformed, target};

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_path_must_be_in_origin_form_or_the_asterisk_of_options() {
        assert_eq!(malformed(&parts("GET", "https://h/a?b", &[])), None);
        assert_eq!(malformed(&parts("OPTIONS", "*", &[])), None);
        assert_eq!(
            malformed(&parts("GET", "*", &[])),
            Some(":path not in origin form")
        );
        assert_eq!(
            malformed(&parts("GET", "https://h", &[])).is_some(),
            // http's Uri gives an authority-only URI no path at all.
            http::Uri::from_static("https://h")
                .path_and_query()
                .is_none()
        );
    }

    #[test]
    fn a_host_naming_another_authority_is_malformed() {
        assert_eq!(
            malformed(&parts(
                "GET",
                "https://a.example/",
                &[("host", "A.example")]
            )),
            None
        );
        assert_eq!(
            malformed(&parts(
                "GET",
                "https://a.example/",
                &[("host", "b.example")]
            )),
            Some("host differs from :authority")
        );
    }

    #[test]
    fn the_authority_is_the_host_a_handler_reads() {
        let p = parts("GET", "https://a.example:8443/x?y", &[("accept", "*/*")]);
        let f = fields(&p);
        assert_eq!(target(&p), "/x?y");
        assert!(f
            .iter()
            .any(|h| h.name == "host" && h.value == b"a.example:8443"));
        assert!(f.iter().any(|h| h.name == "accept"));
    }
}
