//! Pipelined requests, driven as a library under every model: their
//! responses are byte for byte what the same requests get one at a time,
//! whatever mix of answers (in-memory, file, 304, 404, chunked stream), and
//! responses that need nothing slow go out together, in one write.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use mpm_core::scoreboard::{Scoreboard, Slot};
use mpm_core::{HandlerFactory, Lifecycle, Listener, Mpm, MpmSettings, Phase};
use mpm_http::{Body, HttpFactory, HttpHandler, HttpSettings, Request, Response};
use mpm_prefork::AcceptMutex;
use mpm_site::StaticFiles;
use tests::{pattern, TempDir};

/// A docroot, and `/stream`: a body produced as it is sent, chunked.
#[derive(Clone)]
struct Mixed {
    files: StaticFiles,
}

impl HttpHandler for Mixed {
    fn handle(&mut self, req: &Request<'_>) -> Response {
        if req.path() == "/stream" {
            let lines: Vec<u8> = (0..2000)
                .flat_map(|i| format!("line {i}\n").into_bytes())
                .collect();
            return Response::new(200)
                .header("Content-Type", "text/plain")
                .body(Body::Stream(Box::new(std::io::Cursor::new(lines))));
        }
        self.files.handle(req)
    }

    fn answers_without_blocking(&self, req: &Request<'_>) -> bool {
        req.path() != "/stream" && self.files.answers_without_blocking(req)
    }
}

fn run<F: HandlerFactory>(
    mpm: &str,
    settings: &MpmSettings,
    listeners: Vec<Listener>,
    factory: F,
    lifecycle: &Lifecycle,
    slots: &'static [Slot],
) {
    match mpm {
        "prefork" => mpm_prefork::Prefork::new(AcceptMutex::Pthread)
            .unwrap()
            .run(settings, listeners, factory, lifecycle, slots),
        "worker" => mpm_worker::Worker.run(settings, listeners, factory, lifecycle, slots),
        "event" => mpm_event::Event.run(settings, listeners, factory, lifecycle, slots),
        "uring" => mpm_uring::Uring.run(settings, listeners, factory, lifecycle, slots),
        other => panic!("no MPM {other}"),
    }
    .unwrap();
}

/// Serve `root` (and `/stream`) under `mpm` while `client` runs.
fn with_server(mpm: &str, root: &Path, client: impl FnOnce(SocketAddr, &'static Scoreboard)) {
    // What a stopping event process says of its one connection.
    let _told = mpm_core::error_log::expect("accepted 1 connection;");
    let settings = MpmSettings {
        max_request_workers: 2,
        threads_per_child: 2,
        ..MpmSettings::default()
    };
    let listeners = Listener::bind_all(&["127.0.0.1:0".parse().unwrap()], 64).unwrap();
    let addr = listeners[0].local_addr();
    let lifecycle = Lifecycle::new().unwrap();
    let scoreboard = Scoreboard::create(1, 3).unwrap();
    let slots = scoreboard.process_slots(0);
    let files = StaticFiles::new(root).unwrap();
    let factory = HttpFactory::new(HttpSettings::default(), move || Mixed {
        files: files.clone(),
    });
    std::thread::scope(|scope| {
        let server = scope.spawn(|| run(mpm, &settings, listeners, factory, &lifecycle, slots));
        // Stopped however the client ends: a failed assertion must fail
        // the test, not leave the scope waiting for a server still serving.
        struct StopOnDrop<'a>(&'a Lifecycle);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.stop();
            }
        }
        let _stop = StopOnDrop(&lifecycle);
        assert!(lifecycle.wait_for(Phase::Serving, Duration::from_secs(10)));
        client(addr, scoreboard);
        drop(_stop);
        server.join().unwrap();
    });
}

fn connect(addr: SocketAddr) -> TcpStream {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// The bytes of one whole response to `method` at the front of `buf`
/// (reading more from `c` as needed), removed from `buf`.
fn one_response(c: &mut TcpStream, buf: &mut Vec<u8>, method: &str) -> Vec<u8> {
    let fill = |c: &mut TcpStream, buf: &mut Vec<u8>| {
        let mut chunk = [0u8; 65536];
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        fill(c, buf);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head[9..12].parse().unwrap();
    let bodiless = method == "HEAD" || status == 304 || status == 204;
    let end = if bodiless {
        head_end
    } else if head.contains("transfer-encoding: chunked") {
        // Chunks up to the zero-length one and its blank line.
        loop {
            if let Some(i) = buf[head_end..]
                .windows(7)
                .position(|w| w == b"\r\n0\r\n\r\n")
            {
                break head_end + i + 7;
            }
            fill(c, buf);
        }
    } else {
        let len: usize = head
            .split("content-length: ")
            .nth(1)
            .and_then(|r| r.split("\r\n").next())
            .unwrap()
            .parse()
            .unwrap();
        head_end + len
    };
    while buf.len() < end {
        fill(c, buf);
    }
    let rest = buf.split_off(end);
    std::mem::replace(buf, rest)
}

/// The same response bytes with the `Date` value blanked: the only field
/// that may differ between two sendings of one request.
fn without_dates(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.windows(8).position(|w| w == b"\r\nDate: ") {
        out.extend_from_slice(&rest[..at + 8]);
        let line_end = rest[at + 2..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap();
        out.extend_from_slice(b"<date>");
        rest = &rest[at + 2 + line_end..];
    }
    out.extend_from_slice(rest);
    out
}

fn docroot() -> TempDir {
    let root = TempDir::new("pipelining");
    root.write("small.txt", b"a small page, kept in memory\n");
    root.write("file.bin", &pattern(200 * 1024, 9));
    root
}

fn pipelined_responses_are_byte_identical_to_unpipelined_ones(mpm: &str) {
    let root = docroot();
    with_server(mpm, root.path(), |addr, _| {
        // The small file's validator, for a conditional request.
        let mut c = connect(addr);
        c.write_all(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut buf = Vec::new();
        let first = String::from_utf8(one_response(&mut c, &mut buf, "GET")).unwrap();
        let etag = first
            .lines()
            .find_map(|l| l.strip_prefix("ETag: "))
            .unwrap()
            .to_string();
        let requests: Vec<(&str, String)> = vec![
            ("GET", "GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n".into()),
            ("GET", "GET /file.bin HTTP/1.1\r\nHost: t\r\n\r\n".into()),
            (
                "GET",
                format!("GET /small.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"),
            ),
            ("GET", "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n".into()),
            ("GET", "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n".into()),
            ("HEAD", "HEAD /file.bin HTTP/1.1\r\nHost: t\r\n\r\n".into()),
            ("GET", "GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n".into()),
            (
                "GET",
                "GET /file.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=100-199\r\n\r\n".into(),
            ),
            ("GET", "GET /missing HTTP/1.1\r\nHost: t\r\n\r\n".into()),
        ];
        // One at a time, each answered before the next is sent.
        let mut alone = Vec::new();
        for (method, request) in &requests {
            c.write_all(request.as_bytes()).unwrap();
            alone.push(without_dates(&one_response(&mut c, &mut buf, method)));
        }
        // All in one write, twice (the second time every file is cached).
        for round in 0..2 {
            let all: String = requests.iter().map(|(_, r)| r.as_str()).collect();
            c.write_all(all.as_bytes()).unwrap();
            for (i, (method, _)) in requests.iter().enumerate() {
                let got = without_dates(&one_response(&mut c, &mut buf, method));
                assert!(
                    got == alone[i],
                    "{mpm}, round {round}, response {i} differs:\n{}\n---\n{}",
                    String::from_utf8_lossy(&got[..got.len().min(400)]),
                    String::from_utf8_lossy(&alone[i][..alone[i].len().min(400)])
                );
            }
            assert!(buf.is_empty(), "bytes after the last response");
        }
    });
}

fn pipelined_answers_that_need_nothing_slow_go_out_in_one_write(mpm: &str) {
    let root = docroot();
    with_server(mpm, root.path(), |addr, scoreboard| {
        // Calls that wrote to a client socket, counted by every worker.
        let sends = || scoreboard.totals().sends;
        let mut c = connect(addr);
        let mut buf = Vec::new();
        // Warm: the page is now in every cache it can be in.
        for _ in 0..3 {
            c.write_all(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            one_response(&mut c, &mut buf, "GET");
        }
        // A write is counted just after it returns, so the client may read
        // an answer before its write is counted: wait for the count.
        let at_least = |n: u64| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while sends() < n && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            sends()
        };
        // One write per warming answer (a page kept in memory, head and body
        // together).
        let before = at_least(3);
        let sixteen = "GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n".repeat(16);
        c.write_all(sixteen.as_bytes()).unwrap();
        for _ in 0..16 {
            one_response(&mut c, &mut buf, "GET");
        }
        at_least(before + 1);
        // And time for a second write's count, if there was one.
        std::thread::sleep(Duration::from_millis(100));
        let used = sends() - before;
        // One write, or two if the requests were read in two pieces.
        assert!(
            (1..=2).contains(&used),
            "{mpm}: 16 pipelined answers took {used} writes"
        );
    });
}

tests::mpm_suite!(
    pipelined_responses_are_byte_identical_to_unpipelined_ones,
    pipelined_answers_that_need_nothing_slow_go_out_in_one_write,
);
