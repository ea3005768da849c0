//! A run without a `session` in a session jail used for one call, then
//! killed: a run given `files`, and, while the warm pool is on, a plain
//! run that a warm jail is ready for (warm.rs). The run wrapper's
//! /workspace is a tmpfs that dies with it, out of the launcher's reach
//! (contract 3), so files in and outputs out need the agent. The jail is a
//! warm one when the pool has one ready, else one started for the call; a
//! replacement starts once the call is over.
//!
//! The call goes like a session's (call.rs): one deadline, an interrupt at
//! the deadline, the same settling; then the jail is killed whatever
//! happened. Images come back as in a session; other outputs are listed but
//! not readable afterwards (the jail is gone), except in the mirror.
//!
//! A plain run in a warm jail ([`once`]) is the interpreter's only call,
//! run as the run wrapper runs a script (the agent's `once`: no value shown,
//! the script's own name, the interpreter's exit; killed, not interrupted,
//! at the deadline; stopped past the flood bound), and taken back as a
//! [`RunOutcome`], so that report/run.rs tells it as it tells a run of the
//! run wrapper, with the outputs besides.

use std::sync::Arc;
use std::time::Instant;

use proto::files::Upload;
use tokio_util::sync::CancellationToken;

use proto::cap::Cap;
use proto::frame::{Exit, Stream};

use super::Error;
use super::call::{self, Call, CallOutcome};
use super::jail::Jail;
use super::outputs::mirror::Mirror;
use super::outputs::{Collected, Destination};
use super::warm::{Pool, Took};
use crate::catalog::Env;
use crate::run::{FLOOD_FACTOR, Flood, RunOutcome};
use crate::wrapper::cgroup::Stats;
use crate::wrapper::{NotStarted, Spawner};

/// What a throwaway run needs besides the call.
pub struct Context<'a> {
    pub spawner: &'a Spawner,
    pub pool: &'a Pool,
    pub mirror: Option<&'a Mirror>,
    pub cancel: &'a CancellationToken,
}

/// Runs `code` with `files` in a session jail of `env` of its own (a warm
/// one when ready), then kills it and refills the pool.
pub async fn call(
    env: &Arc<Env>,
    code: &str,
    files: &[Upload],
    cx: &Context<'_>,
) -> Result<CallOutcome, Error> {
    in_taken(cx.pool.take(env), env, code, files, cx).await
}

/// [`call`] in what the pool gave: a warm jail, else one started now.
pub async fn in_taken(
    took: Took,
    env: &Arc<Env>,
    code: &str,
    files: &[Upload],
    cx: &Context<'_>,
) -> Result<CallOutcome, Error> {
    let started = Instant::now();
    let (mut jail, warm) = match took {
        Took::Warm(jail) => (*jail, true),
        Took::Cold => {
            let jail = Jail::spawn(env, cx.spawner, "run", false);
            let jail = jail.map_err(|cause| {
                tracing::error!(env = %env.name, error = %cause, "cannot start a session jail for a run");
                cx.pool.refill_after_run(env);
                Error::from(NotStarted::session(env, cause))
            })?;
            (jail, false)
        }
    };
    let outcome = in_jail(&mut jail, env, code, files, cx).await;
    jail.kill();
    drop(jail);
    cx.pool.refill_after_run(env);
    let mut outcome = outcome?;
    outcome.warm = warm;
    outcome.duration = started.elapsed();
    Ok(outcome)
}

/// A plain run of `code` in `jail`, a warm jail of `env`: its
/// interpreter's only call (`once`), then the jail is killed and the pool
/// refilled. What the run did, as a run of the run wrapper, and the
/// outputs it wrote.
pub async fn once(
    mut jail: Jail,
    env: &Arc<Env>,
    code: &str,
    cx: &Context<'_>,
) -> Result<(RunOutcome, Collected), Error> {
    let started = Instant::now();
    let mut call = Call::new(env, code, &[], cx.cancel, &cx.spawner.shutdown);
    call.once = true;
    let output_bytes = call.output_bytes;
    let ended = call::make(&mut jail, call).await;
    let to = Destination {
        session: None,
        mirror: cx.mirror.map(|m| (m, m.run_dir())),
    };
    let mut outcome = CallOutcome::new(String::new(), true);
    let settled = call::settle(ended, &mut jail, env, &to, &mut outcome).await;
    // Its interpreter has exited: what the jail's cgroup counted is the
    // run's (its agent's few MiB and milliseconds included).
    let usage = jail.stats();
    jail.kill();
    drop(jail);
    cx.pool.refill_after_run(env);
    settled?;
    let run = as_run(&mut outcome, output_bytes, usage, started.elapsed());
    Ok((run, outcome.outputs))
}

/// A `once` call's outcome as a run's: the interpreter's exit is the run's
/// (the agent's status when it did not say one), and a call that ended
/// without an answer (the agent stopped answering) ended without an exit
/// status.
fn as_run(
    o: &mut CallOutcome,
    output_bytes: usize,
    usage: Option<Stats>,
    duration: std::time::Duration,
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
        duration,
        usage,
        refusals: std::mem::take(&mut o.refusals),
    }
}

/// The call in `jail`, settled.
async fn in_jail(
    jail: &mut Jail,
    env: &Env,
    code: &str,
    files: &[Upload],
    cx: &Context<'_>,
) -> Result<CallOutcome, Error> {
    let ended = call::make(
        jail,
        Call::new(env, code, files, cx.cancel, &cx.spawner.shutdown),
    )
    .await;
    let to = Destination {
        session: None,
        mirror: cx.mirror.map(|m| (m, m.run_dir())),
    };
    let mut outcome = CallOutcome::new(String::new(), true);
    call::settle(ended, jail, env, &to, &mut outcome).await?;
    Ok(outcome)
}
