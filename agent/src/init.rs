//! The agent as the jail's pid 1.
//!
//! The session wrapper starts the agent as the init of the jail's pid
//! namespace (bubblewrap's `--as-pid-1`): then no bubblewrap init sits in
//! the jail holding the launcher's pipes as its stdin and stdout, where the
//! jail's processes (same user, dumpable) could open them through
//! `/proc/1/fd`. Pid 1 has two jobs besides the agent's own:
//!
//! - Reaping. A process whose parent exits is re-parented to pid 1, and
//!   once it exits it stays a zombie (holding a slot of the jail's process
//!   limit) until pid 1 collects it. [`reap_orphans`] collects every exited
//!   child except the interpreter, whose status the session reads itself
//!   (`Interpreter::exited`, by its pid, without collecting it). The
//!   session runs it after every wake-up of its loop, and SIGCHLD (read
//!   from a signalfd) is one: zombies are collected as they appear, between
//!   calls too.
//! - Signals. The kernel drops a signal sent to a namespace's init from
//!   inside the namespace unless init has a handler for it, SIGKILL and
//!   SIGSTOP included: [`become_init`] leaves the agent without one (Rust's
//!   runtime installs SIGSEGV and SIGBUS handlers for its stack-overflow
//!   message; they are reset), so user code can neither stop nor kill the
//!   agent. SIGPIPE stays ignored and SIGCHLD blocked (queued for the
//!   signalfd: one sent by user code only wakes the loop). From outside the
//!   namespace SIGKILL still works: when the launcher kills the wrapper,
//!   bubblewrap's `--die-with-parent` (applied to the agent itself with
//!   `--as-pid-1`) kills it, and the kernel kills every process of the
//!   namespace when its init exits.
//!
//! Outside a jail (the agent's own tests) the agent makes itself a child
//! subreaper, so that it inherits user code's orphans there too.

use std::io;

use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

/// Takes up pid 1's duties: orphans come to the agent, and no signal has a
/// handler.
pub fn become_init() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in [Signal::SIGSEGV, Signal::SIGBUS] {
        // SAFETY: restores the default action; no handler is installed.
        unsafe { sigaction(signal, &default) }?;
    }
    Ok(())
}

/// Collects every exited child but those in `keep` (the interpreter, a
/// spawn: their statuses are read by pid); how many.
///
/// `waitid(P_ALL, WNOWAIT)` names an exited child without collecting it;
/// the one it names is collected only when it is not `keep`. When it is
/// `keep`, the interpreter has exited and the loop stops: the session
/// handles that death (and collects it) on the same wake-up or the next,
/// and the orphans behind it are collected then.
pub fn reap_orphans(keep: &[Option<Pid>]) -> usize {
    let mut reaped = 0;
    loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let pid = match waitid(Id::All, flags) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return reaped,
            Ok(status) => match status.pid() {
                Some(pid) => pid,
                None => return reaped,
            },
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!("waitid: {e}");
                return reaped;
            }
        };
        if keep.contains(&Some(pid)) {
            return reaped;
        }
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(status) => {
                tracing::debug!(pid = pid.as_raw(), ?status, "collected an orphan");
                reaped += 1;
            }
            Err(Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!(pid = pid.as_raw(), "waitpid: {e}");
                return reaped;
            }
        }
    }
}
