//! Files in and out of the workspace (`proto::frame` documents the
//! operations): the outputs a call created or changed, `read` of one
//! output, and the walks files in share (inbox.rs).
//!
//! Every path is walked from a directory descriptor of the workspace opened
//! at start, one component at a time, with `O_NOFOLLOW`: a symbolic link
//! anywhere on the way is refused, so nothing here ever leaves the
//! workspace, whatever user code planted in it. Files are opened with
//! `O_NONBLOCK` (a FIFO cannot stall the agent) and used only when they are
//! regular files.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, mkdirat};
use proto::files::{self, OUTPUTS_DIR, SNIFF_BYTES};
use proto::frame::{FileReply, MAX_OUTPUTS_LISTED, MAX_READ_BYTES, Output};
use rustix::fs::RawDir;

use crate::watch::{self, Watch};

/// Most entries looked at under `outputs` (a call that writes more gets
/// the first ones listed).
const MAX_SCANNED: usize = 10_000;

/// The workspace directory, opened once.
pub struct Workspace {
    root: OwnedFd,
    /// What tells whether `listed` still holds; `None` where inotify is
    /// unusable (watch.rs).
    watch: Option<Watch>,
    /// The last whole listing of the outputs directory, every part of it
    /// watched since.
    listed: Option<Snapshot>,
    /// How many times the directory was read, for the tests.
    #[cfg(test)]
    listings: usize,
}

/// What the outputs directory held: size and times of each regular file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot(BTreeMap<String, Stamp>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(stat: &FileStat) -> Self {
        Stamp {
            size: u64::try_from(stat.st_size).unwrap_or(0),
            ino: stat.st_ino,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
        }
    }
}

impl Workspace {
    /// Opens `path` (the jail's `/workspace`).
    pub fn open(path: &Path) -> io::Result<Self> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let root = nix::fcntl::open(path, flags, Mode::empty()).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("{}: {e}", path.display()),
            )
        })?;
        Ok(Self {
            root,
            watch: Watch::new(),
            listed: None,
            #[cfg(test)]
            listings: 0,
        })
    }

    /// The workspace's directory, for files in (inbox.rs).
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The outputs directory's regular files now; the directory is made when
    /// missing. A symbolic link in its place gives an empty snapshot.
    ///
    /// Every call takes two snapshots, so they cost few system calls: while
    /// nothing under the directory changed since it was last read (watch.rs)
    /// that listing is the snapshot; else the directory is opened before it
    /// is made (it is there on all calls but the first), and listed with
    /// `getdents64` straight into a buffer.
    pub fn snapshot(&mut self) -> Snapshot {
        let quiet = match self.watch.as_ref().map(Watch::quiet) {
            Some(Ok(quiet)) => quiet,
            Some(Err(e)) => {
                watch::unusable(e);
                self.watch = None;
                false
            }
            None => false,
        };
        if quiet && let Some(listed) = &self.listed {
            return listed.clone();
        }
        let (snapshot, whole) = self.list();
        self.listed = whole.then(|| snapshot.clone());
        snapshot
    }

    /// Reads the outputs directory, watching every part of it before it is
    /// read; whether the listing is whole and all of it watched.
    fn list(&mut self) -> (Snapshot, bool) {
        #[cfg(test)]
        {
            self.listings += 1;
        }
        let mut snapshot = Snapshot::default();
        let opened = match open_dir(self.root.as_fd(), OUTPUTS_DIR) {
            Err(Errno::ENOENT) => {
                match mkdirat(
                    self.root.as_fd(),
                    OUTPUTS_DIR,
                    Mode::from_bits_truncate(0o755),
                ) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => tracing::warn!("cannot make {OUTPUTS_DIR}: {e}"),
                }
                open_dir(self.root.as_fd(), OUTPUTS_DIR)
            }
            opened => opened,
        };
        let dir = match opened {
            Ok(dir) => dir,
            Err(e) => {
                tracing::warn!("cannot open {OUTPUTS_DIR}: {e}");
                return (snapshot, false);
            }
        };
        let watching = match self.watch.as_ref().map(|w| w.directory(dir.as_fd())) {
            Some(Ok(())) => self.watch.as_ref(),
            Some(Err(e)) => {
                watch::unusable(e);
                None
            }
            None => None,
        };
        let mut scan = Scan {
            watch: watching,
            budget: MAX_SCANNED,
            found: &mut snapshot.0,
        };
        scan.dir(dir, "", 1);
        // Watched from the directory to its last entry, or given up on.
        let watched = scan.watch.is_some();
        let whole = watched && scan.budget > 0;
        if !watched {
            self.watch = None;
        }
        (snapshot, whole)
    }

    /// [`Workspace::changed`] from `before` to a snapshot taken now.
    pub fn changed_since(&mut self, before: &Snapshot) -> (Vec<Output>, u64) {
        let after = self.snapshot();
        self.changed(before, &after)
    }

    /// The outputs that are new or changed in `after` compared with
    /// `before`, sorted by path, at most [`MAX_OUTPUTS_LISTED`], and how many
    /// more there are.
    fn changed(&self, before: &Snapshot, after: &Snapshot) -> (Vec<Output>, u64) {
        let fresh: Vec<(&String, &Stamp)> = after
            .0
            .iter()
            .filter(|(path, stamp)| before.0.get(*path) != Some(stamp))
            .collect();
        let more = fresh.len().saturating_sub(MAX_OUTPUTS_LISTED) as u64;
        let outputs = fresh
            .into_iter()
            .take(MAX_OUTPUTS_LISTED)
            .map(|(path, stamp)| Output {
                path: path.clone(),
                size: stamp.size,
                mime: files::mime_type(path, &self.head(path)).to_owned(),
            })
            .collect();
        (outputs, more)
    }

    /// The first bytes of an output (empty when it cannot be read).
    fn head(&self, path: &str) -> Vec<u8> {
        let mut head = vec![0; SNIFF_BYTES];
        match self.open_output(path) {
            Ok((file, _)) => {
                let n = file.read_at(&mut head, 0).unwrap_or(0);
                head.truncate(n);
                head
            }
            Err(_) => Vec::new(),
        }
    }

    /// Part of the output file at `path` (relative to `outputs`).
    pub fn read(
        &self,
        id: u64,
        path: &str,
        offset: u64,
        max_bytes: u64,
    ) -> Result<FileReply, String> {
        let (file, size) = self.open_output(path)?;
        let want = max_bytes
            .min(MAX_READ_BYTES)
            .min(size.saturating_sub(offset));
        let mut data = vec![0; usize::try_from(want).unwrap_or(0)];
        let mut got = 0;
        while got < data.len() {
            match file.read_at(&mut data[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading it: {e}")),
            }
        }
        data.truncate(got);
        Ok(FileReply {
            id,
            path: path.to_owned(),
            size,
            offset,
            eof: offset + got as u64 >= size,
            data: proto::frame::encode_data(&data),
        })
    }

    /// Opens a regular output file for reading, by the path it was listed
    /// with (each component escaped, `files::escape_name`); its size.
    fn open_output(&self, path: &str) -> Result<(File, u64), String> {
        let parts = files::check_path(path).map_err(|e| e.to_string())?;
        let outputs = open_dir(self.root.as_fd(), OUTPUTS_DIR).map_err(|e| why(e, OUTPUTS_DIR))?;
        let (dirs, name) = parts.split_at(parts.len() - 1);
        let mut dir = outputs;
        for part in dirs {
            let raw = raw_name(part)?;
            dir = open_dir(dir.as_fd(), raw.as_os_str())
                .map_err(|e| dir_why(dir.as_fd(), e, part))?;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let raw = raw_name(name[0])?;
        let fd = openat(dir.as_fd(), raw.as_os_str(), flags, Mode::empty())
            .map_err(|e| why(e, name[0]))?;
        let stat = fstat(fd.as_fd()).map_err(|e| e.to_string())?;
        if !is_regular(&stat) {
            return Err("not a regular file".into());
        }
        Ok((File::from(fd), u64::try_from(stat.st_size).unwrap_or(0)))
    }
}

/// The name on disk of a listed path component: its escapes undone, and
/// still one plain name (not `.`, `..`, empty, nor holding `/` or NUL).
fn raw_name(part: &str) -> Result<std::ffi::OsString, String> {
    use std::os::unix::ffi::OsStringExt;
    let bytes =
        files::unescape_name(part).ok_or_else(|| format!("`{part}` is not a listed name"))?;
    if matches!(bytes.as_slice(), b"" | b"." | b"..") || bytes.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(format!("`{part}` is not a plain name"));
    }
    Ok(std::ffi::OsString::from_vec(bytes))
}

/// Opens the directory `name` in `parent`, refusing a symbolic link.
pub(crate) fn open_dir<P: ?Sized + nix::NixPath>(
    parent: BorrowedFd<'_>,
    name: &P,
) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(parent, name, flags, Mode::empty())
}

pub(crate) fn is_regular(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
}

/// A sentence for an error opening the directory `part` of `parent`: with
/// `O_NOFOLLOW`, a symbolic link there gives ENOTDIR.
pub(crate) fn dir_why(parent: BorrowedFd<'_>, e: Errno, part: &str) -> String {
    let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
    match nix::sys::stat::fstatat(parent, part, flags) {
        Ok(stat) if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => {
            why(Errno::ELOOP, part)
        }
        _ => why(e, part),
    }
}

/// A sentence for an error met at path component `part`.
pub(crate) fn why(e: Errno, part: &str) -> String {
    match e {
        Errno::ELOOP => format!("`{part}` is a symbolic link, which is never followed"),
        Errno::ENOTDIR => format!("`{part}` is not a directory"),
        Errno::ENOENT => format!("`{part}` does not exist"),
        Errno::EISDIR => format!("`{part}` is a directory"),
        Errno::ENOSPC | Errno::EDQUOT => "the workspace is full".into(),
        e => format!("`{part}`: {e}"),
    }
}

/// One listing of the outputs directory under way.
struct Scan<'a> {
    /// Where each entry is watched before it is read; `None` when nothing
    /// is, or an entry could not be (the listing goes on unwatched).
    watch: Option<&'a Watch>,
    /// How many more entries may be looked at.
    budget: usize,
    found: &'a mut BTreeMap<String, Stamp>,
}

impl Scan<'_> {
    /// Adds the regular files of `dir` (and of its subdirectories, down to
    /// [`files::MAX_PATH_DEPTH`]) to `found`, keyed by path under `outputs`.
    /// `dir` itself is watched already.
    fn dir(&mut self, dir: OwnedFd, prefix: &str, depth: usize) {
        let mut names: Vec<PathBuf> = Vec::new();
        // Fifteen entries of the longest name fit; `RawDir` reads on when done.
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut listing = RawDir::new(&dir, &mut buf);
        while let Some(Ok(entry)) = listing.next() {
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name != "." && name != ".." {
                names.push(PathBuf::from(name));
            }
        }
        names.sort();
        for name in names {
            if self.budget == 0 {
                return;
            }
            self.budget -= 1;
            // Before its state is read: a change after that is an event.
            if let Some(watch) = self.watch
                && let Err(e) = watch.entry(dir.as_fd(), name.as_os_str())
                && e != Errno::ENOENT
            {
                watch::unusable(e);
                self.watch = None;
            }
            // Every name is listed, escaped where it would not show as it is
            // (not UTF-8, control or bidirectional characters); a path too
            // long once escaped is listed too, and the launcher says it
            // cannot read it.
            let path = format!(
                "{prefix}{}",
                files::escape_name(name.as_os_str().as_bytes())
            );
            let Ok(stat) = nix::sys::stat::fstatat(
                dir.as_fd(),
                name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
            if kind == SFlag::S_IFREG {
                self.found.insert(path, Stamp::of(&stat));
            } else if kind == SFlag::S_IFDIR
                && depth < files::MAX_PATH_DEPTH
                && let Ok(sub) = open_dir(dir.as_fd(), name.as_os_str())
            {
                self.dir(sub, &format!("{path}/"), depth + 1);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A workspace in a fresh temporary directory.
    pub(crate) fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn outputs_that_changed_are_listed_and_read() {
        let (dir, mut ws) = workspace();
        let before = ws.snapshot();
        let outputs = dir.path().join("outputs");
        assert!(outputs.is_dir(), "the snapshot makes outputs/");
        std::fs::write(outputs.join("old.txt"), "old").unwrap();
        let before_second = ws.snapshot();
        std::fs::create_dir(outputs.join("sub")).unwrap();
        std::fs::write(outputs.join("sub/plot.png"), b"\x89PNG\r\n\x1a\n1234").unwrap();
        std::fs::write(outputs.join("data.csv"), "a,b\n").unwrap();
        symlink("/etc/passwd", outputs.join("passwd")).unwrap();
        let after = ws.snapshot();
        let (listed, more) = ws.changed(&before_second, &after);
        let names: Vec<(&str, &str, u64)> = listed
            .iter()
            .map(|o| (o.path.as_str(), o.mime.as_str(), o.size))
            .collect();
        assert_eq!(
            names,
            vec![
                ("data.csv", "text/csv", 4),
                ("sub/plot.png", "image/png", 12)
            ]
        );
        assert_eq!(more, 0);
        assert_eq!(
            ws.changed(&before, &after).0.len(),
            3,
            "old.txt is new since the first"
        );
        let reply = ws.read(5, "sub/plot.png", 8, 100).unwrap();
        assert_eq!(
            (reply.id, reply.size, reply.offset, reply.eof),
            (5, 12, 8, true)
        );
        assert_eq!(reply.bytes().unwrap(), b"1234");
        let part = ws.read(6, "data.csv", 0, 2).unwrap();
        assert_eq!((part.bytes().unwrap(), part.eof), (b"a,".to_vec(), false));
        let e = ws.read(7, "passwd", 0, 100).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(ws.read(8, "sub", 0, 1).is_err());
        assert!(ws.read(9, "../a.csv", 0, 1).is_err());
        assert!(
            ws.read(10, "missing", 0, 1)
                .unwrap_err()
                .contains("does not exist")
        );
    }

    #[test]
    fn every_output_is_listed_by_an_escaped_name_and_read_by_it() {
        use std::os::unix::ffi::OsStrExt;
        let (dir, mut ws) = workspace();
        let before = ws.snapshot();
        let names: [&[u8]; 4] = [b"new\nline", b"bad\xff", "rlo\u{202e}x".as_bytes(), b"a\\b"];
        for (i, name) in names.iter().enumerate() {
            let path = dir.path().join("outputs").join(OsStr::from_bytes(name));
            std::fs::write(path, vec![b'x'; i + 1]).unwrap();
        }
        let (listed, more) = ws.changed_since(&before);
        let paths: Vec<&str> = listed.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(
            paths,
            ["a\\\\b", "bad\\xff", "new\\x0aline", "rlo\\u{202e}x"]
        );
        assert_eq!(more, 0);
        for (path, size) in paths.iter().zip([4, 2, 1, 3]) {
            let reply = ws.read(1, path, 0, 100).unwrap();
            assert_eq!(reply.bytes().unwrap().len(), size, "{path}");
        }
        // An escape that names no plain file is refused.
        for bad in ["\\x2e\\x2e/x", "a\\x2fb", "\\x00", "\\q"] {
            assert!(ws.read(2, bad, 0, 1).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_listing_is_capped() {
        let (dir, mut ws) = workspace();
        let before = ws.snapshot();
        for i in 0..MAX_OUTPUTS_LISTED + 3 {
            std::fs::write(dir.path().join(format!("outputs/f{i:03}")), "x").unwrap();
        }
        let (listed, more) = ws.changed_since(&before);
        assert_eq!((listed.len(), more), (MAX_OUTPUTS_LISTED, 3));
        assert_eq!(listed[0].path, "f000");
    }

    #[test]
    fn a_listing_longer_than_one_read_of_the_directory_is_whole() {
        let (dir, mut ws) = workspace();
        ws.snapshot();
        // 100 entries of 203 bytes: several times the listing's buffer.
        let names: Vec<String> = (0..100)
            .map(|i| format!("{i:03}{}", "x".repeat(200)))
            .collect();
        for name in &names {
            std::fs::write(dir.path().join(OUTPUTS_DIR).join(name), "x").unwrap();
        }
        let listed: Vec<String> = ws.snapshot().0.into_keys().collect();
        assert_eq!(listed, names);
    }

    #[test]
    fn the_outputs_directory_is_made_when_missing_and_a_link_there_lists_nothing() {
        let (dir, mut ws) = workspace();
        let outputs = dir.path().join(OUTPUTS_DIR);
        assert!(ws.snapshot().0.is_empty());
        assert!(outputs.is_dir());
        std::fs::write(outputs.join("kept"), "x").unwrap();
        assert_eq!(ws.snapshot().0.len(), 1);
        std::fs::remove_file(outputs.join("kept")).unwrap();
        std::fs::remove_dir(&outputs).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        symlink(outside.path(), &outputs).unwrap();
        assert!(ws.snapshot().0.is_empty());
        assert!(outputs.is_symlink());
    }

    /// A listing of `dir`'s outputs by a workspace that knows nothing yet.
    fn fresh(dir: &Path) -> Snapshot {
        Workspace::open(dir).unwrap().snapshot()
    }

    #[test]
    fn a_listing_is_read_again_only_after_a_change() {
        let (dir, mut ws) = workspace();
        assert!(ws.watch.is_some(), "inotify works here");
        let empty = ws.snapshot();
        assert_eq!((ws.snapshot(), ws.listings), (empty.clone(), 1));
        let outputs = dir.path().join(OUTPUTS_DIR);
        std::fs::write(outputs.join("a"), "1").unwrap();
        let one = ws.snapshot();
        assert_eq!((one.0.len(), ws.listings), (1, 2));
        assert_eq!((ws.snapshot(), ws.listings), (one, 2));
        // Files written elsewhere in the workspace are no change.
        std::fs::write(dir.path().join("data.csv"), "x").unwrap();
        ws.snapshot();
        assert_eq!(ws.listings, 2);
        // Nor is reading an output.
        ws.read(1, "a", 0, 10).unwrap();
        ws.changed_since(&empty);
        assert_eq!(ws.listings, 2);
    }

    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "a test: its scenario reads best whole"
    )]
    fn every_change_a_listing_holds_is_seen() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, mut ws) = workspace();
        let outputs = dir.path().join(OUTPUTS_DIR);
        ws.snapshot();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "linked").unwrap();
        type Change<'a> = (&'a str, Box<dyn Fn(&Path)>);
        let changes: Vec<Change> = vec![
            (
                "a file made",
                Box::new(|o| std::fs::write(o.join("a"), "1").unwrap()),
            ),
            (
                "rewritten, same size",
                Box::new(|o| std::fs::write(o.join("a"), "2").unwrap()),
            ),
            (
                "its mode set",
                Box::new(|o| {
                    let mode = std::fs::Permissions::from_mode(0o600);
                    std::fs::set_permissions(o.join("a"), mode).unwrap();
                }),
            ),
            (
                "its time set back",
                Box::new(|o| {
                    let file = File::options().write(true).open(o.join("a")).unwrap();
                    file.set_modified(std::time::UNIX_EPOCH).unwrap();
                }),
            ),
            (
                "truncated",
                Box::new(|o| {
                    File::options()
                        .write(true)
                        .open(o.join("a"))
                        .unwrap()
                        .set_len(0)
                        .unwrap()
                }),
            ),
            (
                "renamed",
                Box::new(|o| std::fs::rename(o.join("a"), o.join("b")).unwrap()),
            ),
            (
                "a directory made with a file",
                Box::new(|o| {
                    std::fs::create_dir_all(o.join("d/e")).unwrap();
                    std::fs::write(o.join("d/e/f"), "deep").unwrap();
                }),
            ),
            (
                "a deep file written",
                Box::new(|o| std::fs::write(o.join("d/e/f"), "deeper").unwrap()),
            ),
            (
                "a file moved in",
                Box::new(|o| {
                    let outside = o.parent().unwrap().join("in");
                    std::fs::write(&outside, "moved").unwrap();
                    std::fs::rename(outside, o.join("d/in")).unwrap();
                }),
            ),
            (
                "a hard link made in from outside",
                Box::new(|o| {
                    std::fs::hard_link(o.parent().unwrap().join("elsewhere"), o.join("l")).unwrap()
                }),
            ),
            (
                "written through its other name",
                Box::new(|o| {
                    std::fs::write(o.parent().unwrap().join("elsewhere"), "LINKED").unwrap()
                }),
            ),
            (
                "a file removed",
                Box::new(|o| std::fs::remove_file(o.join("b")).unwrap()),
            ),
            (
                "a directory moved out",
                Box::new(|o| std::fs::rename(o.join("d"), o.parent().unwrap().join("d")).unwrap()),
            ),
            (
                "outputs moved away and made anew",
                Box::new(|o| {
                    std::fs::rename(o, o.parent().unwrap().join("old")).unwrap();
                    std::fs::create_dir(o).unwrap();
                    std::fs::write(o.join("new"), "n").unwrap();
                }),
            ),
            (
                "outputs a symbolic link",
                Box::new(|o| {
                    std::fs::remove_file(o.join("new")).unwrap();
                    std::fs::remove_dir(o).unwrap();
                    symlink(o.parent().unwrap().join("old"), o).unwrap();
                }),
            ),
            (
                "outputs a directory again",
                Box::new(|o| {
                    std::fs::remove_file(o).unwrap();
                    std::fs::create_dir(o).unwrap();
                    std::fs::write(o.join("back"), "b").unwrap();
                }),
            ),
        ];
        for (what, change) in changes {
            let listings = ws.listings;
            change(&outputs);
            let seen = ws.snapshot();
            assert_eq!(seen, fresh(dir.path()), "{what}");
            assert!(ws.listings > listings, "{what}: not read again");
        }
    }

    #[test]
    fn without_inotify_every_snapshot_reads_the_directory() {
        let (dir, mut ws) = workspace();
        ws.watch = None;
        let before = ws.snapshot();
        std::fs::write(dir.path().join("outputs/a"), "1").unwrap();
        let (listed, _) = ws.changed_since(&before);
        assert_eq!(listed.len(), 1);
        ws.snapshot();
        assert_eq!(ws.listings, 3);
    }

    #[test]
    fn a_listing_that_is_not_whole_is_not_kept() {
        let (dir, mut ws) = workspace();
        let outputs = dir.path().join(OUTPUTS_DIR);
        ws.snapshot();
        std::fs::remove_dir(&outputs).unwrap();
        symlink(dir.path(), &outputs).unwrap();
        ws.snapshot();
        ws.snapshot();
        assert_eq!(
            ws.listings, 3,
            "a link in place of outputs lists nothing, every time"
        );
        assert!(ws.watch.is_some());
    }
}
