//! A run with `files` but no `session` (issue 7): a session jail used for one
//! call, then killed. The run wrapper's /workspace is a tmpfs that dies with
//! it, out of the launcher's reach (contract 3), so files in and outputs out
//! need the agent; plain runs keep the run wrapper, which starts faster
//! (a throwaway session of `print(1)` measured about 1.2x the run wrapper).
//!
//! The call goes like a session call (session_call.rs): one deadline, an
//! interrupt at the deadline, the jail killed after it whatever happened.
//! Images come back as in a session; other outputs are listed but not
//! readable afterwards (the jail is gone), except in the mirror.

use std::time::Instant;

use proto::frame::FileIn;
use tokio_util::sync::CancellationToken;

use crate::catalog::Env;
use crate::errors::RunError;
use crate::mirror::Mirror;
use crate::outputs::{self, Destination};
use crate::session::{Outcome, reset_sentence};
use crate::session_call::{self, Call, Ended};
use crate::session_jail::Jail;
use crate::wrapper::WrapperEnv;
use crate::wrapper::host::Host;

/// What a throwaway run needs besides the call.
pub struct Context<'a> {
    pub wrapper_env: &'a WrapperEnv,
    pub host: &'a Host,
    pub mirror: Option<&'a Mirror>,
    pub cancel: &'a CancellationToken,
    pub shutdown: &'a CancellationToken,
}

/// Runs `code` with `files` in a fresh session jail of `env`, then kills it.
pub async fn run(
    env: &Env,
    code: &str,
    files: &[FileIn],
    cx: &Context<'_>,
) -> Result<Outcome, RunError> {
    let started = Instant::now();
    let mut jail = Jail::spawn(&env.session, cx.wrapper_env, cx.host, "run").map_err(|e| {
        tracing::error!(env = %env.name, error = %e, "cannot start a session jail for a run");
        RunError::not_started(&env.name, &env.session[0], &e)
    })?;
    let call = Call::new(env, code, files, cx.cancel, cx.shutdown);
    let mut outcome = Outcome::new(String::new(), true);
    match session_call::exec(&mut jail, call).await {
        Ended::Answered {
            reply,
            timed_out,
            cancelled,
        } => {
            let to = Destination {
                session: None,
                mirror: cx.mirror.map(|m| (m, m.run_dir())),
            };
            outcome.outputs =
                outputs::collect(&mut jail, &reply.outputs, reply.outputs_more, &to).await;
            tracing::info!(
                env = %env.name, status = reply.status, interrupted = reply.interrupted,
                exit = ?reply.exit, ms = reply.duration_ms, "run with files finished"
            );
            outcome.reply = Some(reply);
            outcome.timed_out = timed_out;
            outcome.cancelled = cancelled;
        }
        Ended::Refused { message } => {
            return Err(RunError::sandbox_unavailable(&env.name, &message));
        }
        Ended::FilesRefused { message } => return Err(RunError::files_refused(&message)),
        Ended::Reset {
            why,
            timed_out,
            cancelled,
        } => {
            tracing::warn!(env = %env.name, ?why, log = %jail.log_tail(), "run with files killed");
            outcome.reset = Some(reset_sentence(&why, env, timed_out, cancelled));
            outcome.timed_out = timed_out;
            outcome.cancelled = cancelled;
        }
        Ended::Shutdown => outcome.shutdown = true,
    }
    jail.kill();
    outcome.duration = started.elapsed();
    Ok(outcome)
}
