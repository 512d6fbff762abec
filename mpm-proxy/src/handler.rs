//! The proxy as an [`HttpHandler`]: each request forwarded is answered
//! with [`Response::later`], a future the HTTP layer polls through
//! [`Interest::Await`](mpm_core::Interest::Await) — under the event MPM the
//! request waits on the upstream parked on the loop, holding no thread;
//! under prefork and worker its thread waits in `poll(2)`, as httpd's
//! mod_proxy does. One code path.
//!
//! Per try ([`Picker::next`]): a connection from this process's pool
//! (`mpm_upstream::Pool`: idle ones kept per upstream, `--proxy-keepalive`),
//! the head and the body (read whole by the layer) written, the response
//! head read, then the body streamed to the client as a
//! [`Body::Polled`] (or read first, up to [`BUFFERED_MAX`], with buffering
//! on), the connection going back to the pool when the body ended cleanly
//! and the upstream keeps it. A connect error, or a close before any byte
//! of the answer, goes on to the next upstream for an idempotent method
//! (never a `POST`). A stale pooled connection (one the upstream closed
//! while it was idle) is not the upstream's failure: found closed as the
//! request went out, the request goes again on a fresh connection, any
//! method (it never reached the upstream); closed before any byte of the
//! answer, again for an idempotent method, a 502 for a `POST` (it may have
//! been processed), as nginx does. Connect errors, timeouts and
//! malformed answers count against the upstream's passive health; a `5xx`
//! is an answer. What is left: `502` (no live upstream, a connect error, a
//! bad answer) or `504` (a timeout), with the layer's error pages, and the
//! upstream's address, status and time in the access log
//! ([`Response::upstream`]).
//!
//! **Uploads.** A request whose body is larger than
//! [`STREAMED_BODY_ABOVE`] (or chunked) is copied to the upstream as it
//! arrives, a buffer at a time (bounded memory). Under the event and uring
//! MPMs (HTTP/1.1 and HTTP/2) the future reads it
//! ([`HttpHandler::awaits_body`], [`AwaitedBody`]): the request waits for
//! the client's bytes as it waits for the upstream, parked on the loop, and
//! a slow upload holds no thread (nginx buffers uploads to a file first
//! instead). Under prefork and worker the layer runs the handler on its thread with
//! the body still on the wire ([`HttpHandler::streams_body`]), and the
//! exchange runs there with [`block_on`]; its answer's body is still
//! streamed from a [`Body::Polled`], without the thread.
//!
//! **Tunnels.** A request with `Upgrade` (a WebSocket) that the upstream
//! answers `101` becomes a [`Tunnel`] ([`Response::tunnel`]): bytes pumped
//! both ways, closed after the route's `read_timeout` with nothing moving.
//! A `101` without `Upgrade`, or to a protocol the client did not offer
//! (`h2c`, never asked for, among them), is a bad answer: 502.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use mpm_core::waiting::{block_on, Polled};
use mpm_http::{
    reason_phrase, AwaitedBody, Body, HeaderText, HttpHandler, InternalRedirect, PollRead, Request,
    Response, Tunnel,
};
use mpm_upstream::{
    read_response_head, write_request, BodyReader, BodyWriter, Connection, HeadLimits, Pool,
    RequestFraming, ResponseHead, Target,
};
use smallvec::SmallVec;

use crate::balance::InFlightGuard;
use crate::config::ProxyRoute;
use crate::headers::{is_hop_by_hop, passes, response_fields, streams, Framing};
use crate::health::Transition;
use crate::plan::{is_idempotent, streams_upload, Attempt, Forward, Picker, Plan};
use crate::reverse_proxy::Proxy;
use crate::shared_state::{now_ms, ProxyState, UpstreamState};
use crate::BUFFERED_MAX;

/// How many stale pooled connections one request replaces before the
/// failure counts (a pool holds at most `--proxy-keepalive` of them).
const MAX_STALE: u8 = 4;

/// How much of an answer is read at a time when it is buffered.
const BUFFER_READ: usize = 64 * 1024;

/// How much of an upload is read from the client and written to the
/// upstream at a time.
const UPLOAD_CHUNK: usize = 64 * 1024;

impl HttpHandler for Proxy {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        let forward = match self.plan(request, request.is_tls()) {
            Plan::NotMine => return Response::error(404),
            Plan::Answer(r) => return *r,
            Plan::Forward(f) => f,
        };
        let call = Arc::clone(&self.call);
        if let Some(body) = request.awaited_body() {
            // Read by the future as it arrives: under event and uring the
            // upload waits for the client, and the upstream, on the loop.
            return Response::later(call.exchange(forward, Awaited(body)));
        }
        if request.is_streamed() {
            // On a worker (the layer runs body-streaming handlers there):
            // this thread may wait while the upload arrives.
            let body = Streamed(request.body_reader());
            return block_on(call.exchange(forward, body));
        }
        let body = Held(request.body().to_vec());
        Response::later(call.exchange(forward, body))
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        // The answer is a future: under event the loop runs handle itself.
        // An upload is read by the future too where the layer can give it
        // one (`awaits_body`); where it cannot, the layer streams it on a
        // worker, whatever this says.
        self.takes(request)
    }

    fn streams_body(&self, request: &Request<'_>) -> bool {
        self.takes(request) && streams_upload(request)
    }

    fn awaits_body(&self, request: &Request<'_>) -> bool {
        self.takes(request) && streams_upload(request)
    }
}

/// A request body on its way to the upstream.
trait Upload {
    /// The whole body, when it is held: sent with the head (and again on
    /// a retry).
    fn whole(&self) -> Option<&[u8]>;

    /// More of a body still on the client's connection, in `buf` (what
    /// it held before is replaced); `Ok(false)` at its end. A streamed
    /// body's read blocks (it runs on a worker); an awaited one's is
    /// pending until the client sends more.
    fn poll_more(&mut self, buf: &mut Vec<u8>) -> Poll<io::Result<bool>>;
}

/// A body the layer read whole.
struct Held(Vec<u8>);

impl Upload for Held {
    fn whole(&self) -> Option<&[u8]> {
        Some(&self.0)
    }

    fn poll_more(&mut self, _: &mut Vec<u8>) -> Poll<io::Result<bool>> {
        Poll::Ready(Ok(false))
    }
}

/// A body still on the client's connection.
struct Streamed<'a>(mpm_http::BodyReader<'a>);

impl Upload for Streamed<'_> {
    fn whole(&self) -> Option<&[u8]> {
        None
    }

    fn poll_more(&mut self, buf: &mut Vec<u8>) -> Poll<io::Result<bool>> {
        // One buffer for the whole upload, read into again and again.
        buf.resize(UPLOAD_CHUNK, 0);
        let n = self.0.read(buf);
        buf.truncate(*n.as_ref().unwrap_or(&0));
        Poll::Ready(n.map(|n| n > 0))
    }
}

/// A body still on the client's connection, read by the future as it
/// arrives (`HttpHandler::awaits_body`).
struct Awaited(AwaitedBody);

impl Upload for Awaited {
    fn whole(&self) -> Option<&[u8]> {
        None
    }

    fn poll_more(&mut self, buf: &mut Vec<u8>) -> Poll<io::Result<bool>> {
        // The layer's piece itself, no copy; the last one, written, goes
        // first: while the future waits for the client it holds no buffer.
        *buf = Vec::new();
        self.0.poll_chunk().map(|piece| {
            Ok(match piece? {
                Some(piece) => {
                    *buf = piece;
                    true
                }
                None => false,
            })
        })
    }
}

/// What a worker's requests' exchanges need, behind one `Arc` the worker
/// keeps ([`Proxy`]) and each request's future clones.
pub(crate) struct Call {
    pub(crate) picker: Picker,
    pub(crate) pool: Arc<Pool>,
    /// Per route, per upstream: where to connect.
    pub(crate) targets: Arc<Vec<Vec<Target>>>,
    /// The upstreams' shared state, where each process's share of the
    /// idle gauges is kept (`idle_shares.rs`).
    pub(crate) state: Arc<ProxyState>,
    /// Per route, per upstream: idle connections last seen in this
    /// process's pool, when it found no row of its own free.
    pub(crate) idle_seen: Arc<Vec<Vec<Arc<AtomicU64>>>>,
    /// In a process that serves on one thread (a prefork child), which is
    /// given no thread for it: the pool's idle timeouts, looked at on the
    /// requests' way, once a second at most. `None` elsewhere (the
    /// process's proxy thread looks).
    pub(crate) lazy_tidy: Option<LazyTidy>,
}

/// Chores done on the requests' way ([`Call::lazy_tidy`]).
pub(crate) struct LazyTidy {
    /// When next (ms, [`now_ms`]).
    pub(crate) next: AtomicU64,
    pub(crate) run: Box<dyn Fn() + Send + Sync>,
}

impl Call {
    /// Run the chores on this request's way, if due.
    fn tidy_if_due(&self) {
        if let Some(t) = &self.lazy_tidy {
            let now = now_ms();
            if now >= t.next.load(Ordering::Relaxed) {
                t.next.store(now.saturating_add(1000), Ordering::Relaxed);
                (t.run)();
            }
        }
    }
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("picker", &self.picker)
            .finish()
    }
}

/// The shared gauge of one upstream's idle pooled connections, kept by
/// this process's share: a checkout of a pooled connection takes one off
/// it, and each give-back sets it to the count the pool returns (which
/// also catches up with connections the pool closed meanwhile); no lock of
/// the pool's is taken for it.
///
/// It holds the request's [`Call`] (one reference count, which the future
/// holds anyway) and finds the pool and its count of this upstream there.
struct IdleGauge {
    call: Arc<Call>,
    state: UpstreamState,
    route: usize,
    upstream: usize,
}

impl IdleGauge {
    /// The pool the connection goes back to.
    fn pool(&self) -> &Pool {
        &self.call.pool
    }

    /// The pool holds `now` idle connections to the upstream.
    fn set(&self, now: u64) {
        self.call
            .set_idle(self.route, self.upstream, self.state, now);
        self.call.tidy_if_due();
    }
}

/// This process's pool holds `now` idle connections to `upstream` (of
/// `state`) of `route`: its count in its row of shared memory, or, if it
/// found none free, the difference from what it held when last looked at
/// (`idle_seen`) added to the upstream's stripes.
pub(crate) fn set_idle(
    proxy: &ProxyState,
    idle_seen: &[Vec<Arc<AtomicU64>>],
    (route, upstream, state): (usize, usize, UpstreamState),
    now: u64,
) {
    if let Some(w) = proxy.idle_shares().word(state.slot()) {
        w.store(now, Ordering::Relaxed);
        return;
    }
    let Some(seen) = idle_seen.get(route).and_then(|r| r.get(upstream)) else {
        return;
    };
    let before = seen.swap(now, Ordering::Relaxed);
    if before != now {
        state.count_pool_idle(before, now);
    }
}

/// Why a try ended without an answer to pass on.
struct Failed {
    error: mpm_upstream::Error,
    /// The upstream is not to blame: a pooled connection it had closed
    /// while idle, found closed when the request went out (`unsent`) or
    /// before any byte of an answer came.
    stale: bool,
    /// The request surely never reached the upstream (the write failed).
    unsent: bool,
    /// Bytes of the upload were taken from the client: no other try.
    body_spent: bool,
}

impl Call {
    /// This process's pool holds `now` idle connections to `upstream` (of
    /// `state`) of `route`: its count in its row of shared memory, or, if
    /// it found none free, the difference from what it held when last
    /// looked at added to the upstream's stripes.
    fn set_idle(&self, route: usize, upstream: usize, state: UpstreamState, now: u64) {
        set_idle(&self.state, &self.idle_seen, (route, upstream, state), now);
    }

    /// Every try of `forward` until one is answered, or the 502 or 504.
    ///
    /// An `async` block rather than an `async fn`: an `async fn` keeps its
    /// arguments twice in its future (as given and as bound), and the
    /// 400-byte [`Forward`] is in every waiting request's future.
    #[allow(clippy::manual_async_fn)] // see above: its future's size
    fn exchange<U: Upload>(
        self: Arc<Self>,
        forward: Forward,
        mut body: U,
    ) -> impl std::future::Future<Output = Response> {
        async move {
            let started = mpm_core::turn_clock::now();
            // The exchange's time for the access log, to the turn as
            // `started` is (at most a turn long): a precise read of the
            // clock is twenty nanoseconds or more on a VM, every request.
            // (A function of `started`, not a closure: a closure would be
            // one more word in every waiting request's future.)
            // Inline: nearly every request is one try, and costs no list.
            let mut tried: SmallVec<[usize; 4]> = SmallVec::new();
            let mut stale_retries: u8 = 0;
            loop {
                let Some(mut attempt) = self.picker.next(&forward, &tried) else {
                    if tried.is_empty() {
                        mpm_core::log_error!(
                            "proxy: no live upstreams for {} {} (route {})",
                            forward.method(),
                            forward.path(),
                            self.picker.route(&forward).prefix
                        );
                        // No upstream gave it, none was tried: the access
                        // log's `"-" - -`, not an empty address and a time.
                        return Response::error(502);
                    }
                    return Response::error(502).upstream(
                        self.shown(&forward, &tried),
                        None,
                        since(started),
                    );
                };
                let Some(target) = self
                    .targets
                    .get(forward.route)
                    .and_then(|t| t.get(attempt.upstream))
                else {
                    return Response::error(502);
                };
                tried.push(attempt.upstream);
                attempt.state.count_request();
                // The answer made now (nearly all) is returned from the try's
                // result as it is: each result it went through on its way out
                // was another copy of its 472 bytes. A buffered one is awaited
                // once that result is gone: held across the await, it would be
                // in every request's future.
                let failed = 'failed: {
                    let rest = {
                        // Recorded where the result holds it, and only then
                        // moved out: a binding of its own was one more copy.
                        let mut once =
                            Call::try_once(&self, &forward, &mut attempt, target, &mut body).await;
                        if let Ok(Answer::Now(response)) = &mut once {
                            record(response, self.shown(&forward, &tried), since(started));
                        }
                        match once {
                            Ok(Answer::Now(response)) => return response,
                            Ok(Answer::Buffer(rest)) => rest,
                            Err(f) => break 'failed f,
                        }
                    };
                    match rest.await {
                        Ok(mut response) => {
                            record(&mut response, self.shown(&forward, &tried), since(started));
                            return response;
                        }
                        Err(f) => f,
                    }
                };
                match failed {
                    f if f.stale
                        && !f.body_spent
                        && (f.unsent || is_idempotent(forward.method()))
                        && stale_retries < MAX_STALE =>
                    {
                        // A pooled connection the upstream had closed while
                        // idle: again on a fresh one, without counting against
                        // the upstream. Any method if the request never went
                        // out; an idempotent one if it may have.
                        stale_retries += 1;
                        tried.pop();
                    }
                    f if f.stale => {
                        // A POST on a connection closed under it: it may have
                        // been processed, so it is not sent again (nginx's rule).
                        mpm_core::log_error!(
                        "proxy: {} {}: upstream {}: {} (on a kept-alive connection; not sent again)",
                        forward.method(),
                        forward.path(),
                        self.picker.url(&forward, &attempt),
                        f.error
                    );
                        return Response::error(502).upstream(
                            self.shown(&forward, &tried),
                            None,
                            since(started),
                        );
                    }
                    f => {
                        self.failed(&forward, &attempt, &f.error);
                        let again = f.error.is_retryable()
                            && !f.body_spent
                            && self.picker.may_retry(&forward, &tried);
                        if !again {
                            let status = match f.error {
                                mpm_upstream::Error::Timeout { .. } => 504,
                                _ => 502,
                            };
                            return Response::error(status).upstream(
                                self.shown(&forward, &tried),
                                None,
                                since(started),
                            );
                        }
                    }
                }
            }
        }
    }

    /// The upstreams `tried` for `forward`, for the access log as nginx's
    /// `$upstream_addr` shows them: the one (shared with its target, no
    /// copy), or those tried one after another, `"a, b"`. Made from the
    /// tries' indexes when the answer is recorded, so that the future holds
    /// no list of addresses of its own.
    fn shown(&self, forward: &Forward, tried: &[usize]) -> HeaderText {
        let targets = self
            .targets
            .get(forward.route)
            .map_or(&[][..], Vec::as_slice);
        let addr = |u: &usize| targets.get(*u).map(Target::addr_text);
        match tried {
            [one] => addr(one).map_or_else(|| HeaderText::from(String::new()), HeaderText::from),
            _ => HeaderText::from(
                tried
                    .iter()
                    .filter_map(addr)
                    .map(|a| &**a)
                    .collect::<Vec<&str>>()
                    .join(", "),
            ),
        }
    }

    /// Count a failure against the upstream and say it in the error log.
    fn failed(&self, forward: &Forward, attempt: &Attempt, error: &mpm_upstream::Error) {
        let route = self.picker.route(forward);
        mpm_core::log_error!(
            "proxy: {} {}: upstream {}: {error}",
            forward.method(),
            forward.path(),
            self.picker.url(forward, attempt)
        );
        let spec = &route.upstreams[attempt.upstream];
        if attempt.state.record_failure(now_ms()) == Some(Transition::Down) {
            mpm_core::log_warn!(
                "proxy: upstream {} of {} is marked down for {} (max_fails={} reached within fail_timeout={})",
                spec.url,
                route.prefix,
                crate::show_duration(spec.fail_timeout),
                spec.max_fails,
                crate::show_duration(spec.fail_timeout)
            );
        }
    }

    /// One try: connect (or reuse), send, read the head, make the answer
    /// (or, buffering, what reads the rest of it: awaited by the caller).
    /// An associated function of the call's `Arc` (`call`), which the
    /// gauge of the upstream's idle connections keeps: the gauge goes with
    /// the answer's body, which gives the connection back when it ends.
    ///
    /// An `async` block rather than an `async fn`, which would keep its
    /// arguments twice: this future is in every waiting request's.
    #[allow(clippy::manual_async_fn)] // see above: its future's size
    fn try_once<'a, U: Upload>(
        call: &'a Arc<Call>,
        forward: &'a Forward,
        attempt: &'a mut Attempt,
        target: &'a Target,
        body: &'a mut U,
    ) -> impl std::future::Future<Output = Result<Answer, Failed>> + 'a {
        async move {
            let route = call.picker.route(forward);
            let fail = |error, stale, body_spent| Failed {
                error,
                stale,
                unsent: false,
                body_spent,
            };
            let until = mpm_core::turn_clock::now() + route.connect_timeout;
            // A request that can go again on a fresh connection (idempotent,
            // its body held) is sent again on one if the pooled connection
            // it took turns out closed (the pool checks every idle one
            // alike, whichever the request).
            let (conn, idle) = call.pool.connect_counted(target, until).await;
            // The idle connections the pool holds now: one fewer for a
            // reuse, and none of those it dropped on the way (closed by the
            // upstream, expired), whether a connection came of it or not.
            // (The gauge below is made once the head is read, not held in
            // the future while it waits.)
            call.set_idle(forward.route, attempt.upstream, attempt.state, idle);
            let mut conn = conn.map_err(|e| fail(e, false, false))?;
            let reused = conn.requests_served() > 0;
            if reused {
                attempt.state.count_reused();
            } else {
                attempt.state.count_opened();
            }
            let send_until = || mpm_core::turn_clock::now() + route.send_timeout;
            let is_stale =
                |e: &mpm_upstream::Error| reused && matches!(e, mpm_upstream::Error::Closed);
            let stale = |e: mpm_upstream::Error| Failed {
                stale: is_stale(&e),
                unsent: true,
                error: e,
                body_spent: false,
            };
            if let Some(bytes) = body.whole() {
                // Head and body in one write (no copy without a body).
                let joined;
                let message = if bytes.is_empty() {
                    &attempt.head
                } else {
                    let mut m = Vec::with_capacity(attempt.head.len() + bytes.len());
                    m.extend_from_slice(&attempt.head);
                    m.extend_from_slice(bytes);
                    joined = m;
                    &joined
                };
                write_request(&mut conn, message, send_until())
                    .await
                    .map_err(stale)?;
                // Written (held, nearly always: copied into the loop's batch):
                // the head's buffer serves the next request's, which this
                // thread makes before the answer to this one comes.
                mpm_core::byte_spares::give(std::mem::take(&mut attempt.head));
            } else {
                write_request(&mut conn, &attempt.head, send_until())
                    .await
                    .map_err(stale)?;
                let framing = match forward.framing {
                    Framing::Length(n) => RequestFraming::Length(n),
                    _ => RequestFraming::Chunked,
                };
                // Boxed, as the other rare branches: a future's size is that of
                // its largest state, and every waiting request holds one.
                Box::pin(async {
                    let mut writer = BodyWriter::new(framing);
                    let mut buf = Vec::new();
                    loop {
                        let more = std::future::poll_fn(|_| body.poll_more(&mut buf))
                            .await
                            .map_err(|e| fail(mpm_upstream::Error::Io(e), false, true))?;
                        if !more {
                            break;
                        }
                        writer
                            .write_all(&mut conn, &buf, send_until())
                            .await
                            .map_err(|e| fail(e, false, true))?;
                    }
                    writer
                        .finish(&mut conn, send_until())
                        .await
                        .map_err(|e| fail(e, false, true))
                })
                .await?;
            }
            let body_spent = body.whole().is_none();
            // Stays empty unless the head arrives in pieces (see
            // `read_response_head`): no read buffer of the request's own.
            let mut buf = Vec::new();
            // Matched rather than mapped: `map_err` and `?` each moved the
            // head's result (288 bytes) once more.
            // `read_timeout` is the longest silence between two reads
            // (nginx's `proxy_read_timeout`), the head's as the body's;
            // the head's size bounds it.
            let mut head = match read_response_head(
                &mut conn,
                &mut buf,
                HeadLimits::default(),
                route.read_timeout,
            )
            .await
            {
                Ok(head) => head,
                Err(e) => {
                    let stale = is_stale(&e);
                    return Err(fail(e, stale, body_spent));
                }
            };
            let gauge = IdleGauge {
                call: Arc::clone(call),
                state: attempt.state,
                route: forward.route,
                upstream: attempt.upstream,
            };
            // Not held across an await: what is made of the head is in the
            // future's state only if the answer waits on (buffering, boxed).
            // Lent, not moved.
            answer(forward, route, attempt, &mut head, conn, gauge, body_spent)
        }
    }
}

/// What the upstream's head makes: the answer, or (buffering on, the body
/// longer than what came with the head) the rest of its making, boxed with
/// the response and the body's state, which the common answers do not keep
/// in their futures.
#[allow(clippy::large_enum_variant)] // returned, never held across an await
enum Answer {
    Now(Response),
    Buffer(std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Failed>> + Send>>),
}

/// The client's answer from the upstream's response head (not `async`:
/// the head, the response and the body's state stay out of the request's
/// future but for a buffered answer, which is boxed).
///
/// Its result is the try's (a bad answer a [`Failed`] here, not mapped to
/// one after): the answer, 472 bytes, is not moved from one result into
/// another on its way out.
fn answer(
    forward: &Forward,
    route: &ProxyRoute,
    attempt: &mut Attempt,
    head: &mut ResponseHead,
    conn: Connection,
    gauge: IdleGauge,
    body_spent: bool,
) -> Result<Answer, Failed> {
    let bad = |error| Failed {
        error,
        stale: false,
        unsent: false,
        body_spent,
    };
    if !(100..=599).contains(&head.status) {
        return Err(bad(mpm_upstream::Error::BadResponse(format!(
            "status {}",
            head.status
        ))));
    }
    if head.status == 101 {
        if !forward.tunnel {
            return Err(bad(mpm_upstream::Error::BadResponse(
                "101 Switching Protocols to a request that asked for no upgrade".into(),
            )));
        }
        // What the upstream was asked for (`h2c` never): a 101 is rare,
        // its list collected.
        let offered: SmallVec<[&[u8]; 2]> =
            crate::headers::offered_protocols(forward.fields()).collect();
        if let Some(why) = crate::headers::refused_switch(head.headers_named("upgrade"), &offered) {
            return Err(bad(mpm_upstream::Error::BadResponse(why.into())));
        }
        let early = std::mem::take(&mut head.bytes_after_head);
        let mut response = Response::new(head.status);
        let _ = copy_head(&mut response, head, route, true);
        return Ok(Answer::Now(response.tunnel(Box::new(UpstreamTunnel {
            conn,
            early,
            idle: route.read_timeout,
            // A least-conn route counts the tunnel in flight until it ends.
            _in_flight: attempt.in_flight.take(),
        }))));
    }
    // Made here and filled in place (its head, then its body): a
    // response returned by a callee, or by a by-value builder, was
    // copied whole once more.
    let mut response = Response::new(head.status);
    let accel = copy_head(&mut response, head, route, false);
    // nginx's `X-Accel-Redirect`: the server answers that path instead
    // (its body dropped unread, the connection closed if it had more).
    if let Some(target) = accel.filter(|_| route.accel_redirect) {
        response.set_internal_redirect(accel_redirect(forward, target));
    }
    if route.intercept_errors {
        // The layer answers with its error page instead, if it has one.
        response.set_intercept_errors();
    }
    let reader = BodyReader::for_response(forward.method(), head).map_err(bad)?;
    let mut source = UpstreamBody {
        conn: Some(conn),
        reader,
        gauge,
        state: attempt.state,
        // A least-conn route counts the request in flight until its body
        // ends, as nginx's `least_conn` counts it until the upstream is
        // done with it, not only until its head came.
        in_flight: attempt.in_flight.take(),
        read_timeout: route.read_timeout,
        deadline: mpm_core::turn_clock::now() + route.read_timeout,
        len: None,
        early: Vec::new(),
        pos: 0,
    };
    if source.reader.is_done() {
        source.finish();
        // HEAD and 304: no bytes, and the upstream's length, the GET's.
        // None when it gave none usable (chunked, no framing field, not
        // one number): then no `Content-Length` at all, rather than the
        // layer's `Content-Length: 0` for an empty body, which would say
        // the GET's body is empty.
        match head.content_length() {
            Some(n) => response.set_body(Body::Polled(Box::new(Announced(n)))),
            // A boxed unit: no allocation.
            None => response.set_body(Body::Polled(Box::new(Unannounced))),
        }
        return Ok(Answer::Now(response));
    }
    if let Some(whole) = source.reader.take_whole() {
        // The whole body came with the head (a short answer): sent as
        // bytes, streamed or not, and the connection back in the pool
        // now rather than once the client has it all.
        source.finish();
        response.set_body(whole);
        return Ok(Answer::Now(response));
    }
    // What the proxy reads for itself in the fields, only for an answer
    // still to come: a whole one (nearly all) needs none of it.
    let fields = response_fields(head.headers());
    source.len = fields.content_length;
    // A redirect's body is never read: not buffered first.
    if !streams(route.buffering, &fields) && response.internal_redirect().is_none() {
        return Ok(Answer::Buffer(Box::pin(buffered(
            response, source, body_spent,
        ))));
    }
    response.set_body(Body::Polled(Box::new(source)));
    Ok(Answer::Now(response))
}

/// The request an upstream's `X-Accel-Redirect: target` asks the server
/// to answer: a `GET` of `target` (a `HEAD` for a `HEAD`), with the
/// client's end-to-end fields, as nginx's internal redirect keeps them
/// (`Range`, `If-None-Match` and the rest mean the same of the new
/// target); not its hop-by-hop ones (an `Upgrade` would make a redirect to
/// a proxied route a tunnel).
fn accel_redirect(forward: &Forward, target: String) -> InternalRedirect {
    let mut redirect = InternalRedirect::new(target);
    if forward.method() == "HEAD" {
        redirect = redirect.head();
    }
    for (name, value) in forward.fields() {
        if !is_hop_by_hop(name, forward.fields()) {
            redirect = redirect.field(name.as_bytes(), value);
        }
    }
    redirect
}

/// A buffered answer: up to [`BUFFERED_MAX`] of the body read first, sent
/// as bytes when that was all of it (the connection back in the pool),
/// else streamed from what was read on.
#[allow(clippy::manual_async_fn)] // not `async fn`: its arguments once in its future
fn buffered(
    mut response: Response,
    mut source: UpstreamBody,
    body_spent: bool,
) -> impl std::future::Future<Output = Result<Response, Failed>> {
    async move {
        if let Err(error) = source.buffer(BUFFERED_MAX).await {
            return Err(Failed {
                error,
                stale: false,
                unsent: false,
                body_spent,
            });
        }
        if source.conn.is_none() {
            response.set_body(std::mem::take(&mut source.early));
            return Ok(response);
        }
        response.set_body(Body::Polled(Box::new(source)));
        Ok(response)
    }
}

/// The time since `started`, to the turn (see `exchange`).
fn since(started: Instant) -> Duration {
    mpm_core::turn_clock::now().saturating_duration_since(started)
}

/// The upstream and the exchange's time, recorded for the access log in
/// place: a by-value builder would copy the response.
fn record(response: &mut Response, upstreams: HeaderText, time: Duration) {
    let status = response.status();
    response.set_upstream(upstreams, Some(status), time);
}

/// The client's response head: the upstream's status, reason and the
/// fields that pass ([`passes`]; those the layer writes itself, `Date`
/// among them, are left to it), copied as bytes into `response`'s block
/// of fields ([`Response::try_header_bytes`]; `response` is made with the
/// upstream's status); `Location` and `Refresh` rewritten by the route's
/// `redirect` rules ([`crate::rewrite`]), `Set-Cookie` by its
/// `cookie_domain` and `cookie_path` ([`crate::rewrite_cookie`]) and
/// `cookie_flags` ([`crate::flag_cookie`]), its
/// `hide_header` fields left out.
/// `upgrade`: the `101` to a tunnelled request. Returns the upstream's
/// `X-Accel-Redirect`, if it sent one (never passed on).
fn copy_head(
    response: &mut Response,
    head: &ResponseHead,
    route: &ProxyRoute,
    upgrade: bool,
) -> Option<String> {
    // A phrase the layer would refuse (a control, a byte past ASCII) is
    // dropped for the registered one rather than turned into a 500; the
    // registered one itself needs no copy.
    let reason = head.reason();
    if !reason.is_empty()
        && reason != reason_phrase(head.status)
        && reason.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
    {
        let phrase = match head.text() {
            Some(t) => HeaderText::slice_of(t, head.reason_range()),
            None => Some(HeaderText::from(reason.to_string())),
        };
        if let Some(p) = phrase {
            response.set_reason(p);
        }
    }
    // The fields `Connection` names (none, nearly always), found once
    // rather than for each field.
    let connection: SmallVec<[&[u8]; 2]> = head.connection().collect();
    // Each passing field copied as bytes into the response's block of
    // fields (one copy, written out whole), a value past ASCII as it came,
    // as nginx passes it. The layer writes its own `Date`:
    // `try_header_bytes` would refuse the upstream's, making (and
    // dropping) an error for it every response.
    let bytes = head.bytes();
    let mut accel = None;
    for (n, v) in head.header_ranges() {
        let (Some(name), Some(value)) = (bytes.get(n), bytes.get(v)) else {
            continue;
        };
        if name.len() == 16 && name.eq_ignore_ascii_case(b"x-accel-redirect") {
            accel = Some(crate::path::accel_target(value.trim_ascii()));
        }
        if name.eq_ignore_ascii_case(b"date")
            || !passes(name, connection.iter().copied(), upgrade)
            || route
                .hide_header
                .iter()
                .any(|h| h.as_bytes().eq_ignore_ascii_case(name))
        {
            continue;
        }
        // Told by length first: nearly every field is neither.
        let rewritten = match name.len() {
            8 if name.eq_ignore_ascii_case(b"location") => {
                crate::rewrite(value, &route.redirect, &route.prefix, &route.upstreams)
            }
            7 if name.eq_ignore_ascii_case(b"refresh") => {
                crate::rewrite_refresh(value, &route.redirect, &route.prefix, &route.upstreams)
            }
            10 if name.eq_ignore_ascii_case(b"set-cookie") => {
                let moved = crate::rewrite_cookie(value, &route.cookie_domain, &route.cookie_path);
                let flagged =
                    crate::flag_cookie(moved.as_deref().unwrap_or(value), &route.cookie_flags);
                flagged.or(moved)
            }
            _ => None,
        };
        let _ = response.try_header_bytes(name, rewritten.as_deref().unwrap_or(value));
    }
    accel
}

/// A body of a known length and no bytes: the answer to a `HEAD`, a `304`.
struct Announced(u64);

impl PollRead for Announced {
    fn poll_read(&mut self, _buf: &mut [u8]) -> Polled<io::Result<usize>> {
        Polled::Ready(Ok(0))
    }

    fn len(&self) -> Option<u64> {
        Some(self.0)
    }
}

/// A body of an unknown length and no bytes: the answer to a `HEAD`
/// whose upstream gave no usable `Content-Length`. The layer writes no
/// framing field for it (neither for HTTP/1.1 nor HTTP/2).
struct Unannounced;

impl PollRead for Unannounced {
    fn poll_read(&mut self, _buf: &mut [u8]) -> Polled<io::Result<usize>> {
        Polled::Ready(Ok(0))
    }

    fn len(&self) -> Option<u64> {
        None
    }
}

/// The upstream's response body, read as the client can take it.
struct UpstreamBody {
    /// `None` once the body ended (the connection back in the pool, or closed).
    conn: Option<Connection>,
    reader: BodyReader,
    /// The pool it goes back to, and the gauge of its idle connections.
    gauge: IdleGauge,
    state: UpstreamState,
    /// Counts the request in flight (least-conn) until the body ends.
    in_flight: Option<InFlightGuard>,
    read_timeout: Duration,
    /// The upstream must send more by then (moved on by every byte).
    deadline: Instant,
    len: Option<u64>,
    /// Bytes read ahead (buffering on), sent first.
    early: Vec<u8>,
    pos: usize,
}

impl UpstreamBody {
    /// The body ended: the connection back to the pool if it may be kept.
    fn finish(&mut self) {
        self.in_flight = None;
        if let Some(conn) = self.conn.take() {
            if self.reader.reusable() {
                let idle = self.gauge.pool().give_back(conn);
                self.gauge.set(idle);
            }
        }
    }

    /// Read up to `max` bytes ahead, the whole body if it fits.
    async fn buffer(&mut self, max: usize) -> Result<(), mpm_upstream::Error> {
        while let Some(conn) = self.conn.as_mut() {
            let start = self.early.len();
            if start >= max {
                break;
            }
            // Read straight into what is kept, no chunk buffer of its own.
            self.early.resize(start + BUFFER_READ.min(max - start), 0);
            let got = self
                .reader
                .read(
                    conn,
                    &mut self.early[start..],
                    mpm_core::turn_clock::now() + self.read_timeout,
                )
                .await;
            self.early.truncate(start + *got.as_ref().unwrap_or(&0));
            if got? == 0 {
                self.finish();
                break;
            }
        }
        Ok(())
    }
}

impl PollRead for UpstreamBody {
    fn poll_read(&mut self, buf: &mut [u8]) -> Polled<io::Result<usize>> {
        if self.pos < self.early.len() {
            let n = buf.len().min(self.early.len() - self.pos);
            buf[..n].copy_from_slice(&self.early[self.pos..self.pos + n]);
            self.pos += n;
            return Polled::Ready(Ok(n));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Polled::Ready(Ok(0));
        };
        match self.reader.try_read(conn, buf) {
            Ok(0) => {
                self.finish();
                Polled::Ready(Ok(0))
            }
            Ok(n) => {
                self.deadline = mpm_core::turn_clock::now() + self.read_timeout;
                // The writer stops asking at the announced length: the
                // connection goes back as soon as the body is whole.
                if self.reader.is_done() {
                    self.finish();
                }
                Polled::Ready(Ok(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if mpm_core::turn_clock::now() >= self.deadline {
                    self.conn = None;
                    self.in_flight = None;
                    self.state.record_failure(now_ms());
                    return Polled::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the upstream sent nothing more within the read timeout",
                    )));
                }
                Polled::Wait(conn.wait_readable(self.deadline))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Polled::Again,
            Err(e) => {
                self.conn = None;
                self.in_flight = None;
                self.state.record_failure(now_ms());
                Polled::Ready(Err(e))
            }
        }
    }

    fn len(&self) -> Option<u64> {
        self.len
    }
}

/// The upstream side of a WebSocket (or other upgraded) connection.
struct UpstreamTunnel {
    conn: Connection,
    /// Bytes the upstream sent after its 101 head.
    early: Vec<u8>,
    idle: Duration,
    /// Counts the tunnel in flight (least-conn) until it is dropped.
    _in_flight: Option<InFlightGuard>,
}

impl Tunnel for UpstreamTunnel {
    fn fd(&self) -> std::os::fd::RawFd {
        self.conn.raw_fd()
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.early.is_empty() {
            let n = buf.len().min(self.early.len());
            buf[..n].copy_from_slice(&self.early[..n]);
            self.early.drain(..n);
            return Ok(n);
        }
        self.conn.try_read(buf)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.conn.try_write(buf)?;
        // TLS records the write made go out now if the socket takes them.
        match self.conn.try_flush() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        Ok(n)
    }

    fn idle_timeout(&self) -> Duration {
        self.idle
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.conn.shutdown_write()
    }
}

#[cfg(test)]
mod tests {
    use mpm_http::{HttpHandler, Request, Version};

    use crate::{PoolSettings, ProxyRoute, ProxyState, ReverseProxy, RouteTable, Slots};

    /// Every request waiting on an upstream holds its exchange's future:
    /// under event that is most of what a waiting request costs. An
    /// `async fn` would hold its arguments twice, and a buffered answer's
    /// state (a kilobyte) would be in every request's (2,784 bytes before).
    #[test]
    fn a_waiting_requests_future_is_under_1500_bytes() {
        let table = RouteTable::new(vec![ProxyRoute::from_flag("/=http://127.0.0.1:9").unwrap()]);
        let state = ProxyState::with_slots(&table, &Slots::new(16).unwrap()).unwrap();
        let mut proxy = ReverseProxy::with_state(table, state, PoolSettings::default())
            .unwrap()
            .worker();
        let fields = [("Host", "example.com")];
        let request = Request::for_test("GET", "/x", Version::Http11, &fields, b"");
        let later = proxy
            .handle(&request)
            .into_later()
            .expect("a proxied request is answered later");
        let size = std::mem::size_of_val(&*later);
        assert!(size < 1500, "the future is {size} bytes");
    }
}
