//! Starting a session from a checkpoint at the cost of a mount
//! (docs/fork.md, "What it costs"): a checkpoint is a directory on the
//! source jail's tmpfs, which exists only in that jail's mount namespace.
//! [`clone_trees`] takes detached, read-only copies of mounts of it there
//! (`open_tree(OPEN_TREE_CLONE)`: a mount of the same files, nothing
//! copied); [`attach_trees`] mounts them under `DIR/base` of a new jail's
//! layer before its wrapper (jail-budget, waiting for the server) mounts
//! its `/workspace` and project overlays over them. Each copy keeps the
//! source's tmpfs alive while a mount of it lives, after the source ended
//! too.
//!
//! Both steps run in a child forked for them: entering a user namespace
//! needs a single-threaded process. The child enters the jail wrapper's
//! user and mount namespaces (owned by the server's uid, so it holds every
//! capability there), makes only system calls, sends the descriptors back
//! on a socket pair (SCM_RIGHTS) and exits. Only a server not running as
//! root does this (its jails' files are its own uid's in every jail; a
//! root server's jails each have a uid of their own, which the next jail's
//! namespace does not map).

use std::ffi::{CStr, CString};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{MoveMountFlags, OpenTreeFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::thread::LinkNameSpaceType;

/// Detached read-only mounts of `paths` (absolute, none a symlink) as the
/// jail whose wrapper's `/proc/PID` directory is `proc` sees them, in
/// order. Each holds an anonymous mount namespace, counted against that
/// jail's budget of them (lib/kernelBudgets.nix: 4, two of them its own)
/// until it is attached: take one at a time.
pub fn clone_trees(proc: &OwnedFd, paths: &[CString]) -> io::Result<Vec<OwnedFd>> {
    let trees = in_namespaces(proc, |send| {
        for path in paths {
            let flags = OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_SYMLINK_NOFOLLOW;
            let tree = rustix::mount::open_tree(CWD, path.as_c_str(), flags)?;
            read_only(tree.as_fd())?;
            send(tree.as_fd())?;
        }
        Ok(())
    })?;
    match trees.len() == paths.len() {
        true => Ok(trees),
        false => Err(io::Error::other(
            "the checkpoint's mounts did not all come back",
        )),
    }
}

/// Mounts `trees` at `DIR/base/FIRST`, `DIR/base/FIRST+1`... of the
/// layer `dir` of the jail whose wrapper's `/proc/PID` directory is
/// `proc` (its wrapper made the layer and waits).
pub fn attach_trees(proc: &OwnedFd, dir: &CStr, first: usize, trees: &[OwnedFd]) -> io::Result<()> {
    let names: Vec<CString> = (first..first + trees.len())
        .map(|i| CString::new(i.to_string()).map_err(io::Error::other))
        .collect::<io::Result<_>>()?;
    in_namespaces(proc, |_| {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let layer = rustix::fs::open(dir, flags, Mode::empty())?;
        match rustix::fs::mkdirat(&layer, c"base", Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        let base = rustix::fs::openat(&layer, c"base", flags, Mode::empty())?;
        for (tree, name) in trees.iter().zip(&names) {
            rustix::fs::mkdirat(&base, name.as_c_str(), Mode::from_raw_mode(0o700))?;
            rustix::mount::move_mount(
                tree.as_fd(),
                c"",
                &base,
                name.as_c_str(),
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )?;
        }
        Ok(())
    })
    .map(drop)
}

/// `mount_setattr`'s attributes (linux/mount.h).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// Makes the detached mount `tree` read-only, without set-user-id files or
/// devices.
fn read_only(tree: BorrowedFd<'_>) -> Result<(), Errno> {
    set_attributes(
        tree,
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        None,
        false,
    )
}

/// Sets the attributes `set` on the mount `tree` (and every mount below it
/// when `recursive`), idmapped through the user namespace `userns` when
/// given (`mount_setattr`, which rustix does not offer).
pub fn set_attributes(
    tree: BorrowedFd<'_>,
    set: u64,
    userns: Option<BorrowedFd<'_>>,
    recursive: bool,
) -> Result<(), Errno> {
    /// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
    #[repr(C)]
    struct MountAttr {
        set: u64,
        clear: u64,
        propagation: u64,
        userns_fd: u64,
    }
    use std::os::fd::AsRawFd;
    let attr = MountAttr {
        set,
        clear: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    let flags = nix::libc::AT_EMPTY_PATH
        | if recursive {
            nix::libc::AT_RECURSIVE
        } else {
            0
        };
    // SAFETY: mount_setattr reads `attr` (its size given) and the empty
    // path; `tree` is a descriptor we hold.
    let done = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(Errno::from_raw_os_error(nix::errno::Errno::last_raw())),
    }
}

/// What a message of the child says: a descriptor follows, or it is done
/// (then four bytes of errno, 0 for success).
const FD: u8 = 0;
const DONE: u8 = 1;

/// Runs `job` in a child forked for it, in the user and mount namespaces
/// of the process whose `/proc/PID` directory is `proc`; returns the
/// descriptors `job` sent (through the function it is given), or its
/// error.
fn in_namespaces<F>(proc: &OwnedFd, job: F) -> io::Result<Vec<OwnedFd>>
where
    F: FnOnce(&dyn Fn(BorrowedFd<'_>) -> Result<(), Errno>) -> Result<(), Errno>,
{
    let ns = OFlags::RDONLY | OFlags::CLOEXEC;
    let user = rustix::fs::openat(proc, "ns/user", ns, Mode::empty())?;
    let mount = rustix::fs::openat(proc, "ns/mnt", ns, Mode::empty())?;
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: the child makes system calls only (rustix's, with paths
    // already made), then `_exit`s: it runs no destructor, takes no lock
    // another thread may hold, and returns nowhere.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Child => {
            drop(ours);
            let done = (|| {
                rustix::thread::move_into_link_name_space(
                    user.as_fd(),
                    Some(LinkNameSpaceType::User),
                )?;
                rustix::thread::move_into_link_name_space(
                    mount.as_fd(),
                    Some(LinkNameSpaceType::Mount),
                )?;
                job(&|fd| send_fd(theirs.as_fd(), fd))
            })();
            let errno = match done {
                Ok(()) => 0i32,
                Err(e) => e.raw_os_error(),
            };
            let mut message = [DONE, 0, 0, 0, 0];
            message[1..].copy_from_slice(&errno.to_ne_bytes());
            let _ = rustix::net::send(&theirs, &message, SendFlags::empty());
            // SAFETY: ends this child without unwinding or running the
            // parent's exit handlers.
            unsafe { nix::libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(theirs);
            let received = receive(&ours);
            // Reaped here; another reaper of the server may have been first.
            let _ = nix::sys::wait::waitpid(child, None);
            received
        }
    }
}

/// Sends descriptor `fd` on `socket`, alone in a message.
fn send_fd(socket: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(Errno::NOBUFS);
    }
    rustix::net::sendmsg(
        socket,
        &[IoSlice::new(&[FD])],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// The descriptors the child sends, until it says it is done.
fn receive(socket: &OwnedFd) -> io::Result<Vec<OwnedFd>> {
    let mut fds = Vec::new();
    loop {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut message = [0u8; 5];
        let got = rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut message)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        for part in control.drain() {
            if let RecvAncillaryMessage::ScmRights(sent) = part {
                fds.extend(sent);
            }
        }
        match (got.bytes, message[0]) {
            (0, _) => return Err(io::Error::other("the namespace helper ended unannounced")),
            (5, DONE) => {
                let errno = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
                return match errno {
                    0 => Ok(fds),
                    _ => Err(io::Error::from_raw_os_error(errno)),
                };
            }
            _ => {}
        }
    }
}
