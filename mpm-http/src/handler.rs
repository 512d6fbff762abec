//! The trait an HTTP application implements.

use crate::request::Request;
use crate::response::Response;

/// Request in, response out.
///
/// A handler is built per worker (after `fork()` in prefork, per thread in
/// worker and event) by the function given to
/// [`HttpFactory::new`](crate::HttpFactory::new), so it may keep mutable
/// state of its own without locks. It may block (on a file, a database): the
/// MPM's workers absorb it. A panic answers 500 for that request only, and is
/// one error-log line.
///
/// # Example
///
/// Here one connection is served by the blocking driver of `mpm-core`, as a
/// prefork child or a worker thread would serve it; the `mpm` crate runs the
/// same handler under any process model (`mpm::main`).
///
/// ```
/// use std::io::{Read, Write};
/// use std::net::{TcpListener, TcpStream};
/// use std::sync::{atomic::AtomicBool, Arc};
/// use mpm_core::blocking::{serve_blocking, NoPark, Timeouts};
/// use mpm_core::{HandlerFactory, MpmSettings, Stream};
/// use mpm_http::{HttpFactory, HttpHandler, HttpSettings, Request, Response};
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
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// let client = std::thread::spawn(move || -> std::io::Result<String> {
///     let mut s = TcpStream::connect(addr)?;
///     s.write_all(b"GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
///     let mut reply = String::new();
///     s.read_to_string(&mut reply)?;
///     Ok(reply)
/// });
///
/// let factory = HttpFactory::new(HttpSettings::default(), || Hello);
/// let (socket, peer) = listener.accept()?;
/// let stream = Stream::new(socket, peer, true, Arc::new(AtomicBool::new(false)))?;
/// let timeouts = Timeouts::from_settings(&MpmSettings::default());
/// serve_blocking(&mut factory.build(), stream, &timeouts, &mut NoPark);
///
/// let reply = client.join().expect("client")?;
/// assert!(reply.starts_with("HTTP/1.1 200 OK"));
/// assert!(reply.ends_with("hello from /hi\n"));
/// # Ok(()) }
/// ```
pub trait HttpHandler {
    /// Answer one request.
    fn handle(&mut self, request: &Request<'_>) -> Response;

    /// Can [`handle`](Self::handle) answer this request without blocking
    /// (no disk wait, no network call, no lock held long)? The event MPM then
    /// answers it on its event loop, saving the two thread switches of a
    /// hand-off to a worker. It is asked of every request, each pipelined one
    /// too, and answers to pipelined requests it says yes to go out together
    /// in one write, under every MPM (what is gathered is sent before a
    /// request it says no to is run). The default, no, is always safe. It
    /// runs on the event loop: it must itself be quick, and a panic in it
    /// counts as no.
    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        let _ = request;
        false
    }

    /// Does [`handle`](Self::handle) read this request's body as it
    /// arrives, with [`Request::body_reader`]? Asked once the head is in,
    /// for a request with a body (`request.body()` is still empty). Yes: the
    /// handler runs at once and reads from the connection, an upload never
    /// held whole in memory; `--limit-request-body` and the body timeout
    /// still hold (a read past either fails, and the layer answers 413 or
    /// 408 whatever the handler returns), `Expect: 100-continue` is
    /// answered at the first read, and a body left unread closes the
    /// connection after the response. Under the event MPM such a request
    /// always runs on a worker thread, never on the loop. The default, no,
    /// reads every body whole before `handle` (up to the limit; with
    /// `--limit-request-body 0`, which lifts it only for bodies read as
    /// they arrive, up to [`WHOLE_BODY_CAP`](crate::WHOLE_BODY_CAP)).
    fn streams_body(&self, request: &Request<'_>) -> bool {
        let _ = request;
        false
    }

    /// Does [`handle`](Self::handle) read this request's body as it
    /// arrives from the future it answers with ([`Response::later`](
    /// crate::Response::later)), with [`Request::awaited_body`]? Asked
    /// once the head is in, for a request with a body. Yes, under the event
    /// and uring MPMs (HTTP/1.1 and HTTP/2): the handler runs at once (on the
    /// loop, if it [answers without blocking](Self::answers_without_blocking)),
    /// and its future reads the body as it comes, a bounded piece at a
    /// time, waiting for the client without a thread: a slow upload costs
    /// the connection's state, not a worker. The limits hold as for
    /// [`streams_body`](Self::streams_body) (the layer answers 413, 408 or
    /// 400 whatever the future returns), `Expect: 100-continue` is answered
    /// when the handler has run, and a body the future left unread closes
    /// the connection after the answer (over HTTP/2: the rest is dropped as
    /// it comes). Where the layer cannot (the blocking prefork and worker
    /// MPMs), `awaited_body` is `None` and the
    /// request goes on as [`streams_body`](Self::streams_body) says: a
    /// handler that says yes here says yes there too, and reads whichever
    /// it is given. The default, no.
    fn awaits_body(&self, request: &Request<'_>) -> bool {
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

    fn streams_body(&self, request: &Request<'_>) -> bool {
        (**self).streams_body(request)
    }

    fn awaits_body(&self, request: &Request<'_>) -> bool {
        (**self).awaits_body(request)
    }
}
