//! TLS to an upstream: a rustls server written here, its self-signed
//! certificate (rcgen) given to the client as the CA file.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use common::{read_request, Upstream as Server};
use mpm_core::waiting::block_on;
use mpm_upstream::{Client, Error, Pool, Upstream};
use rustls::pki_types::PrivateKeyDer;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

struct Cert {
    pem: String,
    config: Arc<ServerConfig>,
}

fn localhost_cert() -> Cert {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let chain = vec![cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
    Cert {
        pem: cert.pem(),
        config: Arc::new(config),
    }
}

/// An HTTPS upstream answering every request on a connection with `body`.
fn https_server(config: Arc<ServerConfig>, body: &'static str) -> Server {
    Server::start(move |sock| {
        let Ok(tls) = ServerConnection::new(config.clone()) else {
            return;
        };
        let mut stream = StreamOwned::new(tls, sock);
        while read_request(&mut stream).is_some() {
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(answer.as_bytes()).is_err() || stream.flush().is_err() {
                return;
            }
        }
    })
}

fn ca_file(pem: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "mpm-upstream-ca-{}-{:?}.pem",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, pem).unwrap();
    path
}

fn upstream(server: &Server) -> Upstream {
    let mut u = Upstream::parse(&format!("https://localhost:{}", server.addr.port())).unwrap();
    u.resolve().unwrap();
    u
}

#[test]
fn a_request_over_tls_verified_by_a_ca_file_succeeds_and_its_connection_is_kept() {
    let cert = localhost_cert();
    let server = https_server(cert.config.clone(), "secure");
    let mut up = upstream(&server);
    let ca = ca_file(&cert.pem);
    up.set_ca_file(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    let client = Client::with_pool(Arc::new(Pool::default()));
    for _ in 0..2 {
        let got = block_on(async {
            let r = client.request_to("GET", &up, "/").send().await?;
            assert_eq!(r.status(), 200);
            r.text().await
        });
        assert_eq!(got.unwrap(), "secure");
    }
    // The session tickets a TLS 1.3 server sends after the handshake do
    // not make the idle connection look stale.
    assert_eq!(server.accepts(), 1);
}

#[test]
fn without_the_ca_file_verification_fails_naming_the_reason() {
    let cert = localhost_cert();
    let server = https_server(cert.config.clone(), "secure");
    let up = upstream(&server);
    let client = Client::with_pool(Arc::new(Pool::default()));
    let e = block_on(async { client.request_to("GET", &up, "/").send().await }).unwrap_err();
    assert!(
        matches!(&e, Error::Tls(m) if m.contains("UnknownIssuer")),
        "{e}"
    );
}

#[test]
fn a_certificate_for_another_name_is_refused() {
    let cert = localhost_cert();
    let server = https_server(cert.config.clone(), "secure");
    let mut up = Upstream::parse(&format!("https://127.0.0.1:{}", server.addr.port())).unwrap();
    let ca = ca_file(&cert.pem);
    up.set_ca_file(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    let client = Client::with_pool(Arc::new(Pool::default()));
    let e = block_on(async { client.request_to("GET", &up, "/").send().await }).unwrap_err();
    assert!(
        matches!(&e, Error::Tls(m) if m.contains("not valid for name")),
        "{e}"
    );
}

#[test]
fn a_ca_file_that_is_not_pem_is_refused_saying_so() {
    let path = ca_file("not a certificate");
    let mut up = Upstream::parse("https://localhost").unwrap();
    let e = up.set_ca_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
}

#[test]
fn a_mebibyte_goes_up_and_comes_down_over_tls() {
    const SIZE: usize = 1 << 20;
    let cert = localhost_cert();
    let config = cert.config.clone();
    let server = Server::start(move |sock| {
        let Ok(tls) = ServerConnection::new(config.clone()) else {
            return;
        };
        let mut stream = StreamOwned::new(tls, sock);
        while let Some(head) = read_request(&mut stream) {
            assert!(head.contains(&format!("Content-Length: {SIZE}")), "{head}");
            let body: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
            let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n");
            if stream.write_all(answer.as_bytes()).is_err()
                || stream.write_all(&body).is_err()
                || stream.flush().is_err()
            {
                return;
            }
        }
    });
    let mut up = upstream(&server);
    let ca = ca_file(&cert.pem);
    up.set_ca_file(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    let client = Client::with_pool(Arc::new(Pool::default()));
    let got = block_on(async {
        client
            .request_to("POST", &up, "/up")
            .body(vec![7u8; SIZE])
            .send()
            .await?
            .bytes()
            .await
    })
    .unwrap();
    assert_eq!(got.len(), SIZE);
    assert!(got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
}

#[test]
fn an_idle_tls_connection_the_upstream_closed_is_replaced_without_error() {
    let cert = localhost_cert();
    let config = cert.config.clone();
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    let closed_tx = std::sync::Mutex::new(closed_tx);
    let server = Server::start(move |sock| {
        let Ok(tls) = ServerConnection::new(config.clone()) else {
            return;
        };
        let mut stream = StreamOwned::new(tls, sock);
        if read_request(&mut stream).is_some() {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            let _ = stream.flush();
        }
        // One answer, then close_notify and the close.
        stream.conn.send_close_notify();
        let _ = stream.conn.complete_io(&mut stream.sock);
        drop(stream);
        let _ = closed_tx.lock().unwrap().send(());
    });
    let mut up = upstream(&server);
    let ca = ca_file(&cert.pem);
    up.set_ca_file(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    let pool = Arc::new(Pool::default());
    let client = Client::with_pool(pool.clone());
    let get = || {
        block_on(async {
            client
                .request_to("POST", &up, "/")
                .send()
                .await?
                .text()
                .await
        })
    };
    assert_eq!(get().unwrap(), "ok");
    closed_rx.recv().unwrap();
    assert_eq!(get().unwrap(), "ok");
    assert_eq!(server.accepts(), 2);
    let addr = up
        .addrs()
        .iter()
        .find(|a| a.port() == server.addr.port() && a.is_ipv4());
    let stats = pool.stats(&up.target(*addr.unwrap()).key());
    assert_eq!((stats.opened, stats.reused, stats.dropped_stale), (2, 0, 1));
}

/// An HTTPS upstream answering one request with a 200 whose body ends at
/// the close (no Content-Length, not chunked): `body`, then close_notify
/// if `notify`, then the TCP close (a FIN, not a reset).
fn close_delimited_server(config: Arc<ServerConfig>, body: &'static str, notify: bool) -> Server {
    Server::start(move |sock| {
        let Ok(tls) = ServerConnection::new(config.clone()) else {
            return;
        };
        let mut stream = StreamOwned::new(tls, sock);
        if read_request(&mut stream).is_none() {
            return;
        }
        let answer = format!("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{body}");
        if stream.write_all(answer.as_bytes()).is_err() || stream.flush().is_err() {
            return;
        }
        if notify {
            stream.conn.send_close_notify();
            let _ = stream.conn.complete_io(&mut stream.sock);
        }
        // The FIN, then wait for the client's close so that nothing
        // unread turns it into a reset.
        let mut sock = stream.sock;
        let _ = sock.shutdown(std::net::Shutdown::Write);
        let _ = std::io::Read::read_to_end(&mut sock, &mut Vec::new());
    })
}

fn close_delimited_body(notify: bool) -> mpm_upstream::Result<Vec<u8>> {
    let cert = localhost_cert();
    let server = close_delimited_server(cert.config.clone(), "partial", notify);
    let mut up = upstream(&server);
    let ca = ca_file(&cert.pem);
    up.set_ca_file(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    let client = Client::with_pool(Arc::new(Pool::default()));
    block_on(async {
        let r = client.request_to("GET", &up, "/").send().await?;
        assert_eq!(r.status(), 200);
        r.bytes().await
    })
}

#[test]
fn a_close_delimited_body_cut_without_close_notify_is_an_error() {
    // RFC 9112 §9.8: a TCP close without close_notify may be a truncation.
    let e = close_delimited_body(false).unwrap_err();
    assert!(
        matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof),
        "{e:?}"
    );
}

#[test]
fn a_close_delimited_body_ended_by_close_notify_is_whole() {
    assert_eq!(close_delimited_body(true).unwrap(), b"partial");
}

#[test]
fn a_tls_upstream_closing_without_close_notify_before_answering_is_closed() {
    let cert = localhost_cert();
    let config = cert.config.clone();
    let server = Server::start(move |sock| {
        let Ok(tls) = ServerConnection::new(config.clone()) else {
            return;
        };
        let mut stream = StreamOwned::new(tls, sock);
        if read_request(&mut stream).is_none() {
            return;
        }
        let mut sock = stream.sock;
        let _ = sock.shutdown(std::net::Shutdown::Write);
        let _ = std::io::Read::read_to_end(&mut sock, &mut Vec::new());
    });
    let mut up = upstream(&server);
    let ca = ca_file(&cert.pem);
    up.set_ca_file(&ca).unwrap();
    std::fs::remove_file(&ca).unwrap();
    let client = Client::with_pool(Arc::new(Pool::default()));
    let e = block_on(async { client.request_to("GET", &up, "/").send().await }).unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
}
