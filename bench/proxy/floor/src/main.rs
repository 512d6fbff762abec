//! The least an epoll reverse proxy can do per request, as a yardstick: a TCP relay on 127.0.0.1.
//! N threads, each with its own SO_REUSEPORT listener and epoll loop; each client connection gets
//! its own origin connection, opened when the client connects and kept for its life; bytes read
//! from one side are written to the other as they are: no parsing, no pool, no timers, no
//! headers added. A keep-alive HTTP/1.1 request then costs what any epoll proxy must pay at
//! least: a receive from the client, a send to the origin, a receive from the origin, a send to
//! the client, and a share of an epoll_wait. `proxy_peers.py` runs it as the `floor` row, so that
//! a proxy's CPU per request is read against that floor in the same run. Not a proxy anyone
//! should deploy: its sends block (a slow reader stalls its thread), which costs nothing when
//! every write fits the socket buffer, as in `fast`. Written on rustix's safe wrappers of the
//! same system calls (no libc, no raw descriptors), as `bench/limit/` is.
//!
//!     floor LISTEN_PORT ORIGIN_PORT THREADS
//!
//! Built with FLOOR_CODE_STATEMENTS=N (build.rs), it also runs N straight-line statements of code
//! of its own after each receive: `footprint.py`'s experiment on what a request's code footprint
//! costs the kernel.
//!
//! Run with FLOOR_HOLD_SENDS=1 in its environment, it receives from every connection an
//! `epoll_wait` reported before it sends anything: a turn's sends go out together, after its
//! receives and code, as mpm's event loop sends what its steps held (`footprint.py --hold`).
#![forbid(unsafe_code)]
use rustix::event::epoll::{self, Event, EventData, EventFlags};
use rustix::net::{self, sockopt, AddressFamily, Ipv4Addr, RecvFlags, SendFlags, SocketAddrV4, SocketFlags, SocketType};
use std::os::fd::{AsRawFd, OwnedFd};

mod code {
    include!(concat!(env!("OUT_DIR"), "/code.rs"));
}

/// One side of a pair: its socket, and the descriptor number of the other side.
struct Side {
    fd: OwnedFd,
    peer: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: floor LISTEN_PORT ORIGIN_PORT THREADS";
    let arg = |i: usize| args.get(i).and_then(|a| a.parse::<u16>().ok()).filter(|&n| n > 0).expect(usage);
    let (port, origin, threads) = (arg(1), arg(2), arg(3));
    let mut hs = vec![];
    for _ in 0..threads {
        hs.push(std::thread::spawn(move || serve(port, origin)));
    }
    for h in hs {
        let _ = h.join();
    }
}

fn serve(port: u16, origin: u16) {
    let lfd = net::socket_with(AddressFamily::INET, SocketType::STREAM, SocketFlags::NONBLOCK, None).unwrap();
    let _ = sockopt::set_socket_reuseport(&lfd, true);
    let _ = sockopt::set_socket_reuseaddr(&lfd, true);
    net::bind(&lfd, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).unwrap();
    net::listen(&lfd, 4096).unwrap();
    let ep = epoll::create(epoll::CreateFlags::empty()).unwrap();
    // epoll keys are descriptor numbers, as are the indexes of `sides`, which owns them
    let lkey = lfd.as_raw_fd() as u64;
    epoll::add(&ep, &lfd, EventData::new_u64(lkey), EventFlags::IN).unwrap();
    let mut sides: Vec<Option<Side>> = Vec::new();
    let mut evs = vec![Event { flags: EventFlags::empty(), data: EventData::new_u64(0) }; 512];
    let mut buf = vec![0u8; 65536];
    let mut acc = 0u64;
    // FLOOR_HOLD_SENDS: (side, peer, buffer, bytes) received this turn, sent at its end.
    let hold = std::env::var_os("FLOOR_HOLD_SENDS").is_some_and(|v| v == "1");
    let mut held: Vec<(usize, usize, Vec<u8>, usize)> = Vec::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    loop {
        let n = epoll::wait(&ep, &mut evs[..], None).unwrap_or(0);
        for ev in &evs[..n] {
            let k = ev.data.u64();
            if k == lkey {
                // Blocking sockets: the relay's sends block; its receives do not (MSG_DONTWAIT).
                while let Ok(c) = net::accept_with(&lfd, SocketFlags::empty()) {
                    let Ok(o) = net::socket(AddressFamily::INET, SocketType::STREAM, None) else { continue };
                    if net::connect(&o, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, origin)).is_err() {
                        continue; // both close
                    }
                    let _ = sockopt::set_tcp_nodelay(&c, true);
                    let _ = sockopt::set_tcp_nodelay(&o, true);
                    let (ck, ok) = (c.as_raw_fd() as usize, o.as_raw_fd() as usize);
                    let _ = epoll::add(&ep, &c, EventData::new_u64(ck as u64), EventFlags::IN);
                    let _ = epoll::add(&ep, &o, EventData::new_u64(ok as u64), EventFlags::IN);
                    if sides.len() <= ck.max(ok) {
                        sides.resize_with(ck.max(ok) + 1, || None);
                    }
                    sides[ck] = Some(Side { fd: c, peer: ok });
                    sides[ok] = Some(Side { fd: o, peer: ck });
                }
                continue;
            }
            let k = k as usize;
            let Some(Some(side)) = sides.get(k) else { continue }; // closed earlier in this batch
            let got = net::recv(&side.fd, &mut buf[..], RecvFlags::DONTWAIT);
            let r = match got {
                Ok((r, _)) => r,
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => 0,
            };
            let peer = side.peer;
            if code::STATEMENTS > 0 {
                let head: &[u8; 1024] = buf[..1024].try_into().expect("the buffer holds 64 KiB");
                acc = std::hint::black_box(code::code(acc, head));
            }
            if hold {
                // Kept for the end of the turn (a copy: the next receive reuses `buf`).
                let mut b = spare.pop().unwrap_or_default();
                b.clear();
                b.extend_from_slice(&buf[..r]);
                held.push((k, peer, b, r));
                continue;
            }
            let sent = r > 0 && sides.get(peer).and_then(Option::as_ref).is_some_and(|p| send_all(&p.fd, &buf[..r]));
            if !sent {
                // The end, an error, or a peer gone: close both (dropping closes and leaves epoll).
                sides[k] = None;
                if let Some(s) = sides.get_mut(peer) {
                    *s = None;
                }
            }
        }
        for (k, peer, b, r) in held.drain(..) {
            let sent = r > 0 && sides.get(peer).and_then(Option::as_ref).is_some_and(|p| send_all(&p.fd, &b[..r]));
            if !sent {
                if let Some(s) = sides.get_mut(k) {
                    *s = None;
                }
                if let Some(s) = sides.get_mut(peer) {
                    *s = None;
                }
            }
            spare.push(b);
        }
    }
}

/// Write all of `bytes` (the socket blocks while its buffer is full); false on an error.
fn send_all(fd: &OwnedFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        match net::send(fd, bytes, SendFlags::NOSIGNAL) {
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}
