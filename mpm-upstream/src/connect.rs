//! Opening a TCP connection without blocking: the socket is non-blocking
//! before `connect(2)`, and an `EINPROGRESS` awaits writability, so that
//! under the event MPM a connect in progress parks the request on the loop.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use mpm_core::waiting::{ready, Await};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::error::{Error, Phase, Result};

/// Connect to `addr`, giving up at `until`. The stream returned is
/// non-blocking, close-on-exec, with `TCP_NODELAY` (a request head goes out
/// at once, not after the previous segment's ACK).
///
/// A refusal or any other failure of the connection itself is an
/// [`Error::Connect`] naming `addr`; the deadline is an
/// [`Error::Timeout`] in [`Phase::Connect`]. Both leave the upstream
/// without a byte of the request.
pub async fn connect_tcp(addr: SocketAddr, until: Instant) -> Result<TcpStream> {
    let failed = |source: io::Error| Error::Connect { addr, source };
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )
    .map_err(failed)?;
    socket.set_tcp_nodelay(true).map_err(failed)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            let fd = socket.as_raw_fd();
            loop {
                ready(Await::writable(fd, until))
                    .await
                    .map_err(|e| Error::io_in(Phase::Connect, e))?;
                if let Some(e) = socket.take_error().map_err(failed)? {
                    return Err(failed(e));
                }
                // A resume may be spurious: connected once the peer has an
                // address.
                match socket.peer_addr() {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => continue,
                    Err(e) => return Err(failed(e)),
                }
            }
        }
        Err(e) => return Err(failed(e)),
    }
    Ok(socket.into())
}

/// Whether the idle socket `stream` has been closed by its peer or has
/// bytes waiting (which a connection between two responses must not):
/// a non-blocking `recv(MSG_PEEK)` of one byte.
pub(crate) fn is_stale(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    match SockRef::from(stream).peek(&mut byte) {
        // End of stream, or a byte nobody asked for.
        Ok(_) => true,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpm_core::waiting::block_on;
    use std::time::Duration;

    #[test]
    fn a_closed_port_is_a_connect_error_naming_the_address() {
        // Bind then drop a listener: its port is closed for a while.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let got = block_on(connect_tcp(addr, Instant::now() + Duration::from_secs(5)));
        match got {
            Err(e @ Error::Connect { .. }) => {
                assert!(e.is_retryable());
                assert!(e.to_string().contains(&addr.to_string()), "{e}");
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
    }

    #[test]
    fn a_connected_stream_is_non_blocking_and_fresh_until_the_peer_writes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let s = block_on(connect_tcp(addr, until)).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        assert!(!is_stale(&s));
        let mut buf = [0u8; 1];
        let would_block = io::Read::read(&mut &s, &mut buf).unwrap_err();
        assert_eq!(would_block.kind(), io::ErrorKind::WouldBlock);
        io::Write::write_all(&mut peer, b"x").unwrap();
        block_on(async {
            let _ = ready(Await::readable(s.as_raw_fd(), until)).await;
        });
        assert!(is_stale(&s));
    }
}
