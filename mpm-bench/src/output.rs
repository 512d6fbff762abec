//! What the commands print on standard output.

use std::io::Write;

/// `text` on standard output. A reader that went away (`mpm compare ... |
/// head`) ends what it reads, not the command: the error is dropped, where
/// `print!` would panic.
pub(crate) fn out(text: impl std::fmt::Display) {
    let _ = write!(std::io::stdout().lock(), "{text}");
}
