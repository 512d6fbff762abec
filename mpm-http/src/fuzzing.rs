//! Entry points for the fuzz targets in `fuzz/` and the property tests in
//! `mpm-http/tests/parser_properties.rs`: the request-head parser and the
//! chunked decoder, each run on arbitrary bytes with its invariants checked
//! by assertions. Not part of the shipped API: compiled only with the
//! `fuzzing` feature, which the fuzz crate and this crate's own tests turn
//! on, so that code outside this crate can reach the parsers.
//!
//! Each function panics when an invariant breaks, which is what a fuzzer
//! and a property test look for; on any input that keeps them it returns
//! what it found, so that callers can compare runs.

use std::mem::MaybeUninit;

use crate::chunked::{self, ChunkError};
use crate::head::{self, Framing, Limits, Parsed, SLOTS};

/// The limits the entry points parse with: the defaults, but a small body
/// limit so that "too large" is reachable by short inputs.
const LIMITS: Limits = Limits {
    line: 8190,
    fields: 100,
    field_size: 8190,
    body: 64 * 1024,
    whole_body: 64 * 1024,
};

/// What the parser made of one request in a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A complete request: method, target and decoded body.
    Request {
        /// The method.
        method: String,
        /// The request target as sent.
        target: String,
        /// The body, decoded from its framing.
        body: Vec<u8>,
    },
    /// Refused with this status; the connection closes, nothing after it is read.
    Reject(u16),
}

/// The statuses the HTTP layer may refuse a request with before any handler.
const REFUSALS: [u16; 6] = [400, 413, 414, 417, 431, 505];

/// Parse a request head from `data`. Returns the head's length and
/// framing when complete, the status when refused, `None` when partial.
///
/// Invariants: a complete head lies within the input and parses the same
/// when the input ends right after it; a refusal is one of the statuses the
/// layer answers with. (That a prefix's verdict agrees with the whole's is
/// [`pipeline`]'s property.)
pub fn head(data: &[u8]) -> Option<Result<usize, u16>> {
    let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
    match head::parse(data, &mut slots, &LIMITS) {
        Parsed::Partial => None,
        Parsed::NewerMinor(at) => {
            // Served as 1.1: the caller rewrites the digit and parses again.
            assert!(data.get(at).is_some_and(|d| (b'2'..=b'9').contains(d)));
            let mut fixed = data.to_vec();
            fixed[at] = b'1';
            let again = head(&fixed);
            assert!(again.is_some(), "a rewritten head is no longer complete");
            again
        }
        Parsed::Reject(status) => {
            assert!(REFUSALS.contains(&status), "unexpected status {status}");
            Some(Err(status))
        }
        Parsed::Complete(h) => {
            let len = h.len;
            assert!(
                len > 0 && len <= data.len(),
                "head length {len} outside the input"
            );
            if let Framing::Length(n) = h.framing {
                assert!(n > 0, "an empty Content-Length body is framed as none");
            }
            let framing = h.framing;
            let mut again = [const { MaybeUninit::uninit() }; SLOTS];
            match head::parse(&data[..len], &mut again, &LIMITS) {
                Parsed::Complete(h2) => {
                    assert_eq!(h2.len, len, "the head alone parses to another length");
                    assert_eq!(h2.framing, framing, "the head alone frames differently");
                }
                other => panic!("the head alone does not parse: {other:?}"),
            }
            Some(Ok(len))
        }
    }
}

/// Decode a chunked body from the start of `data`. Returns the bytes the
/// body used and its decoded length, the error, or `None` when more input
/// is needed.
///
/// Invariants: the body lies within the input and within the limit; the
/// decoded body is shorter than its encoding; and every prefix of a complete
/// body asks for more input (the decoder runs again as bytes arrive, so a
/// prefix must never be refused or taken as complete).
pub fn chunked(data: &[u8]) -> Option<Result<(usize, usize), bool>> {
    let mut out = Vec::new();
    match chunked::decode(data, LIMITS.whole_body, &mut out) {
        Ok(None) => None,
        Err(e) => Some(Err(e == ChunkError::TooLarge)),
        Ok(Some(used)) => {
            assert!(used <= data.len(), "used {used} of {} bytes", data.len());
            assert!(
                out.len() as u64 <= LIMITS.whole_body,
                "decoded past the limit"
            );
            assert!(out.len() < used, "decoded {} from {used} bytes", out.len());
            // Every prefix when short; a spread of them otherwise.
            let step = (used / 256).max(1);
            let mut scratch = Vec::new();
            for cut in (0..used).step_by(step).chain([used - 1]) {
                let r = chunked::decode(&data[..cut], LIMITS.whole_body, &mut scratch);
                assert_eq!(r, Ok(None), "the prefix of {cut} bytes was not partial");
            }
            Some(Ok((used, out.len())))
        }
    }
}

/// Parse a pipelined stream of requests arriving in the pieces that `cuts`
/// (offsets into `stream`) make, the way a connection does: after each
/// piece, take every request that is complete. Stops at the first refusal.
///
/// The outcomes must not depend on the cuts: call it with none and with
/// some and compare.
pub fn pipeline(stream: &[u8], cuts: &[usize]) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|&c| c.min(stream.len())).collect();
    ends.sort_unstable();
    ends.push(stream.len());
    // A connection's buffer: rewritten in place for a newer minor version.
    let mut buf = stream.to_vec();
    for end in ends {
        if take_complete(&mut buf[..end], &mut start, &mut outcomes) {
            break;
        }
    }
    outcomes
}

/// Take the complete requests in `buf[*start..]`; true once one is refused.
fn take_complete(buf: &mut [u8], start: &mut usize, outcomes: &mut Vec<Outcome>) -> bool {
    let mut chunk_body = Vec::new();
    loop {
        let data = &buf[*start..];
        if data.is_empty() {
            return false;
        }
        let mut slots = [const { MaybeUninit::uninit() }; SLOTS];
        let h = match head::parse(data, &mut slots, &LIMITS) {
            Parsed::Partial => return false,
            Parsed::NewerMinor(at) => {
                buf[*start + at] = b'1';
                continue;
            }
            Parsed::Reject(status) => {
                outcomes.push(Outcome::Reject(status));
                return true;
            }
            Parsed::Complete(h) => h,
        };
        let (body, used) = match h.framing {
            Framing::None => (Vec::new(), h.len),
            Framing::Length(n) if n > LIMITS.whole_body => {
                outcomes.push(Outcome::Reject(413));
                return true;
            }
            Framing::Length(n) => {
                let end = h.len + n as usize;
                if data.len() < end {
                    return false;
                }
                (data[h.len..end].to_vec(), end)
            }
            Framing::Chunked => {
                match chunked::decode(&data[h.len..], LIMITS.whole_body, &mut chunk_body) {
                    Ok(None) => return false,
                    Ok(Some(n)) => (std::mem::take(&mut chunk_body), h.len + n),
                    Err(e) => {
                        let status = if e == ChunkError::TooLarge { 413 } else { 400 };
                        outcomes.push(Outcome::Reject(status));
                        return true;
                    }
                }
            }
        };
        outcomes.push(Outcome::Request {
            method: h.method.to_string(),
            target: h.target.to_string(),
            body,
        });
        *start += used;
    }
}
