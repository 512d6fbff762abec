//! Dropping root after binding, as httpd's `User` and `Group` do.

use nix::unistd::{getuid, setgid, setgroups, setuid, Gid, Uid};

use mpm_core::{Error, Result};

/// Become `(uid, gid)` for good, with that group as the only supplementary
/// one. Does nothing when `run_as` is `None` or the process is not root
/// (only root can change user; the configuration said whom to become only
/// for that case). Call it after binding and before serving: a process
/// that serves never runs as root.
pub fn drop_privileges(run_as: Option<(u32, u32)>) -> Result<()> {
    let Some((uid, gid)) = run_as else {
        return Ok(());
    };
    if !getuid().is_root() {
        return Ok(());
    }
    let fail = |what: &str, e: nix::Error| Error::io(what, e.into());
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    // Groups first: once the user is not root, they can no longer change.
    setgroups(&[gid]).map_err(|e| fail("setgroups", e))?;
    setgid(gid).map_err(|e| fail("setgid", e))?;
    setuid(uid).map_err(|e| fail("setuid", e))?;
    if !uid.is_root() && setuid(Uid::from_raw(0)).is_ok() {
        return Err(Error::io(
            "dropping privileges",
            std::io::Error::other("root could be regained after setuid"),
        ));
    }
    Ok(())
}
