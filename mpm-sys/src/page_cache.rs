//! What the page cache holds of a file, and reads that never wait for the
//! disk: `cachestat(2)`, `preadv2(RWF_NOWAIT)` and `posix_fadvise`. The
//! policy (which to ask first, what an error means) is the caller's.

use std::io;
use std::num::NonZeroU64;
use std::os::fd::AsFd;

use rustix::fs::Advice;
use rustix::io::{IoSliceMut, ReadWriteFlags};

/// The size of a page of memory, in bytes.
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// `cachestat(2)`'s answer for a range of a file, in pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CacheStat {
    /// Pages of the range in the page cache.
    pub cached: u64,
    /// Of those, dirty ones.
    pub dirty: u64,
    /// Pages being written back.
    pub writeback: u64,
    /// Pages evicted from the cache.
    pub evicted: u64,
    /// Pages evicted recently enough that reading them again counts as a
    /// refault.
    pub recently_evicted: u64,
}

/// `struct cachestat_range`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `cachestat(2)`'s number (Linux 6.5), the same on these architectures since
/// the system-call tables were unified. Declared here because neither libc
/// (which has `SYS_cachestat` for a few targets only, not x86_64's glibc)
/// nor rustix (which lists it as not implemented) offers it; the test below
/// checks the kernel's answer against the page cache.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "powerpc64",
    target_arch = "s390x"
))]
const SYS_CACHESTAT: Option<libc::c_long> = Some(451);
/// Unknown here: [`cachestat`] answers `ENOSYS`.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "powerpc64",
    target_arch = "s390x"
)))]
const SYS_CACHESTAT: Option<libc::c_long> = None;

/// How much of `offset..offset + len` of `file` the page cache holds
/// (`len` 0: to the end of the file). `ENOSYS` from a kernel before 6.5 or
/// another architecture; `EPERM` where a seccomp filter forbids it.
pub fn cachestat(file: impl AsFd, offset: u64, len: u64) -> io::Result<CacheStat> {
    use std::os::fd::AsRawFd;
    let Some(number) = SYS_CACHESTAT else {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    };
    let range = CachestatRange { off: offset, len };
    let mut stat = CacheStat::default();
    // SAFETY: the descriptor is borrowed, so open for the call; `range` and
    // `stat` are `repr(C)` copies of the kernel's `struct cachestat_range`
    // and `struct cachestat` (five u64), live across the call, and only
    // `stat` is written; the flags are 0, the only value defined.
    let rc = unsafe {
        libc::syscall(
            number,
            file.as_fd().as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut CacheStat,
            0u32,
        )
    };
    if rc == 0 {
        Ok(stat)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One `preadv2(RWF_NOWAIT)` into `buf` at `offset`: bytes read (0 at end of
/// file), or `EAGAIN` if the data is not in the page cache (`EOPNOTSUPP`
/// where the file system cannot say, `EINTR` if interrupted: the caller
/// decides).
pub fn read_nowait(file: impl AsFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut iov = [IoSliceMut::new(buf)];
    Ok(rustix::io::preadv2(
        file,
        &mut iov,
        offset,
        ReadWriteFlags::NOWAIT,
    )?)
}

/// Ask the kernel to drop the clean cached pages of `offset..offset + len`
/// of `file` (`len` 0: to the end), as `posix_fadvise(POSIX_FADV_DONTNEED)`.
pub fn drop_cached(file: impl AsFd, offset: u64, len: u64) -> io::Result<()> {
    Ok(rustix::fs::fadvise(
        file,
        offset,
        NonZeroU64::new(len),
        Advice::DontNeed,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;

    /// Linux's version as (major, minor), from /proc.
    fn kernel() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.trim().split(['.', '-']);
        let major = parts.next().unwrap().parse().unwrap();
        let minor = parts.next().unwrap().parse().unwrap();
        (major, minor)
    }

    #[test]
    fn cachestat_counts_the_pages_of_a_file_just_written() {
        let path = std::env::temp_dir().join(format!("mpm-sys-cachestat-{}", std::process::id()));
        let pages = 16u64;
        {
            let mut f = File::create(&path).unwrap();
            f.write_all(&vec![1u8; (pages * page_size()) as usize])
                .unwrap();
        }
        let f = File::open(&path).unwrap();
        match cachestat(&f, 0, pages * page_size()) {
            // The number and the layout are right: the kernel counts what
            // was just written, and nothing past the end of the file.
            Ok(stat) => {
                assert_eq!(stat.cached, pages, "{stat:?}");
                let past = cachestat(&f, pages * page_size(), page_size()).unwrap();
                assert_eq!(past.cached, 0, "{past:?}");
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                assert!(kernel() < (6, 5), "Linux {:?} has cachestat", kernel());
            }
            Err(e) => panic!("cachestat: {e}"),
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_no_wait_read_reads_cached_bytes_and_nothing_past_the_end() {
        let path = std::env::temp_dir().join(format!("mpm-sys-nowait-{}", std::process::id()));
        std::fs::write(&path, b"cached bytes").unwrap();
        let f = File::open(&path).unwrap();
        let mut buf = [0u8; 6];
        assert_eq!(read_nowait(&f, &mut buf, 7).unwrap(), 5);
        assert_eq!(&buf[..5], b"bytes");
        assert_eq!(read_nowait(&f, &mut buf, 12).unwrap(), 0);
        drop_cached(&f, 0, 0).unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
