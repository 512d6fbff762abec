//! # mpm-http
//!
//! HTTP/1.1 and HTTP/2 on mpm's [`ConnectionHandler`](mpm_core::ConnectionHandler):
//! users write an [`HttpHandler`] and never touch parsing, keep-alive or
//! framing. It knows the core's contract and nothing of the process models.
//!
//! **The layer**
//! * [`HttpHandler`] — request in, response out; [`Request`] and
//!   [`Response`], with [`Body`] bytes, a stream, or a [`FileBody`] sent by
//!   sendfile.
//! * Waiting on another server without a thread (`waiting.rs`): an answer
//!   still to come ([`Response::later`], a future), a body from a
//!   non-blocking source ([`PollRead`]), an upgraded connection's
//!   [`Tunnel`] (pumped by `tunnel.rs`); all driven by the core's
//!   [`Interest::Await`](mpm_core::Interest::Await).
//! * [`HttpFactory`] — the [`HandlerFactory`](mpm_core::HandlerFactory) that
//!   runs a handler in every worker, with the [`HttpSettings`] it is given.
//! * [`HttpService`] — the state machine behind it: `connection.rs` drives
//!   the steps, `reading.rs` turns buffered bytes into requests (with the
//!   head parser in `head.rs` and the chunked decoder in `chunked.rs`), and
//!   `writing.rs` serializes and sends responses; [`HttpConn`] (`state.rs`)
//!   is what a connection holds between steps. Each file imports only
//!   those after it in that order.
//! * HTTP/2 (`h2/`): a connection whose first bytes are the preface is
//!   served on our sans-IO codec `mpm-h2`, each stream a
//!   [`Request`] for the same handler; [`H2Settings`] say when and with
//!   what limits, [`h2_counts`] what the status page shows.
//! * Internal redirects ([`InternalRedirect`], `internal_redirect.rs`): an
//!   answer that asks the server to answer another target instead
//!   (nginx's internal redirect, an upstream's `X-Accel-Redirect`).
//! * [`RequestPool`] — a request's scratch arena, reset after it.
//! * [`Routes`] and [`Router`] — routing by method and path with path
//!   parameters, and whole handlers mounted under a prefix;
//!   [`IntoResponse`] for what route handlers return, and with the `json`
//!   feature `Json` and `Request::json`.
//! * A request body read as it arrives: on the handler's thread
//!   ([`HttpHandler::streams_body`], [`Request::body_reader`]), or by its
//!   future without a thread ([`HttpHandler::awaits_body`],
//!   [`AwaitedBody`], fed by `awaited_body.rs`).
//! * [`AddedFields`] — fields the server adds to every response
//!   (`--add-header`: nginx's `add_header`), whatever handler made it.
//! * [`ErrorPages`] — pages that replace the built-in error pages, status
//!   kept: the layer's own refusals as much as a handler's.
//! * [`access_log`] — the access log, in the formats of [`log_format`].
//! * [`escape`] — HTML and JSON text escapes, for applications' bodies.
//! * [`Error`] — this crate's one error type.
//!
//! Applications live in crates of their own on this one: the static site
//! (`mpm-site`), the status page (`mpm-status`). The layer knows none of
//! them; the one thing it asks of the file system is whether a file body
//! is in the page cache (`page_cache.rs`), before sending it on an event
//! loop.
//!
//! What the layer does for every handler (RFC 9112 / RFC 9110):
//! keep-alive by default for 1.1 and on request for 1.0; pipelined requests
//! answered in order; `HEAD` answered without a body; request bodies framed by
//! `Content-Length` or chunked, always consumed so the next request is read
//! from the right place; `100 Continue` written whole before the body is
//! read; both framings at once, a missing or repeated `Host` on 1.1, a `Host`
//! that is not `uri-host [":" port]`, a target that is not one of the four
//! forms its method may use (or has a fragment), and malformed heads refused
//! with 400 and the connection closed; 414, 431 and 413 for the
//! request-line, header and body limits; `HTTP/1.x` above 1.1 served as 1.1,
//! other majors 505; `Date` on every response, and `Server` unless the handler
//! set its own; 408 when a head
//! takes longer than the header timeout as extended by its minimum rate (up
//! to its maximum), or a body longer than the body timeout as extended by
//! its. What a method means is the handler's:
//! [`Response::method_not_allowed`] answers 405 or 501 as RFC 9110 wants.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access_log;
mod added_fields;
mod awaited_body;
mod body;
mod buffer_pool;
mod byte_classes;
mod chunked;
mod connection;
mod date;
pub mod design;
mod error;
mod error_pages;
pub mod escape;
mod factory;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod h2;
mod handler;
mod head;
mod internal_redirect;
#[cfg(feature = "json")]
mod json;
pub mod log_format;
mod page_cache;
mod reading;
mod request;
mod request_pool;
mod response;
mod router;
mod settings;
mod state;
mod tunnel;
mod waiting;
mod wire_fields;
mod writing;

/// The allocator trait and collections a [`RequestPool`] plugs into.
pub use added_fields::{AddedFields, MAX_ADDED_FIELDS};
pub use allocator_api2;
pub use awaited_body::AwaitedBody;
pub use connection::HttpService;
pub use error::{Error, Result};
pub use error_pages::{ErrorPage, ErrorPages};
pub use factory::HttpFactory;
pub use h2::{
    h2_counts, install_h2_stats, H2Count, H2Settings, MAX_FRAME_SIZE, MAX_WINDOW_SIZE,
    MIN_FRAME_SIZE,
};
pub use handler::HttpHandler;
pub use head::MAX_REQUEST_FIELDS;
pub use internal_redirect::InternalRedirect;
#[cfg(feature = "json")]
pub use json::Json;
pub use request::{BodyReader, Request, Version};
pub use request_pool::RequestPool;
pub use response::{
    is_known_method, reason_phrase, Body, FileBody, HeaderError, HeaderText, Part, Response,
};
pub use router::{IntoResponse, Rejection, Router, Routes};
pub use settings::{HttpSettings, DEFAULT_SENDFILE_MAX_CHUNK, WHOLE_BODY_CAP};
pub use state::HttpConn;
pub use waiting::{PollRead, Tunnel};
