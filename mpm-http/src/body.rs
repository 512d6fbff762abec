//! A streamed request body: read from the connection while the handler runs
//! (on whatever thread runs it: a prefork child, a worker thread, or an
//! event MPM's worker, never its loop), de-chunked, and held to the body
//! limit and the body timeout as a buffered body is.

use std::cell::RefCell;
use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};

use mpm_core::Stream;

use crate::chunked::{ChunkError, Decoder};
use crate::settings::ServiceSettings;

/// What a [`BodyReader`](crate::BodyReader) reads a streamed body from.
pub(crate) trait BodySource {
    fn read_body(&self, buf: &mut [u8]) -> io::Result<usize>;
}

impl BodySource for RefCell<BodyStream<'_>> {
    fn read_body(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self.try_borrow_mut() {
            Ok(mut body) => body.read(buf),
            // Only reachable by reading from inside a read: not possible
            // through BodyReader, which holds no lock between calls.
            Err(_) => Err(io::Error::new(ErrorKind::WouldBlock, "body is being read")),
        }
    }
}

/// How the body is delimited, and how much of it is left.
#[derive(Debug)]
pub(crate) enum Framing {
    Length(u64),
    Chunked(Decoder),
}

/// The clocks a streamed body is read against (the same as a buffered
/// body's: see `reading::deadline`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// When the body's time began (the head's end).
    pub(crate) started: Instant,
    pub(crate) body_timeout: Duration,
    pub(crate) min_rate: u64,
    /// The longest one read may wait (`--timeout`).
    pub(crate) timeout: Duration,
}

impl Timing {
    /// The server's body clocks, for a body whose time began at `started`.
    pub(crate) fn of(settings: &ServiceSettings, started: Instant) -> Timing {
        Timing {
            started,
            body_timeout: settings.request_body_timeout,
            min_rate: settings.request_body_min_rate,
            timeout: settings.timeout,
        }
    }
}

/// Bytes read from the socket per read of a chunked body (its framing must
/// be parsed, so it cannot be read straight into the handler's buffer).
const CHUNKED_READ: usize = 16 * 1024;

/// A request body being read from its connection.
pub(crate) struct BodyStream<'s> {
    stream: &'s mut Stream,
    /// Bytes after the head that were buffered before the handler ran.
    pre: &'s [u8],
    pre_used: usize,
    /// Bytes of a chunked body read from the socket, not yet decoded.
    extra: Vec<u8>,
    extra_pos: usize,
    framing: Framing,
    /// Bytes received from the client so far (what earns time at the
    /// minimum rate).
    received: u64,
    timing: Timing,
    /// Send `100 Continue` before the first read from the socket.
    send_continue: bool,
    failed: Option<u16>,
    done: bool,
}

/// How a streamed body ended, for the connection to carry on from.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Of the bytes buffered after the head, how many the body took.
    pub(crate) pre_used: usize,
    /// Bytes read past the body's end (a pipelined request).
    pub(crate) leftover: Vec<u8>,
    /// Was the body read to its end?
    pub(crate) done: bool,
    /// The status the layer must answer instead of the handler's.
    pub(crate) failed: Option<u16>,
}

impl<'s> BodyStream<'s> {
    pub(crate) fn new(
        stream: &'s mut Stream,
        pre: &'s [u8],
        framing: Framing,
        timing: Timing,
        send_continue: bool,
    ) -> BodyStream<'s> {
        BodyStream {
            stream,
            pre,
            pre_used: 0,
            extra: Vec::new(),
            extra_pos: 0,
            received: pre.len() as u64,
            framing,
            timing,
            send_continue,
            failed: None,
            done: false,
        }
    }

    fn fail(&mut self, status: u16) -> io::Error {
        self.failed.get_or_insert(status);
        failure(status)
    }

    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(status) = self.failed {
            return Err(failure(status));
        }
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        match &mut self.framing {
            Framing::Length(left) => {
                if *left == 0 {
                    self.done = true;
                    return Ok(0);
                }
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = if self.pre_used < self.pre.len() {
                    let n = want.min(self.pre.len() - self.pre_used);
                    buf[..n].copy_from_slice(&self.pre[self.pre_used..self.pre_used + n]);
                    self.pre_used += n;
                    n
                } else {
                    // Straight into the handler's buffer: never past the
                    // body's end, so a pipelined request stays unread.
                    self.read_socket(&mut buf[..want])?
                };
                if let Framing::Length(left) = &mut self.framing {
                    *left -= n as u64;
                    self.done = *left == 0;
                }
                Ok(n)
            }
            Framing::Chunked(_) => loop {
                let from_pre = self.pre_used < self.pre.len();
                if !from_pre && self.extra_pos >= self.extra.len() {
                    let mut chunk = std::mem::take(&mut self.extra);
                    chunk.resize(CHUNKED_READ, 0);
                    let n = self.read_socket(&mut chunk);
                    chunk.truncate(*n.as_ref().unwrap_or(&0));
                    self.extra = chunk;
                    self.extra_pos = 0;
                    n?;
                    continue;
                }
                let input = if from_pre {
                    &self.pre[self.pre_used..]
                } else {
                    &self.extra[self.extra_pos..]
                };
                let Framing::Chunked(decoder) = &mut self.framing else {
                    unreachable!("the framing does not change");
                };
                let (used, written) = match decoder.decode(input, buf) {
                    Ok(r) => r,
                    Err(ChunkError::Invalid) => return Err(self.fail(400)),
                    Err(ChunkError::TooLarge) => return Err(self.fail(413)),
                };
                if from_pre {
                    self.pre_used += used;
                } else {
                    self.extra_pos += used;
                }
                // why: the last chunk often comes in the same read as the
                // data before it, and one decode then both writes bytes and
                // reaches the end. The end must be noted now: the next read
                // would otherwise find no buffered input and wait on the
                // socket for bytes the client will never send (a 408 after
                // the body timeout, or a 400 when it gives up and closes).
                self.done = decoder.is_done();
                if written > 0 || self.done {
                    return Ok(written);
                }
            },
        }
    }

    /// One read from the socket, within what the body's deadline and
    /// `--timeout` allow; 0 bytes (the client closed mid-body) is a failure.
    fn read_socket(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.send_continue {
            self.send_continue = false;
            // Whole, or not at all: half an interim response would glue
            // itself to the final one.
            let timeout = self.timing.timeout;
            if self
                .stream
                .write_all_within(b"HTTP/1.1 100 Continue\r\n\r\n", timeout)
                .is_err()
            {
                return Err(self.fail(408));
            }
        }
        loop {
            let t = self.timing;
            let allowance = t
                .body_timeout
                .saturating_add(earned(self.received, t.min_rate));
            let deadline = mpm_core::deadline(t.started, allowance);
            let now = mpm_core::turn_clock::now();
            if now >= deadline {
                return Err(self.fail(408));
            }
            let within = (deadline - now).min(t.timeout);
            match self.stream.read_within(buf, within) {
                Ok(0) => return Err(self.fail(400)),
                Ok(n) => {
                    self.received += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::TimedOut => return Err(self.fail(408)),
                Err(_) => return Err(self.fail(400)),
            }
        }
    }

    /// The handler returned: finish the body from what is already buffered
    /// if that holds its end (so the connection can be kept), without
    /// waiting on the socket; then say how it ended.
    pub(crate) fn finish(mut self) -> Outcome {
        if !self.done && self.failed.is_none() {
            match &mut self.framing {
                Framing::Length(left) => {
                    let buffered = (self.pre.len() - self.pre_used) as u64;
                    if *left <= buffered {
                        self.pre_used += *left as usize;
                        *left = 0;
                        self.done = true;
                    }
                }
                Framing::Chunked(decoder) => {
                    let mut scratch = [0u8; 4096];
                    for from_pre in [true, false] {
                        loop {
                            let input = if from_pre {
                                &self.pre[self.pre_used..]
                            } else {
                                &self.extra[self.extra_pos..]
                            };
                            if input.is_empty() || decoder.is_done() {
                                break;
                            }
                            let Ok((used, _)) = decoder.decode(input, &mut scratch) else {
                                break; // the connection closes; nothing to answer
                            };
                            if from_pre {
                                self.pre_used += used;
                            } else {
                                self.extra_pos += used;
                            }
                        }
                    }
                    self.done = decoder.is_done();
                }
            }
        }
        let leftover = self.extra.split_off(self.extra_pos.min(self.extra.len()));
        Outcome {
            pre_used: self.pre_used,
            leftover,
            done: self.done,
            failed: self.failed,
        }
    }
}

/// The time `received` bytes earn at `rate` bytes a second (none at 0).
pub(crate) fn earned(received: u64, rate: u64) -> Duration {
    match (received.checked_div(rate), received.checked_rem(rate)) {
        (Some(secs), Some(rest)) => {
            Duration::from_secs(secs) + Duration::from_millis(rest.saturating_mul(1000) / rate)
        }
        _ => Duration::ZERO,
    }
}

/// What a read of a failed body returns, again and again.
pub(crate) fn failure(status: u16) -> io::Error {
    match status {
        413 => io::Error::new(
            ErrorKind::InvalidData,
            "request body exceeds --limit-request-body (answered 413)",
        ),
        408 => io::Error::new(
            ErrorKind::TimedOut,
            "request body took longer than --request-body-timeout allows (answered 408)",
        ),
        _ => io::Error::new(
            ErrorKind::InvalidData,
            "request body is malformed or ended early (answered 400)",
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;

    /// What a handler read of a streamed chunked body, and how it ended.
    struct Read {
        body: Vec<u8>,
        error: Option<io::Error>,
        outcome: Outcome,
    }

    /// Stream a chunked body to a handler reading `buf_len` bytes at a
    /// time until the end (`Ok(0)`) or an error: `pre` came with the head,
    /// `wire` is on the socket. With `close`, the client shuts its side
    /// after `wire`, so that a read past what it sent fails at once (a
    /// 400) rather than after the body timeout.
    fn read_through(pre: &[u8], wire: &[u8], buf_len: usize, close: bool) -> Read {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, peer) = listener.accept().unwrap();
        let mut stream = Stream::new(sock, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
        client.write_all(wire).unwrap();
        if close {
            client.shutdown(Shutdown::Write).unwrap();
        }
        let timing = Timing {
            started: Instant::now(),
            body_timeout: Duration::from_secs(5),
            min_rate: 0,
            timeout: Duration::from_secs(5),
        };
        let framing = Framing::Chunked(Decoder::new(1 << 20));
        let mut source = BodyStream::new(&mut stream, pre, framing, timing, false);
        let (mut body, mut error) = (Vec::new(), None);
        let mut buf = vec![0u8; buf_len];
        loop {
            match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => body.extend_from_slice(&buf[..n]),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let outcome = source.finish();
        drop(client);
        Read {
            body,
            error,
            outcome,
        }
    }

    const BODY: &[u8] = b"5\r\nhello\r\n0\r\n\r\n";

    #[track_caller]
    fn ends_whole(r: &Read, body: &[u8], what: &str) {
        assert!(r.error.is_none(), "{what}: {:?}", r.error);
        assert_eq!(r.body, body, "{what}");
        assert!(r.outcome.done, "{what}");
        assert_eq!(r.outcome.failed, None, "{what}");
    }

    #[test]
    fn a_last_chunk_read_with_its_data_ends_the_body() {
        // Read from the socket in one read, as the proxy's pump reads it.
        for buf_len in [1, 3, 5, 6, 4096] {
            let r = read_through(b"", BODY, buf_len, true);
            ends_whole(&r, b"hello", &format!("from the socket, by {buf_len}"));
            assert!(r.outcome.leftover.is_empty());
            // Buffered with the head.
            let r = read_through(BODY, b"", buf_len, true);
            ends_whole(&r, b"hello", &format!("with the head, by {buf_len}"));
            assert_eq!(r.outcome.pre_used, BODY.len());
        }
        let two = b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n";
        ends_whole(&read_through(b"", two, 4096, true), b"Wikipedia", "two");
    }

    #[test]
    fn the_body_ends_wherever_the_last_chunk_is_cut_between_two_reads() {
        for body in [BODY, b"5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"] {
            for cut in 0..=body.len() {
                let (pre, wire) = body.split_at(cut);
                let r = read_through(pre, wire, 4096, true);
                ends_whole(&r, b"hello", &format!("cut at {cut}"));
                assert_eq!(r.outcome.pre_used, cut);
                assert!(r.outcome.leftover.is_empty(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn trailers_after_the_last_chunk_are_read_to_their_end() {
        let body = b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n";
        ends_whole(&read_through(b"", body, 4096, true), b"hello", "socket");
        ends_whole(&read_through(body, b"", 4096, true), b"hello", "head");
    }

    #[test]
    fn a_pipelined_request_after_the_body_is_left_for_the_connection() {
        let next = b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n";
        let both = [BODY, &next[..]].concat();
        // Read from the socket with the body: left over, for the next request.
        let r = read_through(b"", &both, 4096, false);
        ends_whole(&r, b"hello", "from the socket");
        assert_eq!(r.outcome.leftover, next);
        // Buffered with the head: the body takes only its own bytes.
        let r = read_through(&both, b"", 4096, false);
        ends_whole(&r, b"hello", "with the head");
        assert_eq!(r.outcome.pre_used, BODY.len());
        assert!(r.outcome.leftover.is_empty());
    }

    #[test]
    fn a_body_cut_short_still_fails() {
        let r = read_through(b"", b"5\r\nhello\r\n", 4096, true);
        assert_eq!(r.outcome.failed, Some(400));
        assert!(r.error.is_some());
        assert!(!r.outcome.done);
    }
}
