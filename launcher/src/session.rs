//! The session table: named interpreter sessions of one MCP client.
//!
//! - One table per MCP handler ([`crate::mcp::Server`]): one over stdio, one
//!   per MCP session over HTTP, so a client never sees another's sessions.
//! - A session is created by the first `run` that names it, bound to that
//!   call's environment, and runs in a jail of its own ([`Jail`]) that keeps
//!   the interpreter's state and the files in `/workspace`.
//! - One call at a time per session: a second one is refused
//!   (`session_busy`) after [`BUSY_GRACE`], except when the running call
//!   was cancelled: then it waits, at most [`SETTLE`], for the interrupt to
//!   land, so that a client that cancels and calls again at once is not
//!   told "busy" (MCP clients do exactly that). At most [`Settings::max_sessions`] sessions.
//! - Requests over HTTP without an MCP session (the stateless 2026-07-28
//!   revision) share one table ([`Sessions::server_named`]) in which the
//!   server names every new session: the model's name with an unguessable
//!   suffix (`data.k3J9xQ2mZp7a`), said in the result. Only a client that
//!   was given that name can reach the session, though every such client
//!   uses the same bearer token.
//! - A session ends after [`Settings::idle_timeout`] without calls, or
//!   [`Settings::max_lifetime`] after it began (a call running then
//!   finishes first). A reaper task, started with the first session, ends
//!   them; a call also ends any that are due before it looks. The next call
//!   with an ended session's name starts a fresh one and is told why.
//! - A reset (code that ignores the interrupt at its deadline, an agent that
//!   died or broke the protocol) kills the jail and starts a fresh one.
//! - Server shutdown (the token) and dropping the table kill every jail.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use proto::frame::{ExecReply, FileIn};
use tokio_util::sync::CancellationToken;

use crate::errors::RunError;
use crate::exec::JobEnv;
use crate::limits::{Host, NO_RUN_CGROUP};
use crate::manifest::Env;
use crate::mirror::Mirror;
use crate::outputs::{self, Collected, Destination, ReadFailed};
use crate::session_call::{self, Call, Ended, INTERRUPT_GRACE, ResetReason, WRITE_GRACE};
use crate::session_jail::Jail;

/// How many ended sessions are remembered, to tell the next call why its
/// session is new.
const REMEMBER_ENDED: usize = 64;

/// How long a call waits for a session whose running call was cancelled:
/// the interrupt, its grace, and a reset's fresh jail.
pub const SETTLE: Duration =
    Duration::from_secs(INTERRUPT_GRACE.as_secs() + WRITE_GRACE.as_secs() + 2);
/// How long a call to a busy session waits for a cancellation of the
/// running call that may be on its way: over HTTP the cancel and the next
/// call are separate requests, and the TypeScript SDK sends both at once,
/// so the call can come first.
const BUSY_GRACE: Duration = Duration::from_millis(250);
/// How often a waiting call looks whether the session was released.
const SETTLE_POLL: Duration = Duration::from_millis(5);

/// The length of the suffix the server adds to the names it gives.
const NAME_SUFFIX: usize = 12;

/// The limits of the session table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub max_sessions: usize,
    pub idle_timeout: Duration,
    pub max_lifetime: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_sessions: 16,
            idle_timeout: Duration::from_secs(300),
            max_lifetime: Duration::from_secs(3600),
        }
    }
}

/// The environment variables that set [`Settings`] (flags override them).
pub const MAX_SESSIONS_VAR: &str = "NIX_SANDBOX_MAX_SESSIONS";
pub const IDLE_TIMEOUT_VAR: &str = "SESSION_IDLE_TIMEOUT";
pub const MAX_LIFETIME_VAR: &str = "SESSION_MAX_LIFETIME";

impl Settings {
    /// The defaults, overridden by the environment (`lookup`), then by the
    /// flags given. The error is one line naming the variable or flag.
    pub fn new(
        lookup: impl Fn(&str) -> Option<String>,
        max_sessions: Option<u64>,
        idle_timeout_s: Option<u64>,
        max_lifetime_s: Option<u64>,
    ) -> Result<Self, String> {
        let from_env = |var: &str| -> Result<Option<u64>, String> {
            match lookup(var).filter(|v| !v.trim().is_empty()) {
                None => Ok(None),
                Some(v) => positive(&v)
                    .map(Some)
                    .map_err(|e| format!("{var}={v:?}: {e}")),
            }
        };
        let defaults = Self::default();
        let max = max_sessions.or(from_env(MAX_SESSIONS_VAR)?);
        let idle = idle_timeout_s.or(from_env(IDLE_TIMEOUT_VAR)?);
        let lifetime = max_lifetime_s.or(from_env(MAX_LIFETIME_VAR)?);
        for (what, value) in [
            ("--max-sessions", max_sessions),
            ("--session-idle-timeout", idle_timeout_s),
            ("--session-max-lifetime", max_lifetime_s),
        ] {
            if value == Some(0) {
                return Err(format!("{what} must be a positive integer"));
            }
        }
        Ok(Self {
            max_sessions: max.map_or(defaults.max_sessions, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            idle_timeout: idle.map_or(defaults.idle_timeout, Duration::from_secs),
            max_lifetime: lifetime.map_or(defaults.max_lifetime, Duration::from_secs),
        })
    }

    /// How often the reaper looks: often enough for short test values.
    fn tick(&self) -> Duration {
        (self.idle_timeout.min(self.max_lifetime) / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// A positive integer (seconds or a count).
pub fn positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err("expected a positive integer".into()),
        Ok(n) => Ok(n),
    }
}

/// Whether `name` is a session name: 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// What a session call did, for `result::session_ran`.
#[derive(Debug)]
pub struct Outcome {
    pub session: String,
    /// The agent's answer (none when the session was reset before one came).
    pub reply: Option<ExecReply>,
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
    /// The files the call wrote under /workspace/outputs (outputs.rs).
    pub outputs: Collected,
    /// The run had no session: its jail ended with it (throwaway.rs).
    pub throwaway: bool,
    /// The server named this new session (`session` is that name, not the
    /// one the call gave).
    pub named_by_server: bool,
}

impl Outcome {
    /// A call of `session` that has not run yet.
    pub fn new(session: String, throwaway: bool) -> Self {
        Outcome {
            session,
            reply: None,
            timed_out: false,
            cancelled: false,
            reset: None,
            ended_before: None,
            ended_after: false,
            shutdown: false,
            duration: Duration::ZERO,
            outputs: Collected::default(),
            throwaway,
            named_by_server: false,
        }
    }
}

/// The session table of one MCP handler. Dropping it kills every jail.
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    /// New sessions get a name made by the server ([`Sessions::server_named`]).
    server_named: bool,
    job_env: JobEnv,
    host: Arc<Host>,
    shutdown: CancellationToken,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    open: HashMap<String, Entry>,
    /// Recently ended sessions and why, newest last.
    ended: VecDeque<(String, String)>,
    /// Set at shutdown: no new session starts.
    closed: bool,
    reaper_started: bool,
}

struct Entry {
    env: Arc<Env>,
    created: Instant,
    last_used: Instant,
    /// `None` while a call holds the jail.
    slot: Option<Slot>,
    /// The call holding the jail, if one does.
    running: Option<Running>,
}

/// The call holding a session.
#[derive(Clone)]
struct Running {
    cancel: CancellationToken,
    /// When it ends at the latest: its timeout, then the interrupt's grace.
    ends_by: Instant,
}

impl Running {
    fn new(cancel: &CancellationToken, env: &Env, now: Instant) -> Self {
        let timeout = Duration::from_secs(env.limits.timeout_s.get());
        Self {
            cancel: cancel.clone(),
            ends_by: now + timeout + INTERRUPT_GRACE + WRITE_GRACE,
        }
    }
}

/// An idle session's jail; `Empty` when its restart failed (the next call
/// starts one).
enum Slot {
    Jail(Jail),
    Empty,
}

impl Sessions {
    pub fn new(
        settings: Settings,
        job_env: JobEnv,
        host: Arc<Host>,
        shutdown: CancellationToken,
    ) -> Self {
        Self::with_naming(settings, job_env, host, shutdown, false)
    }

    /// The table of requests without an MCP session: the server names each
    /// new session, so that only the client it told can reach it.
    pub fn server_named(
        settings: Settings,
        job_env: JobEnv,
        host: Arc<Host>,
        shutdown: CancellationToken,
    ) -> Self {
        Self::with_naming(settings, job_env, host, shutdown, true)
    }

    fn with_naming(
        settings: Settings,
        job_env: JobEnv,
        host: Arc<Host>,
        shutdown: CancellationToken,
        server_named: bool,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings,
                server_named,
                job_env,
                host,
                shutdown,
                table: Mutex::new(Table::default()),
            }),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Runs `code` in session `name` of `env`, creating the session if it
    /// does not exist, after writing `files` into its /workspace; collects
    /// the outputs (mirrored when `mirror` is set). Refusals (bad name,
    /// wrong environment, busy, too many) come before anything runs.
    pub async fn run(
        &self,
        name: &str,
        env: &Arc<Env>,
        code: &str,
        files: &[FileIn],
        mirror: Option<&Mirror>,
        cancel: &CancellationToken,
    ) -> Result<Outcome, RunError> {
        let inner = &self.inner;
        let mut lease = inner.acquire_settled(name, env, cancel).await?;
        let name = &lease.name.clone();
        inner.start_reaper();
        let started = Instant::now();
        let mut ended_before = lease.ended_before.take();
        if let Some(Slot::Jail(jail)) = &mut lease.slot
            && jail.has_exited()
        {
            tracing::warn!(session = name, log = %jail.log_tail(), "a session jail died between calls");
            ended_before = Some("its sandbox stopped after the last call".into());
            lease.slot = Some(Slot::Empty);
        }
        if !matches!(lease.slot, Some(Slot::Jail(_))) {
            lease.slot = Some(Slot::Jail(inner.spawn(name, env)?));
        }
        let Some(Slot::Jail(jail)) = &mut lease.slot else {
            unreachable!("a jail was just put in the slot")
        };
        let call = Call::new(env, code, files, cancel, &inner.shutdown);
        let mut outcome = Outcome {
            ended_before,
            named_by_server: lease.named_by_server,
            ..Outcome::new(name.to_owned(), false)
        };
        match session_call::exec(jail, call).await {
            Ended::Answered {
                reply,
                timed_out,
                cancelled,
            } => {
                tracing::info!(
                    session = name, env = %env.name, status = reply.status,
                    interrupted = reply.interrupted, restarted = reply.restarted,
                    exit = ?reply.exit, ms = reply.duration_ms, "session call finished"
                );
                let to = Destination {
                    session: Some(name),
                    mirror: mirror.map(|m| (m, Mirror::session_dir(name))),
                };
                outcome.outputs =
                    outputs::collect(jail, &reply.outputs, reply.outputs_more, &to).await;
                if outcome.outputs.broken.is_some() {
                    // The next call finds the jail gone and starts afresh.
                    jail.kill();
                }
                outcome.reply = Some(reply);
                outcome.timed_out = timed_out;
                outcome.cancelled = cancelled;
            }
            Ended::Refused { message } => {
                tracing::error!(session = name, env = %env.name, %message, "the agent cannot start the interpreter");
                lease.release();
                return Err(RunError::sandbox_unavailable(&env.name, &message));
            }
            Ended::FilesRefused { message } => {
                lease.release();
                return Err(RunError::files_refused(&message));
            }
            Ended::Reset {
                why,
                timed_out,
                cancelled,
            } => {
                let log = jail.log_tail();
                jail.kill();
                tracing::warn!(session = name, env = %env.name, ?why, %log, "session reset");
                outcome.reset = Some(reset_sentence(&why, env, timed_out, cancelled));
                outcome.timed_out = timed_out;
                outcome.cancelled = cancelled;
                // A fresh jail now, so that the next call finds it started;
                // if that fails, the next call tries again.
                lease.slot = Some(match inner.spawn(name, env) {
                    Ok(jail) => Slot::Jail(jail),
                    Err(e) => {
                        tracing::warn!(session = name, error = %e.message, "restarting the session failed");
                        Slot::Empty
                    }
                });
            }
            Ended::Shutdown => {
                jail.kill();
                outcome.shutdown = true;
                lease.slot = None;
            }
        }
        outcome.duration = started.elapsed();
        outcome.ended_after = lease.release();
        Ok(outcome)
    }
}

impl Sessions {
    /// Whether session `name` is open.
    pub fn is_open(&self, name: &str) -> bool {
        self.inner.lock().open.contains_key(name)
    }

    /// Reads output `path` of session `name` (for `resources/read`), at most
    /// `max` bytes: the session must be open and not running a call.
    pub async fn read_output(
        &self,
        name: &str,
        path: &str,
        max: u64,
    ) -> Result<Vec<u8>, OutputUnreadable> {
        let mut lease = self.inner.acquire_open(name)?;
        let Some(Slot::Jail(jail)) = &mut lease.slot else {
            lease.release();
            return Err(OutputUnreadable::NotOpen);
        };
        if jail.has_exited() {
            lease.release();
            return Err(OutputUnreadable::NotOpen);
        }
        let read = outputs::read_all(jail, path, max).await;
        if let Err(ReadFailed::Broken(why)) = &read {
            tracing::warn!(session = name, "reading an output failed: {why}");
            jail.kill();
        }
        lease.release();
        read.map_err(|e| match e {
            ReadFailed::Gone(why) => OutputUnreadable::Gone(why),
            ReadFailed::Broken(why) => OutputUnreadable::Broken(why),
        })
    }
}

/// Why an output cannot be read through `resources/read`.
#[derive(Debug)]
pub enum OutputUnreadable {
    /// No open session has this name (it ended, or never was).
    NotOpen,
    /// The session is running a call.
    Busy,
    /// No such regular file in its outputs.
    Gone(String),
    /// The session's agent failed; the session restarts on its next call.
    Broken(String),
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.inner.close("the MCP client went away");
    }
}

/// The sentence for a reset during a call (without the common ending).
pub fn reset_sentence(why: &ResetReason, env: &Env, timed_out: bool, cancelled: bool) -> String {
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

/// Why a session cannot be had now.
enum Unavailable {
    Refused(RunError),
    /// A call holds it (a call of this server's, or a read of an output).
    Busy(Option<Running>),
}

impl From<RunError> for Unavailable {
    fn from(e: RunError) -> Self {
        Self::Refused(e)
    }
}

impl Inner {
    /// [`Inner::acquire`], waiting up to [`SETTLE`] while the call holding
    /// the session has been cancelled and is being interrupted.
    async fn acquire_settled(
        &self,
        name: &str,
        env: &Arc<Env>,
        cancel: &CancellationToken,
    ) -> Result<Lease<'_>, RunError> {
        let started = Instant::now();
        loop {
            match self.acquire(name, env, cancel) {
                Ok(lease) => return Ok(lease),
                Err(Unavailable::Refused(e)) => return Err(e),
                Err(Unavailable::Busy(running)) => {
                    let now = Instant::now();
                    let settling = running.as_ref().is_some_and(|r| r.cancel.is_cancelled());
                    let wait = if settling { SETTLE } else { BUSY_GRACE };
                    if now >= started + wait || cancel.is_cancelled() {
                        let within = running.map(|r| {
                            r.ends_by
                                .saturating_duration_since(now)
                                .as_secs_f64()
                                .ceil() as u64
                        });
                        return Err(RunError::session_busy(name, within));
                    }
                    tokio::time::sleep(SETTLE_POLL).await;
                }
            }
        }
    }

    /// Reserves session `name` for one call: its jail (if it has one) moves
    /// into the lease until the lease is released. In a table whose server
    /// names sessions, a name that is not open makes a new session with a
    /// name of the server's.
    fn acquire(
        &self,
        name: &str,
        env: &Arc<Env>,
        cancel: &CancellationToken,
    ) -> Result<Lease<'_>, Unavailable> {
        if !valid_name(name) {
            return Err(RunError::bad_session_name(name).into());
        }
        let now = Instant::now();
        let (lease, expired) = {
            let mut table = self.lock();
            let expired = self.expire(&mut table, now);
            if table.closed {
                return Err(
                    RunError::sandbox_unavailable(&env.name, "the server is stopping").into(),
                );
            }
            let lease = match table.open.get_mut(name) {
                Some(entry) if entry.env.name != env.name => {
                    return Err(
                        RunError::session_env_mismatch(name, &entry.env.name, &env.name).into(),
                    );
                }
                Some(entry) => match entry.slot.take() {
                    None => return Err(Unavailable::Busy(entry.running.clone())),
                    slot => {
                        entry.running = Some(Running::new(cancel, env, now));
                        Lease::new(self, name, slot, None)
                    }
                },
                None => {
                    if table.open.len() >= self.settings.max_sessions {
                        let mut names: Vec<String> = table.open.keys().cloned().collect();
                        names.sort();
                        return Err(RunError::too_many_sessions(
                            self.settings.max_sessions,
                            &names,
                            self.settings.idle_timeout.as_secs(),
                        )
                        .into());
                    }
                    let ended_before = table
                        .ended
                        .iter()
                        .rposition(|(n, _)| n == name)
                        .and_then(|i| table.ended.remove(i))
                        .map(|(_, why)| why);
                    let name = if self.server_named {
                        server_name(name, |n| table.open.contains_key(n))
                    } else {
                        name.to_owned()
                    };
                    table.open.insert(
                        name.clone(),
                        Entry {
                            env: Arc::clone(env),
                            created: now,
                            last_used: now,
                            slot: None,
                            running: Some(Running::new(cancel, env, now)),
                        },
                    );
                    tracing::info!(session = %name, env = %env.name, open = table.open.len(), "session created");
                    let mut lease = Lease::new(self, &name, Some(Slot::Empty), ended_before);
                    lease.named_by_server = self.server_named;
                    lease
                }
            };
            (lease, expired)
        };
        drop(expired);
        Ok(lease)
    }

    /// Reserves the open session `name`, without creating one.
    fn acquire_open(&self, name: &str) -> Result<Lease<'_>, OutputUnreadable> {
        let expired;
        let lease = {
            let mut table = self.lock();
            expired = self.expire(&mut table, Instant::now());
            match table.open.get_mut(name) {
                None => return Err(OutputUnreadable::NotOpen),
                Some(entry) => match entry.slot.take() {
                    None => return Err(OutputUnreadable::Busy),
                    slot => Lease::new(self, name, slot, None),
                },
            }
        };
        drop(expired);
        Ok(lease)
    }

    /// Starts a jail for session `name`.
    fn spawn(&self, name: &str, env: &Env) -> Result<Jail, RunError> {
        Jail::spawn(&env.session, &self.job_env, &self.host, name).map_err(|e| {
            tracing::error!(session = name, env = %env.name, error = %e, "cannot start the session jail");
            if e.to_string().starts_with(NO_RUN_CGROUP) {
                RunError::sandbox_unavailable(&env.name, &e.to_string())
            } else {
                RunError::wrapper_missing(&env.name, &env.session[0])
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes the idle sessions that are due; their jails are returned, to
    /// be dropped (killed) once the table is unlocked.
    fn expire(&self, table: &mut Table, now: Instant) -> Vec<Slot> {
        let s = &self.settings;
        let due: Vec<(String, String)> = table
            .open
            .iter()
            .filter(|(_, e)| e.slot.is_some())
            .filter_map(|(name, e)| {
                let why = if now.duration_since(e.created) >= s.max_lifetime {
                    format!(
                        "it reached the maximum lifetime of {} s",
                        s.max_lifetime.as_secs()
                    )
                } else if now.duration_since(e.last_used) >= s.idle_timeout {
                    format!("it was idle for {} s", s.idle_timeout.as_secs())
                } else {
                    return None;
                };
                Some((name.clone(), why))
            })
            .collect();
        let mut slots = Vec::new();
        for (name, why) in due {
            if let Some(entry) = table.open.remove(&name) {
                tracing::info!(session = %name, "session ended: {why}");
                slots.extend(entry.slot);
                remember(table, name, why);
            }
        }
        slots
    }

    /// Starts the reaper task, once, with the first session.
    fn start_reaper(self: &Arc<Self>) {
        {
            let mut table = self.lock();
            if table.reaper_started {
                return;
            }
            table.reaper_started = true;
        }
        let weak: Weak<Inner> = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        let tick = self.settings.tick();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        if let Some(inner) = weak.upgrade() {
                            inner.close("the server is stopping");
                        }
                        return;
                    }
                    () = tokio::time::sleep(tick) => {}
                }
                let Some(inner) = weak.upgrade() else { return };
                let expired = {
                    let mut table = inner.lock();
                    inner.expire(&mut table, Instant::now())
                };
                drop(expired);
            }
        });
    }

    /// Kills every idle session's jail and refuses new sessions; calls
    /// running now end by themselves (they watch the shutdown token) or
    /// are killed when they release their session.
    fn close(&self, why: &str) {
        let slots: Vec<Slot> = {
            let mut table = self.lock();
            table.closed = true;
            let names: Vec<String> = table
                .open
                .iter()
                .filter(|(_, e)| e.slot.is_some())
                .map(|(n, _)| n.clone())
                .collect();
            names
                .iter()
                .filter_map(|n| table.open.remove(n))
                .filter_map(|e| e.slot)
                .collect()
        };
        if !slots.is_empty() {
            tracing::info!(sessions = slots.len(), "sessions closed: {why}");
        }
        drop(slots);
    }
}

/// A new session's name made by the server from `asked` (the model's name,
/// less a suffix of an earlier server name, cut to fit): `BASE.SUFFIX`,
/// with [`NAME_SUFFIX`] random letters and digits, unused in the table.
fn server_name(asked: &str, taken: impl Fn(&str) -> bool) -> String {
    let base = match asked.rsplit_once('.') {
        Some((base, suffix))
            if suffix.len() == NAME_SUFFIX && suffix.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            base
        }
        _ => asked,
    };
    let base = &base[..base.len().min(64 - 1 - NAME_SUFFIX)];
    loop {
        let name = format!("{base}.{}", random_suffix());
        if !taken(&name) {
            return name;
        }
    }
}

/// [`NAME_SUFFIX`] letters and digits, unpredictable: SipHash outputs under
/// the process's random keys (std's `RandomState`, seeded by the OS).
fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bits = 0u128;
    for _ in 0..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0);
        bits = (bits << 64) | u128::from(hasher.finish());
    }
    (0..NAME_SUFFIX)
        .map(|_| {
            let c = ALPHABET[(bits % 62) as usize];
            bits /= 62;
            char::from(c)
        })
        .collect()
}

/// Remembers why session `name` ended.
fn remember(table: &mut Table, name: String, why: String) {
    if table.ended.len() >= REMEMBER_ENDED {
        table.ended.pop_front();
    }
    table.ended.push_back((name, why));
}

/// One call's hold on a session. Released, it puts the jail back; dropped
/// without being released (the call was abandoned), it ends the session.
struct Lease<'a> {
    inner: &'a Inner,
    name: String,
    slot: Option<Slot>,
    ended_before: Option<String>,
    released: bool,
    /// The server named the session (a new one, in a table that does).
    named_by_server: bool,
}

impl<'a> Lease<'a> {
    fn new(inner: &'a Inner, name: &str, slot: Option<Slot>, ended_before: Option<String>) -> Self {
        Self {
            inner,
            name: name.to_owned(),
            slot,
            ended_before,
            released: false,
            named_by_server: false,
        }
    }

    /// Puts the jail back; true when the session ended instead, because it
    /// reached its maximum lifetime (or the server is stopping, or the jail
    /// is gone).
    fn release(&mut self) -> bool {
        self.released = true;
        let slot = self.slot.take();
        let mut table = self.inner.lock();
        let lifetime = self.inner.settings.max_lifetime;
        let closed = table.closed;
        let Some(entry) = table.open.get_mut(&self.name) else {
            return true;
        };
        let now = Instant::now();
        if closed || slot.is_none() || now.duration_since(entry.created) >= lifetime {
            table.open.remove(&self.name);
            if !closed && slot.is_some() {
                let why = format!(
                    "it reached the maximum lifetime of {} s",
                    lifetime.as_secs()
                );
                tracing::info!(session = %self.name, "session ended: {why}");
                remember(&mut table, self.name.clone(), why);
            }
            drop(table);
            drop(slot);
            return true;
        }
        entry.slot = slot;
        entry.running = None;
        entry.last_used = now;
        false
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if !self.released {
            let removed = {
                let mut table = self.inner.lock();
                let removed = table.open.remove(&self.name);
                // A call was running in the jail (not a start that failed,
                // which its caller was told about).
                let ran = matches!(self.slot, Some(Slot::Jail(_)));
                if removed.is_some() && ran && !table.closed {
                    let why = "its last call did not finish".to_owned();
                    remember(&mut table, self.name.clone(), why);
                }
                removed
            };
            tracing::info!(session = %self.name, "session ended: its call did not finish");
            drop(removed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["a", "data-1", "x.y_z", &"n".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "a b", "é", "a/b", &"n".repeat(65), "x\n"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn settings_come_from_defaults_env_and_flags() {
        let none = |_: &str| None;
        assert_eq!(
            Settings::new(none, None, None, None).unwrap(),
            Settings::default()
        );
        let env = |var: &str| match var {
            MAX_SESSIONS_VAR => Some("4".to_owned()),
            IDLE_TIMEOUT_VAR => Some("10".to_owned()),
            _ => None,
        };
        let s = Settings::new(env, None, None, Some(20)).unwrap();
        assert_eq!(s.max_sessions, 4);
        assert_eq!(s.idle_timeout, Duration::from_secs(10));
        assert_eq!(s.max_lifetime, Duration::from_secs(20));
        let s = Settings::new(env, Some(2), None, None).unwrap();
        assert_eq!(s.max_sessions, 2);
        let bad = |_: &str| Some("soon".to_owned());
        let e = Settings::new(bad, None, None, None).unwrap_err();
        assert!(e.starts_with(MAX_SESSIONS_VAR), "{e}");
        assert!(Settings::new(none, Some(0), None, None).is_err());
    }

    #[test]
    fn server_names_are_fresh_valid_and_keep_the_models_name() {
        let a = server_name("data", |_| false);
        let b = server_name("data", |_| false);
        assert_ne!(a, b);
        for name in [&a, &b] {
            assert!(valid_name(name), "{name}");
            assert_eq!(name.len(), "data.".len() + NAME_SUFFIX, "{name}");
            assert!(name.starts_with("data."), "{name}");
        }
        // An earlier server name's suffix is replaced, not stacked.
        let again = server_name(&a, |_| false);
        assert!(
            again.starts_with("data.") && again.len() == a.len() && again != a,
            "{again}"
        );
        // Long names are cut to fit the 64 characters of a session name.
        let long = server_name(&"n".repeat(64), |_| false);
        assert!(valid_name(&long) && long.len() == 64, "{long}");
        // A name in use is never given again.
        let tried = std::cell::Cell::new(0);
        let unused = server_name("x", |_| {
            tried.set(tried.get() + 1);
            tried.get() == 1
        });
        assert!(valid_name(&unused));
        assert_eq!(tried.get(), 2);
    }

    #[test]
    fn the_reaper_looks_often_enough_for_short_timeouts() {
        let s = Settings {
            idle_timeout: Duration::from_secs(2),
            ..Settings::default()
        };
        assert_eq!(s.tick(), Duration::from_millis(500));
        assert_eq!(Settings::default().tick(), Duration::from_secs(1));
    }
}
