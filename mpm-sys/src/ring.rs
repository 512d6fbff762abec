//! io_uring behind a safe API: the uring model's one ring per process.
//!
//! The kernel reads and writes user memory long after the call that named
//! it returned, so every buffer an operation names is owned here until
//! the operation's last completion arrives:
//!
//! * input goes into a **provided-buffer ring** (`IORING_REGISTER_PBUF_RING`)
//!   whose memory the [`Ring`] maps and owns; a completion lends one of its
//!   buffers ([`Ring::bytes`]), and the buffer goes back to the kernel at
//!   the next [`Ring::reap`], so a connection that waits holds none;
//! * a send takes its buffer by value ([`Ring::send`]) and hands it back in
//!   its completion ([`Completion::sent`]);
//! * accept, poll and cancel name no memory at all.
//!
//! Dropping a `Ring` cancels what is in flight and waits (a bounded time)
//! for the kernel to let go; memory the kernel still holds then is leaked,
//! never freed under it. Descriptors are named by number, as `poll(2)`
//! names them: the kernel checks each (a closed one fails the operation).
//!
//! [`probe`] says what this kernel offers, or why io_uring is refused here,
//! in a sentence a user can act on.

use std::collections::HashMap;
use std::collections::HashSet;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// The most provided buffers a ring may have (the kernel's bound is 32768).
pub const MAX_BUFFERS: u16 = 32768;
/// The largest provided buffer.
pub const MAX_BUFFER_SIZE: usize = 1 << 20;
/// The most submission entries a ring may have.
pub const MAX_ENTRIES: u32 = 32768;

/// The buffer group of the ring's provided buffers (one group per ring).
const GROUP: u16 = 0;
/// The user data of cancels this module submits for itself: their
/// completions are not reported.
const INTERNAL: u64 = u64::MAX;

/// What this kernel's io_uring offers, as [`probe`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingFeatures {
    /// Multishot accept (Linux 5.19).
    pub multishot_accept: bool,
    /// Multishot receive into provided buffers (Linux 6.0).
    pub multishot_recv: bool,
    /// Provided-buffer rings (Linux 5.19).
    pub buffer_ring: bool,
    /// `IORING_SETUP_SINGLE_ISSUER` (Linux 6.0).
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (Linux 6.1).
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN` (Linux 5.19).
    pub coop_taskrun: bool,
    /// Zero-copy send (Linux 6.0).
    pub send_zc: bool,
}

impl RingFeatures {
    /// The setup flags and features in use, for the status and welcome
    /// pages: "multishot accept, multishot recv, buffer ring, ...".
    pub fn describe(&self) -> String {
        let named = [
            (self.multishot_accept, "multishot accept"),
            (self.multishot_recv, "multishot recv"),
            (self.buffer_ring, "provided-buffer ring"),
            (self.single_issuer, "SINGLE_ISSUER"),
            (self.defer_taskrun, "DEFER_TASKRUN"),
            (self.coop_taskrun, "COOP_TASKRUN"),
            (self.send_zc, "send_zc available"),
        ];
        let on: Vec<&str> = named.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        on.join(", ")
    }
}

/// Why io_uring cannot serve here: `Display` is one sentence naming the
/// cause and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RingRefusal {
    /// `io_uring_setup` failed with EPERM while the sysctl allows it: a
    /// seccomp filter (a container's default profile) or a security module.
    #[error(
        "io_uring is refused (EPERM) by a seccomp filter or security module (a container's \
         default seccomp profile denies it); allow io_uring_setup/io_uring_enter/\
         io_uring_register, or use --mpm event"
    )]
    Seccomp,
    /// `kernel.io_uring_disabled` forbids it (1: only for members of
    /// `kernel.io_uring_group`; 2: for everyone).
    #[error(
        "io_uring is disabled by the sysctl kernel.io_uring_disabled = {0}; set it to 0 \
         (or add this user to kernel.io_uring_group when it is 1), or use --mpm event"
    )]
    Disabled(u8),
    /// The kernel has no io_uring (built without it, or filtered with ENOSYS).
    #[error(
        "io_uring is not available (ENOSYS: the kernel is built without it or a filter hides it); \
         use --mpm event"
    )]
    NotImplemented,
    /// The ring's memory exceeds the locked-memory limit (kernels before 5.12).
    #[error(
        "io_uring could not lock its memory (ENOMEM: RLIMIT_MEMLOCK is too low on this kernel); \
         raise `ulimit -l`, or use --mpm event"
    )]
    Memlock,
    /// The kernel has io_uring but not what the model needs.
    #[error("io_uring on this kernel lacks {0} (needs Linux 6.0 or later); use --mpm event")]
    Lacks(&'static str),
    /// Another failure.
    #[error("io_uring could not be set up: {0}; use --mpm event")]
    Other(io::Error),
}

impl RingRefusal {
    /// Classify a failed `io_uring_setup`.
    fn from_setup(e: io::Error) -> RingRefusal {
        match e.raw_os_error() {
            Some(libc::EPERM) => match read_disabled_sysctl() {
                Some(v) if v > 0 => RingRefusal::Disabled(v),
                _ => RingRefusal::Seccomp,
            },
            Some(libc::ENOSYS) => RingRefusal::NotImplemented,
            Some(libc::ENOMEM) => RingRefusal::Memlock,
            _ => RingRefusal::Other(e),
        }
    }
}

/// `/proc/sys/kernel/io_uring_disabled` (Linux 6.6+), if there is one.
fn read_disabled_sysctl() -> Option<u8> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What this kernel offers, or why io_uring is refused: a tiny ring is set
/// up, a buffer ring registered, and a multishot receive run over a
/// socket pair, so that the answer is the kernel's, not a version number's.
pub fn probe() -> Result<RingFeatures, RingRefusal> {
    let mut ring = Ring::new(4, 2, 64)?;
    let features = ring.features;
    let (a, b) = std::os::unix::net::UnixStream::pair().map_err(RingRefusal::Other)?;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    ring.recv_multi(a.as_raw_fd(), 1)
        .map_err(RingRefusal::Other)?;
    (&b).write_all(b"x").map_err(RingRefusal::Other)?;
    let mut got = Vec::new();
    for _ in 0..10 {
        ring.wait(Duration::from_millis(100))
            .map_err(RingRefusal::Other)?;
        ring.reap(&mut got);
        if !got.is_empty() {
            break;
        }
    }
    match got.first() {
        Some(c) if c.result == 1 && c.more => {}
        Some(c) if c.result == -libc::EINVAL => {
            return Err(RingRefusal::Lacks("multishot receive"))
        }
        Some(c) if c.result < 0 => {
            return Err(RingRefusal::Other(io::Error::from_raw_os_error(-c.result)))
        }
        _ => return Err(RingRefusal::Lacks("multishot receive")),
    }
    drop(ring);
    Ok(RingFeatures {
        multishot_recv: true,
        multishot_accept: true,
        ..features
    })
}

/// One completion, copied out of the completion queue.
#[derive(Debug)]
pub struct Completion {
    /// The user data the operation was submitted with.
    pub user_data: u64,
    /// The result: bytes, a descriptor, or `-errno`.
    pub result: i32,
    /// More completions will come for this operation (multishot).
    pub more: bool,
    /// The provided buffer holding the bytes received, if any: read it
    /// with [`Ring::bytes`] before the next [`Ring::reap`].
    buffer: Option<u16>,
    /// A send's buffer, handed back.
    sent: Option<Vec<u8>>,
    /// An accept's new descriptor, owned.
    accepted: Option<OwnedFd>,
}

impl Completion {
    /// A send's buffer, handed back once the kernel is done with it: the
    /// result says how much of it went out.
    pub fn sent(&mut self) -> Option<Vec<u8>> {
        self.sent.take()
    }

    /// An accept's new connection (the completion of an
    /// [`accept_multi`](Ring::accept_multi) with a descriptor): owned by
    /// the caller from here; closed with the completion if not taken.
    pub fn accepted(&mut self) -> Option<OwnedFd> {
        self.accepted.take()
    }

    /// Did this completion bring bytes in a provided buffer?
    pub fn has_buffer(&self) -> bool {
        self.buffer.is_some()
    }
}

/// Counters of the ring's work since it was set up.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingStats {
    /// Submission entries handed to the kernel.
    pub submitted: u64,
    /// `io_uring_enter` calls.
    pub enters: u64,
    /// Completions reaped.
    pub completions: u64,
    /// Times a receive found no provided buffer free (`ENOBUFS`).
    pub no_buffers: u64,
}

/// Anonymous memory mapped for the ring, page aligned, owned.
struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapped {
    fn new(len: usize) -> io::Result<Mapped> {
        // SAFETY: an anonymous private mapping of `len` (> 0, checked by
        // the callers' bounds) bytes at an address the kernel picks touches
        // no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mapped { ptr, len })
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`, which
        // nothing else unmaps; the ring leaks (forgets) a mapping the kernel
        // may still use rather than drop it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The provided-buffer ring: `count` entries (a power of two) and
/// `count * size` bytes of buffers.
struct BufRing {
    entries: Mapped,
    buffers: Mapped,
    count: u16,
    size: usize,
    /// The tail the kernel reads: advanced as buffers are handed back.
    tail: u16,
}

impl BufRing {
    fn new(count: u16, size: usize) -> io::Result<BufRing> {
        let entries_len = usize::from(count)
            .checked_mul(std::mem::size_of::<types::BufRingEntry>())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "buffer ring too large"))?;
        let buffers_len = usize::from(count)
            .checked_mul(size)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "buffers too large"))?;
        let mut ring = BufRing {
            entries: Mapped::new(entries_len)?,
            buffers: Mapped::new(buffers_len)?,
            count,
            size,
            tail: 0,
        };
        for bid in 0..count {
            ring.push(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Put buffer `bid` (< count) at the tail; [`publish`](Self::publish)
    /// makes it visible to the kernel.
    fn push(&mut self, bid: u16) {
        debug_assert!(bid < self.count);
        let index = usize::from(self.tail & (self.count - 1));
        let base = self.entries.ptr.as_ptr().cast::<types::BufRingEntry>();
        // SAFETY: `index` < count, so the entry lies inside the mapping of
        // `count` entries; the kernel reads only entries between its head
        // and the published tail, and this one is past the tail until
        // `publish`. The buffer address lies inside `buffers` since
        // bid < count and the mapping is count * size bytes.
        unsafe {
            let entry = &mut *base.add(index);
            entry.set_addr(self.buffers.ptr.as_ptr().add(usize::from(bid) * self.size) as u64);
            entry.set_len(self.size as u32);
            entry.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Make the pushed entries visible to the kernel.
    fn publish(&self) {
        let base = self.entries.ptr.as_ptr().cast::<types::BufRingEntry>();
        // SAFETY: the tail field lies in the first entry of the mapping
        // (page aligned, at least one entry); it is a u16 the kernel reads
        // with acquire ordering, so it is written atomically with release.
        unsafe {
            let tail = types::BufRingEntry::tail(base) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// The bytes of buffer `bid`, `len` long.
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        if bid >= self.count {
            return &[];
        }
        let len = len.min(self.size);
        // SAFETY: bid < count and len <= size: the slice lies inside the
        // mapping. The kernel wrote it before posting the completion that
        // lent it, and will not write it again until it is pushed back,
        // which takes `&mut self` (so no such borrow is alive then).
        unsafe {
            std::slice::from_raw_parts(
                self.buffers.ptr.as_ptr().add(usize::from(bid) * self.size),
                len,
            )
        }
    }
}

/// One io_uring, its provided buffers and the buffers of its sends in
/// flight; operations are keyed by a `u64` user data of the caller's
/// choosing (`u64::MAX` is reserved).
pub struct Ring {
    ring: IoUring,
    bufs: Option<BufRing>,
    /// Buffers of sends in flight, by user data.
    sends: HashMap<u64, Vec<u8>>,
    /// User data of the multishot accepts armed: their results are descriptors.
    accepts: HashSet<u64>,
    /// Provided buffers lent by the last reap, handed back at the next.
    lent: Vec<u16>,
    /// Operations whose last completion has not come.
    in_flight: usize,
    features: RingFeatures,
    stats: RingStats,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("features", &self.features)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl Ring {
    /// A ring of `entries` submission entries (a power of two, at most
    /// [`MAX_ENTRIES`]) with `buffers` provided buffers (a power of two, at
    /// most [`MAX_BUFFERS`]) of `buffer_size` bytes (at most
    /// [`MAX_BUFFER_SIZE`]), set up with the best flags the kernel takes.
    pub fn new(entries: u32, buffers: u16, buffer_size: usize) -> Result<Ring, RingRefusal> {
        let bad = |m: &str| RingRefusal::Other(io::Error::new(io::ErrorKind::InvalidInput, m));
        if entries == 0 || entries > MAX_ENTRIES || !entries.is_power_of_two() {
            return Err(bad("ring entries must be a power of two up to 32768"));
        }
        if buffers == 0 || buffers > MAX_BUFFERS || !buffers.is_power_of_two() {
            return Err(bad("provided buffers must be a power of two up to 32768"));
        }
        if buffer_size == 0 || buffer_size > MAX_BUFFER_SIZE {
            return Err(bad("a provided buffer must be 1 byte to 1 MiB"));
        }
        let cq = entries.checked_mul(4).unwrap_or(entries);
        // The best flags first; each refused one (EINVAL: an older kernel)
        // is dropped in turn.
        let tries: [(bool, bool, bool); 4] = [
            (true, true, true),
            (true, false, true),
            (false, false, true),
            (false, false, false),
        ];
        let mut last = None;
        let mut built = None;
        for (single, defer, coop) in tries {
            let mut b = IoUring::builder();
            b.setup_cqsize(cq);
            if single {
                b.setup_single_issuer();
            }
            if defer {
                b.setup_defer_taskrun();
            }
            if coop {
                b.setup_coop_taskrun();
            }
            match b.build(entries) {
                Ok(r) => {
                    built = Some((r, single, defer, coop));
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
                Err(e) => return Err(RingRefusal::from_setup(e)),
            }
        }
        let Some((ring, single, defer, coop)) = built else {
            return Err(RingRefusal::from_setup(
                last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)),
            ));
        };
        let bufs = BufRing::new(buffers, buffer_size).map_err(RingRefusal::Other)?;
        // SAFETY: the entries' mapping is page aligned and `buffers` entries
        // long; it lives in `self.bufs` until Drop, which unregisters the
        // group (after the kernel let go of every operation) before freeing.
        let registered = unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.entries.ptr.as_ptr() as u64,
                buffers,
                GROUP,
                0,
            )
        };
        if let Err(e) = registered {
            return Err(match e.raw_os_error() {
                Some(libc::EINVAL) | Some(libc::ENOSYS) => {
                    RingRefusal::Lacks("provided-buffer rings")
                }
                _ => RingRefusal::Other(e),
            });
        }
        let mut probe = io_uring::Probe::new();
        let send_zc = ring.submitter().register_probe(&mut probe).is_ok()
            && probe.is_supported(opcode::SendZc::CODE);
        Ok(Ring {
            ring,
            bufs: Some(bufs),
            sends: HashMap::new(),
            accepts: HashSet::new(),
            lent: Vec::new(),
            in_flight: 0,
            features: RingFeatures {
                multishot_accept: false,
                multishot_recv: false,
                buffer_ring: true,
                single_issuer: single,
                defer_taskrun: defer,
                coop_taskrun: coop,
                send_zc,
            },
            stats: RingStats::default(),
        })
    }

    /// The flags this ring was set up with, and what the kernel offers.
    pub fn features(&self) -> RingFeatures {
        self.features
    }

    /// Say multishot accept and receive work here ([`probe`] found them).
    pub fn set_multishot(&mut self, on: bool) {
        self.features.multishot_accept = on;
        self.features.multishot_recv = on;
    }

    /// The ring's counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Operations whose last completion has not come yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Provided buffers: how many, how large.
    pub fn buffers(&self) -> (u16, usize) {
        self.bufs.as_ref().map_or((0, 0), |b| (b.count, b.size))
    }

    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        // SAFETY: `push` is private and given only the entries this type
        // builds: each names no memory (accept without an address, poll,
        // cancel), memory of the provided-buffer ring this Ring owns until
        // every operation has ended (Drop waits, or leaks it), or a send
        // buffer kept in `self.sends` until that send's last completion.
        let full = unsafe { self.ring.submission().push(&entry).is_err() };
        if full {
            self.submit()?;
            // SAFETY: the same entry as above, with the same guarantees.
            unsafe {
                self.ring
                    .submission()
                    .push(&entry)
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
        self.in_flight += 1;
        Ok(())
    }

    /// Accept on listening socket `fd` until cancelled or failed; each
    /// completion's result is a new non-blocking, close-on-exec descriptor
    /// (the caller owns it) or `-errno`.
    pub fn accept_multi(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        self.check(user_data)?;
        let e = opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data);
        self.push(e)?;
        self.accepts.insert(user_data);
        Ok(())
    }

    /// Receive on `fd` into provided buffers until cancelled, at the end of
    /// the stream (result 0), or out of buffers (`-ENOBUFS`: arm it again).
    pub fn recv_multi(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        self.check(user_data)?;
        let e = opcode::RecvMulti::new(types::Fd(fd), GROUP)
            .build()
            .user_data(user_data);
        self.push(e)
    }

    /// Send `buf` (owned until its completion, which hands it back).
    pub fn send(&mut self, fd: RawFd, buf: Vec<u8>, user_data: u64) -> io::Result<()> {
        self.check(user_data)?;
        if self.sends.contains_key(&user_data) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a send with this user data is in flight",
            ));
        }
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let e = opcode::Send::new(types::Fd(fd), buf.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data);
        // The Vec's heap block does not move when the Vec does.
        self.sends.insert(user_data, buf);
        let pushed = self.push(e);
        if pushed.is_err() {
            self.sends.remove(&user_data);
        }
        pushed
    }

    /// Report once when `fd` is readable (`read`) or writable (`write`).
    pub fn poll_once(
        &mut self,
        fd: RawFd,
        read: bool,
        write: bool,
        user_data: u64,
    ) -> io::Result<()> {
        self.check(user_data)?;
        let mut mask = 0;
        if read {
            mask |= (libc::POLLIN | libc::POLLRDHUP) as u32;
        }
        if write {
            mask |= libc::POLLOUT as u32;
        }
        let e = opcode::PollAdd::new(types::Fd(fd), mask)
            .build()
            .user_data(user_data);
        self.push(e)
    }

    /// Cancel the operation submitted with `user_data` (its last
    /// completion then comes, with `-ECANCELED` or its own result).
    pub fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        let e = opcode::AsyncCancel::new(user_data)
            .build()
            .user_data(INTERNAL);
        self.push(e)
    }

    fn check(&self, user_data: u64) -> io::Result<()> {
        if user_data == INTERNAL {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "user data u64::MAX is reserved",
            ));
        }
        Ok(())
    }

    /// Hand the queued entries to the kernel without waiting.
    pub fn submit(&mut self) -> io::Result<usize> {
        let queued = self.ring.submission().len();
        if queued == 0 && !self.features.defer_taskrun {
            return Ok(0);
        }
        self.stats.enters += 1;
        let n = self.ring.submit()?;
        self.stats.submitted += n as u64;
        Ok(n)
    }

    /// Submit, then wait up to `timeout` (zero: not at all) for a
    /// completion. A timeout or a signal is not an error.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let queued = self.ring.submission().len();
        if !self.ring.completion().is_empty() {
            return self.submit().map(drop);
        }
        self.stats.enters += 1;
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {
                self.stats.submitted += queued as u64;
                Ok(())
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {
                self.stats.submitted += queued as u64;
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Take every completion ready into `out` (cleared first), handing
    /// back the buffers lent by the previous reap.
    pub fn reap(&mut self, out: &mut Vec<Completion>) {
        out.clear();
        if let Some(bufs) = &mut self.bufs {
            if !self.lent.is_empty() {
                for bid in self.lent.drain(..) {
                    bufs.push(bid);
                }
                bufs.publish();
            }
        }
        for cqe in self.ring.completion() {
            let user_data = cqe.user_data();
            let more = cqueue::more(cqe.flags());
            let buffer = cqueue::buffer_select(cqe.flags());
            if let Some(bid) = buffer {
                self.lent.push(bid);
            }
            if !more {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            self.stats.completions += 1;
            if cqe.result() == -libc::ENOBUFS {
                self.stats.no_buffers += 1;
            }
            if user_data == INTERNAL {
                continue;
            }
            let sent = if more {
                None
            } else {
                self.sends.remove(&user_data)
            };
            let is_accept = self.accepts.contains(&user_data);
            if is_accept && !more {
                self.accepts.remove(&user_data);
            }
            let accepted = (is_accept && cqe.result() >= 0)
                // SAFETY: the result of a completed accept is a new
                // descriptor the kernel opened for this process and nothing
                // else owns; it is wrapped once, here.
                .then(|| unsafe { OwnedFd::from_raw_fd(cqe.result()) });
            out.push(Completion {
                user_data,
                result: cqe.result(),
                more,
                buffer,
                sent,
                accepted,
            });
        }
    }

    /// The bytes a completion received into a provided buffer (empty when
    /// it has none), valid until the next [`reap`](Self::reap).
    pub fn bytes(&self, c: &Completion) -> &[u8] {
        match (&self.bufs, c.buffer) {
            (Some(bufs), Some(bid)) if c.result > 0 => bufs.bytes(bid, c.result as usize),
            _ => &[],
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Cancel everything and wait (a bounded time) until the kernel let
        // go of every operation, so that no buffer is freed under it.
        if self.in_flight > 0 {
            let any = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(INTERNAL);
            let _ = self.push(any);
            let mut out = Vec::new();
            for _ in 0..100 {
                if self.wait(Duration::from_millis(10)).is_err() {
                    break;
                }
                self.reap(&mut out);
                if self.in_flight == 0 {
                    break;
                }
            }
        }
        if self.in_flight == 0 {
            let _ = self.ring.submitter().unregister_buf_ring(GROUP);
        } else {
            // The kernel may still write the buffers or read the sends:
            // leak them rather than free memory under it.
            if let Some(bufs) = self.bufs.take() {
                std::mem::forget(bufs);
            }
            std::mem::forget(std::mem::take(&mut self.sends));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    use super::*;

    fn until(
        ring: &mut Ring,
        out: &mut Vec<Completion>,
        mut done: impl FnMut(&Ring, &mut Vec<Completion>) -> bool,
    ) {
        for _ in 0..200 {
            ring.wait(Duration::from_millis(50)).unwrap();
            ring.reap(out);
            if done(ring, out) {
                return;
            }
        }
        panic!("no completion came");
    }

    #[test]
    fn probe_finds_multishot_on_this_kernel() {
        let f = probe().unwrap();
        assert!(f.multishot_recv && f.multishot_accept && f.buffer_ring);
    }

    #[test]
    fn sizes_past_their_bounds_are_refused() {
        assert!(Ring::new(3, 2, 64).is_err(), "entries not a power of two");
        assert!(Ring::new(4, 3, 64).is_err(), "buffers not a power of two");
        assert!(Ring::new(4, 2, MAX_BUFFER_SIZE + 1).is_err());
        assert!(Ring::new(4, 2, 0).is_err());
    }

    #[test]
    fn multishot_accept_recv_and_an_owned_send_round_trip() {
        let mut ring = Ring::new(8, 4, 16).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        ring.accept_multi(listener.as_raw_fd(), 1).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut out = Vec::new();
        let mut server = None;
        until(&mut ring, &mut out, |_, out| {
            for c in out.iter_mut() {
                assert!(c.user_data == 1 && c.more);
                server = server.take().or_else(|| c.accepted());
            }
            server.is_some()
        });
        let server = server.unwrap();
        ring.recv_multi(server.as_raw_fd(), 2).unwrap();
        // More than one buffer's worth: several completions, one buffer each.
        client
            .write_all(b"hello, ring; hello again, ring!")
            .unwrap();
        let mut got = Vec::new();
        until(&mut ring, &mut out, |ring, out| {
            for c in out.iter() {
                assert_eq!(c.user_data, 2);
                assert!(c.more, "the receive stays armed");
                got.extend_from_slice(ring.bytes(c));
            }
            got.len() == 31
        });
        assert_eq!(&got, b"hello, ring; hello again, ring!");
        ring.send(server.as_raw_fd(), b"answer".to_vec(), 3)
            .unwrap();
        let mut back = None;
        until(&mut ring, &mut out, |_, out| {
            for c in out.iter_mut() {
                if c.user_data == 3 {
                    assert_eq!(c.result, 6);
                    back = c.sent();
                }
            }
            back.is_some()
        });
        assert_eq!(back.unwrap(), b"answer");
        let mut answer = [0u8; 6];
        client.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"answer");
        // Cancelling the receive ends it: a last completion without `more`.
        ring.cancel(2).unwrap();
        until(&mut ring, &mut out, |_, out| {
            out.iter().any(|c| c.user_data == 2 && !c.more)
        });
        ring.cancel(1).unwrap();
        until(&mut ring, &mut out, |ring, _| ring.in_flight() == 0);
    }

    #[test]
    fn buffers_go_back_to_the_ring_so_a_small_ring_serves_much_input() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ring = Ring::new(8, 2, 8).unwrap();
        ring.recv_multi(a.as_raw_fd(), 7).unwrap();
        let mut out = Vec::new();
        let mut total = 0;
        for round in 0..50u8 {
            (&b).write_all(&[round; 8]).unwrap();
            let before = total;
            until(&mut ring, &mut out, |ring, out| {
                for c in out.iter() {
                    if c.result == -libc::ENOBUFS {
                        continue;
                    }
                    assert!(ring.bytes(c).iter().all(|&x| x == round));
                    total += ring.bytes(c).len();
                }
                total >= before + 8
            });
            // Re-arm if the receive ended (out of buffers).
            if out.iter().any(|c| c.user_data == 7 && !c.more) {
                ring.recv_multi(a.as_raw_fd(), 7).unwrap();
            }
        }
        assert_eq!(total, 400, "two buffers carried fifty rounds");
    }

    #[test]
    fn poll_once_reports_readiness_and_a_dropped_ring_lets_go() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ring = Ring::new(8, 2, 8).unwrap();
        ring.poll_once(a.as_raw_fd(), true, false, 9).unwrap();
        ring.recv_multi(b.as_raw_fd(), 10).unwrap();
        (&b).write_all(b"!").unwrap();
        let mut out = Vec::new();
        until(&mut ring, &mut out, |_, out| {
            out.iter()
                .any(|c| c.user_data == 9 && !c.more && c.result > 0)
        });
        assert!(
            ring.send(a.as_raw_fd(), vec![1], u64::MAX).is_err(),
            "reserved"
        );
        // The receive on `b` is still armed: drop cancels it and waits.
        assert_eq!(ring.in_flight(), 1);
        drop(ring);
    }
}
