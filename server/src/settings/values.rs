//! The kinds of value a setting takes, and how each is read from a
//! command-line word and from a TOML value: numbers, durations, switches
//! (`on|off`), `--server-limit`'s `N|auto`, names ([`Choice`]), paths and
//! text. Reading a value never checks its bounds: [`Bounds`] does, once,
//! for both sources.

use std::path::PathBuf;
use std::str::FromStr;

use mpm_core::allocator::AllocatorKind;
use mpm_core::error_log::LogLevel;
use mpm_core::listener_poller::PollerKind;
use mpm_core::{Choice, MpmKind, Seconds};
use mpm_http::access_log::LogWrite;
use mpm_http::log_format::LogFormat;
use mpm_prefork::AcceptMutex;
use mpm_site::Dotfiles;

/// The words a value may be, each with its other names (aliases).
pub type Choices = Vec<(&'static str, Vec<&'static str>)>;

/// A kind of setting value: read from a command-line word or a TOML value,
/// shown back (for defaults), and measured (for [`Bounds`]).
pub trait Value: Clone + Send + Sync + 'static {
    /// The value a command-line word (or a TOML string) names.
    fn parse(word: &str) -> Result<Self, String>;

    /// The value of a TOML value: its strings as the command line's words.
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::String(s) => Self::parse(s),
            other => Err(format!("expected a string, found {}", other.type_str())),
        }
    }

    /// How the value is written (`on`, `60s`, `worker`).
    fn show(&self) -> String;

    /// The only words the value may be, if it is one of a few; the command
    /// line then lists them when given another.
    fn choices() -> Option<Choices> {
        None
    }

    /// Whether the flag may be given again, its values joined by
    /// [`join`](Self::join) (a list: `--gzip-types a --gzip-types b`).
    const REPEATS: bool = false;

    /// The values of a flag given several times: the last, unless the
    /// value is a list.
    fn join(values: Vec<Self>) -> Option<Self> {
        values.into_iter().last()
    }

    /// The number [`Bounds`] are checked against, for a number or a duration
    /// (nanoseconds).
    fn magnitude(&self) -> Option<u128> {
        None
    }

    /// Whether a negative number after the flag (`-1`, `-5`, `-2.5`) is
    /// still its value, so that the setting names itself and its values
    /// instead of clap calling the word an unexpected argument: numbers and
    /// durations. (Only words that are numbers: a flag after another whose
    /// value was left out, `--timeout --listen ADDR`, is still told the
    /// value is missing.)
    const TAKES_NEGATIVE: bool = false;

    /// [`parse`](Self::parse), its complaint naming the values `bounds`
    /// allow: a number's type takes far more than most settings do
    /// (`--gzip-level 4294967296` is not "a number from 0 to 4294967295").
    fn parse_within(word: &str, _bounds: Bounds) -> Result<Self, String> {
        Self::parse(word)
    }

    /// [`from_toml`](Self::from_toml), its complaint naming the values
    /// `bounds` allow.
    fn from_toml_within(value: &toml::Value, _bounds: Bounds) -> Result<Self, String> {
        Self::from_toml(value)
    }
}

/// The whole numbers from `bounds`' least to its greatest, within a type
/// whose greatest is `max`: `from 1 to 9`.
fn whole_numbers(bounds: Bounds, max: u128) -> String {
    let (lo, hi) = match bounds {
        Bounds::Between(lo, hi) => (lo, hi.min(max)),
        Bounds::Any | Bounds::NonZero => (0, max),
    };
    format!("from {lo} to {hi}")
}

/// Which values of a number or a duration a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bounds {
    /// Any value of its type.
    Any,
    /// From the first number to the second, both included.
    Between(u128, u128),
    /// A duration longer than zero.
    NonZero,
}

impl Bounds {
    /// At least `min`.
    pub const fn at_least(min: u128) -> Bounds {
        Bounds::Between(min, u128::MAX)
    }

    /// At most `max`.
    pub const fn at_most(max: u128) -> Bounds {
        Bounds::Between(0, max)
    }

    /// `value` of `--name` if it is within bounds, else the one-line complaint.
    pub fn check<V: Value>(self, name: &str, value: &V) -> Result<(), String> {
        match self.complaint(value) {
            Some(c) => Err(format!("--{name} {c}")),
            None => Ok(()),
        }
    }

    /// What is wrong with `value` for these bounds, said as it follows the
    /// setting's name (`0: at least 1 (between 1 and 20000)`): after the
    /// flag in [`check`](Self::check), after the key in a file's error.
    pub fn complaint<V: Value>(self, value: &V) -> Option<String> {
        let m = value.magnitude()?;
        match self {
            Bounds::Any => None,
            Bounds::NonZero if m == 0 => Some(format!("{}: must be more than zero", value.show())),
            Bounds::NonZero => None,
            Bounds::Between(min, max) if m < min || m > max => {
                let bound = if m < min {
                    format!("at least {min}")
                } else {
                    format!("at most {max}")
                };
                // A range bounded on both sides says both.
                let range = if min > 0 && max < u128::MAX {
                    format!(" (between {min} and {max})")
                } else {
                    String::new()
                };
                Some(format!("{}: {bound}{range}", value.show()))
            }
            Bounds::Between(..) => None,
        }
    }

    /// The bounds in words, for the settings table (empty: none).
    pub fn describe(self) -> String {
        match self {
            Bounds::Any | Bounds::Between(0, u128::MAX) => String::new(),
            Bounds::NonZero => "more than 0".into(),
            Bounds::Between(min, u128::MAX) => format!("at least {min}"),
            Bounds::Between(0, max) => format!("at most {max}"),
            Bounds::Between(min, max) => format!("{min} to {max}"),
        }
    }
}

/// The candidate `given` was most likely meant as, if one is close enough:
/// the fewest single-letter edits (a swap of two neighbours counts as one,
/// strsim's optimal string alignment), at most a third of the word's length
/// (and at least two).
pub(crate) fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let given = given.to_ascii_lowercase();
    let limit = (given.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (strsim::osa_distance(&given, &c.to_ascii_lowercase()), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// A switch written `on` or `off`, as httpd's directives are (in a file,
/// also a TOML boolean).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl FromStr for OnOff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("on") {
            Ok(OnOff(true))
        } else if s.eq_ignore_ascii_case("off") {
            Ok(OnOff(false))
        } else {
            Err(format!("invalid value '{s}' (expected on, off)"))
        }
    }
}

impl Value for OnOff {
    fn parse(word: &str) -> Result<Self, String> {
        word.parse()
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Boolean(b) => Ok(OnOff(*b)),
            toml::Value::String(s) => s.parse(),
            other => Err(format!("expected on or off, found {}", other.type_str())),
        }
    }

    fn show(&self) -> String {
        if self.0 { "on" } else { "off" }.into()
    }

    fn choices() -> Option<Choices> {
        Some(vec![("on", vec![]), ("off", vec![])])
    }
}

/// `--server-limit`: a number of serving processes, or `auto`, one per CPU
/// the server may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerLimit {
    /// One serving process per CPU this process may use: its affinity mask
    /// and cgroup CPU quota, as `std::thread::available_parallelism` reads
    /// them (nginx's `worker_processes auto`).
    Auto,
    /// This many.
    Count(usize),
}

impl FromStr for ServerLimit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(ServerLimit::Auto);
        }
        s.parse()
            .map(ServerLimit::Count)
            .map_err(|_| format!("'{s}' is not a number of processes or auto"))
    }
}

impl Value for ServerLimit {
    fn parse(word: &str) -> Result<Self, String> {
        word.parse()
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(n) => usize::try_from(*n)
                .map(ServerLimit::Count)
                .map_err(|_| format!("'{n}' is not a number of processes or auto")),
            toml::Value::String(s) => s.parse(),
            other => Err(format!(
                "expected a number or auto, found {}",
                other.type_str()
            )),
        }
    }

    fn show(&self) -> String {
        match self {
            ServerLimit::Auto => "auto".into(),
            ServerLimit::Count(n) => n.to_string(),
        }
    }

    const TAKES_NEGATIVE: bool = true;
}

/// `--cpu-affinity`: whether each serving process is pinned to a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuAffinity {
    /// Serving process N runs on the Nth CPU this server may use (in turn,
    /// when there are more processes than CPUs), as nginx's
    /// `worker_cpu_affinity auto`.
    Auto,
    /// The scheduler places every process (and thread) where it likes.
    #[default]
    Off,
}

impl Choice for CpuAffinity {
    const ALL: &'static [Self] = &[CpuAffinity::Auto, CpuAffinity::Off];

    fn name(self) -> &'static str {
        match self {
            CpuAffinity::Auto => "auto",
            CpuAffinity::Off => "off",
        }
    }
}

/// Every [`Choice`] is a value: its names, in any case.
macro_rules! choice_values {
    ($($t:ty),* $(,)?) => {$(
        impl Value for $t {
            fn parse(word: &str) -> Result<Self, String> {
                <$t as Choice>::from_name(word).map_err(|e| {
                    let names = <$t as Choice>::ALL.iter().map(|v| Choice::name(*v));
                    match did_you_mean(word, names) {
                        Some(guess) => format!("{e} (did you mean '{guess}'?)"),
                        None => e,
                    }
                })
            }

            fn show(&self) -> String {
                Choice::name(*self).to_string()
            }

            fn choices() -> Option<Choices> {
                Some(
                    <$t as Choice>::ALL
                        .iter()
                        .map(|&v| {
                            let aliases = <$t as Choice>::aliases()
                                .iter()
                                .filter(|(_, a)| *a == v)
                                .map(|(name, _)| *name)
                                .collect();
                            (Choice::name(v), aliases)
                        })
                        .collect(),
                )
            }
        }
    )*};
}

choice_values!(
    MpmKind,
    PollerKind,
    LogLevel,
    AllocatorKind,
    AcceptMutex,
    LogFormat,
    LogWrite,
    Dotfiles,
    CpuAffinity,
);

/// Whole numbers: decimal on the command line, integers (or their text) in
/// a file.
macro_rules! number_values {
    ($($t:ty),* $(,)?) => {$(
        impl Value for $t {
            fn parse(word: &str) -> Result<Self, String> {
                word.trim().parse().map_err(|_| {
                    format!("'{word}' is not a whole number from 0 to {}", <$t>::MAX)
                })
            }

            fn from_toml(value: &toml::Value) -> Result<Self, String> {
                match value {
                    toml::Value::Integer(n) => <$t>::try_from(*n).map_err(|_| {
                        format!("'{n}' is not a whole number from 0 to {}", <$t>::MAX)
                    }),
                    toml::Value::String(s) => Self::parse(s),
                    other => Err(format!("expected a number, found {}", other.type_str())),
                }
            }

            fn show(&self) -> String {
                self.to_string()
            }

            fn magnitude(&self) -> Option<u128> {
                u128::try_from(*self).ok()
            }

            const TAKES_NEGATIVE: bool = true;

            fn parse_within(word: &str, bounds: Bounds) -> Result<Self, String> {
                Self::parse(word).map_err(|_| {
                    format!(
                        "'{word}' is not a whole number {}",
                        whole_numbers(bounds, <$t>::MAX as u128)
                    )
                })
            }

            fn from_toml_within(value: &toml::Value, bounds: Bounds) -> Result<Self, String> {
                let shown = match value {
                    toml::Value::Integer(n) => n.to_string(),
                    toml::Value::String(s) => s.clone(),
                    _ => return Self::from_toml(value),
                };
                Self::from_toml(value).map_err(|_| {
                    format!(
                        "'{shown}' is not a whole number {}",
                        whole_numbers(bounds, <$t>::MAX as u128)
                    )
                })
            }
        }
    )*};
}

number_values!(u32, u64, usize);

impl Value for Seconds {
    fn parse(word: &str) -> Result<Self, String> {
        word.parse()
    }

    /// Whole seconds, a float, or text; every form bounded as the command
    /// line's is (the integer form once skipped the cap).
    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(n) => match u64::try_from(*n) {
                Ok(n) => Seconds::from_whole(n),
                Err(_) => Err(format!("'{n}' is not a duration (try 5, 2.5s or 500ms)")),
            },
            toml::Value::Float(f) => Seconds::from_float(*f),
            toml::Value::String(s) => s.parse(),
            other => Err(format!("expected a duration, found {}", other.type_str())),
        }
    }

    fn show(&self) -> String {
        let t = self.0;
        if t.subsec_millis() == 0 {
            format!("{}s", t.as_secs())
        } else {
            format!("{}ms", t.as_millis())
        }
    }

    fn magnitude(&self) -> Option<u128> {
        Some(self.0.as_nanos())
    }

    const TAKES_NEGATIVE: bool = true;
}

impl Value for String {
    fn parse(word: &str) -> Result<Self, String> {
        Ok(word.to_string())
    }

    fn show(&self) -> String {
        self.clone()
    }
}

impl Value for PathBuf {
    fn parse(word: &str) -> Result<Self, String> {
        Ok(PathBuf::from(word))
    }

    fn show(&self) -> String {
        self.display().to_string()
    }
}

/// A list in one value: comma-separated on the command line, an array in a
/// file (`--gzip-types`).
impl Value for Vec<String> {
    fn parse(word: &str) -> Result<Self, String> {
        Ok(word.split(',').map(str::to_string).collect())
    }

    fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Array(items) => items.iter().map(String::from_toml).collect(),
            other => Err(format!("expected an array, found {}", other.type_str())),
        }
    }

    fn show(&self) -> String {
        self.join(",")
    }

    const REPEATS: bool = true;

    fn join(values: Vec<Self>) -> Option<Self> {
        Some(values.concat())
    }
}

/// How a setting's merged value becomes its field of
/// [`Config`](super::Config): a switch a `bool`, a duration a `Duration`,
/// anything else as it is; a setting without a default stays an `Option`.
pub(crate) trait Resolve<Out> {
    /// The field's value; `id` names the setting if it has none.
    fn resolve(self, id: &str) -> mpm_core::Result<Out>;
}

/// The value of a setting the declarations give a default: always there
/// once the layers are merged over the defaults.
fn given<T>(value: Option<T>, id: &str) -> mpm_core::Result<T> {
    value.ok_or_else(|| mpm_core::Error::config(format!("--{}: no value", id.replace('_', "-"))))
}

impl<T: Value> Resolve<T> for Option<T> {
    fn resolve(self, id: &str) -> mpm_core::Result<T> {
        given(self, id)
    }
}

impl Resolve<bool> for Option<OnOff> {
    fn resolve(self, id: &str) -> mpm_core::Result<bool> {
        given(self, id).map(|s| s.0)
    }
}

impl Resolve<std::time::Duration> for Option<Seconds> {
    fn resolve(self, id: &str) -> mpm_core::Result<std::time::Duration> {
        given(self, id).map(|s| s.0)
    }
}

impl Resolve<Option<PathBuf>> for Option<PathBuf> {
    fn resolve(self, _id: &str) -> mpm_core::Result<Option<PathBuf>> {
        Ok(self)
    }
}

impl Resolve<Option<AllocatorKind>> for Option<AllocatorKind> {
    fn resolve(self, _id: &str) -> mpm_core::Result<Option<AllocatorKind>> {
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_the_near_miss_only() {
        let keys = ["backlog", "listen", "max-request-workers", "timeout"];
        assert_eq!(did_you_mean("baklog", keys), Some("backlog"));
        assert_eq!(did_you_mean("lisetn", keys), Some("listen"));
        assert_eq!(
            did_you_mean("max-request-worker", keys),
            Some("max-request-workers")
        );
        assert_eq!(did_you_mean("bogus-key", keys), None);
    }

    #[test]
    fn a_switch_is_on_or_off_and_nothing_else() {
        assert_eq!(OnOff::parse("on"), Ok(OnOff(true)));
        assert_eq!(OnOff::parse("OFF"), Ok(OnOff(false)));
        for bad in ["yes", "true", "1", "no", ""] {
            let err = OnOff::parse(bad).unwrap_err();
            assert!(err.contains("expected on, off"), "{bad}: {err}");
        }
        // A file may write a TOML boolean, but not other words.
        assert_eq!(
            OnOff::from_toml(&toml::Value::Boolean(true)),
            Ok(OnOff(true))
        );
        assert!(OnOff::from_toml(&toml::Value::String("yes".into())).is_err());
    }

    #[test]
    fn every_form_of_a_duration_in_a_file_is_bounded() {
        for text in [
            "d = 1000000001",
            "d = 1e300",
            "d = \"18446744073709551615s\"",
        ] {
            let table: toml::Table = toml::from_str(text).unwrap();
            let err = Seconds::from_toml(&table["d"]).unwrap_err();
            assert!(err.contains("too long"), "{text}: {err}");
        }
        let table: toml::Table = toml::from_str("d = 5").unwrap();
        assert!(Seconds::from_toml(&table["d"]).is_ok());
    }

    #[test]
    fn a_word_that_is_no_number_is_told_the_settings_own_range() {
        // Once the type's range: "from 0 to 4294967295" for --gzip-level.
        assert_eq!(
            u32::parse_within("4294967296", Bounds::Between(1, 9)).unwrap_err(),
            "'4294967296' is not a whole number from 1 to 9"
        );
        assert_eq!(
            usize::parse_within("-1", Bounds::at_most(10_000)).unwrap_err(),
            "'-1' is not a whole number from 0 to 10000"
        );
        assert_eq!(
            u32::parse_within("x", Bounds::Any).unwrap_err(),
            "'x' is not a whole number from 0 to 4294967295"
        );
        let t: toml::Table = toml::from_str("n = -1").unwrap();
        assert_eq!(
            u32::from_toml_within(&t["n"], Bounds::at_least(1)).unwrap_err(),
            "'-1' is not a whole number from 1 to 4294967295"
        );
        assert!(u32::from_toml_within(&t["n"], Bounds::Any).is_err());
    }

    #[test]
    fn bounds_name_the_setting_and_the_limit() {
        let err = Bounds::at_most(20_000)
            .check("threads-per-child", &72_057_594_037_927_936usize)
            .unwrap_err();
        assert!(err.starts_with("--threads-per-child ") && err.contains("at most 20000"));
        let err = Bounds::Between(1, 9)
            .check("gzip-level", &12u32)
            .unwrap_err();
        assert_eq!(err, "--gzip-level 12: at most 9 (between 1 and 9)");
        assert!(Bounds::at_least(1).check("backlog", &0u32).is_err());
        assert!(Bounds::NonZero
            .check("timeout", &Seconds(std::time::Duration::ZERO))
            .is_err());
        assert_eq!(Bounds::Between(16, 1024).describe(), "16 to 1024");
    }
}
