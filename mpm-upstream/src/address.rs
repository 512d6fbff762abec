//! [`Upstream`]: where requests go, parsed from an `http://` or `https://`
//! URL, its host name resolved when the server starts or reloads.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::tls::TlsConfig;
use crate::Target;

/// An upstream server: scheme, host, port, an optional path, and the
/// addresses its host name resolved to.
///
/// Name resolution (`getaddrinfo`) blocks, so it is done by
/// [`resolve`](Upstream::resolve) when the server starts and when it
/// reloads, never per request: a host whose addresses change is followed on
/// reload. An IP address needs no resolving.
///
/// ```
/// use mpm_upstream::Upstream;
///
/// let u: Upstream = "https://api.example.com/v1".parse().unwrap();
/// assert_eq!((u.host(), u.port(), u.path()), ("api.example.com", 443, Some("/v1")));
/// assert!(u.is_tls());
/// assert_eq!(u.authority(), "api.example.com");
///
/// let mut u: Upstream = "http://127.0.0.1:8080".parse().unwrap();
/// u.resolve().unwrap();
/// assert_eq!(u.addrs(), &["127.0.0.1:8080".parse().unwrap()]);
/// assert_eq!(u.path(), None);
/// ```
#[derive(Clone)]
pub struct Upstream {
    url: String,
    tls: Option<TlsConfig>,
    host: String,
    port: u16,
    path: Option<String>,
    addrs: Vec<SocketAddr>,
}

impl Upstream {
    /// Parse `url`: `http://HOST[:PORT][/PATH]` or `https://...`; the port
    /// defaults to 80 or 443, an IPv6 address is written in brackets. An
    /// `https` upstream's certificate is verified against the Mozilla roots
    /// until [`set_ca_file`](Upstream::set_ca_file) says otherwise.
    pub fn parse(url: &str) -> Result<Upstream> {
        let bad = |why: &str| Error::Url(format!("the upstream URL {url:?} {why}"));
        let (tls, rest) = if let Some(rest) = strip_prefix_ignore_case(url, "http://") {
            (false, rest)
        } else if let Some(rest) = strip_prefix_ignore_case(url, "https://") {
            (true, rest)
        } else {
            return Err(bad(
                "does not start with http:// or https:// (write it as http://HOST[:PORT][/PATH])",
            ));
        };
        if url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(bad("has a space or a control character in it"));
        }
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        if path.is_some_and(|p| p.contains('#')) {
            return Err(bad("has a #fragment, which is never sent to a server"));
        }
        let path = path.map(|p| {
            if p.starts_with('?') {
                format!("/{p}")
            } else {
                p.to_string()
            }
        });
        if authority.contains('@') {
            return Err(bad(
                "has user:password@ in it, which this client does not send (set an Authorization header instead)",
            ));
        }
        let (host, port) = if let Some(after) = authority.strip_prefix('[') {
            let Some((v6, tail)) = after.split_once(']') else {
                return Err(bad("has a [ with no ] around its IPv6 address"));
            };
            if v6.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("has something between [ ] that is not an IPv6 address"));
            }
            let port = match tail {
                "" => None,
                t => Some(
                    t.strip_prefix(':')
                        .ok_or_else(|| bad("has text after its ]"))?,
                ),
            };
            (v6.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (authority.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(bad("has a port that is not a number from 1 to 65535")),
            },
        };
        let addrs = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => Vec::new(),
        };
        Ok(Upstream {
            url: url.to_string(),
            tls: tls.then(TlsConfig::webpki_roots),
            host: host.to_ascii_lowercase(),
            port,
            path,
            addrs,
        })
    }

    /// Look the host name up (blocking: call at start and on reload, not
    /// per request). An IP address is its own answer. Resolving to no
    /// address at all is an error; on an error the addresses resolved
    /// before are kept.
    pub fn resolve(&mut self) -> Result<()> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            self.addrs = vec![SocketAddr::new(ip, self.port)];
            return Ok(());
        }
        let found: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| {
                Error::Url(format!(
                    "the upstream host {:?} of {} could not be resolved: {e} (check the name, or give an IP address)",
                    self.host, self.url
                ))
            })?
            .collect();
        if found.is_empty() {
            return Err(Error::Url(format!(
                "the upstream host {:?} of {} resolved to no address",
                self.host, self.url
            )));
        }
        self.addrs = found;
        Ok(())
    }

    /// Connect to `addr` only (one address of several its host name has,
    /// found elsewhere), as if [`resolve`](Upstream::resolve) had found it.
    pub fn pin(&mut self, addr: SocketAddr) {
        self.addrs = vec![addr];
    }

    /// The addresses [`resolve`](Upstream::resolve) found (or the IP
    /// address given); empty for a host name not resolved yet.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Whether requests go over TLS (`https://`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The host, lower case, without brackets for an IPv6 address.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, 80 or 443 when the URL names none.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The path (with its query, if any) the URL names after the host:
    /// `None` for `http://host`, `Some("/")` for `http://host/`. A reverse
    /// proxy maps paths as nginx's `proxy_pass` does with this distinction.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The name the TLS certificate must carry (and SNI sends): the host.
    pub fn server_name(&self) -> &str {
        &self.host
    }

    /// What a `Host` field sends for this upstream: the host, with the port
    /// when it is not the scheme's default, an IPv6 address in brackets.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.is_tls() { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Verify this `https` upstream's certificate against the CA
    /// certificates in the PEM file at `path` instead of the Mozilla roots
    /// (an internal CA, a self-signed certificate). There is no option to
    /// skip verification: an upstream worth TLS is worth its CA file.
    pub fn set_ca_file(&mut self, path: &Path) -> Result<()> {
        if !self.is_tls() {
            return Err(Error::Url(format!(
                "a CA file is given for {}, which is not https://",
                self.url
            )));
        }
        self.tls = Some(TlsConfig::with_ca_file(path)?);
        Ok(())
    }

    /// Use this TLS configuration (one built once and shared by several
    /// upstreams).
    pub fn set_tls_config(&mut self, config: TlsConfig) -> Result<()> {
        if !self.is_tls() {
            return Err(Error::Url(format!(
                "a TLS configuration is given for {}, which is not https://",
                self.url
            )));
        }
        self.tls = Some(config);
        Ok(())
    }

    /// What the pool connects to for the address `addr` (one of
    /// [`addrs`](Upstream::addrs)).
    pub fn target(&self, addr: SocketAddr) -> Target {
        match &self.tls {
            Some(config) => Target::tls(addr, &self.host, config.clone()),
            None => Target::plain(addr),
        }
    }

    /// A [`Target`] for every resolved address, in resolver order.
    pub fn targets(&self) -> impl Iterator<Item = Target> + '_ {
        self.addrs.iter().map(|a| self.target(*a))
    }
}

impl FromStr for Upstream {
    type Err = Error;

    fn from_str(s: &str) -> Result<Upstream> {
        Upstream::parse(s)
    }
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &self.url)
            .field("addrs", &self.addrs)
            .finish()
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_default_by_scheme_and_a_path_is_kept_apart_from_none() {
        let u = Upstream::parse("http://backend").unwrap();
        assert_eq!((u.port(), u.path(), u.is_tls()), (80, None, false));
        let u = Upstream::parse("http://backend/").unwrap();
        assert_eq!(u.path(), Some("/"));
        let u = Upstream::parse("HTTPS://Backend:8443/a/b?x=1").unwrap();
        assert_eq!(
            (u.host(), u.port(), u.path(), u.is_tls()),
            ("backend", 8443, Some("/a/b?x=1"), true)
        );
        assert_eq!(u.authority(), "backend:8443");
        let u = Upstream::parse("http://backend?x=1").unwrap();
        assert_eq!(u.path(), Some("/?x=1"));
    }

    #[test]
    fn an_ipv6_literal_is_bracketed_in_the_authority_only() {
        let mut u = Upstream::parse("http://[::1]:8080/x").unwrap();
        assert_eq!(u.host(), "::1");
        assert_eq!(u.authority(), "[::1]:8080");
        u.resolve().unwrap();
        assert_eq!(u.addrs(), &["[::1]:8080".parse().unwrap()]);
    }

    #[test]
    fn urls_this_client_cannot_use_are_refused_saying_why() {
        for (url, why) in [
            ("ftp://x", "http:// or https://"),
            ("backend:80", "http:// or https://"),
            ("http://", "no host"),
            ("http://x:0", "port"),
            ("http://x:http", "port"),
            ("http://u:p@x", "Authorization"),
            ("http://x/#top", "fragment"),
            ("http://[::1", "]"),
            ("http://x/a b", "space"),
        ] {
            let e = Upstream::parse(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn a_ca_file_for_plain_http_is_refused() {
        let mut u = Upstream::parse("http://x").unwrap();
        assert!(u.set_ca_file(Path::new("/nonexistent")).is_err());
    }
}
