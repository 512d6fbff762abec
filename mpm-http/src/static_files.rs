//! Serving a directory: confinement, index files, validators, conditional
//! and range requests.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::RwLock;

use crate::allocator_api2::vec::Vec as PoolVec;
use crate::error::{Error, Result};
use crate::mime;
use crate::{FileBody, HttpHandler, Request, RequestPool, Response};

/// Whether names starting with a dot are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[value(rename_all = "lower")]
pub enum Dotfiles {
    /// 403 for any path segment starting with a dot, except `.well-known`
    /// (RFC 8615): `.git`, `.env` and `.htpasswd` stay private.
    #[default]
    #[value(alias = "off")]
    Deny,
    /// Serve them like any other file.
    #[value(alias = "on")]
    Allow,
}

/// An [`HttpHandler`] that serves the files under a document root.
///
/// * The path is percent-decoded and normalised (`.` and `..` segments
///   resolved); a path that climbs above the root, contains NUL or an encoded
///   `/`, or resolves through a symbolic link to outside the root is refused.
///   The kernel enforces the last with `openat2(RESOLVE_BENEATH)`.
/// * A directory is answered by its `index.html`, after a 301 that adds the
///   trailing slash; there are no directory listings.
/// * `ETag` and `Last-Modified` on every file; `If-None-Match` and
///   `If-Modified-Since` answer 304; a single byte `Range` answers 206 (or 416),
///   honouring `If-Range`.
/// * `GET` and `HEAD` only: 405 with `Allow` otherwise (`OPTIONS` answers 204).
///
/// Open files are cached for one second, as nginx's `open_file_cache`
/// does: a hit costs no `open`, `stat` or `close`, and the body still goes
/// out by `sendfile` from the shared descriptor. A file changed on disk is
/// seen within that time. Each clone (each worker thread) keeps its own
/// table, read with no lock; a miss there looks in a table the clones
/// share, split into shards each behind its own lock, and only a miss
/// there too opens the file. A hot file therefore costs no lock and writes
/// no cache line another core reads, but for the reference counts of its
/// descriptor and in-memory body.
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
}

impl Clone for StaticFiles {
    fn clone(&self) -> Self {
        StaticFiles {
            root: Arc::clone(&self.root),
            local: HashMap::new(),
            shared: Arc::clone(&self.shared),
            in_memory: self.in_memory,
            dotfiles: self.dotfiles,
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
}

impl OpenFile {
    fn is_fresh(&self) -> bool {
        self.opened.elapsed() < CACHE_VALID
    }

    /// A worker's own copy: the descriptor and the body are shared, the
    /// rest (and the count of references to it) is the worker's.
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
        }
    }
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
        })
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
    fn lookup(
        &mut self,
        raw: &str,
        query: Option<&str>,
        pool: RequestPool<'_>,
    ) -> std::result::Result<Arc<OpenFile>, Response> {
        if let Some(hit) = self.local.get(raw) {
            if hit.is_fresh() {
                return Ok(Arc::clone(hit));
            }
        }
        let found = match self.shared.get(raw) {
            Some(found) => found,
            None => {
                let found = Arc::new(self.resolve(raw, query, pool)?);
                self.shared.insert(raw, Arc::clone(&found));
                found
            }
        };
        match self.local.get_mut(raw) {
            Some(slot) => {
                // The same file as our stale copy (size and time unchanged):
                // trust the copy for another second, at no allocation.
                match Arc::get_mut(slot) {
                    Some(mine) if mine.etag == found.etag => mine.opened = found.opened,
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

    /// Map a request path to an open regular file, or the error response.
    #[allow(clippy::result_large_err)]
    fn resolve(
        &self,
        raw: &str,
        query: Option<&str>,
        pool: RequestPool<'_>,
    ) -> std::result::Result<OpenFile, Response> {
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
        let (file, meta, content_type) = if meta.is_dir() {
            if !raw.ends_with('/') {
                let mut to = format!("{raw}/");
                if let Some(q) = query {
                    to.push('?');
                    to.push_str(q);
                }
                return Err(Response::error(301).header("Location", to));
            }
            let mut index = PoolVec::with_capacity_in(rel.len() + 11, pool);
            if !rel.is_empty() {
                index.extend_from_slice(rel.as_bytes());
                index.push(b'/');
            }
            index.extend_from_slice(b"index.html");
            let index = std::str::from_utf8(&index).map_err(|_| Response::error(404))?;
            let file = self.open(index, pool).map_err(|e| match e.kind() {
                // A directory without an index: no listings.
                io::ErrorKind::NotFound => Response::error(403),
                _ => Response::error(open_status(&e)),
            })?;
            let meta = file.metadata().map_err(|_| Response::error(500))?;
            (file, meta, mime::content_type(index))
        } else {
            (file, meta, mime::content_type(rel))
        };
        if !meta.is_file() {
            return Err(Response::error(403));
        }
        let mtime = modified(&meta);
        let len = meta.len();
        let contents = if len > 0 && len <= self.in_memory {
            let mut buf = vec![0; len as usize];
            match read_exact_at(&file, &mut buf) {
                Ok(()) => Some(Arc::from(buf)),
                Err(_) => None, // changed under us: serve it from the descriptor
            }
        } else {
            None
        };
        Ok(OpenFile {
            file: Arc::new(file),
            len,
            contents,
            mtime,
            etag: etag(&meta).into(),
            last_modified: httpdate::fmt_http_date(mtime).into(),
            content_type,
            opened: Instant::now(),
        })
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
        open_beneath(self.root.as_raw_fd(), c)
    }
}

/// `openat2(2)`'s `struct open_how`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

/// Open `path` relative to `dir`, refusing any resolution (`..` or a symbolic
/// link) that leaves `dir`.
fn open_beneath(dir: i32, path: &CStr) -> io::Result<File> {
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is NUL-terminated, `how` is a valid open_how of the size
    // passed, and `dir` is an open directory descriptor owned by the caller.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOSYS) {
            return open_beneath_fallback(dir, path);
        }
        return Err(err);
    }
    // SAFETY: the kernel just returned this descriptor to us, and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// For kernels before 5.6: open, then check that the file's real path is
/// still under the root's.
fn open_beneath_fallback(dir: i32, path: &CStr) -> io::Result<File> {
    let root = std::fs::read_link(format!("/proc/self/fd/{dir}"))?;
    let rel = path
        .to_str()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let full = root.join(rel).canonicalize()?;
    if !full.starts_with(&root) {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    File::open(full)
}

impl HttpHandler for StaticFiles {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        match req.method() {
            "GET" | "HEAD" => {}
            "OPTIONS" => return Response::new(204).header("Allow", "GET, HEAD, OPTIONS"),
            _ => return Response::error(405).header("Allow", "GET, HEAD, OPTIONS"),
        }
        let raw = req.path();
        if !raw.starts_with('/') {
            return Response::error(400);
        }
        match self.lookup(raw, req.query(), req.pool()) {
            Ok(file) => serve_file(req, &file),
            Err(response) => response,
        }
    }

    /// A file in the open-file cache is answered without opening anything
    /// (an event loop sends its body only from the page cache); so are
    /// refusals. This worker's table first, with no lock; then the shared one.
    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        if !matches!(req.method(), "GET" | "HEAD") {
            return true;
        }
        let path = req.path();
        self.local.get(path).is_some_and(|f| f.is_fresh()) || self.shared.get(path).is_some()
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

fn modified(meta: &std::fs::Metadata) -> SystemTime {
    // Whole seconds: HTTP dates have no finer resolution.
    UNIX_EPOCH + Duration::from_secs(meta.mtime().max(0) as u64)
}

fn serve_file(req: &Request<'_>, f: &OpenFile) -> Response {
    let len = f.len;
    let base = |status: u16| {
        Response::new(status)
            .header("ETag", &f.etag)
            .header("Last-Modified", &f.last_modified)
    };

    if let Some(inm) = req.header_str("if-none-match") {
        if etag_matches(inm, &f.etag) {
            return base(304);
        }
    } else if let Some(ims) = req.header_str("if-modified-since") {
        if let Ok(since) = httpdate::parse_http_date(ims) {
            if f.mtime <= since {
                return base(304);
            }
        }
    }

    let mut range = None;
    if req.method() == "GET" {
        if let Some(spec) = req.header_str("range") {
            let if_range_ok = match req.header_str("if-range") {
                None => true,
                Some(v) if v.starts_with('"') => v == &*f.etag,
                Some(v) => httpdate::parse_http_date(v).is_ok_and(|d| d == f.mtime),
            };
            if if_range_ok {
                match parse_range(spec, len) {
                    RangeSpec::Ignore => {}
                    RangeSpec::Unsatisfiable => {
                        return Response::error(416)
                            .header("Content-Range", format!("bytes */{len}"));
                    }
                    RangeSpec::Bytes(start, end) => range = Some((start, end)),
                }
            }
        }
    }
    let response = match range {
        Some((start, end)) => base(206)
            .header("Content-Range", format!("bytes {start}-{end}/{len}"))
            .body(FileBody {
                file: Arc::clone(&f.file),
                offset: start,
                len: end - start + 1,
            }),
        None => match &f.contents {
            Some(bytes) => base(200).body(Arc::clone(bytes)),
            None => base(200).body(FileBody::whole(Arc::clone(&f.file), len)),
        },
    };
    response
        .header("Content-Type", f.content_type)
        .header("Accept-Ranges", "bytes")
}

/// Does an `If-None-Match` list match `tag`? Weak comparison (RFC 9110 13.1.2).
fn etag_matches(list: &str, tag: &str) -> bool {
    let bare = tag.trim_start_matches("W/");
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == bare)
}

#[derive(Debug, PartialEq, Eq)]
enum RangeSpec {
    /// Not a single byte range we serve: answer the whole file.
    Ignore,
    Unsatisfiable,
    /// First and last byte, inclusive.
    Bytes(u64, u64),
}

fn parse_range(spec: &str, len: u64) -> RangeSpec {
    let Some(set) = spec.trim().strip_prefix("bytes=") else {
        return RangeSpec::Ignore;
    };
    if set.contains(',') {
        return RangeSpec::Ignore; // multipart ranges are optional; send it all
    }
    let Some((a, b)) = set.trim().split_once('-') else {
        return RangeSpec::Ignore;
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
        (true, true) => RangeSpec::Ignore,
        (true, false) => match num(b) {
            None => RangeSpec::Ignore,
            Some(0) => RangeSpec::Unsatisfiable,
            Some(_) if len == 0 => RangeSpec::Unsatisfiable,
            Some(n) => RangeSpec::Bytes(len.saturating_sub(n), len - 1),
        },
        (false, _) => {
            let Some(start) = num(a) else {
                return RangeSpec::Ignore;
            };
            let end = if b.is_empty() {
                u64::MAX
            } else {
                match num(b) {
                    Some(e) if e >= start => e,
                    _ => return RangeSpec::Ignore,
                }
            };
            if start >= len {
                RangeSpec::Unsatisfiable
            } else {
                RangeSpec::Bytes(start, end.min(len - 1))
            }
        }
    }
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

    #[test]
    fn single_ranges_parse_and_bad_ones_are_ignored() {
        assert_eq!(parse_range("bytes=0-9", 100), RangeSpec::Bytes(0, 9));
        assert_eq!(parse_range("bytes=90-", 100), RangeSpec::Bytes(90, 99));
        assert_eq!(parse_range("bytes=-10", 100), RangeSpec::Bytes(90, 99));
        assert_eq!(parse_range("bytes=50-500", 100), RangeSpec::Bytes(50, 99));
        assert_eq!(parse_range("bytes=100-", 100), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 100), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=9-1", 100), RangeSpec::Ignore);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), RangeSpec::Ignore);
        assert_eq!(parse_range("items=0-1", 100), RangeSpec::Ignore);
    }

    #[test]
    fn each_worker_keeps_its_own_table_and_finds_the_others_files_shared() {
        let dir = std::env::temp_dir().join(format!("mpm-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), b"aaa").unwrap();
        let files = StaticFiles::new(&dir).unwrap();
        let (mut one, mut two) = (files.clone(), files.clone());
        let req = Request::for_test("GET", "/a.txt", crate::Version::Http11, &[], b"");
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
