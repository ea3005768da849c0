//! The HTTP server's listening sockets (`--http ADDR`): ADDR, and for a
//! loopback or wildcard ADDR the same port on the other loopback family, so
//! that no other process can listen there and answer the server's clients
//! in its place.
//!
//! Clients configured with `localhost` try `::1` first on Debian, Ubuntu,
//! Fedora and NixOS, then `127.0.0.1`. A server holding `127.0.0.1:PORT`
//! alone left `[::1]:PORT` to anyone: a `network = true` jail (it shares
//! the host's network) or any host user listening there was sent the
//! clients' bearer token and their `Mcp-Session-Id`. So the server holds:
//!
//! - for an IPv4 loopback address, `localhost` or `0.0.0.0`: that, and
//!   `[::1]` on the same port;
//! - for `[::1]`: that, and `127.0.0.1` on the same port;
//! - for `[::]`: one socket for both families (`IPV6_V6ONLY` off, whatever
//!   `net.ipv6.bindv6only` says);
//! - any other address alone: clients name it, nothing else leads there.
//!
//! Never `SO_REUSEPORT`: without it on both sockets, the kernel lets no
//! other socket bind a port one of ours listens on, on the address itself
//! or on a wildcard covering it (`SO_REUSEADDR`, set as tokio sets it, only
//! lets a restarted server bind while old connections linger). The second
//! socket must be had: when another process holds its port, the server
//! does not start (with port 0 it picks another port). A host without an
//! IPv6 loopback (no `::1`, or no IPv6 in its kernel) has no `[::1]` for
//! anyone to listen on: the first socket alone serves, and the log says so.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How many ports `--http HOST:0` tries when another process holds the
/// port picked on the other loopback family.
const PORT_0_TRIES: usize = 16;

/// The listening sockets: the address asked for, and its loopback
/// companion when it has one and the host has that family.
#[derive(Debug)]
pub struct Listeners {
    first: TcpListener,
    second: Option<TcpListener>,
}

/// Parses `HOST:PORT` (an IP address, `[v6]`, or `localhost`, which stands
/// for 127.0.0.1 and, like it, is held on `::1` too).
pub fn parse_addr(addr: &str) -> Result<SocketAddr, String> {
    if let Some(port) = addr.strip_prefix("localhost:") {
        let port = port
            .parse()
            .map_err(|e| format!("--http {addr}: bad port: {e}"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    addr.parse()
        .map_err(|e| format!("--http {addr}: not HOST:PORT ({e})"))
}

/// The other loopback family's address for `ip`, when clients reaching
/// `ip` through `localhost` could be led there instead.
fn companion(ip: IpAddr) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() || v4.is_unspecified() => {
            Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
        }
        IpAddr::V6(v6) if v6.is_loopback() => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        _ => None,
    }
}

/// A socket listening on `addr`: `SO_REUSEADDR` as tokio sets it, never
/// `SO_REUSEPORT`; `[::]` takes both families.
fn open(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    if let IpAddr::V6(v6) = addr.ip()
        && v6.is_unspecified()
    {
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::Ipv6V6Only, &false)
            .map_err(io::Error::from)?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Whether `error`, binding an IPv6 address, says that this host has no
/// IPv6 loopback at all: no `::1` on it, or no IPv6 in its kernel (where
/// the server alone is refused IPv6 sockets, by a seccomp filter, other
/// processes could still take `::1`).
fn ipv6_absent(error: &io::Error) -> bool {
    match error.raw_os_error() {
        Some(nix::libc::EADDRNOTAVAIL) => true,
        Some(nix::libc::EAFNOSUPPORT) => !std::path::Path::new("/proc/net/if_inet6").exists(),
        _ => false,
    }
}

impl Listeners {
    /// Listens on `addr` and its loopback companion (must be called in
    /// the runtime). The error is one line: what could not be had, why,
    /// and the fix.
    pub fn bind(addr: SocketAddr) -> Result<Self, String> {
        let tries = if addr.port() == 0 { PORT_0_TRIES } else { 1 };
        let mut last = String::new();
        for _ in 0..tries {
            let first = open(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            let bound = first
                .local_addr()
                .map_err(|e| format!("cannot read the bound address: {e}"))?;
            let Some(ip) = companion(addr.ip()) else {
                return Ok(Self {
                    first,
                    second: None,
                });
            };
            let other = SocketAddr::new(ip, bound.port());
            match open(other) {
                Ok(second) => {
                    return Ok(Self {
                        first,
                        second: Some(second),
                    });
                }
                Err(e) if ipv6_absent(&e) => {
                    tracing::info!(%other, error = %e, "this host has no IPv6 loopback: nothing can listen on ::1, the server no more than another process");
                    return Ok(Self {
                        first,
                        second: None,
                    });
                }
                Err(e) => last = taken(bound, other, &e),
            }
        }
        Err(last)
    }

    /// The address asked for, with the port the kernel picked for port 0.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.first.local_addr()
    }

    /// The companion's address, when the server holds one.
    pub fn companion_addr(&self) -> Option<SocketAddr> {
        self.second.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The next connection on either socket (cancel-safe, as tokio's
    /// `accept` is).
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        match &self.second {
            None => self.first.accept().await,
            Some(second) => tokio::select! {
                accepted = self.first.accept() => accepted,
                accepted = second.accept() => accepted,
            },
        }
    }
}

/// Why the server does not start when `other`, the companion of `bound`,
/// cannot be had: one line with the fix.
fn taken(bound: SocketAddr, other: SocketAddr, error: &io::Error) -> String {
    format!(
        "cannot listen on {other} beside {bound} ({error}): the server holds its port on both \
         loopback families, since clients that resolve localhost to {} would reach whatever \
         listens there and send it their token; stop the process that holds {other}, or \
         choose another port",
        other.ip()
    )
}

/// `--check`'s line on the listener, and whether it holds: a loopback
/// port taken on 127.0.0.1 and then on ::1, as `--http` takes it.
pub fn check() -> (bool, String) {
    let asked = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
    match Listeners::bind(asked) {
        Ok(held) if held.second.is_some() => (
            true,
            "http listener: ok (a loopback --http address is held on 127.0.0.1 and ::1 alike: \
             no other process, a network = true jail among them, can listen on its port for \
             clients that resolve localhost to the other)"
                .into(),
        ),
        Ok(_) => (
            true,
            "http listener: ok (no IPv6 loopback on this host: a loopback --http address is \
             held on 127.0.0.1, and nothing can listen on ::1)"
                .into(),
        ),
        Err(e) => (false, format!("http listener: FAIL: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            parse_addr("localhost:8765").unwrap(),
            "127.0.0.1:8765".parse().unwrap()
        );
        assert_eq!(parse_addr("[::1]:0").unwrap(), "[::1]:0".parse().unwrap());
        for bad in ["localhost", "8765", "example.org:80", "127.0.0.1:x"] {
            assert!(parse_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_and_wildcard_addresses_have_a_companion() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(companion(ip("127.0.0.1")), Some(ip("::1")));
        assert_eq!(companion(ip("127.0.0.2")), Some(ip("::1")));
        assert_eq!(companion(ip("0.0.0.0")), Some(ip("::1")));
        assert_eq!(companion(ip("::1")), Some(ip("127.0.0.1")));
        // [::] takes both families in one socket; others are named.
        assert_eq!(companion(ip("::")), None);
        assert_eq!(companion(ip("192.0.2.7")), None);
        assert_eq!(companion(ip("2001:db8::7")), None);
    }

    /// Both families held: nothing else binds the port on either, with or
    /// without SO_REUSEPORT, on the address or a wildcard.
    #[tokio::test]
    async fn no_other_socket_binds_a_held_port() {
        let held = Listeners::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = held.local_addr().unwrap().port();
        let Some(other) = held.companion_addr() else {
            // No IPv6 loopback here: nothing to take on ::1.
            assert!(std::net::TcpListener::bind(("::1", 0)).is_err());
            return;
        };
        assert_eq!(other, SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port));
        for host in ["127.0.0.1", "0.0.0.0", "::1", "::"] {
            for reuseport in [false, true] {
                let addr = SocketAddr::new(host.parse().unwrap(), port);
                let socket = match addr {
                    SocketAddr::V4(_) => TcpSocket::new_v4(),
                    SocketAddr::V6(_) => TcpSocket::new_v6(),
                }
                .unwrap();
                socket.set_reuseaddr(true).unwrap();
                socket.set_reuseport(reuseport).unwrap();
                assert!(
                    socket.bind(addr).is_err(),
                    "{addr} (SO_REUSEPORT {reuseport}) bound beside the server"
                );
            }
        }
    }

    /// A fixed port whose companion is taken: one line naming it, and no
    /// listener left.
    #[tokio::test]
    async fn a_taken_companion_stops_the_server() {
        let Ok(squatter) = std::net::TcpListener::bind(("::1", 0)) else {
            return; // no IPv6 loopback: nothing can take ::1
        };
        let port = squatter.local_addr().unwrap().port();
        let asked = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        let e = Listeners::bind(asked).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot listen on [::1]:{port} beside 127.0.0.1:{port}"
            )) && e.contains("choose another port"),
            "{e}"
        );
        assert!(
            std::net::TcpListener::bind(asked).is_ok(),
            "127.0.0.1 left held"
        );
    }
}
