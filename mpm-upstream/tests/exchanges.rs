//! Requests to small upstreams written here, every wait driven by
//! `mpm_core::waiting::block_on` (as a prefork or worker step would) or
//! polled once (as the event loop does).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use std::io::{self, Read, Write};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{answer_every, in_secs, read_request, Upstream};
use mpm_core::waiting::{block_on, poll_once, Polled};
use mpm_upstream::{
    read_response_head, write_request_head, BodyReader, BodyWriter, Client, Error, HeadLimits,
    Phase, Pool, PoolSettings, RequestFraming, Target,
};

fn client() -> Client {
    Client::with_pool(Arc::new(Pool::default()))
}

#[test]
fn a_get_answered_with_a_content_length_reads_that_body() {
    let up = Upstream::start(answer_every(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Kind: plain\r\n\r\nhello",
    ));
    let got = block_on(async {
        let r = client().get(&up.url("/a")).send().await?;
        assert_eq!(r.status(), 200);
        assert_eq!(r.header("x-kind"), Some("plain"));
        r.text().await
    });
    assert_eq!(got.unwrap(), "hello");
}

#[test]
fn a_chunked_body_with_extensions_and_trailers_arriving_a_byte_at_a_time_is_decoded() {
    let up = Upstream::start(|mut conn| {
        conn.set_nodelay(true).unwrap();
        while read_request(&mut conn).is_some() {
            let answer: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
            for b in answer {
                if conn.write_all(&[*b]).is_err() {
                    return;
                }
            }
        }
    });
    let client = client();
    for _ in 0..2 {
        let got = block_on(async { client.get(&up.url("/")).send().await?.text().await });
        assert_eq!(got.unwrap(), "hello world");
    }
    assert_eq!(
        up.accepts(),
        1,
        "a chunked body read to its end leaves the connection reusable"
    );
}

#[test]
fn a_body_until_close_is_read_to_the_close_and_its_connection_not_reused() {
    let up = Upstream::start(|mut conn| {
        if read_request(&mut conn).is_some() {
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\n\r\nall of it");
        }
    });
    let client = client();
    for _ in 0..2 {
        let got = block_on(async { client.get(&up.url("/")).send().await?.text().await });
        assert_eq!(got.unwrap(), "all of it");
    }
    assert_eq!(up.accepts(), 2);
}

#[test]
fn head_and_304_answers_with_a_content_length_carry_no_body() {
    let up = Upstream::start(|mut conn| {
        while let Some(req) = read_request(&mut conn) {
            let answer: &[u8] = if req.starts_with("HEAD") {
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
            } else {
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"
            };
            if conn.write_all(answer).is_err() {
                return;
            }
        }
    });
    let client = client();
    block_on(async {
        let head = client.head(&up.url("/")).send().await.unwrap();
        assert_eq!(head.header("content-length"), Some("10"));
        assert_eq!(head.bytes().await.unwrap(), b"");
        let not_modified = client.get(&up.url("/")).send().await.unwrap();
        assert_eq!(not_modified.status(), 304);
        assert_eq!(not_modified.bytes().await.unwrap(), b"");
    });
    assert_eq!(up.accepts(), 1, "no body was waited for on the connection");
}

#[test]
fn two_requests_reuse_one_kept_alive_connection() {
    let up = Upstream::start(answer_every(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ));
    let pool = Arc::new(Pool::default());
    let client = Client::with_pool(pool.clone());
    for _ in 0..2 {
        let got = block_on(async { client.get(&up.url("/")).send().await?.bytes().await });
        assert_eq!(got.unwrap(), b"ok");
    }
    assert_eq!(up.accepts(), 1);
    let stats = pool.stats(&Target::plain(up.addr).key());
    assert_eq!((stats.opened, stats.reused, stats.idle_now), (1, 1, 1));
}

#[test]
fn an_idle_connection_the_upstream_closed_is_dropped_at_checkout_and_a_fresh_one_opened() {
    let (closed_tx, closed_rx) = mpsc::channel();
    let closed_tx = parking_lot::Mutex::new(closed_tx);
    let up = Upstream::start(move |mut conn| {
        if read_request(&mut conn).is_some() {
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
        // One answer per connection, then a close the client hears of
        // only when it next looks.
        let _ = conn.shutdown(std::net::Shutdown::Both);
        drop(conn);
        let _ = closed_tx.lock().send(());
    });
    let pool = Arc::new(Pool::default());
    let client = Client::with_pool(pool.clone());
    let get = || block_on(async { client.post(&up.url("/")).send().await?.bytes().await });
    assert_eq!(get().unwrap(), b"ok");
    closed_rx.recv().unwrap();
    assert_eq!(
        get().unwrap(),
        b"ok",
        "the stale connection costs no error, even for a POST"
    );
    assert_eq!(up.accepts(), 2);
    let stats = pool.stats(&Target::plain(up.addr).key());
    assert_eq!((stats.opened, stats.reused, stats.dropped_stale), (2, 0, 1));
}

#[test]
fn an_idle_connection_past_the_idle_timeout_is_not_reused() {
    let up = Upstream::start(answer_every(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ));
    let pool = Arc::new(Pool::new(PoolSettings {
        idle_per_upstream: 4,
        idle_timeout: Duration::ZERO,
    }));
    let client = Client::with_pool(pool.clone());
    for _ in 0..2 {
        let got = block_on(async { client.get(&up.url("/")).send().await?.bytes().await });
        assert_eq!(got.unwrap(), b"ok");
    }
    assert_eq!(up.accepts(), 2);
    assert_eq!(pool.stats(&Target::plain(up.addr).key()).expired, 1);
}

fn error_of(answer: &'static [u8]) -> Error {
    let up = Upstream::start(move |mut conn| {
        if read_request(&mut conn).is_some() {
            let _ = conn.write_all(answer);
        }
    });
    block_on(async { client().get(&up.url("/")).send().await?.bytes().await })
        .expect_err("the answer is refused")
}

#[test]
fn a_garbage_status_line_is_a_bad_response() {
    let e = error_of(b"SSH-2.0-OpenSSH_9.6\r\n\r\n");
    assert!(
        matches!(&e, Error::BadResponse(m) if m.contains("SSH-2.0")),
        "{e}"
    );
}

#[test]
fn an_oversized_head_is_a_bad_response() {
    let mut answer = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
    answer.extend(std::iter::repeat_n(b'a', 70 * 1024));
    answer.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
    let e = error_of(answer.leak());
    assert!(
        matches!(&e, Error::BadResponse(m) if m.contains("larger than 65536")),
        "{e}"
    );
}

#[test]
fn too_many_header_fields_is_a_bad_response() {
    let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..101 {
        answer.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    answer.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    let e = error_of(answer.leak());
    assert!(
        matches!(&e, Error::BadResponse(m) if m.contains("more than 100 fields")),
        "{e}"
    );
}

#[test]
fn a_body_shorter_than_its_content_length_is_an_error_never_an_end() {
    let e = error_of(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello");
    assert!(
        matches!(&e, Error::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof),
        "{e}"
    );
    assert!(e.to_string().contains("5 bytes short"), "{e}");
}

#[test]
fn a_chunked_body_cut_in_a_chunk_is_an_error() {
    let e = error_of(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nhello");
    assert!(
        matches!(&e, Error::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof),
        "{e}"
    );
}

#[test]
fn a_chunk_longer_than_its_size_is_a_bad_response() {
    let e =
        error_of(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n");
    assert!(matches!(e, Error::BadResponse(_)), "{e}");
}

#[test]
fn interim_1xx_answers_are_skipped() {
    let up = Upstream::start(answer_every(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
          HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ));
    let got = block_on(async {
        let r = client().get(&up.url("/")).send().await?;
        assert_eq!(r.status(), 200);
        r.bytes().await
    });
    assert_eq!(got.unwrap(), b"ok");
}

/// Bytes written one piece at a time, a pause between, so that the client
/// reads them apart.
fn in_pieces(
    pieces: &'static [&'static [u8]],
) -> impl Fn(std::net::TcpStream) + Send + Sync + 'static {
    move |mut conn| {
        while read_request(&mut conn).is_some() {
            for piece in pieces {
                if conn.write_all(piece).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        }
    }
}

#[test]
fn an_interim_answer_read_alone_is_skipped_and_the_final_one_waited_for() {
    let up = Upstream::start(in_pieces(&[
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ]));
    let got = block_on(async { client().get(&up.url("/")).send().await?.bytes().await });
    assert_eq!(got.unwrap(), b"ok");
}

#[test]
fn a_head_that_arrives_in_pieces_is_gathered_whole() {
    let up = Upstream::start(in_pieces(&[
        b"HTTP/1.1 201 Made\r\nX-A",
        b": 1\r\nContent-Len",
        b"gth: 5\r\n\r",
        b"\nhel",
        b"lo",
    ]));
    let (status, reason, field, body) = block_on(async {
        let r = client().get(&up.url("/")).send().await?;
        let head = (
            r.status(),
            r.head().reason().to_string(),
            r.header("x-a").map(str::to_string),
        );
        Ok::<_, Error>((head.0, head.1, head.2, r.bytes().await?))
    })
    .unwrap();
    assert_eq!(
        (status, reason.as_str(), field.as_deref()),
        (201, "Made", Some("1"))
    );
    assert_eq!(body, b"hello");
}

#[test]
fn an_upstream_closing_before_answering_is_closed_and_retryable() {
    let up = Upstream::start(|mut conn| {
        let _ = read_request(&mut conn);
    });
    let e = block_on(async { client().post(&up.url("/")).body("x").send().await }).unwrap_err();
    assert!(matches!(e, Error::Closed), "{e}");
    assert!(e.is_retryable());
}

#[test]
fn a_closed_port_is_a_connect_error() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = block_on(async {
        client()
            .get(&format!("http://{addr}/"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Connect { addr: a, .. } if *a == addr),
        "{e}"
    );
    assert!(e.is_connect() && e.is_retryable());
}

#[test]
fn an_upstream_that_does_not_answer_in_time_is_a_read_timeout() {
    let up = Upstream::start(|mut conn| {
        let _ = read_request(&mut conn);
        // Hold the connection open, silent, until the client gives up.
        let _ = conn.read(&mut [0u8; 1]);
    });
    let e = block_on(async {
        client()
            .get(&up.url("/"))
            .timeout(Duration::from_millis(300))
            .send()
            .await
    })
    .unwrap_err();
    assert!(matches!(e, Error::Timeout { phase: Phase::Read }), "{e}");
    assert!(!e.is_retryable(), "the request may have been processed");
}

#[test]
fn a_body_larger_than_the_limit_is_too_large() {
    let up = Upstream::start(answer_every(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789",
    ));
    let e = block_on(async {
        client()
            .get(&up.url("/"))
            .max_body(4)
            .send()
            .await?
            .bytes()
            .await
    })
    .unwrap_err();
    assert!(matches!(e, Error::TooLarge { limit: 4 }), "{e}");
}

#[test]
fn a_gibibyte_body_streams_through_a_64_kib_buffer() {
    const SIZE: u64 = 1 << 30;
    let up = Upstream::start(|mut conn| {
        if read_request(&mut conn).is_none() {
            return;
        }
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n");
        let block: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        if conn.write_all(head.as_bytes()).is_err() {
            return;
        }
        let mut left = SIZE as usize;
        while left > 0 {
            let n = left.min(block.len());
            if conn.write_all(&block[..n]).is_err() {
                return;
            }
            left -= n;
        }
    });
    let pool = Pool::default();
    let total = block_on(async {
        let until = in_secs(600);
        let mut conn = pool.connect(&Target::plain(up.addr), until).await?;
        let mut head = Vec::new();
        write_request_head(&mut head, "GET", "/big", [("Host", "up")])?;
        conn.write_all(&head, until).await?;
        let mut buf = Vec::new();
        let mut head =
            read_response_head(&mut conn, &mut buf, HeadLimits::default(), until).await?;
        let mut body = BodyReader::for_response("GET", &mut head)?;
        let mut out = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        let mut first = None;
        loop {
            let n = body.read(&mut conn, &mut out, until).await?;
            if n == 0 {
                break;
            }
            first.get_or_insert(out[1]);
            total += n as u64;
        }
        assert!(body.reusable());
        assert_eq!(first, Some(1));
        Ok::<u64, Error>(total)
    });
    assert_eq!(total.unwrap(), SIZE);
}

#[test]
fn a_slow_upstream_parks_the_future_on_the_connections_descriptor() {
    let up = Upstream::start(|mut conn| {
        let _ = read_request(&mut conn);
        let _ = conn.read(&mut [0u8; 1]);
    });
    let pool = Pool::default();
    let until = in_secs(30);
    let mut conn = block_on(pool.connect(&Target::plain(up.addr), until)).unwrap();
    let fd = conn.raw_fd();
    let mut exchange = Box::pin(async {
        conn.write_all(b"GET / HTTP/1.1\r\nHost: up\r\n\r\n", until)
            .await?;
        let mut buf = Vec::new();
        read_response_head(&mut conn, &mut buf, HeadLimits::default(), until).await
    });
    match poll_once(exchange.as_mut()) {
        Polled::Wait(wait) => {
            assert_eq!(wait.fd, Some(fd));
            assert!(wait.read && !wait.write);
            assert_eq!(wait.until, until);
        }
        other => panic!("expected a wait on the upstream socket, got {other:?}"),
    }
}

#[test]
fn a_chunked_request_body_goes_out_framed() {
    let (tx, rx) = mpsc::channel();
    let tx = parking_lot::Mutex::new(tx);
    let up = Upstream::start(move |mut conn| {
        let Some(_) = read_request(&mut conn) else {
            return;
        };
        let mut body = Vec::new();
        let mut byte = [0u8; 1];
        while !body.ends_with(b"0\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
            body.push(byte[0]);
        }
        let _ = tx.lock().send(body);
        let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
    });
    let pool = Pool::default();
    let status = block_on(async {
        let until = in_secs(30);
        let mut conn = pool.connect(&Target::plain(up.addr), until).await?;
        let mut head = Vec::new();
        write_request_head(
            &mut head,
            "POST",
            "/in",
            [("Host", "up"), ("Transfer-Encoding", "chunked")],
        )?;
        conn.write_all(&head, until).await?;
        let mut body = BodyWriter::new(RequestFraming::Chunked);
        body.write_all(&mut conn, b"hello", until).await?;
        body.write_all(&mut conn, b" world!", until).await?;
        body.finish(&mut conn, until).await?;
        let mut buf = Vec::new();
        let head = read_response_head(&mut conn, &mut buf, HeadLimits::default(), until).await?;
        Ok::<u16, Error>(head.status)
    });
    assert_eq!(status.unwrap(), 204);
    assert_eq!(
        rx.recv().unwrap(),
        b"5\r\nhello\r\n7\r\n world!\r\n0\r\n\r\n"
    );
}

#[test]
fn a_request_body_of_another_length_than_declared_is_refused() {
    let up = Upstream::start(|mut conn| {
        let _ = read_request(&mut conn);
    });
    let pool = Pool::default();
    let e = block_on(async {
        let until = in_secs(30);
        let mut conn = pool.connect(&Target::plain(up.addr), until).await?;
        let mut body = BodyWriter::new(RequestFraming::Length(3));
        body.write_all(&mut conn, b"ab", until).await?;
        body.finish(&mut conn, until).await
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidRequest(m) if m.contains("1 bytes short")),
        "{e}"
    );
}

#[cfg(feature = "json")]
#[test]
fn a_json_body_goes_out_and_comes_back_typed() {
    #[derive(serde::Deserialize, PartialEq, Debug)]
    struct Answer {
        id: u32,
    }
    let up = Upstream::start(|mut conn| {
        let Some(req) = read_request(&mut conn) else {
            return;
        };
        assert!(req
            .to_ascii_lowercase()
            .contains("content-type: application/json"));
        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"id\": 7}");
    });
    let got = block_on(async {
        client()
            .post(&up.url("/"))
            .json(&[1, 2])
            .send()
            .await?
            .json::<Answer>()
            .await
    });
    assert_eq!(got.unwrap(), Answer { id: 7 });
}

#[test]
fn after_a_101_the_connection_carries_bytes_both_ways_and_half_closes() {
    let up = Upstream::start(|mut conn| {
        if read_request(&mut conn).is_none() {
            return;
        }
        let _ = conn.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhi",
        );
        // Echo until the client half-closes, then say goodbye.
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = conn.read(&mut buf) {
            let _ = conn.write_all(&buf[..n]);
        }
        let _ = conn.write_all(b"bye");
    });
    let pool = Pool::default();
    let got = block_on(async {
        let until = in_secs(30);
        let mut conn = pool.connect(&Target::plain(up.addr), until).await?;
        let mut head = Vec::new();
        write_request_head(
            &mut head,
            "GET",
            "/chat",
            [
                ("Host", "up"),
                ("Connection", "Upgrade"),
                ("Upgrade", "echo"),
            ],
        )?;
        mpm_upstream::write_request(&mut conn, &head, until).await?;
        let mut buf = Vec::new();
        let head = read_response_head(&mut conn, &mut buf, HeadLimits::default(), until).await?;
        assert_eq!(head.status, 101);
        assert_eq!(
            mpm_upstream::BodyFraming::for_response("GET", &head)?,
            mpm_upstream::BodyFraming::None
        );
        let mut seen = head.bytes_after_head.clone();
        conn.write_all(b" there", until).await?;
        conn.shutdown_write()?;
        let mut chunk = [0u8; 64];
        loop {
            let n = conn.read(&mut chunk, until).await?;
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&chunk[..n]);
        }
        Ok::<Vec<u8>, Error>(seen)
    });
    assert_eq!(got.unwrap(), b"hi therebye");
}

#[test]
fn idle_connections_past_the_limit_are_closed_oldest_first() {
    let up = Upstream::start(|mut conn| {
        let _ = conn.read(&mut [0u8; 1]);
    });
    let pool = Pool::new(PoolSettings {
        idle_per_upstream: 2,
        idle_timeout: Duration::from_secs(60),
    });
    let target = Target::plain(up.addr);
    let conns: Vec<_> = (0..3)
        .map(|_| block_on(pool.connect(&target, in_secs(30))).unwrap())
        .collect();
    let kept: Vec<_> = conns[1..].iter().map(|c| c.raw_fd()).collect();
    for conn in conns {
        pool.give_back(conn);
    }
    let stats = pool.stats(&target.key());
    assert_eq!((stats.opened, stats.idle_now, stats.expired), (3, 2, 1));
    // The newest comes out first.
    let again = block_on(pool.connect(&target, in_secs(30))).unwrap();
    assert_eq!(again.raw_fd(), kept[1]);
    assert_eq!(again.requests_served(), 1);
}
