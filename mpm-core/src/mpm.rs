//! The contract every process model implements.

use crate::config::{Config, MpmKind};
use crate::connection_handler::HandlerFactory;
use crate::error::Result;
use crate::lifecycle::Lifecycle;
use crate::listener::Listener;
use crate::scoreboard::Slot;

/// A process model: given a configuration, bound listeners, a handler
/// factory and this process's scoreboard slots, serve until the
/// [`Lifecycle`] is told to stop.
///
/// `slots` are this process's share of the [`Scoreboard`](crate::scoreboard::Scoreboard):
/// the model gives one to each of its workers (in the order its
/// documentation states) and keeps their states and counters there.
///
/// An implementation moves the lifecycle to [`Phase::Serving`](crate::Phase::Serving)
/// once its workers accept, to [`Phase::Draining`](crate::Phase::Draining) when
/// asked to stop, and returns only after every worker has finished, having set
/// [`Phase::Stopped`](crate::Phase::Stopped).
pub trait Mpm {
    /// Which model this is.
    fn kind(&self) -> MpmKind;

    /// Can this model run here? Checked before anything is bound, so that a
    /// model that is not built (or not supported) is refused cleanly.
    fn available(&self) -> Result<()> {
        Ok(())
    }

    /// Serve until stopped. Returns an error only when the model could not
    /// start (or could not go on) at all; per-connection errors are the
    /// handler's business.
    fn run<F: HandlerFactory>(
        &self,
        config: &Config,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()>;
}
