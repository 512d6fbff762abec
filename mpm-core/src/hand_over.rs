//! The channel by which one generation hands the next its connections
//! that have not sent a byte: see [`HandOver`].

use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};

use crate::error::{Error, Result};

/// The socket buffer asked for on the sending end: room for a few thousand
/// hand-overs in flight (each a one-byte datagram with a descriptor).
const SEND_BUFFER: usize = 4 << 20;

/// Passing accepted connections that have not sent a byte yet to the next
/// generation of serving processes, with `SCM_RIGHTS`.
///
/// A graceful restart, a restart that re-reads the configuration and a
/// binary upgrade all replace the serving processes while the listening
/// sockets stay open. Connections still queued in the kernel are accepted by
/// whichever generation comes first; but a connection an old process has
/// already accepted, whose client has not yet sent its request (a browser
/// opens one ahead of need, a client is slow), used to keep that process
/// alive until its request came or the graceful timeout cut it off with no
/// answer. With a successor to take it, the old process now sends the
/// socket itself to the next generation, which serves it as if it had just
/// accepted it; the old process exits as soon as its requests in flight are
/// answered.
///
/// The channel is one `AF_UNIX` datagram socket pair, made once by the
/// process that binds the listeners and inherited by every serving process
/// of every generation (and by a new master on an upgrade). Every process
/// can send on one end; the other end is polled like a listening socket
/// (a [`Listener::hand_over`](crate::Listener::hand_over)), so that a
/// handed-over connection is "accepted" by the first idle worker of the
/// current generation, under the same accept mutex or in the same event
/// loop as any other. A connected pair has no datagram queue limit (only the
/// socket buffer), so a burst of hand-overs waits there until taken.
///
/// Only a connection with nothing read from it and nothing written to it
/// is handed over ([`ConnectionHandler::can_hand_over`](crate::ConnectionHandler::can_hand_over)):
/// the socket then carries its whole state. If sending fails (the buffer is
/// full), the old process keeps it and serves it as before.
#[derive(Debug)]
pub struct HandOver {
    send: OwnedFd,
    receive: OwnedFd,
    /// What received sockets get, as accepted ones inherit it from a
    /// listener (see [`Listener::pass_on_options`](crate::Listener::pass_on_options)):
    /// the read and write timeout in milliseconds (0: none), and the send
    /// low-water mark (0: the kernel's).
    timeout_ms: AtomicU64,
    send_lowat: AtomicU32,
}

impl HandOver {
    /// A new channel.
    pub fn new() -> Result<HandOver> {
        let (send, receive) = socketpair(
            AddressFamily::Unix,
            SockType::Datagram,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )
        .map_err(|e| Error::io("creating the hand-over socket pair", e.into()))?;
        // A larger buffer where the kernel allows it; the default holds a
        // couple of hundred hand-overs, which is enough too.
        let _ = socket2::SockRef::from(&send).set_send_buffer_size(SEND_BUFFER);
        Ok(Self::of(send, receive))
    }

    fn of(send: OwnedFd, receive: OwnedFd) -> HandOver {
        HandOver {
            send,
            receive,
            timeout_ms: AtomicU64::new(0),
            send_lowat: AtomicU32::new(0),
        }
    }

    /// The channel from descriptors passed by another process (an upgrading
    /// master), checked to be the two ends of a Unix datagram socket.
    pub fn from_fds(send: OwnedFd, receive: OwnedFd) -> Result<HandOver> {
        for fd in [&send, &receive] {
            let sock = socket2::SockRef::from(fd);
            let ok = sock.r#type().is_ok_and(|t| t == socket2::Type::DGRAM)
                && sock.domain().is_ok_and(|d| d == socket2::Domain::UNIX);
            if !ok {
                return Err(Error::config(format!(
                    "descriptor {} is not a hand-over socket",
                    fd.as_raw_fd()
                )));
            }
            sock.set_nonblocking(true)
                .map_err(|e| Error::io("taking the hand-over socket", e))?;
        }
        Ok(Self::of(send, receive))
    }

    /// The descriptor numbers of the sending and the receiving end, to pass
    /// to a new master.
    pub fn raw_fds(&self) -> [RawFd; 2] {
        [self.send.as_raw_fd(), self.receive.as_raw_fd()]
    }

    /// The sending and the receiving end, borrowed: to keep open for a new
    /// master, at the numbers [`raw_fds`](Self::raw_fds) gives.
    pub fn fds(&self) -> [BorrowedFd<'_>; 2] {
        [self.send.as_fd(), self.receive.as_fd()]
    }

    /// Another handle on the same channel (close-on-exec).
    pub fn try_clone(&self) -> Result<HandOver> {
        let dup = |fd: &OwnedFd| {
            fd.try_clone()
                .map_err(|e| Error::io("duplicating the hand-over socket", e))
        };
        let copy = Self::of(dup(&self.send)?, dup(&self.receive)?);
        copy.timeout_ms
            .store(self.timeout_ms.load(Ordering::Relaxed), Ordering::Relaxed);
        copy.send_lowat
            .store(self.send_lowat.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(copy)
    }

    /// Pass `conn` to whichever process takes it next. The kernel holds a
    /// reference to the socket until then: the caller closes its own
    /// descriptor and must not touch the connection again. `WouldBlock` if
    /// the channel is full (keep it and serve it instead).
    pub fn send(&self, conn: BorrowedFd<'_>) -> io::Result<()> {
        let fds = [conn.as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let byte = [b'c'];
        let iov = [IoSlice::new(&byte)];
        loop {
            match sendmsg::<()>(
                self.send.as_raw_fd(),
                &iov,
                &cmsg,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Take one handed-over connection, close-on-exec, in the mode the
    /// caller asks for and with the options set by
    /// [`set_options`](Self::set_options); `WouldBlock` when none waits.
    pub fn receive(&self, nonblocking: bool) -> io::Result<(TcpStream, std::net::SocketAddr)> {
        loop {
            let mut byte = [0u8; 1];
            let (_, received) = mpm_sys::fd_passing::receive_with_fds(&self.receive, &mut byte)?;
            // One per message as sent; anything else is closed and skipped.
            let mut fds = received.into_iter();
            let Some(fd) = fds.next() else { continue };
            drop(fds);
            let sock = socket2::SockRef::from(&fd);
            if !sock.r#type().is_ok_and(|t| t == socket2::Type::STREAM) {
                continue;
            }
            let stream = TcpStream::from(fd);
            let Ok(peer) = stream.peer_addr() else {
                continue; // the client has gone already
            };
            stream.set_nonblocking(nonblocking)?;
            self.apply_options(&stream);
            return Ok((stream, peer));
        }
    }

    /// The read and write timeout and send low-water mark that received
    /// sockets get (as a listener passes them on to accepted ones).
    pub fn set_options(&self, timeout: Duration, send_lowat: u32) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.timeout_ms.store(ms, Ordering::Relaxed);
        self.send_lowat.store(send_lowat, Ordering::Relaxed);
    }

    fn apply_options(&self, stream: &TcpStream) {
        let ms = self.timeout_ms.load(Ordering::Relaxed);
        if ms > 0 {
            let t = Some(Duration::from_millis(ms));
            let _ = stream.set_read_timeout(t);
            let _ = stream.set_write_timeout(t);
        }
        let lowat = self.send_lowat.load(Ordering::Relaxed);
        if lowat > 0 {
            let _ = mpm_sys::socket::set_notsent_lowat(stream, lowat);
        }
    }

    /// The receiving end, to poll.
    pub fn receiving_fd(&self) -> BorrowedFd<'_> {
        self.receive.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    #[test]
    fn a_connection_sent_is_received_whole_and_the_sender_may_close_its_copy() {
        let channel = HandOver::new().unwrap();
        let other = channel.try_clone().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (accepted, peer) = l.accept().unwrap();
        assert_eq!(
            other.receive(false).map(|_| ()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        channel.send(accepted.as_fd()).unwrap();
        drop(accepted);
        // Sent after the hand-over: it waits in the socket for the new owner.
        client.write_all(b"late request").unwrap();
        other.set_options(Duration::from_secs(7), 0);
        let (mut got, got_peer) = other.receive(false).unwrap();
        assert_eq!(got_peer, peer);
        assert_eq!(got.read_timeout().unwrap(), Some(Duration::from_secs(7)));
        let mut buf = [0u8; 12];
        got.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"late request");
        got.write_all(b"answered").unwrap();
        let mut reply = [0u8; 8];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"answered");
    }

    #[test]
    fn only_hand_over_sockets_are_taken_from_another_process() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(HandOver::from_fds(a.into(), b.into()).is_err());
        let real = HandOver::new().unwrap();
        // Duplicates of the channel's descriptors, owned here.
        let (s, r) = (
            real.send.try_clone().unwrap(),
            real.receive.try_clone().unwrap(),
        );
        assert!(HandOver::from_fds(s, r).is_ok());
    }
}
