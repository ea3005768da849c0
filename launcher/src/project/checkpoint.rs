//! A session's checkpoints (docs/sessions.md, "Fork, checkpoint, roll
//! back"): at the end of each call the server copies the session's
//! `/workspace` (the layer's `ws`) and its project layer (`upper`) into
//! `ckpt/N` on the same tmpfs, which the jail never sees; a file unchanged
//! since the previous checkpoint (same inode, size, modification and change
//! times) is a hard link to that checkpoint's copy, so a checkpoint costs
//! what changed, not the workspace. A session started from a checkpoint
//! gets a copy of it in its own fresh layer before its jail starts
//! ([`restore`]): that copy costs the checkpoint's size.
//!
//! Everything is reached by descriptor from the layer's root
//! ([`super::Layer::open_root`]), nothing followed: symlinks are copied as
//! symlinks, whiteouts (character devices 0/0) and the overlay's `user.*`
//! attributes as they are; sockets, fifos and devices are left out. A
//! server running as root does it all with the file-system uid of the
//! layer's owner (the jail's uid), so what it makes is the jail's, and what
//! the jail could not read it cannot read either.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};

/// What identifies a file's contents between two checkpoints: a file whose
/// inode, size and times are all the same was not written in between (its
/// change time moves with every write, and no process can set it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// One checkpoint kept in a session's layer: its number (the call it
/// ended), the stamps of its regular files, by path, the layer's
/// fingerprint it was kept at, and whether a session was started over it
/// (share.rs), which its layer's tmpfs must then keep.
#[derive(Debug)]
pub struct Frozen {
    pub number: u64,
    stamps: HashMap<Vec<u8>, Stamp>,
    pub print: Option<u64>,
    lent: AtomicBool,
}

impl Frozen {
    /// Marks it as a lower layer of another session's.
    pub fn lend(&self) {
        self.lent.store(true, Ordering::SeqCst);
    }

    /// Whether a session's layer is mounted over it: its directory stays.
    pub fn is_lent(&self) -> bool {
        self.lent.load(Ordering::SeqCst)
    }
}

/// Where part `part` of a checkpoint is read in a layer at `root`: a
/// layer mounted over checkpoints (share.rs) keeps its `/workspace`'s own
/// changes in `wsup` (whiteouts and opaque marks as the overlay wrote
/// them), which is what its checkpoints hold above those it was started
/// from; others in `ws` itself.
fn source_of(root: &OwnedFd, part: &'static str) -> &'static str {
    let mounted = || rustix::fs::statat(root, "wsup", AtFlags::SYMLINK_NOFOLLOW).is_ok();
    match part {
        "ws" if mounted() => "wsup",
        part => part,
    }
}

/// The directories a checkpoint holds: `ws`, then `upper` when the layer
/// has a project.
const PARTS: [&str; 2] = ["ws", "upper"];

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Freezes the layer at `root` as checkpoint `number`, linking what did not
/// change since `previous`. A checkpoint that cannot be made whole (no
/// space) is removed and the error returned.
pub fn freeze(root: &OwnedFd, number: u64, previous: Option<&Frozen>) -> io::Result<Frozen> {
    let _fs = FsUser::of(root)?;
    let ckpt = rustix::fs::openat(root, "ckpt", DIR, Mode::empty())?;
    let name = number.to_string();
    rustix::fs::mkdirat(&ckpt, name.as_str(), Mode::from_raw_mode(0o700))?;
    let made = (|| {
        let target = rustix::fs::openat(&ckpt, name.as_str(), DIR, Mode::empty())?;
        let before = match previous {
            Some(p) => Some((
                rustix::fs::openat(&ckpt, p.number.to_string(), DIR, Mode::empty())?,
                &p.stamps,
            )),
            None => None,
        };
        let mut stamps = HashMap::new();
        for part in PARTS {
            let source = source_of(root, part);
            let Ok(from) = rustix::fs::openat(root, source, DIR, Mode::empty()) else {
                continue;
            };
            rustix::fs::mkdirat(&target, part, Mode::from_raw_mode(0o700))?;
            let to = rustix::fs::openat(&target, part, DIR, Mode::empty())?;
            let linked = before.as_ref().and_then(|(dir, stamps)| {
                let dir = rustix::fs::openat(dir, part, DIR, Mode::empty()).ok()?;
                Some((dir, *stamps))
            });
            let mut walk = Walk {
                stamps: Some(&mut stamps),
                previous: linked.as_ref().map(|(d, s)| (d, *s)),
            };
            walk.copy(&from, &to, part.as_bytes().to_vec())?;
        }
        Ok(stamps)
    })();
    match made {
        Ok(stamps) => Ok(Frozen {
            number,
            stamps,
            print: None,
            lent: AtomicBool::new(false),
        }),
        Err(e) => {
            remove(root, number);
            Err(e)
        }
    }
}

/// A fingerprint of the layer's `ws` and `upper` (project/mod.rs's, over
/// at most 100,000 entries each): equal between two calls, nothing in them
/// changed, and no checkpoint is needed.
pub fn fingerprint(root: &OwnedFd) -> io::Result<u64> {
    let _fs = FsUser::of(root)?;
    let mut print = 0u64;
    for part in PARTS {
        let source = source_of(root, part);
        if let Ok(dir) = rustix::fs::openat(root, source, DIR, Mode::empty()) {
            print = print.rotate_left(1) ^ super::fingerprint(&dir, 100_000);
        }
    }
    Ok(print)
}

/// Removes checkpoint `number` from the layer at `root` (nothing followed).
pub fn remove(root: &OwnedFd, number: u64) {
    let Ok(_fs) = FsUser::of(root) else { return };
    let Ok(ckpt) = rustix::fs::openat(root, "ckpt", DIR, Mode::empty()) else {
        return;
    };
    remove_in(&ckpt, number.to_string().as_bytes());
}

/// Copies checkpoint `number` of the layer at `from` (its live `ws` and
/// `upper` when `None`) into the fresh layer at `to` (its `ws`, and its
/// `upper` when both have a project), before the jail of `to` starts.
pub fn restore(from: &OwnedFd, number: Option<u64>, to: &OwnedFd) -> io::Result<()> {
    let source = {
        let _fs = FsUser::of(from)?;
        match number {
            Some(number) => {
                let ckpt = rustix::fs::openat(from, "ckpt", DIR, Mode::empty())?;
                rustix::fs::openat(&ckpt, number.to_string(), DIR, Mode::empty())?
            }
            None => rustix::io::dup(from)?,
        }
    };
    let parts: Vec<(OwnedFd, OwnedFd)> = PARTS
        .iter()
        .filter_map(|part| {
            let target = rustix::fs::openat(to, *part, DIR, Mode::empty()).ok()?;
            let _fs = FsUser::of(from).ok()?;
            let source = rustix::fs::openat(&source, *part, DIR, Mode::empty()).ok()?;
            Some((source, target))
        })
        .collect();
    let writer = owner(to)?;
    let reader = owner(from)?;
    for (source, target) in parts {
        let mut walk = Walk {
            stamps: None,
            previous: None,
        };
        walk.copy_as(&source, &target, Vec::new(), reader, writer)?;
    }
    Ok(())
}

/// The uid and gid owning the layer at `root` (the jail's).
pub fn owner(root: &OwnedFd) -> io::Result<(u32, u32)> {
    let stat = rustix::fs::fstat(root)?;
    Ok((stat.st_uid, stat.st_gid))
}

/// One tree copy: the stamps of the files copied, when they are kept, and
/// the previous checkpoint's directory at the same place with its stamps.
struct Walk<'a> {
    stamps: Option<&'a mut HashMap<Vec<u8>, Stamp>>,
    previous: Option<(&'a OwnedFd, &'a HashMap<Vec<u8>, Stamp>)>,
}

impl Walk<'_> {
    /// Copies the tree under `from` into the empty directory `to`.
    fn copy(&mut self, from: &OwnedFd, to: &OwnedFd, path: Vec<u8>) -> io::Result<()> {
        let ids = FsUser::current();
        self.copy_as(from, to, path, ids, ids)
    }

    /// [`Walk::copy`], reading with the file-system ids `reader` and
    /// writing with `writer` (as root; otherwise they are the server's).
    fn copy_as(
        &mut self,
        from: &OwnedFd,
        to: &OwnedFd,
        path: Vec<u8>,
        reader: (u32, u32),
        writer: (u32, u32),
    ) -> io::Result<()> {
        let mut stack = vec![(
            rustix::io::dup(from)?,
            rustix::io::dup(to)?,
            path,
            self.previous.map(|(d, _)| rustix::io::dup(d)).transpose()?,
        )];
        let mut modes = Vec::new();
        while let Some((src, dst, path, before)) = stack.pop() {
            let entries: Vec<_> = {
                let _fs = FsUser::set(reader);
                rustix::fs::Dir::read_from(&src)?
                    .flatten()
                    .map(|e| e.file_name().to_owned())
                    .filter(|n| n.to_bytes() != b"." && n.to_bytes() != b"..")
                    .collect()
            };
            for name in entries {
                let mut child = path.clone();
                child.push(b'/');
                child.extend_from_slice(name.to_bytes());
                let stat = {
                    let _fs = FsUser::set(reader);
                    match rustix::fs::statat(&src, &name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => stat,
                        // Gone meanwhile: the jail's processes still run.
                        Err(rustix::io::Errno::NOENT) => continue,
                        Err(e) => return Err(e.into()),
                    }
                };
                let mode = Mode::from_raw_mode(stat.st_mode) & Mode::from_raw_mode(0o7777);
                match FileType::from_raw_mode(stat.st_mode) {
                    FileType::Directory => {
                        let sub_src = {
                            let _fs = FsUser::set(reader);
                            rustix::fs::openat(&src, &name, DIR, Mode::empty())?
                        };
                        let _fs = FsUser::set(writer);
                        rustix::fs::mkdirat(&dst, &name, Mode::from_raw_mode(0o700))?;
                        let sub_dst = rustix::fs::openat(&dst, &name, DIR, Mode::empty())?;
                        copy_xattrs(&sub_src, &sub_dst, reader, writer);
                        modes.push((rustix::io::dup(&sub_dst)?, mode, times(&stat)));
                        let sub_before = before
                            .as_ref()
                            .and_then(|b| rustix::fs::openat(b, &name, DIR, Mode::empty()).ok());
                        stack.push((sub_src, sub_dst, child, sub_before));
                    }
                    FileType::RegularFile => {
                        let stamp = Stamp {
                            ino: stat.st_ino,
                            size: stat.st_size,
                            mtime: (stat.st_mtime, stat.st_mtime_nsec as i64),
                            ctime: (stat.st_ctime, stat.st_ctime_nsec as i64),
                        };
                        let unchanged = self
                            .previous
                            .is_some_and(|(_, stamps)| stamps.get(&child) == Some(&stamp));
                        let _w = FsUser::set(writer);
                        let linked = unchanged
                            && before.as_ref().is_some_and(|b| {
                                rustix::fs::linkat(b, &name, &dst, &name, AtFlags::empty()).is_ok()
                            });
                        drop(_w);
                        if !linked {
                            copy_file(&src, &dst, &name, mode, &stat, reader, writer)?;
                        }
                        if let Some(stamps) = self.stamps.as_deref_mut() {
                            stamps.insert(child, stamp);
                        }
                    }
                    other => copy_special(&src, &dst, &name, other, &stat, (reader, writer))?,
                }
            }
        }
        // Modes and times last: a read-only directory is filled first, and
        // making its entries moved its times.
        let _fs = FsUser::set(writer);
        for (dir, mode, times) in modes.into_iter().rev() {
            rustix::fs::fchmod(&dir, mode)?;
            let _ = rustix::fs::futimens(&dir, &times);
        }
        Ok(())
    }
}

/// Copies entry `name` of `src`, of type `kind`, neither a directory nor
/// a regular file, into `dst`: a symlink as a symlink, the overlay's
/// whiteout (a character device 0/0, a deleted project file) as one;
/// sockets, fifos and devices not at all.
fn copy_special(
    src: &OwnedFd,
    dst: &OwnedFd,
    name: &std::ffi::CStr,
    kind: FileType,
    stat: &rustix::fs::Stat,
    (reader, writer): ((u32, u32), (u32, u32)),
) -> io::Result<()> {
    match kind {
        FileType::Symlink => {
            let target = {
                let _fs = FsUser::set(reader);
                rustix::fs::readlinkat(src, name, Vec::new())?
            };
            let _fs = FsUser::set(writer);
            rustix::fs::symlinkat(&target, dst, name)?;
        }
        FileType::CharacterDevice if stat.st_rdev == 0 => {
            let _fs = FsUser::set(writer);
            let mode = Mode::from_raw_mode(stat.st_mode) & Mode::from_raw_mode(0o7777);
            rustix::fs::mknodat(dst, name, FileType::CharacterDevice, mode, 0)?;
        }
        _ => {}
    }
    Ok(())
}

/// Copies regular file `name` of `src` into `dst` with its mode and times.
fn copy_file(
    src: &OwnedFd,
    dst: &OwnedFd,
    name: &std::ffi::CStr,
    mode: Mode,
    stat: &rustix::fs::Stat,
    reader: (u32, u32),
    writer: (u32, u32),
) -> io::Result<()> {
    let input = {
        let _fs = FsUser::set(reader);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        match rustix::fs::openat(src, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // Gone meanwhile, or made unreadable by its owner: left out.
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::ACCESS) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    };
    if rustix::fs::fstat(&input)?.st_mode & 0o170000 != 0o100000 {
        return Ok(());
    }
    let _fs = FsUser::set(writer);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let output = rustix::fs::openat(dst, name, flags, Mode::from_raw_mode(0o600))?;
    let mut reading = std::fs::File::from(input);
    let mut writing = std::fs::File::from(output);
    std::io::copy(&mut reading, &mut writing)?;
    copy_xattrs(&reading, &writing, reader, writer);
    rustix::fs::fchmod(&writing, mode)?;
    rustix::fs::futimens(&writing, &times(stat))?;
    Ok(())
}

/// The access and modification times of `stat`.
fn times(stat: &rustix::fs::Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: stat.st_atime,
            tv_nsec: stat.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: stat.st_mtime,
            tv_nsec: stat.st_mtime_nsec as _,
        },
    }
}

/// Copies the `user.*` attributes (the overlay's opaque marks among them)
/// of `from` to `to`; what fails is left out.
fn copy_xattrs(from: impl AsFd, to: impl AsFd, reader: (u32, u32), writer: (u32, u32)) {
    let mut names = vec![0u8; 4096];
    let listed = {
        let _fs = FsUser::set(reader);
        rustix::fs::flistxattr(&from, &mut names)
    };
    let Ok(n) = listed else { return };
    for name in names[..n]
        .split(|b| *b == 0)
        .filter(|n| n.starts_with(b"user."))
    {
        let Ok(name) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut value = vec![0u8; 4096];
        let read = {
            let _fs = FsUser::set(reader);
            rustix::fs::fgetxattr(&from, &name, &mut value)
        };
        if let Ok(len) = read {
            let _fs = FsUser::set(writer);
            let _ =
                rustix::fs::fsetxattr(&to, &name, &value[..len], rustix::fs::XattrFlags::empty());
        }
    }
}

/// Removes entry `name` of `dir` and everything under it, nothing followed.
fn remove_in(dir: &OwnedFd, name: &[u8]) {
    if rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_ok() {
        return;
    }
    if let Ok(sub) = rustix::fs::openat(dir, name, DIR, Mode::empty()) {
        let _ = rustix::fs::fchmod(&sub, Mode::from_raw_mode(0o700));
        let names: Vec<_> = rustix::fs::Dir::read_from(&sub)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_bytes().to_vec())
                    .filter(|n| n != b"." && n != b"..")
                    .collect()
            })
            .unwrap_or_default();
        for child in names {
            remove_in(&sub, &child);
        }
    }
    let _ = rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
}

/// The calling thread's file-system uid and gid set to a layer's owner
/// while it lives (a server running as root only: others' are already the
/// jail's), and set back when dropped.
struct FsUser {
    previous: Option<(u32, u32)>,
}

impl FsUser {
    /// The ids of the layer's owner, at `root`.
    fn of(root: &OwnedFd) -> io::Result<Self> {
        Ok(Self::set(owner(root)?))
    }

    /// The thread's ids now.
    fn current() -> (u32, u32) {
        // SAFETY: setfsuid(-1) only reads the thread's fsuid.
        unsafe {
            (
                nix::libc::setfsuid(u32::MAX) as u32,
                nix::libc::setfsgid(u32::MAX) as u32,
            )
        }
    }

    fn set((uid, gid): (u32, u32)) -> Self {
        if nix::unistd::geteuid().as_raw() != 0 {
            return Self { previous: None };
        }
        // SAFETY: per-thread credentials; set back in Drop on this thread.
        let previous = unsafe {
            let gid_before = nix::libc::setfsgid(gid) as u32;
            let uid_before = nix::libc::setfsuid(uid) as u32;
            (uid_before, gid_before)
        };
        Self {
            previous: Some(previous),
        }
    }
}

impl Drop for FsUser {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.previous {
            // SAFETY: as in `set`.
            unsafe {
                nix::libc::setfsuid(uid);
                nix::libc::setfsgid(gid);
            }
        }
    }
}
