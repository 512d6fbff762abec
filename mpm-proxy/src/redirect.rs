//! The `Location` and `Refresh` fields of an upstream's answer, rewritten
//! as nginx's `proxy_redirect` does: an upstream that builds absolute URLs
//! from the `Host` it was sent (the URL's own, by default) would otherwise
//! send the client to an address only the proxy can reach, or to a path
//! the route maps elsewhere.
//!
//! The rules are a route's `redirect`, tried in order; the first whose
//! `from` begins the value replaces that beginning with its `to`, and the
//! value passes unchanged when none does. `default` stands for one rule a
//! route's upstream, nginx's `proxy_redirect default`: an upstream URL
//! with a path (even `/`) is replaced by the route's prefix
//! (`http://10.0.0.2:8080/v1/login` → `/api/login` for `/api/` →
//! `http://10.0.0.2:8080/v1/`); one without a path gives `URL/` → `/`.
//! As nginx's, the comparison is of bytes as written (a scheme or host in
//! other capitals, or a default port spelt out, is another URL).

use std::fmt;
use std::str::FromStr;

use crate::config::{UpstreamSpec, MAX_TEXT};
use crate::error::{Error, Result};

/// The most rules one route's `redirect` may list.
pub const MAX_REDIRECTS: usize = 64;

/// One rule of a route's `redirect` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// nginx's `proxy_redirect default`: a rule for each of the route's
    /// upstreams, from its URL to the route's prefix (see the module).
    Default,
    /// A value beginning with `from` has that beginning replaced by `to`
    /// (nginx's `proxy_redirect FROM TO`).
    Replace {
        /// What the value begins with: an absolute URL or a path.
        from: String,
        /// What replaces it (empty: the rest of the value alone).
        to: String,
    },
}

impl Redirect {
    /// A `from`/`to` rule, checked.
    pub fn replace(from: &str, to: &str) -> Result<Redirect> {
        let r = Redirect::Replace {
            from: from.to_string(),
            to: to.to_string(),
        };
        r.check()?;
        Ok(r)
    }

    /// Every part within its bounds: the one-line complaint otherwise.
    pub fn check(&self) -> Result<()> {
        let Redirect::Replace { from, to } = self else {
            return Ok(());
        };
        if from.is_empty() {
            return Err(Error::config(
                "`from` is empty (it would match every value)".to_string(),
            ));
        }
        for (what, text) in [("from", from), ("to", to)] {
            if text.len() > MAX_TEXT || !text.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(Error::config(format!(
                    "`{what}` '{text}': at most {MAX_TEXT} bytes of visible ASCII, \
                     no spaces or controls"
                )));
            }
        }
        Ok(())
    }
}

/// `default` or `off` (the words a route's `redirect` takes besides
/// rules); `off` is no rule at all.
impl FromStr for Redirect {
    type Err = Error;

    fn from_str(s: &str) -> Result<Redirect> {
        match s {
            "default" => Ok(Redirect::Default),
            _ => Err(Error::config(format!(
                "'{s}': expected default, off, or rules {{ from = \"...\", to = \"...\" }}"
            ))),
        }
    }
}

impl fmt::Display for Redirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Redirect::Default => f.write_str("default"),
            Redirect::Replace { from, to } => write!(f, "{from} {to}"),
        }
    }
}

/// `value` (a `Location` field's) with the first rule that matches it
/// applied, or `None` when no rule does (it passes as it came).
/// `prefix` and `upstreams` are the route's, for [`Redirect::Default`].
pub fn rewrite(
    value: &[u8],
    rules: &[Redirect],
    prefix: &str,
    upstreams: &[UpstreamSpec],
) -> Option<Vec<u8>> {
    for rule in rules {
        match rule {
            Redirect::Replace { from, to } => {
                if let Some(rest) = value.strip_prefix(from.as_bytes()) {
                    return Some(joined(to.as_bytes(), rest));
                }
            }
            Redirect::Default => {
                for u in upstreams {
                    let url = u.url.as_str().as_bytes();
                    // With a path, the URL as written becomes the prefix;
                    // without one, `URL/` becomes `/`.
                    let (to, slash): (&[u8], &[u8]) = match u.url.path() {
                        Some(_) => (prefix.as_bytes(), b""),
                        None => (b"/", b"/"),
                    };
                    let rest = value.strip_prefix(url).and_then(|r| r.strip_prefix(slash));
                    if let Some(rest) = rest {
                        return Some(joined(to, rest));
                    }
                }
            }
        }
    }
    None
}

/// A `Refresh` field's value (`5; url=http://...`) with its URL rewritten
/// as [`rewrite`] rewrites a `Location`, or `None` when it names none or
/// no rule matches it.
pub fn rewrite_refresh(
    value: &[u8],
    rules: &[Redirect],
    prefix: &str,
    upstreams: &[UpstreamSpec],
) -> Option<Vec<u8>> {
    let at = value
        .windows(4)
        .position(|w| w.eq_ignore_ascii_case(b"url="))?
        + 4;
    let url = rewrite(&value[at..], rules, prefix, upstreams)?;
    Some(joined(&value[..at], &url))
}

fn joined(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(urls: &[&str]) -> Vec<UpstreamSpec> {
        urls.iter().map(|u| UpstreamSpec::new(u).unwrap()).collect()
    }

    fn text(v: Option<Vec<u8>>) -> Option<String> {
        v.map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn by_default_an_upstream_url_with_a_path_becomes_the_routes_prefix() {
        let ups = specs(&["http://10.0.0.2:8080/v1/", "http://10.0.0.3:8080/v1/"]);
        let d = [Redirect::Default];
        let r = |v: &str| text(rewrite(v.as_bytes(), &d, "/api/", &ups));
        assert_eq!(
            r("http://10.0.0.2:8080/v1/login?next=/x").as_deref(),
            Some("/api/login?next=/x")
        );
        assert_eq!(r("http://10.0.0.3:8080/v1/").as_deref(), Some("/api/"));
        // Anything else passes as it came: a relative one, another host,
        // another path, a port or capitals spelt otherwise (as nginx).
        for v in [
            "/v1/login",
            "https://example.com/v1/x",
            "http://10.0.0.2:8080/v2/x",
            "http://10.0.0.2/v1/x",
            "HTTP://10.0.0.2:8080/v1/x",
        ] {
            assert_eq!(r(v), None, "{v}");
        }
    }

    #[test]
    fn by_default_an_upstream_url_without_a_path_gives_its_paths_whole() {
        let ups = specs(&["http://app:9000"]);
        let d = [Redirect::Default];
        let r = |v: &str| text(rewrite(v.as_bytes(), &d, "/ws", &ups));
        assert_eq!(
            r("http://app:9000/ws/room/1").as_deref(),
            Some("/ws/room/1")
        );
        assert_eq!(r("http://app:9000/").as_deref(), Some("/"));
        // `URL/` is the pattern: a longer port or host is not the URL.
        assert_eq!(r("http://app:90001/x"), None);
        assert_eq!(r("http://app:9000"), None);
    }

    #[test]
    fn rules_are_tried_in_order_and_the_first_that_matches_is_applied() {
        let ups = specs(&["http://a/v1/"]);
        let rules = [
            Redirect::replace("http://a/v1/admin/", "/console/").unwrap(),
            Redirect::Default,
            Redirect::replace("https://old.example/", "https://new.example/").unwrap(),
        ];
        let r = |v: &str| text(rewrite(v.as_bytes(), &rules, "/api/", &ups));
        assert_eq!(
            r("http://a/v1/admin/users").as_deref(),
            Some("/console/users")
        );
        assert_eq!(r("http://a/v1/x").as_deref(), Some("/api/x"));
        assert_eq!(
            r("https://old.example/p").as_deref(),
            Some("https://new.example/p")
        );
        // `off`: no rule, nothing rewritten.
        assert_eq!(rewrite(b"http://a/v1/x", &[], "/api/", &ups), None);
    }

    #[test]
    fn a_refresh_fields_url_is_rewritten_and_the_rest_kept() {
        let ups = specs(&["http://a:8080/v1/"]);
        let d = [Redirect::Default];
        let r = |v: &str| text(rewrite_refresh(v.as_bytes(), &d, "/api/", &ups));
        assert_eq!(
            r("5; URL=http://a:8080/v1/next").as_deref(),
            Some("5; URL=/api/next")
        );
        assert_eq!(r("0;url=http://a:8080/v1/").as_deref(), Some("0;url=/api/"));
        assert_eq!(r("5"), None);
        assert_eq!(r("5; url=/elsewhere"), None);
    }

    #[test]
    fn a_rule_that_would_match_everything_or_carries_controls_is_refused() {
        assert!(Redirect::replace("", "/").is_err());
        assert!(Redirect::replace("http://a/", "/x\r\nSet-Cookie: a=b").is_err());
        assert!(Redirect::replace("http://a /", "/").is_err());
        assert!(Redirect::replace("http://a/", "").is_ok());
        assert!("default".parse::<Redirect>().is_ok());
        let e = "on".parse::<Redirect>().unwrap_err().to_string();
        assert!(e.contains("expected default, off"), "{e}");
    }
}
