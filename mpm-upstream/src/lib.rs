//! # mpm-upstream
//!
//! The client side of HTTP/1.1 for mpm: what a reverse proxy and a handler
//! calling another service use to talk to an upstream, on the waiting
//! contract of [`mpm_core::waiting`]. Every socket is non-blocking, always:
//! an operation that would block awaits [`mpm_core::waiting::ready`], so
//! under the event MPM the request is parked on the loop with the upstream
//! socket and holds no thread, and under prefork and worker the same code
//! blocks its step in `poll(2)`. One code path under every model.
//!
//! **Where requests go**
//! * [`Upstream`] — an `http://` or `https://` URL, its host name resolved
//!   at start and on reload ([`Upstream::resolve`]), never per request.
//! * [`Target`] — one address of it, plain or TLS with a server name.
//!
//! **Connections**
//! * [`connect_tcp`] — a non-blocking connect with a deadline; a failure
//!   is [`Error::Connect`], naming the address.
//! * [`TlsConfig`] — rustls to upstreams: SNI, certificates verified
//!   against the Mozilla roots or a CA file (never not verified).
//! * [`Connection`] — an open connection, plain or TLS: `async` reads and
//!   writes, and `try_` ones returning `WouldBlock` for a caller that
//!   builds its own [`Await`](mpm_core::Await).
//! * [`Pool`] — keep-alive connections, one pool per process, with
//!   [`PoolSettings`] and per-upstream [`PoolStats`]; an idle connection the
//!   upstream closed or wrote to is dropped at checkout.
//!
//! **The protocol** ([`http1`])
//! * [`write_request_head`], [`write_request`], [`BodyWriter`] — a
//!   request going out, its body `Content-Length` or chunked.
//! * [`read_response_head`] (waiting as a [`HeadTimeout`] says) →
//!   [`ResponseHead`], [`BodyFraming`],
//!   [`BodyReader`] — a response coming in, its body decoded from its
//!   framing with bounded memory; a body cut short is an error, never an
//!   end.
//!
//! **For handlers**
//! * [`Client`] — `client.get(url).header(..).send().await?.text().await?`,
//!   as a reqwest user would write it, on a pool.
//!
//! * [`Error`] — this crate's one error type; [`Error::is_retryable`] says
//!   when an idempotent request may go to the next upstream.
//!
//! **What it does not do**: HTTP/2 or HTTP/3 upstreams, redirects (a `3xx`
//! is a response like another), cookies, forward proxies, decompression,
//! TLS without verifying the upstream's certificate, DNS per request for an
//! [`Upstream`] (a [`Client`] given a host name resolves it once and
//! caches it; resolving blocks, so prefer IP addresses or resolved
//! [`Upstream`]s on an event loop).
//!
//! ```no_run
//! use mpm_core::waiting::block_on;
//! use mpm_upstream::Client;
//!
//! // In a handler this is `.await`ed; block_on is for a thread of one's own.
//! let body = block_on(async {
//!     Client::new().get("http://127.0.0.1:8081/health").send().await?.text().await
//! })?;
//! # Ok::<(), mpm_upstream::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod address;
mod client;
mod connect;
mod connection;
mod error;
pub mod http1;
mod pool;
mod tls;

pub use address::Upstream;
pub use client::{Client, ClientResponse, RequestBuilder, DEFAULT_MAX_BODY, DEFAULT_TIMEOUT};
pub use connect::connect_tcp;
pub use connection::Connection;
pub use error::{Error, Phase, Result};
pub use http1::{
    read_response_head, write_request, write_request_head, BodyFraming, BodyReader, BodyWriter,
    HeadLimits, HeadTimeout, RequestFraming, ResponseHead,
};
pub use pool::{Pool, PoolKey, PoolSettings, PoolStats, Target};
pub use tls::TlsConfig;
