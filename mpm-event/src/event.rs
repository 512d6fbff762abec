//! The event MPM.

use std::sync::Arc;

use mpm_core::scoreboard::{Slot, WorkerState};
use mpm_core::{Config, Error, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, Phase, Result};

use crate::event_loop::EventLoop;
use crate::worker_pool::{worker_loop, PoolHandle, Returns};

/// The event MPM. See the [crate documentation](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct Event;

impl Mpm for Event {
    fn kind(&self) -> MpmKind {
        MpmKind::Event
    }

    fn run<F: HandlerFactory>(
        &self,
        config: &Config,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        if listeners.is_empty() {
            return Err(Error::config("no listening address"));
        }
        Listener::pass_on_options(&listeners, config)?;
        let threads = config.threads_per_child.min(config.max_request_workers);
        let returns =
            Arc::new(Returns::new().map_err(|e| Error::io("creating an eventfd", e.into()))?);
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let factory = Arc::new(factory);
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let (jobs, returns, factory) =
                (jobs_rx.clone(), Arc::clone(&returns), Arc::clone(&factory));
            let slot = slots.get(i + 1);
            let generation = lifecycle.generation();
            let spawned = std::thread::Builder::new()
                .name(format!("mpm-event-worker-{i}"))
                .stack_size(512 * 1024)
                .spawn(move || {
                    if let Some(s) = slot {
                        s.claim(generation);
                        s.set_state(WorkerState::Idle);
                    }
                    worker_loop(factory.build(), jobs, returns, slot);
                    if let Some(s) = slot {
                        s.release();
                    }
                });
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    drop(jobs_tx);
                    for h in workers {
                        let _ = h.join();
                    }
                    lifecycle.set_phase(Phase::Stopped);
                    return Err(Error::io(format!("starting worker thread {i}"), e));
                }
            }
        }
        drop(jobs_rx);
        let event_loop = EventLoop::new(
            config,
            listeners,
            factory.build(),
            PoolHandle {
                jobs: jobs_tx,
                returns,
                threads,
            },
            lifecycle,
            slots.first(),
        )?;
        lifecycle.set_phase(Phase::Serving);
        let stats = event_loop.run(config.graceful_timeout);
        mpm_core::log_notice!(
            "mpm: event process {} accepted {} connections; {} requests answered on the \
             listener, {} handed to workers; accepting paused {} times",
            std::process::id(),
            stats.accepted,
            stats.inline_steps,
            stats.handoffs,
            stats.listener_pauses
        );
        // The job channel is closed: idle workers exit at once. One stuck in a
        // handler past the graceful timeout is left behind rather than waited on.
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while workers.iter().any(|h| !h.is_finished()) && std::time::Instant::now() < give_up {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for h in workers {
            if h.is_finished() {
                let _ = h.join();
            }
        }
        lifecycle.set_phase(Phase::Stopped);
        Ok(())
    }
}
