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
