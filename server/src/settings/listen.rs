//! `--listen` and `--listen-tls`: addresses, port ranges and host names,
//! and the split of `https://` addresses into TLS listeners.

use std::net::SocketAddr;

use mpm_core::{Error, Result};

/// Where a server listens when given no address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The most listening addresses (`--listen 1-65535` would take every port).
pub const MAX_LISTENERS: usize = 1024;

/// The addresses to listen on, plain and TLS: `https://ADDR` in `--listen`
/// is a TLS listener, as `--listen-tls ADDR` is; neither given is
/// [`DEFAULT_LISTEN`].
pub(crate) fn listeners(
    listen: &[String],
    listen_tls: &[String],
) -> Result<(Vec<SocketAddr>, Vec<SocketAddr>)> {
    let (mut plain, mut tls) = (Vec::new(), Vec::new());
    for s in listen {
        match s.strip_prefix("https://") {
            Some(rest) => tls.extend(parse_listen_range(rest)?),
            None => plain.extend(parse_listen_range(s.strip_prefix("http://").unwrap_or(s))?),
        }
    }
    for s in listen_tls {
        let s = s.strip_prefix("https://").unwrap_or(s);
        tls.extend(
            parse_listen_range(s).map_err(|e| {
                Error::config(e.to_string().replacen("--listen ", "--listen-tls ", 1))
            })?,
        );
    }
    if plain.is_empty() && tls.is_empty() {
        plain = parse_listen(DEFAULT_LISTEN)?;
    }
    if plain.len() + tls.len() > MAX_LISTENERS {
        return Err(Error::config(format!(
            "--listen: {} addresses; at most {MAX_LISTENERS}",
            plain.len() + tls.len()
        )));
    }
    Ok((plain, tls))
}

/// Parse a `--listen` value: `HOST:PORT`, `[V6]:PORT`, or a bare port (all
/// IPv4 interfaces). A host name (`localhost:8080`) stands for every address
/// it resolves to that this machine has, as nginx's `listen` does.
pub fn parse_listen(s: &str) -> Result<Vec<SocketAddr>> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(vec![SocketAddr::from(([0, 0, 0, 0], port))]);
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let shape = || {
        Error::config(format!(
            "--listen '{s}': not an address (expected HOST:PORT, [IPV6]:PORT or PORT)"
        ))
    };
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(shape());
    };
    let port: u16 = port.parse().map_err(|_| shape())?;
    if host.is_empty() || host.contains([':', '[', ']', '/', ' ']) {
        return Err(shape());
    }
    use std::net::ToSocketAddrs;
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::config(format!("--listen '{s}': cannot resolve {host}: {e}")))?
        .collect();
    // Only the addresses this machine has: `localhost` may name ::1 on a
    // host without IPv6. A socket bound to port 0 and dropped says so.
    let mut mine: Vec<SocketAddr> = Vec::new();
    for addr in &resolved {
        let probe = SocketAddr::new(addr.ip(), 0);
        if !mine.contains(addr) && std::net::TcpListener::bind(probe).is_ok() {
            mine.push(*addr);
        }
    }
    if mine.is_empty() {
        let all: Vec<String> = resolved.iter().map(|a| a.ip().to_string()).collect();
        return Err(Error::config(format!(
            "--listen '{s}': {host} resolves to {}, none of them an address of this machine",
            if all.is_empty() {
                "nothing".to_string()
            } else {
                all.join(", ")
            }
        )));
    }
    Ok(mine)
}

/// Parse a `--listen` value that may name a range of ports:
/// `127.0.0.1:8000-8099` or `8000-8099` is a hundred listeners.
pub fn parse_listen_range(s: &str) -> Result<Vec<SocketAddr>> {
    let range = s.rsplit_once(':').map_or(("", s), |(h, p)| (h, p));
    if let Some((lo, hi)) = range.1.split_once('-') {
        let bad = || {
            Error::config(format!(
                "--listen '{s}': not a port range (expected HOST:FIRST-LAST with FIRST <= LAST)"
            ))
        };
        let (lo, hi): (u16, u16) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if lo > hi || lo == 0 {
            return Err(bad());
        }
        let host = if range.0.is_empty() {
            "0.0.0.0"
        } else {
            range.0
        };
        return (lo..=hi)
            .map(|port| parse_listen(&format!("{host}:{port}")))
            .collect::<Result<Vec<_>>>()
            .map(|all| all.into_iter().flatten().collect());
    }
    parse_listen(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_port_ranges() {
        let a = parse_listen_range("127.0.0.1:8000-8099").unwrap();
        assert_eq!(a.len(), 100);
        assert_eq!((a[0].port(), a[99].port()), (8000, 8099));
        assert_eq!(parse_listen_range("9000-9001").unwrap().len(), 2);
        assert_eq!(parse_listen_range("[::1]:80").unwrap().len(), 1);
        assert!(parse_listen_range("127.0.0.1:9-1").is_err());
        assert!(parse_listen_range("127.0.0.1:1-x").is_err());
    }

    #[test]
    fn listen_accepts_ipv6_and_bare_ports() {
        assert!(parse_listen("[::1]:80").unwrap()[0].is_ipv6());
        assert_eq!(parse_listen("8080").unwrap()[0].port(), 8080);
    }

    #[test]
    fn listen_resolves_host_names_to_every_address_the_machine_has() {
        let addrs = parse_listen("localhost:8080").unwrap();
        assert!(!addrs.is_empty());
        assert!(
            addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8080),
            "{addrs:?}"
        );
        assert!(
            addrs.contains(&"127.0.0.1:8080".parse().unwrap()),
            "{addrs:?}"
        );
        assert_eq!(
            parse_listen_range("localhost:8000-8001").unwrap().len(),
            2 * addrs.len()
        );
        let err = parse_listen("no-such-host.invalid:80")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot resolve no-such-host.invalid"), "{err}");
        assert!(parse_listen("localhost:http").is_err());
    }
}
