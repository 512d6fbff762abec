//! Open a path beneath a directory, refusing any resolution (`..`, an
//! absolute name or a symbolic link) that would leave it: how the static
//! site keeps a request inside its docroot.
//!
//! The kernel does it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! (Linux 5.6 and later). Before 5.6 the path is walked here one component
//! at a time from the directory's descriptor, each step an `openat` with
//! `O_NOFOLLOW` relative to the descriptor the previous step opened: a
//! symbolic link is read (never followed by the kernel) and its target
//! walked the same way. What is checked is the descriptor that is used, so
//! a link swapped in between a check and an open by name cannot redirect
//! the walk outside the directory.

use std::ffi::CStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// What a file is opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Reading: `O_RDONLY | O_NOCTTY | O_NONBLOCK`, so that opening a FIFO
    /// or a device does not wait.
    Read,
    /// Its metadata only: `O_PATH`, so nothing is opened for reading (no
    /// FIFO waits, no device opens).
    Stat,
}

impl Purpose {
    fn flags(self) -> OFlags {
        match self {
            Purpose::Read => OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
            Purpose::Stat => OFlags::PATH,
        }
    }
}

/// Symbolic links one walk follows at most, as the kernel's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// How often `openat2` is asked again after `EAGAIN` before the error is
/// returned.
const OPENAT2_TRIES: u32 = 8;

/// Does this kernel lack `openat2`? Learnt from its first `ENOSYS`, so that
/// an old kernel is not asked again on every request.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Open `path` (relative, no leading slash) beneath `dir` for `purpose`,
/// close-on-exec. An error with `EXDEV` if resolving it would leave `dir`,
/// `ELOOP` for too many links; otherwise the error of the open.
pub fn open_beneath(dir: BorrowedFd<'_>, path: &CStr, purpose: Purpose) -> io::Result<File> {
    open(dir, path, purpose.flags(), Resolver::Kernel).map(File::from)
}

/// The metadata of `path` beneath `dir`, resolved as [`open_beneath`] would.
pub fn stat_beneath(dir: BorrowedFd<'_>, path: &CStr) -> io::Result<Metadata> {
    open_beneath(dir, path, Purpose::Stat)?.metadata()
}

/// Who resolves the path. Only the tests choose [`Resolver::Walk`] on a
/// kernel that has `openat2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolver {
    /// `openat2`, falling back to the walk where the kernel lacks it.
    Kernel,
    /// The component-by-component walk.
    #[cfg(test)]
    Walk,
}

fn open(dir: BorrowedFd<'_>, path: &CStr, flags: OFlags, by: Resolver) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC;
    if by == Resolver::Kernel && !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    break;
                }
                // A rename anywhere while a `..` was resolved: the kernel
                // could not be sure it stayed beneath, and asks for a retry.
                Err(Errno::AGAIN) if tries < OPENAT2_TRIES => tries += 1,
                done => return done.map_err(io::Error::from),
            }
        }
    }
    walk(dir, path.to_bytes(), flags).map_err(io::Error::from)
}

/// Resolve `path` beneath `root` one component at a time, as
/// `RESOLVE_BENEATH` does: `..` may climb back only as far as `root`, an
/// absolute path or link target is refused, and links are read, never
/// followed by the kernel.
fn walk(root: BorrowedFd<'_>, path: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    if path.is_empty() {
        return Err(Errno::NOENT);
    }
    if path.starts_with(b"/") {
        return Err(Errno::XDEV);
    }
    // A trailing slash asks for a directory, as it does of the kernel.
    let final_flags = if path.ends_with(b"/") {
        flags | OFlags::DIRECTORY
    } else {
        flags
    };
    // The directories opened from `root` down to where the walk stands.
    let mut dirs: Vec<OwnedFd> = Vec::new();
    // Components still to resolve, the next one last.
    let mut todo: Vec<Vec<u8>> = Vec::new();
    push_components(&mut todo, path);
    let mut links = 0;
    loop {
        let at = dirs.last().map_or(root, |d| d.as_fd());
        let Some(name) = todo.pop() else {
            // The path names the directory the walk stands in ("." or "a/..").
            return rustix::fs::openat(at, c".", final_flags, Mode::empty());
        };
        if name == b".." {
            if dirs.pop().is_none() {
                return Err(Errno::XDEV);
            }
            continue;
        }
        let last = todo.is_empty();
        let opened = if last {
            open_last(at, &name, final_flags)?
        } else {
            open_directory(at, &name)?
        };
        match opened {
            Step::Opened(fd) if last => return Ok(fd),
            Step::Opened(fd) => dirs.push(fd),
            Step::Link(target) => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Errno::LOOP);
                }
                if target.starts_with(b"/") {
                    return Err(Errno::XDEV);
                }
                push_components(&mut todo, &target);
            }
        }
    }
}

/// What one step of the walk found.
enum Step {
    /// The component, opened.
    Opened(OwnedFd),
    /// A symbolic link, with its target, to walk in its place.
    Link(Vec<u8>),
}

/// Push `path`'s components onto `todo` so that the first is popped first;
/// empty components and `.` mean nothing and are dropped.
fn push_components(todo: &mut Vec<Vec<u8>>, path: &[u8]) {
    todo.extend(
        path.split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .rev()
            .map(<[u8]>::to_vec),
    );
}

/// A directory on the way, opened without following a link.
fn open_directory(at: BorrowedFd<'_>, name: &[u8]) -> Result<Step, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(at, name, flags, Mode::empty()) {
        Ok(fd) => Ok(Step::Opened(fd)),
        // A link (or a file): which one, the object itself tells.
        Err(Errno::NOTDIR) => link_or(at, name, Errno::NOTDIR),
        Err(e) => Err(e),
    }
}

/// The walk's last component, opened with the caller's flags without
/// following a link.
fn open_last(at: BorrowedFd<'_>, name: &[u8], flags: OFlags) -> Result<Step, Errno> {
    match rustix::fs::openat(at, name, flags | OFlags::NOFOLLOW, Mode::empty()) {
        // O_PATH | O_NOFOLLOW opens a link itself: look at what was opened.
        Ok(fd) if flags.contains(OFlags::PATH) => {
            if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) == FileType::Symlink {
                Ok(Step::Link(link_target(&fd)?))
            } else {
                Ok(Step::Opened(fd))
            }
        }
        Ok(fd) => Ok(Step::Opened(fd)),
        // ELOOP: a link met O_NOFOLLOW; ENOTDIR: perhaps a link met O_DIRECTORY.
        Err(e @ (Errno::LOOP | Errno::NOTDIR)) => link_or(at, name, e),
        Err(e) => Err(e),
    }
}

/// If `name` in `at` is a symbolic link, its target; else `otherwise`. The
/// link is opened (`O_PATH | O_NOFOLLOW`) and read through that descriptor,
/// so the target read is the one of the object found.
fn link_or(at: BorrowedFd<'_>, name: &[u8], otherwise: Errno) -> Result<Step, Errno> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(at, name, flags, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::Symlink {
        return Err(otherwise);
    }
    Ok(Step::Link(link_target(&fd)?))
}

/// The target of the link open (`O_PATH`) as `link`.
fn link_target(link: &OwnedFd) -> Result<Vec<u8>, Errno> {
    // An empty name reads the link the descriptor itself refers to.
    Ok(rustix::fs::readlinkat(link, c"", Vec::new())?.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    /// Held by the test that renames in a loop, and by those that resolve
    /// `..` with `openat2`: each rename makes a concurrent `..` lookup
    /// answer `EAGAIN`, which the retries absorb, but not without limit.
    static RENAMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn renaming() -> std::sync::MutexGuard<'static, ()> {
        RENAMING.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A directory `root` inside a scratch directory, with `outside.txt`
    /// next to `root` (outside it) and `root/a/b/inner.txt`.
    struct Tree {
        top: PathBuf,
        root: File,
    }

    impl Tree {
        fn new(name: &str) -> Tree {
            let top =
                std::env::temp_dir().join(format!("mpm-sys-beneath-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&top);
            std::fs::create_dir_all(top.join("root/a/b")).unwrap();
            std::fs::write(top.join("outside.txt"), b"secret\n").unwrap();
            std::fs::write(top.join("root/a/b/inner.txt"), b"inner\n").unwrap();
            std::fs::write(top.join("root/top.txt"), b"top\n").unwrap();
            let root = File::open(top.join("root")).unwrap();
            Tree { top, root }
        }

        fn link(&self, target: &str, at: &str) {
            symlink(target, self.top.join("root").join(at)).unwrap();
        }

        /// Open `path` for reading with `by`; its contents, or the errno.
        fn read(&self, path: &CStr, by: Resolver) -> Result<String, i32> {
            let fd = open(self.root.as_fd(), path, Purpose::Read.flags(), by)
                .map_err(|e| e.raw_os_error().unwrap())?;
            let mut s = String::new();
            File::from(fd).read_to_string(&mut s).unwrap();
            Ok(s)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.top);
        }
    }

    #[test]
    fn the_walk_opens_nested_files_and_links_that_stay_inside() {
        let _turn = renaming();
        let t = Tree::new("inside");
        t.link("a/b/inner.txt", "shortcut");
        t.link("../top.txt", "a/up");
        t.link("b", "a/bee");
        for by in [Resolver::Walk, Resolver::Kernel] {
            assert_eq!(t.read(c"a/b/inner.txt", by), Ok("inner\n".into()), "{by:?}");
            assert_eq!(t.read(c"./a//b/./inner.txt", by), Ok("inner\n".into()));
            assert_eq!(t.read(c"a/b/../../top.txt", by), Ok("top\n".into()));
            assert_eq!(t.read(c"shortcut", by), Ok("inner\n".into()), "{by:?}");
            assert_eq!(t.read(c"a/up", by), Ok("top\n".into()), "{by:?}");
            assert_eq!(t.read(c"a/bee/inner.txt", by), Ok("inner\n".into()));
            assert_eq!(t.read(c"a/b/missing", by), Err(libc::ENOENT));
            assert_eq!(t.read(c"top.txt/x", by), Err(libc::ENOTDIR), "{by:?}");
        }
    }

    #[test]
    fn the_walk_refuses_every_way_out_of_the_directory() {
        let _turn = renaming();
        let t = Tree::new("outside");
        t.link("../outside.txt", "escape");
        t.link("../../../outside.txt", "a/b/deep-escape");
        t.link(&t.top.join("outside.txt").to_string_lossy(), "absolute");
        t.link("..", "up");
        t.link("loop", "loop");
        for by in [Resolver::Walk, Resolver::Kernel] {
            assert_eq!(t.read(c"../outside.txt", by), Err(libc::EXDEV), "{by:?}");
            assert_eq!(t.read(c"a/../../outside.txt", by), Err(libc::EXDEV));
            assert_eq!(t.read(c"escape", by), Err(libc::EXDEV), "{by:?}");
            assert_eq!(t.read(c"a/b/deep-escape", by), Err(libc::EXDEV));
            assert_eq!(t.read(c"absolute", by), Err(libc::EXDEV), "{by:?}");
            assert_eq!(t.read(c"up/outside.txt", by), Err(libc::EXDEV), "{by:?}");
            assert_eq!(t.read(c"loop", by), Err(libc::ELOOP), "{by:?}");
        }
        assert_eq!(t.read(c"/etc/passwd", Resolver::Walk), Err(libc::EXDEV));
    }

    #[test]
    fn a_directory_replaced_by_a_link_outside_is_refused_by_the_walk() {
        let t = Tree::new("swap");
        assert_eq!(
            t.read(c"a/b/inner.txt", Resolver::Walk),
            Ok("inner\n".into())
        );
        let b = t.top.join("root/a/b");
        std::fs::rename(&b, t.top.join("root/a/old-b")).unwrap();
        std::fs::create_dir(t.top.join("elsewhere")).unwrap();
        std::fs::write(t.top.join("elsewhere/inner.txt"), b"secret\n").unwrap();
        symlink(t.top.join("elsewhere"), &b).unwrap();
        assert_eq!(t.read(c"a/b/inner.txt", Resolver::Walk), Err(libc::EXDEV));
        std::fs::remove_file(&b).unwrap();
        symlink("../../../elsewhere", &b).unwrap();
        assert_eq!(t.read(c"a/b/inner.txt", Resolver::Walk), Err(libc::EXDEV));
    }

    #[test]
    fn a_link_swapped_in_while_the_walk_runs_never_lets_it_out() {
        let _turn = renaming();
        // A thread keeps exchanging `a/b` with a link to a directory outside
        // the root that has the same names. Checking a name and then opening
        // it (the old fallback) reads the outside file whenever the exchange
        // falls between the two (within two seconds here, most runs); the
        // walk, whose check is its open, never.
        use rustix::fs::RenameFlags;
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        let t = Tree::new("race");
        std::fs::create_dir(t.top.join("elsewhere")).unwrap();
        std::fs::write(t.top.join("elsewhere/inner.txt"), b"secret\n").unwrap();
        symlink(t.top.join("elsewhere"), t.top.join("root/a/swap")).unwrap();
        let a = File::open(t.top.join("root/a")).unwrap();
        let exchange = || rustix::fs::renameat_with(&a, "b", &a, "swap", RenameFlags::EXCHANGE);
        if let Err(e) = exchange().and_then(|()| exchange()) {
            eprintln!("skipped: this file system cannot exchange two names ({e})");
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(&a, "b", &a, "swap", RenameFlags::EXCHANGE).unwrap();
                }
            })
        };
        let (mut inside, mut refused) = (0, 0);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline || inside == 0 || refused == 0 {
            match t.read(c"a/b/inner.txt", Resolver::Walk) {
                Ok(text) => {
                    assert_eq!(text, "inner\n", "the walk read a file outside the root");
                    inside += 1;
                }
                // Refused: the link met (EXDEV), or an object that changed
                // kind between two steps (ENOTDIR), or the name in flight.
                Err(e) => {
                    assert!(
                        [libc::EXDEV, libc::ENOTDIR, libc::ENOENT].contains(&e),
                        "errno {e}"
                    );
                    refused += 1;
                }
            }
            assert!(Instant::now() < deadline + Duration::from_secs(10));
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
    }

    #[test]
    fn stat_beneath_describes_a_link_s_target_not_the_link() {
        let t = Tree::new("stat");
        t.link("a", "dir-link");
        t.link("../outside.txt", "escape");
        let root = t.root.as_fd();
        for by in [Resolver::Walk, Resolver::Kernel] {
            let stat = |p: &CStr| {
                open(root, p, Purpose::Stat.flags(), by)
                    .and_then(|fd| File::from(fd).metadata())
                    .map_err(|e| e.raw_os_error().unwrap())
            };
            assert!(stat(c"dir-link").unwrap().is_dir(), "{by:?}");
            assert_eq!(stat(c"top.txt").unwrap().len(), 4);
            assert_eq!(stat(c"escape").err(), Some(libc::EXDEV), "{by:?}");
        }
        assert!(stat_beneath(root, c"a/b").unwrap().is_dir());
        assert_eq!(
            open_beneath(root, c"", Purpose::Read)
                .err()
                .map(|e| e.kind()),
            { Some(io::ErrorKind::NotFound) }
        );
    }

    #[test]
    fn a_trailing_slash_asks_for_a_directory() {
        let t = Tree::new("slash");
        for by in [Resolver::Walk, Resolver::Kernel] {
            assert_eq!(t.read(c"top.txt/", by), Err(libc::ENOTDIR), "{by:?}");
            let dir = open(t.root.as_fd(), c"a/", Purpose::Read.flags(), by).unwrap();
            assert!(File::from(dir).metadata().unwrap().is_dir());
        }
    }
}
