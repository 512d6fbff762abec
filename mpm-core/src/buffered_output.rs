//! Output a protocol buffers per worker and must write within a bound (the
//! HTTP layer's buffered access log), which a model whose worker blocks
//! with no other thread to flush for it (a prefork child) flushes itself.
//!
//! A layer registers its flushing functions once; models call
//! [`flush_now`] before an indefinite wait, and, while idle, wake after
//! [`due_in`] to call [`flush_stale`]. With nothing registered all three do
//! nothing.

use std::time::Duration;

use parking_lot::Mutex;

/// How one layer's buffered output is flushed.
#[derive(Debug, Clone, Copy)]
pub struct Flusher {
    /// Which output this is (a layer registers each once, by this name).
    pub name: &'static str,
    /// How long until something buffered is due (`None`: nothing is).
    pub due_in: fn() -> Option<Duration>,
    /// Write what is about due.
    pub flush_stale: fn(),
    /// Write everything now.
    pub flush_now: fn(),
}

static FLUSHERS: Mutex<Vec<Flusher>> = Mutex::new(Vec::new());

/// Register a layer's flusher (once; a second registration under the same
/// name is ignored).
pub fn register(flusher: Flusher) {
    let mut all = FLUSHERS.lock();
    if !all.iter().any(|f| f.name == flusher.name) {
        all.push(flusher);
    }
}

fn each() -> Vec<Flusher> {
    FLUSHERS.lock().clone()
}

/// The soonest any buffered output is due, if any is buffered.
pub fn due_in() -> Option<Duration> {
    each().iter().filter_map(|f| (f.due_in)()).min()
}

/// Write what is about due.
pub fn flush_stale() {
    for f in each() {
        (f.flush_stale)();
    }
}

/// Write everything now (before an indefinite wait, and at exit).
pub fn flush_now() {
    for f in each() {
        (f.flush_now)();
    }
}
