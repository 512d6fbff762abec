//! Is a file's data in the page cache? An event loop may send or read a
//! file body only when it is: a read that goes to the disk would stall
//! every connection the loop holds, where on a worker it stalls one.
//!
//! [`resident`] asks `cachestat(2)` (Linux 6.5 and later), which counts the
//! cached pages of a range exactly. Before 6.5 it probes with
//! `preadv2(RWF_NOWAIT)`, which reads a byte only if its page is cached,
//! at the range's first and last byte and every 64 KiB between, which the
//! kernel's readahead (in windows of 128 KiB and more) makes a sound sample.
//! `mincore(2)` is not used: since Linux 5.0 it reports every page of a
//! file the caller may not write as resident, which is every file of a
//! docroot a server runs without write access to. Where neither call works
//! (a file system without `RWF_NOWAIT`), the answer is "not resident", so
//! the work goes to a worker: never wrong, only slower.
//!
//! [`read_cached_at`] reads with `RWF_NOWAIT`, for `--sendfile off`.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicU8, Ordering};

use mpm_sys::page_cache::{
    cachestat as kernel_cachestat, page_size, read_nowait as preadv2_nowait,
};

/// Bytes between two probes of the fallback.
const PROBE_STEP: u64 = 64 * 1024;

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

/// Does this kernel have `cachestat(2)`?
static CACHESTAT: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Is every byte of `file` in `offset..offset + len` in the page cache?
/// False when it cannot tell.
pub(crate) fn resident(file: &File, offset: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    match cachestat(file, offset, len) {
        Some(answer) => answer,
        None => probe(file, offset, len),
    }
}

/// `Some(answer)` from `cachestat(2)`, `None` if the kernel lacks it.
fn cachestat(file: &File, offset: u64, len: u64) -> Option<bool> {
    if CACHESTAT.load(Ordering::Relaxed) == NO {
        return None;
    }
    match kernel_cachestat(file, offset, len) {
        Ok(stat) => {
            CACHESTAT.store(YES, Ordering::Relaxed);
            let page = page_size();
            let last = offset.saturating_add(len - 1);
            let pages = last / page - offset / page + 1;
            Some(stat.cached >= pages)
        }
        Err(e) => match e.raw_os_error() {
            // Not this kernel (or forbidden by a seccomp filter): probe instead, from now on.
            Some(libc::ENOSYS) | Some(libc::EPERM) => {
                CACHESTAT.store(NO, Ordering::Relaxed);
                None
            }
            // This file (say, on a file system it does not cover): probe it.
            _ => None,
        },
    }
}

/// Probe the range with one-byte `RWF_NOWAIT` reads.
fn probe(file: &File, offset: u64, len: u64) -> bool {
    let end = offset.saturating_add(len);
    let mut at = offset;
    let mut byte = [0u8; 1];
    loop {
        match read_nowait(file, &mut byte, at) {
            Ok(Some(1)) => {}
            _ => return false,
        }
        if at.saturating_add(1) >= end {
            return true;
        }
        at = at.saturating_add(PROBE_STEP).min(end - 1);
    }
}

/// One `preadv2(RWF_NOWAIT)`: `Ok(None)` if the data is not cached (or
/// the file system cannot say), `Ok(Some(0))` at end of file.
fn read_nowait(file: &File, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
    // Past what a file offset can be: nothing there (and u64::MAX would
    // mean "the current offset" to preadv2).
    if libc::off_t::try_from(offset).is_err() {
        return Ok(Some(0));
    }
    loop {
        let e = match preadv2_nowait(file, buf, offset) {
            Ok(n) => return Ok(Some(n)),
            Err(e) => e,
        };
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN)
            | Some(libc::EOPNOTSUPP)
            | Some(libc::EINVAL)
            | Some(libc::ENOSYS) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Fill as much of `buf` from `offset` as the page cache holds, without
/// waiting for the disk: `Ok(None)` if not even its first page is cached,
/// `Ok(Some(n))` for `n` bytes read (fewer than asked: the rest is not
/// cached, or the file ends).
pub(crate) fn read_cached_at(
    file: &File,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<Option<usize>> {
    let mut done = 0;
    while done < buf.len() {
        match read_nowait(file, &mut buf[done..], offset + done as u64) {
            Ok(Some(0)) => break,
            Ok(Some(n)) => done += n,
            Ok(None) if done == 0 => return Ok(None),
            Ok(None) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Ask the kernel to drop a file's clean pages; true if they went.
    /// Checked with `cachestat` where the kernel has it: a `RWF_NOWAIT`
    /// read of a missing page may start readahead, which would bring the
    /// pages back under the checks that follow.
    fn evict(file: &File, len: u64) -> bool {
        let _ = file.sync_all();
        let _ = mpm_sys::page_cache::drop_cached(file, 0, len);
        match cachestat(file, 0, len) {
            Some(cached) => !cached,
            None => {
                let mut b = [0u8; 1];
                matches!(read_nowait(file, &mut b, 0), Ok(None))
            }
        }
    }

    #[test]
    fn a_file_just_written_is_resident_and_an_evicted_one_is_not() {
        let path = std::env::temp_dir().join(format!("mpm-page-cache-{}", std::process::id()));
        let len = 512 * 1024;
        {
            let mut f = File::create(&path).unwrap();
            f.write_all(&vec![7u8; len]).unwrap();
        }
        let f = File::open(&path).unwrap();
        assert!(resident(&f, 0, len as u64));
        assert!(probe(&f, 0, len as u64));
        let mut buf = vec![0u8; 4096];
        assert_eq!(read_cached_at(&f, &mut buf, 0).unwrap(), Some(4096));
        assert_eq!(buf, vec![7u8; 4096]);
        // Each no-wait read below may start readahead of what it missed,
        // so the file is evicted again before each of them.
        if evict(&f, len as u64) {
            assert!(!resident(&f, 0, len as u64));
            assert_eq!(read_cached_at(&f, &mut buf, 0).unwrap(), None);
            if evict(&f, len as u64) {
                assert!(!probe(&f, 0, len as u64));
            }
        } else {
            eprintln!("skipped the eviction half: this file system keeps the pages");
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_empty_range_is_resident_and_the_end_of_file_reads_nothing() {
        let f = File::open("/proc/self/exe").unwrap();
        assert!(resident(&f, 0, 0));
        let mut buf = [0u8; 8];
        let len = f.metadata().unwrap().len();
        assert_eq!(read_cached_at(&f, &mut buf, len).unwrap(), Some(0));
    }
}
