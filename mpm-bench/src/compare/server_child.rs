//! A server under test: `BIN serve ... --listen 127.0.0.1:0`, started in a
//! process group of its own, stopped with SIGTERM and reaped; the whole group
//! is killed if it does not stop, if compare fails, or if compare is
//! interrupted. The child also gets SIGTERM should compare die first.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use mpm_core::Error;

/// How long a server may take to say it listens (prefork forks hundreds).
const STARTUP: Duration = Duration::from_secs(30);
/// How long a SIGTERM may take before the group is killed.
const STOP: Duration = Duration::from_secs(15);

/// A running server.
#[derive(Debug)]
pub struct ServerChild {
    child: Option<Child>,
    /// Where it listens with TLS, if it does (`--listen-tls`).
    pub tls_addr: Option<SocketAddr>,
    /// Where it listens.
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl ServerChild {
    /// Start `bin serve ARGS --listen 127.0.0.1:0` and wait for its
    /// `listening on` line.
    pub fn start(bin: &Path, args: &[String]) -> Result<ServerChild, Error> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own group: one killpg reaches every process it forks, and
            // a Ctrl-C at the terminal reaches compare alone, which stops it.
            .process_group(0);
        // It dies with compare rather than serve on.
        mpm_sys::spawn::die_with_parent(&mut cmd, Signal::SIGTERM);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("starting {}", bin.display()), e))?;
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                // Keep draining, so the server never blocks on a full pipe.
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(addr) = listening_addr(&line) {
                        let _ = tx.send((line.contains("listening on https://"), addr));
                    }
                    if let Ok(mut l) = log.lock() {
                        if l.len() < 64 * 1024 {
                            l.push_str(&line);
                            l.push('\n');
                        }
                    }
                }
            });
        }
        let mut server = ServerChild {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls_addr: None,
            log,
        };
        // The plain listener (status page, plain loads), and the TLS one
        // too when `--listen-tls` asks for it.
        let wants_tls = args.iter().any(|a| a == "--listen-tls");
        let mut plain = None;
        let started = std::time::Instant::now();
        let got = loop {
            let left = STARTUP.saturating_sub(started.elapsed());
            match rx.recv_timeout(left) {
                Ok((true, addr)) => server.tls_addr = Some(addr),
                Ok((false, addr)) => plain = plain.or(Some(addr)),
                Err(e) => break Err(e),
            }
            if let Some(addr) = plain.filter(|_| !wants_tls || server.tls_addr.is_some()) {
                break Ok(addr);
            }
        };
        match got {
            Ok(addr) => {
                server.addr = addr;
                server.settle();
                Ok(server)
            }
            Err(_) => {
                server.kill();
                // Give the reader thread a moment to collect the last lines.
                std::thread::sleep(Duration::from_millis(50));
                Err(Error::config(format!(
                    "{} serve {} did not start: {}",
                    bin.display(),
                    args.join(" "),
                    server.log_text().lines().last().unwrap_or("no output")
                )))
            }
        }
    }

    /// Wait until the process tree stops growing: a master says it listens
    /// before it forks its children (prefork forks hundreds), and a
    /// measurement must not start while they are still coming.
    fn settle(&self) {
        let deadline = Instant::now() + STARTUP;
        let (mut last, mut stable) = (0, 0);
        while Instant::now() < deadline && stable < 3 {
            std::thread::sleep(Duration::from_millis(100));
            let n = super::proc_sample::tree(self.pid()).len();
            stable = if n == last { stable + 1 } else { 0 };
            last = n;
        }
    }

    /// The process id of the server (its master, or its only process).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// What it wrote to stderr.
    pub fn log_text(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// `GET /server-status?json`, parsed.
    pub fn status(&self) -> Result<serde_json::Value, Error> {
        let body = get(self.addr, "/server-status?json")?;
        serde_json::from_str(&body).map_err(|e| {
            Error::config(format!(
                "/server-status?json on {} is not JSON ({e}); is the status page on?",
                self.addr
            ))
        })
    }

    /// SIGTERM, wait for it to exit, then SIGKILL the group if it has not.
    pub fn stop(mut self) -> Result<(), Error> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let group = Pid::from_raw(child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + STOP;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = killpg(group, Signal::SIGKILL);
                    let _ = child.wait();
                    return Err(Error::config(format!(
                        "the server (pid {group}) did not stop within {STOP:?} of SIGTERM; killed"
                    )));
                }
            }
        }
        // Anything it forked and left behind goes too.
        let _ = killpg(group, Signal::SIGKILL);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        // An error or an interrupt got here before stop(): kill the tree.
        self.kill();
    }
}

/// The address in a `mpm: ... listening on http://127.0.0.1:PORT serving ...` line.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line.split_once("listening on ")?;
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    rest.split_whitespace().next()?.parse().ok()
}

/// A one-off `GET` (Connection: close): the body, for status pages.
pub fn get(addr: SocketAddr, path: &str) -> Result<String, Error> {
    let fail = |e| Error::io(format!("GET http://{addr}{path}"), e);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(fail)?;
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).map_err(fail)?;
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(Error::config(format!(
            "GET http://{addr}{path}: {}",
            head.lines().next().unwrap_or("no response")
        )));
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_listening_line_gives_the_address() {
        let line = "mpm: event MPM listening on http://127.0.0.1:40123 serving /tmp/x with the system allocator";
        assert_eq!(
            super::listening_addr(line),
            Some("127.0.0.1:40123".parse().expect("addr"))
        );
        assert_eq!(super::listening_addr("mpm: stopped"), None);
    }
}
