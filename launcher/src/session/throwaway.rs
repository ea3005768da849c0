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
