//! How a setting is declared once ([`settings!`]
//! in `table.rs`) and what the declaration makes: the [`ConfigLayer`]
//! field, its flag (built with clap's builder API), its TOML key, its
//! default, its bounds and the line in `docs/configuration.md`.
//!
//! [`ConfigLayer`]: crate::settings::ConfigLayer

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser, ValueParser};
use clap::{Arg, ArgAction, ArgMatches};

use super::values::{Bounds, Choices, Value};

/// Where a setting's value is held in a layer: `Option<T>` for a setting
/// given once, `Vec<T>` for one repeated (`--listen A --listen B`, a TOML
/// array).
pub(crate) trait Slot: Default + Clone + Send + Sync + 'static {
    /// The kind of each value.
    type Item: Value;
    /// Whether the flag may be repeated.
    const MANY: bool;

    /// The values given on the command line.
    fn from_matches(matches: &ArgMatches, id: &str) -> Self;
    /// The values a file's key gives, a complaint naming the values
    /// `bounds` allow.
    fn from_toml(value: &toml::Value, bounds: Bounds) -> Result<Self, String>;
    /// This layer's value, else `lower`'s.
    fn or(self, lower: Self) -> Self;
    /// The values held.
    fn items(&self) -> Vec<&Self::Item>;
    /// The slot holding one value.
    fn of(item: Self::Item) -> Self;
}

impl<T: Value> Slot for Option<T> {
    type Item = T;
    const MANY: bool = false;

    fn from_matches(matches: &ArgMatches, id: &str) -> Self {
        let given = matches.try_get_many::<T>(id).ok().flatten()?;
        T::join(given.cloned().collect())
    }

    fn from_toml(value: &toml::Value, bounds: Bounds) -> Result<Self, String> {
        T::from_toml_within(value, bounds).map(Some)
    }

    fn or(self, lower: Self) -> Self {
        self.or(lower)
    }

    fn items(&self) -> Vec<&T> {
        self.iter().collect()
    }

    fn of(item: T) -> Self {
        Some(item)
    }
}

impl<T: Value> Slot for Vec<T> {
    type Item = T;
    const MANY: bool = true;

    fn from_matches(matches: &ArgMatches, id: &str) -> Self {
        matches
            .try_get_many::<T>(id)
            .ok()
            .flatten()
            .map(|v| v.cloned().collect())
            .unwrap_or_default()
    }

    fn from_toml(value: &toml::Value, bounds: Bounds) -> Result<Self, String> {
        match value {
            toml::Value::Array(items) => items
                .iter()
                .map(|v| T::from_toml_within(v, bounds))
                .collect(),
            other => Err(format!("expected an array, found {}", other.type_str())),
        }
    }

    fn or(self, lower: Self) -> Self {
        if self.is_empty() {
            lower
        } else {
            self
        }
    }

    fn items(&self) -> Vec<&T> {
        self.iter().collect()
    }

    fn of(item: T) -> Self {
        vec![item]
    }
}

/// The parts of the settings table, in the order the docs list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The process model and how many processes and threads serve.
    Processes,
    /// Listening sockets and TLS.
    Listening,
    /// Connections and requests: keep-alive, timeouts, limits.
    Requests,
    /// The static site (`--docroot`).
    Site,
    /// The reverse proxy (`--proxy`).
    Proxy,
    /// The status page and metrics.
    Status,
    /// Logs.
    Logs,
    /// Running the server: pid file, user, upgrades, the allocator.
    Operation,
}

impl Section {
    /// Every section, in order.
    pub const ALL: [Section; 8] = [
        Section::Processes,
        Section::Listening,
        Section::Requests,
        Section::Site,
        Section::Proxy,
        Section::Status,
        Section::Logs,
        Section::Operation,
    ];

    /// The section's title.
    pub fn title(self) -> &'static str {
        match self {
            Section::Processes => "Processes and threads",
            Section::Listening => "Listening and TLS",
            Section::Requests => "Connections and requests",
            Section::Site => "The static site",
            Section::Proxy => "Reverse proxy",
            Section::Status => "Status page and metrics",
            Section::Logs => "Logs",
            Section::Operation => "Running the server",
        }
    }
}

/// One setting, as declared: everything the command line, the file, the
/// help and the docs need to know of it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The field of [`ConfigLayer`](super::ConfigLayer), which is also the
    /// flag's clap id (`max_request_workers`).
    pub id: &'static str,
    /// The placeholder of its value in the help (`N`, `DURATION`, `on|off`).
    pub value_name: &'static str,
    /// What it does, from its doc comment.
    pub help: &'static str,
    /// Where the docs list it.
    pub section: Section,
    /// Which numbers or durations it takes.
    pub bounds: Bounds,
    /// Whether the flag may be repeated (a TOML array).
    pub repeatable: bool,
    /// Its default, as the help and the docs show it.
    pub default: fn() -> String,
    /// The words it may be, when it is one of a few.
    pub choices: fn() -> Option<Choices>,
    /// Its flag.
    pub arg: fn(&Setting) -> Arg,
}

impl Setting {
    /// Its flag's name without `--`, which is also its TOML key
    /// (`max-request-workers`).
    pub fn name(&self) -> String {
        self.id.replace('_', "-")
    }

    /// The help text: the doc comment's lines as one paragraph.
    pub fn help(&self) -> String {
        self.help.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// The flag of a setting held in slot `S`: `--NAME VALUE`, its value read by
/// the same [`Value::parse`] a file's string goes through, with no default
/// of its own (a flag not given must leave the file's value alone).
pub(crate) fn arg<S: Slot>(setting: &Setting) -> Arg {
    let arg = Arg::new(setting.id)
        .long(setting.name())
        .value_name(setting.value_name)
        .help_heading(setting.section.title())
        .help(format!(
            "{} [default: {}]",
            setting.help(),
            (setting.default)()
        ))
        .required(false)
        .allow_negative_numbers(<S::Item as Value>::TAKES_NEGATIVE)
        .action(if S::MANY || <S::Item as Value>::REPEATS {
            ArgAction::Append
        } else {
            ArgAction::Set
        });
    match <S::Item as Value>::choices() {
        // One of a few words: clap lists them (and the one meant) when
        // given another; the value name already shows them in the help.
        Some(choices) => {
            let possible = choices
                .into_iter()
                .map(|(name, aliases)| PossibleValue::new(name).aliases(aliases));
            let parser = PossibleValuesParser::new(possible)
                .try_map(|word: String| <S::Item as Value>::parse(&word));
            arg.value_parser(ValueParser::new(parser))
                .ignore_case(true)
                .hide_possible_values(true)
        }
        None => {
            let bounds = setting.bounds;
            arg.value_parser(ValueParser::new(move |word: &str| {
                <S::Item as Value>::parse_within(word, bounds)
            }))
        }
    }
}

/// Declare every setting once (see `table.rs`): each entry's doc comment is
/// its help, then `field: Slot` (the [`ConfigLayer`](super::ConfigLayer)
/// field, whose name with dashes is the flag and the TOML key), its value
/// name, its default (`value(EXPR)`, a value of its type the layers fall
/// back on; or `text("...")`, where the default is worked out from other
/// settings), its [`Bounds`], and the [`Config`](super::Config) fields it
/// makes (`config = TYPE`: its value as it is; `config by hand { FIELDS }`:
/// fields `resolve.rs` fills).
macro_rules! settings {
    ($(
        [$section:ident]
        $(
            $(#[doc = $doc:literal])*
            $field:ident: $slot:ty, $value_name:literal,
            default = $kind:ident($default:expr), bounds = $bounds:expr,
            config
            $(by hand {
                $( $(#[doc = $cdoc:literal])* $cfield:ident: $cty:ty ),* $(,)?
            })?
            $(= $out:ty)?;
        )*
    )*) => {
        /// One source of settings, every field optional: the command line,
        /// a TOML file whose keys are the flags' names
        /// (`max-request-workers = 64`), or an application's defaults.
        ///
        /// Layers are merged by [`or`](Self::or) and checked by
        /// [`Config::resolve`](crate::Config::resolve); a value given on
        /// the command line wins over the file.
        #[derive(Debug, Clone, Default)]
        pub struct ConfigLayer {
            $($(
                $(#[doc = $doc])*
                pub $field: $slot,
            )*)*
        }

        /// Every setting, in the order `serve --help` lists them.
        pub static SETTINGS: &[$crate::settings::declare::Setting] = &[
            $($(
                $crate::settings::declare::Setting {
                    id: stringify!($field),
                    value_name: $value_name,
                    help: concat!($($doc, "\n",)*),
                    section: $crate::settings::declare::Section::$section,
                    bounds: $bounds,
                    repeatable: <$slot as $crate::settings::declare::Slot>::MANY,
                    default: || settings!(@show $slot, $kind($default)),
                    choices: <<$slot as $crate::settings::declare::Slot>::Item
                        as $crate::settings::values::Value>::choices,
                    arg: $crate::settings::declare::arg::<$slot>,
                },
            )*)*
        ];

        impl ConfigLayer {
            /// Fill every field this layer leaves unset from `lower`.
            pub fn or(self, lower: ConfigLayer) -> ConfigLayer {
                use $crate::settings::declare::Slot;
                ConfigLayer {
                    $($( $field: Slot::or(self.$field, lower.$field), )*)*
                }
            }

            /// mpm's own defaults, where a setting has a value of its own.
            pub(crate) fn defaults() -> ConfigLayer {
                ConfigLayer {
                    $($( $field: settings!(@value $slot, $kind($default)), )*)*
                }
            }

            /// Set the field of the file's `key` from its value; `Ok(false)`
            /// if no setting has that key.
            pub(crate) fn set(&mut self, key: &str, value: &toml::Value) -> Result<bool, String> {
                use $crate::settings::declare::Slot;
                $($(
                    if key == stringify!($field).replace('_', "-") {
                        self.$field = <$slot as Slot>::from_toml(value, $bounds)?;
                        // Checked here too, not only once merged: a value
                        // out of bounds in the file is refused even when a
                        // flag overrides it this time.
                        for v in Slot::items(&self.$field) {
                            // Said as the file's other errors are, after
                            // the key: "threads-per-child: 0: at least 1".
                            if let Some(c) = ($bounds).complaint(v) {
                                return Err(c);
                            }
                        }
                        return Ok(true);
                    }
                )*)*
                Ok(false)
            }

            /// Every value within its setting's bounds, or the one-line
            /// complaint about the first that is not.
            pub(crate) fn check_bounds(&self) -> Result<(), String> {
                use $crate::settings::declare::Slot;
                $($(
                    for v in Slot::items(&self.$field) {
                        ($bounds).check(&stringify!($field).replace('_', "-"), v)?;
                    }
                )*)*
                Ok(())
            }
        }

        /// A complete, validated configuration: every setting's value,
        /// checked, and what `resolve.rs` works out from several of them.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Config {
            $($(
                $(
                    #[doc = concat!(
                        "The value of [`ConfigLayer::", stringify!($field), "`], checked."
                    )]
                    pub $field: $out,
                )?
                $($(
                    $(#[doc = $cdoc])*
                    pub $cfield: $cty,
                )*)?
            )*)*
        }

        /// The fields of [`Config`] that `resolve.rs` works out by hand.
        pub(crate) struct ByHand {
            $($( $($(
                pub(crate) $cfield: $cty,
            )*)? )*)*
        }

        impl Config {
            /// The configuration of a merged, bounds-checked layer: each
            /// setting's value as it is, and the values worked out by hand.
            pub(crate) fn assemble(
                l: &ConfigLayer,
                by_hand: ByHand,
            ) -> mpm_core::Result<Config> {
                use $crate::settings::values::Resolve;
                Ok(Config {
                    $($(
                        $(
                            $field: <_ as Resolve<$out>>::resolve(
                                l.$field.clone(),
                                stringify!($field),
                            )?,
                        )?
                        $($( $cfield: by_hand.$cfield, )*)?
                    )*)*
                })
            }
        }

        impl clap::FromArgMatches for ConfigLayer {
            fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
                use $crate::settings::declare::Slot;
                Ok(ConfigLayer {
                    $($( $field: <$slot as Slot>::from_matches(matches, stringify!($field)), )*)*
                })
            }

            fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
                *self = Self::from_arg_matches(matches)?.or(std::mem::take(self));
                Ok(())
            }
        }

        impl clap::Args for ConfigLayer {
            fn augment_args(cmd: clap::Command) -> clap::Command {
                SETTINGS.iter().fold(cmd, |cmd, s| cmd.arg((s.arg)(s)))
            }

            fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                Self::augment_args(cmd)
            }
        }
    };
    (@value $slot:ty, value($default:expr)) => {
        <$slot as $crate::settings::declare::Slot>::of($default)
    };
    (@value $slot:ty, text($default:expr)) => {
        <$slot>::default()
    };
    (@show $slot:ty, value($default:expr)) => {{
        let v: <$slot as $crate::settings::declare::Slot>::Item = $default;
        $crate::settings::values::Value::show(&v)
    }};
    (@show $slot:ty, text($default:expr)) => {
        String::from($default)
    };
}

pub(crate) use settings;

#[cfg(test)]
mod tests {
    use clap::{Args, FromArgMatches};

    use super::super::{ConfigLayer, OnOff};

    fn parse(args: &[&str]) -> Result<ConfigLayer, clap::Error> {
        let cmd = ConfigLayer::augment_args(clap::Command::new("t"));
        let matches = cmd.try_get_matches_from(std::iter::once("t").chain(args.iter().copied()))?;
        ConfigLayer::from_arg_matches(&matches)
    }

    #[test]
    fn flags_fill_their_fields_and_a_list_may_be_given_twice() {
        let l = parse(&[
            "--listen",
            "127.0.0.1:1",
            "--listen",
            "127.0.0.1:2",
            "--gzip",
            "ON",
            "--gzip-types",
            "text/html",
            "--gzip-types",
            "text/css,image/svg+xml",
        ])
        .unwrap();
        assert_eq!(l.listen, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(l.gzip, Some(OnOff(true)));
        assert_eq!(
            l.gzip_types.as_deref(),
            Some(&["text/html", "text/css", "image/svg+xml"].map(String::from)[..])
        );
        assert_eq!(
            l.backlog, None,
            "a flag not given leaves the file's value alone"
        );
        assert!(parse(&["--backlog", "1", "--backlog", "2"]).is_err());
    }

    #[test]
    fn a_bad_word_names_the_flag_and_the_valid_values() {
        let err = parse(&["--autoindex", "true"]).unwrap_err().to_string();
        assert!(
            err.contains("'true'") && err.contains("--autoindex"),
            "{err}"
        );
        let err = parse(&["--mpm", "wroker"]).unwrap_err().to_string();
        assert!(err.contains("prefork, worker, event"), "{err}");
    }
}
