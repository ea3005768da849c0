//! The proxy's decisions through a real gate: plain HTTP, CONNECT, the TLS
//! server name of a tunnel, names that resolve to the host's own networks.
//! The upstream is a loopback listener, reachable only through rules that
//! name 127.0.0.1 itself.

use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

use super::*;
use crate::testing;

/// An upstream that answers every request with `upstream saw PATH`.
async fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = tcp.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
                let body = format!("upstream saw {path}");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tcp.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

struct Fixture {
    gate: Gate,
    port: u16,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let port = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 loop.test\n").unwrap();
    let env = testing::env("e")
        .with(
            "network",
            json!({
                "allow": [
                    {"host": "127.0.0.1", "port": port},
                    {"host": "loop.test", "port": port},
                ]
            }),
        )
        .build();
    let catalog = testing::catalog([env]);
    let settings = Settings {
        hosts_file: Some(hosts),
        extra_roots: None,
    };
    let egress = Arc::new(Egress::start(&catalog, &settings, None, |_| None));
    let gate = egress.gate(&catalog.envs["e"], None).unwrap().unwrap();
    Fixture {
        gate,
        port,
        _dir: dir,
    }
}

impl Fixture {
    async fn connect(&self) -> UnixStream {
        let socket = self.gate.vars()[0].1.clone();
        UnixStream::connect(socket).await.unwrap()
    }

    /// One request's whole answer, the connection closed after it.
    async fn ask(&self, request: &str) -> String {
        let mut stream = self.connect().await;
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            stream.read_to_end(&mut answer),
        )
        .await;
        String::from_utf8_lossy(&answer).into_owned()
    }
}

fn get(url: &str, host: &str) -> String {
    format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn plain_http_is_decided_by_host_port_method_and_path() {
    let f = fixture().await;
    let p = f.port;
    let ok = f
        .ask(&get(
            &format!("http://127.0.0.1:{p}/a"),
            &format!("127.0.0.1:{p}"),
        ))
        .await;
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.contains("upstream saw /a"),
        "{ok}"
    );

    let denied = f.ask(&get("http://denied.test/x", "denied.test")).await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    assert!(
        denied.contains("refused denied.test:80 (not in allowlist)"),
        "{denied}"
    );

    let port_denied = f.ask(&get("http://127.0.0.1:1/", "127.0.0.1:1")).await;
    assert!(port_denied.starts_with("HTTP/1.1 403"), "{port_denied}");

    assert_eq!(
        f.gate.take_refusals(),
        [
            "network: refused denied.test:80 (not in allowlist)",
            "network: refused 127.0.0.1:1 (not in allowlist)",
        ]
    );
    assert_eq!(f.gate.take_refusals(), Vec::<String>::new());
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused() {
    let f = fixture().await;
    let p = f.port;
    let answer = f
        .ask(&get(
            &format!("http://loop.test:{p}/"),
            &format!("loop.test:{p}"),
        ))
        .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(
        f.gate.take_refusals(),
        [format!(
            "network: refused loop.test:{p} (resolves to an internal address 127.0.0.1)"
        )]
    );
}

/// A TLS ClientHello naming `name`, as rustls writes it.
fn client_hello(name: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).unwrap();
    hello
}

#[tokio::test]
async fn connect_checks_the_host_and_the_tunnels_server_name() {
    let f = fixture().await;
    let p = f.port;

    let denied = f
        .ask("CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")
        .await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");

    // An allowed CONNECT whose TLS names another server: the tunnel closes
    // and nothing reaches the upstream.
    let mut stream = f.connect().await;
    let connect = format!("CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n");
    stream.write_all(connect.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    stream.write_all(&client_hello("evil.test")).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut rest),
    )
    .await;
    assert!(rest.is_empty(), "the tunnel passed bytes back: {rest:?}");

    // Not TLS at all through a CONNECT: refused too.
    let mut stream = f.connect().await;
    stream.write_all(connect.as_bytes()).await.unwrap();
    let _ = stream.read(&mut buf).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut rest),
    )
    .await;
    assert!(rest.is_empty(), "plain bytes went through: {rest:?}");

    let refusals = f.gate.take_refusals();
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert_eq!(
        refusals[0],
        "network: refused denied.test:443 (not in allowlist)"
    );
    assert_eq!(
        refusals[1],
        format!(
            "network: refused 127.0.0.1:{p} (TLS server name evil.test is not the CONNECT host)"
        )
    );
    assert!(
        refusals[2].starts_with(&format!(
            "network: refused 127.0.0.1:{p} (not a TLS connection"
        )),
        "{refusals:?}"
    );
}

#[tokio::test]
async fn a_dropped_gate_removes_its_socket() {
    let f = fixture().await;
    let socket = std::path::PathBuf::from(f.gate.vars()[0].1.clone());
    assert!(socket.exists());
    drop(f.gate);
    assert!(!socket.exists());
}

/// A copy of this process's TCP socket connected to port `peer`.
fn socket_to(peer: u16) -> Option<std::net::TcpStream> {
    use std::os::fd::BorrowedFd;
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: borrowed only to be duplicated; a descriptor closed
        // meanwhile fails the duplication.
        let Ok(copy) = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned() else {
            continue;
        };
        let socket = std::net::TcpStream::from(copy);
        if socket.peer_addr().is_ok_and(|there| there.port() == peer) {
            return Some(socket);
        }
    }
    None
}

/// A tunnel's client writes when it chooses: a request in two small writes
/// must not wait for the upstream's delayed acknowledgement of the first
/// (Nagle's algorithm on the proxy's connection held it 44 ms a time).
#[tokio::test]
async fn the_proxys_upstream_connections_send_without_delay() {
    let f = fixture().await;
    let p = f.port;
    let mut stream = f.connect().await;
    let connect = format!("CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n");
    stream.write_all(connect.as_bytes()).await.unwrap();
    // Answered once the proxy holds its connection to the upstream.
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    let proxys = socket_to(p).expect("the proxy's socket to the upstream");
    assert!(
        proxys.nodelay().unwrap(),
        "TCP_NODELAY is off on the proxy's upstream connection"
    );
}
