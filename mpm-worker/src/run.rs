//! The worker MPM: a pool of threads, each serving one connection at a
//! time; setup → spawn → serve → drain.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mpm_core::blocking::{serve_blocking, Timeouts};
use mpm_core::scoreboard::{Slot, WorkerState};
use mpm_core::take_turns::Accepted;
use mpm_core::{
    ConnectionHandler, Drain, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, MpmSettings,
    Phase, Result, Stream, WorkerThreads,
};

use crate::accept::ListenerMutex;
use crate::keepalive::ConnectionSlots;

/// The worker MPM. See the [crate documentation](crate).
#[derive(Debug, Default, Clone, Copy)]
pub struct Worker;

struct Shared<F> {
    accept: ListenerMutex,
    slots: ConnectionSlots,
    lifecycle: Lifecycle,
    timeouts: Timeouts,
    factory: F,
    connections: AtomicU64,
    generation: u32,
}

impl Mpm for Worker {
    fn kind(&self) -> MpmKind {
        MpmKind::Worker
    }

    fn run<F: HandlerFactory>(
        &self,
        settings: &MpmSettings,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        // Setup: the listeners behind one mutex, a connection slot per thread.
        settings.require_listeners(&listeners)?;
        let threads = settings.threads();
        let timeouts = Timeouts::inherited_by(settings, &listeners)?;
        let shared = Arc::new(Shared {
            accept: ListenerMutex::new(listeners, settings.poller, lifecycle)?,
            slots: ConnectionSlots::new(threads),
            lifecycle: lifecycle.clone(),
            timeouts,
            factory,
            connections: AtomicU64::new(0),
            generation: lifecycle.generation(),
        });
        // Spawn: each thread takes turns to accept, then serves.
        let workers = WorkerThreads::spawn(
            "mpm-worker",
            threads,
            |i| {
                let (shared, slot) = (Arc::clone(&shared), slots.get(i));
                move || worker_thread(&shared, i, slot)
            },
            || lifecycle.stop(),
        )
        .inspect_err(|_| lifecycle.set_phase(Phase::Stopped))?;
        lifecycle.set_phase(Phase::Serving);

        // Serve, until a stop is asked for.
        lifecycle.wait_stop();
        // Drain: the stop pipe woke the thread waiting in poll; idle
        // keep-alive connections close after the grace, requests in flight
        // get the graceful timeout (none in a fast stop), then are shut
        // down; a thread still stuck after that is left behind.
        let drain = Drain::begin(
            lifecycle,
            shared.accept.listeners(),
            settings.graceful_timeout,
        );
        drain.wait(
            workers,
            || {
                shared.slots.close_idle();
            },
            || shared.slots.close_all(),
        );
        lifecycle.set_phase(Phase::Stopped);
        Ok(())
    }
}

fn worker_thread<F: HandlerFactory>(shared: &Shared<F>, index: usize, slot: Option<&'static Slot>) {
    if let Some(s) = slot {
        s.claim(shared.generation);
        s.mark_accept_mutex();
    }
    let mut handler: F::Handler = shared.factory.build();
    let draining = shared.lifecycle.draining_flag();
    let hand_over = shared
        .accept
        .listeners()
        .iter()
        .find_map(Listener::hand_over_channel);
    loop {
        if let Some(s) = slot {
            s.set_state(WorkerState::Idle);
        }
        let Some(Accepted {
            socket,
            peer,
            waited,
        }) = shared.accept.accept(&shared.lifecycle)
        else {
            break;
        };
        if let Some(s) = slot {
            s.record_accept(waited.as_nanos() as u64);
        }
        shared.connections.fetch_add(1, Ordering::Relaxed);
        shared.slots.hold(index, socket.as_raw_fd());
        let stream = match Stream::new(socket, peer, true, Arc::clone(&draining)) {
            Ok(mut s) => {
                s.set_score_slot(slot);
                s
            }
            Err(_) => {
                shared.slots.hold(index, -1);
                continue;
            }
        };
        let mut parker = shared.slots.parker(index, &shared.lifecycle, hand_over);
        serve(&mut handler, stream, &shared.timeouts, &mut parker);
    }
    if let Some(s) = slot {
        s.release();
    }
}

fn serve<H: ConnectionHandler>(
    handler: &mut H,
    stream: Stream,
    timeouts: &Timeouts,
    parker: &mut crate::keepalive::SlotParker<'_>,
) {
    serve_blocking(handler, stream, timeouts, parker);
}
