//! The limits table: every limit of an environment (`limits.KEY` in the
//! manifest), declared once ([`LIMITS`]) with its unit, its default, what
//! the instructions call it, how a result tells that a run hit it, how the
//! probe checks that a jail holds it, and whether a run's cgroup holds it.
//! The instructions' limits line (mcp/tool.rs), the report of a limit hit
//! (report/limit.rs), the probe (probe.rs) and the cgroup code
//! (wrapper/cgroup.rs) read the rows; [`Limits`] holds one environment's
//! values in the manifest's shape (docs/contracts.md, contract 1).
//! limits_tests.rs holds the two to the same keys, and the docs, the test
//! manifest and lib/environment.nix to the rows.

use std::collections::BTreeMap;
use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Limits of an environment. The launcher enforces the deadline and the
/// output cap; the wrapper enforces the rest, which the launcher checks at
/// start (probe.rs) and names when a run hits one (report/limit.rs).
///
/// The two the launcher enforces itself may be absent (an older sandbox):
/// they take mkSandbox's defaults (lib/environment.nix). The others are the
/// wrapper's to enforce, so only the manifest can say that it does: each
/// must be there. A limit this server does not know is in `unknown`, and
/// refuses the environment: it cannot be enforced here.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Limits {
    #[serde(default = "default_timeout_s")]
    pub timeout_s: NonZeroU64,
    #[serde(default = "default_max_timeout_s")]
    pub max_timeout_s: NonZeroU64,
    #[serde(default = "default_output_bytes")]
    pub output_bytes: NonZeroU64,
    pub memory_mb: NonZeroU64,
    pub pids: NonZeroU64,
    pub workspace_mb: NonZeroU64,
    pub tmp_mb: NonZeroU64,
    pub cpu_s: NonZeroU64,
    pub file_mb: NonZeroU64,
    pub nofile: NonZeroU64,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

fn default_timeout_s() -> NonZeroU64 {
    TIMEOUT_S.default_value()
}

fn default_max_timeout_s() -> NonZeroU64 {
    MAX_TIMEOUT_S.default_value()
}

fn default_output_bytes() -> NonZeroU64 {
    OUTPUT_BYTES.default_value()
}

/// One limit: `limits.KEY` of the manifest.
#[derive(Debug)]
pub struct Limit {
    pub key: &'static str,
    /// Its value in an environment's [`Limits`].
    pub value: fn(&Limits) -> NonZeroU64,
    pub unit: Unit,
    /// mkSandbox's default (lib/environment.nix).
    pub default: u64,
    /// Its words in the instructions' limits line; `None`: not there.
    pub shown: Option<Shown>,
    /// How a result tells that a run hit it; `None`: never told (the
    /// launcher's own limits are said as what they did).
    pub hit: Option<&'static Signs>,
    /// How the probe checks it from inside the jail (where no cgroup holds
    /// it), or that the launcher holds it: then a manifest without it takes
    /// the default, where one the wrapper holds is required.
    pub probe: Probe,
    /// The cgroup controller that holds it, per run, where the host gives
    /// one: wrapper/cgroup.rs writes it, the probe reads it back, a result
    /// reads what it refused.
    pub cgroup: Option<Controller>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Mib,
    Count,
    Bytes,
}

/// What the instructions' limits line calls a limit: `word` where it holds
/// as the instructions mean it, `without_cgroup` where the host gives no
/// cgroup for it (`memory per process`).
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    pub word: &'static str,
    pub without_cgroup: &'static str,
}

const fn shown(word: &'static str) -> Option<Shown> {
    Some(Shown {
        word,
        without_cgroup: word,
    })
}

/// The signs that a run hit a limit, and what its result says then.
#[derive(Debug)]
pub struct Signs {
    /// The limit's name in the result's facts (`_meta`): `memory`, `cpu`.
    pub name: &'static str,
    /// The signal the kernel ends a process with at the limit.
    pub signal: Option<i32>,
    /// The sentence when the kernel says so (the signal, or the cgroup's
    /// count of what it refused); `None`: the kernel does not say.
    pub certain: Option<fn(&Limits) -> String>,
    /// A run killed by SIGKILL once it used the limit (seconds of CPU time:
    /// RLIMIT_CPU's hard limit comes a second after its signal): the
    /// sentence of that probable hit.
    pub spent: Option<fn(&Limits) -> String>,
    /// What programs print at the limit, the most telling first.
    pub words: &'static [&'static str],
    /// Its words are ones other failures print too (EAGAIN): tried after
    /// every other limit's.
    pub generic_words: bool,
    /// The sentence when the program's words say so (`words`: the ones
    /// found).
    pub probable: fn(&Limits, &str) -> String,
}

/// How the probe checks, from inside the jail, that it holds a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The launcher holds it (`#[serde(default)]` in [`Limits`]): nothing
    /// to see in the jail.
    Launcher,
    /// The soft limit of this row of /proc/self/limits is at most the value.
    Rlimit(&'static str),
    /// The soft limit of this row is at most the value plus one: the
    /// jail's `RLIMIT_NPROC`, whose count includes bubblewrap's own process
    /// outside the jail's pid namespace (lib/jail/kernelBudgets.nix).
    RlimitWithBubblewrap(&'static str),
    /// The writable mount at this path, if the jail has one, is at most the
    /// value.
    Mount(&'static str),
    /// Each process's data and its main stack (which RLIMIT_DATA does not
    /// count), hard limits both, are at most the value; or, in a sandbox
    /// built before the jails set RLIMIT_DATA, its address space.
    Data,
}

/// A cgroup controller that holds a limit per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
}

pub const SIGXCPU: i32 = 24;
pub const SIGXFSZ: i32 = 25;

impl Limits {
    /// The longest timeout a call may ask for: `max_timeout_s`, or
    /// `timeout_s` when that is longer.
    pub fn ceiling(&self) -> NonZeroU64 {
        self.max_timeout_s.max(self.timeout_s)
    }
}

impl Limit {
    /// Its value in `limits`.
    pub fn of(&self, limits: &Limits) -> u64 {
        (self.value)(limits).get()
    }

    /// Its value in `limits` in the unit the kernel counts: bytes for MiB.
    pub fn base(&self, limits: &Limits) -> u64 {
        match self.unit {
            Unit::Mib => self.of(limits).saturating_mul(1024 * 1024),
            Unit::Seconds | Unit::Count | Unit::Bytes => self.of(limits),
        }
    }

    /// The default as a limit.
    pub fn default_value(&self) -> NonZeroU64 {
        NonZeroU64::new(self.default).unwrap_or(NonZeroU64::MIN)
    }
}

pub const TIMEOUT_S: Limit = Limit {
    key: "timeout_s",
    value: |l| l.timeout_s,
    unit: Unit::Seconds,
    default: 30,
    shown: shown("time"),
    hit: None,
    probe: Probe::Launcher,
    cgroup: None,
};

/// The longest `timeout_s` a call may ask for (the `run` tool's
/// `timeout_s`): a longer one is cut to it. Never below `timeout_s`
/// ([`Limits::ceiling`]). Shown with `timeout_s` in the instructions.
pub const MAX_TIMEOUT_S: Limit = Limit {
    key: "max_timeout_s",
    value: |l| l.max_timeout_s,
    unit: Unit::Seconds,
    default: 600,
    shown: None,
    hit: None,
    probe: Probe::Launcher,
    cgroup: None,
};

pub const MEMORY_MB: Limit = Limit {
    key: "memory_mb",
    value: |l| l.memory_mb,
    unit: Unit::Mib,
    default: 1024,
    // Without a cgroup, RLIMIT_DATA binds each process, not the run.
    shown: Some(Shown {
        word: "memory",
        without_cgroup: "memory per process",
    }),
    hit: Some(&Signs {
        name: "memory",
        signal: None,
        certain: Some(|l| format!("killed: memory limit {} MiB", l.memory_mb)),
        spent: None,
        // The runtimes' own words, the most telling first: they are told
        // the limit (lib/jail/runtimeLimits.nix) or get ENOMEM at
        // RLIMIT_DATA.
        words: &[
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
        ],
        generic_words: false,
        probable: |l, words| {
            format!(
                "probably hit the memory limit ({} MiB): the output says \"{words}\"",
                l.memory_mb
            )
        },
    }),
    probe: Probe::Data,
    cgroup: Some(Controller::Memory),
};

pub const PIDS: Limit = Limit {
    key: "pids",
    value: |l| l.pids,
    unit: Unit::Count,
    default: 32,
    // Without a cgroup, RLIMIT_NPROC in the jail's user namespace binds
    // the jail's processes together (its user is never root).
    shown: shown("processes"),
    hit: Some(&Signs {
        name: "processes",
        signal: None,
        certain: Some(|l| {
            format!(
                "too many processes: the limit of {} refused new ones",
                l.pids
            )
        }),
        spent: None,
        words: &[
            "fork: retry",
            "fork: Resource temporarily unavailable",
            "can't start new thread",
            "BlockingIOError: [Errno 11]",
            "spawn EAGAIN",
        ],
        generic_words: true,
        probable: |l, _| format!("probably too many processes (limit {})", l.pids),
    }),
    probe: Probe::RlimitWithBubblewrap("Max processes"),
    cgroup: Some(Controller::Pids),
};

pub const CPU_S: Limit = Limit {
    key: "cpu_s",
    value: |l| l.cpu_s,
    unit: Unit::Seconds,
    default: 60,
    shown: shown("CPU"),
    hit: Some(&Signs {
        name: "cpu",
        signal: Some(SIGXCPU),
        certain: Some(|l| format!("killed: CPU time limit {} s", l.cpu_s)),
        spent: Some(|l| format!("killed: probably the CPU time limit {} s", l.cpu_s)),
        words: &["CPU time limit exceeded"],
        generic_words: false,
        probable: |l, _| format!("a process hit the CPU time limit ({} s)", l.cpu_s),
    }),
    probe: Probe::Rlimit("Max cpu time"),
    cgroup: None,
};

pub const FILE_MB: Limit = Limit {
    key: "file_mb",
    value: |l| l.file_mb,
    unit: Unit::Mib,
    default: 256,
    shown: shown("files"),
    hit: Some(&Signs {
        name: "file_size",
        signal: Some(SIGXFSZ),
        certain: Some(|l| format!("killed: file size limit {} MiB", l.file_mb)),
        spent: None,
        words: &["File too large", "File size limit exceeded"],
        generic_words: false,
        probable: |l, _| format!("a write hit the file size limit ({} MiB)", l.file_mb),
    }),
    probe: Probe::Rlimit("Max file size"),
    cgroup: None,
};

/// `/tmp` or `/workspace` full: one hit for both, which says both sizes.
const DISK_FULL: Signs = Signs {
    name: "disk",
    signal: None,
    certain: None,
    spent: None,
    words: &["No space left on device"],
    generic_words: false,
    probable: |l, _| {
        format!(
            "/tmp ({} MiB) or /workspace ({} MiB) is full",
            l.tmp_mb, l.workspace_mb
        )
    },
};

pub const TMP_MB: Limit = Limit {
    key: "tmp_mb",
    value: |l| l.tmp_mb,
    unit: Unit::Mib,
    default: 256,
    shown: shown("/tmp"),
    hit: Some(&DISK_FULL),
    probe: Probe::Mount("/tmp"),
    cgroup: None,
};

pub const WORKSPACE_MB: Limit = Limit {
    key: "workspace_mb",
    value: |l| l.workspace_mb,
    unit: Unit::Mib,
    default: 512,
    shown: shown("/workspace"),
    hit: Some(&DISK_FULL),
    probe: Probe::Mount("/workspace"),
    cgroup: None,
};

pub const NOFILE: Limit = Limit {
    key: "nofile",
    value: |l| l.nofile,
    unit: Unit::Count,
    default: 1024,
    shown: None,
    hit: Some(&Signs {
        name: "open_files",
        signal: None,
        certain: None,
        spent: None,
        words: &["Too many open files"],
        generic_words: false,
        probable: |l, _| format!("hit the open files limit ({})", l.nofile),
    }),
    probe: Probe::Rlimit("Max open files"),
    cgroup: None,
};

pub const OUTPUT_BYTES: Limit = Limit {
    key: "output_bytes",
    value: |l| l.output_bytes,
    unit: Unit::Bytes,
    default: 65536,
    shown: None,
    hit: None,
    probe: Probe::Launcher,
    cgroup: None,
};

/// Every limit, in the order of the instructions' limits line.
pub const LIMITS: [&Limit; 10] = [
    &TIMEOUT_S,
    &MAX_TIMEOUT_S,
    &MEMORY_MB,
    &PIDS,
    &CPU_S,
    &FILE_MB,
    &TMP_MB,
    &WORKSPACE_MB,
    &NOFILE,
    &OUTPUT_BYTES,
];

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
