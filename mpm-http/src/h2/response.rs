//! A [`Response`](crate::Response) as a stream sends it: the HEADERS the
//! layer writes (status, `date`, `server`, `content-length`, the
//! handler's fields lower-cased, the connection-specific ones HTTP/2 has
//! no place for dropped), and its body as a queue of sources read a window
//! at a time: bytes without a copy, a file region read in chunks (on a
//! loop only from the page cache), a reader (on a worker only), a polled
//! source (never blocks).

use std::borrow::Cow;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use mpm_core::waiting::{Await, Polled};
use mpm_h2::HeaderBlock;
use smallvec::SmallVec;

use crate::page_cache;
use crate::response::{Body, Part};
use crate::settings::ServiceSettings;
use crate::waiting::PollRead;
use crate::Response;

/// Fields of HTTP/1.1's connection management, which an HTTP/2 message
/// must not carry (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Is `name` (any case) a field HTTP/2 does not carry (RFC 9113 §8.2.2)?
fn is_connection_specific(name: &[u8]) -> bool {
    CONNECTION_SPECIFIC
        .iter()
        .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
}

/// A response head as HEADERS carry it: the status, `date`, `server`,
/// the handler's fields and `content-length`. It borrows or owns what the
/// response held and allocates nothing: the codec writes each field
/// straight into its output ([`ResponseHead::write`]), lowercasing names as
/// it goes (RFC 9113 §8.2.1), the date and the length formatted in place.
#[derive(Debug)]
pub(crate) struct ResponseHead<'s> {
    pub(crate) status: u16,
    server: Option<&'s str>,
    headers: crate::response::Fields,
    /// The fields given as bytes ([`Response::try_header_bytes`]).
    wire: crate::wire_fields::WireFields,
    length: Option<u64>,
}

/// A field's value as [`ResponseHead::each`] gives it.
pub(crate) enum Value<'v> {
    Text(&'v [u8]),
    /// Now, as an IMF-fixdate.
    Date,
    /// A length, in decimal.
    Length(u64),
}

impl ResponseHead<'_> {
    /// Each field in the order it goes out: `date` (unless the handler
    /// set its own), `server`, the handler's fields (its `content-length`
    /// left out when the body's length is known), `content-length`.
    pub(crate) fn each(&self, mut f: impl FnMut(&[u8], Value<'_>)) {
        let own_date = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("date"));
        if !own_date {
            f(b"date", Value::Date);
        }
        if let Some(server) = self.server {
            f(b"server", Value::Text(server.as_bytes()));
        }
        for (name, value) in &self.headers {
            if self.length.is_some() && name.eq_ignore_ascii_case("content-length") {
                continue;
            }
            f(name.as_bytes(), Value::Text(value.as_bytes()));
        }
        // Checked as they were added: no layer field (so no
        // `content-length`), but a connection-specific one may be there.
        for (name, value) in self.wire.iter() {
            if !is_connection_specific(name) {
                f(name, Value::Text(value));
            }
        }
        if let Some(len) = self.length {
            f(b"content-length", Value::Length(len));
        }
    }

    /// The fields into a head the codec is writing.
    pub(crate) fn write(&self, block: &mut HeaderBlock<'_>) {
        self.each(|name, value| match value {
            Value::Text(v) => {
                block.field(name, v);
            }
            Value::Date => {
                block.field_with(name, crate::date::append_now);
            }
            Value::Length(n) => {
                block.field_with(name, |out| {
                    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                });
            }
        });
    }

    /// The value of `name` (any case), if present.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<Vec<u8>> {
        let mut found = None;
        self.each(|n, v| {
            if found.is_none() && n.eq_ignore_ascii_case(name.as_bytes()) {
                found = Some(match v {
                    Value::Text(v) => v.to_vec(),
                    Value::Date => {
                        let mut out = Vec::new();
                        crate::date::append_now(&mut out);
                        out
                    }
                    Value::Length(n) => n.to_string().into_bytes(),
                });
            }
        });
        found
    }
}

/// The response head, and its body's sources (none for a HEAD, 1xx, 204
/// or 304, or an empty body).
pub(crate) fn head(
    settings: &ServiceSettings,
    mut parts: Response,
    is_head: bool,
) -> (ResponseHead<'_>, Body) {
    settings.error_pages.apply(&mut parts);
    if parts.tunnel.is_some() {
        // No `101` in HTTP/2 (RFC 9113 §8.6): a handler that upgrades is
        // answered as one that failed.
        mpm_core::log_warn!("mpm: an upgrade (101) answered over HTTP/2; answered 500");
        parts = Response::error(500);
        settings.error_pages.apply(&mut parts);
    }
    let status = if (100..=999).contains(&parts.status) {
        parts.status
    } else {
        500
    };
    let no_body = status < 200 || status == 204 || status == 304;
    let server = (!parts.has_server && !settings.server.is_empty()).then_some(&*settings.server);
    let mut headers = std::mem::take(&mut parts.headers);
    headers.retain(|(name, _)| !is_connection_specific(name.as_bytes()));
    let mut wire = std::mem::take(&mut parts.wire);
    // The server's own (`--add-header`), checked at start.
    for (name, value) in settings.added_fields.for_status(status) {
        wire.push_checked(name.as_bytes(), value.as_bytes());
    }
    let length = if no_body { None } else { parts.body.len() };
    let body = if no_body || is_head {
        Body::Empty
    } else {
        parts.body
    };
    let head = ResponseHead {
        status,
        server,
        headers,
        wire,
        length,
    };
    (head, body)
}

/// One piece of a body still to send.
enum Source {
    /// Bytes in memory, sent from `at` on (no copy but into the frame).
    Bytes {
        data: Cow<'static, [u8]>,
        at: usize,
    },
    /// Bytes shared with a cache, sent from `at` on.
    Shared {
        data: Arc<[u8]>,
        at: usize,
    },
    File {
        file: Arc<std::fs::File>,
        offset: u64,
        end: u64,
    },
    Read(Box<dyn Read + Send>),
    Polled(Box<dyn PollRead>),
    /// A reader or polled source that ended.
    Spent,
}

impl Source {
    /// Nothing more comes from it.
    fn is_spent(&self) -> bool {
        match self {
            Source::Bytes { data, at } => *at >= data.len(),
            Source::Shared { data, at } => *at >= data.len(),
            Source::File { offset, end, .. } => offset >= end,
            Source::Spent => true,
            Source::Read(_) | Source::Polled(_) => false,
        }
    }
}

/// What the next piece of a body is.
pub(crate) enum Chunk<'o> {
    /// Bytes to send, and whether they are the last.
    Data(&'o [u8], bool),
    /// Nothing more.
    End,
    /// A polled source has nothing yet.
    Wait(Await),
    /// Again on the next turn (a polled source said so).
    Again,
    /// Reading it may block (a file not in the page cache, a reader) and
    /// the step runs on an event loop: for a worker.
    NeedsWorker,
    /// The source failed: the stream is reset.
    Failed(String),
}

/// A body being sent, source by source. A body in memory (one source, the
/// common case) is held inline and sent from where it lies; what is read
/// (a file region, a reader's or a polled source's bytes) goes through
/// one buffer, made at the first read and reused for the stream's life.
pub(crate) struct Outgoing {
    /// The sources, the first one being sent (a spent one is dropped at
    /// the next call: the last piece borrows it).
    sources: SmallVec<[Source; 1]>,
    buf: Vec<u8>,
    /// Body bytes handed to the codec so far.
    pub(crate) sent: u64,
}

impl Outgoing {
    /// The sources of `body`.
    pub(crate) fn new(body: Body) -> Outgoing {
        let mut sources = SmallVec::new();
        let file = |f: crate::FileBody, sources: &mut SmallVec<[Source; 1]>| {
            if f.len > 0 {
                sources.push(Source::File {
                    file: f.file,
                    offset: f.offset,
                    end: f.offset.saturating_add(f.len),
                });
            }
        };
        match body {
            Body::Empty => {}
            Body::Bytes(data) => sources.push(Source::Bytes { data, at: 0 }),
            Body::Shared(data) => sources.push(Source::Shared { data, at: 0 }),
            Body::File(f) => file(f, &mut sources),
            Body::Stream(r) => sources.push(Source::Read(r)),
            Body::Polled(p) => sources.push(Source::Polled(p)),
            Body::Parts(parts) => {
                for part in parts {
                    match part {
                        Part::Bytes(data) => sources.push(Source::Bytes { data, at: 0 }),
                        Part::File(f) => file(f, &mut sources),
                    }
                }
            }
        }
        sources.retain(|s| !s.is_spent());
        Outgoing {
            sources,
            buf: Vec::new(),
            sent: 0,
        }
    }

    /// Is nothing to be sent at all?
    pub(crate) fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Up to `max` (> 0) bytes of what comes next: all of it is taken
    /// (sent) before the next call.
    pub(crate) fn next(&mut self, max: usize, on_loop: bool) -> Chunk<'_> {
        loop {
            while self.sources.first().is_some_and(Source::is_spent) {
                self.sources.remove(0);
            }
            let more_after = self.sources.len() > 1;
            let Some(source) = self.sources.first_mut() else {
                return Chunk::End;
            };
            let (n, done) = match source {
                Source::Bytes { .. } | Source::Shared { .. } => {
                    // Sent from where it lies: borrowed afresh below, out
                    // of the loop (a borrow kept across its turns would
                    // hold the sources for good).
                    return self.next_in_memory(max, more_after);
                }
                Source::File { file, offset, end } => {
                    let want = (*end - *offset).min(max as u64);
                    if on_loop && !page_cache::resident(file, *offset, want) {
                        return Chunk::NeedsWorker;
                    }
                    self.buf.resize(want as usize, 0);
                    let n = loop {
                        match file.read_at(&mut self.buf, *offset) {
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Chunk::Failed(format!("reading the file body: {e}")),
                            Ok(0) => return Chunk::Failed("the file body ended early".into()),
                            Ok(n) => break n,
                        }
                    };
                    *offset += n as u64;
                    (n, *offset >= *end)
                }
                Source::Read(r) => {
                    if on_loop {
                        return Chunk::NeedsWorker;
                    }
                    self.buf.resize(max.min(16 * 1024), 0);
                    match r.read(&mut self.buf) {
                        Ok(0) => (0, true),
                        Ok(n) => (n, false),
                        Err(e) => return Chunk::Failed(format!("reading the body: {e}")),
                    }
                }
                Source::Polled(p) => {
                    self.buf.resize(max.min(64 * 1024), 0);
                    match p.poll_read(&mut self.buf) {
                        Polled::Ready(Ok(0)) => (0, true),
                        Polled::Ready(Ok(n)) => (n, false),
                        Polled::Ready(Err(e)) => {
                            return Chunk::Failed(format!("reading the upstream's body: {e}"));
                        }
                        Polled::Wait(w) => return Chunk::Wait(w),
                        Polled::Again => return Chunk::Again,
                    }
                }
                Source::Spent => (0, true),
            };
            if done && matches!(source, Source::Read(_) | Source::Polled(_)) {
                *source = Source::Spent;
            }
            let last = done && !more_after;
            if n == 0 && !last {
                continue;
            }
            self.sent += n as u64;
            return Chunk::Data(&self.buf[..n], last);
        }
    }

    /// Up to `max` bytes of the first source, one in memory.
    fn next_in_memory(&mut self, max: usize, more_after: bool) -> Chunk<'_> {
        let (data, at): (&[u8], &mut usize) = match self.sources.first_mut() {
            Some(Source::Bytes { data, at }) => (data, at),
            Some(Source::Shared { data, at }) => (data, at),
            _ => return Chunk::End,
        };
        let start = *at;
        let n = max.min(data.len() - start);
        *at += n;
        self.sent += n as u64;
        Chunk::Data(&data[start..start + n], *at >= data.len() && !more_after)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::borrow::Cow;
    use std::io::Write;
    use std::sync::Arc;

    use super::{head, Chunk, Outgoing};
    use crate::settings::ServiceSettings;
    use crate::{Body, FileBody, HttpSettings, Part, Response};

    fn data(o: &mut Outgoing, max: usize) -> (Vec<u8>, bool) {
        match o.next(max, false) {
            Chunk::Data(b, last) => (b.to_vec(), last),
            _ => panic!("not data"),
        }
    }

    #[test]
    fn bytes_go_a_window_at_a_time_and_the_last_piece_says_so() {
        let mut o = Outgoing::new(Body::from("hello world"));
        assert_eq!(data(&mut o, 5), (b"hello".to_vec(), false));
        assert_eq!(data(&mut o, 100), (b" world".to_vec(), true));
        assert!(matches!(o.next(5, false), Chunk::End));
        assert_eq!(o.sent, 11);
    }

    #[test]
    fn parts_run_one_after_another_file_regions_included() {
        let path = std::env::temp_dir().join(format!("mpm-h2-parts-{}", std::process::id()));
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"0123456789")
            .unwrap();
        let file = Arc::new(std::fs::File::open(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        let mut o = Outgoing::new(Body::Parts(vec![
            Part::Bytes(Cow::Borrowed(b"<")),
            Part::File(FileBody {
                file,
                offset: 2,
                len: 5,
            }),
            Part::Bytes(Cow::Borrowed(b">")),
        ]));
        let mut got = Vec::new();
        loop {
            let (b, last) = data(&mut o, 3);
            got.extend(b);
            if last {
                break;
            }
        }
        assert_eq!(got, b"<23456>");
    }

    #[test]
    fn a_head_carries_length_date_and_server_and_no_connection_fields() {
        let settings = ServiceSettings::new(&HttpSettings::default());
        let r = Response::new(200)
            .header("X-A", "1")
            .header("Upgrade", "websocket")
            .body("abc");
        let (h, body) = head(&settings, r, true);
        assert_eq!(h.status, 200);
        assert_eq!(h.get("content-length"), Some(b"3".to_vec()));
        assert_eq!(h.get("x-a"), Some(b"1".to_vec()));
        assert!(h.get("date").is_some());
        assert!(h.get("server").is_some());
        assert!(h.get("upgrade").is_none());
        assert!(matches!(body, Body::Empty), "a HEAD has no body");
    }

    /// A body of no known length (a proxied `HEAD` whose upstream gave
    /// none): no `content-length` at all, not `0`.
    #[test]
    fn a_head_of_unknown_length_has_no_content_length() {
        struct Unknown;
        impl crate::PollRead for Unknown {
            fn poll_read(
                &mut self,
                _: &mut [u8],
            ) -> mpm_core::waiting::Polled<std::io::Result<usize>> {
                mpm_core::waiting::Polled::Ready(Ok(0))
            }
            fn len(&self) -> Option<u64> {
                None
            }
        }
        let settings = ServiceSettings::new(&HttpSettings::default());
        let r = Response::new(200).body(Body::Polled(Box::new(Unknown)));
        let (h, body) = head(&settings, r, true);
        assert_eq!(h.get("content-length"), None);
        assert!(matches!(body, Body::Empty), "a HEAD has no body");
        let r = Response::new(200).body(Body::Empty);
        let (h, _) = head(&settings, r, true);
        assert_eq!(h.get("content-length"), Some(b"0".to_vec()));
    }
}
