//! Who the jails run as. Bubblewrap started by host root maps the jail's
//! uid to host uid 0, and procfs gives global root's powers by uid, not by
//! capability: with every capability dropped, such a jail could still write
//! global sysctls (`kernel.core_pattern` names a program the kernel runs as
//! root), read `/proc/kpageflags`, or raise its own cgroup's limits. And a
//! uid is what the kernel checks when one process reaches into another: a
//! host process of the jail's uid owns the jail's user namespaces, so it
//! holds every capability in them (setns, ptrace, pidfd_getfd,
//! process_vm_readv on the session agent), and it can connect to the
//! jail's egress gate. So a launcher running as root starts every wrapper
//! (runs, sessions, the probes, `--check`) as a uid of its own and the gid
//! of the same number, with no supplementary group: one per jail
//! ([`Lease`]), from a block of 65536 that nothing else on the host uses
//! and that it holds while it runs (uidblock.rs). A uid is handed out again
//! only after every other of the block was (once a jail ended: its
//! processes are gone with it). The launcher itself stays root: it makes
//! each run's cgroup, writes its limits and moves the wrapper in before the
//! wrapper drops to its uid (cgroup.rs, mod.rs), so nothing a jail's uid
//! can write holds a limit.
//!
//! A launcher that is not host root starts its wrappers as itself: its
//! jails map to its own uid, which is not host root either (uid 0 of a user
//! namespace mapped to another user, as in a rootless container, included:
//! [`is_host_root`]), and that user's processes are the server's own.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::libc;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{AccessFlags, ForkResult, Gid, Uid};

use super::uidblock::{self, Block};

/// Whether this process is host root: uid 0 that its user namespace maps
/// to uid 0 outside (the initial namespace maps every id to itself). Uid 0
/// of a user namespace mapped to another user (a rootless container) is
/// that user to procfs, so its jails need no other user. When the map
/// cannot be read, uid 0 counts as host root.
pub fn is_host_root() -> bool {
    if !nix::unistd::geteuid().is_root() {
        return false;
    }
    let Ok(map) = std::fs::read_to_string("/proc/self/uid_map") else {
        return true;
    };
    map.lines().any(|line| {
        let ids: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        matches!(ids[..], [0, 0, count] if count > 0)
    })
}

/// A uid and gid to become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: Uid,
    pub gid: Gid,
}

impl Ids {
    /// Becomes `uid`:`gid` with no supplementary group (real, effective
    /// and saved ids). Only system calls, no allocation: safe between fork
    /// and exec. Raw system calls, which change the calling thread alone:
    /// glibc's wrappers change every thread of the process it believes it
    /// has, and in a child made by a bare `clone3` (clone.rs) it still
    /// believes in the parent's threads, whose locks and thread records
    /// were copied in whatever state they had: its wrapper can wait for a
    /// thread being created, which never comes, for ever. Every caller is
    /// a child of one thread, whose thread is the whole process.
    pub fn become_user(self) -> nix::Result<()> {
        // SAFETY: system calls on plain integers (no supplementary group
        // list: a null pointer of length 0).
        unsafe {
            Errno::result(libc::syscall(
                libc::SYS_setgroups,
                0,
                std::ptr::null::<libc::gid_t>(),
            ))?;
            let gid = self.gid.as_raw();
            Errno::result(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
            let uid = self.uid.as_raw();
            Errno::result(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
        }
        Ok(())
    }
}

/// Gives the pipes on fds 0, 1 and 2 (a wrapper's stdio, which the
/// launcher made: root's, mode 0600) to `ids`, whose programs reopen them
/// through /proc (`source /dev/stdin`, `> /dev/stderr`). Only system
/// calls: safe between fork and exec.
pub fn give_stdio(ids: Ids) -> nix::Result<()> {
    for fd in [0, 1, 2] {
        // SAFETY: the child's standard fds, open until it execs.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        nix::unistd::fchown(fd, Some(ids.uid), Some(ids.gid))?;
    }
    Ok(())
}

/// The users a root launcher's jails run as: a uid each from its block,
/// and the runtime directory of that block (`/run/nix-sandbox-mcp/BASE`,
/// root's, mode 0755), which holds the egress gates and a home for
/// wrappers built before the jails had a passwd of their own.
#[derive(Debug)]
pub struct JailUsers {
    block: Block,
    taken: Arc<Mutex<Taken>>,
    runtime: PathBuf,
    home: PathBuf,
}

/// Which uids of the block jails hold, and where the next search starts.
#[derive(Debug)]
struct Taken {
    next: u32,
    live: HashSet<u32>,
}

impl Taken {
    /// The next id of the block at `base` that no jail holds, now held:
    /// from where the last search stopped, so an id comes back only after
    /// every other was handed out.
    fn take(&mut self, base: u32) -> Option<u32> {
        for _ in 0..HANDED_OUT {
            let n = self.next;
            self.next = n % HANDED_OUT + 1;
            if self.live.insert(base + n) {
                return Some(base + n);
            }
        }
        None
    }
}

/// The uids of a block handed to jails: all but its first (`probe_ids`)
/// and its last two.
const HANDED_OUT: u32 = uidblock::SIZE - 3;

/// What jail.nix's passwd of a wrapper built before the jails had their
/// own finds in HOME (`.local/share/jail.nix`): neutral users and groups.
const OLD_PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n";
const OLD_GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";

impl JailUsers {
    /// The jails' users of a launcher running as root: a block of uids,
    /// its runtime directory made anew (what a launcher that died holding
    /// the block left there is removed). The error is one line: why jails
    /// cannot be run safely as root here.
    pub fn for_root() -> Result<Self, String> {
        let block = Block::reserve()?;
        let runtime = Path::new(uidblock::RUN_DIR).join(block.base.to_string());
        if runtime.exists() {
            std::fs::remove_dir_all(&runtime).map_err(|e| {
                format!(
                    "cannot remove what a stopped server left in {}: {e}",
                    runtime.display()
                )
            })?;
        }
        let home = runtime.join("home");
        let state = home.join(".local/share/jail.nix");
        std::fs::DirBuilder::new()
            .mode(0o755)
            .recursive(true)
            .create(&state)
            .and_then(|()| std::fs::write(state.join("passwd"), OLD_PASSWD))
            .and_then(|()| std::fs::write(state.join("group"), OLD_GROUP))
            .map_err(|e| format!("cannot make the jails' home {}: {e}", home.display()))?;
        let users = Self {
            taken: Arc::new(Mutex::new(Taken {
                next: 1,
                live: HashSet::new(),
            })),
            runtime,
            home,
            block,
        };
        let all = AccessFlags::R_OK | AccessFlags::X_OK;
        if let Err(e) = users.may_access(&users.home, all) {
            let reason = format!(
                "uid {} cannot enter the jails' home {} ({e})",
                users.probe_ids().uid,
                users.home.display()
            );
            users.remove_runtime();
            return Err(reason);
        }
        Ok(users)
    }

    /// A uid and gid for one jail, no other jail's, held until the lease
    /// is dropped.
    pub fn lease(&self) -> Result<Lease, String> {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let id = taken
            .take(self.block.base)
            .ok_or_else(|| format!("all {HANDED_OUT} uids of the jails' block are in use"))?;
        Ok(Lease {
            ids: Ids {
                uid: Uid::from_raw(id),
                gid: Gid::from_raw(id),
            },
            taken: Arc::clone(&self.taken),
        })
    }

    /// The block's first uid and gid, which no jail runs as: for asking
    /// what any jail's uid may do (every one of them is "other" to every
    /// file of the host).
    pub fn probe_ids(&self) -> Ids {
        Ids {
            uid: Uid::from_raw(self.block.base),
            gid: Gid::from_raw(self.block.base),
        }
    }

    /// The first and last uid (and gid) of the block.
    pub fn range(&self) -> (u32, u32) {
        (self.block.base, self.block.base + (uidblock::SIZE - 1))
    }

    /// The wrappers' `HOME`: root's, readable, holding the old passwd.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The block's runtime directory: root's, mode 0755.
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime
    }

    /// Whether a jail's uid may access `path` as `mode` asks. access(2)
    /// answers for the caller, so a child process that became the user asks.
    pub fn may_access(&self, path: &Path, mode: AccessFlags) -> Result<(), Errno> {
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        let ids = self.probe_ids();
        // SAFETY: the child only makes system calls (no allocation, no
        // lock) before _exit, so a fork of a threaded process is safe.
        match unsafe { nix::unistd::fork() }? {
            ForkResult::Child => {
                let answer = ids
                    .become_user()
                    .and_then(|()| nix::unistd::access(path.as_c_str(), mode));
                let code = match answer {
                    Ok(()) => 0,
                    Err(e) => e as i32,
                };
                // SAFETY: ends the child without running the parent's exit
                // handlers or destructors.
                unsafe { nix::libc::_exit(code) }
            }
            ForkResult::Parent { child } => loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, 0)) => return Ok(()),
                    Ok(WaitStatus::Exited(_, code)) => return Err(Errno::from_raw(code)),
                    Ok(_) => return Err(Errno::ECHILD),
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Err(e),
                }
            },
        }
    }

    /// Removes the runtime directory (on the way out, once no wrapper is
    /// left; the block's lock goes with `self`).
    pub fn remove_runtime(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.runtime) {
            tracing::warn!(dir = %self.runtime.display(), error = %e, "the jails' runtime directory was not removed");
        }
    }
}

/// One jail's uid and gid; given back when dropped (with the jail's
/// process group, once its processes are killed).
#[derive(Debug)]
pub struct Lease {
    ids: Ids,
    taken: Arc<Mutex<Taken>>,
}

impl Lease {
    pub fn ids(&self) -> Ids {
        self.ids
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        taken.live.remove(&self.ids.uid.as_raw());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_back_only_after_every_other() {
        let base = uidblock::FIRST_BASE;
        let mut taken = Taken {
            next: 1,
            live: HashSet::new(),
        };
        assert_eq!(taken.take(base), Some(base + 1));
        assert_eq!(taken.take(base), Some(base + 2));
        taken.live.remove(&(base + 1));
        assert_eq!(
            taken.take(base),
            Some(base + 3),
            "not the one just given back"
        );
        taken.next = HANDED_OUT;
        assert_eq!(taken.take(base), Some(base + HANDED_OUT));
        assert_eq!(
            taken.take(base),
            Some(base + 1),
            "round again, past the block's first"
        );
        assert_eq!(taken.take(base), Some(base + 4), "2 and 3 still held");
        taken.live = (1..=HANDED_OUT).map(|n| base + n).collect();
        assert_eq!(taken.take(base), None, "all held");
        assert!(base + HANDED_OUT < base + uidblock::SIZE - 2);
    }
}
