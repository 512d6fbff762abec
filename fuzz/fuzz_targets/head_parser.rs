//! Arbitrary bytes as a request head: no panic, and a complete head parses
//! the same on its own.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mpm_http::fuzzing::head(data);
});
