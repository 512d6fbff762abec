#![forbid(unsafe_code)]
#![allow(missing_docs)] // criterion_group!/criterion_main! make undocumented public items
//! One request/response exchange on an open connection: a HEADERS frame in
//! (a GET with the fields a browser sends), HEADERS and one DATA frame out
//! (a 2-field head, 13 octets of body), for `mpm-h2` and for the `h2`
//! crate's server driven the same way: over memory, without a runtime
//! (a no-op waker), the octets in and out identical in shape.
//!
//! `cargo bench -p mpm-h2 --bench exchange`. Both sides get the same
//! header block, which uses the static table and literals only, so that
//! neither decoder's dynamic table grows; the client's windows are opened
//! to 2^31-1 at the start, so that flow control never stalls.

// The tests' pipe and frame writer (`tests/common`), shared.
#[path = "../tests/common/mod.rs"]
mod common;

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use common::{frame, ServerIo, Wire};
use criterion::{criterion_group, criterion_main, Criterion};
use mpm_h2::{Connection, Event, Settings, PREFACE};

const BODY: &[u8] = b"Hello, world!";

/// A literal without indexing, its name from the static table (an index
/// below 15, which fits the 4-bit prefix).
fn lit(index: u8, value: &str, out: &mut Vec<u8>) {
    out.push(index);
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
}

/// `GET /index.html` with accept, accept-encoding, user-agent: static
/// indices and literals without indexing.
fn request_block() -> Vec<u8> {
    let mut b = vec![0x82, 0x87, 0x85]; // :method GET, :scheme https, :path /index.html
                                        // :authority (index 1) literal without indexing.
    lit(0x01, "bench.example", &mut b);
    // accept (19), user-agent (58): index ≥ 15 takes a continuation octet.
    b.extend_from_slice(&[0x0f, 19 - 15]);
    b.push(3);
    b.extend_from_slice(b"*/*");
    b.extend_from_slice(&[0x0f, 58 - 15]);
    b.push(10);
    b.extend_from_slice(b"bench/1.00");
    b.push(0x80 | 16); // accept-encoding: gzip, deflate
    b
}

/// The client's side of the setup: preface, SETTINGS with a large stream
/// window, the connection window opened.
fn client_setup() -> Vec<u8> {
    let mut input = PREFACE.to_vec();
    input.extend(frame(4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    input.extend(frame(8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    input.extend(frame(4, 1, 0, &[]));
    input
}

fn ours(c: &mut Criterion) {
    let block = request_block();
    let mut conn = Connection::new(Settings::default());
    let mut out = Vec::new();
    let setup = client_setup();
    assert_eq!(conn.recv(&setup).expect("the setup"), setup.len());
    while conn.poll_event().is_some() {}
    conn.write_to(&mut out);
    let mut input = frame(1, 0x5, 1, &block);
    let mut id = 1u32;
    let len = BODY.len().to_string();
    c.bench_function("exchange/mpm-h2", |b| {
        b.iter(|| {
            input[5..9].copy_from_slice(&id.to_be_bytes());
            id += 2;
            let n = conn.recv(&input).expect("a request");
            assert_eq!(n, input.len());
            let mut answered = false;
            while let Some(e) = conn.poll_event() {
                if let Event::Request { stream, .. } = e {
                    answered = true;
                    conn.send_headers(
                        stream,
                        200,
                        &[
                            (b"content-type", b"text/plain"),
                            (b"content-length", len.as_bytes()),
                        ],
                        false,
                    )
                    .expect("the head");
                    conn.send_data(stream, BODY, true).expect("the body");
                }
            }
            assert!(answered, "no request");
            out.clear();
            conn.write_to(&mut out);
            std::hint::black_box(&out);
        })
    });
}

fn theirs(c: &mut Criterion) {
    let block = request_block();
    let wire = Rc::new(RefCell::new(Wire::default()));
    wire.borrow_mut().to_server = client_setup();
    let mut cx = Context::from_waker(Waker::noop());
    let mut hs = pin!(h2::server::handshake::<ServerIo>(ServerIo(wire.clone())));
    let mut conn = loop {
        if let Poll::Ready(r) = hs.as_mut().poll(&mut cx) {
            break r.expect("the handshake");
        }
    };
    let mut input = frame(1, 0x5, 1, &block);
    let mut id = 1u32;
    let body = Bytes::from_static(BODY);
    let len = BODY.len().to_string();
    c.bench_function("exchange/h2", |b| {
        b.iter(|| {
            input[5..9].copy_from_slice(&id.to_be_bytes());
            id += 2;
            wire.borrow_mut().to_server.extend_from_slice(&input);
            let Poll::Ready(Some(Ok((_req, mut respond)))) = conn.poll_accept(&mut cx) else {
                panic!("no request")
            };
            let resp = http::Response::builder()
                .status(200)
                .header("content-type", "text/plain")
                .header("content-length", len.as_str())
                .body(())
                .expect("a response");
            let mut send = respond.send_response(resp, false).expect("the head");
            send.send_data(body.clone(), true).expect("the body");
            // Drive the connection: it writes the frames.
            assert!(conn.poll_accept(&mut cx).is_pending());
            let mut w = wire.borrow_mut();
            std::hint::black_box(&w.to_client);
            w.to_client.clear();
        })
    });
}

criterion_group!(benches, ours, theirs);
criterion_main!(benches);
