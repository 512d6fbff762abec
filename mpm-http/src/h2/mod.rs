//! HTTP/2 (RFC 9113) on the same [`HttpHandler`](crate::HttpHandler)s as
//! HTTP/1.1: one handler, either protocol. A connection becomes HTTP/2 when
//! its first bytes are the connection preface: a TLS client that chose
//! `h2` by ALPN sends it first (RFC 9113 §3.3), and so does a cleartext
//! client with prior knowledge (§3.3, `--h2c on`). One that chose `h2`
//! and sends anything else (an HTTP/1.1 request) gets a connection error,
//! GOAWAY PROTOCOL_ERROR (§3.4), never an HTTP/1.1 answer. The framing, HPACK,
//! flow control and the flood limits are hyperium's `h2`, driven without a
//! runtime; why that crate and this shape: the crate's design notes
//! ([`crate::design`]).
//!
//! * `connection.rs` — `H2Conn` and the step: socket → pipe → `h2` →
//!   streams → pipe → socket, and what to wait for.
//! * `stream.rs` — one stream: its body gathered, the handler run, an
//!   answer to come polled, the response sent a window at a time.
//! * `request.rs` — the request as a handler reads it, and the checks of
//!   RFC 9113 §8.3 that `h2` leaves to the server.
//! * `response.rs` — the response's HEADERS and its body's sources.
//! * `frame_check.rs` — what the client sends, checked before `h2` reads
//!   it: the error codes `h2` gets wrong, and the PING and SETTINGS floods.
//! * `refusals.rs` — what the server writes, scanned for the streams `h2`
//!   refuses past the concurrency limit.
//! * `pipe.rs` — the memory buffers `h2` reads and writes instead of a socket.
//! * `wake.rs` — the waker that only records a wake.
//! * `settings.rs` — [`H2Settings`].
//! * `stats.rs` — what the status page counts ([`h2_counts`]).

mod connection;
mod request;
mod response;
mod settings;
mod stats;
mod stream;

pub(crate) use connection::{not_a_preface, preface, step, H2Conn, Preface};
pub use settings::{H2Settings, MAX_FRAME_SIZE, MAX_WINDOW_SIZE, MIN_FRAME_SIZE};
pub use stats::{h2_counts, install as install_h2_stats, Count as H2Count};
