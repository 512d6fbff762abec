//! A host name that resolves to several addresses: one upstream for each,
//! as nginx makes each address of a `proxy_pass` or `server` name a server
//! of its own (balanced, counted and marked down one by one). A
//! `docker compose --scale app=3` service, or a Kubernetes headless one,
//! is such a name.
//!
//! Names are resolved when the proxy is built: at start, and on every
//! reload (as nginx resolves them without a `resolver`), never per
//! request. A name with one address stays one upstream, named by its URL
//! alone; one with several becomes an upstream per address, each with the
//! URL's weight and health settings and named `URL (ADDRESS)` on the
//! status page. The `Host` an upstream is sent, its path and the
//! `redirect` rules stay the URL's.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use crate::config::{ProxyRoute, MAX_UPSTREAMS_PER_ROUTE};
use crate::error::{Error, Result};

/// `routes` with each upstream whose host name resolves (by `resolve`:
/// [`system_resolver`] for the server) to several addresses replaced by
/// one upstream per address, in the order they came, each once. An
/// upstream given by address, or whose name has one address, is kept as
/// it is. A name that does not resolve, or to no address, is an error
/// naming it, as is a route left with more than
/// [`MAX_UPSTREAMS_PER_ROUTE`] upstreams.
pub fn one_upstream_per_address<R>(routes: Vec<ProxyRoute>, resolve: R) -> Result<Vec<ProxyRoute>>
where
    R: Fn(&str, u16) -> io::Result<Vec<SocketAddr>>,
{
    routes
        .into_iter()
        .map(|mut route| {
            let mut upstreams = Vec::with_capacity(route.upstreams.len());
            for spec in route.upstreams {
                let url = &spec.url;
                if url.address().is_some() || url.host().parse::<IpAddr>().is_ok() {
                    upstreams.push(spec);
                    continue;
                }
                let found = resolve(url.host(), url.port()).map_err(|e| {
                    Error::config(format!(
                        "upstream '{url}': its host {:?} could not be resolved: {e} (check \
                         the name, or give an IP address)",
                        url.host()
                    ))
                })?;
                let mut addrs: Vec<SocketAddr> = Vec::with_capacity(found.len());
                for a in found {
                    if !addrs.contains(&a) {
                        addrs.push(a);
                    }
                }
                match addrs.len() {
                    0 => {
                        return Err(Error::config(format!(
                            "upstream '{url}': its host {:?} resolved to no address",
                            url.host()
                        )))
                    }
                    1 => upstreams.push(spec),
                    _ => {
                        for a in addrs {
                            let mut one = spec.clone();
                            one.url = spec.url.at_address(a);
                            upstreams.push(one);
                        }
                    }
                }
            }
            if upstreams.len() > MAX_UPSTREAMS_PER_ROUTE {
                return Err(Error::config(format!(
                    "route {}: {} upstreams once their names are resolved (one per address), \
                     at most {MAX_UPSTREAMS_PER_ROUTE}",
                    route.prefix,
                    upstreams.len()
                )));
            }
            route.upstreams = upstreams;
            Ok(route)
        })
        .collect()
}

/// The system's resolver (`getaddrinfo`, as `/etc/hosts` and
/// `/etc/resolv.conf` say): the addresses of `host` with `port`.
pub fn system_resolver(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), port);
        match host {
            "scaled.test" => Ok(vec![
                at("10.0.0.1"),
                at("10.0.0.2"),
                at("10.0.0.1"),
                at("::1"),
            ]),
            "single.test" => Ok(vec![at("10.0.0.9")]),
            "empty.test" => Ok(vec![]),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
        }
    }

    #[test]
    fn a_name_with_several_addresses_becomes_an_upstream_for_each() {
        let mut route = ProxyRoute::from_flag(
            "/api/=http://scaled.test:8080/v1/,http://single.test:8080/,http://10.9.9.9/",
        )
        .unwrap();
        route.upstreams[0].weight = 3;
        let r = &one_upstream_per_address(vec![route], fake).unwrap()[0];
        let labels: Vec<String> = r.upstreams.iter().map(|u| u.url.to_string()).collect();
        assert_eq!(
            labels,
            [
                "http://scaled.test:8080/v1/ (10.0.0.1:8080)",
                "http://scaled.test:8080/v1/ (10.0.0.2:8080)",
                "http://scaled.test:8080/v1/ ([::1]:8080)",
                "http://single.test:8080/",
                "http://10.9.9.9/",
            ]
        );
        // Each address keeps the URL's settings, path and Host.
        for u in &r.upstreams[..3] {
            assert_eq!(u.weight, 3);
            assert_eq!(u.url.path(), Some("/v1/"));
            assert_eq!(u.url.authority(), "scaled.test:8080");
        }
        assert!(r.check().is_ok(), "no upstream listed twice");
    }

    #[test]
    fn a_name_that_does_not_resolve_is_one_line_naming_it() {
        for (flag, says) in [
            (
                "/=http://nowhere.test/",
                "\"nowhere.test\" could not be resolved",
            ),
            (
                "/=http://empty.test/",
                "\"empty.test\" resolved to no address",
            ),
        ] {
            let e = one_upstream_per_address(vec![ProxyRoute::from_flag(flag).unwrap()], fake)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
