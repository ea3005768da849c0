//! Shared by the integration tests: fixture manifests, the built server
//! driven through rmcp's child-process client, and /proc scans for the
//! processes of a run.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest};
use rmcp::service::{PeerRequestOptions, RequestHandle, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;

pub const BIN: &str = env!("CARGO_BIN_EXE_nix-sandbox-mcp");

/// A guard against hangs, never an assertion about speed.
pub const GUARD: Duration = Duration::from_secs(30);

/// The launcher's test fixtures: hand-written wrappers around the host's
/// bwrap and interpreters, and the manifest that names them.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The fixture wrappers, with the workspace's `jail-budget` (built next to
/// the launcher) linked where they run it from (`fixtures/bin/`).
pub fn wrappers() -> PathBuf {
    static LINKED: std::sync::Once = std::sync::Once::new();
    LINKED.call_once(|| {
        let budget = Path::new(BIN).with_file_name("jail-budget");
        assert!(
            budget.is_file(),
            "{} is missing: build it with `cargo build -p agent` (cargo test --workspace does)",
            budget.display()
        );
        let dir = fixtures_dir().join("bin");
        std::fs::create_dir_all(&dir).unwrap();
        // Replaced whole (a link made beside it, then renamed over it):
        // another test process may be reading it.
        let link = dir.join("jail-budget");
        let fresh = dir.join(format!(".jail-budget.{}", std::process::id()));
        let _ = std::fs::remove_file(&fresh);
        std::os::unix::fs::symlink(&budget, &fresh).unwrap();
        std::fs::rename(&fresh, &link).unwrap();
    });
    fixtures_dir().join("wrappers")
}

/// The session agent: the workspace's `agent` binary, built next to the
/// launcher (`cargo test --workspace` builds both).
pub fn agent() -> PathBuf {
    let agent = Path::new(BIN).with_file_name("agent");
    assert!(
        agent.is_file(),
        "{} is missing: build it with `cargo build -p agent` (cargo test --workspace does)",
        agent.display()
    );
    agent
}

/// The fixture manifest (python, shell, node) with absolute wrapper paths
/// and the agent binary in the session argvs.
pub fn template() -> Value {
    let path = fixtures_dir().join("manifests/fixtures.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replace("@WRAPPERS@", wrappers().to_str().unwrap())
        .replace("@AGENT@", agent().to_str().unwrap());
    serde_json::from_str(&text).unwrap()
}

/// A copy of the fixture's python environment running `wrapper` instead.
pub fn env_with_wrapper(wrapper: &str) -> Value {
    let mut env = template()["environments"]["python"].clone();
    env["run"] = json!([wrapper]);
    env
}

/// A manifest file in its own temporary directory.
pub struct Manifest {
    _dir: TempDir,
    pub path: PathBuf,
}

impl Manifest {
    pub fn new(value: &Value) -> Self {
        Self::raw(&value.to_string())
    }

    pub fn raw(text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Readable by user 65534 too (servers run as that user, [`User`]).
        readable_by_all(dir.path());
        let path = dir.path().join("manifest.json");
        std::fs::write(&path, text).unwrap();
        Self { _dir: dir, path }
    }
}

/// Makes the directory `dir` readable by every user.
pub fn readable_by_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fixture wrapper run through a script `name` in `dir` (made readable
/// by all), `env` set before it: a wrapper of its own for one test.
pub fn wrapper_script(dir: &Path, name: &str, env: &str, wrapper: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    readable_by_all(dir);
    let path = dir.join(name);
    let target = wrappers().join(wrapper);
    let text = format!("#!/bin/sh\n{env}exec {} \"$@\"\n", target.display());
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Who a server under test runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum User {
    /// The test's own user.
    Own,
    /// User and group 65534 with no supplementary groups (`setpriv`), when
    /// the test runs as root: the unprivileged path.
    Nobody,
}

impl User {
    /// The test's own user, and user 65534 as well when the test is root (a
    /// test run as another user already tests the unprivileged path).
    pub fn all() -> Vec<User> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { nix::libc::geteuid() } == 0 {
            vec![User::Own, User::Nobody]
        } else {
            vec![User::Own]
        }
    }

    /// User 65534 when the test runs as root, else the test's own: an
    /// ordinary user's server (no cgroup, rlimits only), for attacks an
    /// ordinary user's clients could make.
    pub fn unprivileged() -> User {
        User::all().pop().unwrap_or(User::Own)
    }

    /// The server's command, run as this user (`setpriv` execs it, so the
    /// child's pid is the server's).
    /// The server's command, with warm jails off (`NIX_SANDBOX_WARM_JAILS=0`,
    /// which a test's `--warm-jails` or own variable overrides): the tests
    /// that count jails, uids and cgroups count those their calls start;
    /// warm.rs and the harness test the pool.
    pub fn command(self) -> tokio::process::Command {
        let mut cmd = match self {
            User::Own => tokio::process::Command::new(BIN),
            User::Nobody => {
                let mut cmd = tokio::process::Command::new("setpriv");
                cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
                cmd
            }
        };
        cmd.env("NIX_SANDBOX_WARM_JAILS", "0");
        cmd
    }
}

/// The server under test, with an MCP client connected to it.
pub struct Server {
    pub client: RunningService<RoleClient, ()>,
    pub pid: u32,
    stderr: Arc<Mutex<String>>,
    _manifests: Vec<Manifest>,
}

impl Server {
    /// Serves `manifests` with wrappers allowed outside the store.
    pub async fn start(manifests: Vec<Manifest>) -> Self {
        Self::start_with(manifests, &["--allow-wrappers-outside-store"], &[]).await
    }

    /// Serves the fixture manifest with its `timeout_s` set for every env.
    pub async fn fixtures_with_timeout(timeout_s: u64) -> Self {
        let mut m = template();
        for env in m["environments"].as_object_mut().unwrap().values_mut() {
            env["limits"]["timeout_s"] = json!(timeout_s);
        }
        Self::start(vec![Manifest::new(&m)]).await
    }

    pub async fn start_with(
        manifests: Vec<Manifest>,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        Self::start_command(User::Own.command(), manifests, args, envs).await
    }

    /// [`Server::start`] through `through`, a command that runs the server
    /// (`setpriv ...` to start it as another user).
    pub async fn start_as(manifests: Vec<Manifest>, through: &[&str]) -> Self {
        let cmd = match through.split_first() {
            Some((program, rest)) => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(rest).arg(BIN);
                cmd
            }
            None => tokio::process::Command::new(BIN),
        };
        Self::start_command(cmd, manifests, &["--allow-wrappers-outside-store"], &[]).await
    }

    /// [`Server::start_with`] running `cmd` ([`User::command`]).
    pub async fn start_command(
        mut cmd: tokio::process::Command,
        manifests: Vec<Manifest>,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        for m in &manifests {
            cmd.arg("--manifest").arg(&m.path);
        }
        cmd.args(args)
            .env_remove("NIX_SANDBOX_MANIFEST")
            .env_remove("PROJECT_DIR");
        cmd.env("RUST_LOG", "info");
        // Warm jails off unless the test asks (User::command says why).
        cmd.env("NIX_SANDBOX_WARM_JAILS", "0");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let (transport, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let pid = transport.id().expect("the server has a pid");
        let log = match stderr {
            Some(stderr) => collect(stderr),
            None => Arc::new(Mutex::new(String::new())),
        };
        let client = tokio::time::timeout(GUARD, ().serve(transport))
            .await
            .expect("initialize answered")
            .expect("initialize succeeds");
        Self {
            client,
            pid,
            stderr: log,
            _manifests: manifests,
        }
    }

    /// Calls `run` with `arguments` and returns its result.
    pub async fn call(&self, arguments: Value) -> CallToolResult {
        let Value::Object(arguments) = arguments else {
            panic!("arguments must be an object")
        };
        let params = CallToolRequestParams::new("run").with_arguments(arguments);
        tokio::time::timeout(Duration::from_secs(120), self.client.call_tool(params))
            .await
            .expect("run answered")
            .expect("tools/call succeeds at the protocol level")
    }

    pub async fn run(&self, env: &str, code: &str) -> CallToolResult {
        self.call(json!({"env": env, "code": code})).await
    }

    /// Sends `run` with `arguments` as a request the test can cancel.
    pub async fn call_cancellable(&self, arguments: Value) -> RequestHandle<RoleClient> {
        let mut params = CallToolRequestParams::new("run");
        params.arguments = arguments.as_object().cloned();
        self.client
            .peer()
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap()
    }

    /// What the server logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Peak resident memory of the server process, in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

pub fn text(r: &CallToolResult) -> String {
    r.content[0].as_text().expect("a text block").text.clone()
}

/// The machine facts of a result: in `_meta`, never in `structuredContent`
/// (clients show the model structuredContent in place of the output).
pub fn facts(r: &CallToolResult) -> &Value {
    assert!(r.structured_content.is_none(), "{r:?}");
    &r.meta.as_ref().expect("_meta").0["nix-sandbox-mcp/result"]
}

/// The error code of a refused call, if it was refused.
pub fn error_code(r: &CallToolResult) -> Option<String> {
    facts(r)["error"]["code"].as_str().map(str::to_owned)
}

/// Asserts that `r` was refused with `code` and returns its message.
pub fn assert_refused(r: &CallToolResult, code: &str) -> String {
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(error_code(r).as_deref(), Some(code), "{r:?}");
    let t = text(r);
    assert!(t.starts_with(&format!("error[{code}]: ")), "{t}");
    t
}

/// A string unique to this test run, to find a run's processes in /proc.
/// It ends in `x`, so that no marker is the start of another (`...-1x` is
/// not in `...-12x`, nor in `...-1x-job`'s neighbour `...-12x-job`).
pub fn marker(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "nsm-mark-{tag}-{}-{}x",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Sends `signal` to `pid`, a server this test started (never a pid of 1
/// or less: that would reach init or a whole process group).
pub fn signal_pid(pid: u32, signal: nix::sys::signal::Signal) {
    let pid = i32::try_from(pid).unwrap();
    assert!(pid > 1, "not a server's pid: {pid}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
}

/// How many processes named `comm` have `marker` in their command line
/// (the fixture's `python3`: one per run; `agent`: one per session jail).
pub fn count_named(marker: &str, comm: &str) -> usize {
    pids_with(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| name.trim() == comm)
        })
        .count()
}

/// Pids whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            pids.push(pid);
        }
    }
    pids
}

/// Waits (up to [`GUARD`]) until `pred` holds; false if it never did.
pub async fn eventually(mut pred: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < GUARD {
        if pred() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pred()
}

/// Asserts that no process of the run marked `marker` is left.
pub async fn assert_no_process_left(marker: &str) {
    if !eventually(|| pids_with(marker).is_empty()).await {
        let left = pids_with(marker);
        kill_all(&left);
        panic!("processes of the run are left: {left:?}");
    }
}

/// Waits until the run marked `marker` has processes.
pub async fn wait_running(marker: &str) {
    assert!(
        eventually(|| !pids_with(marker).is_empty()).await,
        "the run marked {marker} never started"
    );
}

/// The fixture manifest with every environment's run wrapper passing
/// `marker` to its program (so the start-up probes' jails carry it too);
/// with `stall`, also an environment `stall` whose jail never finishes
/// bubblewrap's setup (fixtures/wrappers/stall-run), marked `marker` too.
pub fn all_marked(marker: &str, stall: bool) -> Manifest {
    let mut m = template();
    let envs = m["environments"].as_object_mut().unwrap();
    for env in envs.values_mut() {
        env["run"].as_array_mut().unwrap().push(json!(marker));
    }
    if stall {
        let mut env = envs["shell"].clone();
        let wrapper = wrappers().join("stall-run");
        env["run"] = json!([wrapper.to_str().unwrap(), format!("{marker}-stall")]);
        envs.insert("stall".into(), env);
    }
    Manifest::new(&m)
}

/// Sandbox children of bubblewrap marked `marker` that exist: bwrap
/// processes that are pid 1 of their own pid namespace (the monitor that
/// started one is not). A jail of stall-run has one from the moment it is
/// in bubblewrap's setup, for good.
pub fn sandbox_children(marker: &str) -> Vec<u32> {
    pids_with(marker)
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let innermost = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|ids| ids.split_whitespace().last().map(str::to_owned));
            cmdline.starts_with(b"bwrap\0") && innermost.as_deref() == Some("1")
        })
        .collect()
}

/// Asserts that no process marked `marker` exists right now (no waiting):
/// a server that stopped has killed and reaped every jail before it exited.
pub fn assert_no_process_now(marker: &str, context: &str) {
    let left = pids_with(marker);
    let described: Vec<String> = left
        .iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            format!("{pid}: {}", cmdline.chars().take(120).collect::<String>())
        })
        .collect();
    if !left.is_empty() {
        kill_all(&left);
        panic!("{context}: processes left after the server exited: {described:?}");
    }
}

/// SIGKILL to each of `pids`: processes of this test's own jails (found by
/// its marker) that a failed assertion leaves, so that they do not outlive
/// the test. Never an id of 1 or less.
pub fn kill_all(pids: &[u32]) {
    for &pid in pids {
        let pid = i32::try_from(pid).unwrap();
        assert!(pid > 1, "not a jail's pid: {pid}");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A fixture manifest whose `env` passes `marker` to its program, with
/// `timeout_s`.
pub fn marked(env: &str, marker: &str, timeout_s: u64) -> Manifest {
    let mut m = template();
    let e = &mut m["environments"][env];
    e["run"].as_array_mut().unwrap().push(json!(marker));
    e["limits"]["timeout_s"] = json!(timeout_s);
    Manifest::new(&m)
}

/// The fixture manifest with `timeout_s`, whose session wrappers show the
/// agent's files under a path holding `marker`: every process of every
/// session jail (bwrap, the agent, the interpreter) has it in its command
/// line.
pub fn sessions_marked(marker: &str, timeout_s: u64) -> Manifest {
    let mut m = template();
    for env in m["environments"].as_object_mut().unwrap().values_mut() {
        env["session"].as_array_mut().unwrap().push(json!(marker));
        env["limits"]["timeout_s"] = json!(timeout_s);
    }
    Manifest::new(&m)
}

impl Server {
    /// Closes the client's side, as a client that goes away does (the
    /// server reads end of file on stdin); returns the server's log.
    pub async fn disconnect(self) -> Arc<Mutex<String>> {
        let log = self.stderr;
        self.client.cancel().await.expect("the client closes");
        log
    }

    /// Calls `run` in session `session` of `env`.
    pub async fn session(&self, env: &str, session: &str, code: &str) -> CallToolResult {
        self.call(json!({"env": env, "session": session, "code": code}))
            .await
    }
}

/// How a client connects a server's stdin and stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Pipes, as Python's and Rust's subprocess modules make them.
    Pipes,
    /// A socketpair each, as Node's `child_process` (libuv) makes them: how
    /// Claude Code, Gemini CLI and the TypeScript SDK start a server.
    Sockets,
    /// One socket for both, as inetd, systemd's `StandardInput=socket` and
    /// socat give it.
    OneSocket,
}

/// The client's end of a server's stdin.
pub type ToServer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
/// The client's end of a server's stdout.
pub type FromServer = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// Spawns `cmd` with its stdin and stdout over `transport`, and its stderr
/// piped.
pub fn spawn_over(
    mut cmd: tokio::process::Command,
    transport: Transport,
) -> (tokio::process::Child, ToServer, FromServer) {
    cmd.stderr(Stdio::piped());
    match transport {
        Transport::Pipes => {
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("the server starts");
            let stdin = child.stdin.take().unwrap();
            let stdout = child.stdout.take().unwrap();
            (child, Box::new(stdin), Box::new(stdout))
        }
        Transport::Sockets | Transport::OneSocket => {
            let (input, to_server) = std::os::unix::net::UnixStream::pair().unwrap();
            let (output, from_server) = match transport {
                Transport::Sockets => {
                    let (output, from_server) = std::os::unix::net::UnixStream::pair().unwrap();
                    (output, Some(from_server))
                }
                _ => (input.try_clone().unwrap(), None),
            };
            let child = cmd
                .stdin(std::os::fd::OwnedFd::from(input))
                .stdout(std::os::fd::OwnedFd::from(output))
                .spawn()
                .expect("the server starts");
            // `cmd` holds the server's ends until it is dropped: a client
            // holding them would never see the server's end of output.
            drop(cmd);
            let client = |end: std::os::unix::net::UnixStream| {
                end.set_nonblocking(true).unwrap();
                tokio::net::UnixStream::from_std(end).unwrap()
            };
            match from_server {
                Some(from_server) => (
                    child,
                    Box::new(client(to_server)),
                    Box::new(client(from_server)),
                ),
                // One socket: its write half, dropped, shuts the socket for
                // writing, so that the server reads the end of its input
                // while the socket still carries its output.
                None => {
                    let (read, write) = client(to_server).into_split();
                    (child, Box::new(write), Box::new(read))
                }
            }
        }
    }
}

/// What a server writes to `stderr`, collected as it comes by a task of its
/// own.
pub fn collect(mut stderr: tokio::process::ChildStderr) -> Arc<Mutex<String>> {
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    log
}

/// The server spoken to in raw JSON-RPC lines, for what a library client
/// hides: the bytes on stdout, and closing stdin.
pub struct RawServer {
    pub child: tokio::process::Child,
    stdin: Option<ToServer>,
    stdout: tokio::io::Lines<tokio::io::BufReader<FromServer>>,
    stderr: Arc<Mutex<String>>,
}

impl RawServer {
    /// The server command for `manifest`, logging at `rust_log`.
    pub fn command(manifest: &Manifest, rust_log: &str) -> tokio::process::Command {
        Self::command_as(User::Own, manifest, rust_log)
    }

    /// [`RawServer::command`], run as `user`.
    pub fn command_as(user: User, manifest: &Manifest, rust_log: &str) -> tokio::process::Command {
        let mut cmd = user.command();
        cmd.arg("--manifest")
            .arg(&manifest.path)
            .arg("--allow-wrappers-outside-store")
            .env("RUST_LOG", rust_log)
            .env_remove("NIX_SANDBOX_MANIFEST")
            .kill_on_drop(true);
        cmd
    }

    pub fn spawn(manifest: &Manifest, rust_log: &str) -> Self {
        Self::from_command(Self::command(manifest, rust_log))
    }

    /// Spawns `cmd` with piped stdio; stderr is collected as it comes.
    pub fn from_command(cmd: tokio::process::Command) -> Self {
        Self::from_command_over(cmd, Transport::Pipes)
    }

    /// [`RawServer::from_command`] with stdin and stdout over `transport`.
    pub fn from_command_over(cmd: tokio::process::Command, transport: Transport) -> Self {
        use tokio::io::AsyncBufReadExt;
        let (mut child, stdin, stdout) = spawn_over(cmd, transport);
        let stderr = collect(child.stderr.take().unwrap());
        Self {
            child,
            stdin: Some(stdin),
            stdout: tokio::io::BufReader::new(stdout).lines(),
            stderr,
        }
    }

    /// What the server logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub async fn send(&mut self, message: Value) {
        use tokio::io::AsyncWriteExt;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next stdout line, if any.
    pub async fn next_line(&mut self) -> Option<String> {
        tokio::time::timeout(GUARD, self.stdout.next_line())
            .await
            .expect("the server answers")
            .unwrap()
    }

    /// Sends initialize (id 0) and the initialized notification.
    pub async fn initialize(&mut self) -> Value {
        self.initialize_as("2025-06-18").await
    }

    /// [`RawServer::initialize`] with protocol revision `version`.
    pub async fn initialize_as(&mut self, version: &str) -> Value {
        self.send(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"}
            }
        }))
        .await;
        let reply: Value = serde_json::from_str(&self.next_line().await.unwrap()).unwrap();
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        reply
    }

    pub async fn call_run(&mut self, id: u64, env: &str, code: &str) {
        self.send(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "run", "arguments": {"env": env, "code": code}}
        }))
        .await;
    }

    /// Closes the server's stdin: the client is gone.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Closes the server's stdin and waits (up to [`GUARD`]) for its exit.
    pub async fn close_and_wait(&mut self) -> std::process::ExitStatus {
        self.close_stdin();
        tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("the server exits")
            .unwrap()
    }
}

/// `nix-sandbox-mcp sandbox ARGS...` run as `user` with `runtime`.
pub async fn cli(user: User, runtime: &Path, args: &[&str]) -> Output {
    let mut cmd = user.command();
    cmd.arg("sandbox")
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime);
    cmd.env_remove("RUST_LOG");
    tokio::time::timeout(GUARD, cmd.output())
        .await
        .expect("the CLI ends")
        .unwrap()
}

/// What the CLI wrote to a pseudo-terminal's master, gathered by a thread.
#[derive(Clone, Default)]
pub struct Screen(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Screen {
    /// Reads `master` into the screen until it ends.
    pub fn follow(master: std::os::fd::OwnedFd) -> Self {
        let screen = Self::default();
        let into = screen.clone();
        std::thread::spawn(move || {
            let mut master = std::fs::File::from(master);
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut master, &mut buf) {
                if n == 0 {
                    return;
                }
                into.0.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        screen
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until the screen after byte `from` holds `what`; the screen's
    /// length just after it.
    pub async fn wait_for(&self, from: usize, what: &str) -> usize {
        for _ in 0..300 {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|t| t.find(what)) {
                return from + at + what.len();
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("{what:?} never came after byte {from}: {:?}", self.text());
    }
}

/// `sandbox enter ID` as `user` on a fresh pseudo-terminal of 24 by 80 (as
/// a person's terminal): the CLI, the master, the slave (kept, to read its
/// modes) and its modes as they were before the CLI started (which may
/// make it raw before the caller could read them).
pub fn enter_on_pty(
    user: User,
    rt: &std::path::Path,
    id: &str,
) -> (
    tokio::process::Child,
    std::os::fd::OwnedFd,
    std::os::fd::OwnedFd,
    nix::sys::termios::Termios,
) {
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let before = nix::sys::termios::tcgetattr(&pty.slave).unwrap();
    let mut cmd = user.command();
    cmd.args(["sandbox", "enter", id])
        .env("XDG_RUNTIME_DIR", rt)
        .env("TERM", "dumb")
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    for stdio in [
        tokio::process::Command::stdin,
        tokio::process::Command::stdout,
        tokio::process::Command::stderr,
    ] {
        stdio(
            &mut cmd,
            std::process::Stdio::from(pty.slave.try_clone().unwrap()),
        );
    }
    let child = cmd.spawn().unwrap();
    (child, pty.master, pty.slave, before)
}

/// A server of `user`'s on `manifest` (fixture wrappers allowed) whose
/// control socket is in `runtime` (its `XDG_RUNTIME_DIR`).
pub async fn control_server(user: User, runtime: &Path, manifest: Manifest) -> Server {
    Server::start_command(
        user.command(),
        vec![manifest],
        &["--allow-wrappers-outside-store"],
        &[("XDG_RUNTIME_DIR", runtime.to_str().unwrap())],
    )
    .await
}

/// Sends `signal` to `child` (never to a pid of 1 or below).
pub fn signal_child(child: &tokio::process::Child, signal: nix::sys::signal::Signal) {
    let pid = child.id().unwrap();
    assert!(pid > 1);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
}
