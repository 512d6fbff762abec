//! The accepted socket as a handler sees it.

use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::scoreboard::{Slot, WorkerState};

/// A layer between a handler and the socket (TLS), attached to a [`Stream`]
/// for the length of a step with [`Stream::attach`]: while it is,
/// [`Read`], [`Write`], [`Stream::send`] and [`Stream::sendfile`] go through
/// it. It does its own socket I/O on the `raw` stream it is handed, which
/// is the same stream with no layer attached (so its reads and writes keep
/// the stream's bookkeeping: `drained`, timeouts, send counts).
///
/// A layer owns what it buffers: plaintext it decrypted but the handler has
/// not read ([`holds_input`](Self::holds_input), which
/// [`Stream::drained`] counts, since an edge-triggered poller will not
/// report those bytes again), and records it encrypted but the socket did
/// not take yet (its own business: the layer turns a step's answer into
/// [`Interest::Write`](crate::Interest::Write) until they are sent).
pub trait Transport: Send + 'static {
    /// Read plaintext into `buf`, reading the socket through `raw` when
    /// nothing is buffered. `Ok(0)` is the end of the stream.
    fn read(&mut self, raw: &mut Stream, buf: &mut [u8]) -> io::Result<usize>;

    /// Write plaintext; `more` says more follows at once. Returns how much
    /// of `buf` was taken (encrypted and sent, or queued to be sent).
    fn write(&mut self, raw: &mut Stream, buf: &[u8], more: bool) -> io::Result<usize>;

    /// Is plaintext buffered that [`read`](Self::read) would return without
    /// reading the socket?
    fn holds_input(&self) -> bool;

    /// Send up to `count` bytes of `file` from `offset`, advancing it. The
    /// default reads the file into a buffer and [`write`](Self::write)s it.
    fn sendfile(
        &mut self,
        raw: &mut Stream,
        file: &File,
        offset: &mut u64,
        count: usize,
    ) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut chunk = vec![0u8; count.min(64 * 1024)];
        let n = loop {
            match file.read_at(&mut chunk, *offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if n == 0 {
            return Ok(0);
        }
        let sent = self.write(raw, &chunk[..n], count > n)?;
        *offset += sent as u64;
        Ok(sent)
    }

    /// The application protocol the peer and the layer agreed on (TLS's
    /// ALPN, RFC 7301), if they did: the protocol above must then speak
    /// it. The default: none agreed.
    fn alpn(&self) -> Option<&[u8]> {
        None
    }

    /// The layer as `Any`, so that its owner can take its own type back
    /// from [`Stream::detach`].
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

/// An accepted connection, lent to a [`ConnectionHandler`](crate::ConnectionHandler)
/// for one step at a time.
///
/// It reads and writes like a `TcpStream` and adds what a server needs:
/// `sendfile`, a "more is coming" write, and whether the server is draining.
/// The MPM decides whether it is blocking; a handler that treats
/// [`io::ErrorKind::WouldBlock`] as "return and wait" works either way.
#[derive(Debug)]
pub struct Stream {
    socket: TcpStream,
    peer: SocketAddr,
    blocking: bool,
    would_block: bool,
    drained: bool,
    /// An event loop's poller reported the peer's end of the stream, and no
    /// read has returned it yet: see [`Stream::input_reported`].
    end_reported: bool,
    held: bool,
    draining: Arc<AtomicBool>,
    /// Set by a fast stop, for a stream no other thread can shut down (a
    /// prefork child's): its reads and writes then fail at once.
    cut: Option<crate::FastStop>,
    read_timeout: Option<Duration>,
    slot: Option<&'static Slot>,
    on_loop: bool,
    transport: Option<Box<dyn Transport>>,
    /// Ring mode (the uring model): the queues its loop fills and empties.
    /// Ring mode (the uring model): its flags, and its queues while they
    /// hold bytes (a connection that waits holds none).
    ring_flags: u8,
    ring: Option<Box<RingQueues>>,
}

/// [`Stream::ring_flags`]: in ring mode at all.
const RING_MODE: u8 = 1;
/// The ring owns the socket's input (a multishot receive is armed): past
/// the queue, a read would block.
const RING_OWNS_INPUT: u8 = 2;
/// The ring owns the socket's output: writes append to the output queue.
const RING_OWNS_OUTPUT: u8 = 4;
/// The ring saw the end of the stream: past the queue, reads return 0.
const RING_ENDED: u8 = 8;
/// A send of the ring's is in flight: nothing may be written directly.
const RING_SENDING: u8 = 16;
/// Small sends are held in the output queue until the loop sends them
/// ([`Stream::hold_sends`]); a stream in ring mode never holds.
const HOLD_SENDS: u8 = 32;

/// The most bytes a stream holds ([`Stream::hold_sends`]): a larger write
/// sends what is held, then itself, at once. A turn's answers are small
/// (a head and a short body); a large body gains nothing from waiting and
/// would be copied once more.
pub const HOLD_MAX: usize = 16 * 1024;

/// The queues of a stream in ring mode: what a completion-based loop (the
/// uring model) received for it and what it will send for it. The loop
/// copies received bytes out of its provided buffers into the input queue
/// at once, so that the buffer goes straight back to the kernel; once both
/// queues are empty the loop takes them back
/// ([`Stream::take_ring_spares`]) and lends them to the next connection
/// that needs them ([`Stream::lend_ring_queues`]): a connection that waits
/// holds none, and a keep-alive request allocates nothing.
#[derive(Debug, Default)]
pub struct RingQueues {
    input: Vec<u8>,
    /// Bytes of `input` already read.
    read_at: usize,
    output: Vec<u8>,
}

impl RingQueues {
    fn input_len(&self) -> usize {
        self.input.len() - self.read_at
    }

    /// Bytes the queues' buffers hold room for (a loop keeps small ones).
    pub fn capacity(&self) -> usize {
        self.input.capacity() + self.output.capacity()
    }
}

/// The most output a stream in ring mode gathers before its writes return
/// `WouldBlock` (the handler then asks to write, and the loop sends).
pub const RING_OUTPUT_CAP: usize = 256 * 1024;

impl std::fmt::Debug for dyn Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transport")
    }
}

/// The longest a lingering close lasts, in all: every model closes a
/// lingering connection this long after it began, however the peer trickles.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// The most bytes a lingering close reads and discards before it closes.
pub const LINGER_BYTES: usize = 256 * 1024;

impl Stream {
    /// Wrap an accepted socket. `blocking` says which mode the MPM put it in;
    /// `draining` is the server-wide "stopping" flag.
    pub fn new(
        socket: TcpStream,
        peer: SocketAddr,
        blocking: bool,
        draining: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        // Accepted sockets start blocking on Linux, whatever the listener's mode.
        if !blocking {
            socket.set_nonblocking(true)?;
        }
        Ok(Stream {
            socket,
            peer,
            blocking,
            would_block: false,
            drained: false,
            end_reported: false,
            held: false,
            draining,
            cut: None,
            read_timeout: None,
            slot: None,
            transport: None,
            on_loop: false,
            ring_flags: 0,
            ring: None,
        })
    }

    /// Wrap a socket accepted non-blocking
    /// ([`Listener::accept_nonblocking`](crate::Listener::accept_nonblocking)):
    /// no system call.
    pub fn accepted_nonblocking(
        socket: TcpStream,
        peer: SocketAddr,
        draining: Arc<AtomicBool>,
    ) -> Self {
        Stream {
            socket,
            peer,
            blocking: false,
            would_block: false,
            drained: false,
            end_reported: false,
            held: false,
            draining,
            cut: None,
            read_timeout: None,
            slot: None,
            transport: None,
            on_loop: false,
            ring_flags: 0,
            ring: None,
        }
    }

    /// Is a layer (TLS) attached for this step: do the bytes the handler
    /// reads and writes travel encrypted? A proxy says `https` upstream.
    pub fn has_transport(&self) -> bool {
        self.transport.is_some()
    }

    /// The application protocol the attached layer agreed on with the
    /// peer (TLS's ALPN: `h2`, `http/1.1`), if any
    /// ([`Transport::alpn`]).
    pub fn alpn(&self) -> Option<&[u8]> {
        self.transport.as_ref().and_then(|t| t.alpn())
    }

    /// Put this stream in ring mode (the uring model): reads take the
    /// input queue the loop fills first, writes gather in an output queue
    /// while the ring owns the socket's output. See
    /// [`set_ring_owns`](Self::set_ring_owns).
    pub fn set_ring_mode(&mut self) {
        self.ring_flags |= RING_MODE;
    }

    /// Is the stream in ring mode?
    pub fn in_ring_mode(&self) -> bool {
        self.ring_flags & RING_MODE != 0
    }

    fn ring_flag(&self, flag: u8) -> bool {
        self.ring_flags & flag != 0
    }

    fn set_ring_flag(&mut self, flag: u8, on: bool) {
        if self.in_ring_mode() {
            if on {
                self.ring_flags |= flag;
            } else {
                self.ring_flags &= !flag;
            }
        }
    }

    /// The queues, made if the loop lent none.
    fn queues(&mut self) -> &mut RingQueues {
        self.ring.get_or_insert_with(Box::default)
    }

    /// Say whether the ring owns the socket's input (a multishot receive is
    /// armed: past the queue a read returns `WouldBlock`) and its output
    /// (writes gather, up to [`RING_OUTPUT_CAP`]). Owning neither (on a
    /// worker), the stream reads and writes the socket itself once its
    /// queues are empty.
    pub fn set_ring_owns(&mut self, input: bool, output: bool) {
        self.set_ring_flag(RING_OWNS_INPUT, input);
        self.set_ring_flag(RING_OWNS_OUTPUT, output);
    }

    /// Lend the stream empty queues (with room in their buffers), so that
    /// a keep-alive request on a loop allocates nothing; handed back when
    /// it has queues already, or is not in ring mode.
    pub fn lend_ring_queues(&mut self, mut queues: Box<RingQueues>) -> Option<Box<RingQueues>> {
        if self.ring.is_some() || !self.in_ring_mode() {
            return Some(queues);
        }
        queues.input.clear();
        queues.read_at = 0;
        queues.output.clear();
        self.ring = Some(queues);
        None
    }

    /// Take back the stream's queues once both are empty (read to the end,
    /// sent), so that a connection that waits holds none.
    pub fn take_ring_spares(&mut self, into: &mut Vec<Box<RingQueues>>) {
        if self
            .ring
            .as_ref()
            .is_some_and(|r| r.input_len() == 0 && r.output.is_empty())
        {
            if let Some(q) = self.ring.take() {
                into.push(q);
            }
        }
    }

    /// Hold this stream's small sends (up to [`HOLD_MAX`] bytes in all) in
    /// its output queue until [`send_held`](Self::send_held), instead of
    /// sending each at once: an event loop holds a turn's answers and sends
    /// them together at its end. A receiver woken by each send in turn,
    /// between the loop's other work, goes back to sleep between them and
    /// is woken again; sends close together find it awake (measured on the
    /// proxy's `fast` scenario: docs/design.md, "Sends held to the end of
    /// a turn"). The queues come from `spares` (the loop's, so that a
    /// keep-alive answer allocates nothing). A stream in ring mode (the
    /// uring model gathers its own way) or with a layer (TLS writes
    /// records) does not hold. Any other write, and a send larger than
    /// what may be held, sends what is held first: bytes go out in order.
    pub fn hold_sends(&mut self, spares: &mut Vec<Box<RingQueues>>) {
        if self.in_ring_mode() || self.transport.is_some() {
            return;
        }
        if self.ring.is_none() {
            self.ring = Some(spares.pop().unwrap_or_default());
        }
        self.ring_flags |= HOLD_SENDS;
    }

    /// Stop holding sends; what is held stays until [`send_held`](Self::send_held)
    /// (or the next write) sends it. Queues left empty go back to `spares`.
    pub fn stop_holding(&mut self, spares: &mut Vec<Box<RingQueues>>) {
        if self.ring_flag(HOLD_SENDS) {
            self.ring_flags &= !HOLD_SENDS;
            self.take_ring_spares(spares);
        }
    }

    /// Bytes held by [`hold_sends`](Self::hold_sends) and not sent yet.
    pub fn held_len(&self) -> usize {
        if self.in_ring_mode() {
            0
        } else {
            self.ring_output_len()
        }
    }

    /// Send what is held: `Ok` once all of it is gone (its queues back in
    /// `spares`), `WouldBlock` with the rest still held (the socket is
    /// full: the loop waits for room), or the error that ends the stream.
    pub fn send_held(&mut self, spares: &mut Vec<Box<RingQueues>>) -> io::Result<()> {
        if self.in_ring_mode() {
            return Ok(());
        }
        let sent = self.flush_gathered(false);
        // The loop's send, not a step's: no step's timeout is to read its
        // `WouldBlock` (the loop waits for the socket's room itself).
        self.would_block = false;
        sent?;
        if !self.ring_flag(HOLD_SENDS) {
            self.take_ring_spares(spares);
        }
        Ok(())
    }

    /// A send's buffer, handed back by the ring: the output queue keeps it
    /// for the next answer if it has none.
    pub fn return_ring_output_buffer(&mut self, mut buf: Vec<u8>) {
        if let Some(r) = &mut self.ring {
            if r.output.is_empty() && r.output.capacity() == 0 {
                buf.clear();
                r.output = buf;
            }
        }
    }

    /// Say whether a send of the ring's is in flight for this stream: while
    /// none is, [`sendfile`](Self::sendfile) writes the gathered output and
    /// the file directly (`sendfile(2)`), as the other models do.
    pub fn set_ring_sending(&mut self, on: bool) {
        self.set_ring_flag(RING_SENDING, on);
    }

    /// Bytes the ring received for this stream: appended to its input queue.
    pub fn ring_input(&mut self, bytes: &[u8]) {
        if !self.in_ring_mode() {
            return;
        }
        let r = self.queues();
        if r.read_at == r.input.len() {
            r.input.clear();
            r.read_at = 0;
        } else if r.read_at >= r.input.len() - r.read_at {
            // Read in part, and more read than left: the read bytes go
            // (a move of no more than them), or a queue never read to its
            // end (a tunnel, an upload read as fast as its upstream takes
            // it) would keep every byte it ever received.
            r.input.drain(..r.read_at);
            r.read_at = 0;
        }
        r.input.extend_from_slice(bytes);
    }

    /// The ring saw the end of the stream (or an error): once the queue is
    /// read, reads return 0.
    pub fn ring_input_ended(&mut self) {
        if self.in_ring_mode() {
            self.ring_flags |= RING_ENDED;
            // Not drained until a read returns the end: the loop steps the
            // connection again for it, as after a poller's report of it
            // ([`input_reported`](Self::input_reported)).
            self.end_reported = true;
        }
    }

    /// Has the ring seen the end of the stream?
    pub fn ring_input_has_ended(&self) -> bool {
        self.ring_flag(RING_ENDED)
    }

    /// Bytes received and not read yet.
    pub fn ring_input_len(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.input_len())
    }

    /// Bytes gathered and not handed to the ring yet.
    pub fn ring_output_len(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.output.len())
    }

    /// Take the gathered output, to be sent as one operation (empty: none).
    pub fn take_ring_output(&mut self) -> Vec<u8> {
        self.ring
            .as_mut()
            .map(|r| std::mem::take(&mut r.output))
            .unwrap_or_default()
    }

    /// Bytes of a send that went out short: they go before anything
    /// gathered since.
    pub fn unsent_ring_output(&mut self, mut unsent: Vec<u8>) {
        if self.in_ring_mode() {
            let r = self.queues();
            unsent.extend_from_slice(&r.output);
            r.output = unsent;
        }
    }

    /// Is input waiting to be read, in the ring's queue or (peeked) in the
    /// socket?
    pub fn has_buffered_input(&self) -> bool {
        self.ring_input_len() > 0 || crate::blocking::has_pending_input(&self.socket)
    }

    /// Ring mode, output not owned by the ring: write what is gathered
    /// before anything new, so that bytes go out in order.
    fn flush_gathered(&mut self, more: bool) -> io::Result<()> {
        if self.ring.as_ref().is_none_or(|r| r.output.is_empty()) {
            return Ok(());
        }
        self.check_cut()?;
        let Some(r) = &mut self.ring else {
            return Ok(());
        };
        while !r.output.is_empty() {
            match mpm_sys::socket::send(&self.socket, &r.output, more) {
                Ok(n) => {
                    r.output.drain(..n);
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    if err.kind() == io::ErrorKind::WouldBlock {
                        self.would_block = true;
                    }
                    return Err(err);
                }
            }
        }
        // A small buffer is kept for the next answers (held ones are at most
        // HOLD_MAX); a large one is let go.
        if r.output.capacity() > HOLD_MAX {
            r.output = Vec::new();
        }
        Ok(())
    }

    /// Ring mode, output owned by the ring: gather (part of) `buf`, or
    /// `WouldBlock` when the queue is full. `None`: not gathering.
    fn gather(&mut self, buf: &[u8]) -> Option<io::Result<usize>> {
        if !self.ring_flag(RING_OWNS_OUTPUT) {
            if self.ring_flag(HOLD_SENDS) && self.ring_output_len() + buf.len() <= HOLD_MAX {
                self.queues().output.extend_from_slice(buf);
                return Some(Ok(buf.len()));
            }
            return None;
        }
        let r = self.queues();
        let room = RING_OUTPUT_CAP.saturating_sub(r.output.len());
        if room == 0 && !buf.is_empty() {
            self.would_block = true;
            return Some(Err(io::ErrorKind::WouldBlock.into()));
        }
        let n = room.min(buf.len());
        r.output.extend_from_slice(&buf[..n]);
        Some(Ok(n))
    }

    /// Put a layer (TLS) between the handler and the socket until
    /// [`detach`](Self::detach): reads and writes go through it.
    pub fn attach(&mut self, transport: Box<dyn Transport>) {
        self.transport = Some(transport);
    }

    /// Take the layer back (none attached: `None`).
    pub fn detach(&mut self) -> Option<Box<dyn Transport>> {
        self.transport.take()
    }

    /// Run `f` on the attached layer, handing it this stream bare.
    fn through<R>(&mut self, f: impl FnOnce(&mut dyn Transport, &mut Stream) -> R) -> Option<R> {
        let mut t = self.transport.take()?;
        let r = f(t.as_mut(), self);
        self.transport = Some(t);
        Some(r)
    }

    /// A layer above the socket (TLS) holds input it already read, or not:
    /// [`drained`](Self::drained) is false while it does, so an event loop
    /// comes back for it.
    pub fn hold_input(&mut self, holds: bool) {
        self.held = holds;
    }

    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The address the client connected to (asks the kernel each time).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Is the socket in blocking mode (prefork, worker)?
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// Is the server stopping? A protocol should finish the exchange in
    /// progress and then close (HTTP answers with `Connection: close`).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Fail every read and write from the moment `stop` is asked (a fast
    /// stop: [`Lifecycle::fast_stop`](crate::Lifecycle::fast_stop)),
    /// including one interrupted by the signal that set it, and end a wait
    /// on an upstream ([`cut_fd`](Self::cut_fd)). For a single-threaded
    /// process, where no other thread can shut the connection down; a
    /// threaded model cuts connections with `shutdown(2)`.
    pub fn cut_on(&mut self, stop: crate::FastStop) {
        self.cut = Some(stop);
    }

    /// The descriptor that turns readable when this stream is cut
    /// ([`cut_on`](Self::cut_on)): a blocking wait polls it beside its own,
    /// so that a fast stop ends the wait even if its signal came just
    /// before the wait began.
    pub fn cut_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.cut.as_ref().map(crate::FastStop::fd)
    }

    /// Has a fast stop cut this connection ([`cut_on`](Self::cut_on))?
    pub fn is_cut(&self) -> bool {
        self.check_cut().is_err()
    }

    /// Cut by a fast stop ([`cut_on`](Self::cut_on)): the error every read
    /// and write returns from then on.
    fn check_cut(&self) -> io::Result<()> {
        match &self.cut {
            Some(cut) if cut.is_set() => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed by a fast stop",
            )),
            _ => Ok(()),
        }
    }

    /// Is the step in progress running on an event loop? Then it must keep
    /// the loop's rule (see [`ConnectionHandler`](crate::ConnectionHandler)):
    /// nothing that may block, large bodies within a per-turn budget.
    pub fn on_event_loop(&self) -> bool {
        self.on_loop
    }

    /// Say whether the next step runs on an event loop: the event MPM does,
    /// before each step, whichever thread runs it.
    pub fn set_on_event_loop(&mut self, on: bool) {
        self.on_loop = on;
    }

    /// The scoreboard slot of the worker driving this connection now.
    pub fn score_slot(&self) -> Option<&'static Slot> {
        self.slot
    }

    /// Set the scoreboard slot: the MPM does, whenever another worker takes
    /// the connection over.
    pub fn set_score_slot(&mut self, slot: Option<&'static Slot>) {
        self.slot = slot;
    }

    /// Set this connection's worker state on the scoreboard, if it has a slot.
    pub fn set_state(&self, state: WorkerState) {
        if let Some(s) = self.slot {
            s.set_state(state);
        }
    }

    /// Shut the writing half of the socket once every byte written before
    /// has gone: bytes held to the end of a loop's turn
    /// ([`hold_sends`](Self::hold_sends)) are sent first, and bytes the
    /// ring gathered or is sending make it `WouldBlock` (wait for room, as
    /// [`Interest::Await`](crate::Interest::Await)'s `client_write`, and
    /// try again). A `shutdown` of [`socket`](Self::socket) itself would
    /// go ahead of them, and they would be lost (a tunnel's last bytes
    /// before its upstream closed). A layer (TLS) writes its records as it
    /// goes: nothing of it is held here.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        if self.ring_flag(RING_SENDING)
            || (self.ring_flag(RING_OWNS_OUTPUT) && self.ring_output_len() > 0)
        {
            self.would_block = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.flush_gathered(false)?;
        self.socket.shutdown(Shutdown::Write)
    }

    /// The underlying socket, for options this type does not wrap.
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Write `buf`, telling the kernel more data follows at once (`MSG_MORE`)
    /// when `more` is set, so a response head and a file body share packets.
    pub fn send(&mut self, buf: &[u8], more: bool) -> io::Result<usize> {
        if let Some(r) = self.through(|t, raw| t.write(raw, buf, more)) {
            return r;
        }
        if let Some(r) = self.gather(buf) {
            self.count_send(r.is_err());
            return r;
        }
        self.flush_gathered(false)?;
        loop {
            // Each try, for a send the fast stop's signal interrupted.
            self.check_cut()?;
            match mpm_sys::socket::send(&self.socket, buf, more) {
                Ok(n) => {
                    self.count_send(false);
                    return Ok(n);
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    self.count_send(err.kind() == io::ErrorKind::WouldBlock);
                    return Err(self.note(err));
                }
            }
        }
    }

    /// Hold all of `buf` as [`send`](Self::send) would, by taking the
    /// buffer itself rather than copying its bytes, when this stream holds
    /// its sends and holds nothing yet: `buf` is left empty, with the
    /// capacity of the queue it was swapped with. False (and `buf` as it
    /// was) otherwise: the caller sends it as usual.
    ///
    /// An answer is written whole into its connection's output buffer
    /// (head and, for a short one, body), then held: a copy of a kilobyte
    /// or two into the queue, every answer on a loop, that a swap saves.
    pub fn hold_whole(&mut self, buf: &mut Vec<u8>) -> bool {
        if self.transport.is_some()
            || !self.ring_flag(HOLD_SENDS)
            || self.ring_flag(RING_OWNS_OUTPUT)
            || buf.len() > HOLD_MAX
        {
            return false;
        }
        let Some(r) = self.ring.as_deref_mut() else {
            return false;
        };
        if !r.output.is_empty() {
            return false;
        }
        std::mem::swap(&mut r.output, buf);
        buf.clear();
        self.count_send(false);
        true
    }

    /// Send up to `count` bytes of `file` from `offset` with `sendfile(2)`,
    /// advancing `offset`. Returns the number of bytes sent (0 at end of file).
    pub fn sendfile(&mut self, file: &File, offset: &mut u64, count: usize) -> io::Result<usize> {
        if let Some(r) = self.through(|t, raw| t.sendfile(raw, file, offset, count)) {
            return r;
        }
        if self.ring_flag(RING_OWNS_OUTPUT) && self.ring_flag(RING_SENDING) {
            // A ring's send is in flight, and bytes must go out in order:
            // the file's join the gathered output (read from the page
            // cache: a loop sends only cached files). With no send in
            // flight, below, the gathered head and the file go out
            // directly: `sendfile(2)` copies nothing through user memory,
            // which a 1 MiB file's throughput shows (measured: reading it
            // into the queue and sending served about half as many).
            use std::os::unix::fs::FileExt;
            let room = RING_OUTPUT_CAP
                .saturating_sub(self.ring_output_len())
                .min(count);
            if room == 0 && count > 0 {
                self.would_block = true;
                self.count_send(true);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let r = self.queues();
            let start = r.output.len();
            r.output.resize(start + room, 0);
            let n = loop {
                match file.read_at(&mut r.output[start..], *offset) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        r.output.truncate(start);
                        return Err(e);
                    }
                    Ok(n) => break n,
                }
            };
            r.output.truncate(start + n);
            *offset += n as u64;
            self.count_send(false);
            return Ok(n);
        }
        self.flush_gathered(true)?;
        let mut off = *offset as libc::off_t;
        loop {
            self.check_cut()?;
            match nix::sys::sendfile::sendfile(
                self.socket.as_fd(),
                file.as_fd(),
                Some(&mut off),
                count,
            ) {
                Ok(n) => {
                    self.count_send(false);
                    *offset = off as u64;
                    return Ok(n);
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    self.count_send(e == nix::errno::Errno::EAGAIN);
                    return Err(self.note(io::Error::from(e)));
                }
            }
        }
    }

    /// Did the last read or write fail with `WouldBlock`? On a blocking
    /// socket that means its timeout expired. Clears the flag.
    pub fn take_would_block(&mut self) -> bool {
        std::mem::take(&mut self.would_block)
    }

    /// Did the last read leave nothing behind in the socket (it returned
    /// less than asked, end-of-file, or `WouldBlock`)? An edge-triggered event
    /// loop needs another read only when this is false.
    pub fn drained(&self) -> bool {
        self.drained
            && self.ring_input_len() == 0
            && !self.end_reported
            && !self.held
            && !self.transport.as_ref().is_some_and(|t| t.holds_input())
    }

    /// Has the peer ended its side of the stream, as far as the loop was
    /// told (an edge-triggered poller's report not yet read, or the ring's
    /// receive)? Asks nothing of the socket.
    pub fn peer_ended(&self) -> bool {
        self.end_reported || self.ring_input_has_ended()
    }

    /// Has the peer closed its end of the socket (even with bytes before
    /// its end still unread), or reset it? A `poll` that does not wait (a
    /// system call): see [`peer_ended`](Self::peer_ended) for what the
    /// loop was told.
    pub fn peer_closed(&self) -> bool {
        mpm_sys::socket::peer_closed(&self.socket)
    }

    /// An edge-triggered poller reported input on the socket (`end`: the
    /// peer's end of the stream, `EPOLLRDHUP`) that the event loop could not
    /// read at once: the connection was at a worker, or waiting to write.
    /// [`drained`](Self::drained) is false until a read says otherwise, so
    /// that the loop reads again when the connection next waits for input.
    ///
    /// The end of the stream needs more than that: it may come in the same
    /// edge as the last bytes before it, and a read that takes those bytes
    /// returns less than asked, which alone would count as drained, with no
    /// edge to come for the end. So `drained` stays false until a read
    /// returns the end itself (0 bytes), fails, or finds nothing there.
    pub fn input_reported(&mut self, end: bool) {
        self.drained = false;
        self.end_reported |= end;
    }

    /// Set the blocking read timeout, skipping the system call when it is
    /// already in force. Used by blocking MPMs.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        if self.read_timeout != Some(timeout) {
            self.socket.set_read_timeout(Some(timeout))?;
            self.read_timeout = Some(timeout);
        }
        Ok(())
    }

    /// The socket already has `timeout` as its read timeout (copied from its
    /// listener): remember it, so that setting it again costs nothing.
    pub fn inherits_read_timeout(&mut self, timeout: Duration) {
        self.read_timeout = Some(timeout);
    }

    /// Read, waiting at most `within` for bytes to arrive whatever the
    /// socket's mode: a blocking socket (prefork, worker) waits with its
    /// read timeout, a non-blocking one (a worker of the event MPM reading a
    /// streamed request body) with `poll(2)` on this one descriptor. Nothing
    /// arrived in time: [`io::ErrorKind::TimedOut`].
    pub fn read_within(&mut self, buf: &mut [u8], within: Duration) -> io::Result<usize> {
        let within = within.max(Duration::from_millis(1));
        let deadline = Instant::now().checked_add(within);
        loop {
            if self.blocking {
                self.set_read_timeout(within)?;
            }
            match self.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Not the driver's timeout: this wait is the caller's.
                    self.would_block = false;
                    if self.blocking {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                }
                other => return other,
            }
            let left = deadline.map_or(within, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.wait_for(nix::poll::PollFlags::POLLIN, left)?;
        }
    }

    /// Wait at most `left` (at least a millisecond) for the socket to be
    /// ready for `flags`; an interrupted wait returns early, as ready.
    /// Nothing in time: [`io::ErrorKind::TimedOut`].
    fn wait_for(&self, flags: nix::poll::PollFlags, left: Duration) -> io::Result<()> {
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut fds = [nix::poll::PollFd::new(self.socket.as_fd(), flags)];
        match nix::poll::poll(
            &mut fds,
            nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX),
        ) {
            Ok(0) => Err(io::ErrorKind::TimedOut.into()),
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Write all of `buf`, waiting at most `within` for room whatever the
    /// socket's mode (a non-blocking one with `poll(2)` for writability):
    /// a small message (an interim `100 Continue`) is never left half-sent.
    /// No room in time: [`io::ErrorKind::TimedOut`].
    pub fn write_all_within(&mut self, mut buf: &[u8], within: Duration) -> io::Result<()> {
        let deadline = crate::deadline(Instant::now(), within);
        while !buf.is_empty() {
            match self.send(buf, false) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.would_block = false;
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || self.blocking {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    self.wait_for(nix::poll::PollFlags::POLLOUT, left)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Set the blocking write timeout.
    pub fn set_write_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.socket.set_write_timeout(Some(timeout))
    }

    /// Close after a lingering drain: shut down our side for writing, then
    /// read and discard whatever the peer still sends until it closes, `max`
    /// elapses (in all, however the peer trickles), or [`LINGER_BYTES`] were
    /// read. Keeps unread input from turning
    /// into a reset that would destroy the response the peer has not read yet.
    pub fn linger_close(mut self, max: Duration) {
        if self.socket.shutdown(Shutdown::Write).is_err() {
            return;
        }
        let deadline = crate::deadline(Instant::now(), max);
        let _ = self.socket.set_nonblocking(false);
        let mut scratch = [0u8; 4096];
        let mut budget: usize = LINGER_BYTES;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || budget == 0 {
                return;
            }
            if self.socket.set_read_timeout(Some(left)).is_err() {
                return;
            }
            match self.socket.read(&mut scratch) {
                Ok(0) | Err(_) => return,
                Ok(n) => budget = budget.saturating_sub(n),
            }
        }
    }

    fn count_send(&self, blocked: bool) {
        if let Some(s) = self.slot {
            s.record_send(blocked);
        }
    }

    fn note(&mut self, err: io::Error) -> io::Error {
        if err.kind() == io::ErrorKind::WouldBlock {
            self.would_block = true;
        }
        err
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(r) = self.through(|t, raw| t.read(raw, buf)) {
            return r;
        }
        self.check_cut()?;
        if self.in_ring_mode() {
            let owns_input = self.ring_flag(RING_OWNS_INPUT);
            if let Some(r) = self.ring.as_mut().filter(|r| r.input_len() > 0) {
                let n = r.input_len().min(buf.len());
                buf[..n].copy_from_slice(&r.input[r.read_at..r.read_at + n]);
                r.read_at += n;
                if r.read_at == r.input.len() {
                    // Emptied: the loop takes the queues back
                    // ([`take_ring_spares`](Stream::take_ring_spares)) when
                    // the step ends, so an idle connection keeps none.
                    r.input.clear();
                    r.read_at = 0;
                }
                // Drained only when the ring owns the socket (nothing more
                // can be read now) and the queue is empty.
                self.drained = owns_input && r.input_len() == 0;
                return Ok(n);
            }
            if self.ring_flag(RING_ENDED) {
                self.end_reported = false;
                self.drained = true;
                return Ok(0);
            }
            if owns_input {
                self.drained = true;
                self.end_reported = false;
                return Err(self.note(io::ErrorKind::WouldBlock.into()));
            }
        }
        match mpm_sys::socket::recv(&self.socket, buf) {
            Ok(n) => {
                // The end of the stream, once reported, is drained only
                // when a read returns it (or `buf` was empty).
                if n == 0 {
                    self.end_reported = false;
                }
                self.drained = n < buf.len();
                Ok(n)
            }
            Err(e) => {
                // An error ends the stream as surely as its end does; and
                // WouldBlock says nothing is there, the end included.
                self.end_reported = false;
                self.drained = e.kind() == io::ErrorKind::WouldBlock;
                Err(self.note(e))
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf, false)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.transport.is_some() {
            // A layer writes records: the first non-empty slice, as the
            // default write_vectored does.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return self.send(first, bufs.len() > 1);
        }
        if self.ring_flag(RING_OWNS_OUTPUT) {
            let mut n = 0;
            for b in bufs {
                match self.gather(b) {
                    Some(Ok(k)) => {
                        n += k;
                        if k < b.len() {
                            break;
                        }
                    }
                    Some(Err(e)) if n == 0 => return Err(e),
                    _ => break,
                }
            }
            self.would_block &= n == 0;
            self.count_send(n == 0);
            return Ok(n);
        }
        self.flush_gathered(false)?;
        self.check_cut()?;
        match self.socket.write_vectored(bufs) {
            Ok(n) => {
                self.count_send(false);
                Ok(n)
            }
            Err(e) => {
                self.count_send(e.kind() == io::ErrorKind::WouldBlock);
                Err(self.note(e))
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    use super::Stream;

    /// A non-blocking server side and its client.
    fn pair() -> (TcpStream, Stream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, peer) = listener.accept().unwrap();
        let stream = Stream::new(sock, peer, false, Arc::new(AtomicBool::new(false))).unwrap();
        (client, stream)
    }

    /// A shutdown of the writing half sends what is held first (a
    /// shutdown of the socket itself went ahead of it, and the bytes were
    /// lost); in ring mode it waits while the ring has bytes to send.
    #[test]
    fn shutdown_write_sends_held_bytes_before_the_end() {
        let (mut client, mut stream) = pair();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut spares = Vec::new();
        stream.hold_sends(&mut spares);
        stream.send(b"last words", false).unwrap();
        assert_eq!(stream.held_len(), 10);
        stream.shutdown_write().unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words", "the bytes, then the end");

        let (_client, mut ring) = pair();
        ring.set_ring_mode();
        ring.set_ring_owns(false, true);
        ring.send(b"gathered", false).unwrap();
        let e = ring.shutdown_write().unwrap_err();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::WouldBlock,
            "gathered, not sent"
        );
        let out = ring.take_ring_output();
        assert_eq!(out, b"gathered");
        ring.set_ring_sending(true);
        let e = ring.shutdown_write().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "a send in flight");
        ring.set_ring_sending(false);
        ring.shutdown_write().unwrap();
    }

    /// Held sends wait for `send_held`, keep their order with a write too
    /// large to hold, and give their queues back once sent.
    #[test]
    fn held_sends_go_out_at_send_held_in_order() {
        let (mut client, mut stream) = pair();
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut spares = Vec::new();
        stream.hold_sends(&mut spares);
        assert_eq!(stream.send(b"one;", false).unwrap(), 4);
        assert_eq!(stream.send(b"two;", false).unwrap(), 4);
        assert_eq!(stream.held_len(), 8);
        let mut buf = [0u8; 64];
        assert!(client.read(&mut buf).is_err(), "nothing before send_held");
        stream.stop_holding(&mut spares);
        assert!(spares.is_empty(), "bytes held keep their queue");
        stream.send_held(&mut spares).unwrap();
        assert_eq!(stream.held_len(), 0);
        assert_eq!(spares.len(), 1, "sent, the queue goes back");
        let n = client.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one;two;");

        // Too large to hold: what is held goes first, then it, at once.
        stream.hold_sends(&mut spares);
        stream.send(b"held;", false).unwrap();
        let large = vec![b'L'; super::HOLD_MAX];
        assert_eq!(stream.send(&large, false).unwrap(), super::HOLD_MAX);
        let mut got = Vec::new();
        while got.len() < 5 + super::HOLD_MAX {
            let n = client.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(&got[..5], b"held;");
        assert_eq!(stream.held_len(), 0);
        stream.stop_holding(&mut spares);
    }

    /// A whole buffer is held by swapping it for the empty queue's (its
    /// bytes not copied), only while the stream holds its sends and holds
    /// nothing yet; anything else leaves it to an ordinary send, so bytes
    /// keep their order.
    #[test]
    fn a_whole_buffer_is_held_by_a_swap_only_when_nothing_is_held() {
        let (mut client, mut stream) = pair();
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut out = b"answer one;".to_vec();
        assert!(!stream.hold_whole(&mut out), "not holding: sent as usual");
        assert_eq!(out, b"answer one;");
        let mut spares = Vec::new();
        stream.hold_sends(&mut spares);
        let at = out.as_ptr();
        assert!(stream.hold_whole(&mut out));
        assert!(out.is_empty(), "the buffer went to the queue");
        assert_eq!(stream.held_len(), 11);
        let mut again = b"two;".to_vec();
        assert!(!stream.hold_whole(&mut again), "something is held already");
        assert_eq!(stream.send(&again, false).unwrap(), 4);
        let mut buf = [0u8; 64];
        assert!(client.read(&mut buf).is_err(), "nothing before send_held");
        stream.send_held(&mut spares).unwrap();
        let mut got = Vec::new();
        while got.len() < 15 {
            let n = client.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"answer one;two;");
        // The swapped-in buffer is the one the next whole answer gets back.
        let mut next = b"three;".to_vec();
        assert!(stream.hold_whole(&mut next));
        assert_eq!(
            next.as_ptr(),
            at,
            "the queue's buffer, now empty, came back"
        );
        stream.stop_holding(&mut spares);
        stream.send_held(&mut spares).unwrap();
        let n = client.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"three;");
        // Too large to hold whole: left to an ordinary send.
        stream.hold_sends(&mut spares);
        let mut large = vec![b'L'; super::HOLD_MAX + 1];
        assert!(!stream.hold_whole(&mut large));
        assert_eq!(large.len(), super::HOLD_MAX + 1);
        stream.stop_holding(&mut spares);
    }

    /// A caller's `Duration::MAX` is "as long as can be": no overflow panic
    /// adding it to now; a peer that has closed ends the linger at once.
    #[test]
    fn lingering_duration_max_does_not_panic() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (socket, peer) = listener.accept().unwrap();
        drop(client);
        let stream = Stream::new(socket, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
        stream.linger_close(Duration::MAX);
    }

    #[test]
    fn send_writes_and_counts_nothing_without_a_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (socket, peer) = listener.accept().unwrap();
        let mut stream = Stream::new(socket, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
        assert_eq!(stream.send(b"head", true).unwrap(), 4);
        assert_eq!(stream.send(b"body", false).unwrap(), 4);
        let mut got = [0u8; 8];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"headbody");
    }

    #[test]
    fn a_reported_end_is_not_drained_by_a_short_read_of_the_bytes_before_it() {
        let (mut client, mut stream) = pair();
        client.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        assert!(crate::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        // Both came in one edge: the poller said readable and end of stream.
        stream.input_reported(true);
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0 && n < buf.len());
        assert!(
            !stream.drained(),
            "a short read took the bytes; the end is still unread"
        );
        assert_eq!(stream.read(&mut buf).unwrap(), 0);
        assert!(stream.drained(), "the end was read");
    }

    #[test]
    fn input_reported_while_busy_makes_the_stream_undrained_until_read() {
        let (_client, mut stream) = pair();
        let mut buf = [0u8; 16];
        assert!(stream.read(&mut buf).is_err(), "nothing sent yet");
        assert!(stream.drained());
        stream.input_reported(false);
        assert!(!stream.drained(), "an edge the loop did not read at once");
        assert!(stream.read(&mut buf).is_err());
        assert!(stream.drained(), "the read found nothing: drained again");
    }

    /// A queue that is read in part while more keeps coming (a tunnel, an
    /// upload read as fast as its upstream takes it) holds what is unread
    /// and some, not every byte it ever received.
    #[test]
    fn a_ring_queue_never_read_to_its_end_keeps_only_about_what_is_unread() {
        let (_client, mut stream) = pair();
        stream.set_ring_mode();
        stream.set_ring_owns(true, true);
        let mut sent = Vec::new();
        let mut got = Vec::new();
        let mut buf = [0u8; 1000];
        for i in 0..2000u32 {
            let block: Vec<u8> = (0..1024u32).map(|b| (b * 7 + i) as u8).collect();
            stream.ring_input(&block);
            sent.extend_from_slice(&block);
            // Reads less than comes: 1,000 bytes behind each 1,024.
            let n = stream.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            let capacity = stream.ring.as_ref().map_or(0, |r| r.input.capacity());
            assert!(
                capacity <= 4 * stream.ring_input_len() + 8192,
                "{capacity} bytes of queue for {} unread",
                stream.ring_input_len()
            );
        }
        while stream.ring_input_len() > 0 {
            let n = stream.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got == sent, "the bytes came out in order");
    }

    #[test]
    fn ring_mode_reads_the_queue_first_then_would_block_while_the_ring_owns_input() {
        let (mut client, mut stream) = pair();
        stream.set_ring_mode();
        stream.set_ring_owns(true, true);
        stream.ring_input(b"GET / HTTP/1.1\r\n");
        assert!(!stream.drained(), "queued input is not drained");
        client.write_all(b"in the socket").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(stream.read(&mut buf).unwrap(), 8);
        assert_eq!(&buf, b"GET / HT");
        let mut rest = [0u8; 64];
        assert_eq!(stream.read(&mut rest).unwrap(), 8);
        assert!(stream.drained());
        assert_eq!(stream.ring_input_len(), 0);
        let mut spares = Vec::new();
        stream.take_ring_spares(&mut spares);
        assert_eq!(spares.len(), 1, "the emptied queue's buffer is handed back");
        // The ring owns the socket: what is in it is the ring's to receive.
        let e = stream.read(&mut rest).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        // Handed to a worker (the ring let go): the socket is read directly.
        stream.set_ring_owns(false, false);
        assert!(crate::blocking::input_arrives_within(
            &stream,
            Duration::from_secs(10)
        ));
        let n = stream.read(&mut rest).unwrap();
        assert_eq!(&rest[..n], b"in the socket");
        stream.ring_input_ended();
        assert!(!stream.drained(), "the end is still to be read");
        assert_eq!(stream.read(&mut rest).unwrap(), 0, "the ring saw the end");
        assert!(stream.drained());
    }

    #[test]
    fn ring_mode_gathers_output_up_to_its_cap_and_flushes_it_first_when_writing_directly() {
        let (mut client, mut stream) = pair();
        stream.set_ring_mode();
        stream.set_ring_owns(true, true);
        assert_eq!(stream.send(b"head ", true).unwrap(), 5);
        let big = vec![b'x'; super::RING_OUTPUT_CAP];
        let n = stream.send(&big, false).unwrap();
        assert_eq!(n, super::RING_OUTPUT_CAP - 5, "up to the cap");
        let e = stream.send(b"more", false).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "full");
        assert!(stream.take_would_block());
        let out = stream.take_ring_output();
        assert_eq!(out.len(), super::RING_OUTPUT_CAP);
        assert_eq!(stream.ring_output_len(), 0);
        // Gathered, then handed to a worker: the gathered bytes go first.
        assert_eq!(stream.send(b"one ", false).unwrap(), 4);
        stream.set_ring_owns(false, false);
        assert_eq!(stream.send(b"two", false).unwrap(), 3);
        let mut got = [0u8; 7];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"one two");
    }

    #[test]
    fn ring_mode_sendfile_gathers_the_file_bytes_while_a_ring_send_is_in_flight() {
        let (_client, mut stream) = pair();
        stream.set_ring_mode();
        stream.set_ring_owns(true, true);
        stream.set_ring_sending(true);
        let path = std::env::temp_dir().join(format!("mpm-ring-{}", std::process::id()));
        std::fs::write(&path, b"0123456789").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut offset = 2;
        assert_eq!(stream.sendfile(&file, &mut offset, 5).unwrap(), 5);
        assert_eq!(offset, 7);
        assert_eq!(stream.take_ring_output(), b"23456");
    }
}
