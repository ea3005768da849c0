//! Which limits hold on this host and how (the start-up self-test), and
//! which limit ended a run, when that can be told.
//!
//! The wrapper applies every limit but the deadline and the output cap
//! (policy, from Nix); the launcher gives it a cgroup when it has one
//! ([`crate::cgroup`]). What follows on this host:
//!
//! | limit | how |
//! | --- | --- |
//! | memory | cgroup memory limit, else RLIMIT_AS (address space) |
//! | processes | cgroup pids.max, else RLIMIT_NPROC in the jail's user namespace, which does not bind host root |
//! | CPU time, file size, open files | RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE |
//! | /tmp, /workspace | tmpfs size |
//! | time, output | the launcher (deadline, capped streams) |

use std::time::Duration;

use std::io;

use crate::catalog::{Catalog, Env};
use crate::cgroup::{Cgroups, Stats};
use crate::exec::{self, Exit, Job, Outcome};

const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;
const SIGXFSZ: i32 = 25;
const MIB: u64 = 1024 * 1024;

/// What the host gives the jails, found at start-up.
#[derive(Debug)]
pub struct Host {
    pub cgroups: Option<Cgroups>,
    /// Why there is no cgroup, when there is none.
    pub no_cgroup: Option<String>,
    /// The launcher runs as host root: RLIMIT_NPROC does not bind it.
    pub root: bool,
    /// Why user namespaces look unusable, when they do (the probes tell for sure).
    pub userns_problem: Option<String>,
}

impl Host {
    pub fn detect() -> Self {
        let (cgroups, no_cgroup) = match Cgroups::setup() {
            Ok(c) => (Some(c), None),
            Err(reason) => (None, Some(reason)),
        };
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { nix::libc::geteuid() } == 0;
        Self {
            cgroups,
            no_cgroup,
            root,
            userns_problem: userns_problem(root),
        }
    }

    /// A host with no cgroup, for tests.
    #[cfg(test)]
    pub fn plain(root: bool) -> Self {
        Self {
            cgroups: None,
            no_cgroup: Some("none (test)".into()),
            root,
            userns_problem: None,
        }
    }

    pub fn memory_by_cgroup(&self) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.memory)
    }

    pub fn pids_by_cgroup(&self) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.pids)
    }

    /// Whether the process limit holds at all.
    pub fn pids_enforced(&self) -> bool {
        self.pids_by_cgroup() || !self.root
    }

    /// The self-test's lines about the host (for `--check` and the log).
    pub fn report(&self) -> Vec<String> {
        let mut lines = vec![match &self.userns_problem {
            None => "user namespaces: available".to_owned(),
            Some(p) => format!("user namespaces: FAIL: {p}"),
        }];
        lines.push(match (&self.cgroups, &self.no_cgroup) {
            (Some(c), _) => format!("cgroups: {}", c.describe()),
            (None, Some(why)) => format!("cgroups: none usable: {why}"),
            (None, None) => "cgroups: none usable".into(),
        });
        let memory = if self.memory_by_cgroup() {
            "memory by cgroup"
        } else {
            "memory by RLIMIT_AS (address space)"
        };
        let pids = if self.pids_by_cgroup() {
            "processes by cgroup pids.max"
        } else if self.root {
            "processes NOT limited (RLIMIT_NPROC does not bind host root and there is no cgroup)"
        } else {
            "processes by RLIMIT_NPROC in the jail's user namespace"
        };
        lines.push(format!(
            "limits: {memory}; {pids}; CPU time, file size, open files by rlimits; \
             /tmp and /workspace by tmpfs size; time and output by the launcher"
        ));
        lines
    }

    /// The instructions' one line: the limits every environment enforces
    /// here (values that differ are given per environment).
    pub fn instructions_line(&self, catalog: &Catalog) -> Option<String> {
        let envs: Vec<&Env> = catalog.envs.values().map(|e| e.as_ref()).collect();
        if envs.is_empty() {
            return None;
        }
        let secs = |v: u64| format!("{v} s");
        let count = |v: u64| v.to_string();
        let mut parts = vec![
            ("time", common(&envs, |e| e.limits.timeout_s.get(), secs)),
            ("memory", common(&envs, |e| e.limits.memory_mb.get(), mib)),
        ];
        if self.pids_enforced() {
            parts.push(("processes", common(&envs, |e| e.limits.pids.get(), count)));
        }
        parts.extend([
            ("CPU", common(&envs, |e| e.limits.cpu_s.get(), secs)),
            ("files", common(&envs, |e| e.limits.file_mb.get(), mib)),
            ("/tmp", common(&envs, |e| e.limits.tmp_mb.get(), mib)),
            (
                "/workspace",
                common(&envs, |e| e.limits.workspace_mb.get(), mib),
            ),
        ]);
        let parts: Vec<String> = parts
            .into_iter()
            .map(|(what, v)| format!("{what} {v}"))
            .collect();
        Some(format!("Limits per run: {}.", parts.join(", ")))
    }
}

/// How an error of [`run`] starts when the run's cgroup could not be made
/// (the run is refused: its limits would not hold).
pub const NO_RUN_CGROUP: &str = "cannot make the run's cgroup";

/// Runs `job` in a cgroup of its own when the host has cgroups: the
/// outcome, and what the cgroup counted. The cgroup is gone when this
/// returns (or, if its processes would not leave, logged and left).
pub async fn run(
    host: &Host,
    mut job: Job<'_>,
    stop: impl Future<Output = ()>,
) -> io::Result<(Outcome, Option<Stats>)> {
    let Some(cgroups) = &host.cgroups else {
        return Ok((exec::run(job, stop).await?, None));
    };
    let cgroup = cgroups
        .create_run()
        .map_err(|e| io::Error::new(e.kind(), format!("{NO_RUN_CGROUP}: {e}")))?;
    let value = cgroup.env_value();
    job.cgroup = Some(&value);
    let outcome = exec::run(job, stop).await;
    let stats = cgroup.stats();
    if tokio::task::spawn_blocking(move || cgroup.remove())
        .await
        .is_err()
    {
        tracing::warn!("removing a run's cgroup panicked");
    }
    Ok((outcome?, Some(stats)))
}

/// "1 GiB" or "512 MiB".
fn mib(v: u64) -> String {
    if v.is_multiple_of(1024) {
        format!("{} GiB", v / 1024)
    } else {
        format!("{v} MiB")
    }
}

/// The value most environments have, then the others by name:
/// `1 GiB (node 2 GiB)`.
fn common(envs: &[&Env], value: impl Fn(&Env) -> u64, show: impl Fn(u64) -> String) -> String {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for env in envs {
        let v = value(env);
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    let (usual, _) = counts
        .iter()
        .copied()
        .max_by_key(|&(v, n)| (n, std::cmp::Reverse(v)))
        .unwrap_or((0, 0));
    let others: Vec<String> = envs
        .iter()
        .filter(|e| value(e) != usual)
        .map(|e| format!("{} {}", e.name, show(value(e))))
        .collect();
    if others.is_empty() {
        show(usual)
    } else {
        format!("{} ({})", show(usual), others.join(", "))
    }
}

/// Why unprivileged user namespaces look unusable (sysctls), if they do.
fn userns_problem(root: bool) -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user.max_user_namespaces is 0".into());
    }
    if !root {
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return Some("kernel.unprivileged_userns_clone is 0".into());
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            return Some(
                "kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor blocks bwrap unless it has a profile)"
                    .into(),
            );
        }
    }
    None
}

/// Which limit ended a run, or made it fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// `memory`, `cpu`, `file_size`, `processes`, `open_files`, `disk`.
    pub limit: &'static str,
    /// False when told from the program's error messages (a heuristic).
    pub certain: bool,
    /// One sentence for the model.
    pub sentence: String,
}

/// What a run used, from its cgroup. Nothing is known without one: the
/// wrapper's `wait4` usage does not cover the jail (bubblewrap's outer
/// process exits without reaping the pid namespace's init, so the jail's CPU
/// time and memory never reach it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    pub cpu: Option<Duration>,
    pub peak_memory: Option<u64>,
}

impl Used {
    pub fn of(cgroup: Option<&Stats>) -> Self {
        Self {
            cpu: cgroup.and_then(|s| s.cpu),
            peak_memory: cgroup.and_then(|s| s.memory_peak),
        }
    }

    /// `used: CPU 1.20 s, memory 38 MiB`, or `None` when nothing is known.
    pub fn sentence(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(cpu) = self.cpu {
            parts.push(format!("CPU {:.2} s", cpu.as_secs_f64()));
        }
        if let Some(bytes) = self.peak_memory {
            parts.push(format!("memory {} MiB", bytes.div_ceil(MIB)));
        }
        (!parts.is_empty()).then(|| format!("used: {}", parts.join(", ")))
    }
}

/// Tells which limit ended or broke the run: first what the kernel says
/// (cgroup counters, the signal), then the program's own error messages.
pub fn diagnose(env: &Env, outcome: &Outcome, cgroup: Option<&Stats>, used: &Used) -> Option<Hit> {
    let l = &env.limits;
    let hit = |limit, certain, sentence: String| {
        Some(Hit {
            limit,
            certain,
            sentence,
        })
    };
    let signal = match outcome.exit {
        Exit::Signal(n) => Some(n),
        Exit::Code(c) if (129..=192).contains(&c) => Some(c - 128),
        _ => None,
    };
    let by_launcher = outcome.timed_out || outcome.cancelled;
    if cgroup.is_some_and(|s| s.oom_kills > 0) {
        return hit(
            "memory",
            true,
            format!("killed: memory limit {} MiB", l.memory_mb),
        );
    }
    if cgroup.is_some_and(|s| s.pids_refused > 0) {
        return hit(
            "processes",
            true,
            format!(
                "too many processes: the limit of {} refused new ones",
                l.pids
            ),
        );
    }
    if !by_launcher {
        match signal {
            Some(SIGXCPU) => {
                return hit("cpu", true, format!("killed: CPU time limit {} s", l.cpu_s));
            }
            Some(SIGXFSZ) => {
                return hit(
                    "file_size",
                    true,
                    format!("killed: file size limit {} MiB", l.file_mb),
                );
            }
            Some(SIGKILL) if used.cpu.is_some_and(|c| c.as_secs() >= l.cpu_s.get()) => {
                return hit(
                    "cpu",
                    false,
                    format!("killed: probably the CPU time limit {} s", l.cpu_s),
                );
            }
            _ => {}
        }
    }
    let stderr = outcome.stderr.render();
    let said = |needles: &[&str]| needles.iter().any(|n| stderr.contains(n));
    if said(&[
        "MemoryError",
        "Cannot allocate memory",
        "out of memory",
        "bad_alloc",
        "could not allocate memory",
        "Fatal process OOM",
        "heap out of memory",
    ]) {
        return hit(
            "memory",
            false,
            format!("probably hit the memory limit ({} MiB)", l.memory_mb),
        );
    }
    if said(&["CPU time limit exceeded"]) {
        return hit(
            "cpu",
            false,
            format!("a process hit the CPU time limit ({} s)", l.cpu_s),
        );
    }
    if said(&["File too large", "File size limit exceeded"]) {
        return hit(
            "file_size",
            false,
            format!("a write hit the file size limit ({} MiB)", l.file_mb),
        );
    }
    if said(&["No space left on device"]) {
        return hit(
            "disk",
            false,
            format!(
                "/tmp ({} MiB) or /workspace ({} MiB) is full",
                l.tmp_mb, l.workspace_mb
            ),
        );
    }
    if said(&["Too many open files"]) {
        return hit(
            "open_files",
            false,
            format!("hit the open files limit ({})", l.nofile),
        );
    }
    if said(&[
        "fork: retry",
        "fork: Resource temporarily unavailable",
        "can't start new thread",
        "BlockingIOError: [Errno 11]",
        "spawn EAGAIN",
    ]) {
        return hit(
            "processes",
            false,
            format!("probably too many processes (limit {})", l.pids),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use proto::cap::Cap;
    use serde_json::json;
    use std::sync::Arc;

    fn env(name: &str, memory_mb: u64) -> Env {
        testing::env(name)
            .with("limits.memory_mb", json!(memory_mb))
            .build()
    }

    fn outcome(exit: Exit, stderr: &str) -> Outcome {
        let mut err = Cap::new(4096);
        err.push(stderr.as_bytes());
        Outcome {
            exit,
            timed_out: false,
            cancelled: false,
            stdout: Cap::new(8),
            stderr: err,
            duration: Duration::from_secs(1),
        }
    }

    fn diag(o: &Outcome, cg: Option<&Stats>) -> Option<Hit> {
        let used = Used::of(cg);
        diagnose(&env("python", 1024), o, cg, &used)
    }

    #[test]
    fn kernel_facts_come_first_and_are_certain() {
        let oom = Stats {
            oom_kills: 1,
            ..Stats::default()
        };
        let h = diag(&outcome(Exit::Code(137), ""), Some(&oom)).unwrap();
        assert_eq!((h.limit, h.certain), ("memory", true));
        assert_eq!(h.sentence, "killed: memory limit 1024 MiB");
        let h = diag(&outcome(Exit::Code(128 + SIGXCPU), ""), None).unwrap();
        assert_eq!(h.sentence, "killed: CPU time limit 60 s");
        let h = diag(&outcome(Exit::Signal(SIGXFSZ), ""), None).unwrap();
        assert_eq!(h.sentence, "killed: file size limit 256 MiB");
        let forks = Stats {
            pids_refused: 3,
            ..Stats::default()
        };
        let h = diag(&outcome(Exit::Code(0), ""), Some(&forks)).unwrap();
        assert_eq!((h.limit, h.certain), ("processes", true));
    }

    #[test]
    fn messages_give_a_probable_limit() {
        for (stderr, limit) in [
            ("Traceback...\nMemoryError\n", "memory"),
            ("OSError: [Errno 27] File too large\n", "file_size"),
            ("OSError: [Errno 28] No space left on device\n", "disk"),
            ("OSError: [Errno 24] Too many open files\n", "open_files"),
            (
                "bash: fork: retry: Resource temporarily unavailable\n",
                "processes",
            ),
        ] {
            let h = diag(&outcome(Exit::Code(1), stderr), None).unwrap();
            assert_eq!((h.limit, h.certain), (limit, false), "{stderr}");
        }
        assert_eq!(diag(&outcome(Exit::Code(1), "NameError: x\n"), None), None);
        // SIGKILL after a minute of CPU: most likely the hard CPU limit.
        let spun = Stats {
            cpu: Some(Duration::from_secs(61)),
            ..Stats::default()
        };
        let h = diag(&outcome(Exit::Signal(SIGKILL), ""), Some(&spun)).unwrap();
        assert_eq!((h.limit, h.certain), ("cpu", false));
        assert_eq!(diag(&outcome(Exit::Signal(SIGKILL), ""), None), None);
    }

    #[test]
    fn usage_comes_from_the_cgroup_only() {
        assert_eq!(Used::of(None).sentence(), None);
        let cg = Stats {
            memory_peak: Some(100 * MIB),
            cpu: Some(Duration::from_millis(2500)),
            ..Stats::default()
        };
        assert_eq!(
            Used::of(Some(&cg)).sentence().unwrap(),
            "used: CPU 2.50 s, memory 100 MiB"
        );
    }

    #[test]
    fn the_instructions_line_names_exceptions_and_omits_unenforced_limits() {
        let mut catalog = Catalog::default();
        for (name, mb) in [("python", 1024), ("shell", 1024), ("node", 2048)] {
            catalog.envs.insert(name.into(), Arc::new(env(name, mb)));
        }
        let user = Host::plain(false).instructions_line(&catalog).unwrap();
        assert_eq!(
            user,
            "Limits per run: time 30 s, memory 1 GiB (node 2 GiB), processes 256, CPU 60 s, \
             files 256 MiB, /tmp 256 MiB, /workspace 512 MiB."
        );
        let root = Host::plain(true).instructions_line(&catalog).unwrap();
        assert!(!root.contains("processes"), "{root}");
        assert_eq!(
            Host::plain(false).instructions_line(&Catalog::default()),
            None
        );
    }
}
