//! One call's hold on a session ([`Lease`]): how a call gets a session (made
//! when new, refused when busy or another environment's or one too many,
//! waited for right after a cancelled call), and gives it back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::call::{INTERRUPT_GRACE, WRITE_GRACE};
use super::names::{SessionName, server_name};
use super::table::{Entry, Inner, Slot, remember};
use super::{Error, OutputUnreadable};
use crate::admission::{ClientKey, Full};
use crate::catalog::Env;

/// How long a call waits for a session whose running call was cancelled:
/// the interrupt, its grace, and a reset's fresh jail.
pub const WAIT_AFTER_CANCEL: Duration =
    Duration::from_secs(INTERRUPT_GRACE.as_secs() + WRITE_GRACE.as_secs() + 2);
/// How long a call to a busy session waits for a cancellation of the
/// running call that may be on its way: over HTTP the cancel and the next
/// call are separate requests, and the TypeScript SDK sends both at once,
/// so the call can come first.
pub const BUSY_GRACE: Duration = Duration::from_millis(250);
/// How often a waiting call looks whether the session was released.
const WAIT_POLL: Duration = Duration::from_millis(5);

/// The call holding a session.
#[derive(Clone)]
pub struct Running {
    pub cancel: CancellationToken,
    /// When it ends at the latest: its timeout, then the interrupt's grace.
    pub ends_by: Instant,
}

impl Running {
    pub fn new(cancel: &CancellationToken, env: &Env, now: Instant) -> Self {
        let timeout = Duration::from_secs(env.limits.timeout_s.get());
        Self {
            cancel: cancel.clone(),
            ends_by: now + timeout + INTERRUPT_GRACE + WRITE_GRACE,
        }
    }
}

/// Why a session cannot be had now.
enum Unavailable {
    Refused(Error),
    /// A call holds it (a call of this server's, or a read of an output).
    Busy(Option<Running>),
    /// It is new, and no session slot is free for its client.
    Full(Full),
}

/// How many times a new session may have an idle session of a client
/// beyond its share ended for it, when others take each freed slot first.
const MAKE_ROOM_TRIES: usize = 3;

impl From<Error> for Unavailable {
    fn from(e: Error) -> Self {
        Self::Refused(e)
    }
}

impl Inner {
    /// [`Inner::acquire`], waiting up to [`WAIT_AFTER_CANCEL`] while the call
    /// holding the session has been cancelled and is being interrupted, and
    /// up to [`BUSY_GRACE`] for a cancellation on its way; a new session of
    /// `client` that finds no slot free has an idle session of a client
    /// beyond its share ended for it, when there is one.
    pub async fn acquire_waiting(
        &self,
        client: &ClientKey,
        name: &SessionName,
        env: &Arc<Env>,
        cancel: &CancellationToken,
    ) -> Result<Lease<'_>, Error> {
        let started = Instant::now();
        let mut room_made = 0;
        loop {
            match self.acquire(client, name, env, cancel) {
                Ok(lease) => return Ok(lease),
                Err(Unavailable::Refused(e)) => return Err(e),
                Err(Unavailable::Full(full)) => {
                    if room_made < MAKE_ROOM_TRIES && self.slots.make_room(client) {
                        room_made += 1;
                        continue;
                    }
                    return Err(self.no_slot(client, &full));
                }
                Err(Unavailable::Busy(running)) => {
                    let now = Instant::now();
                    let settling = running.as_ref().is_some_and(|r| r.cancel.is_cancelled());
                    let wait = if settling {
                        WAIT_AFTER_CANCEL
                    } else {
                        BUSY_GRACE
                    };
                    if now >= started + wait || cancel.is_cancelled() {
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
        client: &ClientKey,
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
                Some(entry) if entry.env.added != env.added => {
                    return Err(Error::PackagesMismatch {
                        session: name.to_owned(),
                        bound: entry.env.added.clone(),
                        requested: env.added.clone(),
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
                    let place = self.slots.admit(client).map_err(Unavailable::Full)?;
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
                            place,
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

    /// Why a new session of `client` gets no slot (`full`): the server's
    /// limit, or its share while others want slots.
    fn no_slot(&self, client: &ClientKey, full: &Full) -> Error {
        let idle_s = self.settings.idle_timeout.as_secs();
        let beyond = full.beyond_share();
        tracing::warn!(
            max = full.max,
            held = full.held,
            share = full.share,
            beyond,
            "session refused: no slot for this client"
        );
        let first_end_s = |own: bool| {
            let first = self.slots.first_end(own.then_some(client));
            first.map(|d| d.as_secs_f64().ceil() as u64)
        };
        if beyond {
            Error::BeyondShare {
                held: full.held,
                share: full.share,
                max: full.max,
                idle_s,
                first_end_s: first_end_s(true),
            }
        } else {
            Error::ServerFull {
                max: full.max,
                idle_s,
                first_end_s: first_end_s(false),
            }
        }
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
