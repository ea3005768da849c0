//! One interpreter process running its driver, and the pipes to it.
//!
//! The child runs `PROGRAM DRIVER` in a process group of its own (its pgid is
//! its pid), with stdin `/dev/null`, stdout and stderr on fresh pipes, and the
//! driver's control channel on fds 3 (agent -> driver) and 4 (driver ->
//! agent), which the driver moves to close-on-exec fds at once so that the
//! processes user code starts do not inherit them. The agent's ends are
//! non-blocking; the agent polls them.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::libc;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{Pid, getpid, pipe2};
use proto::frame::Exit;

use crate::cli::Config;

/// A running interpreter and the agent's ends of its pipes.
#[derive(Debug)]
pub struct Interpreter {
    pid: Pid,
    /// The agent writes each call's code here (the driver's fd 3).
    pub to_driver: OwnedFd,
    /// The driver's messages (its fd 4).
    pub from_driver: OwnedFd,
    /// User output; `None` once the pipe reached end of file.
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// Gives the interpreter the default action for the signals the agent and
/// user code rely on. A server started as a background job of a shell
/// without job control (or by `nohup`) has SIGINT and SIGQUIT (or SIGHUP)
/// ignored, and exec keeps an ignored signal: bash can then not trap SIGINT
/// and no interrupt would ever end a bash call.
pub fn default_signals() -> io::Result<()> {
    use nix::sys::signal::{SigHandler, signal};
    for sig in [
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGHUP,
        Signal::SIGTERM,
        Signal::SIGALRM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        // SAFETY: sets the default action; no handler is installed.
        unsafe { signal(sig, SigHandler::SigDfl) }?;
    }
    Ok(())
}

impl Interpreter {
    /// Starts `config.program config.driver`.
    pub fn spawn(config: &Config) -> io::Result<Self> {
        let (driver_in, to_driver) = pipe2(OFlag::O_CLOEXEC)?;
        let (from_driver, driver_out) = pipe2(OFlag::O_CLOEXEC)?;
        let (in_fd, out_fd) = (driver_in.as_raw_fd(), driver_out.as_raw_fd());
        let agent = getpid();
        let mut command = Command::new(&config.program);
        command
            .arg(&config.driver)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: the closure runs in the forked child before exec and calls
        // only async-signal-safe functions (fcntl, dup2, prctl, getppid,
        // sigaction).
        unsafe {
            command.pre_exec(move || {
                give_control_fds(in_fd, out_fd)?;
                default_signals()?;
                die_with_parent(agent)
            });
        }
        let mut child = command.spawn()?;
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("stdout and stderr were set to piped")
        };
        let this = Interpreter {
            pid,
            to_driver,
            from_driver,
            stdout: Some(stdout.into()),
            stderr: Some(stderr.into()),
        };
        for fd in [&this.to_driver, &this.from_driver]
            .into_iter()
            .chain(this.stdout.iter())
            .chain(this.stderr.iter())
        {
            fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        }
        Ok(this)
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Sends `signal` to the interpreter's process group: the interpreter and
    /// every process user code started that did not leave the group.
    pub fn signal_group(&self, signal: Signal) {
        // The group's id is the child's pid; never signal 0, 1 or below.
        if self.pid.as_raw() > 1 {
            match killpg(self.pid, signal) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => tracing::warn!(pgid = self.pid.as_raw(), %signal, "killpg: {e}"),
            }
        }
    }

    /// How the interpreter ended, if it has; it stays a zombie (so its pid,
    /// the group's id, cannot be reused) until [`Interpreter::reap`].
    pub fn exited(&self) -> Option<Exit> {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(self.pid), flags) {
            Ok(status) => exit_of(status),
            Err(e) => {
                tracing::warn!(pid = self.pid.as_raw(), "waitid: {e}");
                None
            }
        }
    }

    /// Collects the exited child's status.
    pub fn reap(&self) {
        if let Err(e) = waitpid(self.pid, None) {
            tracing::warn!(pid = self.pid.as_raw(), "waitpid: {e}");
        }
    }
}

/// Marks every fd the agent inherited besides 0, 1 and 2 close-on-exec, so
/// that no interpreter gets one (the launcher's, or whatever its parent
/// leaked: bubblewrap passes them on).
pub fn hide_inherited_fds() -> io::Result<()> {
    // The kernel knows the flag as `unsigned int`; libc passes an `int`.
    let flags = libc::CLOSE_RANGE_CLOEXEC as libc::c_int;
    // SAFETY: close_range only changes the flags of this process's fds.
    if unsafe { libc::close_range(3, libc::c_uint::MAX, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn exit_of(status: WaitStatus) -> Option<Exit> {
    match status {
        WaitStatus::Exited(_, code) => Some(Exit::Code(code)),
        WaitStatus::Signaled(_, signal, _) => Some(Exit::Signal(signal as i32)),
        _ => None,
    }
}

/// In the child: the control pipe's ends become fds 3 and 4, inheritable.
/// They are first copied above 10 so that `dup2` onto 3 cannot close the
/// other end when it happens to be fd 3 or 4 (the copies are close-on-exec).
fn give_control_fds(read_end: RawFd, write_end: RawFd) -> io::Result<()> {
    let check = |ret: libc::c_int| {
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret)
        }
    };
    // SAFETY: plain fd syscalls on fds this process owns.
    unsafe {
        let r = check(libc::fcntl(read_end, libc::F_DUPFD_CLOEXEC, 10))?;
        let w = check(libc::fcntl(write_end, libc::F_DUPFD_CLOEXEC, 10))?;
        check(libc::dup2(r, 3))?;
        check(libc::dup2(w, 4))?;
    }
    Ok(())
}

/// In the child: die when the agent dies, even outside a jail (in the jail,
/// the pid namespace ends everything anyway).
pub fn die_with_parent(agent: Pid) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if nix::unistd::getppid() != agent {
        return Err(io::Error::other(
            "the agent exited while starting the interpreter",
        ));
    }
    Ok(())
}
