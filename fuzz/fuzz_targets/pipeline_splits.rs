//! Arbitrary bytes as a pipelined stream, cut into reads at offsets taken
//! from its first bytes: the requests parsed must not depend on the cuts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpm_http::fuzzing::pipeline;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8);
    if rest.len() < 2 * n {
        return;
    }
    let (cut_bytes, stream) = rest.split_at(2 * n);
    let cuts: Vec<usize> = cut_bytes
        .chunks(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])) % (stream.len() + 1))
        .collect();
    assert_eq!(pipeline(stream, &cuts), pipeline(stream, &[]));
});
