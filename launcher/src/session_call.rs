//! One `run` call in a session jail: the `exec` request, then its reply,
//! under one deadline.
//!
//! - At the deadline (or when the client cancels the call) the agent is
//!   asked to interrupt the code (SIGINT to the interpreter's group, state
//!   kept). If the reply does not follow within [`INTERRUPT_GRACE`], the code
//!   ignores interrupts: the call ends with [`Ended::Reset`] and the caller
//!   kills the jail.
//! - Anything else unexpected from the agent (its output closed, a bad frame,
//!   a reply to no request, a write that does not go through in time) also
//!   ends with [`Ended::Reset`].
//! - Server shutdown ends the call at once.
//!
//! Every wait here is bounded: by the deadline, the grace after it, or the
//! shutdown.

use std::time::Duration;

use proto::frame::{ErrorCode, ExecReply, FileIn, MAX_OUTPUT_BYTES, Reply, Request};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::catalog::Env;
use crate::session_jail::{Broken, Jail};

/// How long interrupted code has to stop before the session is reset.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);
/// How long writing a request may take once the deadline has passed (an
/// agent that does not read its stdin is stuck).
pub const WRITE_GRACE: Duration = Duration::from_secs(1);

/// Why a call ended the way it did.
#[derive(Debug)]
pub enum Ended {
    /// The agent answered. `timed_out` / `cancelled`: an interrupt was asked
    /// for (the reply's `interrupted` says whether one reached the code).
    Answered {
        reply: ExecReply,
        timed_out: bool,
        cancelled: bool,
    },
    /// The agent refused the call (its interpreter cannot start).
    Refused { message: String },
    /// The agent could not write a file passed in; nothing ran.
    FilesRefused { message: String },
    /// The jail must be killed and the session started afresh.
    Reset {
        why: ResetReason,
        timed_out: bool,
        cancelled: bool,
    },
    /// The server is stopping.
    Shutdown,
}

/// Why a session is reset.
#[derive(Debug)]
pub enum ResetReason {
    /// The code went on after the interrupt and the grace.
    IgnoredInterrupt,
    /// The agent could not be talked to.
    Broken(Broken),
    /// The agent did not take the request before the deadline.
    Stuck,
}

/// What the call is to do.
pub struct Call<'a> {
    pub code: &'a str,
    /// Files written into /workspace before the code runs.
    pub files: &'a [FileIn],
    pub output_bytes: usize,
    pub timeout: Duration,
    /// The client cancelled this call.
    pub cancel: &'a CancellationToken,
    /// The server is stopping.
    pub shutdown: &'a CancellationToken,
}

impl<'a> Call<'a> {
    /// `code` with `files` under `env`'s output cap (at most
    /// [`MAX_OUTPUT_BYTES`]) and timeout.
    pub fn new(
        env: &Env,
        code: &'a str,
        files: &'a [FileIn],
        cancel: &'a CancellationToken,
        shutdown: &'a CancellationToken,
    ) -> Self {
        Call {
            code,
            files,
            output_bytes: usize::try_from(env.limits.output_bytes.get())
                .unwrap_or(usize::MAX)
                .min(MAX_OUTPUT_BYTES),
            timeout: Duration::from_secs(env.limits.timeout_s.get()),
            cancel,
            shutdown,
        }
    }
}

/// Runs `call` in `jail`.
pub async fn exec(jail: &mut Jail, call: Call<'_>) -> Ended {
    let deadline = Instant::now() + call.timeout;
    let id = jail.fresh_id();
    let request = Request::Exec {
        id,
        code: call.code.to_owned(),
        output_bytes: call.output_bytes,
        files: call.files.to_vec(),
    };
    let (mut timed_out, mut cancelled) = (false, false);
    let reset = |why, timed_out, cancelled| Ended::Reset {
        why,
        timed_out,
        cancelled,
    };
    tokio::select! {
        biased;
        () = call.shutdown.cancelled() => return Ended::Shutdown,
        sent = jail.request(&request) => {
            if let Err(e) = sent {
                return reset(ResetReason::Broken(e), false, false);
            }
        }
        () = tokio::time::sleep_until(deadline + WRITE_GRACE) => {
            return reset(ResetReason::Stuck, true, false);
        }
    }
    drop(request);
    // The interrupt asked for (its id) and when to give up on the reply.
    let mut interrupt: Option<(u64, Instant)> = None;
    loop {
        let wake = interrupt.map_or(deadline, |(_, give_up)| give_up);
        let why = tokio::select! {
            biased;
            () = call.shutdown.cancelled() => return Ended::Shutdown,
            reply = jail.next_reply() => match reply {
                Ok(Reply::Exec(reply)) if reply.id == id => {
                    return Ended::Answered { reply, timed_out, cancelled };
                }
                Ok(Reply::Ack { id: ack, .. }) if interrupt.is_some_and(|(i, _)| i == ack) => continue,
                Ok(Reply::Error { id: Some(err), code: ErrorCode::SpawnFailed, message }) if err == id => {
                    return Ended::Refused { message };
                }
                Ok(Reply::Error { id: Some(err), code: ErrorCode::BadFile, message }) if err == id => {
                    return Ended::FilesRefused { message };
                }
                Ok(other) => ResetReason::Broken(Broken::Unexpected(format!("{other:?}"))),
                Err(e) => ResetReason::Broken(e),
            },
            () = tokio::time::sleep_until(wake) => {
                if interrupt.is_some() {
                    ResetReason::IgnoredInterrupt
                } else {
                    timed_out = true;
                    match ask_interrupt(jail).await {
                        Ok(asked) => {
                            interrupt = Some(asked);
                            continue;
                        }
                        Err(why) => why,
                    }
                }
            }
            () = call.cancel.cancelled(), if !cancelled && interrupt.is_none() => {
                cancelled = true;
                match ask_interrupt(jail).await {
                    Ok(asked) => {
                        interrupt = Some(asked);
                        continue;
                    }
                    Err(why) => why,
                }
            }
        };
        return reset(why, timed_out, cancelled);
    }
}

/// Sends an interrupt; its id and when to give up waiting for the reply.
async fn ask_interrupt(jail: &mut Jail) -> Result<(u64, Instant), ResetReason> {
    let id = jail.fresh_id();
    match tokio::time::timeout(WRITE_GRACE, jail.request(&Request::Interrupt { id })).await {
        Ok(Ok(())) => Ok((id, Instant::now() + INTERRUPT_GRACE)),
        Ok(Err(e)) => Err(ResetReason::Broken(e)),
        Err(_) => Err(ResetReason::Stuck),
    }
}
