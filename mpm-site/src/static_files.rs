//! Serving a directory: confinement, index files, validators, conditional
//! and range requests, content codings, listings and caching headers.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mpm_http::allocator_api2::vec::Vec as PoolVec;
use mpm_http::{Body, FileBody, HttpHandler, Part, Request, RequestPool, Response};
use mpm_sys::open_beneath::Purpose;
use parking_lot::RwLock;

use crate::autoindex::{self, Listing};
use crate::compression::{Accepted, Coding, FileReader, Gzip};
use crate::error::{Error, Result};
use crate::expires::CacheRules;
use crate::mime;

/// Whether names starting with a dot are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dotfiles {
    /// 403 for any path segment starting with a dot, except `.well-known`
    /// (RFC 8615): `.git`, `.env` and `.htpasswd` stay private.
    #[default]
    Deny,
    /// Serve them like any other file.
    Allow,
}

/// `deny` or `allow`; `off` and `on` are taken for them too.
impl mpm_core::Choice for Dotfiles {
    const ALL: &'static [Self] = &[Dotfiles::Deny, Dotfiles::Allow];

    fn name(self) -> &'static str {
        match self {
            Dotfiles::Deny => "deny",
            Dotfiles::Allow => "allow",
        }
    }

    fn aliases() -> &'static [(&'static str, Self)] {
        &[("off", Dotfiles::Deny), ("on", Dotfiles::Allow)]
    }
}

/// An [`HttpHandler`] that serves the files under a document root.
///
/// * The path is percent-decoded and normalised (`.` and `..` segments
///   resolved); a path that climbs above the root, contains NUL or an encoded
///   `/`, or resolves through a symbolic link to outside the root is refused.
///   The kernel enforces the last with `openat2(RESOLVE_BENEATH)`.
/// * A directory is answered by its `index.html`, after a 301 that adds the
///   trailing slash; without one, by a listing if
///   [`autoindex`](Self::autoindex) is on (else 403).
/// * `ETag` and `Last-Modified` on every file; the preconditions of RFC 9110
///   §13 in the order of §13.2.2: `If-Match` (strong comparison) and
///   `If-Unmodified-Since` answer 412, `If-None-Match` and
///   `If-Modified-Since` 304; a byte `Range` answers 206 (or 416), honouring
///   `If-Range`; several ranges answer `multipart/byteranges`, sorted and
///   merged where they overlap or touch, and more than 100 the whole file.
/// * `GET` and `HEAD` only: 405 with `Allow` for other methods HTTP defines,
///   501 for those it does not (`OPTIONS` and `OPTIONS *` answer 204).
/// * Off unless asked for: precompressed siblings
///   ([`precompressed`](Self::precompressed)), gzip on the fly
///   ([`gzip`](Self::gzip)), `Cache-Control` by extension or type
///   ([`expires`](Self::expires)). A response that depends on
///   `Accept-Encoding` says so with `Vary`, and each coding has an `ETag` of
///   its own, which the preconditions and `If-Range` compare with.
///
/// Open files are cached for one second, as nginx's `open_file_cache`
/// does: a hit costs no `open` or `close`, and the body still goes out by
/// `sendfile` from the shared descriptor; one `fstat` checks that its size
/// is still the one announced (a file truncated in place is answered with
/// its new length). A file replaced on disk is seen within that time. Each
/// clone (each worker thread) keeps its own table, read with no lock; a
/// miss there looks in a table the clones share, split into shards each
/// behind its own lock, and only a miss there too opens the file. A hot
/// file therefore costs no lock and writes no cache line another core
/// reads, but for the reference counts of its descriptor and in-memory body.
///
/// Files no larger than [`in_memory_up_to`](Self::in_memory_up_to) (16 KiB
/// unless set) are also read into the cache, and their bodies written with
/// the response head in one `write`, as httpd's `EnableMMAP` serves small
/// files: for a small page that halves the system calls of a keep-alive
/// request. Larger files, and ranges, go by `sendfile`.
///
/// Cheap to clone: clones share the open root directory and the shared
/// table; each starts with an empty table of its own.
#[derive(Debug)]
pub struct StaticFiles {
    root: Arc<OwnedFd>,
    /// This worker's entries: a copy of each, so that a hit touches
    /// nothing another thread writes.
    local: HashMap<Box<str>, Arc<OpenFile>>,
    /// Every worker's entries.
    shared: Arc<SharedCache>,
    in_memory: u64,
    dotfiles: bool,
    precompressed: bool,
    gzip: Option<Arc<Gzip>>,
    autoindex: bool,
    expires: Arc<CacheRules>,
}

impl Clone for StaticFiles {
    fn clone(&self) -> Self {
        StaticFiles {
            root: Arc::clone(&self.root),
            local: HashMap::new(),
            shared: Arc::clone(&self.shared),
            in_memory: self.in_memory,
            dotfiles: self.dotfiles,
            precompressed: self.precompressed,
            gzip: self.gzip.clone(),
            autoindex: self.autoindex,
            expires: Arc::clone(&self.expires),
        }
    }
}

/// Shards of the shared table: workers refreshing different files take
/// different locks.
const SHARDS: usize = 16;

/// The open files every worker of a process has looked up.
#[derive(Debug, Default)]
struct SharedCache {
    shards: [RwLock<HashMap<Box<str>, Arc<OpenFile>>>; SHARDS],
    hasher: RandomState,
}

impl SharedCache {
    fn shard(&self, path: &str) -> &RwLock<HashMap<Box<str>, Arc<OpenFile>>> {
        let i = self.hasher.hash_one(path) as usize % SHARDS;
        &self.shards[i]
    }

    /// The fresh entry for `path`, if any.
    fn get(&self, path: &str) -> Option<Arc<OpenFile>> {
        self.shard(path)
            .read()
            .get(path)
            .filter(|f| f.is_fresh())
            .cloned()
    }

    /// The entry for `path`, fresh or not.
    fn entry(&self, path: &str) -> Option<Arc<OpenFile>> {
        self.shard(path).read().get(path).cloned()
    }

    fn insert(&self, path: &str, file: Arc<OpenFile>) {
        let mut shard = self.shard(path).write();
        if let Some(entry) = shard.get_mut(path) {
            *entry = file;
            return;
        }
        if shard.len() >= CACHE_ENTRIES / SHARDS {
            shard.clear();
        }
        shard.insert(path.into(), file);
    }
}

/// The default for [`StaticFiles::in_memory_up_to`].
pub const DEFAULT_IN_MEMORY: u64 = 16 * 1024;

/// How long an open-file cache entry is trusted before the file is opened
/// and checked again.
pub(crate) const CACHE_VALID: Duration = Duration::from_secs(1);

/// The most files kept open by a worker's table (and by the shared one);
/// when full it starts again empty.
const CACHE_ENTRIES: usize = 256;

/// A regular file ready to serve, with its validators formatted once.
#[derive(Debug)]
struct OpenFile {
    file: Arc<File>,
    len: u64,
    /// The whole file, when it is small enough to keep.
    contents: Option<Arc<[u8]>>,
    mtime: SystemTime,
    etag: Arc<str>,
    last_modified: Arc<str>,
    content_type: &'static str,
    opened: Instant,
    /// `FILE.br` and `FILE.gz`, when precompressed siblings are served.
    br: Option<Sibling>,
    gz: Option<Sibling>,
    /// Gzip on the fly applies to this file.
    gzip: bool,
    /// The file gzipped whole, once, when it is kept in memory (`None`
    /// inside when that saved nothing).
    gzipped: Arc<OnceLock<Option<Arc<[u8]>>>>,
    /// The validator of the gzipped file: the file's, marked.
    gzip_etag: Arc<str>,
    /// `Cache-Control` by the expires rules.
    cache_control: Option<Arc<str>>,
    /// Size and modification time when opened: checked on a cache hit of a
    /// body sent from the descriptor.
    stamp: (u64, i64, i64),
}

impl OpenFile {
    /// Is what the descriptor holds still what was announced? A copy in
    /// memory always is; a body sent from the file is checked with one
    /// `fstat`, so that a file truncated or rewritten in place is answered
    /// with its new length (what `sendfile` will actually send), not with a
    /// `Content-Length` cached a moment ago.
    fn unchanged(&self) -> bool {
        self.contents.is_some() || self.file.metadata().is_ok_and(|m| stamp(&m) == self.stamp)
    }
}

fn stamp(meta: &std::fs::Metadata) -> (u64, i64, i64) {
    (meta.len(), meta.mtime(), meta.mtime_nsec())
}

impl OpenFile {
    /// Does the answer depend on `Accept-Encoding`?
    fn varies(&self) -> bool {
        self.gzip || self.br.is_some() || self.gz.is_some()
    }

    /// The coding to answer `req` with.
    fn coding(&self, req: &Request<'_>) -> Coding {
        if !self.varies() {
            return Coding::Identity;
        }
        Accepted::parse(req.header_str("accept-encoding"))
            .choose(self.br.is_some(), self.gz.is_some() || self.gzip)
    }

    /// Would answering `req` compress this file now (on the fly, not from
    /// a sibling nor from the cached compressed body)?
    fn compresses_now(&self, req: &Request<'_>) -> bool {
        self.gzip
            && self.gz.is_none()
            && self.coding(req) == Coding::Gzip
            && !is_range_request(req)
            && (self.contents.is_none() || self.gzipped.get().is_none())
    }

    fn is_fresh(&self) -> bool {
        self.opened.elapsed() < CACHE_VALID
    }

    /// A worker's own copy: the descriptors, the bodies and the compressed
    /// body (compressed once, by whichever worker needs it first) are
    /// shared; the rest (and the count of references to it) is the worker's.
    fn worker_copy(&self) -> OpenFile {
        OpenFile {
            file: Arc::clone(&self.file),
            len: self.len,
            contents: self.contents.clone(),
            mtime: self.mtime,
            etag: Arc::from(&*self.etag),
            last_modified: Arc::from(&*self.last_modified),
            content_type: self.content_type,
            opened: self.opened,
            br: self.br.clone(),
            gz: self.gz.clone(),
            gzip: self.gzip,
            gzipped: Arc::clone(&self.gzipped),
            gzip_etag: Arc::from(&*self.gzip_etag),
            cache_control: self.cache_control.as_deref().map(Arc::from),
            stamp: self.stamp,
        }
    }
}

/// A precompressed sibling of a file (`style.css.gz` beside `style.css`).
#[derive(Debug, Clone)]
struct Sibling {
    file: Arc<File>,
    len: u64,
    contents: Option<Arc<[u8]>>,
    etag: Arc<str>,
}

/// The bytes a response is made of: the file in one coding.
struct Representation<'f> {
    coding: Coding,
    etag: &'f Arc<str>,
    body: Source<'f>,
}

enum Source<'f> {
    /// A file on disk, the original or a sibling: ranges can be cut from it.
    File(OnDisk<'f>),
    /// The file gzipped whole, from the cache.
    Gzipped(Arc<[u8]>),
    /// The file gzipped as it is sent.
    GzipStream,
}

impl StaticFiles {
    /// Serve `docroot`, which is opened now.
    pub fn new(docroot: &Path) -> Result<StaticFiles> {
        let file = File::open(docroot).map_err(|e| Error::docroot(docroot, e))?;
        if !file
            .metadata()
            .map_err(|e| Error::docroot(docroot, e))?
            .is_dir()
        {
            return Err(Error::docroot(
                docroot,
                io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
            ));
        }
        Ok(StaticFiles {
            root: Arc::new(OwnedFd::from(file)),
            local: HashMap::new(),
            shared: Arc::default(),
            in_memory: DEFAULT_IN_MEMORY,
            dotfiles: false,
            precompressed: false,
            gzip: None,
            autoindex: false,
            expires: Arc::default(),
        })
    }

    /// Serve `FILE.br` or `FILE.gz` in place of `FILE` to a client that
    /// accepts that coding (nginx's `brotli_static` and `gzip_static`),
    /// with `Content-Encoding`, the file's type, and a validator of the
    /// sibling's own. A sibling older than the file is stale and not used.
    /// Off by default.
    pub fn precompressed(mut self, on: bool) -> StaticFiles {
        self.precompressed = on;
        self
    }

    /// Gzip files on the fly for clients that accept it (see [`Gzip`]);
    /// `None` (the default) for never. A precompressed `.gz` sibling, when
    /// served, comes first.
    pub fn gzip(mut self, gzip: Option<Gzip>) -> StaticFiles {
        self.gzip = gzip.map(Arc::new);
        self
    }

    /// List a directory that has no `index.html`, as HTML or, with
    /// `?format=json`, JSON: names escaped, directories first then by name,
    /// with size and modification time. Names hidden by the dotfiles
    /// setting, and symbolic links that leave the root, are not listed.
    /// Off by default: such a directory answers 403.
    pub fn autoindex(mut self, on: bool) -> StaticFiles {
        self.autoindex = on;
        self
    }

    /// `Cache-Control` for files, by extension or media type (nginx's
    /// `expires`), on their 200, 206 and 304 answers.
    pub fn expires(mut self, rules: CacheRules) -> StaticFiles {
        self.expires = Arc::new(rules);
        self
    }

    /// Read a whole file by its URL path, as it would be served (the same
    /// confinement and dotfiles rules): its bytes and type, or the status
    /// a request for it would get. For pages kept in memory, such as error
    /// pages; at most `max` bytes (413 beyond).
    pub fn read(&self, path: &str, max: u64) -> std::result::Result<(Vec<u8>, &'static str), u16> {
        let f = self
            .resolve(path, None, RequestPool::heap())
            .map_err(|r| r.status())?;
        if f.len > max {
            return Err(413);
        }
        let mut buf = vec![0; f.len as usize];
        read_exact_at(&f.file, &mut buf).map_err(|_| 500u16)?;
        Ok((buf, f.content_type))
    }

    /// Serve names that start with a dot (`.env`, `.git/`)? Off by default:
    /// such paths answer 403, except `.well-known` (RFC 8615).
    pub fn serve_dotfiles(mut self, allow: bool) -> StaticFiles {
        self.dotfiles = allow;
        self
    }

    /// Keep files of at most `bytes` in memory and send them with the head
    /// in one write; 0 sends every body by `sendfile` (or read+write).
    pub fn in_memory_up_to(mut self, bytes: u64) -> StaticFiles {
        self.in_memory = bytes;
        self
    }

    /// The file a request path names: from this worker's table when fresh,
    /// else from the shared one, else opened (and put in both).
    // The error is the response itself, fields inline; it is built on the
    // slow path only, where one move costs nothing next to open(2).
    #[allow(clippy::result_large_err)]
    fn lookup(&mut self, req: &Request<'_>) -> std::result::Result<Arc<OpenFile>, Response> {
        let raw = req.path();
        if let Some(hit) = self.local.get(raw) {
            if hit.is_fresh() && hit.unchanged() {
                return Ok(Arc::clone(hit));
            }
        }
        let found = match self.shared.get(raw).filter(|f| f.unchanged()) {
            Some(found) => found,
            None => {
                let stale = self.shared.entry(raw);
                let mut opened = self.resolve(raw, Some(req), req.pool())?;
                // Unchanged since it was cached: its compressed body still holds.
                if let Some(old) = stale.filter(|old| old.etag == opened.etag) {
                    opened.gzipped = Arc::clone(&old.gzipped);
                }
                let found = Arc::new(opened);
                self.shared.insert(raw, Arc::clone(&found));
                found
            }
        };
        match self.local.get_mut(raw) {
            Some(slot) => {
                // The same file as our stale copy (size and time unchanged):
                // trust the copy for another second, at no allocation.
                match Arc::get_mut(slot) {
                    Some(mine) if mine.stamp == found.stamp && mine.etag == found.etag => {
                        mine.opened = found.opened
                    }
                    _ => *slot = Arc::new(found.worker_copy()),
                }
                Ok(Arc::clone(slot))
            }
            None => {
                if self.local.len() >= CACHE_ENTRIES {
                    self.local.clear();
                }
                let mine = Arc::new(found.worker_copy());
                self.local.insert(raw.into(), Arc::clone(&mine));
                Ok(mine)
            }
        }
    }

    /// Map a request path to an open regular file, or the response to
    /// answer instead (an error, a redirect, a listing of `req`'s directory).
    #[allow(clippy::result_large_err)]
    fn resolve(
        &self,
        raw: &str,
        req: Option<&Request<'_>>,
        pool: RequestPool<'_>,
    ) -> std::result::Result<OpenFile, Response> {
        let query = req.and_then(|r| r.query());
        let rel = clean_path_in(raw, pool).map_err(Response::error)?;
        let rel = std::str::from_utf8(&rel).map_err(|_| Response::error(404))?;
        if !self.dotfiles
            && rel
                .split('/')
                .any(|seg| seg.starts_with('.') && seg != ".well-known")
        {
            return Err(Response::error(403));
        }
        let file = self
            .open(rel, pool)
            .map_err(|e| Response::error(open_status(&e)))?;
        let meta = file.metadata().map_err(|_| Response::error(500))?;
        // The file served and its path: the index, for a directory.
        let mut index = PoolVec::new_in(pool);
        let (file, meta, served) = if meta.is_dir() {
            if !raw.ends_with('/') {
                let mut to = format!("{raw}/");
                if let Some(q) = query {
                    to.push('?');
                    to.push_str(q);
                }
                return Err(Response::error(301).header("Location", to));
            }
            index.reserve(rel.len() + 11);
            if !rel.is_empty() {
                index.extend_from_slice(rel.as_bytes());
                index.push(b'/');
            }
            index.extend_from_slice(b"index.html");
            let index = std::str::from_utf8(&index).map_err(|_| Response::error(404))?;
            let dir = file;
            let file = self.open(index, pool).map_err(|e| match (e.kind(), req) {
                // A directory without an index: its listing, or nothing.
                (io::ErrorKind::NotFound, Some(req)) if self.autoindex => {
                    self.listing(dir, rel, req)
                }
                (io::ErrorKind::NotFound, _) => Response::error(403),
                _ => Response::error(open_status(&e)),
            })?;
            let meta = file.metadata().map_err(|_| Response::error(500))?;
            (file, meta, index)
        } else {
            (file, meta, rel)
        };
        let content_type = mime::content_type(served);
        if !meta.is_file() {
            return Err(Response::error(403));
        }
        let mtime = modified(&meta);
        let len = meta.len();
        let contents = self.keep(&file, len);
        let etag = etag(&meta);
        let gzip = self
            .gzip
            .as_ref()
            .is_some_and(|g| g.applies_to(content_type, len));
        let sibling = |coding: Coding| {
            if !self.precompressed {
                return None;
            }
            self.sibling(served, coding, mtime, pool)
        };
        Ok(OpenFile {
            file: Arc::new(file),
            len,
            contents,
            mtime,
            gzip_etag: if gzip {
                marked(&etag, Coding::Gzip).into()
            } else {
                Arc::from("")
            },
            etag: etag.into(),
            last_modified: httpdate::fmt_http_date(mtime).into(),
            content_type,
            opened: Instant::now(),
            br: sibling(Coding::Br),
            gz: sibling(Coding::Gzip),
            gzip,
            gzipped: Arc::default(),
            cache_control: self.expires.cache_control(served, content_type),
            stamp: stamp(&meta),
        })
    }

    /// The whole file, if it is small enough to keep in memory.
    fn keep(&self, file: &File, len: u64) -> Option<Arc<[u8]>> {
        if len == 0 || len > self.in_memory {
            return None;
        }
        let mut buf = vec![0; len as usize];
        match read_exact_at(file, &mut buf) {
            Ok(()) => Some(Arc::from(buf)),
            Err(_) => None, // changed under us: serve it from the descriptor
        }
    }

    /// `served.br` or `served.gz`, if it is a regular file no older than
    /// `served` (one older is stale: left from a previous version).
    fn sibling(
        &self,
        served: &str,
        coding: Coding,
        mtime: SystemTime,
        pool: RequestPool<'_>,
    ) -> Option<Sibling> {
        let mut name = PoolVec::with_capacity_in(served.len() + 3, pool);
        name.extend_from_slice(served.as_bytes());
        name.push(b'.');
        name.extend_from_slice(coding.suffix().as_bytes());
        let file = self.open(std::str::from_utf8(&name).ok()?, pool).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || modified(&meta) < mtime {
            return None;
        }
        let len = meta.len();
        Some(Sibling {
            contents: self.keep(&file, len),
            file: Arc::new(file),
            len,
            etag: marked(&etag(&meta), coding).into(),
        })
    }

    /// The listing of directory `rel`, open as `dir`, answering `req`.
    fn listing(&self, dir: File, rel: &str, req: &Request<'_>) -> Response {
        let format = autoindex::Format::of_query(req.query_param("format").as_deref());
        // The listing resolves links beneath the root as a request would.
        let stat = |root: &OwnedFd, rel: &str| stat_beneath(root.as_fd(), rel);
        let root = Arc::clone(&self.root);
        let listing = match Listing::read(dir, rel, root, self.dotfiles, format, stat) {
            Ok(l) => l,
            Err(e) => return Response::error(open_status(&e)),
        };
        let content_type = format.content_type();
        let mut body: Box<dyn io::Read + Send> = Box::new(listing.into_reader());
        let mut response = Response::new(200).header("Content-Type", content_type);
        if let Some(gzip) = self
            .gzip
            .as_ref()
            .filter(|g| crate::compression::type_listed(&g.types, content_type))
        {
            response = response.header("Vary", "Accept-Encoding");
            if Accepted::parse(req.header_str("accept-encoding")).choose(false, true)
                == Coding::Gzip
            {
                body = gzip.stream(body);
                response = response.header("Content-Encoding", "gzip");
            }
        }
        // A listing changes with the directory: caches revalidate it.
        response
            .header("Cache-Control", "no-cache")
            .body(Body::Stream(body))
    }

    /// Open `rel` beneath the root; its NUL-terminated copy for the
    /// kernel comes from the request's pool.
    fn open(&self, rel: &str, pool: RequestPool<'_>) -> io::Result<File> {
        let path = if rel.is_empty() { "." } else { rel };
        let mut c = PoolVec::with_capacity_in(path.len() + 1, pool);
        c.extend_from_slice(path.as_bytes());
        c.push(0);
        let c = CStr::from_bytes_with_nul(&c)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        open_beneath(self.root.as_fd(), c)
    }
}

/// Open `path` relative to `dir`, refusing any resolution (`..` or a symbolic
/// link) that leaves `dir`.
fn open_beneath(dir: BorrowedFd<'_>, path: &CStr) -> io::Result<File> {
    mpm_sys::open_beneath::open_beneath(dir, path, Purpose::Read)
}

/// The metadata of `rel` (a path relative to `dir`, no leading slash),
/// resolved as [`open_beneath`] would: an error if it leaves `dir`.
pub(crate) fn stat_beneath(dir: BorrowedFd<'_>, rel: &str) -> io::Result<std::fs::Metadata> {
    let mut c = Vec::with_capacity(rel.len() + 1);
    c.extend_from_slice(rel.as_bytes());
    c.push(0);
    let c =
        CStr::from_bytes_with_nul(&c).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // O_PATH: nothing is opened for reading (no FIFO waits, no device opens).
    mpm_sys::open_beneath::stat_beneath(dir, c)
}

/// What a static file allows.
const ALLOW: &str = "GET, HEAD, OPTIONS";

impl HttpHandler for StaticFiles {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        match req.method() {
            "GET" | "HEAD" => {}
            // `OPTIONS *` asks about the server as a whole: the same answer.
            "OPTIONS" => return Response::new(204).header("Allow", ALLOW),
            // 405 for a method HTTP defines, 501 for one it does not.
            other => return Response::method_not_allowed(other, ALLOW),
        }
        let raw = req.path();
        if !raw.starts_with('/') {
            return Response::error(400);
        }
        match self.lookup(req) {
            Ok(file) => self.serve(req, &file),
            Err(response) => response,
        }
    }

    /// A file in the open-file cache is answered without touching the disk
    /// (its body goes out by sendfile from the page cache); so are refusals.
    /// Not one that would be compressed now: that is work for a worker.
    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        if !matches!(req.method(), "GET" | "HEAD") {
            return true;
        }
        let path = req.path();
        // This worker's table first, with no lock; then the shared one.
        match self.local.get(path).filter(|f| f.is_fresh()) {
            Some(f) => !f.compresses_now(req),
            None => self
                .shared
                .get(path)
                .is_some_and(|f| !f.compresses_now(req)),
        }
    }
}

fn read_exact_at(file: &File, buf: &mut [u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, 0)
}

fn open_status(e: &io::Error) -> u16 {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => 404,
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EXDEV) | Some(libc::ELOOP) => 403,
        Some(libc::EINVAL) => 400,
        _ => 500,
    }
}

/// Percent-decode and normalise a request path into a path relative to the
/// root (no leading slash). Errors carry the status to answer.
#[cfg(test)]
pub(crate) fn clean_path(raw: &str) -> std::result::Result<String, u16> {
    let rel = clean_path_in(raw, RequestPool::heap())?;
    String::from_utf8(rel.to_vec()).map_err(|_| 404)
}

/// [`clean_path`], building the result in the request's pool: the decoded
/// bytes and the normalised path are scratch that dies with the request.
pub(crate) fn clean_path_in<'p>(
    raw: &str,
    pool: RequestPool<'p>,
) -> std::result::Result<PoolVec<u8, RequestPool<'p>>, u16> {
    let bytes = raw.as_bytes();
    let mut decoded = PoolVec::with_capacity_in(bytes.len(), pool);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(400u16)?;
                let v = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(400u16)?;
                // An encoded separator would let one segment stand for two.
                if v == b'/' {
                    return Err(404);
                }
                decoded.push(v);
                i += 3;
            }
            b => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    if decoded.contains(&0) {
        return Err(400);
    }
    if std::str::from_utf8(&decoded).is_err() {
        return Err(404);
    }
    // Resolve `.` and `..` segment by segment into `out`.
    let mut out = PoolVec::with_capacity_in(decoded.len(), pool);
    for seg in decoded.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                if out.is_empty() {
                    return Err(403); // climbs above the root
                }
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            s => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(s);
            }
        }
    }
    Ok(out)
}

/// The strong validator for a file: size and modification time, as httpd's.
fn etag(meta: &std::fs::Metadata) -> String {
    let nanos = meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128;
    format!("\"{:x}-{:x}\"", meta.len(), nanos)
}

/// A validator marked with a coding: `"abc"` becomes `"abc-gz"`, so that
/// each coding of a file has a validator of its own.
fn marked(etag: &str, coding: Coding) -> String {
    let bare = etag.trim_end_matches('"');
    format!("{bare}-{}\"", coding.suffix())
}

fn is_range_request(req: &Request<'_>) -> bool {
    req.method() == "GET" && req.header_str("range").is_some()
}

fn modified(meta: &std::fs::Metadata) -> SystemTime {
    // Whole seconds: HTTP dates have no finer resolution.
    UNIX_EPOCH + Duration::from_secs(meta.mtime().max(0) as u64)
}

/// A file's bytes in one coding, on disk: the file itself or a sibling.
/// Ranges are cut from these.
#[derive(Clone, Copy)]
struct OnDisk<'f> {
    file: &'f Arc<File>,
    len: u64,
    contents: Option<&'f Arc<[u8]>>,
}

impl StaticFiles {
    /// The file in the coding the request accepts best: the file itself, a
    /// sibling, or gzipped (kept, or as it is sent). A range request never
    /// gets an on-the-fly body: ranges are cut from the uncompressed file.
    fn representation<'f>(&self, f: &'f OpenFile, req: &Request<'_>) -> Representation<'f> {
        let identity = Representation {
            coding: Coding::Identity,
            etag: &f.etag,
            body: Source::File(OnDisk {
                file: &f.file,
                len: f.len,
                contents: f.contents.as_ref(),
            }),
        };
        let sibling = |coding, s: &'f Sibling| Representation {
            coding,
            etag: &s.etag,
            body: Source::File(OnDisk {
                file: &s.file,
                len: s.len,
                contents: s.contents.as_ref(),
            }),
        };
        match (f.coding(req), &self.gzip) {
            (Coding::Br, _) => f.br.as_ref().map_or(identity, |s| sibling(Coding::Br, s)),
            (Coding::Gzip, _) if f.gz.is_some() => {
                f.gz.as_ref().map_or(identity, |s| sibling(Coding::Gzip, s))
            }
            (Coding::Gzip, Some(gzip)) if !is_range_request(req) => match &f.contents {
                Some(bytes) => match f.gzipped.get_or_init(|| gzip.compress(bytes)) {
                    Some(gz) => Representation {
                        coding: Coding::Gzip,
                        etag: &f.gzip_etag,
                        body: Source::Gzipped(Arc::clone(gz)),
                    },
                    None => identity, // compressing saved nothing
                },
                None => Representation {
                    coding: Coding::Gzip,
                    etag: &f.gzip_etag,
                    body: Source::GzipStream,
                },
            },
            _ => identity,
        }
    }

    fn serve(&self, req: &Request<'_>, f: &OpenFile) -> Response {
        let rep = self.representation(f, req);
        let base = |status: u16| {
            let mut r = Response::new(status)
                .header("ETag", rep.etag)
                .header("Last-Modified", &f.last_modified);
            if f.varies() {
                r = r.header("Vary", "Accept-Encoding");
            }
            if let Some(cc) = &f.cache_control {
                r = r.header("Cache-Control", cc);
            }
            r
        };
        let encoded = |r: Response| match rep.coding.token() {
            Some(token) => r.header("Content-Encoding", token),
            None => r,
        };
        if let Some(status) = preconditions(req, rep.etag, f.mtime) {
            return match status {
                304 => base(304),
                _ => Response::error(status),
            };
        }

        let response = match rep.body {
            Source::File(bytes) => {
                let len = bytes.len;
                let mut ranges = None;
                if let Some(spec) = req.header_str("range").filter(|_| req.method() == "GET") {
                    // RFC 9110 §13.1.5: a strong comparison with the ETag, or
                    // the exact Last-Modified date.
                    let if_range_ok = match req.header_str("if-range") {
                        None => true,
                        Some(v) if v.starts_with('"') => v == &**rep.etag,
                        Some(v) => httpdate::parse_http_date(v).is_ok_and(|d| d == f.mtime),
                    };
                    if if_range_ok {
                        match parse_ranges(spec, len) {
                            RangeSpec::Ignore => {}
                            RangeSpec::Unsatisfiable => {
                                return Response::error(416)
                                    .header("Content-Range", format!("bytes */{len}"));
                            }
                            RangeSpec::Ranges(r) => ranges = Some(r),
                        }
                    }
                }
                let file = Arc::clone(bytes.file);
                let r = match ranges.as_deref() {
                    Some(&[(start, end)]) => base(206)
                        .header("Content-Range", format!("bytes {start}-{end}/{len}"))
                        .body(FileBody {
                            file,
                            offset: start,
                            len: end - start + 1,
                        }),
                    Some(several) => {
                        let boundary = boundary();
                        let parts = byteranges(several, bytes, f.content_type, &boundary);
                        return encoded(
                            base(206)
                                .header(
                                    "Content-Type",
                                    format!("multipart/byteranges; boundary={boundary}"),
                                )
                                .header("Accept-Ranges", "bytes")
                                .body(Body::Parts(parts)),
                        );
                    }
                    None => match bytes.contents {
                        Some(kept) => base(200).body(Arc::clone(kept)),
                        None => base(200).body(FileBody::whole(file, len)),
                    },
                };
                r.header("Accept-Ranges", "bytes")
            }
            Source::Gzipped(bytes) => base(200).body(bytes),
            Source::GzipStream => {
                let body: Box<dyn io::Read + Send> = match (&self.gzip, req.method()) {
                    (Some(gzip), "GET") => gzip.stream(FileReader::new(Arc::clone(&f.file), f.len)),
                    // HEAD: no body is sent, so none is compressed.
                    _ => Box::new(io::empty()),
                };
                base(200).body(Body::Stream(body))
            }
        };
        encoded(response.header("Content-Type", f.content_type))
    }
}

/// RFC 9110 §13.2.2: evaluate the preconditions of a `GET` or `HEAD` in
/// order; the status to answer instead of the file (412 or 304), if any.
/// (Other methods never get here: a resource that refuses a method answers
/// 405 first, and §13.2.1 has a refusal take precedence over preconditions.)
fn preconditions(req: &Request<'_>, etag: &str, mtime: SystemTime) -> Option<u16> {
    // 1 and 2: If-Match, or else If-Unmodified-Since.
    if let Some(list) = field_list(req, "if-match") {
        if !strong_match(&list, etag) {
            return Some(412);
        }
    } else if let Some(date) = req.header_str("if-unmodified-since") {
        // An invalid date is ignored (§13.1.4).
        if httpdate::parse_http_date(date).is_ok_and(|since| mtime > since) {
            return Some(412);
        }
    }
    // 3 and 4: If-None-Match, or else If-Modified-Since.
    if let Some(list) = field_list(req, "if-none-match") {
        if etag_matches(&list, etag) {
            return Some(304);
        }
    } else if let Some(date) = req.header_str("if-modified-since") {
        if httpdate::parse_http_date(date).is_ok_and(|since| mtime <= since) {
            return Some(304);
        }
    }
    None
}

/// Every line of a list-valued field, joined as one list (a field may be
/// sent as several lines: `If-Match: "a"` and `If-Match: "b"`).
fn field_list(req: &Request<'_>, name: &str) -> Option<String> {
    let mut lines = req
        .headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| String::from_utf8_lossy(v));
    let first = lines.next()?.into_owned();
    Some(lines.fold(first, |mut all, v| {
        all.push(',');
        all.push_str(&v);
        all
    }))
}

/// Does an `If-Match` list match `tag`? Strong comparison (RFC 9110
/// 13.1.1): a weak tag never matches; `*` matches any current file.
fn strong_match(list: &str, tag: &str) -> bool {
    !tag.starts_with("W/") && list.split(',').map(str::trim).any(|t| t == "*" || t == tag)
}

/// Does an `If-None-Match` list match `tag`? Weak comparison (RFC 9110 13.1.2).
fn etag_matches(list: &str, tag: &str) -> bool {
    let bare = tag.trim_start_matches("W/");
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == bare)
}

/// The most ranges one `Range` field may list; a longer list is answered
/// with the whole file, as httpd's `MaxRanges` does. With overlapping and
/// adjacent ranges merged, a range attack (CVE-2011-3192: hundreds of
/// overlapping ranges of one large file) costs no more than the file once.
pub(crate) const MAX_RANGES: usize = 100;

#[derive(Debug, PartialEq, Eq)]
enum RangeSpec {
    /// Not a range request we serve: answer the whole file.
    Ignore,
    Unsatisfiable,
    /// First and last byte of each range, inclusive: in order, merged where
    /// they overlap or touch, never empty.
    Ranges(Vec<(u64, u64)>),
}

/// Parse a `Range` field (RFC 9110 §14.1.2) against a file of `len` bytes.
fn parse_ranges(spec: &str, len: u64) -> RangeSpec {
    let spec = spec.trim();
    let Some((unit, set)) = spec.split_once('=') else {
        return RangeSpec::Ignore;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeSpec::Ignore; // a unit we do not know: ignored (§14.2)
    }
    let mut ranges = Vec::new();
    // Empty list elements are allowed, and ignored (§5.6.1).
    for (n, one) in set
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .enumerate()
    {
        if n >= MAX_RANGES {
            return RangeSpec::Ignore;
        }
        match parse_one_range(one, len) {
            One::Invalid => return RangeSpec::Ignore,
            One::Unsatisfiable => {}
            One::Bytes(start, end) => ranges.push((start, end)),
        }
    }
    if ranges.is_empty() {
        // No satisfiable range; an empty set is not a range request at all.
        return if set.split(',').all(|s| s.trim().is_empty()) {
            RangeSpec::Ignore
        } else {
            RangeSpec::Unsatisfiable
        };
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    RangeSpec::Ranges(merged)
}

enum One {
    Invalid,
    Unsatisfiable,
    Bytes(u64, u64),
}

fn parse_one_range(one: &str, len: u64) -> One {
    let Some((a, b)) = one.split_once('-') else {
        return One::Invalid;
    };
    let (a, b) = (a.trim(), b.trim());
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            None
        } else {
            s.parse().ok()
        }
    };
    match (a.is_empty(), b.is_empty()) {
        (true, true) => One::Invalid,
        // A suffix: the last `n` bytes.
        (true, false) => match num(b) {
            None => One::Invalid,
            Some(0) => One::Unsatisfiable,
            Some(_) if len == 0 => One::Unsatisfiable,
            Some(n) => One::Bytes(len.saturating_sub(n), len - 1),
        },
        (false, _) => {
            let Some(start) = num(a) else {
                return One::Invalid;
            };
            let end = if b.is_empty() {
                u64::MAX
            } else {
                match num(b) {
                    Some(e) if e >= start => e,
                    _ => return One::Invalid,
                }
            };
            if start >= len {
                One::Unsatisfiable
            } else {
                One::Bytes(start, end.min(len - 1))
            }
        }
    }
}

/// A boundary for a `multipart/byteranges` body: unlikely to occur in a
/// file (a counter and the clock, mixed), and new for each response.
fn boundary() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // splitmix64 of the two, so that consecutive boundaries look unrelated.
    let mut z = t ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("mpm{:016x}{:08x}", z ^ (z >> 31), n as u32)
}

/// The parts of a `multipart/byteranges` body (RFC 9110 §14.6): each
/// range's header (its type and `Content-Range`), then its bytes from the
/// file (or the cached copy), and the closing delimiter.
fn byteranges(
    ranges: &[(u64, u64)],
    bytes: OnDisk<'_>,
    content_type: &str,
    boundary: &str,
) -> Vec<Part> {
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    for &(start, end) in ranges {
        let head = format!(
            "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {start}-{end}/{}\r\n\r\n",
            bytes.len
        );
        parts.push(Part::Bytes(head.into_bytes().into()));
        let count = end - start + 1;
        parts.push(match bytes.contents {
            Some(kept) => Part::Bytes(kept[start as usize..=end as usize].to_vec().into()),
            None => Part::File(FileBody {
                file: Arc::clone(bytes.file),
                offset: start,
                len: count,
            }),
        });
    }
    parts.push(Part::Bytes(
        format!("\r\n--{boundary}--\r\n").into_bytes().into(),
    ));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_decoded_and_normalised() {
        assert_eq!(clean_path("/a/./b//c").unwrap(), "a/b/c");
        assert_eq!(clean_path("/a/../b").unwrap(), "b");
        assert_eq!(clean_path("/%61%62").unwrap(), "ab");
        assert_eq!(clean_path("/").unwrap(), "");
    }

    #[test]
    fn traversal_nul_and_encoded_slashes_are_refused() {
        assert_eq!(clean_path("/../etc/passwd"), Err(403));
        assert_eq!(clean_path("/a/%2e%2e/%2e%2e/x"), Err(403));
        assert_eq!(clean_path("/a%00b"), Err(400));
        assert_eq!(clean_path("/a%2fb"), Err(404));
        assert_eq!(clean_path("/a%zz"), Err(400));
        assert_eq!(clean_path("/a%4"), Err(400));
    }

    fn ranges(spec: &str, len: u64) -> RangeSpec {
        parse_ranges(spec, len)
    }

    fn r(list: &[(u64, u64)]) -> RangeSpec {
        RangeSpec::Ranges(list.to_vec())
    }

    #[test]
    fn single_ranges_parse_and_bad_ones_are_ignored() {
        assert_eq!(ranges("bytes=0-9", 100), r(&[(0, 9)]));
        assert_eq!(ranges("bytes=90-", 100), r(&[(90, 99)]));
        assert_eq!(ranges("bytes=-10", 100), r(&[(90, 99)]));
        assert_eq!(ranges("bytes=50-500", 100), r(&[(50, 99)]));
        assert_eq!(ranges("Bytes = 1-2", 100), r(&[(1, 2)]));
        assert_eq!(ranges("bytes=100-", 100), RangeSpec::Unsatisfiable);
        assert_eq!(ranges("bytes=-0", 100), RangeSpec::Unsatisfiable);
        assert_eq!(ranges("bytes=9-1", 100), RangeSpec::Ignore);
        assert_eq!(ranges("items=0-1", 100), RangeSpec::Ignore);
        assert_eq!(ranges("bytes=", 100), RangeSpec::Ignore);
    }

    #[test]
    fn several_ranges_are_sorted_and_merged_where_they_overlap_or_touch() {
        assert_eq!(ranges("bytes=0-1,5-6", 100), r(&[(0, 1), (5, 6)]));
        assert_eq!(ranges("bytes=50-59, 0-9", 100), r(&[(0, 9), (50, 59)]));
        assert_eq!(ranges("bytes=0-9,5-20,21-30", 100), r(&[(0, 30)]));
        assert_eq!(ranges("bytes=-10,0-4", 100), r(&[(0, 4), (90, 99)]));
        // Unsatisfiable members are dropped while one is satisfiable.
        assert_eq!(ranges("bytes=0-4,200-300", 100), r(&[(0, 4)]));
        assert_eq!(ranges("bytes=200-,300-", 100), RangeSpec::Unsatisfiable);
        // Empty list elements are ignored; a malformed member voids the field.
        assert_eq!(ranges("bytes=0-1,,3-4,", 100), r(&[(0, 1), (3, 4)]));
        assert_eq!(ranges("bytes=0-1,x", 100), RangeSpec::Ignore);
    }

    #[test]
    fn a_range_attack_costs_no_more_than_the_file() {
        // CVE-2011-3192's shape: many overlapping ranges of one file (its
        // `5-0, 5-1, ...` members are invalid, which voids the field).
        let attack = format!(
            "bytes=0-,{}",
            (1..MAX_RANGES)
                .map(|i| format!("5-{}", i + 5))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(ranges(&attack, 1 << 30), r(&[(0, (1 << 30) - 1)]));
        assert_eq!(ranges("bytes=0-,5-0,5-1", 1 << 30), RangeSpec::Ignore);
        // Past the bound the field is ignored: the whole file, once.
        let too_many = (0..=MAX_RANGES)
            .map(|i| format!("{}-{}", i * 10, i * 10 + 1))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            ranges(&format!("bytes={too_many}"), 1 << 20),
            RangeSpec::Ignore
        );
    }

    #[test]
    fn if_match_uses_strong_comparison() {
        assert!(strong_match("\"a\", \"b\"", "\"b\""));
        assert!(strong_match("*", "\"b\""));
        assert!(!strong_match("W/\"b\"", "\"b\""));
        assert!(!strong_match("\"c\"", "\"b\""));
    }

    #[test]
    fn each_worker_keeps_its_own_table_and_finds_the_others_files_shared() {
        let dir = std::env::temp_dir().join(format!("mpm-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), b"aaa").unwrap();
        let files = StaticFiles::new(&dir).unwrap();
        let (mut one, mut two) = (files.clone(), files.clone());
        let req = Request::for_test("GET", "/a.txt", mpm_http::Version::Http11, &[], b"");
        assert!(!two.answers_without_blocking(&req), "nothing opened yet");
        assert_eq!(one.handle(&req).status(), 200);
        assert_eq!(one.local.len(), 1);
        // The other worker has not served it, but the shared table knows it.
        assert!(two.local.is_empty());
        assert!(two.answers_without_blocking(&req));
        assert_eq!(two.handle(&req).status(), 200);
        // Its own copy, not the first worker's.
        let (a, b) = (&one.local["/a.txt"], &two.local["/a.txt"]);
        assert!(!Arc::ptr_eq(a, b));
        assert!(Arc::ptr_eq(&a.file, &b.file), "one descriptor for both");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn if_none_match_uses_weak_comparison() {
        assert!(etag_matches("\"a\", W/\"b\"", "\"b\""));
        assert!(etag_matches("*", "\"b\""));
        assert!(!etag_matches("\"c\"", "\"b\""));
    }
}
