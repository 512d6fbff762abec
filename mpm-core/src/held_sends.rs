//! Sends held to the end of an event loop's turn, for the sockets a step
//! writes besides its client's (an upstream connection).
//!
//! A loop that sends each request to its upstream as its step makes it
//! wakes the upstream once per send, between the steps' other work: the
//! upstream's thread, woken by one, has gone back to sleep when the next
//! comes. Sent together at the end of the turn, the sends find it awake.
//! On the proxy's `fast` scenario this is the difference between the two
//! loops of `bench/proxy/floor` that `docs/design.md` ("Sends held to the
//! end of a turn") measures. A client's own answers are held by its
//! [`Stream`](crate::Stream) ([`Stream::hold_sends`](crate::Stream::hold_sends)).
//!
//! A loop (event's, uring's) [`open`]s this thread's batch for a turn's
//! steps and [`flush`]es it before it waits. A write through [`write()`]
//! is held while the batch is open and it fits, with what is held for the
//! socket, in [`HELD_MAX`]; otherwise it is sent at once, after what is
//! held for the socket, so bytes go out in order. Anywhere else (a worker thread, the
//! blocking models) no batch is open, and writes go straight out. A held
//! socket stays open until its bytes are sent (the batch keeps a
//! reference to it), so a connection dropped meanwhile never sends them to
//! a descriptor reused by another.

use std::cell::RefCell;
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most bytes held for one socket: a request's head and a short body.
/// A socket with nothing queued takes this much in one send (what it does
/// not take stays held, and the loop tries again within a millisecond); a
/// larger write goes at once, after what is held.
pub const HELD_MAX: usize = 4 * 1024;

/// A socket whose writes may be held ([`write()`]).
#[derive(Debug)]
pub struct HeldSocket {
    socket: TcpStream,
    /// Bytes written to it are held, in the batch of the thread that held
    /// them: a later write joins them or sends them first ([`write()`]).
    pending: AtomicBool,
}

impl HeldSocket {
    /// Wrap a connected, non-blocking socket.
    pub fn new(socket: TcpStream) -> Arc<HeldSocket> {
        Arc::new(HeldSocket {
            socket,
            pending: AtomicBool::new(false),
        })
    }

    /// The socket, for options and its descriptor.
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Read what the socket has into `buf`: the system call itself, not
    /// libc's cancellable wrapper that `Read for TcpStream` goes through
    /// ([`mpm_sys::socket::recv`]).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        mpm_sys::socket::recv(&self.socket, buf)
    }

    /// Are bytes written to it still held?
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

struct Held {
    socket: Arc<HeldSocket>,
    /// Its bytes: `bytes[from..to]`.
    from: usize,
    to: usize,
}

#[derive(Default)]
struct Batch {
    open: bool,
    held: Vec<Held>,
    bytes: Vec<u8>,
}

thread_local! {
    static BATCH: RefCell<Batch> = RefCell::new(Batch::default());
}

/// Hold this thread's writes through [`write()`] until [`flush`]: an event
/// loop opens its batch for a turn's steps.
pub fn open() {
    BATCH.with(|b| b.borrow_mut().open = true);
}

/// Write `buf` to `socket`: held if this thread's batch is open and `buf`
/// with what is held for the socket comes to at most [`HELD_MAX`] bytes
/// (the whole of `buf` is taken); else sent at once, after what is held
/// for the socket. `WouldBlock` if held bytes of the socket could not all
/// be sent (it is full): the caller waits for room, as for any full socket.
pub fn write(socket: &Arc<HeldSocket>, buf: &[u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let took = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        let b = &mut *b;
        if socket.pending() {
            // Behind its held bytes: with them if there is room (a request
            // head and its short body), else after them, sent now.
            let Some(i) = b.held.iter().rposition(|h| Arc::ptr_eq(&h.socket, socket)) else {
                // Held on another thread (a loop's, whose socket was full).
                return Some(Err(io::ErrorKind::WouldBlock.into()));
            };
            let last = i + 1 == b.held.len();
            if b.open && last && b.held[i].to - b.held[i].from + buf.len() <= HELD_MAX {
                b.bytes.extend_from_slice(buf);
                b.held[i].to = b.bytes.len();
                return Some(Ok(buf.len()));
            }
            if !send(&mut b.held[i], &b.bytes) {
                return Some(Err(io::ErrorKind::WouldBlock.into()));
            }
            b.held.remove(i);
            socket.pending.store(false, Ordering::Release);
            return None;
        }
        if !b.open || buf.len() > HELD_MAX {
            return None;
        }
        let from = b.bytes.len();
        b.bytes.extend_from_slice(buf);
        b.held.push(Held {
            socket: Arc::clone(socket),
            from,
            to: b.bytes.len(),
        });
        socket.pending.store(true, Ordering::Release);
        Some(Ok(buf.len()))
    });
    match took {
        Some(r) => r,
        None => mpm_sys::socket::send(&socket.socket, buf, false),
    }
}

/// Send `h`'s bytes: whether all went (a socket that fails drops them:
/// the connection's next read meets the error, as after a send of its
/// own).
fn send(h: &mut Held, bytes: &[u8]) -> bool {
    while h.from < h.to {
        match mpm_sys::socket::send(&h.socket.socket, &bytes[h.from..h.to], false) {
            Ok(0) => h.from = h.to,
            Ok(n) => h.from += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(_) => h.from = h.to,
        }
    }
    true
}

/// When a loop that holds bytes a full socket did not take should look
/// again (`now` and a millisecond; no readiness report says when such a
/// socket has room): `None` when this thread holds nothing. A loop puts
/// it among the moments its wait ends at.
pub fn retry_at(now: Instant) -> Option<Instant> {
    let left = BATCH.with(|b| !b.borrow().held.is_empty());
    left.then(|| now + RETRY)
}

/// How soon a loop tries again to send bytes a full socket did not take.
const RETRY: Duration = Duration::from_millis(1);

/// Send everything this thread holds, in the order it was written, and
/// close the batch. Returns whether some could not go (a socket full: the
/// rest stays held, and the caller flushes again soon).
pub fn flush() -> bool {
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        let b = &mut *b;
        b.open = false;
        if b.held.is_empty() {
            return false;
        }
        let bytes = &b.bytes;
        b.held.retain_mut(|h| {
            let sent = send(h, bytes);
            if sent {
                h.socket.pending.store(false, Ordering::Release);
            }
            !sent
        });
        if b.held.is_empty() {
            b.bytes.clear();
            false
        } else {
            // What stays is addressed into `bytes`: kept until it is sent.
            true
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A connected pair: the held side (non-blocking) and the peer.
    fn pair() -> (Arc<HeldSocket>, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        a.set_nonblocking(true).expect("non-blocking");
        b.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        (HeldSocket::new(a), b)
    }

    fn read_now(peer: &mut TcpStream) -> Vec<u8> {
        let mut buf = vec![0u8; 64 * 1024];
        match peer.read(&mut buf) {
            Ok(n) => buf[..n].to_vec(),
            Err(_) => Vec::new(), // nothing came within the timeout
        }
    }

    #[test]
    fn a_write_in_an_open_batch_is_held_until_the_flush() {
        let (s, mut peer) = pair();
        open();
        assert_eq!(write(&s, b"GET / HTTP/1.1\r\n\r\n").expect("held"), 18);
        assert!(s.pending());
        assert!(
            read_now(&mut peer).is_empty(),
            "nothing is sent before the flush"
        );
        assert!(!flush(), "all of it went");
        assert!(!s.pending());
        assert_eq!(read_now(&mut peer), b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn with_no_batch_open_a_write_goes_at_once() {
        let (s, mut peer) = pair();
        assert_eq!(write(&s, b"now").expect("sent"), 3);
        assert!(!s.pending());
        assert_eq!(read_now(&mut peer), b"now");
    }

    #[test]
    fn a_short_body_joins_its_head_and_a_long_one_follows_it_in_order() {
        let (s, mut peer) = pair();
        open();
        write(&s, b"head;").expect("held");
        write(&s, b"body;").expect("joins the head");
        assert!(read_now(&mut peer).is_empty());
        let long = vec![b'x'; HELD_MAX];
        // Too long to join: what is held goes first, then it.
        assert_eq!(write(&s, &long).expect("sent"), HELD_MAX);
        assert!(!s.pending());
        let mut got = Vec::new();
        while got.len() < 10 + HELD_MAX {
            let more = read_now(&mut peer);
            assert!(!more.is_empty(), "the bytes arrive");
            got.extend(more);
        }
        assert_eq!(&got[..10], b"head;body;");
        assert!(got[10..].iter().all(|&b| b == b'x'));
        assert!(!flush());
    }

    #[test]
    fn a_socket_dropped_with_bytes_held_still_sends_them_and_then_closes() {
        let (s, mut peer) = pair();
        open();
        write(&s, b"last words").expect("held");
        drop(s);
        assert!(!flush());
        assert_eq!(read_now(&mut peer), b"last words");
        assert!(read_now(&mut peer).is_empty(), "then the end of the stream");
    }

    #[test]
    fn writes_to_several_sockets_go_out_each_to_its_own() {
        let (a, mut pa) = pair();
        let (b, mut pb) = pair();
        open();
        write(&a, b"to a").expect("held");
        write(&b, b"to b").expect("held");
        assert!(!flush());
        assert_eq!(read_now(&mut pa), b"to a");
        assert_eq!(read_now(&mut pb), b"to b");
    }

    #[test]
    fn bytes_a_full_socket_does_not_take_stay_held_and_keep_their_order() {
        let (s, mut peer) = pair();
        // Fill the socket: the peer reads nothing yet.
        let chunk = vec![b'f'; 64 * 1024];
        let mut filled = 0usize;
        loop {
            match write(&s, &chunk) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write failed: {e}"),
            }
        }
        open();
        write(&s, b"after").expect("held");
        assert!(flush(), "the socket is full: the bytes stay");
        assert!(s.pending());
        let now = Instant::now();
        assert_eq!(
            retry_at(now),
            Some(now + RETRY),
            "the loop looks again soon"
        );
        // A write behind them waits, as for any full socket.
        open();
        let behind = write(&s, &vec![b'z'; HELD_MAX + 1]).expect_err("waits");
        assert_eq!(behind.kind(), io::ErrorKind::WouldBlock);
        // The peer reads; the next flushes send the rest.
        let mut got = 0usize;
        let mut tail = Vec::new();
        for _ in 0..10_000 {
            let more = read_now(&mut peer);
            got += more.len();
            tail.extend_from_slice(&more[more.len().saturating_sub(8)..]);
            if !flush() && got >= filled + 5 {
                break;
            }
        }
        assert!(!s.pending());
        assert_eq!(got, filled + 5);
        assert_eq!(retry_at(Instant::now()), None, "nothing left to retry");
        assert!(tail.ends_with(b"after"));
    }
}
