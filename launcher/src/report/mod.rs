//! Everything that turns an outcome into what the model reads: the `run`
//! tool's result for a run (run.rs), a session call (call.rs) or a refusal
//! ([`refused`]), with the limit a run hit (limit.rs) and the outputs a call
//! wrote (outputs.rs, from session/outputs/).
//!
//! # Result format (the decision the README documents)
//!
//! `content[0]` is one text block for the model: stdout as it was written;
//! then, when stderr is not empty, a line `--- stderr ---` and stderr; then
//! one short sentence per event worth knowing (an exit code, a timeout, a
//! cut, a limit hit, a session reset...); `(no output)` when there is none
//! of these. run.rs and call.rs list their sentences.
//!
//! The same facts for programs go in the result's `_meta`, under
//! [`FACTS_KEY`], and not in `structuredContent`: clients such as Claude
//! Code, Codex, pydantic-ai and openai-agents show the model
//! `structuredContent` instead of the content blocks when it is present,
//! which would hide the output; no client shows `_meta` to the model. The
//! facts are typed, each field documented where it is declared:
//! [`run::RunFacts`], [`call::CallFacts`] (both with a [`Receipt`] and
//! [`Cuts`]), [`RefusalFacts`]. No
//! `outputSchema` is declared, to keep `tools/list` small.
//!
//! `isError` is true when the code did not succeed (non-zero exit, killed by
//! a signal, timed out, cancelled) or the launcher refused the call; it is
//! false exactly when the code ran and exited 0.

pub mod call;
pub mod limit;
pub mod outputs;
pub mod refusal;
pub mod run;

use std::num::NonZeroU64;

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde::Serialize;
use serde_json::Value;

use crate::catalog::Env;
use refusal::Refusal;

/// The `_meta` key of a result's machine-readable facts.
pub const FACTS_KEY: &str = "nix-sandbox-mcp/result";

/// `result` with `facts` in its `_meta` (never in `structuredContent`,
/// which clients would show the model in place of the output).
fn with_facts(mut result: CallToolResult, facts: &impl Serialize) -> CallToolResult {
    // The facts are structs of strings, numbers and booleans, which always
    // serialize; were one not to, the result would still carry the output.
    let facts = serde_json::to_value(facts).unwrap_or_else(|error| {
        tracing::error!(%error, "a result's facts did not serialize");
        Value::Null
    });
    let mut meta = MetaObject::default();
    meta.0.insert(FACTS_KEY.to_owned(), facts);
    result.meta = Some(meta);
    result
}

/// The facts of a result (tests).
#[cfg(test)]
pub fn facts(result: &CallToolResult) -> &Value {
    &result.meta.as_ref().expect("_meta").0[FACTS_KEY]
}

/// The keys of a result's facts, sorted (tests: the keys are the format
/// programs read, so renaming a field is a change of the format, never a
/// refactor).
#[cfg(test)]
pub fn fact_keys(result: &CallToolResult) -> Vec<&str> {
    let facts = facts(result).as_object().expect("the facts are an object");
    facts.keys().map(String::as_str).collect()
}

/// Which environment ran the code: the receipt, at the top level of a
/// run's facts and a call's.
#[derive(Debug, Serialize)]
pub struct Receipt<'a> {
    /// The environment's name.
    pub env: &'a str,
    /// With `nixpkgs_rev`: `nix run` of the store path runs the code again in
    /// the same environment.
    pub store_path: &'a str,
    /// The nixpkgs revision the environment was built from; null when
    /// unknown.
    pub nixpkgs_rev: Option<&'a str>,
}

impl<'a> Receipt<'a> {
    fn of(env: &'a Env) -> Self {
        Self {
            env: &env.name,
            store_path: &env.store_path,
            nixpkgs_rev: env.nixpkgs_rev.as_deref(),
        }
    }
}

/// What the output cap cut, at the top level of a run's facts and a
/// call's.
#[derive(Debug, Serialize)]
pub struct Cuts {
    /// Bytes cut from the middle of stdout.
    pub stdout_dropped_bytes: u64,
    /// Bytes cut from the middle of stderr.
    pub stderr_dropped_bytes: u64,
}

/// The facts of a call refused before anything ran.
#[derive(Serialize)]
pub struct RefusalFacts<'a> {
    pub error: RefusalFact<'a>,
}

#[derive(Serialize)]
pub struct RefusalFact<'a> {
    /// The machine-readable code (`unknown_env`, `session_busy`...).
    pub code: &'static str,
    /// The sentence the model reads, without the `error[code]: ` before it.
    pub message: &'a str,
}

/// The result of a call refused before anything ran: `isError`, the text
/// `error[code]: sentence`, and [`RefusalFacts`].
pub fn refused(refusal: &Refusal) -> CallToolResult {
    let result = CallToolResult::error(vec![ContentBlock::text(refusal.to_string())]);
    let facts = RefusalFacts {
        error: RefusalFact {
            code: refusal.code.as_str(),
            message: &refusal.message,
        },
    };
    with_facts(result, &facts)
}

/// `result` with the line that the timeout the call asked for, `asked`
/// seconds, was cut to the environment's ceiling, `to`.
pub fn with_timeout_cut(mut result: CallToolResult, asked: u64, to: NonZeroU64) -> CallToolResult {
    let line = format!("timeout_s {asked} cut to {to} s, the most this environment allows");
    match result.content.first_mut() {
        Some(ContentBlock::Text(text)) => {
            end_line(&mut text.text);
            text.text.push_str(&line);
        }
        _ => result.content.insert(0, ContentBlock::text(line)),
    }
    result
}

/// A success or an error result of `content`.
fn result(succeeded: bool, content: Vec<ContentBlock>) -> CallToolResult {
    if succeeded {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

/// `stdout`, then a line `--- stderr ---` and `stderr` when there is any.
fn streams(mut text: String, stderr: &str) -> String {
    if !stderr.is_empty() {
        end_line(&mut text);
        text.push_str("--- stderr ---\n");
        text.push_str(stderr);
    }
    text
}

/// `STREAM cut: N bytes dropped from the middle` for each stream that was cut.
fn cut_notes(stdout_dropped: u64, stderr_dropped: u64) -> impl Iterator<Item = String> {
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
fn with_notes(mut text: String, mut notes: Vec<String>) -> String {
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

/// Milliseconds of `d`, saturated.
fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_code_and_message() {
        let r = refused(&Refusal::empty_code());
        assert_eq!(r.is_error, Some(true));
        let text = &r.content[0].as_text().unwrap().text;
        assert!(text.starts_with("error[empty_code]: "));
        assert_eq!(facts(&r)["error"]["code"], "empty_code");
    }
}
