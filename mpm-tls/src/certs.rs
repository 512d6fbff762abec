//! Certificates and keys: loaded from PEM files, checked (readable, the key
//! matches, in date, names), picked by server name (SNI), and reloaded in
//! place for new handshakes while connections already made keep theirs.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::RwLock;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// One certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPair {
    /// The chain: the server's certificate first, then intermediates.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// A loaded pair: what the handshake sends and signs with, and what
/// `mpm check` prints.
#[derive(Clone)]
pub struct Loaded {
    /// The pair's files.
    pub pair: CertPair,
    /// DNS names it serves (`*.example.com` for a wildcard), from its
    /// subjectAltName, else its common name.
    pub names: Vec<String>,
    /// IP addresses it names.
    pub ips: Vec<IpAddr>,
    /// Not valid before / after (Unix seconds).
    pub not_before: i64,
    /// See `not_before`.
    pub not_after: i64,
    key: Arc<CertifiedKey>,
}

impl fmt::Debug for Loaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loaded")
            .field("cert", &self.pair.cert)
            .field("names", &self.names)
            .field("not_after", &self.not_after)
            .finish()
    }
}

impl Loaded {
    /// One line for `mpm check`: the file, its names, and its expiry.
    pub fn describe(&self) -> String {
        let mut names: Vec<String> = self.names.clone();
        names.extend(self.ips.iter().map(ToString::to_string));
        let left = (self.not_after - now_secs()) / 86_400;
        format!(
            "{}: {}; expires {} (in {left} days)",
            self.pair.cert.display(),
            if names.is_empty() {
                "no names".to_string()
            } else {
                names.join(", ")
            },
            date(self.not_after)
        )
    }
}

/// Every loaded pair, the first the default, with the lookup by name.
#[derive(Debug, Clone)]
pub struct CertStore {
    certs: Vec<Loaded>,
    exact: HashMap<String, usize>,
    /// Wildcards by the suffix after `*.`.
    wildcard: HashMap<String, usize>,
}

impl CertStore {
    /// Load and check every pair; the first is the default (clients that
    /// send no server name get it). One error names the file at fault.
    pub fn load(pairs: &[CertPair]) -> Result<CertStore> {
        if pairs.is_empty() {
            return Err(Error::Config(
                "TLS needs a certificate: --tls-cert FILE --tls-key FILE".into(),
            ));
        }
        let provider = crate::provider();
        let mut certs = Vec::with_capacity(pairs.len());
        for pair in pairs {
            certs.push(load_pair(pair, &provider)?);
        }
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, c) in certs.iter().enumerate() {
            for name in &c.names {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix("*.") {
                    Some(suffix) => wildcard.entry(suffix.to_string()).or_insert(i),
                    None => exact.entry(name).or_insert(i),
                };
            }
        }
        Ok(CertStore {
            certs,
            exact,
            wildcard,
        })
    }

    /// No certificates (a server without TLS).
    pub fn empty() -> CertStore {
        CertStore {
            certs: Vec::new(),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }

    /// The pairs, in the order given.
    pub fn certs(&self) -> &[Loaded] {
        &self.certs
    }

    /// The pair for `name`: an exact name, else a wildcard one label up.
    /// `None` if no certificate names it.
    pub fn find(&self, name: &str) -> Option<&Loaded> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(&i) = self.exact.get(&name) {
            return self.certs.get(i);
        }
        let (_, parent) = name.split_once('.')?;
        self.wildcard.get(parent).and_then(|&i| self.certs.get(i))
    }

    /// The pair for clients that name no server.
    pub fn default_cert(&self) -> &Loaded {
        &self.certs[0]
    }
}

fn load_pair(pair: &CertPair, provider: &rustls::crypto::CryptoProvider) -> Result<Loaded> {
    let cert_text = std::fs::read(&pair.cert).map_err(|source| Error::Read {
        what: "certificate",
        path: pair.cert.clone(),
        source,
    })?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_text)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::invalid("certificate", &pair.cert, format!("not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(Error::invalid(
            "certificate",
            &pair.cert,
            "no CERTIFICATE in the file (expected PEM)",
        ));
    }
    let key_text = std::fs::read(&pair.key).map_err(|source| Error::Read {
        what: "key",
        path: pair.key.clone(),
        source,
    })?;
    let key = PrivateKeyDer::from_pem_slice(&key_text).map_err(|e| {
        Error::invalid(
            "key",
            &pair.key,
            format!("no private key in the file (expected PEM PRIVATE KEY): {e}"),
        )
    })?;
    let certified = CertifiedKey::from_der(chain.clone(), key, provider).map_err(|e| {
        let problem = match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "does not match the certificate {} (a key of another pair?)",
                pair.cert.display()
            ),
            other => format!("cannot be used: {other}"),
        };
        Error::invalid("key", &pair.key, problem)
    })?;
    let (_, x509) = x509_parser::parse_x509_certificate(&chain[0])
        .map_err(|e| Error::invalid("certificate", &pair.cert, format!("not X.509: {e}")))?;
    let validity = x509.validity();
    let (not_before, not_after) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    let now = now_secs();
    if not_after < now {
        return Err(Error::invalid(
            "certificate",
            &pair.cert,
            format!("expired on {}", date(not_after)),
        ));
    }
    if not_before > now {
        return Err(Error::invalid(
            "certificate",
            &pair.cert,
            format!("not valid before {}", date(not_before)),
        ));
    }
    let (mut names, mut ips) = (Vec::new(), Vec::new());
    if let Ok(Some(san)) = x509.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        ips.push(IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        ips.push(IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    if names.is_empty() && ips.is_empty() {
        // No subjectAltName: the common name, as older clients read it.
        if let Some(cn) = x509
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
        {
            names.push(cn.to_string());
        }
    }
    Ok(Loaded {
        pair: pair.clone(),
        names,
        ips,
        not_before,
        not_after,
        key: Arc::new(certified),
    })
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `YYYY-MM-DD` of a Unix time (UTC).
pub(crate) fn date(secs: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The certificates a server hands out, swapped whole on a reload: a
/// handshake takes the set in force when it starts.
#[derive(Debug)]
pub struct Certificates {
    current: RwLock<Arc<CertStore>>,
}

impl Certificates {
    /// Serve `store`.
    pub fn new(store: CertStore) -> Certificates {
        Certificates {
            current: RwLock::new(Arc::new(store)),
        }
    }

    /// The set in force.
    pub fn current(&self) -> Arc<CertStore> {
        Arc::clone(&self.current.read())
    }

    /// Load `pairs` again and serve them from the next handshake on; if one
    /// does not load, keep the set in force and say why.
    pub fn reload(&self, pairs: &[CertPair]) -> Result<()> {
        let store = CertStore::load(pairs)?;
        *self.current.write() = Arc::new(store);
        Ok(())
    }

    /// Does some certificate name `name` (a server name a client sent)?
    pub fn knows(&self, name: &str) -> bool {
        self.current.read().find(name).is_some()
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let store = self.current.read();
        let loaded = match hello.server_name() {
            None => store.default_cert(),
            Some(name) => store.find(name)?,
        };
        Some(Arc::clone(&loaded.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_798_675_200), "2026-12-31");
    }
}
