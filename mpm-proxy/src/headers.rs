//! The heads the proxy sends on: the upstream's request built from the
//! client's, and the client's response head from the upstream's.
//!
//! **Request** ([`request_head`]): hop-by-hop fields are removed —
//! `Connection` and every field it names, `Keep-Alive`, `TE`, `Trailer`,
//! `Transfer-Encoding` and `Content-Length` (the body is framed anew),
//! every `Proxy-*` (`Proxy-Authorization` too: it was for this proxy),
//! `Upgrade` unless the request is tunnelled — and `Expect` (the HTTP layer
//! has answered `100-continue` and read the body). `Host` is set as the
//! route's [`HostMode`] says, first. Who the client is goes last, as the
//! route's [`ForwardedStyle`] says: `X-Forwarded-For` (the client's address
//! appended to the list a trusted proxy sent, else alone),
//! `X-Forwarded-Proto` and `X-Forwarded-Host` (a trusted proxy's kept,
//! else this hop's); or one RFC 7239 `Forwarded` element. From a peer that
//! is not a trusted proxy, fields of either style are dropped: an
//! application must never read a client's claim as this proxy's. Then the
//! framing, and `Connection: keep-alive` (or `upgrade`).
//!
//! **Response** ([`response_fields`]): the same hop-by-hop fields removed,
//! and `X-Accel-*` (nginx's instructions to the proxy, read first: see
//! [`streams`]); every other field is passed as sent, in order — `Date`
//! and `Server` included, so that a proxied answer is the upstream's.
//!
//! Request smuggling is the HTTP layer's to refuse before a handler runs:
//! `Content-Length` with `Transfer-Encoding`, disagreeing lengths, codings
//! other than `chunked`, a missing or repeated `Host` on 1.1, obsolete line
//! folding, bare CR, NUL, space before a colon: all 400 and the connection
//! closed. What reaches the proxy has one framing, which the layer has
//! already decoded; the upstream gets a framing of the proxy's own.

use std::net::IpAddr;

use crate::config::{Buffering, ForwardedStyle, HostMode, ProxyRoute, UpstreamUrl};

/// What the proxy knows of the client of a request.
#[derive(Debug, Clone, Copy)]
pub struct ClientInfo<'a> {
    /// The peer's address (a trusted proxy's, or the client's own).
    pub addr: IpAddr,
    /// Did it come over TLS (`X-Forwarded-Proto: https`)?
    pub tls: bool,
    /// The request's `Host`, if it had one.
    pub host: Option<&'a str>,
}

/// How the request body is framed to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body, and no framing field.
    None,
    /// `Content-Length: n` (also for an empty body the client framed).
    Length(u64),
    /// `Transfer-Encoding: chunked`: a body streamed as it arrives.
    Chunked,
}

/// Request fields never passed on (besides those `Connection` names).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "content-length",
    "upgrade",
];

/// Is `name` hop-by-hop for this message: one of [`HOP_BY_HOP`], a
/// `Proxy-*`, or one the `Connection` fields name? `keep_upgrade` lets
/// `Upgrade` through (a tunnel).
fn is_hop(name: &str, named: &[&str], keep_upgrade: bool) -> bool {
    if keep_upgrade && name.eq_ignore_ascii_case("upgrade") {
        return false;
    }
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
        || starts_with_ignore_case(name, "proxy-")
        || named.iter().any(|n| name.eq_ignore_ascii_case(n))
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The field names the `Connection` fields among `fields` list.
fn connection_names<'a>(fields: &[(&'a str, &'a [u8])]) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

/// The request head for `upstream`: `method target HTTP/1.1`, then the
/// fields as the crate's `headers.rs` says (hop-by-hop removed, `Host`
/// first, `X-Forwarded-*` or `Forwarded` last, then the framing), for a request whose client fields
/// are `fields` (in the order received) and whose body is framed as
/// `framing`; `tunnel` keeps `Upgrade` and asks for `Connection: upgrade`.
#[allow(clippy::too_many_arguments)]
pub fn request_head<'a>(
    route: &ProxyRoute,
    upstream: &UpstreamUrl,
    method: &str,
    target: &str,
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    client: &ClientInfo<'_>,
    framing: Framing,
    tunnel: bool,
) -> Vec<u8> {
    let fields: Vec<(&str, &[u8])> = fields.into_iter().collect();
    let named = connection_names(&fields);
    let trusted = route
        .trusted_proxies
        .iter()
        .any(|c| c.contains(client.addr));
    let mut out = Vec::with_capacity(512);
    push_line(
        &mut out,
        &[method.as_bytes(), b" ", target.as_bytes(), b" HTTP/1.1"],
    );
    let host = match &route.host {
        HostMode::Upstream => upstream.authority(),
        HostMode::Pass => client.host.unwrap_or(upstream.authority()),
        HostMode::Set(h) => h,
    };
    push_field(&mut out, "Host", host.as_bytes());
    let is_x = |n: &str| {
        ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]
            .iter()
            .any(|x| n.eq_ignore_ascii_case(x))
    };
    let is_fwd = |n: &str| n.eq_ignore_ascii_case("forwarded");
    for &(name, value) in &fields {
        if is_hop(name, &named, tunnel)
            || name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("expect")
        {
            continue;
        }
        // Who-is-the-client fields: rewritten below, or dropped if untrusted.
        if route.forwarded != ForwardedStyle::Off && (is_x(name) || is_fwd(name)) {
            continue;
        }
        push_field(&mut out, name, value);
    }
    let sent = |name: &str| -> Option<String> {
        let values: Vec<&str> = fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect();
        (trusted && !values.is_empty()).then(|| values.join(", "))
    };
    let addr = client.addr.to_canonical();
    let proto = if client.tls { "https" } else { "http" };
    match route.forwarded {
        ForwardedStyle::XForwarded => {
            let xff = match sent("x-forwarded-for") {
                Some(list) => format!("{list}, {addr}"),
                None => addr.to_string(),
            };
            push_field(&mut out, "X-Forwarded-For", xff.as_bytes());
            let proto = sent("x-forwarded-proto").unwrap_or_else(|| proto.to_string());
            push_field(&mut out, "X-Forwarded-Proto", proto.as_bytes());
            if let Some(h) = sent("x-forwarded-host").or(client.host.map(str::to_string)) {
                push_field(&mut out, "X-Forwarded-Host", h.as_bytes());
            }
        }
        ForwardedStyle::Forwarded => {
            let node = match addr {
                IpAddr::V4(a) => a.to_string(),
                IpAddr::V6(a) => format!("\"[{a}]\""),
            };
            let mut element = format!("for={node};proto={proto}");
            if let Some(h) = client.host {
                element.push_str(";host=");
                element.push_str(&quoted(h));
            }
            let value = match sent("forwarded") {
                Some(list) => format!("{list}, {element}"),
                None => element,
            };
            push_field(&mut out, "Forwarded", value.as_bytes());
        }
        ForwardedStyle::Off => {}
    }
    match framing {
        Framing::None => {}
        Framing::Length(n) => push_field(&mut out, "Content-Length", n.to_string().as_bytes()),
        Framing::Chunked => push_field(&mut out, "Transfer-Encoding", b"chunked"),
    }
    push_field(
        &mut out,
        "Connection",
        if tunnel { b"upgrade" } else { b"keep-alive" },
    );
    out.extend_from_slice(b"\r\n");
    out
}

/// A `Forwarded` parameter value: a token as it is, anything else quoted.
fn quoted(v: &str) -> String {
    if crate::config::is_token(v) {
        v.to_string()
    } else {
        let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
        format!("\"{escaped}\"")
    }
}

fn push_line(out: &mut Vec<u8>, parts: &[&[u8]]) {
    for p in parts {
        out.extend_from_slice(p);
    }
    out.extend_from_slice(b"\r\n");
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    push_line(out, &[name.as_bytes(), b": ", value]);
}

/// The upstream's response head, sorted for the client: hop-by-hop and
/// `X-Accel-*` fields out, the rest in order, `Date` and `Server` included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFields<'a> {
    /// The fields to pass, in the upstream's order.
    pub fields: Vec<(&'a str, &'a [u8])>,
    /// The upstream's `Content-Length`, if it sent one: the body's length
    /// (and, for `HEAD` and `304`, the length the client is told).
    pub content_length: Option<u64>,
    /// The upstream's `X-Accel-Buffering`: `Some(true)` for `yes`,
    /// `Some(false)` for `no`.
    pub accel_buffering: Option<bool>,
    /// Is the answer `text/event-stream`?
    pub event_stream: bool,
}

/// Sort an upstream's response fields: what passes (see
/// [`ResponseFields`]), and what the proxy reads for itself. `upgrade` (a `101` to a tunnelled request) lets
/// `Upgrade` through.
pub fn response_fields<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    upgrade: bool,
) -> ResponseFields<'a> {
    let all: Vec<(&str, &[u8])> = fields.into_iter().collect();
    let named = connection_names(&all);
    let text = |v: &'a [u8]| std::str::from_utf8(v).ok().map(str::trim);
    let mut out = ResponseFields {
        fields: Vec::with_capacity(all.len()),
        content_length: None,
        accel_buffering: None,
        event_stream: false,
    };
    for &(name, value) in &all {
        if name.eq_ignore_ascii_case("content-length") {
            out.content_length = text(value).and_then(|v| v.parse().ok());
        } else if name.eq_ignore_ascii_case("x-accel-buffering") {
            out.accel_buffering = match text(value) {
                Some(v) if v.eq_ignore_ascii_case("yes") => Some(true),
                Some(v) if v.eq_ignore_ascii_case("no") => Some(false),
                _ => out.accel_buffering,
            };
        } else if name.eq_ignore_ascii_case("content-type") {
            out.event_stream = text(value).is_some_and(|v| {
                let media = v.split(';').next().unwrap_or("").trim();
                media.eq_ignore_ascii_case("text/event-stream")
            });
        }
        if is_hop(name, &named, upgrade) || starts_with_ignore_case(name, "x-accel-") {
            continue;
        }
        out.fields.push((name, value));
    }
    out
}

/// Is this answer streamed to the client as it arrives (rather than read
/// whole first)? `text/event-stream` always is; else the upstream's
/// `X-Accel-Buffering` decides, else the route's [`Buffering`].
pub fn streams(route: Buffering, response: &ResponseFields<'_>) -> bool {
    if response.event_stream {
        return true;
    }
    match response.accel_buffering {
        Some(buffer) => !buffer,
        None => route == Buffering::Off,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(setup: impl FnOnce(&mut ProxyRoute)) -> ProxyRoute {
        let mut r = ProxyRoute::from_flag("/api/=http://10.0.0.2:8080/v1/").unwrap();
        setup(&mut r);
        r
    }

    fn head(
        r: &ProxyRoute,
        fields: &[(&str, &str)],
        client: ClientInfo<'_>,
        framing: Framing,
        tunnel: bool,
    ) -> String {
        let bytes = request_head(
            r,
            &r.upstreams[0].url,
            "GET",
            "/v1/x",
            fields.iter().map(|(n, v)| (*n, v.as_bytes())),
            &client,
            framing,
            tunnel,
        );
        String::from_utf8(bytes).unwrap()
    }

    fn client(addr: &str) -> ClientInfo<'static> {
        ClientInfo {
            addr: addr.parse().unwrap(),
            tls: false,
            host: Some("example.com"),
        }
    }

    fn lines(h: &str) -> Vec<&str> {
        h.trim_end().split("\r\n").collect()
    }

    #[test]
    fn the_head_is_host_first_fields_in_order_then_forwarding_and_framing() {
        let h = head(
            &route(|_| {}),
            &[
                ("Host", "example.com"),
                ("Accept", "*/*"),
                ("X-Custom", "1"),
                ("Cookie", "a=b"),
            ],
            client("192.0.2.1"),
            Framing::Length(5),
            false,
        );
        assert_eq!(
            lines(&h),
            [
                "GET /v1/x HTTP/1.1",
                "Host: 10.0.0.2:8080",
                "Accept: */*",
                "X-Custom: 1",
                "Cookie: a=b",
                "X-Forwarded-For: 192.0.2.1",
                "X-Forwarded-Proto: http",
                "X-Forwarded-Host: example.com",
                "Content-Length: 5",
                "Connection: keep-alive",
            ]
        );
        assert!(h.ends_with("\r\n\r\n"));
    }

    #[test]
    fn hop_by_hop_fields_never_reach_the_upstream() {
        let h = head(
            &route(|_| {}),
            &[
                ("Host", "example.com"),
                ("Connection", "close, X-Foo"),
                ("connection", "X-Bar"),
                ("X-Foo", "secret"),
                ("X-Bar", "secret"),
                ("Keep-Alive", "timeout=5"),
                ("TE", "trailers"),
                ("Trailer", "X-T"),
                ("Transfer-Encoding", "chunked"),
                ("Content-Length", "12"),
                ("Proxy-Authorization", "Basic eA=="),
                ("Proxy-Connection", "keep-alive"),
                ("Upgrade", "websocket"),
                ("Expect", "100-continue"),
                ("X-Kept", "yes"),
            ],
            client("192.0.2.1"),
            Framing::None,
            false,
        );
        for gone in [
            "X-Foo",
            "X-Bar",
            "Keep-Alive",
            "TE:",
            "Trailer",
            "Transfer-Encoding",
            "Content-Length",
            "Proxy-",
            "Upgrade",
            "Expect",
            "close",
        ] {
            assert!(!h.contains(gone), "{gone} reached the upstream:\n{h}");
        }
        assert!(
            h.contains("X-Kept: yes\r\n") && h.contains("Connection: keep-alive\r\n"),
            "{h}"
        );
        assert_eq!(h.matches("Connection:").count(), 1);
    }

    #[test]
    fn a_tunnel_keeps_upgrade_and_asks_for_it() {
        let h = head(
            &route(|_| {}),
            &[
                ("Host", "example.com"),
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Key", "k"),
            ],
            client("192.0.2.1"),
            Framing::None,
            true,
        );
        assert!(
            h.contains("Upgrade: websocket\r\n") && h.contains("Sec-WebSocket-Key: k\r\n"),
            "{h}"
        );
        assert!(h.ends_with("Connection: upgrade\r\n\r\n"), "{h}");
    }

    #[test]
    fn x_forwarded_for_is_kept_only_from_a_trusted_proxy() {
        let spoof = [
            ("Host", "example.com"),
            ("X-Forwarded-For", "1.1.1.1"),
            ("X-Forwarded-Proto", "https"),
            ("X-Forwarded-Host", "evil"),
            ("Forwarded", "for=1.1.1.1"),
        ];
        let r = route(|r| r.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()]);
        let untrusted = head(&r, &spoof, client("192.0.2.1"), Framing::None, false);
        assert!(
            untrusted.contains("X-Forwarded-For: 192.0.2.1\r\n"),
            "{untrusted}"
        );
        assert!(untrusted.contains("X-Forwarded-Proto: http\r\n"));
        assert!(untrusted.contains("X-Forwarded-Host: example.com\r\n"));
        assert!(
            !untrusted.contains("1.1.1.1") && !untrusted.contains("evil"),
            "{untrusted}"
        );
        let trusted = head(
            &r,
            &[
                ("Host", "example.com"),
                ("X-Forwarded-For", "203.0.113.5"),
                ("x-forwarded-for", "198.51.100.7"),
                ("X-Forwarded-Proto", "https"),
            ],
            client("10.1.2.3"),
            Framing::None,
            false,
        );
        assert!(
            trusted.contains("X-Forwarded-For: 203.0.113.5, 198.51.100.7, 10.1.2.3\r\n"),
            "{trusted}"
        );
        assert!(
            trusted.contains("X-Forwarded-Proto: https\r\n"),
            "{trusted}"
        );
        // A v4 client on a dual-stack socket is written as v4, and trusted as such.
        let mapped = head(
            &r,
            &[("X-Forwarded-For", "203.0.113.5")],
            client("::ffff:10.0.0.9"),
            Framing::None,
            false,
        );
        assert!(
            mapped.contains("X-Forwarded-For: 203.0.113.5, 10.0.0.9\r\n"),
            "{mapped}"
        );
    }

    #[test]
    fn tls_clients_are_https() {
        let c = ClientInfo {
            tls: true,
            ..client("192.0.2.1")
        };
        assert!(head(&route(|_| {}), &[], c, Framing::None, false)
            .contains("X-Forwarded-Proto: https\r\n"));
    }

    #[test]
    fn forwarded_style_writes_one_rfc_7239_element() {
        let r = route(|r| {
            r.forwarded = ForwardedStyle::Forwarded;
            r.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()];
        });
        let c = ClientInfo {
            host: Some("example.com:8443"),
            ..client("2001:db8::1")
        };
        let h = head(
            &r,
            &[("X-Forwarded-For", "1.1.1.1"), ("Forwarded", "for=1.1.1.1")],
            c,
            Framing::None,
            false,
        );
        assert!(
            h.contains("Forwarded: for=\"[2001:db8::1]\";proto=http;host=\"example.com:8443\"\r\n"),
            "{h}"
        );
        assert!(!h.contains("1.1.1.1") && !h.contains("X-Forwarded"), "{h}");
        let h = head(
            &r,
            &[("Forwarded", "for=203.0.113.5")],
            client("10.0.0.1"),
            Framing::None,
            false,
        );
        assert!(
            h.contains("Forwarded: for=203.0.113.5, for=10.0.0.1;proto=http;host=example.com\r\n"),
            "{h}"
        );
    }

    #[test]
    fn forwarded_off_passes_the_clients_fields_and_adds_none() {
        let r = route(|r| r.forwarded = ForwardedStyle::Off);
        let h = head(
            &r,
            &[("X-Forwarded-For", "1.1.1.1")],
            client("192.0.2.1"),
            Framing::None,
            false,
        );
        assert!(
            h.contains("X-Forwarded-For: 1.1.1.1\r\n") && !h.contains("192.0.2.1"),
            "{h}"
        );
    }

    #[test]
    fn host_is_the_upstreams_the_clients_or_a_set_one() {
        let fields = [("Host", "example.com")];
        let get = |mode: HostMode, c: ClientInfo<'_>| {
            let h = head(&route(|r| r.host = mode), &fields, c, Framing::None, false);
            lines(&h)[1].to_string()
        };
        assert_eq!(
            get(HostMode::Upstream, client("192.0.2.1")),
            "Host: 10.0.0.2:8080"
        );
        assert_eq!(
            get(HostMode::Pass, client("192.0.2.1")),
            "Host: example.com"
        );
        let no_host = ClientInfo {
            host: None,
            ..client("192.0.2.1")
        };
        assert_eq!(
            get(HostMode::Pass, no_host),
            "Host: 10.0.0.2:8080",
            "HTTP/1.0 without Host"
        );
        assert_eq!(
            get(HostMode::Set("api.internal".into()), client("192.0.2.1")),
            "Host: api.internal"
        );
    }

    #[test]
    fn chunked_framing_is_the_proxys_own() {
        let h = head(
            &route(|_| {}),
            &[("Transfer-Encoding", "chunked")],
            client("192.0.2.1"),
            Framing::Chunked,
            false,
        );
        assert_eq!(
            h.matches("Transfer-Encoding: chunked\r\n").count(),
            1,
            "{h}"
        );
    }

    fn response(fields: &[(&'static str, &'static str)], upgrade: bool) -> ResponseFields<'static> {
        response_fields(fields.iter().map(|(n, v)| (*n, v.as_bytes())), upgrade)
    }

    #[test]
    fn response_fields_pass_in_order_without_hop_by_hop_or_accel() {
        let r = response(
            &[
                ("Date", "Tue, 01 Dec 2026 00:00:00 GMT"),
                ("Server", "origin/1"),
                ("Connection", "keep-alive, X-Internal"),
                ("X-Internal", "1"),
                ("Keep-Alive", "timeout=5"),
                ("Content-Length", "42"),
                ("Transfer-Encoding", "chunked"),
                ("X-Accel-Redirect", "/secret"),
                ("X-Accel-Buffering", "no"),
                ("Proxy-Authenticate", "Basic"),
                ("Upgrade", "h2c"),
                ("ETag", "\"v1\""),
                ("Set-Cookie", "a=1"),
                ("Set-Cookie", "b=2"),
            ],
            false,
        );
        let names: Vec<&str> = r.fields.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["Date", "Server", "ETag", "Set-Cookie", "Set-Cookie"]
        );
        assert_eq!(
            (r.content_length, r.accel_buffering, r.event_stream),
            (Some(42), Some(false), false)
        );
        let up = response(&[("Upgrade", "websocket"), ("Connection", "Upgrade")], true);
        assert_eq!(up.fields, [("Upgrade", &b"websocket"[..])]);
    }

    #[test]
    fn event_streams_and_accel_buffering_decide_streaming() {
        let sse = response(
            &[("Content-Type", "text/event-stream; charset=utf-8")],
            false,
        );
        assert!(sse.event_stream && streams(Buffering::On, &sse));
        let no = response(&[("X-Accel-Buffering", "no")], false);
        assert!(streams(Buffering::On, &no));
        let yes = response(&[("X-Accel-Buffering", "yes")], false);
        assert!(!streams(Buffering::Off, &yes));
        let plain = response(&[("Content-Type", "text/html")], false);
        assert!(streams(Buffering::Off, &plain) && !streams(Buffering::On, &plain));
    }
}
