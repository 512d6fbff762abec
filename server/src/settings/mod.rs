//! Server configuration: command-line flags and an optional TOML file with
//! the same keys, the command line winning.
//!
//! * `table.rs` — every setting declared once: its help, its field of
//!   [`ConfigLayer`] (flag and TOML key), the name of its value, its
//!   default, its [`Bounds`] and the [`Config`] field it becomes;
//! * `declare.rs` — what a declaration makes ([`Setting`], [`SETTINGS`]):
//!   the layer, the clap arguments, the TOML keys, the defaults, [`Config`];
//! * `values.rs` — the kinds of value ([`Value`]): numbers, durations,
//!   [`OnOff`], [`ServerLimit`], [`CpuAffinity`], names;
//! * `toml_file.rs` — the file, every error on the line the parser points at;
//! * `resolve.rs` — from merged layers to a checked [`Config`], one short
//!   function per concern;
//! * `config.rs` — what each layer below (process model, HTTP, TLS) reads
//!   of the [`Config`];
//! * `listen.rs` — addresses, port ranges, host names;
//! * `proxy.rs` — `--proxy` and the file's `[[proxy]]` tables;
//! * `docs.rs` — `docs/configuration.md`, generated, and the test that
//!   fails when it is stale (`MPM_BLESS=1` writes it).

mod config;
pub(crate) mod declare;
#[cfg(test)]
mod docs;
mod listen;
mod proxy;
mod resolve;
mod table;
mod toml_file;
pub(crate) mod values;

pub use config::TlsConfig;
pub use declare::{Section, Setting};
pub use listen::{parse_listen, parse_listen_range, DEFAULT_LISTEN, MAX_LISTENERS};
pub use table::{Config, ConfigLayer, SETTINGS};
pub(crate) use toml_file::TomlFile;
pub(crate) use values::did_you_mean;
pub use values::{Bounds, Choices, CpuAffinity, OnOff, ServerLimit, Value};

/// The most serving processes (httpd's hard `ServerLimit` bound).
pub const MAX_SERVER_LIMIT: usize = 20_000;
/// The most threads in one process (httpd's hard `ThreadLimit` bound).
pub const MAX_THREADS_PER_CHILD: usize = 20_000;
/// The longest request line or header field that may be allowed: a head is
/// then at most eight times that.
pub const MAX_FIELD_LIMIT: usize = 1 << 20;
/// The largest request body limit that may be set (httpd's
/// `LimitRequestBody` bound): a body read whole is buffered in memory up to
/// it. 0, below it, means no limit on bodies read as they arrive, those
/// read whole then held to [`mpm_http::WHOLE_BODY_CAP`].
pub const MAX_BODY_LIMIT: u64 = i32::MAX as u64;
/// The most idle connections to one upstream a process may keep
/// (`--proxy-keepalive`): each is a descriptor.
pub const MAX_PROXY_KEEPALIVE: usize = 10_000;
/// The largest file kept in memory by the open-file cache (it holds up to
/// 256 files).
pub const MAX_FILE_CACHE_SIZE: u64 = 16 << 20;
