//! The contract every process model implements.

use std::fmt;

use crate::connection_handler::HandlerFactory;
use crate::error::Result;
use crate::lifecycle::Lifecycle;
use crate::listener::Listener;
use crate::scoreboard::Slot;
use crate::settings::MpmSettings;

/// The process models a server can run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpmKind {
    /// Single-threaded child processes taking turns under an accept mutex.
    Prefork,
    /// A pool of threads taking turns under a listener mutex.
    Worker,
    /// An epoll listener thread per process that parks idle connections.
    Event,
    /// An io_uring per process: multishot accept and receive, gathered sends.
    Uring,
}

impl MpmKind {
    /// Every process model, in the order reports list them.
    pub const ALL: [MpmKind; 4] = [
        MpmKind::Prefork,
        MpmKind::Worker,
        MpmKind::Event,
        MpmKind::Uring,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MpmKind::Prefork => "prefork",
            MpmKind::Worker => "worker",
            MpmKind::Event => "event",
            MpmKind::Uring => "uring",
        }
    }
}

/// Set in a process that serves its requests on one thread with no other
/// (a prefork child): see [`serves_on_one_thread`].
static ONE_THREAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process serves its requests on one thread and has no other (a
/// prefork child, once its model runs): a layer that would start a thread
/// of its own for chores (the proxy closing idle upstream connections on
/// time) does them on its requests' way instead, so that the model keeps
/// its shape, a process of one thread for each request in progress.
pub fn serves_on_one_thread() -> bool {
    ONE_THREAD.load(std::sync::atomic::Ordering::Relaxed)
}

/// Say that this process serves on one thread ([`serves_on_one_thread`]):
/// the prefork model's child, before it builds its handler.
pub fn set_serves_on_one_thread() {
    ONE_THREAD.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl crate::Choice for MpmKind {
    const ALL: &'static [Self] = &MpmKind::ALL;

    fn name(self) -> &'static str {
        MpmKind::name(self)
    }
}

impl std::str::FromStr for MpmKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        <Self as crate::Choice>::from_name(s)
    }
}

impl fmt::Display for MpmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A process model: given its settings, bound listeners, a handler factory
/// and this process's scoreboard slots, serve until the [`Lifecycle`] is
/// told to stop.
///
/// `slots` are this process's share of the [`Scoreboard`](crate::scoreboard::Scoreboard):
/// the model gives one to each of its workers (in the order its
/// documentation states) and keeps their states and counters there.
///
/// # Contract
///
/// An implementation runs in four steps, in this order, and a reader who
/// knows one model's `run` knows all three:
///
/// 1. **setup**: check the listeners
///    ([`MpmSettings::require_listeners`]), set what accepted sockets inherit
///    ([`Listener::pass_on_options`]);
/// 2. **spawn**: start its workers ([`WorkerThreads`](crate::WorkerThreads)),
///    then move the lifecycle to [`Phase::Serving`](crate::Phase::Serving);
/// 3. **serve** until a stop is asked;
/// 4. **drain**: [`Drain::begin`](crate::Drain::begin) moves the lifecycle to
///    [`Phase::Draining`](crate::Phase::Draining) and stops listening; idle
///    connections close after [`STOP_GRACE`](crate::STOP_GRACE), requests in
///    flight get `graceful_timeout` (none in a fast stop,
///    [`Lifecycle::stop_now`](crate::Lifecycle::stop_now)) and are then cut;
///    the model returns once its workers have finished, or
///    [`ABANDON_AFTER`](crate::ABANDON_AFTER) past the deadline without
///    those still stuck ([`Drain::wait`](crate::Drain::wait),
///    [`Drain::join`](crate::Drain::join)), having set
///    [`Phase::Stopped`](crate::Phase::Stopped).
pub trait Mpm {
    /// Which model this is.
    fn kind(&self) -> MpmKind;

    /// Serve until stopped. Returns an error only when the model could not
    /// start (or could not go on) at all; per-connection errors are the
    /// handler's business.
    fn run<F: HandlerFactory>(
        &self,
        settings: &MpmSettings,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()>;
}
