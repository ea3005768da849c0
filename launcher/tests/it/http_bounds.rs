//! Server-wide bounds over HTTP, attacked as clients of an ordinary user's
//! server could: the server runs as user 65534 (when the tests run as
//! root). Limits are set through their environment variables.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;
use crate::http::{HttpServer, result_text};

/// Sessions are capped across clients: with 3 per client and 4 in all,
/// a second client gets one, then `server_busy` naming the setting; no
/// more than 4 session jails are alive.
#[tokio::test]
async fn session_jails_are_capped_across_clients() {
    let mark = marker("sessions-total");
    let server = HttpServer::unprivileged(
        sessions_marked(&mark, 30),
        &[
            ("NIX_SANDBOX_MAX_SESSIONS", "3"),
            ("NIX_SANDBOX_MAX_SESSIONS_TOTAL", "4"),
        ],
    )
    .await;
    let mut first = server.client();
    first.initialize().await;
    for name in ["a", "b", "c"] {
        let out = first.session_run("python", name, "print('in', 1)").await;
        assert!(out.starts_with("in 1"), "{out}");
    }
    let mut second = server.client();
    second.initialize().await;
    let out = second.session_run("python", "a", "print('in', 2)").await;
    assert!(out.starts_with("in 2"), "{out}");
    let refused = second.session_run("python", "b", "print('in', 3)").await;
    assert!(
        refused.starts_with("error[server_busy]: 4 sessions are open on this server")
            && refused.contains("--max-sessions-total / NIX_SANDBOX_MAX_SESSIONS_TOTAL"),
        "{refused}"
    );
    assert_eq!(count_named(&mark, "agent"), 4);
    // A client that goes gives its places back.
    assert_eq!(first.end_session().await, 204);
    assert!(eventually(|| count_named(&mark, "agent") == 1).await);
    let out = second.session_run("python", "b", "print('in', 4)").await;
    assert!(out.starts_with("in 4"), "{out}");
}

/// `initialize` past `NIX_SANDBOX_MAX_MCP_SESSIONS`, every MCP session
/// holding a sandbox session, gets 503, naming the setting; an idle MCP
/// session expires, which makes room again.
#[tokio::test]
async fn mcp_sessions_are_capped_and_idle_ones_expire() {
    let mut manifest = template();
    for env in manifest["environments"]
        .as_object_mut()
        .unwrap()
        .values_mut()
    {
        env["limits"]["timeout_s"] = json!(1);
        env["limits"]["max_timeout_s"] = json!(1);
    }
    let server = HttpServer::unprivileged(
        Manifest::new(&manifest),
        &[
            ("NIX_SANDBOX_MAX_MCP_SESSIONS", "3"),
            ("NIX_SANDBOX_MCP_SESSION_IDLE_TIMEOUT", "1"),
            ("SESSION_IDLE_TIMEOUT", "3"),
        ],
    )
    .await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut client = server.client();
        client.initialize().await;
        assert_eq!(
            client.session_run("python", "s", "print(1)").await,
            "1\nexit code 0"
        );
        open.push(client);
    }
    let started = Instant::now();
    let reply = server.client().try_initialize().await.unwrap_err();
    assert_eq!(reply.status, 503);
    // The first idle one ends within the MCP idle timeout (1 s, raised to
    // the longest call's 1 s and its grace, 6 s); each sandbox session
    // lives 3 s idle, so each MCP session holds one until then.
    let retry: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=6).contains(&retry), "Retry-After: {retry}");
    let body = reply.text().await;
    assert!(
        body.contains("3 MCP sessions are open")
            && body.contains("--max-mcp-sessions / NIX_SANDBOX_MAX_MCP_SESSIONS"),
        "{body}"
    );
    // Idle, their sandbox sessions end, then they do (after the longest
    // call could have ended: 1 s and the interrupt's grace); then there is
    // room, an idle one holding nothing ended for the new one if it was
    // not gone already.
    let mut again = server.client();
    let mut admitted = false;
    while started.elapsed() < Duration::from_secs(30) {
        if again.try_initialize().await.is_ok() {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(admitted, "no MCP session expired: {}", server.stderr());
    assert!(started.elapsed() >= Duration::from_secs(1));
    // The expired ones are gone for good.
    let (_, body) = open[0].request("tools/list", json!({}));
    assert_eq!(open[0].post(&body).await.status, 404);
}

/// Raises this process's soft limit of open files to its hard limit: the
/// test opens more than 1,024 connections.
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

/// 1,100 connections that send half a request's headers and never the
/// rest (no token), against a server with 1,024 file descriptors: the real
/// client is still served, and every half-open connection is closed, by
/// the read timeout at the latest.
#[tokio::test]
async fn half_open_connections_do_not_lock_the_real_client_out() {
    const HALF_OPEN: usize = 1100;
    raise_nofile();
    let mut cmd = User::unprivileged().command();
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            use nix::sys::resource::{Resource, setrlimit};
            setrlimit(Resource::RLIMIT_NOFILE, 1024, 1024).map_err(std::io::Error::from)
        });
    }
    let server = HttpServer::start_command(
        cmd,
        vec![Manifest::new(&template())],
        &[],
        &[("NIX_SANDBOX_REQUEST_READ_TIMEOUT", "3")],
    )
    .await;
    let mut attackers = Vec::new();
    for _ in 0..HALF_OPEN {
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
            .await
            .unwrap();
        attackers.push(stream);
    }
    let opened = Instant::now();
    let mut client = server.client();
    let init = client.initialize().await;
    assert_eq!(init["result"]["serverInfo"]["name"], "nix-sandbox-mcp");
    let (id, reply) = client.start_run("python", "print(6 * 7)").await;
    assert_eq!(result_text(&reply.message(id).await), "42\nexit code 0");
    // Every half-open connection ends: closed to make room, or at the
    // read timeout.
    let mut closed = 0;
    for stream in &mut attackers {
        let mut buf = [0u8; 256];
        let left = Duration::from_secs(10).saturating_sub(opened.elapsed());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
            // A 408 or 400 before the close is a close too.
            Ok(Ok(_)) => closed += 1,
            Err(_) => break,
        }
    }
    assert_eq!(
        closed,
        HALF_OPEN,
        "half-open connections still open {} s after they were made",
        opened.elapsed().as_secs()
    );
    // Still serving.
    let (id, reply) = client.start_run("python", "print(7 * 6)").await;
    assert_eq!(result_text(&reply.message(id).await), "42\nexit code 0");
}
