//! A spawned argv (the `spawn` request: `nix-sandbox-mcp sandbox exec`):
//! one program run beside the interpreter, which it does not touch.
//!
//! The child runs `argv` (no shell) in a process group of its own (its pgid
//! is its pid), cwd the workspace, the agent's environment, stdin
//! `/dev/null`, stdout and stderr on fresh pipes whose agent ends are
//! non-blocking; the session polls them and passes each read on at once.
//!
//! With a terminal (`tty`: `nix-sandbox-mcp sandbox enter`), the child gets
//! a pseudo-terminal the agent opens in the jail as stdin, stdout and
//! stderr instead, in a session of its own (`setsid`) whose controlling
//! terminal it is, so Ctrl-C typed into it reaches its foreground job; the
//! master is its `stdout` and takes [`Spawned::input`] and
//! [`Spawned::resize`].

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid, waitpid};
use nix::unistd::{Pid, getpid};
use proto::frame::{Exit, MAX_ARGV_BYTES, TtySize};

use crate::interpreter::{default_signals, die_with_parent, exit_of};

/// How long an `input` waits for room in the pseudo-terminal.
const INPUT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Gives `command` fresh pipes, or with `tty` a pseudo-terminal of that
/// size: its master.
fn stdio(command: &mut Command, tty: Option<TtySize>) -> Result<Option<OwnedFd>, Refused> {
    let failed = |e: &dyn std::fmt::Display| Refused::Failed(e.to_string());
    Ok(match tty {
        None => {
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
            None
        }
        Some(size) => {
            let size = winsize(size);
            let pty = nix::pty::openpty(Some(&size), None)
                .map_err(|e| failed(&format!("cannot open a pseudo-terminal: {e}")))?;
            for stdio in [Command::stdin, Command::stdout, Command::stderr] {
                let slave = pty.slave.try_clone().map_err(|e| failed(&e))?;
                stdio(command, Stdio::from(slave));
            }
            Some(pty.master)
        }
    })
}

fn winsize(size: TtySize) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A running spawn and the agent's ends of its pipes.
#[derive(Debug)]
pub struct Spawned {
    /// The request's id, which its `output` and `spawned` replies carry.
    pub id: u64,
    pid: Pid,
    /// `None` once the pipe reached end of file.
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// The pseudo-terminal's master, when it has one (non-blocking).
    terminal: Option<OwnedFd>,
    /// How it ended, once it has (it is collected then), and when.
    pub exit: Option<(Exit, Instant)>,
}

/// Why an argv is not run: `bad_request` when it is malformed.
pub enum Refused {
    Bad(String),
    Failed(String),
}

impl Spawned {
    /// Starts `argv` in `workspace`, on a pseudo-terminal of size `tty`
    /// when given.
    pub fn start(
        id: u64,
        argv: &[String],
        workspace: &Path,
        tty: Option<TtySize>,
    ) -> Result<Self, Refused> {
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
        command.args(args).current_dir(workspace);
        let failed = |e: &dyn std::fmt::Display| Refused::Failed(e.to_string());
        let master = stdio(&mut command, tty)?;
        let terminal = master.is_some();
        // SAFETY: the closure runs in the forked child before exec and calls
        // only async-signal-safe functions (sigaction, prctl, getppid,
        // setsid, ioctl).
        unsafe {
            command.pre_exec(move || {
                default_signals()?;
                die_with_parent(agent)?;
                if terminal {
                    nix::unistd::setsid()?;
                    if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| Refused::Failed(format!("cannot run `{program}`: {e}")))?;
        // The slave's copies the command held: the child's alone from here,
        // so the master reads end of file (EIO) once it and its jobs close it.
        drop(command);
        let pid =
            Pid::from_raw(i32::try_from(child.id()).map_err(|e| Refused::Failed(e.to_string()))?);
        let (stdout, stderr, terminal) = match master {
            Some(master) => {
                let copy = master.try_clone().map_err(|e| failed(&e))?;
                (Some(master), None, Some(copy))
            }
            None => {
                let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take())
                else {
                    unreachable!("stdout and stderr were set to piped")
                };
                (Some(stdout.into()), Some(stderr.into()), None)
            }
        };
        let this = Spawned {
            id,
            pid,
            stdout,
            stderr,
            terminal,
            exit: None,
        };
        for fd in this.stdout.iter().chain(this.stderr.iter()) {
            fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                .map_err(|e| Refused::Failed(e.to_string()))?;
        }
        Ok(this)
    }

    /// Writes `bytes` to its pseudo-terminal, waiting at most
    /// [`INPUT_WAIT`] for room (a child that reads nothing loses the
    /// rest); false when it has none.
    pub fn input(&self, bytes: &[u8]) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let Some(master) = &self.terminal else {
            return false;
        };
        let deadline = Instant::now() + INPUT_WAIT;
        let mut rest = bytes;
        while !rest.is_empty() && Instant::now() < deadline {
            match nix::unistd::write(master, rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::EAGAIN) => {
                    let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLOUT)];
                    let _ = poll(&mut fds, PollTimeout::from(50u16));
                }
                Err(Errno::EINTR) => {}
                Err(_) => break,
            }
        }
        true
    }

    /// Sets its pseudo-terminal's size; false when it has none.
    pub fn resize(&self, size: TtySize) -> bool {
        let Some(master) = &self.terminal else {
            return false;
        };
        let size = winsize(size);
        // SAFETY: TIOCSWINSZ reads one winsize, which lives through the call.
        let _ = unsafe {
            nix::libc::ioctl(
                master.as_raw_fd(),
                nix::libc::TIOCSWINSZ,
                std::ptr::from_ref(&size),
            )
        };
        true
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
