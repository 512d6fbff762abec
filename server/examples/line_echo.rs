//! A protocol that is not HTTP, under any MPM: the line-echo handler of
//! the `line_protocol` example (the lower `ConnectionHandler` trait alone), with the
//! whole `mpm` command line.
//!
//! ```text
//! cargo run -p mpm --example line_echo -- serve --mpm prefork --listen 127.0.0.1:7007
//! printf 'hello\nworld\n' | nc -q1 127.0.0.1 7007
//! ```

#![forbid(unsafe_code)]

#[path = "line_protocol.rs"]
#[allow(dead_code)] // its own `main` runs it under worker only
mod protocol;

fn main() {
    std::process::exit(mpm::serve_protocol(|| protocol::LineEcho));
}
