//! nginx's `internal` locations: path prefixes (`--internal`) under which
//! a client's request is answered 404, reached only by an internal
//! redirect (an upstream's `X-Accel-Redirect`, followed by the HTTP layer:
//! [`mpm_http::Request::is_internal`]).

use std::sync::Arc;

use mpm_http::Request;

/// The most `--internal` prefixes (each is compared with every request's
/// path).
pub(crate) const MAX_INTERNAL: usize = 256;

/// The prefixes, shared by every worker, each read the two ways a path
/// is (see [`covers`](InternalPaths::covers)).
#[derive(Debug, Clone, Default)]
pub(crate) struct InternalPaths(Arc<[Prefix]>);

/// A prefix as the site reads a path (every escape decoded) and as the
/// proxy's routes do (only those of unreserved characters), so that it
/// is compared with a path read the same way: `/caf%C3%A9/` is
/// `/café/` to the site, and `/%7Euser/` is `/~user/` to both.
#[derive(Debug)]
struct Prefix {
    served: Vec<u8>,
    routed: Vec<u8>,
    written: Vec<u8>,
}

impl InternalPaths {
    /// From the checked `--internal` values.
    pub(crate) fn new(prefixes: &[String]) -> InternalPaths {
        InternalPaths(
            prefixes
                .iter()
                .map(|p| Prefix {
                    served: decoded(p),
                    routed: mpm_proxy::normalize(p).into_owned().into_bytes(),
                    written: p.as_bytes().to_vec(),
                })
                .collect(),
        )
    }

    /// Is `request` one a client may not make: its path under a prefix,
    /// and not made for an internal redirect?
    pub(crate) fn refuses(&self, request: &Request<'_>) -> bool {
        !self.0.is_empty() && !request.is_internal() && self.covers(request.path())
    }

    /// Is `path` (as sent) under a prefix, both read as the site reads
    /// them (every escape decoded) or both as the proxy's routes do (only
    /// those of unreserved characters)? Either way `.` and `..` segments
    /// are resolved and runs of `/` merged: `/a/../protected/x` and
    /// `/%70rotected/x` are under `/protected/`.
    fn covers(&self, path: &str) -> bool {
        // A path with no escape, dot segment or `//` (nearly every one)
        // reads the same all three ways: nothing to decode or allocate.
        let plain = path.starts_with('/')
            && !path.contains('%')
            && !path.contains("/.")
            && !path.contains("//");
        let routed = mpm_proxy::normalize(path);
        let served: std::borrow::Cow<'_, [u8]> = if plain {
            path.as_bytes().into()
        } else {
            decoded(path).into()
        };
        self.0.iter().any(|p| {
            under(&p.routed, routed.as_bytes())
                || under(&p.served, &served)
                // As sent, for an embedder's routes, which match it so
                // (`/protected/../x` is a `/protected/{*rest}` route's).
                || under(&p.written, path.as_bytes())
        })
    }
}

/// Does `prefix` take `path`: every path that starts with it, as nginx's
/// prefix `location` (`/secret` covers `/secret.txt` too: for what is
/// kept from clients, the wider reading).
fn under(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
}

/// `path` with every escape decoded (one that is not, `%zz`, kept as it
/// is), `.` and `..` resolved (none climbs above the root) and runs of
/// `/` merged; it starts with `/`.
fn decoded(path: &str) -> Vec<u8> {
    let bytes = path.as_bytes();
    let mut raw = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(v)) => {
                raw.push(v);
                i += 3;
            }
            (b, _) => {
                raw.push(b);
                i += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(raw.len() + 1);
    for seg in raw.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            s => {
                out.push(b'/');
                out.extend_from_slice(s);
            }
        }
    }
    // A path that ends in a slash (or a dot segment) keeps it: `/p/` is
    // under `/p/`.
    if out.is_empty() || raw.ends_with(b"/") || raw.ends_with(b"/.") || raw.ends_with(b"/..") {
        out.push(b'/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(prefixes: &[&str]) -> InternalPaths {
        InternalPaths::new(&prefixes.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_path_is_under_a_prefix_however_it_is_written() {
        let p = paths(&["/protected/", "/files"]);
        for path in [
            "/protected/a.pdf",
            "/protected/",
            "//protected//a.pdf",
            "/x/../protected/a.pdf",
            "/./protected/a.pdf",
            "/%70rotected/a.pdf",
            "/protected%2Fa.pdf",
            "/%2e%2e/protected/a",
            "/files",
            "/files/x",
            "/protected/%zz",
        ] {
            assert!(p.covers(path), "{path} is under");
        }
        for path in [
            "/",
            "/protectedx",
            "/protected",
            "/file",
            "/other/protected/a",
        ] {
            assert!(!p.covers(path), "{path} is not under");
        }
        // nginx's prefix: `/files` covers `/filesx`; and the path as sent,
        // which an embedder's router matches.
        for path in [
            "/filesx",
            "/files.gz",
            "/protected/../x",
            "/protected/%2e%2e/x",
        ] {
            assert!(p.covers(path), "{path} is under");
        }
    }

    #[test]
    fn a_prefix_is_read_as_a_path_is() {
        let p = paths(&["/caf%C3%A9/", "/%7Euser/", "/a//b/./c/"]);
        for path in [
            "/caf%C3%A9/s.txt",
            "/caf%c3%a9/s.txt",
            "/caf\u{e9}/s.txt",
            "/%7Euser/a",
            "/~user/a",
            "/%7euser/a",
            "/a/b/c/x",
        ] {
            assert!(p.covers(path), "{path} is under");
        }
        assert!(!p.covers("/cafe/s.txt") && !p.covers("/user/a"));
    }

    #[test]
    fn only_a_clients_request_is_refused() {
        let p = paths(&["/protected/"]);
        let v = mpm_http::Version::Http11;
        let client = Request::for_test("GET", "/protected/a", v, &[], b"");
        assert!(p.refuses(&client));
        assert!(!paths(&[]).refuses(&client), "no prefixes: nothing refused");
        assert!(!p.refuses(&Request::for_test("GET", "/open/a", v, &[], b"")));
        assert!(
            !p.refuses(&client.with_internal(true)),
            "a redirect's request reaches it"
        );
    }
}
