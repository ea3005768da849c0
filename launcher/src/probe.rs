//! Can this host make the sandbox, and does it hold its limits? The probe
//! runs a small program through an environment's `run` wrapper (in a cgroup
//! of its own when the host has cgroups, like every run) that prints, from
//! inside the jail, its resource limits, its seccomp mode, its network
//! interfaces, its hostname, its /etc/passwd and its writable mounts. It
//! must exit 0 within [`PROBE_TIMEOUT`], and the jail must hold the limits
//! the manifest declares and the instructions claim (memory, processes when
//! enforced, CPU time, file size, open files, the rlimits of its kernel
//! budgets, the sizes of `/tmp` and `/workspace`; no interface but loopback
//! without `network`): else the environment is refused, never run with
//! weaker limits than it says. Its hostname, passwd and other writable
//! mounts are reported (`--check`): a sandbox built before the jails had
//! their own shows the host's, or mounts without a size.
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

use proto::frame::Exit;

use crate::catalog::limits::{Controller, LIMITS, Limit, Probe};
use crate::catalog::{Catalog, Env, Interpreter, Limits};
use crate::egress::policy::Network;
use crate::preflight::Problem;
use crate::run::{self, Spec};
use crate::wrapper::cgroup::Stats;
use crate::wrapper::host::Host;
use crate::wrapper::mounts::{self, Writable};
use crate::wrapper::{self, Spawner};

/// How long the probe's empty program may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest probe output kept (its stdout is about 4 KiB).
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

/// The file whose writable mounts the probe prints (its read-only ones,
/// the store closure's binds, would make it tens of KiB), after a line
/// `=== PATH`.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The probe program, per interpreter: prints [`PROBE_FILES`], then the
/// lines of [`MOUNTINFO`] whose mount options start with `rw`, reading
/// them itself (no other program needed in the environment).
fn probe_code(interpreter: Interpreter) -> String {
    let files = PROBE_FILES.join(" ");
    match interpreter {
        Interpreter::Python => format!(
            "import sys\nfor p in '{files}'.split():\n    sys.stdout.write('=== ' + p + '\\n' + open(p).read())\n\
             sys.stdout.write('=== {MOUNTINFO}\\n' + ''.join(l for l in open('{MOUNTINFO}') if l.split()[5].split(',')[0] == 'rw'))\n"
        ),
        Interpreter::Bash | Interpreter::Program => format!(
            "for p in {files}; do echo \"=== $p\"; while IFS= read -r l; do printf '%s\\n' \"$l\"; done <\"$p\"; done\n\
             echo '=== {MOUNTINFO}'; while read -r -a f; do if [ \"${{f[5]%%,*}}\" = rw ]; then printf '%s\\n' \"${{f[*]}}\"; fi; done <{MOUNTINFO}\n"
        ),
        Interpreter::Node => format!(
            "const fs = require('fs');\nfor (const p of '{files}'.split(' ')) process.stdout.write('=== ' + p + '\\n' + fs.readFileSync(p, 'utf8'));\n\
             process.stdout.write('=== {MOUNTINFO}\\n' + fs.readFileSync('{MOUNTINFO}', 'utf8').split('\\n').filter(l => (l.split(' ')[5] || '').split(',')[0] === 'rw').map(l => l + '\\n').join(''));\n"
        ),
    }
}

/// What the probe saw from inside the jail.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Soft limits by the name /proc/self/limits gives (`Max cpu time`);
    /// `None` for unlimited.
    pub rlimits: BTreeMap<String, Option<u64>>,
    /// Hard limits, the same way: what the code can raise its soft limit to.
    pub hard_rlimits: BTreeMap<String, Option<u64>>,
    pub seccomp: bool,
    pub interfaces: Vec<String>,
    pub hostname: String,
    /// The users of the jail's /etc/passwd: (name, home).
    pub users: Vec<(String, String)>,
    /// The mounts the jail may write to.
    pub writable: Vec<Writable>,
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
                    let mut columns = rest.split_whitespace();
                    let (soft, hard) = (columns.next(), columns.next());
                    let value = |v: Option<&str>| v.and_then(|v| v.parse().ok());
                    seen.rlimits.insert(name.trim().to_owned(), value(soft));
                    seen.hard_rlimits
                        .insert(name.trim().to_owned(), value(hard));
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
                MOUNTINFO => mounts::add(&mut seen.writable, line),
                _ => {}
            }
        }
        seen
    }

    /// The soft limit named `name` is set and at most `max`.
    fn within(&self, name: &str, max: u64) -> Result<(), String> {
        Self::held(&self.rlimits, name, max)
    }

    /// The hard limit named `name` is set and at most `max`.
    fn hard_within(&self, name: &str, max: u64) -> Result<(), String> {
        Self::held(&self.hard_rlimits, name, max).map_err(|e| format!("hard: {e}"))
    }

    fn held(limits: &BTreeMap<String, Option<u64>>, name: &str, max: u64) -> Result<(), String> {
        match limits.get(name) {
            Some(Some(v)) if *v <= max => Ok(()),
            Some(Some(v)) => Err(format!("{name} is {v}, over {max}")),
            Some(None) => Err(format!("{name} is unlimited, not {max}")),
            None => Err(format!("{name} is not in /proc/self/limits")),
        }
    }

    /// A writable mount at `path`, if the jail has one, is at most `max`
    /// bytes (its declared size).
    fn mount_within(&self, path: &str, max: u64) -> Result<(), String> {
        match self.writable.iter().find(|m| m.path == path) {
            None => Ok(()),
            Some(Writable { bytes: Some(v), .. }) if *v <= max => Ok(()),
            Some(Writable { bytes: Some(v), .. }) => {
                Err(format!("{path} is {v} bytes, over {max}"))
            }
            Some(m) => Err(format!("{path} ({}) has no size, not {max}", m.fstype)),
        }
    }
}

/// Checks that the jail holds what `env` declares on `host`; the error
/// names every limit that does not hold.
pub fn verify(env: &Env, host: &Host, seen: &Seen, cgroup: Option<&Stats>) -> Result<(), String> {
    let mut problems: Vec<String> = (LIMITS.iter())
        .filter_map(|limit| {
            let problem = holds(limit, &env.limits, host, seen, cgroup).err()?;
            Some(format!("{}: {problem}", limit.key))
        })
        .collect();
    for (budget, row) in BUDGET_RLIMITS {
        if let Some(&most) = env.kernel_budgets.as_ref().and_then(|b| b.get(budget))
            && let Err(e) = seen.within(row, most)
        {
            problems.push(e);
        }
    }
    if env.network != Network::Open(true) && seen.interfaces.iter().any(|i| i != "lo") {
        problems.push(format!(
            "network is off but the jail has interfaces {:?}",
            seen.interfaces
        ));
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

/// Whether the jail holds `limit` as the limits table says to check it: in
/// the run's cgroup where the host has one for it, else from inside.
fn holds(
    limit: &Limit,
    limits: &Limits,
    host: &Host,
    seen: &Seen,
    cgroup: Option<&Stats>,
) -> Result<(), String> {
    let most = limit.base(limits);
    if let Some(controller) = limit.cgroup
        && host.by_cgroup(controller)
    {
        let what = match controller {
            Controller::Memory => "memory limit",
            Controller::Pids => "pids.max",
        };
        return match cgroup.and_then(|s| s.limit(controller)) {
            Some(v) if v <= most => Ok(()),
            other => Err(format!("the cgroup {what} is {other:?}, not {most}")),
        };
    }
    if limit.cgroup == Some(Controller::Pids) && !proto::kernel::nproc_per_namespace() {
        // Before Linux 5.14 jail-budget leaves RLIMIT_NPROC as it is (the
        // kernel would count the uid's processes everywhere), and the
        // self-test says that nothing bounds a run's processes.
        return Ok(());
    }
    match limit.probe {
        Probe::Launcher => Ok(()),
        Probe::Rlimit(row) => seen.within(row, most),
        Probe::RlimitWithBubblewrap(row) => seen.within(row, most + 1),
        Probe::Mount(path) => seen.mount_within(path, most),
        Probe::Data => seen
            .hard_within("Max data size", most)
            .and(seen.hard_within("Max stack size", most))
            .or_else(|e| seen.within("Max address space", most).map_err(|_| e)),
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
pub async fn probe(env: &Env, spawner: &Spawner) -> Result<Seen, String> {
    let outcome = run_program(env, spawner, &probe_code(env.interpreter)).await?;
    let seen = Seen::parse(&outcome.stdout.render());
    verify(env, &spawner.host, &seen, outcome.usage.as_ref())?;
    Ok(seen)
}

/// Runs `code`, a small program of the server's own in bash for a program
/// environment (through its `shell`, the same jail), else in `env`'s
/// language, through `env`'s run wrapper started by `spawner`: its outcome
/// when it exited 0 within [`PROBE_TIMEOUT`], else why not in one line
/// (how it ended and the wrapper's stderr, trimmed).
pub async fn run_program(
    env: &Env,
    spawner: &Spawner,
    code: &str,
) -> Result<run::RunOutcome, String> {
    let argv = match env.interpreter {
        Interpreter::Program => &env.shell,
        _ => &env.run,
    };
    let Some(wrapper) = argv.first() else {
        return Err("the manifest names no `shell` to probe it with".into());
    };
    if !wrapper_ready(wrapper) {
        return Err(format!("wrapper {wrapper} is missing or not executable"));
    }
    let (user, gate) = spawner.prepare(env).map_err(|e| match e {
        wrapper::StartError::Egress(e) => format!("its network policy cannot be served: {e}"),
        other => format!("cannot start {wrapper}: {other}"),
    })?;
    let spec = Spec {
        gate: gate.as_ref(),
        user,
        argv,
        limits: &env.limits,
        code: code.as_bytes(),
        timeout: PROBE_TIMEOUT,
        output_bytes: PROBE_OUTPUT_BYTES,
        env: &spawner.env,
        tail: None,
    };
    let outcome = run::run(&spawner.host, spec, std::future::pending())
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
    /// What starts the probes' jails; its shutdown token: a probe whose
    /// jail the stopping server killed did not fail.
    spawner: Spawner,
    /// `None`: not probed yet, or the last failure was already reported.
    states: BTreeMap<String, Mutex<Option<Result<(), String>>>>,
}

impl Probes {
    pub fn new(catalog: &Catalog, spawner: Spawner) -> Self {
        let states = catalog
            .envs
            .keys()
            .map(|name| (name.clone(), Mutex::new(None)))
            .collect();
        Self { spawner, states }
    }

    /// Starts probing every environment in the background.
    pub fn start(self: &Arc<Self>, catalog: &Catalog) {
        // The project's dev shell is probed once built, at its first call.
        for env in catalog.envs.values().filter(|env| env.dev_shell.is_none()) {
            let (probes, env) = (Arc::clone(self), Arc::clone(env));
            tokio::spawn(async move {
                let Some(state) = probes.states.get(&env.name) else {
                    return;
                };
                let mut state = state.lock().await;
                if state.is_none() {
                    let result = probe(&env, &probes.spawner).await;
                    match &result {
                        Ok(seen) => tracing::info!(
                            env = %env.name,
                            seccomp = seen.seccomp,
                            "sandbox probe ok: the jail holds its limits"
                        ),
                        Err(reason) if probes.spawner.shutdown.is_cancelled() => tracing::debug!(
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
            return probe(env, &self.spawner).await.map(|_| ());
        };
        let mut state = state.lock().await;
        match state.take() {
            Some(Ok(())) => {
                *state = Some(Ok(()));
                Ok(())
            }
            Some(Err(reason)) => Err(reason),
            None => {
                let result = probe(env, &self.spawner).await.map(|_| ());
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
    spawner: &Spawner,
    out: &mut impl Write,
) -> std::io::Result<bool> {
    let mut ok = true;
    for line in spawner.host.report() {
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
        if env.dev_shell.is_some() {
            writeln!(
                out,
                "{}: the project's dev shell, built by the first call that names it (not probed here)",
                env.name
            )?;
            continue;
        }
        match probe(env, spawner).await {
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
/// kernel budgets, its hostname, its passwd and its writable mounts.
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
    let writable = mounts::describe(&seen.writable);
    format!("limits hold; {seccomp}; {budgets}; {hostname}; {passwd}; {writable}")
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
