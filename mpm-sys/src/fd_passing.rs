//! Descriptors that arrive from outside this process's own calls, made
//! owned: those received over a Unix socket (`SCM_RIGHTS`) and those
//! inherited at exec from the process that started this one.

use std::io;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

/// Receive one message without waiting (`WouldBlock` when none waits) into
/// `buf`, with every descriptor it carries, owned and close-on-exec.
/// Retries when interrupted by a signal. Returns the bytes received.
pub fn receive_with_fds(socket: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let socket = socket.as_fd();
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let mut space = nix::cmsg_space!([RawFd; 4]);
        let msg = match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut received = Vec::new();
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: the kernel just installed these descriptors in
                // this process for us; nothing else refers to them.
                received.extend(
                    fds.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        return Ok((msg.bytes, received));
    }
}

/// Serialises [`claim_inherited`]'s check and mark.
static CLAIMING: Mutex<()> = Mutex::new(());

/// Take ownership of descriptor `fd`, inherited at exec from the process
/// that started this one (which named it, in an environment variable say).
///
/// Refused (`InvalidInput`) unless `fd` is above 2 (not stdio), open, and
/// not close-on-exec: a descriptor this process opened itself has the flag
/// (std, socket2, rustix and this project open everything close-on-exec),
/// as has one claimed before, since claiming sets it. So no descriptor is
/// owned twice through this function, nor one that other code of this
/// process opened.
///
/// That rests on one convention, as every "descriptors passed at exec"
/// protocol does (systemd's `LISTEN_FDS`, the `listenfd` crate): code of
/// this process that opens a descriptor without close-on-exec (nix's
/// `pipe`, say) must not pass its number here.
pub fn claim_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let refuse = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {fd} {why}"),
        )
    };
    if fd < 3 {
        return Err(refuse("is standard input, output or error"));
    }
    let _one_at_a_time = CLAIMING.lock().unwrap_or_else(|p| p.into_inner());
    let flags = fcntl(fd, FcntlArg::F_GETFD).map_err(|_| refuse("is not open"))?;
    if FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC) {
        return Err(refuse(
            "is not one inherited at exec (it is close-on-exec: claimed already, or opened here)",
        ));
    }
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
    // SAFETY: `fd` is open and was not close-on-exec, so this function
    // (which sets the flag, under a lock) has not claimed it before, and
    // no code of this process opened it (everything here opens
    // close-on-exec: the convention documented above): it came with the
    // exec, and is now owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{
        sendmsg, socketpair, AddressFamily, ControlMessage, SockFlag, SockType,
    };

    #[test]
    fn descriptors_sent_arrive_owned_with_their_message() {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let e = receive_with_fds(&b, &mut [0u8; 1]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let passed = [a.as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&passed)];
        sendmsg::<()>(
            a.as_raw_fd(),
            &[io::IoSlice::new(b"c")],
            &cmsg,
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let mut buf = [0u8; 1];
        let (n, fds) = receive_with_fds(&b, &mut buf).unwrap();
        assert_eq!((n, &buf, fds.len()), (1, b"c", 1));
        assert_ne!(fds[0].as_raw_fd(), a.as_raw_fd(), "a new descriptor");
    }

    #[test]
    fn only_an_open_descriptor_without_close_on_exec_is_claimed_and_only_once() {
        assert!(claim_inherited(1).is_err());
        let (r, _w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let err = claim_inherited(r.as_raw_fd()).unwrap_err();
        assert!(err.to_string().contains("close-on-exec"), "{err}");
        // What an exec would have left: the flag cleared.
        let (r2, _w2) = nix::unistd::pipe().unwrap();
        let raw = r2.as_raw_fd();
        std::mem::forget(r2); // handed over, as an exec does
        let owned = claim_inherited(raw).unwrap();
        assert_eq!(owned.as_raw_fd(), raw);
        assert!(claim_inherited(raw).is_err(), "claimed twice");
    }
}
