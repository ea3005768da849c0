//! Names resolved by the proxy, never in the jail (it has no DNS): from a
//! hosts file when the server names one (`NIX_SANDBOX_EGRESS_HOSTS`, for
//! tests and pinned names), else the host's resolver. An address in the
//! host's own networks (private, loopback, link-local, and the like) is
//! refused after resolution unless a rule names that address itself, so a
//! name an attacker controls cannot be pointed at the host's network.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// How names become addresses.
#[derive(Debug, Default)]
pub struct Resolver {
    /// Names (lowercase) from the hosts file; a name here is never looked
    /// up elsewhere.
    hosts: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    /// The host's resolver only.
    pub fn system() -> Self {
        Self::default()
    }

    /// The names of a hosts file (`ADDRESS NAME...` lines, `#` comments)
    /// first, then the host's resolver.
    pub fn with_hosts_file(path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let Some(address) = words.next() else {
                continue;
            };
            let address: IpAddr = address.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("line {}: {address:?} is not an address", n + 1),
                )
            })?;
            for name in words {
                hosts
                    .entry(name.to_ascii_lowercase())
                    .or_default()
                    .push(address);
            }
        }
        Ok(Self { hosts })
    }

    /// The addresses of `host` (normalised; an address literal is itself).
    pub async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        if let Ok(addr) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(addr, port)]);
        }
        if let Some(addrs) = self.hosts.get(host) {
            return Ok(addrs.iter().map(|a| SocketAddr::new(*a, port)).collect());
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no address"));
        }
        Ok(addrs)
    }
}

/// Whether `addr` is in the host's own networks rather than the internet:
/// unspecified, loopback, private, shared (CGNAT), link-local, multicast,
/// broadcast, unique-local, or an IPv4 address inside IPv6.
pub fn internal(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
                || v6.segments()[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible
                || first == 0x64 && v6.segments()[1] == 0xff9b // NAT64 to anything
                || v6 == Ipv6Addr::LOCALHOST
        }
    }
}

fn internal_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    v4.is_unspecified()
        || v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_multicast()
        || v4.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || a >= 240 // reserved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_networks_are_internal() {
        for internal_addr in [
            "127.0.0.1",
            "127.8.8.8",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(internal(internal_addr.parse().unwrap()), "{internal_addr}");
        }
        for external in [
            "198.51.100.10",
            "151.101.0.223",
            "2a04:4e42::223",
            "8.8.8.8",
        ] {
            assert!(!internal(external.parse().unwrap()), "{external}");
        }
    }

    #[tokio::test]
    async fn a_hosts_file_names_first() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(
            &file,
            "# test names\n198.51.100.10 Allowed.test other.test\n::1 six.test\n",
        )
        .unwrap();
        let r = Resolver::with_hosts_file(&file).unwrap();
        let got = r.resolve("allowed.test", 443).await.unwrap();
        assert_eq!(got, ["198.51.100.10:443".parse().unwrap()]);
        let got = r.resolve("six.test", 80).await.unwrap();
        assert_eq!(got, ["[::1]:80".parse().unwrap()]);
        let got = r.resolve("10.0.0.1", 80).await.unwrap();
        assert_eq!(got, ["10.0.0.1:80".parse().unwrap()]);
        std::fs::write(&file, "not-an-address name\n").unwrap();
        let e = Resolver::with_hosts_file(&file).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }
}
