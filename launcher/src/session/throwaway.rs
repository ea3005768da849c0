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
//! at the deadline; stopped past the flood bound), which report/run.rs
//! takes back as a run's outcome and tells as it tells a run of the run
//! wrapper, with the outputs besides.

use std::sync::Arc;
use std::time::Instant;

use proto::files::Upload;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::call::{self, Call, CallOutcome};
use super::jail::Jail;
use super::outputs::Destination;
use super::outputs::mirror::Mirror;
use super::warm::{Pool, Took};
use crate::catalog::Env;
use crate::live::Tail;
use crate::wrapper::cgroup::Stats;
use crate::wrapper::{NotStarted, Spawner};

/// What a throwaway run needs besides the call.
pub struct Context<'a> {
    pub spawner: &'a Spawner,
    pub pool: &'a Pool,
    pub mirror: Option<&'a Mirror>,
    pub cancel: &'a CancellationToken,
    /// Where the run's output goes as it comes, when its client watches
    /// (call.rs).
    pub tail: Option<&'a Tail>,
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
        Took::Cold => (start(env, cx)?, false),
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

/// A session jail of `env` started for one run (none was warm); when it
/// cannot start, the pool refills all the same.
pub fn start(env: &Arc<Env>, cx: &Context<'_>) -> Result<Jail, Error> {
    Jail::spawn(env, cx.spawner, "run", false).map_err(|cause| {
        tracing::error!(env = %env.name, error = %cause, "cannot start a session jail for a run");
        cx.pool.refill_after_run(env);
        Error::from(NotStarted::session(env, cause))
    })
}

/// A `once` call's end, for report/run.rs to tell as a run's.
pub struct Once {
    pub outcome: CallOutcome,
    /// The cap each stream had (the flood bound is 1024 times it).
    pub output_bytes: usize,
    /// What the jail's cgroup counted, when it had one.
    pub usage: Option<Stats>,
}

/// A plain run of `code` in `jail`, a jail of `env` of its own (a warm
/// one, or one started for it): its interpreter's only call (`once`),
/// then the jail is killed and the pool refilled.
pub async fn once(
    mut jail: Jail,
    env: &Arc<Env>,
    code: &str,
    cx: &Context<'_>,
) -> Result<Once, Error> {
    let started = Instant::now();
    let mut call = Call::new(env, code, &[], cx.cancel, &cx.spawner.shutdown);
    call.once = true;
    call.tail = cx.tail;
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
    outcome.duration = started.elapsed();
    Ok(Once {
        outcome,
        output_bytes,
        usage,
    })
}

/// The call in `jail`, settled.
async fn in_jail(
    jail: &mut Jail,
    env: &Env,
    code: &str,
    files: &[Upload],
    cx: &Context<'_>,
) -> Result<CallOutcome, Error> {
    let mut call = Call::new(env, code, files, cx.cancel, &cx.spawner.shutdown);
    call.tail = cx.tail;
    let ended = call::make(jail, call).await;
    let to = Destination {
        session: None,
        mirror: cx.mirror.map(|m| (m, m.run_dir())),
    };
    let mut outcome = CallOutcome::new(String::new(), true);
    call::settle(ended, jail, env, &to, &mut outcome).await?;
    Ok(outcome)
}
