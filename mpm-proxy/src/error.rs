//! The one error type of `mpm-proxy`.

/// An error from setting up the proxy: a route as written (a flag, a file's
/// `[[proxy]]` table), or the shared memory its upstreams' state lives in.
///
/// Every message is one line a user can act on: it names the value and
/// says what would be valid. It converts into [`mpm_core::Error`] as a
/// configuration error (exit code 2) or, for shared memory, as the system
/// error it is.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A route, an upstream or one of their settings is not valid.
    #[error("{0}")]
    Config(String),
    /// More upstreams than the shared state has room for.
    #[error("{count} upstreams in all: at most {max} (count each route's upstreams)")]
    TooManyUpstreams {
        /// How many the configuration lists.
        count: usize,
        /// The most there may be.
        max: usize,
    },
    /// The shared memory for upstream health and counters could not be made.
    #[error("the proxy's shared state: {0}")]
    Shared(#[source] mpm_core::Error),
}

impl Error {
    /// A configuration error with this one-line message.
    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::Config(message.into())
    }

    /// Is the configuration at fault (rather than the system)?
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Config(_) | Error::TooManyUpstreams { .. })
    }
}

impl From<Error> for mpm_core::Error {
    fn from(e: Error) -> mpm_core::Error {
        match e {
            Error::Shared(inner) => inner,
            other => mpm_core::Error::config(other.to_string()),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_error_becomes_a_configuration_error_with_its_message() {
        let e = Error::config("--proxy 'api=x': the prefix must start with /");
        assert!(e.is_config());
        let core = mpm_core::Error::from(e);
        assert!(core.is_config());
        assert!(core.to_string().contains("must start with /"), "{core}");
    }

    #[test]
    fn too_many_upstreams_says_the_limit() {
        let e = Error::TooManyUpstreams {
            count: 5000,
            max: 4096,
        };
        assert!(
            e.is_config() && e.to_string().contains("at most 4096"),
            "{e}"
        );
    }
}
