//! stdout carries only the protocol, even with every log level on.

use serde_json::Value;

use crate::common::*;

#[tokio::test]
async fn stdout_is_only_json_rpc_even_at_trace_level() {
    let manifest = Manifest::new(&template());
    let mut raw = RawServer::spawn(&manifest, "trace");
    let init = raw.initialize().await;
    assert_eq!(init["id"], 0);
    assert_eq!(init["result"]["serverInfo"]["name"], "nix-sandbox-mcp");
    raw.send(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    raw.call_run(
        2,
        "python",
        "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
    )
    .await;
    raw.call_run(3, "nope", "x").await;
    let mut answered = Vec::new();
    let mut lines = Vec::new();
    while answered.len() < 3 {
        let line = raw
            .next_line()
            .await
            .expect("the server answers every request");
        let msg: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(msg["jsonrpc"], "2.0", "{line}");
        if let Some(id) = msg["id"].as_u64() {
            answered.push(id);
        }
        lines.push(msg);
    }
    raw.close_stdin();
    // Whatever else comes before the server exits must be JSON-RPC too.
    while let Some(line) = raw.next_line().await {
        let msg: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(msg["jsonrpc"], "2.0", "{line}");
    }
    answered.sort();
    assert_eq!(answered, [1, 2, 3]);
    let run = lines.iter().find(|m| m["id"] == 2).unwrap();
    assert_eq!(
        run["result"]["content"][0]["text"],
        "to stdout\n--- stderr ---\nto stderr\n"
    );
    let status = raw.child.wait().await.unwrap();
    assert!(status.success());
    // The logs went to stderr, at trace level.
    let log = raw.stderr();
    assert!(log.contains("TRACE") || log.contains("DEBUG"), "{log}");
}

/// A client that closes before `initialize` (a health check such as
/// `gemini mcp list`, a protocol probe) is no error: the server exits 0,
/// logs no error, and started no jail (no sandbox probe runs before the
/// handshake).
#[tokio::test]
async fn a_client_gone_before_initialize_is_no_error_and_starts_no_jail() {
    let mark = marker("pre-init");
    let manifest = marked("python", &mark, 30);
    for _ in 0..5 {
        let mut raw = RawServer::spawn(&manifest, "info");
        raw.close_stdin();
        let status = tokio::time::timeout(GUARD, raw.child.wait())
            .await
            .expect("the server exits")
            .unwrap();
        assert!(
            eventually(|| raw.stderr().contains("server stopping")).await,
            "{}",
            raw.stderr()
        );
        let log = raw.stderr();
        assert!(status.success(), "{status:?}: {log}");
        assert!(!log.contains("ERROR"), "{log}");
        assert!(pids_with(&mark).is_empty(), "{:?}", pids_with(&mark));
    }
}

/// `resource_link` content came with the 2025-06-18 revision: a client of
/// an older one (`mcp` 1.9.4 on 2025-03-26 rejects the whole result) gets
/// the link named in the text only; a newer one gets the block too.
#[tokio::test]
async fn resource_links_only_for_revisions_that_have_them() {
    let manifest = Manifest::new(&template());
    for (version, links) in [("2025-03-26", false), ("2025-06-18", true)] {
        let mut raw = RawServer::spawn(&manifest, "info");
        let init = raw.initialize_as(version).await;
        assert_eq!(init["result"]["protocolVersion"], version, "{init}");
        raw.send(serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "run", "arguments": {
                "env": "python", "session": "s",
                "code": "open('outputs/data.csv', 'w').write('a,b\\n1,2\\n')"
            }}
        }))
        .await;
        let reply: Value = serde_json::from_str(&raw.next_line().await.unwrap()).unwrap();
        let content = reply["result"]["content"].as_array().unwrap();
        let text = content[0]["text"].as_str().unwrap();
        assert!(
            text.contains("data.csv (text/csv, 8 B): resource sandbox://s/outputs/data.csv"),
            "{text}"
        );
        let blocks: Vec<&str> = content
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        if links {
            assert_eq!(blocks, ["text", "resource_link"], "{reply}");
        } else {
            assert_eq!(blocks, ["text"], "{reply}");
        }
        raw.close_stdin();
        assert!(raw.child.wait().await.unwrap().success());
    }
}

/// Clients such as Gemini CLI stop a stdio server with SIGTERM (`gemini mcp
/// list` does so right after the handshake, while the sandbox probes run):
/// the server stops as on end of input, exit 0, and no jail is left, also
/// one in the middle of a run, and also for SIGINT.
#[tokio::test]
async fn sigterm_or_sigint_stops_a_stdio_server_and_every_jail() {
    use nix::sys::signal::Signal;
    let mark = marker("stdio-term");
    let manifest = marked("python", &mark, 600);
    for (round, signal) in [Signal::SIGTERM, Signal::SIGINT]
        .into_iter()
        .cycle()
        .take(8)
        .enumerate()
    {
        let mut raw = RawServer::spawn(&manifest, "info");
        raw.initialize().await;
        if round % 4 == 0 {
            raw.call_run(1, "python", "import time\ntime.sleep(1000)")
                .await;
            wait_running(&mark).await;
        }
        signal_pid(raw.child.id().unwrap(), signal);
        let status = tokio::time::timeout(GUARD, raw.child.wait())
            .await
            .expect("the server exits")
            .unwrap();
        assert!(status.success(), "{signal}: {status:?}: {}", raw.stderr());
        assert_no_process_left(&mark).await;
    }
}

/// A `run` call in session `session` of the python environment.
fn session_call(id: u64, session: &str, code: &str) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "run", "arguments": {"env": "python", "session": session, "code": code}}
    })
}

/// Once the client closed stdin nothing more is written, not even the
/// answer of the call the closing killed: the Python SDK 1.x fails on a
/// message that comes after it closed.
#[tokio::test]
async fn nothing_is_written_after_the_client_closed_stdin() {
    let mark = marker("silent");
    let manifest = sessions_marked(&mark, 600);
    let mut raw = RawServer::spawn(&manifest, "info");
    raw.initialize().await;
    raw.send(session_call(1, "s", "import time\ntime.sleep(1000)"))
        .await;
    wait_running(&mark).await;
    raw.close_stdin();
    assert_eq!(raw.next_line().await, None, "{}", raw.stderr());
    assert!(raw.child.wait().await.unwrap().success());
    assert_no_process_left(&mark).await;
}

/// A call that reaches a busy session just before the cancellation of the
/// running call (over HTTP they are separate requests, and the TypeScript
/// SDK sends both at once) waits for it instead of answering busy.
#[tokio::test]
async fn a_call_just_ahead_of_the_cancel_of_the_running_one_waits_for_it() {
    let mark = marker("ahead");
    let manifest = sessions_marked(&mark, 600);
    let mut raw = RawServer::spawn(&manifest, "info");
    raw.initialize().await;
    raw.send(session_call(1, "s", "x = 'kept'")).await;
    let set = raw.next_line().await.unwrap();
    assert!(set.contains("\"id\":1"), "{set}");
    raw.send(session_call(2, "s", "import time\ntime.sleep(1000)"))
        .await;
    wait_running(&mark).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    raw.send(session_call(3, "s", "print(x)")).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    raw.send(serde_json::json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the test cancels"}
    }))
    .await;
    loop {
        let line = raw.next_line().await.expect("an answer to call 3");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 3 {
            assert_eq!(
                message["result"]["content"][0]["text"], "kept\n",
                "{message}"
            );
            break;
        }
    }
    raw.close_stdin();
    assert!(raw.child.wait().await.unwrap().success());
}
