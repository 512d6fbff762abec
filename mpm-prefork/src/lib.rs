//! # mpm-prefork
//!
//! The prefork process model: a single-threaded master forks single-threaded
//! children that take turns accepting under an accept mutex.
//!
//! Not built yet: [`Prefork::run`](mpm_core::Mpm::run) refuses with an error
//! saying so, and `mpm serve --mpm prefork` exits with that message, never
//! falling back to another model.

use mpm_core::{Config, Error, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, Result};

/// The prefork MPM.
#[derive(Debug, Default, Clone, Copy)]
pub struct Prefork;

impl Mpm for Prefork {
    fn kind(&self) -> MpmKind {
        MpmKind::Prefork
    }

    fn available(&self) -> Result<()> {
        Err(Error::not_built("prefork"))
    }

    fn run<F: HandlerFactory>(
        &self,
        _config: &Config,
        _listeners: Vec<Listener>,
        _factory: F,
        _lifecycle: &Lifecycle,
        _slots: &'static [mpm_core::scoreboard::Slot],
    ) -> Result<()> {
        Err(Error::not_built("prefork"))
    }
}
