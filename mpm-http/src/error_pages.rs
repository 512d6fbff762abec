//! Custom error pages (nginx's `error_page`, httpd's `ErrorDocument`):
//! the body of mpm's built-in error page replaced by a page of the site's,
//! for the statuses configured, with the status kept.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::response::{HeaderText, Response};
use crate::Body;

/// One page: its bytes, kept in memory, and their type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The page.
    pub body: Arc<[u8]>,
    /// Its `Content-Type`.
    pub content_type: Cow<'static, str>,
}

/// The pages by status.
///
/// They replace the body of every built-in error page
/// ([`Response::error`](crate::Response::error)) the server answers with
/// such a status: the HTTP layer's own (400, 408, 413, 414, 431, 505, ...),
/// the static site's (403, 404, 405, 416, 301, ...), and a panicking
/// handler's 500. The status and the other header fields stay; a response
/// whose body a handler wrote itself is left alone.
///
/// ```
/// use mpm_http::{ErrorPage, ErrorPages};
/// let mut pages = ErrorPages::new();
/// pages.insert(404, ErrorPage { body: b"<h1>gone fishing</h1>"[..].into(), content_type: "text/html".into() });
/// assert!(pages.get(404).is_some() && pages.get(500).is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorPages(Arc<BTreeMap<u16, ErrorPage>>);

impl ErrorPages {
    /// No custom pages.
    pub fn new() -> ErrorPages {
        ErrorPages::default()
    }

    /// Answer `status` with `page`.
    pub fn insert(&mut self, status: u16, page: ErrorPage) {
        Arc::make_mut(&mut self.0).insert(status, page);
    }

    /// The page for `status`, if any.
    pub fn get(&self, status: u16) -> Option<&ErrorPage> {
        self.0.get(&status)
    }

    /// Are there none?
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Put the page for its status into a built-in error response.
    pub(crate) fn apply(&self, parts: &mut Response) {
        if !parts.stock || self.0.is_empty() {
            return;
        }
        let Some(page) = self.get(parts.status) else {
            return;
        };
        parts
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
        parts.headers.push((
            HeaderText::from("Content-Type"),
            HeaderText::from(page.content_type.clone()),
        ));
        parts.body = Body::Shared(Arc::clone(&page.body));
    }
}
