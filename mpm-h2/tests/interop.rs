//! Interop: hyperium's `h2` client against our codec, in one test, over an
//! in-memory pipe, with no runtime (a no-op waker; the driver polls the
//! client, then runs the server a step, until the client is done).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::future::Future;
use std::pin::pin;

use bytes::Bytes;
use common::Driver;
use mpm_h2::{Reason, Settings};

fn get(driver: &mut Driver, path: &str) -> (u16, Vec<u8>) {
    let resp = driver.start("GET", path, None);
    driver.finish(resp)
}

#[test]
fn a_get_is_answered() {
    let mut d = Driver::new(Settings::default(), None);
    let (status, body) = get(&mut d, "/hello");
    assert_eq!(status, 200);
    assert_eq!(body, b"GET /hello");
}

/// A head written a field at a time (`start_headers`): names in any case
/// arrive lowercase, values written in place arrive whole (one of 300
/// octets, whose length prefix takes two octets), and a head dropped
/// unfinished sent nothing (`h2` would have failed the stream on a second
/// final head).
#[test]
fn a_head_written_a_field_at_a_time_reads_back_in_lowercase() {
    let mut d = Driver::new(Settings::default(), None);
    let resp = d.start("GET", "/fields", None);
    let (status, headers, body) = d.finish_with_headers(resp);
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(headers["content-type"], "text/plain");
    assert_eq!(headers["x-mixed-case"], "yes");
    assert_eq!(headers["x-long"].len(), 300);
    assert_eq!(headers["date"], "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(headers["content-length"], "2");
    assert!(headers.get("x-dropped").is_none(), "{headers:?}");
    assert_eq!(get(&mut d, "/after").0, 200, "the connection goes on");
}

#[test]
fn a_hundred_gets_in_a_row_reuse_the_dynamic_table() {
    let mut d = Driver::new(Settings::default(), None);
    for i in 0..100 {
        let (status, body) = get(&mut d, &format!("/n/{i}"));
        assert_eq!(status, 200);
        assert_eq!(body, format!("GET /n/{i}").as_bytes());
    }
    assert_eq!(d.server.conn.stats().streams_opened, 100);
    assert!(
        d.server.conn.hpack_table_bytes() > 0,
        "h2's encoder indexes its fields"
    );
}

#[test]
fn a_post_larger_than_every_window_arrives_whole() {
    // 1 MiB against our 64 KiB stream window and 1 MiB connection window:
    // the body arrives only if our WINDOW_UPDATEs do.
    let mut d = Driver::new(Settings::default(), None);
    let body: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
    let resp = d.start("POST", "/echo", Some(Bytes::from(body.clone())));
    let (status, answer) = d.finish(resp);
    assert_eq!(status, 200);
    let sum: u64 = body.iter().map(|&b| u64::from(b)).sum();
    assert_eq!(answer, format!("POST {} {sum}", body.len()).as_bytes());
}

#[test]
fn a_response_larger_than_the_clients_window_waits_for_it() {
    // The client's windows are 1,000 octets: our send_data takes what they
    // allow and SendCapacity says when to go on.
    let mut d = Driver::new(Settings::default(), Some(1_000));
    let (status, body) = get(&mut d, "/size/200000");
    assert_eq!(status, 200);
    assert_eq!(body.len(), 200_000);
    assert!(body.iter().all(|&b| b == b'x'));
}

#[test]
fn a_hundred_concurrent_streams_are_answered() {
    let mut d = Driver::new(Settings::default(), None);
    let futures: Vec<_> = (0..100)
        .map(|i| d.start("GET", &format!("/c/{i}"), None))
        .collect();
    for (i, f) in futures.into_iter().enumerate() {
        let (status, body) = d.finish(f);
        assert_eq!(status, 200);
        assert_eq!(body, format!("GET /c/{i}").as_bytes());
    }
    assert_eq!(d.server.conn.stats().streams_refused, 0);
}

#[test]
fn the_clients_streams_wait_for_our_concurrency_limit() {
    // We allow 2; h2 honours our SETTINGS, so the third waits rather than
    // being refused: all three are answered.
    let settings = Settings {
        max_concurrent_streams: 2,
        ..Settings::default()
    };
    let mut d = Driver::new(settings, None);
    let futures: Vec<_> = (0..3)
        .map(|i| d.start("GET", &format!("/l/{i}"), None))
        .collect();
    for f in futures {
        assert_eq!(d.finish(f).0, 200);
    }
}

#[test]
fn a_stream_the_client_resets_is_reported_and_the_connection_goes_on() {
    let mut d = Driver::new(Settings::default(), None);
    d.server.hold = true;
    let req = http::Request::builder()
        .method("POST")
        .uri("http://example/held")
        .body(())
        .unwrap();
    let mut send = d.send.clone();
    d.run(|cx| send.poll_ready(cx)).unwrap();
    let (resp, mut stream) = send.send_request(req, false).unwrap();
    // Let the HEADERS reach the server, then reset.
    for _ in 0..10 {
        d.run_once();
    }
    stream.send_reset(h2::Reason::CANCEL);
    drop(resp);
    for _ in 0..10 {
        d.run_once();
    }
    assert!(
        d.server.resets.contains(&(1, Reason::CANCEL)),
        "{:?}",
        d.server.resets
    );
    assert_eq!(d.server.conn.stats().streams_reset_by_peer, 1);
    d.server.hold = false;
    assert_eq!(get(&mut d, "/after").0, 200);
}

#[test]
fn section_6_8_a_graceful_goaway_lets_the_stream_in_flight_finish() {
    let mut d = Driver::new(Settings::default(), None);
    d.server.hold = true;
    let resp = d.start("GET", "/slow", None);
    for _ in 0..10 {
        d.run_once();
    }
    assert_eq!(d.server.held.len(), 1);
    d.server.conn.goaway(true);
    d.server.hold = false;
    d.server.release_held();
    let (status, body) = d.finish(resp);
    assert_eq!(status, 200);
    assert_eq!(body, b"GET /slow");
    for _ in 0..10 {
        d.run_once();
    }
    assert!(d.server.conn.is_done());
    // A new request is not accepted.
    let req = http::Request::builder()
        .uri("http://example/late")
        .body(())
        .unwrap();
    let mut send = d.send.clone();
    let ready = d.run_bounded(|cx| send.poll_ready(cx));
    let refused = match ready {
        Some(Ok(())) => match send.send_request(req, true) {
            Ok((f, _)) => {
                let mut f = pin!(f);
                matches!(d.run_bounded(|cx| f.as_mut().poll(cx)), Some(Err(_)) | None)
            }
            Err(_) => true,
        },
        _ => true,
    };
    assert!(refused, "a request after our GOAWAY was answered");
}

/// A request whose head is larger than a frame: `h2` sends HEADERS and
/// CONTINUATION, which we read as one block; over our
/// SETTINGS_MAX_HEADER_LIST_SIZE it is answered 431 and the connection
/// goes on.
fn big_head(d: &mut Driver, size: usize) -> u16 {
    let req = http::Request::builder()
        .uri("http://example/big-head")
        .header("x-big", "a".repeat(size))
        .body(())
        .unwrap();
    let mut send = d.send.clone();
    d.run(|cx| send.poll_ready(cx)).unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    d.finish(resp).0
}

#[test]
fn section_6_10_a_head_over_a_frame_arrives_in_continuations() {
    let settings = Settings {
        max_header_list_size: 64 * 1024,
        ..Settings::default()
    };
    let mut d = Driver::new(settings, None);
    assert_eq!(big_head(&mut d, 40_000), 200);
}

#[test]
fn section_6_5_2_a_head_over_our_list_size_is_answered_431() {
    let mut d = Driver::new(Settings::default(), None);
    assert_eq!(big_head(&mut d, 20_000), 431);
    assert_eq!(get(&mut d, "/after").0, 200);
}

#[test]
fn section_8_1_trailers_after_a_body_reach_the_server() {
    let mut d = Driver::new(Settings::default(), None);
    let req = http::Request::builder()
        .method("POST")
        .uri("http://example/trailers")
        .body(())
        .unwrap();
    let mut send = d.send.clone();
    d.run(|cx| send.poll_ready(cx)).unwrap();
    let (resp, mut stream) = send.send_request(req, false).unwrap();
    stream.send_data(Bytes::from_static(b"abc"), false).unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-checksum", "294".parse().unwrap());
    stream.send_trailers(trailers).unwrap();
    let (status, body) = d.finish(resp);
    assert_eq!(status, 200);
    assert_eq!(body, b"POST 3 294 x-checksum=294");
}
