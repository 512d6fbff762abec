//! The heads the proxy sends on: the upstream's request built from the
//! client's, and the client's response head from the upstream's.
//!
//! **Request** ([`request_head`]): hop-by-hop fields are removed —
//! `Connection` and every field it names, `Keep-Alive`, `TE`, `Trailer`,
//! `Transfer-Encoding` and `Content-Length` (the body is framed anew),
//! every `Proxy-*` (`Proxy-Authorization` too: it was for this proxy),
//! `Upgrade` unless the request is tunnelled (and `h2c` from its list even
//! then) — and `Expect` (the HTTP layer has answered `100-continue` and
//! read the body). `Host` is set as the route's [`HostMode`] says, first.
//! Who the client is goes last, as the route's [`ForwardedStyle`] says:
//! `X-Forwarded-For` (the client's address appended to the list a trusted
//! proxy sent, else alone),
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

use std::io::Write;
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

/// What a field's name is to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Hop-by-hop, never passed on: `Connection`, `Keep-Alive`, `TE`,
    /// `Trailer`, `Transfer-Encoding`, `Content-Length` (the body is framed
    /// anew), every `Proxy-*`.
    Hop,
    /// `Upgrade`: hop-by-hop too, but for a tunnel.
    Upgrade,
    Host,
    Expect,
    /// `X-Forwarded-For`, `-Proto` or `-Host`.
    XForwarded,
    Forwarded,
    /// `X-Accel-*`: nginx's instructions to the proxy, in an answer.
    Accel,
    /// Any other: passed on unless a `Connection` field names it.
    Other,
}

/// The kind of `name`, told by its length first: a name is compared with
/// the few known names of its length, not with each of them (every field
/// of every request and every answer is asked).
pub(crate) fn kind(name: &[u8]) -> Kind {
    let is = |known: &str| is_lowercase_of(name, known.as_bytes());
    match name.len() {
        2 if is("te") => Kind::Hop,
        4 if is("host") => Kind::Host,
        6 if is("expect") => Kind::Expect,
        7 if is("trailer") => Kind::Hop,
        7 if is("upgrade") => Kind::Upgrade,
        9 if is("forwarded") => Kind::Forwarded,
        10 if is("connection") || is("keep-alive") => Kind::Hop,
        // HTTP/2's upgrade settings are connection-specific (RFC 9113
        // §3.2.1 of its predecessor): never the upstream's.
        14 if is("content-length") || is("http2-settings") => Kind::Hop,
        15 if is("x-forwarded-for") => Kind::XForwarded,
        16 if is("x-forwarded-host") => Kind::XForwarded,
        17 if is("transfer-encoding") => Kind::Hop,
        17 if is("x-forwarded-proto") => Kind::XForwarded,
        // A prefix looked for only after its first letter: most names
        // (`Server`, `Content-Type`) start with neither.
        _ => match name.first() {
            Some(b'p' | b'P') if starts_with_ignore_case(name, "proxy-") => Kind::Hop,
            Some(b'x' | b'X') if starts_with_ignore_case(name, "x-accel-") => Kind::Accel,
            _ => Kind::Other,
        },
    }
}

/// Does a `Connection` field (`connection`: their values, read in place)
/// name `name`, making it hop-by-hop for this message?
fn named_by<'a>(name: &[u8], connection: impl IntoIterator<Item = &'a [u8]>) -> bool {
    connection
        .into_iter()
        .flat_map(|v| v.split(|b| *b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(name))
}

/// Does `name`, with its ASCII capitals made small, read `lower` (small
/// already: only `name`'s bytes need lowering, half the work of
/// `eq_ignore_ascii_case`)?
fn is_lowercase_of(name: &[u8], lower: &[u8]) -> bool {
    name.len() == lower.len()
        && name
            .iter()
            .zip(lower)
            .all(|(a, b)| a.to_ascii_lowercase() == *b)
}

/// Does `s` start with `prefix` (small), whatever its case?
fn starts_with_ignore_case(s: &[u8], prefix: &str) -> bool {
    s.len() >= prefix.len() && is_lowercase_of(&s[..prefix.len()], prefix.as_bytes())
}

/// Is the request field `name` hop-by-hop among the request's `fields`:
/// one the proxy never forwards as the client sent it (`Connection` and
/// the fields it names, `Keep-Alive`, `TE`, `Trailer`, the framing,
/// `Proxy-*`, `HTTP2-Settings`, `Upgrade`)? What an internal redirect's
/// request leaves out of the client's fields.
pub(crate) fn is_hop_by_hop<'a, I>(name: &str, fields: I) -> bool
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    matches!(kind(name.as_bytes()), Kind::Hop | Kind::Upgrade)
        || named_by(name.as_bytes(), connection_values(fields))
}

/// The values of the `Connection` fields among `fields`.
fn connection_values<'a, I>(fields: I) -> impl Iterator<Item = &'a [u8]>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    fields
        .into_iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .map(|(_, v)| v)
}

/// The request head for `upstream`: `method target HTTP/1.1`, then the
/// fields as the crate's `headers.rs` says (hop-by-hop removed, `Host`
/// first, `X-Forwarded-*` or `Forwarded` last, then the framing), for a request whose client fields
/// are `fields` (in the order received) and whose body is framed as
/// `framing`; `tunnel` keeps `Upgrade` and asks for `Connection: upgrade`.
#[allow(clippy::too_many_arguments)]
pub fn request_head<'a, I>(
    route: &ProxyRoute,
    upstream: &UpstreamUrl,
    method: &str,
    target: &str,
    fields: I,
    client: &ClientInfo<'_>,
    framing: Framing,
    tunnel: bool,
) -> Vec<u8>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
    I::IntoIter: Clone,
{
    let mut out = Vec::with_capacity(512);
    push_line(
        &mut out,
        &[method.as_bytes(), b" ", target.as_bytes(), b" HTTP/1.1"],
    );
    request_fields_into(&mut out, route, upstream, fields, client, framing, tunnel);
    out
}

/// The fields of [`request_head`], after its request line, appended to
/// `out`: written in place, with no allocation of their own.
pub fn request_fields_into<'a, I>(
    out: &mut Vec<u8>,
    route: &ProxyRoute,
    upstream: &UpstreamUrl,
    fields: I,
    client: &ClientInfo<'_>,
    framing: Framing,
    tunnel: bool,
) where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
    I::IntoIter: Clone,
{
    let fields = fields.into_iter();
    let trusted = route
        .trusted_proxies
        .iter()
        .any(|c| c.contains(client.addr));
    let host = match &route.host {
        HostMode::Upstream => upstream.authority(),
        HostMode::Pass => client.host.unwrap_or(upstream.authority()),
        HostMode::Set(h) => h,
    };
    push_field(out, "Host", host.as_bytes());
    // Looked for once: most requests have no `Connection` field to read
    // for each of their fields.
    let connection = connection_values(fields.clone()).next().is_some();
    let rewrites = route.forwarded != ForwardedStyle::Off;
    for (name, value) in fields.clone() {
        let passed = match kind(name.as_bytes()) {
            Kind::Hop | Kind::Host | Kind::Expect => false,
            // Kept for a tunnel, whatever `Connection` says, but for
            // `h2c` (written here, less any `h2c`, or not at all).
            Kind::Upgrade => {
                if tunnel {
                    push_upgrade(out, name, value);
                }
                false
            }
            // Who-is-the-client fields: rewritten below, or dropped if untrusted.
            Kind::XForwarded | Kind::Forwarded if rewrites => false,
            // A name with `_` is dropped, as nginx does by default
            // (`underscores_in_headers off`): CGI-style upstreams read
            // `X_Forwarded_For` as `X-Forwarded-For`, a client's claim
            // past the rewrite above.
            _ if name.as_bytes().contains(&b'_') => false,
            _ => !(connection && named_by(name.as_bytes(), connection_values(fields.clone()))),
        };
        // A field the route sets replaces the client's of that name.
        let replaced = || {
            route
                .set_header
                .iter()
                .any(|h| h.name().eq_ignore_ascii_case(name))
        };
        if passed && (route.set_header.is_empty() || !replaced()) {
            push_field(out, name, value);
        }
    }
    if !route.set_header.is_empty() {
        let vars = crate::Variables {
            remote_addr: client.addr,
            tls: client.tls,
            host: client.host,
            upstream_host: upstream.host(),
        };
        for h in &route.set_header {
            h.write_into(out, &vars);
        }
    }
    // The values a trusted proxy sent in the fields `name`, trimmed, the
    // empty ones left out: written joined with ", " (and `then` after
    // them), or nothing written and false.
    let sent = |out: &mut Vec<u8>, name: &str| -> bool {
        if !trusted {
            return false;
        }
        let mut any = false;
        let values = fields
            .clone()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .filter(|(_, v)| std::str::from_utf8(v).is_ok())
            .map(|(_, v)| v.trim_ascii())
            .filter(|v| !v.is_empty());
        for v in values {
            if any {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(v);
            any = true;
        }
        any
    };
    let addr = client.addr.to_canonical();
    let proto = if client.tls { "https" } else { "http" };
    // Writing to a Vec cannot fail.
    match route.forwarded {
        ForwardedStyle::XForwarded => {
            out.extend_from_slice(b"X-Forwarded-For: ");
            if sent(out, "x-forwarded-for") {
                out.extend_from_slice(b", ");
            }
            push_addr(out, addr);
            out.extend_from_slice(b"\r\nX-Forwarded-Proto: ");
            if !sent(out, "x-forwarded-proto") {
                out.extend_from_slice(proto.as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            let mark = out.len();
            out.extend_from_slice(b"X-Forwarded-Host: ");
            if sent(out, "x-forwarded-host") {
                out.extend_from_slice(b"\r\n");
            } else if let Some(h) = client.host {
                push_line(out, &[h.as_bytes()]);
            } else {
                out.truncate(mark);
            }
        }
        ForwardedStyle::Forwarded => {
            out.extend_from_slice(b"Forwarded: ");
            if sent(out, "forwarded") {
                out.extend_from_slice(b", ");
            }
            match addr {
                IpAddr::V4(_) => {
                    out.extend_from_slice(b"for=");
                    push_addr(out, addr);
                }
                IpAddr::V6(a) => {
                    let _ = write!(out, "for=\"[{a}]\"");
                }
            }
            out.extend_from_slice(b";proto=");
            out.extend_from_slice(proto.as_bytes());
            if let Some(h) = client.host {
                out.extend_from_slice(b";host=");
                quoted_into(out, h);
            }
            out.extend_from_slice(b"\r\n");
        }
        ForwardedStyle::Off => {}
    }
    match framing {
        Framing::None => {}
        Framing::Length(n) => {
            let _ = write!(out, "Content-Length: {n}\r\n");
        }
        Framing::Chunked => push_field(out, "Transfer-Encoding", b"chunked"),
    }
    // The last field and the head's end, in one piece.
    let end: &[u8] = if tunnel {
        b"Connection: upgrade\r\n\r\n"
    } else {
        b"Connection: keep-alive\r\n\r\n"
    };
    out.extend_from_slice(end);
}

/// `addr` written out as its `Display` does: an IPv4 address digit by
/// digit into a buffer of its own, copied once (the formatting machinery
/// was a tenth of a microsecond in every proxied request's head, and
/// `itoa`'s text, octet by octet, a call to memcpy each); IPv6, rarer,
/// through `Display`.
fn push_addr(out: &mut Vec<u8>, addr: IpAddr) {
    match addr {
        IpAddr::V4(a) => {
            // "255.255.255.255" at most.
            let mut text = [0u8; 15];
            let mut len = 0;
            for (i, octet) in a.octets().into_iter().enumerate() {
                let mut put = |b: u8| {
                    text[len] = b;
                    len += 1;
                };
                if i > 0 {
                    put(b'.');
                }
                if octet >= 100 {
                    put(b'0' + octet / 100);
                }
                if octet >= 10 {
                    put(b'0' + octet / 10 % 10);
                }
                put(b'0' + octet % 10);
            }
            out.extend_from_slice(&text[..len]);
        }
        IpAddr::V6(a) => {
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{a}");
        }
    }
}

/// A `Forwarded` parameter value: a token as it is, anything else quoted.
fn quoted_into(out: &mut Vec<u8>, v: &str) {
    if crate::config::is_token(v) {
        out.extend_from_slice(v.as_bytes());
    } else {
        out.push(b'"');
        for b in v.bytes() {
            if b == b'\\' || b == b'"' {
                out.push(b'\\');
            }
            out.push(b);
        }
        out.push(b'"');
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

/// The protocols an `Upgrade` value names (`websocket, foo/2`), each
/// trimmed, the empty ones left out.
fn upgrade_protocols(value: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    value
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|p| !p.is_empty())
}

/// Is `protocol` cleartext HTTP/2 (`h2c`), which the proxy never asks
/// for nor tunnels? A tunnel of it would carry requests the proxy never
/// routed or checked (h2c smuggling).
fn is_h2c(protocol: &[u8]) -> bool {
    protocol_name(protocol).eq_ignore_ascii_case(b"h2c")
}

/// A protocol's name: what is before its `/version` (RFC 9110 §7.8).
fn protocol_name(protocol: &[u8]) -> &[u8] {
    protocol.split(|b| *b == b'/').next().unwrap_or_default()
}

/// The protocols of the client's `Upgrade` fields among `fields` that the
/// proxy asks the upstream for: all but `h2c`, in order.
pub(crate) fn offered_protocols<'a>(
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> impl Iterator<Item = &'a [u8]> {
    fields
        .filter(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
        .flat_map(|(_, v)| upgrade_protocols(v))
        .filter(|p| !is_h2c(p))
}

/// The `Upgrade` field `name: value` for a tunnel's upstream, without any
/// `h2c` in its list; nothing when no other protocol is left.
fn push_upgrade(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    let mut first = true;
    for p in upgrade_protocols(value).filter(|p| !is_h2c(p)) {
        if first {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            first = false;
        } else {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(p);
    }
    if !first {
        out.extend_from_slice(b"\r\n");
    }
}

/// Why an upstream's `101` may not switch a request that offered the
/// protocols `offered` ([`offered_protocols`]), its `Upgrade` values
/// being `answer`; `None` when it may. A `101` must say what it switches
/// to in `Upgrade` (RFC 9110 §15.2.2), and only to protocols the client
/// named (§7.8): names compared without case, as §7.8 advises, and
/// versions (`name/version`) too when both sides give one.
pub(crate) fn refused_switch<'a>(
    answer: impl Iterator<Item = &'a [u8]>,
    offered: &[&[u8]],
) -> Option<&'static str> {
    let mut chosen = answer.flat_map(upgrade_protocols).peekable();
    if chosen.peek().is_none() {
        return Some("101 Switching Protocols without an Upgrade field");
    }
    let same = |c: &[u8], o: &[u8]| {
        let (cn, on) = (protocol_name(c), protocol_name(o));
        cn.eq_ignore_ascii_case(on)
            && (c.len() == cn.len() || o.len() == on.len() || c.eq_ignore_ascii_case(o))
    };
    let all_offered = chosen.all(|c| offered.iter().any(|o| same(c, o)));
    (!all_offered).then_some("101 Switching Protocols to a protocol the client did not offer")
}

/// What the proxy reads for itself in an upstream's response head. Which
/// fields pass to the client is [`passes`]'s to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFields {
    /// The upstream's `Content-Length`, if it sent one: the body's length
    /// (and, for `HEAD` and `304`, the length the client is told).
    pub content_length: Option<u64>,
    /// The upstream's `X-Accel-Buffering`: `Some(true)` for `yes`,
    /// `Some(false)` for `no`.
    pub accel_buffering: Option<bool>,
    /// Is the answer `text/event-stream`?
    pub event_stream: bool,
}

/// Read what the proxy needs of an upstream's response fields.
pub fn response_fields<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> ResponseFields {
    let text = |v: &'a [u8]| std::str::from_utf8(v).ok().map(str::trim);
    let mut out = ResponseFields {
        content_length: None,
        accel_buffering: None,
        event_stream: false,
    };
    for (name, value) in fields {
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
    }
    out
}

/// Does the upstream's response field `name` pass to the client? Not a
/// hop-by-hop one (those `connection`, the values of the response's
/// `Connection` fields, name among them) nor an `X-Accel-*`; every other,
/// `Date` and `Server` included. `upgrade` (a `101` to a tunnelled
/// request) lets `Upgrade` through.
pub fn passes<'a>(
    name: impl AsRef<[u8]>,
    connection: impl IntoIterator<Item = &'a [u8]>,
    upgrade: bool,
) -> bool {
    let name = name.as_ref();
    match kind(name) {
        Kind::Hop | Kind::Accel => false,
        Kind::Upgrade => upgrade,
        _ => !named_by(name, connection),
    }
}

/// Is this answer streamed to the client as it arrives (rather than read
/// whole first)? `text/event-stream` always is; else the upstream's
/// `X-Accel-Buffering` decides, else the route's [`Buffering`].
pub fn streams(route: Buffering, response: &ResponseFields) -> bool {
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

    #[test]
    fn hop_by_hop_fields_are_the_fixed_ones_and_those_connection_names() {
        let fields: [(&str, &[u8]); 3] = [
            ("Connection", b"close, X-Secret"),
            ("X-Secret", b"s"),
            ("Range", b"bytes=0-1"),
        ];
        for hop in [
            "Connection",
            "keep-alive",
            "TE",
            "Trailer",
            "Upgrade",
            "Proxy-Authorization",
            "HTTP2-Settings",
            "Transfer-Encoding",
            "x-secret",
        ] {
            assert!(is_hop_by_hop(hop, fields), "{hop}");
        }
        for end_to_end in ["Range", "If-None-Match", "Host", "Cookie"] {
            assert!(!is_hop_by_hop(end_to_end, fields), "{end_to_end}");
        }
    }

    #[test]
    fn an_address_is_written_as_its_display_writes_it() {
        for a in [
            "0.0.0.0",
            "9.10.99.100",
            "127.0.0.1",
            "255.255.255.255",
            "10.200.3.45",
            "::1",
            "2001:db8::7",
        ] {
            let addr: IpAddr = a.parse().unwrap();
            let mut out = Vec::new();
            push_addr(&mut out, addr);
            assert_eq!(String::from_utf8(out).unwrap(), addr.to_string());
        }
    }

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
    fn a_clients_x_accel_fields_reach_the_upstream() {
        // `X-Accel-*` is the upstream's instruction to the proxy, kept from
        // the client (response_fields_pass_in_order_without_hop_by_hop_or_accel);
        // a client's own pass, as nginx passes them (docs/proxy.md).
        let h = head(
            &route(|_| {}),
            &[("Host", "example.com"), ("X-Accel-Buffering", "no")],
            client("192.0.2.1"),
            Framing::None,
            false,
        );
        assert!(h.contains("X-Accel-Buffering: no\r\n"), "{h}");
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

    #[test]
    fn names_with_underscores_and_http2_settings_never_reach_the_upstream() {
        let h = head(
            &route(|_| {}),
            &[
                ("X_Forwarded_For", "6.6.6.6"),
                ("X-Forwarded_For", "7.7.7.7"),
                ("X_Real_IP", "6.6.6.6"),
                ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"),
                ("X-Kept", "1"),
            ],
            client("192.0.2.1"),
            Framing::None,
            false,
        );
        assert!(!h.contains('_'), "{h}");
        assert!(!h.to_ascii_lowercase().contains("http2-settings"), "{h}");
        assert!(h.contains("X-Kept: 1\r\n"), "{h}");
        assert!(h.contains("X-Forwarded-For: 192.0.2.1"), "{h}");
    }

    #[test]
    fn a_tunnel_never_asks_the_upstream_for_h2c() {
        let upgrade = |fields: &[(&str, &str)]| -> Vec<String> {
            let h = head(
                &route(|_| {}),
                fields,
                client("192.0.2.1"),
                Framing::None,
                true,
            );
            assert!(!h.to_ascii_lowercase().contains("h2c"), "{h}");
            lines(&h)
                .into_iter()
                .filter(|l| l.to_ascii_lowercase().starts_with("upgrade:"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            upgrade(&[("Upgrade", "websocket, h2c")]),
            ["Upgrade: websocket"]
        );
        assert_eq!(
            upgrade(&[("Upgrade", " H2C ,WebSocket, foo/2 ")]),
            ["Upgrade: WebSocket, foo/2"]
        );
        assert_eq!(
            upgrade(&[("Upgrade", "h2c"), ("upgrade", "websocket")]),
            ["upgrade: websocket"]
        );
        assert!(upgrade(&[("Upgrade", "h2c, h2c/1, ,")]).is_empty());
    }

    #[test]
    fn the_protocols_offered_are_the_clients_but_h2c() {
        let fields = [
            ("Upgrade", "h2c, websocket"),
            ("X-Other", "h2c"),
            ("UPGRADE", "foo/2, H2C"),
        ];
        let offered: Vec<&[u8]> =
            offered_protocols(fields.iter().map(|(n, v)| (*n, v.as_bytes()))).collect();
        assert_eq!(offered, [b"websocket".as_slice(), b"foo/2"]);
    }

    #[test]
    fn a_101_must_say_upgrade_to_a_protocol_the_client_offered() {
        let refused = |answer: &[&str], offered: &[&str]| {
            let offered: Vec<&[u8]> = offered.iter().map(|o| o.as_bytes()).collect();
            refused_switch(answer.iter().map(|a| a.as_bytes()), &offered)
        };
        // RFC 9110 §15.2.2: no `Upgrade`, or an empty one, is no switch.
        for answer in [&[][..], &[""], &[" , "]] {
            assert_eq!(
                refused(answer, &["websocket"]),
                Some("101 Switching Protocols without an Upgrade field"),
                "{answer:?}"
            );
        }
        // §7.8: only to what the client named, names in any case.
        let not_offered = Some("101 Switching Protocols to a protocol the client did not offer");
        assert_eq!(refused(&["h2c"], &["websocket"]), not_offered);
        assert_eq!(refused(&["websocket, h2c"], &["websocket"]), not_offered);
        assert_eq!(refused(&["websocket", "foo"], &["websocket"]), not_offered);
        assert_eq!(refused(&["websocketx"], &["websocket"]), not_offered);
        assert_eq!(refused(&["foo/2"], &["foo/1"]), not_offered);
        assert_eq!(refused(&["websocket"], &[]), not_offered);
        assert_eq!(refused(&["WebSocket"], &["websocket"]), None);
        assert_eq!(refused(&[" websocket "], &["foo", "websocket"]), None);
        assert_eq!(refused(&["foo/2, websocket"], &["websocket", "FOO"]), None);
        assert_eq!(refused(&["foo"], &["foo/2"]), None);
        assert_eq!(refused(&["Foo/2"], &["foo/2"]), None);
    }

    fn response(fields: &[(&'static str, &'static str)]) -> ResponseFields {
        response_fields(fields.iter().map(|(n, v)| (*n, v.as_bytes())))
    }

    /// The names of `fields` that pass to the client, in order.
    fn passed(fields: &[(&'static str, &'static str)], upgrade: bool) -> Vec<&'static str> {
        let connection = || {
            fields
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
                .map(|(_, v)| v.as_bytes())
        };
        fields
            .iter()
            .filter(|(n, _)| passes(n, connection(), upgrade))
            .map(|(n, _)| *n)
            .collect()
    }

    #[test]
    fn response_fields_pass_in_order_without_hop_by_hop_or_accel() {
        let fields = [
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
        ];
        let r = response(&fields);
        assert_eq!(
            passed(&fields, false),
            ["Date", "Server", "ETag", "Set-Cookie", "Set-Cookie"]
        );
        assert_eq!(
            (r.content_length, r.accel_buffering, r.event_stream),
            (Some(42), Some(false), false)
        );
        let up = [("Upgrade", "websocket"), ("Connection", "Upgrade")];
        assert_eq!(passed(&up, true), ["Upgrade"]);
    }

    #[test]
    fn event_streams_and_accel_buffering_decide_streaming() {
        let sse = response(&[("Content-Type", "text/event-stream; charset=utf-8")]);
        assert!(sse.event_stream && streams(Buffering::On, &sse));
        let no = response(&[("X-Accel-Buffering", "no")]);
        assert!(streams(Buffering::On, &no));
        let yes = response(&[("X-Accel-Buffering", "yes")]);
        assert!(!streams(Buffering::Off, &yes));
        let plain = response(&[("Content-Type", "text/html")]);
        assert!(streams(Buffering::Off, &plain) && !streams(Buffering::On, &plain));
    }

    #[test]
    fn names_are_known_whatever_their_case() {
        for (name, want) in [
            ("TE", Kind::Hop),
            ("tE", Kind::Hop),
            ("ta", Kind::Other),
            ("hOsT", Kind::Host),
            ("Hosts", Kind::Other),
            ("EXPECT", Kind::Expect),
            ("Trailer", Kind::Hop),
            ("UPGRADE", Kind::Upgrade),
            ("Forwarded", Kind::Forwarded),
            ("CONNECTION", Kind::Hop),
            ("Keep-Alive", Kind::Hop),
            ("Content-LENGTH", Kind::Hop),
            ("Content-Type", Kind::Other),
            ("x-Forwarded-For", Kind::XForwarded),
            ("X-Forwarded-Fox", Kind::Other),
            ("X-FORWARDED-HOST", Kind::XForwarded),
            ("X-Forwarded-Proto", Kind::XForwarded),
            ("Transfer-Encoding", Kind::Hop),
            ("Proxy-Authorization", Kind::Hop),
            ("PROXY-", Kind::Hop),
            ("Proxy", Kind::Other),
            ("X-Accel-Redirect", Kind::Accel),
            ("x-accel", Kind::Other),
        ] {
            assert_eq!(kind(name.as_bytes()), want, "{name}");
        }
    }
}
