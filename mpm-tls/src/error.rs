//! This crate's one error type.

use std::path::{Path, PathBuf};

/// What can go wrong setting TLS up: every message names the file and says
/// what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A certificate or key file could not be read.
    #[error("{what} {path}: {source}")]
    Read {
        /// "certificate" or "key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file was read but does not hold what it should.
    #[error("{what} {path}: {problem}")]
    Invalid {
        /// "certificate" or "key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The configuration itself is inconsistent.
    #[error("{0}")]
    Config(String),
    /// The shared memory for sessions could not be set up.
    #[error("{0}")]
    Core(#[from] mpm_core::Error),
}

impl Error {
    pub(crate) fn invalid(what: &'static str, path: &Path, problem: impl Into<String>) -> Error {
        Error::Invalid {
            what,
            path: path.to_path_buf(),
            problem: problem.into(),
        }
    }
}

impl From<Error> for mpm_core::Error {
    fn from(e: Error) -> mpm_core::Error {
        match e {
            Error::Core(e) => e,
            other => mpm_core::Error::config(other.to_string()),
        }
    }
}

/// This crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
