//! A run with `files` but no `session`: a session jail used for one call,
//! then killed. The run wrapper's /workspace is a tmpfs that dies with it,
//! out of the launcher's reach (contract 3), so files in and outputs out
//! need the agent; plain runs keep the run wrapper, which starts faster
//! (a throwaway session of `print(1)` measured about 1.2x the run wrapper).
//!
//! The call goes like a session's (call.rs): one deadline, an interrupt at
//! the deadline, the same settling; then the jail is killed whatever
//! happened. Images come back as in a session; other outputs are listed but
//! not readable afterwards (the jail is gone), except in the mirror.

use std::time::Instant;

use proto::files::Upload;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::call::{self, Call, CallOutcome};
use super::jail::Jail;
use super::outputs::Destination;
use super::outputs::mirror::Mirror;
use crate::catalog::Env;
use crate::wrapper::{NotStarted, Spawner};

/// What a throwaway run needs besides the call.
pub struct Context<'a> {
    pub spawner: &'a Spawner,
    pub mirror: Option<&'a Mirror>,
    pub cancel: &'a CancellationToken,
}

/// Runs `code` with `files` in a fresh session jail of `env`, then kills it.
pub async fn call(
    env: &Env,
    code: &str,
    files: &[Upload],
    cx: &Context<'_>,
) -> Result<CallOutcome, Error> {
    let started = Instant::now();
    let mut jail = Jail::spawn(env, cx.spawner, "run", false).map_err(|cause| {
        tracing::error!(env = %env.name, error = %cause, "cannot start a session jail for a run");
        Error::from(NotStarted::session(env, cause))
    })?;
    let ended = call::make(
        &mut jail,
        Call::new(env, code, files, cx.cancel, &cx.spawner.shutdown),
    )
    .await;
    let to = Destination {
        session: None,
        mirror: cx.mirror.map(|m| (m, m.run_dir())),
    };
    let mut outcome = CallOutcome::new(String::new(), true);
    call::settle(ended, &mut jail, env, &to, &mut outcome).await?;
    jail.kill();
    outcome.duration = started.elapsed();
    Ok(outcome)
}
