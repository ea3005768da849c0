//! One ephemeral run: spawn a wrapper (CONTRIBUTING.md, contract 2), feed it
//! the code, capture its output, and make sure nothing of it outlives the run.
//!
//! - The wrapper starts in a new process group with a small explicit
//!   environment ([`JobEnv`]) and gets SIGKILL if the launcher dies.
//! - The code is written to its stdin, which is then closed; stdout and stderr
//!   are read concurrently into [`Cap`]s through fixed-size buffers.
//! - One deadline covers writing, running, reading and waiting. At the
//!   deadline or on cancellation the whole process group is killed.
//! - A reaper thread waits for the wrapper without reaping it, kills what is
//!   left of its group while the group id is still certainly ours, then reaps
//!   it. A [`Group`] guard kills the group on every other path, drop included.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use proto::cap::Cap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

/// After a kill, how long to wait for the pipes to close and the wrapper to
/// be reaped before giving up on them (a guard against hangs, not a limit).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Size of the read buffer per stream: memory stays flat under a flood.
const READ_CHUNK: usize = 16 * 1024;

/// The environment a wrapper gets: nothing of the server's environment but
/// the variables contract 2 names.
#[derive(Debug, Clone, Default)]
pub struct JobEnv(Vec<(&'static str, OsString)>);

impl JobEnv {
    /// Picks the allowed variables out of `lookup` (the server's environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Self {
        let mut vars = vec![
            ("HOME", lookup("HOME").unwrap_or_else(|| "/".into())),
            ("PATH", "/usr/bin:/bin".into()),
        ];
        // NIX_SANDBOX_CGROUP is the run's own cgroup ([`Job::cgroup`]), never
        // the server's.
        for name in ["XDG_RUNTIME_DIR", "PROJECT_DIR", "PROJECT_MOUNT"] {
            if let Some(value) = lookup(name).filter(|v| !v.is_empty()) {
                vars.push((name, value));
            }
        }
        Self(vars)
    }

    pub fn from_process() -> Self {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// The variables, for a wrapper spawned elsewhere (a session's).
    pub fn vars(&self) -> impl Iterator<Item = (&'static str, &OsStr)> {
        self.0.iter().map(|(k, v)| (*k, v.as_os_str()))
    }
}

/// What to run and under which limits.
pub struct Job<'a> {
    pub argv: &'a [String],
    pub code: &'a [u8],
    pub timeout: Duration,
    /// Cap for each of stdout and stderr.
    pub output_bytes: usize,
    pub env: &'a JobEnv,
    /// `NIX_SANDBOX_CGROUP` of this run, when the launcher made it a cgroup.
    pub cgroup: Option<&'a OsStr>,
}

/// How the wrapper ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// Killed, but not reaped within [`KILL_GRACE`]; the reaper still reaps it.
    Unknown,
}

/// Everything a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    pub exit: Exit,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stdout: Cap,
    pub stderr: Cap,
    pub duration: Duration,
}

impl Outcome {
    /// Exit 0, not killed by the launcher.
    pub fn succeeded(&self) -> bool {
        self.exit == Exit::Code(0) && !self.timed_out && !self.cancelled
    }
}

/// Runs `job` to its end, its deadline, or until `cancelled` completes.
/// Errors only when the wrapper cannot be started.
pub async fn run(job: Job<'_>, cancelled: impl Future<Output = ()>) -> io::Result<Outcome> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + job.timeout;
    let (group, exit_rx, stdin, stdout, stderr) = spawn(&job)?;

    let mut out = Cap::new(job.output_bytes);
    let mut err = Cap::new(job.output_bytes);
    let (mut timed_out, mut was_cancelled) = (false, false);
    let exit = {
        let work = async {
            let write = async {
                let mut stdin = stdin;
                if let Err(e) = stdin.write_all(job.code).await {
                    tracing::debug!(error = %e, "the wrapper stopped reading its code");
                }
                // Dropping stdin closes it: the program sees EOF after the code.
            };
            let (_, _, _, exit) = tokio::join!(
                write,
                pump(stdout, &mut out),
                pump(stderr, &mut err),
                exit_rx
            );
            exit.ok()
        };
        tokio::pin!(work);
        tokio::select! {
            exit = &mut work => exit,
            () = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                kill_and_drain(&group, work).await
            }
            () = cancelled => {
                was_cancelled = true;
                kill_and_drain(&group, work).await
            }
        }
    };
    group.kill();
    Ok(Outcome {
        exit: exit.unwrap_or(Exit::Unknown),
        timed_out,
        cancelled: was_cancelled,
        stdout: out,
        stderr: err,
        duration: started.elapsed(),
    })
}

/// Kills the group, then lets the readers see EOF and the reaper report.
async fn kill_and_drain(
    group: &Group,
    work: std::pin::Pin<&mut impl Future<Output = Option<Reaped>>>,
) -> Option<Reaped> {
    group.kill();
    match tokio::time::timeout(KILL_GRACE, work).await {
        Ok(exit) => exit,
        Err(_) => {
            tracing::warn!(pgid = group.pgid, "the killed run did not close its pipes");
            None
        }
    }
}

/// How the wrapper ended.
pub type Reaped = Exit;

type Spawned = (
    Group,
    oneshot::Receiver<Reaped>,
    pipe::Sender,
    pipe::Receiver,
    pipe::Receiver,
);

/// The command that starts a wrapper (CONTRIBUTING.md, contracts 2 and 3),
/// for runs and session jails alike: a process group of its own, only the
/// allowed environment plus the run's cgroup, piped stdio, and SIGKILL when
/// the launcher dies.
pub fn wrapper_command(
    program: &str,
    args: &[String],
    env: &JobEnv,
    cgroup: Option<&OsStr>,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.vars())
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cgroup) = cgroup {
        cmd.env("NIX_SANDBOX_CGROUP", cgroup);
    }
    // The wrapper gets SIGKILL when the thread that spawned it dies: that is
    // the current-thread runtime's, which lives as long as the launcher, so
    // even a crashed launcher leaves no run behind. A launcher that died
    // between fork and the prctl sent no signal: the child then has another
    // parent already, and must not start the jail.
    let launcher = nix::unistd::getpid();
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of
    // the parent.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            if nix::unistd::getppid() != launcher {
                return Err(io::Error::other("the launcher is gone"));
            }
            Ok(())
        });
    }
    cmd
}

fn spawn(job: &Job<'_>) -> io::Result<Spawned> {
    let (program, args) = job
        .argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut cmd = wrapper_command(program, args, job.env, job.cgroup);
    let mut child = cmd.spawn()?;
    let group = Group::new(child.id());
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    // The std handle neither kills nor waits on drop; the reaper owns the pid.
    drop(child);
    let exit_rx = group.start_reaper();
    let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
        return Err(io::Error::other("the wrapper's pipes were not created"));
    };
    Ok((
        group,
        exit_rx,
        pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?,
        pipe::Receiver::from_owned_fd(OwnedFd::from(stdout))?,
        pipe::Receiver::from_owned_fd(OwnedFd::from(stderr))?,
    ))
}

/// Reads `r` to its end into `cap`, through one fixed-size buffer.
async fn pump(mut r: impl AsyncRead + Unpin, cap: &mut Cap) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => cap.push(&buf[..n]),
            Err(e) => {
                tracing::debug!(error = %e, "reading the wrapper's output failed");
                break;
            }
        }
    }
}

/// The wrapper's process group. Dropping it kills the group unless the
/// wrapper was already reaped. Sessions (session_jail.rs) use it too.
pub struct Group {
    pgid: i32,
    /// Set once the leader is reaped: from then on the id may be reused by
    /// another process, so it must never be signalled again.
    reaped: Arc<Mutex<bool>>,
}

impl Group {
    pub fn new(pid: u32) -> Self {
        Self {
            pgid: i32::try_from(pid).unwrap_or(0),
            reaped: Arc::new(Mutex::new(false)),
        }
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
    pub fn start_reaper(&self) -> oneshot::Receiver<Reaped> {
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
                Ok(WaitStatus::Exited(_, code)) => Exit::Code(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => Exit::Signal(signal as i32),
                other => {
                    tracing::error!(pgid, status = ?other, "unexpected wait status");
                    Exit::Unknown
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
            Err(e) => tracing::warn!(pgid, error = %e, "cannot kill the run's process group"),
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
    use std::ffi::OsStr;

    #[test]
    fn job_env_keeps_only_the_contract_variables() {
        let env = JobEnv::from_lookup(|name| match name {
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

    fn job<'a>(script: &'a [String], env: &'a JobEnv, timeout_ms: u64) -> Job<'a> {
        Job {
            argv: script,
            code: b"",
            timeout: Duration::from_millis(timeout_ms),
            output_bytes: 1024,
            env,
            cgroup: None,
        }
    }

    #[tokio::test]
    async fn exit_code_and_streams_are_reported() {
        let argv = ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"].map(String::from);
        let env = JobEnv::default();
        let o = run(job(&argv, &env, 10_000), std::future::pending())
            .await
            .unwrap();
        assert_eq!(o.exit, Exit::Code(3));
        assert_eq!(o.stdout.render(), "out\n");
        assert_eq!(o.stderr.render(), "err\n");
        assert!(!o.timed_out && !o.succeeded());
    }

    #[tokio::test]
    async fn a_sleeper_with_closed_output_ends_at_the_deadline() {
        let argv = ["/bin/sh", "-c", "exec >&- 2>&-; sleep 1000"].map(String::from);
        let env = JobEnv::default();
        let o = run(job(&argv, &env, 300), std::future::pending())
            .await
            .unwrap();
        assert!(o.timed_out);
        assert_eq!(o.exit, Exit::Signal(9));
    }

    #[tokio::test]
    async fn cancellation_kills_the_run() {
        let argv = ["/bin/sh", "-c", "sleep 1000"].map(String::from);
        let env = JobEnv::default();
        let cancel = tokio::time::sleep(Duration::from_millis(200));
        let o = run(job(&argv, &env, 60_000), cancel).await.unwrap();
        assert!(o.cancelled && !o.timed_out);
        assert_eq!(o.exit, Exit::Signal(9));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let argv = ["/nonexistent/wrapper".to_string()];
        let env = JobEnv::default();
        let e = run(job(&argv, &env, 1000), std::future::pending())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
