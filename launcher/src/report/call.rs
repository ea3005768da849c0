//! The result of a session call (session/), in the format of
//! report/mod.rs: stdout, then `--- stderr ---` and stderr, then one short
//! sentence per event worth knowing:
//!
//! - ``session `NAME` created: pass this name as `session` to continue it``:
//!   the server named the session (a client without an MCP session;
//!   session/names.rs);
//! - `new session `NAME`: the earlier one ended (WHY); its state and
//!   /workspace files are gone` (and project changes, as below): the name
//!   was in use before;
//! - `the interpreter had exited; this call ran in a fresh one (variables
//!   lost, /workspace files kept)`;
//! - `exit code N` (the call's status: the code's `$?` in bash, 1 for an
//!   uncaught exception), `interrupted after N s; state kept`;
//! - `the interpreter exited with code N` or `was killed by signal N`, with
//!   `the next call starts a fresh one (variables lost, /workspace files
//!   kept)`;
//! - `WHY: session reset: interpreter state and /workspace files lost`
//!   (`interpreter state, /workspace files and project changes lost` when
//!   the project is writable: the session's layer goes with its jail);
//! - `session `NAME` reached its maximum lifetime (N s) and was closed`.
//!
//! Then the outputs of the call (report/outputs.rs): a few lines naming
//! each file written under /workspace/outputs, and after the text block
//! the images (image content), SVG texts and resource links.
//!
//! A run with `files` and no session (session/throwaway.rs) is reported the
//! same way, with `session` null and the jail's end said as such.

use proto::frame::Exit;
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use super::limit::{SIGKILL, SIGXCPU, SIGXFSZ};
use super::outputs::{self, OutputFact};
use super::{Cuts, Receipt};
use crate::catalog::Env;
use crate::session::call::CallOutcome as Outcome;

/// The facts of a session call, in the result's `_meta` (report/mod.rs
/// says why).
#[derive(Debug, Serialize)]
pub struct CallFacts<'a> {
    #[serde(flatten)]
    pub receipt: Receipt<'a>,
    /// The session's name (the server's, when it named it); null for a run
    /// with `files` and no session.
    pub session: Option<&'a str>,
    /// The call's status (the code's `$?` in bash, 1 for an uncaught
    /// exception); null when no reply came (a reset).
    pub exit_code: Option<i32>,
    /// How the interpreter ended during the call, if it did: `{"code": N}`
    /// or `{"signal": N}`.
    pub interpreter_exit: Option<Exit>,
    /// The deadline (`timeout_s`) came: the code was interrupted, or the
    /// session reset.
    pub timed_out: bool,
    /// The client cancelled the call: the code was interrupted, or the
    /// session reset.
    pub cancelled: bool,
    /// An interrupt reached the code (its state is kept).
    pub interrupted: bool,
    /// The interpreter had exited before: this call ran in a fresh one.
    pub fresh_interpreter: bool,
    /// The session's jail was killed and started afresh during the call.
    pub session_reset: bool,
    /// The session named had ended before: the call ran in a new one.
    pub session_replaced: bool,
    /// The session ended with this call (its lifetime, or the server
    /// stopping).
    pub session_closed: bool,
    /// The server named this new session (`session`).
    pub session_named_by_server: bool,
    /// A run without a session was served by a warm jail, started before
    /// it (session/warm.rs); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
    #[serde(flatten)]
    pub cuts: Cuts,
    /// Wall time of the call, the outputs' collection included.
    pub duration_ms: u64,
    /// The files the call wrote under /workspace/outputs.
    pub outputs: Vec<OutputFact<'a>>,
}

/// The result of a session call; `resource_links` says whether the client
/// takes `resource_link` content (the text names every link either way).
pub fn called(env: &Env, o: &Outcome, resource_links: bool) -> CallToolResult {
    let reply = o.reply.as_ref();
    let facts = CallFacts {
        receipt: Receipt::of(env),
        session: (!o.throwaway).then_some(o.session.as_str()),
        exit_code: reply.map(|r| r.status),
        interpreter_exit: reply.and_then(|r| r.exit),
        timed_out: o.timed_out,
        cancelled: o.cancelled,
        interrupted: reply.is_some_and(|r| r.interrupted),
        fresh_interpreter: reply.is_some_and(|r| r.restarted),
        session_reset: o.reset.is_some(),
        session_replaced: o.ended_before.is_some(),
        session_closed: o.ended_after || o.shutdown,
        session_named_by_server: o.named_by_server,
        warm: o.warm,
        cuts: match (reply, &o.received) {
            (Some(r), _) => Cuts {
                stdout_dropped_bytes: r.stdout_dropped,
                stderr_dropped_bytes: r.stderr_dropped,
            },
            (None, Some(got)) => Cuts {
                stdout_dropped_bytes: got.stdout_dropped,
                stderr_dropped_bytes: got.stderr_dropped,
            },
            (None, None) => Cuts {
                stdout_dropped_bytes: 0,
                stderr_dropped_bytes: 0,
            },
        },
        duration_ms: super::millis(o.duration),
        outputs: outputs::facts(&o.outputs),
    };
    // The reply's status is the agent's word (verified in range,
    // session/verify.rs); the rest is the launcher's own knowledge.
    let succeeded = reply.is_some_and(|r| r.status == 0 && !r.interrupted)
        && o.reset.is_none()
        && o.outputs.broken.is_none()
        && !o.shutdown
        && !o.timed_out
        && !o.cancelled;
    let mut content = vec![ContentBlock::text(render(env, o))];
    content.extend(outputs::blocks(&o.outputs, resource_links));
    super::with_facts(super::result(succeeded, content), &facts)
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
    let held = held(o);
    if let Some(why) = &o.ended_before {
        notes.push(format!(
            "new session `{}`: the earlier one ended ({why}); its {held} are gone",
            o.session
        ));
    }
    if let Some(r) = &o.reply {
        text = super::streams(r.stdout.clone(), &r.stderr);
        if r.restarted {
            notes.push(
                "the interpreter had exited; this call ran in a fresh one (variables lost, \
                 /workspace files kept)"
                    .into(),
            );
        }
        notes.extend(super::cut_notes(r.stdout_dropped, r.stderr_dropped));
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
    } else if let Some(got) = &o.received {
        text = super::streams(got.stdout.clone(), &got.stderr);
        notes.extend(super::cut_notes(got.stdout_dropped, got.stderr_dropped));
    }
    if let Some(why) = &o.reset {
        notes.push(if o.throwaway {
            format!("{why}; the sandbox was killed")
        } else {
            format!("{why}: session reset: interpreter {held} lost")
        });
    }
    notes.extend(outputs::lines(&o.outputs, o.throwaway));
    notes.extend(o.refusals.iter().cloned());
    notes.extend(o.project.iter().cloned());
    notes.extend(o.published.iter().cloned());
    notes.extend(o.forked.iter().chain(&o.checkpoint).cloned());
    notes.extend(ending(o));
    super::with_notes(text, notes)
}

/// The line saying the session ended after the call, and why.
fn ending(o: &Outcome) -> Option<String> {
    if o.shutdown {
        Some("the server is stopping: session closed".into())
    } else if o.ended_by_call {
        Some(format!("session `{}` ended, as asked", o.session))
    } else if o.ended_after {
        Some(format!(
            "session `{}` reached its maximum lifetime and was closed; the next call with \
             this name starts a fresh one",
            o.session
        ))
    } else {
        None
    }
}

/// What a session holds that goes with its jail: its project changes too
/// when the jail had a project layer.
fn held(o: &Outcome) -> &'static str {
    if o.layered {
        "state, /workspace files and project changes"
    } else {
        "state and /workspace files"
    }
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
    use serde_json::json;
    use std::time::Duration;

    fn env() -> Env {
        crate::testing::env("python")
            .with("session", json!(["/nix/store/x-a/bin/s"]))
            .build()
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
            flooded: None,
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
        let r = called(&env(), &outcome(Some(reply(0, "one\n", ""))), true);
        assert_eq!(text(&r), "one\n");
        assert_eq!(r.is_error, Some(false));
        let s = crate::report::facts(&r);
        assert_eq!(s["session"], "s1");
        assert_eq!(s["exit_code"], 0);
        assert_eq!(s["interpreter_exit"], serde_json::Value::Null);
        let r = called(&env(), &outcome(Some(reply(0, "", ""))), true);
        assert_eq!(text(&r), "(no output)");
    }

    #[test]
    fn the_facts_keep_their_keys() {
        let r = called(&env(), &outcome(Some(reply(0, "", ""))), true);
        assert_eq!(
            crate::report::fact_keys(&r),
            [
                "cancelled",
                "duration_ms",
                "env",
                "exit_code",
                "fresh_interpreter",
                "interpreter_exit",
                "interrupted",
                "nixpkgs_rev",
                "outputs",
                "session",
                "session_closed",
                "session_named_by_server",
                "session_replaced",
                "session_reset",
                "stderr_dropped_bytes",
                "stdout_dropped_bytes",
                "store_path",
                "timed_out",
            ]
        );
    }

    #[test]
    fn an_exception_and_an_exit_say_what_happened_to_the_state() {
        let r = called(&env(), &outcome(Some(reply(1, "", "Traceback\n"))), true);
        assert_eq!(text(&r), "--- stderr ---\nTraceback\nexit code 1");
        assert_eq!(r.is_error, Some(true));
        let mut exited = reply(3, "bye\n", "");
        exited.exit = Some(Exit::Code(3));
        let r = called(&env(), &outcome(Some(exited)), true);
        assert_eq!(
            text(&r),
            "bye\nthe interpreter exited with code 3; the next call starts a fresh one \
             (variables lost, /workspace files kept)"
        );
        assert_eq!(crate::report::facts(&r)["interpreter_exit"]["code"], 3);
        let mut fresh = reply(0, "2\n", "");
        fresh.restarted = true;
        let r = called(&env(), &outcome(Some(fresh)), true);
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
        let r = called(&env(), &o, true);
        assert_eq!(
            text(&r),
            "--- stderr ---\nKeyboardInterrupt\ninterrupted after 30 s; state kept"
        );
        assert_eq!(r.is_error, Some(true));
        let mut o = outcome(None);
        o.timed_out = true;
        o.reset = Some("timed out after 30 s and did not stop when interrupted".into());
        let r = called(&env(), &o, true);
        assert_eq!(
            text(&r),
            "timed out after 30 s and did not stop when interrupted: session reset: \
             interpreter state and /workspace files lost"
        );
        let s = crate::report::facts(&r);
        assert_eq!(
            (s["session_reset"].as_bool(), s["exit_code"].is_null()),
            (Some(true), true)
        );
    }

    #[test]
    fn a_reply_that_broke_the_protocol_shows_its_cut_output_and_no_claim() {
        let mut o = outcome(None);
        o.received = Some(crate::session::verify::Streams {
            stdout: "HEAD\n[... 9 bytes dropped ...]\nTAIL".into(),
            stderr: String::new(),
            stdout_dropped: 9,
            stderr_dropped: 0,
        });
        o.reset =
            Some("the session's sandbox failed (the agent's reply broke the protocol)".into());
        let r = called(&env(), &o, true);
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            text(&r),
            "HEAD\n[... 9 bytes dropped ...]\nTAIL\nstdout cut: 9 bytes dropped from the middle\n\
             the session's sandbox failed (the agent's reply broke the protocol): session reset: \
             interpreter state and /workspace files lost"
        );
        let s = crate::report::facts(&r);
        assert_eq!(s["stdout_dropped_bytes"], 9);
        assert!(s["exit_code"].is_null() && s["interpreter_exit"].is_null());
    }

    #[test]
    fn outputs_that_could_not_be_read_fail_the_call() {
        let mut o = outcome(Some(reply(0, "", "")));
        o.outputs.items.push(crate::session::outputs::Item {
            output: proto::frame::Output {
                path: "a.png".into(),
                size: 3,
                mime: "image/png".into(),
            },
            shown: None,
            note: None,
            uri: None,
            unmirrored: None,
        });
        o.outputs.broken = Some("the agent did not answer a read in time".into());
        let r = called(&env(), &o, true);
        assert_eq!(r.is_error, Some(true));
        assert!(
            text(&r).contains("reading the outputs failed ("),
            "{}",
            text(&r)
        );
    }

    #[test]
    fn an_ended_session_is_named() {
        let mut o = outcome(Some(reply(0, "", "")));
        o.ended_before = Some("it was idle for 300 s".into());
        o.ended_after = true;
        let t = called(&env(), &o, true);
        assert_eq!(
            text(&t),
            "new session `s1`: the earlier one ended (it was idle for 300 s); its state and \
             /workspace files are gone\nsession `s1` reached its maximum lifetime and was \
             closed; the next call with this name starts a fresh one"
        );
    }
}
