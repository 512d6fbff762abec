//! Signal dispositions changed in place.

use std::io;

use nix::sys::signal::Signal;

/// Let `signal` interrupt blocking system calls (`EINTR`) instead of
/// restarting them: the disposition installed now is read and written back
/// unchanged but for `SA_RESTART`. A prefork child waiting in `fcntl` or
/// `flock` for the accept mutex then notices a stop signal.
pub fn interrupt_system_calls(signal: Signal) -> io::Result<()> {
    let mut action = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: sigaction with a null new action only writes the current one
    // into `action`, local memory of the right type.
    if unsafe { libc::sigaction(signal as libc::c_int, std::ptr::null(), action.as_mut_ptr()) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: filled in by the successful call above (and valid zeroed).
    let mut action = unsafe { action.assume_init() };
    action.sa_flags &= !libc::SA_RESTART;
    // SAFETY: writes back the disposition just read, whose handler (if any)
    // was installed by this process and stays as sound as it was; only the
    // restart flag differs.
    if unsafe { libc::sigaction(signal as libc::c_int, &action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_flag_is_cleared_and_the_rest_kept() {
        // SIGUSR2's default action stays the default: only the flag moves.
        let read = |sig: Signal| {
            let mut a = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
            // SAFETY: as in `interrupt_system_calls`.
            let rc =
                unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), a.as_mut_ptr()) };
            assert_eq!(rc, 0);
            // SAFETY: filled in above.
            unsafe { a.assume_init() }
        };
        let before = read(Signal::SIGUSR2);
        interrupt_system_calls(Signal::SIGUSR2).unwrap();
        let after = read(Signal::SIGUSR2);
        assert_eq!(after.sa_flags & libc::SA_RESTART, 0);
        assert_eq!(after.sa_sigaction, before.sa_sigaction);
    }
}
