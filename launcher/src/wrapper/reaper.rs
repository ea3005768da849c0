//! Waiting for wrappers to exit, and what must follow each exit (reaping
//! it, removing its cgroup), without a thread per wrapper.
//!
//! A wrapper's exit is seen through a pidfd (Linux 5.3 and later) polled by
//! the runtime: a session holds no thread while it lives, so 32 sessions
//! cost the launcher no 32 (or 64) blocked threads, their stacks and their
//! malloc arenas. Where `pidfd_open` is refused (an older kernel), a
//! blocking thread waits instead, as before.
//!
//! Every such task is tracked: at exit the launcher, having killed the
//! jails, waits for them ([`finish`]) before it stops its runtime, so each
//! wrapper is reaped and each cgroup removed by the launcher itself (the
//! jails' pid namespace ends only once its last process is reaped).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::LazyLock;
use std::time::Duration;

use nix::libc;
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::task::TaskTracker;

/// The wrappers' waiters and what follows their exits.
static TASKS: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);

/// Runs `task` on the runtime, tracked: [`finish`] waits for it.
pub fn track<F>(task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    TASKS.spawn(task);
}

/// Waits up to `grace` for every tracked task (the jails were killed, so
/// their wrappers exit); false when some were still running.
pub async fn finish(grace: Duration) -> bool {
    TASKS.close();
    tokio::time::timeout(grace, TASKS.wait()).await.is_ok()
}

/// A pidfd of the child `pid`, which stays ours until reaped, or why not.
pub fn pidfd(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: the kernel just returned this fd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resolves once the process of `pidfd` has exited (it is then a zombie,
/// not reaped).
pub async fn exited(pidfd: OwnedFd) -> io::Result<()> {
    // SAFETY: the AsyncFd owns the pidfd, which is neither closed nor
    // replaced while registered.
    let fd = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE)? };
    let _ready = fd.readable().await?;
    Ok(())
}
