//! TLS to upstreams: rustls's client over the non-blocking socket.
//!
//! Certificates are always verified: against the Mozilla roots
//! (webpki-roots) by default, or against the CA certificates of a PEM file
//! that replaces them. There is deliberately no option to turn
//! verification off: an internal upstream with a self-signed certificate
//! is served by giving that certificate as the CA file.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use mpm_core::waiting::{ready, Await};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::error::{Error, Phase, Result};

/// Plain text rustls keeps for the socket at most: a write past it waits
/// for the socket, so a fast producer's body does not pile up here.
const PLAINTEXT_LIMIT: usize = 64 * 1024;

/// A rustls client configuration, shared (cheap to clone).
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<ClientConfig>,
}

impl TlsConfig {
    /// Verify against the Mozilla roots; built once per process.
    pub fn webpki_roots() -> TlsConfig {
        static DEFAULT: OnceLock<TlsConfig> = OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                let roots = RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                };
                TlsConfig::from_roots(roots)
            })
            .clone()
    }

    /// Verify against the CA certificates of the PEM file at `path` (and
    /// only those).
    pub fn with_ca_file(path: &Path) -> Result<TlsConfig> {
        TlsConfig::new(Some(path), None)
    }

    /// Verify against the CA file at `ca_file` (the Mozilla roots without
    /// one), and present the certificate chain and private key of the PEM
    /// files `client` names to an upstream that asks for one (mutual TLS,
    /// nginx's `proxy_ssl_certificate` and `proxy_ssl_certificate_key`).
    pub fn new(ca_file: Option<&Path>, client: Option<(&Path, &Path)>) -> Result<TlsConfig> {
        let roots = match ca_file {
            Some(path) => ca_roots(path)?,
            None => RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        };
        let client = client.map(|(c, k)| client_identity(c, k)).transpose()?;
        TlsConfig::build(roots, client)
    }
}

/// The CA certificates of the PEM file at `path`.
fn ca_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path, "CA")? {
        roots.add(cert).map_err(|e| {
            Error::Tls(format!(
                "the CA file {} holds a certificate rustls refuses: {e}",
                path.display()
            ))
        })?;
    }
    Ok(roots)
}

/// The certificates of the `what` PEM file at `path`: at least one.
fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(&read_pem(path, what)?)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Tls(format!(
                "the {what} file {} is not valid PEM: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::Tls(format!(
            "the {what} file {} holds no CERTIFICATE block",
            path.display()
        )));
    }
    Ok(certs)
}

/// The bytes of the `what` PEM file at `path` (`CA`, `client key`, ...).
fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::Tls(format!(
            "the {what} file {} cannot be read: {e}",
            path.display()
        ))
    })
}

/// A client certificate chain and its key, from PEM files.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The certificate chain of the PEM file `cert` and the private key of
/// `key`, checked to belong together.
fn client_identity(cert: &Path, key: &Path) -> Result<Identity> {
    let chain = read_certs(cert, "client certificate")?;
    let private = PrivateKeyDer::from_pem_slice(&read_pem(key, "client key")?).map_err(|e| {
        Error::Tls(format!(
            "the client key file {} holds no private key rustls reads: {e}",
            key.display()
        ))
    })?;
    Ok((chain, private))
}

impl TlsConfig {
    /// The Mozilla roots, without a client certificate.
    fn from_roots(roots: RootCertStore) -> TlsConfig {
        match TlsConfig::build(roots, None) {
            Ok(c) => c,
            // Without a client certificate there is nothing to refuse.
            Err(e) => unreachable!("a client configuration without a certificate: {e}"),
        }
    }

    fn build(roots: RootCertStore, client: Option<Identity>) -> Result<TlsConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = match ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
        {
            Ok(b) => b,
            // The ring provider supports the default versions; this is
            // rustls's own configuration, not a user's.
            Err(e) => unreachable!("ring supports TLS 1.2 and 1.3: {e}"),
        };
        let builder = builder.with_root_certificates(roots);
        let mut config = match client {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
                Error::Tls(format!(
                    "the client certificate and key do not make an identity rustls takes \
                     (a key of another certificate?): {e}"
                ))
            })?,
        };
        // HTTP/1.1 is all this client speaks: say so, so that a server
        // offering h2 does not pick it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsConfig {
            config: Arc::new(config),
        })
    }

    /// Whether two handles share one configuration (the pool's key treats
    /// them as one).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.config) as usize
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsConfig")
    }
}

/// A TLS session over a non-blocking socket.
pub(crate) struct TlsStream {
    pub(crate) tls: ClientConnection,
    pub(crate) sock: TcpStream,
}

impl TlsStream {
    /// Run the handshake with `server_name`, waiting for the socket with
    /// awaits, until `until`.
    pub(crate) async fn handshake(
        sock: TcpStream,
        server_name: &str,
        config: &TlsConfig,
        until: Instant,
    ) -> Result<TlsStream> {
        let name = ServerName::try_from(server_name.to_string()).map_err(|e| {
            Error::Tls(format!(
                "{server_name:?} is not a valid TLS server name: {e}"
            ))
        })?;
        let mut tls = ClientConnection::new(config.config.clone(), name)
            .map_err(|e| Error::Tls(format!("the TLS session cannot start: {e}")))?;
        tls.set_buffer_limit(Some(PLAINTEXT_LIMIT));
        let mut s = TlsStream { tls, sock };
        let fd = s.sock.as_raw_fd();
        let failed = |e: rustls::Error| {
            let hint = match e {
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                    " (give the certificate of the CA that signed it as the upstream's CA file)"
                }
                _ => "",
            };
            Error::Tls(format!(
                "the handshake with {server_name} failed: {e}{hint}"
            ))
        };
        while s.tls.is_handshaking() || s.tls.wants_write() {
            if s.tls.wants_write() {
                match s.tls.write_tls(&mut s.sock) {
                    Ok(_) => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ready(Await::writable(fd, until))
                            .await
                            .map_err(|e| Error::io_in(Phase::Connect, e))?;
                        continue;
                    }
                    Err(e) => return Err(handshake_io(e)),
                }
            }
            if !s.tls.is_handshaking() {
                break;
            }
            match s.tls.read_tls(&mut s.sock) {
                Ok(0) => {
                    return Err(Error::Tls(format!(
                        "{server_name} closed the connection during the handshake (is it TLS on that port?)"
                    )))
                }
                Ok(_) => {
                    if let Err(e) = s.tls.process_new_packets() {
                        // Tell the server why, if the socket takes it.
                        let _ = s.tls.write_tls(&mut s.sock);
                        return Err(failed(e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready(Await::readable(fd, until))
                        .await
                        .map_err(|e| Error::io_in(Phase::Connect, e))?;
                }
                Err(e) => return Err(handshake_io(e)),
            }
        }
        Ok(s)
    }

    /// Read plain text: `WouldBlock` when no record is complete; `Ok(0)`
    /// only after the peer's close_notify. A TCP close without one is an
    /// `UnexpectedEof` error: it may be a truncation, and a body that ends
    /// at the close is whole only after a close_notify (RFC 9112 §9.8).
    pub(crate) fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(no_close_notify()),
                Err(e) => return Err(e),
            }
            // Records rustls wants out (a key update's answer) go first;
            // a full socket here is no reason not to read.
            let _ = self.try_flush();
            match self.tls.read_tls(&mut self.sock) {
                Ok(0) => {
                    // End of stream: process_new_packets makes the reader
                    // report it: `Ok(0)` after a close_notify, else
                    // `UnexpectedEof`.
                    self.process()?;
                    return match self.tls.reader().read(buf) {
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::UnexpectedEof | io::ErrorKind::WouldBlock
                            ) =>
                        {
                            Err(no_close_notify())
                        }
                        other => other,
                    };
                }
                Ok(_) => self.process()?,
                Err(e) => return Err(e),
            }
        }
    }

    fn process(&mut self) -> io::Result<()> {
        if let Err(e) = self.tls.process_new_packets() {
            let _ = self.tls.write_tls(&mut self.sock);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        Ok(())
    }

    /// Write plain text: as much as rustls's bounded buffer takes after
    /// pending records went to the socket; `WouldBlock` when none.
    pub(crate) fn try_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match self.try_flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        let n = self.tls.writer().write(buf)?;
        match self.try_flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Say the plain text is over (close_notify), then shut the socket's
    /// writing half.
    pub(crate) fn shutdown_write(&mut self) -> io::Result<()> {
        self.tls.send_close_notify();
        match self.try_flush() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => other?,
        }
        self.sock.shutdown(std::net::Shutdown::Write)
    }

    /// Send the records rustls holds: `WouldBlock` while some remain.
    pub(crate) fn try_flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            self.tls.write_tls(&mut self.sock)?;
        }
        Ok(())
    }
}

impl Drop for TlsStream {
    fn drop(&mut self) {
        // Say goodbye properly if the socket takes it at once (an idle
        // connection closed by the pool); never wait for it.
        self.tls.send_close_notify();
        let _ = self.try_flush();
    }
}

/// The peer's TCP close without a close_notify before it.
fn no_close_notify() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the upstream closed the connection without TLS close_notify (what it sent may be cut short)",
    )
}

fn handshake_io(e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::ConnectionReset {
        Error::Tls(format!(
            "the upstream reset the connection during the handshake: {e} (is it TLS on that port?)"
        ))
    } else {
        Error::Io(e)
    }
}
