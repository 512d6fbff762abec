//! The welcome site served when no document root is given.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mpm_core::MpmKind;

use mpm_http::{HttpHandler, Request, Response};

const TEMPLATE: &str = include_str!("../assets/welcome.html");

/// An [`HttpHandler`] for the embedded welcome page: `/` and `/index.html`
/// answer a page that says what this server is running on; anything else is
/// 404.
#[derive(Debug, Clone)]
pub struct DefaultSite {
    page: Arc<[u8]>,
}

/// What the welcome page says about the server it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct About {
    /// The process model.
    pub mpm: MpmKind,
    /// The listening addresses.
    pub listen: Vec<SocketAddr>,
    /// Most requests served at once.
    pub max_request_workers: usize,
    /// Threads in each serving process.
    pub threads_per_child: usize,
    /// File bodies by sendfile(2).
    pub sendfile: bool,
    /// Keep-alive on.
    pub keepalive: bool,
    /// Idle wait between requests.
    pub keepalive_timeout: Duration,
    /// Under uring: the io_uring features in use ("multishot accept, ...").
    pub ring: Option<String>,
}

impl Default for About {
    fn default() -> Self {
        About {
            mpm: MpmKind::Worker,
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            max_request_workers: 256,
            threads_per_child: 256,
            sendfile: true,
            keepalive: true,
            ring: None,
            keepalive_timeout: Duration::from_secs(60),
        }
    }
}

impl DefaultSite {
    /// Render the page for this server.
    pub fn new(server: &About) -> DefaultSite {
        let about = match server.mpm {
            MpmKind::Prefork => "single-threaded child processes, one connection each".to_string(),
            MpmKind::Worker => {
                "a pool of threads taking turns to accept, one connection each".to_string()
            }
            MpmKind::Event => {
                "an epoll listener that parks idle connections, and a worker pool".to_string()
            }
            MpmKind::Uring => format!(
                "an io_uring per process ({}), and a worker pool",
                server.ring.as_deref().unwrap_or("features not probed")
            ),
        };
        let listen: Vec<String> = server.listen.iter().map(ToString::to_string).collect();
        let on_off = |b: bool| if b { "on" } else { "off" };
        let page = TEMPLATE
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{mpm}}", server.mpm.name())
            .replace("{{mpm_about}}", &about)
            .replace(
                "{{workers}}",
                &format!(
                    "{} request workers, {} threads per process",
                    server.max_request_workers, server.threads_per_child
                ),
            )
            .replace("{{listen}}", &listen.join(", "))
            .replace(
                "{{sendfile}}",
                if server.sendfile {
                    "sent with sendfile(2)"
                } else {
                    "read and written (--sendfile off)"
                },
            )
            .replace(
                "{{keepalive}}",
                &format!(
                    "{}, {:?} idle timeout",
                    on_off(server.keepalive),
                    server.keepalive_timeout
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
            "OPTIONS" => return Response::new(204).header("Allow", "GET, HEAD, OPTIONS"),
            other => return Response::method_not_allowed(other, "GET, HEAD, OPTIONS"),
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
    use mpm_http::{Body, Version};

    #[test]
    fn the_welcome_page_names_the_process_model() {
        let mut site = DefaultSite::new(&About::default());
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
