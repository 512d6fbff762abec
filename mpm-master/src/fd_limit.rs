//! Raising the descriptor limit, as nginx's `worker_rlimit_nofile` does.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Raise the soft limit on open descriptors to the hard limit, so that a
/// server configured for thousands of connections is not stopped at the
/// usual soft limit of 1024. Returns the soft limit now in force.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
        return Ok(hard);
    }
    Ok(soft)
}
