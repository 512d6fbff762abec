//! What a connection holds: its own size, and the heap it keeps when idle.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use common::Driver;
use mpm_h2::{Connection, Settings};

/// The connection's inline state: settings, windows, counters, the HPACK
/// decoder's header, the handles of the (empty when idle) queues.
#[test]
fn a_connection_is_under_half_a_kib_inline() {
    let size = std::mem::size_of::<Connection>();
    eprintln!("size_of::<Connection>() = {size}");
    assert!(size <= 512, "{size} octets");
}

/// After 100 requests from `h2`'s client (whose encoder fills our dynamic
/// table), an idle connection holds its HPACK table and nothing else: no
/// buffer, no queue, no stream table.
#[test]
fn an_idle_connection_after_100_requests_holds_no_buffer() {
    let mut d = Driver::new(Settings::default(), None);
    for i in 0..100 {
        let resp = d.start("GET", &format!("/idle/{i}"), None);
        assert_eq!(d.finish(resp).0, 200);
    }
    for _ in 0..10 {
        d.run_once();
    }
    assert_eq!(d.server.conn.open_streams(), 0);
    let heap = d.server.conn.heap_bytes();
    let table = d.server.conn.hpack_table_bytes();
    eprintln!("idle after 100 requests: {heap} octets of heap, {table} of them the HPACK table");
    assert!(
        heap - table <= 2048,
        "{} octets beside the table",
        heap - table
    );
    assert_eq!(heap - table, 0, "an idle connection holds no buffer");
    // The table is bounded by SETTINGS_HEADER_TABLE_SIZE (4,096 octets as
    // RFC 7541 §4.1 counts them, which counts 32 per entry beside its
    // octets; here a pointer, a length and the octets).
    assert!(table <= 4096 + 128 * 32, "{table}");
}

/// A connection with streams in flight holds what they need, and gives it
/// back when they end.
#[test]
fn a_busy_connection_gives_its_memory_back() {
    let mut d = Driver::new(Settings::default(), None);
    let futures: Vec<_> = (0..50)
        .map(|i| d.start("GET", &format!("/busy/{i}"), None))
        .collect();
    d.run_once();
    d.run_once();
    for f in futures {
        assert_eq!(d.finish(f).0, 200);
    }
    for _ in 0..10 {
        d.run_once();
    }
    let c = &d.server.conn;
    assert_eq!(c.heap_bytes() - c.hpack_table_bytes(), 0);
}

/// A buffer lent by the caller (its pool's) carries a busy connection's
/// frames, the ones already queued moved into it, so that the codec
/// allocates no output buffer of its own; one no larger than the codec's
/// comes straight back; once its frames are taken, an idle connection
/// holds none.
#[test]
fn a_lent_buffer_carries_the_frames_and_an_idle_connection_keeps_none() {
    let mut conn = Connection::new(Settings::default());
    let mut input = mpm_h2::PREFACE.to_vec();
    input.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    input.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41, 1, b'a']);
    assert_eq!(conn.recv(&input).unwrap(), input.len());
    assert!(
        conn.needs_buffer(),
        "only our SETTINGS so far, in a small buffer"
    );
    let lent = Vec::with_capacity(32 * 1024);
    let at = lent.as_ptr();
    let back = conn.lend_buffer(lent);
    assert!(
        back.is_empty() && back.capacity() < 32 * 1024,
        "its own came back"
    );
    assert!(!conn.needs_buffer());
    let small = conn.lend_buffer(Vec::with_capacity(100));
    assert_eq!(small.capacity(), 100, "a smaller one is not taken");
    while let Some(event) = conn.poll_event() {
        if let mpm_h2::Event::Request { stream, .. } = event {
            conn.send_headers(stream, 200, &[(b"content-type", b"text/plain")], false)
                .unwrap();
            conn.send_data(stream, b"hello", true).unwrap();
        }
    }
    let mut out = Vec::new();
    conn.write_to(&mut out);
    assert_eq!(out.as_ptr(), at, "the frames went out in the lent buffer");
    assert_eq!(&out[3..5], &[4, 0], "our SETTINGS first, moved into it");
    assert!(out.ends_with(b"hello"));
    assert_eq!(conn.heap_bytes() - conn.hpack_table_bytes(), 0);
}
