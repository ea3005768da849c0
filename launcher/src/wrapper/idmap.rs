//! A root server's writable project (docs/workbench.md): its jails run as
//! uids of their own (jailuser.rs), which the overlay cannot give copies of
//! the project owner's files (their owner is not mapped in the jail's user
//! namespace: `EOVERFLOW`). So for each such jail the server makes a
//! detached mount of the project ([`project_mount`]): its whole tree
//! (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`), read-only, nosuid and
//! nodev, idmapped (`mount_setattr(MOUNT_ATTR_IDMAP)`) through a user
//! namespace whose maps send the project's owner (the owner and group of
//! `PROJECT_DIR` itself, [`owner`]) to the jail's uid and gid and nothing
//! else. The jail's wrapper inherits the mount's descriptor and jail-budget
//! makes it the overlay's lower layer; it unmounts it and closes the
//! descriptor before bubblewrap starts. Files of every other owner show as
//! the overflow uid there, and stay unmodifiable, as for a server running
//! as the owner; the host's tree is never writable through the mount.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::errno::Errno;
use nix::libc;

use rustix::mount::OpenTreeFlags;

use super::jailuser::Ids;
use crate::project::share;

/// The wrapper's variable naming the inherited descriptor of the mount.
pub const LOWER_FD_VAR: &str = "NIX_SANDBOX_PROJECT_LOWER_FD";

/// The project's owner: the uid and gid of `project` itself.
pub fn owner(project: &Path) -> io::Result<(u32, u32)> {
    let meta = std::fs::metadata(project)?;
    Ok((meta.uid(), meta.gid()))
}

/// A detached, read-only, nosuid, nodev mount of `project`'s whole tree on
/// which files of `owner` (uid, gid) show as `jail`'s and every other id as
/// the overflow id. Needs host root (`CAP_SYS_ADMIN` over the project's
/// mount) and a file system that takes idmapped mounts (Linux 5.12 on;
/// ext4, xfs, btrfs, tmpfs from 6.3...). Close-on-exec.
pub fn project_mount(project: &Path, owner: (u32, u32), jail: Ids) -> io::Result<OwnedFd> {
    let userns = map_namespace(owner, (jail.uid.as_raw(), jail.gid.as_raw()))?;
    let path = CString::new(project.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a NUL byte in the project's path"))?;
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_RECURSIVE;
    let tree = rustix::mount::open_tree(rustix::fs::CWD, path.as_c_str(), flags)
        .map_err(|e| io::Error::other(format!("open_tree: {e}")))?;
    share::set_attributes(
        tree.as_fd(),
        share::MOUNT_ATTR_IDMAP
            | share::MOUNT_ATTR_RDONLY
            | share::MOUNT_ATTR_NOSUID
            | share::MOUNT_ATTR_NODEV,
        Some(userns.as_fd()),
        true,
    )
    .map_err(|e| {
        io::Error::other(format!(
            "mount_setattr(MOUNT_ATTR_IDMAP): {e} (idmapped mounts need Linux 5.12 and a file \
             system that takes them)"
        ))
    })?;
    Ok(tree)
}

/// A user namespace (its descriptor) that maps `from` (uid, gid) to `to`
/// and nothing else (also a fork's idmap of each checkpoint layer it is
/// started over, project/share.rs): a child made in it by `clone(CLONE_NEWUSER)` waits on
/// a pipe while this process, root outside, writes its maps and opens its
/// namespace, then ends when the pipe closes (or this process dies). The
/// child holds no other descriptor while it waits, so any number of
/// threads may call this at once.
pub fn map_namespace(from: (u32, u32), to: (u32, u32)) -> io::Result<OwnedFd> {
    let (wait, release) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let wait_fd = wait.as_raw_fd();
    // SAFETY: a fork-like clone (no stack given: the child runs on a copy
    // of this one); the child makes only system calls on integers, then
    // exits without returning.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        // SAFETY: system calls only, in the child.
        unsafe {
            // It keeps its end of `wait` alone. Cloned with every
            // descriptor of this process, it would otherwise hold open
            // what other threads are waiting on to close: another such
            // child's `release` (two threads making namespaces at once,
            // whose children then wait for each other forever), or a
            // wrapper's start-status pipe. Without close_range (Linux
            // 5.9; idmapped mounts need 5.12) it ends at once, and the
            // maps cannot be written.
            let low = match wait_fd {
                0 => 0,
                fd => libc::syscall(libc::SYS_close_range, 0u32, (fd - 1) as u32, 0u32),
            };
            let high = libc::syscall(libc::SYS_close_range, (wait_fd + 1) as u32, u32::MAX, 0u32);
            if low != 0 || high != 0 {
                libc::syscall(libc::SYS_exit_group, 1);
            }
            let mut byte = 0u8;
            libc::syscall(libc::SYS_read, wait_fd, &mut byte as *mut u8, 1usize);
            libc::syscall(libc::SYS_exit_group, 0);
        }
        unreachable!("exit_group returned");
    }
    let pid =
        Errno::result(pid).map_err(|e| io::Error::other(format!("clone(CLONE_NEWUSER): {e}")))?;
    drop(wait);
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let made = (|| {
        let proc = format!("/proc/{pid}");
        std::fs::write(format!("{proc}/uid_map"), format!("{} {} 1", from.0, to.0))?;
        std::fs::write(format!("{proc}/gid_map"), format!("{} {} 1", from.1, to.1))?;
        let ns = std::fs::File::open(format!("{proc}/ns/user"))?;
        Ok::<_, io::Error>(OwnedFd::from(ns))
    })();
    drop(release);
    // The child ends on the pipe's end; reaped here, whatever happened.
    let _ = nix::sys::wait::waitpid(pid, None);
    made.map_err(|e| io::Error::other(format!("cannot write the idmap's user namespace: {e}")))
}

#[cfg(test)]
#[path = "idmap_tests.rs"]
mod tests;
