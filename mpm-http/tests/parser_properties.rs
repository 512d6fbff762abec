//! Properties of the request-head parser and the chunked decoder, on
//! arbitrary and on mutated valid input: no input panics or breaks an
//! invariant, and however a pipelined stream is split into reads, the same
//! requests come out. The fuzz targets in `fuzz/` run the same functions.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

use mpm_http::fuzzing::{self, Outcome};
use proptest::prelude::*;

/// A valid pipelined stream: every framing, extensions, trailers, HEAD,
/// absolute-form, HTTP/1.0.
const STREAM: &[u8] = b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n\
POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello\
POST /three HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n\
HEAD /four HTTP/1.1\r\nHost: a\r\n\r\n\
GET http://a/five?q=1 HTTP/1.1\r\nHost: a\r\n\r\n\
GET /six HTTP/1.0\r\n\r\n";

fn request(method: &str, target: &str, body: &[u8]) -> Outcome {
    Outcome::Request {
        method: method.into(),
        target: target.into(),
        body: body.to_vec(),
    }
}

#[test]
fn the_valid_stream_parses_to_its_six_requests() {
    assert_eq!(
        fuzzing::pipeline(STREAM, &[]),
        [
            request("GET", "/one", b""),
            request("POST", "/two", b"hello"),
            request("POST", "/three", b"abcde"),
            request("HEAD", "/four", b""),
            request("GET", "http://a/five?q=1", b""),
            request("GET", "/six", b""),
        ]
    );
}

/// Found by the `pipeline_splits` fuzz target: `HTTP/0.1` was refused 505
/// when its line arrived whole but 400 when cut inside the version; and a
/// line with extra spaces was judged by its last token (`HTTP/1.1`, 505)
/// instead of the third part (400).
#[test]
fn a_bad_version_gets_one_status_however_its_line_is_cut() {
    let cases: [(&[u8], u16); 2] = [
        (b"GET /one HTTP/0.1\r\nHost: a\r\n\r\n", 505),
        (b"GET /one HTTPPOST /3 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ];
    for (stream, status) in cases {
        for cut in 0..=stream.len() {
            assert_eq!(
                fuzzing::pipeline(stream, &[cut]),
                [Outcome::Reject(status)],
                "{:?} cut at {cut}",
                String::from_utf8_lossy(stream)
            );
        }
    }
}

/// Requests the issue names as smuggling shapes: each must be refused with
/// 400 (and, in the pipeline, nothing after it is read).
const SMUGGLING: &[&[u8]] = &[
    // Content-Length and Transfer-Encoding together.
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    // Two Content-Lengths that disagree, in two fields or one.
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 5\r\n\r\nabcde",
    // Transfer codings other than chunked, or chunked twice.
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    // Transfer-Encoding on HTTP/1.0.
    b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    // Obsolete line folding.
    b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n",
    // A bare CR inside a field, and as a line end.
    b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
    b"GET / HTTP/1.1\rHost: a\r\n\r\n",
    // Whitespace before the colon.
    b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
    // NUL in a field value, a field name, the target.
    b"GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX\0: b\r\n\r\n",
    b"GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n",
    // Invalid chunk sizes: not hex, signed, too long, bare LF, missing CRLF.
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    // Signs and junk in Content-Length.
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
];

#[test]
fn smuggling_shapes_are_refused_with_400_and_end_the_stream() {
    let after = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    for shape in SMUGGLING {
        let mut stream = shape.to_vec();
        stream.extend_from_slice(after);
        assert_eq!(
            fuzzing::pipeline(&stream, &[]),
            [Outcome::Reject(400)],
            "{:?}",
            String::from_utf8_lossy(shape)
        );
    }
}

/// A byte of `STREAM` replaced, inserted or removed at a few places.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec((0..STREAM.len(), any::<u8>(), 0..3u8), 1..6).prop_map(|edits| {
        let mut s = STREAM.to_vec();
        for (at, byte, kind) in edits {
            let at = at.min(s.len().saturating_sub(1));
            match kind {
                0 => s[at] = byte,
                1 => s.insert(at, byte),
                _ => {
                    s.remove(at);
                }
            }
        }
        s
    })
}

/// Bytes that look like HTTP: drawn from the characters that matter to framing.
fn http_ish() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: Vec<u8> =
        b"\r\n\0 \t:;,=-+0123456789abcdefxXGETPOSHhtp/1.HostContent-LengthTransfer-Encodingchunked"
            .to_vec();
    proptest::collection::vec(proptest::sample::select(alphabet), 0..300)
}

fn any_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        http_ish(),
        mutated(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_input_panics_the_head_parser(input in any_input()) {
        fuzzing::head(&input);
    }

    #[test]
    fn no_input_panics_the_chunked_decoder(input in any_input()) {
        fuzzing::chunked(&input);
    }

    #[test]
    fn no_input_panics_the_chunked_decoder_on_chunked_shapes(
        chunks in proptest::collection::vec((0..40usize, proptest::option::of(";[a-z=]{0,7}")), 0..6),
        junk in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut body = Vec::new();
        for (n, ext) in &chunks {
            body.extend(format!("{n:x}{}\r\n", ext.as_deref().unwrap_or("")).as_bytes());
            body.extend(std::iter::repeat_n(b'z', *n));
            body.extend(b"\r\n");
        }
        body.extend(b"0\r\n\r\n");
        let whole = fuzzing::chunked(&body);
        prop_assert!(matches!(whole, Some(Ok(_)) | Some(Err(false))), "{whole:?}");
        body.extend(&junk);
        fuzzing::chunked(&body);
    }

    #[test]
    fn any_split_of_a_valid_pipelined_stream_parses_to_the_same_requests(
        cuts in proptest::collection::vec(0..STREAM.len(), 0..12)
    ) {
        prop_assert_eq!(fuzzing::pipeline(STREAM, &cuts), fuzzing::pipeline(STREAM, &[]));
    }

    #[test]
    fn any_split_of_any_stream_parses_to_the_same_outcomes(
        stream in any_input(),
        cuts in proptest::collection::vec(0..400usize, 0..12)
    ) {
        prop_assert_eq!(fuzzing::pipeline(&stream, &cuts), fuzzing::pipeline(&stream, &[]));
    }
}
