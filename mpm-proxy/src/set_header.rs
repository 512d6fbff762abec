//! Fields a route sets on the requests it forwards, and hides from the
//! answers it passes back: nginx's `proxy_set_header` (the
//! `X-Real-IP $remote_addr` most nginx configurations carry) and
//! `proxy_hide_header`.
//!
//! A set field replaces the client's fields of that name; an empty value
//! removes them and adds nothing, as nginx's does. A value is text with
//! three variables, nginx's names: `$remote_addr` (the client's address),
//! `$scheme` (`http` or `https`) and `$host` (the client's `Host` without
//! its port, else the upstream's host). `Host` and the hop-by-hop fields
//! are refused here (the first has the route's `host`, the others are the
//! proxy's to write), and [`ProxyRoute::check`](crate::ProxyRoute::check)
//! refuses the `X-Forwarded-*` or `Forwarded` fields its `forwarded` writes.

use std::fmt;
use std::io::Write;
use std::net::IpAddr;

use crate::config::{is_token, MAX_TEXT};
use crate::error::{Error, Result};
use crate::headers::{kind, Kind};

/// The most fields one route may set, or hide.
pub const MAX_SET_HEADERS: usize = 64;

/// The variables a value may use, as the complaint lists them.
const VARIABLES: &str = "$remote_addr, $scheme, $host";

/// A field a route sets on every request it forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetHeader {
    name: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    RemoteAddr,
    Scheme,
    Host,
}

/// What a request gives the variables.
#[derive(Debug, Clone, Copy)]
pub struct Variables<'a> {
    /// The client's address.
    pub remote_addr: IpAddr,
    /// Did it come over TLS?
    pub tls: bool,
    /// The client's `Host`, if it sent one.
    pub host: Option<&'a str>,
    /// The upstream's host, when the client sent none.
    pub upstream_host: &'a str,
}

impl SetHeader {
    /// `name: value`, checked: a token for a name the route may set, a
    /// value of visible ASCII, spaces and the variables ([`Variables`]).
    pub fn new(name: &str, value: &str) -> Result<SetHeader> {
        let bad = |why: String| Error::config(format!("set_header {name}: {why}"));
        if name.len() > MAX_TEXT || !is_token(name) {
            return Err(bad(
                "not a field name (letters, digits, - and the like)".into()
            ));
        }
        if let Some(instead) = refused(name) {
            return Err(bad(format!("not one a route sets ({instead})")));
        }
        if value.len() > MAX_TEXT || !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            return Err(bad(format!(
                "the value: at most {MAX_TEXT} bytes of visible ASCII and spaces"
            )));
        }
        let mut parts = Vec::new();
        let mut rest = value;
        while let Some(at) = rest.find('$') {
            if at > 0 {
                parts.push(Part::Text(rest[..at].to_string()));
            }
            let var = &rest[at..];
            let (part, len) = [
                ("$remote_addr", Part::RemoteAddr),
                ("$scheme", Part::Scheme),
                ("$host", Part::Host),
            ]
            .into_iter()
            .find(|(v, _)| {
                var.starts_with(v)
                    && !var[v.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
            .map(|(v, p)| (p, v.len()))
            .ok_or_else(|| {
                bad(format!(
                    "'{}' is not a variable here: the variables are {VARIABLES}",
                    var.split(|c: char| !(c == '$' || c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or(var)
                ))
            })?;
            parts.push(part);
            rest = &var[len..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(SetHeader {
            name: name.to_string(),
            parts,
        })
    }

    /// The field's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Does it remove the field rather than set one (an empty value)?
    pub fn removes(&self) -> bool {
        self.parts.is_empty()
    }

    /// `Name: value\r\n` appended to `out`, the variables filled in;
    /// nothing for a field that [`removes`](Self::removes).
    pub fn write_into(&self, out: &mut Vec<u8>, v: &Variables<'_>) {
        if self.removes() {
            return;
        }
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(b": ");
        for p in &self.parts {
            match p {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                // Writing to a Vec cannot fail.
                Part::RemoteAddr => {
                    let _ = write!(out, "{}", v.remote_addr.to_canonical());
                }
                Part::Scheme => out.extend_from_slice(if v.tls { b"https" } else { b"http" }),
                Part::Host => out.extend_from_slice(host_without_port(v.host, v.upstream_host)),
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

impl fmt::Display for SetHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.name)?;
        if !self.parts.is_empty() {
            f.write_str(" ")?;
        }
        for p in &self.parts {
            match p {
                Part::Text(t) => f.write_str(t)?,
                Part::RemoteAddr => f.write_str("$remote_addr")?,
                Part::Scheme => f.write_str("$scheme")?,
                Part::Host => f.write_str("$host")?,
            }
        }
        Ok(())
    }
}

/// A field name a route's `hide_header` may list: a token.
pub(crate) fn check_hidden(name: &str) -> Result<()> {
    if name.len() > MAX_TEXT || !is_token(name) {
        return Err(Error::config(format!(
            "hide_header '{name}': not a field name (letters, digits, - and the like)"
        )));
    }
    Ok(())
}

/// nginx's `$host`: the client's `Host` without its port (an IPv6
/// literal keeps its brackets), else the upstream's host.
fn host_without_port<'a>(client: Option<&'a str>, upstream: &'a str) -> &'a [u8] {
    let Some(h) = client.filter(|h| !h.is_empty()) else {
        return upstream.as_bytes();
    };
    let end = match h.rfind(':') {
        Some(i) if !h[i..].contains(']') => i,
        _ => h.len(),
    };
    &h.as_bytes()[..end]
}

/// Why `name` may not be set (what to use instead), or `None`: the
/// proxy's own classification of field names ([`crate::headers`]).
fn refused(name: &str) -> Option<&'static str> {
    match kind(name.as_bytes()) {
        Kind::Host => Some("the route's `host` sets it"),
        Kind::Hop | Kind::Upgrade | Kind::Expect => {
            Some("hop-by-hop or framing: the proxy writes its own")
        }
        _ => None,
    }
}

/// Is `name` one the route's `forwarded` style writes itself (so that a
/// route setting it must have `forwarded = "off"`)?
pub(crate) fn written_by_forwarded(name: &str) -> bool {
    matches!(kind(name.as_bytes()), Kind::XForwarded | Kind::Forwarded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(h: &SetHeader, host: Option<&str>, tls: bool) -> String {
        let mut out = Vec::new();
        h.write_into(
            &mut out,
            &Variables {
                remote_addr: "::ffff:10.1.2.3".parse().unwrap(),
                tls,
                host,
                upstream_host: "10.0.0.2",
            },
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_value_fills_in_nginxs_variables() {
        let h = SetHeader::new("X-Real-IP", "$remote_addr").unwrap();
        assert_eq!(written(&h, None, false), "X-Real-IP: 10.1.2.3\r\n");
        let h = SetHeader::new("X-Origin", "$scheme://$host/ (via mpm)").unwrap();
        assert_eq!(
            written(&h, Some("shop.example:8443"), true),
            "X-Origin: https://shop.example/ (via mpm)\r\n"
        );
        assert_eq!(
            written(&h, Some("[2001:db8::1]"), false),
            "X-Origin: http://[2001:db8::1]/ (via mpm)\r\n"
        );
        assert_eq!(
            written(&h, None, false),
            "X-Origin: http://10.0.0.2/ (via mpm)\r\n"
        );
        assert_eq!(h.to_string(), "X-Origin: $scheme://$host/ (via mpm)");
    }

    #[test]
    fn an_empty_value_removes_the_field_and_writes_nothing() {
        let h = SetHeader::new("Accept-Encoding", "").unwrap();
        assert!(h.removes());
        assert_eq!(written(&h, None, false), "");
    }

    #[test]
    fn names_the_proxy_writes_and_values_that_could_split_a_head_are_refused() {
        for (name, value, says) in [
            ("Host", "x", "the route's `host`"),
            ("Connection", "close", "hop-by-hop"),
            ("Content-Length", "0", "hop-by-hop"),
            ("Proxy-Authorization", "x", "hop-by-hop"),
            ("X Real", "x", "not a field name"),
            ("", "x", "not a field name"),
            ("X-A", "a\r\nInjected: 1", "visible ASCII"),
            (
                "X-A",
                "$remote_port",
                "'$remote_port' is not a variable here",
            ),
            ("X-A", "$hostname", "'$hostname' is not a variable here"),
            ("X-A", "cost: 5$", "'$' is not a variable here"),
        ] {
            let e = SetHeader::new(name, value).unwrap_err().to_string();
            assert!(e.contains(says), "{name}: {value} => {e}");
            assert!(e.starts_with("set_header"), "{e}");
        }
        assert!(check_hidden("X-Powered-By").is_ok());
        assert!(check_hidden("X Powered").is_err());
    }
}
