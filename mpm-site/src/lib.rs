//! # mpm-site
//!
//! The static site that `mpm serve` runs: an application on
//! [`mpm_http`], an [`HttpHandler`](mpm_http::HttpHandler) like any
//! embedder's (and as a reverse proxy will be), which the HTTP layer knows
//! nothing of.
//!
//! * [`StaticFiles`] — a document root (`static_files.rs`): confinement
//!   beneath the root (`openat2(RESOLVE_BENEATH)`), index files, the
//!   open-file cache, validators, conditional and range requests
//!   (`multipart/byteranges` for several), [`Dotfiles`].
//! * Content codings (`compression.rs`): precompressed siblings and
//!   [`Gzip`] on the fly, for the [`DEFAULT_GZIP_TYPES`].
//! * Directory listings (`autoindex.rs`), HTML or JSON, at most
//!   [`MAX_LISTED_ENTRIES`] entries.
//! * [`CacheRules`] and [`MaxAge`] — `Cache-Control` by extension or type
//!   (`expires.rs`).
//! * [`mime`] — media types by extension.
//! * [`DefaultSite`] — the welcome page served without a document root,
//!   saying what the server runs ([`About`]).
//! * [`Error`] — this crate's one error type.
//!
//! **What stays in `mpm-http`, and why.** The site needs two things the
//! protocol layer keeps for every handler, so they stay there and this crate
//! uses them: custom error pages ([`mpm_http::ErrorPages`]), plain data in
//! [`HttpSettings`](mpm_http::HttpSettings) that the layer applies to its
//! own refusals (400, 408, 413, ...) as much as to a handler's, whoever
//! fills it; and the page-cache check (`mpm-http`'s `page_cache.rs`), which
//! the layer's writer asks before it sends any file body on an event loop.
//! [`About`] is the welcome page's alone, so it lives here with it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod autoindex;
mod compression;
mod default_site;
mod error;
mod expires;
pub mod mime;
mod static_files;

pub use autoindex::MAX_ENTRIES as MAX_LISTED_ENTRIES;
pub use compression::{Gzip, DEFAULT_GZIP_TYPES};
pub use default_site::{About, DefaultSite};
pub use error::{Error, Result};
pub use expires::{CacheRules, MaxAge};
pub use static_files::{Dotfiles, StaticFiles, DEFAULT_IN_MEMORY};
