//! One call in a session jail: the `exec` request, then its reply, under
//! one deadline ([`make`]); then what became of it ([`settle`]), the same
//! for a session's call and a throwaway run's.
//!
//! - At the deadline (or when the client cancels the call) the agent is
//!   asked to interrupt the code (SIGINT to the interpreter's group, state
//!   kept). If the reply does not follow within [`INTERRUPT_GRACE`], the code
//!   ignores interrupts: the call ends with [`Ended::Reset`] and the caller
//!   kills the jail.
//! - Anything else unexpected from the agent (its output closed, a bad frame,
//!   a reply to no request, a reply an honest agent cannot send (verify.rs),
//!   a write that does not go through in time) also ends with
//!   [`Ended::Reset`]; of an exec reply that broke the protocol only the
//!   output is kept, cut to the cap by the launcher.
//! - A call with a [`Tail`] (its client asked for progress) asks the agent
//!   for its output live: the agent's `output` frames for the call, held to
//!   their bounds (verify.rs, `LiveBudget`), go to the tail, which keeps
//!   2 KiB; a frame past them resets the session like any bad reply.
//! - Server shutdown ends the call at once.
//! - A call that ended with a reply has its outputs collected (outputs/);
//!   one whose jail had to be killed says why the session was reset.
//!
//! Every wait here is bounded: by the deadline, the grace after it, or the
//! shutdown.

use std::time::Duration;

use proto::files::Upload;
use proto::frame::{
    self, ErrorCode, ExecReply, FileIn, MAX_OUTPUT_BYTES, PUT_CHUNK_BYTES, Reply, Request,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::jail::{Broken, Jail};
use super::outputs::{self, Collected, Destination};
use super::verify::{self, LiveBudget, Streams};
use crate::catalog::Env;
use crate::live::Tail;

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
    /// The agent could not write a file passed in, or one is there and
    /// the call did not say `replace` (`exists`); nothing ran, none of the
    /// call's files was written.
    FilesRefused { message: String, exists: bool },
    /// The jail must be killed and the session started afresh.
    Reset {
        why: ResetReason,
        timed_out: bool,
        cancelled: bool,
        /// The output of an exec reply that broke the protocol, bounded.
        output: Option<Streams>,
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
    pub files: &'a [Upload],
    pub output_bytes: usize,
    pub timeout: Duration,
    /// The client cancelled this call.
    pub cancel: &'a CancellationToken,
    /// The server is stopping.
    pub shutdown: &'a CancellationToken,
    /// The jail's only call, run as the run wrapper runs a script (the
    /// agent's `once`): at the deadline its interpreter is killed, not
    /// interrupted.
    pub once: bool,
    /// Where the output goes as it comes (the agent's live frames), when
    /// the client watches the call.
    pub tail: Option<&'a Tail>,
}

impl<'a> Call<'a> {
    /// `code` with `files` under `env`'s output cap (at most
    /// [`MAX_OUTPUT_BYTES`]) and timeout.
    pub fn new(
        env: &Env,
        code: &'a str,
        files: &'a [Upload],
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
            once: false,
            tail: None,
        }
    }
}

impl Call<'_> {
    /// The `exec` request of this call, numbered `id`: live when its
    /// client watches it.
    fn request(&self, id: u64) -> Request {
        Request::Exec {
            id,
            code: self.code.to_owned(),
            output_bytes: self.output_bytes,
            files: (self.files.iter())
                .map(|f| FileIn {
                    path: f.path.clone(),
                    replace: f.replace,
                })
                .collect(),
            once: self.once,
            live: self.tail.is_some(),
        }
    }
}

/// What a session call did, for [`crate::report::call::called`].
#[derive(Debug)]
pub struct CallOutcome {
    pub session: String,
    /// The agent's answer (none when the session was reset before one came,
    /// or the answer broke the protocol: verify.rs).
    pub reply: Option<ExecReply>,
    /// The output of an answer that broke the protocol, cut to the cap by
    /// the launcher (its claims are not reported).
    pub received: Option<Streams>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Why the session was reset during the call.
    pub reset: Option<String>,
    /// The session this call named had ended before it (why): the call ran
    /// in a fresh one.
    pub ended_before: Option<String>,
    /// The session ended right after this call (its maximum lifetime).
    pub ended_after: bool,
    /// The server is stopping: the session was closed.
    pub shutdown: bool,
    pub duration: Duration,
    /// The files the call wrote under /workspace/outputs (outputs/).
    pub outputs: Collected,
    /// The run had no session: its jail ended with it (throwaway.rs).
    pub throwaway: bool,
    /// That jail was a warm one (warm.rs), started before the call.
    pub warm: bool,
    /// The server named this new session (`session` is that name, not the
    /// one the call gave).
    pub named_by_server: bool,
    /// The network policy's refusals during the call, as note lines.
    pub refusals: Vec<String>,
    /// The project layer's changes, when they changed during the call
    /// (or since the one before): `3 files changed, +12 -4`.
    pub project: Option<String>,
    /// The session's jails have a project layer: a reset, or a session
    /// that ended, lost its changes too.
    pub layered: bool,
    /// The line naming the port the call published and its host address.
    pub published: Option<String>,
    /// The session started from a checkpoint: the line saying which.
    pub forked: Option<String>,
    /// The checkpoint the call's end was kept as: its line.
    pub checkpoint: Option<String>,
    /// The call asked the session to end (`end`).
    pub ended_by_call: bool,
}

impl CallOutcome {
    /// A call of `session` that has not run yet.
    pub fn new(session: String, throwaway: bool) -> Self {
        CallOutcome {
            session,
            reply: None,
            received: None,
            timed_out: false,
            cancelled: false,
            reset: None,
            ended_before: None,
            ended_after: false,
            shutdown: false,
            duration: Duration::ZERO,
            outputs: Collected::default(),
            throwaway,
            warm: false,
            named_by_server: false,
            refusals: Vec::new(),
            project: None,
            layered: false,
            published: None,
            forked: None,
            checkpoint: None,
            ended_by_call: false,
        }
    }
}

/// Makes `call` in `jail`: sends its files' bytes (`put`s), then the call,
/// then waits for its reply.
pub async fn make(jail: &mut Jail, call: Call<'_>) -> Ended {
    let deadline = Instant::now() + call.timeout;
    let reset = |why, timed_out| Ended::Reset {
        why,
        timed_out,
        cancelled: false,
        output: None,
    };
    tokio::select! {
        biased;
        () = call.shutdown.cancelled() => return Ended::Shutdown,
        sent = put(jail, call.files) => {
            if let Err(e) = sent {
                return reset(ResetReason::Broken(e), false);
            }
        }
        () = tokio::time::sleep_until(deadline + WRITE_GRACE) => {
            return reset(ResetReason::Stuck, true);
        }
    }
    let id = jail.fresh_id();
    let request = call.request(id);
    // Before the request goes: the agent's periods start after it.
    let live = call
        .tail
        .map(|tail| (LiveBudget::new(std::time::Instant::now()), tail));
    tokio::select! {
        biased;
        () = call.shutdown.cancelled() => return Ended::Shutdown,
        sent = jail.request(&request) => {
            if let Err(e) = sent {
                return reset(ResetReason::Broken(e), false);
            }
        }
        () = tokio::time::sleep_until(deadline + WRITE_GRACE) => {
            return reset(ResetReason::Stuck, true);
        }
    }
    drop(request);
    let mut waiting = Waiting {
        id,
        output_bytes: call.output_bytes,
        timed_out: false,
        cancelled: false,
        interrupt: None,
        live,
    };
    loop {
        let wake = waiting.interrupt.map_or(deadline, |(_, give_up)| give_up);
        let step = tokio::select! {
            biased;
            () = call.shutdown.cancelled() => Step::Ended(Ended::Shutdown),
            reply = jail.next_reply() => waiting.answer(reply),
            () = tokio::time::sleep_until(wake) => waiting.woken(jail).await,
            () = call.cancel.cancelled(), if !waiting.cancelled && waiting.interrupt.is_none() => {
                waiting.cancelled = true;
                waiting.interrupt(jail).await
            }
        };
        match step {
            Step::Wait => {}
            Step::Ended(ended) => return ended,
            Step::Reset(why) => {
                return Ended::Reset {
                    why,
                    timed_out: waiting.timed_out,
                    cancelled: waiting.cancelled,
                    output: None,
                };
            }
        }
    }
}

/// Sends the bytes of `files` to the agent, in `put`s of at most
/// [`PUT_CHUNK_BYTES`] each (an empty file needs none).
async fn put(jail: &mut Jail, files: &[Upload]) -> Result<(), Broken> {
    for (file, upload) in files.iter().enumerate() {
        for chunk in upload.content.chunks(PUT_CHUNK_BYTES) {
            let id = jail.fresh_id();
            let data = frame::encode_data(chunk);
            jail.request(&Request::Put { id, file, data }).await?;
        }
    }
    Ok(())
}

/// A call sent, waiting for its reply.
struct Waiting<'a> {
    /// The call's request id.
    id: u64,
    output_bytes: usize,
    timed_out: bool,
    cancelled: bool,
    /// The interrupt asked for (its id) and when to give up on the reply.
    interrupt: Option<(u64, Instant)>,
    /// A live call: what its agent may send, and where it goes.
    live: Option<(LiveBudget, &'a Tail)>,
}

/// What a reply, the deadline or a cancellation leads to while a call
/// waits.
enum Step {
    Ended(Ended),
    /// Wait on (an interrupt was asked for, or acknowledged).
    Wait,
    /// The jail must be killed.
    Reset(ResetReason),
}

impl Waiting<'_> {
    /// What the agent's `reply` leads to: the call's answer or refusal, an
    /// interrupt acknowledged, its live output passed on, or anything else,
    /// which resets the session.
    fn answer(&mut self, reply: Result<Reply, Broken>) -> Step {
        match reply {
            Ok(Reply::Exec(reply)) if reply.id == self.id => Step::Ended(self.answered(reply)),
            Ok(Reply::Output { id, stream, data }) if id == self.id => match &mut self.live {
                Some((budget, tail)) => {
                    match budget.admit(stream, &data, std::time::Instant::now()) {
                        Ok(bytes) => {
                            tail.push(&bytes);
                            Step::Wait
                        }
                        Err(violation) => {
                            Step::Reset(ResetReason::Broken(Broken::Invalid(violation)))
                        }
                    }
                }
                None => Step::Reset(ResetReason::Broken(Broken::Unexpected(
                    "a live output this call did not ask for".into(),
                ))),
            },
            Ok(Reply::Ack { id: ack, .. }) if self.interrupt.is_some_and(|(i, _)| i == ack) => {
                Step::Wait
            }
            Ok(Reply::Error {
                id: Some(err),
                code,
                message,
            }) if err == self.id
                && matches!(
                    code,
                    ErrorCode::SpawnFailed | ErrorCode::BadFile | ErrorCode::FileExists
                ) =>
            {
                match verify::message(&message) {
                    Ok(()) if code == ErrorCode::SpawnFailed => {
                        Step::Ended(Ended::Refused { message })
                    }
                    Ok(()) => Step::Ended(Ended::FilesRefused {
                        message,
                        exists: code == ErrorCode::FileExists,
                    }),
                    Err(violation) => Step::Reset(ResetReason::Broken(Broken::Invalid(violation))),
                }
            }
            Ok(other) => Step::Reset(ResetReason::Broken(Broken::Unexpected(verify::describe(
                &other,
            )))),
            Err(e) => Step::Reset(ResetReason::Broken(e)),
        }
    }

    /// The call's exec reply: its answer, or, when an honest agent cannot
    /// send it (verify.rs), a reset keeping its output cut to the cap.
    fn answered(&self, reply: ExecReply) -> Ended {
        match verify::exec(&reply, self.output_bytes) {
            Ok(()) => Ended::Answered {
                reply,
                timed_out: self.timed_out,
                cancelled: self.cancelled,
            },
            Err(violation) => Ended::Reset {
                why: ResetReason::Broken(Broken::Invalid(violation)),
                timed_out: self.timed_out,
                cancelled: self.cancelled,
                output: Some(verify::bounded(&reply, self.output_bytes)),
            },
        }
    }

    /// The deadline came (the code is interrupted), or the grace after the
    /// interrupt ran out (the session is reset).
    async fn woken(&mut self, jail: &mut Jail) -> Step {
        if self.interrupt.is_some() {
            return Step::Reset(ResetReason::IgnoredInterrupt);
        }
        self.timed_out = true;
        self.interrupt(jail).await
    }

    /// Asks the agent to interrupt the code, then waits for the reply.
    async fn interrupt(&mut self, jail: &mut Jail) -> Step {
        match ask_interrupt(jail).await {
            Ok(asked) => {
                self.interrupt = Some(asked);
                Step::Wait
            }
            Err(why) => Step::Reset(why),
        }
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

/// What became of the jail of a call that ended.
#[derive(Debug, PartialEq, Eq)]
pub enum JailAfter {
    /// It is as it was (killed, if reading the outputs failed: the next call
    /// finds it gone).
    Kept,
    /// It was killed: a session starts a fresh one.
    Reset,
    /// It was killed because the server is stopping.
    Closed,
}

/// Settles a call that ended as `ended` in `jail` of `env`: the reply and the
/// outputs (collected to `to`), or the reset and why, go into `outcome`; the
/// jail is killed when it must go. A call that ran nothing is an error.
pub async fn settle(
    ended: Ended,
    jail: &mut Jail,
    env: &Env,
    to: &Destination<'_>,
    outcome: &mut CallOutcome,
) -> Result<JailAfter, Error> {
    let label = to.session.unwrap_or("(run)");
    outcome.refusals = jail.take_refusals();
    match ended {
        Ended::Answered {
            reply,
            timed_out,
            cancelled,
        } => {
            // At info only when the launcher ended it or the interpreter
            // was restarted: otherwise the client has the result, and a
            // line for each call would cost it a write and the log's
            // reader a wake-up.
            if timed_out || cancelled || reply.interrupted || reply.restarted {
                tracing::info!(
                    session = label, env = %env.name, status = reply.status,
                    interrupted = reply.interrupted, restarted = reply.restarted,
                    timed_out = timed_out, cancelled = cancelled,
                    exit = ?reply.exit, ms = reply.duration_ms, "call finished"
                );
            } else {
                tracing::debug!(
                    session = label, env = %env.name, status = reply.status,
                    exit = ?reply.exit, ms = reply.duration_ms, "call finished"
                );
            }
            outcome.outputs = outputs::collect(jail, &reply.outputs, reply.outputs_more, to).await;
            if outcome.outputs.broken.is_some() {
                // The next call finds the jail gone and starts afresh.
                jail.kill();
            }
            outcome.reply = Some(reply);
            outcome.timed_out = timed_out;
            outcome.cancelled = cancelled;
            Ok(JailAfter::Kept)
        }
        Ended::Refused { message } => {
            tracing::error!(session = label, env = %env.name, %message, "the agent cannot start the interpreter");
            Err(Error::InterpreterUnavailable {
                env: env.name.clone(),
                message,
            })
        }
        Ended::FilesRefused { message, exists } => Err(match exists {
            true => Error::FileExists(message),
            false => Error::FilesRefused(message),
        }),
        Ended::Reset {
            why,
            timed_out,
            cancelled,
            output,
        } => {
            let log = jail.log_tail();
            jail.kill();
            tracing::warn!(session = label, env = %env.name, ?why, %log, "session reset");
            outcome.reset = Some(reset_sentence(&why, env, timed_out, cancelled));
            outcome.received = output;
            outcome.timed_out = timed_out;
            outcome.cancelled = cancelled;
            Ok(JailAfter::Reset)
        }
        Ended::Shutdown => {
            jail.kill();
            outcome.shutdown = true;
            Ok(JailAfter::Closed)
        }
    }
}

/// The sentence for a reset during a call (without the common ending).
fn reset_sentence(why: &ResetReason, env: &Env, timed_out: bool, cancelled: bool) -> String {
    let secs = env.limits.timeout_s;
    match why {
        ResetReason::IgnoredInterrupt if timed_out => {
            format!("timed out after {secs} s and did not stop when interrupted")
        }
        ResetReason::IgnoredInterrupt if cancelled => {
            "cancelled, and the code did not stop when interrupted".into()
        }
        ResetReason::IgnoredInterrupt => "the code did not stop when interrupted".into(),
        ResetReason::Stuck => "the session's agent stopped responding".into(),
        ResetReason::Broken(broken) => format!("the session's sandbox failed ({broken})"),
    }
}
