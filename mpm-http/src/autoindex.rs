//! Directory listings (`--autoindex on`: nginx's `autoindex`, httpd's
//! `mod_autoindex`), as HTML or, with `?format=json`, as nginx's
//! `autoindex_format json` writes them.
//!
//! The directory is read once, names only: a few bytes per entry beside the
//! name itself (at most [`MAX_ENTRIES`] of them), then sorted, directories
//! first. The page is written as it is sent, in chunks, each entry's size
//! and time read when its row is written: a directory of 100,000 entries
//! never has its listing in memory whole.

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Write as _};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use nix::dir::{Dir, Type};
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstatat, SFlag};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::server_status::{html_escape_into, json_escape_into};
use crate::static_files::stat_beneath;

/// The most entries one listing shows; the rest are left out (HTML says so).
pub const MAX_ENTRIES: usize = 1_000_000;

/// Bytes rendered per chunk of the listing.
const CHUNK: usize = 16 * 1024;

/// What a name in an `href` keeps as it is: RFC 3986's unreserved set.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What an entry is, as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    /// A symbolic link to a directory or file inside the root.
    LinkDir,
    LinkFile,
}

impl Kind {
    fn is_dir(self) -> bool {
        matches!(self, Kind::Dir | Kind::LinkDir)
    }
}

/// One entry: where its name is in the shared buffer, and its kind.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: u32,
    len: u8,
    kind: Kind,
}

/// Which format the listing is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Html,
    Json,
}

impl Format {
    /// `?format=json` asks for JSON; anything else is HTML.
    pub(crate) fn of_query(format: Option<&str>) -> Format {
        match format {
            Some(f) if f.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Html,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json",
        }
    }
}

/// A directory read and sorted, ready to be written.
pub(crate) struct Listing {
    dir: Dir,
    /// `rel` of the directory under the root ("" for the root), for links.
    rel: String,
    root: Arc<OwnedFd>,
    names: String,
    entries: Vec<Entry>,
    truncated: bool,
    format: Format,
    /// The rendering in progress.
    out: Vec<u8>,
    out_pos: usize,
    next: usize,
    /// Rows written so far.
    rows: usize,
    started: bool,
    finished: bool,
}

impl Listing {
    /// Read the directory open as `dir`, whose path under the root is `rel`.
    /// Names starting with a dot are left out unless `dotfiles` (but
    /// `.well-known`), and so are names that are not UTF-8, entries that
    /// are neither files nor directories, and symbolic links that leave the
    /// root (resolved beneath `root`, as a request for them would be).
    pub(crate) fn read(
        dir: File,
        rel: &str,
        root: Arc<OwnedFd>,
        dotfiles: bool,
        format: Format,
    ) -> io::Result<Listing> {
        let mut dir = Dir::from(dir).map_err(io::Error::from)?;
        let fd = dir.as_raw_fd();
        let (mut names, mut entries, mut truncated) = (String::new(), Vec::new(), false);
        for entry in dir.iter() {
            let Ok(entry) = entry else {
                break; // a read error ends the listing where it is
            };
            let Ok(name) = entry.file_name().to_str() else {
                continue; // not UTF-8: no URL of ours names it
            };
            if name == "." || name == ".." || name.len() > usize::from(u8::MAX) {
                continue;
            }
            if !dotfiles && name.starts_with('.') && name != ".well-known" {
                continue;
            }
            let kind = match entry.file_type() {
                Some(Type::Directory) => Some(Kind::Dir),
                Some(Type::File) => Some(Kind::File),
                Some(Type::Symlink) => link_kind(&root, rel, name),
                Some(_) => None,
                None => stat_kind(fd, entry.file_name()).or_else(|| link_kind(&root, rel, name)),
            };
            let Some(kind) = kind else { continue };
            if entries.len() >= MAX_ENTRIES {
                truncated = true;
                break;
            }
            let Ok(at) = u32::try_from(names.len()) else {
                truncated = true;
                break;
            };
            names.push_str(name);
            entries.push(Entry {
                at,
                len: name.len() as u8,
                kind,
            });
        }
        entries.sort_unstable_by(|a, b| {
            b.kind
                .is_dir()
                .cmp(&a.kind.is_dir())
                .then_with(|| name_of(&names, a).cmp(name_of(&names, b)))
        });
        Ok(Listing {
            dir,
            rel: rel.to_string(),
            root,
            names,
            entries,
            truncated,
            format,
            out: Vec::with_capacity(CHUNK + 1024),
            out_pos: 0,
            next: 0,
            rows: 0,
            started: false,
            finished: false,
        })
    }

    /// Write the next chunk into `self.out`; false when all is written.
    fn render(&mut self) -> bool {
        self.out.clear();
        self.out_pos = 0;
        if self.finished {
            return false;
        }
        if !self.started {
            self.started = true;
            self.header();
        }
        while self.out.len() < CHUNK && self.next < self.entries.len() {
            let e = self.entries[self.next];
            self.next += 1;
            self.row(e);
        }
        if self.next >= self.entries.len() {
            self.footer();
            self.finished = true;
        }
        true
    }

    fn header(&mut self) {
        let title = if self.rel.is_empty() {
            "/".to_string()
        } else {
            format!("/{}/", self.rel)
        };
        match self.format {
            Format::Json => self.out.extend_from_slice(b"["),
            Format::Html => {
                let mut t = String::new();
                html_escape_into(&mut t, &title);
                let _ = write!(
                    self.out,
                    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {t}</title>\
                     <style>body{{font-family:sans-serif}}td,th{{padding:0 .8em;text-align:left}}\
                     td.size{{text-align:right}}</style></head><body>\n\
                     <h1>Index of {t}</h1>\n<table>\n\
                     <tr><th>Name</th><th>Last modified</th><th>Size</th></tr>\n"
                );
                if !self.rel.is_empty() {
                    self.out.extend_from_slice(
                        b"<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n",
                    );
                }
            }
        }
    }

    fn row(&mut self, e: Entry) {
        let name = name_of(&self.names, &e);
        // Size and time now, as the row is written: nothing more is kept.
        let stat = match e.kind {
            Kind::Dir | Kind::File => fstatat(
                Some(self.dir.as_raw_fd()),
                name,
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .ok()
            .map(|st| (st.st_size.max(0) as u64, st.st_mtime)),
            Kind::LinkDir | Kind::LinkFile => {
                // Checked again: the link may have changed since it was read.
                use std::os::unix::fs::MetadataExt;
                stat_beneath(self.root.as_fd(), &join(&self.rel, name))
                    .ok()
                    .map(|m| (m.len(), m.mtime()))
            }
        };
        let Some((size, mtime)) = stat else {
            return; // gone since the directory was read
        };
        let mtime = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(mtime.max(0) as u64));
        let dir = e.kind.is_dir();
        let mut text = String::with_capacity(2 * name.len() + 96);
        match self.format {
            Format::Json => {
                if self.rows > 0 {
                    text.push(',');
                }
                text.push_str("\n{\"name\":\"");
                json_escape_into(&mut text, name);
                if dir {
                    let _ = std::fmt::Write::write_fmt(
                        &mut text,
                        format_args!("\",\"type\":\"directory\",\"mtime\":\"{mtime}\"}}"),
                    );
                } else {
                    let _ = std::fmt::Write::write_fmt(
                        &mut text,
                        format_args!(
                            "\",\"type\":\"file\",\"mtime\":\"{mtime}\",\"size\":{size}}}"
                        ),
                    );
                }
            }
            Format::Html => {
                let slash = if dir { "/" } else { "" };
                text.push_str("<tr><td><a href=\"");
                text.extend(utf8_percent_encode(name, HREF));
                text.push_str(slash);
                text.push_str("\">");
                html_escape_into(&mut text, name);
                text.push_str(slash);
                text.push_str("</a></td><td>");
                text.push_str(&mtime);
                text.push_str("</td><td class=\"size\">");
                if dir {
                    text.push('-');
                } else {
                    text.push_str(&size.to_string());
                }
                text.push_str("</td></tr>\n");
            }
        }
        self.out.extend_from_slice(text.as_bytes());
        self.rows += 1;
    }

    fn footer(&mut self) {
        match self.format {
            Format::Json => self.out.extend_from_slice(b"\n]\n"),
            Format::Html => {
                self.out.extend_from_slice(b"</table>\n");
                if self.truncated {
                    let _ = writeln!(
                        self.out,
                        "<p>Only the first {MAX_ENTRIES} entries are listed.</p>"
                    );
                }
                self.out.extend_from_slice(b"</body></html>\n");
            }
        }
    }

    /// The listing as a body read chunk by chunk.
    pub(crate) fn into_reader(self) -> ListingReader {
        ListingReader(self)
    }
}

/// A [`Listing`] as a `Read`: the body of the response.
pub(crate) struct ListingReader(Listing);

impl Read for ListingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let l = &mut self.0;
        if l.out_pos >= l.out.len() && !l.render() {
            return Ok(0);
        }
        let n = buf.len().min(l.out.len() - l.out_pos);
        buf[..n].copy_from_slice(&l.out[l.out_pos..l.out_pos + n]);
        l.out_pos += n;
        Ok(n)
    }
}

fn name_of<'n>(names: &'n str, e: &Entry) -> &'n str {
    let at = e.at as usize;
    &names[at..at + usize::from(e.len)]
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// A link's kind, if it resolves inside the root to a file or directory.
fn link_kind(root: &OwnedFd, rel: &str, name: &str) -> Option<Kind> {
    let meta = stat_beneath(root.as_fd(), &join(rel, name)).ok()?;
    if meta.is_dir() {
        Some(Kind::LinkDir)
    } else if meta.is_file() {
        Some(Kind::LinkFile)
    } else {
        None
    }
}

/// The kind of an entry whose type the directory did not say.
fn stat_kind(dir: i32, name: &CStr) -> Option<Kind> {
    let st = fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => Some(Kind::Dir),
        SFlag::S_IFREG => Some(Kind::File),
        _ => None, // a link is resolved by the caller
    }
}
