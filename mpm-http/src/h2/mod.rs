//! HTTP/2 (RFC 9113) on the same [`HttpHandler`](crate::HttpHandler)s as
//! HTTP/1.1: one handler, either protocol. A connection becomes HTTP/2 when
//! its first bytes are the connection preface: a TLS client that chose
//! `h2` by ALPN sends it first (RFC 9113 §3.3), and so does a cleartext
//! client with prior knowledge (§3.3, `--h2c on`). One that chose `h2`
//! and sends anything else (an HTTP/1.1 request) gets a connection error,
//! GOAWAY PROTOCOL_ERROR (§3.4), never an HTTP/1.1 answer. The framing,
//! HPACK, flow control, the checks of a request head and the flood limits
//! are our sans-IO codec `mpm-h2`'s: it keeps no buffer when idle, so an
//! idle connection holds its state and nothing else, and it costs less
//! CPU per request than hyperium's `h2` driven over a pipe, which this
//! module used before (issue 28's two goals: KiB per idle connection at
//! most half of nginx's, CPU per request no more than h2o's; the crate's
//! design notes, [`crate::design`], give the figures).
//!
//! * `connection.rs` — `H2Conn` and the step: socket → buffer → codec →
//!   streams → codec → socket, and what to wait for.
//! * `stream.rs` — one stream: its body gathered, the handler run, an
//!   answer to come polled, the response sent a window at a time.
//! * `request.rs` — the request as a handler reads it, and the checks of
//!   RFC 9113 §8.3 that the codec leaves to the server (`:path` in origin
//!   form, `host` against `:authority`). The frame checks and the flood
//!   and refusal counts that `frame_check.rs` and `refusals.rs` made in
//!   front of `h2` are the codec's own now; nothing is checked twice.
//! * `response.rs` — the response's HEADERS and its body's sources.
//! * `settings.rs` — [`H2Settings`], and the codec's settings they make.
//! * `stats.rs` — what the status page counts ([`h2_counts`]), made from
//!   the codec's counters.

mod connection;
mod request;
mod response;
mod settings;
mod stats;
mod stream;

pub(crate) use connection::{not_a_preface, preface, step, H2Conn, Preface};
pub use settings::{H2Settings, MAX_FRAME_SIZE, MAX_WINDOW_SIZE, MIN_FRAME_SIZE};
pub use stats::{h2_counts, install as install_h2_stats, Count as H2Count};
