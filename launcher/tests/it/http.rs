//! MCP over streamable HTTP (`--http`): the bearer token, the Origin check,
//! one handler per MCP session, and no process left behind when a client
//! goes away mid-call or the server is stopped. The client here is a small
//! one of its own over hyper, so the tests see the HTTP status codes.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::common::*;

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// The server running with `--http 127.0.0.1:0`.
pub struct HttpServer {
    pub child: tokio::process::Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    _token_dir: tempfile::TempDir,
    _manifests: Vec<Manifest>,
}

impl HttpServer {
    async fn start(manifests: Vec<Manifest>, extra: &[&str]) -> Self {
        Self::start_as(User::Own, manifests, extra).await
    }

    /// [`HttpServer::start`], run as `user`.
    async fn start_as(user: User, manifests: Vec<Manifest>, extra: &[&str]) -> Self {
        Self::start_command(user.command(), manifests, extra, &[]).await
    }

    /// [`HttpServer::start`] running `cmd` ([`User::command`]) with `envs`.
    pub async fn start_command(
        mut cmd: tokio::process::Command,
        manifests: Vec<Manifest>,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        let token_dir = tempfile::tempdir().unwrap();
        readable_by_all(token_dir.path());
        let token_file = token_dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        cmd.envs(envs.iter().copied());
        cmd.args(["--http", "127.0.0.1:0", "--allow-wrappers-outside-store"])
            .arg("--token-file")
            .arg(&token_file)
            .args(extra);
        for m in &manifests {
            cmd.arg("--manifest").arg(&m.path);
        }
        cmd.env("RUST_LOG", "info")
            .env_remove("NIX_SANDBOX_MANIFEST")
            .env_remove("NIX_SANDBOX_TOKEN_FILE")
            .env_remove("PROJECT_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("the server starts");
        let log = collect(child.stderr.take().unwrap());
        let found = eventually(|| listening(&log.lock().unwrap()).is_some()).await;
        let text = log.lock().unwrap().clone();
        assert!(found, "the server never said where it listens: {text}");
        Self {
            child,
            addr: listening(&text).unwrap(),
            stderr: log,
            _token_dir: token_dir,
            _manifests: manifests,
        }
    }

    /// An ordinary user's server ([`User::unprivileged`]) serving
    /// `manifest`, with `envs` set (limits, through their variables).
    pub async fn unprivileged(manifest: Manifest, envs: &[(&str, &str)]) -> Self {
        Self::start_command(User::unprivileged().command(), vec![manifest], &[], envs).await
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn client(&self) -> Client {
        Client {
            addr: self.addr,
            token: Some(TOKEN.into()),
            origin: None,
            session: None,
            next_id: 0,
        }
    }
}

/// The address in the "listening on http://ADDR/mcp" log line.
fn listening(log: &str) -> Option<SocketAddr> {
    let rest = log.split("listening on http://").nth(1)?;
    rest.split("/mcp").next()?.parse().ok()
}

/// One MCP client: its token, Origin and MCP session.
pub struct Client {
    pub addr: SocketAddr,
    pub token: Option<String>,
    origin: Option<String>,
    pub session: Option<String>,
    next_id: u64,
}

/// A response whose body may still be streaming; dropping it closes the
/// connection.
pub struct Reply {
    pub status: u16,
    pub headers: ::http::HeaderMap,
    body: Incoming,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl Reply {
    /// Reads the body to its end.
    pub async fn text(mut self) -> String {
        let mut out = Vec::new();
        while let Some(frame) = tokio::time::timeout(GUARD, self.body.frame())
            .await
            .expect("the body arrives")
        {
            if let Ok(data) = frame.expect("the body reads").into_data() {
                out.extend_from_slice(&data);
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Reads server-sent events until the JSON-RPC message with `id`.
    pub async fn message(mut self, id: u64) -> Value {
        let mut text = String::new();
        loop {
            let frame = tokio::time::timeout(GUARD, self.body.frame())
                .await
                .expect("the answer arrives")
                .expect("the stream has the answer")
                .expect("the body reads");
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
            for line in text.lines() {
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(message) = serde_json::from_str::<Value>(data.trim())
                    && message["id"] == json!(id)
                {
                    return message;
                }
            }
        }
    }
}

/// A new HTTP/1 connection to `addr`: what sends on it, the task that
/// drives it, and its local port.
pub async fn connect(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<()>,
    u16,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let port = stream.local_addr().unwrap().port();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let driving = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driving, port)
}

impl Client {
    pub async fn post(&self, body: &Value) -> Reply {
        self.post_with(body, &[]).await
    }

    pub async fn post_with(&self, body: &Value, extra: &[(&str, &str)]) -> Reply {
        let (mut sender, connection, _) = connect(self.addr).await;
        let mut request = ::http::Request::post("/mcp")
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(origin) = &self.origin {
            request = request.header("origin", origin);
        }
        if let Some(session) = &self.session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = tokio::time::timeout(GUARD, sender.send_request(request))
            .await
            .expect("the server answers")
            .expect("the request goes through");
        let (parts, body) = response.into_parts();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            connection,
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> (u64, Value) {
        self.next_id += 1;
        let id = self.next_id;
        (
            id,
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
    }

    /// Sends `initialize`; returns the reply whose status was not 200.
    pub async fn try_initialize(&mut self) -> Result<Value, Reply> {
        let (id, body) = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "http-test", "version": "0"}
            }),
        );
        let reply = self.post(&body).await;
        if reply.status != 200 {
            return Err(reply);
        }
        let session = reply
            .headers
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(
            session.is_some(),
            "no Mcp-Session-Id in {:?}",
            reply.headers
        );
        self.session = session;
        let init = reply.message(id).await;
        let initialized = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(initialized.status, 202);
        Ok(init)
    }

    pub async fn initialize(&mut self) -> Value {
        match self.try_initialize().await {
            Ok(init) => init,
            Err(reply) => {
                let status = reply.status;
                panic!("initialize: HTTP {status}: {}", reply.text().await)
            }
        }
    }

    /// Starts `run`; the reply streams its answer.
    pub async fn start_run(&mut self, env: &str, code: &str) -> (u64, Reply) {
        let (id, body) = self.request(
            "tools/call",
            json!({"name": "run", "arguments": {"env": env, "code": code}}),
        );
        let reply = self.post(&body).await;
        assert_eq!(reply.status, 200, "tools/call: HTTP {}", reply.status);
        (id, reply)
    }

    /// Calls `run`; returns the tool result's text.
    pub async fn run(&mut self, env: &str, code: &str) -> String {
        let (id, reply) = self.start_run(env, code).await;
        result_text(&reply.message(id).await)
    }

    /// Starts `run` in session `session` of `env`.
    pub async fn start_session_run(
        &mut self,
        env: &str,
        session: &str,
        code: &str,
    ) -> (u64, Reply) {
        let (id, body) = self.request(
            "tools/call",
            json!({"name": "run", "arguments": {"env": env, "session": session, "code": code}}),
        );
        let reply = self.post(&body).await;
        assert_eq!(reply.status, 200, "tools/call: HTTP {}", reply.status);
        (id, reply)
    }

    /// Calls `run` in session `session` of `env`; returns the text.
    pub async fn session_run(&mut self, env: &str, session: &str, code: &str) -> String {
        let (id, reply) = self.start_session_run(env, session, code).await;
        result_text(&reply.message(id).await)
    }

    /// Ends the MCP session (HTTP DELETE); returns the status.
    pub async fn end_session(&mut self) -> u16 {
        let session = self.session.take().expect("in a session");
        self.delete(&session).await
    }

    /// `DELETE /mcp` of MCP session `session`; returns the status.
    pub async fn delete(&self, session: &str) -> u16 {
        let (mut sender, _, _) = connect(self.addr).await;
        let request = ::http::Request::delete("/mcp")
            .header("host", self.addr.to_string())
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = tokio::time::timeout(GUARD, sender.send_request(request))
            .await
            .expect("the server answers")
            .unwrap();
        response.status().as_u16()
    }
}

/// The text of a `tools/call` answer.
pub fn result_text(message: &Value) -> String {
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {message}"))
        .to_owned()
}

#[tokio::test]
async fn run_needs_the_bearer_token() {
    let server = HttpServer::start(vec![Manifest::new(&template())], &[]).await;

    let mut anonymous = server.client();
    anonymous.token = None;
    let reply = anonymous.try_initialize().await.unwrap_err();
    assert_eq!(reply.status, 401);
    // Both say a static bearer token is expected, not OAuth (clients that
    // see a bare 401 try OAuth and then say only "failed to connect").
    let challenge = reply.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer realm=\"nix-sandbox-mcp\"")
            && challenge.contains("a static bearer token is expected")
            && challenge.contains("no OAuth"),
        "{challenge}"
    );
    let body = reply.text().await;
    assert!(
        body.starts_with("Unauthorized: this server takes a static bearer token, not OAuth")
            && body.contains("Authorization: Bearer TOKEN")
            && body.contains("--token-file or NIX_SANDBOX_TOKEN_FILE"),
        "{body}"
    );

    let mut wrong = server.client();
    wrong.token = Some(format!("{TOKEN}x"));
    assert_eq!(wrong.try_initialize().await.unwrap_err().status, 401);

    let mut client = server.client();
    let init = client.initialize().await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "nix-sandbox-mcp",
        "{init}"
    );
    assert_eq!(
        client.run("python", "print(6 * 7)").await,
        "42\nexit code 0"
    );

    // A call in a valid MCP session still needs the token.
    client.token = None;
    let (_, body) = client.request(
        "tools/call",
        json!({"name": "run", "arguments": {"code": "print(1)"}}),
    );
    assert_eq!(client.post(&body).await.status, 401);
}

/// No SSE event with empty data (a "priming" event, for resuming streams,
/// which this server cannot do): Gemini CLI's SDK parses every event's data
/// as JSON and drops the connection on an empty one.
#[tokio::test]
async fn sse_events_all_carry_data() {
    let server = HttpServer::start(vec![Manifest::new(&template())], &[]).await;
    let mut client = server.client();
    client.initialize().await;
    let (_, body) = client.request("tools/list", json!({}));
    let events = client.post(&body).await.text().await;
    let (_, run) = client.start_run("python", "print(1)").await;
    let events = events + &run.text().await;
    let data: Vec<&str> = events.lines().filter(|l| l.starts_with("data:")).collect();
    assert_eq!(data.len(), 2, "{events}");
    assert!(data.iter().all(|l| !l[5..].trim().is_empty()), "{events}");
}

#[tokio::test]
async fn a_foreign_origin_is_refused() {
    let server = HttpServer::start(
        vec![Manifest::new(&template())],
        &["--allow-origin", "https://agent.example"],
    )
    .await;
    for (origin, want) in [
        ("http://evil.example", 403),
        ("https://agent.example.evil", 403),
        ("null", 403),
        ("http://localhost:3000", 200),
        ("http://127.0.0.1:8080", 200),
        ("https://agent.example", 200),
    ] {
        let mut client = server.client();
        client.origin = Some(origin.into());
        let status = match client.try_initialize().await {
            Ok(_) => 200,
            Err(reply) => reply.status,
        };
        assert_eq!(status, want, "Origin: {origin}");
    }
    // Refused before any run: the server still serves.
    let mut client = server.client();
    client.initialize().await;
    assert_eq!(client.run("shell", "echo ok").await, "ok\n");
}

#[tokio::test]
async fn only_the_mcp_path_is_served() {
    let server = HttpServer::start(vec![Manifest::new(&template())], &[]).await;
    let (mut sender, _, _) = connect(server.addr).await;
    let request = ::http::Request::get("/")
        .header("host", server.addr.to_string())
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 404);
    // A client's OAuth discovery is told there is none, and what to send.
    let request = ::http::Request::get("/.well-known/oauth-protected-resource/mcp")
        .header("host", server.addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 404);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.starts_with("Not Found: this server takes a static bearer token, not OAuth"),
        "{body}"
    );
}

#[tokio::test]
async fn a_client_gone_mid_call_leaves_no_process() {
    let mark = marker("http-gone");
    // The run's own deadline is far beyond the guard: only the client's
    // going away can end it in time.
    let server = HttpServer::start(vec![marked("python", &mark, 600)], &[]).await;
    let mut client = server.client();
    client.initialize().await;
    let (_, reply) = client
        .start_run(
            "python",
            "import time\nprint('started', flush=True)\ntime.sleep(1000)",
        )
        .await;
    wait_running(&mark).await;
    drop(reply);
    assert_no_process_left(&mark).await;
    // The server's stderr is collected as it comes: wait for the line
    // rather than look once.
    assert!(
        eventually(|| server.stderr().contains("client gone mid-call")).await,
        "{}",
        server.stderr()
    );
    // The server and the MCP session go on.
    assert_eq!(client.run("python", "print(3)").await, "3\nexit code 0");
}

#[tokio::test]
async fn two_clients_do_not_see_each_others_sessions() {
    let mark = marker("http-sessions");
    let server = HttpServer::start(vec![sessions_marked(&mark, 30)], &[]).await;
    let (mut a, mut b) = (server.client(), server.client());
    a.initialize().await;
    b.initialize().await;
    assert_ne!(a.session, b.session);

    assert_eq!(
        a.session_run("python", "s", "x = 41\nprint('set')").await,
        "set\n"
    );
    let seen = b.session_run("python", "s", "print(x)").await;
    assert!(
        seen.contains("NameError"),
        "client b saw client a's x: {seen}"
    );
    assert_eq!(
        b.session_run("python", "s", "x = 5\nprint(x)").await,
        "5\nexit code 0"
    );
    assert_eq!(
        a.session_run("python", "s", "print(x + 1)").await,
        "42\nexit code 0"
    );

    // Ending one client's MCP session ends its sandbox sessions only.
    for (client, who) in [(&mut a, "a"), (&mut b, "b")] {
        let started = client
            .session_run(
                "shell",
                "bg",
                &format!("(exec -a {mark}-{who} sleep 1000) >/dev/null 2>&1 &\necho started"),
            )
            .await;
        assert_eq!(started, "started\n");
        wait_running(&format!("{mark}-{who}")).await;
    }
    let ended = a.session.clone().unwrap();
    assert_eq!(a.end_session().await, 204);
    assert_no_process_left(&format!("{mark}-a")).await;
    // An ended or unknown MCP session: 404, so a client knows it is gone.
    assert_eq!(a.delete(&ended).await, 404);
    assert_eq!(a.delete("no-such-session").await, 404);
    assert!(!pids_with(&format!("{mark}-b")).is_empty());
    assert_eq!(
        b.session_run("python", "s", "print(x)").await,
        "5\nexit code 0"
    );
    assert_eq!(b.end_session().await, 204);
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_client_gone_mid_session_call_interrupts_it_and_keeps_the_session() {
    let mark = marker("http-session-gone");
    let server = HttpServer::start(vec![sessions_marked(&mark, 600)], &[]).await;
    let mut client = server.client();
    client.initialize().await;
    assert_eq!(
        client
            .session_run("python", "s", "x = 42\nprint('set')")
            .await,
        "set\n"
    );
    let (_, reply) = client
        .start_session_run(
            "python",
            "s",
            &format!("import subprocess\nsubprocess.run(['bash', '-c', 'exec -a {mark}-sleep sleep 1000'])"),
        )
        .await;
    wait_running(&format!("{mark}-sleep")).await;
    drop(reply);
    // The interrupt ends the call; the session keeps its state.
    assert_no_process_left(&format!("{mark}-sleep")).await;
    // (A call just after the client left may still find the session busy.)
    let began = std::time::Instant::now();
    let mut after = client.session_run("python", "s", "print(x)").await;
    while after.contains("session_busy") && began.elapsed() < GUARD {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        after = client.session_run("python", "s", "print(x)").await;
    }
    assert_eq!(after, "42\nexit code 0");
}

/// A `run` call of the 2026-07-28 revision: no `initialize`, no MCP
/// session, the lifecycle in the request's `_meta`.
fn stateless_run(id: u64, code: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "run",
            "arguments": {"env": "python", "code": code},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "http-test", "version": "0"}
            }
        }
    })
}

const STATELESS_HEADERS: [(&str, &str); 3] = [
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
    ("mcp-name", "run"),
];

#[tokio::test]
async fn a_stateless_request_runs_keeps_sessions_by_server_names_and_is_cancelled_when_its_client_goes()
 {
    let mark = marker("http-stateless");
    let server = HttpServer::start(vec![marked("python", &mark, 600)], &[]).await;
    let client = server.client();
    let reply = client
        .post_with(&stateless_run(1, "print(6 * 7)"), &STATELESS_HEADERS)
        .await;
    assert_eq!(reply.status, 200);
    let message = reply.message(1).await;
    assert_eq!(
        message["result"]["content"][0]["text"], "42\nexit code 0",
        "{message}"
    );

    // Without an MCP session, the server names the session and says so;
    // that name reaches it again, and only that name.
    let session_call = |id: u64, name: &str, code: &str| {
        let mut call = stateless_run(id, code);
        call["params"]["arguments"]["session"] = json!(name);
        call
    };
    let created = |text: &str| -> String {
        let rest = text
            .split("session `")
            .nth(1)
            .unwrap_or_else(|| panic!("no session name in {text:?}"));
        let name = &rest[..rest.find('`').unwrap()];
        assert!(
            rest[name.len()..].starts_with("` created: pass this name as `session`"),
            "{text}"
        );
        name.to_owned()
    };
    let reply = client
        .post_with(&session_call(3, "s", "x = 41"), &STATELESS_HEADERS)
        .await;
    let first = created(&result_text(&reply.message(3).await));
    assert!(first.starts_with("s.") && first.len() == 14, "{first}");
    let reply = client
        .post_with(&session_call(4, &first, "print(x + 1)"), &STATELESS_HEADERS)
        .await;
    assert_eq!(result_text(&reply.message(4).await), "42\nexit code 0");
    // Another client naming its session `s` too gets a session of its own.
    let reply = client
        .post_with(
            &session_call(5, "s", "print(globals().get('x'))"),
            &STATELESS_HEADERS,
        )
        .await;
    let text = result_text(&reply.message(5).await);
    let second = created(&text);
    assert_ne!(first, second);
    assert!(text.starts_with("None\n"), "{text}");

    // Its answer (and so the HTTP status) comes only when the run ends: the
    // client goes away while it waits for the response head.
    let waiting = tokio::spawn(async move {
        client
            .post_with(
                &stateless_run(2, "import time\ntime.sleep(1000)"),
                &STATELESS_HEADERS,
            )
            .await
            .status
    });
    wait_running(&mark).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn sigterm_stops_the_server_and_its_runs() {
    let mark = marker("http-term");
    let mut server = HttpServer::start(vec![marked("shell", &mark, 600)], &[]).await;
    let mut client = server.client();
    client.initialize().await;
    let (_, _reply) = client.start_run("shell", "sleep 1000").await;
    wait_running(&mark).await;
    signal_pid(
        server.child.id().unwrap(),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = tokio::time::timeout(GUARD, server.child.wait())
        .await
        .expect("the server exits")
        .unwrap();
    assert!(status.success(), "{status:?}: {}", server.stderr());
    assert_no_process_left(&mark).await;
}

/// No jail outlives an HTTP server either: SIGTERM (it has killed and
/// reaped every jail when it exits) or SIGKILL (the kernel ends them), with
/// a run going and a jail inside bubblewrap's setup, and right after start,
/// while the start-up probes' jails are being built; as the test's user and
/// as user 65534.
#[tokio::test]
async fn a_stopped_or_killed_http_server_leaves_no_jail() {
    use nix::sys::signal::Signal;
    for user in User::all() {
        for signal in [Signal::SIGTERM, Signal::SIGKILL] {
            for mid_setup in [true, false] {
                let mark = marker("http-end");
                let manifest = all_marked(&mark, mid_setup);
                let mut server = HttpServer::start_as(user, vec![manifest], &[]).await;
                let context = format!("as {user:?}, {signal} (jail in setup: {mid_setup})");
                if mid_setup {
                    let job = format!("{mark}-job");
                    let mut client = server.client();
                    client.initialize().await;
                    let (_, _reply) = client
                        .start_run("shell", &format!("exec -a {job} sleep 1000"))
                        .await;
                    wait_running(&job).await;
                    let stalled = format!("{mark}-stall");
                    assert!(
                        eventually(|| sandbox_children(&stalled).len() == 1).await,
                        "{context}: the stall jail never reached bubblewrap's setup"
                    );
                }
                signal_pid(server.child.id().unwrap(), signal);
                let status = tokio::time::timeout(GUARD, server.child.wait())
                    .await
                    .expect("the server exits")
                    .unwrap();
                if signal == Signal::SIGKILL {
                    assert_no_process_left(&mark).await;
                } else {
                    assert!(
                        status.success(),
                        "{context}: {status:?}: {}",
                        server.stderr()
                    );
                    assert_no_process_now(&mark, &context);
                }
            }
        }
    }
}

#[tokio::test]
async fn http_without_a_token_does_not_start() {
    let manifest = Manifest::new(&template());
    let output = tokio::process::Command::new(BIN)
        .args(["--http", "127.0.0.1:0", "--allow-wrappers-outside-store"])
        .arg("--manifest")
        .arg(&manifest.path)
        .env_remove("NIX_SANDBOX_TOKEN_FILE")
        .stdin(Stdio::null())
        .output();
    let output = tokio::time::timeout(GUARD, output).await.unwrap().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--token-file"), "{stderr}");
    assert!(output.stdout.is_empty());
}

/// The server's end of each HTTP connection has TCP_NODELAY. An answer
/// goes out in several writes (its headers, then each event of its
/// stream); with Nagle's algorithm the kernel holds the second until the
/// client acknowledges the first, which a client that delays its
/// acknowledgements does up to 40 ms later: every call over HTTP from
/// Python's http.client took 44 ms, where it takes 0.3 ms with the option
/// set. Read from the server's own socket, taken from it with
/// pidfd_getfd once it answered a request on that connection.
#[tokio::test]
async fn the_servers_connections_send_without_delay() {
    let server = HttpServer::start(vec![Manifest::new(&template())], &[]).await;
    let (mut sender, _, ours) = connect(server.addr).await;
    let request = ::http::Request::get("/")
        .header("host", server.addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    // Answered: the server accepted the connection and set it up.
    sender.send_request(request).await.unwrap();
    let pid = server.child.id().unwrap();
    let theirs = server_socket(pid, server.addr.port(), ours);
    assert!(
        theirs.nodelay().unwrap(),
        "the server's end of the connection waits for acknowledgements (Nagle)"
    );
}

/// A duplicate of the TCP socket process `pid` holds from local port
/// `port` to `peer_port`, taken with pidfd_getfd.
fn server_socket(pid: u32, port: u16, peer_port: u16) -> std::net::TcpStream {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: a plain system call on numbers; a descriptor it returns is
    // ours alone.
    let pidfd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: just returned, owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: as above; a descriptor closed meanwhile fails here.
        let taken =
            unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if taken < 0 {
            continue;
        }
        // SAFETY: just returned, owned by nothing else.
        let socket = std::net::TcpStream::from(unsafe { OwnedFd::from_raw_fd(taken as i32) });
        if let (Ok(here), Ok(there)) = (socket.local_addr(), socket.peer_addr())
            && here.port() == port
            && there.port() == peer_port
        {
            return socket;
        }
    }
    panic!("process {pid} holds no socket from port {port} to {peer_port}");
}
