//! HTTP/2 conformance: one test per requirement of RFC 9113 and RFC 7541
//! that h2spec checks, named by h2spec's section (RFC 7540's numbering,
//! which h2spec keeps; the RFC 9113 section is said where it moved), plus
//! the floods issue 28 names (rapid reset, a CONTINUATION that never ends,
//! SETTINGS and PING floods, a zero window that never opens). The cases
//! are our own, written from the RFCs; the raw-frame client is
//! `tests/src/h2/`.
//!
//! Each case is a function of a [`Target`] (address, transport), so every
//! case runs
//! - `ours::CASE`: against `mpm serve` under each model in [`H2_MPMS`],
//!   over h2c with prior knowledge (`--h2c on`) and over TLS with ALPN
//!   `h2`, one server per model and transport shared by the cases (the
//!   floods get a server of their own, so that one that falls over takes
//!   no other case with it);
//! - `external::CASE`: by hand against any h2c server, ignored unless asked:
//!   `MPM_H2_TARGET=127.0.0.1:8080 cargo test -p tests --test h2_conformance
//!   external -- --ignored` (`MPM_H2_PATH`, default `/`, is a path it
//!   answers with 200 and a body of 5 octets or more; `MPM_H2_BIG_PATH`,
//!   default `/big.bin`, one with a body of more than 64 KiB; with
//!   `MPM_H2_CA=ca.pem`, the authority that signed its certificate for
//!   `localhost`, the target is a TLS server and the cases speak h2 by
//!   ALPN).
//!
//! A case that expects an error reads until the error the RFC names, or
//! the close, and fails on anything else: another error, or silence for
//! [`ANSWER_TIMEOUT`]. A case that expects the connection to carry on sends
//! a PING and waits for its ACK: the server handles frames in order, so an
//! error the frames before it provoked would come first. Nothing sleeps.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tests::h2::hpack::{self, huffman_bits, Indexing, Name, Str, HUFFMAN_A, HUFFMAN_EOS};
use tests::h2::{
    code, flag, kind, setting, Event, Field, Frame, H2Conn, Target, ANSWER_TIMEOUT, PREFACE,
};
use tests::{site, with_transport, Server, TempDir, Transport};

/// The process models that serve HTTP/2: the `ours` tests run every case
/// under each. A model left out must not offer `h2` in ALPN
/// (`models_without_h2_offer_only_http_1_1_in_alpn`).
const H2_MPMS: &[&str] = &["worker", "event", "uring"];

/// Flags every server of ours is started with, plain listener: h2c.
const H2C_FLAGS: &[&str] = &["--h2c", "on"];
/// Flags of the servers the floods run against: a short send timeout, so
/// that a zero window that never opens is cut within the case's wait.
const FLOOD_FLAGS: &[&str] = &["--timeout", "2"];
/// The size of `/big.bin` in our servers' document root: more than the
/// connection's initial window of 65,535 octets.
const BIG_LEN: usize = 256 << 10;
/// How long a case waits for a server to give up on a stalled stream.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Running a case against our server or another
// ---------------------------------------------------------------------------

/// Servers shared by the cases of this process, by (model, TLS), with their
/// document roots; None where the binary has no HTTP/2 yet. Stopped at exit.
type Shared = HashMap<(String, bool), Option<(Server, TempDir)>>;
static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

extern "C" fn stop_shared() {
    if let Ok(mut shared) = SHARED.lock() {
        shared.take();
    }
}

/// Start `mpm serve --mpm MPM` with h2c (plain) or TLS, the suite's site
/// (and `/big.bin`) as its document root; None if this build of the
/// server refuses `--h2c` (HTTP/2 not there yet), which is said once per
/// test process.
fn start(mpm: &str, tls: bool, extra: &[&str]) -> Option<(Server, TempDir)> {
    let root = site::docroot();
    root.write("big.bin", &tests::pattern(BIG_LEN, 28));
    let mut args: Vec<&str> = extra.to_vec();
    if !tls {
        args.extend_from_slice(H2C_FLAGS);
    }
    let transport = if tls {
        Transport::Tls
    } else {
        Transport::Plain
    };
    match with_transport(transport, || {
        Server::try_start(mpm, Some(root.path()), &args)
    }) {
        Ok(server) => Some((server, root)),
        Err(e) if !tls && e.contains("--h2c") => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                let why = e.lines().find(|l| l.contains("--h2c")).unwrap_or(&e);
                tests::skip(&format!(
                    "every ours:: case: this mpm refuses `--h2c on`: {why}"
                ));
            });
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Does this build of `mpm` serve HTTP/2 under `mpm`? (The shared h2c
/// server started, or not, tells.)
fn serves_h2(mpm: &str) -> bool {
    shared(mpm, false).is_some()
}

fn target_of(server: &Server, tls: bool) -> Target {
    let mut t = if tls {
        Target::tls(server.addr())
    } else {
        Target::h2c(server.addr())
    };
    t.path = "/hello.txt".to_string();
    t.big_path = "/big.bin".to_string();
    t
}

/// The shared server of (`mpm`, `tls`), started on first use.
fn shared(mpm: &str, tls: bool) -> Option<Target> {
    let mut guard = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(|| {
        let _ = mpm_sys::at_exit::at_exit(stop_shared);
        HashMap::new()
    });
    if tls && matches!(map.get(&(mpm.to_string(), false)), Some(None)) {
        return None;
    }
    if !map.contains_key(&(mpm.to_string(), tls)) {
        // The plain server first: it is the one that tells whether this
        // build has HTTP/2 at all.
        if tls && !map.contains_key(&(mpm.to_string(), false)) {
            let plain = start(mpm, false, &[]);
            let none = plain.is_none();
            map.insert((mpm.to_string(), false), plain);
            if none {
                return None;
            }
        }
        let started = start(mpm, tls, &[]);
        map.insert((mpm.to_string(), tls), started);
    }
    map[&(mpm.to_string(), tls)]
        .as_ref()
        .map(|(server, _)| target_of(server, tls))
}

/// Run `case` against our server under every model of [`H2_MPMS`], over
/// h2c and over TLS.
fn against_ours(case: fn(&Target)) {
    for mpm in H2_MPMS {
        for tls in [false, true] {
            let Some(target) = shared(mpm, tls) else {
                return;
            };
            eprintln!(
                "--- {mpm} over {}",
                if tls { "TLS (ALPN h2)" } else { "h2c" }
            );
            case(&target);
        }
    }
}

/// Run the flood `case` against a server of its own under every model of
/// [`H2_MPMS`], over h2c and over TLS.
fn flood_ours(case: fn(&Target)) {
    for mpm in H2_MPMS {
        for tls in [false, true] {
            if !serves_h2(mpm) {
                return;
            }
            let Some((server, _root)) = start(mpm, tls, FLOOD_FLAGS) else {
                return;
            };
            eprintln!(
                "--- {mpm} over {}",
                if tls { "TLS (ALPN h2)" } else { "h2c" }
            );
            case(&target_of(&server, tls));
        }
    }
}

/// Run `case` against the server at `MPM_H2_TARGET`: h2c, or TLS with
/// ALPN `h2` when `MPM_H2_CA` names the authority (PEM) that signed its
/// certificate for `localhost`.
fn against_external(case: fn(&Target)) {
    let addr: SocketAddr = std::env::var("MPM_H2_TARGET")
        .ok()
        .and_then(|a| a.parse().ok())
        .expect("set MPM_H2_TARGET=HOST:PORT, the address of an h2c (prior knowledge) server");
    let mut target = match std::env::var_os("MPM_H2_CA") {
        Some(ca) => Target {
            ca: Some(ca.into()),
            ..Target::tls(addr)
        },
        None => Target::h2c(addr),
    };
    if let Ok(path) = std::env::var("MPM_H2_PATH") {
        target.path = path;
    }
    if let Ok(path) = std::env::var("MPM_H2_BIG_PATH") {
        target.big_path = path;
    }
    case(&target);
}

macro_rules! cases {
    (conformance: [$($case:ident),* $(,)?] floods: [$($flood:ident),* $(,)?]) => {
        /// Each case against our server.
        mod ours {
            $( #[test] fn $case() { super::against_ours(super::$case) } )*
            $( #[test] fn $flood() { super::flood_ours(super::$flood) } )*
        }
        /// Each case against `MPM_H2_TARGET`.
        mod external {
            $(
                #[test]
                #[ignore = "runs against the h2c server at MPM_H2_TARGET"]
                fn $case() { super::against_external(super::$case) }
            )*
            $(
                #[test]
                #[ignore = "runs against the h2c server at MPM_H2_TARGET"]
                fn $flood() { super::against_external(super::$flood) }
            )*
        }
    };
}

// ---------------------------------------------------------------------------
// Helpers of the cases
// ---------------------------------------------------------------------------

fn hs(t: &Target) -> H2Conn {
    H2Conn::handshake(t)
}

/// A field of a header block by name.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Open stream 1 with a request that stays open both ways: no END_STREAM
/// from us, and from the server no end either, as its answer (the big
/// path's) is held by a stream window of 0 and, whatever a case opens that
/// window to, by the connection's window of 65,535 octets. `method` and
/// `extra` fields as given. For the cases that need an open stream; the
/// cases that send a body send it with a `GET` too, because a `POST` to a
/// static file may be answered at once (405, no body) and the stream reset
/// with NO_ERROR before the frames under test arrive.
fn held(t: &Target, method: &str, extra: &[Field]) -> H2Conn {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    let mut fields = t.pseudo(method, &t.big_path);
    fields.extend_from_slice(extra);
    c.send_headers(1, &hpack::encode(&fields), false);
    c
}

/// [`held`] with a `GET`.
fn open_stream(t: &Target) -> H2Conn {
    held(t, "GET", &[])
}

/// A block of the request's pseudo-fields with `edit` applied.
fn request_fields(t: &Target, edit: impl FnOnce(&mut Vec<Field>)) -> Vec<u8> {
    let mut fields = t.pseudo("GET", &t.path);
    edit(&mut fields);
    hpack::encode(&fields)
}

/// Send `block` as a whole request on stream 1 and expect the stream error
/// PROTOCOL_ERROR a malformed request gets (RFC 9113 section 8.1.1).
fn expect_malformed(t: &Target, block: &[u8]) {
    let mut c = hs(t);
    c.send_headers(1, block, true);
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 3.5 HTTP/2 Connection Preface (RFC 9113 3.4)
// ---------------------------------------------------------------------------

/// The server's preface is a SETTINGS frame, and it acknowledges ours.
fn section_3_5_client_preface_is_answered_with_settings(t: &Target) {
    let mut c = hs(t);
    c.expect_alive();
}

/// An invalid preface is a connection error PROTOCOL_ERROR: the server
/// closes, with or without a GOAWAY PROTOCOL_ERROR after its SETTINGS. On a
/// plain listener that also speaks HTTP/1.1 (ours with `--h2c on`), an
/// HTTP/1.1 error answer and the close will do as well: the octets were
/// never HTTP/2 to it.
fn section_3_5_invalid_preface_is_a_protocol_error(t: &Target) {
    let mut c = H2Conn::open(t);
    c.send_bytes(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
    c.send(&Frame::settings(&[]));
    let (got, closed) = c.read_until_close();
    assert!(
        closed,
        "the server kept the connection after an invalid preface (it sent {} octets)",
        got.len()
    );
    if !t.tls && got.starts_with(b"HTTP/1.") {
        let status = got.get(9..12).map(String::from_utf8_lossy);
        assert!(
            status
                .as_deref()
                .is_some_and(|s| s.starts_with('4') || s.starts_with('5')),
            "an HTTP/1 answer of {status:?} to an invalid preface"
        );
        return;
    }
    let mut rest = &got[..];
    while let Some((f, used)) = Frame::parse(rest) {
        rest = &rest[used..];
        if f.kind == kind::GOAWAY {
            let got = f.error_code().map_or(u32::MAX, |(_, c)| c);
            assert_eq!(
                got,
                code::PROTOCOL_ERROR,
                "GOAWAY {} after an invalid preface",
                code::name(got)
            );
        }
        assert!(
            matches!(f.kind, kind::SETTINGS | kind::WINDOW_UPDATE | kind::GOAWAY),
            "a frame of type {:#x} after an invalid preface",
            f.kind
        );
    }
}

// ---------------------------------------------------------------------------
// 4.1 Frame Format
// ---------------------------------------------------------------------------

/// A frame of unknown type is ignored.
fn section_4_1_unknown_frame_type_is_ignored(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(0x16, 0, 0, b"unknown type".to_vec()));
    c.expect_alive();
}

/// Undefined flags are ignored: a PING with them is a PING.
fn section_4_1_undefined_flags_are_ignored(t: &Target) {
    let mut c = hs(t);
    let data = *b"flagged!";
    c.send(&Frame::ping(0x16 | 0x80, data));
    c.expect_ping_ack(data);
}

/// The reserved bit of the stream identifier is ignored.
fn section_4_1_reserved_bit_is_ignored(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers(
        1 | 1 << 31,
        flag::END_HEADERS | flag::END_STREAM,
        &t.get(),
    ));
    let fields = c.expect_headers(1);
    assert!(
        field(&fields, ":status").is_some(),
        "no :status in {fields:?}"
    );
}

// ---------------------------------------------------------------------------
// 4.2 Frame Size
// ---------------------------------------------------------------------------

/// A DATA frame of 2^14 octets (the least SETTINGS_MAX_FRAME_SIZE) is
/// accepted.
fn section_4_2_data_of_16384_octets_is_accepted(t: &Target) {
    let mut c = hs(t);
    if c.peer.initial_window_size < 16_384 {
        eprintln!(
            "skipped: the server's initial window is {}",
            c.peer.initial_window_size
        );
        return;
    }
    c.send_headers(
        1,
        &t.post_with(&[Field::literal("content-length", "16384")]),
        false,
    );
    c.send(&Frame::data(1, flag::END_STREAM, &[b'x'; 16_384]));
    let fields = c.expect_headers(1);
    assert!(
        field(&fields, ":status").is_some(),
        "no :status in {fields:?}"
    );
}

/// A DATA frame longer than SETTINGS_MAX_FRAME_SIZE is a FRAME_SIZE_ERROR.
fn section_4_2_data_over_max_frame_size_is_a_frame_size_error(t: &Target) {
    let mut c = held(t, "GET", &[]);
    let len = c.peer.max_frame_size + 1;
    c.send(&Frame::data(1, flag::END_STREAM, &vec![b'x'; len]));
    c.expect_stream_error(1, code::FRAME_SIZE_ERROR);
}

/// A HEADERS frame longer than SETTINGS_MAX_FRAME_SIZE is a connection
/// error FRAME_SIZE_ERROR (a header block changes the connection's state).
fn section_4_2_headers_over_max_frame_size_is_a_connection_frame_size_error(t: &Target) {
    let mut c = hs(t);
    let len = c.peer.max_frame_size + 1;
    let mut block = t.get();
    let filler = len - block.len() - 16;
    block.extend(hpack::encode(&[Field::literal(
        "x-filler",
        vec![b'a'; filler],
    )]));
    block.resize(len, 0x80 | 2);
    c.send(&Frame::headers(
        1,
        flag::END_HEADERS | flag::END_STREAM,
        &block,
    ));
    c.expect_connection_error(code::FRAME_SIZE_ERROR);
}

// ---------------------------------------------------------------------------
// 4.3 Header Compression and Decompression
// ---------------------------------------------------------------------------

/// A header block that does not decode is a connection error
/// COMPRESSION_ERROR.
fn section_4_3_invalid_header_block_is_a_compression_error(t: &Target) {
    let mut c = hs(t);
    let mut block = t.get();
    // A literal whose name says 10 octets and has 2.
    block.extend_from_slice(&[0x00, 0x0a, b'x', b'y']);
    c.send_headers(1, &block, true);
    c.expect_connection_error(code::COMPRESSION_ERROR);
}

/// A PRIORITY frame inside a header block is a connection error
/// PROTOCOL_ERROR (only CONTINUATION of the same stream may follow).
fn section_4_3_priority_inside_a_header_block_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers(1, flag::END_STREAM, &t.get()));
    c.send(&Frame::priority(1, 0, 255));
    c.send(&Frame::continuation(1, flag::END_HEADERS, &[]));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// HEADERS of another stream inside a header block is a connection error
/// PROTOCOL_ERROR.
fn section_4_3_headers_of_another_stream_inside_a_header_block_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers(1, flag::END_STREAM, &t.get()));
    c.send(&Frame::headers(
        3,
        flag::END_STREAM | flag::END_HEADERS,
        &t.get(),
    ));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 5.1 Stream States
// ---------------------------------------------------------------------------

/// idle: DATA is a PROTOCOL_ERROR (5.1) or STREAM_CLOSED (6.1) error.
fn section_5_1_idle_data_is_an_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::data(1, flag::END_STREAM, b"test"));
    c.expect_stream_error_of(1, &[code::PROTOCOL_ERROR, code::STREAM_CLOSED]);
}

/// idle: RST_STREAM is a connection error PROTOCOL_ERROR.
fn section_5_1_idle_rst_stream_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::rst_stream(1, code::CANCEL));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// idle: WINDOW_UPDATE is a connection error PROTOCOL_ERROR.
fn section_5_1_idle_window_update_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::window_update(1, 100));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// idle: CONTINUATION is a connection error PROTOCOL_ERROR.
fn section_5_1_idle_continuation_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::continuation(1, flag::END_HEADERS, &t.get()));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// half-closed (remote): DATA is a stream error STREAM_CLOSED.
fn section_5_1_half_closed_remote_data_is_stream_closed(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_headers(1, &t.get(), true);
    c.send(&Frame::data(1, flag::END_STREAM, b"test"));
    c.expect_stream_error(1, code::STREAM_CLOSED);
}

/// half-closed (remote): HEADERS is a stream error STREAM_CLOSED.
fn section_5_1_half_closed_remote_headers_is_stream_closed(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_headers(1, &t.get(), true);
    c.send_headers(1, &hpack::encode(&[Field::literal("x-trailer", "1")]), true);
    c.expect_stream_error(1, code::STREAM_CLOSED);
}

/// half-closed (remote): CONTINUATION is a STREAM_CLOSED or (no header
/// block being open) PROTOCOL_ERROR error.
fn section_5_1_half_closed_remote_continuation_is_an_error(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_headers(1, &t.get(), true);
    c.send(&Frame::continuation(
        1,
        flag::END_HEADERS,
        &hpack::encode(&[Field::literal("x-a", "1")]),
    ));
    c.expect_stream_error_of(1, &[code::STREAM_CLOSED, code::PROTOCOL_ERROR]);
}

/// closed by our RST_STREAM: DATA is a stream error STREAM_CLOSED.
fn section_5_1_closed_data_after_rst_stream_is_stream_closed(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::rst_stream(1, code::CANCEL));
    c.send(&Frame::data(1, flag::END_STREAM, b"test"));
    c.expect_stream_error(1, code::STREAM_CLOSED);
}

/// closed by our RST_STREAM: HEADERS is a stream error STREAM_CLOSED.
fn section_5_1_closed_headers_after_rst_stream_is_stream_closed(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::rst_stream(1, code::CANCEL));
    c.send_headers(1, &hpack::encode(&[Field::literal("x-trailer", "1")]), true);
    c.expect_stream_error(1, code::STREAM_CLOSED);
}

/// closed by our RST_STREAM: CONTINUATION is a STREAM_CLOSED or
/// PROTOCOL_ERROR error.
fn section_5_1_closed_continuation_after_rst_stream_is_an_error(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::rst_stream(1, code::CANCEL));
    c.send(&Frame::continuation(
        1,
        flag::END_HEADERS,
        &hpack::encode(&[Field::literal("x-a", "1")]),
    ));
    c.expect_stream_error_of(1, &[code::STREAM_CLOSED, code::PROTOCOL_ERROR]);
}

/// A request answered whole, so that stream 1 is closed both ways.
fn closed_stream(t: &Target) -> H2Conn {
    let mut c = hs(t);
    c.send_headers(1, &t.get(), true);
    c.expect_response(1);
    c
}

/// closed: DATA is a stream error STREAM_CLOSED.
fn section_5_1_closed_data_is_stream_closed(t: &Target) {
    let mut c = closed_stream(t);
    c.send(&Frame::data(1, flag::END_STREAM, b"test"));
    c.expect_stream_error(1, code::STREAM_CLOSED);
}

/// closed: HEADERS is a connection error STREAM_CLOSED (RFC 9113 5.1;
/// PROTOCOL_ERROR too, as a reused identifier, 5.1.1).
fn section_5_1_closed_headers_is_a_connection_error(t: &Target) {
    let mut c = closed_stream(t);
    c.send_headers(1, &t.get(), true);
    c.expect_connection_error_of(&[code::STREAM_CLOSED, code::PROTOCOL_ERROR]);
}

/// closed: CONTINUATION is a connection error (no header block is open).
fn section_5_1_closed_continuation_is_a_connection_error(t: &Target) {
    let mut c = closed_stream(t);
    c.send(&Frame::continuation(
        1,
        flag::END_HEADERS,
        &hpack::encode(&[Field::literal("x-a", "1")]),
    ));
    c.expect_connection_error_of(&[code::STREAM_CLOSED, code::PROTOCOL_ERROR]);
}

// ---------------------------------------------------------------------------
// 5.1.1 Stream Identifiers
// ---------------------------------------------------------------------------

/// A client's stream with an even identifier is a connection error
/// PROTOCOL_ERROR.
fn section_5_1_1_even_stream_identifier_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send_headers(2, &t.get(), true);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// A stream identifier smaller than one used before is a connection error
/// PROTOCOL_ERROR (5.1.1); STREAM_CLOSED will do too, as opening stream 5
/// closed stream 3 (5.1, "closed").
fn section_5_1_1_decreasing_stream_identifier_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send_headers(5, &t.get(), true);
    c.send_headers(3, &t.get(), true);
    c.expect_connection_error_of(&[code::PROTOCOL_ERROR, code::STREAM_CLOSED]);
}

// ---------------------------------------------------------------------------
// 5.1.2 Stream Concurrency
// ---------------------------------------------------------------------------

/// A stream past SETTINGS_MAX_CONCURRENT_STREAMS is refused
/// (PROTOCOL_ERROR or REFUSED_STREAM).
fn section_5_1_2_streams_past_the_concurrency_limit_are_refused(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    let Some(max) = c.peer.max_concurrent_streams.filter(|&m| m <= 1024) else {
        eprintln!(
            "skipped: the server's concurrency is {:?}",
            c.peer.max_concurrent_streams
        );
        return;
    };
    let block = t.get();
    let frames: Vec<Frame> = (0..=max)
        .map(|i| Frame::headers(1 + 2 * i, flag::END_HEADERS | flag::END_STREAM, &block))
        .collect();
    c.send_all(&frames);
    c.expect_stream_error_of(1 + 2 * max, &[code::PROTOCOL_ERROR, code::REFUSED_STREAM]);
}

// ---------------------------------------------------------------------------
// 5.3.1 Stream Dependencies (RFC 9113 5.3.1: still a stream error)
// ---------------------------------------------------------------------------

/// A HEADERS frame depending on its own stream is a stream error
/// PROTOCOL_ERROR.
fn section_5_3_1_headers_depending_on_itself_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers_with_priority(
        1,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        15,
        &t.get(),
    ));
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

/// A PRIORITY frame depending on its own stream is a stream error
/// PROTOCOL_ERROR.
fn section_5_3_1_priority_depending_on_itself_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::priority(1, 1, 15));
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 5.4.1 Connection Error Handling
// ---------------------------------------------------------------------------

/// After a connection error the server closes the connection.
fn section_5_4_1_connection_error_closes_the_connection(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::PING, 0, 0, vec![0; 6]));
    c.expect_connection_closed();
}

/// A connection error is announced with a GOAWAY (SHOULD, and the
/// suite asks for it).
fn section_5_4_1_connection_error_sends_goaway(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::PING, 0, 3, vec![0; 8]));
    c.expect_goaway(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 5.5 Extending HTTP/2
// ---------------------------------------------------------------------------

/// An unknown extension frame is ignored.
fn section_5_5_unknown_extension_frame_is_ignored(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(0xff, 0xff, 1, b"extension".to_vec()));
    c.expect_alive();
}

/// An unknown frame inside a header block is a connection error
/// PROTOCOL_ERROR.
fn section_5_5_unknown_frame_inside_a_header_block_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers(1, flag::END_STREAM, &t.get()));
    c.send(&Frame::new(0xff, 0, 1, b"extension".to_vec()));
    c.send(&Frame::continuation(1, flag::END_HEADERS, &[]));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 6.1 DATA
// ---------------------------------------------------------------------------

/// DATA on stream 0 is a connection error PROTOCOL_ERROR.
fn section_6_1_data_on_stream_0_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::data(0, flag::END_STREAM, b"test"));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// DATA on a stream not open nor half-closed (local) is a stream error
/// STREAM_CLOSED.
fn section_6_1_data_on_a_half_closed_stream_is_stream_closed(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_headers(1, &t.get(), true);
    c.send(&Frame::data(1, flag::END_STREAM, b"test"));
    c.expect_stream_error(1, code::STREAM_CLOSED);
}

/// DATA whose padding is as long as its payload is a connection error
/// PROTOCOL_ERROR.
fn section_6_1_data_with_invalid_pad_length_is_a_protocol_error(t: &Target) {
    let mut c = held(t, "GET", &[]);
    // Pad length 6 in a payload of 1 + 4 + 0 octets.
    c.send(&Frame::padded(
        kind::DATA,
        1,
        flag::END_STREAM,
        6,
        b"test",
        0,
    ));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 6.2 HEADERS
// ---------------------------------------------------------------------------

/// HEADERS without END_HEADERS followed by a PRIORITY of another stream
/// is a connection error PROTOCOL_ERROR.
fn section_6_2_headers_without_end_headers_then_priority_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers(1, flag::END_STREAM, &t.get()));
    c.send(&Frame::priority(3, 0, 255));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// An unfinished HEADERS followed by another stream's unfinished HEADERS
/// is a connection error PROTOCOL_ERROR.
fn section_6_2_headers_while_another_header_block_is_open_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::headers(1, flag::END_STREAM, &t.get()));
    c.send(&Frame::headers(3, flag::END_STREAM, &t.get()));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// HEADERS on stream 0 is a connection error PROTOCOL_ERROR.
fn section_6_2_headers_on_stream_0_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send_headers(0, &t.get(), true);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// HEADERS whose padding is longer than its payload is a connection error
/// PROTOCOL_ERROR.
fn section_6_2_headers_with_invalid_pad_length_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    let block = t.get();
    let pad = (block.len() + 1).min(255) as u8;
    c.send(&Frame::padded(
        kind::HEADERS,
        1,
        flag::END_HEADERS | flag::END_STREAM,
        pad,
        &block,
        0,
    ));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 6.3 PRIORITY
// ---------------------------------------------------------------------------

/// PRIORITY on stream 0 is a connection error PROTOCOL_ERROR.
fn section_6_3_priority_on_stream_0_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::priority(0, 1, 15));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// PRIORITY of other than 5 octets is a stream error FRAME_SIZE_ERROR.
fn section_6_3_priority_of_wrong_length_is_a_frame_size_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::PRIORITY, 0, 1, vec![0, 0, 0, 0]));
    c.expect_stream_error(1, code::FRAME_SIZE_ERROR);
}

// ---------------------------------------------------------------------------
// 6.4 RST_STREAM
// ---------------------------------------------------------------------------

/// RST_STREAM on stream 0 is a connection error PROTOCOL_ERROR.
fn section_6_4_rst_stream_on_stream_0_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::rst_stream(0, code::CANCEL));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// RST_STREAM on an idle stream is a connection error PROTOCOL_ERROR.
fn section_6_4_rst_stream_on_an_idle_stream_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::rst_stream(1, code::CANCEL));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// RST_STREAM of other than 4 octets is a connection error
/// FRAME_SIZE_ERROR.
fn section_6_4_rst_stream_of_wrong_length_is_a_frame_size_error(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::new(kind::RST_STREAM, 0, 1, vec![0, 0, 8]));
    c.expect_connection_error(code::FRAME_SIZE_ERROR);
}

// ---------------------------------------------------------------------------
// 6.5 SETTINGS
// ---------------------------------------------------------------------------

/// A SETTINGS ACK with a payload is a connection error FRAME_SIZE_ERROR.
fn section_6_5_settings_ack_with_payload_is_a_frame_size_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(
        kind::SETTINGS,
        flag::ACK,
        0,
        vec![0, 4, 0, 0, 0x10, 0],
    ));
    c.expect_connection_error(code::FRAME_SIZE_ERROR);
}

/// SETTINGS on a stream other than 0 is a connection error PROTOCOL_ERROR.
fn section_6_5_settings_on_a_stream_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    let mut f = Frame::settings(&[(setting::INITIAL_WINDOW_SIZE, 100)]);
    f.stream = 1;
    c.send(&f);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// SETTINGS of a length not a multiple of 6 is a connection error
/// FRAME_SIZE_ERROR.
fn section_6_5_settings_of_wrong_length_is_a_frame_size_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::SETTINGS, 0, 0, vec![0, 4, 0, 0, 0x10]));
    c.expect_connection_error(code::FRAME_SIZE_ERROR);
}

// ---------------------------------------------------------------------------
// 6.5.2 Defined SETTINGS Parameters
// ---------------------------------------------------------------------------

/// SETTINGS_ENABLE_PUSH other than 0 or 1 is a connection error
/// PROTOCOL_ERROR.
fn section_6_5_2_enable_push_of_2_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(setting::ENABLE_PUSH, 2)]));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is a connection error
/// FLOW_CONTROL_ERROR.
fn section_6_5_2_initial_window_size_over_2_31_is_a_flow_control_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]));
    c.expect_connection_error(code::FLOW_CONTROL_ERROR);
}

/// SETTINGS_MAX_FRAME_SIZE below 2^14 is a connection error
/// PROTOCOL_ERROR.
fn section_6_5_2_max_frame_size_below_16384_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(setting::MAX_FRAME_SIZE, 16_383)]));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// SETTINGS_MAX_FRAME_SIZE above 2^24-1 is a connection error
/// PROTOCOL_ERROR.
fn section_6_5_2_max_frame_size_over_2_24_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(setting::MAX_FRAME_SIZE, 1 << 24)]));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// An unknown SETTINGS parameter is ignored (and the frame acknowledged).
fn section_6_5_2_unknown_setting_is_ignored(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(0xff, 1)]));
    c.expect_settings_ack();
    c.expect_alive();
}

// ---------------------------------------------------------------------------
// 6.5.3 Settings Synchronization
// ---------------------------------------------------------------------------

/// Of several values of one parameter in a frame, the last counts: an
/// initial window of 100 then 1 lets the server send one octet of DATA.
fn section_6_5_3_the_last_of_several_values_counts(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[
        (setting::INITIAL_WINDOW_SIZE, 100),
        (setting::INITIAL_WINDOW_SIZE, 1),
    ]));
    c.expect_settings_ack();
    c.send_headers(1, &t.get(), true);
    let data = c.expect_data(1);
    assert_eq!(data.payload.len(), 1, "DATA past a window of 1 octet");
}

/// A SETTINGS frame is acknowledged.
fn section_6_5_3_settings_is_acknowledged(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(setting::ENABLE_PUSH, 0)]));
    c.expect_settings_ack();
}

// ---------------------------------------------------------------------------
// 6.7 PING
// ---------------------------------------------------------------------------

/// A PING is answered with a PING ACK of the same data.
fn section_6_7_ping_is_answered_with_the_same_data(t: &Target) {
    let mut c = hs(t);
    let data = *b"h2-ping!";
    c.send(&Frame::ping(0, data));
    c.expect_ping_ack(data);
}

/// A PING ACK is not answered: the first ACK back is the later PING's.
fn section_6_7_ping_ack_is_not_answered(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::ping(flag::ACK, *b"unasked!"));
    let data = *b"answered";
    c.send(&Frame::ping(0, data));
    c.expect_ping_ack(data);
}

/// PING on a stream other than 0 is a connection error PROTOCOL_ERROR.
fn section_6_7_ping_on_a_stream_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::PING, 0, 1, vec![0; 8]));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// PING of other than 8 octets is a connection error FRAME_SIZE_ERROR.
fn section_6_7_ping_of_wrong_length_is_a_frame_size_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::PING, 0, 0, vec![0; 6]));
    c.expect_connection_error(code::FRAME_SIZE_ERROR);
}

// ---------------------------------------------------------------------------
// 6.8 GOAWAY
// ---------------------------------------------------------------------------

/// GOAWAY on a stream other than 0 is a connection error PROTOCOL_ERROR.
fn section_6_8_goaway_on_a_stream_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    let mut f = Frame::goaway(0, code::NO_ERROR, b"");
    f.stream = 1;
    c.send(&f);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 6.9 WINDOW_UPDATE
// ---------------------------------------------------------------------------

/// A connection WINDOW_UPDATE of 0 is a connection error PROTOCOL_ERROR.
fn section_6_9_window_update_of_0_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::window_update(0, 0));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// A stream WINDOW_UPDATE of 0 is a stream error PROTOCOL_ERROR.
fn section_6_9_window_update_of_0_on_a_stream_is_a_protocol_error(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::window_update(1, 0));
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

/// WINDOW_UPDATE of other than 4 octets is a connection error
/// FRAME_SIZE_ERROR.
fn section_6_9_window_update_of_wrong_length_is_a_frame_size_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::new(kind::WINDOW_UPDATE, 0, 0, vec![0, 0, 1]));
    c.expect_connection_error(code::FRAME_SIZE_ERROR);
}

// ---------------------------------------------------------------------------
// 6.9.1 The Flow-Control Window
// ---------------------------------------------------------------------------

/// With an initial window of 1 the server sends DATA of 1 octet.
fn section_6_9_1_server_keeps_to_a_window_of_1(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 1)]);
    c.send_headers(1, &t.get(), true);
    let data = c.expect_data(1);
    assert_eq!(data.payload.len(), 1, "DATA past a window of 1 octet");
}

/// A connection window raised past 2^31-1 is a connection error
/// FLOW_CONTROL_ERROR.
fn section_6_9_1_connection_window_over_2_31_is_a_flow_control_error(t: &Target) {
    let mut c = hs(t);
    c.send_all(&[
        Frame::window_update(0, 0x7fff_ffff),
        Frame::window_update(0, 0x7fff_ffff),
    ]);
    c.expect_goaway(code::FLOW_CONTROL_ERROR);
}

/// A stream window raised past 2^31-1 is a stream error
/// FLOW_CONTROL_ERROR.
fn section_6_9_1_stream_window_over_2_31_is_a_flow_control_error(t: &Target) {
    let mut c = open_stream(t);
    c.send_all(&[
        Frame::window_update(1, 0x7fff_ffff),
        Frame::window_update(1, 0x7fff_ffff),
    ]);
    c.expect_stream_error(1, code::FLOW_CONTROL_ERROR);
}

// ---------------------------------------------------------------------------
// 6.9.2 Initial Flow-Control Window Size
// ---------------------------------------------------------------------------

/// SETTINGS_INITIAL_WINDOW_SIZE changed after a stream opened changes its
/// window: 0, then 1, lets one octet through.
fn section_6_9_2_initial_window_change_applies_to_open_streams(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_headers(1, &t.get(), true);
    c.expect_headers(1);
    c.send(&Frame::settings(&[(setting::INITIAL_WINDOW_SIZE, 1)]));
    let data = c.expect_data(1);
    assert_eq!(data.payload.len(), 1, "DATA past a window of 1 octet");
}

/// A window made negative by SETTINGS is tracked: 3, a DATA of 3, then 2
/// (window -1), then a WINDOW_UPDATE of 2 lets exactly one octet through.
fn section_6_9_2_negative_window_is_tracked(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 3)]);
    c.send_headers(1, &t.get(), true);
    let first = c.expect_data(1);
    assert_eq!(first.payload.len(), 3, "DATA past a window of 3 octets");
    c.send(&Frame::settings(&[(setting::INITIAL_WINDOW_SIZE, 2)]));
    c.expect_settings_ack();
    c.send(&Frame::window_update(1, 2));
    let data = c.expect_data(1);
    assert_eq!(
        data.payload.len(),
        1,
        "a window of -1 + 2 let more than 1 octet through"
    );
}

/// SETTINGS_INITIAL_WINDOW_SIZE of 2^31 is a connection error
/// FLOW_CONTROL_ERROR.
fn section_6_9_2_initial_window_over_max_is_a_flow_control_error(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::settings(&[(
        setting::INITIAL_WINDOW_SIZE,
        0x8000_0000,
    )]));
    c.expect_goaway(code::FLOW_CONTROL_ERROR);
}

// ---------------------------------------------------------------------------
// 6.10 CONTINUATION
// ---------------------------------------------------------------------------

/// A header block split over HEADERS and several CONTINUATIONs is one
/// request.
fn section_6_10_continuations_make_one_header_block(t: &Target) {
    let mut c = hs(t);
    let block = t.get_with(&[
        Field::literal("x-dummy", "1"),
        Field::literal("x-dummy2", "2"),
    ]);
    let third = block.len() / 3;
    c.send_all(&[
        Frame::headers(1, flag::END_STREAM, &block[..third]),
        Frame::continuation(1, 0, &block[third..2 * third]),
        Frame::continuation(1, flag::END_HEADERS, &block[2 * third..]),
    ]);
    let response = c.expect_response(1);
    assert_eq!(response.status, 200, "{:?}", response.fields);
}

/// A CONTINUATION followed by another frame type is a connection error
/// PROTOCOL_ERROR.
fn section_6_10_continuation_followed_by_other_frame_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    let block = t.get();
    c.send_all(&[
        Frame::headers(1, flag::END_STREAM, &block[..2]),
        Frame::continuation(1, 0, &block[2..]),
        Frame::data(1, 0, b"test"),
    ]);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// CONTINUATION on stream 0 is a connection error PROTOCOL_ERROR.
fn section_6_10_continuation_on_stream_0_is_a_protocol_error(t: &Target) {
    let mut c = hs(t);
    let block = t.get();
    c.send_all(&[
        Frame::headers(1, flag::END_STREAM, &block[..2]),
        Frame::continuation(0, flag::END_HEADERS, &block[2..]),
    ]);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// CONTINUATION after a HEADERS with END_HEADERS is a connection error
/// PROTOCOL_ERROR.
fn section_6_10_continuation_after_end_headers_is_a_protocol_error(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_all(&[
        Frame::headers(1, flag::END_HEADERS | flag::END_STREAM, &t.get()),
        Frame::continuation(
            1,
            flag::END_HEADERS,
            &hpack::encode(&[Field::literal("x-a", "1")]),
        ),
    ]);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// CONTINUATION after a CONTINUATION with END_HEADERS is a connection
/// error PROTOCOL_ERROR.
fn section_6_10_continuation_after_ended_continuation_is_a_protocol_error(t: &Target) {
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    let block = t.get();
    c.send_all(&[
        Frame::headers(1, flag::END_STREAM, &block[..2]),
        Frame::continuation(1, flag::END_HEADERS, &block[2..]),
        Frame::continuation(
            1,
            flag::END_HEADERS,
            &hpack::encode(&[Field::literal("x-a", "1")]),
        ),
    ]);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

/// CONTINUATION after DATA is a connection error PROTOCOL_ERROR.
fn section_6_10_continuation_after_data_is_a_protocol_error(t: &Target) {
    let mut c = held(t, "GET", &[]);
    c.send_all(&[
        Frame::data(1, 0, b"test"),
        Frame::continuation(
            1,
            flag::END_HEADERS,
            &hpack::encode(&[Field::literal("x-a", "1")]),
        ),
    ]);
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 7 Error Codes
// ---------------------------------------------------------------------------

/// A GOAWAY with an unknown error code gets no special treatment: the
/// server answers a PING as after any GOAWAY of ours, or closes as it may
/// after any (gracefully: NO_ERROR), but does not call it an error.
fn section_7_goaway_with_unknown_code_is_no_special_case(t: &Target) {
    let mut c = hs(t);
    c.send(&Frame::goaway(0, 0xff, b""));
    c.send(&Frame::ping(0, *b"unknown!"));
    loop {
        match c.next_event() {
            Event::Frame(f) if f.kind == kind::PING && f.has(flag::ACK) => return,
            Event::Closed => return,
            Event::Frame(f) if f.kind == kind::GOAWAY => {
                let got = f.error_code().map_or(u32::MAX, |(_, c)| c);
                assert_eq!(
                    got,
                    code::NO_ERROR,
                    "a GOAWAY of unknown code answered with {}",
                    code::name(got)
                );
            }
            Event::Timeout => {
                panic!("neither a PING ACK nor a close after a GOAWAY of unknown code")
            }
            _ => {}
        }
    }
}

/// An RST_STREAM with an unknown error code gets no special treatment.
fn section_7_rst_stream_with_unknown_code_is_no_special_case(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::rst_stream(1, 0xff));
    c.expect_alive();
}

// ---------------------------------------------------------------------------
// 8.1 HTTP Request/Response Exchange (RFC 9113 8.1)
// ---------------------------------------------------------------------------

/// A second HEADERS without END_STREAM (trailers must end the stream) is
/// a stream error PROTOCOL_ERROR.
fn section_8_1_second_headers_without_end_stream_is_a_protocol_error(t: &Target) {
    let mut c = held(t, "GET", &[]);
    c.send(&Frame::data(1, 0, b"test"));
    c.send_headers(
        1,
        &hpack::encode(&[Field::literal("x-trailer", "1")]),
        false,
    );
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 8.1.2 HTTP Header Fields (RFC 9113 8.2, 8.3)
// ---------------------------------------------------------------------------

/// An uppercase field name makes the request malformed.
fn section_8_1_2_uppercase_field_name_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &t.get_with(&[Field::literal("X-TEST", "ok")]));
}

/// An unknown pseudo-header field makes the request malformed.
fn section_8_1_2_1_unknown_pseudo_header_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &t.get_with(&[Field::literal(":test", "ok")]));
}

/// A response pseudo-header field in a request makes it malformed.
fn section_8_1_2_1_response_pseudo_header_in_a_request_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &t.get_with(&[Field::literal(":status", "200")]));
}

/// A pseudo-header field in trailers makes the request malformed.
fn section_8_1_2_1_pseudo_header_in_trailers_is_a_protocol_error(t: &Target) {
    let mut c = held(t, "GET", &[Field::literal("trailer", "x-test")]);
    c.send(&Frame::data(1, 0, b"test"));
    c.send_headers(
        1,
        &hpack::encode(&[Field::literal(":method", "POST")]),
        true,
    );
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

/// A pseudo-header field after a regular field makes the request
/// malformed.
fn section_8_1_2_1_pseudo_header_after_a_regular_field_is_a_protocol_error(t: &Target) {
    let block = request_fields(t, |f| {
        let authority = f.pop().unwrap();
        f.push(Field::literal("x-test", "ok"));
        f.push(authority);
    });
    expect_malformed(t, &block);
}

/// A connection-specific field (`connection`) makes the request malformed.
fn section_8_1_2_2_connection_specific_field_is_a_protocol_error(t: &Target) {
    expect_malformed(
        t,
        &t.get_with(&[Field::literal("connection", "keep-alive")]),
    );
}

/// `te` other than `trailers` makes the request malformed.
fn section_8_1_2_2_te_other_than_trailers_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &t.get_with(&[Field::literal("te", "trailers, deflate")]));
}

/// An empty `:path` makes the request malformed.
fn section_8_1_2_3_empty_path_is_a_protocol_error(t: &Target) {
    expect_malformed(
        t,
        &request_fields(t, |f| f[2] = Field::literal(":path", "")),
    );
}

/// A request without `:method` is malformed.
fn section_8_1_2_3_missing_method_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &request_fields(t, |f| drop(f.remove(0))));
}

/// A request without `:scheme` is malformed.
fn section_8_1_2_3_missing_scheme_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &request_fields(t, |f| drop(f.remove(1))));
}

/// A request without `:path` is malformed.
fn section_8_1_2_3_missing_path_is_a_protocol_error(t: &Target) {
    expect_malformed(t, &request_fields(t, |f| drop(f.remove(2))));
}

/// A request with two `:method` is malformed.
fn section_8_1_2_3_duplicate_method_is_a_protocol_error(t: &Target) {
    expect_malformed(
        t,
        &request_fields(t, |f| f.insert(1, Field::literal(":method", "HEAD"))),
    );
}

/// A request with two `:scheme` is malformed.
fn section_8_1_2_3_duplicate_scheme_is_a_protocol_error(t: &Target) {
    let scheme = if t.tls { "https" } else { "http" };
    expect_malformed(
        t,
        &request_fields(t, |f| f.insert(2, Field::literal(":scheme", scheme))),
    );
}

/// A request with two `:path` is malformed.
fn section_8_1_2_3_duplicate_path_is_a_protocol_error(t: &Target) {
    let path = t.path.clone();
    expect_malformed(
        t,
        &request_fields(t, |f| f.insert(3, Field::literal(":path", path))),
    );
}

/// A `content-length` that the one DATA frame does not match makes the
/// request malformed.
fn section_8_1_2_6_content_length_unlike_the_data_is_a_protocol_error(t: &Target) {
    let mut c = held(t, "GET", &[Field::literal("content-length", "1")]);
    c.send(&Frame::data(1, flag::END_STREAM, b"test"));
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

/// A `content-length` that the sum of the DATA frames does not match makes
/// the request malformed.
fn section_8_1_2_6_content_length_unlike_the_sum_of_data_is_a_protocol_error(t: &Target) {
    let mut c = held(t, "GET", &[Field::literal("content-length", "1")]);
    c.send_all(&[
        Frame::data(1, 0, b"test"),
        Frame::data(1, flag::END_STREAM, b"test"),
    ]);
    c.expect_stream_error(1, code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// 8.2 Server Push (RFC 9113 8.4)
// ---------------------------------------------------------------------------

/// A PUSH_PROMISE from a client is a connection error PROTOCOL_ERROR.
fn section_8_2_push_promise_from_a_client_is_a_protocol_error(t: &Target) {
    let mut c = open_stream(t);
    c.send(&Frame::push_promise(1, flag::END_HEADERS, 2, &t.get()));
    c.expect_connection_error(code::PROTOCOL_ERROR);
}

// ---------------------------------------------------------------------------
// HPACK (RFC 7541)
// ---------------------------------------------------------------------------

/// A header block with `fields` after the request's, sent whole on
/// stream 1; the connection error COMPRESSION_ERROR expected.
fn expect_compression_error(t: &Target, fields: &[Field]) {
    let mut c = hs(t);
    let mut block = t.get();
    block.extend(hpack::encode(fields));
    c.send_headers(1, &block, true);
    c.expect_connection_error(code::COMPRESSION_ERROR);
}

/// 2.3.2, 6.2.1: a field added to the dynamic table is found again by its
/// index in the next block, and both requests are answered.
fn hpack_2_3_2_dynamic_table_entries_serve_later_blocks(t: &Target) {
    let mut c = hs(t);
    let mut first = t.pseudo("GET", &t.path);
    first.push(Field::indexed_literal("x-dynamic", "kept"));
    c.send_headers(1, &hpack::encode(&first), true);
    assert_eq!(c.expect_response(1).status, 200);
    let mut second = t.pseudo("GET", &t.path);
    second.push(Field::Indexed(62));
    c.send_headers(3, &hpack::encode(&second), true);
    assert_eq!(c.expect_response(3).status, 200);
}

/// 6.1, 6.2: static-table representations (indexed `:method: GET`, an
/// indexed name with a literal value never indexed) decode.
fn hpack_6_1_static_table_representations_decode(t: &Target) {
    let mut c = hs(t);
    let block = hpack::encode(&[
        Field::Indexed(2),
        Field::Indexed(if t.tls { 7 } else { 6 }),
        Field::Literal {
            mode: Indexing::Never,
            name: Name::Indexed(4),
            value: Str::plain(&t.path),
        },
        Field::Literal {
            mode: Indexing::Incremental,
            name: Name::Indexed(1),
            value: Str::plain(&t.authority),
        },
    ]);
    c.send_headers(1, &block, true);
    assert_eq!(c.expect_response(1).status, 200);
}

/// 2.3.3: an indexed field past both tables is a COMPRESSION_ERROR.
fn hpack_2_3_3_indexed_field_out_of_range_is_a_compression_error(t: &Target) {
    expect_compression_error(t, &[Field::Indexed(70)]);
}

/// 2.3.3: a literal's name index past both tables is a COMPRESSION_ERROR.
fn hpack_2_3_3_literal_name_index_out_of_range_is_a_compression_error(t: &Target) {
    expect_compression_error(
        t,
        &[Field::Literal {
            mode: Indexing::Incremental,
            name: Name::Indexed(70),
            value: Str::plain("x"),
        }],
    );
}

/// 4.2: a dynamic table size update after the first field is a
/// COMPRESSION_ERROR.
fn hpack_4_2_table_size_update_at_the_end_is_a_compression_error(t: &Target) {
    expect_compression_error(t, &[Field::SizeUpdate(1)]);
}

/// 5.2: Huffman padding longer than 7 bits is a COMPRESSION_ERROR.
fn hpack_5_2_huffman_padding_over_7_bits_is_a_compression_error(t: &Target) {
    // "a" (5 bits), then 11 bits of 1s.
    let mut value = huffman_bits(&[HUFFMAN_A], true);
    value.push(0xff);
    expect_compression_error(t, &[huffman_literal(value)]);
}

/// 5.2: Huffman padding of 0s (not the EOS prefix) is a COMPRESSION_ERROR.
fn hpack_5_2_huffman_padding_of_zeros_is_a_compression_error(t: &Target) {
    expect_compression_error(t, &[huffman_literal(huffman_bits(&[HUFFMAN_A], false))]);
}

/// 5.2: a Huffman string holding EOS is a COMPRESSION_ERROR.
fn hpack_5_2_huffman_eos_in_a_string_is_a_compression_error(t: &Target) {
    expect_compression_error(
        t,
        &[huffman_literal(huffman_bits(
            &[HUFFMAN_A, HUFFMAN_EOS, HUFFMAN_A],
            true,
        ))],
    );
}

fn huffman_literal(value: Vec<u8>) -> Field {
    Field::Literal {
        mode: Indexing::Without,
        name: Name::Literal(Str::plain("x-huffman")),
        value: Str::Huffman(value),
    }
}

/// 6.1: index 0 is a COMPRESSION_ERROR.
fn hpack_6_1_index_0_is_a_compression_error(t: &Target) {
    expect_compression_error(t, &[Field::Indexed(0)]);
}

/// 6.3: a table size update above SETTINGS_HEADER_TABLE_SIZE (4,096 by
/// default) is a COMPRESSION_ERROR.
fn hpack_6_3_table_size_update_over_the_setting_is_a_compression_error(t: &Target) {
    let mut c = hs(t);
    let mut block = hpack::encode(&[Field::SizeUpdate(4097)]);
    block.extend(t.get());
    c.send_headers(1, &block, true);
    c.expect_connection_error(code::COMPRESSION_ERROR);
}

// ---------------------------------------------------------------------------
// Floods (issue 28; RFC 9113 section 10.5): each is cut off with a GOAWAY
// or a close, and a connection opened before it is served all the same.
// ---------------------------------------------------------------------------

/// A connection that must be served normally through another's flood.
fn bystander(t: &Target) -> H2Conn {
    hs(t)
}

fn bystander_is_served(t: &Target, mut c: H2Conn) {
    c.send_headers(1, &t.get(), true);
    let response = c.expect_response(1);
    assert_eq!(
        response.status, 200,
        "the bystander was not served: {:?}",
        response.fields
    );
}

/// How `events` ended the connection (a GOAWAY, or the close), if they
/// did: `GOAWAY 0xb ENHANCE_YOUR_CALM after 1,000 frames`, for the run's
/// output.
fn cut_off(events: &[Event]) -> Option<String> {
    events.iter().find_map(|e| match e {
        Event::Closed => Some("the close".to_string()),
        Event::Frame(f) if f.kind == kind::GOAWAY => Some(format!(
            "GOAWAY {}",
            code::name(f.error_code().map_or(u32::MAX, |(_, c)| c))
        )),
        _ => None,
    })
}

/// Send `frames` in batches of `batch` until the server cuts the
/// connection off (how, and after how many frames) or every batch is sent
/// (None); answers read between batches, so that the server is not held
/// up by our not reading.
fn flood_until_cut(
    c: &mut H2Conn,
    frames: impl Iterator<Item = Frame>,
    batch: usize,
) -> Option<String> {
    let mut pending = Vec::new();
    let mut sent = 0usize;
    let mut frames = frames.peekable();
    while frames.peek().is_some() {
        for f in frames.by_ref().take(batch) {
            pending.extend(f.encode());
            sent += 1;
        }
        if let Err(e) = c.try_send_bytes(&pending) {
            let how = cut_off(&c.drain(Duration::from_millis(200)))
                .unwrap_or_else(|| format!("a failed write ({e})"));
            return Some(format!("{how} within {sent} frames"));
        }
        pending.clear();
        if let Some(how) = cut_off(&c.drain(Duration::from_millis(1))) {
            return Some(format!("{how} within {sent} frames"));
        }
    }
    cut_off(&c.drain(Duration::from_millis(200)))
        .map(|how| format!("{how} after all {sent} frames"))
}

/// Rapid reset (CVE-2023-44487): 20,000 streams opened and reset at once
/// are cut off.
fn flood_rapid_reset_is_cut_off(t: &Target) {
    let other = bystander(t);
    let mut c = hs(t);
    let block = t.get();
    let frames = (0..20_000u32).flat_map(|i| {
        let id = 1 + 2 * i;
        [
            Frame::headers(id, flag::END_HEADERS | flag::END_STREAM, &block),
            Frame::rst_stream(id, code::CANCEL),
        ]
    });
    let how = flood_until_cut(&mut c, frames, 200)
        .expect("20,000 streams opened and reset were not cut off");
    eprintln!("rapid reset: cut off by {how}");
    bystander_is_served(t, other);
}

/// A header block continued forever (CVE-2024-27316): 4 MiB of
/// CONTINUATION without END_HEADERS are cut off.
fn flood_endless_continuation_is_cut_off(t: &Target) {
    let other = bystander(t);
    let mut c = hs(t);
    let chunk = hpack::encode(&vec![Field::literal("x-flood", vec![b'a'; 1000]); 16]);
    let frames = std::iter::once(Frame::headers(1, flag::END_STREAM, &t.get()))
        .chain((0..256).map(|_| Frame::continuation(1, 0, &chunk)));
    let how = flood_until_cut(&mut c, frames, 8).expect("4 MiB of CONTINUATION were not cut off");
    eprintln!("CONTINUATION flood: cut off by {how}");
    bystander_is_served(t, other);
}

/// A flood that is never read: `count` copies of `frame` sent without
/// reading the answers, then the answers read: a GOAWAY or the close must
/// be among them (a server that stops reading instead is not cut off).
fn unread_flood(t: &Target, frame: Frame, count: usize, what: &str) {
    let other = bystander(t);
    let mut c = hs(t);
    let one = frame.encode();
    let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 1000).collect();
    for _ in 0..count / 1000 {
        if c.try_send_bytes(&batch).is_err() {
            break;
        }
    }
    let events = c.drain(Duration::from_millis(500));
    let how =
        cut_off(&events).unwrap_or_else(|| panic!("{count} {what} sent unread were not cut off"));
    let answered = events
        .iter()
        .filter(|e| matches!(e, Event::Frame(f) if f.kind == frame.kind && f.has(flag::ACK)))
        .count();
    eprintln!("{what} flood: cut off by {how} after {answered} ACKs");
    bystander_is_served(t, other);
}

/// SETTINGS flood (CVE-2019-9515): 100,000 SETTINGS whose ACKs are never
/// read are cut off.
fn flood_settings_is_cut_off(t: &Target) {
    unread_flood(t, Frame::settings(&[]), 100_000, "SETTINGS");
}

/// PING flood (CVE-2019-9512): 100,000 PINGs whose ACKs are never read
/// are cut off.
fn flood_ping_is_cut_off(t: &Target) {
    unread_flood(t, Frame::ping(0, *b"flooding"), 100_000, "PINGs");
}

/// A zero window that never opens (CVE-2019-9517's kind of stall): a
/// stream the client never lets the server answer is cut off (GOAWAY,
/// RST_STREAM or the close) within the server's send timeout.
fn flood_zero_window_that_never_opens_is_cut_off(t: &Target) {
    let other = bystander(t);
    let mut c = H2Conn::handshake_with(t, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    c.send_headers(1, &t.get(), true);
    c.set_timeout(STALL_TIMEOUT);
    let started = std::time::Instant::now();
    loop {
        match c.next_event() {
            Event::Closed => {
                eprintln!("zero window: closed after {:?}", started.elapsed());
                break;
            }
            Event::Frame(f) if matches!(f.kind, kind::GOAWAY | kind::RST_STREAM) => {
                let c = code::name(f.error_code().map_or(u32::MAX, |(_, c)| c));
                eprintln!(
                    "zero window: {} {c} after {:?}",
                    if f.kind == kind::GOAWAY {
                        "GOAWAY"
                    } else {
                        "RST_STREAM"
                    },
                    started.elapsed()
                );
                break;
            }
            Event::Timeout => {
                panic!("a stream held at a zero window was not cut off within {STALL_TIMEOUT:?}")
            }
            Event::Frame(f) if f.kind == kind::DATA && !f.payload.is_empty() => {
                panic!("DATA of {} octets sent into a zero window", f.payload.len())
            }
            _ => {}
        }
    }
    bystander_is_served(t, other);
}

// ---------------------------------------------------------------------------
// ALPN of the models without HTTP/2
// ---------------------------------------------------------------------------

/// A model left out of [`H2_MPMS`] offers only `http/1.1` in ALPN: a
/// client asking for `h2` first gets `http/1.1`.
#[test]
fn models_without_h2_offer_only_http_1_1_in_alpn() {
    for mpm in tests::MPMS.iter().filter(|m| !H2_MPMS.contains(m)) {
        let root = site::docroot();
        let server = with_transport(Transport::Tls, || {
            Server::start(mpm, Some(root.path()), &[])
        });
        let tcp = std::net::TcpStream::connect(server.addr()).unwrap();
        tcp.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
        let config = tests::tls::client_config_with(|c| {
            c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        });
        let io = tests::tls::Io::handshake_with(tcp, "localhost", config).unwrap();
        let alpn = io.tls().and_then(|t| t.alpn_protocol()).map(<[u8]>::to_vec);
        assert_ne!(
            alpn.as_deref(),
            Some(&b"h2"[..]),
            "{mpm} chose h2 though it is not in H2_MPMS"
        );
    }
}

/// The preface constant is RFC 9113's.
#[test]
fn the_preface_is_24_octets() {
    assert_eq!(PREFACE.len(), 24);
}

cases! {
    conformance: [
        section_3_5_client_preface_is_answered_with_settings,
        section_3_5_invalid_preface_is_a_protocol_error,
        section_4_1_unknown_frame_type_is_ignored,
        section_4_1_undefined_flags_are_ignored,
        section_4_1_reserved_bit_is_ignored,
        section_4_2_data_of_16384_octets_is_accepted,
        section_4_2_data_over_max_frame_size_is_a_frame_size_error,
        section_4_2_headers_over_max_frame_size_is_a_connection_frame_size_error,
        section_4_3_invalid_header_block_is_a_compression_error,
        section_4_3_priority_inside_a_header_block_is_a_protocol_error,
        section_4_3_headers_of_another_stream_inside_a_header_block_is_a_protocol_error,
        section_5_1_idle_data_is_an_error,
        section_5_1_idle_rst_stream_is_a_protocol_error,
        section_5_1_idle_window_update_is_a_protocol_error,
        section_5_1_idle_continuation_is_a_protocol_error,
        section_5_1_half_closed_remote_data_is_stream_closed,
        section_5_1_half_closed_remote_headers_is_stream_closed,
        section_5_1_half_closed_remote_continuation_is_an_error,
        section_5_1_closed_data_after_rst_stream_is_stream_closed,
        section_5_1_closed_headers_after_rst_stream_is_stream_closed,
        section_5_1_closed_continuation_after_rst_stream_is_an_error,
        section_5_1_closed_data_is_stream_closed,
        section_5_1_closed_headers_is_a_connection_error,
        section_5_1_closed_continuation_is_a_connection_error,
        section_5_1_1_even_stream_identifier_is_a_protocol_error,
        section_5_1_1_decreasing_stream_identifier_is_a_protocol_error,
        section_5_1_2_streams_past_the_concurrency_limit_are_refused,
        section_5_3_1_headers_depending_on_itself_is_a_protocol_error,
        section_5_3_1_priority_depending_on_itself_is_a_protocol_error,
        section_5_4_1_connection_error_closes_the_connection,
        section_5_4_1_connection_error_sends_goaway,
        section_5_5_unknown_extension_frame_is_ignored,
        section_5_5_unknown_frame_inside_a_header_block_is_a_protocol_error,
        section_6_1_data_on_stream_0_is_a_protocol_error,
        section_6_1_data_on_a_half_closed_stream_is_stream_closed,
        section_6_1_data_with_invalid_pad_length_is_a_protocol_error,
        section_6_2_headers_without_end_headers_then_priority_is_a_protocol_error,
        section_6_2_headers_while_another_header_block_is_open_is_a_protocol_error,
        section_6_2_headers_on_stream_0_is_a_protocol_error,
        section_6_2_headers_with_invalid_pad_length_is_a_protocol_error,
        section_6_3_priority_on_stream_0_is_a_protocol_error,
        section_6_3_priority_of_wrong_length_is_a_frame_size_error,
        section_6_4_rst_stream_on_stream_0_is_a_protocol_error,
        section_6_4_rst_stream_on_an_idle_stream_is_a_protocol_error,
        section_6_4_rst_stream_of_wrong_length_is_a_frame_size_error,
        section_6_5_settings_ack_with_payload_is_a_frame_size_error,
        section_6_5_settings_on_a_stream_is_a_protocol_error,
        section_6_5_settings_of_wrong_length_is_a_frame_size_error,
        section_6_5_2_enable_push_of_2_is_a_protocol_error,
        section_6_5_2_initial_window_size_over_2_31_is_a_flow_control_error,
        section_6_5_2_max_frame_size_below_16384_is_a_protocol_error,
        section_6_5_2_max_frame_size_over_2_24_is_a_protocol_error,
        section_6_5_2_unknown_setting_is_ignored,
        section_6_5_3_the_last_of_several_values_counts,
        section_6_5_3_settings_is_acknowledged,
        section_6_7_ping_is_answered_with_the_same_data,
        section_6_7_ping_ack_is_not_answered,
        section_6_7_ping_on_a_stream_is_a_protocol_error,
        section_6_7_ping_of_wrong_length_is_a_frame_size_error,
        section_6_8_goaway_on_a_stream_is_a_protocol_error,
        section_6_9_window_update_of_0_is_a_protocol_error,
        section_6_9_window_update_of_0_on_a_stream_is_a_protocol_error,
        section_6_9_window_update_of_wrong_length_is_a_frame_size_error,
        section_6_9_1_server_keeps_to_a_window_of_1,
        section_6_9_1_connection_window_over_2_31_is_a_flow_control_error,
        section_6_9_1_stream_window_over_2_31_is_a_flow_control_error,
        section_6_9_2_initial_window_change_applies_to_open_streams,
        section_6_9_2_negative_window_is_tracked,
        section_6_9_2_initial_window_over_max_is_a_flow_control_error,
        section_6_10_continuations_make_one_header_block,
        section_6_10_continuation_followed_by_other_frame_is_a_protocol_error,
        section_6_10_continuation_on_stream_0_is_a_protocol_error,
        section_6_10_continuation_after_end_headers_is_a_protocol_error,
        section_6_10_continuation_after_ended_continuation_is_a_protocol_error,
        section_6_10_continuation_after_data_is_a_protocol_error,
        section_7_goaway_with_unknown_code_is_no_special_case,
        section_7_rst_stream_with_unknown_code_is_no_special_case,
        section_8_1_second_headers_without_end_stream_is_a_protocol_error,
        section_8_1_2_uppercase_field_name_is_a_protocol_error,
        section_8_1_2_1_unknown_pseudo_header_is_a_protocol_error,
        section_8_1_2_1_response_pseudo_header_in_a_request_is_a_protocol_error,
        section_8_1_2_1_pseudo_header_in_trailers_is_a_protocol_error,
        section_8_1_2_1_pseudo_header_after_a_regular_field_is_a_protocol_error,
        section_8_1_2_2_connection_specific_field_is_a_protocol_error,
        section_8_1_2_2_te_other_than_trailers_is_a_protocol_error,
        section_8_1_2_3_empty_path_is_a_protocol_error,
        section_8_1_2_3_missing_method_is_a_protocol_error,
        section_8_1_2_3_missing_scheme_is_a_protocol_error,
        section_8_1_2_3_missing_path_is_a_protocol_error,
        section_8_1_2_3_duplicate_method_is_a_protocol_error,
        section_8_1_2_3_duplicate_scheme_is_a_protocol_error,
        section_8_1_2_3_duplicate_path_is_a_protocol_error,
        section_8_1_2_6_content_length_unlike_the_data_is_a_protocol_error,
        section_8_1_2_6_content_length_unlike_the_sum_of_data_is_a_protocol_error,
        section_8_2_push_promise_from_a_client_is_a_protocol_error,
        hpack_2_3_2_dynamic_table_entries_serve_later_blocks,
        hpack_2_3_3_indexed_field_out_of_range_is_a_compression_error,
        hpack_2_3_3_literal_name_index_out_of_range_is_a_compression_error,
        hpack_4_2_table_size_update_at_the_end_is_a_compression_error,
        hpack_5_2_huffman_padding_over_7_bits_is_a_compression_error,
        hpack_5_2_huffman_padding_of_zeros_is_a_compression_error,
        hpack_5_2_huffman_eos_in_a_string_is_a_compression_error,
        hpack_6_1_static_table_representations_decode,
        hpack_6_1_index_0_is_a_compression_error,
        hpack_6_3_table_size_update_over_the_setting_is_a_compression_error,
    ]
    floods: [
        flood_rapid_reset_is_cut_off,
        flood_endless_continuation_is_cut_off,
        flood_settings_is_cut_off,
        flood_ping_is_cut_off,
        flood_zero_window_that_never_opens_is_cut_off,
    ]
}
