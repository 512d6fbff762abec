//! # mpm-status
//!
//! The status page, as httpd's `mod_status`: an application on
//! [`mpm_http`] that reads the [`Scoreboard`](mpm_core::scoreboard::Scoreboard)
//! every serving process writes.
//!
//! * [`ServerStatus`] — the handler: the page as HTML, as JSON
//!   (`?json`, built with `serde_json`; [`server_status`] lists its fields),
//!   and the metrics; [`SectionCounters`] for a layer's own counters (TLS's),
//!   [`SectionValues`] for counters and gauges (HTTP/2's), [`TableRows`]
//!   for a layer's counters per labelled row (the proxy's upstreams).
//! * [`prometheus`] — the same counters in Prometheus's text format.
//!
//! It needs nothing of the static site: the two are separate applications
//! that the `mpm` crate routes to.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod server_status;

pub use server_status::{
    prometheus, SectionCounters, SectionValues, ServerStatus, TableRow, TableRows, Value,
};
