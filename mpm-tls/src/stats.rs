//! What the status page shows of TLS: handshakes, resumptions and
//! handshake failures by kind, counted in memory every serving process
//! shares (made before forking, kept across graceful restarts).

use mpm_core::shared::Counters;

use crate::error::Result;

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    /// Handshakes completed in full (a new session).
    Full,
    /// Handshakes that resumed a session (a ticket or the session cache).
    Resumed,
    /// Of the handshakes, those on TLS 1.3 (the rest are TLS 1.2).
    Tls13,
    /// Session tickets opened (a client offering one from any process).
    TicketsOpened,
    /// Sessions found in the shared session cache.
    CacheHits,
    /// Sessions stored in the shared session cache.
    CacheStores,
    /// Failure: a plain HTTP request on a TLS port (answered 400).
    PlainHttp,
    /// Failure: a server name no certificate has (`unrecognized_name`).
    UnknownName,
    /// Failure: bytes that are not TLS, or a malformed message.
    BadMessage,
    /// Failure: nothing in common (versions, ciphers, groups, ALPN).
    NoSharedParameters,
    /// Failure: the client refused us with an alert (our certificate, say).
    ClientAlert,
    /// Failure: the handshake took longer than the request-header timeout.
    Timeout,
    /// Failure: the client closed the connection mid-handshake.
    ClosedEarly,
    /// Failure: anything else.
    Other,
}

impl Kind {
    /// Every counter, in the order the status page lists them.
    pub const ALL: [Kind; 14] = [
        Kind::Full,
        Kind::Resumed,
        Kind::Tls13,
        Kind::TicketsOpened,
        Kind::CacheHits,
        Kind::CacheStores,
        Kind::PlainHttp,
        Kind::UnknownName,
        Kind::BadMessage,
        Kind::NoSharedParameters,
        Kind::ClientAlert,
        Kind::Timeout,
        Kind::ClosedEarly,
        Kind::Other,
    ];

    /// Its name on the status page (JSON key, after `tls_`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Full => "handshakes_full",
            Kind::Resumed => "handshakes_resumed",
            Kind::Tls13 => "handshakes_tls13",
            Kind::TicketsOpened => "tickets_opened",
            Kind::CacheHits => "session_cache_hits",
            Kind::CacheStores => "session_cache_stores",
            Kind::PlainHttp => "failed_plain_http",
            Kind::UnknownName => "failed_unknown_name",
            Kind::BadMessage => "failed_bad_message",
            Kind::NoSharedParameters => "failed_no_shared_parameters",
            Kind::ClientAlert => "failed_client_alert",
            Kind::Timeout => "failed_timeout",
            Kind::ClosedEarly => "failed_closed_early",
            Kind::Other => "failed_other",
        }
    }

    /// Is it a handshake failure?
    pub fn is_failure(self) -> bool {
        self as usize >= Kind::PlainHttp as usize
    }

    /// The failure a rustls error is.
    pub(crate) fn of_error(e: &rustls::Error) -> Kind {
        use rustls::Error as E;
        match e {
            E::InvalidMessage(_)
            | E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. }
            | E::DecryptError
            | E::PeerMisbehaved(_) => Kind::BadMessage,
            E::PeerIncompatible(_) | E::NoApplicationProtocol => Kind::NoSharedParameters,
            E::AlertReceived(_) => Kind::ClientAlert,
            E::General(m) if m.contains("no server certificate") => Kind::UnknownName,
            _ => Kind::Other,
        }
    }
}

/// The counters, in shared memory. Cheap to copy into every worker.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    counters: Counters,
}

impl Stats {
    /// New counters, all zero, shared with every process forked after.
    pub fn new() -> Result<Stats> {
        Ok(Stats {
            counters: Counters::new(Kind::ALL.len())?,
        })
    }

    /// Count one.
    pub fn add(&self, kind: Kind) {
        self.counters.add(kind as usize, 1);
    }

    /// A counter's value.
    pub fn get(&self, kind: Kind) -> u64 {
        self.counters.get(kind as usize)
    }

    /// Every counter with its name, and the failures' total last.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> =
            Kind::ALL.iter().map(|&k| (k.name(), self.get(k))).collect();
        let failed = Kind::ALL
            .iter()
            .filter(|k| k.is_failure())
            .map(|&k| self.get(k))
            .sum();
        out.push(("handshakes_failed", failed));
        out
    }
}
