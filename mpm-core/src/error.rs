//! The one error type of `mpm-core`.

use std::fmt;
use std::io;

/// An error from configuring or running a server: the error of the
/// [`Mpm`](crate::Mpm) contract, which every layer above returns too.
///
/// Opaque on purpose: ask what kind it is with the `is_*` predicates, and
/// show it with `Display`, which is one line a user can act on.
#[derive(Debug)]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, thiserror::Error)]
enum Kind {
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: io::Error },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

impl Error {
    /// A configuration value is wrong (bad flag, bad file, zero workers...).
    pub fn config(message: impl Into<String>) -> Self {
        Error {
            kind: Kind::Config(message.into()),
        }
    }

    /// A listening address could not be bound.
    pub fn bind(addr: impl Into<String>, source: io::Error) -> Self {
        Error {
            kind: Kind::Bind {
                addr: addr.into(),
                source,
            },
        }
    }

    /// An operating-system call failed while running the server.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error {
            kind: Kind::Io {
                context: context.into(),
                source,
            },
        }
    }

    /// Is this a configuration error (the user's input is wrong)?
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::Config(_))
    }

    /// Did binding a listening socket fail (address in use, not available...)?
    pub fn is_bind(&self) -> bool {
        matches!(self.kind, Kind::Bind { .. })
    }

    /// Did an operating-system call fail at run time?
    pub fn is_io(&self) -> bool {
        matches!(self.kind, Kind::Io { .. })
    }

    /// The exit code a command-line tool should use for this error:
    /// 2 for anything the user can fix in the command or config, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        if self.is_config() || self.is_bind() {
            2
        } else {
            1
        }
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
            Kind::Bind { source, .. } | Kind::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A refused system call is the system's error; the rest (a size past a
/// bound, a fork asked of a threaded process) are the program's input, which
/// its user or author fixes.
impl From<mpm_sys::Error> for Error {
    fn from(e: mpm_sys::Error) -> Self {
        match e {
            mpm_sys::Error::Os { what, source } => Error::io(what, source),
            other => Error::config(other.to_string()),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
