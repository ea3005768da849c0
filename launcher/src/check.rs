//! Can this host make the sandbox? The probe runs an environment's `run`
//! wrapper with empty code and expects exit 0 within [`PROBE_TIMEOUT`].
//!
//! - The server probes every environment in the background at start
//!   ([`Probes`]); a `run` awaits its environment's probe and, if it failed,
//!   answers `sandbox_unavailable` and runs nothing. A failure is reported
//!   once; the next call probes again.
//! - `--check` probes every environment in turn and prints one line each.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::exec::{self, Exit, Job, JobEnv};
use crate::manifest::{Catalog, Env};

/// How long the probe's empty program may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest probe stderr quoted in a reason.
const PROBE_STDERR_BYTES: usize = 2048;

/// True when `path` is a file this process may execute.
pub fn wrapper_ready(path: &str) -> bool {
    let p = Path::new(path);
    p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Runs the empty program through `env`'s wrapper; the error is the reason
/// in one line (the wrapper's stderr, trimmed).
pub async fn probe(env: &Env, job_env: &JobEnv) -> Result<(), String> {
    let wrapper = &env.run[0];
    if !wrapper_ready(wrapper) {
        return Err(format!("wrapper {wrapper} is missing or not executable"));
    }
    let job = Job {
        argv: &env.run,
        code: b"",
        timeout: PROBE_TIMEOUT,
        output_bytes: PROBE_STDERR_BYTES,
        env: job_env,
    };
    let outcome = exec::run(job, std::future::pending())
        .await
        .map_err(|e| format!("cannot start {wrapper}: {e}"))?;
    if outcome.succeeded() {
        return Ok(());
    }
    let how = if outcome.timed_out {
        format!(
            "an empty program did not finish within {} s",
            PROBE_TIMEOUT.as_secs()
        )
    } else {
        match outcome.exit {
            Exit::Code(code) => format!("the wrapper exited with code {code}"),
            Exit::Signal(n) => format!("the wrapper was killed by signal {n}"),
            Exit::Unknown => "the wrapper ended without an exit status".into(),
        }
    };
    let stderr = outcome.stderr.render();
    let stderr = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    if stderr.is_empty() {
        Err(how)
    } else {
        Err(format!("{how}: {stderr}"))
    }
}

/// The start-up probes of the server, one per environment.
pub struct Probes {
    job_env: JobEnv,
    /// `None`: not probed yet, or the last failure was already reported.
    states: BTreeMap<String, Mutex<Option<Result<(), String>>>>,
}

impl Probes {
    pub fn new(catalog: &Catalog, job_env: JobEnv) -> Self {
        let states = catalog
            .envs
            .keys()
            .map(|name| (name.clone(), Mutex::new(None)))
            .collect();
        Self { job_env, states }
    }

    /// Starts probing every environment in the background.
    pub fn start(self: &Arc<Self>, catalog: &Catalog) {
        for env in catalog.envs.values() {
            let (probes, env) = (Arc::clone(self), Arc::clone(env));
            tokio::spawn(async move {
                let Some(state) = probes.states.get(&env.name) else {
                    return;
                };
                let mut state = state.lock().await;
                if state.is_none() {
                    let result = probe(&env, &probes.job_env).await;
                    match &result {
                        Ok(()) => tracing::info!(env = %env.name, "sandbox probe ok"),
                        Err(reason) => {
                            tracing::error!(env = %env.name, %reason, "sandbox probe failed")
                        }
                    }
                    *state = Some(result);
                }
            });
        }
    }

    /// Waits for `env`'s probe (probing now if needed). A failure is handed
    /// out once; the next call probes again.
    pub async fn ensure(&self, env: &Env) -> Result<(), String> {
        let Some(state) = self.states.get(&env.name) else {
            return probe(env, &self.job_env).await;
        };
        let mut state = state.lock().await;
        match state.take() {
            Some(Ok(())) => {
                *state = Some(Ok(()));
                Ok(())
            }
            Some(Err(reason)) => Err(reason),
            None => {
                let result = probe(env, &self.job_env).await;
                if result.is_ok() {
                    *state = Some(Ok(()));
                }
                result
            }
        }
    }
}

/// `--check`: one line per manifest problem and per environment; false when
/// anything failed or no environment is usable.
pub async fn run_check(
    catalog: &Catalog,
    job_env: &JobEnv,
    out: &mut impl Write,
) -> std::io::Result<bool> {
    let mut ok = true;
    for error in &catalog.errors {
        writeln!(out, "manifest: FAIL: {error}")?;
        ok = false;
    }
    if catalog.envs.is_empty() {
        writeln!(
            out,
            "environments: FAIL: none usable (pass --manifest PATH or set NIX_SANDBOX_MANIFEST)"
        )?;
        ok = false;
    }
    for env in catalog.envs.values() {
        match probe(env, job_env).await {
            Ok(()) => writeln!(out, "{}: ok", env.name)?,
            Err(reason) => {
                writeln!(out, "{}: FAIL: {reason}", env.name)?;
                ok = false;
            }
        }
    }
    Ok(ok)
}
