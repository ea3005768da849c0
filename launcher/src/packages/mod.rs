//! Packages on demand: a call's `packages` added to its environment. The
//! names are checked first (catalog/names.rs) against the syntax of an
//! attribute path and the server's policy (`packages_on_demand` in the
//! manifest, set in Nix); then the server's compose helper (a script Nix
//! generated, named by the policy; helper.rs) realises mkSandbox of the
//! environment with those packages added and prints the composed sandbox's
//! store path, whose manifest gives the wrappers the call runs with.
//!
//! A composition is cached by (environment, its store path, the sorted set)
//! in memory and on disk (cache.rs: a GC root per set, at most
//! `--packages-cache-max` of them, in a directory the server owns and
//! checks), so a later server finds it there without evaluating anything.
//! Concurrent calls for one set share one realisation; at most
//! `--max-compositions` realisations run at once (one more waits for a slot
//! up to its policy's timeout), since one evaluation of nixpkgs takes
//! hundreds of MB. A failure is remembered for [`FAILURE_MEMORY`]: the same
//! set asked again meanwhile gets the same answer without a helper. Nothing
//! global is held while a realisation runs, so other calls go on.

pub mod cache;
mod devshell;
mod helper;
mod tree;

use std::collections::HashMap;
use std::ffi::OsString;
use std::num::NonZeroU64;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OnceCell, Semaphore};
use tokio::time::Instant;

use crate::catalog::{self, Env, OnDemand};
use cache::Cache;

/// How long a failed composition is remembered: the same set asked again
/// within it gets the same failure without the helper running again.
pub const FAILURE_MEMORY: Duration = Duration::from_secs(60);

/// Why a composition failed: each is one sentence for the model
/// (report/refusal.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComposeError {
    /// No such package in the server's nixpkgs (the helper's line: the
    /// name, and close names).
    Unknown(String),
    /// Not in the binary cache, and building is off (the derivation).
    NotCached(String),
    /// A name its allowlist prefix lets in that is not a package of that
    /// scope (the helper's line: the name and why).
    OutsideScope(String),
    /// The realisation took longer than the policy allows.
    TimedOut(u64),
    /// The Nix store (or its daemon) cannot be reached (nix's line).
    Unreachable(String),
    /// Every composition slot stayed taken for the policy's timeout (the
    /// number of slots). Not remembered: the set did not fail.
    Busy(usize),
    /// Anything else (the helper's line, or the cache's).
    Failed(String),
}

/// What the server composes with: the cache, the slots.
#[derive(Debug)]
pub struct Settings {
    pub cache: Cache,
    /// `--max-compositions`.
    pub max_compositions: usize,
    pub allow_outside_store: bool,
}

/// The environments composed so far, and those being composed.
#[derive(Debug)]
pub struct Composer {
    cache: Cache,
    slots: Arc<Semaphore>,
    max_compositions: usize,
    allow_outside_store: bool,
    cells: Mutex<HashMap<Key, Cell>>,
}

/// A composition: the environment, its store path, the sorted names.
type Key = (String, String, Vec<String>);
type Cell = Arc<OnceCell<Outcome>>;

/// One realisation: its cache key, the helper's argv, what the helper is
/// given, and how long it may take.
struct Job<'a> {
    key: Key,
    helper: &'a [String],
    input: Input<'a>,
    timeout_s: NonZeroU64,
}

/// What a helper builds from: the key's names, written to a request file
/// (the compose helper: ENV REQUEST OUT), or the project's flake (the dev
/// shell helper: FLAKE OUT).
#[derive(Clone, Copy)]
enum Input<'a> {
    Packages,
    Flake(&'a Path),
}

/// A finished composition: the environment, or the failure and when.
#[derive(Debug, Clone)]
enum Outcome {
    Ready(Arc<Env>),
    Failed(ComposeError, Instant),
}

impl Composer {
    pub fn new(settings: Settings) -> Self {
        let max = settings.max_compositions.max(1);
        Self {
            cache: settings.cache,
            slots: Arc::new(Semaphore::new(max)),
            max_compositions: max,
            allow_outside_store: settings.allow_outside_store,
            cells: Mutex::new(HashMap::new()),
        }
    }

    /// `base` with `names` (checked, sorted, each once) added: from memory,
    /// from the disk cache, or composed now by the policy's helper.
    /// `started` is called once when a realisation starts (not on a hit).
    pub async fn compose(
        &self,
        base: &Arc<Env>,
        policy: &OnDemand,
        names: &[String],
        started: impl FnOnce(),
    ) -> Result<Arc<Env>, ComposeError> {
        let job = Job {
            key: (base.name.clone(), base.store_path.clone(), names.to_vec()),
            helper: &policy.compose,
            input: Input::Packages,
            timeout_s: policy.timeout_s,
        };
        self.build(job, base, started).await
    }

    /// `job`'s environment, named like `base`: remembered (ready, being
    /// built, or failed a moment ago), from the disk cache, or built now.
    async fn build(
        &self,
        job: Job<'_>,
        base: &Env,
        started: impl FnOnce(),
    ) -> Result<Arc<Env>, ComposeError> {
        let cell = self.cell(&job.key)?;
        let outcome = cell
            .get_or_init(|| async {
                match self.realise(&job, base, started).await {
                    Ok(env) => Outcome::Ready(env),
                    Err(e) => Outcome::Failed(e, Instant::now()),
                }
            })
            .await
            .clone();
        self.settle(&job.key, &cell, outcome)
    }

    /// What a finished composition gives its call.
    fn settle(&self, key: &Key, cell: &Cell, outcome: Outcome) -> Result<Arc<Env>, ComposeError> {
        match outcome {
            Outcome::Ready(env) => Ok(env),
            Outcome::Failed(ComposeError::Busy(n), _) => {
                // The set did not fail: the next call tries again.
                self.forget(key, cell);
                Err(ComposeError::Busy(n))
            }
            Outcome::Failed(e, _) => Err(e),
        }
    }

    /// The cell of `key`: a fresh one, the one being composed or composed
    /// (if its GC root still holds it), or a failure still remembered.
    fn cell(&self, key: &Key) -> Result<Cell, ComposeError> {
        let mut cells = self.lock();
        cells.retain(|_, cell| match cell.get() {
            Some(Outcome::Failed(ComposeError::Busy(_), _)) => false,
            Some(Outcome::Failed(_, at)) => at.elapsed() < FAILURE_MEMORY,
            _ => true,
        });
        match cells.get(key).and_then(|cell| cell.get()) {
            Some(Outcome::Failed(e, at)) => {
                tracing::info!(env = %key.0, packages = ?key.2, ago_s = at.elapsed().as_secs(), "a failed composition remembered");
                return Err(e.clone());
            }
            Some(Outcome::Ready(env)) if !self.still_cached(key, env) => {
                cells.remove(key);
            }
            _ => {}
        }
        Ok(Arc::clone(
            cells
                .entry(key.clone())
                .or_insert_with(|| Arc::new(OnceCell::new())),
        ))
    }

    /// Whether `env`, composed for `key`, still has its GC root (another
    /// server sharing the cache may have dropped it); if so it is marked
    /// used now.
    fn still_cached(&self, key: &Key, env: &Env) -> bool {
        let Ok(dir) = self.cache.dir() else {
            return false;
        };
        let stem = stem(key);
        let held = Cache::holds(&dir, &stem, &env.store_path);
        if held {
            Cache::touch(&dir, &stem);
        }
        held
    }

    fn forget(&self, key: &Key, cell: &Cell) {
        let mut cells = self.lock();
        if cells.get(key).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            cells.remove(key);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Cell>> {
        self.cells.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `job`'s helper (or finds its result in the cache) and loads
    /// the environment named like `base` from what it built.
    async fn realise(
        &self,
        job: &Job<'_>,
        base: &Env,
        started: impl FnOnce(),
    ) -> Result<Arc<Env>, ComposeError> {
        let key = &job.key;
        let names = &key.2;
        let dir = self.cache.dir().map_err(ComposeError::Failed)?;
        let stem = stem(key);
        let recorded = serde_json::json!({"store_path": key.1, "packages": names});
        if let Some(hit) = Cache::find(&dir, &stem, &recorded)
            && let Ok(env) = self.load(base, names, &hit.0)
        {
            Cache::touch(&dir, &stem);
            tracing::info!(env = %base.name, packages = ?names, store_path = %env.store_path, "composed environment found in the cache");
            return Ok(env);
        }
        let wait = Duration::from_secs(job.timeout_s.get());
        let Ok(Ok(_slot)) =
            tokio::time::timeout(wait, Arc::clone(&self.slots).acquire_owned()).await
        else {
            tracing::warn!(env = %base.name, packages = ?names, max = self.max_compositions, "a composition waited for a slot in vain");
            return Err(ComposeError::Busy(self.max_compositions));
        };
        started();
        let begun = Instant::now();
        let request = dir.join(format!("{stem}.request.json"));
        let mut args: Vec<OsString> = match job.input {
            Input::Flake(flake) => {
                tracing::info!(env = %base.name, flake = %flake.display(), "building the environment from the project's dev shell");
                vec![flake.into()]
            }
            Input::Packages => {
                tracing::info!(env = %base.name, packages = ?names, "composing the environment with packages");
                std::fs::write(&request, serde_json::to_vec(names).unwrap_or_default()).map_err(
                    |e| ComposeError::Failed(format!("cannot write {}: {e}", request.display())),
                )?;
                vec![base.name.clone().into(), request.clone().into()]
            }
        };
        args.push(dir.join(&stem).into());
        let outcome = helper::run(job.helper, &args, job.timeout_s, &base.name).await;
        if let Input::Packages = job.input {
            let _ = std::fs::remove_file(&request);
        }
        let path = outcome?;
        let env = self
            .load(base, names, Path::new(&path))
            .map_err(ComposeError::Failed)?;
        if let Err(e) = Cache::record(&dir, &stem, &recorded) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot record a composition in the cache");
        }
        let dropped = self
            .cache
            .bound(&dir, |other| other == stem || self.in_use(other));
        self.lock()
            .retain(|key, _| !dropped.contains(&self::stem(key)));
        tracing::info!(env = %base.name, packages = ?names, store_path = %env.store_path, ms = begun.elapsed().as_millis() as u64, "composed the environment");
        Ok(env)
    }

    /// Whether a composition of this server with cache entry `stem` is held
    /// by a session or a call (not only by this table).
    fn in_use(&self, stem: &str) -> bool {
        self.lock().iter().any(|(key, cell)| {
            matches!(cell.get(), Some(Outcome::Ready(env)) if Arc::strong_count(env) > 1)
                && self::stem(key) == stem
        })
    }

    /// The composed sandbox at `path`, as an environment named like `base`.
    fn load(&self, base: &Env, names: &[String], path: &Path) -> Result<Arc<Env>, String> {
        let text = path.to_string_lossy();
        if !self.allow_outside_store && !text.starts_with("/nix/store/") {
            return Err(format!(
                "the helper named {text}, which is not in /nix/store"
            ));
        }
        let manifest = path.join("share/nix-sandbox-mcp/manifest.json");
        let read = catalog::read_file(&manifest, self.allow_outside_store);
        let Some(mut env) = read.envs.into_iter().find(|e| e.name == base.name) else {
            let why = read.errors.first().map(ToString::to_string);
            return Err(why.unwrap_or_else(|| {
                format!("{} has no environment {}", manifest.display(), base.name)
            }));
        };
        env.packages_on_demand = None;
        env.added = names.to_vec();
        env.dev_shell = None;
        Ok(Arc::new(env))
    }
}

/// The cache entry's name of `key`: the environment's name and the FNV-1a
/// of its store path and the names. A collision is caught by the key file
/// beside it.
fn stem(key: &Key) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let text = std::iter::once(key.1.as_str()).chain(key.2.iter().map(String::as_str));
    for part in text {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{}-{hash:016x}", key.0)
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
