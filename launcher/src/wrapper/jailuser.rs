//! Who the jails run as. Bubblewrap started by host root maps the jail's
//! uid to host uid 0, and procfs gives global root's powers by uid, not by
//! capability: with every capability dropped, such a jail could still write
//! global sysctls (`kernel.core_pattern` names a program the kernel runs as
//! root), read `/proc/kpageflags`, or raise its own cgroup's limits. So a
//! launcher running as root starts every wrapper (runs, sessions, the
//! probes, `--check`) as [`JAIL_UID`]:[`JAIL_GID`] (nobody) with no
//! supplementary group, and a home of that user's own, where jail.nix writes
//! its fake passwd: a directory of mode 0700 the launcher makes under the
//! temporary directory (`TMPDIR`; /tmp when that user cannot reach it) and
//! removes at exit. The
//! launcher itself stays root: it makes each run's cgroup, writes its limits
//! and moves the wrapper in before the wrapper drops to this user
//! (cgroup.rs, mod.rs), so nothing the jail's uid can write holds a limit.
//!
//! A launcher that is not host root starts its wrappers as itself: its
//! jails map to its own uid, which is not host root either (uid 0 of a user
//! namespace mapped to another user, as in a rootless container, included:
//! [`is_host_root`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::libc;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{AccessFlags, ForkResult, Gid, Uid};

/// The uid and gid of a root launcher's jails: nobody, which owns no file
/// the jails could reach.
pub const JAIL_UID: u32 = 65534;
pub const JAIL_GID: u32 = 65534;

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

/// The user a root launcher's wrappers run as, and its home.
#[derive(Debug)]
pub struct JailUser {
    pub ids: Ids,
    home: PathBuf,
}

impl JailUser {
    /// The jails' user of a launcher running as root, its home made under
    /// the temporary directory (`TMPDIR`), or under /tmp when that user
    /// cannot reach `TMPDIR` (a private directory of mode 0700, as clients
    /// and login sessions often set). The error is one line: why jails
    /// cannot be run safely as root here.
    pub fn for_root() -> Result<Self, String> {
        let tmpdir = std::env::temp_dir();
        let shared = Path::new("/tmp");
        match Self::home_under(&tmpdir) {
            Ok(user) => Ok(user),
            Err(why) if tmpdir != shared => match Self::home_under(shared) {
                Ok(user) => {
                    tracing::info!(
                        home = %user.home.display(),
                        "the jails' home is under /tmp: {why}"
                    );
                    Ok(user)
                }
                Err(also) => Err(format!(
                    "{why}; {also}: TMPDIR or /tmp must be a directory every user may enter"
                )),
            },
            Err(why) => Err(format!(
                "{why}: TMPDIR must be a directory every user may enter, like /tmp"
            )),
        }
    }

    /// The jails' user with a home made under `dir`, or why it cannot have
    /// one there (nothing is left in `dir` then).
    fn home_under(dir: &Path) -> Result<Self, String> {
        let template = dir.join("nix-sandbox-mcp-jails.XXXXXX");
        let home = nix::unistd::mkdtemp(&template)
            .map_err(|e| format!("cannot make the jails' home {}: {e}", template.display()))?;
        let user = Self {
            ids: Ids {
                uid: Uid::from_raw(JAIL_UID),
                gid: Gid::from_raw(JAIL_GID),
            },
            home,
        };
        let home = user.home.display();
        if let Err(e) = nix::unistd::chown(&user.home, Some(user.ids.uid), Some(user.ids.gid)) {
            user.remove_home();
            return Err(format!(
                "cannot give the jails' home {home} to uid {JAIL_UID}: {e}"
            ));
        }
        let all = AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK;
        if let Err(e) = user.may_access(&user.home, all) {
            let reason = format!("uid {JAIL_UID} cannot use its home {home} ({e})");
            user.remove_home();
            return Err(reason);
        }
        Ok(user)
    }

    /// The wrappers' `HOME`.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Whether this user may access `path` as `mode` asks. access(2)
    /// answers for the caller, so a child process that became the user asks.
    pub fn may_access(&self, path: &Path, mode: AccessFlags) -> Result<(), Errno> {
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        // SAFETY: the child only makes system calls (no allocation, no
        // lock) before _exit, so a fork of a threaded process is safe.
        match unsafe { nix::unistd::fork() }? {
            ForkResult::Child => {
                let answer = self
                    .ids
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

    /// Removes the home and what the wrappers wrote there (on the way out,
    /// once no wrapper is left).
    pub fn remove_home(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.home) {
            tracing::warn!(home = %self.home.display(), error = %e, "the jails' home was not removed");
        }
    }
}
