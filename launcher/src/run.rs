//! One run: code fed to an environment's `run` wrapper (docs/contracts.md,
//! contract 2) in a fresh jail, its output captured, and nothing of it left
//! afterwards. The `run` tool without `session` or `files` is one
//! ([`in_env`]); so is a sandbox probe (probe.rs).
//!
//! - The wrapper is started as wrapper/mod.rs says: its own process group,
//!   the small environment, its own cgroup when the host has cgroups.
//! - The code is written to its stdin, which is then closed; stdout and stderr
//!   are read concurrently into [`Cap`]s through fixed-size buffers.
//! - One deadline covers writing, running, reading and waiting. At the
//!   deadline or on cancellation the whole process group is killed.
//! - A flood is stopped, not read to the deadline: once one stream has
//!   passed [`FLOOD_FACTOR`] times the cap (64 MiB for the default 64 KiB),
//!   the launcher stops reading it and kills the process group, so a `yes`
//!   costs the server a fraction of a second of CPU, not a core until the
//!   timeout. The result keeps the head and the newest tail, and says so.
//! - What the cgroup counted is read once the wrapper is gone; the cgroup
//!   is removed after the answer (wrapper/reaper.rs tracks that).

use std::time::{Duration, Instant};

use proto::cap::Cap;
use proto::frame::Exit;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::catalog::{Env, Limits};
use crate::egress::Gate;
use crate::live::Tail;
use crate::wrapper::cgroup::Stats;
use crate::wrapper::host::Host;
use crate::wrapper::jailuser::Lease;
use crate::wrapper::{self, Group, NotStarted, Spawner, StartError, WrapperEnv};

/// After a kill, how long to wait for the pipes to close and the wrapper to
/// be reaped before giving up on them (a guard against hangs, not a limit).
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Size of the read buffer per stream: memory stays flat under a flood.
const READ_CHUNK: usize = 16 * 1024;

/// How many times its cap a stream may write before the run is stopped as
/// a flood: far past what is kept, so only a program that floods meets it
/// (a build's log of tens of MiB does not, at the default cap). A run
/// served by a warm jail is stopped at the same bound by its agent.
pub use proto::frame::FLOOD_FACTOR;

/// The stream that flooded and where the run was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// The bytes past which it was stopped ([`FLOOD_FACTOR`] times the cap).
    pub after_bytes: u64,
}

/// What to run and under which limits.
pub struct Spec<'a> {
    /// The wrapper's argv: an environment's `run`.
    pub argv: &'a [String],
    /// The environment's limits, which its cgroup holds.
    pub limits: &'a Limits,
    pub code: &'a [u8],
    pub timeout: Duration,
    /// Cap for each of stdout and stderr.
    pub output_bytes: usize,
    pub env: &'a WrapperEnv,
    /// The jail's way out, when its environment has a network policy.
    pub gate: Option<&'a Gate>,
    /// The jail's uid and gid, when the launcher is root (wrapper::prepare).
    pub user: Option<Lease>,
    /// Where the newest output goes while the run runs, when someone
    /// watches it (a client that asked for progress).
    pub tail: Option<&'a Tail>,
}

/// Everything a finished run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// How the wrapper ended; `None` when it was killed but not reaped
    /// within [`KILL_GRACE`] (the reaper still reaps it).
    pub exit: Option<Exit>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// The launcher stopped it: a stream flooded.
    pub flooded: Option<Flood>,
    pub stdout: Cap,
    pub stderr: Cap,
    pub duration: Duration,
    /// What the run's cgroup counted, when it had one.
    pub usage: Option<Stats>,
    /// The network policy's refusals, as note lines.
    pub refusals: Vec<String>,
}

impl RunOutcome {
    /// Exit 0, not killed by the launcher.
    pub fn succeeded(&self) -> bool {
        self.exit == Some(Exit::Code(0))
            && !self.timed_out
            && !self.cancelled
            && self.flooded.is_none()
    }
}

/// What a run of the `run` tool needs besides its environment and code.
pub struct Context<'a> {
    /// What starts the jail; its shutdown token: the server is stopping.
    pub spawner: &'a Spawner,
    /// The client cancelled the call.
    pub cancel: &'a CancellationToken,
    /// Where the newest output goes while it runs, if anywhere.
    pub tail: Option<&'a Tail>,
}

/// Runs `code` in a fresh jail of `env`, under its timeout and output cap.
pub async fn in_env(env: &Env, code: &str, cx: &Context<'_>) -> Result<RunOutcome, NotStarted> {
    let spawner = cx.spawner;
    let (user, gate) = spawner.prepare(env).map_err(|e| NotStarted::run(env, e))?;
    let spec = Spec {
        gate: gate.as_ref(),
        user,
        argv: &env.run,
        limits: &env.limits,
        code: code.as_bytes(),
        timeout: Duration::from_secs(env.limits.timeout_s.get()),
        output_bytes: usize::try_from(env.limits.output_bytes.get()).unwrap_or(usize::MAX),
        env: &spawner.env,
        tail: cx.tail,
    };
    let stop = async {
        tokio::select! {
            () = cx.cancel.cancelled() => {}
            () = spawner.shutdown.cancelled() => {}
        }
    };
    let ran = run(&spawner.host, spec, stop).await;
    match &ran {
        // At info only when the launcher ended it (a deadline, a cancel):
        // otherwise the client has the result, and a line for each run
        // would cost it a write and the log's reader a wake-up.
        Ok(outcome) if outcome.timed_out || outcome.cancelled => tracing::info!(
            env = %env.name,
            exit = ?outcome.exit,
            timed_out = outcome.timed_out,
            cancelled = outcome.cancelled,
            ms = outcome.duration.as_millis() as u64,
            "run finished"
        ),
        Ok(outcome) => tracing::debug!(
            env = %env.name,
            exit = ?outcome.exit,
            ms = outcome.duration.as_millis() as u64,
            "run finished"
        ),
        Err(StartError::Cgroup(e)) => {
            tracing::error!(env = %env.name, error = %e, "no cgroup for the run");
        }
        Err(StartError::Spawn(e)) => {
            tracing::error!(env = %env.name, error = %e, "cannot start the wrapper");
        }
        Err(StartError::Egress(e)) => {
            tracing::error!(env = %env.name, error = %e, "no network gate for the run");
        }
        Err(e @ (StartError::Project(_) | StartError::Layers(_))) => {
            tracing::error!(env = %env.name, error = %e, "cannot start the run's layer");
        }
    }
    ran.map_err(|cause| NotStarted::run(env, cause))
}

/// Runs `spec` to its end, its deadline, or until `stop` completes, in a
/// cgroup of its own when `host` has cgroups. Errors only when the wrapper
/// cannot be started.
pub async fn run(
    host: &Host,
    spec: Spec<'_>,
    stop: impl Future<Output = ()>,
) -> Result<RunOutcome, StartError> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let wrapper = wrapper::spawn(
        spec.argv,
        spec.limits,
        spec.env,
        host,
        spec.gate,
        spec.user,
        None,
    )?;
    let group = wrapper.group;

    let mut out = Cap::new(spec.output_bytes);
    let mut err = Cap::new(spec.output_bytes);
    let (mut timed_out, mut cancelled) = (false, false);
    let flood_at = (spec.output_bytes as u64).saturating_mul(FLOOD_FACTOR);
    let flood = tokio::sync::Notify::new();
    let exit = {
        let work = async {
            let write = async {
                let mut stdin = wrapper.stdin;
                if let Err(e) = stdin.write_all(spec.code).await {
                    tracing::debug!(error = %e, "the wrapper stopped reading its code");
                }
                // Dropping stdin closes it: the program sees EOF after the code.
            };
            let (_, _, _, exit) = tokio::join!(
                write,
                pump(wrapper.stdout, &mut out, spec.tail, flood_at, &flood),
                pump(wrapper.stderr, &mut err, spec.tail, flood_at, &flood),
                wrapper.reaped
            );
            exit.ok().flatten()
        };
        tokio::pin!(work);
        tokio::select! {
            exit = &mut work => exit,
            () = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                kill_and_drain(&group, work).await
            }
            () = stop => {
                cancelled = true;
                kill_and_drain(&group, work).await
            }
            () = flood.notified() => {
                kill_and_drain(&group, work).await
            }
        }
    };

    group.kill();
    let usage = wrapper.cgroup.map(counted);
    Ok(RunOutcome {
        exit,
        timed_out,
        cancelled,
        flooded: Flood::of(&out, &err, flood_at),
        stdout: out,
        stderr: err,
        duration: started.elapsed(),
        usage,
        refusals: spec.gate.map(Gate::take_refusals).unwrap_or_default(),
    })
}

impl Flood {
    /// The stream that passed `at` bytes, stdout first, if one did.
    fn of(out: &Cap, err: &Cap, at: u64) -> Option<Self> {
        [("stdout", out), ("stderr", err)]
            .into_iter()
            .find(|(_, cap)| cap.total() > at)
            .map(|(stream, _)| Self {
                stream,
                after_bytes: at,
            })
    }
}

/// What the run's cgroup counted; the cgroup is removed after the answer,
/// not before: the run's processes are gone, and nothing of the answer
/// waits for the rmdir.
fn counted(cgroup: wrapper::cgroup::RunCgroup) -> Stats {
    let stats = cgroup.stats();
    wrapper::reaper::track(async move {
        if tokio::task::spawn_blocking(move || cgroup.remove())
            .await
            .is_err()
        {
            tracing::warn!("removing a run's cgroup panicked");
        }
    });
    stats
}

/// Kills the group, then lets the readers see EOF and the reaper report.
async fn kill_and_drain(
    group: &Group,
    work: std::pin::Pin<&mut impl Future<Output = Option<Exit>>>,
) -> Option<Exit> {
    group.kill();
    match tokio::time::timeout(KILL_GRACE, work).await {
        Ok(exit) => exit,
        Err(_) => {
            tracing::warn!(pgid = group.id(), "the killed run did not close its pipes");
            None
        }
    }
}

/// Reads `r` to its end into `cap`, and `tail` when given, through one
/// fixed-size buffer; past `flood_at` bytes it stops reading and wakes
/// `flood` (the run is then killed).
async fn pump(
    mut r: impl AsyncRead + Unpin,
    cap: &mut Cap,
    tail: Option<&Tail>,
    flood_at: u64,
    flood: &tokio::sync::Notify,
) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                cap.push(&buf[..n]);
                if let Some(tail) = tail {
                    tail.push(&buf[..n]);
                }
                if cap.total() > flood_at {
                    flood.notify_one();
                    break;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading the wrapper's output failed");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(
        script: &'a [String],
        limits: &'a Limits,
        env: &'a WrapperEnv,
        timeout_ms: u64,
    ) -> Spec<'a> {
        Spec {
            argv: script,
            limits,
            code: b"",
            timeout: Duration::from_millis(timeout_ms),
            output_bytes: 1024,
            env,
            gate: None,
            user: None,
            tail: None,
        }
    }

    /// A host without cgroups: the run itself, nothing counted.
    fn host() -> Host {
        Host::plain()
    }

    fn limits() -> Limits {
        crate::testing::env("t").build().limits
    }

    /// Runs `sh -c script` with a cap of 1024 bytes, to its end or
    /// `timeout_ms`.
    async fn sh(script: &str, timeout_ms: u64) -> RunOutcome {
        let argv = ["/bin/sh", "-c", script].map(String::from);
        let (env, limits) = (WrapperEnv::default(), limits());
        run(
            &host(),
            spec(&argv, &limits, &env, timeout_ms),
            std::future::pending(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn exit_code_and_streams_are_reported() {
        let o = sh("echo out; echo err >&2; exit 3", 10_000).await;
        assert_eq!(o.exit, Some(Exit::Code(3)));
        assert_eq!(o.stdout.render(), "out\n");
        assert_eq!(o.stderr.render(), "err\n");
        assert!(!o.timed_out && !o.succeeded());
    }

    #[tokio::test]
    async fn a_flood_is_stopped_far_past_the_cap_not_read_to_the_deadline() {
        // The cap is 1024 bytes, so the flood is stopped past 1 MiB; a
        // child in the background flooding stderr goes with the group.
        // Which stream passes 1 MiB first is the scheduler's choice (on a
        // loaded machine stderr may before `yes` has written a byte): the
        // head written before both is what must be kept.
        let o = sh("echo first; yes err >&2 & yes", 60_000).await;
        let flood = o.flooded.expect("the flood was stopped");
        assert_eq!(flood.after_bytes, 1024 * FLOOD_FACTOR);
        assert!(!o.timed_out && !o.cancelled && !o.succeeded());
        assert!(o.duration < Duration::from_secs(30), "{:?}", o.duration);
        let total = match flood.stream {
            "stdout" => o.stdout.total(),
            _ => o.stderr.total(),
        };
        assert!(total > flood.after_bytes);
        // What it read is bounded: the stop and one buffer past it.
        assert!(total <= flood.after_bytes + READ_CHUNK as u64, "{total}");
        assert!(o.stdout.render().starts_with("first\n"), "{o:?}");
    }

    #[tokio::test]
    async fn output_under_the_flood_bound_is_read_to_its_end() {
        let o = sh("head -c 1040000 /dev/zero; echo done >&2", 60_000).await;
        assert_eq!(o.flooded, None);
        assert!(o.succeeded(), "{o:?}");
        assert_eq!(o.stdout.total(), 1_040_000);
        assert_eq!(o.stderr.render(), "done\n");
    }

    #[tokio::test]
    async fn a_sleeper_with_closed_output_ends_at_the_deadline() {
        let o = sh("exec >&- 2>&-; sleep 1000", 300).await;
        assert!(o.timed_out);
        assert_eq!(o.exit, Some(Exit::Signal(9)));
    }

    #[tokio::test]
    async fn cancellation_kills_the_run() {
        let argv = ["/bin/sh", "-c", "sleep 1000"].map(String::from);
        let (env, limits) = (WrapperEnv::default(), limits());
        let cancel = tokio::time::sleep(Duration::from_millis(200));
        let o = run(&host(), spec(&argv, &limits, &env, 60_000), cancel)
            .await
            .unwrap();
        assert!(o.cancelled && !o.timed_out);
        assert_eq!(o.exit, Some(Exit::Signal(9)));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let argv = ["/nonexistent/wrapper".to_string()];
        let (env, limits) = (WrapperEnv::default(), limits());
        let e = run(
            &host(),
            spec(&argv, &limits, &env, 1000),
            std::future::pending(),
        )
        .await
        .unwrap_err();
        let StartError::Spawn(e) = e else {
            panic!("not a spawn error: {e}")
        };
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
