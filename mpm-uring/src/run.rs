//! The uring MPM: setup → spawn → serve → drain, with a ring per process
//! and a pool of workers behind it.

use mpm_core::loop_parts::worker_pool::start_pool;
use mpm_core::scoreboard::Slot;
use mpm_core::{HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, MpmSettings, Phase, Result};
use mpm_sys::ring::{RingFeatures, RingRefusal};
use std::sync::Arc;

use crate::ring_loop::RingLoop;

/// The uring MPM. See the [crate documentation](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct Uring;

/// Can the uring model run here? The features this kernel's io_uring
/// offers, or why it is refused (a sentence naming the cause and
/// suggesting `--mpm event`).
pub fn available() -> std::result::Result<RingFeatures, RingRefusal> {
    mpm_sys::ring::probe()
}

impl Mpm for Uring {
    fn kind(&self) -> MpmKind {
        MpmKind::Uring
    }

    fn run<F: HandlerFactory>(
        &self,
        settings: &MpmSettings,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        // Setup: what accepted sockets inherit, and the ring (refused
        // here: say why, before any worker starts).
        settings.require_listeners(&listeners)?;
        Listener::pass_on_options(&listeners, settings)?;
        let features = available().map_err(|e| mpm_core::Error::config(e.to_string()))?;
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
        let (workers, pool) = start_pool("mpm-uring-worker", threads, &factory, lifecycle, slots)?;
        // Serve and drain: the loop (slot 0) runs on this thread, which set
        // the ring up (SINGLE_ISSUER), until stopped and drained.
        let ring_loop = RingLoop::new(
            settings,
            listeners,
            factory.build(),
            pool,
            lifecycle,
            slots.first(),
            features,
        )
        .inspect_err(|_| lifecycle.set_phase(Phase::Stopped))?;
        lifecycle.set_phase(Phase::Serving);
        let (stats, drain) = ring_loop.run(settings.graceful_timeout);
        mpm_core::log_notice!(
            "mpm: uring process {} accepted {}; {} answered on the loop, {} handed to \
             workers; accepting paused {} (and {} for balance; {} taken after a cancelled \
             accept woken for them); {}; {} caught on the loop; \
             {} parked on an upstream, {} resumed on the loop; the ring took {} in {} \
             io_uring_enter calls and gave {}",
            std::process::id(),
            mpm_core::plural(stats.accepted, "connection", "connections"),
            mpm_core::plural(stats.inline_steps, "request", "requests"),
            stats.handoffs,
            mpm_core::plural(stats.listener_pauses, "time", "times"),
            stats.balance_pauses,
            stats.taken_after_cancel,
            mpm_core::plural(stats.yields, "yield", "yields"),
            mpm_core::plural(stats.panics, "panic", "panics"),
            mpm_core::plural(stats.awaits, "wait", "waits"),
            stats.resumed_inline,
            mpm_core::plural(stats.ring.submitted, "submission", "submissions"),
            stats.ring.enters,
            mpm_core::plural(stats.ring.completions, "completion", "completions"),
        );
        match drain {
            Some(drain) => drain.join(workers),
            None => workers.join(),
        }
        lifecycle.set_phase(Phase::Stopped);
        Ok(())
    }
}
