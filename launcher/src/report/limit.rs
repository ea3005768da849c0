//! Which limit ended a run, or made it fail, when that can be told, and
//! what the run used: first what the kernel says (cgroup counters, the
//! signal), then the program's own error messages.

use std::time::Duration;

use proto::frame::Exit;

use crate::catalog::limits::{LIMITS, Signs};
use crate::catalog::{Env, Limits};
use crate::run::RunOutcome;
use crate::wrapper::cgroup::Stats;

pub use crate::catalog::limits::{SIGXCPU, SIGXFSZ};

pub const SIGKILL: i32 = 9;
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
/// (cgroup counters, the signal), then the program's own error messages;
/// the limits table says what each limit's signs are.
pub fn diagnose(env: &Env, outcome: &RunOutcome, used: &Used) -> Option<Hit> {
    let limits = &env.limits;
    // A run the launcher ended died of its signal, not of a limit's.
    let by_launcher = outcome.timed_out || outcome.cancelled || outcome.flooded.is_some();
    refused_by_cgroup(limits, outcome.usage.as_ref())
        .or_else(|| match signal(outcome.exit) {
            Some(signal) if !by_launcher => killed_at(limits, signal, used),
            _ => None,
        })
        .or_else(|| said_by_program(limits, &outcome.stderr.render()))
}

/// The signs of every limit that has them, in the table's order.
fn signs() -> impl Iterator<Item = &'static Signs> {
    LIMITS.iter().filter_map(|limit| limit.hit)
}

/// A hit of the limit whose signs are `signs`.
fn found(signs: &Signs, certain: bool, sentence: String) -> Option<Hit> {
    Some(Hit {
        limit: signs.name,
        certain,
        sentence,
    })
}

/// A limit whose cgroup counted what it refused (the OOM killer's kills,
/// forks refused).
fn refused_by_cgroup(limits: &Limits, cgroup: Option<&Stats>) -> Option<Hit> {
    let stats = cgroup?;
    LIMITS.iter().find_map(|limit| {
        let (controller, signs) = (limit.cgroup?, limit.hit?);
        let sentence = signs.certain?;
        (stats.refused(controller) > 0).then(|| found(signs, true, sentence(limits)))?
    })
}

/// The limit whose signal ended the run, or, for a SIGKILL, the one the
/// run had spent (the CPU time's hard limit).
fn killed_at(limits: &Limits, signal: i32, used: &Used) -> Option<Hit> {
    if let Some(signs) = signs().find(|s| s.signal == Some(signal))
        && let Some(sentence) = signs.certain
    {
        return found(signs, true, sentence(limits));
    }
    let cpu = used.cpu.filter(|_| signal == SIGKILL)?;
    LIMITS.iter().find_map(|limit| {
        let signs = limit.hit?;
        let sentence = signs.spent?;
        (cpu.as_secs() >= limit.of(limits)).then(|| found(signs, false, sentence(limits)))?
    })
}

/// The limit the program's error messages name, the most telling words
/// first and the generic ones last.
fn said_by_program(limits: &Limits, stderr: &str) -> Option<Hit> {
    let (generic, telling): (Vec<&Signs>, Vec<&Signs>) = signs().partition(|s| s.generic_words);
    telling.into_iter().chain(generic).find_map(|signs| {
        let words = signs.words.iter().find(|w| stderr.contains(*w))?;
        found(signs, false, (signs.probable)(limits, words))
    })
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
            flooded: None,
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
