//! What a request becomes before a byte of it goes to an upstream.
//!
//! [`Proxy::plan`] takes what the proxy needs of the request, owned
//! ([`Forward`]: it outlives `handle` in a future, and a retry sends it
//! again), or answers at once (a redirect to a prefix's slash), or leaves
//! the request to another handler. [`Picker::next`] then chooses the
//! upstream of each try (balance, health, the upstreams this request
//! already tried) and builds its head ([`Attempt`]); [`Picker::may_retry`]
//! says, by nginx's rules, whether a failed try may go on to another:
//! `next_upstream` on, an idempotent method, tries left.

use std::cell::OnceCell;
use std::net::IpAddr;
use std::sync::Arc;

use mpm_http::{Request, Response};
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::balance::{Balancer, InFlight, InFlightGuard};
use crate::config::{Balance, HashKey, ProxyRoute, UpstreamUrl};
use crate::headers::{request_fields_into, ClientInfo, Framing};
use crate::path::{map_target_into, RouteTable};
use crate::reverse_proxy::{Proxy, ReverseProxy};
use crate::shared_state::{now_ms, ProxyState, UpstreamState};

/// The request bodies larger than this are streamed to the upstream as they
/// arrive (a handler that streams bodies, on a worker) rather than read
/// whole first: 64 KiB, the most the HTTP layer's buffers keep.
pub const STREAMED_BODY_ABOVE: u64 = 64 * 1024;

/// What to do with a request.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Plan {
    /// No route takes its path: another handler's (the site's).
    NotMine,
    /// Answer this at once: a redirect to the prefix with its slash
    /// (`/api` → `/api/?q`, as nginx does).
    Answer(Box<Response>),
    /// Send it on. Not boxed: it moves once, into the exchange's future,
    /// and a box would be one more allocation a request.
    Forward(Forward),
}

/// What the proxy keeps of a request to send it on: owned, so that it
/// outlives `handle` (in a future the HTTP layer polls) and can be sent
/// again to another upstream.
#[derive(Debug, Clone)]
pub struct Forward {
    /// The route's index in the table.
    pub route: usize,
    /// The method, path, query and every field's name and value, one
    /// after the other: one allocation a request (the [`Spans`] of up to
    /// 16 fields are inline), not two a field. Text, checked once as it
    /// is kept, not each time a part is read (a head is read again for
    /// each try).
    text: String,
    /// The values that are not UTF-8 (obs-text), passed on as sent: none,
    /// and no allocation, for nearly every request.
    raw: Vec<u8>,
    /// Where each part is in `text` (or `raw`).
    spans: Spans,
    /// The peer's address.
    pub peer: IpAddr,
    /// Did it come over TLS?
    pub tls: bool,
    /// How the body follows the head.
    pub framing: Framing,
    /// Does it ask for a tunnel (`Upgrade`)?
    pub tunnel: bool,
    /// What a hash route hashes: the client's address, or a header's value.
    pub hash_key: Vec<u8>,
}

/// Where a part is: its start and length.
type Span = (u32, u32);

/// Set in a value's start when the value is in [`Forward`]'s `raw`, not
/// its `text`: starts are below 64 KiB (a head's most), far from it.
const IN_RAW: u32 = 1 << 31;

/// Where the parts of a [`Forward`] are in its text: method, path, query
/// (empty: none), then a name and a value per field.
#[derive(Debug, Clone, Default)]
struct Spans {
    method: Span,
    path: Span,
    query: Option<Span>,
    /// An absolute-form target's authority (`http://AUTHORITY/…`), which
    /// stands for the client's `Host`.
    authority: Option<Span>,
    fields: SmallVec<[[Span; 2]; 16]>,
}

/// The span of `part`, appended to `buf`. A request head is at most the
/// HTTP layer's buffer (64 KiB), so its offsets fit a u32; a longer one
/// keeps what fits and is cut (never reached: the layer refuses such a
/// head with 431).
fn put(buf: &mut Vec<u8>, part: &[u8]) -> Span {
    let start = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(part);
    (start, u32::try_from(part.len()).unwrap_or(0))
}

/// The authority of an absolute-form `target` (`http://a:8080/x` → `a:8080`),
/// none for origin form. The HTTP layer checked it, and the proxy refuses
/// a scheme other than http and https.
fn target_authority(target: &str) -> Option<&str> {
    if target.starts_with('/') {
        return None;
    }
    let rest = &target[target.find("://")? + 3..];
    Some(&rest[..rest.find(['/', '?']).unwrap_or(rest.len())])
}

impl Forward {
    /// Keep what the proxy needs of `request`, whose target the caller
    /// cut into `path` and `query`.
    fn keep(request: &Request<'_>, path: &str, query: Option<&str>) -> (String, Vec<u8>, Spans) {
        // Sized first, so that it is one allocation, never grown.
        let authority = target_authority(request.target());
        let size = request.method().len()
            + path.len()
            + authority.map_or(0, str::len)
            + query.map_or(0, str::len)
            + request
                .headers()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>();
        let mut text = Vec::with_capacity(size);
        let mut raw = Vec::new();
        let method = put(&mut text, request.method().as_bytes());
        let path = put(&mut text, path.as_bytes());
        let query = query.map(|q| put(&mut text, q.as_bytes()));
        let authority = authority.map(|a| put(&mut text, a.as_bytes()));
        let fields = request
            .headers()
            .map(|(n, v)| {
                let name = put(&mut text, n.as_bytes());
                // A value is nearly always ASCII, told without a call.
                let value = if v.is_ascii() || std::str::from_utf8(v).is_ok() {
                    put(&mut text, v)
                } else {
                    let (start, len) = put(&mut raw, v);
                    (start | IN_RAW, len)
                };
                [name, value]
            })
            .collect();
        // Every part is UTF-8, so their whole is: checked once, as a
        // whole, rather than a call for each short part. (Were it not,
        // the parts would read as empty, never as other text.)
        let text = String::from_utf8(text).unwrap_or_default();
        (
            text,
            raw,
            Spans {
                method,
                path,
                query,
                authority,
                fields,
            },
        )
    }

    fn text(&self, (start, len): Span) -> &str {
        let start = start as usize;
        self.text
            .get(start..start + len as usize)
            .unwrap_or_default()
    }

    fn value(&self, (start, len): Span) -> &[u8] {
        if start & IN_RAW == 0 {
            return self.text((start, len)).as_bytes();
        }
        let start = (start & !IN_RAW) as usize;
        self.raw
            .get(start..start + len as usize)
            .unwrap_or_default()
    }

    /// The method.
    pub fn method(&self) -> &str {
        self.text(self.spans.method)
    }

    /// The path as sent (still percent-encoded).
    pub fn path(&self) -> &str {
        self.text(self.spans.path)
    }

    /// The query, if any.
    pub fn query(&self) -> Option<&str> {
        self.spans.query.map(|q| self.text(q))
    }

    /// The request's fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> + Clone {
        self.spans
            .fields
            .iter()
            .map(|[n, v]| (self.text(*n), self.value(*v)))
    }

    /// A field's first value (case-insensitive name).
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The client's host: an absolute-form target's authority, which a
    /// server must take over any `Host` field (RFC 9112 §3.2.2), else the
    /// first `Host` field's value, trimmed, if it is text.
    fn host(&self) -> Option<&str> {
        if let Some(a) = self.spans.authority {
            return Some(self.text(a));
        }
        let [_, value] = self
            .spans
            .fields
            .iter()
            .find(|[n, _]| self.text(*n).eq_ignore_ascii_case("host"))?;
        (value.0 & IN_RAW == 0).then(|| self.text(*value).trim())
    }
}

/// One try of a request on one upstream.
#[derive(Debug)]
pub struct Attempt {
    /// The upstream's index in the route (its URL:
    /// [`Picker::url`], not copied into every try).
    pub upstream: usize,
    /// Its shared state: count the request, record a failure.
    pub state: UpstreamState,
    /// The request head to send it, whole: in a buffer the thread gave
    /// back ([`mpm_core::byte_spares`]), which the exchange gives back once
    /// the head is written (a retry makes its head again).
    pub head: Vec<u8>,
    /// Counts the request in flight until dropped, on a least-conn route
    /// (the only balancing that reads the count); none on others, so that
    /// their requests write no count that every thread of the process
    /// shares.
    pub in_flight: Option<InFlightGuard>,
}

/// The methods a failed try may be repeated for on the next upstream
/// (RFC 9110's idempotent methods); never a `POST` or a `PATCH`.
pub fn is_idempotent(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"].contains(&method)
}

/// Does the request ask to switch protocols (`Connection: upgrade` and an
/// `Upgrade` field) to something the proxy tunnels? Not to `h2c`: a
/// tunnel of cleartext HTTP/2 to the upstream would carry requests the
/// proxy never routed or checked (h2c smuggling). `h2c` is taken out of
/// the list the upstream gets (`headers::offered_protocols`);
/// a request that named nothing else is passed as a plain one, its
/// `Upgrade` dropped, as nginx does.
pub fn wants_upgrade(request: &Request<'_>) -> bool {
    crate::headers::offered_protocols(request.headers())
        .next()
        .is_some()
        && request
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Does the request's body go to the upstream as it arrives (larger than
/// [`STREAMED_BODY_ABOVE`], or chunked, whose length is not known)? An
/// HTTP/2 body without `content-length` is gathered whole (bounded as a
/// body read whole is), and sent with its length: an upstream may refuse
/// a chunked upload (411), and a body held can go again to the next
/// upstream.
pub fn streams_upload(request: &Request<'_>) -> bool {
    match request.content_length() {
        Some(n) => n > STREAMED_BODY_ABOVE,
        None => request.is_chunked(),
    }
}

impl Proxy {
    /// Does a route take this request's path?
    pub fn takes(&self, request: &Request<'_>) -> bool {
        let table = &self.shared.table;
        // The root route takes every origin-form target (`/…`): its path
        // need not be cut from the query, let alone normalized.
        (table.has_root() && request.target().starts_with('/')) || table.takes(request.path())
    }

    /// The plan for `request` from a peer over TLS (`tls`) or not.
    pub fn plan(&self, request: &Request<'_>, tls: bool) -> Plan {
        let table = &self.shared.table;
        // Each cut from the target once, for the route and for the head.
        let (path, query) = request.path_and_query();
        if crate::path::refused(path) {
            return Plan::Answer(Box::new(Response::error(400)));
        }
        let Some(index) = table.find_index(path) else {
            if let Some(route) = table.needs_slash(path) {
                let mut location = route.prefix.clone();
                if let Some(q) = query {
                    location.push('?');
                    location.push_str(q);
                }
                return Plan::Answer(Box::new(Response::new(301).header("Location", location)));
            }
            return Plan::NotMine;
        };
        let route = &table.routes()[index];
        let peer = request.peer_addr().ip().to_canonical();
        let hash_key = match &route.balance {
            Balance::Hash(HashKey::ClientAddr) => match peer {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            },
            Balance::Hash(HashKey::Header(name)) => {
                request.header(name).unwrap_or_default().to_vec()
            }
            _ => Vec::new(),
        };
        let (text, raw, spans) = Forward::keep(request, path, query);
        Plan::Forward(Forward {
            route: index,
            text,
            raw,
            spans,
            peer,
            tls,
            framing: framing(request),
            tunnel: wants_upgrade(request),
            hash_key,
        })
    }

    /// What chooses each try's upstream, movable into a future.
    pub fn picker(&self) -> Picker {
        self.call.picker.clone()
    }
}

/// Chooses the upstream of each try of a [`Forward`]: the worker's
/// balancers, shared with the futures its requests became. One `Arc`,
/// cloned once a request.
#[derive(Debug, Clone)]
pub struct Picker {
    choices: Arc<Choices>,
}

#[derive(Debug)]
struct Choices {
    table: Arc<RouteTable>,
    /// Shared, not copied per request.
    state: Arc<ProxyState>,
    /// Per route, this process's requests in flight per upstream (the
    /// balancers read them too).
    in_flight: Arc<Vec<InFlight>>,
    /// Behind a `parking_lot::Mutex` of the worker's own, taken for a pick
    /// (a few comparisons): the worker's `handle` and the futures it made
    /// (which an event loop may resume on another thread) are all that
    /// take it, never every core; and a route of one upstream, having no
    /// choice to make, does not take it.
    balancers: Mutex<Vec<Balancer>>,
}

impl Picker {
    /// One worker's picker of `shared`'s upstreams, with balancers of its
    /// own.
    pub(crate) fn new(shared: &ReverseProxy) -> Picker {
        let balancers = shared
            .table
            .routes()
            .iter()
            .zip(shared.in_flight.iter())
            .map(|(r, f)| Balancer::new(r, f.clone()))
            .collect();
        Picker {
            choices: Arc::new(Choices {
                table: shared.table.clone(),
                state: shared.state.clone(),
                in_flight: shared.in_flight.clone(),
                balancers: Mutex::new(balancers),
            }),
        }
    }

    /// The route of a request.
    pub fn route(&self, forward: &Forward) -> &ProxyRoute {
        &self.choices.table.routes()[forward.route]
    }

    /// The URL of the upstream an attempt of `forward` went to.
    pub fn url(&self, forward: &Forward, attempt: &Attempt) -> &UpstreamUrl {
        &self.route(forward).upstreams[attempt.upstream].url
    }

    /// The next try: an upstream up and not in `tried`, chosen as the
    /// route balances, with its head; `None` when none is left (nginx's
    /// "no live upstreams": answer 502).
    pub fn next(&self, forward: &Forward, tried: &[usize]) -> Option<Attempt> {
        let r = forward.route;
        let choices = &*self.choices;
        let route = choices.table.routes().get(r)?;
        let states = choices.state.route(r);
        // Read once, and only if an upstream was ever marked down.
        let now = OnceCell::new();
        let flight = choices.in_flight.get(r)?;
        let ups = &route.upstreams;
        // nginx's `max_conns`: an upstream with as many requests in flight
        // from this process is passed over.
        let has_room = |i: usize| {
            ups.get(i)
                .is_some_and(|u| u.max_conns == 0 || flight.get(i) < u.max_conns)
        };
        // Upstreams another thread of this process filled between the
        // pick and the count (the worker MPM's): passed over, and the pick
        // made again, until one with room is counted or none is left.
        let mut full: SmallVec<[usize; 2]> = SmallVec::new();
        let (u, in_flight) = loop {
            let eligible = |i: usize| {
                !full.contains(&i)
                    && !tried.contains(&i)
                    && has_room(i)
                    && states
                        .get(i)
                        .is_some_and(|s| s.is_up_with(|| *now.get_or_init(now_ms)))
            };
            let u = if ups.len() == 1 && !matches!(route.balance, Balance::Hash(_)) {
                // One upstream: round-robin and least-conn can only pick it.
                eligible(0).then_some(0)?
            } else {
                let mut balancers = choices.balancers.lock();
                let b = balancers.get_mut(r)?;
                let backup = |i: usize| ups.get(i).is_some_and(|u| u.backup);
                match b.pick(&forward.hash_key, |i| !backup(i) && eligible(i)) {
                    Some(u) => u,
                    // nginx's `backup`: only when no other may be taken.
                    None if ups.iter().any(|u| u.backup) => {
                        b.pick(&forward.hash_key, |i| backup(i) && eligible(i))?
                    }
                    None => return None,
                }
            };
            // Counted for least-conn, which compares the counts, and for
            // an upstream with a limit.
            let max = ups[u].max_conns;
            if !matches!(route.balance, Balance::LeastConn) && max == 0 {
                break (u, None);
            }
            match flight.try_start(u, max) {
                Some(guard) => break (u, Some(guard)),
                // Each pass passes one more over: at most one per upstream.
                None => full.push(u),
            }
        };
        let spec = &route.upstreams[u];
        let host = forward.host();
        let client = ClientInfo {
            addr: forward.peer,
            tls: forward.tls,
            host,
        };
        // Written in one buffer sized for it: the client's parts, their
        // separators, the fields the proxy adds and the URL's path.
        let mut head = mpm_core::byte_spares::take(
            forward.text.len()
                + forward.raw.len()
                + 4 * forward.spans.fields.len()
                + spec.url.as_str().len()
                + host.map_or(0, str::len)
                + 320,
        );
        head.extend_from_slice(forward.method().as_bytes());
        head.push(b' ');
        map_target_into(&mut head, route, &spec.url, forward.path(), forward.query());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        request_fields_into(
            &mut head,
            route,
            &spec.url,
            forward.fields(),
            &client,
            forward.framing,
            forward.tunnel,
        );
        Some(Attempt {
            upstream: u,
            state: states[u],
            head,
            in_flight,
        })
    }

    /// After tries on the upstreams `tried` failed before any byte of an
    /// answer (a connect error, a close), may the request go to another?
    /// nginx's rules: the route's `next_upstream` on, an idempotent method,
    /// and fewer tries than `next_upstream_tries` (0: as many as there are
    /// upstreams).
    pub fn may_retry(&self, forward: &Forward, tried: &[usize]) -> bool {
        let Some(r) = self.choices.table.routes().get(forward.route) else {
            return false;
        };
        let limit = match r.next_upstream_tries {
            0 => r.upstreams.len(),
            n => n as usize,
        };
        r.next_upstream && is_idempotent(forward.method()) && tried.len() < limit
    }
}

/// How the request's body is framed to the upstream: the length of a body
/// read whole, the announced length of one read as it arrives (streamed
/// or awaited; else chunked), none
/// for a request that had no body framing at all, but `Content-Length: 0`
/// for a POST, PUT or PATCH (a method that gives content a meaning, for
/// which RFC 9110 §8.6 asks a length: an HTTP/2 client ends such a
/// request's empty body with a DATA frame, not a length, and an upstream
/// may answer 411 to a POST without one; nginx sends the 0 too).
fn framing(request: &Request<'_>) -> Framing {
    if request.is_streamed() || request.awaited_body().is_some() {
        return match request.content_length() {
            Some(n) => Framing::Length(n),
            None => Framing::Chunked,
        };
    }
    // Read from the layer's parse of the head, not by a scan of the
    // fields for each name.
    let framed = request.content_length().is_some() || request.is_chunked();
    if framed || !request.body().is_empty() || matches!(request.method(), "POST" | "PUT" | "PATCH")
    {
        Framing::Length(request.body().len() as u64)
    } else {
        Framing::None
    }
}

#[cfg(test)]
mod tests {
    use mpm_http::Version;

    use super::*;
    use crate::{InFlight, InFlightGuard, PoolSettings, ReverseProxy, Slots};

    fn proxy_of(routes: Vec<ProxyRoute>) -> Proxy {
        let table = RouteTable::new(routes);
        let state = ProxyState::with_slots(&table, &Slots::new(16).unwrap()).unwrap();
        ReverseProxy::with_state(table, state, PoolSettings::default())
            .unwrap()
            .worker()
    }

    fn proxy(flags: &[&str]) -> Proxy {
        proxy_of(
            flags
                .iter()
                .map(|f| ProxyRoute::from_flag(f).unwrap())
                .collect(),
        )
    }

    fn forward(p: &Proxy, req: &Request<'_>) -> Forward {
        match p.plan(req, false) {
            Plan::Forward(f) => f,
            other => panic!("not forwarded: {other:?}"),
        }
    }

    #[test]
    fn a_request_under_a_prefix_becomes_a_head_for_its_upstream() {
        let p = proxy(&["/api/=http://10.0.0.2:8080/v1/", "/=http://10.0.0.9"]);
        let fields = [("Host", "example.com"), ("Accept", "*/*")];
        let req = Request::for_test("GET", "/api/items?x=1", Version::Http11, &fields, b"")
            .with_peer("192.0.2.7:5555".parse().unwrap());
        let Plan::Forward(mut f) = p.plan(&req, true) else {
            panic!("not forwarded")
        };
        assert_eq!((f.route, f.framing, f.tunnel), (0, Framing::None, false));
        let picker = p.picker();
        let a = picker.next(&f, &[]).unwrap();
        let head = String::from_utf8(a.head.clone()).unwrap();
        assert!(
            head.starts_with("GET /v1/items?x=1 HTTP/1.1\r\nHost: 10.0.0.2:8080\r\n"),
            "{head}"
        );
        assert!(head.contains("X-Forwarded-For: 192.0.2.7\r\n"), "{head}");
        assert!(head.contains("X-Forwarded-Proto: https\r\n"), "{head}");
        assert!(
            a.in_flight.is_none(),
            "round-robin counts nothing in flight"
        );
        assert_eq!(p.shared.in_flight[0].get(0), 0);
        f.tls = false;
        let head = String::from_utf8(picker.next(&f, &[]).unwrap().head).unwrap();
        assert!(head.contains("X-Forwarded-Proto: http\r\n"), "{head}");
    }

    #[test]
    fn a_body_read_whole_is_framed_by_its_length() {
        let p = proxy(&["/=http://10.0.0.20"]);
        let fields = [("Host", "h"), ("Transfer-Encoding", "chunked")];
        let req = Request::for_test("POST", "/f", Version::Http11, &fields, b"hello");
        let f = forward(&p, &req);
        assert_eq!(f.framing, Framing::Length(5));
        let head = String::from_utf8(p.picker().next(&f, &[]).unwrap().head).unwrap();
        assert!(
            head.contains("Content-Length: 5\r\n") && !head.contains("chunked"),
            "{head}"
        );
    }

    #[test]
    fn an_empty_post_put_or_patch_says_content_length_0_and_a_get_says_nothing() {
        let p = proxy(&["/=http://10.0.0.20"]);
        // HTTP/2: the body ended by an empty DATA frame, no length field.
        for method in ["POST", "PUT", "PATCH"] {
            let req = Request::for_test(method, "/f", Version::Http2, &[("host", "h")], b"");
            let f = forward(&p, &req);
            assert_eq!(f.framing, Framing::Length(0), "{method}");
            let head = String::from_utf8(p.picker().next(&f, &[]).unwrap().head).unwrap();
            assert!(head.contains("Content-Length: 0\r\n"), "{head}");
        }
        for method in ["GET", "DELETE", "OPTIONS"] {
            let req = Request::for_test(method, "/f", Version::Http2, &[("host", "h")], b"");
            assert_eq!(forward(&p, &req).framing, Framing::None, "{method}");
        }
    }

    #[test]
    fn large_and_chunked_uploads_are_streamed() {
        let big = (STREAMED_BODY_ABOVE + 1).to_string();
        let fields = [("Host", "h"), ("Content-Length", big.as_str())];
        assert!(streams_upload(&Request::for_test(
            "PUT",
            "/",
            Version::Http11,
            &fields,
            b""
        )));
        let fields = [("Host", "h"), ("Content-Length", "10")];
        assert!(!streams_upload(&Request::for_test(
            "PUT",
            "/",
            Version::Http11,
            &fields,
            b""
        )));
        let fields = [("Host", "h"), ("Transfer-Encoding", "chunked")];
        assert!(streams_upload(&Request::for_test(
            "PUT",
            "/",
            Version::Http11,
            &fields,
            b""
        )));
        // HTTP/2 DATA without a content-length: gathered, sent with its
        // length.
        let h2 = |fields: &[(&str, &str)]| {
            streams_upload(&Request::for_test("PUT", "/", Version::Http2, fields, b""))
        };
        assert!(!h2(&[("host", "h")]));
        assert!(h2(&[("host", "h"), ("content-length", "100000")]));
    }

    /// `GET /api?q=1` is the proxy's, answered 301 to `/api/?q=1`.
    fn assert_api_redirected(p: &Proxy) {
        let req = Request::for_test("GET", "/api?q=1", Version::Http11, &[("Host", "h")], b"");
        assert!(p.takes(&req));
        let Plan::Answer(r) = p.plan(&req, false) else {
            panic!("no redirect")
        };
        assert_eq!(
            (r.status(), r.header_value("location")),
            (301, Some("/api/?q=1"))
        );
    }

    #[test]
    fn other_paths_are_not_the_proxys_and_a_missing_slash_is_redirected() {
        let p = proxy(&["/api/=http://10.0.0.20"]);
        let req = Request::for_test("GET", "/index.html", Version::Http11, &[("Host", "h")], b"");
        assert!(!p.takes(&req) && matches!(p.plan(&req, false), Plan::NotMine));
        assert_api_redirected(&p);
    }

    #[test]
    fn a_missing_slash_is_redirected_though_the_root_route_would_take_it() {
        let p = proxy(&["/=http://10.0.0.20", "/api/=http://10.0.0.21"]);
        assert_api_redirected(&p);
        let req = Request::for_test("GET", "/apix", Version::Http11, &[("Host", "h")], b"");
        assert!(matches!(p.plan(&req, false), Plan::Forward(_)));
    }

    #[test]
    fn paths_nginx_refuses_are_answered_400_and_never_forwarded() {
        let p = proxy(&["/=http://10.0.0.20", "/api/=http://10.0.0.21/v1/"]);
        for target in [
            "ws://internal.example/x",
            "ftp://internal.example/x",
            "/../etc/passwd",
            "/a/../../etc/passwd",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/a%00b",
            "/a%zz",
            "/a%2",
            "/api/..%2Fadmin",
            "/api/%2E%2E%2Fadmin",
            "/api/x/..%2f..%2fadmin",
            "/api/.%2Fx",
        ] {
            let req = Request::for_test("GET", target, Version::Http11, &[("Host", "h")], b"");
            let plan = p.plan(&req, false);
            assert!(
                matches!(&plan, Plan::Answer(r) if r.status() == 400),
                "{target}"
            );
        }
        for target in [
            "/",
            "/a/../b",
            "/api/a%20b/%2F/c%3Fd",
            "/api/./x",
            "/x.y/z..w",
            "http://other.example/api/x",
        ] {
            let req = Request::for_test("GET", target, Version::Http11, &[("Host", "h")], b"");
            assert!(matches!(p.plan(&req, false), Plan::Forward(_)), "{target}");
        }
    }

    #[test]
    fn an_absolute_form_targets_authority_is_the_clients_host() {
        let p = proxy(&["/=http://10.0.0.20"]);
        let host = |target: &str| {
            let req = Request::for_test(
                "GET",
                target,
                Version::Http11,
                &[("Host", "example.com")],
                b"",
            );
            forward(&p, &req).host().map(str::to_string)
        };
        assert_eq!(
            host("http://other.example:8080/h2?q").as_deref(),
            Some("other.example:8080")
        );
        assert_eq!(
            host("HTTP://other.example?q").as_deref(),
            Some("other.example")
        );
        assert_eq!(host("/h2").as_deref(), Some("example.com"));
    }

    #[test]
    fn an_upgrade_to_h2c_alone_is_not_tunnelled() {
        let up = |upgrade: &str| {
            let fields = [
                ("Host", "h"),
                ("Connection", "Upgrade"),
                ("Upgrade", upgrade),
            ];
            wants_upgrade(&Request::for_test(
                "GET",
                "/",
                Version::Http11,
                &fields,
                b"",
            ))
        };
        assert!(up("websocket"));
        assert!(up("h2c, websocket"));
        assert!(up("websocket, h2c"));
        assert!(!up("h2c"));
        assert!(!up(" H2C "));
        assert!(!up("h2c, H2C/1,"));
        assert!(!up(""));
    }

    /// `h2c` beside another protocol: the tunnel is asked for the other
    /// alone, and without `HTTP2-Settings`.
    #[test]
    fn h2c_is_taken_out_of_an_upgrade_list() {
        let p = proxy(&["/=http://10.0.0.20"]);
        for list in ["websocket, h2c", "h2c, websocket", "h2c,websocket,h2c"] {
            let fields = [
                ("Host", "h"),
                ("Connection", "Upgrade, HTTP2-Settings"),
                ("Upgrade", list),
                ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"),
            ];
            let f = forward(
                &p,
                &Request::for_test("GET", "/ws", Version::Http11, &fields, b""),
            );
            assert!(f.tunnel, "{list}");
            let head = String::from_utf8(p.picker().next(&f, &[]).unwrap().head).unwrap();
            assert!(
                head.contains("\r\nUpgrade: websocket\r\n"),
                "{list}: {head}"
            );
            let lower = head.to_ascii_lowercase();
            assert!(
                !lower.contains("h2c") && !lower.contains("http2-settings"),
                "{list}: {head}"
            );
        }
    }

    #[test]
    fn tries_skip_the_upstreams_tried_until_none_is_left() {
        let p = proxy(&["/=http://10.0.0.21,http://10.0.0.22"]);
        let req = Request::for_test("GET", "/", Version::Http11, &[("Host", "h")], b"");
        let f = forward(&p, &req);
        let picker = p.picker();
        let first = picker.next(&f, &[]).unwrap().upstream;
        let second = picker.next(&f, &[first]).unwrap().upstream;
        assert_ne!(first, second);
        assert!(picker.next(&f, &[first, second]).is_none());
    }

    #[test]
    fn a_least_conn_route_counts_its_tries_in_flight_until_they_end() {
        let mut route = ProxyRoute::from_flag("/=http://10.0.0.21,http://10.0.0.22").unwrap();
        route.balance = Balance::LeastConn;
        let p = proxy_of(vec![route]);
        let req = Request::for_test("GET", "/", Version::Http11, &[("Host", "h")], b"");
        let f = forward(&p, &req);
        let picker = p.picker();
        let first = picker.next(&f, &[]).unwrap();
        assert!(first.in_flight.is_some());
        assert_eq!(
            p.shared.in_flight[0].get(first.upstream),
            1,
            "counted while in flight"
        );
        // The other one has fewer in flight: it is the next pick.
        let second = picker.next(&f, &[]).unwrap();
        assert_ne!(second.upstream, first.upstream);
        let u = first.upstream;
        drop(first);
        assert_eq!(
            p.shared.in_flight[0].get(u),
            0,
            "uncounted when the try ends"
        );
    }

    #[test]
    fn an_upstream_with_max_conns_in_flight_is_passed_over_until_one_ends() {
        let mut route = ProxyRoute::from_flag("/=http://10.0.0.21,http://10.0.0.22").unwrap();
        route.upstreams[0].max_conns = 2;
        route.upstreams[1].max_conns = 1;
        let p = proxy_of(vec![route]);
        let req = Request::for_test("GET", "/", Version::Http11, &[("Host", "h")], b"");
        let f = forward(&p, &req);
        let picker = p.picker();
        let held: Vec<Attempt> = (0..3).map(|_| picker.next(&f, &[]).unwrap()).collect();
        let to = |u: usize| held.iter().filter(|a| a.upstream == u).count();
        assert_eq!((to(0), to(1)), (2, 1), "each up to its max_conns");
        assert!(
            picker.next(&f, &[]).is_none(),
            "every upstream full: nginx's no live upstreams, a 502"
        );
        let mut held = held;
        let freed = held.pop().unwrap().upstream;
        assert_eq!(picker.next(&f, &[]).unwrap().upstream, freed, "room again");
        // A route of one upstream, round-robin, counts only for the limit.
        let p = proxy(&["/=http://10.0.0.23"]);
        let f = forward(&p, &req);
        assert!(p.picker().next(&f, &[]).unwrap().in_flight.is_none());
        let mut route = ProxyRoute::from_flag("/=http://10.0.0.23").unwrap();
        route.upstreams[0].max_conns = 1;
        let p = proxy_of(vec![route]);
        let f = forward(&p, &req);
        let picker = p.picker();
        let one = picker.next(&f, &[]).unwrap();
        assert!(picker.next(&f, &[]).is_none());
        drop(one);
        assert!(picker.next(&f, &[]).is_some());
    }

    #[test]
    fn threads_counting_at_once_never_pass_max_conns_together() {
        let flight = InFlight::new(1);
        let taken: Vec<InFlightGuard> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        (0..100)
                            .filter_map(|_| flight.try_start(0, 5))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!((taken.len(), flight.get(0)), (5, 5));
        drop(taken);
        assert_eq!(flight.get(0), 0);
    }

    #[test]
    fn an_upstream_marked_down_is_skipped() {
        let p = proxy(&["/=http://10.0.0.21,http://10.0.0.22"]);
        p.shared.state.route(0)[0].record_failure(now_ms());
        let req = Request::for_test("GET", "/", Version::Http11, &[("Host", "h")], b"");
        let f = forward(&p, &req);
        for _ in 0..4 {
            assert_eq!(p.picker().next(&f, &[]).unwrap().upstream, 1);
        }
    }

    #[test]
    fn only_idempotent_methods_are_retried_within_the_tries() {
        let mut routes =
            vec![
                ProxyRoute::from_flag("/=http://10.0.0.21,http://10.0.0.22,http://10.0.0.23")
                    .unwrap(),
            ];
        let get = |p: &Proxy, method: &'static str| {
            forward(
                p,
                &Request::for_test(method, "/", Version::Http11, &[("Host", "h")], b""),
            )
        };
        let p = proxy_of(routes.clone());
        let pk = p.picker();
        assert!(pk.may_retry(&get(&p, "GET"), &[0]));
        assert!(pk.may_retry(&get(&p, "PUT"), &[0, 1]));
        assert!(
            !pk.may_retry(&get(&p, "GET"), &[0, 1, 2]),
            "every upstream tried"
        );
        assert!(!pk.may_retry(&get(&p, "POST"), &[0]));
        assert!(!pk.may_retry(&get(&p, "PATCH"), &[0]));
        routes[0].next_upstream_tries = 2;
        let p = proxy_of(routes.clone());
        assert!(p.picker().may_retry(&get(&p, "GET"), &[0]));
        assert!(!p.picker().may_retry(&get(&p, "GET"), &[0, 1]));
        routes[0].next_upstream = false;
        let p = proxy_of(routes);
        assert!(!p.picker().may_retry(&get(&p, "GET"), &[0]));
    }

    #[test]
    fn a_header_hash_sends_one_user_to_one_upstream() {
        let mut route =
            ProxyRoute::from_flag("/=http://10.0.0.21,http://10.0.0.22,http://10.0.0.23").unwrap();
        route.balance = "hash:header:X-User".parse().unwrap();
        let p = proxy_of(vec![route]);
        let fields = [("Host", "h"), ("X-User", "alice")];
        let f = forward(
            &p,
            &Request::for_test("GET", "/", Version::Http11, &fields, b""),
        );
        assert_eq!(f.hash_key, b"alice");
        let first = p.picker().next(&f, &[]).unwrap().upstream;
        for _ in 0..10 {
            assert_eq!(p.picker().next(&f, &[]).unwrap().upstream, first);
        }
    }

    #[test]
    fn an_upgrade_request_is_a_tunnel() {
        let p = proxy(&["/=http://10.0.0.20"]);
        let fields = [
            ("Host", "h"),
            ("Connection", "keep-alive, Upgrade"),
            ("Upgrade", "websocket"),
        ];
        let f = forward(
            &p,
            &Request::for_test("GET", "/ws", Version::Http11, &fields, b""),
        );
        assert!(f.tunnel);
        let head = String::from_utf8(p.picker().next(&f, &[]).unwrap().head).unwrap();
        assert!(
            head.contains("Upgrade: websocket\r\n")
                && head.ends_with("Connection: upgrade\r\n\r\n")
        );
    }

    /// An escaped unreserved character is decoded to match (docs/proxy.md),
    /// as nginx does: `/%61pi/x` is under `/api/`, and sent there with the
    /// prefix replaced; a route without a path passes it as sent. Other
    /// escapes are compared as sent: `/api%2Fx` and `/%2561pi/x` are not
    /// under `/api/`, and go to the root route as sent.
    #[test]
    fn an_encoded_letter_is_decoded_to_match_a_route_and_no_other_escape() {
        let get = |target| Request::for_test("GET", target, Version::Http11, &[("Host", "h")], b"");
        let with_root = proxy(&["/api/=http://10.0.0.20/v1/", "/=http://10.0.0.21"]);
        let api = with_root
            .shared
            .table
            .routes()
            .iter()
            .position(|r| r.prefix == "/api/")
            .unwrap();
        for target in ["/api/x", "/%61pi/x", "/%61%70%69/x"] {
            let f = forward(&with_root, &get(target));
            assert_eq!(f.route, api, "{target} missed the /api/ route");
            let head = String::from_utf8(with_root.picker().next(&f, &[]).unwrap().head).unwrap();
            assert!(head.starts_with("GET /v1/x HTTP/1.1\r\n"), "{head}");
        }
        for target in ["/api%2Fx", "/%2561pi/x"] {
            let f = forward(&with_root, &get(target));
            assert_ne!(f.route, api, "{target} reached the /api/ route");
            let head = String::from_utf8(with_root.picker().next(&f, &[]).unwrap().head).unwrap();
            assert!(
                head.starts_with(&format!("GET {target} HTTP/1.1\r\n")),
                "{head}"
            );
        }
        let whole = proxy(&["/api/=http://10.0.0.20"]);
        let req = get("/%61pi/x");
        assert!(whole.takes(&req), "/%61pi/x is the /api/ route's");
        let f = forward(&whole, &req);
        let head = String::from_utf8(whole.picker().next(&f, &[]).unwrap().head).unwrap();
        assert!(
            head.starts_with("GET /%61pi/x HTTP/1.1\r\n"),
            "passed as sent: {head}"
        );
        assert!(!whole.takes(&get("/api%2Fx")));
    }

    #[test]
    fn the_root_route_takes_every_path_and_no_asterisk() {
        let p = proxy(&["/api/=http://10.0.0.20", "/=http://10.0.0.21"]);
        for (target, taken) in [
            ("/", true),
            ("/x?y=1", true),
            ("/api", true),
            ("http://h/a?b", true),
            ("http://h", true),
            ("*", false),
        ] {
            let req = Request::for_test("GET", target, Version::Http11, &[("Host", "h")], b"");
            assert_eq!(p.takes(&req), taken, "{target}");
        }
    }
}
