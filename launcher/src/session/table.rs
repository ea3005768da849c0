//! The session table's state: which sessions are open, when they end
//! (idle, lifetime, shutdown) and what is remembered of the ended ones. How
//! one call holds a session is lease.rs's; the calls themselves are
//! session/mod.rs's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::Error;
use super::jail::{CpuSource, Jail};
use super::lease::Running;
use super::warm::{Pool, Took};
use crate::admission::{IdleSession, IdleSessions, OpenSession, SessionSlots, Slot as Place};
use crate::catalog::Env;
use crate::settings;
use crate::wrapper::{NotStarted, Spawner};

/// How many ended sessions are remembered, to tell the next call why its
/// session is new.
const REMEMBER_ENDED: usize = 64;

/// The limits of the session table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Sessions open at once in this table (one client's).
    pub max_sessions: usize,
    /// Sessions open at once in every table together (admission.rs).
    pub max_total: usize,
    pub idle_timeout: Duration,
    pub max_lifetime: Duration,
    /// Checkpoints kept per session (0: none, and no `from`).
    pub max_checkpoints: usize,
}

/// The defaults config.rs declares.
impl Default for Settings {
    fn default() -> Self {
        Self {
            max_sessions: usize::try_from(settings::MAX_SESSIONS.number()).unwrap_or(usize::MAX),
            max_total: usize::try_from(settings::MAX_SESSIONS_TOTAL.number()).unwrap_or(usize::MAX),
            idle_timeout: Duration::from_secs(settings::SESSION_IDLE_TIMEOUT.number()),
            max_lifetime: Duration::from_secs(settings::SESSION_MAX_LIFETIME.number()),
            max_checkpoints: usize::try_from(settings::MAX_CHECKPOINTS.number())
                .unwrap_or(usize::MAX),
        }
    }
}

/// How often the reaper looks at idle sessions' CPU time: background
/// processes can use this much (times the CPUs) past the budget.
const CPU_CHECK_EVERY: Duration = Duration::from_secs(2);

/// A session's CPU budget: its environment's `cpu_s`, for all its
/// processes together across its calls (RLIMIT_CPU holds each process
/// alone).
pub fn cpu_budget(env: &Env) -> Duration {
    Duration::from_secs(env.limits.cpu_s.get())
}

/// Why a session whose processes used `budget` ends.
pub fn cpu_spent(budget: Duration) -> String {
    format!(
        "its processes used its CPU budget of {} s (cpu_s, all of them across its calls)",
        budget.as_secs()
    )
}

impl Settings {
    /// How often the reaper looks: often enough for short test values.
    fn tick(&self) -> Duration {
        (self.idle_timeout.min(self.max_lifetime) / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// The table and what it needs to start jails.
pub struct Inner {
    pub settings: Settings,
    /// New sessions get a name made by the server
    /// ([`super::Sessions::server_named`]).
    pub server_named: bool,
    /// What starts the jails; its shutdown token: the server is
    /// stopping, calls end, jails are killed.
    pub spawner: Spawner,
    /// The sessions of every table together.
    pub slots: SessionSlots,
    /// Warm jails, which a new session takes when one is ready.
    pub pool: Pool,
    table: Mutex<Table>,
}

#[derive(Default)]
pub struct Table {
    pub open: HashMap<String, Entry>,
    /// Recently ended sessions and why, newest last.
    pub ended: VecDeque<(String, String)>,
    /// Set at shutdown: no new session starts.
    pub closed: bool,
    reaper_started: bool,
}

pub struct Entry {
    pub env: Arc<Env>,
    pub created: Instant,
    pub last_used: Instant,
    /// `None` while a call holds the jail.
    pub slot: Option<Slot>,
    /// The call holding the jail, if one does.
    pub running: Option<Running>,
    /// Its place among every client's sessions (admission.rs: whose it
    /// is), given back with the entry.
    pub place: Place,
}

/// An idle session's jail; `Empty` when its restart failed (the next call
/// starts one).
pub enum Slot {
    /// Boxed: an empty slot takes no jail's room.
    Jail(Box<Jail>),
    Empty,
}

impl Inner {
    pub fn new(
        settings: Settings,
        spawner: Spawner,
        slots: SessionSlots,
        pool: Pool,
        server_named: bool,
    ) -> Self {
        Self {
            settings,
            server_named,
            spawner,
            slots,
            pool,
            table: Mutex::new(Table::default()),
        }
    }

    /// Starts a jail for session `name`; `restore`: its wrapper waits for
    /// its layer to be filled from a checkpoint (Jail::restored). A fresh
    /// session takes a warm jail when one is ready (warm.rs), and a
    /// replacement starts in the background either way.
    pub fn spawn(&self, name: &str, env: &Arc<Env>, restore: bool) -> Result<Jail, Error> {
        if !restore {
            let took = self.pool.take(env);
            self.pool.refill(env);
            if let Took::Warm(jail) = took {
                tracing::info!(session = name, "the session took a warm jail");
                return Ok(*jail);
            }
        }
        Jail::spawn(env, &self.spawner, name, restore).map_err(|cause| {
            tracing::error!(session = name, env = %env.name, error = %cause, "cannot start the session jail");
            Error::from(NotStarted::session(env, cause))
        })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes the idle sessions that are due; their jails are returned, to
    /// be dropped (killed) once the table is unlocked.
    pub fn expire(&self, table: &mut Table, now: Instant) -> Vec<Slot> {
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

    /// Removes the idle sessions whose processes used their CPU budget,
    /// background ones included; their jails are returned, to be dropped
    /// (killed). The processes are looked at without the table locked, and
    /// off the runtime's thread: as an unprivileged user each session's
    /// reading walks its tree in /proc, dozens of syscalls, which would
    /// hold up every call running meanwhile.
    pub async fn end_over_budget(&self) -> Vec<Slot> {
        let idle: Vec<(String, i32, CpuSource, Duration)> = {
            let table = self.lock();
            table
                .open
                .iter()
                .filter_map(|(name, e)| match &e.slot {
                    Some(Slot::Jail(jail)) => Some((
                        name.clone(),
                        jail.pid(),
                        jail.cpu_source(),
                        cpu_budget(&e.env),
                    )),
                    _ => None,
                })
                .collect()
        };
        if idle.is_empty() {
            return Vec::new();
        }
        let over = tokio::task::spawn_blocking(move || {
            idle.into_iter()
                .filter_map(|(name, pid, cpu, budget)| {
                    let used = cpu.read()?;
                    (used >= budget).then_some((name, pid, budget, used))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        if over.is_empty() {
            return Vec::new();
        }
        let mut table = self.lock();
        let mut slots = Vec::new();
        for (name, pid, budget, used) in over {
            // Still idle, in the same jail.
            let same = table
                .open
                .get(&name)
                .is_some_and(|e| matches!(&e.slot, Some(Slot::Jail(jail)) if jail.pid() == pid));
            if same && let Some(entry) = table.open.remove(&name) {
                let why = cpu_spent(budget);
                tracing::warn!(session = %name, used_ms = used.as_millis() as u64, "session ended: {why}");
                slots.extend(entry.slot);
                remember(&mut table, name, why);
            }
        }
        slots
    }

    /// Starts the reaper task, once, with the first session.
    pub fn start_reaper(self: &Arc<Self>) {
        {
            let mut table = self.lock();
            if table.reaper_started {
                return;
            }
            table.reaper_started = true;
        }
        let weak: Weak<Inner> = Arc::downgrade(self);
        let shutdown = self.spawner.shutdown.clone();
        let tick = self.settings.tick();
        tokio::spawn(async move {
            let mut cpu_checked = tokio::time::Instant::now();
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
                if cpu_checked.elapsed() >= CPU_CHECK_EVERY {
                    cpu_checked = tokio::time::Instant::now();
                    drop(inner.end_over_budget().await);
                }
            }
        });
    }

    /// Kills every idle session's jail and refuses new sessions; calls
    /// running now end by themselves (they watch the shutdown token) or
    /// are killed when they release their session.
    pub fn close(&self, why: &str) {
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

/// What [`SessionSlots::make_room`] sees of this table, and ends in it.
impl IdleSessions for Inner {
    fn idle(&self) -> Vec<IdleSession> {
        let s = &self.settings;
        let table = self.lock();
        (table.open.iter())
            .filter(|(_, e)| e.slot.is_some())
            .map(|(name, e)| IdleSession {
                name: name.clone(),
                client: e.place.client().clone(),
                last_used: e.last_used,
                ends_at: (e.last_used + s.idle_timeout).min(e.created + s.max_lifetime),
            })
            .collect()
    }

    fn end_idle(&self, name: &str, why: String) -> bool {
        let ended = {
            let mut table = self.lock();
            if table.open.get(name).is_none_or(|e| e.slot.is_none()) {
                return false;
            }
            let ended = table.open.remove(name);
            remember(&mut table, name.to_owned(), why.clone());
            ended
        };
        tracing::info!(session = name, "session ended: {why}");
        // Its jail is killed here, the table unlocked.
        drop(ended);
        true
    }

    fn describe(&self) -> Vec<OpenSession> {
        let table = self.lock();
        (table.open.iter())
            .map(|(name, e)| {
                let jail = match &e.slot {
                    Some(Slot::Jail(jail)) => Some(jail),
                    _ => None,
                };
                OpenSession {
                    name: name.clone(),
                    env: e.env.name.clone(),
                    client: e.place.client().as_str().to_owned(),
                    created: e.created,
                    last_used: e.last_used,
                    busy: e.slot.is_none(),
                    calls: jail.map(|j| j.history.calls),
                    checkpoints: jail.map(|j| j.history.list.len()),
                    layer_bytes: jail.and_then(|j| layer_used(j)),
                    layer_max_bytes: e.env.limits.workspace_mb.get().saturating_mul(1 << 20),
                    profile: e.env.profile.as_ref().map(|p| p.name.clone()),
                }
            })
            .collect()
    }

    fn exec(
        &self,
        name: String,
        argv: Vec<String>,
        terminal: Option<crate::admission::Terminal>,
        chunks: tokio::sync::mpsc::Sender<crate::admission::Chunk>,
        stop: tokio_util::sync::CancellationToken,
    ) -> std::pin::Pin<
        Box<
            dyn Future<Output = Result<crate::admission::ExecEnd, crate::admission::ExecRefused>>
                + Send
                + '_,
        >,
    > {
        Box::pin(async move {
            self.exec_for_person(&name, argv, terminal, chunks, stop)
                .await
        })
    }

    fn cancel_call(&self, name: &str) -> bool {
        let table = self.lock();
        let Some(entry) = table.open.get(name) else {
            return false;
        };
        if let Some(running) = &entry.running
            && entry.slot.is_none()
        {
            running.cancel.cancel();
        }
        true
    }
}

/// The bytes used on an idle jail's layer (its tmpfs), when it keeps one.
fn layer_used(jail: &Jail) -> Option<u64> {
    let root = jail.layer_root().ok()?;
    let stat = rustix::fs::fstatvfs(&root).ok()?;
    Some(
        stat.f_blocks
            .saturating_sub(stat.f_bfree)
            .saturating_mul(stat.f_frsize),
    )
}

/// Remembers why session `name` ended.
pub fn remember(table: &mut Table, name: String, why: String) {
    if table.ended.len() >= REMEMBER_ENDED {
        table.ended.pop_front();
    }
    table.ended.push_back((name, why));
}

#[cfg(test)]
mod tests {
    use super::*;

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
