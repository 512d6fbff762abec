//! The one error type of `mpm-sys`.

use std::io;

/// Why a call of this crate failed; `Display` is one line a user can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size asked for (by a configuration, usually) is past a bound.
    #[error("{what}: {detail}")]
    TooLarge {
        /// What was being made.
        what: String,
        /// The size asked for and the bound.
        detail: String,
    },
    /// The operating system refused a call.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// `fork` was asked of a process with more than one thread: the child
    /// would hold locks of threads it does not have.
    #[error(
        "fork refused: this process has {threads} threads; the master must be single-threaded \
         (start no thread before it forks)"
    )]
    Threaded {
        /// How many threads the process had.
        threads: usize,
    },
}

impl Error {
    pub(crate) fn os(what: impl Into<String>, source: impl Into<io::Error>) -> Error {
        Error::Os {
            what: what.into(),
            source: source.into(),
        }
    }

    /// Is it a size past a bound (the user's input), rather than the system?
    pub fn is_too_large(&self) -> bool {
        matches!(self, Error::TooLarge { .. })
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
