//! The launcher's side of the wrapper contracts (CONTRIBUTING.md, contracts
//! 2 and 3): how a wrapper Nix generated is started, watched and killed,
//! for runs (run.rs) and session jails (session/jail.rs) alike.
//!
//! - A wrapper starts in a new process group of its own, with a cleared
//!   environment plus the few variables contract 2 names ([`WrapperEnv`]),
//!   in a cgroup of its own holding its environment's limits when the host
//!   gives the launcher cgroups (cgroup.rs), in the jails' pid namespace
//!   (lifetime.rs), as the jails' user when the launcher is root
//!   (jailuser.rs), and gets SIGKILL if the launcher dies.
//! - A reaper thread waits for the wrapper without reaping it, kills what is
//!   left of its group while the group id is still certainly ours, then
//!   reaps it. A [`Group`] guard kills the group on every other path, drop
//!   included.
//!
//! What the host gives the jails is found once, at start (host.rs); whether
//! a wrapper really holds its environment's limits is probed (probe.rs).

pub mod cgroup;
pub mod delegation;
pub mod host;
pub mod jailuser;
pub mod probe;
pub mod proctree;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use proto::frame::Exit;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use crate::catalog::{Env, Limits};
use crate::config;
use crate::egress::{self, Gate};
use cgroup::RunCgroup;
use host::Host;
use jailuser::JailUser;

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
        ];
        // NIX_SANDBOX_CGROUP is the wrapper's own cgroup ([`spawn`]), never
        // the server's.
        let project = [
            config::PROJECT_DIR.var_name(),
            config::PROJECT_MOUNT.var_name(),
        ];
        for name in ["XDG_RUNTIME_DIR"].into_iter().chain(project) {
            if let Some(value) = lookup(name).filter(|v| !v.is_empty()) {
                vars.push((name, value));
            }
        }
        Self(vars)
    }

    pub fn from_process() -> Self {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    fn vars(&self) -> impl Iterator<Item = (&'static str, &OsStr)> {
        self.0.iter().map(|(k, v)| (*k, v.as_os_str()))
    }
}

/// Why a wrapper did not start. Nothing ran either way; the two differ in
/// what the model is told (mcp/refusal.rs).
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
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Cgroup(e) => write!(f, "cannot make the run's cgroup: {e}"),
            StartError::Spawn(e) => e.fmt(f),
            StartError::Egress(e) => write!(f, "network policy: {e}"),
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
/// policy.
pub fn spawn(
    argv: &[String],
    limits: &Limits,
    env: &WrapperEnv,
    host: &Host,
    gate: Option<&Gate>,
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
    let started = start(program, args, env, host, cgroup.as_ref(), gate);
    let mut child = match started {
        Ok(child) => child,
        Err(e) => {
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            return Err(e);
        }
    };
    let group = Group::new(child.id());
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    // The std handle neither kills nor waits on drop; the reaper owns the pid.
    drop(child);
    let reaped = group.start_reaper();
    let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
        return Err(StartError::Spawn(io::Error::other(
            "the wrapper's pipes were not created",
        )));
    };
    let pipe_error = StartError::Spawn;
    Ok(Spawned {
        group,
        reaped,
        stdin: pipe::Sender::from_owned_fd(OwnedFd::from(stdin)).map_err(pipe_error)?,
        stdout: pipe::Receiver::from_owned_fd(OwnedFd::from(stdout)).map_err(pipe_error)?,
        stderr: pipe::Receiver::from_owned_fd(OwnedFd::from(stderr)).map_err(pipe_error)?,
        cgroup,
    })
}

/// Spawns the wrapper, moved into `cgroup` when there is one.
fn start(
    program: &str,
    args: &[String],
    env: &WrapperEnv,
    host: &Host,
    cgroup: Option<&RunCgroup>,
    gate: Option<&Gate>,
) -> Result<std::process::Child, StartError> {
    // Open until the wrapper has started (the child's copies close at exec).
    let procs = match cgroup {
        Some(cgroup) => cgroup.procs().map_err(StartError::Cgroup)?,
        None => Vec::new(),
    };
    let placement = Placement {
        cgroup: cgroup.map(RunCgroup::env_value),
        procs: procs.iter().map(AsRawFd::as_raw_fd).collect(),
        user: host.jail_user.as_ref(),
    };
    let mut command = command(program, args, env, placement);
    if let Some(gate) = gate {
        command.envs(gate.vars());
    }
    crate::lifetime::spawn(command).map_err(StartError::Spawn)
}

/// Where a wrapper goes between fork and exec.
struct Placement<'a> {
    /// `NIX_SANDBOX_CGROUP`, and its directories' `cgroup.procs` open for
    /// writing.
    cgroup: Option<OsString>,
    procs: Vec<RawFd>,
    /// The jails' user, when the launcher is root.
    user: Option<&'a JailUser>,
}

/// The command that starts a wrapper: a process group of its own, only the
/// allowed environment plus its cgroup, piped stdio, moved into its cgroup,
/// the jails' user when the launcher is root, and SIGKILL when the launcher
/// dies.
fn command(
    program: &str,
    args: &[String],
    env: &WrapperEnv,
    placement: Placement<'_>,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.vars())
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cgroup) = &placement.cgroup {
        cmd.env("NIX_SANDBOX_CGROUP", cgroup);
    }
    if let Some(user) = placement.user {
        cmd.env("HOME", user.home());
    }
    let (procs, ids) = (placement.procs, placement.user.map(|u| u.ids));
    // The wrapper gets SIGKILL when the thread that spawned it dies: the
    // jails' spawner thread (lifetime.rs), else the current-thread
    // runtime's; either lives as long as the launcher, so even a crashed
    // launcher leaves no run behind. A launcher that died between fork and
    // the prctl sent no signal: the child then has another parent already,
    // and must not start the jail. (In the jails' pid namespace its parent
    // has no id, and the namespace's end kills such a child.)
    let launcher = crate::lifetime::launcher_as_seen_by_children();
    // SAFETY: write, fchown, setgroups, setresgid, setresuid, prctl and
    // getppid are async-signal-safe and touch no memory of the parent; the
    // fds in `procs` stay open in the parent until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            // Into the run's cgroup first: its files are the launcher's, so
            // the jails' user could not move there itself.
            for &fd in &procs {
                nix::unistd::write(std::os::fd::BorrowedFd::borrow_raw(fd), b"0")?;
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
        });
    }
    cmd
}

/// The wrapper's process group. Dropping it kills the group unless the
/// wrapper was already reaped.
pub struct Group {
    pgid: i32,
    /// Set once the leader is reaped: from then on the id may be reused by
    /// another process, so it must never be signalled again.
    reaped: Arc<Mutex<bool>>,
}

impl Group {
    fn new(pid: u32) -> Self {
        Self {
            pgid: i32::try_from(pid).unwrap_or(0),
            reaped: Arc::new(Mutex::new(false)),
        }
    }

    /// The group's id (its leader's pid), for the log.
    pub fn id(&self) -> i32 {
        self.pgid
    }

    /// SIGKILL to the whole group, unless its leader is already reaped.
    pub fn kill(&self) {
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if !*reaped {
            kill_group(self.pgid);
        }
    }

    /// A thread that waits for the leader to exit, kills what is left of its
    /// group while the leader is an unreaped zombie (so the id is still ours),
    /// reaps it, and reports how it ended.
    fn start_reaper(&self) -> oneshot::Receiver<Option<Exit>> {
        let (tx, rx) = oneshot::channel();
        let (pgid, reaped) = (self.pgid, Arc::clone(&self.reaped));
        tokio::task::spawn_blocking(move || {
            let pid = Pid::from_raw(pgid);
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            if let Err(e) = retry_eintr(|| waitid(Id::Pid(pid), flags)) {
                // Not our child any more (reaped elsewhere): never signal the id.
                tracing::error!(pgid, error = %e, "cannot wait for the wrapper");
                *reaped.lock().unwrap_or_else(|p| p.into_inner()) = true;
                return;
            }
            let mut reaped = reaped.lock().unwrap_or_else(|p| p.into_inner());
            kill_group(pgid);
            let status = retry_eintr(|| waitpid(pid, None));
            *reaped = true;
            drop(reaped);
            let exit = match status {
                Ok(WaitStatus::Exited(_, code)) => Some(Exit::Code(code)),
                Ok(WaitStatus::Signaled(_, signal, _)) => Some(Exit::Signal(signal as i32)),
                other => {
                    tracing::error!(pgid, status = ?other, "unexpected wait status");
                    None
                }
            };
            let _ = tx.send(exit);
        });
        rx
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The only place the launcher sends a signal: SIGKILL to a process group it
/// created, never to an id of 1 or less.
fn kill_group(pgid: i32) {
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
        assert_eq!(names, ["HOME", "PATH", "PROJECT_DIR"]);
        assert_eq!(env.0[1].1, OsStr::new("/usr/bin:/bin"));
    }
}
