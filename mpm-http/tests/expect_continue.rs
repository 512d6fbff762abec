//! `100 Continue` on a socket that is full: the interim response is queued
//! and finished like any other, never half-written and forgotten (a partial
//! write once left the client with a broken stream).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use mpm_core::{ConnectionHandler, Interest, Stream, Wait};
use mpm_http::{HttpHandler, HttpService, HttpSettings, Request, Response};

struct Echo;

impl HttpHandler for Echo {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        Response::new(200).body(req.body().to_vec())
    }
}

fn set_send_buffer(socket: &TcpStream, bytes: usize) {
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::SndBuf, &bytes).unwrap();
}

fn set_recv_buffer(socket: &TcpStream, bytes: usize) {
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::RcvBuf, &bytes).unwrap();
}

#[test]
fn a_100_continue_that_meets_a_full_socket_is_finished_before_the_body_is_read() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (server, peer) = listener.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    set_send_buffer(&server, 4096);
    set_recv_buffer(&client, 4096);
    // Fill the way to the client, as an earlier large response would.
    let mut junk = 0usize;
    let chunk = [b'j'; 1024];
    // Until full for good: what is in flight still moves to the client's
    // buffer for a moment after the first refusal.
    let mut refused_in_a_row = 0;
    while refused_in_a_row < 5 {
        match (&server).write(&chunk) {
            Ok(n) => {
                junk += n;
                refused_in_a_row = 0;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                refused_in_a_row += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut stream = Stream::accepted_nonblocking(server, peer, Arc::new(AtomicBool::new(false)));
    let mut service = HttpService::new(Echo, &HttpSettings::default());
    let mut conn = service.connected(&stream);
    client
        .write_all(
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap();
    // The head has arrived (loopback): the interim cannot go out yet.
    let mut interest = Interest::Read(Wait::Request);
    for _ in 0..200 {
        interest = service.readable(&mut conn, &mut stream);
        if interest == Interest::Write {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        interest,
        Interest::Write,
        "the 100 Continue waits to be written"
    );
    // The client reads what was ahead of it; the interim then goes out whole.
    let mut ahead = vec![0u8; junk];
    client.read_exact(&mut ahead).unwrap();
    assert!(ahead.iter().all(|&b| b == b'j'));
    let mut interim = [0u8; 25];
    let mut got = 0;
    while got < interim.len() {
        interest = service.writable(&mut conn, &mut stream);
        if let Ok(n) = {
            client.set_nonblocking(true).unwrap();
            let r = client.read(&mut interim[got..]);
            client.set_nonblocking(false).unwrap();
            r
        } {
            got += n;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    assert_eq!(
        interest,
        Interest::Read(Wait::Request),
        "then the body is read"
    );
    client.write_all(b"hello").unwrap();
    for _ in 0..200 {
        interest = service.readable(&mut conn, &mut stream);
        if interest == Interest::Read(Wait::KeepAlive) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(interest, Interest::Read(Wait::KeepAlive));
    let mut reply = vec![0u8; 512];
    let n = client.read(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply[..n]);
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.ends_with("\r\n\r\nhello"), "{reply}");
}
