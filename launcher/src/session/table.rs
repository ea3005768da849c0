//! The session table's state and rules: which sessions are open, which
//! call holds which jail (a [`Lease`]), when sessions end (idle, lifetime,
//! shutdown) and what is remembered of the ended ones. The calls themselves
//! are session/mod.rs's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::call::{INTERRUPT_GRACE, WRITE_GRACE};
use super::jail::Jail;
use super::names::{SessionName, server_name};
use super::{Error, OutputUnreadable};
use crate::catalog::Env;
use crate::config;
use crate::wrapper::host::Host;
use crate::wrapper::{NotStarted, WrapperEnv};

/// How many ended sessions are remembered, to tell the next call why its
/// session is new.
const REMEMBER_ENDED: usize = 64;

/// How long a call waits for a session whose running call was cancelled:
/// the interrupt, its grace, and a reset's fresh jail.
pub const WAIT_AFTER_CANCEL: Duration =
    Duration::from_secs(INTERRUPT_GRACE.as_secs() + WRITE_GRACE.as_secs() + 2);
/// How often a waiting call looks whether the session was released.
const WAIT_POLL: Duration = Duration::from_millis(5);

/// The limits of the session table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub max_sessions: usize,
    pub idle_timeout: Duration,
    pub max_lifetime: Duration,
}

/// The defaults config.rs declares.
impl Default for Settings {
    fn default() -> Self {
        Self {
            max_sessions: usize::try_from(config::MAX_SESSIONS.number()).unwrap_or(usize::MAX),
            idle_timeout: Duration::from_secs(config::SESSION_IDLE_TIMEOUT.number()),
            max_lifetime: Duration::from_secs(config::SESSION_MAX_LIFETIME.number()),
        }
    }
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
    settings: Settings,
    /// New sessions get a name made by the server
    /// ([`super::Sessions::server_named`]).
    server_named: bool,
    wrapper_env: WrapperEnv,
    host: Arc<Host>,
    /// The server is stopping: calls end, jails are killed.
    pub shutdown: CancellationToken,
    table: Mutex<Table>,
}

#[derive(Default)]
pub struct Table {
    pub open: HashMap<String, Entry>,
    /// Recently ended sessions and why, newest last.
    ended: VecDeque<(String, String)>,
    /// Set at shutdown: no new session starts.
    closed: bool,
    reaper_started: bool,
}

pub struct Entry {
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
pub enum Slot {
    Jail(Jail),
    Empty,
}

/// Why a session cannot be had now.
enum Unavailable {
    Refused(Error),
    /// A call holds it (a call of this server's, or a read of an output).
    Busy(Option<Running>),
}

impl From<Error> for Unavailable {
    fn from(e: Error) -> Self {
        Self::Refused(e)
    }
}

impl Inner {
    pub fn new(
        settings: Settings,
        wrapper_env: WrapperEnv,
        host: Arc<Host>,
        shutdown: CancellationToken,
        server_named: bool,
    ) -> Self {
        Self {
            settings,
            server_named,
            wrapper_env,
            host,
            shutdown,
            table: Mutex::new(Table::default()),
        }
    }

    /// [`Inner::acquire`], waiting up to [`WAIT_AFTER_CANCEL`] while the call
    /// holding the session has been cancelled and is being interrupted.
    pub async fn acquire_waiting(
        &self,
        name: &SessionName,
        env: &Arc<Env>,
        cancel: &CancellationToken,
    ) -> Result<Lease<'_>, Error> {
        let give_up = Instant::now() + WAIT_AFTER_CANCEL;
        loop {
            match self.acquire(name, env, cancel) {
                Ok(lease) => return Ok(lease),
                Err(Unavailable::Refused(e)) => return Err(e),
                Err(Unavailable::Busy(running)) => {
                    let now = Instant::now();
                    let settling = running.as_ref().is_some_and(|r| r.cancel.is_cancelled());
                    if !settling || now >= give_up || cancel.is_cancelled() {
                        let within = running.map(|r| {
                            r.ends_by
                                .saturating_duration_since(now)
                                .as_secs_f64()
                                .ceil() as u64
                        });
                        return Err(Error::Busy {
                            session: name.to_string(),
                            within_s: within,
                        });
                    }
                    tokio::time::sleep(WAIT_POLL).await;
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
        asked: &SessionName,
        env: &Arc<Env>,
        cancel: &CancellationToken,
    ) -> Result<Lease<'_>, Unavailable> {
        let name = asked.as_str();
        let now = Instant::now();
        let (lease, expired) = {
            let mut table = self.lock();
            let expired = self.expire(&mut table, now);
            if table.closed {
                return Err(Error::Stopping {
                    env: env.name.clone(),
                }
                .into());
            }
            let lease = match table.open.get_mut(name) {
                Some(entry) if entry.env.name != env.name => {
                    return Err(Error::EnvMismatch {
                        session: name.to_owned(),
                        bound: entry.env.name.clone(),
                        requested: env.name.clone(),
                    }
                    .into());
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
                        return Err(Error::TooMany {
                            max: self.settings.max_sessions,
                            open: names,
                            idle_s: self.settings.idle_timeout.as_secs(),
                        }
                        .into());
                    }
                    let ended_before = table
                        .ended
                        .iter()
                        .rposition(|(n, _)| n == name)
                        .and_then(|i| table.ended.remove(i))
                        .map(|(_, why)| why);
                    let name = if self.server_named {
                        server_name(asked, |n| table.open.contains_key(n)).to_string()
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
    pub fn acquire_open(&self, name: &str) -> Result<Lease<'_>, OutputUnreadable> {
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
    pub fn spawn(&self, name: &str, env: &Env) -> Result<Jail, Error> {
        Jail::spawn(&env.session, &self.wrapper_env, &self.host, name).map_err(|cause| {
            tracing::error!(session = name, env = %env.name, error = %cause, "cannot start the session jail");
            Error::from(NotStarted::session(env, cause))
        })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
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
    pub fn start_reaper(self: &Arc<Self>) {
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

/// Remembers why session `name` ended.
fn remember(table: &mut Table, name: String, why: String) {
    if table.ended.len() >= REMEMBER_ENDED {
        table.ended.pop_front();
    }
    table.ended.push_back((name, why));
}

/// One call's hold on a session. Released, it puts the jail back; dropped
/// without being released (the call was abandoned), it ends the session.
pub struct Lease<'a> {
    inner: &'a Inner,
    pub name: String,
    pub slot: Option<Slot>,
    pub ended_before: Option<String>,
    released: bool,
    /// The server named the session (a new one, in a table that does).
    pub named_by_server: bool,
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
    pub fn release(&mut self) -> bool {
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
    fn the_reaper_looks_often_enough_for_short_timeouts() {
        let s = Settings {
            idle_timeout: Duration::from_secs(2),
            ..Settings::default()
        };
        assert_eq!(s.tick(), Duration::from_millis(500));
        assert_eq!(Settings::default().tick(), Duration::from_secs(1));
    }
}
