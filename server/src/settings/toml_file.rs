//! The TOML file of settings: its keys are the flags' names. Every error is
//! one line naming the line of the file, found from the parser's spans.

use std::collections::HashMap;
use std::path::Path;

use mpm_core::{Error, Result};

use super::values::did_you_mean;
use super::{ConfigLayer, SETTINGS};

/// A settings file, parsed: its top-level keys with their values, and the
/// line each key is on.
#[derive(Debug, Clone)]
pub(crate) struct TomlFile {
    /// The keys and their values.
    pub(crate) table: toml::Table,
    lines: HashMap<String, usize>,
    /// For a key whose value is an array (`[[proxy]]` tables, a list of
    /// listeners), the line of each item.
    item_lines: HashMap<String, Vec<usize>>,
}

impl TomlFile {
    /// Parse TOML text; an error is one line naming the line.
    pub(crate) fn parse(text: &str) -> Result<TomlFile, String> {
        let at = |e: toml::de::Error| {
            let mut msg = e.message().trim().replace('\n', " ");
            // The parser's word for a number past TOML's integers (i64)
            // names a Rust type; the file's author needs the bound.
            if msg.starts_with("invalid type: integer") && msg.contains("as i128") {
                msg = format!("a number past TOML's integers (at most {})", i64::MAX);
            }
            match e.span() {
                Some(span) => {
                    let line = line_at(text, span.start);
                    match key_on_line(text, line) {
                        Some(key) => format!("line {line}: {key}: {msg}"),
                        None => format!("line {line}: {msg}"),
                    }
                }
                None => msg,
            }
        };
        let table: toml::Table = toml::from_str(text).map_err(at)?;
        let spans = toml::de::DeTable::parse(text).map_err(at)?;
        let lines = spans
            .get_ref()
            .iter()
            .map(|(key, _)| (key.get_ref().to_string(), line_at(text, key.span().start)))
            .collect();
        let item_lines = spans
            .get_ref()
            .iter()
            .filter_map(|(key, value)| match value.get_ref() {
                toml::de::DeValue::Array(items) => Some((
                    key.get_ref().to_string(),
                    items
                        .iter()
                        .map(|item| line_at(text, item.span().start))
                        .collect(),
                )),
                _ => None,
            })
            .collect();
        Ok(TomlFile {
            table,
            lines,
            item_lines,
        })
    }

    /// The line `key` is set on.
    pub(crate) fn line(&self, key: &str) -> usize {
        self.lines.get(key).copied().unwrap_or(1)
    }

    /// The line of the item of `key`'s array that `set` refuses: each
    /// item tried alone (only once the whole was refused), so that an
    /// error in the third `[[proxy]]` table names that table's line, not
    /// the first's. The key's line when it is not an array, or no item
    /// alone is refused.
    fn refused_item_line(&self, key: &str) -> usize {
        let (Some(toml::Value::Array(items)), Some(lines)) =
            (self.table.get(key), self.item_lines.get(key))
        else {
            return self.line(key);
        };
        items
            .iter()
            .zip(lines)
            .find(|(item, _)| {
                ConfigLayer::default()
                    .set(key, &toml::Value::Array(vec![(*item).clone()]))
                    .is_err()
            })
            .map_or_else(|| self.line(key), |(_, line)| *line)
    }

    /// mpm's settings among `keys` of this file: an unknown key, or a value
    /// that is not its setting's kind, is one line naming the line.
    pub(crate) fn layer<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a String>,
    ) -> Result<ConfigLayer, String> {
        let mut layer = ConfigLayer::default();
        for key in keys {
            let Some(value) = self.table.get(key) else {
                continue;
            };
            let line = self.line(key);
            match layer.set(key, value) {
                Ok(true) => {}
                Ok(false) => return Err(format!("line {line}: {}", unknown_key(key))),
                Err(e) => {
                    let line = self.refused_item_line(key);
                    return Err(format!("line {line}: {key}: {e}"));
                }
            }
        }
        Ok(layer)
    }
}

/// The line (from 1) of byte `offset` of `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The bare key set on line `line` (from 1) of `text` (`key = value`),
/// to name it in a parse error of its value.
fn key_on_line(text: &str, line: usize) -> Option<&str> {
    let (key, _) = text.lines().nth(line.checked_sub(1)?)?.split_once('=')?;
    let key = key.trim();
    (!key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then_some(key)
}

/// A key no setting has, as one short line: the one meant, if one is close,
/// and where the keys are listed.
fn unknown_key(key: &str) -> String {
    let names: Vec<String> = SETTINGS.iter().map(|s| s.name()).collect();
    let guess = did_you_mean(key, names.iter().map(String::as_str))
        .map(|g| format!(" (did you mean `{g}`?)"))
        .unwrap_or_default();
    format!(
        "unknown key `{key}`{guess}; the keys are the flags' names without `--` (mpm serve --help)"
    )
}

impl ConfigLayer {
    /// Read a TOML file of settings. Errors are one line naming the file,
    /// the line and the problem.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::config(format!("config {}: {e}", path.display())))?;
        Self::from_toml(&text).map_err(|e| Error::config(format!("config {}: {e}", path.display())))
    }

    /// Parse settings from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let file = TomlFile::parse(text)?;
        file.layer(file.table.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_file_keys_are_one_line_naming_the_line() {
        let err = ConfigLayer::from_toml("mpm = \"worker\"\n\nbogus-key = 1\n").unwrap_err();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("line 3") && err.contains("bogus-key"), "{err}");
        let err = ConfigLayer::from_toml("baklog = 3\n").unwrap_err();
        assert!(err.contains("`baklog` (did you mean `backlog`?)"), "{err}");
        assert!(err.len() < 160, "{err}");
    }

    #[test]
    fn a_table_without_a_programs_keys_names_the_line_of_a_bad_one() {
        let text = "mpm = \"worker\"\n\n  backlog = \"many\"\nmax-keys = 3\n";
        let file = TomlFile::parse(text).unwrap();
        let mpm: Vec<&String> = file.table.keys().filter(|k| *k != "max-keys").collect();
        let err = file.layer(mpm).unwrap_err();
        assert!(err.starts_with("line 3: backlog: "), "{err}");
        assert_eq!(file.line("max-keys"), 4);
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let err = TomlFile::parse("mpm = \"worker\"\nbacklog = \n").unwrap_err();
        assert!(err.starts_with("line 2: "), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    /// The line of the `[[proxy]]` table (or list item) that is wrong, not
    /// the first's: the whole array is one key of the file.
    #[test]
    fn a_bad_item_of_an_array_names_its_own_line() {
        let text = "[[proxy]]\nprefix = \"/a/\"\nupstreams = [\"http://a\"]\n\n\
                    [[proxy]]\nprefix = \"/b/\"\nupstreams = [\"http://b\"]\nbalance = \"random\"\n";
        let err = ConfigLayer::from_toml(text).unwrap_err();
        assert!(err.starts_with("line 5: proxy: [[proxy]] /b/: "), "{err}");
        let text = "proxy = [\n  \"/a/=http://a\",\n  \"/b/=ftp://b\",\n]\n";
        let err = ConfigLayer::from_toml(text).unwrap_err();
        assert!(err.starts_with("line 3: proxy: "), "{err}");
    }

    /// TOML's integers are i64: a larger number is refused by the parser,
    /// in words that name the key and the bound, not a Rust type.
    #[test]
    fn a_number_past_tomls_integers_names_its_key_and_the_bound() {
        let err = ConfigLayer::from_toml("mpm = \"event\"\nbacklog = 99999999999999999999\n")
            .unwrap_err();
        assert_eq!(
            err,
            "line 2: backlog: a number past TOML's integers (at most 9223372036854775807)"
        );
    }

    #[test]
    fn a_switch_in_a_file_is_on_off_or_a_boolean() {
        assert_eq!(
            ConfigLayer::from_toml("gzip = true\nautoindex = \"on\"\n")
                .map(|l| (l.gzip, l.autoindex)),
            Ok((
                Some(super::super::OnOff(true)),
                Some(super::super::OnOff(true))
            ))
        );
        let err = ConfigLayer::from_toml("gzip = \"yes\"\n").unwrap_err();
        assert!(
            err.contains("line 1: gzip: invalid value 'yes' (expected on, off)"),
            "{err}"
        );
    }
}
