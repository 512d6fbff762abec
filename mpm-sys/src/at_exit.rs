//! A function run when the process exits normally (`atexit(3)`).

use std::io;

/// Run `f` when the process exits through `exit` (as a test binary does
/// after its last test), after functions registered later. A panic in `f`
/// aborts: it runs outside any Rust frame that could catch it.
pub fn at_exit(f: extern "C" fn()) -> io::Result<()> {
    // SAFETY: atexit only stores the pointer; `f` is a valid function of the
    // signature atexit calls, with no arguments, and lives for the whole
    // program.
    if unsafe { libc::atexit(f) } == 0 {
        Ok(())
    } else {
        Err(io::Error::from(io::ErrorKind::OutOfMemory))
    }
}
