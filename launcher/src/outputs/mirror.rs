//! The outputs mirror: with `NIX_SANDBOX_OUTPUT_DIR=HOST_DIR`, the
//! files a call writes under `/workspace/outputs` are copied to
//! `HOST_DIR/SESSION/PATH` (`HOST_DIR/@run-TIME-N/PATH` for a run with files
//! but no session: `@` is not allowed in session names), so that a person
//! can open the charts. Off when the variable is unset or empty.
//!
//! The bytes come from the session's agent (the launcher never reads the
//! jail's files); here they are written into directories this module makes,
//! never through a symbolic link: every directory below HOST_DIR is opened
//! with `O_NOFOLLOW`, and a file is written to a fresh temporary name
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`) then renamed over its final name, which
//! replaces a link there instead of writing through it. Names are sanitized
//! (characters other than letters, digits and `._-+@ ` become `_`).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, mkdirat};

/// Where outputs are mirrored.
#[derive(Debug)]
pub struct Mirror {
    root: PathBuf,
    /// Numbers the temporary files and the runs without a session.
    counter: AtomicU64,
}

impl Mirror {
    /// The mirror into `root` (`NIX_SANDBOX_OUTPUT_DIR`), made when first
    /// written to.
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            counter: AtomicU64::new(0),
        }
    }

    /// The directory name of a session's outputs.
    pub fn session_dir(name: &str) -> String {
        sanitize(name)
    }

    /// A fresh directory name for a run without a session.
    pub fn run_dir(&self) -> String {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!(
            "@run-{secs}-{}",
            self.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Where directory `dir` is (for the model's note and the log).
    pub fn path_of(&self, dir: &str) -> PathBuf {
        self.root.join(dir)
    }

    /// A file to write `dir/path` with (`path` is an output's path, already
    /// checked by `proto::files::check_path`), piece by piece; it replaces
    /// the older copy only once finished.
    pub fn create(&self, dir: &str, path: &str) -> io::Result<MirrorFile> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| context(e, &format!("making {}", self.root.display())))?;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let root = nix::fcntl::open(&self.root, flags, Mode::empty())
            .map_err(|e| context(e.into(), &format!("opening {}", self.root.display())))?;
        let mut parts: Vec<String> = vec![sanitize(dir)];
        parts.extend(path.split('/').map(sanitize));
        let name = parts.pop().unwrap_or_default();
        let mut parent: OwnedFd = root;
        for part in &parts {
            parent = subdir(parent.as_fd(), part)?;
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
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
        Ok(MirrorFile {
            parent,
            temporary,
            name,
            file: Some(File::from(fd)),
        })
    }
}

/// A mirrored file being written, under a temporary name until finished
/// (dropped unfinished, it is removed).
pub struct MirrorFile {
    parent: OwnedFd,
    temporary: String,
    name: String,
    file: Option<File>,
}

impl MirrorFile {
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(file) => file
                .write_all(bytes)
                .map_err(|e| context(e, &format!("writing {}", self.name))),
            None => Err(io::Error::other("the mirror file is finished")),
        }
    }

    /// Renames the file to its name, replacing what was there (a link
    /// included: rename never follows it).
    pub fn finish(mut self) -> io::Result<()> {
        self.file = None;
        renameat(
            self.parent.as_fd(),
            self.temporary.as_str(),
            self.parent.as_fd(),
            self.name.as_str(),
        )
        .map_err(|e| context(e.into(), &format!("renaming to {}", self.name)))?;
        self.temporary.clear();
        Ok(())
    }
}

impl Drop for MirrorFile {
    fn drop(&mut self) {
        if !self.temporary.is_empty() {
            let _ = nix::unistd::unlinkat(
                self.parent.as_fd(),
                self.temporary.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
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

/// A name safe in any directory: letters, digits and `._-+@ ` kept, other
/// characters `_`, never empty, `.` or `..`.
fn sanitize(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "._-+@ ".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match clean.as_str() {
        "" | "." | ".." => "_".into(),
        _ => clean,
    }
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    fn mirror(root: &Path) -> Mirror {
        Mirror::new(root.to_owned())
    }

    impl Mirror {
        fn write(&self, dir: &str, path: &str, bytes: &[u8]) -> io::Result<()> {
            let mut file = self.create(dir, path)?;
            file.write(bytes)?;
            file.finish()
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
    fn names_are_sanitized() {
        assert_eq!(sanitize("a b+c@d.png"), "a b+c@d.png");
        assert_eq!(sanitize("x\\y:z*"), "x_y_z_");
        assert_eq!(sanitize(".."), "_");
        assert_eq!(sanitize("été"), "été");
    }
}
