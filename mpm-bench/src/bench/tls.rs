//! `https://` for the bench: a rustls client (the ring provider, as the
//! server's), verifying with `--cacert FILE` or not at all (`--insecure`),
//! and handshake errors counted by kind.

use std::path::Path;
use std::sync::Arc;

use mpm_core::Error;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

/// What a connection of the load is made with.
#[derive(Debug, Clone)]
pub struct TlsClient {
    /// The rustls configuration (sessions kept only with `--tls-resume`).
    pub config: Arc<ClientConfig>,
    /// The server name sent (SNI) and verified.
    pub name: ServerName<'static>,
}

impl TlsClient {
    /// The same, offering `h2` before `http/1.1` by ALPN (an HTTP/2 load
    /// checks which the server chose: `http/1.1` is a refusal).
    pub fn offering_h2(&self) -> TlsClient {
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsClient {
            config: Arc::new(config),
            name: self.name.clone(),
        }
    }
}

/// The client configuration the flags ask for.
pub(crate) fn client(
    host: &str,
    cacert: Option<&Path>,
    insecure: bool,
    resume: bool,
) -> Result<TlsClient, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(format!("TLS: {e}")))?;
    let mut config = match (cacert, insecure) {
        (_, true) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        (Some(path), false) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|i| i.collect())
                .map_err(|e| Error::config(format!("--cacert {}: {e}", path.display())))?;
            if certs.is_empty() {
                return Err(Error::config(format!(
                    "--cacert {}: no certificate in the file (expected PEM)",
                    path.display()
                )));
            }
            for c in &certs {
                roots
                    .add(c.clone())
                    .map_err(|e| Error::config(format!("--cacert {}: {e}", path.display())))?;
            }
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| Error::config(format!("--cacert {}: {e}", path.display())))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Pinned {
                    webpki,
                    certs,
                    provider,
                }))
                .with_no_client_auth()
        }
        (None, false) => {
            return Err(Error::config(
                "https: give the server's authority with --cacert FILE, or --insecure",
            ))
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        // Every new connection a full handshake, as ab makes them.
        config.resumption = rustls::client::Resumption::disabled();
    }
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| Error::config(format!("https: {host}: not a server name: {e}")))?;
    Ok(TlsClient {
        config: Arc::new(config),
        name,
    })
}

/// The kind a failed handshake is counted as.
pub(crate) fn kind(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(c) => format!("certificate: {c:?}"),
        rustls::Error::AlertReceived(a) => format!("alert: {a:?}"),
        rustls::Error::PeerIncompatible(p) => format!("incompatible: {p:?}"),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "bad message".to_string()
        }
        other => format!("{other:?}").chars().take(40).collect(),
    }
}

/// `--cacert`: the authorities in the file, and also a self-signed
/// certificate given there itself (as `openssl req -x509` makes one, marked
/// a CA, which WebPKI refuses as a server's own): curl takes it too.
#[derive(Debug)]
struct Pinned {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    certs: Vec<CertificateDer<'static>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(_) if self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `--insecure`: any certificate is taken, but signatures are still
/// checked (the work a real client does is measured).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
