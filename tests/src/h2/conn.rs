//! A client connection for the conformance suite: the preface and SETTINGS
//! exchange over plain TCP (h2c with prior knowledge) or TLS with ALPN
//! `h2`, frames sent as given, and expectations that read until what the
//! RFC names arrives, failing the test (never hanging it) when the server
//! says something else, nothing, or closes.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::frame::{code, flag, kind, setting, Frame, DEFAULT_MAX_FRAME_SIZE, PREFACE};
use super::hpack::{self, Decoder, Field};
use crate::tls::{client_config_with, Io};

/// How long an expectation waits for the server by default: the cases run
/// on loopback, so a second is plenty for an answer that comes at all.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// A server to run the cases against.
#[derive(Debug, Clone)]
pub struct Target {
    /// Where it listens.
    pub addr: SocketAddr,
    /// TLS with ALPN `h2` (else h2c with prior knowledge).
    pub tls: bool,
    /// `:authority` of requests.
    pub authority: String,
    /// A path it answers with 200 and a body of at least 5 octets.
    pub path: String,
    /// A path it answers with a body of more than 65,535 octets (the
    /// connection's initial window): a stream asking for it stays open
    /// however far the stream's window is opened.
    pub big_path: String,
    /// How long to wait for an answer before failing.
    pub timeout: Duration,
    /// The authority a TLS server's certificate is checked against (the
    /// suite's own when None).
    pub ca: Option<std::path::PathBuf>,
}

impl Target {
    /// An h2c server at `addr`, asked for `/`.
    pub fn h2c(addr: SocketAddr) -> Target {
        Target {
            addr,
            tls: false,
            authority: addr.to_string(),
            path: "/".to_string(),
            big_path: "/big.bin".to_string(),
            timeout: ANSWER_TIMEOUT,
            ca: None,
        }
    }

    /// A TLS server at `addr` with the suite's certificate, asked for `/`.
    pub fn tls(addr: SocketAddr) -> Target {
        Target {
            tls: true,
            authority: format!("localhost:{}", addr.port()),
            ..Target::h2c(addr)
        }
    }

    /// The request pseudo-header fields of a `method` for `path`, in order.
    pub fn pseudo(&self, method: &str, path: &str) -> Vec<Field> {
        vec![
            Field::literal(":method", method),
            Field::literal(":scheme", if self.tls { "https" } else { "http" }),
            Field::literal(":path", path),
            Field::literal(":authority", &self.authority),
        ]
    }

    /// The header block of a `GET` of [`path`](Self::path).
    pub fn get(&self) -> Vec<u8> {
        hpack::encode(&self.pseudo("GET", &self.path))
    }

    /// The header block of a `GET` of the target's path followed by `extra`.
    pub fn get_with(&self, extra: &[Field]) -> Vec<u8> {
        let mut fields = self.pseudo("GET", &self.path);
        fields.extend_from_slice(extra);
        hpack::encode(&fields)
    }

    /// The header block of a `POST` to the target's path with `extra`.
    pub fn post_with(&self, extra: &[Field]) -> Vec<u8> {
        let mut fields = self.pseudo("POST", &self.path);
        fields.extend_from_slice(extra);
        hpack::encode(&fields)
    }
}

/// What the server did next.
#[derive(Debug)]
pub enum Event {
    /// A frame other than HEADERS, PUSH_PROMISE and CONTINUATION.
    Frame(Frame),
    /// A whole header block (HEADERS and its CONTINUATIONs), decoded.
    Headers {
        /// Its stream.
        stream: u32,
        /// The fields, in order.
        fields: Vec<(String, String)>,
        /// Did the HEADERS frame carry END_STREAM?
        end_stream: bool,
    },
    /// The server closed the connection (or reset it).
    Closed,
    /// Nothing arrived within the timeout.
    Timeout,
}

/// A response read whole.
#[derive(Debug)]
pub struct Response {
    /// `:status`.
    pub status: u16,
    /// Every field of the first header block.
    pub fields: Vec<(String, String)>,
    /// The DATA payloads, concatenated.
    pub body: Vec<u8>,
}

/// What the server said in the SETTINGS of its preface.
#[derive(Debug, Clone, Copy)]
pub struct PeerSettings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS (None: no limit).
    pub max_concurrent_streams: Option<u32>,
    /// SETTINGS_MAX_FRAME_SIZE.
    pub max_frame_size: usize,
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub initial_window_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (None: no limit).
    pub max_header_list_size: Option<u32>,
}

/// One HTTP/2 connection to a [`Target`].
#[derive(Debug)]
pub struct H2Conn {
    io: Io,
    timeout: Duration,
    decoder: Decoder,
    /// The server's settings (its defaults until the handshake).
    pub peer: PeerSettings,
    /// A header block being received: stream, HEADERS' END_STREAM, octets.
    partial: Option<(u32, bool, Vec<u8>)>,
    pings: u64,
    /// What the server sent lately, for failure messages.
    trail: Vec<String>,
    /// Octets read but not yet a whole frame.
    rbuf: Vec<u8>,
}

fn fail<T>(what: impl std::fmt::Display) -> T {
    panic!("{what}")
}

impl H2Conn {
    /// Connect (TCP, and TLS with ALPN `h2` if the target wants it), send
    /// nothing.
    pub fn open(target: &Target) -> H2Conn {
        let tcp = TcpStream::connect_timeout(&target.addr, target.timeout)
            .unwrap_or_else(|e| fail(format!("connecting to {}: {e}", target.addr)));
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(target.timeout))
            .expect("read timeout");
        tcp.set_write_timeout(Some(target.timeout))
            .expect("write timeout");
        let io = if target.tls {
            let config = match &target.ca {
                None => client_config_with(|c| c.alpn_protocols = vec![b"h2".to_vec()]),
                Some(ca) => config_trusting(ca),
            };
            let io = Io::handshake_with(tcp, "localhost", config)
                .unwrap_or_else(|e| fail(format!("TLS handshake with {}: {e}", target.addr)));
            let alpn = io.tls().and_then(|t| t.alpn_protocol()).map(<[u8]>::to_vec);
            assert_eq!(
                alpn.as_deref(),
                Some(&b"h2"[..]),
                "the server at {} did not choose h2 in ALPN",
                target.addr
            );
            io
        } else {
            Io::Plain(tcp)
        };
        H2Conn {
            io,
            timeout: target.timeout,
            decoder: Decoder::default(),
            peer: PeerSettings {
                max_concurrent_streams: None,
                max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                initial_window_size: 65_535,
                max_header_list_size: None,
            },
            partial: None,
            pings: 0,
            trail: Vec::new(),
            rbuf: Vec::new(),
        }
    }

    /// [`open`](Self::open), then the preface and an empty SETTINGS, read
    /// the server's SETTINGS, acknowledge it, and wait for the
    /// acknowledgement of ours (RFC 9113 section 3.4).
    pub fn handshake(target: &Target) -> H2Conn {
        H2Conn::handshake_with(target, &[])
    }

    /// [`handshake`](Self::handshake) with these SETTINGS parameters.
    pub fn handshake_with(target: &Target, params: &[(u16, u32)]) -> H2Conn {
        let mut conn = H2Conn::open(target);
        let mut hello = PREFACE.to_vec();
        hello.extend(Frame::settings(params).encode());
        conn.send_bytes(&hello);
        let (mut theirs, mut acked) = (false, false);
        while !(theirs && acked) {
            match conn.next_raw() {
                Event::Frame(f) if f.kind == kind::SETTINGS && f.has(flag::ACK) => acked = true,
                Event::Frame(f) if f.kind == kind::SETTINGS => {
                    assert!(
                        !theirs || acked,
                        "the server sent two SETTINGS before our ACK"
                    );
                    conn.note_settings(&f);
                    conn.send(&Frame::settings_ack());
                    theirs = true;
                }
                Event::Frame(f) if !theirs => fail(format!(
                    "the server's preface is not a SETTINGS frame but type {:#x}",
                    f.kind
                )),
                Event::Frame(_) | Event::Headers { .. } => {}
                Event::Closed => fail("the server closed the connection during the preface"),
                Event::Timeout => fail(format!(
                    "no SETTINGS{} from the server within {:?}",
                    if theirs { " ACK" } else { "" },
                    conn.timeout
                )),
            }
        }
        conn
    }

    fn note_settings(&mut self, f: &Frame) {
        for (id, value) in f.settings_params() {
            match id {
                setting::MAX_CONCURRENT_STREAMS => self.peer.max_concurrent_streams = Some(value),
                setting::MAX_FRAME_SIZE => self.peer.max_frame_size = value as usize,
                setting::INITIAL_WINDOW_SIZE => self.peer.initial_window_size = value,
                setting::MAX_HEADER_LIST_SIZE => self.peer.max_header_list_size = Some(value),
                _ => {}
            }
        }
    }

    /// Every octet the server sends until it closes (true) or falls silent
    /// for the timeout (false): for a case where it may not speak HTTP/2.
    pub fn read_until_close(&mut self) -> (Vec<u8>, bool) {
        let mut got = std::mem::take(&mut self.rbuf);
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.io.read(&mut chunk) {
                Ok(0) => return (got, true),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let closed = matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                    );
                    return (got, closed);
                }
            }
        }
    }

    /// Change how long expectations wait.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
        let _ = self.io.tcp().set_read_timeout(Some(timeout));
    }

    /// Write `bytes` as they are.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        if let Err(e) = self.try_send_bytes(bytes) {
            fail(format!("writing to the server: {e}"))
        }
    }

    /// Write `bytes`; the error if the server stopped reading or closed.
    pub fn try_send_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.io.write_all(bytes)?;
        self.io.flush()
    }

    /// Send one frame.
    pub fn send(&mut self, frame: &Frame) {
        self.send_bytes(&frame.encode());
    }

    /// Send frames in one write.
    pub fn send_all(&mut self, frames: &[Frame]) {
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        self.send_bytes(&bytes);
    }

    /// HEADERS with END_HEADERS (and END_STREAM if `end_stream`) carrying
    /// `block`.
    pub fn send_headers(&mut self, stream: u32, block: &[u8], end_stream: bool) {
        let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
        self.send(&Frame::headers(stream, flags, block));
    }

    /// The next frame, header blocks decoded; the server's PINGs answered
    /// and its later SETTINGS acknowledged on the way, as a client must.
    pub fn next_event(&mut self) -> Event {
        let event = self.next_answered();
        if self.trail.len() == 8 {
            self.trail.remove(0);
        }
        self.trail.push(describe(&event, self.timeout));
        event
    }

    fn next_answered(&mut self) -> Event {
        loop {
            match self.next_raw() {
                Event::Frame(f) if f.kind == kind::PING && !f.has(flag::ACK) => {
                    let data: [u8; 8] = f
                        .payload
                        .get(..8)
                        .and_then(|d| d.try_into().ok())
                        .unwrap_or([0; 8]);
                    let _ = self.try_send_bytes(&Frame::ping(flag::ACK, data).encode());
                }
                Event::Frame(f) if f.kind == kind::SETTINGS && !f.has(flag::ACK) => {
                    self.note_settings(&f);
                    let _ = self.try_send_bytes(&Frame::settings_ack().encode());
                    return Event::Frame(f);
                }
                other => return other,
            }
        }
    }

    /// The next frame as it comes (header blocks still decoded, to keep
    /// the decoder's table in step with the server's encoder).
    fn next_raw(&mut self) -> Event {
        loop {
            let frame = match self.read_frame() {
                Ok(f) => f,
                Err(e) => {
                    return match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Event::Timeout,
                        io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::BrokenPipe => Event::Closed,
                        _ => fail(format!("reading from the server: {e}")),
                    }
                }
            };
            match frame.kind {
                kind::HEADERS | kind::PUSH_PROMISE => {
                    if frame.kind == kind::PUSH_PROMISE {
                        fail("the server sent PUSH_PROMISE though the client did not enable push")
                    }
                    let Some(fragment) = frame.fragment() else {
                        fail("the server sent HEADERS with more padding than payload")
                    };
                    let block = (
                        frame.stream_id(),
                        frame.has(flag::END_STREAM),
                        fragment.to_vec(),
                    );
                    if frame.has(flag::END_HEADERS) {
                        return self.decoded(block);
                    }
                    self.partial = Some(block);
                }
                kind::CONTINUATION => {
                    let Some(mut block) = self.partial.take() else {
                        fail("the server sent CONTINUATION after no HEADERS")
                    };
                    block.2.extend_from_slice(&frame.payload);
                    if frame.has(flag::END_HEADERS) {
                        return self.decoded(block);
                    }
                    self.partial = Some(block);
                }
                _ => return Event::Frame(frame),
            }
        }
    }

    /// One whole frame from the socket, what arrives past it kept for the
    /// next. A frame longer than our SETTINGS_MAX_FRAME_SIZE (the default:
    /// the suite never raises it) fails the test: RFC 9113 section 4.2.
    fn read_frame(&mut self) -> io::Result<Frame> {
        loop {
            if self.rbuf.starts_with(b"HTTP/1.") {
                let line = self.rbuf.split(|&b| b == b'\r').next().unwrap_or_default();
                fail(format!(
                    "the server answered in HTTP/1: {:?}",
                    String::from_utf8_lossy(line)
                ))
            }
            if let Some(len) = Frame::announced_length(&self.rbuf) {
                if len > DEFAULT_MAX_FRAME_SIZE {
                    fail(format!(
                        "the server sent a frame of {len} octets, more than our SETTINGS_MAX_FRAME_SIZE of {DEFAULT_MAX_FRAME_SIZE}"
                    ))
                }
            }
            if let Some((frame, used)) = Frame::parse(&self.rbuf) {
                self.rbuf.drain(..used);
                return Ok(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.io.read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn decoded(&mut self, (stream, end_stream, block): (u32, bool, Vec<u8>)) -> Event {
        let fields = self.decoder.decode(&block).unwrap_or_else(|e| {
            fail(format!(
                "the server's header block on stream {stream} does not decode: {e}"
            ))
        });
        Event::Headers {
            stream,
            fields,
            end_stream,
        }
    }

    fn unexpected(&self, wanted: &str, got: &Event) -> ! {
        let before = &self.trail[..self.trail.len().saturating_sub(1)];
        let before = if before.is_empty() {
            String::new()
        } else {
            format!(" (before it: {})", before.join("; "))
        };
        panic!(
            "expected {wanted}; the server sent {}{before}",
            describe(got, self.timeout)
        )
    }

    /// A connection error of type `code` (RFC 9113 section 5.4.1): a
    /// GOAWAY with that code, or the connection closed (the RFC says
    /// SHOULD for the GOAWAY, MUST for the close).
    pub fn expect_connection_error(&mut self, code: u32) {
        self.expect_connection_error_of(&[code]);
    }

    /// Like [`expect_connection_error`](Self::expect_connection_error),
    /// any of `codes` allowed.
    pub fn expect_connection_error_of(&mut self, codes: &[u32]) {
        let wanted = || format!("a connection error ({})", names(codes));
        loop {
            match self.next_event() {
                Event::Frame(f) if f.kind == kind::GOAWAY => match f.error_code() {
                    Some((_, c)) if codes.contains(&c) => return,
                    _ => self.unexpected(&wanted(), &Event::Frame(f)),
                },
                Event::Closed => return,
                e @ (Event::Timeout
                | Event::Frame(Frame {
                    kind: kind::RST_STREAM,
                    ..
                })) => self.unexpected(&wanted(), &e),
                _ => {}
            }
        }
    }

    /// A GOAWAY with `code` (the connection may close after it).
    pub fn expect_goaway(&mut self, code: u32) {
        let wanted = format!("GOAWAY {}", code::name(code));
        loop {
            match self.next_event() {
                Event::Frame(f) if f.kind == kind::GOAWAY => match f.error_code() {
                    Some((_, c)) if c == code => return,
                    _ => self.unexpected(&wanted, &Event::Frame(f)),
                },
                e @ (Event::Closed | Event::Timeout) => self.unexpected(&wanted, &e),
                Event::Frame(f) if f.kind == kind::RST_STREAM => {
                    self.unexpected(&wanted, &Event::Frame(f))
                }
                _ => {}
            }
        }
    }

    /// A stream error of type `code` on `stream` (RFC 9113 section 5.4.2):
    /// RST_STREAM with that code; a connection error of that code is
    /// allowed too (an endpoint may always escalate).
    pub fn expect_stream_error(&mut self, stream: u32, code: u32) {
        self.expect_stream_error_of(stream, &[code]);
    }

    /// Like [`expect_stream_error`](Self::expect_stream_error), any of
    /// `codes` allowed.
    pub fn expect_stream_error_of(&mut self, stream: u32, codes: &[u32]) {
        let wanted = || format!("RST_STREAM on stream {stream} or GOAWAY ({})", names(codes));
        // Once the server has ended the stream with an answer, a PING tells
        // whether an RST_STREAM is still to come: it would come first.
        let mut probe: Option<[u8; 8]> = None;
        loop {
            let event = self.next_event();
            let ended = match &event {
                Event::Headers {
                    stream: s,
                    end_stream,
                    ..
                } => *s == stream && *end_stream,
                Event::Frame(f) => {
                    f.kind == kind::DATA && f.stream_id() == stream && f.has(flag::END_STREAM)
                }
                _ => false,
            };
            if ended && probe.is_none() {
                self.pings += 1;
                let data = (0x7072_6f62_6500_0000 | self.pings).to_be_bytes();
                let _ = self.try_send_bytes(&Frame::ping(0, data).encode());
                probe = Some(data);
            }
            match event {
                Event::Frame(f)
                    if f.kind == kind::PING
                        && f.has(flag::ACK)
                        && probe.is_some_and(|p| f.payload == p) =>
                {
                    panic!(
                        "expected {}; the server ended stream {stream} with its answer and no RST_STREAM (it sent: {})",
                        wanted(),
                        self.trail.join("; ")
                    )
                }
                Event::Frame(f) if f.kind == kind::GOAWAY => match f.error_code() {
                    Some((_, c)) if codes.contains(&c) => return,
                    _ => self.unexpected(&wanted(), &Event::Frame(f)),
                },
                Event::Frame(f) if f.kind == kind::RST_STREAM => match f.error_code() {
                    Some((_, c)) if f.stream_id() == stream && codes.contains(&c) => return,
                    _ => self.unexpected(&wanted(), &Event::Frame(f)),
                },
                Event::Closed => return,
                e @ Event::Timeout => self.unexpected(&wanted(), &e),
                _ => {}
            }
        }
    }

    /// RST_STREAM on `stream` with `code`, and nothing else will do.
    pub fn expect_rst_stream(&mut self, stream: u32, code: u32) {
        let wanted = format!("RST_STREAM {} on stream {stream}", code::name(code));
        loop {
            match self.next_event() {
                Event::Frame(f) if f.kind == kind::RST_STREAM => match f.error_code() {
                    Some((_, c)) if f.stream_id() == stream && c == code => return,
                    _ => self.unexpected(&wanted, &Event::Frame(f)),
                },
                e @ (Event::Closed | Event::Timeout) => self.unexpected(&wanted, &e),
                Event::Frame(f) if f.kind == kind::GOAWAY => {
                    self.unexpected(&wanted, &Event::Frame(f))
                }
                _ => {}
            }
        }
    }

    /// The server closes the connection (a GOAWAY first is fine).
    pub fn expect_connection_closed(&mut self) {
        loop {
            match self.next_event() {
                Event::Closed => return,
                e @ Event::Timeout => self.unexpected("the connection closed", &e),
                _ => {}
            }
        }
    }

    /// The next header block on `stream`; fails on an error or close first.
    pub fn expect_headers(&mut self, stream: u32) -> Vec<(String, String)> {
        self.expect_headers_end(stream).0
    }

    fn expect_headers_end(&mut self, stream: u32) -> (Vec<(String, String)>, bool) {
        let wanted = format!("HEADERS on stream {stream}");
        loop {
            match self.next_event() {
                Event::Headers {
                    stream: s,
                    fields,
                    end_stream,
                } if s == stream => return (fields, end_stream),
                e @ (Event::Closed | Event::Timeout) => self.unexpected(&wanted, &e),
                Event::Frame(f) if matches!(f.kind, kind::GOAWAY | kind::RST_STREAM) => {
                    self.unexpected(&wanted, &Event::Frame(f))
                }
                _ => {}
            }
        }
    }

    /// The next DATA frame on `stream`.
    pub fn expect_data(&mut self, stream: u32) -> Frame {
        let wanted = format!("DATA on stream {stream}");
        loop {
            match self.next_event() {
                Event::Frame(f) if f.kind == kind::DATA && f.stream_id() == stream => return f,
                e @ (Event::Closed | Event::Timeout) => self.unexpected(&wanted, &e),
                Event::Frame(f) if matches!(f.kind, kind::GOAWAY | kind::RST_STREAM) => {
                    self.unexpected(&wanted, &Event::Frame(f))
                }
                _ => {}
            }
        }
    }

    /// A whole response on `stream`: its header block, then DATA until
    /// END_STREAM (the connection's and stream's windows reopened as the
    /// body arrives, so a body of any size comes whole).
    pub fn expect_response(&mut self, stream: u32) -> Response {
        let (fields, mut ended) = self.expect_headers_end(stream);
        let status = fields
            .iter()
            .find(|(n, _)| n == ":status")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| {
                fail(format!(
                    "a response without :status on stream {stream}: {fields:?}"
                ))
            });
        let mut body = Vec::new();
        while !ended {
            let f = self.expect_data(stream);
            ended = f.has(flag::END_STREAM);
            let data = f.fragment().unwrap_or_default();
            body.extend_from_slice(data);
            if !f.payload.is_empty() {
                let n = f.payload.len() as u32;
                let mut updates = vec![Frame::window_update(0, n)];
                if !ended {
                    updates.push(Frame::window_update(stream, n));
                }
                let bytes: Vec<u8> = updates.iter().flat_map(Frame::encode).collect();
                let _ = self.try_send_bytes(&bytes);
            }
        }
        Response {
            status,
            fields,
            body,
        }
    }

    /// The connection still works: a PING is answered with its own data,
    /// and no error arrives before it (the server handles frames in order,
    /// so an error the frames before provoked would come first).
    pub fn expect_alive(&mut self) {
        self.pings += 1;
        let data = (0x6d70_6d00_0000_0000 | self.pings).to_be_bytes();
        if let Err(e) = self.try_send_bytes(&Frame::ping(0, data).encode()) {
            fail(format!(
                "expected a working connection; writing a PING failed: {e}"
            ))
        }
        self.expect_ping_ack(data);
    }

    /// A PING with ACK carrying `data`; an error or close first fails.
    pub fn expect_ping_ack(&mut self, data: [u8; 8]) {
        let wanted = format!("PING ACK with {data:02x?}");
        loop {
            match self.next_event() {
                Event::Frame(f) if f.kind == kind::PING && f.has(flag::ACK) => {
                    if f.payload == data {
                        return;
                    }
                    fail(format!(
                        "{wanted}; the server sent PING ACK with {:02x?}",
                        f.payload
                    ))
                }
                e @ (Event::Closed | Event::Timeout) => self.unexpected(&wanted, &e),
                Event::Frame(f) if matches!(f.kind, kind::GOAWAY | kind::RST_STREAM) => {
                    self.unexpected(&wanted, &Event::Frame(f))
                }
                _ => {}
            }
        }
    }

    /// A SETTINGS with ACK (and an empty payload).
    pub fn expect_settings_ack(&mut self) {
        loop {
            match self.next_event() {
                Event::Frame(f) if f.kind == kind::SETTINGS && f.has(flag::ACK) => {
                    assert!(f.payload.is_empty(), "a SETTINGS ACK with a payload");
                    return;
                }
                e @ (Event::Closed | Event::Timeout) => self.unexpected("SETTINGS ACK", &e),
                Event::Frame(f) if matches!(f.kind, kind::GOAWAY | kind::RST_STREAM) => {
                    self.unexpected("SETTINGS ACK", &Event::Frame(f))
                }
                _ => {}
            }
        }
    }

    /// Frames that arrive within `within`, read until a quiet spell of
    /// that long (or the close): for floods, where the answers pile up.
    pub fn drain(&mut self, within: Duration) -> Vec<Event> {
        let before = self.timeout;
        self.set_timeout(within);
        let mut got = Vec::new();
        // A flood's answers may take a while to read, and still end.
        let deadline = Instant::now() + before * 3;
        while Instant::now() < deadline {
            match self.next_event() {
                Event::Timeout => break,
                Event::Closed => {
                    got.push(Event::Closed);
                    break;
                }
                e => got.push(e),
            }
        }
        self.set_timeout(before);
        got
    }
}

/// A client configuration offering only `h2`, trusting the authority in
/// the PEM file `ca`.
fn config_trusting(ca: &std::path::Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let cert = rustls_pki_types::CertificateDer::from_pem_file(ca)
        .unwrap_or_else(|e| fail(format!("reading the authority {}: {e}", ca.display())));
    roots
        .add(cert)
        .unwrap_or_else(|e| fail(format!("{} as a root: {e}", ca.display())));
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("default versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    std::sync::Arc::new(config)
}

/// An event in a few words, for messages.
fn describe(event: &Event, timeout: Duration) -> String {
    match event {
        Event::Frame(f) if f.kind == kind::GOAWAY => {
            let (last, c) = f.error_code().unwrap_or((0, u32::MAX));
            format!(
                "GOAWAY {} (last stream {last}, debug {:?})",
                code::name(c),
                String::from_utf8_lossy(f.payload.get(8..).unwrap_or_default())
            )
        }
        Event::Frame(f) if f.kind == kind::RST_STREAM => format!(
            "RST_STREAM {} on stream {}",
            code::name(f.error_code().map_or(u32::MAX, |(_, c)| c)),
            f.stream_id()
        ),
        Event::Frame(f) => {
            let name = match f.kind {
                kind::DATA => "DATA",
                kind::PRIORITY => "PRIORITY",
                kind::SETTINGS if f.has(flag::ACK) => "SETTINGS ACK",
                kind::SETTINGS => "SETTINGS",
                kind::PING if f.has(flag::ACK) => "PING ACK",
                kind::PING => "PING",
                kind::WINDOW_UPDATE => "WINDOW_UPDATE",
                _ => "a frame",
            };
            format!(
                "{name} (type {:#x}, flags {:#x}, {} octets) on stream {}",
                f.kind,
                f.flags,
                f.payload.len(),
                f.stream_id()
            )
        }
        Event::Headers {
            stream,
            fields,
            end_stream,
        } => {
            let status = fields
                .iter()
                .find(|(n, _)| n == ":status")
                .map_or("none", |(_, v)| v.as_str());
            format!(
                "HEADERS on stream {stream} (:status {status}{})",
                if *end_stream { ", END_STREAM" } else { "" }
            )
        }
        Event::Closed => "a closed connection".to_string(),
        Event::Timeout => format!("nothing within {timeout:?}"),
    }
}

fn names(codes: &[u32]) -> String {
    codes
        .iter()
        .map(|&c| code::name(c))
        .collect::<Vec<_>>()
        .join(" or ")
}
