//! The crate's one error type.

use std::fmt;
use std::io;
use std::net::SocketAddr;

/// What went wrong talking to an upstream.
///
/// A reverse proxy answers most of these with 502 and a [`Timeout`] with
/// 504; [`Error::is_retryable`] says which ones left the upstream without a
/// byte of the request's answer, so that an idempotent request may be tried
/// on the next upstream.
///
/// [`Timeout`]: Error::Timeout
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The TCP connection to `addr` could not be opened (refused,
    /// unreachable, ...): nothing was sent.
    #[error(
        "could not connect to the upstream {addr}: {source} (is it running and listening there?)"
    )]
    Connect {
        /// The address that failed.
        addr: SocketAddr,
        /// Why, as the kernel said.
        source: io::Error,
    },
    /// The deadline passed during `phase`.
    #[error("the upstream did not {phase} in time (raise the {phase} timeout if it is just slow)")]
    Timeout {
        /// What the exchange was doing when the time ran out.
        phase: Phase,
    },
    /// The upstream answered something that is not an HTTP/1.x response
    /// this client accepts: a garbage status line, a head too large, too
    /// many fields, conflicting framing, a broken chunk.
    #[error("the upstream's response is malformed: {0}")]
    BadResponse(String),
    /// The upstream closed or reset the connection before sending any byte
    /// of a response: the request may not have been processed.
    #[error("the upstream closed the connection before answering")]
    Closed,
    /// The TLS handshake failed, or the upstream's TLS records did not
    /// verify; the reason says which (an unknown issuer: give the CA file
    /// that signed its certificate).
    #[error("TLS to the upstream failed: {0}")]
    Tls(String),
    /// Another I/O error on an open connection.
    #[error("I/O error talking to the upstream: {0}")]
    Io(#[from] io::Error),
    /// The URL is not one this client can use; the message says why.
    #[error("{0}")]
    Url(String),
    /// The request to send is not valid HTTP/1.1 (a CR, LF or NUL in a
    /// field, a body of another length than declared).
    #[error("the request cannot be sent: {0}")]
    InvalidRequest(String),
    /// The response body is larger than the limit the caller set.
    #[error("the upstream's response body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The part of an exchange a [`Error::Timeout`] cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Opening the connection (TCP and TLS handshake).
    Connect,
    /// Sending the request.
    Send,
    /// Reading the response.
    Read,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Send => "accept the request",
            Phase::Read => "answer",
        })
    }
}

impl Error {
    /// Whether the upstream surely sent no byte of an answer, so that an
    /// idempotent request may be tried again on another upstream (as
    /// nginx's `proxy_next_upstream error timeout`): a connect error or
    /// connect timeout, or [`Error::Closed`].
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::Closed
                | Error::Timeout {
                    phase: Phase::Connect
                }
        )
    }

    /// Whether this is a [`Error::Connect`]: the upstream could not be
    /// reached at all (passive health counts it as a failure).
    pub fn is_connect(&self) -> bool {
        matches!(self, Error::Connect { .. })
    }

    /// An I/O error from `phase`, with a timeout named as one.
    pub(crate) fn io_in(phase: Phase, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::TimedOut {
            Error::Timeout { phase }
        } else {
            Error::Io(e)
        }
    }
}
