//! A request head as HEADERS carry it, checked against RFC 9113 §8:
//! pseudo-header fields (§8.3.1), field names and values (§8.2.1),
//! connection-specific fields (§8.2.2), and trailers (§8.1).

use std::ops::Range;

use crate::hpack::{Block, Fields};

/// A request's head: its pseudo-header fields and the regular fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    fields: Fields,
    method: Range<u32>,
    scheme: Option<Range<u32>>,
    authority: Option<Range<u32>>,
    path: Option<Range<u32>>,
    protocol: Option<Range<u32>>,
    content_length: Option<u64>,
}

impl RequestHead {
    /// `:method`.
    pub fn method(&self) -> &[u8] {
        self.fields.slice(&self.method)
    }
    /// `:scheme` (absent for CONNECT).
    pub fn scheme(&self) -> Option<&[u8]> {
        self.scheme.as_ref().map(|r| self.fields.slice(r))
    }
    /// `:authority`, when the client sent it.
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.as_ref().map(|r| self.fields.slice(r))
    }
    /// `:path` (absent for CONNECT).
    pub fn path(&self) -> Option<&[u8]> {
        self.path.as_ref().map(|r| self.fields.slice(r))
    }
    /// `:protocol` (RFC 8441's extended CONNECT; never announced by us).
    pub fn protocol(&self) -> Option<&[u8]> {
        self.protocol.as_ref().map(|r| self.fields.slice(r))
    }
    /// The regular fields, in order (pseudo-headers removed).
    pub fn fields(&self) -> &Fields {
        &self.fields
    }
    /// `content-length`, when sent (its DATA is checked against it).
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }
    /// The heap the head holds.
    pub fn heap_bytes(&self) -> usize {
        self.fields.heap_bytes()
    }

    /// A head from decoded fields (pseudo-header fields first), checked
    /// as a HEADERS frame's are: for a caller's tests, and for a head that
    /// came another way. The error says which rule of §8 was broken.
    pub fn parse(fields: Fields) -> Result<RequestHead, &'static str> {
        request(&fields.to_block())
    }
}

/// Why a head is malformed (§8.1.1): each answered with RST_STREAM
/// PROTOCOL_ERROR.
pub(crate) type Malformed = &'static str;

/// A field name RFC 9113 §8.2.1 and RFC 9110 §5.1 allow: a token, in
/// lowercase.
fn name_ok(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| {
            matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\''
                | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
        })
}

/// A field value §8.2.1 allows: no NUL, CR or LF, no leading or trailing
/// space or tab.
fn value_ok(value: &[u8]) -> bool {
    if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return false;
    }
    !matches!(value.first(), Some(b' ' | b'\t')) && !matches!(value.last(), Some(b' ' | b'\t'))
}

/// Check the regular fields common to heads and trailers (§8.2).
fn check_regular(name: &[u8], value: &[u8]) -> Result<(), Malformed> {
    if !name_ok(name) {
        return Err(if name.iter().any(u8::is_ascii_uppercase) {
            "a field name in uppercase (RFC 9113 §8.2.1)"
        } else {
            "a field name that is not a token (RFC 9113 §8.2.1)"
        });
    }
    if !value_ok(value) {
        return Err("a field value with NUL, CR, LF or surrounding whitespace (RFC 9113 §8.2.1)");
    }
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            Err("a connection-specific field (RFC 9113 §8.2.2)")
        }
        b"te" if value != b"trailers" => Err("te other than \"trailers\" (RFC 9113 §8.2.2)"),
        _ => Ok(()),
    }
}

/// Build a request head from a decoded block (§8.3.1): checked in the
/// connection's scratch, then copied out in one allocation, its
/// pseudo-header fields left out of the fields (their values stay, for
/// [`RequestHead::method`] and the others).
pub(crate) fn request(fields: &Block) -> Result<RequestHead, Malformed> {
    let mut method = None;
    let mut scheme = None;
    let mut authority = None;
    let mut path = None;
    let mut protocol = None;
    let mut content_length: Option<u64> = None;
    let mut pseudo_count = 0;
    for i in 0..fields.len() {
        let (name, value) = fields.field(i);
        if let Some(pseudo) = name.strip_prefix(b":") {
            if i != pseudo_count {
                return Err("a pseudo-header field after a regular one (RFC 9113 §8.3)");
            }
            pseudo_count += 1;
            let slot = match pseudo {
                b"method" => &mut method,
                b"scheme" => &mut scheme,
                b"authority" => &mut authority,
                b"path" => &mut path,
                b"protocol" => &mut protocol,
                _ => return Err("an unknown or response pseudo-header field (RFC 9113 §8.3)"),
            };
            if slot.is_some() {
                return Err("a pseudo-header field twice (RFC 9113 §8.3.1)");
            }
            if !value_ok(value) {
                return Err("a pseudo-header value with NUL, CR or LF (RFC 9113 §8.2.1)");
            }
            *slot = Some(fields.value_range(i));
            continue;
        }
        check_regular(name, value)?;
        if name == b"content-length" {
            let n = parse_length(value).ok_or("a content-length that is not a number")?;
            if content_length.is_some_and(|m| m != n) {
                return Err("two different content-lengths");
            }
            content_length = Some(n);
        }
    }
    let method = method.ok_or("no :method (RFC 9113 §8.3.1)")?;
    let is_connect = fields.slice(&method) == b"CONNECT";
    if is_connect && protocol.is_none() {
        if scheme.is_some() || path.is_some() {
            return Err("CONNECT with :scheme or :path (RFC 9113 §8.5)");
        }
        if authority.is_none() {
            return Err("CONNECT without :authority (RFC 9113 §8.5)");
        }
    } else {
        if protocol.is_some() {
            return Err(":protocol, which we do not announce (RFC 8441 §4)");
        }
        match &path {
            None => return Err("no :path (RFC 9113 §8.3.1)"),
            Some(p) if p.is_empty() => return Err("an empty :path (RFC 9113 §8.3.1)"),
            _ => {}
        }
        if scheme.is_none() {
            return Err("no :scheme (RFC 9113 §8.3.1)");
        }
    }
    Ok(RequestHead {
        fields: fields.freeze_request(pseudo_count),
        method,
        scheme,
        authority,
        path,
        protocol,
        content_length,
    })
}

/// Check a trailer block (§8.1): no pseudo-header fields.
pub(crate) fn trailers(fields: &Block) -> Result<(), Malformed> {
    for (name, value) in fields.iter() {
        if name.starts_with(b":") {
            return Err("a pseudo-header field in trailers (RFC 9113 §8.1)");
        }
        check_regular(name, value)?;
    }
    Ok(())
}

fn parse_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{request, trailers};
    use crate::hpack::{Block, Fields};

    fn block(f: &[(&str, &str)]) -> Block {
        let mut out = Fields::default();
        for (n, v) in f {
            out.push(n.as_bytes(), v.as_bytes());
        }
        out.to_block()
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.example"),
        (":path", "/x"),
    ];

    #[test]
    fn a_whole_request_head_reads_back() {
        let mut f = GET.to_vec();
        f.push(("accept", "*/*"));
        f.push(("content-length", "5"));
        let head = request(&block(&f)).unwrap();
        assert_eq!(head.method(), b"GET");
        assert_eq!(head.scheme(), Some(&b"https"[..]));
        assert_eq!(head.authority(), Some(&b"a.example"[..]));
        assert_eq!(head.path(), Some(&b"/x"[..]));
        assert_eq!(head.fields().len(), 2);
        assert_eq!(head.fields().get(b"accept"), Some(&b"*/*"[..]));
        assert_eq!(head.content_length(), Some(5));
    }

    #[test]
    fn section_8_2_3_several_cookie_fields_are_one_joined_with_semicolons() {
        let mut f = GET.to_vec();
        f.extend([
            ("cookie", "a=1"),
            ("accept", "*/*"),
            ("cookie", "b=2"),
            ("cookie", ""),
            ("cookie", "c=3"),
        ]);
        let head = request(&block(&f)).unwrap();
        let got: Vec<(&[u8], &[u8])> = head.fields().iter().collect();
        assert_eq!(
            got,
            [
                (&b"cookie"[..], &b"a=1; b=2; ; c=3"[..]),
                (&b"accept"[..], &b"*/*"[..])
            ]
        );
        // The pseudo-header fields read as before.
        assert_eq!(head.path(), Some(&b"/x"[..]));
        assert_eq!(head.authority(), Some(&b"a.example"[..]));
        // One cookie stays as it came.
        let mut one = GET.to_vec();
        one.extend([("cookie", "a=1"), ("accept", "*/*")]);
        let head = request(&block(&one)).unwrap();
        assert_eq!(head.fields().get(b"cookie"), Some(&b"a=1"[..]));
        assert_eq!(head.fields().len(), 2);
    }

    fn rejects(f: &[(&str, &str)]) {
        assert!(request(&block(f)).is_err(), "{f:?} accepted");
    }

    #[test]
    fn section_8_3_1_each_missing_or_bad_pseudo_header_is_malformed() {
        rejects(&GET[1..]); // no :method
        rejects(&[GET[0], GET[1], GET[2]]); // no :path
        rejects(&[GET[0], GET[2], GET[3]]); // no :scheme
        rejects(&[GET[0], GET[1], GET[2], (":path", "")]);
        rejects(&[GET[0], GET[0], GET[1], GET[3]]); // twice
        rejects(&[GET[0], GET[1], GET[3], (":status", "200")]);
        rejects(&[GET[0], GET[1], GET[3], (":unknown", "x")]);
        rejects(&[GET[0], GET[1], ("accept", "*/*"), GET[3]]); // after regular
    }

    #[test]
    fn section_8_2_uppercase_and_connection_specific_fields_are_malformed() {
        for bad in [
            ("Accept", "x"),
            ("connection", "keep-alive"),
            ("keep-alive", "5"),
            ("proxy-connection", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("te", "gzip"),
            ("x-a", " padded"),
            ("x-a", "a\r\nb"),
            ("content-length", "x1"),
        ] {
            let mut f = GET.to_vec();
            f.push(bad);
            rejects(&f);
        }
        let mut f = GET.to_vec();
        f.push(("te", "trailers"));
        assert!(request(&block(&f)).is_ok());
    }

    #[test]
    fn section_8_5_connect_takes_authority_only() {
        assert!(request(&block(&[(":method", "CONNECT"), (":authority", "a:443")])).is_ok());
        rejects(&[
            (":method", "CONNECT"),
            (":authority", "a:443"),
            (":path", "/"),
        ]);
        rejects(&[(":method", "CONNECT")]);
    }

    #[test]
    fn section_8_1_trailers_carry_no_pseudo_header() {
        assert!(trailers(&block(&[("x-checksum", "1")])).is_ok());
        assert!(trailers(&block(&[(":path", "/")])).is_err());
    }
}
