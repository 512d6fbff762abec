//! Running under systemd: socket activation (`LISTEN_FDS`) and `Type=notify`
//! readiness, as `contrib/systemd/` sets them up.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use tests::{RawConn, Server, TempDir};

const PAGE: &[u8] = b"activated\n";

fn serves_on_a_socket_passed_by_systemd(mpm: &str) {
    let root = TempDir::new("systemd");
    root.write("index.html", PAGE);
    // The socket systemd would have bound, passed as descriptor 3.
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let passed = OwnedFd::from(socket.try_clone().unwrap());
    let server = Server::start_with(mpm, Some(root.path()), &[], |cmd| {
        cmd.env("LISTEN_FDS", "1");
        mpm_sys::spawn::pass_fd(cmd, passed, 3);
    });
    assert_eq!(server.addr(), addr, "{}", server.stderr_text());
    assert!(server.stderr_text().contains("passed by systemd"));
    let mut c = RawConn::connect(addr);
    c.send(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(c.read_response().unwrap().body, PAGE);
}

fn readiness_reloads_and_stopping_are_notified(mpm: &str) {
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut server = Server::start_with(mpm, None, &[], |cmd| {
        cmd.env("NOTIFY_SOCKET", &path);
    });
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    // A restart (SIGHUP, `mpm signal reload`) says it reloads, then ready
    // again once the configuration is read (docs/operations.md, "systemd").
    server.signal(libc::SIGHUP);
    let n = notify.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("RELOADING=1"));
    let n = notify.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    assert!(server.stop().success());
    let n = notify.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
}

tests::mpm_suite!(
    serves_on_a_socket_passed_by_systemd,
    readiness_reloads_and_stopping_are_notified
);
