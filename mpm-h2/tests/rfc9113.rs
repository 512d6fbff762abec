//! RFC 9113, a requirement per test, named by its section (as the
//! server's conformance suite, tests/tests/h2_conformance.rs, names its
//! cases): raw frames into a [`Connection`], the frames and events it
//! answers with checked.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use common::frame;
use mpm_h2::{Connection, Error, Event, Reason, Settings, PREFACE};

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

/// `GET /` on authority `a`, scheme http (RFC 7541 C.3.1's shape; the
/// authority literal is indexed).
const GET: &[u8] = &[0x82, 0x86, 0x84, 0x41, 0x01, b'a'];

/// `POST /`.
const POST: &[u8] = &[0x83, 0x86, 0x84, 0x41, 0x01, b'a'];

/// A literal field without indexing, new name (RFC 7541 §6.2.2).
fn lit(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0x00, name.len() as u8];
    b.extend_from_slice(name.as_bytes());
    b.push(value.len() as u8);
    b.extend_from_slice(value.as_bytes());
    b
}

fn with(block: &[u8], extra: &[u8]) -> Vec<u8> {
    [block, extra].concat()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn parse(mut out: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while out.len() >= 9 {
        let len = (usize::from(out[0]) << 16) | (usize::from(out[1]) << 8) | usize::from(out[2]);
        frames.push(Frame {
            kind: out[3],
            flags: out[4],
            stream: u32::from_be_bytes([out[5], out[6], out[7], out[8]]),
            payload: out[9..9 + len].to_vec(),
        });
        out = &out[9 + len..];
    }
    assert!(out.is_empty(), "a frame cut short in our output");
    frames
}

/// A peer: the connection, what it answered, what it reported.
struct Peer {
    conn: Connection,
    frames: Vec<Frame>,
    events: Vec<Event>,
    error: Option<Error>,
}

impl Peer {
    /// Preface and an empty SETTINGS sent, our SETTINGS and the ACK taken.
    fn new() -> Peer {
        Peer::with_settings(Settings::default(), &[])
    }

    fn with_settings(ours: Settings, theirs: &[(u16, u32)]) -> Peer {
        let mut p = Peer {
            conn: Connection::new(ours),
            frames: Vec::new(),
            events: Vec::new(),
            error: None,
        };
        let mut payload = Vec::new();
        for (id, v) in theirs {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&v.to_be_bytes());
        }
        let mut input = PREFACE.to_vec();
        input.extend(frame(SETTINGS, 0, 0, &payload));
        input.extend(frame(SETTINGS, ACK, 0, &[]));
        p.send(&input);
        assert!(p.error.is_none(), "{:?}", p.error);
        p.take();
        p
    }

    /// Feed `input` whole; the frames and events it gave are added.
    fn send(&mut self, input: &[u8]) {
        match self.conn.recv(input) {
            Ok(n) => assert_eq!(n, input.len(), "frames left unread"),
            Err(e) => self.error = Some(e),
        }
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
        let mut out = Vec::new();
        self.conn.write_to(&mut out);
        self.frames.extend(parse(&out));
    }

    fn take(&mut self) -> (Vec<Frame>, Vec<Event>) {
        (
            std::mem::take(&mut self.frames),
            std::mem::take(&mut self.events),
        )
    }

    fn open(&mut self, stream: u32, block: &[u8], end_stream: bool) {
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        self.send(&frame(HEADERS, flags, stream, block));
    }

    /// The connection failed with `code` and said so in a GOAWAY.
    fn expect_goaway(&self, code: Reason) {
        assert_eq!(
            self.error.as_ref().and_then(Error::reason),
            Some(code),
            "{:?}",
            self.error
        );
        let g = self
            .frames
            .iter()
            .find(|f| f.kind == GOAWAY)
            .unwrap_or_else(|| panic!("no GOAWAY in {:?}", self.frames));
        assert_eq!(
            u32::from_be_bytes(g.payload[4..8].try_into().unwrap()),
            code.0
        );
    }

    /// `stream` was reset with `code`, and the connection goes on.
    fn expect_rst(&self, stream: u32, code: Reason) {
        assert!(self.error.is_none(), "{:?}", self.error);
        let r = self
            .frames
            .iter()
            .find(|f| f.kind == RST_STREAM && f.stream == stream)
            .unwrap_or_else(|| panic!("no RST_STREAM on {stream} in {:?}", self.frames));
        assert_eq!(
            u32::from_be_bytes(r.payload[..4].try_into().unwrap()),
            code.0
        );
    }

    fn requests(&self) -> Vec<u32> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Request { stream, .. } => Some(*stream),
                _ => None,
            })
            .collect()
    }
}

fn window_update(stream: u32, inc: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &inc.to_be_bytes())
}

fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, v) in pairs {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&v.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &payload)
}

fn data_sent(frames: &[Frame], stream: u32) -> usize {
    frames
        .iter()
        .filter(|f| f.kind == DATA && f.stream == stream)
        .map(|f| f.payload.len())
        .sum()
}

// ---------------------------------------------------------------------------
// 3.4 HTTP/2 Connection Preface
// ---------------------------------------------------------------------------

#[test]
fn section_3_4_our_settings_go_first_and_theirs_are_acknowledged() {
    let mut conn = Connection::new(Settings::default());
    let mut out = Vec::new();
    conn.write_to(&mut out);
    let first = parse(&out);
    assert_eq!(first[0].kind, SETTINGS);
    assert_eq!(first[0].flags, 0);
    // ENABLE_PUSH 0 and MAX_CONCURRENT_STREAMS 128 among them.
    assert!(first[0].payload.chunks(6).any(|p| p == [0, 2, 0, 0, 0, 0]));
    assert!(first[0]
        .payload
        .chunks(6)
        .any(|p| p == [0, 3, 0, 0, 0, 128]));
    // The connection window opened to 1 MiB.
    assert_eq!(first[1].kind, WINDOW_UPDATE);
    let mut input = PREFACE.to_vec();
    input.extend(settings(&[]));
    assert_eq!(conn.recv(&input).unwrap(), input.len());
    out.clear();
    conn.write_to(&mut out);
    assert_eq!(
        parse(&out),
        vec![Frame {
            kind: SETTINGS,
            flags: ACK,
            stream: 0,
            payload: vec![]
        }]
    );
}

#[test]
fn section_3_4_a_preface_in_pieces_waits_for_the_rest() {
    let mut conn = Connection::new(Settings::default());
    assert_eq!(conn.recv(&PREFACE[..10]).unwrap(), 0);
    let mut input = PREFACE.to_vec();
    input.extend(&settings(&[])[..5]);
    assert_eq!(conn.recv(&input).unwrap(), 24);
}

#[test]
fn section_3_4_an_invalid_preface_is_a_protocol_error() {
    let mut conn = Connection::new(Settings::default());
    let e = conn.recv(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap_err();
    assert_eq!(e.reason(), Some(Reason::PROTOCOL_ERROR));
    assert!(conn.is_done());
}

#[test]
fn section_3_4_the_preface_not_followed_by_settings_is_a_protocol_error() {
    let mut conn = Connection::new(Settings::default());
    let mut input = PREFACE.to_vec();
    input.extend(frame(PING, 0, 0, &[0; 8]));
    assert_eq!(
        conn.recv(&input).unwrap_err().reason(),
        Some(Reason::PROTOCOL_ERROR)
    );
}

// ---------------------------------------------------------------------------
// 4 Frames
// ---------------------------------------------------------------------------

#[test]
fn section_4_1_an_unknown_frame_type_and_undefined_flags_are_ignored() {
    let mut p = Peer::new();
    p.send(&frame(0xfa, 0xff, 0, b"whatever"));
    p.send(&frame(PING, 0xfe, 0, &[1; 8]));
    assert!(p.error.is_none());
    assert_eq!(p.frames[0].kind, PING);
    assert_eq!(p.frames[0].flags, ACK);
}

#[test]
fn section_4_1_a_partial_frame_is_left_to_the_caller() {
    let mut p = Peer::new();
    let f = frame(HEADERS, END_HEADERS | END_STREAM, 1, GET);
    assert_eq!(p.conn.recv(&f[..7]).unwrap(), 0);
    assert_eq!(p.conn.recv(&f[..f.len() - 1]).unwrap(), 0);
    assert_eq!(p.conn.recv(&f).unwrap(), f.len());
}

#[test]
fn section_4_2_a_frame_over_max_frame_size_is_a_frame_size_error() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.send(&frame(DATA, 0, 1, &vec![0; 16_385]));
    p.expect_goaway(Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_4_2_data_of_16384_octets_is_accepted() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.send(&frame(DATA, 0, 1, &vec![7; 16_384]));
    assert!(p.error.is_none());
    assert!(matches!(p.events.last(), Some(Event::Data { data, .. }) if data.len() == 16_384));
}

#[test]
fn section_4_3_a_header_block_that_does_not_decode_is_a_compression_error() {
    let mut p = Peer::new();
    // A literal whose name says 10 octets and has 2.
    p.open(1, &[0x00, 0x0a, b'a', b'b'], true);
    p.expect_goaway(Reason::COMPRESSION_ERROR);
}

// ---------------------------------------------------------------------------
// 5.1 Stream States
// ---------------------------------------------------------------------------

#[test]
fn section_5_1_data_on_an_idle_stream_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(DATA, 0, 1, b"x"));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_5_1_rst_stream_on_an_idle_stream_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_5_1_window_update_on_an_idle_stream_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&window_update(1, 1));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_5_1_data_on_a_half_closed_remote_stream_is_stream_closed() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&frame(DATA, END_STREAM, 1, b"test"));
    p.expect_rst(1, Reason::STREAM_CLOSED);
    assert!(p.events.contains(&Event::Reset {
        stream: 1,
        reason: Reason::STREAM_CLOSED
    }));
}

#[test]
fn section_5_1_headers_on_a_half_closed_remote_stream_is_stream_closed() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.open(1, &lit("x-trailer", "1"), true);
    p.expect_rst(1, Reason::STREAM_CLOSED);
}

#[test]
fn section_5_1_data_on_a_closed_stream_is_stream_closed() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.conn.send_headers(1, 204, &[], true).unwrap();
    p.send(&frame(DATA, END_STREAM, 1, b"test"));
    p.expect_rst(1, Reason::STREAM_CLOSED);
}

#[test]
fn section_5_1_headers_on_a_closed_stream_is_a_connection_error() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.conn.send_headers(1, 204, &[], true).unwrap();
    p.open(1, GET, true);
    p.expect_goaway(Reason::STREAM_CLOSED);
}

#[test]
fn section_5_1_frames_on_a_stream_we_reset_are_dropped() {
    // Frames the peer sent before our RST_STREAM reached it (§5.4.2).
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.conn.reset(1, Reason::CANCEL);
    p.send(&frame(DATA, 0, 1, b"late"));
    p.open(1, &lit("x-trailer", "1"), true);
    assert!(p.error.is_none());
    assert_eq!(p.frames.iter().filter(|f| f.kind == RST_STREAM).count(), 1);
}

#[test]
fn section_5_1_1_an_even_stream_id_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(2, GET, true);
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_5_1_1_a_decreasing_stream_id_is_an_error() {
    let mut p = Peer::new();
    p.open(5, GET, true);
    p.open(3, GET, true);
    assert!(p.error.is_some());
}

#[test]
fn section_5_1_2_streams_past_the_concurrency_limit_are_refused() {
    let mut p = Peer::with_settings(
        Settings {
            max_concurrent_streams: 2,
            ..Settings::default()
        },
        &[],
    );
    p.open(1, GET, true);
    p.open(3, GET, true);
    p.open(5, GET, true);
    p.expect_rst(5, Reason::REFUSED_STREAM);
    assert_eq!(p.requests(), vec![1, 3]);
    assert_eq!(p.conn.stats().streams_refused, 1);
    // One answered, the next fits again.
    p.conn.send_headers(1, 204, &[], true).unwrap();
    p.open(7, GET, true);
    assert_eq!(p.requests(), vec![1, 3, 7]);
}

#[test]
fn section_5_3_1_headers_depending_on_itself_is_a_protocol_error() {
    let mut p = Peer::new();
    let mut payload = vec![0, 0, 0, 1, 16];
    payload.extend_from_slice(GET);
    p.send(&frame(
        HEADERS,
        END_HEADERS | END_STREAM | PRIORITY_FLAG,
        1,
        &payload,
    ));
    p.expect_rst(1, Reason::PROTOCOL_ERROR);
    assert!(p.requests().is_empty());
}

#[test]
fn section_5_3_1_priority_depending_on_itself_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(PRIORITY, 0, 3, &[0, 0, 0, 3, 16]));
    p.expect_rst(3, Reason::PROTOCOL_ERROR);
}

#[test]
fn section_5_3_2_priorities_are_parsed_and_ignored() {
    let mut p = Peer::new();
    p.send(&frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16]));
    let mut payload = vec![0x80, 0, 0, 3, 200];
    payload.extend_from_slice(GET);
    p.send(&frame(
        HEADERS,
        END_HEADERS | END_STREAM | PRIORITY_FLAG,
        1,
        &payload,
    ));
    assert!(p.error.is_none());
    assert_eq!(p.requests(), vec![1]);
}

// ---------------------------------------------------------------------------
// 6.1 DATA, 6.2 HEADERS, 6.3 PRIORITY, 6.4 RST_STREAM
// ---------------------------------------------------------------------------

#[test]
fn section_6_1_data_on_stream_0_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(DATA, 0, 0, b"x"));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_1_data_with_invalid_pad_length_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.send(&frame(DATA, PADDED, 1, &[6, b't', b'e', b's', b't']));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_1_padding_is_left_out_of_the_data() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    let payload = [3, b'a', b'b', 0, 0, 0];
    let f = frame(DATA, PADDED | END_STREAM, 1, &payload);
    p.send(&f);
    let Some(Event::Data {
        data,
        end_stream: true,
        ..
    }) = p.events.last().cloned()
    else {
        panic!("{:?}", p.events)
    };
    assert_eq!(&f[data], b"ab");
}

#[test]
fn section_6_2_headers_on_stream_0_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(0, GET, true);
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_2_headers_with_invalid_pad_length_is_a_protocol_error() {
    let mut p = Peer::new();
    let mut payload = vec![50];
    payload.extend_from_slice(GET);
    p.send(&frame(
        HEADERS,
        END_HEADERS | END_STREAM | PADDED,
        1,
        &payload,
    ));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_2_padded_headers_are_read() {
    let mut p = Peer::new();
    let mut payload = vec![4];
    payload.extend_from_slice(GET);
    payload.extend_from_slice(&[0; 4]);
    p.send(&frame(
        HEADERS,
        END_HEADERS | END_STREAM | PADDED,
        1,
        &payload,
    ));
    assert_eq!(p.requests(), vec![1]);
}

#[test]
fn section_6_3_priority_on_stream_0_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(PRIORITY, 0, 0, &[0, 0, 0, 1, 16]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_3_priority_of_wrong_length_is_a_frame_size_error() {
    let mut p = Peer::new();
    p.send(&frame(PRIORITY, 0, 1, &[0, 0, 0, 1]));
    p.expect_rst(1, Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_6_4_rst_stream_of_wrong_length_is_a_frame_size_error() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 0, 8]));
    p.expect_goaway(Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_6_4_rst_stream_on_stream_0_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(RST_STREAM, 0, 0, &[0, 0, 0, 8]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_4_a_reset_is_reported_and_sending_on_it_fails() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    assert!(p.events.contains(&Event::Reset {
        stream: 1,
        reason: Reason::CANCEL
    }));
    assert_eq!(
        p.conn.send_headers(1, 200, &[], true),
        Err(Error::StreamClosed(1))
    );
    assert_eq!(p.conn.open_streams(), 0);
}

// ---------------------------------------------------------------------------
// 6.5 SETTINGS
// ---------------------------------------------------------------------------

#[test]
fn section_6_5_settings_ack_with_payload_is_a_frame_size_error() {
    let mut p = Peer::new();
    p.send(&frame(SETTINGS, ACK, 0, &[0; 6]));
    p.expect_goaway(Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_6_5_settings_on_a_stream_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(SETTINGS, 0, 1, &[]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_5_settings_of_wrong_length_is_a_frame_size_error() {
    let mut p = Peer::new();
    p.send(&frame(SETTINGS, 0, 0, &[0, 3, 0, 0]));
    p.expect_goaway(Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_6_5_2_enable_push_of_2_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&settings(&[(2, 2)]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_5_2_initial_window_size_over_2_31_is_a_flow_control_error() {
    let mut p = Peer::new();
    p.send(&settings(&[(4, 1 << 31)]));
    p.expect_goaway(Reason::FLOW_CONTROL_ERROR);
}

#[test]
fn section_6_5_2_max_frame_size_out_of_range_is_a_protocol_error() {
    for bad in [16_383, 1 << 24] {
        let mut p = Peer::new();
        p.send(&settings(&[(5, bad)]));
        p.expect_goaway(Reason::PROTOCOL_ERROR);
    }
}

#[test]
fn section_6_5_2_an_unknown_setting_is_ignored_and_acknowledged() {
    let mut p = Peer::new();
    p.send(&settings(&[(0xff, 7)]));
    assert!(p.error.is_none());
    assert_eq!(
        p.frames,
        vec![Frame {
            kind: SETTINGS,
            flags: ACK,
            stream: 0,
            payload: vec![]
        }]
    );
}

#[test]
fn section_6_5_2_the_peers_max_frame_size_splits_our_data() {
    let mut p = Peer::with_settings(Settings::default(), &[(5, 20_000), (4, 100_000)]);
    p.send(&window_update(0, 100_000));
    p.open(1, GET, true);
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, &vec![1; 50_000], true).unwrap(), 50_000);
    p.send(&[]);
    let sizes: Vec<usize> = p
        .frames
        .iter()
        .filter(|f| f.kind == DATA)
        .map(|f| f.payload.len())
        .collect();
    assert_eq!(sizes, vec![20_000, 20_000, 10_000]);
}

#[test]
fn section_6_5_3_of_several_values_the_last_counts() {
    let mut p = Peer::with_settings(Settings::default(), &[(4, 100), (4, 1)]);
    p.open(1, GET, true);
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"hello", true).unwrap(), 1);
}

// ---------------------------------------------------------------------------
// 6.7 PING, 6.8 GOAWAY
// ---------------------------------------------------------------------------

#[test]
fn section_6_7_ping_is_answered_with_the_same_data() {
    let mut p = Peer::new();
    p.send(&frame(PING, 0, 0, b"abcdefgh"));
    assert_eq!(
        p.frames,
        vec![Frame {
            kind: PING,
            flags: ACK,
            stream: 0,
            payload: b"abcdefgh".to_vec()
        }]
    );
    assert_eq!(p.conn.stats().pings, 1);
}

#[test]
fn section_6_7_a_ping_ack_is_not_answered() {
    let mut p = Peer::new();
    p.send(&frame(PING, ACK, 0, b"abcdefgh"));
    assert!(p.frames.is_empty());
}

#[test]
fn section_6_7_ping_on_a_stream_or_of_wrong_length_is_an_error() {
    let mut p = Peer::new();
    p.send(&frame(PING, 0, 1, &[0; 8]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
    let mut p = Peer::new();
    p.send(&frame(PING, 0, 0, &[0; 6]));
    p.expect_goaway(Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_6_8_goaway_on_a_stream_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(GOAWAY, 0, 1, &[0; 8]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_8_the_peers_goaway_is_reported_and_streams_finish() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 0]));
    assert!(p.events.contains(&Event::GoAway {
        reason: Reason::NO_ERROR
    }));
    assert!(!p.conn.is_done());
    p.conn.send_headers(1, 204, &[], true).unwrap();
    assert!(p.conn.is_done());
}

#[test]
fn section_6_8_our_graceful_goaway_comes_in_two_steps_and_then_refuses_new_streams() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.open(3, GET, true);
    p.conn.goaway(true);
    // First the largest id and a PING: a stream the client opened before
    // it saw them is still taken.
    p.open(5, GET, true);
    let goaways: Vec<_> = p.frames.iter().filter(|f| f.kind == GOAWAY).collect();
    assert_eq!(goaways.len(), 1);
    assert_eq!(goaways[0].payload, [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    let ping = p.frames.iter().find(|f| f.kind == PING).unwrap();
    assert_eq!(ping.flags, 0, "our PING, not an ACK");
    assert!(
        !p.frames.iter().any(|f| f.kind == RST_STREAM),
        "stream 5 was taken"
    );
    // Its ACK: the GOAWAY naming the last stream taken; newer ones refused.
    let payload = ping.payload.clone();
    p.send(&frame(PING, 0x1, 0, &payload));
    let g = p.frames.iter().rev().find(|f| f.kind == GOAWAY).unwrap();
    assert_eq!(g.payload, [0, 0, 0, 5, 0, 0, 0, 0]);
    p.open(7, GET, true);
    p.expect_rst(7, Reason::REFUSED_STREAM);
    for id in [1, 3] {
        p.conn.send_headers(id, 204, &[], true).unwrap();
    }
    assert!(!p.conn.is_done());
    p.conn.send_headers(5, 204, &[], true).unwrap();
    assert!(p.conn.is_done());
}

#[test]
fn section_6_8_a_client_that_does_not_ack_the_stop_ping_gets_the_last_goaway_at_the_second_call() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.conn.goaway(true);
    p.conn.goaway(true);
    p.send(&[]); // takes the output
    let goaways: Vec<_> = p.frames.iter().filter(|f| f.kind == GOAWAY).collect();
    assert_eq!(goaways.len(), 2);
    assert_eq!(goaways[1].payload, [0, 0, 0, 1, 0, 0, 0, 0]);
    p.conn.send_headers(1, 204, &[], true).unwrap();
    assert!(p.conn.is_done());
}

// ---------------------------------------------------------------------------
// 6.9 WINDOW_UPDATE and flow control
// ---------------------------------------------------------------------------

#[test]
fn section_6_9_window_update_of_0_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&window_update(0, 0));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&window_update(1, 0));
    p.expect_rst(1, Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_9_window_update_of_wrong_length_is_a_frame_size_error() {
    let mut p = Peer::new();
    p.send(&frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1]));
    p.expect_goaway(Reason::FRAME_SIZE_ERROR);
}

#[test]
fn section_6_9_1_windows_over_2_31_are_flow_control_errors() {
    let mut p = Peer::new();
    p.send(&window_update(0, 0x7fff_ffff));
    p.expect_goaway(Reason::FLOW_CONTROL_ERROR);
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&window_update(1, 0x7fff_ffff));
    p.expect_rst(1, Reason::FLOW_CONTROL_ERROR);
}

#[test]
fn section_6_9_1_we_keep_to_a_window_of_1_and_say_when_it_opens() {
    let mut p = Peer::with_settings(Settings::default(), &[(4, 1)]);
    p.open(1, GET, true);
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"hello", true).unwrap(), 1);
    assert_eq!(p.conn.send_data(1, b"ello", true).unwrap(), 0);
    p.send(&window_update(1, 10));
    assert!(p.events.contains(&Event::SendCapacity { stream: 1 }));
    assert_eq!(p.conn.send_capacity(1), 10);
    assert_eq!(p.conn.send_data(1, b"ello", true).unwrap(), 4);
    p.send(&[]);
    assert_eq!(data_sent(&p.frames, 1), 5);
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn section_6_9_1_data_past_our_windows_is_a_flow_control_error() {
    // Stream window 100 (acknowledged), connection window 65,535.
    let ours = Settings {
        initial_window_size: 100,
        connection_window_size: 65_535,
        ..Settings::default()
    };
    let mut p = Peer::with_settings(ours.clone(), &[]);
    p.open(1, POST, false);
    p.send(&frame(DATA, 0, 1, &[0; 101]));
    p.expect_rst(1, Reason::FLOW_CONTROL_ERROR);
    // The stream's window is 1 MiB, the connection's 65,535: the fourth
    // frame of 16,384 overruns the connection's.
    let ours = Settings {
        initial_window_size: 1 << 20,
        connection_window_size: 65_535,
        ..Settings::default()
    };
    let mut p = Peer::with_settings(ours, &[]);
    p.open(1, POST, false);
    for _ in 0..3 {
        p.send(&frame(DATA, 0, 1, &[0; 16_384]));
    }
    assert!(p.error.is_none());
    p.send(&frame(DATA, 0, 1, &[0; 16_384]));
    p.expect_goaway(Reason::FLOW_CONTROL_ERROR);
}

#[test]
fn section_6_9_1_released_body_opens_our_windows_again() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.send(&frame(DATA, 0, 1, &[0; 16_384]));
    p.send(&frame(DATA, 0, 1, &[0; 16_384]));
    assert!(p.frames.iter().all(|f| f.kind != WINDOW_UPDATE));
    p.conn.release_capacity(1, 32_768);
    p.send(&[]);
    let updates: Vec<_> = p
        .frames
        .iter()
        .filter(|f| f.kind == WINDOW_UPDATE)
        .collect();
    assert_eq!(
        updates.len(),
        1,
        "the stream's (the connection's comes at half of 1 MiB)"
    );
    assert_eq!(updates[0].stream, 1);
    assert_eq!(updates[0].payload, 32_768u32.to_be_bytes());
}

#[test]
fn section_6_9_2_an_initial_window_change_applies_to_open_streams_and_may_go_negative() {
    let mut p = Peer::with_settings(Settings::default(), &[(4, 3)]);
    p.open(1, GET, true);
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"abc", false).unwrap(), 3);
    // 3 → 2: the window is now -1.
    p.send(&settings(&[(4, 2)]));
    assert_eq!(p.conn.send_capacity(1), 0);
    p.send(&window_update(1, 2));
    assert_eq!(p.conn.send_capacity(1), 1);
}

// ---------------------------------------------------------------------------
// 6.10 CONTINUATION
// ---------------------------------------------------------------------------

#[test]
fn section_6_10_continuations_make_one_header_block() {
    let mut p = Peer::new();
    let block = with(GET, &lit("x-long", &"v".repeat(100)));
    p.send(&frame(HEADERS, END_STREAM, 1, &block[..3]));
    p.send(&frame(CONTINUATION, 0, 1, &block[3..50]));
    assert!(p.events.is_empty());
    p.send(&frame(CONTINUATION, END_HEADERS, 1, &block[50..]));
    let Some(Event::Request {
        head,
        end_stream: true,
        ..
    }) = p.events.first()
    else {
        panic!("{:?}", p.events)
    };
    assert_eq!(head.fields().get(b"x-long").unwrap().len(), 100);
}

#[test]
fn section_6_10_a_header_block_interrupted_is_a_protocol_error() {
    for interruption in [
        frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16]),
        frame(HEADERS, END_HEADERS, 3, GET),
        frame(CONTINUATION, END_HEADERS, 3, GET),
        frame(0xfa, 0, 0, b"x"),
        frame(DATA, 0, 1, b"x"),
    ] {
        let mut p = Peer::new();
        p.send(&frame(HEADERS, END_STREAM, 1, GET));
        p.send(&interruption);
        p.expect_goaway(Reason::PROTOCOL_ERROR);
    }
}

#[test]
fn section_6_10_continuation_without_a_header_block_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    p.send(&frame(CONTINUATION, END_HEADERS, 1, &lit("x-a", "1")));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_10_our_large_head_is_split_into_continuations() {
    let mut p = Peer::new();
    p.open(1, GET, true);
    let big = "v".repeat(40_000);
    p.conn
        .send_headers(1, 200, &[(b"x-big", big.as_bytes())], true)
        .unwrap();
    p.send(&[]);
    let kinds: Vec<(u8, u8)> = p.frames.iter().map(|f| (f.kind, f.flags)).collect();
    assert_eq!(
        kinds,
        vec![
            (HEADERS, END_STREAM),
            (CONTINUATION, 0),
            (CONTINUATION, END_HEADERS)
        ]
    );
}

// ---------------------------------------------------------------------------
// 8 HTTP semantics
// ---------------------------------------------------------------------------

#[test]
fn section_8_1_trailers_end_the_body() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.send(&frame(DATA, 0, 1, b"body"));
    p.open(1, &lit("x-checksum", "42"), true);
    let Some(Event::Trailers { stream: 1, fields }) = p.events.last() else {
        panic!("{:?}", p.events)
    };
    assert_eq!(fields.get(b"x-checksum"), Some(&b"42"[..]));
}

#[test]
fn section_8_1_a_second_headers_without_end_stream_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.open(1, &lit("x-trailer", "1"), false);
    p.expect_rst(1, Reason::PROTOCOL_ERROR);
}

#[test]
fn section_8_1_a_pseudo_header_in_trailers_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.open(1, &[0x84], true);
    p.expect_rst(1, Reason::PROTOCOL_ERROR);
}

#[test]
fn section_8_1_a_complete_response_stops_the_request_with_no_error() {
    let mut p = Peer::new();
    p.open(1, POST, false);
    p.conn.send_headers(1, 413, &[], true).unwrap();
    p.send(&[]);
    p.expect_rst(1, Reason::NO_ERROR);
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn section_8_1_1_a_malformed_request_is_reset_and_never_reported() {
    for bad in [
        with(GET, &lit("Upper", "x")),
        with(GET, &lit("connection", "close")),
        with(GET, &lit("te", "gzip")),
        with(GET, &[0x88]), // :status
        with(&lit("x-a", "1"), GET),
        vec![0x82, 0x86, 0x41, 0x01, b'a'], // no :path
    ] {
        let mut p = Peer::new();
        p.open(1, &bad, true);
        p.expect_rst(1, Reason::PROTOCOL_ERROR);
        assert!(p.events.is_empty(), "{:?}", p.events);
    }
}

#[test]
fn section_8_1_1_content_length_unlike_the_data_is_a_protocol_error() {
    let mut p = Peer::new();
    p.open(1, &with(POST, &lit("content-length", "3")), false);
    p.send(&frame(DATA, END_STREAM, 1, b"four"));
    p.expect_rst(1, Reason::PROTOCOL_ERROR);
    assert!(p.events.contains(&Event::Reset {
        stream: 1,
        reason: Reason::PROTOCOL_ERROR
    }));
    let mut p = Peer::new();
    p.open(1, &with(POST, &lit("content-length", "5")), false);
    p.send(&frame(DATA, 0, 1, b"ab"));
    p.send(&frame(DATA, END_STREAM, 1, b"c"));
    p.expect_rst(1, Reason::PROTOCOL_ERROR);
    let mut p = Peer::new();
    p.open(1, &with(POST, &lit("content-length", "2")), false);
    p.send(&frame(DATA, 0, 1, b"a"));
    p.send(&frame(DATA, END_STREAM, 1, b"b"));
    assert!(p.frames.iter().all(|f| f.kind != RST_STREAM));
}

#[test]
fn section_8_4_push_promise_from_a_client_is_a_protocol_error() {
    let mut p = Peer::new();
    p.send(&frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82]));
    p.expect_goaway(Reason::PROTOCOL_ERROR);
}

#[test]
fn section_6_5_2_a_head_over_max_header_list_size_is_reported() {
    let mut p = Peer::with_settings(
        Settings {
            max_header_list_size: 100,
            ..Settings::default()
        },
        &[],
    );
    p.open(1, &with(GET, &lit("x-big", &"a".repeat(120))), false);
    assert_eq!(p.events, vec![Event::HeadersTooLarge { stream: 1 }]);
    // Its body is discarded, the answer goes out, the stream is stopped.
    p.send(&frame(DATA, END_STREAM, 1, b"ignored"));
    assert_eq!(p.events.len(), 1);
    p.conn.send_headers(1, 431, &[], true).unwrap();
    assert_eq!(p.conn.open_streams(), 0);
}

// ---------------------------------------------------------------------------
// Floods, each cut with ENHANCE_YOUR_CALM and counted
// ---------------------------------------------------------------------------

fn flood(frames: impl Iterator<Item = Vec<u8>>, setup: impl FnOnce(&mut Peer)) -> Peer {
    let mut p = Peer::new();
    setup(&mut p);
    for f in frames {
        p.send(&f);
        if p.error.is_some() {
            break;
        }
    }
    p.expect_goaway(Reason::ENHANCE_YOUR_CALM);
    p
}

#[test]
fn a_ping_flood_is_cut_after_10000() {
    let p = flood((0..20_000).map(|_| frame(PING, 0, 0, &[0; 8])), |_| {});
    // 10,000 frames that carry no request, the handshake's SETTINGS among them.
    assert_eq!(p.conn.stats().pings, 9_999);
    assert_eq!(p.conn.stats().control_floods, 1);
}

#[test]
fn a_settings_flood_is_cut_after_10000() {
    let p = flood((0..20_000).map(|_| settings(&[])), |_| {});
    // The handshake's SETTINGS counts as well.
    assert_eq!(p.conn.stats().settings, 10_000);
    assert_eq!(p.conn.stats().control_floods, 1);
}

#[test]
fn an_empty_data_flood_is_cut() {
    let p = flood((0..20_000).map(|_| frame(DATA, 0, 1, &[])), |p| {
        p.open(1, POST, false)
    });
    assert_eq!(p.conn.stats().empty_frame_floods, 1);
}

#[test]
fn an_endless_continuation_is_cut() {
    let chunk = lit("x-flood", &"a".repeat(200));
    let frames = std::iter::once(frame(HEADERS, END_STREAM, 1, GET))
        .chain((0..10_000).map(|_| frame(CONTINUATION, 0, 1, &chunk)));
    let p = flood(frames, |_| {});
    assert_eq!(p.conn.stats().continuation_floods, 1);
}

#[test]
fn rapid_reset_is_cut() {
    let frames = (0..1_000u32).flat_map(|i| {
        let id = 1 + 2 * i;
        [
            frame(HEADERS, END_HEADERS | END_STREAM, id, GET),
            frame(RST_STREAM, 0, id, &[0, 0, 0, 8]),
        ]
    });
    let p = flood(frames, |_| {});
    assert_eq!(p.conn.stats().rapid_reset_floods, 1);
    assert_eq!(p.conn.stats().streams_reset_by_peer, 101);
}

#[test]
fn streams_answered_in_full_are_no_rapid_reset() {
    let mut p = Peer::new();
    for i in 0..1_000u32 {
        let id = 1 + 2 * i;
        p.open(id, GET, true);
        if i % 2 == 0 {
            p.send(&frame(RST_STREAM, 0, id, &[0, 0, 0, 8]));
        } else {
            p.conn.send_headers(id, 204, &[], true).unwrap();
        }
    }
    assert!(p.error.is_none(), "{:?}", p.error);
}

#[test]
fn malformed_requests_past_the_limit_are_cut() {
    let bad = with(GET, &lit("Upper", "x"));
    let frames = (0..2_000u32).map(|i| frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, &bad));
    let p = flood(frames, |_| {});
    assert_eq!(p.conn.stats().local_reset_floods, 1);
}
