//! The HTTP server's port cannot be taken by a `network = true` jail (or
//! any other process) on the loopback family the server does not listen
//! on: clients configured with `localhost` try `::1` first on Debian,
//! Ubuntu, Fedora and NixOS, so a jail listening on `[::1]:PORT` while the
//! server held `127.0.0.1:PORT` alone received the client's bearer token
//! and answered in the server's place. The jail here is the fixture's
//! `online` environment (fixtures/wrappers/online-run: the host's network
//! namespace kept, as lib/jail/network.nix keeps it for `network = true`).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use serde_json::{Value, json};

use crate::common::*;
use crate::http::{HttpServer, TOKEN, result_text};

/// The attack, run in the jail with the server's port (`@PORT@`): every
/// way to listen on it (each family, the wildcards, `SO_REUSEPORT`), each
/// tried alone and said; then the first that binds accepts clients for up
/// to 8 s and prints what the first that sends anything sent. The same
/// text as the offline harness's (checks/e2e/e2e.py, `SQUAT`).
fn squat(port: u16) -> String {
    let e2e = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../checks/e2e/e2e.py"))
        .expect("checks/e2e/e2e.py is next to launcher/");
    let start = e2e.find("SQUAT = \"\"\"").expect("e2e.py has SQUAT") + 11;
    let len = e2e[start..].find("\"\"\"").expect("SQUAT ends");
    e2e[start..start + len].replace("@PORT@", &port.to_string())
}

/// The fixture manifest with `online`: Python with the host's network.
fn with_online() -> Manifest {
    let mut m = template();
    let mut online = m["environments"]["python"].clone();
    online["run"] = json!([wrappers().join("online-run").to_str().unwrap()]);
    online["session"] = json!([]);
    online["network"] = json!(true);
    m["environments"]["online"] = online;
    Manifest::new(&m)
}

/// Whether this host has the IPv6 loopback address (a host without it
/// has no `[::1]` for anyone to listen on).
fn has_ipv6_loopback() -> bool {
    std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// A client that reaches the server's port on `[::1]` (where `localhost`
/// leads first), polling until something listens there: the real server,
/// or whatever took its place.
async fn client_through_ipv6(server: &HttpServer) -> crate::http::Client {
    let addr = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), server.addr.port());
    assert!(
        eventually(|| std::net::TcpStream::connect(addr).is_ok()).await,
        "nothing ever listened on {addr}"
    );
    let mut client = server.client();
    client.addr = addr;
    client
}

/// A `network = true` jail tries every way to listen on the server's port
/// while the server listens on `127.0.0.1`; a client then reaches the port
/// on `::1` with its token. Every attempt fails (`EADDRINUSE`), the client
/// is answered by the server, and the jail never sees the token: as the
/// test's user and, under root, as user 65534 (whose jails run as the
/// server's own uid, the case where `SO_REUSEPORT` could share a port).
#[tokio::test]
async fn a_network_jail_cannot_listen_on_the_servers_port() {
    for user in User::all() {
        let server = HttpServer::start_command(user.command(), vec![with_online()], &[], &[]).await;
        let port = server.addr.port();
        let mut attacker = server.client();
        attacker.initialize().await;
        let (id, jail) = attacker.start_run("online", &squat(port)).await;
        let ipv6 = has_ipv6_loopback();
        let mut victim = match ipv6 {
            true => client_through_ipv6(&server).await,
            false => server.client(),
        };
        let init: Result<Value, _> = victim.try_initialize().await;
        let said = result_text(&jail.message(id).await);
        let context = format!("as {user:?}, the jail said:\n{said}");
        assert!(
            !said.contains(TOKEN) && !said.contains("captured:"),
            "the jail took the client's request: {context}"
        );
        let init = match init {
            Ok(init) => init,
            Err(reply) => panic!("the client was not served ({}): {context}", reply.status),
        };
        assert_eq!(init["result"]["serverInfo"]["name"], "nix-sandbox-mcp");
        for variant in SQUAT_VARIANTS {
            // Without `::1` no client is led to IPv6: what a jail binds
            // there reaches nobody.
            if ipv6 || !variant.starts_with("[::") {
                let refused = format!("{variant} EADDRINUSE");
                assert!(
                    said.lines().any(|l| l == refused),
                    "{variant} was not refused: {context}"
                );
            }
        }
        assert_eq!(
            victim.run("python", "print(6 * 7)").await,
            "42\nexit code 0"
        );
    }
}

/// The names of [`squat`]'s attempts, in its order.
const SQUAT_VARIANTS: [&str; 9] = [
    "[::1]",
    "[::1] SO_REUSEPORT",
    "[::] v6only",
    "[::] v6only SO_REUSEPORT",
    "[::] dual-stack",
    "0.0.0.0",
    "0.0.0.0 SO_REUSEPORT",
    "127.0.0.1",
    "127.0.0.1 SO_REUSEPORT",
];
