//! # mpm-proxy
//!
//! The reverse proxy: an application on [`mpm_http`], as the static site
//! (`mpm-site`) is, which the HTTP layer knows nothing of. Requests whose
//! path falls under a route's prefix go to one of its upstreams; what
//! nginx users write as `location` + `proxy_pass` + `upstream` is one
//! [`ProxyRoute`] here (`--proxy PREFIX=URL[,URL...]`, or a `[[proxy]]`
//! table of the settings file).
//!
//! * [`ProxyRoute`] and its settings (`config.rs`): [`UpstreamSpec`] with
//!   nginx's `weight`, `max_fails`, `fail_timeout` and `max_conns`; [`Balance`],
//!   [`Buffering`], [`ActiveHealth`], [`ForwardedStyle`], [`HostMode`];
//!   the flag form ([`ProxyRoute::from_flag`]) and every bound
//!   ([`check_routes`]). [`Cidr`] (`cidr.rs`): the trusted proxies.
//! * [`one_upstream_per_address`] (`addresses.rs`): a host name that
//!   resolves to several addresses becomes an upstream per address, as
//!   nginx makes each a server ([`system_resolver`]).
//! * [`RouteTable`] and [`map_target`] ([`map_target_into`]) (`path.rs`): which route a path
//!   belongs to (longest prefix, at segment boundaries, after resolving dot
//!   segments) and the path the upstream is sent, as nginx's `proxy_pass`.
//! * [`Balancer`] (`balance.rs`): smooth weighted round-robin, least
//!   connections ([`InFlight`]), a consistent hash of the client's address
//!   or a header.
//! * [`ProxyState`] (`shared_state.rs`): each upstream's health and
//!   counters in memory every process shares, kept across reloads.
//! * Health (`health.rs`): passive ([`UpstreamState::record_failure`]) and
//!   active checks run once per interval across all processes
//!   ([`Checker`], [`Probe`]).
//! * Heads (`headers.rs`): [`request_head`] builds the upstream's request
//!   (hop-by-hop fields removed, `X-Forwarded-*` or `Forwarded`, `Host`),
//!   [`request_fields_into`] its fields into a buffer; [`response_fields`]
//!   reads the upstream's answer, [`passes`] says which of its fields go
//!   on; [`streams`] says whether it is buffered.
//! * Redirects (`redirect.rs`): [`Redirect`], a route's rules for the
//!   `Location` and `Refresh` fields of answers ([`rewrite`],
//!   [`rewrite_refresh`]), nginx's `proxy_redirect`.
//! * Cookies (`cookie.rs`): [`CookieRule`], a route's rules for the
//!   `Domain` and `Path` attributes of `Set-Cookie` ([`rewrite_cookie`]),
//!   nginx's `proxy_cookie_domain` and `proxy_cookie_path`; [`CookieFlags`]
//!   (`cookie_flags.rs`), their flags added or removed ([`flag_cookie`]),
//!   nginx's `proxy_cookie_flags`.
//! * Set and hidden fields (`set_header.rs`): [`SetHeader`], a route's
//!   fields for the requests it forwards (nginx's `proxy_set_header`,
//!   with [`Variables`]), and the check of its `hide_header` names.
//! * Counters (`stats.rs`): [`UpstreamSnapshot`] for the status page;
//!   each process's share of the idle gauge (`idle_shares.rs`), in shared
//!   memory, taken back when its process dies without exiting.
//! * [`ReverseProxy`] (`reverse_proxy.rs`): all of the above as the server
//!   holds it, built once before the processes fork, and [`Proxy`], one
//!   worker's, made from it ([`PoolSettings`]: the upstream pools').
//! * [`Plan`] (`plan.rs`): what a request becomes before a byte goes to an
//!   upstream ([`Forward`]: what is kept of it); [`Picker`]: each try's
//!   upstream and head ([`Attempt`]), and whether a failed try goes on to
//!   the next.
//! * The handler (`handler.rs`): [`Proxy`] answers with a future polled
//!   through the core's waiting contract (no thread held under event),
//!   streams the answer back ([`mpm_http::Body::Polled`]), tunnels after a
//!   `101`, streams large uploads from a worker.
//! * [`Error`] — this crate's one error type.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod addresses;
mod balance;
mod cidr;
mod config;
mod cookie;
mod cookie_flags;
mod error;
mod handler;
mod headers;
mod health;
mod idle_shares;
mod path;
mod plan;
mod redirect;
mod reverse_proxy;
mod set_header;
mod shared_state;
mod stats;

pub use addresses::{one_upstream_per_address, system_resolver};
pub use balance::{Balancer, InFlight, InFlightGuard};
pub use cidr::Cidr;
pub use config::{
    check_routes, show_duration, ActiveHealth, Balance, Buffering, ClientCert, ForwardedStyle,
    HashKey, HostMode, ProxyRoute, StatusMatch, UpstreamSpec, UpstreamUrl, MAX_COUNT, MAX_DURATION,
    MAX_ROUTES, MAX_TEXT, MAX_TRUSTED, MAX_UPSTREAMS_PER_ROUTE, MAX_WEIGHT, MIN_HEALTH_INTERVAL,
};
pub use cookie::{rewrite_cookie, CookieRule, MAX_COOKIE_RULES};
pub use cookie_flags::{flag_cookie, CookieFlag, CookieFlags, SameSite, MAX_COOKIE_FLAGS};
pub use error::{Error, Result};
pub use headers::{
    passes, request_fields_into, request_head, response_fields, streams, ClientInfo, Framing,
    ResponseFields,
};
pub use health::{http_probe, Checker, Probe, Transition};
pub use path::{map_target, map_target_into, normalize, RouteTable};
pub use plan::{
    is_idempotent, streams_upload, wants_upgrade, Attempt, Forward, Picker, Plan,
    STREAMED_BODY_ABOVE,
};
pub use redirect::{rewrite, rewrite_refresh, Redirect, MAX_REDIRECTS};
pub use reverse_proxy::{PoolSettings, Proxy, ReverseProxy};
pub use set_header::{SetHeader, Variables, MAX_SET_HEADERS};
pub use shared_state::{now_ms, ProxyState, Slots, UpstreamState, MAX_UPSTREAMS};
pub use stats::UpstreamSnapshot;

/// The most of an answer a route with [`Buffering::On`] reads into memory
/// before sending it on: 1 MiB. A longer answer is streamed from there.
pub const BUFFERED_MAX: usize = 1 << 20;

/// Idle connections kept per upstream per serving process by default
/// (`--proxy-keepalive`). More than nginx's usual `keepalive 32`: a pool
/// keeps only connections it once needed at the same time, and an event
/// process holds hundreds of requests waiting at once; with fewer, each
/// answer past the limit closes a connection the next request reopens
/// (proxy_peers.py's `slow`, 1,000 clients: 78% of the ceiling and 289
/// connections opened per 1,000 requests with 32, 93% and none with 512).
pub const DEFAULT_KEEPALIVE: usize = 512;

/// How long an idle upstream connection is kept by default
/// (`--proxy-keepalive-timeout`): nginx's `keepalive_timeout` in an
/// `upstream` block.
pub const DEFAULT_KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
