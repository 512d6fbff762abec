//! A client that sends part of a request and then shuts its writing side
//! down gets its end of file at once in every MPM, however busy the server:
//! the server closes (as prefork and worker do on a read of 0 bytes) and
//! keeps no descriptor for the connection.
//!
//! The event MPM used to lose that end of file under load: its sockets are
//! edge-triggered, the bytes and the FIN came in one edge, one read took
//! the bytes and counted the socket drained, and no edge came for the FIN.
//! The connection stayed open and silent until a request timeout (here a
//! minute, so that a lost end of file shows as a hang).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tests::load::Load;
use tests::{Server, TempDir};

const PAGE: &[u8] = b"<p>half closed</p>\n";

/// Timeouts far beyond the bound below: a connection left open waits for them.
const LONG_TIMEOUTS: [&str; 6] = [
    "--timeout",
    "60s",
    "--request-header-timeout",
    "60s",
    "--request-body-timeout",
    "60s",
];

/// How soon a half-closed client must see the end of file: a correctness
/// bound (the server closes as soon as it reads the FIN), not a speed goal.
const BOUND: Duration = Duration::from_secs(5);

/// What the clients send before shutting down their writing side: a head
/// cut short, and a body shorter than its `Content-Length`.
const PARTIAL: [&[u8]; 2] = [
    b"GET /index.html HTTP/1.1\r\nHo",
    b"POST /index.html HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nshort",
];

/// Send `request`, shut down writing, and read until the server closes:
/// how long that took, and what came back (nothing, or an error page).
fn half_close(addr: SocketAddr, request: &[u8]) -> Result<(Duration, Vec<u8>), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).map_err(|e| format!("send: {e}"))?;
    s.shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    let started = Instant::now();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return Ok((started.elapsed(), got)),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            // A reset is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok((started.elapsed(), got))
            }
            Err(e) => {
                return Err(format!(
                    "no end of file after {:?} ({e}); received {:?}",
                    started.elapsed(),
                    String::from_utf8_lossy(&got)
                ))
            }
        }
    }
}

/// The server's connections that still hold a descriptor: sockets in the
/// kernel's TCP tables whose local port is the server's, not listening, with
/// an inode (a socket in TIME_WAIT, or one whose descriptor is closed, has
/// none). Counted from the tables rather than /proc/PID/fd so that the
/// count does not move with the number of prefork children.
fn open_connections(addr: SocketAddr) -> usize {
    let port = format!("{:04X}", addr.port());
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        })
        .filter(|f| {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            f.len() > 9
                && f[1].rsplit(':').next() == Some(port.as_str())
                && f[3] != "0A"
                && f[9] != "0"
        })
        .count()
}

fn half_closed_clients_under_load_get_their_end_of_file_at_once(mpm: &str) {
    let root = TempDir::new("half-closed");
    root.write("index.html", PAGE);
    let server = Server::start(mpm, Some(root.path()), &LONG_TIMEOUTS);
    let addr = server.addr();
    assert_eq!(server.get("/index.html").body, PAGE);
    let before = open_connections(addr);

    // Keep-alive clients (and some that connect anew each request) keep
    // the server busy, so that the bytes and the FIN of a half-closed
    // client arrive together before the server reads them.
    let load = Load::start(addr, 6, "/index.html");
    std::thread::sleep(Duration::from_millis(300));
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let request = PARTIAL[i % PARTIAL.len()];
            std::thread::spawn(move || (request, half_close(addr, request)))
        })
        .collect();
    let results: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let tally = load.finish();
    tally.assert_no_failures(0, &server.stderr_text());

    let mut late = Vec::new();
    for (request, result) in &results {
        let what = String::from_utf8_lossy(request);
        match result {
            Ok((took, answer)) => {
                // Closed without a word, as prefork and worker do on a read
                // of 0 bytes; an error page, if any, is a 400.
                assert!(
                    answer.is_empty() || answer.starts_with(b"HTTP/1.1 400 "),
                    "{what:?}: answered {:?}",
                    String::from_utf8_lossy(answer)
                );
                if *took > BOUND {
                    late.push(format!("{what:?}: end of file after {took:?}"));
                }
            }
            Err(e) => late.push(format!("{what:?}: {e}")),
        }
    }
    assert!(
        late.is_empty(),
        "{} of {} half-closed clients waited more than {BOUND:?}: {late:#?}",
        late.len(),
        results.len()
    );

    // Every connection the server had for them (and for the load) is gone.
    let deadline = Instant::now() + BOUND;
    let mut open = open_connections(addr);
    while open > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        open = open_connections(addr);
    }
    assert!(
        open <= before,
        "the server still holds {open} connections, {before} before the run"
    );
}

tests::mpm_suite!(half_closed_clients_under_load_get_their_end_of_file_at_once);
