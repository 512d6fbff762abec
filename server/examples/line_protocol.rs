//! A non-HTTP protocol on the lower trait alone: every line a client sends is
//! echoed back, under the worker MPM.
//!
//! ```text
//! cargo run -p mpm --example line_protocol -- 127.0.0.1:7007
//! printf 'hello\nworld\n' | nc -q1 127.0.0.1 7007
//! ```

#![forbid(unsafe_code)]

use std::io::{ErrorKind, Read, Write};

use mpm_core::{ConnectionHandler, Interest, Lifecycle, Listener, Mpm, MpmSettings, Stream, Wait};

/// Echoes each complete line; a line longer than `MAX_LINE` closes the connection.
#[derive(Debug, Default)]
pub(crate) struct LineEcho;

/// The longest line accepted.
pub(crate) const MAX_LINE: usize = 4096;

/// Per-connection state: bytes of an unfinished line, and output not yet written.
#[derive(Debug, Default)]
pub(crate) struct EchoConn {
    line: Vec<u8>,
    out: Vec<u8>,
}

impl ConnectionHandler for LineEcho {
    type Conn = EchoConn;

    fn connected(&mut self, _stream: &Stream) -> EchoConn {
        EchoConn::default()
    }

    fn readable(&mut self, conn: &mut EchoConn, stream: &mut Stream) -> Interest {
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf) {
            Ok(0) => return Interest::Close,
            Ok(n) => conn.line.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Read(wait(conn)),
            Err(_) => return Interest::Close,
        }
        while let Some(end) = conn.line.iter().position(|&b| b == b'\n') {
            conn.out.extend(conn.line.drain(..=end));
        }
        if conn.line.len() > MAX_LINE {
            return Interest::Linger;
        }
        self.writable(conn, stream)
    }

    fn writable(&mut self, conn: &mut EchoConn, stream: &mut Stream) -> Interest {
        while !conn.out.is_empty() {
            match stream.write(&conn.out) {
                Ok(0) => return Interest::Close,
                Ok(n) => {
                    conn.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Interest::Write,
                Err(_) => return Interest::Close,
            }
        }
        if stream.is_draining() {
            return Interest::Close;
        }
        Interest::Read(wait(conn))
    }
}

/// Between lines the connection is idle; mid-line it is a request in progress.
fn wait(conn: &EchoConn) -> Wait {
    if conn.line.is_empty() {
        Wait::KeepAlive
    } else {
        Wait::Request
    }
}

#[allow(dead_code)] // the integration suite includes this file for `LineEcho` alone
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7007".into());
    let settings = MpmSettings {
        max_request_workers: 16,
        threads_per_child: 16,
        keepalive_timeout: std::time::Duration::from_secs(60),
        ..MpmSettings::default()
    };
    let listeners = Listener::bind_all(&[addr.parse()?], 1024)?;
    eprintln!("line_echo listening on {}", listeners[0].local_addr());
    let lifecycle = Lifecycle::new()?;
    lifecycle.stop_on_signals()?;
    let slots = mpm_core::scoreboard::Scoreboard::create(1, 16)?.process_slots(0);
    mpm_worker::Worker.run(&settings, listeners, || LineEcho, &lifecycle, slots)?;
    Ok(())
}
