//! `mpm bench`'s command line, and the URL, workload and requests it turns into.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use mpm_core::Error;
use mpm_core::Seconds;

use super::engine::{Limit, Load};
use crate::numbers::{count, positive};
use crate::workload::{
    Workload, WorkloadRequest, DEFAULT_CONNECTIONS, MAX_CONNECTIONS, MAX_PIPELINE, MAX_STREAMS,
};

/// One of `--expect`'s statuses, or the complaint naming the values it
/// takes (the number's own parse error named none).
fn status(word: &str) -> Result<u16, String> {
    match word.trim().parse::<u16>() {
        Ok(n) if (100..=599).contains(&n) => Ok(n),
        _ => Err(format!("'{word}' is not a status (100 to 599)")),
    }
}

/// `mpm bench URL`: load an HTTP server, as wrk and ab do.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The URL to load: `http://HOST[:PORT]/PATH` or `https://...`. With
    /// `--workload`, only the server: `http://HOST[:PORT]/`.
    pub url: String,
    /// Send this workload's request mix (a TOML file: requests with method,
    /// path, headers, body, weight and expected statuses; connections,
    /// keep-alive, slow clients) instead of GET URL.
    #[arg(long, value_name = "FILE.toml")]
    pub workload: Option<PathBuf>,
    /// The statuses that count as an answer to GET URL, comma-separated
    /// (default: any 2xx); others are counted as unexpected.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "STATUS,...",
        value_parser = status,
        conflicts_with = "workload"
    )]
    pub expect: Vec<u16>,
    /// Concurrent connections [default: 50, or the workload's].
    #[arg(short = 'c', long, value_parser = count::<1, { MAX_CONNECTIONS }>)]
    pub connections: Option<usize>,
    /// Stop after this many requests (answered or failed).
    #[arg(short = 'n', long, conflicts_with = "duration", value_parser = positive)]
    pub requests: Option<u64>,
    /// Run this long (`10`, `2.5s`, `500ms`); 10s unless -n is given.
    #[arg(short = 'd', long)]
    pub duration: Option<Seconds>,
    /// A new connection for each request (`Connection: close`), instead of
    /// keep-alive (whatever the workload says).
    #[arg(long)]
    pub close: bool,
    /// Requests each connection sends at once before reading the answers
    /// (HTTP/1.1 pipelining) [default: 1, or the workload's]. Under `-n`,
    /// a connection's last batch may take the count past it by less than this.
    #[arg(long, value_name = "N", value_parser = count::<1, { MAX_PIPELINE }>)]
    pub pipeline: Option<usize>,
    /// Client threads, each driving its share of the connections from one epoll set.
    #[arg(short = 't', long, default_value_t = 1, value_parser = count::<1, { MAX_CONNECTIONS }>)]
    pub threads: usize,
    /// How long one request may take before it counts as a timeout.
    #[arg(long, default_value = "10s")]
    pub timeout: Seconds,
    /// An extra request header, `Name: value`; repeat for several (added to
    /// every request of a workload).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// HTTP/2 instead of HTTP/1.1: with prior knowledge on http:// URLs
    /// (h2c: the server's `--h2c on`), chosen by ALPN on https:// ones (a
    /// server that chooses http/1.1 is refused: exit 2).
    #[arg(long)]
    pub h2: bool,
    /// With --h2: requests in flight on each connection (h2load's -m).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "h2", value_parser = count::<1, { MAX_STREAMS }>)]
    pub streams: usize,
    /// https: trust the certificates of this authority (PEM), or the
    /// server's own self-signed certificate.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// https: accept any certificate (measure, do not verify).
    #[arg(long, conflicts_with = "cacert")]
    pub insecure: bool,
    /// https: resume sessions on new connections (tickets or IDs) instead
    /// of a full handshake each, which is what `ab` does.
    #[arg(long)]
    pub tls_resume: bool,
}

/// The parts of an `http://` or `https://` URL the bench needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The `Host` header's value.
    pub host: String,
    /// The resolved address.
    pub addr: SocketAddr,
    /// Path and query.
    pub path: String,
}

impl Target {
    /// Parse and resolve `url`.
    pub fn parse(url: &str) -> Result<Target, Error> {
        Target::parse_with_tls(url).map(|(t, _)| t)
    }

    /// Parse and resolve `url`, with the server name to do TLS with for an
    /// `https://` one.
    pub fn parse_with_tls(url: &str) -> Result<(Target, Option<String>), Error> {
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => {
                return Err(Error::config(format!(
                    "{url}: not an http:// or https:// URL"
                )))
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(Error::config(format!(
                "{url}: no host, or a user name, in the URL"
            )));
        }
        let with_port = if authority.ends_with(']') || !authority.contains(':') {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        } else {
            authority.to_string()
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| Error::config(format!("{url}: cannot resolve {authority}: {e}")))?
            .next()
            .ok_or_else(|| Error::config(format!("{url}: {authority} has no address")))?;
        let hostname = match authority.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => h,
            _ => authority,
        }
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
        Ok((
            Target {
                host: authority.to_string(),
                addr,
                path: path.to_string(),
            },
            tls.then_some(hostname),
        ))
    }
}

impl BenchArgs {
    /// The load these flags describe, or one line on what is wrong with them.
    pub fn load(&self) -> Result<Load, Error> {
        if self.connections == Some(0) {
            return Err(Error::config("-c: at least one connection"));
        }
        if self.threads == 0 {
            return Err(Error::config("-t: at least one thread"));
        }
        let mut headers = Vec::with_capacity(self.headers.len());
        for h in &self.headers {
            match h.split_once(':') {
                Some((name, value))
                    if !name.trim().is_empty() && !h.contains('\r') && !h.contains('\n') =>
                {
                    headers.push((name.trim().to_string(), value.trim().to_string()))
                }
                _ => {
                    // Escaped: a line break in it must not break the line.
                    return Err(Error::config(format!(
                        "-H '{}': a header is `Name: value` on one line",
                        h.escape_debug()
                    )));
                }
            }
        }
        let limit = match (self.requests, self.duration) {
            (Some(0), _) => return Err(Error::config("-n: at least one request")),
            (Some(n), _) => Limit::Requests(n),
            (None, Some(Seconds(d))) if d.is_zero() => {
                return Err(Error::config("-d: a duration above zero"))
            }
            (None, Some(Seconds(d))) => Limit::Duration(d),
            (None, None) => Limit::Duration(Duration::from_secs(10)),
        };
        if self.timeout.0.is_zero() {
            return Err(Error::config("--timeout: a duration above zero"));
        }
        let (target, tls_name) = Target::parse_with_tls(&self.url)?;
        let tls = match tls_name {
            Some(name) => Some(super::tls::client(
                &name,
                self.cacert.as_deref(),
                self.insecure,
                self.tls_resume,
            )?),
            None if self.cacert.is_some() || self.insecure || self.tls_resume => {
                return Err(Error::config(
                    "--cacert, --insecure and --tls-resume are for https:// URLs",
                ))
            }
            None => None,
        };
        let mut workload = match &self.workload {
            Some(file) => {
                if target.path != "/" {
                    return Err(Error::config(format!(
                        "{}: with --workload the URL names the server only \
                         (http://HOST:PORT/); the paths are the workload's",
                        self.url
                    )));
                }
                Workload::from_file(file)?
            }
            None => {
                let mut r = WorkloadRequest::get(target.path.clone()).same_length(true);
                if !self.expect.is_empty() {
                    r = r.expect(&self.expect);
                }
                Workload::new("url")
                    .connections(DEFAULT_CONNECTIONS)
                    .request(r)
            }
        };
        for r in &mut workload.requests {
            r.headers.extend(headers.iter().cloned());
        }
        if let Some(c) = self.connections {
            workload.connections = c;
        }
        if self.close {
            workload.keepalive = false;
        }
        if let Some(depth) = self.pipeline {
            workload.pipeline = depth;
        }
        if self.h2 {
            if self.close {
                return Err(Error::config(
                    "--close and --h2: HTTP/2 keeps its connections (streams are its requests)",
                ));
            }
            if self.pipeline.is_some() {
                return Err(Error::config(
                    "--pipeline and --h2: HTTP/2 multiplexes instead (--streams N)",
                ));
            }
            if self.streams == 0 {
                return Err(Error::config("--streams: at least one stream"));
            }
            workload.h2_streams = Some(self.streams);
        }
        workload.validate().map_err(|e| match &self.workload {
            Some(file) => Error::config(format!("workload {}: {e}", file.display())),
            None => Error::config(format!("{e}")),
        })?;
        let mut load = Load::from_workload(target.addr, &target.host, &workload, limit);
        load.url = match &self.workload {
            Some(file) => format!("{} ({})", self.url, file.display()),
            None => self.url.clone(),
        };
        load.threads = self.threads;
        load.timeout = self.timeout.0;
        load.tls = tls;
        Ok(load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_host_address_and_path() {
        let t = Target::parse("http://127.0.0.1:8080/a?b=c").expect("valid");
        assert_eq!(t.addr, "127.0.0.1:8080".parse().expect("addr"));
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("127.0.0.1:8080", "/a?b=c")
        );
        let t = Target::parse("http://[::1]").expect("valid");
        assert_eq!((t.addr.port(), t.path.as_str()), (80, "/"));
        let (t, name) = Target::parse_with_tls("https://localhost/x").expect("valid");
        assert_eq!((t.addr.port(), name.as_deref()), (443, Some("localhost")));
        let (_, name) = Target::parse_with_tls("https://[::1]:8443/").expect("valid");
        assert_eq!(name.as_deref(), Some("::1"));
        assert!(Target::parse("ftp://127.0.0.1/").is_err());
        assert!(Target::parse("127.0.0.1:80/").is_err());
    }

    #[test]
    fn expect_and_header_complaints_name_the_values_on_one_line() {
        use clap::Parser;
        #[derive(clap::Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        // Once "invalid digit found in string": no word of what a status is.
        for bad in ["abc", "", "99", "600"] {
            let e = Cli::try_parse_from(["bench", "--expect", bad, "http://127.0.0.1:1/"])
                .expect_err(bad)
                .to_string();
            assert!(e.contains("is not a status (100 to 599)"), "{bad}: {e}");
        }
        let ok = Cli::try_parse_from(["bench", "--expect", "200,404", "http://127.0.0.1:1/"])
            .expect("valid");
        assert_eq!(ok.bench.expect, [200, 404]);
        // A line break in -H's value was printed as it is: two lines.
        let args = Cli::parse_from(["bench", "-H", "X: a\nb", "http://127.0.0.1:1/"]);
        let e = args.bench.load().expect_err("refused").to_string();
        assert!(e.contains("X: a\\nb") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn the_request_is_built_once_with_its_headers() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let args = Cli::parse_from(["bench", "--close", "-H", "X-A: 1", "http://127.0.0.1:1/x"]);
        let load = args.bench.load().expect("valid");
        let r = String::from_utf8(load.requests[0].bytes.clone()).expect("ascii");
        assert_eq!(
            r,
            "GET /x HTTP/1.1\r\nHost: 127.0.0.1:1\r\nUser-Agent: mpm-bench\r\nAccept: */*\r\n\
             X-A: 1\r\nConnection: close\r\n\r\n"
        );
        assert!(
            load.requests[0].same_length,
            "ab's length check for one URL"
        );
        assert_eq!((load.connections, load.keepalive), (50, false));
    }

    #[test]
    fn h2_goes_over_tls_too_and_refuses_what_http2_has_no_use_for() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let parse = |args: &[&str]| {
            Cli::parse_from(std::iter::once("bench").chain(args.iter().copied()))
                .bench
                .load()
        };
        let load = parse(&[
            "--h2",
            "--streams",
            "4",
            "--insecure",
            "https://127.0.0.1:1/",
        ])
        .expect("HTTP/2 over TLS");
        assert_eq!(load.h2_streams, Some(4));
        assert!(load.tls.is_some());
        let plain = parse(&["--h2", "http://127.0.0.1:1/"]).expect("h2c");
        assert_eq!((plain.h2_streams, plain.tls.is_none()), (Some(1), true));
        for (args, says) in [
            (
                &["--h2", "--pipeline", "2", "http://127.0.0.1:1/"][..],
                "--pipeline and --h2",
            ),
            (
                &["--h2", "--close", "http://127.0.0.1:1/"],
                "--close and --h2",
            ),
        ] {
            let e = parse(args).expect_err("refused").to_string();
            assert!(e.contains(says) && !e.contains('\n'), "{args:?}: {e}");
        }
        // Refused as it is read, with the range.
        let e = Cli::try_parse_from(["bench", "--h2", "--streams", "0", "http://127.0.0.1:1/"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("'0' is not a whole number from 1 to 1024"),
            "{e}"
        );
    }
}
