//! Routing by method and path, with path parameters, on `matchit` (the
//! matcher axum uses): a [`Routes`] table built once, and a [`Router`] per
//! worker that pairs it with that worker's state and is an
//! [`HttpHandler`].

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::handler::HttpHandler;
use crate::request::Request;
use crate::response::{Body, Response};

/// What a route's handler may return: a [`Response`], or anything that
/// makes one. `Result<T, E>` with both sides `IntoResponse` lets a handler
/// use `?` on what answers for itself (a [`Rejection`], a `Response`).
pub trait IntoResponse {
    /// Make the response.
    fn into_response(self) -> Response;
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl IntoResponse for &'static str {
    fn into_response(self) -> Response {
        (200, self).into_response()
    }
}

impl IntoResponse for String {
    fn into_response(self) -> Response {
        (200, self).into_response()
    }
}

/// A status and a body (text for strings: `text/plain; charset=utf-8`).
impl<B: Into<Body>> IntoResponse for (u16, B) {
    fn into_response(self) -> Response {
        Response::new(self.0)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(self.1)
    }
}

impl<T: IntoResponse, E: IntoResponse> IntoResponse for Result<T, E> {
    fn into_response(self) -> Response {
        match self {
            Ok(r) => r.into_response(),
            Err(e) => e.into_response(),
        }
    }
}

/// A request refused by a helper (bad JSON, a wrong content type, a missing
/// parameter): a status and a one-line reason, answered as plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The status answered.
    pub status: u16,
    /// Why, for the client.
    pub message: String,
}

impl Rejection {
    /// A rejection with this status and reason.
    pub fn new(status: u16, message: impl Into<String>) -> Rejection {
        Rejection {
            status,
            message: message.into(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Rejection {}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut text = self.message.replace(['\r', '\n'], " ");
        text.push('\n');
        (self.status, text).into_response()
    }
}

/// A route's handler, boxed: the worker's state and the request (with its
/// path parameters) in, a response out.
type Handler<S> = Arc<dyn Fn(&mut S, &Request<'_>) -> Response + Send + Sync>;

/// One method's handler on a path.
struct Endpoint<S> {
    method: Cow<'static, str>,
    handler: Handler<S>,
    streamed: bool,
    inline: bool,
}

impl<S> Clone for Endpoint<S> {
    fn clone(&self) -> Self {
        Endpoint {
            method: self.method.clone(),
            handler: Arc::clone(&self.handler),
            streamed: self.streamed,
            inline: self.inline,
        }
    }
}

/// Every method registered on one path pattern.
struct PathRoutes<S> {
    pattern: String,
    endpoints: Vec<Endpoint<S>>,
}

impl<S> Clone for PathRoutes<S> {
    fn clone(&self) -> Self {
        PathRoutes {
            pattern: self.pattern.clone(),
            endpoints: self.endpoints.clone(),
        }
    }
}

/// A whole handler that serves every path under a prefix: the prototype
/// every worker's router clones its own from.
struct Mount {
    prefix: String,
    make: Arc<dyn Fn() -> Box<dyn HttpHandler + Send> + Send + Sync>,
}

impl Clone for Mount {
    fn clone(&self) -> Self {
        Mount {
            prefix: self.prefix.clone(),
            make: Arc::clone(&self.make),
        }
    }
}

impl Mount {
    /// Does `path` lie under this prefix, at a `/` boundary?
    fn covers(&self, path: &str) -> bool {
        let p = self.prefix.as_str();
        path.starts_with(p)
            && (p.ends_with('/') || path.len() == p.len() || path.as_bytes()[p.len()] == b'/')
    }
}

struct Table<S> {
    matcher: matchit::Router<usize>,
    paths: Vec<PathRoutes<S>>,
    /// Longest prefix first, so that the first that covers a path wins.
    mounts: Vec<Mount>,
    fallback: Option<Handler<S>>,
    /// The path and index of the endpoint added last, for the modifiers.
    last: Option<(usize, usize)>,
}

impl<S> Clone for Table<S> {
    fn clone(&self) -> Self {
        Table {
            matcher: self.matcher.clone(),
            paths: self.paths.clone(),
            mounts: self.mounts.clone(),
            fallback: self.fallback.clone(),
            last: self.last,
        }
    }
}

/// A routing table: methods and path patterns, each with its handler.
/// Built once (before `mpm::main`, or in `App::check`) and shared by every
/// worker; [`with_state`](Self::with_state) makes a worker's [`Router`].
///
/// Patterns are `matchit`'s: literal segments, `{name}` for one segment
/// and `{*name}` for the rest of the path (`/files/{*path}`). Parameters are
/// matched on the path as sent and then percent-decoded (so `%2F` in a
/// parameter is a `/` in its value, never a segment break); a value that is
/// not UTF-8 once decoded is answered 400.
///
/// What the router answers itself: 404 for a path no route has (or the
/// [`fallback`](Self::fallback)), 405 with `Allow` for a method a path does
/// not have (501 for one HTTP does not define and no route takes: methods
/// are case-sensitive), `HEAD` wherever `GET` is registered (the layer drops
/// the body), and `OPTIONS` with 204 and `Allow` unless a route takes it.
///
/// ```
/// use mpm_http::{Request, Response, Routes, Version, HttpHandler};
///
/// #[derive(Default)]
/// struct Counter { hits: u64 }
///
/// fn hello(c: &mut Counter, req: &Request<'_>) -> String {
///     c.hits += 1;
///     format!("hello {} (hit {})\n", req.param("name").unwrap_or("?"), c.hits)
/// }
///
/// let routes = Routes::new()
///     .get("/hello/{name}", hello)
///     .delete("/hello/{name}", |_: &mut Counter, _: &Request<'_>| Response::new(204));
/// let mut router = routes.with_state(Counter::default()); // one per worker
///
/// let get = |router: &mut mpm_http::Router<Counter>, method, target| {
///     router.handle(&Request::for_test(method, target, Version::Http11, &[], b""))
/// };
/// let r = get(&mut router, "GET", "/hello/caf%C3%A9");
/// assert_eq!(r.status(), 200);
/// assert_eq!(r.body_ref().len(), Some("hello café (hit 1)\n".len() as u64));
/// assert_eq!(get(&mut router, "GET", "/nope").status(), 404);
/// let r = get(&mut router, "PUT", "/hello/x");
/// assert_eq!((r.status(), r.header_value("allow")), (405, Some("GET, HEAD, DELETE, OPTIONS")));
/// ```
pub struct Routes<S> {
    table: Arc<Table<S>>,
}

impl<S> Clone for Routes<S> {
    fn clone(&self) -> Self {
        Routes {
            table: Arc::clone(&self.table),
        }
    }
}

impl<S> fmt::Debug for Routes<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for p in &self.table.paths {
            for e in &p.endpoints {
                list.entry(&format_args!("{} {}", e.method, p.pattern));
            }
        }
        for m in &self.table.mounts {
            list.entry(&format_args!("* {}", m.prefix));
        }
        list.finish()
    }
}

impl<S> Default for Routes<S> {
    fn default() -> Self {
        Routes::new()
    }
}

impl<S> Routes<S> {
    /// An empty table: every request is answered 404.
    pub fn new() -> Routes<S> {
        Routes {
            table: Arc::new(Table {
                matcher: matchit::Router::new(),
                paths: Vec::new(),
                mounts: Vec::new(),
                fallback: None,
                last: None,
            }),
        }
    }

    fn table(&mut self) -> &mut Table<S> {
        // Only while building: a table already shared with routers is
        // copied first (routes are few; this happens at start-up).
        if Arc::get_mut(&mut self.table).is_none() {
            self.table = Arc::new((*self.table).clone());
        }
        Arc::get_mut(&mut self.table).expect("just made unique")
    }

    /// Route `method` on `pattern` to `handler`.
    ///
    /// # Panics
    ///
    /// On a pattern `matchit` refuses (a conflict with another pattern,
    /// malformed braces) or a method registered twice on one pattern: a
    /// routing table is the program's own, and a mistake in it is found the
    /// first time it is built, at start-up, as in axum.
    pub fn route<F, R>(mut self, method: &str, pattern: &str, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        let method: Cow<'static, str> = Cow::Owned(method.to_ascii_uppercase());
        let table = self.table();
        let path = match table.paths.iter().position(|p| p.pattern == pattern) {
            Some(i) => i,
            None => {
                let i = table.paths.len();
                if let Err(e) = table.matcher.insert(pattern, i) {
                    panic!("route {method} {pattern}: {e}");
                }
                table.paths.push(PathRoutes {
                    pattern: pattern.to_string(),
                    endpoints: Vec::new(),
                });
                i
            }
        };
        let endpoints = &mut table.paths[path].endpoints;
        assert!(
            !endpoints.iter().any(|e| e.method == method),
            "route {method} {pattern} is registered twice"
        );
        endpoints.push(Endpoint {
            method,
            handler: Arc::new(move |state: &mut S, req: &Request<'_>| {
                handler(state, req).into_response()
            }),
            streamed: false,
            inline: false,
        });
        table.last = Some((path, endpoints.len() - 1));
        self
    }

    /// `GET` (and so `HEAD`) on `pattern`.
    pub fn get<F, R>(self, pattern: &str, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("GET", pattern, handler)
    }

    /// `POST` on `pattern`.
    pub fn post<F, R>(self, pattern: &str, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("POST", pattern, handler)
    }

    /// `PUT` on `pattern`.
    pub fn put<F, R>(self, pattern: &str, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("PUT", pattern, handler)
    }

    /// `DELETE` on `pattern`.
    pub fn delete<F, R>(self, pattern: &str, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("DELETE", pattern, handler)
    }

    /// `PATCH` on `pattern`.
    pub fn patch<F, R>(self, pattern: &str, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.route("PATCH", pattern, handler)
    }

    fn last(&mut self, what: &str) -> &mut Endpoint<S> {
        let table = self.table();
        let Some((p, e)) = table.last else {
            panic!("{what}() applies to the route added before it, and there is none");
        };
        &mut table.paths[p].endpoints[e]
    }

    /// The route added last reads its request body as it arrives, with
    /// [`Request::body_reader`] (see [`HttpHandler::streams_body`]).
    pub fn streamed(mut self) -> Routes<S> {
        self.last("streamed").streamed = true;
        self
    }

    /// The route added last never blocks (no disk, no network, no lock held
    /// long): the event MPM may answer it on its loop (see
    /// [`HttpHandler::answers_without_blocking`]).
    pub fn inline(mut self) -> Routes<S> {
        self.last("inline").inline = true;
        self
    }

    /// Serve every path under `prefix`, whatever the method, with
    /// `handler`: a whole [`HttpHandler`] (a reverse proxy, a site, another
    /// router), asked too whether it
    /// [`answers_without_blocking`](HttpHandler::answers_without_blocking)
    /// and [`streams_body`](HttpHandler::streams_body) for its requests.
    ///
    /// A prefix covers the paths that continue it at a `/`: `/api` covers
    /// `/api` and `/api/users`, not `/apix`; `/api/` covers `/api/` and
    /// below; `/` covers everything. The longest mounted prefix that covers
    /// a path wins, and a route declared with [`route`](Self::route)
    /// (`get`, `post`, ...) wins over every mount for the paths its pattern
    /// matches (with its 405 for a method it lacks). The handler sees the
    /// request as it came, its path whole.
    ///
    /// Each worker's [`Router`] has its own clone of `handler` (made by
    /// [`with_state`](Self::with_state)), so it is used through `&mut`
    /// without a lock, as a handler built per worker is: share what the
    /// workers must share (a connection pool, counters) inside it, behind
    /// an `Arc`.
    ///
    /// ```
    /// use mpm_http::{HttpHandler, Request, Response, Routes, Version};
    ///
    /// #[derive(Clone)]
    /// struct Api;
    /// impl HttpHandler for Api {
    ///     fn handle(&mut self, req: &Request<'_>) -> Response {
    ///         Response::new(200).body(format!("api saw {}", req.path()))
    ///     }
    /// }
    ///
    /// let routes = Routes::new()
    ///     .get("/api/health", |_: &mut (), _: &Request<'_>| "ok")
    ///     .mount("/api", Api);
    /// let mut router = routes.with_state(());
    /// let mut call = |target| {
    ///     let r = router.handle(&Request::for_test("GET", target, Version::Http11, &[], b""));
    ///     (r.status(), r.body_ref().len())
    /// };
    /// assert_eq!(call("/api/users/7"), (200, Some("api saw /api/users/7".len() as u64)));
    /// assert_eq!(call("/api/health"), (200, Some(2))); // the route wins
    /// assert_eq!(call("/apix").0, 404); // not under /api
    /// ```
    ///
    /// # Panics
    ///
    /// On a prefix that does not start with `/`, or one mounted twice.
    pub fn mount<H>(mut self, prefix: &str, handler: H) -> Routes<S>
    where
        H: HttpHandler + Clone + Send + 'static,
    {
        assert!(
            prefix.starts_with('/'),
            "mount {prefix:?}: a prefix is a path, starting with /"
        );
        let table = self.table();
        assert!(
            !table.mounts.iter().any(|m| m.prefix == prefix),
            "mount {prefix} is registered twice"
        );
        // Locked only when a worker's router is made, at start-up: a
        // handler need not be Sync to be shared as a prototype.
        let prototype = parking_lot::Mutex::new(handler);
        table.mounts.push(Mount {
            prefix: prefix.to_string(),
            make: Arc::new(move || Box::new(prototype.lock().clone())),
        });
        table
            .mounts
            .sort_by_key(|m| std::cmp::Reverse(m.prefix.len()));
        self
    }

    /// Answer requests no route matches with `handler` instead of 404.
    pub fn fallback<F, R>(mut self, handler: F) -> Routes<S>
    where
        F: Fn(&mut S, &Request<'_>) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.table().fallback = Some(Arc::new(move |state: &mut S, req: &Request<'_>| {
            handler(state, req).into_response()
        }));
        self
    }

    /// A worker's router: this table with that worker's state.
    pub fn with_state(&self, state: S) -> Router<S> {
        Router {
            routes: self.clone(),
            mounted: self.table.mounts.iter().map(|m| (m.make)()).collect(),
            state,
        }
    }
}

/// What a request found in the table.
enum Found<'t, 'p, S> {
    Endpoint(&'t Endpoint<S>, matchit::Params<'t, 'p>),
    /// The path exists, not with this method: 405 with these.
    Methods(&'t [Endpoint<S>]),
    /// `OPTIONS` on a path that does not route it.
    Options(&'t [Endpoint<S>]),
    Nothing,
}

impl<S> Table<S> {
    /// The mount that serves `path` (the longest prefix covering it).
    fn mount_for(&self, path: &str) -> Option<usize> {
        self.mounts.iter().position(|m| m.covers(path))
    }

    /// Is `method` one HTTP defines, or one some route takes?
    fn implements(&self, method: &str) -> bool {
        crate::response::is_known_method(method)
            || self
                .paths
                .iter()
                .any(|p| p.endpoints.iter().any(|e| e.method == method))
    }

    fn find<'t, 'p>(&'t self, method: &str, path: &'p str) -> Found<'t, 'p, S> {
        let Ok(m) = self.matcher.at(path) else {
            return Found::Nothing;
        };
        let endpoints = &self.paths[*m.value].endpoints;
        let pick = |name: &str| endpoints.iter().find(|e| e.method == name);
        let hit = pick(method).or_else(|| match method {
            "HEAD" => pick("GET"),
            _ => None,
        });
        match hit {
            Some(e) => Found::Endpoint(e, m.params),
            None if method == "OPTIONS" => Found::Options(endpoints),
            None => Found::Methods(endpoints),
        }
    }
}

/// The `Allow` field for a path's endpoints.
fn allow<S>(endpoints: &[Endpoint<S>]) -> String {
    let mut methods: Vec<&str> = Vec::new();
    for e in endpoints {
        methods.push(&e.method);
        if e.method == "GET" && !endpoints.iter().any(|o| o.method == "HEAD") {
            methods.push("HEAD");
        }
    }
    if !methods.contains(&"OPTIONS") {
        methods.push("OPTIONS");
    }
    methods.join(", ")
}

/// One worker's router: a shared [`Routes`] table and this worker's state
/// `S` (a connection, a cache, counters: used through `&mut`, without
/// locks). It is an [`HttpHandler`], so wrappers compose with it.
pub struct Router<S> {
    routes: Routes<S>,
    /// This worker's clones of the mounted handlers, in the table's order.
    mounted: Vec<Box<dyn HttpHandler + Send>>,
    state: S,
}

impl<S: fmt::Debug> fmt::Debug for Router<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.routes)
            .field("state", &self.state)
            .finish()
    }
}

impl<S> Router<S> {
    /// This worker's state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// This worker's state, to change.
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }
}

impl<S> HttpHandler for Router<S> {
    fn handle(&mut self, request: &Request<'_>) -> Response {
        let table = &*self.routes.table;
        match table.find(request.method(), request.path()) {
            Found::Endpoint(endpoint, params) => {
                let mut decoded: SmallVec<[(&str, Cow<'_, str>); 4]> = SmallVec::new();
                for (name, raw) in params.iter() {
                    match percent_encoding::percent_decode_str(raw).decode_utf8() {
                        Ok(value) => decoded.push((name, value)),
                        Err(_) => {
                            return Rejection::new(
                                400,
                                format!("path parameter `{name}` is not UTF-8 once decoded"),
                            )
                            .into_response()
                        }
                    }
                }
                (endpoint.handler)(&mut self.state, &request.with_params(&decoded))
            }
            // 501 for a method HTTP does not define and no route takes
            // (RFC 9110 §9.1: not implemented at all), else 405.
            Found::Methods(_) if !table.implements(request.method()) => Response::error(501),
            Found::Methods(endpoints) => Response::error(405).header("Allow", allow(endpoints)),
            Found::Options(endpoints) => Response::new(204).header("Allow", allow(endpoints)),
            Found::Nothing => match table.mount_for(request.path()) {
                Some(i) => match self.mounted.get_mut(i) {
                    Some(mounted) => mounted.handle(request),
                    None => Response::error(500),
                },
                None => self.fallback(request),
            },
        }
    }

    fn answers_without_blocking(&self, request: &Request<'_>) -> bool {
        let table = &*self.routes.table;
        match table.find(request.method(), request.path()) {
            Found::Endpoint(e, _) => e.inline,
            // The router's own answers never block; a fallback might.
            Found::Methods(_) | Found::Options(_) => true,
            Found::Nothing => match table.mount_for(request.path()) {
                Some(i) => self
                    .mounted
                    .get(i)
                    .is_some_and(|m| m.answers_without_blocking(request)),
                None => table.fallback.is_none(),
            },
        }
    }

    fn streams_body(&self, request: &Request<'_>) -> bool {
        let table = &*self.routes.table;
        match table.find(request.method(), request.path()) {
            Found::Endpoint(e, _) => e.streamed,
            Found::Nothing => table
                .mount_for(request.path())
                .and_then(|i| self.mounted.get(i))
                .is_some_and(|m| m.streams_body(request)),
            _ => false,
        }
    }

    fn awaits_body(&self, request: &Request<'_>) -> bool {
        // A route's own endpoints read bodies whole or streamed; a mounted
        // handler (a proxy) may await them.
        let table = &*self.routes.table;
        match table.find(request.method(), request.path()) {
            Found::Nothing => table
                .mount_for(request.path())
                .and_then(|i| self.mounted.get(i))
                .is_some_and(|m| m.awaits_body(request)),
            _ => false,
        }
    }
}

impl<S> Router<S> {
    /// A path no route nor mount serves: the fallback, else 404.
    fn fallback(&mut self, request: &Request<'_>) -> Response {
        match &self.routes.table.fallback {
            Some(fallback) => fallback(&mut self.state, request),
            None => Response::error(404),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Version;

    fn call(router: &mut Router<Vec<String>>, method: &str, target: &str) -> Response {
        router.handle(&Request::for_test(
            method,
            target,
            Version::Http11,
            &[],
            b"",
        ))
    }

    fn routes() -> Routes<Vec<String>> {
        Routes::new()
            .get("/kv/{key}", |seen: &mut Vec<String>, req: &Request<'_>| {
                seen.push(req.param("key").unwrap_or_default().to_string());
                Response::new(200)
            })
            .put("/kv/{key}", |_: &mut Vec<String>, _: &Request<'_>| {
                Response::new(201)
            })
            .streamed()
            .get(
                "/files/{*path}",
                |seen: &mut Vec<String>, req: &Request<'_>| {
                    seen.push(req.param("path").unwrap_or_default().to_string());
                    "ok"
                },
            )
            .inline()
    }

    #[test]
    fn parameters_are_percent_decoded_after_matching() {
        let mut r = routes().with_state(Vec::new());
        assert_eq!(call(&mut r, "GET", "/kv/a%2Fb%20c").status(), 200);
        assert_eq!(call(&mut r, "GET", "/files/x/y%2Ez").status(), 200);
        assert_eq!(r.state(), &["a/b c", "x/y.z"]);
        // Decoded, not UTF-8: refused rather than mangled.
        assert_eq!(call(&mut r, "GET", "/kv/%FF").status(), 400);
    }

    #[test]
    fn unknown_paths_are_404_and_unknown_methods_405_with_allow() {
        let mut r = routes().with_state(Vec::new());
        assert_eq!(call(&mut r, "GET", "/kv").status(), 404);
        assert_eq!(call(&mut r, "GET", "/kv/a/b").status(), 404);
        let res = call(&mut r, "DELETE", "/kv/a");
        assert_eq!(res.status(), 405);
        assert_eq!(res.header_value("Allow"), Some("GET, HEAD, PUT, OPTIONS"));
        assert_eq!(call(&mut r, "HEAD", "/kv/a").status(), 200);
        // A method HTTP does not define (methods are case-sensitive): 501.
        for unknown in ["get", "BREW"] {
            let res = call(&mut r, unknown, "/kv/a");
            assert_eq!(
                (res.status(), res.header_value("Allow")),
                (501, None),
                "{unknown}"
            );
        }
        let res = call(&mut r, "OPTIONS", "/kv/a");
        assert_eq!(res.status(), 204);
        assert_eq!(res.header_value("Allow"), Some("GET, HEAD, PUT, OPTIONS"));
        let mut r = routes()
            .fallback(|_: &mut Vec<String>, _: &Request<'_>| (418, "teapot"))
            .with_state(Vec::new());
        assert_eq!(call(&mut r, "GET", "/elsewhere").status(), 418);
    }

    #[test]
    fn streamed_and_inline_are_per_route() {
        let r = routes().with_state(Vec::new());
        let req = |m, t| Request::for_test(m, t, Version::Http11, &[], b"");
        assert!(r.streams_body(&req("PUT", "/kv/a")));
        assert!(!r.streams_body(&req("GET", "/kv/a")));
        assert!(r.answers_without_blocking(&req("GET", "/files/a")));
        assert!(!r.answers_without_blocking(&req("GET", "/kv/a")));
    }

    /// A mounted handler that names itself and says what it is asked.
    #[derive(Clone)]
    struct Named(&'static str);

    impl HttpHandler for Named {
        fn handle(&mut self, req: &Request<'_>) -> Response {
            Response::new(200)
                .header("X-Mount", self.0)
                .body(req.path().to_string())
        }
        fn answers_without_blocking(&self, _: &Request<'_>) -> bool {
            self.0 == "api"
        }
        fn streams_body(&self, req: &Request<'_>) -> bool {
            self.0 == "api" && req.method() == "POST"
        }
    }

    fn mounted() -> Router<Vec<String>> {
        routes()
            .get("/api/health", |_: &mut Vec<String>, _: &Request<'_>| "ok")
            .mount("/api", Named("api"))
            .mount("/api/v2/", Named("v2"))
            .mount("/kv", Named("kv"))
            .with_state(Vec::new())
    }

    fn mount_of(r: &mut Router<Vec<String>>, method: &str, target: &str) -> Option<String> {
        call(r, method, target)
            .header_value("x-mount")
            .map(str::to_string)
    }

    #[test]
    fn a_mount_serves_its_prefix_at_a_slash_boundary_and_the_longest_wins() {
        let mut r = mounted();
        for (target, mount) in [
            ("/api", Some("api")),
            ("/api/", Some("api")),
            ("/api/users/7?x=1", Some("api")),
            ("/apix", None),
            ("/api/v2", Some("api")), // "/api/v2/" covers what is below it
            ("/api/v2/", Some("v2")),
            ("/api/v2/users", Some("v2")),
        ] {
            assert_eq!(
                mount_of(&mut r, "GET", target).as_deref(),
                mount,
                "{target}"
            );
        }
        assert_eq!(call(&mut r, "GET", "/apix").status(), 404);
        // Every method, the path whole.
        let res = call(&mut r, "DELETE", "/api/users/7");
        assert_eq!(res.body_ref().len(), Some("/api/users/7".len() as u64));
    }

    #[test]
    fn declared_routes_win_over_mounts_for_the_paths_they_match() {
        let mut r = mounted();
        // A route on the exact path: its answer, and its 405.
        assert_eq!(call(&mut r, "GET", "/api/health").status(), 200);
        assert_eq!(mount_of(&mut r, "GET", "/api/health"), None);
        assert_eq!(call(&mut r, "POST", "/api/health").status(), 405);
        // A pattern route under a mount's prefix: the route.
        assert_eq!(mount_of(&mut r, "GET", "/kv/a"), None);
        assert_eq!(r.state().as_slice(), ["a"]);
        // Paths the patterns do not match: the mount.
        assert_eq!(mount_of(&mut r, "GET", "/kv/a/b").as_deref(), Some("kv"));
        assert_eq!(mount_of(&mut r, "GET", "/kv").as_deref(), Some("kv"));
    }

    #[test]
    fn a_mounted_handler_is_asked_whether_it_blocks_or_streams() {
        let r = mounted();
        let req = |m, t| Request::for_test(m, t, Version::Http11, &[], b"");
        assert!(r.answers_without_blocking(&req("GET", "/api/x")));
        assert!(!r.answers_without_blocking(&req("GET", "/api/v2/x")));
        assert!(r.streams_body(&req("POST", "/api/x")));
        assert!(!r.streams_body(&req("POST", "/api/v2/x")));
        // The route on /api/health is not the mount's to answer for.
        assert!(!r.answers_without_blocking(&req("GET", "/api/health")));
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_prefix_mounted_twice_is_refused_at_once() {
        let _ = routes().mount("/a", Named("a")).mount("/a", Named("b"));
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_route_registered_twice_is_refused_at_once() {
        let _ = routes().get("/kv/{key}", |_: &mut Vec<String>, _: &Request<'_>| "again");
    }
}
