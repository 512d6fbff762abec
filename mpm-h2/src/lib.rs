//! A sans-IO HTTP/2 server connection (RFC 9113) with HPACK (RFC 7541).
//!
//! The caller owns every buffer and every socket: it reads octets into a
//! buffer of its own and hands them to [`Connection::recv`], which consumes
//! whole frames and queues [`Event`]s (a request head, body, trailers, a
//! reset, a window opened, a GOAWAY); it answers with
//! [`Connection::send_headers`], [`Connection::send_data`] (which takes what
//! the flow-control windows allow), [`Connection::send_trailers`],
//! [`Connection::reset`], and gives consumed body back with
//! [`Connection::release_capacity`]; [`Connection::write_to`] hands over the
//! frames to write. No threads, no wakers, no runtime.
//!
//! ```
//! use mpm_h2::{Connection, Event, Settings, PREFACE};
//!
//! let mut conn = Connection::new(Settings::default());
//! // The client's preface, an empty SETTINGS, and `GET /` on stream 1
//! // (HPACK: :method GET, :scheme http, :path /, :authority a).
//! let mut input = PREFACE.to_vec();
//! input.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
//! input.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41, 1, b'a']);
//! let used = conn.recv(&input).expect("a good request");
//! assert_eq!(used, input.len());
//! while let Some(event) = conn.poll_event() {
//!     if let Event::Request { stream, head, .. } = event {
//!         assert_eq!(head.path(), Some(&b"/"[..]));
//!         conn.send_headers(stream, 200, &[(b"content-type", b"text/plain")], false).unwrap();
//!         conn.send_data(stream, b"hello", true).unwrap();
//!     }
//! }
//! let mut out = Vec::new();
//! conn.write_to(&mut out); // our SETTINGS, the ACK of theirs, HEADERS, DATA
//! assert!(!out.is_empty());
//! ```
//!
//! # Contents
//!
//! * [`connection`]: [`Connection`] and [`Event`]: the preface, frames,
//!   stream states (§5.1), flow control (§5.2, §6.9), SETTINGS, PING,
//!   GOAWAY, the flood limits; [`HeaderBlock`], a response head written
//!   a field at a time;
//! * [`head`]: [`RequestHead`], request validation (§8.1–§8.3);
//! * [`hpack`]: HPACK's decoder (dynamic table bounded by our setting) and
//!   encoder (static table and literals), and [`Fields`];
//! * `huffman`: RFC 7541 Appendix B's code;
//! * `frame`: frame headers and the fixed-size frames;
//! * [`settings`]: [`Settings`] (ours, with nginx-like defaults);
//! * [`stats`]: [`Stats`], what a connection counted;
//! * [`error`]: [`Error`] and the RFC's error codes, [`Reason`].
//!
//! # Design
//!
//! **Why our own.** The server first drove hyperium's `h2` over an
//! in-memory pipe, with a frame checker of its own in front. Two of issue
//! 28's goals are out of reach that way. Memory: an idle h2c connection
//! cost 23.4 KiB of RSS under `--mpm event` against 0.94 KiB for HTTP/1.1
//! (`bench/h2/idle_memory.py`), because `h2` keeps a 16 KiB write buffer
//! and an 8 KiB read buffer per connection for its whole life, plus its
//! stream store; the goal is at most half of nginx's 16.5 KiB. CPU: 6.6 µs
//! per request against h2o's 3.7, from `h2`'s task and waker machinery and
//! the copies through those buffers. Here the caller's buffers are the
//! only ones: an idle connection holds its settings, windows and counters,
//! and the HPACK decoder's table (bounded by SETTINGS_HEADER_TABLE_SIZE),
//! and no buffer (`an_idle_connection_after_100_requests_holds_no_buffer`
//! in `tests/memory.rs`); DATA is reported as a range of the caller's own
//! input, not copied.
//!
//! **Allocations per request.** A header block is decoded into a scratch
//! the connection keeps while streams are open, and a request head is
//! copied out of it in one allocation of exactly its size ([`Fields`] is
//! one buffer: the octets, then where each field lies); a response head
//! is written straight into the output as HPACK
//! ([`Connection::start_headers`]: no list of fields, names lowercased as
//! they are written, a value formatted in place with
//! [`HeaderBlock::field_with`]); the output buffer can be the caller's
//! ([`Connection::lend_buffer`], a pool's); the stream table and event
//! queue are made with room for a burst of 16 streams at once. So a
//! request costs the codec one allocation, and a burst of streams on a
//! connection that was idle four more (the scratch's two, the table, the
//! queue), dropped again when it goes idle, since an idle connection
//! holds no buffer. Before: 7 to 8 a request (the head grown from
//! nothing, the output buffer made per burst).
//!
//! **What it leaves out.** Server push (we announce ENABLE_PUSH 0 and
//! never send PUSH_PROMISE), priorities (PRIORITY frames and the HEADERS
//! priority are parsed, checked for self-dependency, and ignored, as
//! RFC 9113 §5.3.2 allows), the client side, RFC 8441's extended CONNECT,
//! and the encoder's dynamic table and Huffman coding (see [`hpack`]).
//! A graceful GOAWAY comes in the two steps §6.8 asks of a server: the
//! largest stream id and a PING, then, when the PING comes back, the last
//! stream id seen ([`Connection::goaway`]).
//!
//! **At 64 cores.** All state is the connection's own: no lock, no
//! atomic, nothing shared between connections (the static and Huffman
//! tables are immutable `static`s). A connection is driven by one thread
//! at a time, so the codec costs the same per connection at 64 cores as
//! at 2; the caller adds [`Stats`] to its per-process counters when it
//! likes.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod connection;
pub mod error;
pub(crate) mod frame;
pub mod head;
pub mod hpack;
pub(crate) mod huffman;
pub mod settings;
pub mod stats;

pub use connection::{Connection, Event, HeaderBlock};
pub use error::{Error, Reason};
pub use frame::PREFACE;
pub use head::RequestHead;
pub use hpack::Fields;
pub use settings::Settings;
pub use stats::Stats;
