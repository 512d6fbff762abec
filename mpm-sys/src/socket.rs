//! The socket calls std and socket2 do not make, on descriptors borrowed
//! for the call: `accept4` with `SOCK_NONBLOCK`, `TCP_NOTSENT_LOWAT`, a
//! one-byte peek for pending input, `send` with `MSG_MORE`.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};

/// Accept one pending connection already non-blocking and close-on-exec
/// (`accept4`): an event loop saves the `ioctl` that would make it so
/// afterwards. `WouldBlock` when none is queued.
pub fn accept_nonblocking(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let fd = listener.as_raw_fd();
    // SAFETY: try_init hands accept4 a zeroed sockaddr_storage and its
    // length to fill in; `fd` is the listener's, open while it is borrowed.
    let (raw, addr) = unsafe {
        socket2::SockAddr::try_init(|storage, len| loop {
            let r = libc::accept4(
                fd,
                storage.cast(),
                len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            );
            if r >= 0 {
                return Ok(r);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        })
    }?;
    // SAFETY: accept4 just returned this descriptor: open, and owned by
    // nothing else.
    let stream = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let peer = addr
        .as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "accepted a non-IP address"))?;
    Ok((stream, peer))
}

/// Set `TCP_NOTSENT_LOWAT` (the most unsent bytes the kernel queues before
/// the socket counts as full) on a TCP socket; neither socket2 nor nix nor
/// rustix wraps it. Values past `c_int` are clamped.
pub fn set_notsent_lowat(socket: impl AsFd, bytes: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: a descriptor borrowed for the call, and a pointer to a c_int
    // with its size, as TCP_NOTSENT_LOWAT takes; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A TCP socket's `TCP_NOTSENT_LOWAT`.
pub fn notsent_lowat(socket: impl AsFd) -> io::Result<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a descriptor borrowed for the call; the kernel writes at most
    // `len` bytes into `value`, a c_int we own.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(u32::try_from(value).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Has the peer sent something not yet read (at least one byte waiting)?
/// False at end of file, on error, or when nothing waits; never blocks.
pub fn has_pending_input(socket: impl AsFd) -> bool {
    let mut byte = [0u8; 1];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    matches!(rustix::net::recv(socket, &mut byte, flags), Ok((n, _)) if n > 0)
}

/// Has the peer of `socket` closed its end (`POLLRDHUP`: its FIN came, even
/// with bytes before it still unread, a TLS client's close_notify say), or
/// reset the connection, or did it fail? A `poll` that does not wait.
pub fn peer_closed(socket: impl AsFd) -> bool {
    use std::os::fd::AsRawFd;
    let want = crate::readiness::Ready {
        hang_up: true,
        ..crate::readiness::Ready::default()
    };
    let fd = socket.as_fd().as_raw_fd();
    crate::readiness::poll_numbers(&[(fd, want)], Some(std::time::Duration::ZERO))
        .is_ok_and(|r| r[0].hang_up)
}

/// Read what `socket` has into `buf` (`recv`). The system call itself
/// (rustix's), not libc's wrapper, which std's `Read` goes through: that
/// one is a cancellation point, and marks the thread cancellable around
/// every call (a few dozen instructions each, two reads a proxied
/// request). Interrupted by a signal, it returns `Interrupted`, as std's
/// does.
pub fn recv(socket: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    rustix::net::recv(socket.as_fd(), buf, rustix::net::RecvFlags::empty())
        .map(|(n, _)| n)
        .map_err(io::Error::from)
}

/// Write `buf` (`send`, `MSG_NOSIGNAL`: a closed peer is an error, not a
/// SIGPIPE), telling the kernel more data follows at once (`MSG_MORE`)
/// when `more` is set. Retries when interrupted by a signal.
pub fn send(socket: impl AsFd, buf: &[u8], more: bool) -> io::Result<usize> {
    use rustix::net::SendFlags;
    let flags = if more {
        SendFlags::MORE | SendFlags::NOSIGNAL
    } else {
        SendFlags::NOSIGNAL
    };
    // EINTR is the caller's to retry: a signal may mean "stop" (a prefork
    // child's fast stop), which only the caller can check between tries.
    rustix::net::send(socket.as_fd(), buf, flags).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn pending_input_is_seen_without_being_read() {
        let (mut c, s) = pair();
        assert!(!has_pending_input(&s));
        c.write_all(b"x").unwrap();
        while !has_pending_input(&s) {
            std::thread::yield_now();
        }
        assert!(has_pending_input(&s), "a peek reads nothing");
    }

    #[test]
    fn the_send_low_water_mark_is_set_and_read_back() {
        let (c, _s) = pair();
        set_notsent_lowat(&c, 16 * 1024).unwrap();
        assert_eq!(notsent_lowat(&c).unwrap(), 16 * 1024);
    }

    #[test]
    fn accept_nonblocking_says_would_block_then_accepts() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let e = accept_nonblocking(&l).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = loop {
            match accept_nonblocking(&l) {
                Ok(a) => break a,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(peer, c.local_addr().unwrap());
        assert_eq!(send(&s, b"hi", true).unwrap(), 2);
    }
}
