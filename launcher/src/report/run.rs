//! The result of a run (run.rs). After stdout and stderr, one short sentence
//! per abnormal event:
//!
//! - `exit code 3`, `killed by signal 9`, `timed out after 30 s; the process
//!   tree was killed`, `cancelled`, `stopped: stdout passed 64 MiB (1024
//!   times output_bytes, of which the head and tail above are kept); the
//!   process tree was killed`;
//! - `stdout cut: 123456 bytes dropped from the middle` (the cut itself is
//!   marked in place by `[... N bytes dropped ...]`);
//! - when a limit ended or broke the run, which one (`killed: memory limit
//!   1024 MiB`, `killed: CPU time limit 60 s`, `probably hit the memory limit
//!   (1024 MiB)` when told from the program's messages; limit.rs);
//! - when a limit was hit or the code was killed by a signal, what the run
//!   used, when the run had a cgroup: `used: CPU 1.20 s, memory 38 MiB`.
//!
//! A successful run that printed nothing says `(no output)`.
//!
//! A run an agent's jail served (session/throwaway.rs, [`ran_by_agent`]): a
//! warm one, or one started for code that names its outputs) reads the
//! same, then says the files it wrote under `/workspace/outputs` as a
//! session call does (report/outputs.rs), with the images after the text.

use proto::cap::Cap;
use proto::frame::{Exit, Stream};
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use super::limit::{self, Hit, Used};
use super::outputs::{self, OutputFact};
use super::{Cuts, Receipt};
use crate::catalog::Env;
use crate::run::{FLOOD_FACTOR, Flood, RunOutcome};
use crate::session::call::CallOutcome;
use crate::session::outputs::Collected;
use crate::session::throwaway::Once;

/// The facts of a run, in the result's `_meta` (report/mod.rs says why).
#[derive(Debug, Serialize)]
pub struct RunFacts<'a> {
    #[serde(flatten)]
    pub receipt: Receipt<'a>,
    /// The wrapper's exit code; null when it was killed by a signal (or
    /// ended without a status).
    pub exit_code: Option<i32>,
    /// The signal that ended the wrapper, or N when it exited with 128+N
    /// (how a wrapper reports that the code died of signal N).
    pub signal: Option<i32>,
    /// The deadline (`timeout_s`) killed it.
    pub timed_out: bool,
    /// The client cancelled the call, or went away, and it was killed.
    pub cancelled: bool,
    /// `stdout` or `stderr` when that stream passed 1024 times
    /// `output_bytes` and the run was killed; null otherwise.
    pub flooded: Option<&'static str>,
    #[serde(flatten)]
    pub cuts: Cuts,
    /// Wall time, from the wrapper's start to its end.
    pub duration_ms: u64,
    /// CPU time, from the run's cgroup; null without one.
    pub cpu_ms: Option<u64>,
    /// Peak memory, from the run's cgroup; null without one.
    pub peak_memory_bytes: Option<u64>,
    /// The limit that ended or broke the run, when one can be told.
    pub limit: Option<LimitFact>,
    /// The run was served by a warm jail, started before it
    /// (session/warm.rs); absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
    /// The files it wrote under /workspace/outputs (a run an agent's jail
    /// served); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputFact<'a>>,
}

#[derive(Debug, Serialize)]
pub struct LimitFact {
    /// `memory`, `cpu`, `file_size`, `processes`, `open_files` or `disk`.
    pub name: &'static str,
    /// False when told from the program's error messages (a heuristic).
    pub certain: bool,
}

/// The result of a run that happened.
pub fn ran(env: &Env, outcome: &RunOutcome) -> CallToolResult {
    told(env, outcome, None)
}

/// The result of a run an agent's jail served (`warm`: one started before
/// the run), with the outputs its agent read; `resource_links`: the client
/// takes `resource_link` content.
pub fn ran_by_agent(env: &Env, once: Once, resource_links: bool, warm: bool) -> CallToolResult {
    let Once {
        mut outcome,
        output_bytes,
        usage,
    } = once;
    let run = as_run(&mut outcome, output_bytes, usage);
    told(env, &run, Some((&outcome.outputs, resource_links, warm)))
}

/// A `once` call's outcome as a run's: the interpreter's exit is the run's
/// (the agent's status when it did not say one); a call that ended without
/// an answer (the agent stopped answering) ended without an exit status.
/// The code's death by signal N reads as the run wrapper reports it, exit
/// code 128+N (bubblewrap's, whose child it is); a kill of the launcher's
/// own (a timeout, a cancellation, a flood) is the wrapper's death by
/// SIGKILL there, and stays a signal.
fn as_run(
    o: &mut CallOutcome,
    output_bytes: usize,
    usage: Option<crate::wrapper::cgroup::Stats>,
) -> RunOutcome {
    let (exit, stdout, stderr, flooded) = match (&o.reply, &o.received) {
        (Some(r), _) => (
            Some(r.exit.unwrap_or(Exit::Code(r.status))),
            Cap::from_rendered(&r.stdout, r.stdout_dropped),
            Cap::from_rendered(&r.stderr, r.stderr_dropped),
            r.flooded,
        ),
        (None, Some(got)) => (
            None,
            Cap::from_rendered(&got.stdout, got.stdout_dropped),
            Cap::from_rendered(&got.stderr, got.stderr_dropped),
            None,
        ),
        (None, None) => (None, Cap::new(0), Cap::new(0), None),
    };
    let killed = o.timed_out || o.cancelled || o.shutdown || flooded.is_some();
    let exit = match exit {
        Some(Exit::Signal(n)) if !killed => Some(Exit::Code(128 + n)),
        exit => exit,
    };
    RunOutcome {
        exit,
        timed_out: o.timed_out,
        cancelled: o.cancelled || o.shutdown,
        flooded: flooded.map(|stream| Flood {
            stream: match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            },
            after_bytes: (output_bytes as u64).saturating_mul(FLOOD_FACTOR),
        }),
        stdout,
        stderr,
        duration: o.duration,
        usage,
        refusals: std::mem::take(&mut o.refusals),
    }
}

/// [`ran`], and with `by_agent`, [`ran_by_agent`].
fn told(
    env: &Env,
    outcome: &RunOutcome,
    by_agent: Option<(&Collected, bool, bool)>,
) -> CallToolResult {
    let signal = limit::signal(outcome.exit);
    let used = Used::of(outcome.usage.as_ref());
    let hit = limit::diagnose(env, outcome, &used);
    let facts = RunFacts {
        receipt: Receipt::of(env),
        exit_code: match outcome.exit {
            Some(Exit::Code(code)) => Some(code),
            _ => None,
        },
        signal,
        timed_out: outcome.timed_out,
        cancelled: outcome.cancelled,
        flooded: outcome.flooded.map(|f| f.stream),
        cuts: Cuts {
            stdout_dropped_bytes: outcome.stdout.dropped(),
            stderr_dropped_bytes: outcome.stderr.dropped(),
        },
        duration_ms: super::millis(outcome.duration),
        cpu_ms: used.cpu.map(super::millis),
        peak_memory_bytes: used.peak_memory,
        limit: hit.as_ref().map(|h| LimitFact {
            name: h.limit,
            certain: h.certain,
        }),
        warm: by_agent.is_some_and(|(_, _, warm)| warm),
        outputs: by_agent
            .map(|(o, _, _)| outputs::facts(o))
            .unwrap_or_default(),
    };
    let mut notes = Vec::new();
    let mut content = Vec::new();
    if let Some((collected, resource_links, _)) = by_agent {
        notes = outputs::lines(collected, true);
        content = outputs::blocks(collected, resource_links);
    }
    let text = render(env, outcome, signal, hit.as_ref(), &used, notes);
    content.insert(0, ContentBlock::text(text));
    // A run whose outputs could not all be read is told as failed, as a
    // session call's is.
    let broken = by_agent.is_some_and(|(o, _, _)| o.broken.is_some());
    let result = super::result(outcome.succeeded() && !broken, content);
    super::with_facts(result, &facts)
}

fn render(
    env: &Env,
    o: &RunOutcome,
    signal: Option<i32>,
    hit: Option<&Hit>,
    used: &Used,
    outputs: Vec<String>,
) -> String {
    let text = super::streams(o.stdout.render(), &o.stderr.render());
    let mut notes: Vec<String> = super::cut_notes(o.stdout.dropped(), o.stderr.dropped()).collect();
    if o.timed_out {
        notes.push(format!(
            "timed out after {} s; the process tree was killed",
            env.limits.timeout_s
        ));
    } else if o.cancelled {
        notes.push("cancelled".into());
    } else if let Some(flood) = o.flooded {
        notes.push(format!(
            "stopped: {} passed {} ({} times output_bytes, of which the head and tail above \
             are kept); the process tree was killed",
            flood.stream,
            size(flood.after_bytes),
            crate::run::FLOOD_FACTOR
        ));
    } else {
        match (o.exit, signal) {
            (_, Some(n)) => notes.push(format!("killed by signal {n}")),
            (Some(Exit::Code(0)), None) => {}
            (Some(Exit::Code(code)), None) => notes.push(format!("exit code {code}")),
            (_, None) => notes.push("ended without an exit status".into()),
        }
    }
    if let Some(hit) = hit {
        notes.push(hit.sentence.clone());
    }
    let killed = signal.is_some() && !o.timed_out && !o.cancelled && o.flooded.is_none();
    if hit.is_some() || killed {
        notes.extend(used.sentence());
    }
    notes.extend(o.refusals.iter().cloned());
    notes.extend(outputs);
    super::with_notes(text, notes)
}

/// `64 MiB` for whole MiB, else `N bytes`.
fn size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::facts;
    use proto::cap::Cap;
    use std::time::Duration;

    fn env() -> Env {
        crate::testing::env("python").build()
    }

    fn outcome(exit: Exit, out: &[u8], err: &[u8]) -> RunOutcome {
        let mut stdout = Cap::new(8);
        stdout.push(out);
        let mut stderr = Cap::new(8);
        stderr.push(err);
        RunOutcome {
            exit: Some(exit),
            timed_out: false,
            cancelled: false,
            flooded: None,
            stdout,
            stderr,
            duration: Duration::from_millis(12),
            usage: None,
            refusals: Vec::new(),
        }
    }

    fn ran_(o: &RunOutcome) -> CallToolResult {
        ran(&env(), o)
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
    fn the_facts_keep_their_keys() {
        let r = ran_(&outcome(Exit::Code(0), b"", b""));
        assert_eq!(
            crate::report::fact_keys(&r),
            [
                "cancelled",
                "cpu_ms",
                "duration_ms",
                "env",
                "exit_code",
                "flooded",
                "limit",
                "nixpkgs_rev",
                "peak_memory_bytes",
                "signal",
                "stderr_dropped_bytes",
                "stdout_dropped_bytes",
                "store_path",
                "timed_out",
            ]
        );
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
    fn a_stopped_flood_is_said_and_is_no_limit_or_plain_signal() {
        let mut o = outcome(Exit::Signal(9), b"0123456789abcdefghij", b"");
        o.flooded = Some(crate::run::Flood {
            stream: "stdout",
            after_bytes: 64 << 20,
        });
        let r = ran_(&o);
        assert_eq!(
            text(&r),
            "0123\n[... 12 bytes dropped ...]\nghij\n\
             stdout cut: 12 bytes dropped from the middle\n\
             stopped: stdout passed 64 MiB (1024 times output_bytes, of which the head and tail \
             above are kept); the process tree was killed"
        );
        assert_eq!(r.is_error, Some(true));
        let s = facts(&r);
        assert_eq!(s["flooded"], "stdout");
        assert_eq!(s["timed_out"], false);
        assert_eq!(s["limit"], serde_json::Value::Null);
    }
}
