//! What a request becomes before a byte of it goes to an upstream: its
//! route, the upstream chosen (balance, health, the upstreams this request
//! already tried), the target and the head the upstream is sent. Whether a
//! failed try may go on to another upstream is decided here too, by nginx's
//! rules: `next_upstream` on, an idempotent method, tries left.

use std::net::IpAddr;

use mpm_http::{Request, Response};

use crate::balance::InFlightGuard;
use crate::config::{HashKey, ProxyRoute, UpstreamUrl};
use crate::headers::{request_head, ClientInfo, Framing};
use crate::path::map_target;
use crate::reverse_proxy::Proxy;
use crate::shared_state::{now_ms, UpstreamState};

/// What to do with a request.
#[derive(Debug)]
pub enum Plan {
    /// No route takes its path: another handler's (the site's).
    NotMine,
    /// Answer this at once: a redirect to the prefix with its slash
    /// (`/api` → `/api/`, as nginx), or 502 when no upstream is live.
    Answer(Response),
    /// Send this to an upstream.
    Send(Exchange),
}

/// One try of a request on one upstream.
#[derive(Debug)]
pub struct Exchange {
    /// The route's index in the table.
    pub route: usize,
    /// The upstream's index in the route.
    pub upstream: usize,
    /// Where it is.
    pub url: UpstreamUrl,
    /// Its shared state: count the request, record a failure.
    pub state: UpstreamState,
    /// The request head to send it, whole.
    pub head: Vec<u8>,
    /// How the body follows the head.
    pub framing: Framing,
    /// Does the request ask for a tunnel (`Upgrade`)?
    pub tunnel: bool,
    /// Counts the request in flight (least-conn) until dropped.
    pub in_flight: InFlightGuard,
}

/// The methods a failed try may be repeated for on the next upstream
/// (RFC 9110's idempotent methods); never a `POST` or a `PATCH`.
pub fn is_idempotent(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"].contains(&method)
}

/// Does the request ask to switch protocols (`Connection: upgrade` and an
/// `Upgrade` field)?
pub fn wants_upgrade(request: &Request<'_>) -> bool {
    request.header("upgrade").is_some()
        && request
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

impl Proxy {
    /// Does a route take this request's path?
    pub fn takes(&self, request: &Request<'_>) -> bool {
        let table = &self.shared.table;
        let path = request.path();
        table.find(path).is_some() || table.needs_slash(path).is_some()
    }

    /// The route of a path, by index.
    pub(crate) fn route_index(&self, path: &str) -> Option<usize> {
        let table = &self.shared.table;
        let found = table.find(path)?;
        table.routes().iter().position(|r| std::ptr::eq(r, found))
    }

    /// The plan for `request` from a peer over TLS or not, whose earlier
    /// tries went to the upstreams `tried` (empty for the first try).
    pub fn plan(&mut self, request: &Request<'_>, tls: bool, tried: &[usize]) -> Plan {
        let path = request.path();
        let Some(r) = self.route_index(path) else {
            if let Some(route) = self.shared.table.needs_slash(path) {
                let mut location = route.prefix.clone();
                if let Some(q) = request.query() {
                    location.push('?');
                    location.push_str(q);
                }
                return Plan::Answer(Response::new(301).header("Location", location));
            }
            return Plan::NotMine;
        };
        let route: &ProxyRoute = &self.shared.table.routes()[r];
        let states = self.shared.state.route(r);
        let now = now_ms();
        let peer = request.peer_addr().ip().to_canonical();
        let key: Vec<u8> = match &route.balance {
            crate::Balance::Hash(HashKey::ClientAddr) => match peer {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            },
            crate::Balance::Hash(HashKey::Header(name)) => {
                request.header(name).unwrap_or_default().to_vec()
            }
            _ => Vec::new(),
        };
        let eligible =
            |i: usize| !tried.contains(&i) && states.get(i).is_some_and(|s| s.is_up(now));
        let Some(u) = self.balancers[r].pick(&key, eligible) else {
            mpm_core::log_error!(
                "proxy: no live upstreams for {} {} (route {})",
                request.method(),
                path,
                route.prefix
            );
            return Plan::Answer(Response::error(502));
        };
        let spec = &route.upstreams[u];
        let target = map_target(route, &spec.url, path, request.query());
        let framing = framing(request);
        let tunnel = wants_upgrade(request);
        let client = ClientInfo {
            addr: peer,
            tls,
            host: request.header_str("host"),
        };
        let head = request_head(
            route,
            &spec.url,
            request.method(),
            &target,
            request.headers(),
            &client,
            framing,
            tunnel,
        );
        Plan::Send(Exchange {
            route: r,
            upstream: u,
            url: spec.url.clone(),
            state: states[u],
            head,
            framing,
            tunnel,
            in_flight: self.balancers[r].in_flight().start(u),
        })
    }

    /// After a try on the upstreams `tried` failed before any byte of an
    /// answer (a connect error, a close), may the request go to another?
    /// nginx's rules: the route's `next_upstream` on, an idempotent method,
    /// and fewer tries than `next_upstream_tries` (0: as many as there are
    /// upstreams).
    pub fn may_retry(&self, route: usize, method: &str, tried: &[usize]) -> bool {
        let Some(r) = self.shared.table.routes().get(route) else {
            return false;
        };
        let limit = match r.next_upstream_tries {
            0 => r.upstreams.len(),
            n => n as usize,
        };
        r.next_upstream && is_idempotent(method) && tried.len() < limit
    }
}

/// How the request's body is framed to the upstream: the length of a body
/// read whole, the announced length of a streamed one (else chunked), none
/// for a request that had no body framing at all.
fn framing(request: &Request<'_>) -> Framing {
    if request.is_streamed() {
        return match request.content_length() {
            Some(n) => Framing::Length(n),
            None => Framing::Chunked,
        };
    }
    let framed =
        request.header("content-length").is_some() || request.header("transfer-encoding").is_some();
    if framed || !request.body().is_empty() {
        Framing::Length(request.body().len() as u64)
    } else {
        Framing::None
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mpm_http::Version;

    use super::*;
    use crate::{PoolSettings, ProxyState, ReverseProxy, RouteTable, Slots};

    fn proxy(flags: &[&str]) -> Proxy {
        let routes: Vec<ProxyRoute> = flags
            .iter()
            .map(|f| ProxyRoute::from_flag(f).unwrap())
            .collect();
        let table = RouteTable::new(routes);
        let state = ProxyState::with_slots(&table, &Slots::new(16).unwrap()).unwrap();
        ReverseProxy::with_state(table, state, PoolSettings::default()).worker()
    }

    fn send(plan: Plan) -> Exchange {
        match plan {
            Plan::Send(x) => x,
            other => panic!("not sent: {other:?}"),
        }
    }

    #[test]
    fn a_request_under_a_prefix_becomes_a_head_for_its_upstream() {
        let mut p = proxy(&["/api/=http://10.0.0.2:8080/v1/", "/=http://10.0.0.9"]);
        let fields = [("Host", "example.com"), ("Accept", "*/*")];
        let req = Request::for_test("GET", "/api/items?x=1", Version::Http11, &fields, b"")
            .with_peer("192.0.2.7:5555".parse().unwrap());
        let x = send(p.plan(&req, true, &[]));
        let head = String::from_utf8(x.head.clone()).unwrap();
        assert!(
            head.starts_with("GET /v1/items?x=1 HTTP/1.1\r\nHost: 10.0.0.2:8080\r\n"),
            "{head}"
        );
        assert!(
            head.contains("X-Forwarded-For: 192.0.2.7\r\n")
                && head.contains("X-Forwarded-Proto: https\r\n")
        );
        assert_eq!(
            (x.route, x.upstream, x.framing, x.tunnel),
            (0, 0, Framing::None, false)
        );
        assert_eq!(
            p.balancers[0].in_flight().get(0),
            1,
            "counted while in flight"
        );
        drop(x);
        assert_eq!(p.balancers[0].in_flight().get(0), 0);
    }

    #[test]
    fn a_body_is_framed_by_its_length() {
        let mut p = proxy(&["/=http://u"]);
        let fields = [("Host", "h"), ("Transfer-Encoding", "chunked")];
        let req = Request::for_test("POST", "/f", Version::Http11, &fields, b"hello");
        let x = send(p.plan(&req, false, &[]));
        assert_eq!(x.framing, Framing::Length(5));
        let head = String::from_utf8(x.head).unwrap();
        assert!(
            head.contains("Content-Length: 5\r\n") && !head.contains("chunked"),
            "{head}"
        );
    }

    #[test]
    fn other_paths_are_not_the_proxys_and_a_missing_slash_is_redirected() {
        let mut p = proxy(&["/api/=http://u"]);
        let req = Request::for_test("GET", "/index.html", Version::Http11, &[("Host", "h")], b"");
        assert!(!p.takes(&req) && matches!(p.plan(&req, false, &[]), Plan::NotMine));
        let req = Request::for_test("GET", "/api?q=1", Version::Http11, &[("Host", "h")], b"");
        assert!(p.takes(&req));
        let Plan::Answer(r) = p.plan(&req, false, &[]) else {
            panic!("no redirect")
        };
        assert_eq!(
            (r.status(), r.header_value("location")),
            (301, Some("/api/?q=1"))
        );
    }

    #[test]
    fn retries_skip_tried_upstreams_and_end_in_502_when_none_is_left() {
        let mut p = proxy(&["/=http://a,http://b"]);
        let req = Request::for_test("GET", "/", Version::Http11, &[("Host", "h")], b"");
        let first = send(p.plan(&req, false, &[])).upstream;
        let second = send(p.plan(&req, false, &[first])).upstream;
        assert_ne!(first, second);
        let errors = mpm_core::error_log::expect("no live upstreams");
        let Plan::Answer(r) = p.plan(&req, false, &[first, second]) else {
            panic!("sent")
        };
        assert_eq!(r.status(), 502);
        assert_eq!(errors.count(), 1);
    }

    #[test]
    fn an_upstream_marked_down_is_skipped() {
        let mut p = proxy(&["/=http://a,http://b"]);
        p.shared.state.route(0)[0].record_failure(now_ms());
        let req = Request::for_test("GET", "/", Version::Http11, &[("Host", "h")], b"");
        for _ in 0..4 {
            assert_eq!(send(p.plan(&req, false, &[])).upstream, 1);
        }
    }

    #[test]
    fn only_idempotent_methods_are_retried_within_the_tries() {
        let mut p = proxy(&["/=http://a,http://b,http://c"]);
        assert!(p.may_retry(0, "GET", &[0]));
        assert!(p.may_retry(0, "PUT", &[0, 1]));
        assert!(!p.may_retry(0, "GET", &[0, 1, 2]), "every upstream tried");
        assert!(!p.may_retry(0, "POST", &[0]));
        assert!(!p.may_retry(0, "PATCH", &[0]));
        let mut routes = p.shared.table.routes().to_vec();
        routes[0].next_upstream_tries = 2;
        routes[0].connect_timeout = Duration::from_secs(1);
        let t = RouteTable::new(routes.clone());
        let s = ProxyState::with_slots(&t, &Slots::new(4).unwrap()).unwrap();
        p = ReverseProxy::with_state(t, s, PoolSettings::default()).worker();
        assert!(p.may_retry(0, "GET", &[0]) && !p.may_retry(0, "GET", &[0, 1]));
        routes[0].next_upstream = false;
        let t = RouteTable::new(routes);
        let s = ProxyState::with_slots(&t, &Slots::new(4).unwrap()).unwrap();
        p = ReverseProxy::with_state(t, s, PoolSettings::default()).worker();
        assert!(!p.may_retry(0, "GET", &[0]));
    }

    #[test]
    fn a_header_hash_sends_one_user_to_one_upstream() {
        let mut p = proxy(&["/=http://a,http://b,http://c"]);
        let mut routes = p.shared.table.routes().to_vec();
        routes[0].balance = "hash:header:X-User".parse().unwrap();
        let t = RouteTable::new(routes);
        let s = ProxyState::with_slots(&t, &Slots::new(4).unwrap()).unwrap();
        p = ReverseProxy::with_state(t, s, PoolSettings::default()).worker();
        let fields = [("Host", "h"), ("X-User", "alice")];
        let req = Request::for_test("GET", "/", Version::Http11, &fields, b"");
        let first = send(p.plan(&req, false, &[])).upstream;
        for _ in 0..10 {
            assert_eq!(send(p.plan(&req, false, &[])).upstream, first);
        }
    }

    #[test]
    fn an_upgrade_request_is_a_tunnel() {
        let mut p = proxy(&["/=http://u"]);
        let fields = [
            ("Host", "h"),
            ("Connection", "keep-alive, Upgrade"),
            ("Upgrade", "websocket"),
        ];
        let req = Request::for_test("GET", "/ws", Version::Http11, &fields, b"");
        let x = send(p.plan(&req, false, &[]));
        assert!(x.tunnel);
        assert!(String::from_utf8(x.head)
            .unwrap()
            .contains("Upgrade: websocket\r\n"));
    }
}
