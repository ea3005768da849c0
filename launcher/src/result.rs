//! Turns the outcome of a run, or a refusal, into the `run` tool's result.
//!
//! # Result format (the decision the README documents)
//!
//! `content[0]` is one text block for the model:
//! - stdout as it was written;
//! - then, when stderr is not empty, a line `--- stderr ---` and stderr;
//! - then one short sentence per abnormal event: `exit code 3`,
//!   `killed by signal 9`, `timed out after 30 s; the process tree was killed`,
//!   `cancelled`, `stdout cut: 123456 bytes dropped from the middle` (the cut
//!   itself is marked in place by `[... N bytes dropped ...]`);
//! - when a limit ended or broke the run, which one (`killed: memory limit
//!   1024 MiB`, `killed: CPU time limit 60 s`, `probably hit the memory limit
//!   (1024 MiB)` when told from the program's messages; limits.rs);
//! - when a limit was hit or the code was killed by a signal, what the run
//!   used, when the run had a cgroup: `used: CPU 1.20 s, memory 38 MiB`;
//! - a successful run that printed nothing says `(no output)`.
//!
//! The same facts for programs go in the result's `_meta`, under
//! [`FACTS_KEY`], and not in `structuredContent`: clients such as Claude
//! Code, Codex, pydantic-ai and openai-agents show the model
//! `structuredContent` instead of the content blocks when it is present,
//! which would hide the output; no client shows `_meta` to the model.
//! The facts: `{"env", "exit_code", "signal", "timed_out", "cancelled",
//! "stdout_dropped_bytes", "stderr_dropped_bytes", "duration_ms", "store_path",
//! "nixpkgs_rev", "cpu_ms", "peak_memory_bytes", "limit"}`; `store_path` and
//! `nixpkgs_rev` (null when unknown) are the receipt: `nix run` of the store
//! path replays the run in the same environment; `limit` is null or
//! `{"name": "memory" | "cpu" | "file_size" | "processes" | "open_files" |
//! "disk", "certain": bool}`, and the usage fields are null when unknown.
//! `exit_code` is null when the wrapper was killed by a signal; `signal` is
//! the signal that ended the wrapper, or N when it exited with 128+N (how a
//! wrapper reports that the code died of signal N). No `outputSchema` is
//! declared, to keep `tools/list` small.
//!
//! A call refused before anything ran has `isError: true`, the text
//! `error[code]: sentence`, and the facts `{"error": {"code", "message"}}`.
//!
//! `isError` is true when the code did not succeed (non-zero exit, killed by
//! a signal, timed out, cancelled) or the launcher refused the call; it is
//! false exactly when the code ran and exited 0.

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Value, json};

use crate::cgroup::Stats;
use crate::errors::RunError;
use crate::exec::{Exit, Outcome};
use crate::limits::{self, Hit, Used};
use crate::manifest::Env;

/// The `_meta` key of a result's machine-readable facts.
pub const FACTS_KEY: &str = "nix-sandbox-mcp/result";

/// `result` with `facts` in its `_meta` (never in `structuredContent`,
/// which clients would show the model in place of the output).
pub fn with_facts(mut result: CallToolResult, facts: Value) -> CallToolResult {
    let mut meta = MetaObject::default();
    meta.0.insert(FACTS_KEY.to_owned(), facts);
    result.meta = Some(meta);
    result
}

/// The facts of `result` (tests).
#[cfg(test)]
pub fn facts(result: &CallToolResult) -> &Value {
    &result.meta.as_ref().expect("_meta").0[FACTS_KEY]
}

/// The result of a run that happened; `cgroup` is what the run's cgroup
/// counted, when it had one.
pub fn ran(env: &Env, outcome: &Outcome, cgroup: Option<&Stats>) -> CallToolResult {
    let signal = match outcome.exit {
        Exit::Signal(n) => Some(n),
        Exit::Code(code) if (129..=192).contains(&code) => Some(code - 128),
        _ => None,
    };
    let exit_code = match outcome.exit {
        Exit::Code(code) => Some(code),
        _ => None,
    };
    let used = Used::of(cgroup);
    let hit = limits::diagnose(env, outcome, cgroup, &used);
    let facts = json!({
        "env": env.name,
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": outcome.timed_out,
        "cancelled": outcome.cancelled,
        "stdout_dropped_bytes": outcome.stdout.dropped(),
        "stderr_dropped_bytes": outcome.stderr.dropped(),
        "duration_ms": u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        "store_path": env.store_path,
        "nixpkgs_rev": env.nixpkgs_rev,
        "cpu_ms": used.cpu.map(|c| u64::try_from(c.as_millis()).unwrap_or(u64::MAX)),
        "peak_memory_bytes": used.peak_memory,
        "limit": hit.as_ref().map(|h| json!({"name": h.limit, "certain": h.certain})),
    });
    let text = render(env, outcome, signal, hit.as_ref(), &used);
    let result = if outcome.succeeded() {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    };
    with_facts(result, facts)
}

/// The result of a call refused before anything ran.
pub fn refused(error: &RunError) -> CallToolResult {
    let result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
    with_facts(
        result,
        json!({"error": {"code": error.code.as_str(), "message": error.message}}),
    )
}

fn render(env: &Env, o: &Outcome, signal: Option<i32>, hit: Option<&Hit>, used: &Used) -> String {
    let text = streams(o.stdout.render(), &o.stderr.render());
    let mut notes: Vec<String> = cut_notes(o.stdout.dropped(), o.stderr.dropped()).collect();
    if o.timed_out {
        notes.push(format!(
            "timed out after {} s; the process tree was killed",
            env.limits.timeout_s
        ));
    } else if o.cancelled {
        notes.push("cancelled".into());
    } else {
        match (o.exit, signal) {
            (_, Some(n)) => notes.push(format!("killed by signal {n}")),
            (Exit::Code(0), None) => {}
            (Exit::Code(code), None) => notes.push(format!("exit code {code}")),
            (_, None) => notes.push("ended without an exit status".into()),
        }
    }
    if let Some(hit) = hit {
        notes.push(hit.sentence.clone());
    }
    let killed = signal.is_some() && !o.timed_out && !o.cancelled;
    if hit.is_some() || killed {
        notes.extend(used.sentence());
    }
    with_notes(text, notes)
}

/// `stdout`, then a line `--- stderr ---` and `stderr` when there is any
/// (session calls too: session_result.rs).
pub fn streams(mut text: String, stderr: &str) -> String {
    if !stderr.is_empty() {
        end_line(&mut text);
        text.push_str("--- stderr ---\n");
        text.push_str(stderr);
    }
    text
}

/// `STREAM cut: N bytes dropped from the middle` for each stream that was cut.
pub fn cut_notes(stdout_dropped: u64, stderr_dropped: u64) -> impl Iterator<Item = String> {
    [("stdout", stdout_dropped), ("stderr", stderr_dropped)]
        .into_iter()
        .filter(|&(_, dropped)| dropped > 0)
        .map(|(stream, dropped)| format!("{stream} cut: {dropped} bytes dropped from the middle"))
}

/// `text` with one note a line after it, or `(no output)` when there is
/// neither. A run without notes succeeded; when its whole output is one
/// JSON value other than an object (`42`, `[1, 2]`, `"a"`, `null`), it gets
/// the note `exit code 0`: Gemini CLI parses the first text block of a
/// result without `structuredContent` as JSON and, when that gives anything
/// but an object, fails the whole call ("expected record"), so the model
/// would see an error instead of `42`. An object passes there (as the same
/// data), so JSON that programs print for programs stays as it is.
pub fn with_notes(mut text: String, mut notes: Vec<String>) -> String {
    if text.is_empty() && notes.is_empty() {
        return "(no output)".into();
    }
    if notes.is_empty() && serde_json::from_str::<Value>(&text).is_ok_and(|v| !v.is_object()) {
        notes.push("exit code 0".into());
    }
    for note in notes {
        end_line(&mut text);
        text.push_str(&note);
    }
    text
}

fn end_line(text: &mut String) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::RunError;
    use proto::cap::Cap;
    use std::time::Duration;

    fn env() -> Env {
        let manifest = serde_json::json!({
            "description": "d", "interpreter": "python", "run": ["/nix/store/x-a/bin/a"],
            "session": [], "network": false, "packages": [], "store_path": "/nix/store/x-a",
            "limits": {"timeout_s": 30, "memory_mb": 1, "pids": 1, "output_bytes": 8,
                       "workspace_mb": 1, "tmp_mb": 1, "cpu_s": 1, "file_mb": 1, "nofile": 1}
        });
        let mut env: Env = serde_json::from_value(manifest).unwrap();
        env.name = "python".into();
        env
    }

    fn outcome(exit: Exit, out: &[u8], err: &[u8]) -> Outcome {
        let mut stdout = Cap::new(8);
        stdout.push(out);
        let mut stderr = Cap::new(8);
        stderr.push(err);
        Outcome {
            exit,
            timed_out: false,
            cancelled: false,
            stdout,
            stderr,
            duration: Duration::from_millis(12),
        }
    }

    fn ran_(o: &Outcome) -> CallToolResult {
        ran(&env(), o, None)
    }

    fn text(r: &CallToolResult) -> &str {
        &r.content[0].as_text().unwrap().text
    }

    #[test]
    fn success_is_stdout_and_not_an_error() {
        let r = ran_(&outcome(Exit::Code(0), b"one\n", b""));
        assert_eq!(text(&r), "one\n");
        assert_eq!(r.is_error, Some(false));
        // Clients show structuredContent in place of the text: none.
        assert!(r.structured_content.is_none());
        let s = facts(&r);
        assert_eq!(s["exit_code"], 0);
        assert_eq!(s["signal"], serde_json::Value::Null);
        assert_eq!(s["duration_ms"], 12);
        assert_eq!(s["store_path"], "/nix/store/x-a");
    }

    #[test]
    fn output_that_is_one_json_value_is_followed_by_its_exit_code() {
        for out in [&b"42\n"[..], b"[1, 2]", b"null", b"\"a\"\n", b"true"] {
            let r = ran_(&outcome(Exit::Code(0), out, b""));
            let want = format!("{}\nexit code 0", String::from_utf8_lossy(out).trim_end());
            assert_eq!(text(&r), want);
            assert_eq!(r.is_error, Some(false));
        }
        // Anything else is left as it is.
        for out in [&b"42 43\n"[..], b"4\n2\n", b"hello", b"{\"a\":1}"] {
            let r = ran_(&outcome(Exit::Code(0), out, b""));
            assert_eq!(text(&r).as_bytes(), out);
        }
    }

    #[test]
    fn silence_says_no_output() {
        let r = ran_(&outcome(Exit::Code(0), b"", b""));
        assert_eq!(text(&r), "(no output)");
    }

    #[test]
    fn stderr_and_exit_code_are_labelled() {
        let r = ran_(&outcome(Exit::Code(3), b"a", b"b\n"));
        assert_eq!(text(&r), "a\n--- stderr ---\nb\nexit code 3");
        assert_eq!(r.is_error, Some(true));
    }

    #[test]
    fn exit_128_plus_n_is_a_signal() {
        let r = ran_(&outcome(Exit::Code(137), b"", b""));
        assert_eq!(text(&r), "killed by signal 9");
        let s = facts(&r);
        assert_eq!(
            (s["exit_code"].as_i64(), s["signal"].as_i64()),
            (Some(137), Some(9))
        );
    }

    #[test]
    fn cuts_and_timeouts_are_said_plainly() {
        let mut o = outcome(Exit::Signal(9), b"0123456789abcdefghij", b"");
        o.timed_out = true;
        let r = ran_(&o);
        assert_eq!(
            text(&r),
            "0123\n[... 12 bytes dropped ...]\nghij\n\
             stdout cut: 12 bytes dropped from the middle\n\
             timed out after 30 s; the process tree was killed"
        );
        let s = facts(&r);
        assert_eq!(s["timed_out"], true);
        assert_eq!(s["stdout_dropped_bytes"], 12);
        assert_eq!(s["exit_code"], serde_json::Value::Null);
    }

    #[test]
    fn refusals_carry_code_and_message() {
        let r = refused(&RunError::empty_code());
        assert_eq!(r.is_error, Some(true));
        assert!(text(&r).starts_with("error[empty_code]: "));
        assert_eq!(facts(&r)["error"]["code"], "empty_code");
    }
}
