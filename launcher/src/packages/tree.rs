//! The compose helper's processes, stopped whole. The helper runs as a
//! child subreaper (`PR_SET_CHILD_SUBREAPER`, set before it execs,
//! [`subreaper`]): every process it starts stays under it while it lives,
//! whether in a session of its own (Nix starts each builder so, out of the
//! helper's process group) or orphaned by its parent. So the helper's tree
//! is what its composition runs, and is found by parent links in `/proc`.
//!
//! At a timeout ([`Tree::stop`]) the helper is stopped first (SIGSTOP: it
//! can neither exit, which would hand its orphans to init, nor start
//! anything), every process under it gets SIGTERM (nix-store then kills its
//! builders and removes their temporary directories, as on Ctrl-C; a
//! nix-store client of the daemon exits, and the daemon stops the build
//! when its client goes), and what is left after a grace is frozen and
//! killed ([`Tree::kill_now`]: SIGSTOP to each process until no new one
//! appears, then SIGKILL to all). The helper then gets SIGTERM and SIGCONT,
//! so that its own EXIT trap runs, and SIGKILL with its process group if it
//! does not end. A process that left the tree before (a daemon of its own
//! that double-forked and was reaped) is out of reach; Nix builds do not
//! do that, and with build users Nix kills all of the build user's
//! processes itself.
//!
//! Signals to a process under the helper go through a pidfd checked
//! against the start time the scan read, so a pid reused meanwhile is
//! never signalled.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use nix::libc;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long the processes under the helper have after SIGTERM, and the
/// helper after that, before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);

/// How many times [`Tree::kill_now`] looks for processes not yet stopped.
const ROUNDS: usize = 64;

/// Makes the calling process a child subreaper; for `pre_exec`, between
/// fork and exec (prctl is async-signal-safe). The flag survives exec.
pub fn subreaper() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) changes only this process's
    // flag.
    match unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A process: its pid and start time (clock ticks after boot), which
/// together name it even after the pid is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Proc {
    pid: i32,
    start: u64,
}

/// One line of `/proc/PID/stat` read: parent, state, start time.
struct Stat {
    parent: i32,
    zombie: bool,
    start: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything.
    let rest: Vec<&str> = text.get(text.rfind(')')? + 2..)?.split(' ').collect();
    Some(Stat {
        zombie: matches!(*rest.first()?, "Z" | "X"),
        parent: rest.get(1)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

/// The live processes under `root` (not `root` itself), from one scan.
fn descendants(root: i32) -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let table: Vec<(i32, Stat)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, st) in table.iter().filter(|(_, st)| st.parent == parent) {
            parents.push(*pid);
            if !st.zombie {
                found.push(Proc {
                    pid: *pid,
                    start: st.start,
                });
            }
        }
    }
    found
}

/// Sends `signal` to `proc` if it is still the process the scan saw.
fn signal(proc: Proc, signal: Signal) {
    if proc.pid <= 1 {
        return;
    }
    // SAFETY: pidfd_open takes a pid and flags, and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, proc.pid, 0) };
    let Ok(fd) = i32::try_from(fd) else {
        return;
    };
    if fd < 0 {
        return;
    }
    // SAFETY: fd is a pidfd just opened, owned here alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // The pidfd names whatever has the pid now: the one the scan saw only
    // if it started at the same tick.
    if stat(proc.pid).is_none_or(|st| st.start != proc.start) {
        return;
    }
    // SAFETY: pidfd_send_signal takes a pidfd, a signal, no siginfo and no
    // flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent != 0 {
        tracing::debug!(pid = proc.pid, %signal, error = %io::Error::last_os_error(), "cannot signal a process of the compose helper");
    }
}

/// The helper (our child, not yet reaped: its pid is ours to signal) and
/// its tree; dropped while armed, the tree is killed at once.
#[derive(Debug)]
pub struct Tree {
    root: i32,
    armed: bool,
}

impl Tree {
    pub fn new(root: i32) -> Self {
        Self {
            root,
            armed: root > 1,
        }
    }

    /// The helper has been reaped: its pid is no longer ours to signal.
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    fn signal_root(&self, signal: Signal) {
        if self.armed {
            let _ = kill(Pid::from_raw(self.root), signal);
        }
    }

    /// Stops the composition: the helper held, its tree asked to end, then
    /// killed after [`GRACE`]; last the helper is told to end (its caller
    /// waits for it, and calls [`Tree::kill_now`] if it does not).
    pub async fn stop(&self) {
        self.signal_root(Signal::SIGSTOP);
        for proc in descendants(self.root) {
            signal(proc, Signal::SIGTERM);
        }
        let end = tokio::time::Instant::now() + GRACE;
        while !descendants(self.root).is_empty() && tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill_under();
        self.signal_root(Signal::SIGTERM);
        self.signal_root(Signal::SIGCONT);
    }

    /// Kills the helper's tree and the helper's process group now.
    pub fn kill_now(&self) {
        self.signal_root(Signal::SIGSTOP);
        self.kill_under();
        if self.armed {
            crate::wrapper::kill_group(self.root);
        }
    }

    /// Freezes every process under the helper (the helper is stopped: none
    /// joins once a scan finds no new one), then kills them.
    fn kill_under(&self) {
        if !self.armed {
            return;
        }
        let mut stopped: HashSet<Proc> = HashSet::new();
        for _ in 0..ROUNDS {
            let new: Vec<Proc> = descendants(self.root)
                .into_iter()
                .filter(|p| !stopped.contains(p))
                .collect();
            if new.is_empty() {
                break;
            }
            for proc in new {
                signal(proc, Signal::SIGSTOP);
                stopped.insert(proc);
            }
        }
        for proc in stopped {
            signal(proc, Signal::SIGKILL);
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if self.armed {
            self.kill_now();
        }
    }
}
