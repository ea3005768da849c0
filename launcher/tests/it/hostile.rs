//! A hostile agent (the fixture `hostile-agent`, standing for an agent that
//! user code took over): the launcher trusts no size, status or flag it
//! states. Output beyond the cap is cut by the launcher itself; a reply an
//! honest agent cannot send (a status out of range, an exit that disagrees
//! with it, a reply to another request, a line that is no frame, too many
//! outputs, a read answered with more than was asked) resets the session,
//! said plainly, and never passes as success. The server stays up.

use rmcp::model::CallToolResult;
use serde_json::Value;

use crate::common::*;

/// The launcher's own cap in the fixture manifest.
const OUTPUT_BYTES: usize = 65536;
const RESET: &str = "session reset: interpreter state and /workspace files lost";

async fn server() -> Server {
    let mut m = template();
    m["environments"]["python"]["session"] =
        serde_json::json!([wrappers().join("hostile-agent").to_str().unwrap()]);
    Server::start(vec![Manifest::new(&m)]).await
}

/// Runs `mode` in a session of its own.
async fn call(s: &Server, mode: &str) -> CallToolResult {
    s.session("python", mode, mode).await
}

/// The call failed, the session was reset saying the sandbox broke the
/// protocol, and no claim of the agent's passed as a fact.
#[track_caller]
fn assert_reset(r: &CallToolResult, mode: &str, why: &str) {
    let t = text(r);
    assert_eq!(r.is_error, Some(true), "{mode}: {t}");
    assert!(
        t.contains(&format!("the session's sandbox failed ({why}")) && t.ends_with(RESET),
        "{mode}: {t}"
    );
    let facts = facts(r);
    assert_eq!(facts["session_reset"], true, "{mode}: {facts}");
    assert_eq!(facts["exit_code"], Value::Null, "{mode}: {facts}");
    assert_eq!(facts["interpreter_exit"], Value::Null, "{mode}: {facts}");
    assert!(t.len() < 2 * OUTPUT_BYTES, "{mode}: {} bytes", t.len());
}

#[tokio::test]
async fn output_beyond_the_cap_is_cut_by_the_launcher_and_fails_the_call() {
    let s = server().await;
    for (mode, stream) in [("flood", "stdout"), ("flood-stderr", "stderr")] {
        let r = call(&s, mode).await;
        let t = text(&r);
        assert_reset(&r, mode, "the agent's reply broke the protocol");
        assert!(
            t.contains(&format!("{stream} over its cap")),
            "{mode}: {}",
            &t[t.len().saturating_sub(600)..]
        );
        // Head and tail kept, the middle dropped and counted, as the cap
        // does while output streams.
        let kept = t.matches('x').count();
        assert!(
            kept <= OUTPUT_BYTES && kept > OUTPUT_BYTES - 16,
            "{mode}: {kept}"
        );
        assert!(t.contains("HEAD") && t.contains("TAIL"), "{mode}");
        let dropped = facts(&r)[format!("{stream}_dropped_bytes")]
            .as_u64()
            .unwrap();
        assert_eq!(
            dropped as usize,
            12 * 1024 * 1024 + 8 - OUTPUT_BYTES,
            "{mode}"
        );
        assert!(t.contains(&format!(
            "{stream} cut: {dropped} bytes dropped from the middle"
        )));
    }
}

#[tokio::test]
async fn claims_an_honest_agent_cannot_make_reset_the_session() {
    let s = server().await;
    for (mode, why) in [
        (
            "status-300",
            "the agent's reply broke the protocol: status 300",
        ),
        (
            "status-minus",
            "the agent's reply broke the protocol: status -1",
        ),
        (
            "exit-mismatch",
            "the agent's reply broke the protocol: status 0 with",
        ),
        (
            "bad-signal",
            "the agent's reply broke the protocol: the interpreter's exit",
        ),
        (
            "many-outputs",
            "the agent's reply broke the protocol: 200 outputs",
        ),
    ] {
        let r = call(&s, mode).await;
        assert_reset(&r, mode, why);
    }
}

#[tokio::test]
async fn a_reply_to_another_request_or_no_frame_resets_the_session() {
    let s = server().await;
    for (mode, why) in [
        (
            "wrong-id",
            "the agent sent an unexpected reply: an exec reply",
        ),
        ("garbage", "the agent sent a bad frame"),
        ("oversized", "the agent sent an oversized frame"),
        (
            "long-refusal",
            "the agent's reply broke the protocol: an error message",
        ),
    ] {
        let r = call(&s, mode).await;
        assert_reset(&r, mode, why);
        assert!(!text(&r).contains("forged"), "{mode}: {}", text(&r));
    }
}

#[tokio::test]
async fn a_read_answered_with_more_or_elsewhere_resets_the_session() {
    let s = server().await;
    for (mode, why) in [
        ("big-read", "bytes for a read of at most"),
        ("read-offset", "at offset 7 for a read at 0"),
    ] {
        let r = call(&s, mode).await;
        let t = text(&r);
        assert_eq!(r.is_error, Some(true), "{mode}: {t}");
        assert!(
            t.contains("reading the outputs failed (") && t.contains(why),
            "{mode}: {t}"
        );
        assert!(
            r.content.iter().all(|c| c.as_image().is_none()),
            "{mode}: an image was shown"
        );
    }
}

#[tokio::test]
async fn honest_replies_pass_and_the_server_stays_up() {
    let s = server().await;
    for mode in ["flood", "wrong-id", "garbage", "status-300"] {
        assert_eq!(call(&s, mode).await.is_error, Some(true), "{mode}");
    }
    let r = s.session("python", "h", "honest").await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "honest\n");
    let r = s.session("python", "h", "exit-3").await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(facts(&r)["exit_code"], 3);
    assert_eq!(facts(&r)["interpreter_exit"]["code"], 3);
    assert_eq!(facts(&r)["session_reset"], false);
}

/// A session call's output as it comes (the agent's live outputs, asked
/// for when the client sends a progressToken, as rmcp's does): one too
/// large, too many at once, or for another request resets the session as
/// any bad reply does, and so does one a call without a token did not ask
/// for; one within its bounds passes and leaves the result as the reply
/// says.
#[tokio::test]
async fn live_outputs_past_their_bounds_or_unasked_reset_the_session() {
    let s = server().await;
    for (mode, why) in [
        (
            "live-oversized",
            "the agent's reply broke the protocol: a live output: 5464 bytes of base64",
        ),
        ("live-flood", "the agent's reply broke the protocol: "),
        (
            "live-wrong-id",
            "the agent sent an unexpected reply: an output to no request",
        ),
    ] {
        let r = call(&s, mode).await;
        assert_reset(&r, mode, why);
        assert!(!text(&r).contains("forged"), "{mode}: {}", text(&r));
        if mode == "live-flood" {
            // The fourth at once, or a later one on a slow machine.
            let t = text(&r);
            assert!(t.contains(" live outputs of stdout in "), "{t}");
            assert!(!t.contains("protocol: 20 live outputs"), "{t}");
        }
    }
    // Asked for: it passes, and what the model reads is the reply.
    let r = call(&s, "live-unasked").await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "honest\n");

    // A client without a progressToken (raw JSON-RPC): none was asked for.
    let mut m = template();
    m["environments"]["python"]["session"] =
        serde_json::json!([wrappers().join("hostile-agent").to_str().unwrap()]);
    let manifest = Manifest::new(&m);
    let mut raw = RawServer::spawn(&manifest, "info");
    raw.initialize().await;
    raw.send(serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run", "arguments":
            {"env": "python", "session": "u", "code": "live-unasked"}}
    }))
    .await;
    let result = loop {
        let line = raw.next_line().await.expect("the server answers");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 1 {
            break message["result"].clone();
        }
    };
    let shown = result["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        shown.contains(
            "the session's sandbox failed (the agent sent an unexpected reply: \
             a live output this call did not ask for)"
        ) && shown.ends_with(RESET),
        "{shown}"
    );
}

/// The hostile agent's spawns (hostile-agent): an honest one, then the
/// lies.
const SPAWNS: [&str; 6] = [
    "honest",
    "huge-chunk",
    "not-base64",
    "bad-exit",
    "wrong-id",
    "silent",
];

/// `sandbox exec` against the hostile agent: a chunk too large or not
/// base64, an end whose status is not its exit's, output for another
/// request, and an agent that never tells the end (past the timeout and a
/// stop's grace) each give one line and a non-zero exit, never a hang;
/// the server stays up and an honest spawn passes.
#[tokio::test]
async fn a_lying_agent_cannot_hang_or_fool_sandbox_exec() {
    let runtime = tempfile::tempdir().unwrap();
    let mut m = template();
    let env = &mut m["environments"]["python"];
    env["session"] = serde_json::json!([wrappers().join("hostile-agent").to_str().unwrap()]);
    env["limits"]["timeout_s"] = serde_json::json!(2);
    env["limits"]["max_timeout_s"] = serde_json::json!(2);
    let s = control_server(User::Own, runtime.path(), Manifest::new(&m)).await;
    for program in SPAWNS {
        assert_eq!(
            text(&s.session("python", program, "honest").await),
            "honest\n"
        );
        let out = cli(User::Own, runtime.path(), &["exec", program, "--", program]).await;
        let err = String::from_utf8_lossy(&out.stderr);
        if program == "honest" {
            assert_eq!(
                (out.status.code(), &out.stdout[..]),
                (Some(0), &b"hi\n"[..]),
                "{err}"
            );
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{program}: {out:?}");
        assert_eq!(err.lines().count(), 1, "{program}: {err}");
        assert!(
            err.contains(&format!("session `{program}`'s sandbox broke")),
            "{program}: {err}"
        );
    }
    assert_eq!(
        text(&s.session("python", "after", "honest").await),
        "honest\n"
    );
}

/// `sandbox enter` against the hostile agent, through a pseudo-terminal:
/// the same lies as for `exec`, and an input's ack of another id, each
/// one line and exit 1; an agent that never ends the shell holds it only
/// until the person leaves (`SIGTERM`: one line); the server stays up.
#[tokio::test]
async fn a_lying_agent_cannot_hang_or_fool_sandbox_enter() {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path();
    let mut m = template();
    let env = &mut m["environments"]["python"];
    env["session"] = serde_json::json!([wrappers().join("hostile-agent").to_str().unwrap()]);
    let s = control_server(User::Own, rt, Manifest::new(&m)).await;
    for program in SPAWNS.into_iter().chain(["bad-ack"]) {
        let code = format!("enter:{program}");
        assert_eq!(text(&s.session("python", program, &code).await), "honest\n");
        let (mut child, master, _slave, _) = enter_on_pty(User::Own, rt, program);
        let screen = Screen::follow(master.try_clone().unwrap());
        let mut keys = std::fs::File::from(master);
        std::io::Write::write_all(&mut keys, b"x").unwrap();
        if program == "silent" {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            signal_child(&child, nix::sys::signal::Signal::SIGTERM);
        }
        let status = tokio::time::timeout(GUARD, child.wait())
            .await
            .unwrap()
            .unwrap();
        if program == "honest" {
            assert_eq!(status.code(), Some(0), "{}", screen.text());
            screen.wait_for(0, "hi").await;
            continue;
        }
        assert_eq!(status.code(), Some(1), "{program}: {}", screen.text());
        let says = match program {
            "silent" => "SIGTERM ended enter".to_owned(),
            _ => format!("session `{program}`'s sandbox broke"),
        };
        screen.wait_for(0, &says).await;
        let shown = screen.text();
        // The typed `x` is echoed by the terminal itself when it comes
        // before enter's raw mode or after enter left it: on the line of
        // enter's message or on one of its own, as timing has it.
        let lines = shown.trim().lines().filter(|l| l.trim() != "x").count();
        assert_eq!(lines, 1, "{program}: {shown}");
    }
    assert_eq!(
        text(&s.session("python", "after", "honest").await),
        "honest\n"
    );
}
