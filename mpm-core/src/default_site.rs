//! The welcome site served when no document root is given.

use std::sync::Arc;

use crate::config::{Config, MpmKind};
use crate::http::{HttpHandler, Request, Response};

const TEMPLATE: &str = include_str!("../assets/welcome.html");

/// An [`HttpHandler`] for the embedded welcome page: `/` and `/index.html`
/// answer a page that says what this server is running on; anything else is
/// 404.
#[derive(Debug, Clone)]
pub struct DefaultSite {
    page: Arc<[u8]>,
}

impl DefaultSite {
    /// Render the page for this configuration.
    pub fn new(config: &Config) -> DefaultSite {
        let about = match config.mpm {
            MpmKind::Prefork => "single-threaded child processes, one connection each",
            MpmKind::Worker => "a pool of threads taking turns to accept, one connection each",
            MpmKind::Event => "an epoll listener that parks idle connections, and a worker pool",
        };
        let listen: Vec<String> = config.listen.iter().map(ToString::to_string).collect();
        let on_off = |b: bool| if b { "on" } else { "off" };
        let page = TEMPLATE
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{mpm}}", config.mpm.name())
            .replace("{{mpm_about}}", about)
            .replace(
                "{{workers}}",
                &format!(
                    "{} request workers, {} threads per process",
                    config.max_request_workers, config.threads_per_child
                ),
            )
            .replace("{{listen}}", &listen.join(", "))
            .replace(
                "{{sendfile}}",
                if config.sendfile {
                    "sent with sendfile(2)"
                } else {
                    "read and written (--sendfile off)"
                },
            )
            .replace(
                "{{keepalive}}",
                &format!(
                    "{}, {:?} idle timeout",
                    on_off(config.keepalive),
                    config.keepalive_timeout
                ),
            );
        DefaultSite {
            page: Arc::from(page.into_bytes()),
        }
    }
}

impl HttpHandler for DefaultSite {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        match req.method() {
            "GET" | "HEAD" => {}
            _ => return Response::error(405).header("Allow", "GET, HEAD"),
        }
        match req.path() {
            "/" | "/index.html" => Response::new(200)
                .header("Content-Type", "text/html; charset=utf-8")
                .body(Arc::clone(&self.page)),
            _ => Response::error(404),
        }
    }

    fn answers_without_blocking(&self, _req: &Request<'_>) -> bool {
        true // everything is in memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Body, Version};

    #[test]
    fn the_welcome_page_names_the_process_model() {
        let mut site = DefaultSite::new(&Config::default());
        let r = site.handle(&Request::for_test("GET", "/", Version::Http11, &[], b""));
        assert_eq!(r.status(), 200);
        let Body::Shared(page) = r.body_ref() else {
            panic!("expected the shared page")
        };
        let text = std::str::from_utf8(page).unwrap();
        assert!(text.contains("<code>worker</code>"));
        assert!(!text.contains("{{"));
    }
}
