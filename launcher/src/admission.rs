//! What the server runs at once, all clients together, and each client's
//! fair share of it: no client (nor several) can start more jails than the
//! machine holds, and no client locks another out.
//!
//! - runs ([`Runs`]): a plain run's jail, or the throwaway session jail of
//!   a run given files. At most `--max-runs` at once. A run that finds no
//!   slot it may take waits in line up to [`QUEUE_WAIT`], then is refused,
//!   naming the limit and when a slot frees at the latest.
//! - session jails ([`SessionSlots`]): at most `--max-sessions-total` open
//!   sessions in every client's table together (each client also has its
//!   own `--max-sessions`). A new session is never kept waiting (a session
//!   lasts minutes): when no slot is free, for a client within its share
//!   the server ends the least recently used idle session of a client
//!   beyond its share ([`SessionSlots::make_room`]); otherwise the session
//!   is refused.
//!
//! Fair shares ([`Shares`]). A client ([`ClientKey`]) is an MCP session
//! over HTTP; all HTTP requests without one are one client together (they
//! carry nothing that tells one sender from another); a stdio server has
//! one client, whose share is the whole server. A client may hold up to its
//! share of each kind (`--client-runs-share`, `--client-sessions-share`).
//! Beyond it, it takes a free slot only while no client within its share
//! waits for one, and only when another slot stays free after it, so that
//! the next client to come starts at once. Runs waiting in line are let in
//! those of clients within their share first, each group in order of
//! arrival. A slot taken beyond the share is not taken back: a run ends by
//! its timeout, a session when it is idle and another client needs it.
//!
//! A slot ([`Slot`]) is held as long as what it admits: dropping it lets
//! the next one in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use std::future::Future;
use std::pin::Pin;

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::settings;

/// How long a run waits for a free slot before it is refused.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);

/// One client, as admission counts what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientKey(Arc<str>);

impl ClientKey {
    /// The one client of a stdio server.
    pub fn stdio() -> Self {
        Self("stdio".into())
    }

    /// Every HTTP request without an MCP session, together.
    pub fn stateless() -> Self {
        Self("stateless".into())
    }

    /// The sessions a person made with `nix-sandbox-mcp sandbox create`.
    pub fn person() -> Self {
        Self("cli".into())
    }

    /// The MCP session `id` over HTTP.
    pub fn mcp_session(id: &str) -> Self {
        Self(format!("mcp:{id}").into())
    }

    /// How the control socket names it: `stdio`, `stateless`, `mcp:ID`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What one client may hold while other clients want slots; `None` for a
/// server with one client (stdio), whose share is everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    pub runs: usize,
    pub sessions: usize,
}

/// Slots of one kind, shared fairly among clients.
#[derive(Debug)]
struct Pool {
    max: usize,
    /// What one client may hold while others want slots (at most `max`).
    share: usize,
    state: Mutex<State>,
    /// Told when a slot is given back, taken, or a waiter leaves the line.
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    held: HashMap<u64, Held>,
    /// Runs waiting for a slot, in order of arrival.
    line: Vec<(u64, ClientKey)>,
    next: u64,
}

#[derive(Debug)]
struct Held {
    client: ClientKey,
    /// When what the slot admits ends at the latest, if known.
    ends_by: Option<Instant>,
}

impl State {
    fn held_by(&self, client: &ClientKey) -> usize {
        self.held.values().filter(|h| &h.client == client).count()
    }

    fn ticket(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// No slot for a client: what it holds against its share and the limit,
/// and when a slot that would let it in frees at the latest, if known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub max: usize,
    pub share: usize,
    pub held: usize,
    pub frees_within: Option<Duration>,
}

impl Full {
    /// The client was refused for other clients' sake: it holds its share
    /// or more, of a limit it does not fill alone.
    pub fn beyond_share(&self) -> bool {
        self.held >= self.share && self.share < self.max
    }
}

impl Pool {
    fn new(max: usize, share: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            max,
            share: share.unwrap_or(max).min(max),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `client` may take a slot now: within its share, any free
    /// one; beyond it, only while no client within its share waits and
    /// another slot stays free after it.
    fn may_take(&self, st: &State, client: &ClientKey) -> bool {
        let free = self.max.saturating_sub(st.held.len());
        if free == 0 {
            return false;
        }
        if st.held_by(client) < self.share {
            return true;
        }
        let others_within =
            (st.line.iter()).any(|(_, c)| c != client && st.held_by(c) < self.share);
        free >= 2 && !others_within
    }

    /// The waiter whose turn it is: the first that may take a slot, those
    /// of clients within their share before the others.
    fn next_in_line(&self, st: &State) -> Option<u64> {
        let within = |c: &ClientKey| st.held_by(c) < self.share;
        let first = st.line.iter().filter(|(_, c)| within(c));
        let then = st.line.iter().filter(|(_, c)| !within(c));
        first
            .chain(then)
            .find(|(_, c)| self.may_take(st, c))
            .map(|(id, _)| *id)
    }

    fn grant(
        self: &Arc<Self>,
        st: &mut State,
        client: &ClientKey,
        ends_by: Option<Instant>,
    ) -> Slot {
        let id = st.ticket();
        let held = Held {
            client: client.clone(),
            ends_by,
        };
        st.held.insert(id, held);
        Slot {
            pool: Arc::clone(self),
            id,
            client: client.clone(),
        }
    }

    /// Why `client` gets no slot, and when one it could take frees.
    fn full(&self, st: &State, client: &ClientKey) -> Full {
        let mut full = Full {
            max: self.max,
            share: self.share,
            held: st.held_by(client),
            frees_within: None,
        };
        // Beyond its share, only its own slots would let it in.
        let beyond = full.beyond_share();
        let now = Instant::now();
        full.frees_within = (st.held.values())
            .filter(|h| !beyond || &h.client == client)
            .filter_map(|h| h.ends_by)
            .min()
            .map(|at| at.saturating_duration_since(now));
        full
    }

    /// A slot at once, if `client` may take one (nobody waits in line for
    /// sessions: they are never kept waiting).
    fn try_take(self: &Arc<Self>, client: &ClientKey) -> Result<Slot, Full> {
        let mut st = self.lock();
        if self.may_take(&st, client) {
            Ok(self.grant(&mut st, client, None))
        } else {
            Err(self.full(&st, client))
        }
    }

    /// A slot for `client`, waiting in line up to `wait`; it is taken as
    /// held for `hold` at the most.
    async fn take(
        self: &Arc<Self>,
        client: &ClientKey,
        wait: Duration,
        hold: Duration,
    ) -> Result<Slot, Full> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut waiter = InLine::join(self, client);
        loop {
            // Made before looking: a change from here on wakes it.
            let changed = self.changed.notified();
            {
                let mut st = self.lock();
                if self.next_in_line(&st) == Some(waiter.id) {
                    waiter.leave(&mut st);
                    let slot = self.grant(&mut st, client, Some(Instant::now() + hold));
                    drop(st);
                    // The next in line may take another.
                    self.changed.notify_waiters();
                    return Ok(slot);
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(self.full(&self.lock(), client));
            }
        }
    }
}

/// A run's place in line, left when it is let in or gives up.
struct InLine {
    pool: Arc<Pool>,
    id: u64,
    queued: bool,
}

impl InLine {
    fn join(pool: &Arc<Pool>, client: &ClientKey) -> Self {
        let mut st = pool.lock();
        let id = st.ticket();
        st.line.push((id, client.clone()));
        Self {
            pool: Arc::clone(pool),
            id,
            queued: true,
        }
    }

    fn leave(&mut self, st: &mut State) {
        st.line.retain(|(id, _)| *id != self.id);
        self.queued = false;
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        if self.queued {
            let pool = Arc::clone(&self.pool);
            self.leave(&mut pool.lock());
            // Whoever was behind it may take a slot now.
            pool.changed.notify_waiters();
        }
    }
}

/// One held slot; dropping it gives it back.
#[derive(Debug)]
pub struct Slot {
    pool: Arc<Pool>,
    id: u64,
    client: ClientKey,
}

impl Slot {
    /// The client holding it.
    pub fn client(&self) -> &ClientKey {
        &self.client
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.lock().held.remove(&self.id);
        self.pool.changed.notify_waiters();
    }
}

/// The runs going on, all clients together.
#[derive(Debug, Clone)]
pub struct Runs {
    pool: Arc<Pool>,
}

impl Runs {
    /// At most `max` runs; `share`: one client's, `None` for one client.
    pub fn new(max: usize, share: Option<usize>) -> Self {
        Self {
            pool: Pool::new(max, share),
        }
    }

    /// A slot for one run of `client`, which ends within `hold`, waiting
    /// in line up to `wait`.
    pub async fn admit(
        &self,
        client: &ClientKey,
        wait: Duration,
        hold: Duration,
    ) -> Result<Slot, Full> {
        let admitted = self.pool.take(client, wait, hold).await;
        if let Err(full) = &admitted {
            tracing::warn!(
                max = full.max,
                held = full.held,
                share = full.share,
                "a run waited for a slot in vain"
            );
        }
        admitted
    }

    /// How many runs `client` has going.
    pub fn held_by(&self, client: &ClientKey) -> usize {
        self.pool.lock().held_by(client)
    }

    /// How many runs are going on.
    pub fn running(&self) -> usize {
        self.pool.lock().held.len()
    }

    /// The setting that raises the limit, for the refusal.
    pub fn setting() -> String {
        setting_names(&settings::MAX_RUNS)
    }

    /// The setting of one client's share, for the refusal.
    pub fn share_setting() -> String {
        setting_names(&settings::CLIENT_RUNS_SHARE)
    }
}

/// An idle session of some client's table, which the server may end for
/// another client ([`SessionSlots::make_room`]).
#[derive(Debug, Clone)]
pub struct IdleSession {
    pub name: String,
    pub client: ClientKey,
    pub last_used: Instant,
    /// When it ends unless it is called again (idle timeout, lifetime).
    pub ends_at: Instant,
}

/// A session table, as [`SessionSlots`] sees it.
pub trait IdleSessions: Send + Sync {
    /// Its sessions that no call holds.
    fn idle(&self) -> Vec<IdleSession>;
    /// Ends session `name` if it is still idle, telling its next call
    /// `why`; true when it ended (its slot is given back).
    fn end_idle(&self, name: &str, why: String) -> bool;
    /// Every open session, idle or in a call, as a person sees it
    /// (the control socket's `list`).
    fn describe(&self) -> Vec<OpenSession>;
    /// Cancels the call running in session `name`, if one does; true when
    /// the session is open.
    fn cancel_call(&self, name: &str) -> bool;
    /// Runs a person's `argv` in idle session `name`'s jail (the control
    /// socket's `exec`, or with `terminal` its `enter`), its output to
    /// `chunks`; `stop` kills it.
    fn exec(
        &self,
        name: String,
        argv: Vec<String>,
        terminal: Option<Terminal>,
        chunks: mpsc::Sender<Chunk>,
        stop: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<ExecEnd, ExecRefused>> + Send + '_>>;
}

/// A person's command's pseudo-terminal (`sandbox enter`): its first size
/// and what the person types into it. A command on one has no timeout: the
/// person ends it.
#[derive(Debug)]
pub struct Terminal {
    pub rows: u16,
    pub cols: u16,
    pub input: mpsc::Receiver<Keys>,
}

/// Something a person does to their command's terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// Bytes typed.
    Typed(Vec<u8>),
    Resize {
        rows: u16,
        cols: u16,
    },
}

/// A part of a person's command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// How a person's command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecEnd {
    /// Its exit code, or the signal that killed it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// It ran past the session's timeout and was killed.
    pub timed_out: bool,
}

/// Why a person's command did not run (or was not told to end): one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRefused {
    pub message: String,
    /// The program could not be started (the shell's 127).
    pub not_found: bool,
}

/// An open session as the control socket shows it (control/wire.rs).
#[derive(Debug, Clone)]
pub struct OpenSession {
    pub name: String,
    pub env: String,
    /// Whose it is: `stdio`, `stateless` or `mcp:ID` (ClientKey).
    pub client: String,
    pub created: Instant,
    pub last_used: Instant,
    /// A call holds it now.
    pub busy: bool,
    /// Its calls so far; unknown while a call holds its jail.
    pub calls: Option<u64>,
    /// Checkpoints its layer keeps; unknown while a call holds its jail.
    pub checkpoints: Option<usize>,
    /// Bytes its layer (`/workspace`, project changes, checkpoints) holds,
    /// when it keeps one and no call holds its jail.
    pub layer_bytes: Option<u64>,
    /// Its layer's size, the environment's `workspace_mb`.
    pub layer_max_bytes: u64,
    /// The profile a person made it under.
    pub profile: Option<String>,
}

/// The open sessions, all clients' tables together.
#[derive(Clone)]
pub struct SessionSlots {
    pool: Arc<Pool>,
    tables: Arc<Mutex<Vec<Weak<dyn IdleSessions>>>>,
}

impl SessionSlots {
    /// At most `max` sessions; `share`: one client's, `None` for one client.
    pub fn new(max: usize, share: Option<usize>) -> Self {
        Self {
            pool: Pool::new(max, share),
            tables: Arc::default(),
        }
    }

    /// A slot for one more session of `client`, if it may have one now.
    pub fn admit(&self, client: &ClientKey) -> Result<Slot, Full> {
        self.pool.try_take(client)
    }

    /// How many sessions `client` has open.
    pub fn held_by(&self, client: &ClientKey) -> usize {
        self.pool.lock().held_by(client)
    }

    /// Counts `table` among those whose idle sessions can be ended for
    /// another client, as long as it lives.
    pub fn register(&self, table: Weak<dyn IdleSessions>) {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        tables.retain(|t| t.strong_count() > 0);
        tables.push(table);
    }

    /// Every live table.
    pub fn tables(&self) -> Vec<Arc<dyn IdleSessions>> {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        tables.retain(|t| t.strong_count() > 0);
        tables.iter().filter_map(Weak::upgrade).collect()
    }

    /// Every live table's idle sessions.
    fn idle(&self) -> Vec<(Arc<dyn IdleSessions>, IdleSession)> {
        let per_table = self.tables().into_iter().map(|t| {
            let idle = t.idle();
            idle.into_iter().map(move |s| (Arc::clone(&t), s))
        });
        per_table.flatten().collect()
    }

    /// For `client`, within its share and finding no free slot: ends the
    /// least recently used idle session of another client beyond its
    /// share. True when one ended (a slot is free now, unless another
    /// client took it meanwhile).
    pub fn make_room(&self, client: &ClientKey) -> bool {
        let share = self.pool.share;
        if self.held_by(client) >= share {
            return false;
        }
        let victim = (self.idle().into_iter())
            .filter(|(_, s)| &s.client != client)
            .map(|(t, s)| (self.held_by(&s.client), t, s))
            .filter(|(held, _, _)| *held > share)
            .min_by_key(|(_, _, s)| s.last_used);
        let Some((held, table, session)) = victim else {
            return false;
        };
        let why = format!(
            "the server ended it for another client: it was the least recently used of this \
             client's {held} sessions, beyond its share of {share} ({}) while the server's {} \
             were all open",
            setting_names(&settings::CLIENT_SESSIONS_SHARE),
            self.pool.max
        );
        table.end_idle(&session.name, why)
    }

    /// How long until the first idle session ends unless called again
    /// (`client`'s own only, when given).
    pub fn first_end(&self, client: Option<&ClientKey>) -> Option<Duration> {
        let now = Instant::now();
        (self.idle().into_iter())
            .filter(|(_, s)| client.is_none_or(|c| &s.client == c))
            .map(|(_, s)| s.ends_at.saturating_duration_since(now))
            .min()
    }

    /// The setting that raises the limit, for the refusal.
    pub fn setting() -> String {
        setting_names(&settings::MAX_SESSIONS_TOTAL)
    }

    /// The setting of one client's share, for the refusal.
    pub fn share_setting() -> String {
        setting_names(&settings::CLIENT_SESSIONS_SHARE)
    }
}

/// A setting as a refusal names it: `--flag / VAR`.
pub fn setting_names(setting: &settings::Setting) -> String {
    format!(
        "--{} / {}",
        setting.flag.unwrap_or_default(),
        setting.var_name()
    )
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
