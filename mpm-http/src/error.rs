//! The one error type of `mpm-http`.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An error from setting up the HTTP layer: the access log.
///
/// Opaque: ask what kind it is with the `is_*` predicates. It converts into
/// [`mpm_core::Error`] (a problem with a path the user gave becomes a
/// configuration error: one line and exit code 2).
#[derive(Debug)]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, thiserror::Error)]
enum Kind {
    #[error("--access-log {}: {source}", path.display())]
    AccessLog { path: PathBuf, source: io::Error },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

impl Error {
    /// The access log cannot be opened.
    pub fn access_log(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error {
            kind: Kind::AccessLog {
                path: path.into(),
                source,
            },
        }
    }

    /// An operating-system call failed.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error {
            kind: Kind::Io {
                context: context.into(),
                source,
            },
        }
    }

    /// Is a path the user gave (the access log) unusable?
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::AccessLog { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::AccessLog { source, .. } | Kind::Io { source, .. } => Some(source),
        }
    }
}

impl From<Error> for mpm_core::Error {
    fn from(e: Error) -> mpm_core::Error {
        match e.kind {
            Kind::Io { context, source } => mpm_core::Error::io(context, source),
            _ => mpm_core::Error::config(e.to_string()),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
