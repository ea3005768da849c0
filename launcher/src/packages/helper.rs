//! One run of a helper Nix generated (the compose helper, named by the
//! policy: `HELPER ENV REQUEST.json OUT`; the dev shell helper: `HELPER
//! FLAKE OUT`), in a process group of its own
//! and as a child subreaper (tree.rs), its output read, stopped with its
//! whole process tree at the policy's timeout or when the call is dropped.

use std::ffi::OsString;
use std::num::NonZeroU64;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Child;

use super::ComposeError;
use super::tree::{self, Tree};

/// Runs `helper` with `args` appended, stopped after `timeout_s`; its
/// stdout's last line is the composed store path. `env` names the
/// environment in the logs.
pub async fn run(
    helper: &[String],
    args: &[OsString],
    timeout_s: NonZeroU64,
    env: &str,
) -> Result<String, ComposeError> {
    let Some((program, fixed)) = helper.split_first() else {
        return Err(ComposeError::Failed("the policy names no helper".into()));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(fixed)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: the closure only calls prctl, which is async-signal-safe.
    unsafe { cmd.pre_exec(tree::subreaper) };
    let mut child = cmd
        .spawn()
        .map_err(|e| ComposeError::Failed(format!("cannot start {program}: {e}")))?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    // Kills the helper's tree when this call ends before the helper did
    // (the call dropped); a timeout stops it more gently below.
    let mut tree = Tree::new(pid);
    let limit = Duration::from_secs(timeout_s.get());
    let Ok((out, err, status)) = tokio::time::timeout(limit, finish(&mut child)).await else {
        tracing::warn!(
            env,
            pid,
            timeout_s = timeout_s.get(),
            "the helper timed out: stopping its processes"
        );
        tree.stop().await;
        if tokio::time::timeout(tree::GRACE, child.wait())
            .await
            .is_err()
        {
            tree.kill_now();
            let _ = child.wait().await;
        }
        tree.disarm();
        return Err(ComposeError::TimedOut(timeout_s.get()));
    };
    // Reaped: the pid is no longer ours to signal.
    tree.disarm();
    let status = status.map_err(|e| ComposeError::Failed(format!("{program}: {e}")))?;
    outcome(env, status, &out, &err)
}

/// The helper's stdout and stderr, read to their end, and its exit status.
async fn finish(child: &mut Child) -> (Vec<u8>, Vec<u8>, std::io::Result<ExitStatus>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let read_out = async {
        if let Some(mut pipe) = stdout {
            let _ = pipe.read_to_end(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(mut pipe) = stderr {
            let _ = pipe.read_to_end(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let status = child.wait().await;
    (out, err, status)
}

/// The helper's exit status and output, as the composed store path or why
/// not (composeHelper.nix: 65 unknown, 66 not cached, 67 outside its
/// prefix's scope, 69 the store unreachable, 70 anything else).
fn outcome(env: &str, status: ExitStatus, out: &[u8], err: &[u8]) -> Result<String, ComposeError> {
    let stderr = String::from_utf8_lossy(err);
    let mut line: String = last_line(&stderr).chars().take(400).collect();
    if line.is_empty() {
        line = format!(
            "the helper exited with status {} and said nothing",
            status.code().unwrap_or(-1)
        );
    }
    match status.code() {
        Some(0) => {
            let path = last_line(&String::from_utf8_lossy(out)).to_owned();
            match path.is_empty() {
                true => Err(ComposeError::Failed(
                    "the helper printed no store path".into(),
                )),
                false => Ok(path),
            }
        }
        Some(65) => Err(ComposeError::Unknown(line)),
        Some(66) => Err(ComposeError::NotCached(line)),
        Some(67) => Err(ComposeError::OutsideScope(line)),
        Some(69) => Err(ComposeError::Unreachable(line)),
        Some(code) => {
            tracing::warn!(env, code, %stderr, "the compose helper failed");
            Err(ComposeError::Failed(line))
        }
        None => Err(ComposeError::Failed(format!(
            "the helper was killed by signal {}",
            status.signal().unwrap_or(0)
        ))),
    }
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}
