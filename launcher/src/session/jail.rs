//! One session jail (docs/contracts.md, contract 3): an environment's `session`
//! wrapper, which starts the agent as the jail's entry, and the agent's
//! frames (`proto::frame`) on the wrapper's stdin and stdout.
//!
//! - Spawned like a run wrapper: a new process group, contract 2's small
//!   environment, a cgroup of its own when the host has cgroups (the wrapper
//!   writes the limits there), SIGKILL when the launcher dies.
//! - Its stderr, the agent's log, goes to the launcher's log (debug level);
//!   its last lines are kept to explain a jail that died before answering.
//! - Killing it (dropping it included) kills the wrapper's process group:
//!   bubblewrap's outer process dies, its `--die-with-parent` ends the jail's
//!   pid 1 (the agent itself), and with it every process of the pid
//!   namespace. The cgroup is
//!   removed once the wrapper is gone, by a task started with the jail
//!   (wrapper/reaper.rs: the launcher's exit waits for those).

use std::borrow::Cow;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use proto::frame::{self, Reply, Request, Split, Splitter};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use super::cpu::{self, CpuWatch};
use super::publish::Publisher;
use super::verify::Violation;
use crate::catalog::Env;
use crate::egress::Gate;
use crate::project::checkpoint::{self, Frozen};
use crate::project::pool::Full;
use crate::project::{self, InJail, Layer};
use crate::wrapper::cgroup::{CpuMeter, RunCgroup};
use crate::wrapper::{self, Group, Spawner, StartError, WrapperEnv};

/// How much one read of an agent's replies or log takes: a reply of full
/// output caps takes a few reads.
const READ_CHUNK: usize = 16 * 1024;

thread_local! {
    /// The buffer every read of an agent's pipe goes through on this
    /// thread, its bytes copied into the session's splitter (or log line)
    /// before anything awaits: no session holds a read buffer of its own,
    /// so an open session costs the server only what it keeps.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; READ_CHUNK]);
}

/// Reads `pipe` once it is readable into this thread's scratch buffer and
/// hands what came to `take` at once (cancel-safe: nothing is read before
/// that); `Ok(0)` at end of file.
async fn read_some(pipe: &pipe::Receiver, mut take: impl FnMut(&[u8])) -> io::Result<usize> {
    loop {
        pipe.readable().await?;
        let read: io::Result<usize> = SCRATCH.with_borrow_mut(|scratch| {
            let n = pipe.try_read(scratch)?;
            take(&scratch[..n]);
            Ok(n)
        });
        match read {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// How much of the agent's log is kept to explain a jail that died.
const LOG_TAIL: usize = 1024;
/// Longest log line passed on to the launcher's log.
const LOG_LINE: usize = 2048;

/// Why the agent cannot be talked to any more: the session must be reset.
#[derive(Debug)]
pub enum Broken {
    /// Its stdout reached end of file: the agent, or the whole jail, ended.
    Closed,
    Io(io::Error),
    /// A line that is not a reply.
    BadFrame(String),
    /// A line longer than `frame::MAX_FRAME_BYTES`.
    TooLarge,
    /// A reply nobody asked for (a wrong id), in a few words.
    Unexpected(String),
    /// A reply an honest agent cannot send (verify.rs).
    Invalid(Violation),
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Closed => f.write_str("the agent's output closed"),
            Broken::Io(e) => write!(f, "talking to the agent failed: {e}"),
            Broken::BadFrame(e) => write!(f, "the agent sent a bad frame: {e}"),
            Broken::TooLarge => f.write_str("the agent sent an oversized frame"),
            Broken::Unexpected(what) => write!(f, "the agent sent an unexpected reply: {what}"),
            Broken::Invalid(why) => write!(f, "the agent's reply broke the protocol: {why}"),
        }
    }
}

/// Where a jail's CPU time is read ([`Jail::cpu_source`]).
#[derive(Debug, Clone)]
pub enum CpuSource {
    Cgroup(CpuMeter),
    /// The wrapper's pid, the root of the jail's processes.
    Tree(i32),
}

impl CpuSource {
    /// The CPU time so far; `None` when the jail is gone.
    pub fn read(&self) -> Option<std::time::Duration> {
        match self {
            CpuSource::Cgroup(meter) => meter.read(),
            CpuSource::Tree(pid) => crate::wrapper::proctree::cpu_of_tree(*pid),
        }
    }
}

/// A running session jail.
pub struct Jail {
    group: Group,
    /// Whether the wrapper has exited, and the jail's project layer;
    /// shared with the task that waits for the wrapper, so the layer is
    /// removed only once the jail is gone and dropped.
    shared: Arc<Shared>,
    stdin: pipe::Sender,
    stdout: pipe::Receiver,
    frames: Splitter,
    next_id: u64,
    log_tail: Arc<Mutex<String>>,
    /// The jail's way out, when its environment has a network policy: it
    /// lives as long as the jail.
    gate: Option<Box<Gate>>,
    /// Reads the CPU time of the jail's cgroup, when it has one (boxed:
    /// an idle jail sits in the session table).
    cpu: Option<Box<CpuMeter>>,
    /// The last reading of its CPU time (cpu.rs; boxed, as `cpu`).
    cpu_watch: Box<CpuWatch>,
    /// Its checkpoints and the session's calls (boxed, as `cpu`).
    pub history: Box<History>,
    /// The layers of the jails whose checkpoints its layer is mounted over
    /// (`DIR/base/0`, `DIR/base/1`..., newest first; none for a fresh or
    /// copied layer): held so that what they account for (their
    /// reservation of layer memory) lives as long as the mounts of their
    /// tmpfs that this jail holds; each with its owner's uid and gid (a
    /// root server's jails each have their own).
    lowers: Vec<(Arc<Layer>, (u32, u32))>,
}

/// The most checkpoints a session's layer is mounted over: a session
/// started from a checkpoint of a session itself started from `MAX_LOWERS`
/// of them is refused (each is an overlay lower layer, and keeps its
/// source's tmpfs alive).
pub const MAX_LOWERS: usize = 16;

/// A session jail's checkpoints and what decides the next one.
#[derive(Default)]
pub struct History {
    /// The checkpoints kept in its layer, oldest first.
    pub list: std::collections::VecDeque<Frozen>,
    /// The session's calls so far (the number of the next checkpoint less
    /// one); carried to the jail that replaces this one.
    pub calls: u64,
    /// The layer's fingerprint when it was last looked at: a call that
    /// changed nothing keeps no checkpoint.
    pub print: Option<u64>,
}

/// What a jail shares with the task that waits for its wrapper.
struct Shared {
    /// Set once the wrapper has exited.
    exited: AtomicBool,
    /// Its copy-on-write project layer, when the project is writable.
    layer: Option<Arc<Layer>>,
    /// Its published ports, when its environment publishes any: they
    /// close once the jail is dropped and its wrapper has exited.
    publisher: Option<Publisher>,
    /// Its cgroup, when the host has cgroups: removed once the wrapper has
    /// exited.
    cgroup: Mutex<Option<RunCgroup>>,
}

/// Removes checkpoint `old` from the layer at `root`, unless a session
/// started from it is mounted over it (then it stays until the layer goes).
async fn forget(root: &Arc<std::os::fd::OwnedFd>, old: Frozen) {
    if old.is_lent() {
        return;
    }
    let root = Arc::clone(root);
    let _ = tokio::task::spawn_blocking(move || checkpoint::remove(&root, old.number)).await;
}

/// A fresh layer for a session jail of `env`, when `env`'s session wrapper
/// keeps one (holding the project's when the project is writable and its
/// wrappers mount it); its share of the bound on all layers is taken by
/// [`reserve`].
fn take_layer(env: &Env, spawner: &Spawner) -> Result<Option<Arc<Layer>>, StartError> {
    let Some(layers) = spawner.project.as_ref().filter(|_| env.session_layer) else {
        return Ok(None);
    };
    let layer = layers.layer(env.project_layer).map_err(|e| {
        StartError::Spawn(std::io::Error::other(format!(
            "cannot make the session's project layer in {}: {e}",
            layers.dir().display()
        )))
    })?;
    Ok(Some(Arc::new(layer)))
}

/// Takes `layer`'s share of the bound on all layers (its tmpfs's size,
/// `workspace_mb`), unless it holds it already.
fn reserve(layer: Option<&Layer>, env: &Env, spawner: &Spawner) -> Result<(), Full> {
    match (layer, &spawner.project) {
        (Some(layer), Some(layers)) => layer.reserve(
            layers,
            env.limits.workspace_mb.get().saturating_mul(1 << 20),
        ),
        _ => Ok(()),
    }
}

/// The variables a session wrapper of `env` gets: the server's, its
/// layer's (`restore`: started from a checkpoint), and a person's
/// profile's (what the wrapper lowers itself; no project where the
/// profile hides it).
fn wrapper_env<'a>(
    env: &Env,
    spawner: &'a Spawner,
    layer: Option<&Layer>,
    restore: bool,
) -> Cow<'a, WrapperEnv> {
    let mut vars = match layer {
        Some(layer) => {
            let restoring = restore.then(|| (project::RESTORE_VAR, "1".into()));
            Cow::Owned(
                spawner
                    .env
                    .with_all(layer.vars().into_iter().chain(restoring)),
            )
        }
        None => Cow::Borrowed(&*spawner.env),
    };
    if let Some(profile) = &env.profile {
        let mut profiled = vars.with_all(profile.wrapper_vars(env));
        if profile.hides_project() {
            profiled = profiled.without(crate::settings::PROJECT_DIR.var_name());
        }
        vars = Cow::Owned(profiled);
    }
    vars
}

impl Jail {
    /// Starts `env`'s `session` wrapper (in a cgroup holding its limits);
    /// `label` names the session in the log.
    /// With `restore`, its layer's wrapper waits for the server to fill
    /// the layer ([`Jail::restored`]).
    pub fn spawn(
        env: &Env,
        spawner: &Spawner,
        label: &str,
        restore: bool,
    ) -> Result<Self, StartError> {
        Self::start(env, spawner, label, restore, true)
    }

    /// [`Jail::spawn`] for the warm pool: its layer holds no share of the
    /// bound on all layers until [`Jail::reserve_layer`] (an idle warm
    /// jail writes nothing, and must not keep sessions out).
    pub fn spawn_warm(env: &Env, spawner: &Spawner) -> Result<Self, StartError> {
        Self::start(env, spawner, "warm", false, false)
    }

    /// Takes the layer's share of the bound on all layers, when it has a
    /// layer that holds none (a warm jail's, taken by a call).
    pub fn reserve_layer(&self, env: &Env, spawner: &Spawner) -> Result<(), Full> {
        reserve(self.shared.layer.as_deref(), env, spawner)
    }

    fn start(
        env: &Env,
        spawner: &Spawner,
        label: &str,
        restore: bool,
        reserve_now: bool,
    ) -> Result<Self, StartError> {
        let (user, gate) = spawner.prepare(env)?;
        let gate = gate.map(Box::new);
        let layer = take_layer(env, spawner)?;
        if reserve_now {
            reserve(layer.as_deref(), env, spawner).map_err(StartError::Layers)?;
        }
        let mut wrapper_env = wrapper_env(env, spawner, layer.as_deref(), restore);
        // The forwarder's socket pair when the environment publishes ports:
        // the wrapper inherits one end, the server keeps the other.
        let pair = match env.publish.is_empty() {
            true => None,
            false => Some(UnixStream::pair().map_err(StartError::Spawn)?),
        };
        if let Some((_, theirs)) = &pair {
            let var = (
                "NIX_SANDBOX_PUBLISH_FD",
                theirs.as_raw_fd().to_string().into(),
            );
            wrapper_env = Cow::Owned(wrapper_env.with(var));
        }
        let wrapper = wrapper::spawn(
            &env.session,
            &env.limits,
            &wrapper_env,
            &spawner.host,
            gate.as_deref(),
            user,
            pair.as_ref().map(|(_, theirs)| theirs.as_raw_fd()),
        )?;
        let runtime = spawner.env.get("XDG_RUNTIME_DIR").map(PathBuf::from);
        let publisher =
            pair.map(|(ours, _theirs)| Publisher::new(ours, &spawner.shutdown, label, runtime));
        let (reaped, cgroup) = (wrapper.reaped, wrapper.cgroup);
        let cpu = cgroup.as_ref().and_then(RunCgroup::cpu_meter).map(Box::new);
        let shared = Arc::new(Shared {
            exited: AtomicBool::new(false),
            layer,
            publisher,
            cgroup: Mutex::new(cgroup),
        });
        let flag = Arc::clone(&shared);
        wrapper::reaper::track(async move {
            // An error means the reaper gave up on the pid: the jail is gone
            // or no longer ours either way.
            let _ = reaped.await;
            flag.exited.store(true, Ordering::SeqCst);
            let cgroup = flag.cgroup.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(cgroup) = cgroup {
                let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
            }
        });
        let log_tail = Arc::new(Mutex::new(String::new()));
        tokio::spawn(forward_log(
            wrapper.stderr,
            label.to_owned(),
            Arc::clone(&log_tail),
        ));
        let pid = wrapper.group.id();
        tracing::debug!(session = label, pid, "session jail started");
        Ok(Self {
            group: wrapper.group,
            shared,
            stdin: wrapper.stdin,
            stdout: wrapper.stdout,
            frames: Splitter::new(),
            // Ids nobody can guess, so a frame forged inside the jail is
            // caught as a reply to nothing.
            next_id: RandomState::new().hash_one(pid) >> 1,
            log_tail,
            gate,
            cpu,
            cpu_watch: Box::default(),
            history: Box::default(),
            lowers: Vec::new(),
        })
    }

    /// The layer's root, on the tmpfs its wrapper mounted (checkpoint.rs).
    pub fn layer_root(&self) -> io::Result<std::os::fd::OwnedFd> {
        let layer = (self.shared.layer.as_ref())
            .ok_or_else(|| io::Error::other("its sandbox keeps no session layer"))?;
        layer.open_root(&self.group.proc_dir()?)
    }

    /// This jail, counting `calls` of its session so far.
    pub fn counting(mut self, calls: u64) -> Self {
        self.history.calls = calls;
        self
    }

    /// Whether its sandbox keeps a session layer (checkpoints).
    pub fn has_session_layer(&self) -> bool {
        self.shared.layer.is_some()
    }

    /// Fills this jail's layer, whose wrapper was started with `restore`
    /// and waits, with checkpoint `number` of the layer at `from` (its live
    /// files when `None`), then
    /// lets the wrapper go on. Waits at most 10 s for the wrapper to make
    /// the layer.
    pub async fn restored(
        &mut self,
        from: std::os::fd::OwnedFd,
        number: Option<u64>,
    ) -> io::Result<()> {
        let root = self.layer_made().await?;
        tokio::task::spawn_blocking(move || checkpoint::restore(&from, number, &root))
            .await
            .map_err(io::Error::other)??;
        self.send(b"G")
            .await
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Starts this jail, whose wrapper was started with `restore` and
    /// waits, over checkpoint `number` of `source` at the cost of a mount
    /// (project/share.rs): read-only mounts of that checkpoint and of
    /// those `source` was itself mounted over are attached under its
    /// layer's `base`, which its wrapper overlays at `/workspace` and
    /// under the project; with `idmapped` (a root server, whose jails each
    /// have a uid of their own), each idmapped from its layer's owner to
    /// this jail's uid and gid. The checkpoint is marked lent: `source`
    /// keeps its files while it lives, even once dropped from its list.
    pub async fn mounted_over(
        &mut self,
        source: &Jail,
        number: u64,
        idmapped: bool,
    ) -> io::Result<()> {
        let from = (source.shared.layer.clone())
            .ok_or_else(|| io::Error::other("its sandbox keeps no session layer"))?;
        let frozen = (source.history.list.iter())
            .find(|f| f.number == number)
            .ok_or_else(|| io::Error::other(format!("it keeps no checkpoint {number}")))?;
        let path = |sub: String| {
            std::ffi::CString::new(from.dir().join(sub).into_os_string().into_encoded_bytes())
                .map_err(io::Error::other)
        };
        let mut paths = vec![path(format!("ckpt/{number}"))?];
        for i in 0..source.lowers.len() {
            paths.push(path(format!("base/{i}"))?);
        }
        let owners: Vec<(u32, u32)> = std::iter::once(checkpoint::owner(&source.layer_root()?)?)
            .chain(source.lowers.iter().map(|(_, owner)| *owner))
            .collect();
        frozen.lend();
        let ours = checkpoint::owner(&self.layer_made().await?)?;
        let layer = (self.shared.layer.clone())
            .ok_or_else(|| io::Error::other("its sandbox keeps no session layer"))?;
        let dir = std::ffi::CString::new(layer.dir().as_os_str().as_encoded_bytes())
            .map_err(io::Error::other)?;
        // One at a time: each detached mount counts against the source
        // jail's namespace budget until attached (share.rs).
        for (i, (path, theirs)) in paths.into_iter().zip(owners.iter().copied()).enumerate() {
            let (source, target) = (source.group.proc_dir()?, self.group.proc_dir()?);
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || {
                let trees = match idmapped {
                    true => {
                        let userns = wrapper::idmap::map_namespace(theirs, ours)?;
                        let tree = project::share::clone_idmapped(&source, &path, userns.as_fd())?;
                        vec![tree]
                    }
                    false => project::share::clone_trees(&source, &[path])?,
                };
                project::share::attach_trees(&target, &dir, i, &trees)
            })
            .await
            .map_err(io::Error::other)??;
        }
        self.lowers = std::iter::once((from, owners[0]))
            .chain(source.lowers.iter().cloned())
            .collect();
        self.send(b"G")
            .await
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// How many checkpoints its layer is mounted over ([`MAX_LOWERS`]).
    pub fn depth(&self) -> usize {
        self.lowers.len()
    }

    /// The root of its layer once its wrapper, started with `restore`,
    /// made it and waits: at most 10 s.
    async fn layer_made(&self) -> io::Result<std::os::fd::OwnedFd> {
        let mut waited = std::time::Duration::ZERO;
        let step = std::time::Duration::from_millis(2);
        let root = loop {
            if self.has_exited() {
                return Err(io::Error::other(format!(
                    "its sandbox stopped before it started: {}",
                    self.log_tail().trim()
                )));
            }
            if let Ok(root) = self.layer_root()
                && rustix::fs::statat(&root, "ready", rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
            {
                break root;
            }
            if waited > std::time::Duration::from_secs(10) {
                return Err(io::Error::other(
                    "its sandbox did not make its layer in 10 s",
                ));
            }
            tokio::time::sleep(step).await;
            waited += step;
        };
        Ok(root)
    }

    /// The layer's fingerprint now, noted before a jail's first call when
    /// it keeps checkpoints (`most` > 0): that of its empty layer, or of
    /// the files it started from (a session started from another keeps
    /// its first checkpoint at its first call that changes a file).
    pub async fn note_print(&mut self, most: usize) {
        if most == 0 || self.history.print.is_some() {
            return;
        }
        let Ok(root) = self.layer_root() else { return };
        let print = tokio::task::spawn_blocking(move || checkpoint::fingerprint(&root)).await;
        self.history.print = print.ok().and_then(Result::ok);
    }

    /// Freezes the layer as the checkpoint of the call that just ended
    /// (`calls` counts it), keeping at most `most`: the oldest go first,
    /// and when the layer has no space left for it too. Returns the
    /// checkpoint's number (none when nothing changed since the last one;
    /// why when it could not be kept) and the numbers dropped.
    pub async fn checkpoint(&mut self, most: usize) -> (Result<Option<u64>, String>, Vec<u64>) {
        let number = self.history.calls;
        let mut dropped = Vec::new();
        let root = match self.layer_root() {
            Ok(root) => Arc::new(root),
            Err(e) => return (Err(e.to_string()), dropped),
        };
        let task_root = Arc::clone(&root);
        let print = tokio::task::spawn_blocking(move || checkpoint::fingerprint(&task_root)).await;
        let print = print.ok().and_then(Result::ok);
        if print.is_some() && print == self.history.print {
            return (Ok(None), dropped);
        }
        self.history.print = print;
        loop {
            while self.history.list.len() >= most.max(1) {
                let Some(old) = self.history.list.pop_front() else {
                    break;
                };
                dropped.push(old.number);
                forget(&root, old).await;
            }
            let previous = self.history.list.pop_back();
            let task_root = Arc::clone(&root);
            let frozen = tokio::task::spawn_blocking(move || {
                let made = checkpoint::freeze(&task_root, number, previous.as_ref());
                (made, previous)
            })
            .await;
            let (made, previous) = match frozen {
                Ok(pair) => pair,
                Err(e) => return (Err(e.to_string()), dropped),
            };
            self.history.list.extend(previous);
            match made {
                Ok(mut frozen) => {
                    frozen.print = print;
                    self.history.list.push_back(frozen);
                    return (Ok(Some(number)), dropped);
                }
                Err(e)
                    if e.raw_os_error() == Some(nix::libc::ENOSPC)
                        && !self.history.list.is_empty() =>
                {
                    // Room for it by dropping the oldest.
                    if let Some(old) = self.history.list.pop_front() {
                        dropped.push(old.number);
                        forget(&root, old).await;
                    }
                }
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => {
                    return (
                        Err("no space left in the session's workspace_mb".into()),
                        dropped,
                    );
                }
                Err(e) => return (Err(e.to_string()), dropped),
            }
        }
    }

    /// The checkpoint of its files as they are now, for a session started
    /// from this one at the cost of a mount: its last one when nothing
    /// changed since, else one kept now (as the end of its last call,
    /// keeping at most `most`); `None` when none can be (no space left, or
    /// its files changed after its last call's checkpoint was kept).
    pub async fn freeze_now(&mut self, most: usize) -> Option<u64> {
        let root = self.layer_root().ok()?;
        let print = tokio::task::spawn_blocking(move || checkpoint::fingerprint(&root));
        let print = print.await.ok()?.ok()?;
        let last = self.history.list.back();
        if let Some(last) = last.filter(|l| l.print == Some(print)) {
            return Some(last.number);
        }
        if last.is_some_and(|l| l.number == self.history.calls) {
            return None;
        }
        self.history.print = None;
        self.checkpoint(most).await.0.ok().flatten()
    }

    /// The host address of the jail's port `port`, published now if it
    /// was not (session/publish.rs); `None` when its environment
    /// publishes no port.
    pub async fn publish(&self, port: u16) -> Option<std::io::Result<super::publish::Address>> {
        Some(self.shared.publisher.as_ref()?.publish(port).await)
    }

    /// Whether it has a project layer (the project is writable).
    pub fn has_layer(&self) -> bool {
        self.shared.layer.as_ref().is_some_and(|l| l.has_project())
    }

    /// Its project layer, when the project is writable, with the
    /// wrapper's `/proc/PID` directory, whose mount namespace holds it.
    pub fn layer(&self) -> Option<InJail> {
        let layer = self.shared.layer.clone().filter(|l| l.has_project())?;
        Some(InJail {
            layer,
            proc: self.group.proc_dir(),
        })
    }

    /// The network policy's refusals since they were last taken.
    pub fn take_refusals(&self) -> Vec<String> {
        self.gate
            .as_ref()
            .map(|gate| gate.take_refusals())
            .unwrap_or_default()
    }

    /// An id for the next request.
    pub fn fresh_id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    /// Whether the wrapper has exited (the jail is gone).
    pub fn has_exited(&self) -> bool {
        self.shared.exited.load(Ordering::SeqCst)
    }

    /// Writes one request. Not cancel-safe: a jail whose write was cut off
    /// must be reset.
    pub async fn send(&mut self, line: &[u8]) -> Result<(), Broken> {
        self.stdin.write_all(line).await.map_err(Broken::Io)?;
        self.stdin.flush().await.map_err(Broken::Io)
    }

    /// Encodes and writes `request`.
    pub async fn request(&mut self, request: &Request) -> Result<(), Broken> {
        let line = frame::encode(request).map_err(|e| Broken::Io(io::Error::other(e)))?;
        self.send(&line).await
    }

    /// The next reply, whatever it answers. Cancel-safe: bytes read stay in
    /// the splitter for the next call.
    pub async fn next_reply(&mut self) -> Result<Reply, Broken> {
        loop {
            if let Some(split) = self.frames.next_frame() {
                return match split {
                    Split::Frame(line) => frame::decode::<Reply>(&line).map_err(|e| {
                        let shown: String =
                            String::from_utf8_lossy(&line).chars().take(200).collect();
                        Broken::BadFrame(format!("{e} in {shown:?}"))
                    }),
                    Split::TooLarge => Err(Broken::TooLarge),
                };
            }
            let frames = &mut self.frames;
            let n = read_some(&self.stdout, |bytes| frames.push(bytes))
                .await
                .map_err(Broken::Io)?;
            if n == 0 {
                return Err(Broken::Closed);
            }
        }
    }

    /// The last lines of the agent's log (to explain a jail that died).
    /// What the jail's cgroup counted so far, when it has one and its
    /// wrapper has not exited.
    pub fn stats(&self) -> Option<crate::wrapper::cgroup::Stats> {
        let cgroup = self.shared.cgroup.lock().unwrap_or_else(|p| p.into_inner());
        cgroup.as_ref().map(RunCgroup::stats)
    }

    pub fn log_tail(&self) -> String {
        self.log_tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The wrapper's pid, the root of the jail's processes.
    pub fn pid(&self) -> i32 {
        self.group.id()
    }

    /// The CPU time the jail's processes used so far, all of them
    /// together; `None` once the jail is gone.
    pub fn cpu_used(&self) -> Option<std::time::Duration> {
        if self.has_exited() {
            return None;
        }
        self.cpu_source().read()
    }

    /// Whether the jail's processes used `budget` of CPU time, all of them
    /// together; false once the jail is gone. The counter is read only
    /// when they could have used it since the last reading (cpu.rs).
    pub fn used_budget(&mut self, budget: std::time::Duration) -> bool {
        let now = std::time::Instant::now();
        if !self.cpu_watch.must_read(budget, now, cpu::machine_cpus()) {
            return false;
        }
        match self.cpu_used() {
            Some(used) => {
                self.cpu_watch.note(used, now);
                used >= budget
            }
            None => false,
        }
    }

    /// Where the jail's CPU time is read: its cgroup's counter, which
    /// holds every process that was ever in it; without one, its process
    /// tree in /proc (wrapper/proctree.rs), which misses a process that
    /// ended with no parent in the jail waiting for it.
    pub fn cpu_source(&self) -> CpuSource {
        match &self.cpu {
            Some(meter) => CpuSource::Cgroup(CpuMeter::clone(meter)),
            None => CpuSource::Tree(self.group.id()),
        }
    }

    /// SIGKILL to the jail's process group.
    pub fn kill(&self) {
        self.group.kill();
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        self.group.kill();
    }
}

/// Passes the agent's log on, line by line, and keeps its tail.
async fn forward_log(stderr: pipe::Receiver, label: String, tail: Arc<Mutex<String>>) {
    let mut line = Vec::new();
    loop {
        let read = read_some(&stderr, |bytes| {
            for &byte in bytes {
                if byte == b'\n' {
                    let text = String::from_utf8_lossy(&line).into_owned();
                    tracing::debug!(session = %label, "agent: {text}");
                    let mut kept = tail.lock().unwrap_or_else(|p| p.into_inner());
                    kept.push_str(&text);
                    kept.push('\n');
                    if kept.len() > LOG_TAIL {
                        let mut cut = kept.len() - LOG_TAIL;
                        while !kept.is_char_boundary(cut) {
                            cut += 1;
                        }
                        kept.drain(..cut);
                    }
                    line.clear();
                } else if line.len() < LOG_LINE {
                    line.push(byte);
                }
            }
        })
        .await;
        if matches!(read, Ok(0) | Err(_)) {
            break;
        }
    }
    tracing::debug!(session = %label, "session jail's log closed");
}
