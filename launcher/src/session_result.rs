//! Turns a session call ([`session::Outcome`]) into the `run` tool's result,
//! in the format of result.rs: stdout, then `--- stderr ---` and stderr,
//! then one short sentence per event worth knowing:
//!
//! - ``session `NAME` created: pass this name as `session` to continue it``:
//!   the server named the session (a client without an MCP session;
//!   session.rs);
//! - `new session `NAME`: the earlier one ended (WHY); its state and
//!   /workspace files are gone`: the name was in use before;
//! - `the interpreter had exited; this call ran in a fresh one (variables
//!   lost, /workspace files kept)`;
//! - `exit code N` (the call's status: the code's `$?` in bash, 1 for an
//!   uncaught exception), `interrupted after N s; state kept`;
//! - `the interpreter exited with code N` or `was killed by signal N`, with
//!   `the next call starts a fresh one (variables lost, /workspace files
//!   kept)`;
//! - `WHY: session reset: interpreter state and /workspace files lost`;
//! - `session `NAME` reached its maximum lifetime (N s) and was closed`.
//!
//! Then the outputs of the call (outputs.rs): a few lines naming each file
//! written under /workspace/outputs, and after the text block the images
//! (image content), SVG texts and resource links.
//!
//! A run with `files` and no session (throwaway.rs) is reported the same
//! way, with `session` null and the jail's end said as such.
//!
//! The facts, in `_meta` (result.rs says why not `structuredContent`):
//! `{"env", "session", "exit_code", "interpreter_exit" (null, {"code": N} or {"signal": N}), "timed_out", "cancelled",
//! "interrupted", "fresh_interpreter", "session_reset", "session_replaced",
//! "session_closed", "session_named_by_server", "stdout_dropped_bytes", "stderr_dropped_bytes",
//! "duration_ms", "store_path", "nixpkgs_rev", "outputs"}` (`outputs`:
//! `[{"path", "size", "mime", "shown", "uri"}]`). `exit_code` is null when no reply came
//! (a reset). `isError` is false exactly when the code ran to its end with
//! status 0 and nothing was reset, interrupted or cut short.

use proto::frame::Exit;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use crate::manifest::Env;
use crate::outputs;
use crate::result::{cut_notes, streams, with_facts, with_notes};
use crate::session::Outcome;

const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;
const SIGXFSZ: i32 = 25;

/// The result of a session call; `resource_links` says whether the client
/// takes `resource_link` content (the text names every link either way).
pub fn session_ran(env: &Env, o: &Outcome, resource_links: bool) -> CallToolResult {
    let reply = o.reply.as_ref();
    let interpreter_exit = match reply.and_then(|r| r.exit) {
        Some(Exit::Code(code)) => json!({"code": code}),
        Some(Exit::Signal(signal)) => json!({"signal": signal}),
        None => json!(null),
    };
    let facts = json!({
        "env": env.name,
        "session": (!o.throwaway).then_some(&o.session),
        "exit_code": reply.map(|r| r.status),
        "interpreter_exit": interpreter_exit,
        "timed_out": o.timed_out,
        "cancelled": o.cancelled,
        "interrupted": reply.is_some_and(|r| r.interrupted),
        "fresh_interpreter": reply.is_some_and(|r| r.restarted),
        "session_reset": o.reset.is_some(),
        "session_replaced": o.ended_before.is_some(),
        "session_closed": o.ended_after || o.shutdown,
        "session_named_by_server": o.named_by_server,
        "stdout_dropped_bytes": reply.map_or(0, |r| r.stdout_dropped),
        "stderr_dropped_bytes": reply.map_or(0, |r| r.stderr_dropped),
        "duration_ms": u64::try_from(o.duration.as_millis()).unwrap_or(u64::MAX),
        "store_path": env.store_path,
        "nixpkgs_rev": env.nixpkgs_rev,
        "outputs": outputs::facts(&o.outputs),
    });
    let succeeded = reply.is_some_and(|r| r.status == 0 && !r.interrupted)
        && o.reset.is_none()
        && !o.shutdown
        && !o.timed_out
        && !o.cancelled;
    let mut content = vec![ContentBlock::text(render(env, o))];
    content.extend(outputs::blocks(&o.outputs, resource_links));
    let result = if succeeded {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    with_facts(result, facts)
}

fn render(env: &Env, o: &Outcome) -> String {
    let mut text = String::new();
    let mut notes = Vec::new();
    if o.named_by_server {
        notes.push(format!(
            "session `{}` created: pass this name as `session` to continue it",
            o.session
        ));
    }
    if let Some(why) = &o.ended_before {
        notes.push(format!(
            "new session `{}`: the earlier one ended ({why}); its state and /workspace files are gone",
            o.session
        ));
    }
    if let Some(r) = &o.reply {
        text = streams(r.stdout.clone(), &r.stderr);
        if r.restarted {
            notes.push(
                "the interpreter had exited; this call ran in a fresh one (variables lost, \
                 /workspace files kept)"
                    .into(),
            );
        }
        notes.extend(cut_notes(r.stdout_dropped, r.stderr_dropped));
        if r.interrupted && o.throwaway {
            notes.push(if o.timed_out {
                format!("timed out after {} s (interrupted)", env.limits.timeout_s)
            } else {
                "interrupted".into()
            });
        } else if r.interrupted {
            notes.push(if o.timed_out {
                format!("interrupted after {} s; state kept", env.limits.timeout_s)
            } else if o.cancelled {
                "cancelled: interrupted; state kept".into()
            } else {
                "interrupted; state kept".into()
            });
        } else if o.cancelled {
            notes.push("cancelled".into());
        }
        match r.exit {
            Some(exit) if o.throwaway => notes.push(died(env, exit)),
            Some(exit) => notes.push(format!(
                "{}; the next call starts a fresh one (variables lost, /workspace files kept)",
                died(env, exit)
            )),
            None if r.status != 0 && !r.interrupted => {
                notes.push(format!("exit code {}", r.status))
            }
            None => {}
        }
    }
    if let Some(why) = &o.reset {
        notes.push(if o.throwaway {
            format!("{why}; the sandbox was killed")
        } else {
            format!("{why}: session reset: interpreter state and /workspace files lost")
        });
    }
    notes.extend(outputs::lines(&o.outputs, o.throwaway));
    if o.shutdown {
        notes.push("the server is stopping: session closed".into());
    } else if o.ended_after {
        notes.push(format!(
            "session `{}` reached its maximum lifetime and was closed; the next call with \
             this name starts a fresh one",
            o.session
        ));
    }
    with_notes(text, notes)
}

/// How the interpreter died, with the limit that usually explains it.
fn died(env: &Env, exit: Exit) -> String {
    let l = &env.limits;
    match exit {
        Exit::Code(code) => format!("the interpreter exited with code {code}"),
        Exit::Signal(SIGXCPU) => format!(
            "the interpreter was killed: CPU time limit {} s (counted over the interpreter's life)",
            l.cpu_s
        ),
        Exit::Signal(SIGXFSZ) => format!(
            "the interpreter was killed: file size limit {} MiB",
            l.file_mb
        ),
        Exit::Signal(SIGKILL) => format!(
            "the interpreter was killed by signal 9 (the memory limit, {} MiB, is the usual cause)",
            l.memory_mb
        ),
        Exit::Signal(n) => format!("the interpreter was killed by signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::frame::ExecReply;
    use std::time::Duration;

    fn env() -> Env {
        let mut env: Env = serde_json::from_value(json!({
            "description": "d", "interpreter": "python", "run": ["/nix/store/x-a/bin/a"],
            "session": ["/nix/store/x-a/bin/s"], "network": false, "packages": [],
            "store_path": "/nix/store/x-a",
            "limits": {"timeout_s": 30, "memory_mb": 1024, "pids": 1, "output_bytes": 8,
                       "workspace_mb": 1, "tmp_mb": 1, "cpu_s": 60, "file_mb": 1, "nofile": 1}
        }))
        .unwrap();
        env.name = "python".into();
        env
    }

    fn reply(status: i32, stdout: &str, stderr: &str) -> ExecReply {
        ExecReply {
            id: 1,
            status,
            stdout: stdout.into(),
            stderr: stderr.into(),
            stdout_dropped: 0,
            stderr_dropped: 0,
            exit: None,
            restarted: false,
            interrupted: false,
            duration_ms: 3,
            outputs: Vec::new(),
            outputs_more: 0,
        }
    }

    fn outcome(reply: Option<ExecReply>) -> Outcome {
        Outcome {
            reply,
            duration: Duration::from_millis(5),
            ..Outcome::new("s1".into(), false)
        }
    }

    fn text(r: &CallToolResult) -> &str {
        &r.content[0].as_text().unwrap().text
    }

    #[test]
    fn a_plain_call_is_its_output() {
        let r = session_ran(&env(), &outcome(Some(reply(0, "one\n", ""))), true);
        assert_eq!(text(&r), "one\n");
        assert_eq!(r.is_error, Some(false));
        let s = crate::result::facts(&r);
        assert_eq!(s["session"], "s1");
        assert_eq!(s["exit_code"], 0);
        assert_eq!(s["interpreter_exit"], serde_json::Value::Null);
        let r = session_ran(&env(), &outcome(Some(reply(0, "", ""))), true);
        assert_eq!(text(&r), "(no output)");
    }

    #[test]
    fn an_exception_and_an_exit_say_what_happened_to_the_state() {
        let r = session_ran(&env(), &outcome(Some(reply(1, "", "Traceback\n"))), true);
        assert_eq!(text(&r), "--- stderr ---\nTraceback\nexit code 1");
        assert_eq!(r.is_error, Some(true));
        let mut exited = reply(3, "bye\n", "");
        exited.exit = Some(Exit::Code(3));
        let r = session_ran(&env(), &outcome(Some(exited)), true);
        assert_eq!(
            text(&r),
            "bye\nthe interpreter exited with code 3; the next call starts a fresh one \
             (variables lost, /workspace files kept)"
        );
        assert_eq!(crate::result::facts(&r)["interpreter_exit"]["code"], 3);
        let mut fresh = reply(0, "2\n", "");
        fresh.restarted = true;
        let r = session_ran(&env(), &outcome(Some(fresh)), true);
        assert!(
            text(&r).starts_with("2\nthe interpreter had exited; this call ran in a fresh one")
        );
        assert_eq!(r.is_error, Some(false));
    }

    #[test]
    fn interrupts_and_resets_are_said_plainly() {
        let mut interrupted = reply(130, "", "KeyboardInterrupt\n");
        interrupted.interrupted = true;
        let mut o = outcome(Some(interrupted));
        o.timed_out = true;
        let r = session_ran(&env(), &o, true);
        assert_eq!(
            text(&r),
            "--- stderr ---\nKeyboardInterrupt\ninterrupted after 30 s; state kept"
        );
        assert_eq!(r.is_error, Some(true));
        let mut o = outcome(None);
        o.timed_out = true;
        o.reset = Some("timed out after 30 s and did not stop when interrupted".into());
        let r = session_ran(&env(), &o, true);
        assert_eq!(
            text(&r),
            "timed out after 30 s and did not stop when interrupted: session reset: \
             interpreter state and /workspace files lost"
        );
        let s = crate::result::facts(&r);
        assert_eq!(
            (s["session_reset"].as_bool(), s["exit_code"].is_null()),
            (Some(true), true)
        );
    }

    #[test]
    fn an_ended_session_is_named() {
        let mut o = outcome(Some(reply(0, "", "")));
        o.ended_before = Some("it was idle for 300 s".into());
        o.ended_after = true;
        let t = session_ran(&env(), &o, true);
        assert_eq!(
            text(&t),
            "new session `s1`: the earlier one ended (it was idle for 300 s); its state and \
             /workspace files are gone\nsession `s1` reached its maximum lifetime and was \
             closed; the next call with this name starts a fresh one"
        );
    }
}
