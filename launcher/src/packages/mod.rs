//! Packages on demand: a call's `packages` added to its environment. The
//! names are checked here first (names.rs) against the syntax of an
//! attribute path and the server's policy (`packages_on_demand` in the
//! manifest, set in Nix); then the server's compose helper (a script Nix
//! generated, named by the policy) realises mkSandbox of the environment
//! with those packages added and prints the composed sandbox's store path,
//! whose manifest gives the wrappers the call runs with.
//!
//! A composition is cached by (environment, its store path, the sorted set)
//! in memory and on disk: a GC root per set in the cache directory keeps
//! the store path alive, and a later server finds it there without
//! evaluating anything. Concurrent calls for one set share one
//! realisation; nothing global is held while one runs, so other calls go on.

pub mod names;

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::OnceCell;

use crate::catalog::{self, Env};
use names::Allow;

/// An environment's policy, as mkServer wrote it (lib/packagesOnDemand.nix).
/// Its `build` (whether Nix may build what the binary cache does not have)
/// is the helper's to apply: it is in the helper's text.
#[derive(Debug, Clone, Deserialize)]
pub struct OnDemand {
    /// The compose helper's argv; the launcher appends ENV, REQUEST, OUT.
    pub compose: Vec<String>,
    pub allow: Allow,
    /// How long a composition may take.
    pub timeout_s: NonZeroU64,
}

/// Why a composition failed: each is one sentence for the model
/// (mcp/refusal.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComposeError {
    /// No such package in the server's nixpkgs (the helper's line: the
    /// name, and close names).
    Unknown(String),
    /// Not in the binary cache, and building is off (the derivation).
    NotCached(String),
    /// The realisation took longer than the policy allows.
    TimedOut(u64),
    /// The Nix store (or its daemon) cannot be reached (nix's line).
    Unreachable(String),
    /// Anything else (the helper's line).
    Failed(String),
}

/// The environments composed so far, and those being composed.
#[derive(Debug)]
pub struct Composer {
    /// Where the GC roots and their keys go.
    cache_dir: PathBuf,
    allow_outside_store: bool,
    cells: Mutex<HashMap<Key, Cell>>,
}

/// A composition: the environment, its store path, the sorted names.
type Key = (String, String, Vec<String>);
type Cell = Arc<OnceCell<Result<Arc<Env>, ComposeError>>>;

impl Composer {
    pub fn new(cache_dir: PathBuf, allow_outside_store: bool) -> Self {
        Self {
            cache_dir,
            allow_outside_store,
            cells: Mutex::new(HashMap::new()),
        }
    }

    /// The cache directory of the server's environment: `$XDG_CACHE_HOME`
    /// or `~/.cache`, then `nix-sandbox-mcp/packages`; a directory of its
    /// own under the system's temporary one without either.
    pub fn default_dir(lookup: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
        let set = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let base = set("XDG_CACHE_HOME")
            .or_else(|| set("HOME").map(|home| home.join(".cache")))
            .unwrap_or_else(|| {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let uid = unsafe { nix::libc::geteuid() };
                std::env::temp_dir().join(format!("nix-sandbox-mcp-{uid}"))
            });
        base.join("nix-sandbox-mcp").join("packages")
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
        let key: Key = (base.name.clone(), base.store_path.clone(), names.to_vec());
        let cell = Arc::clone(
            self.lock()
                .entry(key.clone())
                .or_insert_with(|| Arc::new(OnceCell::new())),
        );
        let result = cell
            .get_or_init(|| self.realise(base, policy, names, started))
            .await
            .clone();
        if result.is_err() {
            // A failure is told to the calls that waited for it; the next
            // call tries again.
            let mut cells = self.lock();
            if cells.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                cells.remove(&key);
            }
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cell>> {
        self.cells.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn realise(
        &self,
        base: &Arc<Env>,
        policy: &OnDemand,
        names: &[String],
        started: impl FnOnce(),
    ) -> Result<Arc<Env>, ComposeError> {
        let stem = format!("{}-{:016x}", base.name, fnv1a(base, names));
        let root = self.cache_dir.join(&stem);
        let key_file = self.cache_dir.join(format!("{stem}.json"));
        let key = serde_json::json!({"store_path": base.store_path, "packages": names});
        if std::fs::read(&key_file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .is_some_and(|cached| cached == key)
            && let Ok(target) = std::fs::read_link(&root)
            && let Ok(env) = self.load(base, names, &target)
        {
            tracing::info!(env = %base.name, packages = ?names, store_path = %env.store_path, "composed environment found in the cache");
            return Ok(env);
        }
        started();
        tracing::info!(env = %base.name, packages = ?names, "composing the environment with packages");
        let begun = Instant::now();
        std::fs::create_dir_all(&self.cache_dir).map_err(|e| {
            ComposeError::Failed(format!(
                "cannot make the cache directory {}: {e}",
                self.cache_dir.display()
            ))
        })?;
        let request = self.cache_dir.join(format!("{stem}.request.json"));
        std::fs::write(&request, serde_json::to_vec(names).unwrap_or_default()).map_err(|e| {
            ComposeError::Failed(format!("cannot write {}: {e}", request.display()))
        })?;
        let outcome = run_helper(policy, &base.name, &request, &root).await;
        let _ = std::fs::remove_file(&request);
        let path = outcome?;
        let env = self
            .load(base, names, Path::new(&path))
            .map_err(ComposeError::Failed)?;
        let _ = std::fs::write(&key_file, key.to_string());
        tracing::info!(env = %base.name, packages = ?names, store_path = %env.store_path, ms = begun.elapsed().as_millis() as u64, "composed the environment");
        Ok(env)
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
        Ok(Arc::new(env))
    }
}

/// Runs the helper in a process group of its own, killed at the policy's
/// timeout; its stdout's last line is the composed store path.
async fn run_helper(
    policy: &OnDemand,
    env: &str,
    request: &Path,
    root: &Path,
) -> Result<String, ComposeError> {
    let Some((program, args)) = policy.compose.split_first() else {
        return Err(ComposeError::Failed(
            "the policy names no compose helper".into(),
        ));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .arg(env)
        .arg(request)
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| ComposeError::Failed(format!("cannot start {program}: {e}")))?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    // Kills the helper's group (nix and its builders) when this call ends
    // before the helper did: a timeout, or the call dropped.
    let mut group = GroupGuard { pgid, armed: true };
    let limit = Duration::from_secs(policy.timeout_s.get());
    let output = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Err(_) => return Err(ComposeError::TimedOut(policy.timeout_s.get())),
        Ok(waited) => {
            // Reaped: the id is no longer ours to signal.
            group.armed = false;
            waited.map_err(|e| ComposeError::Failed(format!("{program}: {e}")))?
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned();
    let line: String = line.chars().take(400).collect();
    match output.status.code() {
        Some(0) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            stdout
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_owned())
                .ok_or_else(|| ComposeError::Failed("the helper printed no store path".into()))
        }
        Some(65) => Err(ComposeError::Unknown(line)),
        Some(66) => Err(ComposeError::NotCached(line)),
        Some(69) => Err(ComposeError::Unreachable(line)),
        Some(code) => {
            tracing::warn!(env, code, %stderr, "the compose helper failed");
            Err(ComposeError::Failed(line))
        }
        None => Err(ComposeError::Failed(format!(
            "the helper was killed by signal {}",
            output.status.signal().unwrap_or(0)
        ))),
    }
}

/// SIGKILL to the helper's process group when dropped while armed: its
/// leader not yet reaped (tokio reaps a dropped child later, never within
/// this drop), so the group id is still the helper's.
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            crate::wrapper::kill_group(self.pgid);
        }
    }
}

/// FNV-1a of the store path and the names: the cache file's name. A
/// collision is caught by the key file beside it.
fn fnv1a(base: &Env, names: &[String]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let text = std::iter::once(base.store_path.as_str()).chain(names.iter().map(String::as_str));
    for part in text {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
