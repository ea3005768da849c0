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
//! on a socket pair (SCM_RIGHTS) and exits.
//!
//! A root server's jails each run as a uid of their own, which the next
//! jail's user namespace does not map: [`clone_idmapped`] takes each copy
//! idmapped, the layer's owner shown as the new jail's uid and every other
//! id as the overflow id. Its child enters only the source's mount
//! namespace, staying root in the server's user namespace (which owns the
//! namespace of the idmap), and takes the copy with `open_tree_attr`
//! (Linux 6.15), which may give a mount that is already idmapped (a layer
//! the source was itself started over) a new idmap: a mount is never
//! idmapped twice over, each layer goes straight from its owner's ids to
//! the new jail's. [`idmapped_clones_work`] tries that on a scratch tmpfs
//! at start.

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
    let trees = in_child(Enter::UserAndMount(proc), |send| {
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

/// A detached, read-only, nosuid, nodev mount of `path` (absolute, not a
/// symlink) as the jail whose wrapper's `/proc/PID` directory is `proc`
/// sees it, idmapped through the user namespace `userns` (its maps send
/// the owner of the layer `path` is on to the new jail's ids): taken by
/// root in the server's user namespace, entering only the jail's mount
/// namespace. Its anonymous mount namespace is the jail's user namespace's,
/// counted against its budget until attached, as [`clone_trees`]'s.
pub fn clone_idmapped(proc: &OwnedFd, path: &CStr, userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut trees = in_child(Enter::Mount(proc), |send| {
        let tree = open_tree_idmapped(CWD, path, userns)?;
        send(tree.as_fd())
    })?;
    match (trees.pop(), trees.is_empty()) {
        (Some(tree), true) => Ok(tree),
        _ => Err(io::Error::other(
            "the checkpoint's idmapped mount did not come back",
        )),
    }
}

/// `open_tree_attr(OPEN_TREE_CLONE)` of `path` under `dir`, read-only,
/// nosuid, nodev and idmapped through `userns` (a new idmap replacing one
/// the mount had: Linux 6.15).
fn open_tree_idmapped(
    dir: BorrowedFd<'_>,
    path: &CStr,
    userns: BorrowedFd<'_>,
) -> Result<OwnedFd, Errno> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let attr = MountAttr {
        set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        clear: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let flags = nix::libc::OPEN_TREE_CLONE
        | nix::libc::OPEN_TREE_CLOEXEC as nix::libc::c_uint
        | nix::libc::AT_SYMLINK_NOFOLLOW as nix::libc::c_uint;
    // SAFETY: open_tree_attr reads the path and `attr` (its size given).
    let fd = unsafe {
        nix::libc::syscall(
            SYS_OPEN_TREE_ATTR,
            dir.as_raw_fd(),
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    match fd {
        // SAFETY: a descriptor the call just opened, ours alone.
        fd if fd >= 0 => Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        _ => Err(Errno::from_raw_os_error(nix::errno::Errno::last_raw())),
    }
}

/// `open_tree_attr`'s number (the same on every architecture since 424;
/// the libc crate names it only for m68k).
const SYS_OPEN_TREE_ATTR: nix::libc::c_long = 467;

/// Whether this host gives a root server's forks their layers as mounts:
/// in a mount namespace of a child's own, a tmpfs on `scratch` (an empty
/// directory of the server's), an idmapped copy of it through `first`
/// attached on `scratch/a`, then a copy of that one idmapped anew through
/// `second` ([`open_tree_idmapped`], as a fork of a fork takes it), whose
/// root must show as `second`'s id `want`. The child's namespace, and the
/// tmpfs, go with it.
pub fn idmapped_clones_work(
    scratch: &CStr,
    first: BorrowedFd<'_>,
    second: BorrowedFd<'_>,
    want: u32,
) -> io::Result<()> {
    in_child(Enter::NewMount, |_| {
        use rustix::mount::MountPropagationFlags;
        rustix::mount::mount_change(
            c"/",
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        )?;
        let flags = rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV;
        rustix::mount::mount(c"tmpfs", scratch, c"tmpfs", flags, c"size=64k,mode=0700")?;
        let dir = rustix::fs::open(scratch, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
        rustix::fs::mkdirat(&dir, c"a", Mode::from_raw_mode(0o700))?;
        let clone = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
        let tree = rustix::mount::open_tree(&dir, c"", clone | OpenTreeFlags::AT_EMPTY_PATH)?;
        set_attributes(tree.as_fd(), MOUNT_ATTR_IDMAP, Some(first), false)?;
        let at = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH;
        rustix::mount::move_mount(tree.as_fd(), c"", &dir, c"a", at)?;
        let again = open_tree_idmapped(dir.as_fd(), c"a", second)?;
        match rustix::fs::fstat(&again)?.st_uid == want {
            true => Ok(()),
            false => Err(Errno::INVAL),
        }
    })
    .map(drop)
}

/// Mounts `trees` at `DIR/base/FIRST`, `DIR/base/FIRST+1`... of the
/// layer `dir` of the jail whose wrapper's `/proc/PID` directory is
/// `proc` (its wrapper made the layer and waits).
pub fn attach_trees(proc: &OwnedFd, dir: &CStr, first: usize, trees: &[OwnedFd]) -> io::Result<()> {
    let names: Vec<CString> = (first..first + trees.len())
        .map(|i| CString::new(i.to_string()).map_err(io::Error::other))
        .collect::<io::Result<_>>()?;
    in_child(Enter::UserAndMount(proc), |_| {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let layer = rustix::fs::open(dir, flags, Mode::empty())?;
        // What is made here is the layer's owner's (a root server's child
        // is root, whose ids the jail's namespace does not map).
        let owner = rustix::fs::fstat(&layer)?;
        // SAFETY: this child's own file-system ids, in its namespace.
        unsafe {
            nix::libc::setfsgid(owner.st_gid);
            nix::libc::setfsuid(owner.st_uid);
        }
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
    mount_setattr(tree.as_raw_fd(), flags, &attr)
}

/// Whether this kernel has `mount_setattr` (Linux 5.12), which makes a
/// checkpoint's mount read-only: asked of no descriptor, it answers
/// `EBADF` where it exists and `ENOSYS` where it does not.
pub fn has_mount_setattr() -> bool {
    let attr = MountAttr {
        set: MOUNT_ATTR_RDONLY,
        clear: 0,
        propagation: 0,
        userns_fd: 0,
    };
    mount_setattr(-1, nix::libc::AT_EMPTY_PATH, &attr) != Err(Errno::NOSYS)
}

/// `mount_setattr` on the mount `fd` is (the empty path), with `flags`:
/// the one place that makes the call, which rustix does not offer.
fn mount_setattr(
    fd: std::os::fd::RawFd,
    flags: nix::libc::c_int,
    attr: &MountAttr,
) -> Result<(), Errno> {
    // SAFETY: mount_setattr reads `attr` (its size given) and the empty
    // path; a bad `fd` is an error, not a change.
    let done = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(Errno::from_raw_os_error(nix::errno::Errno::last_raw())),
    }
}

/// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    set: u64,
    clear: u64,
    propagation: u64,
    userns_fd: u64,
}

/// What a message of the child says: a descriptor follows, or it is done
/// (then four bytes of errno, 0 for success).
const FD: u8 = 0;
const DONE: u8 = 1;

/// The namespaces the child of [`in_child`] works in.
enum Enter<'a> {
    /// The user and mount namespaces of the process whose `/proc/PID`
    /// directory this is.
    UserAndMount(&'a OwnedFd),
    /// Its mount namespace only (root, staying in the server's user
    /// namespace).
    Mount(&'a OwnedFd),
    /// A new mount namespace of the child's own.
    NewMount,
}

/// Runs `job` in a child forked for it, in the namespaces `enter` names;
/// returns the descriptors `job` sent (through the function it is given),
/// or its error.
fn in_child<F>(enter: Enter<'_>, job: F) -> io::Result<Vec<OwnedFd>>
where
    F: FnOnce(&dyn Fn(BorrowedFd<'_>) -> Result<(), Errno>) -> Result<(), Errno>,
{
    let ns = OFlags::RDONLY | OFlags::CLOEXEC;
    let open = |proc: &OwnedFd, name: &str| rustix::fs::openat(proc, name, ns, Mode::empty());
    let (user, mount) = match enter {
        Enter::UserAndMount(proc) => (Some(open(proc, "ns/user")?), Some(open(proc, "ns/mnt")?)),
        Enter::Mount(proc) => (None, Some(open(proc, "ns/mnt")?)),
        Enter::NewMount => (None, None),
    };
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
                if let Some(user) = &user {
                    let kind = Some(LinkNameSpaceType::User);
                    rustix::thread::move_into_link_name_space(user.as_fd(), kind)?;
                }
                match &mount {
                    Some(mount) => rustix::thread::move_into_link_name_space(
                        mount.as_fd(),
                        Some(LinkNameSpaceType::Mount),
                    )?,
                    // SAFETY: this child has one thread and shares no
                    // file descriptor table.
                    None => unsafe {
                        rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS)?
                    },
                }
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
