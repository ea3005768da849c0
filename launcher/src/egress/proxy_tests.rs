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

/// What the upstreams received, in order: (their port, each request line),
/// read as a server that ignores the bodies of GETs does (the bytes after a
/// request's head are the next request).
type Seen = Arc<std::sync::Mutex<Vec<(u16, String, String)>>>;

/// An upstream that answers every request with `upstream saw TARGET`,
/// keeping the connection open, and records (port, request line, the
/// `Authorization` header) of each.
async fn upstream(seen: Seen) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        let line = head.lines().next().unwrap_or_default().to_owned();
                        let auth = head
                            .lines()
                            .find_map(|l| l.strip_prefix("authorization: "))
                            .unwrap_or_default()
                            .to_owned();
                        let target = line.split(' ').nth(1).unwrap_or("?").to_owned();
                        seen.lock().unwrap().push((port, line, auth));
                        let body = format!("upstream saw {target}");
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if tcp.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    port
}

struct Fixture {
    gate: Gate,
    /// Any request allowed.
    port: u16,
    /// Requests under `/v1/` only.
    paths_port: u16,
    /// A credential put in (TOKEN, from the server's variable REAL).
    secret_port: u16,
    seen: Seen,
    _dir: tempfile::TempDir,
}

/// The secret the fixture's server reads (its variable REAL).
const SECRET: &str = "the-real-secret-0123456789";
const PLACEHOLDER: &str = "placeholder-TOKEN";

async fn fixture() -> Fixture {
    fixture_bounded(64, std::time::Duration::from_secs(30)).await
}

/// The fixture, its gate holding at most `connections` connections and
/// waiting `header_timeout` for a request head.
async fn fixture_bounded(connections: usize, header_timeout: std::time::Duration) -> Fixture {
    let seen = Seen::default();
    let port = upstream(Arc::clone(&seen)).await;
    let paths_port = upstream(Arc::clone(&seen)).await;
    let secret_port = upstream(Arc::clone(&seen)).await;
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
                    {"host": "127.0.0.1", "port": paths_port, "paths": ["/v1/"]},
                    {"host": "127.0.0.1", "port": secret_port, "credentials": ["TOKEN"]},
                ],
                "credentials": {
                    "TOKEN": {"placeholder": PLACEHOLDER, "from_env": "REAL", "headers": ["Authorization"]}
                }
            }),
        )
        .build();
    let catalog = testing::catalog([env]);
    let settings = Settings {
        hosts_file: Some(hosts),
        extra_roots: None,
    };
    let egress = Egress::start(catalog.policies(), &settings, None, |var| {
        (var == "REAL").then(|| SECRET.into())
    });
    let egress = Arc::new(egress.bounded(connections, header_timeout));
    let gate = egress.gate("e", None).unwrap();
    Fixture {
        gate,
        port,
        paths_port,
        secret_port,
        seen,
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
            "network: refused loop.test:{p} (resolves to 127.0.0.1: loopback, a special-purpose range)"
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

/// Targets that a prefix test on the raw path lets through under `/v1/`
/// and that an upstream resolving dot segments, escapes, `;` parameters,
/// backslashes or repeated slashes (nginx, Tomcat, IIS and their like) reads
/// as `/admin`.
const PATH_ATTACKS: [&str; 21] = [
    "/v1/../admin",
    "/v1/%2e%2e/admin",
    "/v1/%2E%2E/admin",
    "/v1/.%2e/admin",
    "/v1/%2e./admin",
    "/v1/..%2fadmin",
    "/v1/..%2Fadmin",
    "/v1/./../admin",
    "/v1//../admin",
    "/v1/x/../../admin",
    "/v1/../v1/../admin",
    "/v1/..;/admin",
    "/v1/;x/../../admin",
    "/v1/..\\admin",
    "/v1/..%5cadmin",
    "/v1/..%5Cadmin",
    "/v1/%2e%2e%5cadmin",
    "/%76%31/../admin",
    "/v1/x/..%2f..%2fadmin",
    "/v1/..%3b/admin",
    "/v1/%2e%2e/admin?q=/v1/",
];

/// How the most lenient upstream reads a target's path: every escape
/// decoded once, `\` as `/`, `;` parameters cut from each segment, repeated
/// slashes merged, then dot segments removed.
fn lenient_reading(target: &str) -> String {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let mut decoded = Vec::new();
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                decoded.push(b);
                i += 3;
            }
            (b, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded).replace('\\', "/");
    let mut out: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        let segment = segment.split(';').next().unwrap_or_default();
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[test]
fn the_lenient_reading_is_the_attackers() {
    for attack in PATH_ATTACKS {
        assert_eq!(lenient_reading(attack), "/admin", "{attack}");
    }
    assert_eq!(lenient_reading("/v1/x"), "/v1/x");
}

/// Each attack, in origin form and absolute form, is refused, or reaches
/// the upstream as a target every reading keeps under `/v1/`.
#[tokio::test]
async fn path_rules_decide_on_what_the_upstream_reads() {
    let f = fixture().await;
    let p = f.paths_port;
    let host = format!("127.0.0.1:{p}");
    for attack in PATH_ATTACKS {
        for target in [attack.to_owned(), format!("http://{host}{attack}")] {
            let answer = f.ask(&get(&target, &host)).await;
            let refused = answer.starts_with("HTTP/1.1 403");
            assert!(
                refused || answer.starts_with("HTTP/1.1 200"),
                "{target}: {answer}"
            );
        }
    }
    let seen = f.seen.lock().unwrap().clone();
    for (port, line, _) in &seen {
        let target = line.split(' ').nth(1).unwrap_or_default();
        assert!(
            *port != p || lenient_reading(target).starts_with("/v1/"),
            "the upstream read {line:?} as {}",
            lenient_reading(target)
        );
    }
    // The allowed paths still pass, as the proxy decided them.
    let answer = f.ask(&get("/v1/a/./b/%7Eme?x=/../y", &host)).await;
    assert!(
        answer.contains("upstream saw /v1/a/b/~me?x=/../y"),
        "{answer}"
    );
}

/// A credential goes only inside TLS the proxy verified: plain HTTP to its
/// host is refused, never sent on with the secret (nor without it).
#[tokio::test]
async fn credentials_never_go_out_in_cleartext() {
    let f = fixture().await;
    let p = f.secret_port;
    let host = format!("127.0.0.1:{p}");
    let request = format!(
        "GET http://{host}/v1/x HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {PLACEHOLDER}\r\nConnection: close\r\n\r\n"
    );
    let answer = f.ask(&request).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let seen = f.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|(port, _, _)| *port != p),
        "the request went out in cleartext: {seen:?}"
    );
    assert_eq!(
        f.gate.take_refusals(),
        [format!(
            "network: refused {host} (a credential goes only over HTTPS: use https://)"
        )]
    );
}

/// A GET whose body holds a second request: an upstream that ignores the
/// bodies of GETs would read it as a request the proxy never decided.
#[tokio::test]
async fn a_get_with_a_body_is_refused() {
    let f = fixture().await;
    let p = f.paths_port;
    let host = format!("127.0.0.1:{p}");
    let smuggled = format!("GET /admin HTTP/1.1\r\nHost: {host}\r\n\r\n");
    for method in ["GET", "HEAD"] {
        for framing in [
            format!("Content-Length: {}\r\n", smuggled.len()),
            "Transfer-Encoding: chunked\r\n".to_owned(),
        ] {
            let body = if framing.starts_with("Content-Length") {
                smuggled.clone()
            } else {
                format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len())
            };
            let request = format!(
                "{method} /v1/x HTTP/1.1\r\nHost: {host}\r\n{framing}Connection: close\r\n\r\n{body}"
            );
            let answer = f.ask(&request).await;
            assert!(
                answer.starts_with("HTTP/1.1 403"),
                "{method} {framing}: {answer}"
            );
        }
    }
    let seen = f.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|(_, line, _)| !line.contains("/admin")),
        "a smuggled request reached the upstream: {seen:?}"
    );
    assert!(f.gate.take_refusals().contains(&format!(
        "network: refused {host} (a GET with a body: send data with POST)"
    )),);
}

/// How many connections of the gate at `socket` this process (the server)
/// holds a descriptor of: the sockets of /proc/net/unix bound to that path,
/// not listening, whose inode one of its descriptors names. Other tests'
/// descriptors, and connections still waiting in the backlog, do not count.
fn held_by_gate(socket: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let accepted: std::collections::HashSet<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = u32::from_str_radix(fields.get(3)?, 16).ok()? & 0x10000 != 0;
            (fields.get(7) == Some(&socket.to_str()?) && !listening)
                .then(|| format!("socket:[{}]", fields[6]))
        })
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| accepted.contains(target.to_string_lossy().as_ref()))
        })
        .count()
}

/// A jail that opens connections to its gate and sends nothing: the gate
/// accepts no more than its bound at once (the rest wait in the socket's
/// backlog, costing the server nothing), closes each one that sent no
/// request head in time, and serves a real request after them.
#[tokio::test]
async fn a_gate_holds_a_bounded_number_of_idle_connections() {
    const IDLE: usize = 40;
    const BOUND: usize = 4;
    let f = fixture_bounded(BOUND, std::time::Duration::from_secs(1)).await;
    let socket = std::path::PathBuf::from(f.gate.vars()[0].1.clone());
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(f.connect().await);
    }
    // The first connections are accepted, then closed at the head timeout:
    // until then the server holds at most BOUND of them.
    let mut buf = [0u8; 16];
    let first = tokio::time::timeout(std::time::Duration::from_secs(20), idle[0].read(&mut buf))
        .await
        .expect("an idle connection was never closed");
    assert_eq!(first.unwrap(), 0);
    let held = held_by_gate(&socket);
    assert!(
        held <= BOUND,
        "the server holds {held} of {IDLE} idle connections"
    );
    // Every one of them is closed in its turn.
    for (i, stream) in idle.iter_mut().enumerate() {
        let read = tokio::time::timeout(std::time::Duration::from_secs(60), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("idle connection {i} was never closed"));
        assert_eq!(read.unwrap(), 0, "connection {i}");
        let held = held_by_gate(&socket);
        assert!(held <= BOUND, "the server holds {held} idle connections");
    }
    // And the gate still serves.
    let p = f.port;
    let host = format!("127.0.0.1:{p}");
    let answer = f.ask(&get(&format!("http://{host}/after"), &host)).await;
    assert!(answer.contains("upstream saw /after"), "{answer}");
}

/// A tunnel keeps its connection's place in the gate until it ends.
#[tokio::test]
async fn a_tunnel_holds_its_place_in_the_gate() {
    let f = fixture_bounded(1, std::time::Duration::from_secs(30)).await;
    let p = f.port;
    let mut tunnel = f.connect().await;
    let connect = format!("CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n");
    tunnel.write_all(connect.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tunnel.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // The gate is full: a second connection is not served while the
    // tunnel lasts, and is once it ends.
    let host = format!("127.0.0.1:{p}");
    let mut second = f.connect().await;
    second
        .write_all(get(&format!("http://{host}/second"), &host).as_bytes())
        .await
        .unwrap();
    let waited =
        tokio::time::timeout(std::time::Duration::from_millis(500), second.read(&mut buf)).await;
    assert!(
        waited.is_err(),
        "a connection was served past the gate's bound"
    );
    drop(tunnel);
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        second.read_to_end(&mut answer),
    )
    .await
    .expect("the waiting connection was never served")
    .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.contains("upstream saw /second"), "{answer}");
}

/// A 502 says why the upstream failed, not only hyper's kind of error
/// ("connection error"): the causes follow, as rustls' missing
/// `close_notify` of an upstream that closed before answering.
#[test]
fn an_upstream_error_is_said_with_its_causes() {
    #[derive(Debug)]
    struct Kind(std::io::Error);
    impl std::fmt::Display for Kind {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connection error")
        }
    }
    impl std::error::Error for Kind {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let cause = std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "peer closed connection without sending TLS close_notify",
    );
    assert_eq!(
        proxy::chain(&Kind(cause)),
        "connection error: peer closed connection without sending TLS close_notify"
    );
}
