//! The event MPM: setup → spawn → serve → drain, with an event loop per
//! process and a pool of workers behind it.

use mpm_core::loop_parts::worker_pool::start_pool;
use mpm_core::scoreboard::Slot;
use mpm_core::{HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, MpmSettings, Phase, Result};
use std::sync::Arc;

use crate::event_loop::EventLoop;

/// The event MPM. See the [crate documentation](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct Event;

impl Mpm for Event {
    fn kind(&self) -> MpmKind {
        MpmKind::Event
    }

    fn run<F: HandlerFactory>(
        &self,
        settings: &MpmSettings,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        // Setup: what accepted sockets inherit.
        settings.require_listeners(&listeners)?;
        Listener::pass_on_options(&listeners, settings)?;
        let threads = settings.threads();
        let factory = Arc::new(factory);
        // The loop's slot (0) first, on this thread (the loop's): the
        // process shows in the scoreboard as "starting" from the moment it
        // shows at all, until its loop's first turn has told the connection
        // ledger whether it accepts; one shown idle takes its share.
        if let Some(s) = slots.first() {
            s.claim(lifecycle.generation());
        }
        // Spawn: the workers (slots 1..), each with a handler of its own.
        let (workers, pool) = start_pool("mpm-event-worker", threads, &factory, lifecycle, slots)?;
        // Serve and drain: the loop (slot 0) runs until stopped and drained.
        let event_loop = EventLoop::new(
            settings,
            listeners,
            factory.build(),
            pool,
            lifecycle,
            slots.first(),
        )?;
        lifecycle.set_phase(Phase::Serving);
        let (stats, drain) = event_loop.run(settings.graceful_timeout);
        mpm_core::log_notice!(
            "mpm: event process {} accepted {}; {} answered on the listener, {} handed to \
             workers; accepting paused {} (and {} for balance); woken {} by a listener, {} of \
             them for nothing; {}; {} caught on the loop; {} parked on an upstream, \
             {} resumed on the loop, {} on an upstream socket registered before; {} \
             upstream reports kept for no waiter; {} held and sent with others",
            std::process::id(),
            mpm_core::plural(stats.accepted, "connection", "connections"),
            mpm_core::plural(stats.inline_steps, "request", "requests"),
            stats.handoffs,
            mpm_core::plural(stats.listener_pauses, "time", "times"),
            stats.balance_pauses,
            mpm_core::plural(stats.listener_wakeups, "time", "times"),
            stats.empty_wakeups,
            mpm_core::plural(stats.yields, "yield", "yields"),
            mpm_core::plural(stats.panics, "panic", "panics"),
            mpm_core::plural(stats.awaits, "wait", "waits"),
            stats.resumed_inline,
            stats.waits_registered_before,
            stats.edges_kept,
            mpm_core::plural(stats.held_sends, "answer", "answers")
        );
        // Drain, the rest: the job channel is closed, so idle workers exit at
        // once; one stuck in a handler past the drain's give-up time is left
        // behind rather than waited on.
        match drain {
            Some(drain) => drain.join(workers),
            None => workers.join(),
        }
        lifecycle.set_phase(Phase::Stopped);
        Ok(())
    }
}
