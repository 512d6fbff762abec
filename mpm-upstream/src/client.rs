//! [`Client`]: calling an upstream from a handler, in the shape reqwest
//! and axum users know, on the waiting contract: the `async fn`s park the
//! request on the event loop (no thread held) and block a prefork or
//! worker step, with one code path.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::address::Upstream;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::http1::{
    read_response_head, write_request, write_request_head, BodyReader, HeadLimits, ResponseHead,
};
use crate::pool::Pool;

/// How long a request may take, connect to last body byte, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest body [`ClientResponse::bytes`] collects by default.
pub const DEFAULT_MAX_BODY: u64 = 16 * 1024 * 1024;

/// An HTTP/1.1 client whose waits hold no thread on an event loop.
///
/// Make one and clone it (clones share the pool and the cache of resolved
/// names). Requests reuse keep-alive connections from a [`Pool`]: the
/// process's own by default ([`Pool::process_default`]).
///
/// ```no_run
/// # async fn handler() -> Result<(), mpm_upstream::Error> {
/// use std::time::Duration;
/// use mpm_upstream::Client;
///
/// let client = Client::new();
/// let user = client
///     .get("http://127.0.0.1:8081/users/7")
///     .header("accept", "application/json")
///     .timeout(Duration::from_secs(2))
///     .send()
///     .await?;
/// if user.status() == 200 {
///     let text = user.text().await?;
///     # let _ = text;
/// }
/// # Ok(()) }
/// ```
///
/// **Host names** in a URL are resolved on first use and cached for the
/// life of the `Client`. Resolving blocks (`getaddrinfo` has no
/// non-blocking form), so under the event MPM a first call to a new host
/// name holds the loop's thread for the lookup: prefer IP addresses, or
/// [`Upstream`]s resolved at start with [`Client::request_to`].
///
/// What it does not do: HTTP/2 upstreams, redirects (a `3xx` is the
/// response), cookies, proxies, decompression.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Arc<Pool>,
    /// Names resolved so far: one lookup per host and port per client.
    /// Taken briefly per request by one process's threads.
    resolved: Mutex<HashMap<(String, u16), Vec<SocketAddr>>>,
}

impl Client {
    /// A client on the process's default pool.
    pub fn new() -> Client {
        Client::with_pool(Pool::process_default())
    }

    /// A client on `pool`.
    pub fn with_pool(pool: Arc<Pool>) -> Client {
        Client {
            inner: Arc::new(Inner {
                pool,
                resolved: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The pool its connections come from.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.inner.pool
    }

    /// A `GET` of `url`.
    pub fn get(&self, url: &str) -> RequestBuilder {
        self.request("GET", url)
    }

    /// A `POST` to `url`.
    pub fn post(&self, url: &str) -> RequestBuilder {
        self.request("POST", url)
    }

    /// A `PUT` to `url`.
    pub fn put(&self, url: &str) -> RequestBuilder {
        self.request("PUT", url)
    }

    /// A `DELETE` of `url`.
    pub fn delete(&self, url: &str) -> RequestBuilder {
        self.request("DELETE", url)
    }

    /// A `HEAD` of `url`.
    pub fn head(&self, url: &str) -> RequestBuilder {
        self.request("HEAD", url)
    }

    /// A request with any method to `url` (`http://` or `https://`).
    pub fn request(&self, method: &str, url: &str) -> RequestBuilder {
        let upstream = Upstream::parse(url);
        let target = match &upstream {
            Ok(u) => u.path().unwrap_or("/").to_string(),
            Err(_) => String::new(),
        };
        RequestBuilder::new(self.clone(), method, upstream, target)
    }

    /// A request to `upstream` (resolved already: no lookup here) for
    /// `path` (with its query), appended to the upstream's own path if it
    /// has one.
    pub fn request_to(&self, method: &str, upstream: &Upstream, path: &str) -> RequestBuilder {
        let base = upstream.path().unwrap_or("").trim_end_matches('/');
        let target = if path.starts_with('/') {
            format!("{base}{path}")
        } else {
            format!("{base}/{path}")
        };
        RequestBuilder::new(self.clone(), method, Ok(upstream.clone()), target)
    }

    fn addrs_of(&self, upstream: &Upstream) -> Result<Vec<SocketAddr>> {
        if !upstream.addrs().is_empty() {
            return Ok(upstream.addrs().to_vec());
        }
        let key = (upstream.host().to_string(), upstream.port());
        if let Some(found) = self.inner.resolved.lock().get(&key) {
            return Ok(found.clone());
        }
        // Not under the lock: a lookup takes as long as DNS does.
        let mut resolved = upstream.clone();
        resolved.resolve()?;
        let found = resolved.addrs().to_vec();
        self.inner.resolved.lock().insert(key, found.clone());
        Ok(found)
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("pool", &self.inner.pool)
            .finish_non_exhaustive()
    }
}

/// A request being put together: [`Client::get`] and friends make one,
/// [`send`](RequestBuilder::send) sends it.
#[must_use = "a request does nothing until it is sent"]
pub struct RequestBuilder {
    client: Client,
    method: String,
    upstream: Result<Upstream>,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Duration,
    max_body: u64,
    head_limits: HeadLimits,
    invalid: Option<Error>,
}

impl RequestBuilder {
    fn new(client: Client, method: &str, upstream: Result<Upstream>, target: String) -> Self {
        RequestBuilder {
            client,
            method: method.to_string(),
            upstream,
            target,
            headers: Vec::new(),
            body: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
            head_limits: HeadLimits::default(),
            invalid: None,
        }
    }

    /// Add a header field (sent as given; `Host` is sent for you unless
    /// you set it; `Content-Length` is always the client's).
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_string(), value.as_ref().to_vec()));
        self
    }

    /// The request body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A JSON body, with `Content-Type: application/json`.
    #[cfg(feature = "json")]
    pub fn json<T: serde::Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                self.body = body;
                self.header("content-type", "application/json")
            }
            Err(e) => {
                self.invalid = Some(Error::InvalidRequest(format!(
                    "the JSON body cannot be written: {e}"
                )));
                self
            }
        }
    }

    /// How long the whole exchange may take, connect to the last body
    /// byte read by [`ClientResponse::bytes`]. Default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest response body [`ClientResponse::bytes`] collects (a
    /// larger one is [`Error::TooLarge`]). Default 16 MiB.
    pub fn max_body(mut self, bytes: u64) -> Self {
        self.max_body = bytes;
        self
    }

    /// Send it, and read the response's head. An idle pooled connection
    /// that turns out closed is replaced (for a method that may be
    /// repeated); a connect error tries the host's next address.
    pub async fn send(self) -> Result<ClientResponse> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let upstream = self.upstream?;
        let until = mpm_core::deadline(Instant::now(), self.timeout);
        if self.headers.iter().any(|(n, _)| {
            n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
        }) {
            return Err(Error::InvalidRequest(
                "Content-Length and Transfer-Encoding are the client's to set: give the body with .body()"
                    .to_string(),
            ));
        }
        let mut message = Vec::with_capacity(256 + self.body.len());
        let host = upstream.authority();
        let has_host = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("host"));
        let with_length =
            !self.body.is_empty() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH");
        let length = self.body.len().to_string();
        let extra = (!has_host)
            .then_some(("Host", host.as_bytes()))
            .into_iter()
            .chain(with_length.then_some(("Content-Length", length.as_bytes())));
        let fields = extra.chain(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
        write_request_head(&mut message, &self.method, &self.target, fields)?;
        message.extend_from_slice(&self.body);

        let client = &self.client;
        let pool = &client.inner.pool;
        let repeatable = matches!(
            self.method.as_str(),
            "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE"
        );
        let mut last = None;
        for addr in client.addrs_of(&upstream)? {
            let target = upstream.target(addr);
            // A pooled connection may have been closed just as it was
            // taken: try again, on another or a new one, a few times.
            for _ in 0..3 {
                let mut conn = match pool.connect(&target, until).await {
                    Ok(c) => c,
                    Err(e) if e.is_retryable() => {
                        last = Some(e);
                        break;
                    }
                    Err(e) => return Err(e),
                };
                let reused = conn.requests_served() > 0;
                match exchange(&mut conn, &message, self.head_limits, until).await {
                    Ok(mut head) => {
                        let reader = BodyReader::for_response(&self.method, &mut head)?;
                        let mut response = ClientResponse {
                            head,
                            reader,
                            conn: Some(conn),
                            pool: pool.clone(),
                            until,
                            max_body: self.max_body,
                        };
                        if response.reader.is_done() {
                            // No body (HEAD, 204, 304): the connection
                            // is free already.
                            response.finished();
                        }
                        return Ok(response);
                    }
                    Err(Error::Closed) if reused && repeatable => last = Some(Error::Closed),
                    Err(e) => return Err(e),
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Url(format!("the upstream {upstream} has no address"))))
    }
}

impl fmt::Debug for RequestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBuilder")
            .field("method", &self.method)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// The request sent and the answer's head read, both by `until`: the
/// whole exchange's deadline ([`RequestBuilder::timeout`]), not a bound on
/// each read.
async fn exchange(
    conn: &mut Connection,
    message: &[u8],
    limits: HeadLimits,
    until: Instant,
) -> Result<ResponseHead> {
    write_request(conn, message, until).await?;
    let mut buf = Vec::new();
    read_response_head(conn, &mut buf, limits, until).await
}

/// A response: its head read, its body still on the connection.
///
/// Reading the body to its end ([`bytes`](ClientResponse::bytes),
/// [`text`](ClientResponse::text), [`chunk`](ClientResponse::chunk) until
/// `None`) gives the connection back to the pool; dropping the response
/// before closes it.
pub struct ClientResponse {
    head: ResponseHead,
    reader: BodyReader,
    conn: Option<Connection>,
    pool: Arc<Pool>,
    until: Instant,
    max_body: u64,
}

impl ClientResponse {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.head.status
    }

    /// The first field named `name` (any case), if its value is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head
            .header(name)
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Every field, in order, names as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.head.headers()
    }

    /// The whole head.
    pub fn head(&self) -> &ResponseHead {
        &self.head
    }

    /// The next piece of the body, `None` at its end: for a body too large
    /// to collect.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let mut buf = vec![0u8; 16 * 1024];
        let n = self.reader.read(conn, &mut buf, self.until).await?;
        if n == 0 {
            self.finished();
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some(buf))
    }

    /// The whole body (at most the request's
    /// [`max_body`](RequestBuilder::max_body), else [`Error::TooLarge`]).
    pub async fn bytes(mut self) -> Result<Vec<u8>> {
        let limit = self.max_body;
        let mut body = Vec::new();
        if let crate::BodyFraming::Length(n) = self.reader.framing() {
            if n > limit {
                return Err(Error::TooLarge { limit });
            }
            body.reserve_exact(usize::try_from(n).unwrap_or(0));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(body);
        };
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = self.reader.read(conn, &mut buf, self.until).await?;
            if n == 0 {
                break;
            }
            if (body.len() + n) as u64 > limit {
                return Err(Error::TooLarge { limit });
            }
            body.extend_from_slice(&buf[..n]);
        }
        self.finished();
        Ok(body)
    }

    /// The whole body as text (bytes that are not UTF-8 become U+FFFD).
    pub async fn text(self) -> Result<String> {
        let bytes = self.bytes().await?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The whole body, parsed as JSON.
    #[cfg(feature = "json")]
    pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<T> {
        let bytes = self.bytes().await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::BadResponse(format!("its body is not the JSON expected: {e}")))
    }

    /// The body was read to its end: the connection goes back to the pool
    /// if it may.
    fn finished(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reader.reusable() {
                self.pool.give_back(conn);
            }
        }
    }
}

impl fmt::Debug for ClientResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientResponse")
            .field("status", &self.head.status)
            .field("headers", &self.head.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send<T: Send + 'static>(_: &T) {}

    #[test]
    fn its_futures_can_move_between_a_loops_threads() {
        // Under the event MPM a parked future may resume on another thread
        // of the process: what a handler awaits must be Send and 'static.
        let client = Client::new();
        is_send(&client.get("http://127.0.0.1:1/").send());
        let pool = Arc::new(Pool::default());
        let target = crate::Target::plain("127.0.0.1:1".parse().expect("an address"));
        is_send(&async move { pool.connect(&target, Instant::now()).await });
    }

    #[test]
    fn a_url_it_cannot_use_is_an_error_at_send() {
        let e = mpm_core::waiting::block_on(Client::new().get("ftp://x/").send()).unwrap_err();
        assert!(matches!(e, Error::Url(_)), "{e}");
    }

    #[test]
    fn content_length_is_the_clients_to_set() {
        let e = mpm_core::waiting::block_on(
            Client::new()
                .post("http://127.0.0.1:1/")
                .header("Content-Length", "3")
                .send(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidRequest(_)), "{e}");
    }

    #[test]
    fn a_path_is_joined_to_the_upstreams_own() {
        let up = Upstream::parse("http://127.0.0.1:1/api/").expect("a URL");
        let client = Client::new();
        assert_eq!(
            client.request_to("GET", &up, "/users?x=1").target,
            "/api/users?x=1"
        );
        assert_eq!(client.request_to("GET", &up, "users").target, "/api/users");
        let bare = Upstream::parse("http://127.0.0.1:1").expect("a URL");
        assert_eq!(client.request_to("GET", &bare, "/u").target, "/u");
        assert_eq!(client.get("http://127.0.0.1:1").target, "/");
    }
}
