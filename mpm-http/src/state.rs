//! Per-connection HTTP state: what a connection holds between the steps
//! that `connection.rs` runs, that `reading.rs` fills and `writing.rs`
//! empties. It imports neither of them.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use mpm_core::Wait;

use crate::access_log::Record;
use crate::buffer_pool::BufferPool;
use crate::response::Part;

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

    pub(crate) fn wait(&self) -> Wait {
        if self.start < self.filled || self.served == 0 {
            Wait::Request
        } else {
            Wait::KeepAlive
        }
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
    #[test]
    fn the_per_connection_state_stays_within_its_budget() {
        // What every idle event-MPM connection carries (with its Stream and
        // the event loop's wrapper): peers.py's KiB per idle connection
        // moves with it. Raise the bound only with a reason.
        assert!(
            std::mem::size_of::<super::HttpConn>() <= 272,
            "HttpConn grew to {} bytes",
            std::mem::size_of::<super::HttpConn>()
        );
    }
}
