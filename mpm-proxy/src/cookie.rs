//! The `Domain` and `Path` attributes of the `Set-Cookie` fields of an
//! upstream's answer, rewritten as nginx's `proxy_cookie_domain` and
//! `proxy_cookie_path` do. An upstream that sets cookies for its own name
//! (`Domain=backend.internal`) or its own paths (`Path=/v1/`) would
//! otherwise set cookies the browser refuses or never sends back: the
//! client knows the proxy's name and the route's prefix.
//!
//! A route's rules are tried in order, the first that matches applied:
//! - a `cookie_domain` rule matches a `Domain` attribute whose value is its
//!   `from` (letter case aside, a leading dot on either ignored) and
//!   replaces the value with its `to` (a leading dot the value had is kept);
//! - a `cookie_path` rule matches a `Path` attribute whose value begins
//!   with its `from` (bytes as written) and replaces that beginning with its
//!   `to`.
//!
//! Every `Domain` and `Path` attribute of every `Set-Cookie` field is
//! rewritten; the cookie's name, value and other attributes pass as they
//! came. Both lists are empty by default (nginx's `off`).

use crate::config::MAX_TEXT;
use crate::error::{Error, Result};

/// The most rules one route's `cookie_domain`, or its `cookie_path`, may
/// list.
pub const MAX_COOKIE_RULES: usize = 64;

/// One rule of a route's `cookie_domain` or `cookie_path` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieRule {
    /// What the attribute's value is (a domain) or begins with (a path).
    pub from: String,
    /// What replaces it.
    pub to: String,
}

impl CookieRule {
    /// A `cookie_domain` rule: leading dots dropped, as nginx drops them.
    pub fn domain(from: &str, to: &str) -> Result<CookieRule> {
        let r = CookieRule {
            from: from.trim_start_matches('.').to_string(),
            to: to.trim_start_matches('.').to_string(),
        };
        r.check()?;
        Ok(r)
    }

    /// A `cookie_path` rule.
    pub fn path(from: &str, to: &str) -> Result<CookieRule> {
        let r = CookieRule {
            from: from.to_string(),
            to: to.to_string(),
        };
        r.check()?;
        Ok(r)
    }

    /// Every part within its bounds: the one-line complaint otherwise.
    pub fn check(&self) -> Result<()> {
        if self.from.is_empty() {
            return Err(Error::config(
                "`from` is empty (it would match every value)".to_string(),
            ));
        }
        for (what, text) in [("from", &self.from), ("to", &self.to)] {
            if text.len() > MAX_TEXT
                || !text
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
            {
                return Err(Error::config(format!(
                    "`{what}` '{text}': at most {MAX_TEXT} bytes of visible ASCII, \
                     no spaces, controls, `;` or `,`"
                )));
            }
        }
        Ok(())
    }
}

/// A `Set-Cookie` field's `value` with its `Domain` and `Path` attributes
/// rewritten by the first rule of `domains`, and of `paths`, that matches
/// each; `None` when none matched (it passes as it came).
pub fn rewrite_cookie(
    value: &[u8],
    domains: &[CookieRule],
    paths: &[CookieRule],
) -> Option<Vec<u8>> {
    if domains.is_empty() && paths.is_empty() {
        return None;
    }
    let mut out: Option<Vec<u8>> = None;
    // The first part is the cookie's name and value: never an attribute.
    let mut at = value.iter().position(|&b| b == b';')?;
    let mut copied = 0;
    while at < value.len() {
        // `at` is a `;`: the attribute runs to the next one.
        let start = at + 1;
        let end = value[start..]
            .iter()
            .position(|&b| b == b';')
            .map_or(value.len(), |i| start + i);
        if let Some((name, from, to)) = attribute(value, start, end) {
            let v = &value[from..to];
            let new = if name.eq_ignore_ascii_case(b"domain") {
                domain(v, domains)
            } else if name.eq_ignore_ascii_case(b"path") {
                path(v, paths)
            } else {
                None
            };
            if let Some(new) = new {
                let o = out.get_or_insert_with(|| Vec::with_capacity(value.len() + 32));
                o.extend_from_slice(&value[copied..from]);
                o.extend_from_slice(&new);
                copied = to;
            }
        }
        at = end;
    }
    let mut o = out?;
    o.extend_from_slice(&value[copied..]);
    Some(o)
}

/// The attribute in `value[start..end]`, as RFC 6265 §5.2 (and nginx)
/// read one: its name, and where its value begins and ends, the spaces
/// around the name, the `=` and the value left out. `None` without `=`.
fn attribute(value: &[u8], start: usize, end: usize) -> Option<(&[u8], usize, usize)> {
    let part = &value[start..end];
    let eq = part.iter().position(|&b| b == b'=')?;
    let name = trim(&part[..eq]);
    let after = eq + 1;
    let lead = part[after..].iter().take_while(|&&b| is_space(b)).count();
    let trail = part[after..]
        .iter()
        .rev()
        .take_while(|&&b| is_space(b))
        .count();
    let from = start + after + lead;
    let to = (end - trail).max(from);
    Some((name, from, to))
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `v` without the spaces and tabs around it.
pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let lead = v.iter().take_while(|&&b| is_space(b)).count();
    let trail = v[lead..].iter().rev().take_while(|&&b| is_space(b)).count();
    &v[lead..v.len() - trail]
}

/// A `Domain` value with the first matching rule applied.
fn domain(value: &[u8], rules: &[CookieRule]) -> Option<Vec<u8>> {
    let (dot, bare): (&[u8], &[u8]) = match value.strip_prefix(b".") {
        Some(bare) => (b".", bare),
        None => (b"", value),
    };
    let rule = rules
        .iter()
        .find(|r| r.from.as_bytes().eq_ignore_ascii_case(bare))?;
    Some([dot, rule.to.as_bytes()].concat())
}

/// A `Path` value with the first matching rule applied.
fn path(value: &[u8], rules: &[CookieRule]) -> Option<Vec<u8>> {
    rules.iter().find_map(|r| {
        let rest = value.strip_prefix(r.from.as_bytes())?;
        Some([r.to.as_bytes(), rest].concat())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domains(rules: &[(&str, &str)]) -> Vec<CookieRule> {
        rules
            .iter()
            .map(|(f, t)| CookieRule::domain(f, t).unwrap())
            .collect()
    }

    fn paths(rules: &[(&str, &str)]) -> Vec<CookieRule> {
        rules
            .iter()
            .map(|(f, t)| CookieRule::path(f, t).unwrap())
            .collect()
    }

    fn rewritten(value: &str, d: &[CookieRule], p: &[CookieRule]) -> Option<String> {
        rewrite_cookie(value.as_bytes(), d, p).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn a_domain_is_replaced_whole_letter_case_and_leading_dot_aside() {
        let d = domains(&[
            ("localhost", "example.org"),
            (".Backend.internal", ".shop.example"),
        ]);
        assert_eq!(
            rewritten("sid=1; Domain=localhost; Path=/", &d, &[]).as_deref(),
            Some("sid=1; Domain=example.org; Path=/")
        );
        assert_eq!(
            rewritten("sid=1; path=/; domain=.BACKEND.internal; HttpOnly", &d, &[]).as_deref(),
            Some("sid=1; path=/; domain=.shop.example; HttpOnly"),
            "the value's dot kept, the rule's dropped"
        );
        assert_eq!(
            rewritten("sid=1; Domain=localhost.evil", &d, &[]),
            None,
            "a domain is matched whole, not as a prefix"
        );
        assert_eq!(rewritten("sid=1; Secure", &d, &[]), None);
        assert_eq!(
            rewritten("Domain=localhost", &d, &[]),
            None,
            "a cookie's own name"
        );
    }

    #[test]
    fn a_path_has_its_beginning_replaced_by_the_first_rule_that_matches() {
        let p = paths(&[("/two/", "/"), ("/", "/api/")]);
        assert_eq!(
            rewritten("a=b; Path=/two/some/uri/", &[], &p).as_deref(),
            Some("a=b; Path=/some/uri/"),
            "nginx's own example"
        );
        assert_eq!(
            rewritten("a=b;path=/x;Max-Age=5", &[], &p).as_deref(),
            Some("a=b;path=/api/x;Max-Age=5")
        );
        assert_eq!(
            rewritten("a=b; Path=/Two/", &paths(&[("/two/", "/")]), &[]),
            None,
            "a path is compared as written"
        );
        assert_eq!(rewritten("a=b; Path=/two/", &[], &[]), None, "no rules");
    }

    #[test]
    fn spaces_around_the_name_the_equals_sign_and_the_value_are_read_as_browsers_read_them() {
        let d = domains(&[("backend.internal", "example.org")]);
        let p = paths(&[("/v1/", "/api/")]);
        assert_eq!(
            rewritten("sid=1; Domain = backend.internal ;Path=  /v1/x", &d, &p).as_deref(),
            Some("sid=1; Domain = example.org ;Path=  /api/x")
        );
        assert_eq!(
            rewritten("sid=1;\tpath\t=/v1/", &d, &p).as_deref(),
            Some("sid=1;\tpath\t=/api/")
        );
        assert_eq!(rewritten("sid=1; Domain", &d, &p), None, "no value");
        assert_eq!(rewritten("sid=1; Path=", &d, &p), None, "an empty one");
    }

    #[test]
    fn both_attributes_are_rewritten_and_the_rest_passes_as_it_came() {
        let d = domains(&[("internal", "example.org")]);
        let p = paths(&[("/v1/", "/api/")]);
        assert_eq!(
            rewritten(
                "sid=\"x;y\"; Domain=internal ;  Path=/v1/cart; SameSite=Lax",
                &d,
                &p
            )
            .as_deref(),
            Some("sid=\"x;y\"; Domain=example.org ;  Path=/api/cart; SameSite=Lax")
        );
    }

    #[test]
    fn a_rule_that_could_break_the_field_is_refused() {
        for (from, to) in [
            ("", "x"),
            ("a;b", "x"),
            ("a", "b c"),
            ("a", "b,c"),
            ("a", "b\r\n"),
        ] {
            assert!(CookieRule::path(from, to).is_err(), "{from:?} {to:?}");
            assert!(CookieRule::domain(from, to).is_err(), "{from:?} {to:?}");
        }
        assert!(
            CookieRule::path("/", "").is_ok(),
            "an empty `to` is a path's"
        );
        assert!(CookieRule::path(&"/".repeat(MAX_TEXT + 1), "/").is_err());
    }
}
