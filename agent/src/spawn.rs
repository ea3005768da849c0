//! A spawned argv (the `spawn` request: `nix-sandbox-mcp sandbox exec`):
//! one program run beside the interpreter, which it does not touch.
//!
//! The child runs `argv` (no shell) in a process group of its own (its pgid
//! is its pid), cwd the workspace, the agent's environment, stdin
//! `/dev/null`, stdout and stderr on fresh pipes whose agent ends are
//! non-blocking; the session polls them and passes each read on at once.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid, waitpid};
use nix::unistd::{Pid, getpid};
use proto::frame::{Exit, MAX_ARGV_BYTES};

use crate::interpreter::{default_signals, die_with_parent, exit_of};

/// A running spawn and the agent's ends of its pipes.
#[derive(Debug)]
pub struct Spawned {
    /// The request's id, which its `output` and `spawned` replies carry.
    pub id: u64,
    pid: Pid,
    /// `None` once the pipe reached end of file.
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// How it ended, once it has (it is collected then), and when.
    pub exit: Option<(Exit, Instant)>,
}

/// Why an argv is not run: `bad_request` when it is malformed.
pub enum Refused {
    Bad(String),
    Failed(String),
}

impl Spawned {
    /// Starts `argv` in `workspace`.
    pub fn start(id: u64, argv: &[String], workspace: &Path) -> Result<Self, Refused> {
        let Some((program, args)) = argv.split_first() else {
            return Err(Refused::Bad("the argv is empty".into()));
        };
        if program.is_empty() {
            return Err(Refused::Bad("the program's name is empty".into()));
        }
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(Refused::Bad("the argv contains a NUL byte".into()));
        }
        if argv.iter().map(String::len).sum::<usize>() > MAX_ARGV_BYTES {
            return Err(Refused::Bad(format!(
                "the argv is longer than {MAX_ARGV_BYTES} bytes"
            )));
        }
        let agent = getpid();
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec and calls
        // only async-signal-safe functions (sigaction, prctl, getppid).
        unsafe {
            command.pre_exec(move || {
                default_signals()?;
                die_with_parent(agent)
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| Refused::Failed(format!("cannot run `{program}`: {e}")))?;
        let pid =
            Pid::from_raw(i32::try_from(child.id()).map_err(|e| Refused::Failed(e.to_string()))?);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("stdout and stderr were set to piped")
        };
        let this = Spawned {
            id,
            pid,
            stdout: Some(stdout.into()),
            stderr: Some(stderr.into()),
            exit: None,
        };
        for fd in this.stdout.iter().chain(this.stderr.iter()) {
            fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                .map_err(|e| Refused::Failed(e.to_string()))?;
        }
        Ok(this)
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// SIGKILL to its process group (while its leader is not collected,
    /// so the group's id cannot be reused).
    pub fn kill_group(&self) {
        if self.exit.is_none() && self.pid.as_raw() > 1 {
            match killpg(self.pid, Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => tracing::warn!(pgid = self.pid.as_raw(), "killpg: {e}"),
            }
        }
    }

    /// Notes how it ended, if it has: what is left of its group is killed
    /// first, then it is collected.
    pub fn check_exit(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let Ok(status) = waitid(Id::Pid(self.pid), flags) else {
            return;
        };
        if let Some(exit) = exit_of(status) {
            self.kill_group();
            if let Err(e) = waitpid(self.pid, None) {
                tracing::warn!(pid = self.pid.as_raw(), "waitpid: {e}");
            }
            self.exit = Some((exit, Instant::now()));
        }
    }
}
