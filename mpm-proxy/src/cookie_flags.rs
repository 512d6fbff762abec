//! Flags of the `Set-Cookie` fields of an upstream's answer added or
//! removed, as nginx's `proxy_cookie_flags` does: an application that
//! sets its session cookie without `Secure` or `HttpOnly` (it never sees
//! the TLS the proxy ends) gets them at the proxy.
//!
//! A route's `cookie_flags` is a list of a cookie's name (or `*`, every
//! cookie) and flags; the first entry whose name is the cookie's applies
//! (letter case aside, as nginx compares them), as nginx checks its
//! directives in order. The flags are nginx's: `secure`, `httponly` and
//! `samesite=strict|lax|none` add the attribute (a `SameSite` the cookie
//! had is replaced), `nosecure`, `nohttponly` and `nosamesite` remove it.
//! The rest of the field passes as it came. nginx's regular expressions
//! (`~`) are not taken; `*` stands for nginx's `~` alone.

use std::fmt;
use std::str::FromStr;

use crate::config::MAX_TEXT;
use crate::cookie::trim;
use crate::error::{Error, Result};

/// The most entries one route's `cookie_flags` may list.
pub const MAX_COOKIE_FLAGS: usize = 64;

/// One flag of a [`CookieFlags`] entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieFlag {
    /// `secure`: add `Secure`.
    Secure,
    /// `httponly`: add `HttpOnly`.
    HttpOnly,
    /// `samesite=strict|lax|none`: set `SameSite` to this.
    SameSite(SameSite),
    /// `nosecure`: remove `Secure`.
    NoSecure,
    /// `nohttponly`: remove `HttpOnly`.
    NoHttpOnly,
    /// `nosamesite`: remove `SameSite`.
    NoSameSite,
}

/// A `SameSite` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    /// `Strict`.
    Strict,
    /// `Lax`.
    Lax,
    /// `None`.
    None,
}

impl SameSite {
    fn as_str(self) -> &'static str {
        match self {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        }
    }
}

impl FromStr for CookieFlag {
    type Err = Error;

    fn from_str(s: &str) -> Result<CookieFlag> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "secure" => CookieFlag::Secure,
            "httponly" => CookieFlag::HttpOnly,
            "samesite=strict" => CookieFlag::SameSite(SameSite::Strict),
            "samesite=lax" => CookieFlag::SameSite(SameSite::Lax),
            "samesite=none" => CookieFlag::SameSite(SameSite::None),
            "nosecure" => CookieFlag::NoSecure,
            "nohttponly" => CookieFlag::NoHttpOnly,
            "nosamesite" => CookieFlag::NoSameSite,
            _ => {
                return Err(Error::config(format!(
                    "flag '{s}': expected secure, httponly, samesite=strict, samesite=lax, \
                     samesite=none, nosecure, nohttponly or nosamesite"
                )))
            }
        })
    }
}

impl fmt::Display for CookieFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CookieFlag::Secure => f.write_str("secure"),
            CookieFlag::HttpOnly => f.write_str("httponly"),
            CookieFlag::SameSite(s) => write!(f, "samesite={}", s.as_str().to_ascii_lowercase()),
            CookieFlag::NoSecure => f.write_str("nosecure"),
            CookieFlag::NoHttpOnly => f.write_str("nohttponly"),
            CookieFlag::NoSameSite => f.write_str("nosamesite"),
        }
    }
}

/// One entry of a route's `cookie_flags`: which cookie, and its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieFlags {
    /// The cookie's name, or `*` for every cookie.
    pub cookie: String,
    /// What is added and removed, in order.
    pub flags: Vec<CookieFlag>,
}

impl CookieFlags {
    /// An entry, checked: a name of visible ASCII without `=`, `;` or
    /// `,`, and at least one flag.
    pub fn new(cookie: &str, flags: Vec<CookieFlag>) -> Result<CookieFlags> {
        let e = CookieFlags {
            cookie: cookie.to_string(),
            flags,
        };
        e.check()?;
        Ok(e)
    }

    /// Every part within its bounds: the one-line complaint otherwise.
    pub fn check(&self) -> Result<()> {
        let c = &self.cookie;
        if c.is_empty()
            || c.len() > MAX_TEXT
            || !c
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"=;,".contains(&b))
        {
            return Err(Error::config(format!(
                "cookie '{c}': a cookie's name (at most {MAX_TEXT} bytes of visible ASCII, no \
                 `=`, `;` or `,`) or `*`"
            )));
        }
        if self.flags.is_empty() || self.flags.len() > 8 {
            return Err(Error::config(format!(
                "cookie '{c}': 1 to 8 flags, {} given",
                self.flags.len()
            )));
        }
        // A flag and its undoing together say nothing nginx and mpm would
        // read alike (nginx's on wins, in order the last would).
        let has = |f: fn(&CookieFlag) -> bool| self.flags.iter().any(f);
        for (on, off, name) in [
            (
                has(|f| *f == CookieFlag::Secure),
                has(|f| *f == CookieFlag::NoSecure),
                "secure",
            ),
            (
                has(|f| *f == CookieFlag::HttpOnly),
                has(|f| *f == CookieFlag::NoHttpOnly),
                "httponly",
            ),
            (
                has(|f| matches!(f, CookieFlag::SameSite(_))),
                has(|f| *f == CookieFlag::NoSameSite),
                "samesite",
            ),
        ] {
            if on && off {
                return Err(Error::config(format!(
                    "cookie '{c}': both {name} and no{name}"
                )));
            }
        }
        Ok(())
    }

    fn matches(&self, name: &[u8]) -> bool {
        self.cookie == "*" || self.cookie.as_bytes().eq_ignore_ascii_case(name)
    }
}

/// A `Set-Cookie` field's `value` with the flags of the first entry of
/// `entries` that names its cookie applied; `None` when no entry names it
/// (it passes as it came).
pub fn flag_cookie(value: &[u8], entries: &[CookieFlags]) -> Option<Vec<u8>> {
    if entries.is_empty() {
        return None;
    }
    let pair_end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
    // A first part without `=` is a cookie of that name, as nginx reads it.
    let eq = value[..pair_end]
        .iter()
        .position(|&b| b == b'=')
        .unwrap_or(pair_end);
    let name = trim(&value[..eq]);
    let entry = entries.iter().find(|e| e.matches(name))?;
    // The cookie's name and value, then its attributes but those the flags
    // remove or set, then the flags that add.
    let mut attrs: Vec<&[u8]> = value[pair_end..]
        .split(|&b| b == b';')
        .skip(1)
        .filter(|a| !trim(a).is_empty())
        .collect();
    let named = |a: &[u8], n: &[u8]| {
        let a = trim(a);
        let head = a.split(|&b| b == b'=').next().map_or(a, trim);
        head.eq_ignore_ascii_case(n)
    };
    let mut added: Vec<String> = Vec::new();
    for flag in &entry.flags {
        let (attr, add): (&[u8], Option<String>) = match flag {
            CookieFlag::Secure => (b"secure", Some("Secure".into())),
            CookieFlag::HttpOnly => (b"httponly", Some("HttpOnly".into())),
            CookieFlag::SameSite(s) => (b"samesite", Some(format!("SameSite={}", s.as_str()))),
            CookieFlag::NoSecure => (b"secure", None),
            CookieFlag::NoHttpOnly => (b"httponly", None),
            CookieFlag::NoSameSite => (b"samesite", None),
        };
        let had = attrs.iter().any(|a| named(a, attr));
        match add {
            // `SameSite` is set to the flag's value; the others are added
            // only where missing, as nginx adds them.
            Some(a) if attr == b"samesite" => {
                attrs.retain(|x| !named(x, attr));
                added.retain(|x| !x.to_ascii_lowercase().starts_with("samesite"));
                added.push(a);
            }
            Some(a) => {
                if !had
                    && !added
                        .iter()
                        .any(|x| x.as_bytes().eq_ignore_ascii_case(attr))
                {
                    added.push(a);
                }
            }
            None => {
                attrs.retain(|x| !named(x, attr));
                added.retain(|x| {
                    !x.as_bytes()[..attr.len().min(x.len())].eq_ignore_ascii_case(attr)
                });
            }
        }
    }
    let mut out = Vec::with_capacity(value.len() + 32);
    out.extend_from_slice(trim(&value[..pair_end]));
    for a in &attrs {
        out.extend_from_slice(b"; ");
        out.extend_from_slice(trim(a));
    }
    for a in &added {
        out.extend_from_slice(b"; ");
        out.extend_from_slice(a.as_bytes());
    }
    (out != value).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(cookie: &str, flags: &[&str]) -> CookieFlags {
        CookieFlags::new(cookie, flags.iter().map(|f| f.parse().unwrap()).collect()).unwrap()
    }

    fn flagged(value: &str, entries: &[CookieFlags]) -> Option<String> {
        flag_cookie(value.as_bytes(), entries).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn nginxs_example_the_first_entry_naming_the_cookie_applies() {
        // proxy_cookie_flags one httponly; proxy_cookie_flags ~ nosecure samesite=strict;
        let e = [
            entry("one", &["httponly"]),
            entry("*", &["nosecure", "samesite=strict"]),
        ];
        assert_eq!(
            flagged("one=1; Path=/; Secure", &e).as_deref(),
            Some("one=1; Path=/; Secure; HttpOnly")
        );
        assert_eq!(
            flagged("two=2; Path=/; secure; SameSite=Lax", &e).as_deref(),
            Some("two=2; Path=/; SameSite=Strict")
        );
        assert_eq!(flagged("one=1; HttpOnly", &e), None, "already there");
        assert_eq!(
            flagged("One=1", &e[..1]).as_deref(),
            Some("One=1; HttpOnly"),
            "names in any case, as nginx"
        );
        assert_eq!(
            flagged("no-pair; Path=/", &e).as_deref(),
            Some("no-pair; Path=/; SameSite=Strict"),
            "a first part without `=` is a cookie too"
        );
    }

    #[test]
    fn flags_add_what_is_missing_and_remove_what_is_named() {
        let e = [entry("sid", &["secure", "httponly", "samesite=none"])];
        assert_eq!(
            flagged("sid=abc", &e).as_deref(),
            Some("sid=abc; Secure; HttpOnly; SameSite=None")
        );
        assert_eq!(
            flagged("sid=abc;path=/ ; HTTPONLY", &e).as_deref(),
            Some("sid=abc; path=/; HTTPONLY; Secure; SameSite=None")
        );
        let e = [entry("sid", &["nohttponly", "nosamesite"])];
        assert_eq!(
            flagged("sid=abc; HttpOnly; SameSite = Lax; Path=/", &e).as_deref(),
            Some("sid=abc; Path=/")
        );
        assert_eq!(flagged("other=1; HttpOnly", &e), None, "not named");
    }

    #[test]
    fn a_bad_entry_is_refused_naming_the_valid_flags() {
        let e = "samesite=maybe"
            .parse::<CookieFlag>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("samesite=lax") && e.contains("nohttponly"),
            "{e}"
        );
        for (cookie, flags) in [
            ("", vec![CookieFlag::Secure]),
            ("a=b", vec![CookieFlag::Secure]),
            ("a", vec![]),
            ("a", vec![CookieFlag::Secure, CookieFlag::NoSecure]),
            (
                "a",
                vec![CookieFlag::SameSite(SameSite::Lax), CookieFlag::NoSameSite],
            ),
        ] {
            assert!(CookieFlags::new(cookie, flags).is_err(), "{cookie:?}");
        }
        assert_eq!(
            "samesite=strict".parse::<CookieFlag>().unwrap().to_string(),
            "samesite=strict"
        );
    }
}
