//! The launcher's side of the wrapper contracts (docs/contracts.md, contracts
//! 2 and 3): how a wrapper Nix generated is started, watched and killed,
//! for runs (run.rs) and session jails (session/jail.rs) alike.
//!
//! - A wrapper starts in a new process group of its own, with a cleared
//!   environment plus the few variables contract 2 names ([`WrapperEnv`]),
//!   in a cgroup of its own holding its environment's limits when the host
//!   gives the launcher cgroups (cgroup.rs), in the jails' pid namespace
//!   (lifetime.rs), as a uid of its own when the launcher is root
//!   (jailuser.rs: the caller leases it, since the jail's egress gate is
//!   made for it first), and gets SIGKILL if the launcher dies.
//! - A reaper thread waits for the wrapper without reaping it, kills what is
//!   left of its group while the group id is still certainly ours, then
//!   reaps it. A [`Group`] guard kills the group on every other path, drop
//!   included.
//!
//! What the host gives the jails is found once, at start (host.rs); whether
//! a wrapper really holds its environment's limits is probed (../probe.rs).

pub mod cgroup;
pub mod clone;
pub mod delegation;
pub mod hop;
pub mod host;
pub mod idmap;
pub mod jailuser;
pub mod mounts;
pub mod proctree;
pub mod reaper;
pub mod uidblock;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Once};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use proto::frame::Exit;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::catalog::{Env, Limits};
use crate::egress::{self, Egress, Gate};
use crate::project::Layers;
use crate::settings;
use cgroup::RunCgroup;
use clone::Started;
use host::Host;
use jailuser::Lease;

/// The environment a wrapper gets: nothing of the server's environment but
/// the variables contract 2 names.
#[derive(Debug, Clone, Default)]
pub struct WrapperEnv(Vec<(&'static str, OsString)>);

impl WrapperEnv {
    /// Picks the allowed variables out of `lookup` (the server's environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Self {
        let mut vars = vec![
            ("HOME", lookup("HOME").unwrap_or_else(|| "/".into())),
            ("PATH", "/usr/bin:/bin".into()),
            // A wrapper is a bash script, and bash without SHELL looks its
            // uid up to set it (getpwuid: nsswitch.conf, then every source
            // it names: files, systemd, sssd...) on every start. A root
            // launcher's jail uids are in no passwd file, so each run paid
            // for the whole lookup. Nothing reads the value: the jail's
            // environment is its own.
            ("SHELL", "/bin/sh".into()),
        ];
        // NIX_SANDBOX_CGROUP is the wrapper's own cgroup ([`spawn`]), never
        // the server's.
        let project = [
            settings::PROJECT_DIR.var_name(),
            settings::PROJECT_MOUNT.var_name(),
        ];
        for name in ["XDG_RUNTIME_DIR"].into_iter().chain(project) {
            if let Some(value) = lookup(name).filter(|v| !v.is_empty()) {
                vars.push((name, value));
            }
        }
        Self(vars)
    }

    /// These variables and `var` (a session's project layer).
    pub fn with(&self, var: (&'static str, OsString)) -> Self {
        let mut vars = self.0.clone();
        vars.push(var);
        Self(vars)
    }

    /// These and `more`.
    pub fn with_all(&self, more: impl IntoIterator<Item = (&'static str, OsString)>) -> Self {
        let mut vars = self.0.clone();
        vars.extend(more);
        Self(vars)
    }

    /// These variables but `name` (a profile that hides the project).
    pub fn without(&self, name: &str) -> Self {
        Self(self.0.iter().filter(|(k, _)| *k != name).cloned().collect())
    }

    /// The value of `name` among them.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    fn vars(&self) -> impl Iterator<Item = (&'static str, &OsStr)> {
        self.0.iter().map(|(k, v)| (*k, v.as_os_str()))
    }
}

/// Why a wrapper did not start. Nothing ran either way; the two differ in
/// what the model is told (report/refusal.rs).
#[derive(Debug)]
pub enum StartError {
    /// Its cgroup could not be made: the limits it would write there would
    /// not hold, so it is not started without one.
    Cgroup(io::Error),
    /// It could not be spawned: missing, not executable, or the like.
    Spawn(io::Error),
    /// Its environment's network policy cannot be served: it is not
    /// started without its gate.
    Egress(egress::Error),
    /// A root launcher's jail could not be given the project's files
    /// (idmap.rs): its layer would not work.
    Project(io::Error),
    /// Its session layer does not fit in the bound on all layers.
    Layers(crate::project::pool::Full),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Cgroup(e) => write!(f, "cannot make the run's cgroup: {e}"),
            StartError::Spawn(e) => e.fmt(f),
            StartError::Egress(e) => write!(f, "network policy: {e}"),
            StartError::Project(e) => e.fmt(f),
            StartError::Layers(full) => full.fmt(f),
        }
    }
}

/// An environment's wrapper that did not start: which, and why.
#[derive(Debug)]
pub struct NotStarted {
    /// The environment's name.
    pub env: String,
    /// The wrapper's path (`argv[0]`).
    pub wrapper: String,
    pub cause: StartError,
}

impl NotStarted {
    /// `env`'s run wrapper did not start.
    pub fn run(env: &Env, cause: StartError) -> Self {
        Self::of(env, &env.run, cause)
    }

    /// `env`'s session wrapper did not start.
    pub fn session(env: &Env, cause: StartError) -> Self {
        Self::of(env, &env.session, cause)
    }

    fn of(env: &Env, argv: &[String], cause: StartError) -> Self {
        Self {
            env: env.name.clone(),
            wrapper: argv.first().cloned().unwrap_or_default(),
            cause,
        }
    }
}

/// A started wrapper: its process group, its stdio, how it ended (once the
/// reaper knows; `None` when its status could not be had), and its cgroup,
/// which the owner removes once the wrapper is gone.
pub struct Spawned {
    pub group: Group,
    pub reaped: oneshot::Receiver<Option<Exit>>,
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    pub cgroup: Option<RunCgroup>,
}

/// Starts `argv` (an environment's `run` or `session`) as contract 2 says,
/// in a cgroup of its own holding `limits` when `host` has cgroups, with
/// the variables of its network gate when its environment has a network
/// policy, as the uid and gid of `user` when the launcher is root (held
/// by the wrapper's [`Group`] from then on), inheriting descriptor
/// `inherit` when given (a session's forwarder socket, session/publish.rs;
/// close-on-exec here, so that no other child gets it), and, from a root
/// launcher, a jail whose layer holds the project inherits the project's
/// idmapped mount made for its uid (idmap.rs).
pub fn spawn(
    argv: &[String],
    limits: &Limits,
    env: &WrapperEnv,
    host: &Host,
    gate: Option<&Gate>,
    user: Option<Lease>,
    inherit: Option<RawFd>,
) -> Result<Spawned, StartError> {
    let (program, args) = argv.split_first().ok_or_else(|| {
        StartError::Spawn(io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))
    })?;
    let cgroup = match &host.cgroups {
        Some(cgroups) => Some(
            cgroups
                .create_run(limits.into())
                .map_err(StartError::Cgroup)?,
        ),
        None => None,
    };
    let home = host.jail_users.as_ref().map(|users| users.home());
    let mut vars = wrapper_vars(env, cgroup.as_ref(), home);
    if let Some(gate) = gate {
        vars.extend(gate.vars());
    }
    let lower = idmapped_lower(env, user.as_ref())?;
    if let Some(fd) = &lower {
        vars.push((idmap::LOWER_FD_VAR, fd.as_raw_fd().to_string().into()));
    }
    let inherit = inherit
        .into_iter()
        .chain(lower.as_ref().map(AsRawFd::as_raw_fd))
        .collect();
    let started = Placement {
        program,
        args,
        vars,
        host,
        cgroup: cgroup.as_ref(),
        limits: limits.into(),
        ids: user.as_ref().map(Lease::ids),
        inherit,
    }
    .start();
    let child = match started {
        Ok((child, placed)) => {
            tracing::debug!(pid = child.pid, placed = placed.name(), "wrapper started");
            child
        }
        Err(e) => {
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            return Err(e);
        }
    };
    let group = Group::new(child.pid, user);
    let reaped = group.start_reaper();
    let pipe_error = StartError::Spawn;
    Ok(Spawned {
        group,
        reaped,
        stdin: pipe::Sender::from_owned_fd(child.stdin).map_err(pipe_error)?,
        stdout: pipe::Receiver::from_owned_fd(child.stdout).map_err(pipe_error)?,
        stderr: pipe::Receiver::from_owned_fd(child.stderr).map_err(pipe_error)?,
        cgroup,
    })
}

/// A root launcher's idmapped mount of the project for the jail of `user`
/// when its layer holds the project (idmap.rs); none otherwise. Open until
/// the wrapper has started (its copy is not close-on-exec).
fn idmapped_lower(env: &WrapperEnv, user: Option<&Lease>) -> Result<Option<OwnedFd>, StartError> {
    let project_var = settings::PROJECT_DIR.var_name();
    let (Some(user), Some(_), Some(project)) = (
        user,
        env.get(crate::project::PROJECT_VAR),
        env.get(project_var),
    ) else {
        return Ok(None);
    };
    let project = Path::new(project);
    let made =
        idmap::owner(project).and_then(|owner| idmap::project_mount(project, owner, user.ids()));
    made.map(Some).map_err(|e| {
        StartError::Project(io::Error::other(format!(
            "cannot give the jail's uid the project's files through an idmapped mount: {e}"
        )))
    })
}

/// What starts jails, built once in main and handed down to whatever starts
/// one (a run, a session, a probe): the variables a wrapper gets, the
/// host's facts, the egress proxy (a gate for each jail of an environment
/// with a network policy) and the server's shutdown, which ends every
/// jail's call, and the project's copy-on-write layers when the project
/// is writable (a session jail takes one). Cheap to clone.
#[derive(Clone)]
pub struct Spawner {
    pub env: Arc<WrapperEnv>,
    pub host: Arc<Host>,
    pub egress: Arc<Egress>,
    pub shutdown: CancellationToken,
    pub project: Option<Arc<Layers>>,
}

impl Spawner {
    /// What one jail of `env` needs before its wrapper starts: the uid and
    /// gid it runs as, when the launcher is root, and its egress gate, when
    /// `env` has a network policy, which only that uid may connect to.
    pub fn prepare(&self, env: &Env) -> Result<(Option<Lease>, Option<Gate>), StartError> {
        let user = (self.host)
            .jail_lease()
            .map_err(|why| StartError::Spawn(io::Error::other(why)))?;
        let gate = match env.network.policy() {
            None => None,
            Some(_) => {
                let owner = user.as_ref().map(|u| (u.ids().uid, u.ids().gid));
                let gate = self.egress.gate(&env.name, owner);
                Some(gate.map_err(StartError::Egress)?)
            }
        };
        Ok((user, gate))
    }
}

/// How a wrapper got into its run's cgroup, for the log.
#[derive(Debug, Clone, Copy)]
enum Placed {
    /// Created there by `clone3` (v2).
    Clone3,
    /// Forked there by a thread standing in it for the moment (v1).
    Hop,
    /// Forked, then moved in between fork and exec.
    Move,
    /// The launcher has no cgroups.
    Nowhere,
}

impl Placed {
    fn name(self) -> &'static str {
        match self {
            Placed::Clone3 => "clone3",
            Placed::Hop => "hop",
            Placed::Move => "move",
            Placed::Nowhere => "none",
        }
    }
}

/// One wrapper to start: its program and arguments, its whole environment
/// (wrapper_vars and its gate's), its run's cgroup (holding `limits`) when
/// there is one, the jails' user's `ids` when given, and the descriptor it
/// inherits.
struct Placement<'a> {
    program: &'a str,
    args: &'a [String],
    vars: Vec<(&'static str, OsString)>,
    host: &'a Host,
    cgroup: Option<&'a RunCgroup>,
    limits: cgroup::RunLimits,
    ids: Option<jailuser::Ids>,
    inherit: Vec<RawFd>,
}

impl Placement<'_> {
    /// Starts the wrapper in its cgroup when there is one: created there
    /// with `clone3` (a cgroup v2; clone.rs) or forked there by a hop (v1;
    /// hop.rs) when the kernel can, else forked and moved in between fork
    /// and exec.
    fn start(self) -> Result<(Started, Placed), StartError> {
        if let Some(dir) = self.cgroup.and_then(RunCgroup::v2_dir)
            && let Some(done) = self.clone3(dir)?
        {
            return done;
        }
        let hop = match (self.cgroup, &self.host.cgroups) {
            (Some(run), Some(cgroups)) => cgroups.hop(run, self.limits),
            _ => None,
        };
        if let Some(hop) = hop
            && let Some(done) = self.hop(hop)?
        {
            return done;
        }
        self.fork()
    }

    /// The argv and environment as `clone3` and a hop take them.
    fn prepared(&self) -> Result<clone::Program, StartError> {
        let vars = self.vars.iter().map(|(k, v)| (*k, v.as_os_str()));
        clone::Program::new(self.program, self.args, vars).ok_or_else(|| {
            StartError::Spawn(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a NUL byte in the wrapper's argv or environment",
            ))
        })
    }

    /// Created in the cgroup v2 `dir` by `clone3`; `None` (said once)
    /// where the kernel refuses it.
    fn clone3(&self, dir: &Path) -> Result<Option<Done>, StartError> {
        let fd = clone::open_cgroup(dir).map_err(StartError::Cgroup)?;
        let prepared = self.prepared()?;
        let setup = child_setup(Vec::new(), self.ids, self.inherit.clone());
        let cloned = crate::lifetime::on_spawner(move || {
            clone::spawn_into(&prepared, std::os::fd::AsFd::as_fd(&fd), &setup)
        })
        .map_err(StartError::Spawn)?;
        static SAID: Once = Once::new();
        let refusal = "no clone3 into a cgroup here: wrappers are moved into their cgroups";
        Ok(settled(cloned, Placed::Clone3, &SAID, refusal))
    }

    /// Forked in the run's cgroups v1 by a hop; `None` (said once) where
    /// the kernel refuses it.
    fn hop(&self, hop: io::Result<hop::Hop>) -> Result<Option<Done>, StartError> {
        let hopped = match hop {
            Ok(hop) => {
                let prepared = self.prepared()?;
                let setup = child_setup(Vec::new(), self.ids, self.inherit.clone());
                crate::lifetime::on_spawner(move || hop.spawn(&prepared, &setup))
                    .map_err(StartError::Spawn)?
            }
            Err(e) => Err(Ok(clone::Refused(e))),
        };
        static SAID: Once = Once::new();
        let refusal = "no hop into a run's cgroups v1 here: wrappers are moved into their \
                       cgroups, each move waiting for the kernel's cgroup lock";
        Ok(settled(hopped, Placed::Hop, &SAID, refusal))
    }

    /// Forked, and moved into its cgroup (when there is one) between fork
    /// and exec.
    fn fork(self) -> Done {
        // Open until the wrapper has started (the child's copies close at exec).
        let procs = match self.cgroup {
            Some(cgroup) => cgroup.procs().map_err(StartError::Cgroup)?,
            None => Vec::new(),
        };
        let fds = procs.iter().map(AsRawFd::as_raw_fd).collect();
        let setup = child_setup(fds, self.ids, self.inherit.clone());
        let mut cmd = std::process::Command::new(self.program);
        cmd.args(self.args)
            .env_clear()
            .envs(self.vars)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the setup makes only system calls (child_setup).
        unsafe {
            cmd.pre_exec(setup);
        }
        let placed = if self.cgroup.is_some() {
            Placed::Move
        } else {
            Placed::Nowhere
        };
        let mut child = crate::lifetime::spawn(cmd).map_err(StartError::Spawn)?;
        let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let pid = child.id();
        // The std handle neither kills nor waits on drop; the reaper owns the pid.
        drop(child);
        match pipes {
            (Some(stdin), Some(stdout), Some(stderr)) => Ok((
                Started {
                    pid,
                    stdin: OwnedFd::from(stdin),
                    stdout: OwnedFd::from(stdout),
                    stderr: OwnedFd::from(stderr),
                },
                placed,
            )),
            _ => {
                kill_group(i32::try_from(pid).unwrap_or(0));
                Err(StartError::Spawn(io::Error::other(
                    "the wrapper's pipes were not created",
                )))
            }
        }
    }
}

/// A wrapper started, and how it got into its cgroup; or why not.
type Done = Result<(Started, Placed), StartError>;

/// The outcome of a way of starting a wrapper in its cgroup (`placed`):
/// started or failed, or `None` when the kernel refused that way here,
/// which is said once (`said`, `refusal`) and the caller moves the
/// wrapper in instead.
fn settled(
    result: Result<Started, Result<clone::Refused, io::Error>>,
    placed: Placed,
    said: &'static Once,
    refusal: &'static str,
) -> Option<Done> {
    match result {
        Ok(started) => Some(Ok((started, placed))),
        Err(Err(e)) => Some(Err(StartError::Spawn(e))),
        Err(Ok(clone::Refused(why))) => {
            said.call_once(|| tracing::info!(error = %why, "{refusal}"));
            None
        }
    }
}

/// A wrapper's whole environment: contract 2's variables, its cgroup
/// (`NIX_SANDBOX_CGROUP`), and the jails' home as `HOME` when the launcher
/// is root (`home`).
fn wrapper_vars(
    env: &WrapperEnv,
    cgroup: Option<&RunCgroup>,
    home: Option<&Path>,
) -> Vec<(&'static str, OsString)> {
    let mut vars: Vec<(&'static str, OsString)> = env
        .vars()
        .filter(|(k, _)| !(home.is_some() && *k == "HOME"))
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
    if let Some(cgroup) = cgroup {
        vars.push(("NIX_SANDBOX_CGROUP", cgroup.env_value()));
    }
    if let Some(home) = home {
        vars.push(("HOME", home.into()));
    }
    vars
}

/// What a wrapper does between fork and exec, system calls only: into its
/// cgroup (writing `0` to each of `procs`, the `cgroup.procs` files the
/// launcher opened: they are the launcher's, so the jails' user could not
/// move there itself; none when it was created there), the jails' user
/// when the launcher is root, then SIGKILL when the launcher dies;
/// each of `inherit` loses its close-on-exec flag, so the wrapper holds it.
///
/// The wrapper gets SIGKILL when the thread that spawned it dies: the
/// jails' spawner thread (lifetime.rs), else the current-thread runtime's;
/// either lives as long as the launcher, so even a crashed launcher leaves
/// no run behind. A launcher that died between fork and the prctl sent no
/// signal: the child then has another parent already, and must not start
/// the jail. (In the jails' pid namespace its parent has no id, and the
/// namespace's end kills such a child.)
fn child_setup(
    procs: Vec<RawFd>,
    ids: Option<jailuser::Ids>,
    inherit: Vec<RawFd>,
) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
    let launcher = crate::lifetime::launcher_as_seen_by_children();
    move || {
        for &fd in &inherit {
            // SAFETY: the fd stays open in the parent until the spawn returns.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )?;
        }
        for &fd in &procs {
            // SAFETY: the fds stay open in the parent until the spawn returns.
            nix::unistd::write(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }, b"0")?;
        }
        if let Some(ids) = ids {
            jailuser::give_stdio(ids)?;
            ids.become_user()?;
        }
        // After the change of user, which clears the parent-death signal.
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
        if nix::unistd::getppid() != launcher {
            return Err(io::Error::other("the launcher is gone"));
        }
        Ok(())
    }
}

/// The wrapper's process group. Dropping it kills the group unless the
/// wrapper was already reaped, then gives back the jail's uid.
pub struct Group {
    pgid: i32,
    /// Set once the leader is reaped: from then on the id may be reused by
    /// another process, so it must never be signalled again.
    reaped: Arc<Mutex<bool>>,
    /// The jail's uid (a root launcher's), held as long as the group
    /// (boxed: an idle session's group sits in the session table).
    _user: Option<Box<Lease>>,
}

impl Group {
    fn new(pid: u32, user: Option<Lease>) -> Self {
        Self {
            pgid: i32::try_from(pid).unwrap_or(0),
            reaped: Arc::new(Mutex::new(false)),
            _user: user.map(Box::new),
        }
    }

    /// The group's id (its leader's pid), for the log.
    pub fn id(&self) -> i32 {
        self.pgid
    }

    /// The leader's `/proc/PID` directory, opened while it is not reaped
    /// (so the id is still the wrapper's): it stays the wrapper's whatever
    /// becomes of the id, and reads fail once the wrapper is gone.
    pub fn proc_dir(&self) -> io::Result<OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if *reaped {
            return Err(io::Error::from(Errno::ESRCH));
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        Ok(rustix::fs::open(
            format!("/proc/{}", self.pgid),
            flags,
            Mode::empty(),
        )?)
    }

    /// SIGKILL to the whole group, unless its leader is already reaped.
    pub fn kill(&self) {
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if !*reaped {
            kill_group(self.pgid);
        }
    }

    /// A task that waits for the leader to exit (reaper.rs), kills what is
    /// left of its group while the leader is an unreaped zombie (so the id
    /// is still ours), reaps it, and reports how it ended.
    fn start_reaper(&self) -> oneshot::Receiver<Option<Exit>> {
        let (tx, rx) = oneshot::channel();
        let (pgid, reaped) = (self.pgid, Arc::clone(&self.reaped));
        let pid = Pid::from_raw(pgid);
        match reaper::pidfd(pid) {
            Ok(pidfd) => reaper::track(async move {
                if let Err(e) = reaper::exited(pidfd).await {
                    // Not polled: wait for it the blocking way.
                    tracing::debug!(pgid, error = %e, "cannot poll the wrapper's pidfd");
                    let waited = tokio::task::spawn_blocking(move || wait_exited(pid)).await;
                    if !matches!(waited, Ok(Ok(()))) {
                        give_up(pgid, &reaped);
                        return;
                    }
                }
                let _ = tx.send(reap(pgid, &reaped));
            }),
            Err(e) => {
                tracing::debug!(pgid, error = %e, "no pidfd for the wrapper; a thread waits");
                let wait = tokio::task::spawn_blocking(move || {
                    if wait_exited(pid).is_err() {
                        give_up(pgid, &reaped);
                        return;
                    }
                    let _ = tx.send(reap(pgid, &reaped));
                });
                reaper::track(async move {
                    let _ = wait.await;
                });
            }
        }
        rx
    }
}

/// Blocks until the child `pid` has exited, without reaping it.
fn wait_exited(pid: Pid) -> nix::Result<()> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    retry_eintr(|| waitid(Id::Pid(pid), flags)).map(drop)
}

/// The wrapper cannot be waited for (reaped elsewhere): its id is never
/// signalled again.
fn give_up(pgid: i32, reaped: &Mutex<bool>) {
    tracing::error!(pgid, "cannot wait for the wrapper");
    *reaped.lock().unwrap_or_else(|p| p.into_inner()) = true;
}

/// The wrapper `pgid` has exited and is not reaped yet: kills what is left
/// of its group, reaps it (at once: it is a zombie) and says how it ended.
fn reap(pgid: i32, reaped: &Mutex<bool>) -> Option<Exit> {
    let pid = Pid::from_raw(pgid);
    let mut reaped = reaped.lock().unwrap_or_else(|p| p.into_inner());
    kill_group(pgid);
    let status = retry_eintr(|| waitpid(pid, None));
    *reaped = true;
    drop(reaped);
    match status {
        Ok(WaitStatus::Exited(_, code)) => Some(Exit::Code(code)),
        Ok(WaitStatus::Signaled(_, signal, _)) => Some(Exit::Signal(signal as i32)),
        other => {
            tracing::error!(pgid, status = ?other, "unexpected wait status");
            None
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The only place the launcher sends a signal: SIGKILL to a process group it
/// created, never to an id of 1 or less.
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 1 {
        match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pgid, error = %e, "cannot kill the wrapper's process group"),
        }
    }
}

fn retry_eintr<T>(mut f: impl FnMut() -> nix::Result<T>) -> nix::Result<T> {
    loop {
        match f() {
            Err(Errno::EINTR) => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_env_keeps_only_the_contract_variables() {
        let env = WrapperEnv::from_lookup(|name| match name {
            "HOME" => Some("/home/u".into()),
            "PROJECT_DIR" => Some("/src".into()),
            "PROJECT_MOUNT" => Some("".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".into()),
            _ => None,
        });
        let names: Vec<&str> = env.0.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["HOME", "PATH", "SHELL", "PROJECT_DIR"]);
        assert_eq!(env.0[1].1, OsStr::new("/usr/bin:/bin"));
        assert_eq!(env.0[2].1, OsStr::new("/bin/sh"));
    }
}
