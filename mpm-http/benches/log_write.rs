#![forbid(unsafe_code)]
#![allow(missing_docs)] // criterion_group!/criterion_main! make undocumented public items
//! One access-log line to a file: `writev` of its pieces against copying
//! them into one buffer and `write` (the 2004 httpd measurement found copying
//! 10–20 % faster), and against a 64 KiB buffer written when full.
//!
//! `cargo bench -p mpm-http --bench log_write`. Each line is captured
//! (escaped) and written as the server does per response; the file is
//! emptied every 10,000 lines, outside the timed part, so it stays small.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use mpm_http::access_log::{AccessLog, LogWrite, Record};
use mpm_http::log_format::LogFormat;

const CHUNK: u64 = 10_000;

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir();
    let client = "192.0.2.7".parse().expect("an address");
    let mut group = c.benchmark_group("log_write");
    for format in [LogFormat::Common, LogFormat::Combined] {
        for (name, write, buffer) in [
            ("writev", LogWrite::Writev, 0),
            ("copy", LogWrite::Copy, 0),
            ("buffered-64k", LogWrite::Copy, 64 * 1024),
        ] {
            let path: PathBuf = dir.join(format!(
                "mpm-bench-log-write-{}-{name}-{format}.log",
                std::process::id()
            ));
            let log = AccessLog::open_path(&path, format, write, buffer, false)
                .expect("opening the bench log");
            let truncate = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("opening the bench log to empty it");
            let mut writer = log.writer();
            let mut record = Record::default();
            group.bench_function(format!("{format}/{name}"), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let n = left.min(CHUNK);
                        let started = Instant::now();
                        for _ in 0..n {
                            record.capture(
                                format,
                                b"GET /index.html HTTP/1.1",
                                Some(b"http://example.com/"),
                                Some(b"Mozilla/5.0 (X11; Linux x86_64)"),
                                200,
                            );
                            record.set_body_sent(1456);
                            writer.write(&mut record, client, false);
                        }
                        writer.flush();
                        spent += started.elapsed();
                        let _ = truncate.set_len(0);
                        left -= n;
                    }
                    spent
                });
            });
            drop(writer);
            let _ = std::fs::remove_file(&path);
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = bench
}
criterion_main!(benches);
