//! Warm single-use jails: session jails started ahead of demand, each
//! waiting on its pipe for one call, then killed (docs/limits.md, "Warm
//! jails").
//!
//! - A warm jail is exactly the jail a call would start (`Jail::spawn` of
//!   the environment's session wrapper, its own cgroup, uid and layer):
//!   only when it starts differs. [`Pool::take`] hands it out once and
//!   forgets it; the taker kills it after its call (a run) or keeps it as
//!   its session's jail. No jail is ever handed out twice, so nothing of
//!   one run reaches the next.
//! - Jails are kept per [`Key`]: everything that decides a jail (the
//!   environment's name, store path, wrapper, limits held by the jail,
//!   network, ports, layers). A call whose environment has another key
//!   than the jails kept for its name drains those (they were started
//!   before the change) and never gets one. An environment with added
//!   packages (a call's `packages`) gets none: its composition would stay
//!   in use.
//! - Sizes follow use: a key is kept once a call took or missed a jail of
//!   it, with a target of one warm jail, doubled when a call finds none
//!   ready; a key no call used for [`Settings::idle`] is dropped with its
//!   jails. All keys together hold at most [`Settings::bound`] jails idle or
//!   starting (`--warm-jails`; 0 keeps none). When they hold that many, a
//!   key that holds none takes a ready jail from the key holding the most
//!   (two or more), whose target drops to what it keeps: every environment
//!   in use gets one before any gets a second.
//! - Refills start after the call that took a jail ([`Pool::refill`]), so
//!   that a replacement's start does not take CPU from that call; after a
//!   run, only when no other run is going ([`Pool::refill_after_run`]):
//!   in a burst a replacement would take a core from the runs waiting, and
//!   the burst's last run refills.
//! - Server shutdown drops every jail (each kills its process group) and
//!   starts no more.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::jail::Jail;
use crate::admission::Runs;
use crate::catalog::Env;
use crate::wrapper::Spawner;

/// How long a key no call used keeps its jails.
pub const IDLE: Duration = Duration::from_secs(120);
/// How often idle keys are looked for.
const SWEEP: Duration = Duration::from_secs(5);

/// The pool's bound and idle expiry.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Jails idle or starting, all keys together; 0: no pool.
    pub bound: usize,
    /// A key unused this long is dropped with its jails.
    pub idle: Duration,
}

/// Everything about an environment that decides its session jail; two
/// environments of one key start the same jail. The timeout is not in it:
/// the launcher holds it, per call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(String);

impl Key {
    pub fn of(env: &Env) -> Self {
        let mut limits = env.limits.clone();
        limits.timeout_s = limits.max_timeout_s;
        Self(format!(
            "{:?}",
            (
                &env.name,
                &env.store_path,
                &env.session,
                &limits,
                &env.network,
                &env.publish,
                &env.added,
                env.session_layer,
                env.project_layer,
                &env.kernel_budgets,
                &env.profile,
            )
        ))
    }
}

/// The jails of one key.
struct Entry {
    env: Arc<Env>,
    ready: VecDeque<Jail>,
    /// Spawns under way for it.
    starting: usize,
    target: usize,
    used: Instant,
}

#[derive(Default)]
struct State {
    keys: HashMap<Key, Entry>,
    sweeping: bool,
}

impl State {
    fn held(&self) -> usize {
        self.keys.values().map(|e| e.ready.len() + e.starting).sum()
    }
}

/// The server's warm jails. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    settings: Settings,
    spawner: Spawner,
    /// The runs going on, all clients together.
    runs: Runs,
    state: Arc<Mutex<State>>,
}

/// What [`Pool::take`] found.
pub enum Took {
    /// A warm jail, the caller's alone from now on.
    Warm(Box<Jail>),
    /// None ready (the pool is off, cold for this key, or exhausted).
    Cold,
}

impl Pool {
    pub fn new(settings: Settings, spawner: Spawner, runs: Runs) -> Self {
        Self {
            settings,
            spawner,
            runs,
            state: Arc::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.settings.bound > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ready jail of `env`'s key, if one is; notes the use either way
    /// (the key is kept, and its target grows after a miss). Jails kept
    /// for `env`'s name under another key are dropped.
    pub fn take(&self, env: &Arc<Env>) -> Took {
        // An environment with added packages is never kept: a warm jail
        // would hold its composition in use (packages/mod.rs), so that the
        // cache's bound could not drop it, and would run from a closure
        // whose GC root the cache may drop.
        if !self.enabled() || self.spawner.shutdown.is_cancelled() || !env.added.is_empty() {
            return Took::Cold;
        }
        let key = Key::of(env);
        let mut stale = Vec::new();
        let took = {
            let mut state = self.lock();
            let before = state.keys.len();
            state.keys.retain(|k, e| {
                if e.env.name == env.name && *k != key {
                    stale.extend(e.ready.drain(..));
                    return false;
                }
                true
            });
            if state.keys.len() != before {
                tracing::info!(env = %env.name, "the environment changed: its warm jails are dropped");
            }
            let bound = self.settings.bound;
            let entry = state.keys.entry(key).or_insert_with(|| Entry {
                env: Arc::clone(env),
                ready: VecDeque::new(),
                starting: 0,
                target: 1,
                used: Instant::now(),
            });
            entry.used = Instant::now();
            let mut found = None;
            while let Some(jail) = entry.ready.pop_front() {
                if jail.has_exited() {
                    stale.push(jail);
                    continue;
                }
                // Its layer's share of the bound is taken now; without
                // room, the call goes cold (and is refused as it would
                // be without the pool).
                if let Err(full) = jail.reserve_layer(env, &self.spawner) {
                    tracing::debug!(env = %env.name, held = full.held, "no room for a warm jail's layer");
                    stale.push(jail);
                    break;
                }
                found = Some(jail);
                break;
            }
            if found.is_none() && entry.starting == 0 {
                entry.target = (entry.target * 2).min(bound);
            }
            found
        };
        drop(stale);
        self.start_sweeper();
        match took {
            Some(jail) => Took::Warm(Box::new(jail)),
            None => Took::Cold,
        }
    }

    /// [`Pool::refill`] after a run that holds its slot still, unless
    /// another run is going (the last one of a burst refills).
    pub fn refill_after_run(&self, env: &Arc<Env>) {
        if self.runs.running() <= 1 {
            self.refill(env);
        }
    }

    /// Starts, in the background, the jails `env`'s key lacks to reach its
    /// target, within the server-wide bound.
    pub fn refill(&self, env: &Arc<Env>) {
        if !self.enabled() || self.spawner.shutdown.is_cancelled() {
            return;
        }
        let key = Key::of(env);
        let mut evicted = Vec::new();
        let wanted = {
            let mut state = self.lock();
            let Some(entry) = state.keys.get(&key) else {
                return;
            };
            let (held, lacking) = (
                entry.ready.len() + entry.starting,
                entry
                    .target
                    .saturating_sub(entry.ready.len() + entry.starting),
            );
            // Without room, a key holding none takes one from the key that
            // holds the most ready (at least two), whose target drops to
            // what it keeps: every key in use gets a jail before any gets a
            // second.
            if lacking > 0 && held == 0 && state.held() >= self.settings.bound {
                let richest = (state.keys.iter_mut())
                    .filter(|(k, e)| **k != key && e.ready.len() >= 2)
                    .max_by_key(|(_, e)| e.ready.len());
                if let Some((_, e)) = richest {
                    evicted.extend(e.ready.pop_back());
                    e.target = e.ready.len() + e.starting;
                }
            }
            let room = self.settings.bound.saturating_sub(state.held());
            let Some(entry) = state.keys.get_mut(&key) else {
                return;
            };
            let wanted = lacking.min(room);
            entry.starting += wanted;
            wanted
        };
        if !evicted.is_empty() {
            tracing::debug!(env = %env.name, "a warm jail of another environment makes room");
        }
        // Killed outside the lock.
        drop(evicted);
        // Each start on a blocking thread: the runtime has one thread, and
        // a jail's start (the wrapper's fork, its cgroup, its pipes) run
        // there would hold back the answer the call that took a jail is
        // writing to the client, by about 2 ms.
        for _ in 0..wanted {
            let pool = self.clone();
            let (env, key) = (Arc::clone(env), key.clone());
            tokio::task::spawn_blocking(move || pool.start_one(&env, key));
        }
    }

    /// Starts one jail of `env` and keeps it under `key`, unless the key
    /// was dropped meanwhile or the server is stopping.
    fn start_one(&self, env: &Env, key: Key) {
        let started = match self.spawner.shutdown.is_cancelled() {
            true => None,
            false => match Jail::spawn_warm(env, &self.spawner) {
                Ok(jail) => Some(jail),
                Err(e) => {
                    tracing::warn!(env = %env.name, error = %e, "cannot start a warm jail");
                    None
                }
            },
        };
        let mut state = self.lock();
        let stopping = self.spawner.shutdown.is_cancelled();
        let kept = match state.keys.get_mut(&key) {
            Some(entry) => {
                entry.starting = entry.starting.saturating_sub(1);
                match (started, stopping) {
                    (Some(jail), false) => {
                        entry.ready.push_back(jail);
                        None
                    }
                    (other, _) => other,
                }
            }
            None => started,
        };
        drop(state);
        // A jail nobody keeps is killed here, outside the lock.
        drop(kept);
    }

    /// The sweeper: drops keys unused for the idle time, and everything at
    /// shutdown. Started once, with the first use.
    fn start_sweeper(&self) {
        {
            let mut state = self.lock();
            if state.sweeping {
                return;
            }
            state.sweeping = true;
        }
        let pool = self.clone();
        let shutdown: CancellationToken = self.spawner.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(SWEEP.min(pool.settings.idle)) => pool.sweep(),
                }
            }
            pool.drain();
        });
    }

    /// Drops the keys no call used for the idle time, with their jails.
    fn sweep(&self) {
        let idle = self.settings.idle;
        let mut gone = Vec::new();
        self.lock().keys.retain(|_, e| {
            let keep = e.used.elapsed() < idle;
            if !keep {
                tracing::debug!(env = %e.env.name, jails = e.ready.len(), "warm jails expired");
                gone.extend(e.ready.drain(..));
            }
            keep
        });
        drop(gone);
    }

    /// Kills every warm jail and forgets every key.
    pub fn drain(&self) {
        let keys = std::mem::take(&mut self.lock().keys);
        drop(keys);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing;

    /// What decides the jail is in the key; the timeout, held by the
    /// launcher per call, is not.
    #[test]
    fn the_key_changes_with_what_decides_the_jail_and_not_with_the_timeout() {
        let base = testing::env("python").build();
        let same = Key::of(&base);
        let mut timed = base.clone();
        timed.limits.timeout_s = std::num::NonZeroU64::new(5).unwrap();
        assert_eq!(Key::of(&timed), same);
        let changed = [
            testing::env("python")
                .with("store_path", json!("/nix/store/other-sandbox"))
                .build(),
            testing::env("python")
                .with("limits.memory_mb", json!(2048))
                .build(),
            testing::env("python")
                .with("session", json!(["/nix/store/x-other/bin/session"]))
                .build(),
            testing::env("python").with("network", json!(true)).build(),
            testing::env("shell").build(),
        ];
        for env in changed {
            assert_ne!(Key::of(&env), same, "{env:?}");
        }
        let mut added = base.clone();
        added.added = vec!["jq".into()];
        assert_ne!(Key::of(&added), same);
    }
}
