//! Shared by the HTTP-layer tests: serve one connection with the blocking
//! driver, in a thread, without an MPM.

#![allow(clippy::unwrap_used, dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mpm_core::blocking::{serve_blocking, NoPark, Timeouts};
use mpm_core::Stream;
use mpm_http::{HttpHandler, HttpService, HttpSettings};

/// Listen on an ephemeral port and serve the first connection with
/// `handler` under the default settings; the address and the serving thread.
pub(crate) fn serve_one<H: HttpHandler + Send + 'static>(
    handler: H,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (sock, peer) = listener.accept().unwrap();
        let stream = Stream::new(sock, peer, true, Arc::new(AtomicBool::new(false))).unwrap();
        let timeouts = Timeouts {
            request: Duration::from_secs(5),
            keepalive: Duration::from_secs(5),
            linger: Duration::from_millis(100),
            first_request: Duration::from_secs(5),
            inherited: false,
        };
        serve_blocking(
            &mut HttpService::new(handler, &HttpSettings::default()),
            stream,
            &timeouts,
            &mut NoPark,
        );
    });
    (addr, server)
}
