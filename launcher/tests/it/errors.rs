//! Every bad input gets its own clear answer, and the server keeps answering.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn unknown_env_lists_the_known_ones_and_the_server_goes_on() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let r = s.run("rust", "fn main() {}").await;
    let msg = assert_refused(&r, "unknown_env");
    assert!(
        msg.contains("unknown environment `rust`; use one of: node, python, shell."),
        "{msg}"
    );
    assert_eq!(text(&s.run("python", "print('ok')").await), "ok\n");
}

#[tokio::test]
async fn empty_code_and_bad_arguments_are_refused() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    assert_refused(&s.run("python", "").await, "empty_code");
    let msg = assert_refused(&s.call(json!({"code": 42})).await, "invalid_arguments");
    assert!(msg.contains("`code` must be a string"), "{msg}");
    let msg = assert_refused(&s.call(json!({"env": "python"})).await, "invalid_arguments");
    assert!(msg.contains("`code` is missing"), "{msg}");
    let msg = assert_refused(
        &s.call(json!({"code": "1", "timeout": 5})).await,
        "invalid_arguments",
    );
    assert!(msg.contains("unknown argument `timeout`"), "{msg}");
    assert_eq!(text(&s.run("shell", "echo ok").await), "ok\n");
}

#[tokio::test]
async fn a_malformed_manifest_is_logged_and_named_while_good_ones_are_served() {
    let mut bad = template();
    bad["environments"] = json!({"data": template()["environments"]["python"].clone()});
    bad["environments"]["data"]["limits"]
        .as_object_mut()
        .unwrap()
        .remove("memory_mb");
    let bad = Manifest::new(&bad);
    let bad_path = bad.path.display().to_string();
    let junk = Manifest::raw("{ not json");
    let junk_path = junk.path.display().to_string();
    let s = Server::start(vec![Manifest::new(&template()), bad, junk]).await;

    let r = s.run("data", "print(1)").await;
    let msg = assert_refused(&r, "unknown_env");
    assert!(msg.contains("use one of: node, python, shell."), "{msg}");
    assert!(
        msg.contains(&format!(
            "{bad_path}: environments.data.limits.memory_mb: missing field"
        )),
        "{msg}"
    );
    assert!(msg.contains(&format!("{junk_path}: invalid JSON")), "{msg}");
    let log = s.stderr();
    assert!(log.contains("environments.data.limits.memory_mb"), "{log}");
    assert_eq!(
        text(&s.run("python", "print('still served')").await),
        "still served\n"
    );
}

#[tokio::test]
async fn a_wrapper_outside_the_store_is_refused_without_the_test_flag() {
    let s = Server::start_with(vec![Manifest::new(&template())], &[], &[]).await;
    let r = s.run("python", "print(1)").await;
    let msg = assert_refused(&r, "unknown_env");
    assert!(msg.contains("no usable environment"), "{msg}");
    assert!(msg.contains("environments.python.run[0]: wrapper"), "{msg}");
    assert!(msg.contains("is outside /nix/store"), "{msg}");
}

#[tokio::test]
async fn a_missing_or_non_executable_wrapper_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let not_exec = dir.path().join("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\necho hi\n").unwrap();
    let mut m = template();
    m["environments"]["gone"] = env_with_wrapper("/nonexistent/bin/sandbox-run");
    m["environments"]["noexec"] = env_with_wrapper(not_exec.to_str().unwrap());
    let s = Server::start(vec![Manifest::new(&m)]).await;
    let msg = assert_refused(&s.run("gone", "print(1)").await, "wrapper_missing");
    assert!(msg.contains("/nonexistent/bin/sandbox-run"), "{msg}");
    let msg = assert_refused(&s.run("noexec", "print(1)").await, "wrapper_missing");
    assert!(msg.contains("not-executable"), "{msg}");
    assert_eq!(
        text(&s.run("node", "console.log(1)").await),
        "1\nexit code 0"
    );
}

#[tokio::test]
async fn a_host_that_cannot_make_the_sandbox_gets_sandbox_unavailable() {
    let mut m = template();
    m["environments"]["broken"] = env_with_wrapper(wrappers().join("broken-run").to_str().unwrap());
    let s = Server::start(vec![Manifest::new(&m)]).await;
    let probe = marker("never-runs");
    for _ in 0..2 {
        // The second call probes again and fails again.
        let r = s.run("broken", &format!("print('{probe}')")).await;
        let msg = assert_refused(&r, "sandbox_unavailable");
        assert!(
            msg.contains("Can't find source path /nonexistent-host-path-for-the-jail"),
            "{msg}"
        );
        assert!(!text(&r).contains(&format!("\n{probe}")));
    }
    assert!(
        eventually(|| s.stderr().contains("sandbox probe failed")).await,
        "{}",
        s.stderr()
    );
    assert_eq!(text(&s.run("python", "print('ok')").await), "ok\n");
}

#[tokio::test]
async fn no_manifest_at_all_still_serves_and_says_why() {
    let s = Server::start_with(vec![], &[], &[]).await;
    let tools = s.client.list_all_tools().await.unwrap();
    assert_eq!(
        tools[0].input_schema["properties"]["env"]["description"],
        "No environment is available."
    );
    let msg = assert_refused(&s.call(json!({"code": "print(1)"})).await, "unknown_env");
    assert!(msg.contains("no usable environment"), "{msg}");
}

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let params = rmcp::model::CallToolRequestParams::new("exec");
    let e = s.client.call_tool(params).await.unwrap_err();
    assert!(e.to_string().contains("unknown tool `exec`"), "{e}");
}
