//! HTTP/1.1 on top of [`ConnectionHandler`](crate::ConnectionHandler): users
//! write an [`HttpHandler`] and never touch parsing, keep-alive or framing.
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

mod buffer_pool;
mod chunked;
mod connection;
mod date;
#[doc(hidden)]
pub mod fuzzing;
mod head;
mod request;
mod request_pool;
mod response;

use std::sync::Arc;
use std::time::Duration;

/// The allocator trait and collections a [`RequestPool`] plugs into.
pub use allocator_api2;
pub use connection::{HttpConn, HttpService};
pub use request::{Request, Version};
pub use request_pool::RequestPool;
pub use response::{reason_phrase, Body, FileBody, HeaderText, Response};

use crate::config::Config;
use crate::connection_handler::HandlerFactory;

/// Request in, response out.
///
/// A handler is built per worker (after `fork()` in prefork, per thread in
/// worker and event) by the function given to [`HttpFactory::new`], so it may
/// keep mutable state of its own without locks. It may block (on a file, a
/// database): the MPM's workers absorb it. A panic answers 500 for that request
/// only.
///
/// # Example: embedding
///
/// Implement the trait, pick an MPM, run. The lifecycle is stopped here from a
/// second thread; a real server stops on SIGTERM.
///
/// ```
/// use std::io::{Read, Write};
/// use std::net::TcpStream;
/// use std::time::Duration;
/// use mpm_core::http::{HttpFactory, HttpHandler, Request, Response};
/// use mpm_core::{Config, Lifecycle, Listener, Mpm, Phase};
///
/// struct Hello;
/// impl HttpHandler for Hello {
///     fn handle(&mut self, req: &Request<'_>) -> Response {
///         Response::new(200)
///             .header("Content-Type", "text/plain")
///             .body(format!("hello from {}\n", req.path()))
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = Config { listen: vec!["127.0.0.1:0".parse()?], max_request_workers: 4,
///                       threads_per_child: 4, ..Config::default() };
/// let listeners = Listener::bind_all(&config.listen, config.backlog)?;
/// let addr = listeners[0].local_addr();
/// let lifecycle = Lifecycle::new()?;
/// let factory = HttpFactory::new(&config, || Hello);
/// // One slot per worker thread, where the MPM keeps states and counters.
/// let slots = mpm_core::scoreboard::Scoreboard::create(1, 4)?.process_slots(0);
/// let server = {
///     let (config, lifecycle) = (config.clone(), lifecycle.clone());
///     std::thread::spawn(move || {
///         mpm_worker::Worker.run(&config, listeners, factory, &lifecycle, slots)
///     })
/// };
/// assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(5)));
///
/// let mut s = TcpStream::connect(addr)?;
/// s.write_all(b"GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
/// let mut reply = String::new();
/// s.read_to_string(&mut reply)?;
/// assert!(reply.starts_with("HTTP/1.1 200 OK"));
/// assert!(reply.ends_with("hello from /hi\n"));
///
/// lifecycle.stop();
/// server.join().unwrap()?;
/// # Ok(()) }
/// ```
pub trait HttpHandler {
    /// Answer one request.
    fn handle(&mut self, request: &Request<'_>) -> Response;

    /// Can [`handle`](Self::handle) answer this request without blocking
    /// (no disk wait, no network call, no lock held long)? The event MPM then
    /// answers it on its event loop, saving the two thread switches of a
    /// hand-off to a worker. The default, no, is always safe.
    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        let _ = request;
        false
    }
}

impl<H: HttpHandler + ?Sized> HttpHandler for Box<H> {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        (**self).handle(request)
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        (**self).answers_without_blocking(request)
    }
}

/// The HTTP layer's settings, shared read-only by every connection.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub(crate) limits: head::Limits,
    pub(crate) keepalive: bool,
    pub(crate) max_keepalive_requests: u64,
    pub(crate) request_header_timeout: Duration,
    pub(crate) request_body_timeout: Duration,
    pub(crate) request_body_min_rate: u64,
    /// The longest a single read may wait (`--timeout`).
    pub(crate) timeout: Duration,
    pub(crate) sendfile: bool,
    pub(crate) request_pool: bool,
    pub(crate) server: String,
    pub(crate) buffers: Arc<buffer_pool::BufferPool>,
    pub(crate) access_log: Option<Arc<crate::access_log::AccessLog>>,
}

impl HttpSettings {
    /// The settings a configuration asks for.
    pub fn from_config(config: &Config) -> HttpSettings {
        HttpSettings {
            limits: head::Limits {
                line: config.limit_request_line,
                fields: config.limit_request_fields,
                field_size: config.limit_request_field_size,
                body: config.limit_request_body,
            },
            keepalive: config.keepalive,
            max_keepalive_requests: config.max_keepalive_requests,
            request_header_timeout: config.request_header_timeout,
            request_body_timeout: config.request_body_timeout,
            request_body_min_rate: config.request_body_min_rate,
            timeout: config.timeout,
            sendfile: config.sendfile,
            request_pool: config.request_pool,
            server: format!("mpm/{}", env!("CARGO_PKG_VERSION")),
            buffers: Arc::default(),
            access_log: None,
        }
    }

    /// The largest receive buffer a connection may grow to: a whole head
    /// plus a whole body.
    pub(crate) fn max_buffer(&self) -> usize {
        let body = usize::try_from(self.limits.body).unwrap_or(usize::MAX);
        self.limits
            .max_head()
            .saturating_add(body)
            .saturating_add(1024)
    }
}

/// A [`HandlerFactory`] that wraps each worker's [`HttpHandler`] in an
/// [`HttpService`].
pub struct HttpFactory<F> {
    settings: Arc<HttpSettings>,
    make: F,
}

impl<F> std::fmt::Debug for HttpFactory<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFactory")
            .field("settings", &self.settings)
            .finish()
    }
}

impl<F, H> HttpFactory<F>
where
    F: Fn() -> H + Send + Sync + 'static,
    H: HttpHandler,
{
    /// Serve handlers made by `make` (called once per worker) with the HTTP
    /// settings of `config`.
    pub fn new(config: &Config, make: F) -> Self {
        HttpFactory {
            settings: Arc::new(HttpSettings::from_config(config)),
            make,
        }
    }

    /// Log every response of every worker to `log` (`None`: no access log).
    pub fn access_log(mut self, log: Option<Arc<crate::access_log::AccessLog>>) -> Self {
        Arc::make_mut(&mut self.settings).access_log = log;
        self
    }
}

impl<F, H> HandlerFactory for HttpFactory<F>
where
    F: Fn() -> H + Send + Sync + 'static,
    H: HttpHandler,
{
    type Handler = HttpService<H>;

    fn build(&self) -> HttpService<H> {
        HttpService::new((self.make)(), Arc::clone(&self.settings))
    }
}
