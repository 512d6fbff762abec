//! Listening sockets, bound before any worker starts.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use crate::error::{Error, Result};
use crate::hand_over::HandOver;

/// A bound, listening, non-blocking TCP socket; or the receiving end of the
/// [`HandOver`] channel, from which connections handed over by an older
/// generation are "accepted" the same way.
///
/// Non-blocking because workers wait for it with `poll` together with the
/// server's stop signal, then accept; a worker that loses the race to a sibling
/// gets `WouldBlock` instead of sleeping in `accept`.
#[derive(Debug)]
pub struct Listener {
    socket: Kind,
    addr: SocketAddr,
}

#[derive(Debug)]
enum Kind {
    Tcp(TcpListener),
    HandOver(Arc<HandOver>),
}

impl Listener {
    /// Bind `addr` with `SO_REUSEADDR` (and `IPV6_V6ONLY` for IPv6, so that
    /// `[::]:80` and `0.0.0.0:80` can both be listed) and start listening.
    pub fn bind(addr: SocketAddr, backlog: u32) -> Result<Listener> {
        let wrap = |e| Error::bind(addr.to_string(), e);
        let socket = Self::socket(addr, false)?;
        socket
            .listen(backlog.min(i32::MAX as u32) as i32)
            .map_err(wrap)?;
        socket.set_nonblocking(true).map_err(wrap)?;
        let socket: TcpListener = socket.into();
        let addr = socket.local_addr().map_err(wrap)?;
        Ok(Listener {
            socket: Kind::Tcp(socket),
            addr,
        })
    }

    /// Take over a socket that is already listening (passed by systemd's
    /// socket activation, say).
    pub fn from_std(socket: TcpListener) -> Result<Listener> {
        let wrap = |e| Error::io("using an inherited listening socket", e);
        socket.set_nonblocking(true).map_err(wrap)?;
        socket2::SockRef::from(&socket)
            .set_tcp_nodelay(true)
            .map_err(wrap)?;
        let addr = socket.local_addr().map_err(wrap)?;
        Ok(Listener {
            socket: Kind::Tcp(socket),
            addr,
        })
    }

    /// Bind every address, failing on the first that cannot be bound.
    pub fn bind_all(addrs: &[SocketAddr], backlog: u32) -> Result<Vec<Listener>> {
        addrs.iter().map(|&a| Listener::bind(a, backlog)).collect()
    }

    /// Bind `addr` with `SO_REUSEPORT` but do not listen: the address is
    /// reserved (and, for port 0, chosen) for processes that each bind a
    /// listening socket of their own with [`Listener::bind_reuseport`]. Not
    /// listening, this socket gets no share of the connections.
    pub fn reserve(addr: SocketAddr) -> Result<Listener> {
        let socket = Self::socket(addr, true)?;
        socket
            .set_nonblocking(true)
            .map_err(|e| Error::bind(addr.to_string(), e))?;
        let socket: TcpListener = socket.into();
        let addr = socket
            .local_addr()
            .map_err(|e| Error::bind(addr.to_string(), e))?;
        Ok(Listener {
            socket: Kind::Tcp(socket),
            addr,
        })
    }

    /// Reserve every address (see [`Listener::reserve`]).
    pub fn reserve_all(addrs: &[SocketAddr]) -> Result<Vec<Listener>> {
        addrs.iter().map(|&a| Listener::reserve(a)).collect()
    }

    /// A listening socket of this process's own on an address reserved with
    /// [`Listener::reserve`]: the kernel spreads new connections over every
    /// such socket by a hash of the client's address and port.
    pub fn bind_reuseport(addr: SocketAddr, backlog: u32) -> Result<Listener> {
        let socket = Self::socket(addr, true)?;
        let wrap = |e| Error::bind(addr.to_string(), e);
        socket
            .listen(backlog.min(i32::MAX as u32) as i32)
            .map_err(wrap)?;
        socket.set_nonblocking(true).map_err(wrap)?;
        Ok(Listener {
            socket: Kind::Tcp(socket.into()),
            addr,
        })
    }

    fn socket(addr: SocketAddr, reuseport: bool) -> Result<Socket> {
        let wrap = |e| Error::bind(addr.to_string(), e);
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(wrap)?;
        socket.set_reuse_address(true).map_err(wrap)?;
        if reuseport {
            socket.set_reuse_port(true).map_err(wrap)?;
        }
        if addr.is_ipv6() {
            socket.set_only_v6(true).map_err(wrap)?;
        }
        // Accepted sockets inherit it (Linux copies the listener's options),
        // which saves a setsockopt per connection.
        socket.set_tcp_nodelay(true).map_err(wrap)?;
        socket.bind(&addr.into()).map_err(wrap)?;
        Ok(socket)
    }

    /// The receiving end of `hand_over` as a listener: its "connections"
    /// are those an older generation handed over (see [`HandOver`]), taken
    /// with [`accept`](Self::accept) like any other. Its address is
    /// `0.0.0.0:0`.
    pub fn hand_over(hand_over: HandOver) -> Listener {
        Listener {
            socket: Kind::HandOver(Arc::new(hand_over)),
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        }
    }

    /// The hand-over channel, if this is its receiving end: a stopping
    /// process with a successor sends connections on it.
    pub fn hand_over_channel(&self) -> Option<&HandOver> {
        match &self.socket {
            Kind::HandOver(h) => Some(h),
            Kind::Tcp(_) => None,
        }
    }

    /// The bound address (with the real port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accept one pending connection (`WouldBlock` when none is queued).
    /// The accepted socket is blocking, close-on-exec, and inherits the
    /// listener's `TCP_NODELAY` (responses are written whole) and any
    /// timeout set with [`set_accepted_write_timeout`](Self::set_accepted_write_timeout).
    pub fn accept(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
        match &self.socket {
            Kind::Tcp(socket) => socket.accept(),
            Kind::HandOver(h) => h.receive(false),
        }
    }

    /// Accept one pending connection already non-blocking, with
    /// `accept4(SOCK_NONBLOCK)`: an event loop saves the `ioctl` that would
    /// make it so afterwards. `WouldBlock` when none is queued.
    pub fn accept_nonblocking(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
        let socket = match &self.socket {
            Kind::Tcp(socket) => socket,
            Kind::HandOver(h) => return h.receive(true),
        };
        mpm_sys::socket::accept_nonblocking(socket)
    }

    /// Set on `listeners` the options `settings` ask of every connection they
    /// accept, which accepted sockets copy: the send low-water mark, and the
    /// read and write timeouts (used by blocking MPMs, ignored by
    /// non-blocking sockets).
    /// Every MPM calls this once its listeners are final.
    pub fn pass_on_options(listeners: &[Listener], settings: &crate::MpmSettings) -> Result<()> {
        for l in listeners {
            let socket = match &l.socket {
                Kind::Tcp(socket) => socket,
                Kind::HandOver(h) => {
                    h.set_options(settings.timeout, settings.send_lowat);
                    continue;
                }
            };
            l.set_accepted_send_lowat(settings.send_lowat)?;
            l.set_accepted_write_timeout(settings.timeout)?;
            socket2::SockRef::from(socket)
                .set_read_timeout(Some(settings.timeout))
                .map_err(|e| Error::io("setting the listeners' read timeout", e))?;
        }
        Ok(())
    }

    /// Give every connection accepted from now on this send low-water mark
    /// (`--send-lowat`): `TCP_NOTSENT_LOWAT`, the most unsent bytes the
    /// kernel queues before a socket counts as full. Linux fixes
    /// `SO_SNDLOWAT` at one byte and refuses to set it. Set on the listening
    /// socket, which accepted sockets copy: no setsockopt per connection.
    /// 0 leaves the kernel's default.
    pub fn set_accepted_send_lowat(&self, bytes: u32) -> Result<()> {
        let Kind::Tcp(socket) = &self.socket else {
            return Ok(()); // passed on by `pass_on_options`
        };
        if bytes == 0 {
            return Ok(());
        }
        mpm_sys::socket::set_notsent_lowat(socket, bytes)
            .map_err(|e| Error::io("setting TCP_NOTSENT_LOWAT (--send-lowat) on a listener", e))
    }

    /// Give every connection accepted from now on this `SO_SNDTIMEO`, by
    /// setting it on the listening socket (Linux copies it to accepted
    /// sockets): a blocking MPM then needs no setsockopt per connection.
    pub fn set_accepted_write_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        let Kind::Tcp(socket) = &self.socket else {
            return Ok(()); // passed on by `pass_on_options`
        };
        socket2::SockRef::from(socket)
            .set_write_timeout(Some(timeout))
            .map_err(|e| Error::io("setting the listeners' write timeout", e))
    }

    /// Another descriptor for the same socket (close-on-exec), for a process
    /// that needs listeners of its own.
    pub fn try_clone(&self) -> Result<Listener> {
        let socket = match &self.socket {
            Kind::Tcp(socket) => Kind::Tcp(
                socket
                    .try_clone()
                    .map_err(|e| Error::io("duplicating a listener", e))?,
            ),
            Kind::HandOver(h) => Kind::HandOver(Arc::new(h.try_clone()?)),
        };
        Ok(Listener {
            socket,
            addr: self.addr,
        })
    }

    /// Stop listening for good: the kernel refuses new connections and resets
    /// those queued but not yet accepted, instead of letting them wait for a
    /// server that is going away. The descriptor stays open (so no other file
    /// can take its number while a thread still polls it); pollers see it
    /// ready and `accept` fails.
    pub fn stop_listening(&self) {
        // The hand-over channel stays: what is in it belongs to the next
        // generation, and no new connection reaches it.
        if let Kind::Tcp(socket) = &self.socket {
            let _ =
                nix::sys::socket::shutdown(socket.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
    }

    /// The standard-library listener (`None` for the hand-over channel).
    pub fn as_std(&self) -> Option<&TcpListener> {
        match &self.socket {
            Kind::Tcp(socket) => Some(socket),
            Kind::HandOver(_) => None,
        }
    }
}

impl AsFd for Listener {
    /// The descriptor to poll for a connection to accept.
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.socket {
            Kind::Tcp(socket) => socket.as_fd(),
            Kind::HandOver(h) => h.receiving_fd(),
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn accepted_sockets_inherit_nodelay_and_the_timeouts() {
        let l = Listener::bind("127.0.0.1:0".parse().expect("addr"), 8).expect("bind");
        let timeout = std::time::Duration::from_secs(7);
        let settings = crate::MpmSettings {
            timeout,
            ..crate::MpmSettings::default()
        };
        Listener::pass_on_options(std::slice::from_ref(&l), &settings).expect("options");
        let _c = TcpStream::connect(l.local_addr()).expect("connect");
        let (s, _) = loop {
            match l.accept() {
                Ok(a) => break a,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert!(s.nodelay().expect("nodelay"));
        assert_eq!(s.write_timeout().expect("timeout"), Some(timeout));
        assert_eq!(s.read_timeout().expect("timeout"), Some(timeout));
    }

    #[test]
    fn accepted_sockets_inherit_the_send_low_water_mark() {
        let l = Listener::bind("127.0.0.1:0".parse().expect("addr"), 8).expect("bind");
        l.set_accepted_send_lowat(32 * 1024).expect("lowat");
        let _c = TcpStream::connect(l.local_addr()).expect("connect");
        let (s, _) = loop {
            match l.accept() {
                Ok(a) => break a,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        let value = mpm_sys::socket::notsent_lowat(&s);
        assert_eq!(value.ok(), Some(32 * 1024));
    }

    #[test]
    fn accept_nonblocking_gives_a_nonblocking_socket_and_the_peer() {
        let l = Listener::bind("127.0.0.1:0".parse().expect("addr"), 8).expect("bind");
        assert_eq!(
            l.accept_nonblocking().map(|_| ()).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock)
        );
        let c = TcpStream::connect(l.local_addr()).expect("connect");
        let (mut s, peer) = loop {
            match l.accept_nonblocking() {
                Ok(a) => break a,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(peer, c.local_addr().expect("local"));
        // Nothing sent yet: a non-blocking read says so instead of waiting.
        let mut b = [0u8; 1];
        assert_eq!(
            s.read(&mut b).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::WouldBlock)
        );
    }
}
