//! # mpm-event
//!
//! The event process model: per process, an epoll listener thread parks idle
//! keep-alive connections and hands ready ones to a pool of worker threads.
//!
//! Not built yet: [`Event::run`](mpm_core::Mpm::run) refuses with an error
//! saying so, and `mpm serve --mpm event` exits with that message, never
//! falling back to another model.

use mpm_core::{Config, Error, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, Result};

/// The event MPM.
#[derive(Debug, Default, Clone, Copy)]
pub struct Event;

impl Mpm for Event {
    fn kind(&self) -> MpmKind {
        MpmKind::Event
    }

    fn available(&self) -> Result<()> {
        Err(Error::not_built("event"))
    }

    fn run<F: HandlerFactory>(
        &self,
        _config: &Config,
        _listeners: Vec<Listener>,
        _factory: F,
        _lifecycle: &Lifecycle,
    ) -> Result<()> {
        Err(Error::not_built("event"))
    }
}
