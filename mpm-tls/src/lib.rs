//! # mpm-tls
//!
//! TLS 1.2 and 1.3 (rustls) in front of any
//! [`ConnectionHandler`](mpm_core::ConnectionHandler): HTTP, the line-echo
//! example and an embedder's own protocol get TLS unchanged, under prefork,
//! worker and event. It depends on `mpm-core` alone (and `mpm-sys`, beneath
//! it, for the session cache's cross-process lock).
//!
//! * [`TlsSettings`] — certificates, ALPN, sessions, timeouts; [`Tls`] — what
//!   they make once per server start (before any fork): the rustls
//!   configuration, with [`Sessions`] shared by every serving process.
//! * [`TlsFactory`] and [`TlsHandler`] (`handler.rs`) — the layer: plain
//!   listeners pass through, TLS listeners ([`TlsListeners`]) handshake on a
//!   worker, then the inner handler runs with the session attached to its
//!   [`Stream`](mpm_core::Stream) as a [`Transport`](mpm_core::Transport).
//! * `session.rs` — one connection on rustls's unbuffered API: the record
//!   buffers are ours, from a pool, and go back to it when the connection
//!   parks idle.
//! * [`certs`] — PEM loading and checks, SNI with several pairs, reload.
//! * [`tickets`] — session tickets whose keys every process derives alike,
//!   rotating; [`session_cache`] — the stateful cache in shared memory.
//! * [`stats`] — handshakes, resumptions and failures by kind, for the
//!   status page.
//! * `sniff.rs` — the first bytes: plain HTTP on a TLS port (answered 400),
//!   an unknown server name (`unrecognized_name`).
//! * [`Error`] — this crate's one error type.
//!
//! # Design
//!
//! **Provider.** rustls's `ring`: it builds with a C compiler (which every
//! machine building mpm has) and nothing else, where aws-lc-rs needs cmake
//! (and nasm for some targets); and its P-256, X25519 and AES-GCM are
//! assembly, several times faster at handshakes than a pure-Rust provider.
//!
//! **Sans-IO, one readiness step at a time.** rustls's unbuffered API is
//! driven from the same steps as the inner protocol: a handshake step reads
//! once, processes what arrived and writes what rustls produced; an
//! established step attaches the session and runs the inner step, whose
//! reads decrypt and whose writes encrypt (coalescing writes that say more
//! follows, so a response head and its first body bytes share a record
//! flush). Records the socket would not take make the step's answer
//! [`Interest::Write`](mpm_core::Interest::Write); close_notify follows a
//! close.
//!
//! **Nothing slow on an event loop.** A connection mid-handshake answers
//! `Prefetch::Ready`, so the worker pool does every handshake (an ECDSA
//! signature and a key exchange: about 380 µs of server CPU per request
//! with a full handshake in `mpm compare --experiment tls`, a release build
//! on a loaded machine) and the loop never waits on one; established connections are decrypted on the loop as plain ones
//! are read (one read's worth of AES-GCM), and bodies are encrypted by the
//! workers (`writes_without_blocking` is false for TLS), which spreads the
//! bulk cipher work over every worker instead of one loop thread.
//!
//! **Idle connections.** The unbuffered API lets this layer own the record
//! buffers (18 KiB in, up to 128 KiB out): they come from a pool and go
//! back when the connection parks idle (`ConnectionHandler::parked`), so an
//! idle TLS connection holds rustls's connection state, its keys and a few
//! small allocations. The pool is one mutex per factory, as the HTTP
//! layer's buffer pool is; at 64 cores a per-worker cache in front of it
//! would keep that lock off the hot path (it is taken once per request that
//! parks, not per read).
//!
//! **Sessions across processes.** Ticket keys are derived, per period, from
//! a secret made before any fork ([`tickets`]): every process agrees on
//! every period's key without shared mutable state, so no lock at all is
//! taken for tickets, on 2 cores or 64. The stateful cache
//! ([`session_cache`]) spreads sessions over buckets with a lock each, so
//! cores meet only when two handshakes land in one bucket.
//!
//! **Which connections are TLS.** The models hand a handler no listener
//! identity; the layer compares the connection's local address with the
//! TLS listeners' (`getsockname`, once per connection, and only when plain
//! and TLS listeners are mixed), as nginx does for wildcard listeners.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod certs;
mod error;
mod handler;
mod session;
pub mod session_cache;
mod sniff;
pub mod stats;
pub mod tickets;

use std::sync::Arc;
use std::time::Duration;

use rustls::server::NoServerSessionStorage;
use rustls::ServerConfig;

pub use certs::{CertPair, CertStore, Certificates};
pub use error::{Error, Result};
pub use handler::{TlsConn, TlsFactory, TlsHandler, TlsListeners};
pub use session_cache::SharedSessionCache;
pub use stats::Stats;
pub use tickets::SharedTickets;

/// The crypto provider every configuration is built with: rustls's `ring`.
pub fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// How TLS is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Certificate/key pairs; the first is the default (clients that send
    /// no server name), the others are picked by name (SNI).
    pub certs: Vec<CertPair>,
    /// ALPN protocols offered (`http/1.1` for HTTP); empty for none. A
    /// client offering only others is refused (`no_application_protocol`).
    pub alpn: Vec<Vec<u8>>,
    /// Sessions the shared stateful cache holds (0: no cache).
    pub session_cache: usize,
    /// Issue session tickets (keys shared by every process, rotating).
    pub session_tickets: bool,
    /// How long a cached session lives, and the period of ticket keys.
    pub session_timeout: Duration,
    /// How long a handshake may take (the request-header timeout).
    pub handshake_timeout: Duration,
    /// Answer a plain HTTP request on a TLS port with 400 (HTTP servers).
    pub plain_http_answer: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            certs: Vec::new(),
            alpn: vec![b"http/1.1".to_vec()],
            session_cache: 20_000,
            session_tickets: true,
            session_timeout: Duration::from_secs(300),
            handshake_timeout: Duration::from_secs(20),
            plain_http_answer: true,
        }
    }
}

/// What every serving process shares, made once when the server starts
/// (before any fork) and kept across graceful restarts and reloads: the
/// counters, the ticket secret and the session cache.
#[derive(Debug, Clone)]
pub struct Sessions {
    stats: Stats,
    tickets: Option<Arc<SharedTickets>>,
    cache: Option<Arc<SharedSessionCache>>,
}

impl Sessions {
    /// Make them for `settings` (the shared memory is mapped now).
    pub fn new(settings: &TlsSettings) -> Result<Sessions> {
        let stats = Stats::new()?;
        let tickets = if settings.session_tickets {
            Some(Arc::new(SharedTickets::new(
                settings.session_timeout.as_secs(),
                Some(stats),
            )?))
        } else {
            None
        };
        let cache = match settings.session_cache {
            0 => None,
            n => Some(Arc::new(SharedSessionCache::new(
                n,
                settings.session_timeout,
                Some(stats),
            )?)),
        };
        Ok(Sessions {
            stats,
            tickets,
            cache,
        })
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }
}

/// TLS as one configuration sets it up: the certificates in force
/// (reloadable), the rustls configuration, the shared sessions.
#[derive(Debug)]
pub struct Tls {
    pub(crate) certs: Arc<Certificates>,
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) stats: Stats,
    pub(crate) timeout: Duration,
    pub(crate) plain_http_answer: bool,
    pairs: Vec<CertPair>,
}

impl Tls {
    /// Load the certificates and build the configuration. Every error is
    /// one line naming the file and what is wrong with it.
    pub fn new(settings: &TlsSettings, sessions: &Sessions) -> Result<Tls> {
        let store = CertStore::load(&settings.certs)?;
        let certs = Arc::new(Certificates::new(store));
        let versions: &[&rustls::SupportedProtocolVersion] =
            &[&rustls::version::TLS13, &rustls::version::TLS12];
        let mut config = ServerConfig::builder_with_provider(Arc::new(provider()))
            .with_protocol_versions(versions)
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&certs) as Arc<dyn rustls::server::ResolvesServerCert>);
        config.alpn_protocols = settings.alpn.clone();
        config.max_early_data_size = 0;
        config.session_storage = match &sessions.cache {
            Some(c) => Arc::clone(c) as Arc<dyn rustls::server::StoresServerSessions>,
            None => Arc::new(NoServerSessionStorage {}),
        };
        if let Some(t) = &sessions.tickets {
            config.ticketer = Arc::clone(t) as Arc<dyn rustls::server::ProducesTickets>;
        }
        // One ticket a connection: a client resumes one connection with it.
        config.send_tls13_tickets = match (&sessions.tickets, &sessions.cache) {
            (None, None) => 0,
            _ => 1,
        };
        Ok(Tls {
            certs,
            config: Arc::new(config),
            stats: sessions.stats,
            timeout: settings.handshake_timeout,
            plain_http_answer: settings.plain_http_answer,
            pairs: settings.certs.clone(),
        })
    }

    /// The certificates in force.
    pub fn certificates(&self) -> Arc<CertStore> {
        self.certs.current()
    }

    /// Load the certificate files again (renewed in place) and hand them
    /// out from the next handshake on; connections already made keep theirs.
    /// If one does not load, the certificates in force stay.
    pub fn reload(&self) -> Result<()> {
        self.certs.reload(&self.pairs)
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }
}
