//! The worker MPM: a pool of threads, each serving one connection at a time.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpm_core::blocking::{serve_blocking, Timeouts};
use mpm_core::scoreboard::{Slot, WorkerState};
use mpm_core::{
    Config, ConnectionHandler, Error, HandlerFactory, Lifecycle, Listener, Mpm, MpmKind, Phase,
    Result, Stream,
};

use crate::connection_slots::ConnectionSlots;
use crate::listener_mutex::{Accepted, ListenerMutex};

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
        config: &Config,
        listeners: Vec<Listener>,
        factory: F,
        lifecycle: &Lifecycle,
        slots: &'static [Slot],
    ) -> Result<()> {
        if listeners.is_empty() {
            return Err(Error::config("no listening address"));
        }
        let threads = config.threads_per_child.min(config.max_request_workers);
        let timeouts = Timeouts::inherited_by(config, &listeners)?;
        let shared = Arc::new(Shared {
            accept: ListenerMutex::new(listeners, config.poller, lifecycle)?,
            slots: ConnectionSlots::new(threads),
            lifecycle: lifecycle.clone(),
            timeouts,
            factory,
            connections: AtomicU64::new(0),
            generation: lifecycle.generation(),
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            let slot = slots.get(i);
            let spawned = std::thread::Builder::new()
                .name(format!("mpm-worker-{i}"))
                .stack_size(512 * 1024)
                .spawn(move || worker_thread(&shared, i, slot));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    lifecycle.stop();
                    for h in handles {
                        let _ = h.join();
                    }
                    lifecycle.set_phase(Phase::Stopped);
                    return Err(Error::io(format!("starting worker thread {i}"), e));
                }
            }
        }
        lifecycle.set_phase(Phase::Serving);

        lifecycle.wait_stop();
        if lifecycle.owns_listeners() {
            for l in shared.accept.listeners() {
                l.stop_listening();
            }
        }
        // Stop: the stop pipe woke the thread waiting in poll; idle keep-alive
        // connections are closed now, requests in flight get the grace period.
        let deadline = Instant::now() + config.graceful_timeout;
        // A moment's grace first: a request sent just before the stop is
        // still on its way, and is answered (with `Connection: close`)
        // rather than met by a closed connection.
        std::thread::sleep(Duration::from_millis(100));
        loop {
            shared.slots.close_idle();
            if handles.iter().all(|h| h.is_finished()) {
                break;
            }
            if Instant::now() >= deadline {
                let cut = shared.slots.close_all();
                if cut > 0 {
                    mpm_core::log_warn!(
                        "mpm: graceful timeout: closed {cut} connections still in flight"
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for h in handles {
            let _ = h.join();
        }
        lifecycle.set_phase(Phase::Stopped);
        Ok(())
    }
}

fn worker_thread<F: HandlerFactory>(shared: &Shared<F>, index: usize, slot: Option<&'static Slot>) {
    if let Some(s) = slot {
        s.claim(shared.generation);
    }
    let mut handler: F::Handler = shared.factory.build();
    let stopping = || shared.lifecycle.is_stopping();
    let draining = shared.lifecycle.draining_flag();
    loop {
        if let Some(s) = slot {
            s.set_state(WorkerState::Idle);
        }
        let Ok(Accepted {
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
        let mut parker = shared.slots.parker(index, &stopping);
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
    parker: &mut crate::connection_slots::SlotParker<'_>,
) {
    serve_blocking(handler, stream, timeouts, parker);
}
