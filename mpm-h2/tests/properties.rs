//! Properties of the frame layer through the public API: a body sent in
//! frames and read in arbitrary pieces arrives whole, a response goes out
//! in whole frames, and any octets after the handshake
//! get an answer (events, or a GOAWAY), never a panic.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use common::frame;
use mpm_h2::{Connection, Event, Settings, PREFACE};
use proptest::prelude::*;

const POST: &[u8] = &[0x83, 0x86, 0x84, 0x41, 0x01, b'a'];

/// Feed `input` in pieces at `cuts`, as a socket would, keeping what
/// `recv` left; the body octets reported for `stream`.
fn feed(conn: &mut Connection, input: &[u8], cuts: &[usize]) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let mut body = Vec::new();
    let mut ended = false;
    let mut at = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(input.len());
    points.sort_unstable();
    for p in points {
        buf.extend_from_slice(&input[at..p]);
        at = p;
        let n = conn.recv(&buf).unwrap();
        while let Some(e) = conn.poll_event() {
            if let Event::Data {
                stream: 1,
                data,
                end_stream,
            } = e
            {
                body.extend_from_slice(&buf[data.clone()]);
                conn.release_capacity(1, data.len());
                ended |= end_stream;
            }
        }
        buf.drain(..n);
    }
    assert!(buf.is_empty(), "{} octets never consumed", buf.len());
    (body, ended)
}

proptest! {
    #[test]
    fn a_body_in_frames_read_in_any_pieces_arrives_whole(
        chunks in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..3000), 0u8..20), 1..20),
        cuts in proptest::collection::vec(any::<usize>(), 0..30),
    ) {
        let mut input = PREFACE.to_vec();
        input.extend(frame(4, 0, 0, &[]));
        input.extend(frame(1, 0x4, 1, POST));
        let mut want = Vec::new();
        for (i, (chunk, pad)) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let flags = if last { 0x1 } else { 0 };
            if *pad > 0 {
                let mut payload = vec![*pad];
                payload.extend_from_slice(chunk);
                payload.extend(std::iter::repeat_n(0, usize::from(*pad)));
                input.extend(frame(0, flags | 0x8, 1, &payload));
            } else {
                input.extend(frame(0, flags, 1, chunk));
            }
            want.extend_from_slice(chunk);
        }
        let mut conn = Connection::new(Settings::default());
        let (body, ended) = feed(&mut conn, &input, &cuts);
        prop_assert!(ended);
        prop_assert_eq!(body, want);
    }

    /// Any frames after the handshake: recv answers (Ok, or an error with
    /// a GOAWAY as the last frame out), and never panics.
    #[test]
    fn any_frames_get_an_answer(
        frames in proptest::collection::vec(
            (0u8..12, any::<u8>(), 0u32..8, proptest::collection::vec(any::<u8>(), 0..40)),
            1..30,
        ),
    ) {
        let mut conn = Connection::new(Settings::default());
        let mut input = PREFACE.to_vec();
        input.extend(frame(4, 0, 0, &[]));
        for (kind, flags, stream, payload) in &frames {
            input.extend(frame(*kind, *flags, *stream, payload));
        }
        let result = conn.recv(&input);
        while conn.poll_event().is_some() {}
        let mut out = Vec::new();
        conn.write_to(&mut out);
        if result.is_err() {
            // The last frame out is a GOAWAY (type 7), 17 octets.
            prop_assert!(out.len() >= 17);
            prop_assert_eq!(out[out.len() - 17 + 3], 7);
            prop_assert!(conn.is_done());
        }
    }

    /// A response's head and body go out in whole frames no larger than the
    /// peer's maximum, the DATA adding up to the body, the last ending it.
    #[test]
    fn a_response_goes_out_in_whole_frames(len in 0usize..70_000, status in 100u16..600) {
        let mut conn = Connection::new(Settings::default());
        let mut input = PREFACE.to_vec();
        input.extend(frame(4, 0, 0, &[0, 4, 0, 2, 0, 0]));
        input.extend(frame(8, 0, 0, &100_000u32.to_be_bytes()));
        input.extend(frame(1, 0x5, 1, POST));
        conn.recv(&input).unwrap();
        while conn.poll_event().is_some() {}
        let status = if (100..200).contains(&status) { 200 } else { status };
        conn.send_headers(1, status, &[(b"content-length", len.to_string().as_bytes())], false).unwrap();
        let body = vec![b'z'; len];
        prop_assert_eq!(conn.send_data(1, &body, true).unwrap(), len);
        let mut out = Vec::new();
        conn.write_to(&mut out);
        let mut rest = &out[..];
        let mut data = 0;
        let mut ended = false;
        while rest.len() >= 9 {
            let l = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
            prop_assert!(l <= 16_384);
            if rest[3] == 0 {
                data += l;
                ended |= rest[4] & 1 != 0;
            }
            rest = &rest[9 + l..];
        }
        prop_assert!(rest.is_empty());
        prop_assert_eq!(data, len);
        prop_assert!(ended);
    }
}
