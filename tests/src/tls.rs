//! The suite's TLS: a certificate authority and certificates made for this
//! run (with rcgen; no private key is ever committed), the transport a
//! test runs over, and clients that speak it.

use std::cell::Cell;
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// What a test's servers listen with and its clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Plain TCP.
    Plain,
    /// TLS: [`Server::start`](crate::Server::start) listens with
    /// `--listen https://127.0.0.1:0` and the suite's certificate.
    Tls,
}

impl Transport {
    /// `plain` or `tls`, as `mpm_suite!` names its modules.
    pub fn named(name: &str) -> Transport {
        match name {
            "tls" => Transport::Tls,
            _ => Transport::Plain,
        }
    }
}

thread_local! {
    static CURRENT: Cell<Transport> = const { Cell::new(Transport::Plain) };
}

/// The transport of this thread's test (plain unless set).
pub fn transport() -> Transport {
    CURRENT.with(Cell::get)
}

/// Run `f` with servers started over `t`.
pub fn with_transport<R>(t: Transport, f: impl FnOnce() -> R) -> R {
    let before = CURRENT.with(|c| c.replace(t));
    struct Restore(Transport);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// Addresses of TLS servers: every client of the harness connecting there
/// speaks TLS (threads a test starts included).
static TLS_ADDRS: OnceLock<Mutex<HashSet<SocketAddr>>> = OnceLock::new();

fn addrs() -> std::sync::MutexGuard<'static, HashSet<SocketAddr>> {
    TLS_ADDRS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Clients connecting to `addr` speak TLS, or no longer do.
pub fn register(addr: SocketAddr, tls: bool) {
    if tls {
        addrs().insert(addr);
    } else {
        addrs().remove(&addr);
    }
}

/// Does a TLS server listen on `addr`?
pub fn is_registered(addr: SocketAddr) -> bool {
    addrs().contains(&addr)
}

/// A certificate authority made for this run, and what it signs.
pub struct Material {
    /// Where the files are (removed at exit with the rest of the temp dir).
    pub dir: PathBuf,
    /// The authority's certificate (for `curl --cacert`).
    pub ca: PathBuf,
    /// A certificate for `localhost` and `127.0.0.1`, and its key.
    pub cert: PathBuf,
    /// See `cert`.
    pub key: PathBuf,
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material").field("dir", &self.dir).finish()
    }
}

static MATERIAL: OnceLock<Material> = OnceLock::new();
static CLEANUP: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_material() {
    if let Some(dir) = CLEANUP.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The suite's authority and `localhost` certificate, made once per test
/// process.
pub fn material() -> &'static Material {
    MATERIAL.get_or_init(|| {
        // Private to this user (the keys are in it), and gone at exit.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("mpm-tls-{}-{nanos}", std::process::id()));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .expect("a directory for the test certificates");
        }
        let _ = CLEANUP.set(dir.clone());
        // Removed when the test binary exits, after its last test.
        let _ = mpm_sys::at_exit::at_exit(remove_material);
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "mpm test authority");
        let ca_cert = params.self_signed(&ca_key).expect("the CA certificate");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).expect("writing the CA");
        let mut m = Material {
            dir,
            ca,
            cert: PathBuf::new(),
            key: PathBuf::new(),
            ca_cert,
            ca_key,
        };
        let (cert, key) = m.issue("localhost", &["localhost", "127.0.0.1"]);
        m.cert = cert;
        m.key = key;
        m
    })
}

impl Material {
    /// A certificate for `names` (DNS names or IP addresses) signed by the
    /// suite's authority, written as `LABEL.pem` and `LABEL.key`.
    pub fn issue(&self, label: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        self.issue_with(label, names, |_| {})
    }

    /// Like [`issue`](Self::issue), after `adjust` has changed the
    /// certificate's parameters (its dates, say).
    pub fn issue_with(
        &self,
        label: &str,
        names: &[&str],
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("a key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("certificate params");
        params.distinguished_name.push(DnType::CommonName, label);
        adjust(&mut params);
        let cert = params
            .signed_by(&key, &self.ca_cert, &self.ca_key)
            .expect("signing a certificate");
        // A file pair of its own each time: tests running at once (every
        // model's copy of one test) issue under the same label, and a pair
        // written over by another's would not match.
        static ISSUED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = ISSUED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (cert_path, key_path) = (
            self.dir.join(format!("{label}-{n}.pem")),
            self.dir.join(format!("{label}-{n}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("writing a certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("writing a key");
        (cert_path, key_path)
    }
}

/// A rustls client configuration trusting the suite's authority.
pub fn client_config() -> Arc<rustls::ClientConfig> {
    client_config_with(|_| {})
}

/// Like [`client_config`], adjusted (versions, ALPN, session storage).
pub fn client_config_with(
    adjust: impl FnOnce(&mut rustls::ClientConfig),
) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls_pki_types::CertificateDer::from_pem_file(&material().ca)
        .expect("reading the suite's CA");
    roots.add(ca).expect("the suite's CA as a root");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("default versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    adjust(&mut config);
    Arc::new(config)
}

/// A client socket, plain or TLS.
#[derive(Debug)]
pub enum Io {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Io {
    /// Do a TLS handshake on `tcp` for `name` with the suite's authority.
    pub fn handshake(tcp: TcpStream, name: &str) -> io::Result<Io> {
        Io::handshake_with(tcp, name, client_config())
    }

    /// Do a TLS handshake on `tcp` for `name` with `config`.
    pub fn handshake_with(
        tcp: TcpStream,
        name: &str,
        config: Arc<rustls::ClientConfig>,
    ) -> io::Result<Io> {
        let name = rustls_pki_types::ServerName::try_from(name.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(Io::Tls(Box::new(s)))
    }

    /// The TCP socket under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s,
            Io::Tls(s) => s.get_ref(),
        }
    }

    /// The TLS connection, if it is one.
    pub fn tls(&self) -> Option<&rustls::ClientConnection> {
        match self {
            Io::Plain(_) => None,
            Io::Tls(s) => Some(&s.conn),
        }
    }
}

impl Read for Io {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Io::Plain(s) => s.read(buf),
            // A server that closes without close_notify (a timeout) has
            // closed all the same.
            Io::Tls(s) => match s.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Io {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Io::Plain(s) => s.write(buf),
            Io::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Io::Plain(s) => s.flush(),
            Io::Tls(s) => s.flush(),
        }
    }
}
