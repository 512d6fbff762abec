//! # mpm-http
//!
//! HTTP/1.1 on mpm's [`ConnectionHandler`](mpm_core::ConnectionHandler):
//! users write an [`HttpHandler`] and never touch parsing, keep-alive or
//! framing. It knows the core's contract and nothing of the process models.
//!
//! **The layer**
//! * [`HttpHandler`] — request in, response out; [`Request`] and
//!   [`Response`], with [`Body`] bytes, a stream, or a [`FileBody`] sent by
//!   sendfile.
//! * [`HttpFactory`] — the [`HandlerFactory`](mpm_core::HandlerFactory) that
//!   runs a handler in every worker, with the [`HttpSettings`] it is given.
//! * [`HttpService`] — the state machine behind it: `connection.rs` drives
//!   the steps, `reading.rs` turns buffered bytes into requests (with the
//!   head parser in `head.rs` and the chunked decoder in `chunked.rs`), and
//!   `writing.rs` serializes and sends responses.
//! * [`RequestPool`] — a request's scratch arena, reset after it.
//!
//! **What `mpm serve` runs on it**
//! * [`StaticFiles`] — a document root, with the open-file cache, and
//!   [`mime`] types; [`DefaultSite`] — the embedded welcome page.
//! * [`server_status`] — the status page (httpd's `mod_status`).
//! * [`access_log`] — the access log, in the formats of [`log_format`].
//! * [`Error`] — this crate's one error type.
//!
//! What the layer does for every handler (RFC 9112 / RFC 9110):
//! keep-alive by default for 1.1 and on request for 1.0; pipelined requests
//! answered in order; `HEAD` answered without a body; request bodies framed by
//! `Content-Length` or chunked, always consumed so the next request is read
//! from the right place; both framings at once, a missing or repeated `Host`
//! on 1.1, and malformed heads refused with 400 and the connection closed;
//! 414, 431 and 413 for the request-line, header and body limits; 505 for
//! other versions; `Date` and `Server` on every response; 408 when a head
//! takes longer than the header timeout, or a body longer than the body
//! timeout as extended by its minimum rate.

#![warn(missing_docs)]

pub mod access_log;
mod buffer_pool;
mod chunked;
mod connection;
mod date;
mod default_site;
pub mod design;
mod error;
mod factory;
#[doc(hidden)]
pub mod fuzzing;
mod handler;
mod head;
pub mod log_format;
pub mod mime;
mod page_cache;
mod reading;
mod request;
mod request_pool;
mod response;
pub mod server_status;
mod settings;
mod static_files;
mod writing;

/// The allocator trait and collections a [`RequestPool`] plugs into.
pub use allocator_api2;
pub use connection::{HttpConn, HttpService};
pub use default_site::{About, DefaultSite};
pub use error::{Error, Result};
pub use factory::HttpFactory;
pub use handler::HttpHandler;
pub use head::MAX_REQUEST_FIELDS;
pub use request::{Request, Version};
pub use request_pool::RequestPool;
pub use response::{reason_phrase, Body, FileBody, HeaderText, Response};
pub use settings::{HttpSettings, DEFAULT_SENDFILE_MAX_CHUNK};
pub use static_files::{Dotfiles, StaticFiles, DEFAULT_IN_MEMORY};
