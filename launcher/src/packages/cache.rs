//! The compositions kept on disk: per composed set a GC root (`STEM`, the
//! symlink to its store path the compose helper makes with `nix-store
//! --add-root --indirect`) and a key file beside it (`STEM.json`: the base
//! environment's store path and the names) saying what it is for, in a
//! directory the server made, owns and checks before it trusts anything in
//! it: an entry is run, so an entry someone else could plant would run
//! their program outside any jail.
//!
//! Where: `$XDG_CACHE_HOME/nix-sandbox-mcp/packages`, else
//! `$HOME/.cache/nix-sandbox-mcp/packages`; with neither, a directory of
//! this server's own made with `mkdtemp` under `TMPDIR` (an unpredictable
//! name, mode 0700) and removed when the server ends. The directory and
//! `nix-sandbox-mcp` above it must be real directories (no symlink) of the
//! server's uid that no one else may write; every directory above them
//! must belong to the server's uid or root and be writable by no one else
//! (group-writable only by the server's own group), unless it is sticky
//! (as /tmp is). Otherwise nothing in it is used, and a call with
//! `packages` gets one line naming the directory, its owner, and the fix.
//!
//! The ownership checks are made at start ([`Cache::prepare`], before the
//! launcher moves into its user namespace, lifetime.rs): inside it, every
//! file of a uid it does not map shows as the overflow uid (65534), which
//! is the server's own when it runs as nobody. Afterwards the directory is
//! only checked to still be a directory no one else may write, made again
//! if it was removed: the directories above it, checked at start, let no
//! one else replace it.
//!
//! At most `max` sets are kept: after a new one, the least recently used
//! (the key file's modification time, set on every use) are dropped with
//! their GC roots, except those still in use by this server (a session or a
//! call holds them), which stay past the bound until they are let go.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use nix::libc;

/// The directories of the cache under its base.
const SUBDIRS: [&str; 2] = ["nix-sandbox-mcp", "packages"];

/// The cache directory, found and checked at start.
#[derive(Debug)]
pub struct Cache {
    /// `XDG_CACHE_HOME` or `HOME/.cache`; None: a private directory.
    base: Option<PathBuf>,
    pub max: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Unprepared,
    /// Checked: the directory, and for this server's private one (removed
    /// on drop) its device and inode, which it must keep.
    Ready {
        dir: PathBuf,
        private: Option<(u64, u64)>,
    },
    /// Not to be trusted: why, in one line.
    Refused(String),
}

/// What the cache holds for a set: the store path its GC root names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit(pub PathBuf);

impl Cache {
    /// `lookup` reads the environment (`XDG_CACHE_HOME`, `HOME`; empty is
    /// unset).
    pub fn new(lookup: impl Fn(&str) -> Option<std::ffi::OsString>, max: usize) -> Self {
        let set = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let base = set("XDG_CACHE_HOME").or_else(|| set("HOME").map(|home| home.join(".cache")));
        Self {
            base,
            max: max.max(1),
            state: Mutex::new(State::Unprepared),
        }
    }

    /// Finds, makes and checks the directory (ownership included); the
    /// launcher calls it at start, before its user namespace, when an
    /// environment takes packages. A problem is logged, and told to every
    /// call with `packages`.
    pub fn prepare(&self) {
        let mut state = self.lock();
        if matches!(*state, State::Unprepared) {
            *state = self.check_first();
            match &*state {
                State::Refused(why) => tracing::error!("{why}"),
                State::Ready {
                    dir,
                    private: Some(_),
                } => {
                    tracing::info!(dir = %dir.display(), "no XDG_CACHE_HOME or HOME: compositions are cached for this server only")
                }
                _ => {}
            }
        }
    }

    fn check_first(&self) -> State {
        let checked = match &self.base {
            Some(base) => checked_under(base).map(|dir| State::Ready { dir, private: None }),
            None => private().and_then(|dir| {
                let meta = fs::symlink_metadata(&dir).map_err(|e| cannot_make(&dir, &e))?;
                Ok(State::Ready {
                    dir,
                    private: Some((meta.dev(), meta.ino())),
                })
            }),
        };
        checked.unwrap_or_else(State::Refused)
    }

    /// The checked directory (made again if it was removed since); the
    /// error is one line naming it, what is wrong and the fix.
    pub fn dir(&self) -> Result<PathBuf, String> {
        self.prepare();
        match &*self.lock() {
            State::Ready { dir, private: None } => {
                if let Some(parent) = dir.parent() {
                    still_private(parent)?;
                }
                still_private(dir)?;
                Ok(dir.clone())
            }
            State::Ready {
                dir,
                private: Some(made),
            } => {
                // Its name was logged: made again, it could be anyone's.
                match fs::symlink_metadata(dir) {
                    Ok(meta) if (meta.dev(), meta.ino()) == *made => Ok(dir.clone()),
                    _ => Err(format!(
                        "the server's private packages cache {} was removed or changed; restart \
                         the server, or set XDG_CACHE_HOME",
                        dir.display()
                    )),
                }
            }
            State::Refused(why) => Err(why.clone()),
            State::Unprepared => Err("the packages cache was not prepared".into()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store path kept for `stem` when its key file says `key`.
    pub fn find(dir: &Path, stem: &str, key: &serde_json::Value) -> Option<Hit> {
        let bytes = fs::read(dir.join(format!("{stem}.json"))).ok()?;
        let cached: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        if &cached != key {
            return None;
        }
        fs::read_link(dir.join(stem)).ok().map(Hit)
    }

    /// Whether `stem`'s GC root still names `store_path`.
    pub fn holds(dir: &Path, stem: &str, store_path: &str) -> bool {
        fs::read_link(dir.join(stem)).is_ok_and(|target| target.as_os_str() == store_path)
    }

    /// Writes `stem`'s key file (its GC root is the helper's), which also
    /// marks it used now.
    pub fn record(dir: &Path, stem: &str, key: &serde_json::Value) -> io::Result<()> {
        let file = dir.join(format!("{stem}.json"));
        let partial = dir.join(format!("{stem}.json.partial"));
        fs::write(&partial, key.to_string())?;
        fs::rename(&partial, &file)
    }

    /// Marks `stem` used now (its key file's modification time).
    pub fn touch(dir: &Path, stem: &str) {
        let file = dir.join(format!("{stem}.json"));
        let touched = fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(SystemTime::now()));
        if let Err(e) = touched {
            tracing::debug!(file = %file.display(), error = %e, "cannot mark a composition used");
        }
    }

    /// Drops the least recently used sets past the bound, with their GC
    /// roots, except those `in_use`; returns the stems dropped.
    pub fn bound(&self, dir: &Path, in_use: impl Fn(&str) -> bool) -> Vec<String> {
        let mut sets = entries(dir);
        // Newest first; a root without a key file (a server that ended
        // between the two) counts as the oldest.
        sets.sort_by_key(|set| std::cmp::Reverse(set.1));
        let mut dropped = Vec::new();
        for (stem, _) in sets.into_iter().skip(self.max) {
            if in_use(&stem) {
                continue;
            }
            let root = dir.join(&stem);
            let removed = fs::remove_file(&root).or_else(ignore_missing);
            let _ = fs::remove_file(dir.join(format!("{stem}.json"))).or_else(ignore_missing);
            match removed {
                Ok(()) => dropped.push(stem),
                Err(e) => {
                    tracing::warn!(root = %root.display(), error = %e, "cannot drop a cached composition")
                }
            }
        }
        if !dropped.is_empty() {
            tracing::info!(dropped = ?dropped, max = self.max, "dropped the least recently used compositions");
        }
        dropped
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        if let State::Ready {
            dir,
            private: Some(_),
        } = &*self.lock()
            && let Err(e) = fs::remove_dir_all(dir)
        {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the private packages cache");
        }
    }
}

/// `base/nix-sandbox-mcp/packages`, made and checked: every directory down
/// to `base` (canonical) of this uid or root and not open to others, the
/// two below it this uid's own.
fn checked_under(base: &Path) -> Result<PathBuf, String> {
    let real = fs::canonicalize(base).or_else(|_| {
        make_private_dirs(base).map_err(|e| cannot_make(base, &e))?;
        fs::canonicalize(base).map_err(|e| cannot_make(base, &e))
    })?;
    check_ancestors(&real)?;
    let mut dir = real;
    for sub in SUBDIRS {
        dir.push(sub);
        make_private_dirs(&dir).map_err(|e| cannot_make(&dir, &e))?;
        check_own(&dir)?;
    }
    Ok(dir)
}

/// A directory of this server's own under `TMPDIR`, with a name no one can
/// guess (`mkdtemp`).
fn private() -> Result<PathBuf, String> {
    let tmp = std::env::temp_dir();
    let real = fs::canonicalize(&tmp).map_err(|e| cannot_make(&tmp, &e))?;
    check_ancestors(&real)?;
    let dir = mkdtemp(&real.join("nix-sandbox-mcp-packages-XXXXXX"))
        .map_err(|e| cannot_make(&real, &e))?;
    check_own(&dir)?;
    Ok(dir)
}

/// One of the cache's directories after start: still a directory (not a
/// link) no one else may write, made again (mode 0700) if it was removed.
fn still_private(dir: &Path) -> Result<(), String> {
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| cannot_make(dir, &e))?;
    }
    let meta = fs::symlink_metadata(dir).map_err(|e| cannot_make(dir, &e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() || meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "the packages cache {} is no longer a directory only the server may write: remove it \
             (the server makes it anew)",
            dir.display()
        ));
    }
    Ok(())
}

/// The sets in `dir`: each GC root (a symlink) with its key file's
/// modification time (None without one).
fn entries(dir: &Path) -> Vec<(String, Option<SystemTime>)> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    read.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .map(|stem| {
            let used = fs::metadata(dir.join(format!("{stem}.json")))
                .and_then(|m| m.modified())
                .ok();
            (stem, used)
        })
        .collect()
}

fn ignore_missing(e: io::Error) -> io::Result<()> {
    match e.kind() {
        io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

/// Makes `dir` and what is missing above it, each new one mode 0700.
fn make_private_dirs(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn cannot_make(dir: &Path, e: &io::Error) -> String {
    format!(
        "cannot make the packages cache {}: {e}; set XDG_CACHE_HOME to a directory the server's user owns",
        dir.display()
    )
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn egid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// One of the cache's own directories: a directory (not a symlink) of this
/// uid, writable by no one else.
fn check_own(dir: &Path) -> Result<(), String> {
    let meta = fs::symlink_metadata(dir).map_err(|e| cannot_make(dir, &e))?;
    let fix = "remove it (the server makes it anew), or set XDG_CACHE_HOME to a directory of the server's own";
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(format!(
            "the packages cache {} is not a directory but a link or a file, which the server does not trust: {fix}",
            dir.display()
        ));
    }
    if meta.uid() != euid() {
        return Err(format!(
            "the packages cache {} belongs to uid {}, not to this server's uid {}, so its entries could be another user's: {fix}",
            dir.display(),
            meta.uid(),
            euid()
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "the packages cache {} is writable by others (mode {:o}), so its entries could be another user's: {fix}",
            dir.display(),
            meta.permissions().mode() & 0o7777
        ));
    }
    Ok(())
}

/// Every directory from `/` down to `real` (a canonical path): of this uid
/// or root, and writable by no one else unless sticky (group-writable by
/// this server's own group is fine).
fn check_ancestors(real: &Path) -> Result<(), String> {
    for dir in real.ancestors() {
        let meta = fs::metadata(dir).map_err(|e| cannot_make(dir, &e))?;
        let mode = meta.permissions().mode();
        let sticky = mode & 0o1000 != 0;
        let owner_ok = meta.uid() == euid() || meta.uid() == 0;
        let others_write = mode & 0o002 != 0 || (mode & 0o020 != 0 && meta.gid() != egid());
        if !owner_ok || (others_write && !sticky) {
            return Err(format!(
                "the packages cache would be under {} (uid {}, mode {:o}), which another user may change: \
                 set XDG_CACHE_HOME to a directory of the server's own",
                dir.display(),
                meta.uid(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

/// `mkdtemp(3)` of `template` (ending in XXXXXX): a new directory of mode
/// 0700 with an unpredictable name.
fn mkdtemp(template: &Path) -> io::Result<PathBuf> {
    let text = CString::new(template.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in TMPDIR"))?;
    let mut bytes = text.into_bytes_with_nul();
    // SAFETY: `bytes` is a NUL-terminated, writable template that mkdtemp
    // fills in place; it returns NULL or a pointer into it.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    if made.is_null() {
        return Err(io::Error::last_os_error());
    }
    bytes.pop();
    Ok(PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
    ))
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
