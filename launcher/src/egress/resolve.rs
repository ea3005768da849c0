//! Names resolved by the proxy, never in the jail (it has no DNS): from a
//! hosts file when the server names one (`NIX_SANDBOX_EGRESS_HOSTS`, for
//! tests and pinned names), else the host's resolver. An address that is
//! not the internet (special.rs: loopback, private, every special-purpose
//! range) is refused after resolution unless a rule names that address
//! itself, so a name an attacker controls cannot be pointed at the host's
//! network.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hosts_file_names_first() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(
            &file,
            "# test names\n100.51.100.10 Allowed.test other.test\n::1 six.test\n",
        )
        .unwrap();
        let r = Resolver::with_hosts_file(&file).unwrap();
        let got = r.resolve("allowed.test", 443).await.unwrap();
        assert_eq!(got, ["100.51.100.10:443".parse().unwrap()]);
        let got = r.resolve("six.test", 80).await.unwrap();
        assert_eq!(got, ["[::1]:80".parse().unwrap()]);
        let got = r.resolve("10.0.0.1", 80).await.unwrap();
        assert_eq!(got, ["10.0.0.1:80".parse().unwrap()]);
        std::fs::write(&file, "not-an-address name\n").unwrap();
        let e = Resolver::with_hosts_file(&file).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }
}
