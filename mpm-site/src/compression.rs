//! Content codings for the static site: `Accept-Encoding` read with its
//! q-values (RFC 9110 §12.5.3), precompressed siblings (`FILE.br`,
//! `FILE.gz`, nginx's `gzip_static` and `brotli_static`), and gzip on the
//! fly with flate2 (nginx's `gzip`, httpd's `mod_deflate`).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use flate2::Compression;

/// A content coding the static site answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Identity,
    Gzip,
    Br,
}

impl Coding {
    /// The `Content-Encoding` token.
    pub(crate) fn token(self) -> Option<&'static str> {
        match self {
            Coding::Identity => None,
            Coding::Gzip => Some("gzip"),
            Coding::Br => Some("br"),
        }
    }

    /// The suffix of a precompressed sibling, and of the validator of a
    /// representation in this coding.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Coding::Identity => "",
            Coding::Gzip => "gz",
            Coding::Br => "br",
        }
    }
}

/// How much a client wants each coding, in thousandths (`q=0.5` is 500);
/// 0 is "not acceptable".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Accepted {
    br: u16,
    gzip: u16,
    identity: u16,
}

impl Accepted {
    /// Read an `Accept-Encoding` field value. No field: identity only (a
    /// client that says nothing gets what every server sends it). An
    /// unlisted coding takes the q of `*` if given, else is refused; an
    /// unlisted identity stays acceptable, after any coding listed.
    pub(crate) fn parse(field: Option<&str>) -> Accepted {
        let Some(field) = field else {
            return Accepted {
                br: 0,
                gzip: 0,
                identity: 1000,
            };
        };
        let (mut br, mut gzip, mut identity, mut star) = (None, None, None, None);
        for item in field.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            if coding.is_empty() {
                continue;
            }
            let mut q = Some(1000);
            for param in parts {
                if let Some((name, value)) = param.split_once('=') {
                    if name.trim().eq_ignore_ascii_case("q") {
                        q = qvalue(value.trim());
                    }
                }
            }
            // A malformed q-value drops the element, as if it were not sent.
            let Some(q) = q else { continue };
            let slot = if coding.eq_ignore_ascii_case("br") {
                &mut br
            } else if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                &mut gzip
            } else if coding.eq_ignore_ascii_case("identity") {
                &mut identity
            } else if coding == "*" {
                &mut star
            } else {
                continue;
            };
            *slot = Some(slot.map_or(q, |old: u16| old.max(q)));
        }
        Accepted {
            br: br.or(star).unwrap_or(0),
            gzip: gzip.or(star).unwrap_or(0),
            // Least preferred, but acceptable, unless excluded.
            identity: identity.or(star).unwrap_or(1),
        }
    }

    /// The coding to answer with, among those `available` (identity always
    /// is): the highest q, ties going to the smaller body (br, then gzip).
    /// When nothing is acceptable, identity (RFC 9110 allows either that or
    /// a 406; every server sends the file).
    pub(crate) fn choose(&self, br: bool, gzip: bool) -> Coding {
        let mut best = (self.identity, Coding::Identity);
        if gzip && self.gzip > 0 && self.gzip >= best.0 {
            best = (self.gzip, Coding::Gzip);
        }
        if br && self.br > 0 && self.br >= best.0 {
            best = (self.br, Coding::Br);
        }
        best.1
    }
}

/// A qvalue in thousandths: `0`, `0.5`, `1`, `1.000` (RFC 9110 §12.4.2).
fn qvalue(s: &str) -> Option<u16> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole = match int {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    let mut thousandths = 0u16;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    let q = whole + thousandths;
    (q <= 1000).then_some(q)
}

/// The types gzip applies to unless configured: text that compresses well.
pub const DEFAULT_GZIP_TYPES: &[&str] = &[
    "text/html",
    "text/css",
    "text/plain",
    "text/javascript",
    "text/markdown",
    "text/csv",
    "text/xml",
    "application/javascript",
    "application/json",
    "application/xml",
    "image/svg+xml",
];

/// On-the-fly gzip for the static site (`--gzip on`).
///
/// A file of a listed type and at least `min_length` bytes is compressed
/// for a client that accepts gzip. A file small enough to be kept in the
/// open-file cache is compressed once, and its compressed body kept with it
/// (a hot page costs no compression after its first request); a larger one
/// is compressed as it is sent, in chunks. Ranges of an on-the-fly body are
/// not served (nginx does the same): a `Range` request is answered from the
/// uncompressed file, as 206 without `Content-Encoding`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gzip {
    /// zlib's level, 1 (fastest) to 9 (smallest).
    pub level: u32,
    /// Smaller files are sent as they are.
    pub min_length: u64,
    /// Media types compressed (`text/html`, `image/*`, or `*` for all),
    /// matched against the file's type without its parameters.
    pub types: Vec<String>,
}

impl Default for Gzip {
    fn default() -> Gzip {
        Gzip {
            level: 6,
            min_length: 256,
            types: DEFAULT_GZIP_TYPES.iter().map(|t| t.to_string()).collect(),
        }
    }
}

impl Gzip {
    /// Is a file of this `Content-Type` and length compressed?
    pub fn applies_to(&self, content_type: &str, len: u64) -> bool {
        len >= self.min_length && type_listed(&self.types, content_type)
    }

    fn compression(&self) -> Compression {
        Compression::new(self.level.clamp(1, 9))
    }

    /// `bytes` gzipped whole; `None` if that saves nothing.
    pub(crate) fn compress(&self, bytes: &[u8]) -> Option<Arc<[u8]>> {
        let mut out = flate2::write::GzEncoder::new(
            Vec::with_capacity(bytes.len() / 2 + 64),
            self.compression(),
        );
        out.write_all(bytes).ok()?;
        let out = out.finish().ok()?;
        (out.len() < bytes.len()).then(|| Arc::from(out))
    }

    /// A reader of `inner` gzipped as it is read.
    pub(crate) fn stream<R: Read + Send + 'static>(&self, inner: R) -> Box<dyn Read + Send> {
        Box::new(flate2::read::GzEncoder::new(inner, self.compression()))
    }
}

/// Is `content_type` (parameters ignored) one of `types` (`*`, `type/*` or
/// `type/subtype`, case-insensitive)?
pub(crate) fn type_listed(types: &[String], content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let major = essence.split('/').next().unwrap_or("");
    types.iter().any(|t| {
        t == "*"
            || t.eq_ignore_ascii_case(essence)
            || t.strip_suffix("/*")
                .is_some_and(|m| m.eq_ignore_ascii_case(major))
    })
}

/// A region of a shared file read with `pread`, so that many readers share
/// one descriptor without moving its position.
pub(crate) struct FileReader {
    file: Arc<File>,
    offset: u64,
    end: u64,
}

impl FileReader {
    /// The first `len` bytes of `file`.
    pub(crate) fn new(file: Arc<File>, len: u64) -> FileReader {
        FileReader {
            file,
            offset: 0,
            end: len,
        }
    }
}

impl Read for FileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.offset);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.offset)?;
        if n == 0 {
            // The file shrank under us: fail rather than send a short body
            // that the chunked framing would present as complete.
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        self.offset += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choose(field: Option<&str>) -> Coding {
        Accepted::parse(field).choose(true, true)
    }

    #[test]
    fn q_values_rank_codings_and_zero_refuses() {
        assert_eq!(choose(None), Coding::Identity);
        assert_eq!(choose(Some("gzip")), Coding::Gzip);
        assert_eq!(choose(Some("gzip, deflate, br")), Coding::Br);
        assert_eq!(choose(Some("br;q=0.5, gzip;q=0.8")), Coding::Gzip);
        assert_eq!(choose(Some("br;q=0, gzip")), Coding::Gzip);
        assert_eq!(choose(Some("gzip;q=0")), Coding::Identity);
        assert_eq!(choose(Some("gzip;q=0.000, br;Q=0")), Coding::Identity);
        assert_eq!(choose(Some("identity")), Coding::Identity);
        assert_eq!(choose(Some("*")), Coding::Br);
        assert_eq!(choose(Some("*;q=0, gzip")), Coding::Gzip);
        assert_eq!(choose(Some("gzip;q=0.5, identity")), Coding::Identity);
        assert_eq!(choose(Some("X-GZIP")), Coding::Gzip);
        // A malformed q drops the element.
        assert_eq!(choose(Some("gzip;q=2")), Coding::Identity);
        assert_eq!(choose(Some("gzip;q=0.5000")), Coding::Identity);
        assert_eq!(choose(Some("gzip;q=abc, br;q=0.1")), Coding::Br);
        // Only what is available is chosen.
        assert_eq!(
            Accepted::parse(Some("br, gzip")).choose(false, true),
            Coding::Gzip
        );
        assert_eq!(
            Accepted::parse(Some("br")).choose(false, true),
            Coding::Identity
        );
    }

    #[test]
    fn qvalues_follow_the_grammar() {
        assert_eq!(qvalue("0"), Some(0));
        assert_eq!(qvalue("0.5"), Some(500));
        assert_eq!(qvalue("0.125"), Some(125));
        assert_eq!(qvalue("1"), Some(1000));
        assert_eq!(qvalue("1.000"), Some(1000));
        assert_eq!(qvalue("1.5"), None);
        assert_eq!(qvalue(".5"), None);
        assert_eq!(qvalue("0.1234"), None);
    }

    #[test]
    fn types_match_exactly_by_major_type_or_all() {
        let t = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(type_listed(&t(&["text/html"]), "text/html; charset=utf-8"));
        assert!(!type_listed(&t(&["text/html"]), "text/css"));
        assert!(type_listed(&t(&["image/*"]), "image/svg+xml"));
        assert!(type_listed(&t(&["*"]), "application/octet-stream"));
        let gzip = Gzip::default();
        assert!(gzip.applies_to("text/css; charset=utf-8", 1000));
        assert!(!gzip.applies_to("text/css; charset=utf-8", 10));
        assert!(!gzip.applies_to("image/png", 100_000));
    }

    #[test]
    fn compressed_bodies_decompress_to_the_input() {
        let text = "the same line again and again\n".repeat(100);
        let gz = Gzip::default().compress(text.as_bytes()).unwrap();
        let mut back = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, text);
        // Nothing to gain: kept as it is.
        assert!(Gzip::default().compress(b"x").is_none());
        let mut streamed = Vec::new();
        Gzip::default()
            .stream(io::Cursor::new(text.clone().into_bytes()))
            .read_to_end(&mut streamed)
            .unwrap();
        let mut back = String::new();
        flate2::read::GzDecoder::new(&streamed[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, text);
    }
}
