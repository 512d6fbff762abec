//! An incremental HTTP/1.1 response reader: the head by `httparse`, the body
//! framed by `Content-Length`, `chunked`, or the end of the connection.
//!
//! It keeps no body bytes, only their count, and reuses its head buffer from
//! one response to the next: the bench's hot path allocates nothing here.

/// Longest response head accepted; more is a bad response.
const MAX_HEAD: usize = 64 * 1024;
/// Header fields parsed per response.
const MAX_HEADERS: usize = 64;

/// One complete response, as far as the bench cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Response {
    /// The status code.
    pub(crate) status: u16,
    /// Body bytes received (after chunked decoding).
    pub(crate) body_len: u64,
    /// The server will close the connection after it (`Connection: close`,
    /// HTTP/1.0 without keep-alive, or a body delimited by the close).
    pub(crate) close: bool,
}

/// What [`ResponseParser::feed`] found in the bytes it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feed {
    /// The response is not complete yet.
    More,
    /// The response ended after `used` of the bytes given.
    Done(Response, usize),
}

/// Why a response could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// The head did not parse, or is too long.
    Head,
    /// `Content-Length` or the chunked framing is broken.
    Framing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    ChunkSize {
        value: u64,
        digits: u32,
        in_ext: bool,
    },
    ChunkData(u64),
    ChunkDataEnd {
        seen_cr: bool,
    },
    Trailer {
        line_len: usize,
    },
    UntilClose,
}

/// Reads one response at a time; [`reset`](Self::reset) before the next.
#[derive(Debug)]
pub(crate) struct ResponseParser {
    head: Vec<u8>,
    state: State,
    status: u16,
    body_len: u64,
    close: bool,
}

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser {
            head: Vec::with_capacity(1024),
            state: State::Head,
            status: 0,
            body_len: 0,
            close: false,
        }
    }
}

impl ResponseParser {
    /// Ready for a new response; keeps the head buffer's capacity.
    pub(crate) fn reset(&mut self) {
        self.head.clear();
        self.state = State::Head;
        self.status = 0;
        self.body_len = 0;
        self.close = false;
    }

    /// Has any byte of the current response arrived?
    pub(crate) fn started(&self) -> bool {
        !self.head.is_empty() || self.state != State::Head
    }

    fn done(&self, used: usize) -> Feed {
        Feed::Done(
            Response {
                status: self.status,
                body_len: self.body_len,
                close: self.close,
            },
            used,
        )
    }

    /// The connection ended: a body delimited by the close is complete now;
    /// anything else cut short is `None`.
    pub(crate) fn eof(&mut self) -> Option<Response> {
        (self.state == State::UntilClose).then_some(Response {
            status: self.status,
            body_len: self.body_len,
            close: true,
        })
    }

    /// Take the next bytes of the response.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<Feed, Malformed> {
        let mut at = 0;
        if self.state == State::Head {
            let before = self.head.len();
            self.head.extend_from_slice(data);
            let Some(head_len) = self.parse_head()? else {
                if self.head.len() > MAX_HEAD {
                    return Err(Malformed::Head);
                }
                return Ok(Feed::More);
            };
            at = head_len - before;
        }
        self.feed_body(data, at)
    }

    /// Parse the head if it is complete: its length, and the body's framing.
    fn parse_head(&mut self) -> Result<Option<usize>, Malformed> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let len = match response.parse(&self.head) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(Malformed::Head),
        };
        let status = response.code.ok_or(Malformed::Head)?;
        let http10 = response.version == Some(0);
        let (mut length, mut chunked, mut keep_alive, mut close) = (None, false, false, false);
        for h in response.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or(Malformed::Framing)?;
                if length.is_some_and(|l| l != v) {
                    return Err(Malformed::Framing);
                }
                length = Some(v);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    close |= token.eq_ignore_ascii_case(b"close");
                    keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        self.status = status;
        self.close = close || (http10 && !keep_alive);
        // Interim responses (100 Continue) are skipped: the next head follows.
        if (100..200).contains(&status) {
            let rest = self.head.split_off(len);
            self.head = rest;
            return self.parse_head().map(|n| n.map(|n| n + len));
        }
        self.state = if status == 204 || status == 304 {
            State::Length(0)
        } else if chunked {
            State::ChunkSize {
                value: 0,
                digits: 0,
                in_ext: false,
            }
        } else if let Some(l) = length {
            State::Length(l)
        } else {
            self.close = true;
            State::UntilClose
        };
        Ok(Some(len))
    }

    fn feed_body(&mut self, data: &[u8], mut at: usize) -> Result<Feed, Malformed> {
        loop {
            match self.state {
                State::Head => unreachable!("the head is parsed before the body"),
                State::Length(left) => {
                    let take = left.min((data.len() - at) as u64);
                    self.body_len += take;
                    at += take as usize;
                    if left == take {
                        return Ok(self.done(at));
                    }
                    self.state = State::Length(left - take);
                    return Ok(Feed::More);
                }
                State::UntilClose => {
                    self.body_len += (data.len() - at) as u64;
                    return Ok(Feed::More);
                }
                State::ChunkData(left) => {
                    let take = left.min((data.len() - at) as u64);
                    self.body_len += take;
                    at += take as usize;
                    self.state = if left == take {
                        State::ChunkDataEnd { seen_cr: false }
                    } else {
                        State::ChunkData(left - take)
                    };
                }
                _ => {}
            }
            let Some(&b) = data.get(at) else {
                return Ok(Feed::More);
            };
            at += 1;
            self.state = match self.state {
                State::ChunkSize {
                    value,
                    digits,
                    in_ext,
                } => match b {
                    b'\n' if digits == 0 => return Err(Malformed::Framing),
                    b'\n' if value == 0 => State::Trailer { line_len: 0 },
                    b'\n' => State::ChunkData(value),
                    _ if in_ext || b == b'\r' => State::ChunkSize {
                        value,
                        digits,
                        in_ext,
                    },
                    b';' | b' ' | b'\t' => State::ChunkSize {
                        value,
                        digits,
                        in_ext: true,
                    },
                    _ => {
                        let d = (b as char).to_digit(16).ok_or(Malformed::Framing)?;
                        if digits >= 15 {
                            return Err(Malformed::Framing);
                        }
                        State::ChunkSize {
                            value: value * 16 + u64::from(d),
                            digits: digits + 1,
                            in_ext,
                        }
                    }
                },
                State::ChunkDataEnd { seen_cr } => match b {
                    b'\r' if !seen_cr => State::ChunkDataEnd { seen_cr: true },
                    b'\n' => State::ChunkSize {
                        value: 0,
                        digits: 0,
                        in_ext: false,
                    },
                    _ => return Err(Malformed::Framing),
                },
                State::Trailer { line_len } => match b {
                    b'\n' if line_len == 0 => return Ok(self.done(at)),
                    b'\n' => State::Trailer { line_len: 0 },
                    b'\r' => State::Trailer { line_len },
                    _ => State::Trailer {
                        line_len: line_len + 1,
                    },
                },
                other => other,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Response {
        let mut p = ResponseParser::default();
        match p.feed(bytes) {
            Ok(Feed::Done(r, used)) => {
                assert_eq!(used, bytes.len(), "the whole response is used");
                r
            }
            other => panic!("not a complete response: {other:?}"),
        }
    }

    #[test]
    fn content_length_frames_the_body() {
        let r = whole(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!((r.status, r.body_len, r.close), (200, 5, false));
    }

    #[test]
    fn chunked_bodies_are_decoded_with_extensions_and_trailers() {
        let r = whole(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              5;x=y\r\nhello\r\n1\r\n!\r\n0\r\nTrailer: v\r\n\r\n",
        );
        assert_eq!((r.status, r.body_len), (200, 6));
    }

    #[test]
    fn any_split_gives_the_same_response() {
        let bytes: &[u8] =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        for cut in 0..bytes.len() {
            let mut p = ResponseParser::default();
            let first = p.feed(&bytes[..cut]).expect("valid prefix");
            assert_eq!(first, Feed::More, "cut at {cut}");
            match p.feed(&bytes[cut..]) {
                Ok(Feed::Done(r, used)) => {
                    assert_eq!((r.status, r.body_len, used), (404, 3, bytes.len() - cut))
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn close_and_http10_mean_the_connection_ends() {
        let r = whole(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        assert!(r.close);
        let r = whole(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(r.close);
        let mut p = ResponseParser::default();
        assert_eq!(p.feed(b"HTTP/1.0 200 OK\r\n\r\nabc"), Ok(Feed::More));
        assert_eq!(
            p.eof(),
            Some(Response {
                status: 200,
                body_len: 3,
                close: true
            })
        );
    }

    #[test]
    fn garbage_and_bad_lengths_are_malformed() {
        let mut p = ResponseParser::default();
        assert_eq!(p.feed(b"SSH-2.0-OpenSSH\r\n\r\n"), Err(Malformed::Head));
        let mut p = ResponseParser::default();
        assert_eq!(
            p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            Err(Malformed::Framing)
        );
        let mut p = ResponseParser::default();
        assert_eq!(
            p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Err(Malformed::Framing)
        );
        let mut p = ResponseParser::default();
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc")
            .expect("a valid prefix");
        assert_eq!(p.eof(), None, "a body cut short is not a response");
    }

    #[test]
    fn interim_responses_are_skipped() {
        let r = whole(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
        );
        assert_eq!((r.status, r.body_len), (201, 2));
    }
}
