//! What the status page shows of HTTP/2: connections (open, in all),
//! streams (in all, reset by the server, refused past the concurrency
//! limit) and GOAWAYs sent by cause,
//! counted in memory every serving process shares when the server made it
//! before forking ([`install`]), and in this process's memory otherwise
//! (an embedder's test, a single process).
//!
//! One atomic add per stream on a line every process writes: what TLS
//! pays per handshake, paid here per stream. Streams are per request, so
//! at 64 cores this line is shared by 64 writers; the scoreboard's
//! per-worker slots would spread it, at the cost of a change in the core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use mpm_core::shared::Counters;

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Count {
    /// HTTP/2 connections open now.
    ConnectionsOpen,
    /// HTTP/2 connections, in all.
    Connections,
    /// Streams the client opened, in all.
    Streams,
    /// Streams the server reset (a malformed request, a body source that
    /// failed, a stream error in what the client sent).
    StreamsReset,
    /// Streams refused past `--h2-max-concurrent-streams` (RST_STREAM
    /// REFUSED_STREAM, RFC 9113 §5.1.2): sent by `mpm-h2` before the
    /// server sees the stream, counted from its [`mpm_h2::Stats`].
    StreamsRefused,
    /// GOAWAYs sent for a flood (`ENHANCE_YOUR_CALM`: rapid reset, too
    /// many streams the server had to reset, CONTINUATION without end).
    GoawayFlood,
    /// GOAWAYs sent for a protocol error of the client.
    GoawayProtocolError,
    /// GOAWAYs sent because the server stops (or restarts).
    GoawayStop,
}

impl Count {
    /// Every counter, in the order the status page lists them.
    pub const ALL: [Count; 8] = [
        Count::ConnectionsOpen,
        Count::Connections,
        Count::Streams,
        Count::StreamsReset,
        Count::StreamsRefused,
        Count::GoawayFlood,
        Count::GoawayProtocolError,
        Count::GoawayStop,
    ];

    /// Its name on the status page (JSON key, after `h2_`).
    pub fn name(self) -> &'static str {
        match self {
            Count::ConnectionsOpen => "connections_open",
            Count::Connections => "connections_total",
            Count::Streams => "streams_total",
            Count::StreamsReset => "streams_reset",
            Count::StreamsRefused => "streams_refused",
            Count::GoawayFlood => "goaway_flood",
            Count::GoawayProtocolError => "goaway_protocol_error",
            Count::GoawayStop => "goaway_stop",
        }
    }
}

impl Count {
    /// Is it a gauge (a reading now, which goes down as well as up: the
    /// connections open) rather than a counter (a total that only grows)?
    /// Prometheus must be told: a counter that goes down reads as a restart.
    pub fn is_gauge(self) -> bool {
        matches!(self, Count::ConnectionsOpen)
    }
}

static SHARED: OnceLock<Counters> = OnceLock::new();
static LOCAL: [AtomicU64; Count::ALL.len()] = [const { AtomicU64::new(0) }; Count::ALL.len()];

/// Count in memory every process shares from now on: call it before
/// forking (the `mpm` crate does, when HTTP/2 is on). Once is enough;
/// again does nothing.
pub fn install() -> mpm_core::Result<()> {
    if SHARED.get().is_none() {
        let c = Counters::new(Count::ALL.len())?;
        let _ = SHARED.set(c);
    }
    Ok(())
}

pub(crate) fn add(c: Count) {
    match SHARED.get() {
        Some(s) => {
            s.add(c as usize, 1);
        }
        None => {
            LOCAL[c as usize].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Add `n` (what a connection's codec counted since it was last looked at).
pub(crate) fn add_n(c: Count, n: u64) {
    if n == 0 {
        return;
    }
    match SHARED.get() {
        Some(s) => {
            s.add(c as usize, n);
        }
        None => {
            LOCAL[c as usize].fetch_add(n, Ordering::Relaxed);
        }
    }
}

pub(crate) fn sub(c: Count) {
    match SHARED.get() {
        Some(s) => {
            s.sub(c as usize, 1);
        }
        None => {
            LOCAL[c as usize].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Every counter's value now, in [`Count::ALL`]'s order.
pub fn h2_counts() -> [(Count, u64); Count::ALL.len()] {
    Count::ALL.map(|c| {
        let n = match SHARED.get() {
            Some(s) => s.get(c as usize),
            None => LOCAL[c as usize].load(Ordering::Relaxed),
        };
        (c, n)
    })
}
