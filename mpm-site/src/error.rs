//! The one error type of `mpm-site`.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An error from setting up the site: its document root.
///
/// Opaque: ask what kind it is with the `is_*` predicates. It converts into
/// [`mpm_core::Error`] as a configuration error (a path the user gave: one
/// line and exit code 2).
#[derive(Debug)]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, thiserror::Error)]
enum Kind {
    #[error("docroot {}: {source}", path.display())]
    Docroot { path: PathBuf, source: io::Error },
}

impl Error {
    /// The document root is missing or unusable.
    pub fn docroot(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error {
            kind: Kind::Docroot {
                path: path.into(),
                source,
            },
        }
    }

    /// Is the document root missing or unusable?
    pub fn is_docroot(&self) -> bool {
        matches!(self.kind, Kind::Docroot { .. })
    }

    /// Is a path the user gave unusable? (Every error of this crate is.)
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::Docroot { .. })
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
            Kind::Docroot { source, .. } => Some(source),
        }
    }
}

impl From<Error> for mpm_core::Error {
    fn from(e: Error) -> mpm_core::Error {
        mpm_core::Error::config(e.to_string())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_docroot_is_a_configuration_error_naming_the_path() {
        let e = Error::docroot("/no/such", io::Error::from(io::ErrorKind::NotFound));
        assert!(e.is_docroot() && e.is_config());
        assert!(e.to_string().starts_with("docroot /no/such: "), "{e}");
        assert!(mpm_core::Error::from(e).is_config());
    }
}
