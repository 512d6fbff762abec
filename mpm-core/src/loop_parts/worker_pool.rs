//! The worker threads, and the way finished connections come back to the
//! event loop (event's epoll loop, uring's ring).

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::blocking::log_panic;
use crate::panics::catch;
use crate::scoreboard::{Slot, WorkerState};
use crate::{
    ConnectionHandler, HandlerFactory, Interest, Lifecycle, Phase, Result, Stream, WorkerThreads,
};

/// A connection in flight: its socket and the handler's state for it.
pub struct Conn<C> {
    /// The socket.
    pub stream: Stream,
    /// The handler's per-connection state.
    pub state: C,
    /// Lingering close: bytes it may still read and discard.
    pub linger_left: usize,
}

impl<C> Conn<C> {
    /// A connection just accepted.
    pub fn new(stream: Stream, state: C) -> Self {
        Conn {
            stream,
            state,
            linger_left: crate::LINGER_BYTES,
        }
    }
}

/// Which step a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// [`ConnectionHandler::readable`]: a whole request is buffered.
    Read,
    /// [`ConnectionHandler::writable`]: the socket can take more.
    Write,
}

/// Work handed to a worker.
pub struct Job<C> {
    /// The connection's slot in the event loop.
    pub token: usize,
    /// Which step to run.
    pub step: Step,
    /// The connection.
    pub conn: Box<Conn<C>>,
}

/// A worker's answer: the connection and what it waits for next.
pub struct Done<C> {
    /// The connection's slot.
    pub token: usize,
    /// The connection.
    pub conn: Box<Conn<C>>,
    /// What the last step asked for.
    pub interest: Interest,
}

/// The return path: a channel, and an eventfd the event loop polls, written
/// only when the loop is (about to be) asleep, so a busy loop costs no wake-up.
pub struct Returns<C> {
    tx: Sender<Done<C>>,
    rx: Receiver<Done<C>>,
    wake: EventFd,
    sleeping: AtomicBool,
}

impl<C> Returns<C> {
    /// A return path with its eventfd.
    pub fn new() -> nix::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded();
        Ok(Returns {
            tx,
            rx,
            wake: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            sleeping: AtomicBool::new(false),
        })
    }

    /// The descriptor the event loop registers for wake-ups.
    pub fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// A worker gives a connection back.
    pub fn send(&self, done: Done<C>) {
        if self.tx.send(done).is_ok() && self.sleeping.swap(false, Ordering::SeqCst) {
            let _ = self.wake.write(1);
        }
    }

    /// The loop is about to sleep: returns false (and stays awake) if a
    /// connection came back meanwhile.
    pub fn may_sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        if self.rx.is_empty() {
            true
        } else {
            self.sleeping.store(false, Ordering::SeqCst);
            false
        }
    }

    /// The loop woke up.
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Reset the eventfd after it fired.
    pub fn clear_wake(&self) {
        let _ = self.wake.read();
    }

    /// Connections given back since the last call.
    pub fn drain(&self) -> crossbeam_channel::TryIter<'_, Done<C>> {
        self.rx.try_iter()
    }
}

/// The event loop's side of the pool: where jobs go, where connections
/// come back, and how many workers there are.
pub struct PoolHandle<C> {
    /// Jobs for the workers.
    pub jobs: Sender<Job<C>>,
    /// Connections coming back.
    pub returns: Arc<Returns<C>>,
    /// Worker threads.
    pub threads: usize,
}

/// Run jobs until the job channel closes. A panic in a step is caught and
/// logged in one line; the connection goes back to the loop to be closed,
/// so its slot and the in-flight count are returned and the worker serves on.
pub fn worker_loop<H: ConnectionHandler>(
    mut handler: H,
    jobs: Receiver<Job<H::Conn>>,
    returns: Arc<Returns<H::Conn>>,
    slot: Option<&'static Slot>,
) {
    for mut job in jobs {
        let conn = &mut job.conn;
        conn.stream.set_score_slot(slot);
        conn.stream.set_on_event_loop(false);
        let step = job.step;
        let ran = catch(|| match step {
            Step::Read => handler.readable(&mut conn.state, &mut conn.stream),
            Step::Write => handler.writable(&mut conn.state, &mut conn.stream),
        });
        let interest = match ran {
            Ok(interest) => interest,
            Err(p) => {
                let name = match step {
                    Step::Read => "readable",
                    Step::Write => "writable",
                };
                log_panic(name, &p, &conn.stream);
                Interest::Close
            }
        };
        // WouldBlock on this non-blocking socket is not a timeout.
        conn.stream.take_would_block();
        conn.stream.set_state(WorkerState::Idle);
        returns.send(Done {
            token: job.token,
            conn: job.conn,
            interest,
        });
    }
}

/// Start a loop's pool: `threads` workers named `name-N`, each with a
/// handler of its own built by `factory` and the scoreboard slot
/// `slots[N + 1]` (slot 0 is the loop's). Returns the threads and the
/// loop's side of the pool. A worker that fails to start stops the others
/// and moves the lifecycle to [`Phase::Stopped`].
pub fn start_pool<F: HandlerFactory>(
    name: &str,
    threads: usize,
    factory: &Arc<F>,
    lifecycle: &Lifecycle,
    slots: &'static [Slot],
) -> Result<(
    WorkerThreads,
    PoolHandle<<F::Handler as ConnectionHandler>::Conn>,
)> {
    let returns =
        Arc::new(Returns::new().map_err(|e| crate::Error::io("creating an eventfd", e.into()))?);
    let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
    let mut jobs_tx = Some(jobs_tx);
    let generation = lifecycle.generation();
    let workers = WorkerThreads::spawn(
        name,
        threads,
        |i| {
            let (jobs, returns, factory) =
                (jobs_rx.clone(), Arc::clone(&returns), Arc::clone(factory));
            let slot = slots.get(i + 1);
            move || {
                if let Some(s) = slot {
                    s.claim(generation);
                    s.set_state(WorkerState::Idle);
                }
                worker_loop(factory.build(), jobs, returns, slot);
                if let Some(s) = slot {
                    s.release();
                }
            }
        },
        // Closing the job channel makes the started workers return.
        || drop(jobs_tx.take()),
    )
    .inspect_err(|_| lifecycle.set_phase(Phase::Stopped))?;
    let Some(jobs) = jobs_tx else {
        unreachable!("the job channel is closed only when a worker fails to start")
    };
    Ok((
        workers,
        PoolHandle {
            jobs,
            returns,
            threads,
        },
    ))
}
