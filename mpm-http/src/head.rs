//! Parsing a request head with `httparse`, and the limits and framing rules
//! that decide its status before any handler runs.

use std::cell::RefCell;
use std::mem::MaybeUninit;

use crate::byte_classes;
use crate::request::Version;

/// Header slots on the stack; the configured field limit is at most this.
pub(crate) const SLOTS: usize = MAX_REQUEST_FIELDS;

/// The most header fields a request may carry, whatever the settings.
pub const MAX_REQUEST_FIELDS: usize = 128;

/// The limits a head is checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) line: usize,
    pub(crate) fields: usize,
    pub(crate) field_size: usize,
    /// The largest body a handler may read as it arrives (streamed, or
    /// awaited by its future): `u64::MAX` for `--limit-request-body 0`
    /// (no limit).
    pub(crate) body: u64,
    /// The largest body the layer reads whole into memory for a handler:
    /// the configured limit, or [`WHOLE_BODY_CAP`](crate::WHOLE_BODY_CAP)
    /// for `--limit-request-body 0`; never unbounded.
    pub(crate) whole_body: u64,
}

impl Limits {
    /// The most bytes a head may take before it is refused with 431.
    pub(crate) fn max_head(&self) -> usize {
        // Saturating: limits built by hand may be anything.
        self.line
            .max(self.field_size)
            .saturating_add(2)
            .saturating_mul(8)
    }
}

/// How the body of a request is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A complete, valid head.
#[derive(Debug)]
pub(crate) struct Head<'h, 'b> {
    pub(crate) method: &'b str,
    pub(crate) target: &'b str,
    pub(crate) version: Version,
    pub(crate) headers: &'h [httparse::Header<'b>],
    /// Bytes the head took, final blank line included.
    pub(crate) len: usize,
    pub(crate) framing: Framing,
    /// The `Content-Length` it announced (`framing` is `None` for a length
    /// of 0 as for none).
    pub(crate) content_length: Option<u64>,
    /// What the client asked of the connection: `Some(true)` keep-alive,
    /// `Some(false)` close, `None` the version's default.
    pub(crate) connection: Option<bool>,
    pub(crate) expect_continue: bool,
}

impl Head<'_, '_> {
    /// Does the client want the connection kept after this exchange?
    pub(crate) fn wants_keep_alive(&self) -> bool {
        match (self.connection, self.version) {
            (Some(k), _) => k,
            (None, Version::Http11 | Version::Http2) => true,
            (None, Version::Http10) => false,
        }
    }
}

/// The outcome of parsing what has arrived so far.
#[derive(Debug)]
pub(crate) enum Parsed<'h, 'b> {
    /// The head is not complete yet (and within the limits so far).
    Partial,
    /// A complete head.
    Complete(Head<'h, 'b>),
    /// Refuse the request with this status and close.
    Reject(u16),
    /// A higher HTTP/1 minor version (`HTTP/1.2`), served as HTTP/1.1
    /// (RFC 9110 §2.5): the caller writes `1` over the minor digit at this
    /// offset of the buffer and parses again.
    NewerMinor(usize),
}

/// Parse a request head from the start of `buf`.
pub(crate) fn parse<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<httparse::Header<'b>>; SLOTS],
    limits: &Limits,
) -> Parsed<'h, 'b> {
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return check_partial(buf, limits),
        Err(httparse::Error::TooManyHeaders) => return Parsed::Reject(431),
        Err(httparse::Error::Version) => {
            return match version_status(buf) {
                VersionCheck::Reject(status) => Parsed::Reject(status),
                VersionCheck::NewerMinor(at) => Parsed::NewerMinor(at),
                // `HTTP/0` may yet become `HTTP/0.9`: its status (505, not
                // 400) must not depend on how the bytes arrive.
                VersionCheck::Wait => check_partial(buf, limits),
            };
        }
        Err(_) => return Parsed::Reject(400),
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Parsed::Reject(400);
    };
    let version = if minor == 1 {
        Version::Http11
    } else {
        Version::Http10
    };
    // The request line as sent: method SP target SP HTTP/1.x
    if method.len() + target.len() + 10 > limits.line {
        return Parsed::Reject(414);
    }
    let headers = req.headers;
    if headers.len() > limits.fields || len > limits.max_head() {
        return Parsed::Reject(431);
    }
    if !valid_target(method, target) {
        return Parsed::Reject(400);
    }
    let mut hosts = 0;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut connection = None;
    let mut expect_continue = false;
    for h in headers.iter() {
        if h.name.len() + h.value.len() + 2 > limits.field_size {
            return Parsed::Reject(431);
        }
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            // RFC 9112 §3.2: a Host that is not `uri-host [ ":" port ]` is 400.
            if !valid_host(trim(h.value)) {
                return Parsed::Reject(400);
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            // Repeats (in one field or several) must agree, or the framing is ambiguous.
            for part in h.value.split(|&b| b == b',') {
                let Some(n) = parse_decimal(trim(part)) else {
                    return Parsed::Reject(400);
                };
                if length.is_some_and(|l| l != n) {
                    return Parsed::Reject(400);
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if transfer_encoding {
                return Parsed::Reject(400);
            }
            transfer_encoding = true;
            // Only plain `chunked` is understood; anything else cannot be framed.
            if !trim(h.value).eq_ignore_ascii_case(b"chunked") {
                return Parsed::Reject(400);
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let t = trim(token);
                if t.eq_ignore_ascii_case(b"close") {
                    connection = Some(false);
                } else if t.eq_ignore_ascii_case(b"keep-alive") && connection.is_none() {
                    connection = Some(true);
                }
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if trim(h.value).eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Parsed::Reject(417);
            }
        }
    }
    if version == Version::Http11 && hosts != 1 || hosts > 1 {
        return Parsed::Reject(400);
    }
    if transfer_encoding && (length.is_some() || version == Version::Http10) {
        // Both framings at once is the classic smuggling shape.
        return Parsed::Reject(400);
    }
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(0)) | (false, None) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
    };
    Parsed::Complete(Head {
        method,
        target,
        version,
        headers,
        len,
        framing,
        content_length: length,
        connection,
        expect_continue,
    })
}

/// The most fields a [`Spans`] keeps; a head with more is parsed again.
pub(crate) const KEPT_FIELDS: usize = 16;

/// A complete head as offsets into the bytes it was parsed from, with what
/// its checks found: the event loop's prefetch parses a head to ask the
/// handler whether it blocks, and the step that follows on the same bytes
/// makes the head again from these instead of parsing it twice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spans {
    method: (u32, u32),
    target: (u32, u32),
    version: Version,
    /// Each field's name and value, as `(start, end)` pairs (a head is
    /// far shorter than 4 GiB; a longer one is parsed again).
    fields: [[(u32, u32); 2]; KEPT_FIELDS],
    count: usize,
    len: usize,
    framing: Framing,
    content_length: Option<u64>,
    connection: Option<bool>,
    expect_continue: bool,
}

impl Spans {
    /// Spans of no head, to be filled by [`keep`](Self::keep).
    pub(crate) const fn new() -> Spans {
        Spans {
            method: (0, 0),
            target: (0, 0),
            version: Version::Http11,
            fields: [[(0, 0); 2]; KEPT_FIELDS],
            count: 0,
            len: 0,
            framing: Framing::None,
            content_length: None,
            connection: None,
            expect_continue: false,
        }
    }

    /// Keep where `head`'s parts lie in `data`, the bytes it was parsed
    /// from (written in place: these are a few hundred bytes). False, and
    /// nothing to rely on, for a head with more than [`KEPT_FIELDS`] fields.
    pub(crate) fn keep(&mut self, head: &Head<'_, '_>, data: &[u8]) -> bool {
        if head.headers.len() > KEPT_FIELDS {
            return false;
        }
        let span = |part: &[u8]| {
            let start = (part.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
            let end = start.checked_add(part.len())?;
            if end > data.len() {
                return None;
            }
            Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?))
        };
        for (kept, h) in self.fields.iter_mut().zip(head.headers) {
            let (Some(name), Some(value)) = (span(h.name.as_bytes()), span(h.value)) else {
                return false;
            };
            *kept = [name, value];
        }
        let (Some(method), Some(target)) =
            (span(head.method.as_bytes()), span(head.target.as_bytes()))
        else {
            return false;
        };
        self.method = method;
        self.target = target;
        self.version = head.version;
        self.count = head.headers.len();
        self.len = head.len;
        self.framing = head.framing;
        self.content_length = head.content_length;
        self.connection = head.connection;
        self.expect_continue = head.expect_continue;
        true
    }

    /// The head again, its fields written into `into`: `data` must be the
    /// bytes it was kept from, unchanged. `None` if they do not fit.
    pub(crate) fn head<'h, 'b>(
        &self,
        data: &'b [u8],
        into: &'h mut [httparse::Header<'b>; KEPT_FIELDS],
    ) -> Option<Head<'h, 'b>> {
        let bytes = |(start, end): (u32, u32)| data.get(start as usize..end as usize);
        // One check of the whole head rather than one per part: a head is
        // ASCII but for the rare obs-text in a value, which makes each
        // part checked alone.
        let whole = data
            .get(..self.len)
            .and_then(|h| std::str::from_utf8(h).ok());
        let text = |span: (u32, u32)| match whole {
            Some(whole) => whole.get(span.0 as usize..span.1 as usize),
            None => std::str::from_utf8(bytes(span)?).ok(),
        };
        for (h, &[name, value]) in into.iter_mut().zip(self.fields.get(..self.count)?) {
            h.name = text(name)?;
            h.value = bytes(value)?;
        }
        Some(Head {
            method: text(self.method)?,
            target: text(self.target)?,
            version: self.version,
            headers: &into[..self.count],
            len: self.len,
            framing: self.framing,
            content_length: self.content_length,
            connection: self.connection,
            expect_continue: self.expect_continue,
        })
    }
}

/// Check the limits on a head that has not fully arrived, so that an
/// endless request line or header is refused without waiting for its end.
fn check_partial(buf: &[u8], limits: &Limits) -> Parsed<'static, 'static> {
    let mut lines = buf.split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    // A request may be preceded by empty lines; skip them like httparse does.
    let mut first = first;
    let mut rest_lines = lines;
    while first.is_empty() || first == b"\r" {
        match rest_lines.next() {
            Some(l) => first = l,
            None => return Parsed::Partial,
        }
    }
    if first.len() > limits.line + 1 {
        return Parsed::Reject(414);
    }
    for line in rest_lines {
        if line.len() > limits.field_size + 1 {
            return Parsed::Reject(431);
        }
    }
    if buf.len() > limits.max_head() {
        return Parsed::Reject(431);
    }
    Parsed::Partial
}

/// What to make of a version httparse refused.
#[derive(Debug, PartialEq, Eq)]
enum VersionCheck {
    /// The line has not ended and what came of the version could still be one.
    Wait,
    /// 505 for a well-formed version of another major (`HTTP/2.0`,
    /// `HTTP/0.9`), 400 for anything else in the version's place.
    Reject(u16),
    /// `HTTP/1.x` with x above 1, its minor digit at this offset.
    NewerMinor(usize),
}

fn version_status(whole: &[u8]) -> VersionCheck {
    // Empty lines before a request are skipped, as httparse does.
    let mut buf = whole;
    while let Some(rest) = buf
        .strip_prefix(b"\r\n")
        .or_else(|| buf.strip_prefix(b"\n"))
    {
        buf = rest;
    }
    let skipped = whole.len() - buf.len();
    let raw_line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    // method SP target SP version: the version is all after the second space.
    let version_of = |l: &'_ [u8]| -> Vec<u8> {
        l.splitn(3, |&b| b == b' ')
            .nth(2)
            .unwrap_or_default()
            .to_vec()
    };
    // `d` is any digit.
    let fits = |token: &[u8], shape: &[u8]| {
        token.len() <= shape.len()
            && token.iter().zip(shape).all(|(&b, &want)| {
                if want == b'd' {
                    b.is_ascii_digit()
                } else {
                    b == want
                }
            })
    };
    if !buf.contains(&b'\n') && fits(&version_of(raw_line), b"HTTP/d.d\r") {
        return VersionCheck::Wait;
    }
    let line = raw_line.strip_suffix(b"\r").unwrap_or(raw_line);
    let version = version_of(line);
    if version.len() != 8 || !fits(&version, b"HTTP/d.d") {
        return VersionCheck::Reject(400);
    }
    if version.starts_with(b"HTTP/1.") {
        // The version is the line's last 8 bytes; its minor digit the last.
        return VersionCheck::NewerMinor(skipped + line.len() - 1);
    }
    VersionCheck::Reject(505)
}

/// Is `target` one of RFC 9112 §3.2's four forms, the one `method` may use?
/// Origin form (`/path?query`) for any method but CONNECT; absolute form
/// (`http://host/path`); authority form (`host:port`) for CONNECT alone;
/// asterisk form (`*`) for OPTIONS alone. None has a fragment. Characters
/// that RFC 3986 leaves out of a URI but browsers send unencoded (`{}|^`,
/// backquote, brackets in a query, UTF-8) are let through, as nginx and
/// httpd do; `"`, `<` and `>`, which browsers always encode, are not.
pub(crate) fn valid_target(method: &str, target: &str) -> bool {
    if method == "CONNECT" {
        return valid_authority(target.as_bytes(), true);
    }
    if target == "*" {
        return method == "OPTIONS";
    }
    if target
        .bytes()
        .any(|b| matches!(b, b'#' | b'"' | b'<' | b'>'))
    {
        return false;
    }
    if target.starts_with('/') {
        return true;
    }
    // absolute-URI = scheme ":" hier-part [ "?" query ]
    let Some((scheme, rest)) = target.split_once(':') else {
        return false;
    };
    let mut chars = scheme.bytes();
    if !chars.next().is_some_and(|b| b.is_ascii_alphabetic())
        || !chars.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return false;
    }
    if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
        // "//" authority, which for http has no userinfo (RFC 9110 §4.2.4).
        let Some(rest) = rest.strip_prefix("//") else {
            return false;
        };
        let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
        return !authority.is_empty() && valid_authority(authority.as_bytes(), false);
    }
    true
}

/// The longest Host value remembered as valid.
const REMEMBERED_HOST: usize = 64;

thread_local! {
    /// The last Host value found valid on this thread: a client sends the
    /// same one on every request, and the check was 3% of a pipelined loop.
    /// Validity depends on the bytes alone, so remembering changes no answer.
    static LAST_VALID_HOST: RefCell<([u8; REMEMBERED_HOST], usize)> =
        const { RefCell::new(([0; REMEMBERED_HOST], usize::MAX)) };
}

/// Is `v` a valid Host value (`uri-host [ ":" port ]`)?
pub(crate) fn valid_host(v: &[u8]) -> bool {
    let seen = LAST_VALID_HOST.with(|last| {
        let last = last.borrow();
        last.0.get(..last.1) == Some(v)
    });
    if seen {
        return true;
    }
    let valid = valid_authority(v, false);
    if valid && v.len() <= REMEMBERED_HOST {
        LAST_VALID_HOST.with(|last| {
            let mut last = last.borrow_mut();
            last.0[..v.len()].copy_from_slice(v);
            last.1 = v.len();
        });
    }
    valid
}

/// `uri-host [ ":" port ]` (RFC 3986 §3.2.2), as a `Host` field or the
/// authority of a target; with `port_required`, `uri-host ":" port` (a
/// CONNECT target). The host may be empty (RFC 9112 §3.2).
fn valid_authority(v: &[u8], port_required: bool) -> bool {
    let (host_ok, port) = if let Some(inner) = v.strip_prefix(b"[") {
        let Some(close) = inner.iter().position(|&b| b == b']') else {
            return false;
        };
        (valid_ip_literal(&inner[..close]), &inner[close + 1..])
    } else {
        let end = v.iter().position(|&b| b == b':').unwrap_or(v.len());
        (
            v[..end]
                .iter()
                .enumerate()
                .all(|(i, &b)| reg_name_byte(&v[..end], i, b)),
            &v[end..],
        )
    };
    if !host_ok {
        return false;
    }
    match port.strip_prefix(b":") {
        None => port.is_empty() && !port_required,
        Some(digits) => {
            digits.iter().all(u8::is_ascii_digit) && !(port_required && digits.is_empty())
        }
    }
}

/// The bytes a reg-name holds as themselves: unreserved and sub-delims
/// (RFC 3986 §3.2.2). A table, as every request's Host is checked.
const REG_NAME: [bool; 256] = byte_classes::alphanumeric_and(b"-._~!$&'()*+,;=");

/// May byte `b`, at `i` of `host`, stand in a reg-name: unreserved,
/// sub-delims, or part of a `%XX`?
fn reg_name_byte(host: &[u8], i: usize, b: u8) -> bool {
    let hex = |j: usize| host.get(j).is_some_and(u8::is_ascii_hexdigit);
    REG_NAME[usize::from(b)] || (b == b'%' && hex(i + 1) && hex(i + 2))
}

/// The inside of `[...]`: an IPv6 address, or `v` HEX+ "." ... (IPvFuture).
fn valid_ip_literal(inner: &[u8]) -> bool {
    if let Some(future) = inner
        .strip_prefix(b"v")
        .or_else(|| inner.strip_prefix(b"V"))
    {
        let Some(dot) = future.iter().position(|&b| b == b'.') else {
            return false;
        };
        return dot > 0
            && future[..dot].iter().all(u8::is_ascii_hexdigit)
            && future.len() > dot + 1
            // unreserved / sub-delims / ":" (RFC 3986 §3.2.2)
            && future[dot + 1..]
                .iter()
                .all(|&b| REG_NAME[usize::from(b)] || b == b':');
    }
    std::str::from_utf8(inner).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok())
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|&c| c != b' ' && c != b'\t')
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| c != b' ' && c != b'\t')
        .map_or(start, |i| i + 1);
    &b[start..end]
}

fn parse_decimal(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 18 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    b.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        line: 8190,
        fields: 100,
        field_size: 8190,
        body: 1 << 20,
        whole_body: 1 << 20,
    };

    fn status(input: &[u8]) -> Result<Framing, Option<u16>> {
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        match parse(input, &mut slots, &LIMITS) {
            Parsed::Complete(h) => Ok(h.framing),
            Parsed::Partial => Err(None),
            Parsed::Reject(s) => Err(Some(s)),
            Parsed::NewerMinor(at) => panic!("newer minor at {at}"),
        }
    }

    #[test]
    fn a_head_made_again_from_its_spans_is_the_head_parsed() {
        let many: String = (0..KEPT_FIELDS)
            .map(|i| format!("X-{i}: {i}\r\n"))
            .collect();
        let heads: [Vec<u8>; 5] = [
            b"GET /a?b HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
            b"\r\nPOST /p HTTP/1.0\r\nHost: t\r\nContent-Length: 3\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\nabc".to_vec(),
            // Not UTF-8 as a whole (obs-text in a value): parts checked alone.
            b"GET /\xc3\xa9 HTTP/1.1\r\nHost: t\r\nX-Obs: \xff\r\n\r\n".to_vec(),
            b"PUT /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n".to_vec(),
            format!("GET / HTTP/1.1\r\nHost: t\r\n{many}\r\n").into_bytes(),
        ];
        for data in &heads {
            let text = String::from_utf8_lossy(data);
            let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
            let Parsed::Complete(parsed) = parse(data, &mut slots, &LIMITS) else {
                panic!("{text:?} is a complete head");
            };
            let mut spans = Spans::new();
            if !spans.keep(&parsed, data) {
                assert!(parsed.headers.len() > KEPT_FIELDS, "{text:?}");
                continue;
            }
            let mut kept = [httparse::EMPTY_HEADER; KEPT_FIELDS];
            let made = spans.head(data, &mut kept).expect("the same bytes");
            assert_eq!(format!("{made:?}"), format!("{parsed:?}"), "{text:?}");
        }
    }

    /// A request the layer parsed answers `content_length` and
    /// `is_chunked` from the parse (the request below has no fields of
    /// its own to scan), a length of 0 as announced.
    #[test]
    fn a_parsed_requests_framing_comes_from_its_parse() {
        use crate::request::{BodyFraming, Request};
        let cases: [(&[u8], Option<u64>, bool); 4] = [
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", None, false),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                Some(0),
                false,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n",
                Some(12),
                false,
            ),
            (
                b"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                None,
                true,
            ),
        ];
        for (data, length, chunked) in cases {
            let text = String::from_utf8_lossy(data);
            let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
            let Parsed::Complete(head) = parse(data, &mut slots, &LIMITS) else {
                panic!("{text:?} is a complete head");
            };
            let mut req = Request::for_test("GET", "/", Version::Http11, &[], b"");
            req.framing = BodyFraming::of(&head);
            assert_eq!(req.content_length(), length, "{text:?}");
            assert_eq!(req.is_chunked(), chunked, "{text:?}");
        }
    }

    /// The version a head is served as, after any rewrite.
    fn served_as(input: &[u8]) -> Result<Version, u16> {
        let mut buf = input.to_vec();
        loop {
            let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
            match parse(&buf, &mut slots, &LIMITS) {
                Parsed::Complete(h) => return Ok(h.version),
                Parsed::NewerMinor(at) => buf[at] = b'1',
                Parsed::Reject(s) => return Err(s),
                Parsed::Partial => return Err(0),
            }
        }
    }

    #[test]
    fn a_simple_get_has_no_body() {
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
            Ok(Framing::None)
        );
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), Err(Some(400)));
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Err(Some(400))
        );
        assert_eq!(status(b"GET / HTTP/1.0\r\n\r\n"), Ok(Framing::None));
    }

    #[test]
    fn content_length_and_chunked_together_are_refused() {
        let r = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(status(r), Err(Some(400)));
    }

    #[test]
    fn disagreeing_content_lengths_are_refused_and_agreeing_ones_accepted() {
        let bad = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
        assert_eq!(status(bad), Err(Some(400)));
        let ok = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\n";
        assert_eq!(status(ok), Ok(Framing::Length(3)));
        let junk = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\n";
        assert_eq!(status(junk), Err(Some(400)));
    }

    #[test]
    fn transfer_codings_other_than_chunked_are_refused() {
        let r = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(status(r), Err(Some(400)));
    }

    #[test]
    fn other_majors_get_505_newer_minors_are_served_as_1_1_and_garbage_400() {
        assert_eq!(status(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"), Err(Some(505)));
        assert_eq!(status(b"GET / HTTP/3.1\r\nHost: a\r\n\r\n"), Err(Some(505)));
        assert_eq!(status(b"GET / HTTP/0.9\r\nHost: a\r\n\r\n"), Err(Some(505)));
        for minor in [b"2", b"5", b"9"] {
            let mut r = b"\r\nGET /x HTTP/1.".to_vec();
            r.extend(minor);
            r.extend(b"\r\nHost: a\r\n\r\n");
            assert_eq!(served_as(&r), Ok(Version::Http11));
        }
        assert_eq!(served_as(b"GET / HTTP/1.10\r\nHost: a\r\n\r\n"), Err(400));
        assert_eq!(status(b"GET / FOO/1.1\r\nHost: a\r\n\r\n"), Err(Some(400)));
    }

    #[test]
    fn host_must_be_uri_host_and_an_optional_port() {
        let host = |v: &str| status(format!("GET / HTTP/1.1\r\nHost: {v}\r\n\r\n").as_bytes());
        for good in [
            "example.com",
            "example.com:8080",
            "example.com:",
            "127.0.0.1:80",
            "[::1]:80",
            "[2001:db8::7]",
            "[v1.fe80::a+en1]",
            "ex%41mple.com",
            "a-b_c~d!$&'()*+,;=",
            "",
        ] {
            assert_eq!(host(good), Ok(Framing::None), "Host: {good:?}");
        }
        for bad in [
            "exa mple.com",
            "a/b",
            "a@b",
            "a:b",
            "a:80:81",
            "[::1",
            "[::1]x",
            "[notv6]",
            "ex%4",
            "ex%zzample",
            "a\\b",
            "a?b",
            "a#b",
        ] {
            assert_eq!(host(bad), Err(Some(400)), "Host: {bad:?}");
        }
    }

    #[test]
    fn a_remembered_valid_host_never_lets_an_invalid_one_through() {
        let host = |v: &str| status(format!("GET / HTTP/1.1\r\nHost: {v}\r\n\r\n").as_bytes());
        // Each bad value right after a good one that is its prefix or equal
        // in length, on the same thread (where the last good one is kept).
        for (good, bad) in [
            ("a:80", "a:80:81"),
            ("example.com", "example.co/"),
            ("[::1]", "[::1]x"),
            ("ex%41", "ex%4"),
        ] {
            assert_eq!(host(good), Ok(Framing::None), "Host: {good:?}");
            assert_eq!(host(bad), Err(Some(400)), "Host: {bad:?} after {good:?}");
            assert_eq!(host(good), Ok(Framing::None), "Host: {good:?} again");
        }
        let long = "h".repeat(REMEMBERED_HOST + 10);
        assert_eq!(
            host(&long),
            Ok(Framing::None),
            "too long to remember, still valid"
        );
        assert_eq!(
            host(&format!("{long} ")),
            Ok(Framing::None),
            "trailing space is trimmed"
        );
        assert_eq!(host(&format!("{long}/")), Err(Some(400)));
    }

    #[test]
    fn targets_must_take_one_of_the_four_forms_the_method_may_use() {
        let t = |m: &str, target: &str| {
            status(format!("{m} {target} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        };
        for (m, good) in [
            ("GET", "/"),
            ("GET", "/a/b?c=d&e[]=1|2"),
            ("GET", "/caf\u{e9}"),
            ("GET", "http://a/b?c"),
            ("GET", "HTTPS://a:443"),
            ("GET", "urn:isbn:0451450523"),
            ("OPTIONS", "*"),
            ("CONNECT", "example.com:443"),
            ("CONNECT", "[::1]:8443"),
        ] {
            assert_eq!(t(m, good), Ok(Framing::None), "{m} {good}");
        }
        for (m, bad) in [
            ("GET", "/a#frag"),
            ("GET", "http://a/b#frag"),
            ("GET", "*"),
            ("GET", "a/b"),
            ("GET", "1http://a/"),
            ("GET", "http:/a/"),
            ("GET", "http://user@a/"),
            ("GET", "http:///x"),
            ("GET", "/\"quoted\""),
            ("GET", "/<script>"),
            ("CONNECT", "/"),
            ("CONNECT", "example.com"),
            ("CONNECT", "example.com:"),
            ("CONNECT", "*"),
        ] {
            assert_eq!(t(m, bad), Err(Some(400)), "{m} {bad}");
        }
    }

    #[test]
    fn long_lines_and_fields_get_414_and_431_before_they_end() {
        let mut line = b"GET /".to_vec();
        line.extend(std::iter::repeat_n(b'a', 9000));
        assert_eq!(status(&line), Err(Some(414)));
        let mut field = b"GET / HTTP/1.1\r\nX: ".to_vec();
        field.extend(std::iter::repeat_n(b'a', 9000));
        assert_eq!(status(&field), Err(Some(431)));
    }

    #[test]
    fn too_many_fields_get_431() {
        let mut r = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for i in 0..150 {
            r.extend(format!("X-{i}: y\r\n").as_bytes());
        }
        r.extend(b"\r\n");
        assert_eq!(status(&r), Err(Some(431)));
    }

    #[test]
    fn smuggling_shapes_are_refused() {
        for bad in [
            &b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\0\r\n\r\n",
        ] {
            assert_eq!(
                status(bad),
                Err(Some(400)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_unknown_version_gets_505_however_the_line_arrives() {
        for cut in 12..16 {
            assert_eq!(status(&b"GET / HTTP/0.9\r\n"[..cut]), Err(None), "{cut}");
        }
        assert_eq!(status(b"GET / HTTP/0.9\r\nHost: a\r\n\r\n"), Err(Some(505)));
        assert_eq!(status(b"GET / HTTP/0x"), Err(Some(400)));
        // Found by fuzzing: the version is the third part, not the last.
        assert_eq!(
            status(b"GET /one HTTPPOST /3 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Err(Some(400))
        );
        assert_eq!(status(b"GET /one HTTPPO"), Err(Some(400)));
    }

    #[test]
    fn partial_heads_wait_for_more() {
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\n"), Err(None));
    }

    #[test]
    fn connection_tokens_decide_keep_alive() {
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let Parsed::Complete(h) = parse(
            b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            &mut slots,
            &LIMITS,
        ) else {
            panic!()
        };
        assert!(h.wants_keep_alive());
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let Parsed::Complete(h) = parse(
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            &mut slots,
            &LIMITS,
        ) else {
            panic!()
        };
        assert!(!h.wants_keep_alive());
    }
}
