//! Files passed in (`proto::frame`: `put`, then `exec`'s `files`): their
//! bytes are staged in a fresh directory of the workspace as they come, so
//! they count against its size; the exec then checks every destination
//! before it moves any staged file into place, so a call writes all its
//! files or none.
//!
//! Every path is walked from the workspace's directory descriptor with
//! `O_NOFOLLOW` (files.rs): a symbolic link on the way, or in place of the
//! file, is refused, whatever user code planted there.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use proto::files::{self, MAX_FILES};
use proto::frame::{self, FileIn};

use crate::files::{dir_why, is_regular, open_dir, why};

/// The staged files of the next exec, and the first thing that went wrong
/// staging them.
#[derive(Default)]
pub struct Inbox {
    staged: Option<Staged>,
    /// The staged file's number and why it could not be written.
    failed: Option<(usize, String)>,
}

/// The staging directory, made fresh in the workspace's root.
struct Staged {
    dir: OwnedFd,
    name: String,
    /// The staged files by number, open for writing.
    files: Vec<Option<File>>,
}

/// Why an exec's files were refused; nothing of them was written.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// A file is at that path and the call did not say `replace`.
    Exists(String),
    /// The sentence names the file and says why.
    Bad(String),
}

impl Inbox {
    /// Appends `data` (base64) to staged file number `file`; a failure is
    /// kept for the exec, and the puts after it are dropped.
    pub fn put(&mut self, root: BorrowedFd<'_>, file: usize, data: &str) {
        if self.failed.is_some() {
            return;
        }
        if let Err(why) = self.append(root, file, data) {
            self.failed = Some((file, why));
            self.clear(root);
        }
    }

    fn append(&mut self, root: BorrowedFd<'_>, file: usize, data: &str) -> Result<(), String> {
        if file >= MAX_FILES {
            return Err(format!("more than {MAX_FILES} files passed in"));
        }
        let bytes = frame::decode_data(data).map_err(|e| e.to_string())?;
        let staged = match &mut self.staged {
            Some(staged) => staged,
            None => self.staged.insert(Staged::make(root)?),
        };
        staged.file(file)?.write_all(&bytes).map_err(|e| {
            match e.raw_os_error().map(Errno::from_raw) {
                Some(e @ (Errno::ENOSPC | Errno::EDQUOT)) => why(e, ""),
                _ => format!("writing it: {e}"),
            }
        })
    }

    /// Moves the staged files to `list`'s paths (file number i to
    /// `list[i]`), after checking every one; the staging directory is gone
    /// afterwards, whatever the outcome.
    pub fn place(&mut self, root: BorrowedFd<'_>, list: &[FileIn]) -> Result<(), Refused> {
        let placed = self.check_and_place(root, list);
        self.failed = None;
        self.clear(root);
        placed
    }

    fn check_and_place(&mut self, root: BorrowedFd<'_>, list: &[FileIn]) -> Result<(), Refused> {
        if list.len() > MAX_FILES {
            return Err(Refused::Bad(format!(
                "{} files passed in, more than {MAX_FILES}",
                list.len()
            )));
        }
        let named = |i: usize| list.get(i).map_or(format!("file {i}"), |f| f.path.clone());
        if let Some((i, why)) = &self.failed {
            return Err(Refused::Bad(format!("`{}`: {why}", named(*i))));
        }
        for (i, file) in list.iter().enumerate() {
            if list[..i].iter().any(|f| f.path == file.path) {
                return Err(Refused::Bad(format!("`{}`: it is given twice", file.path)));
            }
            check(root, file)?;
        }
        if list.is_empty() {
            return Ok(());
        }
        let staged = match &mut self.staged {
            Some(staged) => staged,
            None => self
                .staged
                .insert(Staged::make(root).map_err(Refused::Bad)?),
        };
        for (i, file) in list.iter().enumerate() {
            staged
                .file(i)
                .map_err(|why| Refused::Bad(format!("`{}`: {why}", file.path)))?;
        }
        for (i, file) in list.iter().enumerate() {
            let written = list[..i].iter().map(|f| format!("`{}`", f.path));
            let written: Vec<String> = written.collect();
            staged.move_to(root, i, file).map_err(|why| {
                let before = match written.is_empty() {
                    true => String::new(),
                    false => format!(" ({} written before it)", written.join(", ")),
                };
                Refused::Bad(format!("`{}`: {why}{before}", file.path))
            })?;
        }
        Ok(())
    }

    /// Removes the staging directory and what it holds.
    fn clear(&mut self, root: BorrowedFd<'_>) {
        if let Some(staged) = self.staged.take() {
            staged.remove(root);
        }
    }
}

fn is_link(stat: &nix::sys::stat::FileStat) -> bool {
    use nix::sys::stat::SFlag;
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
}

/// Whether `file` may be written: its directories are directories (or
/// missing), and nothing is at its path, or a regular file that it may
/// replace.
fn check(root: BorrowedFd<'_>, file: &FileIn) -> Result<(), Refused> {
    let bad = |why: String| Refused::Bad(format!("`{}`: {why}", file.path));
    let parts = files::check_path(&file.path).map_err(|e| bad(e.to_string()))?;
    let (dirs, name) = parts.split_at(parts.len() - 1);
    let mut dir: Option<OwnedFd> = None;
    for part in dirs {
        let parent = dir.as_ref().map_or(root, |d| d.as_fd());
        match open_dir(parent, *part) {
            Ok(opened) => dir = Some(opened),
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(bad(dir_why(parent, e, part))),
        }
    }
    let parent = dir.as_ref().map_or(root, |d| d.as_fd());
    match fstatat(parent, name[0], AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(bad(why(e, name[0]))),
        Ok(stat) if is_link(&stat) => Err(bad(why(Errno::ELOOP, name[0]))),
        Ok(stat) if !is_regular(&stat) => Err(bad(format!(
            "`{}` exists and is not a regular file",
            name[0]
        ))),
        Ok(_) if file.replace => Ok(()),
        Ok(_) => Err(Refused::Exists(file.path.clone())),
    }
}

impl Staged {
    /// Makes a fresh staging directory, `.nix-sandbox-in.N`, in `root`.
    fn make(root: BorrowedFd<'_>) -> Result<Self, String> {
        for n in 0..100 {
            let name = format!(".nix-sandbox-in.{n}");
            match mkdirat(root, name.as_str(), Mode::from_bits_truncate(0o700)) {
                Ok(()) => {}
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(format!("staging the files: {}", why(e, &name))),
            }
            let dir = open_dir(root, name.as_str())
                .map_err(|e| format!("staging the files: {}", why(e, &name)))?;
            return Ok(Self {
                dir,
                name,
                files: Vec::new(),
            });
        }
        Err("staging the files: no free staging directory name".into())
    }

    /// Staged file number `i`, made (empty) when missing.
    fn file(&mut self, i: usize) -> Result<&mut File, String> {
        if self.files.len() <= i {
            self.files.resize_with(i + 1, || None);
        }
        let slot = &mut self.files[i];
        if let Some(file) = slot {
            return Ok(file);
        }
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let name = i.to_string();
        let fd = openat(
            self.dir.as_fd(),
            name.as_str(),
            flags,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| format!("staging it: {}", why(e, &name)))?;
        Ok(slot.insert(File::from(fd)))
    }

    /// Moves staged file `i` to `file.path`, making its directories; onto
    /// a file there only when `file.replace`.
    fn move_to(&mut self, root: BorrowedFd<'_>, i: usize, file: &FileIn) -> Result<(), String> {
        let parts = files::check_path(&file.path).map_err(|e| e.to_string())?;
        let (dirs, name) = parts.split_at(parts.len() - 1);
        let mut dir: Option<OwnedFd> = None;
        for part in dirs {
            let parent = dir.as_ref().map_or(root, |d| d.as_fd());
            match mkdirat(parent, *part, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(why(e, part)),
            }
            dir = Some(open_dir(parent, *part).map_err(|e| dir_why(parent, e, part))?);
        }
        let parent = dir.as_ref().map_or(root, |d| d.as_fd());
        let flags = match file.replace {
            true => RenameFlags::empty(),
            false => RenameFlags::RENAME_NOREPLACE,
        };
        let staged = i.to_string();
        renameat2(self.dir.as_fd(), staged.as_str(), parent, name[0], flags).map_err(
            |e| match e {
                Errno::EEXIST => format!("`{}` was made meanwhile", name[0]),
                e => why(e, name[0]),
            },
        )?;
        self.files[i] = None;
        Ok(())
    }

    /// Unlinks what is left staged, then the directory (in `root`).
    fn remove(self, root: BorrowedFd<'_>) {
        for (i, file) in self.files.iter().enumerate() {
            if file.is_some() {
                let name = i.to_string();
                let _ = unlinkat(self.dir.as_fd(), name.as_str(), UnlinkatFlags::NoRemoveDir);
            }
        }
        if let Err(e) = unlinkat(root, self.name.as_str(), UnlinkatFlags::RemoveDir) {
            tracing::warn!("cannot remove {}: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    use crate::files::Workspace;
    use crate::files::tests::workspace;

    fn file(path: &str, replace: bool) -> FileIn {
        FileIn {
            path: path.into(),
            replace,
        }
    }

    /// Puts `contents` (file i gets contents[i]) and places them at `paths`.
    fn pass(ws: &Workspace, files: &[(&str, &[u8], bool)]) -> Result<(), Refused> {
        let mut inbox = Inbox::default();
        for (i, (_, content, _)) in files.iter().enumerate() {
            for chunk in content.chunks(3) {
                inbox.put(ws.root(), i, &frame::encode_data(chunk));
            }
        }
        let list: Vec<FileIn> = files.iter().map(|(p, _, r)| file(p, *r)).collect();
        inbox.place(ws.root(), &list)
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn files_are_written_with_their_directories_and_replaced_only_when_asked() {
        let (dir, ws) = workspace();
        let every: Vec<u8> = (0..=255).collect();
        pass(
            &ws,
            &[
                ("a.bin", &every, false),
                ("in/deep/b.txt", b"b", false),
                ("e", b"", false),
            ],
        )
        .unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.bin")).unwrap(), every);
        assert_eq!(
            std::fs::read(dir.path().join("in/deep/b.txt")).unwrap(),
            b"b"
        );
        assert_eq!(std::fs::read(dir.path().join("e")).unwrap(), b"");
        // Nothing staged is left behind.
        assert_eq!(names(dir.path()), ["a.bin", "e", "in"]);
        // A file there: refused, and nothing of the call is written.
        let refused = pass(&ws, &[("new", b"n", false), ("a.bin", b"1", false)]);
        assert_eq!(refused, Err(Refused::Exists("a.bin".into())));
        assert_eq!(names(dir.path()), ["a.bin", "e", "in"]);
        assert_eq!(std::fs::read(dir.path().join("a.bin")).unwrap(), every);
        // Replaced when the file says so.
        pass(&ws, &[("new", b"n", false), ("a.bin", b"1", true)]).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.bin")).unwrap(), b"1");
        assert_eq!(names(dir.path()), ["a.bin", "e", "in", "new"]);
    }

    #[test]
    fn bad_data_and_bad_paths_write_nothing() {
        let (dir, ws) = workspace();
        let mut inbox = Inbox::default();
        inbox.put(ws.root(), 0, "AA==");
        inbox.put(ws.root(), 1, "not base64!");
        let e = inbox.place(ws.root(), &[file("a", false), file("b", false)]);
        let Err(Refused::Bad(e)) = e else {
            panic!("{e:?}")
        };
        assert!(e.starts_with("`b`: "), "{e}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        for bad in ["../x", "/etc/x", "a//b", "", "a\nb"] {
            let e = pass(&ws, &[("ok", b"x", false), (bad, b"x", false)]);
            assert!(matches!(e, Err(Refused::Bad(_))), "{bad}: {e:?}");
        }
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        let e = pass(&ws, &[("d", b"x", false), ("d", b"y", false)]);
        assert!(
            matches!(e, Err(Refused::Bad(ref m)) if m.contains("given twice")),
            "{e:?}"
        );
        let many: Vec<FileIn> = (0..=MAX_FILES)
            .map(|i| file(&format!("f{i}"), false))
            .collect();
        let e = Inbox::default().place(ws.root(), &many);
        assert!(
            matches!(e, Err(Refused::Bad(ref m)) if m.contains("more than 20")),
            "{e:?}"
        );
        // A directory in the way, replace or not.
        std::fs::create_dir(dir.path().join("dir")).unwrap();
        let e = pass(&ws, &[("dir", b"x", true)]);
        assert!(
            matches!(e, Err(Refused::Bad(ref m)) if m.contains("not a regular file")),
            "{e:?}"
        );
    }

    #[test]
    fn symbolic_links_are_never_followed() {
        let (dir, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join("link")).unwrap();
        symlink(outside.path().join("target"), dir.path().join("file-link")).unwrap();
        let e = pass(&ws, &[("link/x", b"escape", true)]);
        assert!(
            matches!(e, Err(Refused::Bad(ref m)) if m.contains("`link` is a symbolic link")),
            "{e:?}"
        );
        let e = pass(&ws, &[("file-link", b"escape", true)]);
        assert!(
            matches!(e, Err(Refused::Bad(ref m)) if m.contains("symbolic link")),
            "{e:?}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
