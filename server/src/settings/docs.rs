//! `docs/configuration.md`, generated from the declarations: every setting
//! with its flag, TOML key, default, values or bounds and meaning, grouped
//! by section. A test fails when the committed file is stale; it writes the
//! file anew when run with `MPM_BLESS=1`:
//!
//! ```text
//! MPM_BLESS=1 cargo test -p mpm --lib the_settings_table_in_the_docs_is_current
//! ```

use super::declare::{Section, Setting};
use super::SETTINGS;

/// The whole of `docs/configuration.md`.
pub(crate) fn configuration_md() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         <!-- Generated from server/src/settings/table.rs: do not edit. Regenerate with\n     \
         MPM_BLESS=1 cargo test -p mpm --lib the_settings_table_in_the_docs_is_current -->\n\n\
         Every setting is a flag of `mpm serve` and `mpm check`, and a key of the TOML file\n\
         given with `--config FILE.toml` (the flag's name without `--`: `max-request-workers = 64`).\n\
         A flag given on the command line wins over the file, the file over the defaults\n\
         (a value in the file is checked against its bounds all the same).\n\
         A setting marked *repeatable* is given several times on the command line and is an\n\
         array in the file. A switch is `on` or `off` (in the file, also `true` or `false`).\n\
         A duration is seconds (`5`, `2.5`) or has a unit (`500ms`, `5s`, `2m`).\n",
    );
    for section in Section::ALL {
        out.push_str(&format!("\n## {}\n\n", section.title()));
        out.push_str("| flag | TOML key | default | values | meaning |\n|---|---|---|---|---|\n");
        for s in SETTINGS.iter().filter(|s| s.section == section) {
            out.push_str(&row(s));
        }
        if section == Section::Proxy {
            out.push_str(&proxy_table());
        }
    }
    out
}

/// The keys of a `[[proxy]]` table, after the proxy's flags.
fn proxy_table() -> String {
    let mut out = String::from(
        "\nIn the file, each `[[proxy]]` table is one route, with these keys, written with \
         `_` as nginx's or `-` as the file's other keys (in parentheses, the defaults: nginx's \
         where nginx has the setting):\n\n\
         | key | value |\n|---|---|\n",
    );
    for (key, what) in super::proxy::TABLE_KEYS {
        out.push_str(&format!("| `{key}` | {} |\n", cell(what)));
    }
    out.push_str(
        "\n```toml\n[[proxy]]\nprefix = \"/api/\"\n\
         upstreams = [\"http://10.0.0.2:8080/v1/\", { url = \"http://10.0.0.3:8080/v1/\", weight = 2 }]\n\
         balance = \"least-conn\"\nhealth_path = \"/healthz\"\n```\n",
    );
    out
}

/// One setting's row.
fn row(s: &Setting) -> String {
    let name = s.name();
    let mut values = match (s.choices)() {
        Some(choices) => choices
            .iter()
            .map(|(c, _)| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", "),
        None => s.bounds.describe(),
    };
    if s.repeatable {
        values = if values.is_empty() {
            "repeatable".into()
        } else {
            format!("{values}; repeatable")
        };
    }
    format!(
        "| `--{name} {}` | `{name}` | {} | {} | {} |\n",
        s.value_name.replace('|', "\\|"),
        cell(&(s.default)()),
        cell(&values),
        cell(&s.help())
    )
}

/// Text as a table cell: its bars escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_table_in_the_docs_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let generated = configuration_md();
        if std::env::var_os("MPM_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/configuration.md differs from the settings declared in \
             server/src/settings/table.rs; regenerate it with \
             `MPM_BLESS=1 cargo test -p mpm --lib the_settings_table_in_the_docs_is_current`"
        );
    }

    #[test]
    fn every_setting_is_in_one_section_of_the_table() {
        let md = configuration_md();
        for s in SETTINGS {
            let flag = format!("| `--{} ", s.name());
            assert_eq!(md.matches(&flag).count(), 1, "{flag}");
        }
    }
}
