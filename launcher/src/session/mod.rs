//! Sessions: named interpreter sessions of one MCP client, each in a jail
//! of its own (jail.rs) that keeps the interpreter's state and the files in
//! `/workspace`; and the throwaway session jail of a run given `files`
//! (throwaway.rs).
//!
//! - One table per MCP handler ([`crate::mcp::Server`]): one over stdio, one
//!   per MCP session over HTTP, so a client never sees another's sessions.
//! - A session is created by the first call that names it, bound to that
//!   call's environment.
//! - One call at a time per session: a second one is refused
//!   (`session_busy`) after [`lease::BUSY_GRACE`], except when the running
//!   call was cancelled: then it waits, at most
//!   [`lease::WAIT_AFTER_CANCEL`], for the interrupt to land, so that a
//!   client that cancels and calls again at once is not told "busy" (MCP
//!   clients do exactly that). At most [`Settings::max_sessions`] sessions
//!   per table, and [`Settings::max_total`] in every table together
//!   (admission.rs).
//! - Requests over HTTP without an MCP session (the stateless 2026-07-28
//!   revision) share one table ([`Sessions::server_named`]) in which the
//!   server names every new session: the model's name with an unguessable
//!   suffix (`data.k3J9xQ2mZp7a`, names.rs), said in the result. Only a
//!   client that was given that name can reach the session, though every
//!   such client uses the same bearer token.
//! - A session ends after [`Settings::idle_timeout`] without calls, or
//!   [`Settings::max_lifetime`] after it began (a call running then
//!   finishes first). A reaper task, started with the first session, ends
//!   them; a call also ends any that are due before it looks. The next call
//!   with an ended session's name starts a fresh one and is told why.
//! - A call (call.rs) that the code does not let end at its deadline, or
//!   an agent that died or broke the protocol (verify.rs: the agent is as
//!   untrusted as the code beside it), resets the session: the jail is
//!   killed and a fresh one started.
//! - A session's processes together, across its calls and between them,
//!   get its environment's `cpu_s` (RLIMIT_CPU holds each process alone):
//!   its cgroup's counter or its process tree in /proc is read after a
//!   call that could have reached it (cpu.rs), and every 2 s for idle
//!   sessions by the reaper; past it the session is reset (after
//!   a call) or ended (idle).
//! - Server shutdown (the token) and dropping the table kill every jail.

pub mod call;
mod cpu;
pub mod jail;
pub mod lease;
mod names;
pub mod outputs;
pub mod publish;
pub mod spawn;
mod table;
pub mod throwaway;
pub mod verify;
pub mod warm;

use std::sync::Arc;
use std::time::Instant;

use proto::files::Upload;
use tokio_util::sync::CancellationToken;

use crate::admission::{ClientKey, IdleSessions, SessionSlots};
use crate::catalog::Env;
use crate::live::Tail;
use crate::project::{self, diff::Bounds};
use crate::wrapper::{NotStarted, Spawner};
use call::{Call, CallOutcome, JailAfter};
pub use names::{SessionName, random_suffix};
use outputs::mirror::Mirror;
use outputs::{Destination, ReadFailed};
pub use table::Settings;
use table::{Inner, Slot};

/// Why a session call ran nothing; report/refusal.rs says each to the model.
#[derive(Debug)]
pub enum Error {
    /// The session belongs to environment `bound`, not `requested`.
    EnvMismatch {
        session: String,
        bound: String,
        requested: String,
    },
    /// The session was made with packages `bound`; the call asks for
    /// `requested` (two calls that made it at once, with different sets).
    PackagesMismatch {
        session: String,
        bound: Vec<String>,
        requested: Vec<String>,
    },
    /// A call holds the session; it ends within `within_s` at the latest
    /// (its timeout and the interrupt's grace), when known.
    Busy {
        session: String,
        within_s: Option<u64>,
    },
    /// `max` sessions are open (`open`, sorted); one ends after `idle_s`
    /// without calls.
    TooMany {
        max: usize,
        open: Vec<String>,
        idle_s: u64,
    },
    /// `max` sessions are open in every client's table together, none of
    /// them an idle one of a client beyond its share; one ends after
    /// `idle_s` without calls, the first idle one in `first_end_s`.
    ServerFull {
        max: usize,
        idle_s: u64,
        first_end_s: Option<u64>,
    },
    /// The client holds `held` sessions, at least its `share`, and the
    /// server's last free slot is kept for another client (of `max`); its
    /// first idle session ends in `first_end_s`.
    BeyondShare {
        held: usize,
        share: usize,
        max: usize,
        idle_s: u64,
        first_end_s: Option<u64>,
    },
    /// The server is stopping: no session starts.
    Stopping { env: String },
    /// The session's jail did not start.
    NotStarted(NotStarted),
    /// The agent cannot start `env`'s interpreter (`message` says why).
    InterpreterUnavailable { env: String, message: String },
    /// The agent could not write a file passed in (the sentence names it).
    FilesRefused(String),
    /// A file passed in is at a path that exists, and the call did not say
    /// `replace` (the sentence names it).
    FileExists(String),
    /// `from` names no session or checkpoint it can start from.
    Fork(ForkRefused),
}

/// Why a session cannot start from `from` (report/refusal.rs says each).
#[derive(Debug)]
pub enum ForkRefused {
    /// No open session of the client has this name (`open`, sorted).
    UnknownSession { session: String, open: Vec<String> },
    /// The session keeps no checkpoint `asked` (`kept`, oldest first).
    UnknownCheckpoint {
        session: String,
        asked: u64,
        kept: Vec<u64>,
    },
    /// It keeps none (`why`).
    NoCheckpoints { session: String, why: String },
    /// The new session's name is an open session other than the source.
    Open { session: String, from: String },
}

/// Where a new session starts from (`from`): session `session` as it was
/// at the end of its call `number` (its last call when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub session: SessionName,
    pub number: Option<u64>,
}

impl Origin {
    /// `NAME` or `NAME@N`.
    pub fn parse(text: &str) -> Option<Self> {
        let (name, number) = match text.split_once('@') {
            Some((name, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                (name, Some(n.parse().ok()?))
            }
            Some(_) => return None,
            None => (text, None),
        };
        Some(Self {
            session: SessionName::new(name)?,
            number,
        })
    }
}

impl From<NotStarted> for Error {
    fn from(e: NotStarted) -> Self {
        Self::NotStarted(e)
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

/// The session table of one MCP handler. Dropping it kills every jail.
pub struct Sessions {
    inner: Arc<Inner>,
    /// The client's own directory in the outputs mirror, if it has one.
    mirror_client: Option<String>,
}

impl Sessions {
    pub fn new(
        settings: Settings,
        spawner: Spawner,
        slots: SessionSlots,
        pool: warm::Pool,
        mirror_client: Option<String>,
    ) -> Self {
        let inner = Inner::new(settings, spawner, slots, pool, false);
        Self {
            inner: registered(inner),
            mirror_client,
        }
    }

    /// The table of requests without an MCP session: the server names each
    /// new session, so that only the client it told can reach it.
    pub fn server_named(
        settings: Settings,
        spawner: Spawner,
        slots: SessionSlots,
        pool: warm::Pool,
    ) -> Self {
        let inner = Inner::new(settings, spawner, slots, pool, true);
        // Its names are the server's, unique: no directory of its own.
        Self {
            inner: registered(inner),
            mirror_client: None,
        }
    }

    /// Runs `code` in session `name` of `env`, creating the session (held
    /// by `client`) if it does not exist, after writing `files` into its
    /// /workspace; collects the outputs (mirrored when `mirror` is set);
    /// then publishes the jail's port `publish` (one `env` allows). With
    /// `from`, the session starts as a copy of that checkpoint (a session
    /// of `from`'s own name is rolled back in place); with `end`, it ends
    /// after the call. Then the session's state is kept as the call's
    /// checkpoint. With `tail`, the output also goes there as it comes
    /// (the client watches the call). Refusals (wrong environment, busy, too many, no such
    /// checkpoint) come before anything runs.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        client: &ClientKey,
        name: &SessionName,
        env: &Arc<Env>,
        code: &str,
        files: &[Upload],
        mirror: Option<&Mirror>,
        cancel: &CancellationToken,
        publish: Option<u16>,
        from: Option<&Origin>,
        end: bool,
        tail: Option<&Tail>,
    ) -> Result<CallOutcome, Error> {
        let inner = &self.inner;
        let mut lease = inner.acquire_waiting(client, name, env, cancel).await?;
        let name = &lease.name.clone();
        inner.start_reaper();
        let started = Instant::now();
        let mut ended_before = lease.ended_before.take();
        let forked = self.start_from(&mut lease, from, env).await?;
        let jail = ready(&mut lease.slot, (inner, name), env, &mut ended_before)?;
        jail.note_print(inner.settings.max_checkpoints).await;
        let mut call = Call::new(env, code, files, cancel, &inner.spawner.shutdown);
        call.tail = tail;
        let ended = call::make(jail, call).await;
        let to = Destination {
            session: Some(name),
            mirror: mirror.map(|m| (m, Mirror::session_dir(self.mirror_client.as_deref(), name))),
        };
        let mut outcome = CallOutcome {
            ended_before,
            named_by_server: lease.named_by_server,
            layered: jail.has_layer(),
            forked,
            ..CallOutcome::new(name.to_owned(), false)
        };
        let calls = jail.history.calls + 1;
        let settled = call::settle(ended, jail, env, &to, &mut outcome).await;
        // The session's CPU budget counts every call's processes, and those
        // left running between calls (the reaper looks at idle sessions).
        let budget = table::cpu_budget(env);
        let settled = match settled {
            Ok(JailAfter::Kept) if jail.used_budget(budget) => {
                let why = table::cpu_spent(budget);
                tracing::warn!(session = name, "session reset: {why}");
                jail.kill();
                outcome.reset = Some(why);
                Ok(JailAfter::Reset)
            }
            settled => settled,
        };
        match settled {
            Ok(JailAfter::Kept) => {
                jail.history.calls = calls;
                let most = if end {
                    0
                } else {
                    inner.settings.max_checkpoints
                };
                outcome.checkpoint = checkpoint_line(jail, name, most).await;
            }
            Ok(JailAfter::Reset) => {
                // A fresh jail now, so that the next call finds it started;
                // if that fails, the next call tries again.
                lease.slot = Some(match inner.spawn(name, env, false) {
                    Ok(jail) => Slot::Jail(Box::new(jail.counting(calls))),
                    Err(e) => {
                        tracing::warn!(session = name, error = ?e, "restarting the session failed");
                        Slot::Empty
                    }
                });
            }
            Ok(JailAfter::Closed) => lease.slot = None,
            Err(e) => {
                lease.release();
                return Err(e);
            }
        }
        if outcome.reset.is_none() {
            outcome.project = project_changes(lease.slot.as_ref(), name).await;
        }
        if let (Some(port), Some(Slot::Jail(jail))) = (publish, lease.slot.as_ref()) {
            outcome.published = jail.publish(port).await.map(|addr| match addr {
                Ok(addr) => format!("published: {port} -> {addr}"),
                Err(e) => format!("port {port} was not published: {e}"),
            });
        }
        outcome.duration = started.elapsed();
        lease.slot = lease.slot.take().filter(|_| !end);
        outcome.ended_by_call = end;
        outcome.ended_after = lease.release();
        Ok(outcome)
    }

    /// [`Sessions::fork`] when `from` is given; on a refusal the lease is
    /// released (a session it made is removed again).
    async fn start_from(
        &self,
        lease: &mut lease::Lease<'_>,
        from: Option<&Origin>,
        env: &Arc<Env>,
    ) -> Result<Option<String>, Error> {
        let Some(origin) = from else { return Ok(None) };
        match self.fork(lease, origin, env).await {
            Ok(line) => Ok(Some(line)),
            Err(e) => {
                if !matches!(lease.slot, Some(Slot::Jail(_))) {
                    lease.slot = None;
                }
                lease.release();
                Err(e)
            }
        }
    }

    /// Puts in `lease`'s slot a fresh jail whose layer is a copy of the
    /// files `origin` names (the jail it replaces, of the same session, is
    /// killed); returns the line that says so. The source session is held
    /// while it is copied, and given back whatever happens.
    async fn fork(
        &self,
        lease: &mut lease::Lease<'_>,
        origin: &Origin,
        env: &Arc<Env>,
    ) -> Result<String, Error> {
        let source = origin.session.as_str();
        let unknown = || {
            Error::Fork(ForkRefused::UnknownSession {
                session: source.to_owned(),
                open: self.open_names(),
            })
        };
        if source == lease.name {
            let Some(Slot::Jail(jail)) = &mut lease.slot else {
                return Err(unknown());
            };
            let (jail, calls) = self.started_from(&lease.name, env, jail, origin).await?;
            lease.slot = Some(Slot::Jail(Box::new(jail.counting(calls))));
        } else {
            if matches!(lease.slot, Some(Slot::Jail(_))) {
                return Err(Error::Fork(ForkRefused::Open {
                    session: lease.name.clone(),
                    from: source.to_owned(),
                }));
            }
            let bound = self.env_of(source).map(|(env, _)| env.name.clone());
            let mut open = self.inner.acquire_open(source).map_err(|e| match e {
                OutputUnreadable::Busy => Error::Busy {
                    session: source.to_owned(),
                    within_s: None,
                },
                _ => unknown(),
            })?;
            let started = match (&mut open.slot, bound) {
                (Some(Slot::Jail(jail)), Some(bound)) if bound == env.name => {
                    self.started_from(&lease.name, env, jail, origin).await
                }
                (Some(Slot::Jail(_)), Some(bound)) => Err(Error::EnvMismatch {
                    session: source.to_owned(),
                    bound,
                    requested: env.name.clone(),
                }),
                _ => Err(unknown()),
            };
            open.release();
            lease.slot = Some(Slot::Jail(Box::new(started?.0)));
        }
        let what = match origin.number {
            Some(asked) => format!("{source}@{asked}"),
            None => source.to_owned(),
        };
        Ok(format!(
            "started from {what}: its /workspace and project changes; a fresh interpreter \
             (its state is not copied)"
        ))
    }

    /// What a session starts from in `jail`, the source's: its layer's
    /// root, the checkpoint `origin` names (`None`: its files as they are
    /// now) and the source's calls so far.
    fn source_facts(
        &self,
        jail: &jail::Jail,
        origin: &Origin,
    ) -> Result<(std::os::fd::OwnedFd, Option<u64>, u64), Error> {
        let session = origin.session.as_str().to_owned();
        let kept: Vec<u64> = jail.history.list.iter().map(|c| c.number).collect();
        let calls = jail.history.calls;
        let why = if !jail.has_session_layer() {
            Some(
                "its sandbox keeps no session layer (a sandbox built before forks, or a server \
                 that could make no layers directory in /var/tmp: its start-up log says why)",
            )
        } else if origin.number.is_none() {
            None
        } else if self.inner.settings.max_checkpoints == 0 {
            Some(
                "checkpoints are off here (NIX_SANDBOX_MAX_CHECKPOINTS=0); `from` without `@N` \
                 copies its files as they are now",
            )
        } else if kept.is_empty() {
            Some("none was kept yet (one is kept at the end of each call that changed a file)")
        } else {
            None
        };
        if let Some(why) = why {
            let why = why.to_owned();
            return Err(Error::Fork(ForkRefused::NoCheckpoints { session, why }));
        }
        // A call that changed nothing kept no checkpoint: its end is the
        // last one kept before it (the oldest go first, so none between
        // them was dropped).
        let number = match origin.number {
            None => None,
            Some(asked) => {
                let found = kept.iter().rev().find(|n| **n <= asked).copied();
                let Some(number) = found.filter(|_| asked <= calls) else {
                    let refused = ForkRefused::UnknownCheckpoint {
                        session,
                        asked,
                        kept,
                    };
                    return Err(Error::Fork(refused));
                };
                Some(number)
            }
        };
        let root = jail.layer_root().map_err(|e| {
            let why = format!("its layer cannot be read: {e}");
            Error::Fork(ForkRefused::NoCheckpoints { session, why })
        })?;
        Ok((root, number, calls))
    }

    /// A fresh jail of session `name` starting from what `origin` names in
    /// `source`, and the source's calls so far. Where the server keeps
    /// checkpoints and the host lets it mount them (a root server: idmapped,
    /// project_check.rs), at the cost of a mount: over
    /// checkpoint `N` of `from: NAME@N`, or over one kept now of `from:
    /// NAME`'s files (jail.rs, `freeze_now`); otherwise, or when none can
    /// be kept now, by copying them (a session itself mounted over
    /// checkpoints cannot be copied: refused).
    async fn started_from(
        &self,
        name: &str,
        env: &Arc<Env>,
        source: &mut jail::Jail,
        origin: &Origin,
    ) -> Result<(jail::Jail, u64), Error> {
        let (root, number, calls) = self.source_facts(source, origin)?;
        let most = self.inner.settings.max_checkpoints;
        let spawner = &self.inner.spawner;
        let mounts = spawner.project.as_ref().is_some_and(|l| l.mounted_forks());
        if most == 0 || !mounts {
            return Ok((self.restored_jail(name, env, root, number).await?, calls));
        }
        let refused = |why: String| {
            let session = origin.session.as_str().to_owned();
            Error::Fork(ForkRefused::NoCheckpoints { session, why })
        };
        if source.depth() >= jail::MAX_LOWERS {
            return Err(refused(format!(
                "it was itself started from a chain of {} checkpoints, the most a session \
                 stacks; start from a session earlier in that chain, or copy files by hand",
                jail::MAX_LOWERS
            )));
        }
        let number = match number {
            Some(number) => Some(number),
            None => source.freeze_now(most).await,
        };
        let Some(number) = number else {
            if source.depth() > 0 {
                return Err(refused(
                    "its files changed since its last checkpoint and none can be kept now \
                     (no space left in its workspace_mb); start from its last checkpoint \
                     (NAME@N)"
                        .into(),
                ));
            }
            return Ok((self.restored_jail(name, env, root, None).await?, calls));
        };
        let mut jail = self.inner.spawn(name, env, true)?;
        let idmapped = spawner.host.jail_users.is_some();
        match jail.mounted_over(source, number, idmapped).await {
            Ok(()) => Ok((jail, calls)),
            Err(e) => Err(not_started(name, env, "mounting the checkpoint", e)),
        }
    }

    /// A fresh jail of session `name` whose layer is filled from the
    /// source's layer at `root` (checkpoint `number`, or its live files).
    async fn restored_jail(
        &self,
        name: &str,
        env: &Arc<Env>,
        root: std::os::fd::OwnedFd,
        number: Option<u64>,
    ) -> Result<jail::Jail, Error> {
        let mut jail = self.inner.spawn(name, env, true)?;
        match jail.restored(root, number).await {
            Ok(()) => Ok(jail),
            Err(e) => Err(not_started(name, env, "copying the files", e)),
        }
    }

    /// The open sessions' names, sorted.
    fn open_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.inner.lock().open.keys().cloned().collect();
        names.sort();
        names
    }

    /// Whether session `name` is open.
    pub fn is_open(&self, name: &str) -> bool {
        self.inner.lock().open.contains_key(name)
    }

    /// The environment of session `name`, when it is open, and whether its
    /// jail is running and idle (a call to it starts no jail).
    pub fn env_of(&self, name: &str) -> Option<(Arc<Env>, bool)> {
        self.inner.lock().open.get(name).map(|e| {
            let running = matches!(&e.slot, Some(Slot::Jail(jail)) if !jail.has_exited());
            (Arc::clone(&e.env), running)
        })
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

impl Sessions {
    /// The unified diff of session `name`'s project layer (for
    /// `resources/read`): the session must be open and not running a call.
    pub async fn read_diff(&self, name: &str) -> Result<String, OutputUnreadable> {
        let mut lease = self.inner.acquire_open(name)?;
        let layer = match &lease.slot {
            Some(Slot::Jail(jail)) if !jail.has_exited() => jail.layer(),
            _ => None,
        };
        lease.release();
        let Some(layer) = layer else {
            return Err(OutputUnreadable::Gone(format!(
                "session `{name}` has no project layer (the project is read-only, or its \
                 sandbox stopped)"
            )));
        };
        let read = tokio::task::spawn_blocking(move || layer.changes(Bounds::default())).await;
        match read {
            Ok(Ok(changes)) => {
                let mut text = format!("# project: {}\n", changes.summary());
                text.push_str(&changes.diff);
                Ok(text)
            }
            Ok(Err(e)) => Err(OutputUnreadable::Gone(format!(
                "the project layer cannot be read: {e}"
            ))),
            Err(e) => Err(OutputUnreadable::Broken(e.to_string())),
        }
    }
}

/// The line a call's result ends with when session `name`'s project layer
/// (in the jail of `slot`) changed since its changes were last told.
async fn project_changes(slot: Option<&Slot>, name: &str) -> Option<String> {
    let Some(Slot::Jail(jail)) = slot else {
        return None;
    };
    let layer = jail.layer()?;
    let changed = tokio::task::spawn_blocking(move || layer.changed(Bounds::default()));
    let changes = changed.await.ok()??;
    Some(format!(
        "project: {} (diff: {})",
        changes.summary(),
        project::diff_uri(name)
    ))
}

/// The jail of session `name`'s slot, started when the slot has none or
/// its jail died between calls (`ended_before` then says so).
fn ready<'l>(
    slot: &'l mut Option<Slot>,
    (inner, name): (&Inner, &str),
    env: &Arc<Env>,
    ended_before: &mut Option<String>,
) -> Result<&'l mut jail::Jail, Error> {
    if let Some(Slot::Jail(jail)) = slot
        && jail.has_exited()
    {
        tracing::warn!(session = name, log = %jail.log_tail(), "a session jail died between calls");
        *ended_before = Some("its sandbox stopped after the last call".into());
        *slot = Some(Slot::Empty);
    }
    if !matches!(slot, Some(Slot::Jail(_))) {
        *slot = Some(Slot::Jail(Box::new(inner.spawn(name, env, false)?)));
    }
    match slot {
        Some(Slot::Jail(jail)) => Ok(jail),
        _ => unreachable!("a jail was just put in the slot"),
    }
}

/// Session `name` of `env` did not start from another: `doing` (what
/// failed, `copying the files`) failed with `e`.
fn not_started(name: &str, env: &Env, doing: &str, e: std::io::Error) -> Error {
    tracing::warn!(
        session = name,
        "starting from another session failed: {doing}: {e}"
    );
    Error::NotStarted(crate::wrapper::NotStarted::session(
        env,
        crate::wrapper::StartError::Spawn(std::io::Error::other(format!(
            "{doing} it starts from failed: {e}"
        ))),
    ))
}

/// The line saying which checkpoint the call's end was kept as (and which
/// were dropped for it), or why none was.
async fn checkpoint_line(jail: &mut jail::Jail, name: &str, most: usize) -> Option<String> {
    if most == 0 || !jail.has_session_layer() {
        return None;
    }
    let (kept, dropped) = jail.checkpoint(most).await;
    let dropped = match dropped.as_slice() {
        [] => String::new(),
        numbers => {
            let list: Vec<String> = numbers.iter().map(|n| format!("{name}@{n}")).collect();
            format!(" (dropped {}: the oldest go first)", list.join(", "))
        }
    };
    match kept {
        Ok(Some(number)) => Some(format!("checkpoint: {name}@{number}{dropped}")),
        Ok(None) => None,
        Err(why) => {
            tracing::warn!(session = name, "checkpoint not kept: {why}");
            Some(format!(
                "checkpoint: none kept for this call ({why}){dropped}"
            ))
        }
    }
}

/// `inner`, shared, and counted among the tables whose idle sessions the
/// server may end for another client (admission.rs).
fn registered(inner: Inner) -> Arc<Inner> {
    let inner = Arc::new(inner);
    let dynamic: Arc<dyn IdleSessions> = inner.clone();
    inner.slots.register(Arc::downgrade(&dynamic));
    inner
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.inner.close("the MCP client went away");
    }
}
