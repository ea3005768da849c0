//! The workbench on the user's project (docs/workbench.md): with
//! `NIX_SANDBOX_PROJECT_WRITABLE=1`, each session jail sees the project
//! through a copy-on-write layer of its own, whose changes the server
//! reads back as a diff (diff.rs). The host's tree is never written: it is
//! the overlay's read-only lower layer, mounted by the jail's wrapper
//! (agent/src/bin/jail-budget.rs) in the jail's own namespaces.
//!
//! - [`Layers`]: the server's directory of layers, made at start with an
//!   unpredictable name under `/var/tmp` (its path free of symlinks, so the
//!   server can find it again in a jail's mount namespace without following
//!   one), mode 0711, the server's, holding only the layers' mount points;
//!   removed when the server ends.
//! - [`Layer`]: one session jail's: `DIR`, an empty directory of the
//!   server's in that directory, over which the jail's wrapper mounts a
//!   tmpfs of the environment's `workspace_mb` in the jail's own mount
//!   namespace, holding `upper`, `work` and `merged`. The tmpfs bounds the
//!   layer and is never on the host's disk; the server reads `upper`
//!   through `/proc/PID/root` of the jail's wrapper. It lives as long as
//!   the jail: a reset starts a fresh one.
//! - [`pool::Pool`]: the server-wide bound on all layers' tmpfs sizes;
//!   each session jail's layer holds a [`pool::Reservation`] of its size.

pub mod apply;
pub mod checkpoint;
pub mod diff;
pub mod pool;
pub mod share;

use std::ffi::OsString;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// The wrapper's variable naming a session's layer directory.
pub const LAYER_VAR: &str = "NIX_SANDBOX_LAYER";
/// The wrapper's variable asking for the project's overlay on the layer.
pub const PROJECT_VAR: &str = "NIX_SANDBOX_PROJECT_LAYER";
/// The wrapper's variable asking jail-budget to wait for the layer to be
/// filled from a checkpoint.
pub const RESTORE_VAR: &str = "NIX_SANDBOX_RESTORE";

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

/// The server's layer directory and the project it layers, when the
/// project is writable.
#[derive(Debug)]
pub struct Layers {
    dir: PathBuf,
    lower: Option<PathBuf>,
    next: AtomicU64,
    /// The bound on all layers' sizes (unbounded until [`Layers::bounded`]).
    pool: Arc<pool::Pool>,
    /// Whether a session started from a checkpoint is mounted over it
    /// (share.rs), or copied ([`Layers::copying_forks`]).
    mounted_forks: bool,
}

impl Layers {
    /// Makes the directory, under `base` (`/var/tmp` but in tests).
    pub fn create(base: &Path, project: Option<&Path>) -> io::Result<Self> {
        let base = base.canonicalize()?;
        let mut last = None;
        for attempt in 0..8u64 {
            let tag = RandomState::new().hash_one((std::process::id(), attempt));
            let dir = base.join(format!("nix-sandbox-mcp-layers.{:x}", tag & 0xffff_ffff));
            match std::fs::DirBuilder::new().mode(0o711).create(&dir) {
                Ok(()) => {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
                    return Ok(Self {
                        dir,
                        lower: project.map(Path::to_owned),
                        next: AtomicU64::new(0),
                        pool: pool::Pool::new(u64::MAX),
                        mounted_forks: true,
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

    /// These layers, `bytes` at most in all (`NIX_SANDBOX_LAYERS_MB`).
    pub fn bounded(mut self, bytes: u64) -> Self {
        self.pool = pool::Pool::new(bytes);
        self
    }

    /// These layers, a session started from a checkpoint copying it
    /// instead of mounting it (a root server on a host that cannot idmap
    /// the checkpoints' mounts: project_check.rs).
    pub fn copying_forks(mut self) -> Self {
        self.mounted_forks = false;
        self
    }

    /// Whether a session started from a checkpoint is mounted over it.
    pub fn mounted_forks(&self) -> bool {
        self.mounted_forks
    }

    /// The bound on all layers.
    pub fn pool(&self) -> &pool::Pool {
        &self.pool
    }

    /// Holds `bytes` of the bound for one layer (its tmpfs's size), or
    /// says what holds it.
    pub fn reserve(&self, bytes: u64) -> Result<pool::Reservation, pool::Full> {
        self.pool.reserve(bytes)
    }

    /// The project the layers are over, when it is writable.
    pub fn lower(&self) -> Option<&Path> {
        self.lower.as_deref()
    }

    /// A fresh layer for one jail: an empty directory of the server's,
    /// over which the jail's wrapper mounts the layer's tmpfs in the jail's
    /// own mount namespace.
    pub fn layer(&self, project: bool) -> io::Result<Layer> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(n.to_string());
        std::fs::DirBuilder::new().mode(0o711).create(&dir)?;
        let host_dev = std::fs::symlink_metadata(&dir)?.dev();
        Ok(Layer {
            dir,
            host_dev,
            lower: self.lower.clone().filter(|_| project),
            seen: Mutex::new(None),
            reservation: Mutex::new(None),
        })
    }
}

impl Drop for Layers {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// One jail's layer. Dropping it removes its directory (the jail is
/// killed first; its tmpfs went with the jail's mount namespace).
#[derive(Debug)]
pub struct Layer {
    dir: PathBuf,
    /// The device of `dir` on the host: the tmpfs in the jail's namespace
    /// is another.
    host_dev: u64,
    /// The project, when the layer holds its copy-on-write layer.
    lower: Option<PathBuf>,
    /// The upper directory's fingerprint when its changes were last told.
    seen: Mutex<Option<u64>>,
    /// Its tmpfs's share of the bound on all layers (none yet for a warm
    /// jail's, which takes it when a call takes the jail).
    reservation: Mutex<Option<Arc<pool::Reservation>>>,
}

impl Layer {
    /// Its directory on the host, the tmpfs's mount point in its jail's
    /// mount namespace.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes its tmpfs's share (`bytes`) of `layers`' bound, unless it
    /// holds it already, and holds it while it lives: a session started
    /// over one of its checkpoints holds the layer (an `Arc`,
    /// session/jail.rs), so its reservation lives as long as that session
    /// keeps its tmpfs alive. A warm jail's layer takes it when a call
    /// takes the jail.
    pub fn reserve(&self, layers: &Layers, bytes: u64) -> Result<(), pool::Full> {
        let mut held = self.reservation.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_none() {
            *held = Some(Arc::new(layers.reserve(bytes)?));
        }
        Ok(())
    }

    /// The variables the wrapper reads.
    pub fn vars(&self) -> Vec<(&'static str, OsString)> {
        let mut vars = vec![(LAYER_VAR, self.dir.clone().into_os_string())];
        if self.lower.is_some() {
            vars.push((PROJECT_VAR, "1".into()));
        }
        vars
    }

    /// Whether it holds the project's copy-on-write layer.
    pub fn has_project(&self) -> bool {
        self.lower.is_some()
    }

    /// The layer's directory, on the tmpfs the jail's wrapper mounted in the
    /// jail's mount namespace, reached through `proc`, the `/proc/PID`
    /// directory of a process that stays in that namespace (the wrapper's
    /// bubblewrap, outside the jail's own namespaces). The path to the
    /// tmpfs is the server's own directories; nothing on it is followed,
    /// and what is found must be a tmpfs other than the host's directory.
    pub fn open_root(&self, proc: &OwnedFd) -> io::Result<OwnedFd> {
        let root = rustix::fs::openat(
            proc,
            "root",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let relative = self.dir.strip_prefix("/").map_err(io::Error::other)?;
        let dir = rustix::fs::openat2(
            &root,
            relative,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        let tmpfs = rustix::fs::fstatfs(&dir)?.f_type == TMPFS_MAGIC;
        if !tmpfs || rustix::fs::fstat(&dir)?.st_dev == self.host_dev {
            return Err(io::Error::other(
                "the jail's layer is not mounted (its sandbox did not start it)",
            ));
        }
        Ok(dir)
    }

    /// The upper directories of its project overlay, newest first: its
    /// `upper`, on the tmpfs the jail's wrapper mounted (see
    /// [`Layer::open_root`]), then, when it was started over
    /// checkpoints (share.rs), theirs (`base/N/upper`, mounts in the same
    /// namespace), nothing followed.
    pub fn open_uppers(&self, proc: &OwnedFd) -> io::Result<Vec<OwnedFd>> {
        let root = self.open_root(proc)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut uppers = vec![rustix::fs::openat(&root, "upper", flags, Mode::empty())?];
        let Ok(base) = rustix::fs::openat(&root, "base", flags, Mode::empty()) else {
            return Ok(uppers);
        };
        for i in 0.. {
            let Ok(lower) = rustix::fs::openat(&base, i.to_string(), flags, Mode::empty()) else {
                break;
            };
            if let Ok(upper) = rustix::fs::openat(&lower, "upper", flags, Mode::empty()) {
                uppers.push(upper);
            }
        }
        Ok(uppers)
    }

    /// The changes so far (for the diff resource), `uppers` as
    /// [`Layer::open_uppers`] opened them.
    pub fn changes(&self, uppers: &[OwnedFd], bounds: diff::Bounds) -> io::Result<diff::Changes> {
        let lower = self.open_lower()?;
        Ok(diff::changes_over(dup_all(uppers)?, &lower, bounds))
    }

    /// The changes, when the upper directory (its own, the first of
    /// `uppers`) changed since they were last told (by this call, or by
    /// the jail's processes between calls).
    pub fn changed(&self, uppers: &[OwnedFd], bounds: diff::Bounds) -> Option<diff::Changes> {
        let print = fingerprint(uppers.first()?, bounds.entries);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == Some(print) || (seen.is_none() && print == EMPTY) {
            *seen = Some(print);
            return None;
        }
        *seen = Some(print);
        drop(seen);
        let lower = self.open_lower().ok()?;
        Some(diff::changes_over(dup_all(uppers).ok()?, &lower, bounds))
    }

    fn open_lower(&self) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let lower = self.lower.as_ref().ok_or_else(|| {
            io::Error::other("the session's layer holds no project (it is read-only)")
        })?;
        Ok(rustix::fs::open(lower, flags, Mode::empty())?)
    }
}

/// Copies of `fds`.
fn dup_all(fds: &[OwnedFd]) -> io::Result<Vec<OwnedFd>> {
    fds.iter().map(|fd| Ok(rustix::io::dup(fd)?)).collect()
}

/// A jail's layer and the `/proc/PID` directory of its wrapper, through
/// which it is read.
pub struct InJail {
    pub layer: Arc<Layer>,
    pub proc: io::Result<OwnedFd>,
}

impl InJail {
    fn uppers(&self) -> io::Result<Vec<OwnedFd>> {
        let proc = self
            .proc
            .as_ref()
            .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
        self.layer.open_uppers(proc)
    }

    /// [`Layer::changes`], read in the jail's namespace.
    pub fn changes(&self, bounds: diff::Bounds) -> io::Result<diff::Changes> {
        self.layer.changes(&self.uppers()?, bounds)
    }

    /// [`Layer::changed`], read in the jail's namespace.
    pub fn changed(&self, bounds: diff::Bounds) -> Option<diff::Changes> {
        self.layer.changed(&self.uppers().ok()?, bounds)
    }
}

/// `statfs`'s type of a tmpfs.
const TMPFS_MAGIC: rustix::fs::FsWord = 0x0102_1994;

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
pub(crate) fn fingerprint(dir: &OwnedFd, most: usize) -> u64 {
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
