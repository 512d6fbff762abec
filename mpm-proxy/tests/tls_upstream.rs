//! An `https://` upstream verified against a route's `ca_file`: a rustls
//! origin written here, its self-signed certificate (rcgen, made per run)
//! the route's CA file. Without it the certificate is refused (502), as
//! verification is never off; active checks verify the same way.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use common::{get, proxy_of, serve};
use mpm_proxy::{ActiveHealth, ProxyRoute};
use rustls::pki_types::PrivateKeyDer;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// An HTTPS origin for 127.0.0.1 answering every request with `hello`,
/// and the PEM of its certificate (its own CA).
fn https_origin() -> (SocketAddr, String) {
    https_origin_asking(None)
}

/// [`https_origin`], refusing a client without a certificate that
/// `client_ca` signed, if given (mutual TLS).
fn https_origin_asking(
    client_ca: Option<rustls::pki_types::CertificateDer<'static>>,
) -> (SocketAddr, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(tls) = ServerConnection::new(config) else {
                    return;
                };
                let mut s = StreamOwned::new(tls, sock);
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                loop {
                    while !head.ends_with(b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(1) => head.push(b[0]),
                            _ => return,
                        }
                    }
                    head.clear();
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
                    if s.write_all(answer).is_err() || s.flush().is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, cert.pem())
}

fn ca_file(pem: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "mpm-proxy-ca-{}-{}.pem",
        std::process::id(),
        pem.len()
    ));
    std::fs::write(&path, pem).unwrap();
    path
}

#[test]
fn an_https_upstream_is_verified_against_the_routes_ca_file() {
    let (addr, pem) = https_origin();
    let ca = ca_file(&pem);
    let url = format!("https://127.0.0.1:{}", addr.port());
    let mut route = ProxyRoute::new("/", &[&url]).unwrap();
    route.ca_file = Some(ca.clone());
    let p = serve(proxy_of(vec![route]));
    let (head, body) = get(p, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"hello");

    // The route's active check verifies the same way.
    let health = ActiveHealth {
        ca_file: Some(ca.clone()),
        ..ActiveHealth::default()
    };
    let probe = mpm_proxy::http_probe();
    assert!(probe(&url.parse().unwrap(), &health));
    let without = ActiveHealth::default();
    assert!(
        !probe(&url.parse().unwrap(), &without),
        "not by the Mozilla roots"
    );
    let _ = std::fs::remove_file(ca);
}

#[test]
fn without_the_ca_file_an_unknown_certificate_is_a_502() {
    let (addr, _) = https_origin();
    let url = format!("https://127.0.0.1:{}", addr.port());
    let logged = mpm_core::error_log::expect("proxy:");
    let p = serve(proxy_of(vec![ProxyRoute::new("/", &[&url]).unwrap()]));
    let (head, _) = get(p, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(logged.count() >= 1);
}

/// Mutual TLS (nginx's `proxy_ssl_certificate`): an upstream that asks for
/// a client certificate gets the route's `client_cert` and answers; a
/// route without one is refused by it (502), as is one whose key is not
/// the certificate's, at start.
#[test]
fn an_upstream_asking_for_a_client_certificate_gets_the_routes() {
    // A CA of the upstream's, and a client certificate it signed.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client = rcgen::CertificateParams::new(vec!["proxy.internal".to_string()])
        .unwrap()
        .signed_by(&client_key, &ca, &ca_key)
        .unwrap();
    let (addr, pem) = https_origin_asking(Some(ca.der().clone()));
    let dir = std::env::temp_dir().join(format!("mpm-proxy-mtls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let cert_file = write("client.pem", &client.pem());
    let key_file = write("client.key", &client_key.serialize_pem());
    let url = format!("https://127.0.0.1:{}", addr.port());
    let mut route = ProxyRoute::new("/", &[&url]).unwrap();
    route.ca_file = Some(write("ca.pem", &pem));
    route.client_cert = Some(mpm_proxy::ClientCert {
        cert: cert_file.clone(),
        key: key_file.clone(),
    });
    let p = serve(proxy_of(vec![route.clone()]));
    let (head, body) = get(p, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"hello");
    // The active check presents it too.
    let health = ActiveHealth {
        ca_file: route.ca_file.clone(),
        client_cert: route.client_cert.clone(),
        ..ActiveHealth::default()
    };
    assert!(mpm_proxy::http_probe()(&url.parse().unwrap(), &health));

    // Without it, the upstream refuses the handshake: 502.
    let logged = mpm_core::error_log::expect("proxy:");
    let mut without = route.clone();
    without.client_cert = None;
    let p = serve(proxy_of(vec![without]));
    let (head, _) = get(p, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(logged.count() >= 1);

    // A key of another certificate is refused when the proxy is built.
    let other = write(
        "other.key",
        &rcgen::KeyPair::generate().unwrap().serialize_pem(),
    );
    let mut mismatched = route;
    mismatched.client_cert = Some(mpm_proxy::ClientCert {
        cert: cert_file,
        key: other,
    });
    let table = mpm_proxy::RouteTable::new(vec![mismatched]);
    let state =
        mpm_proxy::ProxyState::with_slots(&table, &mpm_proxy::Slots::new(4).unwrap()).unwrap();
    let e = mpm_proxy::ReverseProxy::with_state(table, state, mpm_proxy::PoolSettings::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("do not make an identity"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}
