//! A panic in a connection's step costs that connection only.
//!
//! Every model runs each [`ConnectionHandler`](crate::ConnectionHandler) step
//! (and the HTTP layer each request handler) inside [`catch`]: the panic is
//! caught, its message and place are returned in one line for the caller to
//! log with what it knows (which step, which client), and the connection is
//! closed; the worker, the event loop, the slot and the in-flight count are
//! not lost. While [`catch`] runs, the process's panic hook records the
//! message instead of printing it, so a panic is one error-log line, never
//! the default hook's two lines and, with `RUST_BACKTRACE` set, a backtrace
//! per panic. Panics anywhere else still reach the hook that was installed
//! before (the default one prints them as usual).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Is this thread inside [`catch`]?
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// What the hook recorded for the panic being caught.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// A caught panic: its message and where it was raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panic {
    message: String,
}

impl Panic {
    /// The panic's message and location, in one line.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Run `f`, catching a panic inside it: `Err` says what it was, in one line,
/// and nothing has been printed. Cheap when nothing panics (a thread-local
/// flag set and restored); nested calls are fine.
///
/// `f` is treated as unwind-safe: the caller discards or resets whatever `f`
/// was changing (a connection it closes, an arena it resets).
///
/// ```
/// let caught = mpm_core::panics::catch(|| -> u32 { panic!("no such thing") });
/// let p = caught.unwrap_err();
/// assert!(p.message().starts_with("'no such thing' at "), "{p}");
/// assert_eq!(mpm_core::panics::catch(|| 7).unwrap(), 7);
/// ```
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Panic> {
    HOOK.call_once(install_hook);
    let outer = CATCHING.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|payload| {
        let recorded = CAUGHT.with(|c| c.borrow_mut().take());
        Panic {
            message: recorded.unwrap_or_else(|| format!("'{}'", payload_text(&*payload))),
        }
    })
}

/// [`catch`], with `f`'s value put in `slot` rather than returned: a large
/// value (a 448-byte response) is then not copied through the `Result`s of
/// `catch_unwind` and of `catch` on its way out. `slot` is left as it was
/// if `f` panics.
///
/// ```
/// let mut slot = None;
/// assert!(mpm_core::panics::catch_into(&mut slot, || 7).is_ok());
/// assert_eq!(slot, Some(7));
/// let mut slot: Option<u32> = None;
/// assert!(mpm_core::panics::catch_into(&mut slot, || panic!("no")).is_err());
/// assert_eq!(slot, None);
/// ```
pub fn catch_into<T>(slot: &mut Option<T>, f: impl FnOnce() -> T) -> Result<(), Panic> {
    catch(|| *slot = Some(f()))
}

/// Wrap the installed hook: inside [`catch`], record; elsewhere, defer to it.
fn install_hook() {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let catching = CATCHING.try_with(Cell::get).unwrap_or(false);
        if !catching {
            previous(info);
            return;
        }
        let text = payload_text(info.payload());
        let message = match info.location() {
            Some(at) => format!("'{text}' at {}:{}", at.file(), at.line()),
            None => format!("'{text}'"),
        };
        let _ = CAUGHT.try_with(|c| *c.borrow_mut() = Some(message));
    }));
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic with no message"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_is_one_line_with_its_place() {
        let p = catch(|| -> () { panic!("line {}", 1) }).unwrap_err();
        assert!(p.message().starts_with("'line 1' at "), "{p}");
        assert!(p.message().contains("panics.rs:"), "{p}");
        assert!(!p.message().contains('\n'), "{p}");
    }

    #[test]
    fn nested_catches_each_see_their_own_panic() {
        let outer = catch(|| {
            let inner = catch(|| -> () { panic!("inner") }).unwrap_err();
            assert!(inner.message().starts_with("'inner'"));
            panic!("outer")
        })
        .unwrap_err();
        assert!(outer.message().starts_with("'outer'"), "{outer}");
        // Outside any catch the flag is clear again.
        assert!(!CATCHING.with(Cell::get));
    }

    #[test]
    fn values_pass_through() {
        assert_eq!(catch(|| "fine").unwrap(), "fine");
    }
}
