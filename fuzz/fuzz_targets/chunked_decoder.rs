//! Arbitrary bytes as a chunked body: no panic, the body within the input
//! and the limit, and every prefix of a complete body still partial.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mpm_http::fuzzing::chunked(data);
});
