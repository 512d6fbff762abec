//! A look at a connection's first bytes before rustls sees them: a plain
//! HTTP request sent to a TLS port is answered in plain HTTP (as nginx's
//! "plain HTTP request was sent to HTTPS port"), and a ClientHello naming a
//! server no certificate has is refused with the `unrecognized_name` alert
//! RFC 6066 asks for.

/// What the first bytes are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum First<'a> {
    /// Not enough yet to tell.
    NeedMore,
    /// Looks like an HTTP request line (an upper-case method).
    PlainHttp,
    /// A ClientHello in one record, naming this server (or none; IP
    /// literals, which RFC 6066 forbids there, count as none).
    Hello(Option<&'a str>),
    /// Something else: rustls decides (and refuses it).
    Other,
}

/// The `unrecognized_name` fatal alert, in a plaintext TLS 1.2 record (no
/// keys exist yet; a TLS 1.3 client reads it the same way).
pub(crate) const UNRECOGNIZED_NAME: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 112];

/// Look at the first bytes received.
pub(crate) fn first(data: &[u8]) -> First<'_> {
    let Some(&b0) = data.first() else {
        return First::NeedMore;
    };
    if b0.is_ascii_uppercase() {
        return First::PlainHttp;
    }
    if b0 != 0x16 {
        return First::Other;
    }
    if data.len() < 5 {
        return First::NeedMore;
    }
    let len = usize::from(u16::from_be_bytes([data[3], data[4]]));
    if data.len() < 5 + len {
        // A ClientHello fits in one record (rustls's own limit); one that
        // does not is rustls's to refuse.
        return if len > 16 * 1024 {
            First::Other
        } else {
            First::NeedMore
        };
    }
    match server_name(&data[5..5 + len]) {
        Some(name) => First::Hello(name),
        None => First::Other,
    }
}

/// The host name of a ClientHello handshake message: `Some(None)` for a
/// hello without one, `None` if it does not parse.
fn server_name(msg: &[u8]) -> Option<Option<&str>> {
    let mut r = Reader(msg);
    if r.u8()? != 1 {
        return None; // not a ClientHello
    }
    let len = r.u24()?;
    let body = r.take(len)?;
    let mut r = Reader(body);
    r.take(2 + 32)?; // version, random
    let sid = usize::from(r.u8()?);
    r.take(sid)?;
    let suites = r.u16()?;
    r.take(suites)?;
    let comp = usize::from(r.u8()?);
    r.take(comp)?;
    if r.0.is_empty() {
        return Some(None); // no extensions
    }
    let exts = r.u16()?;
    let mut exts = Reader(r.take(exts)?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.u16()?;
        let data = exts.take(data)?;
        if kind != 0 {
            continue;
        }
        let mut list = Reader(data);
        let len = list.u16()?;
        let mut list = Reader(list.take(len)?);
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let n = list.u16()?;
            let name = list.take(n)?;
            if name_type == 0 {
                let name = std::str::from_utf8(name).ok()?;
                if name.parse::<std::net::IpAddr>().is_ok() {
                    return Some(None);
                }
                return Some(Some(name));
            }
        }
        return Some(None);
    }
    Some(None)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record as rustls's client writes one.
    fn hello(name: &str) -> Vec<u8> {
        use std::sync::Arc;
        let roots = rustls::RootCertStore::empty();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(crate::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls_pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn the_server_name_of_a_real_hello_is_found() {
        let h = hello("www.example.com");
        assert_eq!(first(&h), First::Hello(Some("www.example.com")));
        assert_eq!(first(&h[..3]), First::NeedMore);
        assert_eq!(first(&h[..h.len() - 1]), First::NeedMore);
        assert_eq!(first(&hello("127.0.0.1")), First::Hello(None));
    }

    #[test]
    fn plain_http_and_garbage_are_told_apart() {
        assert_eq!(first(b"GET / HTTP/1.1\r\n"), First::PlainHttp);
        assert_eq!(first(b"\x00\x01garbage"), First::Other);
        assert_eq!(first(b""), First::NeedMore);
        // A handshake record that is no ClientHello.
        assert_eq!(first(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]), First::Other);
    }
}
