//! The workbench on the user's project (docs/workbench.md): with
//! `NIX_SANDBOX_PROJECT_WRITABLE=1`, each session jail sees the project
//! through a copy-on-write layer of its own, whose changes the server
//! reads back as a diff (diff.rs). The host's tree is never written: it is
//! the overlay's read-only lower layer, mounted by the jail's wrapper
//! (agent/src/bin/jail-budget.rs) in the jail's own namespaces.
//!
//! - [`Layers`]: the server's directory of layers, made at start with an
//!   unpredictable name under `/var/tmp` (on disk, not in memory: a build's
//!   output can be large), mode 0711, the server's; removed when the
//!   server ends.
//! - [`Layer`]: one session jail's, `DIR/upper`, `DIR/work` and
//!   `DIR/merged` inside a directory of the server's that the jail's uid
//!   cannot write (so it cannot put a symlink in their place), those three
//!   given to the jail's uid when the server is root. It lives as long as
//!   the jail: a reset starts a fresh one.

pub mod diff;

use std::ffi::OsString;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

use crate::wrapper::jailuser::Ids;

/// The wrapper's variable naming a session's layer directory.
pub const LAYER_VAR: &str = "NIX_SANDBOX_PROJECT_LAYER";

/// The resource that reads session `session`'s project diff.
pub fn diff_uri(session: &str) -> String {
    format!("sandbox://{session}/project.diff")
}

/// The session whose project diff `uri` names, if it names one.
pub fn parse_diff_uri(uri: &str) -> Option<&str> {
    uri.strip_prefix("sandbox://")?
        .strip_suffix("/project.diff")
        .filter(|s| !s.is_empty() && !s.contains('/'))
}

/// The server's layer directory and the project it layers.
#[derive(Debug)]
pub struct Layers {
    dir: PathBuf,
    lower: PathBuf,
    next: AtomicU64,
}

impl Layers {
    /// Makes the directory, under `base` (`/var/tmp` but in tests).
    pub fn create(base: &Path, project: &Path) -> io::Result<Self> {
        let mut last = None;
        for attempt in 0..8u64 {
            let tag = RandomState::new().hash_one((std::process::id(), attempt));
            let dir = base.join(format!("nix-sandbox-mcp-layers.{:x}", tag & 0xffff_ffff));
            match std::fs::DirBuilder::new().mode(0o711).create(&dir) {
                Ok(()) => {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
                    return Ok(Self {
                        dir,
                        lower: project.to_owned(),
                        next: AtomicU64::new(0),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no directory name left")))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh layer for one jail, its upper, work and mount point owned
    /// by `ids` when given (a root server's jail uid).
    pub fn layer(&self, ids: Option<Ids>) -> io::Result<Layer> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(n.to_string());
        std::fs::DirBuilder::new().mode(0o711).create(&dir)?;
        let layer = Layer {
            dir,
            lower: self.lower.clone(),
            seen: Mutex::new(None),
        };
        for sub in ["upper", "work", "merged"] {
            let path = layer.dir.join(sub);
            std::fs::DirBuilder::new().mode(0o755).create(&path)?;
            if let Some(ids) = ids {
                nix::unistd::chown(&path, Some(ids.uid), Some(ids.gid))?;
            }
        }
        Ok(layer)
    }
}

impl Drop for Layers {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// One jail's layer. Dropping it removes it (the jail is killed first).
#[derive(Debug)]
pub struct Layer {
    dir: PathBuf,
    lower: PathBuf,
    /// The upper directory's fingerprint when its changes were last told.
    seen: Mutex<Option<u64>>,
}

impl Layer {
    /// The variable the wrapper reads.
    pub fn var(&self) -> (&'static str, OsString) {
        (LAYER_VAR, self.dir.clone().into_os_string())
    }

    /// The changes so far (for the diff resource).
    pub fn changes(&self, bounds: diff::Bounds) -> io::Result<diff::Changes> {
        let (upper, lower) = self.open()?;
        Ok(diff::changes(&upper, &lower, bounds))
    }

    /// The changes, when the upper directory changed since they were last
    /// told (by this call, or by the jail's processes between calls).
    pub fn changed(&self, bounds: diff::Bounds) -> Option<diff::Changes> {
        let (upper, lower) = self.open().ok()?;
        let print = fingerprint(&upper, bounds.entries);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == Some(print) || (seen.is_none() && print == EMPTY) {
            *seen = Some(print);
            return None;
        }
        *seen = Some(print);
        drop(seen);
        Some(diff::changes(&upper, &lower, bounds))
    }

    fn open(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let upper = rustix::fs::open(self.dir.join("upper"), flags, Mode::empty())?;
        let lower = rustix::fs::open(&self.lower, flags, Mode::empty())?;
        Ok((upper, lower))
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        // The jail may still be going away: off the caller's thread.
        std::thread::spawn(move || remove_tree(&dir));
    }
}

/// The fingerprint of an empty upper directory.
const EMPTY: u64 = 0;

/// A fingerprint of the tree under `dir`: names, types, sizes, times and
/// inodes, at most `most` entries (metadata only, nothing followed).
fn fingerprint(dir: &OwnedFd, most: usize) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    let mut count = 0usize;
    let mut stack = vec![(rustix::io::dup(dir).ok(), Vec::<u8>::new())];
    while let Some((fd, path)) = stack.pop() {
        let Some(fd) = fd else { continue };
        let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            count += 1;
            if count > most {
                return hasher.finish() ^ 1;
            }
            let Ok(stat) = rustix::fs::statat(
                &fd,
                entry.file_name(),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            (&path, name, stat.st_mode, stat.st_size, stat.st_ino).hash(&mut hasher);
            (
                stat.st_mtime,
                stat.st_mtime_nsec,
                stat.st_ctime,
                stat.st_ctime_nsec,
            )
                .hash(&mut hasher);
            if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
            {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let sub = rustix::fs::openat(&fd, entry.file_name(), flags, Mode::empty()).ok();
                let mut child = path.clone();
                child.push(b'/');
                child.extend_from_slice(name);
                stack.push((sub, child));
            }
        }
    }
    if count == 0 {
        EMPTY
    } else {
        hasher.finish() | 2
    }
}

/// Removes `dir` and everything in it, making the directories the jail
/// left unreadable (the overlay's `work/work` is mode 0) readable first
/// when they are the server's own. Nothing is followed.
fn remove_tree(dir: &Path) {
    let me = nix::unistd::geteuid().as_raw();
    let mut stack = vec![dir.to_owned()];
    let mut dirs = Vec::new();
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if meta.uid() == me && meta.mode() & 0o700 != 0o700 {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700));
        }
        if let Ok(entries) = std::fs::read_dir(&path) {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
        dirs.push(path);
    }
    for path in dirs.iter().rev() {
        let _ = std::fs::remove_dir(path);
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
