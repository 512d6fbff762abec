//! A request body read by a future as it arrives, without a thread
//! ([`HttpHandler::awaits_body`](crate::HttpHandler::awaits_body)): the
//! layer moves the client's bytes, de-chunked, into a bounded pipe each time
//! it resumes the connection, and the handler's future ([`Response::later`](
//! crate::Response::later)) takes them with [`AwaitedBody::read`]. While
//! the pipe is empty the future waits for the client's input (an
//! [`Await`] with `client_read`); while it is full the layer reads nothing
//! more, and the client's bytes wait in its socket: a slow upload costs the
//! connection's state and the pipe, not a thread. The same limits hold as
//! for a body read whole or streamed: `--limit-request-body` (413), the
//! body timeout and its minimum rate, and `--timeout` while the layer asks
//! the client for more and gets none (408), a malformed chunk or a close
//! mid-body (400). The layer answers those
//! itself, whatever the future does with the error its read returns.
//!
//! The pipe is shared by the future and the connection's state behind a
//! lock that only the thread stepping the connection ever takes: one step
//! at a time, so it is never contended.

use std::io;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use mpm_core::waiting::{wait_on, Await};
use parking_lot::Mutex;

use crate::body::{earned, failure, Framing, Timing};
use crate::chunked::ChunkError;

/// The most body bytes the pipe holds for the future: what one resume of
/// the connection moves at most. An empty pipe holds no buffer (a piece
/// taken with [`AwaitedBody::chunk`] leaves with its buffer): a slow upload
/// waiting for the client costs the connection's state and nothing more.
pub(crate) const PIPE_MAX: usize = 64 * 1024;

/// What the layer and the future share.
#[derive(Debug)]
struct Pipe {
    /// Decoded body bytes the future has not taken, from `pos` on.
    bytes: Vec<u8>,
    pos: usize,
    /// The body's end is in `bytes` (or was taken).
    ended: bool,
    /// The status the layer answers with: the body broke a limit, or the
    /// client broke the body.
    failed: Option<u16>,
    /// How long the future may wait for more (the body's deadline).
    until: Instant,
}

impl Pipe {
    /// The bytes taken go, so that what is left starts the buffer.
    fn compact(&mut self) {
        if self.pos > 0 {
            let pos = self.pos;
            self.bytes.drain(..pos);
            self.pos = 0;
        }
    }

    /// Empty and not at its end: the future waits for the layer to fill
    /// it, on the client's input or at the body's deadline (then with the
    /// 408), holding no buffer meanwhile.
    fn wait_for_more<T>(&mut self) -> Poll<T> {
        self.bytes = Vec::new();
        wait_on(Await::timer(self.until).or_client_input());
        Poll::Pending
    }
}

/// A request body still arriving, for a future to read: see
/// [`Request::awaited_body`](crate::Request::awaited_body). `Send` and
/// `'static`, so a [`Response::later`](crate::Response::later) future can
/// own it.
#[derive(Debug, Clone)]
pub struct AwaitedBody {
    pipe: Arc<Mutex<Pipe>>,
    content_length: Option<u64>,
}

impl AwaitedBody {
    /// Read body bytes into `buf` as they arrive: `Ok(0)` at the body's
    /// end. Waits (holding no thread under the event and uring MPMs) while
    /// none have come. An error when the body broke a limit or was cut
    /// (the layer then answers 413, 408 or 400 itself, whatever the future
    /// returns).
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        std::future::poll_fn(|_| self.poll_read(buf)).await
    }

    /// The next piece of the body as it came (at most 64 KiB), in a
    /// buffer of its own that the caller keeps; `None` at the body's end.
    /// No copy: what [`read`](Self::read) is for a caller's buffer, this
    /// is for a caller that passes the bytes on (a proxy). Errors as
    /// `read`'s.
    pub async fn chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        std::future::poll_fn(|_| self.poll_chunk()).await
    }

    /// [`chunk`](Self::chunk), polled.
    pub fn poll_chunk(&mut self) -> Poll<io::Result<Option<Vec<u8>>>> {
        let mut p = self.pipe.lock();
        if let Some(status) = p.failed {
            return Poll::Ready(Err(failure(status)));
        }
        if p.pos < p.bytes.len() {
            let piece = match p.pos {
                0 => std::mem::take(&mut p.bytes),
                at => {
                    let rest = p.bytes[at..].to_vec();
                    p.bytes.clear();
                    rest
                }
            };
            p.pos = 0;
            return Poll::Ready(Ok(Some(piece)));
        }
        if p.ended {
            return Poll::Ready(Ok(None));
        }
        p.wait_for_more()
    }

    /// The length the client announced (`Content-Length`); `None` for a
    /// chunked body.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    fn poll_read(&mut self, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut p = self.pipe.lock();
        if let Some(status) = p.failed {
            return Poll::Ready(Err(failure(status)));
        }
        let held = p.bytes.len() - p.pos;
        if held > 0 {
            let n = held.min(buf.len());
            buf[..n].copy_from_slice(&p.bytes[p.pos..p.pos + n]);
            p.pos += n;
            if p.pos == p.bytes.len() {
                p.bytes.clear();
                p.pos = 0;
            }
            return Poll::Ready(Ok(n));
        }
        if p.ended || buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        p.wait_for_more()
    }
}

/// Where an awaited body's bytes come from.
#[derive(Debug)]
enum Source {
    /// An HTTP/1.1 connection's bytes, framed by `Content-Length` or
    /// chunked.
    Framed(Framing),
    /// An HTTP/2 stream's DATA, its end told by the stream: `total` of at
    /// most `limit` so far.
    Frames { limit: u64, total: u64 },
}

/// The layer's side of an awaited body: its framing and clocks, and the
/// pipe it fills.
#[derive(Debug)]
pub(crate) struct Upload {
    pipe: Arc<Mutex<Pipe>>,
    source: Source,
    timing: Timing,
    /// Bytes received from the client for the body (what earns time at
    /// the minimum rate).
    received: u64,
    /// Since when the layer has been asking the client for more (room in
    /// the pipe, nothing buffered): `--timeout` runs from there, not from
    /// the last read, so that time the layer spent not reading (the
    /// future busy with an upstream, the pipe full) is not the client's.
    asked: Option<Instant>,
    /// `100 Continue` is still to be sent, before the first read.
    pub(crate) send_continue: bool,
}

impl Upload {
    /// An upload framed as `framing`, of which `buffered` bytes came with
    /// the head; its handle for the handler's future.
    pub(crate) fn new(
        framing: Framing,
        timing: Timing,
        buffered: usize,
        send_continue: bool,
    ) -> (Upload, AwaitedBody) {
        let content_length = match framing {
            Framing::Length(n) => Some(n),
            Framing::Chunked(_) => None,
        };
        let ended = matches!(framing, Framing::Length(0));
        Upload::made(
            Source::Framed(framing),
            content_length,
            ended,
            timing,
            buffered,
            send_continue,
        )
    }

    /// An HTTP/2 stream's body, of at most `limit` bytes (the length the
    /// client announced, if it did, is `content_length`).
    pub(crate) fn for_frames(
        limit: u64,
        content_length: Option<u64>,
        timing: Timing,
    ) -> (Upload, AwaitedBody) {
        let source = Source::Frames { limit, total: 0 };
        Upload::made(source, content_length, false, timing, 0, false)
    }

    fn made(
        source: Source,
        content_length: Option<u64>,
        ended: bool,
        timing: Timing,
        buffered: usize,
        send_continue: bool,
    ) -> (Upload, AwaitedBody) {
        let pipe = Arc::new(Mutex::new(Pipe {
            bytes: Vec::new(),
            pos: 0,
            ended,
            failed: None,
            until: timing.started,
        }));
        let upload = Upload {
            pipe: Arc::clone(&pipe),
            source,
            timing,
            received: buffered as u64,
            asked: Some(timing.started),
            send_continue,
        };
        upload.set_until();
        (
            upload,
            AwaitedBody {
                pipe,
                content_length,
            },
        )
    }

    /// Does the pipe take more input now (room in it, the body neither
    /// ended nor failed)?
    pub(crate) fn wants_input(&self) -> bool {
        let p = self.pipe.lock();
        !p.ended && p.failed.is_none() && p.bytes.len() - p.pos < PIPE_MAX
    }

    /// Decode what `input` (the connection's buffered bytes) holds of the
    /// body into the pipe, as much as it has room for; returns the input
    /// bytes used (none past the body's end: a pipelined request stays).
    pub(crate) fn take_input(&mut self, input: &[u8]) -> usize {
        let mut p = self.pipe.lock();
        if p.ended || p.failed.is_some() {
            return 0;
        }
        p.compact();
        let room = PIPE_MAX.saturating_sub(p.bytes.len());
        let framing = match &mut self.source {
            Source::Framed(framing) => framing,
            Source::Frames { limit, total } => {
                // DATA as it came: the stream's window bounds what waits.
                let n = input.len().min(room);
                *total += n as u64;
                if *total > *limit {
                    p.failed = Some(413);
                    return n;
                }
                p.bytes.extend_from_slice(&input[..n]);
                return n;
            }
        };
        match framing {
            Framing::Length(left) => {
                let n = input
                    .len()
                    .min(room)
                    .min(usize::try_from(*left).unwrap_or(usize::MAX));
                p.bytes.extend_from_slice(&input[..n]);
                *left -= n as u64;
                p.ended = *left == 0;
                n
            }
            Framing::Chunked(decoder) => {
                let at = p.bytes.len();
                p.bytes.resize(at + room, 0);
                let decoded = decoder.decode(input, &mut p.bytes[at..]);
                let (used, written) = *decoded.as_ref().unwrap_or(&(0, 0));
                p.bytes.truncate(at + written);
                match decoded {
                    Err(ChunkError::Invalid) => p.failed = Some(400),
                    Err(ChunkError::TooLarge) => p.failed = Some(413),
                    Ok(_) => p.ended = decoder.is_done(),
                }
                used
            }
        }
    }

    /// Read the body's next bytes with `read` straight into the pipe, as
    /// many as it has room for: for a body framed by its length, with
    /// nothing buffered ahead of it (one copy fewer than through the
    /// connection's buffer, and reads as large as the pipe's room). `None`
    /// for a body that must be decoded (chunked) or comes in frames.
    pub(crate) fn read_direct(
        &mut self,
        read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> Option<io::Result<usize>> {
        let Source::Framed(Framing::Length(left)) = &mut self.source else {
            return None;
        };
        let mut p = self.pipe.lock();
        p.compact();
        let at = p.bytes.len();
        let want = PIPE_MAX
            .saturating_sub(at)
            .min(usize::try_from(*left).unwrap_or(usize::MAX));
        p.bytes.resize(at + want, 0);
        let got = read(&mut p.bytes[at..]);
        let n = got.as_ref().map_or(0, |n| *n);
        p.bytes.truncate(at + n);
        *left -= n as u64;
        p.ended = *left == 0;
        Some(got)
    }

    /// An HTTP/2 stream's body ended (END_STREAM, trailers) and every byte
    /// of it was taken.
    pub(crate) fn end_of_frames(&mut self) {
        self.pipe.lock().ended = true;
    }

    /// `n` bytes came from the client.
    pub(crate) fn received(&mut self, n: usize) {
        self.received += n as u64;
        self.asked = None;
        self.set_until();
    }

    /// The layer found nothing more from the client, with room for it:
    /// `--timeout` runs from now if it was not running already.
    pub(crate) fn waiting(&mut self, now: Instant) {
        if self.asked.is_none() {
            self.asked = Some(now);
            self.set_until();
        }
    }

    /// The body ends here with `status`.
    pub(crate) fn fail(&mut self, status: u16) {
        self.pipe.lock().failed.get_or_insert(status);
    }

    /// When the body must have come, as far as it has: the body timeout
    /// plus what the bytes received earned at the minimum rate (as a
    /// streamed body's), and no more than `--timeout` after the layer
    /// began asking for more and found none.
    pub(crate) fn deadline(&self) -> Instant {
        let t = self.timing;
        let allowance = t
            .body_timeout
            .saturating_add(earned(self.received, t.min_rate));
        let body = mpm_core::deadline(t.started, allowance);
        match self.asked {
            Some(asked) => body.min(mpm_core::deadline(asked, t.timeout)),
            None => body,
        }
    }

    fn set_until(&self) {
        let until = self.deadline();
        self.pipe.lock().until = until;
    }

    /// How the body stands: read from the wire to its end, and the status
    /// the layer answers with instead of the handler's, if any.
    pub(crate) fn outcome(&self) -> (bool, Option<u16>) {
        let p = self.pipe.lock();
        (p.ended, p.failed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::ErrorKind;
    use std::time::Duration;

    use mpm_core::waiting::{poll_once, Polled};

    use super::*;
    use crate::chunked::Decoder;

    fn timing() -> Timing {
        Timing {
            started: Instant::now(),
            body_timeout: Duration::from_secs(5),
            min_rate: 0,
            timeout: Duration::from_secs(5),
        }
    }

    /// Everything the future reads until the pipe is empty: the bytes, and
    /// whether it then saw the end (else it waits).
    fn drain(body: &mut AwaitedBody) -> (Vec<u8>, Option<io::Result<()>>) {
        let mut got = Vec::new();
        let mut buf = [0u8; 7];
        loop {
            let mut read = Box::pin(body.read(&mut buf));
            match poll_once(read.as_mut()) {
                Polled::Ready(Ok(0)) => return (got, Some(Ok(()))),
                Polled::Ready(Ok(n)) => {
                    drop(read);
                    got.extend_from_slice(&buf[..n]);
                }
                Polled::Ready(Err(e)) => return (got, Some(Err(e))),
                Polled::Wait(w) => {
                    assert!(w.client_read && w.fd.is_none(), "{w:?}");
                    return (got, None);
                }
                Polled::Again => panic!("a read recorded no wait"),
            }
        }
    }

    #[test]
    fn a_chunked_body_cut_at_every_byte_reaches_the_future_whole_and_leaves_what_follows() {
        let wire = b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET / HTTP/1.1\r\n";
        let end = wire.len() - b"GET / HTTP/1.1\r\n".len();
        for cut in 0..=wire.len() {
            let framing = Framing::Chunked(Decoder::new(1 << 20));
            let (mut up, mut body) = Upload::new(framing, timing(), 0, false);
            assert_eq!(body.content_length(), None);
            let mut used = up.take_input(&wire[..cut]);
            let (mut got, first) = drain(&mut body);
            if cut < end {
                assert!(first.is_none(), "cut at {cut}: ended early");
            }
            // The rest arrives, with what was left of the first part.
            used += up.take_input(&wire[used..]);
            let (rest, end_seen) = drain(&mut body);
            got.extend_from_slice(&rest);
            assert_eq!(got, b"hello world", "cut at {cut}");
            assert!(matches!(end_seen, Some(Ok(()))), "cut at {cut}");
            assert_eq!(used, end, "cut at {cut}: the next request was taken");
            assert_eq!(up.outcome(), (true, None));
        }
    }

    #[test]
    fn the_pipe_takes_no_more_than_it_holds_and_more_once_the_future_read() {
        let big = vec![b'x'; PIPE_MAX * 2 + 10];
        let framing = Framing::Length(big.len() as u64);
        let (mut up, mut body) = Upload::new(framing, timing(), 0, false);
        assert_eq!(body.content_length(), Some(big.len() as u64));
        let mut used = up.take_input(&big);
        assert_eq!(used, PIPE_MAX);
        assert!(!up.wants_input());
        let mut got = Vec::new();
        let mut buf = vec![0u8; PIPE_MAX];
        while got.len() < big.len() {
            let mut read = Box::pin(body.read(&mut buf));
            match poll_once(read.as_mut()) {
                Polled::Ready(Ok(n)) => {
                    assert!(n > 0);
                    drop(read);
                    got.extend_from_slice(&buf[..n]);
                }
                Polled::Wait(_) => {
                    drop(read);
                    assert!(up.wants_input());
                    used += up.take_input(&big[used..]);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, big);
        assert_eq!(up.outcome(), (true, None));
        // Past the end: the end, again.
        let mut read = Box::pin(body.read(&mut buf));
        assert!(matches!(poll_once(read.as_mut()), Polled::Ready(Ok(0))));
    }

    #[test]
    fn a_body_past_the_limit_or_malformed_fails_the_read_with_the_layers_status() {
        let framing = Framing::Chunked(Decoder::new(4));
        let (mut up, mut body) = Upload::new(framing, timing(), 0, false);
        up.take_input(b"5\r\nhello\r\n0\r\n\r\n");
        let (_, end) = drain(&mut body);
        assert_eq!(end.unwrap().unwrap_err().kind(), ErrorKind::InvalidData);
        assert_eq!(up.outcome().1, Some(413));

        let framing = Framing::Chunked(Decoder::new(1 << 20));
        let (mut up, mut body) = Upload::new(framing, timing(), 0, false);
        up.take_input(b"zz\r\n");
        let (_, end) = drain(&mut body);
        assert!(end.unwrap().is_err());
        assert_eq!(up.outcome().1, Some(400));

        let (mut up, mut body) = Upload::new(Framing::Length(10), timing(), 0, false);
        up.fail(408);
        let (_, end) = drain(&mut body);
        assert_eq!(end.unwrap().unwrap_err().kind(), ErrorKind::TimedOut);
    }

    #[test]
    fn the_futures_wait_ends_at_the_bodys_deadline_which_bytes_move_on() {
        let mut t = timing();
        t.body_timeout = Duration::from_secs(10);
        t.min_rate = 1000;
        t.timeout = Duration::from_secs(60);
        let (mut up, mut body) = Upload::new(Framing::Length(1 << 20), t, 0, false);
        let mut buf = [0u8; 16];
        let mut read = Box::pin(body.read(&mut buf));
        let Polled::Wait(w) = poll_once(read.as_mut()) else {
            panic!("not waiting")
        };
        drop(read);
        assert_eq!(w.until, t.started + Duration::from_secs(10));
        // 5,000 bytes at 1,000 a second earn five seconds more.
        up.received(5000);
        assert_eq!(up.deadline(), t.started + Duration::from_secs(15));
        // `--timeout` from when the layer found nothing more bounds it too;
        // bytes stop that clock, and it starts again at the next wait.
        t.timeout = Duration::from_secs(2);
        let (mut up, _) = Upload::new(Framing::Length(1 << 20), t, 0, false);
        assert_eq!(up.deadline(), t.started + Duration::from_secs(2));
        up.received(10);
        // (Ten bytes earn ten milliseconds.)
        assert_eq!(up.deadline(), t.started + Duration::from_millis(10_010));
        up.waiting(t.started + Duration::from_secs(5));
        up.waiting(t.started + Duration::from_secs(6));
        assert_eq!(up.deadline(), t.started + Duration::from_secs(7));
    }
}
