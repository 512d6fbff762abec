//! Fields the server adds to responses, whatever handler made them:
//! nginx's `add_header` (to the statuses it adds them to, or to every one
//! with `always`) and httpd's `Header set`/`Header always set`. The
//! `Strict-Transport-Security`, `X-Frame-Options` and
//! `Content-Security-Policy` of most TLS sites are such fields.
//!
//! A field is added as given, after the handler's own (one of the same
//! name from a handler, an upstream's among them, is kept: two fields, as
//! nginx's `add_header` gives). The fields the layer writes itself
//! (`Date`, `Connection`, `Content-Length`, `Transfer-Encoding`) are
//! refused, as they are from a handler.

use crate::response::{is_field_value, is_layer_field, is_token};

/// The most fields the server may add (both lists together).
pub const MAX_ADDED_FIELDS: usize = 64;

/// The statuses nginx's `add_header` adds its fields to without `always`:
/// the successes and redirects a page is made of.
const SUCCESS_STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// The fields the server adds to responses (`--add-header`,
/// `--add-header-always`): none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddedFields {
    /// `(name, value, always)`, in the order given, `always` ones last.
    fields: Vec<(String, String, bool)>,
}

impl AddedFields {
    /// Fields from `NAME: VALUE` lines: `success` ones for nginx's statuses
    /// (200, 201, 204, 206, 301, 302, 303, 304, 307, 308), `always` ones
    /// for every status. The error names the line and what is wrong with
    /// it.
    pub fn parse(success: &[String], always: &[String]) -> Result<AddedFields, String> {
        if success.len() + always.len() > MAX_ADDED_FIELDS {
            return Err(format!(
                "{} added fields, at most {MAX_ADDED_FIELDS}",
                success.len() + always.len()
            ));
        }
        let mut fields = Vec::with_capacity(success.len() + always.len());
        for (lines, is_always) in [(success, false), (always, true)] {
            for line in lines {
                let (name, value) = field_of(line)?;
                fields.push((name.to_string(), value.to_string(), is_always));
            }
        }
        Ok(AddedFields { fields })
    }

    /// No field is added.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The fields a response of `status` gets, in order.
    pub(crate) fn for_status(&self, status: u16) -> impl Iterator<Item = (&str, &str)> + '_ {
        let success = !self.fields.is_empty() && SUCCESS_STATUSES.contains(&status);
        self.fields
            .iter()
            .filter(move |(_, _, always)| *always || success)
            .map(|(n, v, _)| (n.as_str(), v.as_str()))
    }
}

/// `NAME: VALUE` checked: a token the layer does not write itself, and a
/// value without controls (so that no line can be split in two).
fn field_of(line: &str) -> Result<(&str, &str), String> {
    let Some((name, value)) = line.split_once(':') else {
        return Err(format!(
            "{line:?}: expected NAME: VALUE, e.g. 'Strict-Transport-Security: max-age=63072000'"
        ));
    };
    let (name, value) = (name.trim(), value.trim());
    if !is_token(name.as_bytes()) {
        return Err(format!("{line:?}: {name:?} is not a field name"));
    }
    if is_layer_field(name.as_bytes()) {
        return Err(format!(
            "{line:?}: {name} is written by the server itself (Date, Connection, \
             Content-Length and Transfer-Encoding cannot be added)"
        ));
    }
    if value.is_empty() || !is_field_value(value.as_bytes()) {
        return Err(format!(
            "{line:?}: the value must be non-empty, without control characters"
        ));
    }
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn success_fields_go_to_nginxs_statuses_and_always_fields_to_every_one() {
        let a = AddedFields::parse(
            &lines(&["Strict-Transport-Security:  max-age=63072000 "]),
            &lines(&["X-Frame-Options: DENY"]),
        )
        .unwrap();
        let at = |s| a.for_status(s).collect::<Vec<_>>();
        let both = vec![
            ("Strict-Transport-Security", "max-age=63072000"),
            ("X-Frame-Options", "DENY"),
        ];
        for s in SUCCESS_STATUSES {
            assert_eq!(at(s), both, "{s}");
        }
        for s in [100, 202, 404, 500, 502] {
            assert_eq!(at(s), vec![("X-Frame-Options", "DENY")], "{s}");
        }
        assert!(AddedFields::default().for_status(200).next().is_none());
    }

    #[test]
    fn a_field_that_is_not_one_or_is_the_layers_is_refused_naming_it() {
        for (line, says) in [
            ("X-Frame-Options DENY", "expected NAME: VALUE"),
            ("X Frame: DENY", "not a field name"),
            ("X\nFrame: DENY", "not a field name"),
            ("Content-Length: 5", "written by the server itself"),
            ("date: today", "written by the server itself"),
            ("X-A:", "must be non-empty"),
            ("X-A: a\r\nSet-Cookie: s=1", "without control characters"),
        ] {
            let e = AddedFields::parse(&lines(&[line]), &[]).unwrap_err();
            assert!(e.contains(says), "{line:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let many = vec!["X-A: 1".to_string(); MAX_ADDED_FIELDS + 1];
        assert!(AddedFields::parse(&many, &[])
            .unwrap_err()
            .contains("at most"));
    }
}
