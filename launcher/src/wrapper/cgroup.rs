//! Per-run cgroups: the mechanism behind the memory and process limits when
//! the host gives this launcher a cgroup (docs/contracts.md, contract 2,
//! `NIX_SANDBOX_CGROUP`).
//!
//! - cgroup v2, delegated (a unit with `Delegate=yes`, or a scope the
//!   launcher asked systemd for: delegation.rs says which, never taken
//!   from write access alone), or the launcher's own as root: the launcher
//!   moves itself into a leaf `server` of that cgroup and the jails' init
//!   into a leaf `init`, enables the memory and pids controllers there, and
//!   makes one `run-PID-N` beside them per run or session jail.
//! - cgroup v1 (root, or hierarchies writable by the caller): one
//!   `nix-sandbox-mcp.PID` under the launcher's own cgroup in the pids and
//!   memory hierarchies, one `run-N` in each per run.
//!
//! The launcher makes a run's cgroup, writes the memory and process limits
//! the environment's manifest states ([`RunLimits`]), creates the wrapper
//! in it (v2: clone.rs; v1: hop.rs) or, where the kernel refuses those,
//! moves it in between fork and exec ([`RunCgroup::procs`], before a root
//! launcher's wrapper drops to the jails' user: jailuser.rs), reads the
//! counters, and
//! removes the cgroup once the run's processes are gone. The directories
//! and files stay the launcher's: the jail's uid can write no limit. The
//! wrapper checks that it is in each and that each limit is at most its
//! own (lib/jail/cgroupLimits.nix).

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::delegation::{self, Facts};
use super::hop::{Home, Hop};
use crate::catalog::Limits;
use crate::catalog::limits::{Controller, LIMITS};

/// How long removal waits for a killed jail's processes to leave the cgroup.
const REMOVE_GRACE: Duration = Duration::from_secs(5);

/// Values at or above this mean "no limit" (cgroup v1 writes 2^63 - 4096).
const UNLIMITED: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The cgroups this launcher makes its runs' cgroups in.
#[derive(Debug)]
pub struct Cgroups {
    version: Version,
    /// v2: the delegated cgroup; v1: this launcher's directory in each
    /// hierarchy it may use.
    parents: Vec<PathBuf>,
    /// v2: how it is known to be delegated (or that root uses it without).
    how: String,
    pub memory: bool,
    pub pids: bool,
    next: AtomicU64,
    /// A cgroup hierarchy is mounted with `favordynmods`: moving a process
    /// into a cgroup does not wait for an RCU grace period.
    favordynmods: bool,
    /// v1: the way home of a thread that hops into a run's cgroups to fork
    /// its wrapper there (hop.rs), or why there is none (then each wrapper
    /// is moved in).
    hop: Result<Home, String>,
}

/// The limits a run's cgroup holds: those of the environment's limits the
/// limits table gives a controller (`memory_mb`, memory and swap together;
/// `pids`). Read from their fields, not through the table's rows, so that
/// starting a run runs no code of the table's file (scripts/call-files);
/// a test holds the two to the same values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub memory_bytes: u64,
    pub pids: u64,
}

impl From<&Limits> for RunLimits {
    fn from(limits: &Limits) -> Self {
        Self {
            memory_bytes: limits.memory_mb.get().saturating_mul(1024 * 1024),
            pids: limits.pids.get(),
        }
    }
}

impl RunLimits {
    /// The limit of `controller`, in its unit's base (bytes, processes).
    pub fn of(self, controller: Controller) -> u64 {
        match controller {
            Controller::Memory => self.memory_bytes,
            Controller::Pids => self.pids,
        }
    }
}

/// One run's cgroup (one directory, or one per v1 hierarchy).
#[derive(Debug)]
pub struct RunCgroup {
    version: Version,
    dirs: Vec<PathBuf>,
}

/// The CPU time of one run's or session's cgroup: every process that was
/// ever in it, ended ones and those no parent waited for included.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    path: PathBuf,
    version: Version,
}

impl CpuMeter {
    /// The CPU time so far; `None` once the cgroup is gone.
    pub fn read(&self) -> Option<Duration> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        match self.version {
            Version::V2 => Some(Duration::from_micros(keyed(&text, "usage_usec"))),
            Version::V1 => text.trim().parse().ok().map(Duration::from_nanos),
        }
    }
}

/// What a run's cgroup counted. `None`: not known here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// The limits the wrapper wrote.
    pub memory_limit: Option<u64>,
    pub pids_limit: Option<u64>,
    pub memory_peak: Option<u64>,
    /// Processes the kernel's OOM killer ended in this cgroup.
    pub oom_kills: u64,
    /// Forks refused because pids.max was reached.
    pub pids_refused: u64,
    pub cpu: Option<Duration>,
}

impl Stats {
    /// The limit the wrapper wrote for `controller`.
    pub fn limit(&self, controller: Controller) -> Option<u64> {
        match controller {
            Controller::Memory => self.memory_limit,
            Controller::Pids => self.pids_limit,
        }
    }

    /// What `controller` refused: processes the OOM killer ended, forks.
    pub fn refused(&self, controller: Controller) -> u64 {
        match controller {
            Controller::Memory => self.oom_kills,
            Controller::Pids => self.pids_refused,
        }
    }
}

impl Cgroups {
    /// Whether these cgroups hold `controller`'s limit.
    pub fn holds(&self, controller: Controller) -> bool {
        match controller {
            Controller::Memory => self.memory,
            Controller::Pids => self.pids,
        }
    }

    /// Finds and prepares a cgroup this launcher may use; the error says why
    /// there is none (one line, for the self-test).
    pub fn setup() -> Result<Self, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let v2 = match setup_v2(&own, &mounts) {
            Ok(cgroups) => return Ok(cgroups),
            Err(reason) => reason,
        };
        match setup_v1(&own, &mounts) {
            Ok(cgroups) => Ok(cgroups),
            Err(v1) => Err(format!("{v2}; {v1}")),
        }
    }

    /// One line for the self-test: which version, where, what it limits.
    pub fn describe(&self) -> String {
        let what = match (self.memory, self.pids) {
            (true, true) => "memory and processes",
            (true, false) => "memory",
            _ => "processes",
        };
        let version = match self.version {
            Version::V1 => "v1".to_owned(),
            Version::V2 if self.how.starts_with("root") => format!("v2 ({})", self.how),
            Version::V2 => format!("v2 (delegated: {})", self.how),
        };
        let at: Vec<String> = self
            .parents
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut line = format!("cgroup {version} for {what} at {}", at.join(", "));
        if self.version == Version::V1 {
            match &self.hop {
                Ok(_) => line.push_str(
                    "; each wrapper is forked in its run's cgroups (the forking thread steps in \
                     and back out: no process is moved)",
                ),
                Err(why) => line.push_str(&format!(
                    "; each wrapper is moved into its run's cgroups (the forking thread cannot \
                     step into them: {why})"
                )),
            }
            if self.hop.is_err() && !self.favordynmods {
                line.push_str(
                    ", and each move waits for an RCU grace period (about 10 ms): mount the \
                     hierarchies with favordynmods (Linux 6.0 and later) to save it",
                );
            }
        }
        line
    }

    /// Cgroups that limit what is asked, at no path (tests only).
    #[cfg(test)]
    pub fn fake(memory: bool, pids: bool) -> Self {
        Self {
            version: Version::V2,
            parents: Vec::new(),
            how: "a test".into(),
            memory,
            pids,
            next: AtomicU64::new(0),
            favordynmods: true,
            hop: Err("a test".into()),
        }
    }

    /// The hop that forks the wrapper of `run` (holding `limits`) in its
    /// cgroups v1: `None` where there is none (v2, or refused at start),
    /// an error when its files cannot be opened.
    pub fn hop(&self, run: &RunCgroup, limits: RunLimits) -> Option<io::Result<Hop>> {
        match (self.version, &self.hop) {
            (Version::V1, Ok(home)) => Some(Hop::open(&run.dirs, limits.pids, home)),
            _ => None,
        }
    }

    /// Makes the cgroup of the next run, holding `limits`.
    pub fn create_run(&self, limits: RunLimits) -> io::Result<RunCgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("run-{}-{n}", std::process::id());
        let mut run = RunCgroup {
            version: self.version,
            dirs: Vec::new(),
        };
        let made = self.parents.iter().try_for_each(|parent| {
            let dir = parent.join(&name);
            std::fs::create_dir(&dir).map_err(|e| at(&dir, e))?;
            run.dirs.push(dir.clone());
            write_limits(&dir, limits)
        });
        match made {
            Ok(()) => Ok(run),
            Err(e) => {
                run.remove();
                Err(e)
            }
        }
    }

    /// Moves the jails' init (lifetime.rs) into a leaf `init` of its own
    /// beside the server's (v2; v1 leaves it where it is): the server's
    /// leaf then holds the server alone.
    pub fn place_init(&self, pid: i32) -> io::Result<()> {
        let (Version::V2, Some(parent)) = (self.version, self.parents.first()) else {
            return Ok(());
        };
        let leaf = parent.join("init");
        match std::fs::create_dir(&leaf) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(at(&leaf, e)),
            _ => {}
        }
        let procs = leaf.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| at(&procs, e))
    }

    /// Removes what `setup` made that can be removed (v1's directories);
    /// runs' cgroups are removed by their runs.
    pub fn teardown(&self) {
        if self.version == Version::V1 {
            for parent in &self.parents {
                if let Err(e) = std::fs::remove_dir(parent) {
                    tracing::debug!(dir = %parent.display(), error = %e, "cgroup not removed");
                }
            }
        }
    }
}

impl RunCgroup {
    /// The value of `NIX_SANDBOX_CGROUP` for the wrapper.
    pub fn env_value(&self) -> OsString {
        std::env::join_paths(&self.dirs).unwrap_or_default()
    }

    /// Its one directory when it is a cgroup v2 (what `clone3` can create
    /// a process in).
    pub fn v2_dir(&self) -> Option<&Path> {
        match (self.version, self.dirs.as_slice()) {
            (Version::V2, [dir]) => Some(dir),
            _ => None,
        }
    }

    /// Each directory's `cgroup.procs`, open for writing: writing `0` to
    /// one moves the writing process in (the wrapper, between fork and
    /// exec). Opened by the launcher, so the move is the launcher's to make.
    pub fn procs(&self) -> io::Result<Vec<std::fs::File>> {
        self.dirs
            .iter()
            .map(|dir| {
                let file = dir.join("cgroup.procs");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&file)
                    .map_err(|e| at(&file, e))
            })
            .collect()
    }

    /// What reads this cgroup's CPU time as it goes, `None` when no
    /// hierarchy counts it (a v1 host without cpuacct).
    pub fn cpu_meter(&self) -> Option<CpuMeter> {
        let file = match self.version {
            Version::V2 => "cpu.stat",
            Version::V1 => "cpuacct.usage",
        };
        self.dirs
            .iter()
            .map(|dir| dir.join(file))
            .find(|path| path.exists())
            .map(|path| CpuMeter {
                path,
                version: self.version,
            })
    }

    /// Reads the counters (call before [`RunCgroup::remove`]).
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for dir in &self.dirs {
            let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
            let number = |file: &str| read(file).and_then(|t| parse_limit(&t));
            match self.version {
                Version::V2 => {
                    s.memory_limit = number("memory.max");
                    s.memory_peak = read("memory.peak").and_then(|t| t.trim().parse().ok());
                    s.oom_kills = read("memory.events").map_or(0, |t| keyed(&t, "oom_kill"));
                    s.cpu =
                        read("cpu.stat").map(|t| Duration::from_micros(keyed(&t, "usage_usec")));
                }
                Version::V1 => {
                    if let Some(ns) = read("cpuacct.usage").and_then(|t| t.trim().parse().ok()) {
                        s.cpu = Some(Duration::from_nanos(ns));
                    }
                    if dir.join("memory.limit_in_bytes").exists() {
                        s.memory_limit = number("memory.limit_in_bytes");
                        s.memory_peak =
                            read("memory.max_usage_in_bytes").and_then(|t| t.trim().parse().ok());
                        s.oom_kills =
                            read("memory.oom_control").map_or(0, |t| keyed(&t, "oom_kill"));
                    }
                }
            }
            if dir.join("pids.max").exists() {
                s.pids_limit = number("pids.max");
                s.pids_refused = read("pids.events").map_or(0, |t| keyed(&t, "max"));
            }
        }
        s
    }

    /// Removes the cgroup once its processes are gone (a killed jail's
    /// processes take a moment to exit); blocking, bounded by
    /// [`REMOVE_GRACE`]. v2's `cgroup.kill` ends what is left.
    pub fn remove(self) {
        let started = Instant::now();
        let mut pause = Duration::from_millis(2);
        let mut killed = false;
        for dir in &self.dirs {
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if started.elapsed() > REMOVE_GRACE => {
                        tracing::warn!(dir = %dir.display(), error = %e, "a run's cgroup is still busy; left behind");
                        break;
                    }
                    Err(_) => {
                        if self.version == Version::V2 && !killed {
                            // Only this run's processes are in it.
                            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
                            killed = true;
                        }
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(100));
                    }
                }
            }
        }
    }
}

/// The files of a run's cgroup that hold `controller`'s limit `value`, and
/// what each is written, in order: pids.max; memory.max with
/// memory.swap.max 0 (v2), or memory.limit_in_bytes then
/// memory.memsw.limit_in_bytes when the kernel accounts swap (v1).
fn files(controller: Controller, value: u64) -> Vec<(&'static str, String)> {
    let value = value.to_string();
    match controller {
        Controller::Pids => vec![("pids.max", value)],
        Controller::Memory => vec![
            ("memory.max", value.clone()),
            ("memory.swap.max", "0".to_owned()),
            ("memory.limit_in_bytes", value.clone()),
            ("memory.memsw.limit_in_bytes", value),
        ],
    }
}

/// Writes `limits` into the files of `dir` that hold them ([`files`]):
/// each limit the limits table gives a controller, where `dir`'s hierarchy
/// has that controller.
fn write_limits(dir: &Path, limits: RunLimits) -> io::Result<()> {
    let files = (LIMITS.iter())
        .filter_map(|limit| limit.cgroup)
        .flat_map(|controller| files(controller, limits.of(controller)));
    for (name, value) in files {
        let file = dir.join(name);
        if file.exists() {
            std::fs::write(&file, &value).map_err(|e| {
                at(
                    &file,
                    io::Error::new(e.kind(), format!("writing {value}: {e}")),
                )
            })?;
        }
    }
    Ok(())
}

/// `e`, saying which path it is about.
fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `max` or a number; `None` for no limit.
fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok().filter(|&n| n < UNLIMITED)
}

/// The value of `key` in a flat keyed file (`oom_kill 3`), 0 when absent.
fn keyed(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Where a hierarchy is mounted: (mount point, super options) per
/// `mountinfo` line of file system type `fstype`.
fn mounts_of<'a>(mountinfo: &'a str, fstype: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> {
    mountinfo.lines().filter_map(move |line| {
        let (before, after) = line.split_once(" - ")?;
        let mount_point = before.split(' ').nth(4)?;
        let mut rest = after.split(' ');
        let fs = rest.next()?;
        let _source = rest.next()?;
        let options = rest.next().unwrap_or("");
        (fs == fstype).then_some((mount_point, options))
    })
}

/// The launcher's path in the hierarchy whose controller list (second
/// field of /proc/self/cgroup) satisfies `pick`.
fn own_path(own: &str, pick: impl Fn(&str) -> bool) -> Option<&str> {
    own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        pick(controllers).then_some(path)
    })
}

fn join(mount: &str, path: &str) -> PathBuf {
    Path::new(mount).join(path.trim_start_matches('/'))
}

fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

fn setup_v2(own: &str, mounts: &str) -> Result<Cgroups, String> {
    let no = |why: String| format!("no delegated cgroup v2 ({why})");
    let path = own_path(own, |c| c.is_empty()).ok_or_else(|| no("not in a v2 hierarchy".into()))?;
    let (mount, _) = mounts_of(mounts, "cgroup2")
        .next()
        .ok_or_else(|| no("cgroup2 is not mounted".into()))?;
    let judged = |path: &str| {
        let dir = join(mount, path);
        let judged = Facts::read(&dir, path).and_then(|facts| facts.judge());
        (dir, judged)
    };
    let (dir, how) = match judged(path) {
        (dir, Ok(how)) => (dir, how.to_owned()),
        (dir, Err(why)) => {
            let here = format!("{}: {why}", dir.display());
            match delegation::ask_systemd(own_v2_path) {
                Ok(scope) => match judged(&scope) {
                    (dir, Ok(how)) => (dir, format!("{how}, a scope systemd made for it")),
                    (dir, Err(why)) => {
                        return Err(no(format!(
                            "{here}; the scope systemd made, {}: {why}",
                            dir.display()
                        )));
                    }
                },
                Err(asked) if delegation::euid() != 0 => {
                    return Err(no(format!("{here}; {asked}")));
                }
                // Root may write anywhere: its own cgroup, as before.
                Err(asked) => (dir, format!("root, not delegated ({here}; {asked})")),
            }
        }
    };
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map_err(|e| no(format!("{}: {e}", dir.display())))?;
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if !has("memory") || !has("pids") {
        return Err(no(format!(
            "{} ({how}) offers controllers [{}], not memory and pids",
            dir.display(),
            controllers.trim()
        )));
    }
    let leaf = dir.join("server");
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(no(format!("{}: {e}", leaf.display()))),
    }
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| no(format!("cannot move into {}: {e}", leaf.display())))?;
    std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids").map_err(|e| {
        no(format!(
            "cannot enable memory and pids in {} (other processes in it?): {e}",
            dir.display()
        ))
    })?;
    Ok(Cgroups {
        version: Version::V2,
        parents: vec![dir],
        how,
        memory: true,
        pids: true,
        next: AtomicU64::new(0),
        favordynmods: favors_dynmods(mounts),
        hop: Err("cgroup v2".into()),
    })
}

/// This process' path in the v2 hierarchy, read afresh.
fn own_v2_path() -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    own_path(&own, |c| c.is_empty()).map(str::to_owned)
}

fn setup_v1(own: &str, mounts: &str) -> Result<Cgroups, String> {
    let mut parents = Vec::new();
    let (mut memory, mut pids) = (false, false);
    let mut reasons = Vec::new();
    // cpuacct only counts (CPU time for the result); pids and memory limit.
    for controller in ["pids", "memory", "cpuacct"] {
        let is = |list: &str| list.split(',').any(|c| c == controller);
        let Some(path) = own_path(own, is) else {
            reasons.push(format!("no v1 {controller} hierarchy"));
            continue;
        };
        let Some((mount, _)) = mounts_of(mounts, "cgroup")
            .find(|(_, options)| options.split(',').any(|o| o == controller))
        else {
            reasons.push(format!("the v1 {controller} hierarchy is not mounted"));
            continue;
        };
        let dir = join(mount, path);
        if !writable(&dir) {
            reasons.push(format!("{} is not writable by this user", dir.display()));
            continue;
        }
        remove_stale(&dir);
        let base = dir.join(format!("nix-sandbox-mcp.{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&base) {
            reasons.push(format!("{}: {e}", base.display()));
            continue;
        }
        parents.push(base);
        match controller {
            "pids" => pids = true,
            "memory" => memory = true,
            _ => {}
        }
    }
    if !memory && !pids {
        for parent in &parents {
            let _ = std::fs::remove_dir(parent);
        }
        return Err(format!("no writable cgroup v1 ({})", reasons.join("; ")));
    }
    let hop = home_of(&parents);
    Ok(Cgroups {
        version: Version::V1,
        parents,
        how: String::new(),
        memory,
        pids,
        next: AtomicU64::new(0),
        favordynmods: favors_dynmods(mounts),
        hop,
    })
}

/// The way home from a hop into a run's cgroups (v1: the launcher's own
/// cgroup in each hierarchy, where `parents`, this launcher's directories,
/// are), tried once into `parents` and back; else why there is none.
fn home_of(parents: &[PathBuf]) -> Result<Home, String> {
    let homes: Vec<PathBuf> = parents
        .iter()
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect();
    let home = Home::open(&homes).map_err(|e| e.to_string())?;
    home.try_hop(parents).map_err(|e| e.to_string())?;
    Ok(home)
}

/// Whether a cgroup hierarchy (v1 or v2) of `mountinfo` is mounted with
/// `favordynmods`, which makes the kernel's moves between cgroups cheap
/// for every hierarchy.
fn favors_dynmods(mountinfo: &str) -> bool {
    ["cgroup", "cgroup2"].into_iter().any(|fs| {
        mounts_of(mountinfo, fs).any(|(_, options)| options.split(',').any(|o| o == "favordynmods"))
    })
}

/// Removes the empty v1 directories a launcher that is gone left in `dir`.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("nix-sandbox-mcp."))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let stale = entry.path();
        if let Ok(runs) = std::fs::read_dir(&stale) {
            for run in runs.flatten() {
                if run.path().is_dir() {
                    let _ = std::fs::remove_dir(run.path());
                }
            }
        }
        match std::fs::remove_dir(&stale) {
            Ok(()) => tracing::info!(dir = %stale.display(), "removed a stale cgroup"),
            Err(e) => tracing::debug!(dir = %stale.display(), error = %e, "stale cgroup kept"),
        }
    }
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
