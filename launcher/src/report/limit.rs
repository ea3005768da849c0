//! Which limit ended a run, or made it fail, when that can be told, and
//! what the run used: first what the kernel says (cgroup counters, the
//! signal), then the program's own error messages.

use std::time::Duration;

use proto::frame::Exit;

use crate::catalog::Env;
use crate::run::RunOutcome;
use crate::wrapper::cgroup::Stats;

pub const SIGKILL: i32 = 9;
pub const SIGXCPU: i32 = 24;
pub const SIGXFSZ: i32 = 25;
const MIB: u64 = 1024 * 1024;

/// The signal that ended a wrapper: the one it was killed by, or N when it
/// exited with 128+N, which is how a wrapper reports that the code it ran
/// died of signal N (contract 2).
pub fn signal(exit: Option<Exit>) -> Option<i32> {
    match exit {
        Some(Exit::Signal(n)) => Some(n),
        Some(Exit::Code(c)) if (129..=192).contains(&c) => Some(c - 128),
        _ => None,
    }
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
#[expect(
    clippy::too_many_lines,
    reason = "older than the 80-line lint: to split, not to copy"
)]
pub fn diagnose(env: &Env, outcome: &RunOutcome, used: &Used) -> Option<Hit> {
    let l = &env.limits;
    let hit = |limit, certain, sentence: String| {
        Some(Hit {
            limit,
            certain,
            sentence,
        })
    };
    let signal = signal(outcome.exit);
    let cgroup = outcome.usage.as_ref();
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
    // The runtimes' own words, the most telling first: they are told the
    // limit (lib/jail/runtimeLimits.nix) or get ENOMEM at RLIMIT_DATA.
    if let Some(words) = [
        "java.lang.OutOfMemoryError",
        "JavaScript heap out of memory",
        "MemoryError",
        "fatal error: runtime: out of memory",
        "memory allocation of",
        "insufficient memory for the Java Runtime",
        "Cannot allocate memory",
        "out of memory",
        "bad_alloc",
        "could not allocate memory",
        "Fatal process OOM",
    ]
    .into_iter()
    .find(|n| stderr.contains(n))
    {
        return hit(
            "memory",
            false,
            format!(
                "probably hit the memory limit ({} MiB): the output says \"{words}\"",
                l.memory_mb
            ),
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

    fn env(name: &str, memory_mb: u64) -> Env {
        testing::env(name)
            .with("limits.memory_mb", json!(memory_mb))
            .build()
    }

    fn outcome(exit: Exit, stderr: &str) -> RunOutcome {
        let mut err = Cap::new(4096);
        err.push(stderr.as_bytes());
        RunOutcome {
            exit: Some(exit),
            timed_out: false,
            cancelled: false,
            stdout: Cap::new(8),
            stderr: err,
            duration: Duration::from_secs(1),
            usage: None,
            refusals: Vec::new(),
        }
    }

    fn diag(o: &RunOutcome, cg: Option<&Stats>) -> Option<Hit> {
        // The run as it ended with the cgroup `cg`, if any.
        let o = RunOutcome {
            usage: cg.copied(),
            refusals: Vec::new(),
            stdout: o.stdout.clone(),
            stderr: o.stderr.clone(),
            ..*o
        };
        let used = Used::of(cg);
        diagnose(&env("python", 1024), &o, &used)
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
            (
                "Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space\n",
                "memory",
            ),
            ("memory allocation of 67108864 bytes failed\n", "memory"),
            (
                "fatal error: out of memory allocating heap arena metadata\n",
                "memory",
            ),
            (
                "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n",
                "memory",
            ),
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
        let h = diag(
            &outcome(
                Exit::Code(1),
                "java.lang.OutOfMemoryError: Java heap space\n",
            ),
            None,
        )
        .unwrap();
        assert_eq!(
            h.sentence,
            "probably hit the memory limit (1024 MiB): the output says \"java.lang.OutOfMemoryError\""
        );
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
}
