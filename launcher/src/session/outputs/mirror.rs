//! The outputs mirror: with `NIX_SANDBOX_OUTPUT_DIR=HOST_DIR`, the
//! files a call writes under `/workspace/outputs` are copied to
//! `HOST_DIR/SESSION/PATH` (`HOST_DIR/@run-TIME-N/PATH` for a run with files
//! but no session; `HOST_DIR/client-ID/SESSION/PATH` for the sessions of an
//! MCP session over HTTP, so that two clients' sessions of the same name
//! stay apart), so that a person can open the charts. Off when the variable
//! is unset or empty.
//!
//! Bounded: at most `--output-call-mb` per call, and at most
//! `--output-max-mb` in `HOST_DIR` in all, counted with what was there when
//! the server first wrote to it (measured again when it looks full, in
//! case a person deleted files). What is not mirrored is said in the
//! result, with why ([`Skipped`]).
//!
//! The bytes come from the session's agent (the launcher never reads the
//! jail's files); here they are written into directories this module makes,
//! never through a symbolic link: every directory below HOST_DIR is opened
//! with `O_NOFOLLOW`, and a file is written to a fresh temporary name
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`) then renamed over its final name, which
//! replaces a link there instead of writing through it. Names are escaped
//! one to one ([`escape`]): two different sessions or paths never share a
//! name on the host, and none is `.`, `..` or hidden.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};

use super::size_text;
use crate::settings;

/// How often the mirror's size may be measured again when it looks full.
const REMEASURE_EVERY: Duration = Duration::from_secs(60);
/// Most entries looked at when measuring it (the rest are not counted).
const MAX_MEASURED: usize = 100_000;

/// The mirror's bounds, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// In the whole directory.
    pub total: u64,
    /// Per call.
    pub per_call: u64,
}

/// Where outputs are mirrored.
#[derive(Debug)]
pub struct Mirror {
    root: PathBuf,
    pub caps: Caps,
    /// Numbers the temporary files and the runs without a session.
    counter: AtomicU64,
    usage: Mutex<Usage>,
}

/// What the mirror holds, as far as this server knows.
#[derive(Debug, Default)]
struct Usage {
    /// Bytes in the directory (measured, plus written and reserved since);
    /// `None` until first measured.
    bytes: Option<u64>,
    measured: Option<Instant>,
}

/// Why an output is not mirrored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// The call's share is spent.
    CallFull { per_call: u64 },
    /// The directory holds its most.
    Full { total: u64 },
    /// Writing it failed.
    Failed(String),
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names =
            |s: &settings::Setting| format!("--{} / {}", s.flag.unwrap_or_default(), s.var_name());
        match self {
            Skipped::CallFull { per_call } => write!(
                f,
                "not mirrored: over the {} mirrored per call ({})",
                size_text(*per_call),
                names(&settings::OUTPUT_CALL_MB)
            ),
            Skipped::Full { total } => write!(
                f,
                "not mirrored: the outputs directory holds its most, {} ({})",
                size_text(*total),
                names(&settings::OUTPUT_MAX_MB)
            ),
            Skipped::Failed(why) => write!(f, "not mirrored: {why}"),
        }
    }
}

impl Mirror {
    /// The mirror into `root` (`NIX_SANDBOX_OUTPUT_DIR`), made when first
    /// written to.
    pub fn new(root: PathBuf, caps: Caps) -> Self {
        Self {
            root,
            caps,
            counter: AtomicU64::new(0),
            usage: Mutex::default(),
        }
    }

    /// The directory of session `name` (under `client`, a client's own
    /// directory, when given).
    pub fn session_dir(client: Option<&str>, name: &str) -> String {
        match client {
            Some(client) => format!("{}/{}", escape(client), escape(name)),
            None => escape(name),
        }
    }

    /// A fresh directory name for a run without a session (`@` is escaped
    /// in every session name, so none is one of these).
    pub fn run_dir(&self) -> String {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!(
            "@run-{secs}-{}",
            self.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Where directory `dir` (of [`Mirror::session_dir`] or
    /// [`Mirror::run_dir`]) is, for the model's note and the log.
    pub fn path_of(&self, dir: &str) -> PathBuf {
        self.root.join(dir)
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for `size` more bytes, if the directory has it; measures
    /// the directory first when it was never measured, or looks full and
    /// was last measured a while ago.
    fn reserve(&self, size: u64) -> Result<(), Skipped> {
        let mut usage = self.usage();
        let fits = |bytes: u64| bytes.saturating_add(size) <= self.caps.total;
        let stale = usage
            .measured
            .is_none_or(|at| at.elapsed() >= REMEASURE_EVERY);
        if usage.bytes.is_none() || (!usage.bytes.is_some_and(fits) && stale) {
            usage.bytes = Some(measure(&self.root));
            usage.measured = Some(Instant::now());
        }
        let bytes = usage.bytes.unwrap_or_default();
        if !fits(bytes) {
            return Err(Skipped::Full {
                total: self.caps.total,
            });
        }
        usage.bytes = Some(bytes + size);
        Ok(())
    }

    /// Gives back `reserved` bytes and counts `used` instead.
    fn settle(&self, reserved: u64, used: u64) {
        let mut usage = self.usage();
        let bytes = usage.bytes.unwrap_or_default();
        usage.bytes = Some(bytes.saturating_sub(reserved).saturating_add(used));
    }

    /// A file to write `dir/path` with (`path` is an output's path, already
    /// checked by `proto::files::check_path`), piece by piece, `size` bytes
    /// reserved for it; it replaces the older copy only once finished.
    pub fn create(&self, dir: &str, path: &str, size: u64) -> Result<MirrorFile<'_>, Skipped> {
        self.reserve(size)?;
        let file = self.open(dir, path).map_err(|e| {
            tracing::warn!(path, "mirroring an output failed: {e}");
            Skipped::Failed(e.to_string())
        });
        match file {
            Ok((parent, temporary, name, file)) => Ok(MirrorFile {
                mirror: self,
                reserved: size,
                written: 0,
                parent,
                temporary,
                name,
                file: Some(file),
            }),
            Err(skipped) => {
                self.settle(size, 0);
                Err(skipped)
            }
        }
    }

    /// The parent directory, temporary and final names, and the temporary
    /// file of `dir/path`.
    fn open(&self, dir: &str, path: &str) -> io::Result<(OwnedFd, String, String, File)> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| context(e, &format!("making {}", self.root.display())))?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let root = nix::fcntl::open(&self.root, flags, Mode::empty())
            .map_err(|e| context(e.into(), &format!("opening {}", self.root.display())))?;
        // `dir`'s parts are escaped already (session_dir, run_dir).
        let mut parts: Vec<String> = dir.split('/').map(str::to_owned).collect();
        parts.extend(path.split('/').map(escape));
        let name = parts.pop().unwrap_or_default();
        let mut parent: OwnedFd = root;
        for part in &parts {
            parent = subdir(parent.as_fd(), part)?;
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // Escaped names never start with `.`: no temporary is a final name.
        let temporary = format!(".{name}.nsm-{}-{n}", std::process::id());
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            parent.as_fd(),
            temporary.as_str(),
            flags,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| context(e.into(), &format!("creating {temporary}")))?;
        Ok((parent, temporary, name, File::from(fd)))
    }
}

/// A mirrored file being written, under a temporary name until finished
/// (dropped unfinished, it is removed and its room given back).
pub struct MirrorFile<'a> {
    mirror: &'a Mirror,
    reserved: u64,
    written: u64,
    parent: OwnedFd,
    temporary: String,
    name: String,
    file: Option<File>,
}

impl MirrorFile<'_> {
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(file) => {
                file.write_all(bytes)
                    .map_err(|e| context(e, &format!("writing {}", self.name)))?;
                self.written += bytes.len() as u64;
                Ok(())
            }
            None => Err(io::Error::other("the mirror file is finished")),
        }
    }

    /// Renames the file to its name, replacing what was there (a link
    /// included: rename never follows it). A file that grew past its room
    /// while it was read is not kept when the directory cannot hold it.
    pub fn finish(mut self) -> Result<(), Skipped> {
        self.file = None;
        let replaced = regular_size(self.parent.as_fd(), &self.name);
        let grown = self.written.saturating_sub(self.reserved);
        if grown > 0 {
            self.mirror.reserve(grown)?;
            self.reserved += grown;
        }
        renameat(
            self.parent.as_fd(),
            self.temporary.as_str(),
            self.parent.as_fd(),
            self.name.as_str(),
        )
        .map_err(|e| Skipped::Failed(format!("renaming to {}: {e}", self.name)))?;
        self.temporary.clear();
        // What it holds counts, not what was reserved; the older copy is
        // gone, its bytes free again.
        self.mirror.settle(self.reserved + replaced, self.written);
        Ok(())
    }
}

impl Drop for MirrorFile<'_> {
    fn drop(&mut self) {
        if !self.temporary.is_empty() {
            let _ = nix::unistd::unlinkat(
                self.parent.as_fd(),
                self.temporary.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
            self.mirror.settle(self.reserved, 0);
        }
    }
}

/// The size of regular file `name` in `parent`, 0 when there is none.
fn regular_size(parent: BorrowedFd<'_>, name: &str) -> u64 {
    match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {
            u64::try_from(stat.st_size).unwrap_or(0)
        }
        _ => 0,
    }
}

/// The bytes of the regular files under `root`, no link followed, at most
/// [`MAX_MEASURED`] entries looked at; 0 when it does not exist.
fn measure(root: &Path) -> u64 {
    let mut bytes = 0u64;
    let mut seen = 0usize;
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_MEASURED {
                tracing::warn!(root = %root.display(), "the outputs directory has too many entries to measure them all");
                return bytes;
            }
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => dirs.push(entry.path()),
                Ok(meta) if meta.is_file() => bytes = bytes.saturating_add(meta.len()),
                _ => {}
            }
        }
    }
    tracing::debug!(root = %root.display(), bytes, "outputs directory measured");
    bytes
}

/// Opens (making it if needed) directory `name` of `parent`, refusing a
/// symbolic link.
fn subdir(parent: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    match mkdirat(parent, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(context(e.into(), &format!("making {name}"))),
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(parent, name, flags, Mode::empty()).map_err(|e| {
        let why = if matches!(e, Errno::ELOOP | Errno::ENOTDIR) {
            "it is a symbolic link or not a directory".to_owned()
        } else {
            e.to_string()
        };
        io::Error::other(format!("{name}: {why}"))
    })
}

/// A name safe in any directory, one to one: letters, digits and `_-+ ` are
/// kept, and `.` but as the first character; every other byte is `%XX`
/// (`%` itself included, so no two names give the same one). Never empty,
/// `.`, `..` or hidden; `@` (which run directories start with) is escaped.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.char_indices() {
        let kept = c.is_alphanumeric() || "_-+ ".contains(c) || (c == '.' && i > 0);
        if kept && !c.is_control() {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    if out.is_empty() { "%".into() } else { out }
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const LARGE: Caps = Caps {
        total: 1 << 30,
        per_call: 1 << 30,
    };

    fn mirror(root: &Path) -> Mirror {
        Mirror::new(root.to_owned(), LARGE)
    }

    impl Mirror {
        fn write(&self, dir: &str, path: &str, bytes: &[u8]) -> Result<(), Skipped> {
            let mut file = self.create(dir, path, bytes.len() as u64)?;
            file.write(bytes)
                .map_err(|e| Skipped::Failed(e.to_string()))?;
            file.finish()
        }

        fn bytes(&self) -> u64 {
            self.usage().bytes.unwrap_or_default()
        }
    }

    #[test]
    fn files_land_under_the_session_and_replace_older_copies() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let m = mirror(&root);
        m.write("s1", "plots/a.png", b"one").unwrap();
        m.write("s1", "plots/a.png", b"two").unwrap();
        assert_eq!(std::fs::read(root.join("s1/plots/a.png")).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(root.join("s1/plots")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
        assert_eq!(m.bytes(), 3, "the replaced copy is not counted");
        assert_eq!(m.path_of("s1"), root.join("s1"));
        let run = m.run_dir();
        assert!(run.starts_with("@run-"), "{run}");
        assert_ne!(run, m.run_dir());
    }

    #[test]
    fn symbolic_links_in_the_mirror_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(root.join("s2")).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, root.join("s1")).unwrap();
        symlink(elsewhere.join("victim"), root.join("s2/x.csv")).unwrap();
        let m = mirror(&root);
        let e = m.write("s1", "a.png", b"x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A link at the file's name is replaced, not written through.
        m.write("s2", "x.csv", b"data").unwrap();
        assert!(!elsewhere.join("victim").exists());
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
        let meta = std::fs::symlink_metadata(root.join("s2/x.csv")).unwrap();
        assert!(meta.is_file());
    }

    #[test]
    fn names_are_escaped_one_to_one() {
        assert_eq!(escape("a b+c_d.png"), "a b+c_d.png");
        assert_eq!(escape("été"), "été");
        assert_eq!(escape("x\\y:z*%"), "x%5Cy%3Az%2A%25");
        assert_eq!(escape("a\nb"), "a%0Ab");
        assert_eq!(escape("\u{202e}"), "%E2%80%AE");
        // The session names that once shared a directory.
        let dirs: Vec<String> = [".", "..", "_", "%2E", "@run-1-0", ".x"]
            .iter()
            .map(|n| Mirror::session_dir(None, n))
            .collect();
        assert_eq!(dirs, ["%2E", "%2E.", "_", "%252E", "%40run-1-0", "%2Ex"]);
        assert_eq!(
            Mirror::session_dir(Some("client-k3J9"), "a"),
            "client-k3J9/a"
        );
        for name in &dirs {
            assert!(!name.starts_with('.') && !name.contains('/'), "{name}");
        }
    }

    #[test]
    fn a_directory_past_its_total_mirrors_no_more_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("out");
        // What was there before the server started counts.
        std::fs::create_dir_all(root.join("old")).unwrap();
        std::fs::write(root.join("old/big"), vec![0u8; 600]).unwrap();
        let m = Mirror::new(
            root.clone(),
            Caps {
                total: 1000,
                per_call: 1000,
            },
        );
        m.write("s", "a", &[1u8; 300]).unwrap();
        assert_eq!(m.bytes(), 900);
        let e = m.write("s", "b", &[1u8; 200]).unwrap_err();
        assert_eq!(e, Skipped::Full { total: 1000 });
        assert!(
            e.to_string()
                .contains("--output-max-mb / NIX_SANDBOX_OUTPUT_MAX_MB"),
            "{e}"
        );
        assert!(!root.join("s/b").exists());
        // A file that grew past its room while read is not kept.
        let mut grown = m.create("s", "c", 10).unwrap();
        grown.write(&[1u8; 200]).unwrap();
        assert!(matches!(grown.finish(), Err(Skipped::Full { .. })));
        assert!(!root.join("s/c").exists());
        let left: Vec<_> = std::fs::read_dir(root.join("s")).unwrap().collect();
        assert_eq!(left.len(), 1, "only `a`: {left:?}");
        assert_eq!(m.bytes(), 900, "the room is given back");
        // Deleted by a person: measured again (once it looks full, at most
        // once a minute), there is room.
        std::fs::remove_file(root.join("old/big")).unwrap();
        m.usage().measured = None;
        m.write("s", "b", &[1u8; 200]).unwrap();
        assert_eq!(m.bytes(), 500);
    }
}
