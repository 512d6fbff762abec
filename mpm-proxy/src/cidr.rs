//! Address ranges written as CIDR (`10.0.0.0/8`, `2001:db8::/32`, or one
//! address), for the trusted proxies whose `X-Forwarded-For` is kept.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// A range of addresses: an address and how many leading bits of it a
/// member shares. IPv4 ranges also hold the IPv4-mapped IPv6 form of their
/// addresses (`::ffff:10.0.0.1`), which is how a client reaches a dual-stack
/// listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The range's first address (its bits past `prefix` are zero).
    addr: IpAddr,
    /// Leading bits that every member shares: 0 to 32 (IPv4) or 128 (IPv6).
    prefix: u8,
}

impl Cidr {
    /// The range of `addr`'s first `prefix` bits, or `None` if `prefix` is
    /// longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let bits = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        (prefix <= bits).then(|| Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Is `ip` in the range?
    pub fn contains(&self, ip: IpAddr) -> bool {
        // A v4 client on a v6 socket arrives as ::ffff:a.b.c.d.
        let ip = ip.to_canonical();
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.addr
            }
            _ => false,
        }
    }
}

/// `addr` with every bit past the first `prefix` cleared.
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let keep = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from((u32::from(a) & keep).to_be_bytes())
        }
        IpAddr::V6(a) => {
            let keep = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from((u128::from(a) & keep).to_be_bytes())
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `ADDR/BITS` or one `ADDR`; host bits past the prefix are cleared
    /// (`10.1.2.3/8` is `10.0.0.0/8`), as nginx's `set_real_ip_from` does.
    fn from_str(s: &str) -> Result<Cidr, String> {
        let t = s.trim();
        let bad = || {
            format!("'{s}' is not an address range (try 10.0.0.0/8, 2001:db8::/32 or 192.0.2.7)")
        };
        let (addr, prefix) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix = match prefix {
            None => match addr {
                IpAddr::V4(_) => 32,
                IpAddr::V6(_) => 128,
            },
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse().map_err(|_| bad())?
            }
            Some(_) => return Err(bad()),
        };
        Cidr::new(addr, prefix)
            .ok_or_else(|| format!("'{s}': a prefix of {prefix} bits is longer than the address"))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v4_ranges_hold_their_addresses_and_no_others() {
        let r: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(r.contains(ip("10.255.1.2")));
        assert!(!r.contains(ip("11.0.0.1")));
        let one: Cidr = "192.0.2.7".parse().unwrap();
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!(!all.contains(ip("::1")), "a v4 range holds no v6 address");
    }

    #[test]
    fn v6_ranges_and_v4_mapped_clients() {
        let r: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(r.contains(ip("2001:db8:1::5")));
        assert!(!r.contains(ip("2001:db9::1")));
        let v4: Cidr = "127.0.0.0/8".parse().unwrap();
        assert!(
            v4.contains(ip("::ffff:127.0.0.1")),
            "dual-stack form of a v4 client"
        );
        let all: Cidr = "::/0".parse().unwrap();
        assert!(all.contains(ip("::1")));
        assert_eq!("::1".parse::<Cidr>().unwrap().to_string(), "::1/128");
    }

    #[test]
    fn host_bits_are_cleared_and_shown_cleared() {
        assert_eq!(
            "10.1.2.3/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            "2001:db8::ff/120".parse::<Cidr>().unwrap().to_string(),
            "2001:db8::/120"
        );
    }

    #[test]
    fn bad_ranges_are_refused_with_an_example() {
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "1.2.3.4/999999999999",
        ] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{bad}: {e}");
        }
        assert!("10.0.0.0/33"
            .parse::<Cidr>()
            .unwrap_err()
            .contains("33 bits"));
    }
}
