//! Can this host make the sandbox, and does it hold its limits? The probe
//! runs a small program through an environment's `run` wrapper (in a cgroup
//! of its own when the host has cgroups, like every run) that prints, from
//! inside the jail, its resource limits, its seccomp mode, its network
//! interfaces, its hostname and its /etc/passwd. It must exit 0 within
//! [`PROBE_TIMEOUT`], and the jail must hold the limits the manifest
//! declares and the instructions claim (memory, processes when enforced,
//! CPU time, file size, open files, the rlimits of its kernel budgets; no
//! interface but loopback without `network`): else the environment is
//! refused, never run with weaker limits than it says. Its hostname and
//! passwd are reported (`--check`): a sandbox built before the jails had
//! their own shows the host's.
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
use tokio_util::sync::CancellationToken;

use proto::frame::Exit;

use super::WrapperEnv;
use super::cgroup::Stats;
use super::host::Host;
use crate::catalog::{Catalog, Env, Interpreter};
use crate::egress::policy::Network;
use crate::preflight::Problem;
use crate::run::{self, Spec};

/// How long the probe's empty program may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest probe output kept (its stdout is about 3 KiB).
const PROBE_OUTPUT_BYTES: usize = 32 * 1024;

/// The files the probe prints, each after a line `=== PATH`.
const PROBE_FILES: [&str; 5] = [
    "/proc/self/limits",
    "/proc/self/status",
    "/proc/net/dev",
    "/proc/sys/kernel/hostname",
    "/etc/passwd",
];

/// The rlimits of an environment's kernel budgets (lib/kernelBudgets.nix)
/// and their rows in /proc/self/limits.
const BUDGET_RLIMITS: [(&str, &str); 3] = [
    ("sigpending", "Max pending signals"),
    ("msgqueue", "Max msgqueue size"),
    ("memlock", "Max locked memory"),
];

/// The probe program, per interpreter: prints [`PROBE_FILES`], reading them
/// itself (no other program needed in the environment).
fn probe_code(interpreter: Interpreter) -> String {
    let files = PROBE_FILES.join(" ");
    match interpreter {
        Interpreter::Python => format!(
            "import sys\nfor p in '{files}'.split():\n    sys.stdout.write('=== ' + p + '\\n' + open(p).read())\n"
        ),
        Interpreter::Bash => format!(
            "for p in {files}; do echo \"=== $p\"; while IFS= read -r l; do printf '%s\\n' \"$l\"; done <\"$p\"; done\n"
        ),
        Interpreter::Node => format!(
            "const fs = require('fs');\nfor (const p of '{files}'.split(' ')) process.stdout.write('=== ' + p + '\\n' + fs.readFileSync(p, 'utf8'));\n"
        ),
    }
}

/// What the probe saw from inside the jail.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Soft limits by the name /proc/self/limits gives (`Max cpu time`);
    /// `None` for unlimited.
    pub rlimits: BTreeMap<String, Option<u64>>,
    pub seccomp: bool,
    pub interfaces: Vec<String>,
    pub hostname: String,
    /// The users of the jail's /etc/passwd: (name, home).
    pub users: Vec<(String, String)>,
}

impl Seen {
    pub fn parse(output: &str) -> Self {
        let mut seen = Seen::default();
        let mut file = "";
        for line in output.lines() {
            if let Some(name) = line.strip_prefix("=== ") {
                file = name;
                continue;
            }
            match file {
                "/proc/self/limits" if line.starts_with("Max ") => {
                    // Columns: name (up to 26), soft, hard, units.
                    let (name, rest) = line.split_at(line.len().min(26));
                    let soft = rest.split_whitespace().next().unwrap_or("");
                    seen.rlimits
                        .insert(name.trim().to_owned(), soft.parse().ok());
                }
                "/proc/self/status" => {
                    if let Some(mode) = line.strip_prefix("Seccomp:") {
                        seen.seccomp = mode.trim() == "2";
                    }
                }
                "/proc/net/dev" => {
                    if let Some((name, _)) = line.split_once(':') {
                        let name = name.trim();
                        if !name.is_empty() && !name.contains(' ') && !name.contains('|') {
                            seen.interfaces.push(name.to_owned());
                        }
                    }
                }
                "/proc/sys/kernel/hostname" if seen.hostname.is_empty() => {
                    line.trim().clone_into(&mut seen.hostname);
                }
                "/etc/passwd" => {
                    let fields: Vec<&str> = line.split(':').collect();
                    if let [name, _, _, _, _, home, ..] = fields[..] {
                        seen.users.push((name.to_owned(), home.to_owned()));
                    }
                }
                _ => {}
            }
        }
        seen
    }

    /// The soft limit named `name` is set and at most `max`.
    fn within(&self, name: &str, max: u64) -> Result<(), String> {
        match self.rlimits.get(name) {
            Some(Some(v)) if *v <= max => Ok(()),
            Some(Some(v)) => Err(format!("{name} is {v}, over {max}")),
            Some(None) => Err(format!("{name} is unlimited, not {max}")),
            None => Err(format!("{name} is not in /proc/self/limits")),
        }
    }
}

/// Checks that the jail holds what `env` declares on `host`; the error
/// names every limit that does not hold.
pub fn verify(env: &Env, host: &Host, seen: &Seen, cgroup: Option<&Stats>) -> Result<(), String> {
    const MIB: u64 = 1024 * 1024;
    let l = &env.limits;
    let mut problems = Vec::new();
    let mut check = |r: Result<(), String>| {
        if let Err(e) = r {
            problems.push(e);
        }
    };
    check(seen.within("Max cpu time", l.cpu_s.get()));
    check(seen.within("Max file size", l.file_mb.get() * MIB));
    check(seen.within("Max open files", l.nofile.get()));
    let memory = l.memory_mb.get() * MIB;
    if host.memory_by_cgroup() {
        check(match cgroup.and_then(|s| s.memory_limit) {
            Some(v) if v <= memory => Ok(()),
            other => Err(format!(
                "the cgroup memory limit is {other:?}, not {memory}"
            )),
        });
    } else {
        check(seen.within("Max address space", memory));
    }
    if host.pids_by_cgroup() {
        check(match cgroup.and_then(|s| s.pids_limit) {
            Some(v) if v <= l.pids.get() => Ok(()),
            other => Err(format!("the cgroup pids.max is {other:?}, not {}", l.pids)),
        });
    } else {
        check(seen.within("Max processes", l.pids.get()));
    }
    for (budget, row) in BUDGET_RLIMITS {
        if let Some(&most) = env.kernel_budgets.as_ref().and_then(|b| b.get(budget)) {
            check(seen.within(row, most));
        }
    }
    if env.network != Network::Open(true) && seen.interfaces.iter().any(|i| i != "lo") {
        check(Err(format!(
            "network is off but the jail has interfaces {:?}",
            seen.interfaces
        )));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the jail does not hold the declared limits: {}",
            problems.join("; ")
        ))
    }
}

/// True when `path` is a file this process may execute.
pub fn wrapper_ready(path: &str) -> bool {
    let p = Path::new(path);
    p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Runs the probe program through `env`'s wrapper: what it saw, or the
/// reason in one line (the wrapper's stderr, trimmed, or the limits that
/// do not hold).
pub async fn probe(env: &Env, wrapper_env: &WrapperEnv, host: &Host) -> Result<Seen, String> {
    let outcome = run_program(env, wrapper_env, host, &probe_code(env.interpreter)).await?;
    let seen = Seen::parse(&outcome.stdout.render());
    verify(env, host, &seen, outcome.usage.as_ref())?;
    Ok(seen)
}

/// Runs `code`, a small program of the server's own, through `env`'s run
/// wrapper with `wrapper_env`: its outcome when it exited 0 within
/// [`PROBE_TIMEOUT`], else why not in one line (how it ended and the
/// wrapper's stderr, trimmed).
pub async fn run_program(
    env: &Env,
    wrapper_env: &WrapperEnv,
    host: &Host,
    code: &str,
) -> Result<run::RunOutcome, String> {
    let wrapper = &env.run[0];
    if !wrapper_ready(wrapper) {
        return Err(format!("wrapper {wrapper} is missing or not executable"));
    }
    let (user, gate) = super::prepare(env, host).map_err(|e| match e {
        super::StartError::Egress(e) => format!("its network policy cannot be served: {e}"),
        other => format!("cannot start {wrapper}: {other}"),
    })?;
    let spec = Spec {
        gate: gate.as_ref(),
        user,
        argv: &env.run,
        limits: &env.limits,
        code: code.as_bytes(),
        timeout: PROBE_TIMEOUT,
        output_bytes: PROBE_OUTPUT_BYTES,
        env: wrapper_env,
    };
    let outcome = run::run(host, spec, std::future::pending())
        .await
        .map_err(|e| format!("cannot start {wrapper}: {e}"))?;
    if outcome.succeeded() {
        return Ok(outcome);
    }
    let how = if outcome.timed_out {
        format!(
            "a program of a few lines did not finish within {} s",
            PROBE_TIMEOUT.as_secs()
        )
    } else {
        match outcome.exit {
            Some(Exit::Code(code)) => format!("the wrapper exited with code {code}"),
            Some(Exit::Signal(n)) => format!("the wrapper was killed by signal {n}"),
            None => "the wrapper ended without an exit status".into(),
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
    wrapper_env: WrapperEnv,
    host: Arc<Host>,
    /// The server's shutdown: a probe whose jail the stopping server
    /// killed did not fail.
    stopping: CancellationToken,
    /// `None`: not probed yet, or the last failure was already reported.
    states: BTreeMap<String, Mutex<Option<Result<(), String>>>>,
}

impl Probes {
    pub fn new(
        catalog: &Catalog,
        wrapper_env: WrapperEnv,
        host: Arc<Host>,
        stopping: CancellationToken,
    ) -> Self {
        let states = catalog
            .envs
            .keys()
            .map(|name| (name.clone(), Mutex::new(None)))
            .collect();
        Self {
            wrapper_env,
            host,
            stopping,
            states,
        }
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
                    let result = probe(&env, &probes.wrapper_env, &probes.host).await;
                    match &result {
                        Ok(seen) => tracing::info!(
                            env = %env.name,
                            seccomp = seen.seccomp,
                            "sandbox probe ok: the jail holds its limits"
                        ),
                        Err(reason) if probes.stopping.is_cancelled() => tracing::debug!(
                            env = %env.name,
                            %reason,
                            "sandbox probe ended: the server is stopping"
                        ),
                        Err(reason) => {
                            tracing::error!(env = %env.name, %reason, "sandbox probe failed")
                        }
                    }
                    *state = Some(result.map(|_| ()));
                }
            });
        }
    }

    /// Waits for `env`'s probe (probing now if needed). A failure is handed
    /// out once; the next call probes again.
    pub async fn ensure(&self, env: &Env) -> Result<(), String> {
        let Some(state) = self.states.get(&env.name) else {
            return probe(env, &self.wrapper_env, &self.host).await.map(|_| ());
        };
        let mut state = state.lock().await;
        match state.take() {
            Some(Ok(())) => {
                *state = Some(Ok(()));
                Ok(())
            }
            Some(Err(reason)) => Err(reason),
            None => {
                let result = probe(env, &self.wrapper_env, &self.host).await.map(|_| ());
                if result.is_ok() {
                    *state = Some(Ok(()));
                }
                result
            }
        }
    }
}

/// `--check`: the host's facts (user namespaces, the jails' user, cgroups,
/// how each limit is enforced), then one line per configuration problem
/// (preflight.rs), per manifest problem and per environment; false when
/// anything failed or no environment is usable.
pub async fn run_check(
    catalog: &Catalog,
    problems: &[Problem],
    wrapper_env: &WrapperEnv,
    host: &Host,
    out: &mut impl Write,
) -> std::io::Result<bool> {
    let mut ok = true;
    for line in host.report() {
        writeln!(out, "{line}")?;
    }
    for problem in problems {
        writeln!(out, "{}: FAIL: {}", problem.setting, problem.message)?;
        ok = false;
    }
    for error in &catalog.errors {
        writeln!(out, "manifest: FAIL: {error}")?;
        ok = false;
    }
    for note in &catalog.notes {
        writeln!(out, "manifest: note: {note}")?;
    }
    if catalog.envs.is_empty() {
        writeln!(
            out,
            "environments: FAIL: none usable (pass --manifest PATH or set NIX_SANDBOX_MANIFEST)"
        )?;
        ok = false;
    }
    for env in catalog.envs.values() {
        match probe(env, wrapper_env, host).await {
            Ok(seen) => writeln!(out, "{}: ok ({})", env.name, protections(env, &seen))?,
            Err(reason) => {
                writeln!(out, "{}: FAIL: {reason}", env.name)?;
                ok = false;
            }
        }
    }
    Ok(ok)
}

/// What an environment's probe showed of the jail's protections, for
/// `--check`: its limits held (else it failed), its seccomp filter, its
/// kernel budgets, its hostname and its passwd.
pub fn protections(env: &Env, seen: &Seen) -> String {
    let seccomp = if seen.seccomp {
        "seccomp filter on"
    } else {
        "seccomp filter off"
    };
    let budgets = match &env.kernel_budgets {
        Some(_) => "kernel budgets held (a user namespace of its own)",
        None => {
            "kernel budgets none (a sandbox built before them: a jail may take its user's \
                 whole inotify, signal and message queue budgets)"
        }
    };
    let host_name = nix::unistd::gethostname().ok();
    let hostname = if host_name.as_deref().and_then(|h| h.to_str()) == Some(seen.hostname.as_str())
    {
        format!("hostname {:?}, the host's", seen.hostname)
    } else {
        format!("hostname {:?}", seen.hostname)
    };
    let home = std::env::var("HOME").unwrap_or_default();
    let login = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name);
    // root and nobody are in every passwd, the jail's own too.
    let leaks = seen
        .users
        .iter()
        .filter(|(name, _)| name != "root" && name != "nobody")
        .any(|(name, user_home)| {
            Some(name) == login.as_ref() || (!home.is_empty() && *user_home == home)
        });
    let passwd = if leaks {
        "/etc/passwd names the server's login or home"
    } else {
        "/etc/passwd the jail's own"
    };
    format!("limits hold; {seccomp}; {budgets}; {hostname}; {passwd}")
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
