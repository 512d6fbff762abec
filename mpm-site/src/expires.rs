//! `Cache-Control` for static files by extension or media type, as nginx's
//! `expires` and httpd's `mod_expires` set it: without it a cache must
//! guess how long a response stays fresh.

use std::sync::Arc;

/// How long responses matching a rule stay fresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaxAge {
    /// `Cache-Control: max-age=N`.
    Seconds(u64),
    /// `Cache-Control: no-cache`: a cache must revalidate each time
    /// (nginx's `expires epoch`).
    Epoch,
    /// No `Cache-Control` (to exempt files from a broader rule).
    Off,
}

/// Which files a rule is for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Match {
    /// `.css`: the file name's extension, case-insensitive.
    Extension(String),
    /// `text/css`: the media type without parameters.
    Type(String),
    /// `image/*`: every subtype.
    Major(String),
    /// `*`: every file.
    All,
}

/// The rules, checked most specific first: extension, exact type, `type/*`,
/// then `*`.
///
/// ```
/// use mpm_site::CacheRules;
/// let rules = CacheRules::parse(&[".css,.js=30d", "image/*=7d", "text/html=epoch"]).unwrap();
/// assert_eq!(rules.cache_control("app.js", "text/javascript").as_deref(), Some("max-age=2592000"));
/// assert_eq!(rules.cache_control("a.png", "image/png").as_deref(), Some("max-age=604800"));
/// assert_eq!(rules.cache_control("index.html", "text/html; charset=utf-8").as_deref(), Some("no-cache"));
/// assert_eq!(rules.cache_control("notes.txt", "text/plain"), None);
/// assert!(CacheRules::parse(&["css=soon"]).unwrap_err().contains("css=soon"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheRules {
    rules: Vec<(Match, MaxAge)>,
}

/// `expires max`: ten years, as nginx sends.
const MAX_SECONDS: u64 = 10 * 365 * 86400;

impl CacheRules {
    /// No rules: no `Cache-Control` on files.
    pub fn new() -> CacheRules {
        CacheRules::default()
    }

    /// Parse `MATCHES=AGE` rules: MATCHES is a comma-separated list of
    /// `.ext`, `type/subtype`, `type/*` or `*`; AGE is seconds or a number
    /// with a unit (`s`, `m`, `h`, `d`, `w`), `max` (ten years), `epoch`
    /// (`no-cache`) or `off` (no field). The error names the rule.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> Result<CacheRules, String> {
        let mut out = CacheRules::new();
        for rule in rules {
            let rule = rule.as_ref();
            let bad = |why: &str| format!("--expires '{rule}': {why}");
            let (matches, age) = rule
                .rsplit_once('=')
                .ok_or_else(|| bad("expected MATCH=AGE, as .css=30d or image/*=7d"))?;
            let age = parse_age(age.trim()).ok_or_else(|| {
                bad("the age is not seconds, a duration (30d, 12h, 10m), max, epoch or off")
            })?;
            for m in matches.split(',') {
                let m = m.trim();
                let matcher = if m == "*" {
                    Match::All
                } else if let Some(ext) = m.strip_prefix('.') {
                    if ext.is_empty() || ext.contains(['.', '/']) {
                        return Err(bad("an extension is .ext, as .css"));
                    }
                    Match::Extension(ext.to_ascii_lowercase())
                } else if let Some((major, minor)) = m.split_once('/') {
                    if major.is_empty() || minor.is_empty() || major == "*" {
                        return Err(bad("a media type is type/subtype or type/*"));
                    }
                    if minor == "*" {
                        Match::Major(major.to_ascii_lowercase())
                    } else {
                        Match::Type(m.to_ascii_lowercase())
                    }
                } else {
                    return Err(bad(
                        "match a file by .ext, type/subtype, type/* or * (as .css=30d)",
                    ));
                };
                out.rules.push((matcher, age.clone()));
            }
        }
        Ok(out)
    }

    /// Are there no rules?
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The `Cache-Control` value for a file of this name and type, if any.
    pub fn cache_control(&self, name: &str, content_type: &str) -> Option<Arc<str>> {
        if self.rules.is_empty() {
            return None;
        }
        let file = name.rsplit('/').next().unwrap_or(name);
        let ext = file.rsplit_once('.').map(|(_, e)| e);
        let essence = content_type.split(';').next().unwrap_or("").trim();
        let major = essence.split('/').next().unwrap_or("");
        let rank = |m: &Match| -> Option<u8> {
            match m {
                Match::Extension(e) => ext.is_some_and(|x| x.eq_ignore_ascii_case(e)).then_some(0),
                Match::Type(t) => t.eq_ignore_ascii_case(essence).then_some(1),
                Match::Major(t) => t.eq_ignore_ascii_case(major).then_some(2),
                Match::All => Some(3),
            }
        };
        // The most specific rule; among equals, the first given.
        let (_, age) = self
            .rules
            .iter()
            .filter_map(|(m, age)| rank(m).map(|r| (r, age)))
            .min_by_key(|(r, _)| *r)?;
        match age {
            MaxAge::Seconds(n) => Some(format!("max-age={n}").into()),
            MaxAge::Epoch => Some(Arc::from("no-cache")),
            MaxAge::Off => None,
        }
    }
}

fn parse_age(s: &str) -> Option<MaxAge> {
    match s {
        "max" => return Some(MaxAge::Seconds(MAX_SECONDS)),
        "epoch" => return Some(MaxAge::Epoch),
        "off" => return Some(MaxAge::Off),
        _ => {}
    }
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let scale: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => return None,
    };
    let n: u64 = digits.parse().ok()?;
    // Beyond `max` is no fresher than it.
    Some(MaxAge::Seconds(n.checked_mul(scale)?.min(MAX_SECONDS)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_rule_wins() {
        let r = CacheRules::parse(&["*=1h", "text/*=60", "text/css=2m", ".css=off"]).unwrap();
        assert_eq!(r.cache_control("a/style.CSS", "text/css"), None);
        assert_eq!(
            r.cache_control("x.txt", "text/plain; charset=utf-8")
                .as_deref(),
            Some("max-age=60")
        );
        assert_eq!(
            r.cache_control("a.png", "image/png").as_deref(),
            Some("max-age=3600")
        );
        assert_eq!(
            r.cache_control("README", "application/octet-stream")
                .as_deref(),
            Some("max-age=3600")
        );
    }

    #[test]
    fn ages_take_units_max_epoch_and_off() {
        assert_eq!(parse_age("90"), Some(MaxAge::Seconds(90)));
        assert_eq!(parse_age("30d"), Some(MaxAge::Seconds(30 * 86400)));
        assert_eq!(parse_age("2w"), Some(MaxAge::Seconds(14 * 86400)));
        assert_eq!(parse_age("max"), Some(MaxAge::Seconds(MAX_SECONDS)));
        assert_eq!(
            parse_age("99999999999999999999d"),
            None,
            "not a number that fits"
        );
        assert_eq!(
            parse_age("18446744073709551615w"),
            None,
            "the product overflows"
        );
        assert_eq!(parse_age("1000000w"), Some(MaxAge::Seconds(MAX_SECONDS)));
        for bad in ["", "d", "3x", "-1", "1.5h"] {
            assert_eq!(parse_age(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bad_rules_are_one_line_naming_the_rule() {
        for bad in ["css", ".=1d", "text=1d", "*/*=1d", ".css=later", "/x=1"] {
            let err = CacheRules::parse(&[bad]).unwrap_err();
            assert!(err.contains(bad) && !err.contains('\n'), "{err}");
        }
    }
}
