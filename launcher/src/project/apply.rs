//! A kept layer's changes written into the project (docs/agents.md, the
//! person's `--apply`): what the diff shows becomes the project's. The
//! upper directory was written by a jail: it is read by descriptor, never
//! following a symlink, and the project is written the same way, one
//! directory at a time (`O_NOFOLLOW`, `*at` calls), so that nothing the
//! jail planted, and no symlink of the project's, sends a write outside
//! the project. A file is written beside its name and renamed over it; a
//! whiteout removes the project's path; an opaque directory replaces the
//! project's whole. Set-id bits are dropped; devices, fifos and sockets
//! are left out and named.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::diff;

const NOFOLLOW: OFlags = OFlags::NOFOLLOW.union(OFlags::CLOEXEC);
const DIR: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(NOFOLLOW);

/// What an apply did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Paths written, made or removed.
    pub paths: usize,
    /// Special files left out, as shown paths.
    pub skipped: Vec<String>,
}

/// Writes the changes of `upper` (an overlay's upper directory) into
/// `project`, both open directories.
pub fn apply(upper: &OwnedFd, project: &OwnedFd) -> io::Result<Applied> {
    let mut applied = Applied::default();
    dir(upper, project, &mut Vec::new(), &mut applied)?;
    Ok(applied)
}

/// The names in directory `fd`, `.` and `..` left out, sorted.
pub(super) fn names(fd: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(fd)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn dir(upper: &OwnedFd, target: &OwnedFd, path: &mut Vec<u8>, out: &mut Applied) -> io::Result<()> {
    for name in names(upper)? {
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        entry(upper, target, OsStr::from_bytes(&name), path, out)?;
        path.truncate(len);
    }
    Ok(())
}

fn entry(
    upper: &OwnedFd,
    target: &OwnedFd,
    name: &OsStr,
    path: &mut Vec<u8>,
    out: &mut Applied,
) -> io::Result<()> {
    let stat = rustix::fs::statat(upper, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let mode = Mode::from_raw_mode(stat.st_mode & 0o777);
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::CharacterDevice if stat.st_rdev == 0 => remove(target, name)?,
        FileType::Directory => {
            let from = rustix::fs::openat(upper, name, DIR, Mode::empty())?;
            let existing = rustix::fs::statat(target, name, AtFlags::SYMLINK_NOFOLLOW)
                .ok()
                .map(|s| FileType::from_raw_mode(s.st_mode));
            if existing != Some(FileType::Directory) || diff::opaque(&from) {
                remove(target, name)?;
                rustix::fs::mkdirat(target, name, mode)?;
            }
            let to = rustix::fs::openat(target, name, DIR, Mode::empty())?;
            rustix::fs::fchmod(&to, mode)?;
            dir(&from, &to, path, out)?;
        }
        FileType::RegularFile => {
            let flags = OFlags::RDONLY | OFlags::NONBLOCK | NOFOLLOW;
            let from = rustix::fs::openat(upper, name, flags, Mode::empty())?;
            if stat.st_size == 0 && diff::marked_whiteout(&from) {
                remove(target, name)?;
            } else {
                replace(target, name, |tmp| {
                    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | NOFOLLOW;
                    let to = rustix::fs::openat(target, tmp, flags, mode)?;
                    rustix::fs::fchmod(&to, mode)?;
                    let mut to = std::fs::File::from(to);
                    io::copy(&mut std::fs::File::from(from), &mut to)?;
                    to.flush()
                })?;
            }
        }
        FileType::Symlink => {
            let link = rustix::fs::readlinkat(upper, name, Vec::new())?;
            replace(target, name, |tmp| {
                Ok(rustix::fs::symlinkat(&link, target, tmp)?)
            })?;
        }
        _ => {
            out.skipped.push(diff::quoted(b"", path));
            return Ok(());
        }
    }
    out.paths += 1;
    Ok(())
}

/// Makes `name` in `target` anew: `make` writes it under a temporary name
/// there, which then replaces `name` (a directory there is removed first).
fn replace(
    target: &OwnedFd,
    name: &OsStr,
    make: impl FnOnce(&OsStr) -> io::Result<()>,
) -> io::Result<()> {
    let mut tmp = b".nsm-apply.".to_vec();
    tmp.extend_from_slice(name.as_bytes());
    tmp.truncate(250);
    let tmp = OsStr::from_bytes(&tmp);
    remove(target, tmp)?;
    make(tmp)?;
    let dir = rustix::fs::statat(target, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
    if dir {
        remove(target, name)?;
    }
    Ok(rustix::fs::renameat(target, tmp, target, name)?)
}

/// Removes `name` from `dir`, a directory with everything under it, never
/// following a symlink; absent is fine.
pub(super) fn remove(dir: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return Ok(());
    };
    if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        // A directory the overlay left without permissions (its work dir)
        // is opened once made the owner's (a directory: nothing followed).
        if stat.st_mode & 0o700 != 0o700 {
            rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
        }
        let sub = rustix::fs::openat(dir, name, DIR, Mode::empty())?;
        for child in names(&sub)? {
            remove(&sub, OsStr::from_bytes(&child))?;
        }
        Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
    } else {
        Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
    }
}

/// Empties directory `fd`.
pub fn clear(fd: &OwnedFd) -> io::Result<()> {
    for name in names(fd)? {
        remove(fd, OsStr::from_bytes(&name))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod apply_tests;
