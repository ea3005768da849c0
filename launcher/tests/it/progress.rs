//! Progress while a call runs: a client that sends a progressToken gets
//! `notifications/progress` about once a second, with the newest lines of
//! a run's or a session call's output (a run served by a warm jail's too),
//! or that it is running while nothing was printed; a client whose
//! timeout is shorter than the run but resets on progress keeps waiting
//! and gets the whole result; a client that sends no token gets none.
//! (A client without progress that gives up first: rmcp's own tests.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::common::{BIN, GUARD, Manifest, facts, template, text};

/// A client that keeps every progress notification it is sent.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<ProgressNotificationParam>>>);

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }
}

async fn start(timeout_s: u64) -> (RunningService<RoleClient, Recorder>, Recorder, Manifest) {
    start_with(timeout_s, &[]).await
}

/// [`start`] with the server's further `args`.
async fn start_with(
    timeout_s: u64,
    args: &[&str],
) -> (RunningService<RoleClient, Recorder>, Recorder, Manifest) {
    let mut m = template();
    for env in m["environments"].as_object_mut().unwrap().values_mut() {
        env["limits"]["timeout_s"] = json!(timeout_s);
    }
    let manifest = Manifest::new(&m);
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("--manifest")
        .arg(&manifest.path)
        .arg("--allow-wrappers-outside-store")
        .args(args)
        .env_remove("NIX_SANDBOX_MANIFEST")
        .env_remove("PROJECT_DIR");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let recorder = Recorder::default();
    let client = tokio::time::timeout(GUARD, recorder.clone().serve(transport))
        .await
        .unwrap()
        .unwrap();
    (client, recorder, manifest)
}

/// Calls `run` with `arguments` (rmcp's client sends a progressToken with
/// every request), giving up after `timeout` unless progress comes: then
/// it waits on, to 120 s.
async fn call(
    client: &RunningService<RoleClient, Recorder>,
    arguments: Value,
    timeout: Duration,
) -> Result<String, String> {
    let params =
        CallToolRequestParams::new("run").with_arguments(arguments.as_object().cloned().unwrap());
    let mut options = PeerRequestOptions::no_options();
    options.timeout = Some(timeout);
    options.reset_timeout_on_progress = true;
    options.max_total_timeout = Some(Duration::from_secs(120));
    let handle = client
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            options,
        )
        .await
        .map_err(|e| e.to_string())?;
    match handle.await_response().await {
        Ok(ServerResult::CallToolResult(result)) => Ok(text(&result)),
        Ok(other) => Err(format!("not a tool result: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Prints a numbered line every 0.4 s for about 4 s.
const PRINTER: &str =
    "import time\nfor i in range(10):\n    print('line', i, flush=True)\n    time.sleep(0.4)\n";

#[tokio::test]
async fn a_run_tells_its_newest_lines_and_a_short_client_timeout_keeps_waiting() {
    let (client, recorder, _m) = start(30).await;
    // A 1.5 s timeout that progress resets: the 4 s run still answers.
    let answer = call(
        &client,
        json!({"env": "python", "code": PRINTER}),
        Duration::from_millis(1500),
    )
    .await
    .expect("progress kept the client waiting");
    assert!(
        answer.contains("line 0") && answer.contains("line 9"),
        "{answer}"
    );
    let seen = recorder.0.lock().unwrap().clone();
    assert!(seen.len() >= 2, "progress notifications: {seen:?}");
    let with_lines: Vec<_> = seen
        .iter()
        .filter(|p| p.message.as_deref().is_some_and(|m| m.contains("line ")))
        .collect();
    assert!(
        !with_lines.is_empty(),
        "no notification carried output: {seen:?}"
    );
    for p in &seen {
        assert_eq!(p.progress_token, seen[0].progress_token);
        assert_eq!(p.total, Some(30.0), "{p:?}");
        let message = p.message.as_deref().unwrap_or_default();
        assert!(
            message.lines().count() <= 8 && message.len() <= 2048,
            "{message:?}"
        );
    }
    for pair in seen.windows(2) {
        assert!(
            pair[0].progress < pair[1].progress,
            "progress must grow: {seen:?}"
        );
    }
    client.cancel().await.unwrap();
}

/// A call that asks for a longer timeout is told its progress out of that
/// timeout, not the environment's.
#[tokio::test]
async fn the_total_is_the_timeout_the_call_asked_for() {
    let (client, recorder, _m) = start(30).await;
    let code = "import time\ntime.sleep(2.5)\nprint('done')";
    let answer = call(
        &client,
        json!({"env": "python", "code": code, "timeout_s": 90}),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(answer, "done\n");
    let seen = recorder.0.lock().unwrap().clone();
    assert!(!seen.is_empty(), "no progress");
    for p in &seen {
        assert_eq!(p.total, Some(90.0), "{p:?}");
    }
    client.cancel().await.unwrap();
}

/// Without a progressToken (rmcp's client always sends one, so this
/// speaks JSON-RPC itself): the result comes, and no notification before
/// it.
#[tokio::test]
async fn without_a_token_no_progress() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut m = template();
    m["environments"]["python"]["limits"]["timeout_s"] = json!(30);
    let manifest = Manifest::new(&m);
    let mut child = tokio::process::Command::new(BIN)
        .arg("--manifest")
        .arg(&manifest.path)
        .arg("--allow-wrappers-outside-store")
        .env_remove("NIX_SANDBOX_MANIFEST")
        .env_remove("PROJECT_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run", "arguments": {"env": "python", "code": PRINTER}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let first = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.contains("\"id\":1"), "{first}");
    stdin
        .write_all(format!("{initialized}\n{call}\n").as_bytes())
        .await
        .unwrap();
    loop {
        let line = tokio::time::timeout(GUARD, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            !line.contains("notifications/progress"),
            "progress without a token: {line}"
        );
        if line.contains("\"id\":2") {
            assert!(line.contains("line 9"), "{line}");
            break;
        }
    }
}

#[tokio::test]
async fn a_session_call_says_it_is_running() {
    let (client, recorder, _m) = start(30).await;
    let answer = call(
        &client,
        json!({"env": "python", "session": "s", "code": "import time\ntime.sleep(2.5)\nprint('slept')"}),
        Duration::from_millis(1500),
    )
    .await
    .expect("progress kept the client waiting");
    assert!(answer.contains("slept"), "{answer}");
    let seen = recorder.0.lock().unwrap().clone();
    assert!(
        seen.iter().any(|p| p
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("running, "))),
        "{seen:?}"
    );
    client.cancel().await.unwrap();
}

/// Prints a line, then sleeps 3 s: progress comes while it sleeps.
const PRINT_THEN_SLEEP: &str =
    "import time\nprint('live line', 7, flush=True)\ntime.sleep(3)\nprint('woke')";

/// Whether a notification's message held the line the code printed.
fn told_the_line(seen: &[ProgressNotificationParam]) -> bool {
    seen.iter().any(|p| {
        p.message
            .as_deref()
            .is_some_and(|m| m.lines().any(|l| l == "live line 7"))
    })
}

/// A session call's output comes as it is printed (the session agent's
/// live outputs): a notification while it sleeps holds the line.
#[tokio::test]
async fn a_session_call_tells_its_newest_lines() {
    let (client, recorder, _m) = start(30).await;
    let answer = call(
        &client,
        json!({"env": "python", "session": "s", "code": PRINT_THEN_SLEEP}),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert!(answer.contains("live line 7\nwoke"), "{answer}");
    let seen = recorder.0.lock().unwrap().clone();
    assert!(told_the_line(&seen), "{seen:?}");
    // The session's next call, with nothing printed yet, is running.
    recorder.0.lock().unwrap().clear();
    let answer = call(
        &client,
        json!({"env": "python", "session": "s", "code": "import time\ntime.sleep(2.5)\nprint('slept')"}),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert!(answer.contains("slept"), "{answer}");
    let seen = recorder.0.lock().unwrap().clone();
    assert!(!seen.is_empty(), "no progress");
    assert!(
        seen.iter().all(|p| p
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("running, "))),
        "{seen:?}"
    );
    client.cancel().await.unwrap();
}

/// A plain run served by a warm jail (its agent's `once` call) tells its
/// newest lines as a cold run does.
#[tokio::test]
async fn a_run_served_warm_tells_its_newest_lines() {
    let (client, recorder, _m) = start_with(30, &["--warm-jails", "4"]).await;
    // The first run is cold; it gives python a warm jail.
    let params = CallToolRequestParams::new("run").with_arguments(
        json!({"env": "python", "code": "print(1)"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    client.call_tool(params).await.unwrap();
    for _ in 0..20 {
        recorder.0.lock().unwrap().clear();
        let params = CallToolRequestParams::new("run").with_arguments(
            json!({"env": "python", "code": PRINT_THEN_SLEEP})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let r = tokio::time::timeout(GUARD, client.call_tool(params))
            .await
            .unwrap()
            .unwrap();
        if facts(&r)["warm"] != json!(true) {
            // The pool refills after a run: give it its replacement.
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        assert!(text(&r).contains("live line 7\nwoke"), "{r:?}");
        let seen = recorder.0.lock().unwrap().clone();
        assert!(told_the_line(&seen), "{seen:?}");
        client.cancel().await.unwrap();
        return;
    }
    panic!("no warm jail served the run");
}
