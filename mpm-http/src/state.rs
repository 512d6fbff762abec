//! Per-connection HTTP state: what a connection holds between the steps
//! that `connection.rs` runs, that `reading.rs` fills and `writing.rs`
//! empties. It imports neither of them.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use mpm_core::Wait;

use crate::access_log::Record;
use crate::awaited_body::Upload;
use crate::buffer_pool::BufferPool;
use crate::internal_redirect::Redirected;
use crate::request::Version;
use crate::response::Part;
use crate::waiting::{LaterAnswer, PollRead, Tunnel};

/// What to do once the response in progress is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    KeepAlive,
    Close,
    Linger,
}

/// A body still to be sent after the head.
pub(crate) enum Pending {
    File {
        file: Arc<std::fs::File>,
        offset: u64,
        end: u64,
    },
    Stream {
        reader: Box<dyn Read + Send>,
        chunked: bool,
    },
    /// Boxed: the connection's state stays small for the common bodies.
    Polled(Box<PolledBody>),
}

/// A [`Body::Polled`](crate::Body::Polled) being sent.
pub(crate) struct PolledBody {
    pub(crate) source: Box<dyn PollRead>,
    pub(crate) chunked: bool,
    /// Bytes still to send when the length was announced: a source that
    /// ends before cuts the connection, and it is never asked for more.
    pub(crate) left: Option<u64>,
    /// Body bytes sent so far, for the error-log line of a source that fails.
    pub(crate) sent: u64,
    /// Its first bytes were looked for behind the head, to go out with it.
    pub(crate) gathered: bool,
}

/// What a connection waits on besides its client, between steps: made
/// when a request needs it, so that other connections carry one pointer.
// Always in a box of its own (`HttpConn::waiting`, the reader's spare):
// boxing the largest variant too would be a second allocation for nearly
// every waiting request, whose variant it is.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Waiting {
    /// A [`Response::later`](crate::Response::later) still to come.
    Answer(LaterState),
    /// Bytes pumped both ways after a `101`.
    Tunnel(TunnelState),
    /// Nothing: a box whose answer was taken out, kept by the
    /// [`Reader`](crate::reading::Reader) for the next one (a proxied
    /// request would allocate and free one otherwise). Never a
    /// connection's.
    Vacant,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Waiting::Answer(_) => "Answer",
            Waiting::Tunnel(_) => "Tunnel",
            Waiting::Vacant => "Vacant",
        })
    }
}

/// A request whose answer is a future: what its response needs once the
/// future is ready, captured while the request's bytes were there.
pub(crate) struct LaterState {
    pub(crate) answer: LaterAnswer,
    /// Its access-log line, started (status to come).
    pub(crate) record: Record,
    /// Method and target, for the error-log line of a panic.
    pub(crate) request: RequestName,
    pub(crate) is_head: bool,
    /// Keep-alive as the request asked (and the server allowed).
    pub(crate) keep: bool,
    pub(crate) version: Version,
    /// A streamed request body was not read to its end: close after.
    pub(crate) unfinished: bool,
    /// A body the future reads as it arrives (`awaited_body.rs`): the
    /// connection fills its pipe before each poll.
    pub(crate) upload: Option<Box<Upload>>,
    /// The internal redirect being followed, if the answer asked for one
    /// (`internal_redirect.rs`).
    pub(crate) redirect: Option<Box<Redirected>>,
}

/// A request's method and target for an error-log line, kept inline: a
/// request whose answer is still to come carries it (in the box of its
/// [`Waiting`]) without an allocation of its own. Past
/// [`RequestName::KEPT`] bytes the target is cut, and the line says so.
pub(crate) struct RequestName {
    bytes: [u8; RequestName::KEPT],
    len: u8,
    cut: bool,
}

impl RequestName {
    /// The most bytes kept: a method and a target of the usual length.
    pub(crate) const KEPT: usize = 160;

    pub(crate) fn new(method: &str, target: &str) -> RequestName {
        let mut name = RequestName {
            bytes: [0; RequestName::KEPT],
            len: 0,
            cut: false,
        };
        for part in [method, " ", target] {
            let room = RequestName::KEPT - usize::from(name.len);
            let mut take = part.len().min(room);
            while !part.is_char_boundary(take) {
                take -= 1;
            }
            let at = usize::from(name.len);
            name.bytes[at..at + take].copy_from_slice(&part.as_bytes()[..take]);
            // At most KEPT (160): fits a u8.
            name.len = u8::try_from(at + take).unwrap_or(u8::MAX);
            name.cut |= take < part.len();
        }
        name
    }
}

impl std::fmt::Display for RequestName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.bytes.get(..usize::from(self.len)).unwrap_or_default();
        f.write_str(std::str::from_utf8(kept).unwrap_or_default())?;
        if self.cut {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// An upgraded connection's tunnel: the upstream, and the buffer of bytes
/// going to the client. Bytes going to the upstream wait in the
/// connection's read buffer (where those the client sent early already are).
pub(crate) struct TunnelState {
    pub(crate) tunnel: Box<dyn Tunnel>,
    pub(crate) down: Vec<u8>,
    pub(crate) down_pos: usize,
    /// The client's end of the stream was read.
    pub(crate) client_ended: bool,
    /// The upstream's end of the stream was read.
    pub(crate) upstream_ended: bool,
    /// The upstream was told the client is done (writing shut down).
    pub(crate) upstream_shut: bool,
    /// The client was told the upstream is done.
    pub(crate) client_shut: bool,
    /// When a byte last moved either way: the idle timeout runs from here.
    pub(crate) last_moved: Instant,
}

/// A response gathered into `out` behind others, whose access-log line is
/// written once its bytes are sent.
pub(crate) struct Gathered {
    pub(crate) record: Record,
    /// Where it lies in `out`.
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// What only some requests need (pipelined answers gathered behind
/// others, a chunked body, a composite body): made when one first does,
/// and dropped when the connection parks idle, so that an idle connection
/// holds one pointer for all of it (104 bytes of every idle connection
/// otherwise, of the few hundred one costs).
#[derive(Default)]
pub(crate) struct Occasional {
    /// Earlier responses in `out`, waiting for their bytes to go out.
    pub(crate) waiting: VecDeque<Gathered>,
    /// Access-log records to reuse, so that gathering allocates nothing.
    pub(crate) spare: Vec<Record>,
    /// The decoded body of a chunked request.
    pub(crate) chunk_body: Vec<u8>,
    /// What follows the pending body of a [`Body::Parts`](crate::Body::Parts).
    pub(crate) parts: VecDeque<Part>,
    /// The connection speaks HTTP/2: all it holds is here.
    pub(crate) h2: Option<Box<crate::h2::H2Conn>>,
}

/// Per-connection HTTP state.
pub struct HttpConn {
    pub(crate) buf: Vec<u8>,
    /// Start of the bytes not yet consumed by a request.
    pub(crate) start: usize,
    /// End of the bytes received.
    pub(crate) filled: usize,
    /// Responses queued to be sent: several, when pipelined requests are
    /// answered together.
    pub(crate) out: Vec<u8>,
    pub(crate) out_pos: usize,
    /// Where in `out` the response of `log` begins.
    pub(crate) resp_start: usize,
    /// The event loop's prefetch found the buffered request answerable
    /// without blocking, and the loop runs it now: no need to ask again.
    pub(crate) approved: bool,
    /// A step on the loop stopped before something that may block (a
    /// request, or a body not in the page cache): the next prefetch sends
    /// the connection to a worker without asking again, so that two answers
    /// that disagree cannot keep it yielding on the loop.
    pub(crate) for_a_worker: bool,
    pub(crate) pending: Option<Pending>,
    /// An answer still to come, or a tunnel: while there is one, no
    /// further request is read. Here rather than in `occasional`, which an
    /// idle connection drops: a keep-alive connection of proxied requests
    /// would make that box again for every request.
    pub(crate) waits_on: Option<Box<Waiting>>,
    /// Gathered responses, a chunked body's bytes and a composite body's
    /// parts, while a request needs them.
    pub(crate) occasional: Option<Box<Occasional>>,
    pub(crate) after: After,
    pub(crate) served: u64,
    pub(crate) started: Started,
    /// When the request in progress must be complete (header or body
    /// timeout); `None` between requests.
    pub(crate) deadline: Option<Instant>,
    pub(crate) continue_sent: bool,
    /// The queued bytes are an interim response: once written, read on.
    pub(crate) interim: bool,
    pub(crate) pool: Arc<BufferPool>,
    /// The access-log line of the response in progress.
    pub(crate) log: Record,
}

impl Drop for HttpConn {
    fn drop(&mut self) {
        self.pool.put_read(std::mem::take(&mut self.buf));
        self.pool.put_write(std::mem::take(&mut self.out));
    }
}

impl std::fmt::Debug for HttpConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConn")
            .field("buffered", &(self.filled - self.start))
            .field("served", &self.served)
            .finish()
    }
}

impl HttpConn {
    /// Is output queued that has not been sent (bytes, or a body)?
    pub(crate) fn has_output(&self) -> bool {
        self.out_pos < self.out.len() || self.pending.is_some() || self.has_parts()
    }

    /// Are parts of a [`Body::Parts`](crate::Body::Parts) still to be queued?
    pub(crate) fn has_parts(&self) -> bool {
        self.occasional
            .as_ref()
            .is_some_and(|o| !o.parts.is_empty())
    }

    /// Drop the parts still to be queued.
    pub(crate) fn clear_parts(&mut self) {
        if let Some(o) = &mut self.occasional {
            o.parts.clear();
        }
    }

    /// Does the connection speak HTTP/2?
    pub(crate) fn is_h2(&self) -> bool {
        self.occasional.as_ref().is_some_and(|o| o.h2.is_some())
    }

    /// Its HTTP/2 state, taken out for a step (put back with [`Self::set_h2`]).
    pub(crate) fn take_h2(&mut self) -> Option<Box<crate::h2::H2Conn>> {
        self.occasional.as_mut()?.h2.take()
    }

    /// Speak HTTP/2 from now on, with this state.
    pub(crate) fn set_h2(&mut self, h2: Box<crate::h2::H2Conn>) {
        self.occasional.get_or_insert_with(Box::default).h2 = Some(h2);
    }

    /// Does the connection wait on an answer still to come, or a tunnel?
    pub(crate) fn is_waiting(&self) -> bool {
        self.waits_on.is_some()
    }

    /// What it waits on, to go on with.
    pub(crate) fn waiting_mut(&mut self) -> Option<&mut Waiting> {
        self.waits_on.as_deref_mut()
    }

    /// What it waits on, taken out.
    pub(crate) fn take_waiting(&mut self) -> Option<Box<Waiting>> {
        self.waits_on.take()
    }

    /// Wait on this from now on.
    pub(crate) fn set_waiting(&mut self, waiting: Box<Waiting>) {
        self.waits_on = Some(waiting);
    }

    pub(crate) fn wait(&self) -> Wait {
        if self.start < self.filled || self.served == 0 {
            Wait::Request
        } else {
            Wait::KeepAlive
        }
    }

    /// With nothing unread and no bytes queued, give the read and write
    /// buffers back to the pool (taken again at the next read or
    /// response): what an idle connection, and one whose answer is still
    /// to come, need not hold. Returns whether they went.
    pub(crate) fn release_buffers(&mut self) -> bool {
        if self.start != self.filled || self.out_pos < self.out.len() {
            return false;
        }
        self.start = 0;
        self.filled = 0;
        self.out.clear();
        self.out_pos = 0;
        self.resp_start = 0;
        self.pool.put_read(std::mem::take(&mut self.buf));
        self.pool.put_write(std::mem::take(&mut self.out));
        true
    }

    /// Queue `100 Continue` as the output (nothing else is queued).
    pub(crate) fn queue_continue(&mut self) {
        if self.out.capacity() == 0 {
            self.out = self.pool.write_buffer();
        }
        self.out.clear();
        self.out_pos = 0;
        self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }

    /// Before a read: take a buffer from the pool if the connection parked
    /// without one, and move unconsumed bytes to its front.
    pub(crate) fn make_room(&mut self) {
        if self.buf.is_empty() {
            self.buf = self.pool.read_buffer();
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.filled {
            self.start = 0;
            self.filled = 0;
        }
    }
}

/// When the parts of the request in progress began to arrive.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Started {
    /// The head's first byte (or the accept, for a connection's first request).
    pub(crate) head: Option<Instant>,
    /// The head's end: the body's time starts there.
    pub(crate) body: Option<Instant>,
}

#[cfg(test)]
mod tests {
    use super::RequestName;

    #[test]
    fn a_request_name_is_kept_inline_and_a_long_one_cut_says_so() {
        assert_eq!(RequestName::new("GET", "/a?b").to_string(), "GET /a?b");
        // Cut within a two-byte character: before it, never through it.
        let long = format!("/{}", "é".repeat(RequestName::KEPT));
        let shown = RequestName::new("GET", &long).to_string();
        let kept = shown.strip_suffix("...").expect("marked as cut");
        assert!(
            kept.len() <= RequestName::KEPT && long.starts_with(&kept[4..]),
            "{shown}"
        );
    }

    #[test]
    fn the_per_connection_state_stays_within_its_budget() {
        // What every idle event-MPM connection carries (with its Stream and
        // the event loop's wrapper): peers.py's KiB per idle connection
        // moves with it. Raise the bound only with a reason. 280: the
        // waiting state's pointer moved here from the occasional box (8
        // bytes a connection), which an idle connection drops, so that a
        // keep-alive connection of proxied requests does not make that box
        // again for every request (an allocation of 100-odd bytes each).
        assert!(
            std::mem::size_of::<super::HttpConn>() <= 280,
            "HttpConn grew to {} bytes",
            std::mem::size_of::<super::HttpConn>()
        );
    }
}
