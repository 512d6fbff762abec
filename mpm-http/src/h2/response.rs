//! A [`Response`](crate::Response) as a stream sends it: the HEADERS the
//! layer writes (status, `date`, `server`, `content-length`, the
//! handler's fields lower-cased, the connection-specific ones HTTP/2 has
//! no place for dropped), and its body as a queue of sources read a window
//! at a time: bytes without a copy, a file region read in chunks (on a
//! loop only from the page cache), a reader (on a worker only), a polled
//! source (never blocks).

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use mpm_core::waiting::{Await, Polled};
use smallvec::SmallVec;

use crate::page_cache;
use crate::response::{Body, Part, Parts};
use crate::settings::ServiceSettings;
use crate::waiting::PollRead;

/// Fields of HTTP/1.1's connection management, which an HTTP/2 message
/// must not carry (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// A response head as HEADERS carry it: the status, `date`, `server`,
/// the handler's fields (names lowercased as they are sent, RFC 9113
/// §8.2.1) and `content-length`. It borrows what it can: building one
/// allocates the date and, for a name not in lowercase, its lowercase.
#[derive(Debug)]
pub(crate) struct ResponseHead<'s> {
    pub(crate) status: u16,
    date: Vec<u8>,
    server: Option<&'s str>,
    headers: crate::response::Fields,
    length: Option<u64>,
}

impl ResponseHead<'_> {
    /// Call `f` with the fields as `mpm-h2` takes them.
    pub(crate) fn with_pairs<R>(&self, f: impl FnOnce(&[(&[u8], &[u8])]) -> R) -> R {
        let lowered: SmallVec<[Option<Vec<u8>>; 8]> = self
            .headers
            .iter()
            .map(|(n, _)| {
                n.bytes()
                    .any(|b| b.is_ascii_uppercase())
                    .then(|| n.to_ascii_lowercase().into_bytes())
            })
            .collect();
        let mut digits = itoa::Buffer::new();
        let mut pairs: SmallVec<[(&[u8], &[u8]); 12]> = SmallVec::new();
        let own_date = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("date"));
        if !own_date {
            pairs.push((b"date", &self.date));
        }
        if let Some(server) = self.server {
            pairs.push((b"server", server.as_bytes()));
        }
        for ((name, value), low) in self.headers.iter().zip(&lowered) {
            if self.length.is_some() && name.eq_ignore_ascii_case("content-length") {
                continue;
            }
            pairs.push((low.as_deref().unwrap_or(name.as_bytes()), value.as_bytes()));
        }
        if let Some(len) = self.length {
            pairs.push((b"content-length", digits.format(len).as_bytes()));
        }
        f(&pairs)
    }

    /// The value of `name` (lowercase), if present.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<Vec<u8>> {
        self.with_pairs(|pairs| {
            pairs
                .iter()
                .find(|(n, _)| *n == name.as_bytes())
                .map(|(_, v)| v.to_vec())
        })
    }
}

/// The response head, and its body's sources (none for a HEAD, 1xx, 204
/// or 304, or an empty body).
pub(crate) fn head(
    settings: &ServiceSettings,
    mut parts: Parts,
    is_head: bool,
) -> (ResponseHead<'_>, Body) {
    settings.error_pages.apply(&mut parts);
    if parts.tunnel.is_some() {
        // No `101` in HTTP/2 (RFC 9113 §8.6): a handler that upgrades is
        // answered as one that failed.
        mpm_core::log_warn!("mpm: an upgrade (101) answered over HTTP/2; answered 500");
        parts = crate::Response::error(500).into_parts();
        settings.error_pages.apply(&mut parts);
    }
    let status = if (100..=999).contains(&parts.status) {
        parts.status
    } else {
        500
    };
    let no_body = status < 200 || status == 204 || status == 304;
    let mut date = Vec::with_capacity(29);
    crate::date::append_now(&mut date);
    let server = (!parts.has_server && !settings.server.is_empty()).then_some(&*settings.server);
    let mut headers = std::mem::take(&mut parts.headers);
    headers.retain(|(name, _)| {
        !CONNECTION_SPECIFIC
            .iter()
            .any(|c| name.eq_ignore_ascii_case(c))
    });
    let length = if no_body { None } else { parts.body.len() };
    let body = if no_body || is_head {
        Body::Empty
    } else {
        parts.body
    };
    let head = ResponseHead {
        status,
        date,
        server,
        headers,
        length,
    };
    (head, body)
}

/// One piece of a body still to send.
enum Source {
    Bytes(Bytes),
    File {
        file: Arc<std::fs::File>,
        offset: u64,
        end: u64,
    },
    Read(Box<dyn Read + Send>),
    Polled(Box<dyn PollRead>),
}

/// What the next piece of a body is.
pub(crate) enum Chunk {
    /// Bytes to send, and whether they are the last.
    Data(Bytes, bool),
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

/// A body being sent, source by source.
pub(crate) struct Outgoing {
    sources: VecDeque<Source>,
    /// Body bytes handed to the codec so far.
    pub(crate) sent: u64,
}

impl Outgoing {
    /// The sources of `body`.
    pub(crate) fn new(body: Body) -> Outgoing {
        let mut sources = VecDeque::new();
        let file = |f: crate::FileBody, sources: &mut VecDeque<Source>| {
            if f.len > 0 {
                sources.push_back(Source::File {
                    file: f.file,
                    offset: f.offset,
                    end: f.offset.saturating_add(f.len),
                });
            }
        };
        match body {
            Body::Empty => {}
            Body::Bytes(b) => sources.push_back(Source::Bytes(Bytes::from(b.into_owned()))),
            Body::Shared(b) => sources.push_back(Source::Bytes(Bytes::from_owner(b))),
            Body::File(f) => file(f, &mut sources),
            Body::Stream(r) => sources.push_back(Source::Read(r)),
            Body::Polled(p) => sources.push_back(Source::Polled(p)),
            Body::Parts(parts) => {
                for part in parts {
                    match part {
                        Part::Bytes(b) => {
                            sources.push_back(Source::Bytes(Bytes::from(b.into_owned())))
                        }
                        Part::File(f) => file(f, &mut sources),
                    }
                }
            }
        }
        sources.retain(|s| !matches!(s, Source::Bytes(b) if b.is_empty()));
        Outgoing { sources, sent: 0 }
    }

    /// Is nothing to be sent at all?
    pub(crate) fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Up to `max` (> 0) bytes of what comes next.
    pub(crate) fn next(&mut self, max: usize, on_loop: bool) -> Chunk {
        let more_after = self.sources.len() > 1;
        let Some(source) = self.sources.front_mut() else {
            return Chunk::End;
        };
        let chunk = match source {
            Source::Bytes(b) => {
                let piece = b.split_to(max.min(b.len()));
                let done = b.is_empty();
                (piece, done)
            }
            Source::File { file, offset, end } => {
                let want = (*end - *offset).min(max as u64);
                if on_loop && !page_cache::resident(file, *offset, want) {
                    return Chunk::NeedsWorker;
                }
                let mut buf = vec![0u8; want as usize];
                let n = loop {
                    match file.read_at(&mut buf, *offset) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Chunk::Failed(format!("reading the file body: {e}")),
                        Ok(0) => return Chunk::Failed("the file body ended early".into()),
                        Ok(n) => break n,
                    }
                };
                buf.truncate(n);
                *offset += n as u64;
                (Bytes::from(buf), *offset >= *end)
            }
            Source::Read(r) => {
                if on_loop {
                    return Chunk::NeedsWorker;
                }
                let mut buf = vec![0u8; max.min(16 * 1024)];
                match r.read(&mut buf) {
                    Ok(0) => (Bytes::new(), true),
                    Ok(n) => {
                        buf.truncate(n);
                        (Bytes::from(buf), false)
                    }
                    Err(e) => return Chunk::Failed(format!("reading the body: {e}")),
                }
            }
            Source::Polled(p) => {
                let mut buf = vec![0u8; max.min(64 * 1024)];
                match p.poll_read(&mut buf) {
                    Polled::Ready(Ok(0)) => (Bytes::new(), true),
                    Polled::Ready(Ok(n)) => {
                        buf.truncate(n);
                        (Bytes::from(buf), false)
                    }
                    Polled::Ready(Err(e)) => {
                        return Chunk::Failed(format!("reading the upstream's body: {e}"));
                    }
                    Polled::Wait(w) => return Chunk::Wait(w),
                    Polled::Again => return Chunk::Again,
                }
            }
        };
        let (bytes, source_done) = chunk;
        if source_done {
            self.sources.pop_front();
        }
        let last = source_done && !more_after;
        if bytes.is_empty() && !last {
            return self.next(max, on_loop);
        }
        self.sent += bytes.len() as u64;
        Chunk::Data(bytes, last)
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
        let (h, body) = head(&settings, r.into_parts(), true);
        assert_eq!(h.status, 200);
        assert_eq!(h.get("content-length"), Some(b"3".to_vec()));
        assert_eq!(h.get("x-a"), Some(b"1".to_vec()));
        assert!(h.get("date").is_some());
        assert!(h.get("server").is_some());
        assert!(h.get("upgrade").is_none());
        assert!(matches!(body, Body::Empty), "a HEAD has no body");
    }
}
