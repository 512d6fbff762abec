//! The I/O object the `h2` connection owns: two memory buffers, never a
//! socket. The step moves bytes between them and the [`Stream`]
//! (`mpm_core::Stream`) itself, so that the connection does no I/O of its
//! own, needs no runtime, and moves between the loop and the workers with
//! the rest of the connection's state.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes of frames held for the socket before `h2` is told to wait
/// (its writes return `Pending`): a connection whose client reads slowly
/// holds this much, not a whole response.
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;

/// Most bytes read from the socket and not yet taken by `h2`: past it the
/// step reads no more, and the client's sending is held back by TCP (a
/// flood of SETTINGS or PING frames is read no faster than `h2` answers it).
pub(crate) const INPUT_CAP: usize = 64 * 1024;

/// Both directions' bytes. Behind one mutex, taken by the one thread that
/// runs the connection's step (never contended: a connection is in one
/// step at a time); it exists because `h2` owns one handle and the step
/// another.
#[derive(Debug, Default)]
struct Buffers {
    /// Bytes from the client, `input[taken..]` not yet read by `h2`.
    input: Vec<u8>,
    taken: usize,
    /// The client closed its side: reads return the end once `input` is empty.
    ended: bool,
    /// Frames for the client, `output[sent..]` not yet written to the socket.
    output: Vec<u8>,
    sent: usize,
    /// A write of `h2`'s found the output full (and returned `Pending`,
    /// which wakes nothing): once the socket took the bytes, poll again.
    blocked: bool,
}

/// One handle on the buffers: `h2` gets one (as its I/O object), the step
/// keeps the other.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pipe(Arc<Mutex<Buffers>>);

impl Pipe {
    /// Bytes the client sent, for `h2` to read.
    pub(crate) fn push_input(&self, bytes: &[u8]) {
        let mut b = self.0.lock();
        if b.taken == b.input.len() {
            b.input.clear();
            b.taken = 0;
        }
        b.input.extend_from_slice(bytes);
    }

    /// The client closed its side.
    pub(crate) fn end_input(&self) {
        self.0.lock().ended = true;
    }

    /// Did the client close its side?
    pub(crate) fn input_ended(&self) -> bool {
        self.0.lock().ended
    }

    /// Room for more input under [`INPUT_CAP`].
    pub(crate) fn input_room(&self) -> usize {
        let b = self.0.lock();
        INPUT_CAP.saturating_sub(b.input.len() - b.taken)
    }

    /// Bytes read from the socket that `h2` has not taken yet.
    pub(crate) fn has_input(&self) -> bool {
        let b = self.0.lock();
        b.taken < b.input.len()
    }

    /// Are frames waiting for the socket?
    pub(crate) fn has_output(&self) -> bool {
        let b = self.0.lock();
        b.sent < b.output.len()
    }

    /// Write what waits to `write` (the socket) until it is all sent or
    /// `write` fails (`WouldBlock` included, which the caller turns into a
    /// wait for room).
    pub(crate) fn write_to(
        &self,
        mut write: impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<()> {
        let mut b = self.0.lock();
        while b.sent < b.output.len() {
            match write(&b.output[b.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => b.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        b.output.clear();
        b.sent = 0;
        Ok(())
    }

    /// Did a write of `h2`'s find the output full since the last call?
    pub(crate) fn take_blocked(&self) -> bool {
        std::mem::take(&mut self.0.lock().blocked)
    }

    /// With nothing in either direction, give both buffers' memory back:
    /// what an idle connection holds between frames is the `h2` state only.
    pub(crate) fn release(&self) -> bool {
        let mut b = self.0.lock();
        if b.taken < b.input.len() || b.sent < b.output.len() {
            return false;
        }
        b.input = Vec::new();
        b.taken = 0;
        b.output = Vec::new();
        b.sent = 0;
        true
    }

    /// Bytes both buffers hold allocated (for the tests of `release`).
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        let b = self.0.lock();
        b.input.capacity() + b.output.capacity()
    }
}

impl AsyncRead for Pipe {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut b = self.0.lock();
        let have = b.input.len() - b.taken;
        if have == 0 {
            // Nothing yet: the step polls again after its next read, so no
            // waker needs keeping. The end is an empty read.
            return if b.ended {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            };
        }
        let n = have.min(buf.remaining());
        let from = b.taken;
        buf.put_slice(&b.input[from..from + n]);
        b.taken += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut b = self.0.lock();
        let held = b.output.len() - b.sent;
        if held >= OUTPUT_CAP {
            // Backpressure: the step writes to the socket, then polls again.
            b.blocked = true;
            return Poll::Pending;
        }
        if b.sent == b.output.len() {
            b.output.clear();
            b.sent = 0;
        }
        let n = buf.len().min(OUTPUT_CAP - held);
        b.output.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The step writes the buffer to the socket after every poll.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::{Pipe, OUTPUT_CAP};

    #[test]
    fn input_is_read_once_and_an_empty_pipe_is_pending_until_it_ends() {
        let mut pipe = Pipe::default();
        let mut cx = Context::from_waker(Waker::noop());
        let mut space = [0u8; 8];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe)
            .poll_read(&mut cx, &mut buf)
            .is_pending());
        pipe.push_input(b"abc");
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert_eq!(buf.filled(), b"abc");
        let mut space = [0u8; 8];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe)
            .poll_read(&mut cx, &mut buf)
            .is_pending());
        pipe.end_input();
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert!(buf.filled().is_empty(), "the end is an empty read");
    }

    #[test]
    fn writes_past_the_cap_wait_until_the_socket_took_the_bytes() {
        let mut pipe = Pipe::default();
        let mut cx = Context::from_waker(Waker::noop());
        let big = vec![7u8; OUTPUT_CAP + 10];
        let Poll::Ready(Ok(n)) = Pin::new(&mut pipe).poll_write(&mut cx, &big) else {
            panic!("the first write is taken");
        };
        assert_eq!(n, OUTPUT_CAP);
        assert!(Pin::new(&mut pipe).poll_write(&mut cx, b"x").is_pending());
        assert!(pipe.take_blocked(), "the step is told to poll again");
        let mut socket = Vec::new();
        pipe.write_to(|b| {
            socket.extend_from_slice(b);
            Ok(b.len())
        })
        .expect("written");
        assert_eq!(socket.len(), OUTPUT_CAP);
        assert!(Pin::new(&mut pipe).poll_write(&mut cx, b"x").is_ready());
    }

    #[test]
    fn an_empty_pipe_gives_its_memory_back() {
        let pipe = Pipe::default();
        pipe.push_input(&[1u8; 1000]);
        assert!(!pipe.release(), "unread input is kept");
        let mut h2_side = pipe.clone();
        let mut cx = Context::from_waker(Waker::noop());
        let mut space = [0u8; 2000];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut h2_side)
            .poll_read(&mut cx, &mut buf)
            .is_ready());
        assert!(pipe.allocated() >= 1000);
        assert!(pipe.release());
        assert_eq!(pipe.allocated(), 0);
    }
}
