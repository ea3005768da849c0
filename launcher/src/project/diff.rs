//! A session's project changes, read from its overlay's upper directory
//! against the live project (the lower), outside the jail: what the model
//! is told in one line and what the diff resource returns.
//!
//! Everything in the upper directory was written by the jail, whose
//! processes may still be running: it is read by file descriptor, one
//! directory at a time, never following a symlink (`O_NOFOLLOW` at every
//! step, on both sides: the host's project may hold symlinks pointing out
//! of it, which are compared as their targets, never read through), a
//! file opened only when it is still a regular file once open, and every
//! amount bounded ([`Bounds`]): entries walked, bytes read, the diff's
//! size. The overlay's own marks are read as the kernel writes them in a
//! user namespace (`userxattr`): a whiteout is a character device 0:0 (or
//! an empty file with `user.overlay.whiteout`), an opaque directory has
//! `user.overlay.opaque` = `y`. The jail cannot set either through the
//! overlay.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// How much one reading of the changes may take.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Entries looked at, both sides together.
    pub entries: usize,
    /// Bytes of file content read, both sides together.
    pub read_bytes: u64,
    /// A file larger than this is listed, not diffed.
    pub file_bytes: u64,
    /// Bytes of diff text kept.
    pub diff_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            entries: 20_000,
            read_bytes: 32 << 20,
            file_bytes: 1 << 20,
            diff_bytes: 4 << 20,
        }
    }
}

/// What one path became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Added,
    Deleted,
    Modified,
}

/// One changed path and its line counts (none for a binary or special
/// file, or one too large).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub kind: Kind,
    pub lines: Option<(usize, usize)>,
}

/// The changes of a layer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub files: Vec<Change>,
    /// The unified diff (text files; binary ones named), cut at
    /// [`Bounds::diff_bytes`].
    pub diff: String,
    /// Why the reading stopped short, if it did.
    pub cut: Option<String>,
}

impl Changes {
    /// `3 files changed, +12 -4` (`no changes` when there are none).
    pub fn summary(&self) -> String {
        if self.files.is_empty() && self.cut.is_none() {
            return "no changes".into();
        }
        let (plus, minus) = self
            .files
            .iter()
            .filter_map(|c| c.lines)
            .fold((0, 0), |(p, m), (a, d)| (p + a, m + d));
        let n = self.files.len();
        let mut line = format!(
            "{n} file{} changed, +{plus} -{minus}",
            if n == 1 { "" } else { "s" }
        );
        if let Some(cut) = &self.cut {
            let _ = write!(line, " (at least: {cut})");
        }
        line
    }
}

/// One side's node at a path, as read (never followed).
enum Node {
    Absent,
    /// A directory: on the upper side, the stack of directories at its
    /// path in each upper layer, newest first, down to the first that is
    /// opaque or above which the others are hidden; one elsewhere.
    Dir(Vec<OwnedFd>),
    /// A regular file's content, or `None` when too large or past the
    /// read budget (its size).
    File(Option<Vec<u8>>, u64),
    Symlink(Vec<u8>),
    /// A whiteout (upper side only).
    Whiteout,
    /// A device, fifo or socket.
    Special,
}

struct Walk {
    bounds: Bounds,
    entries: usize,
    read: u64,
    out: Changes,
}

/// The changes of the layer whose upper directories are `uppers` (newest
/// first: a session started over checkpoints has its own upper, then
/// theirs) over the project `lower`, all open directories, the uppers
/// read as the overlay merges them: an entry of a newer layer hides the older ones'
/// (a whiteout hides it), an opaque directory hides what is below it.
pub fn changes_over(uppers: Vec<OwnedFd>, lower: &OwnedFd, bounds: Bounds) -> Changes {
    let mut walk = Walk {
        bounds,
        entries: 0,
        read: 0,
        out: Changes::default(),
    };
    let (uppers, whole) = effective(uppers);
    walk.dir(&uppers, Some(lower), whole, &mut Vec::new());
    walk.out
}

/// The directories of a stack that are merged at one path: down to and
/// with the first opaque one, and whether there is one (then the lower's
/// entries not in them are gone too).
fn effective(mut stack: Vec<OwnedFd>) -> (Vec<OwnedFd>, bool) {
    match stack.iter().position(opaque) {
        Some(i) => {
            stack.truncate(i + 1);
            (stack, true)
        }
        None => (stack, false),
    }
}

const NOFOLLOW: OFlags = OFlags::NOFOLLOW.union(OFlags::CLOEXEC);

/// The names in directory `fd`, `.` and `..` left out, sorted.
fn names(fd: &OwnedFd, walk: &mut Walk) -> Vec<Vec<u8>> {
    // Dir reads its own descriptor of the directory (openat "."), so
    // `fd` is read again from the start each time.
    let Ok(dir) = rustix::fs::Dir::read_from(fd) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        walk.entries += 1;
        if walk.entries > walk.bounds.entries {
            walk.cut(format!("more than {} entries", walk.bounds.entries));
            break;
        }
        names.push(name.to_vec());
    }
    names.sort();
    names
}

/// What `name` in directory `dir` is. `upper`: whiteouts are read as such.
fn node(dir: &OwnedFd, name: &[u8], upper: bool, walk: &mut Walk) -> Node {
    let name = OsStr::from_bytes(name);
    let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return Node::Absent;
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Directory => {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | NOFOLLOW;
            match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => Node::Dir(vec![fd]),
                Err(_) => Node::Special,
            }
        }
        FileType::Symlink => match rustix::fs::readlinkat(dir, name, Vec::new()) {
            Ok(target) => Node::Symlink(target.into_bytes()),
            Err(_) => Node::Special,
        },
        FileType::CharacterDevice if upper && stat.st_rdev == 0 => Node::Whiteout,
        FileType::RegularFile => file(dir, name, upper, walk),
        _ => Node::Special,
    }
}

/// Whether the empty regular file open at `fd` (upper) is a whiteout
/// marked with the overlay's attribute.
pub(super) fn marked_whiteout(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 8];
    rustix::fs::fgetxattr(fd, "user.overlay.whiteout", &mut buf).is_ok()
}

/// A regular file, opened without following and without blocking (a fifo
/// put in its place is refused once open).
fn file(dir: &OwnedFd, name: &OsStr, upper: bool, walk: &mut Walk) -> Node {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | NOFOLLOW;
    let Ok(fd) = rustix::fs::openat(dir, name, flags, Mode::empty()) else {
        return Node::Special;
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
        return Node::Special;
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Node::Special;
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if upper && size == 0 && marked_whiteout(&fd) {
        return Node::Whiteout;
    }
    // A file too large to diff is listed, never read: it costs no budget.
    if size > walk.bounds.file_bytes {
        return Node::File(None, size);
    }
    if walk.read + size > walk.bounds.read_bytes {
        walk.cut(format!(
            "more than {} MiB read",
            walk.bounds.read_bytes >> 20
        ));
        return Node::File(None, size);
    }
    let mut content = Vec::new();
    let taken = std::fs::File::from(fd)
        .take(walk.bounds.file_bytes + 1)
        .read_to_end(&mut content);
    if taken.is_err() || content.len() as u64 > walk.bounds.file_bytes {
        return Node::File(None, size);
    }
    walk.read += content.len() as u64;
    Node::File(Some(content), size)
}

/// Whether directory `fd` (upper) is opaque: the lower's below it hidden.
pub(super) fn opaque(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 4];
    matches!(rustix::fs::fgetxattr(fd, "user.overlay.opaque", &mut buf), Ok(1) if buf[0] == b'y')
}

impl Walk {
    fn cut(&mut self, why: String) {
        self.out.cut.get_or_insert(why);
    }

    fn stopped(&self) -> bool {
        self.out.cut.is_some()
    }

    /// Upper directories `uppers` (newest first, merged) over lower
    /// directory `lower` at `path`; `whole`: the lower's entries not in
    /// the uppers are gone too (an opaque directory).
    fn dir(
        &mut self,
        uppers: &[OwnedFd],
        lower: Option<&OwnedFd>,
        whole: bool,
        path: &mut Vec<u8>,
    ) {
        let mut above: Vec<Vec<u8>> = Vec::new();
        for upper in uppers {
            above.extend(names(upper, self));
        }
        above.sort();
        above.dedup();
        for name in &above {
            if self.stopped() {
                return;
            }
            let len = path.len();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            let new = self.merged(uppers, name);
            let old = match lower {
                Some(lower) => node(lower, name, false, self),
                None => Node::Absent,
            };
            self.pair(new, old, path);
            path.truncate(len);
        }
        if let (true, Some(lower)) = (whole, lower) {
            for name in names(lower, self) {
                if self.stopped() || above.binary_search(&name).is_ok() {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&name);
                let old = node(lower, &name, false, self);
                self.pair(Node::Absent, old, path);
                path.truncate(len);
            }
        }
    }

    /// Entry `name` of the upper directories `uppers` as the overlay
    /// merges them: the newest layer's that has it; a directory with those
    /// of the older layers below it that are directories too, down to the
    /// first opaque one.
    fn merged(&mut self, uppers: &[OwnedFd], name: &[u8]) -> Node {
        let mut layers = uppers.iter();
        let found = layers
            .by_ref()
            .find_map(|upper| match node(upper, name, true, self) {
                Node::Absent => None,
                found => Some(found),
            });
        let Some(Node::Dir(mut stack)) = found else {
            return found.unwrap_or(Node::Absent);
        };
        if !stack.first().is_some_and(opaque) {
            for upper in layers {
                match node(upper, name, true, self) {
                    Node::Absent => {}
                    Node::Dir(below) => stack.extend(below),
                    _ => break,
                }
                if stack.last().is_some_and(opaque) {
                    break;
                }
            }
        }
        Node::Dir(stack)
    }

    /// The merged side `new` over the lower side `old` at `path`.
    fn pair(&mut self, new: Node, old: Node, path: &mut Vec<u8>) {
        match (new, old) {
            (Node::Dir(up), Node::Dir(low)) => {
                let (up, whole) = effective(up);
                self.dir(&up, low.first(), whole, path);
            }
            (Node::Dir(up), old) => {
                self.pair(Node::Absent, old, path);
                let (up, _) = effective(up);
                self.dir(&up, None, false, path);
            }
            (Node::Whiteout | Node::Absent, Node::Dir(low)) => {
                // Everything below is gone: the lower's tree, as deleted files.
                let Some(low) = low.first() else { return };
                for name in names(low, self) {
                    if self.stopped() {
                        return;
                    }
                    let len = path.len();
                    path.push(b'/');
                    path.extend_from_slice(&name);
                    let old = node(low, &name, false, self);
                    self.pair(Node::Absent, old, path);
                    path.truncate(len);
                }
            }
            (Node::Whiteout | Node::Absent, Node::Absent | Node::Whiteout) => {}
            (Node::Whiteout | Node::Absent, old) => self.file(path, None, Some(old)),
            (new, Node::Dir(low)) => {
                self.pair(Node::Absent, Node::Dir(low), path);
                self.file(path, Some(new), None);
            }
            (new, Node::Absent | Node::Whiteout) => self.file(path, Some(new), None),
            (new, old) => self.file(path, Some(new), Some(old)),
        }
    }

    /// One non-directory path: `new` over `old` (either may be missing).
    fn file(&mut self, path: &[u8], new: Option<Node>, old: Option<Node>) {
        let kind = match (&new, &old) {
            (Some(_), None) => Kind::Added,
            (None, _) => Kind::Deleted,
            (Some(_), Some(_)) => Kind::Modified,
        };
        let text = |node: &Option<Node>| -> Result<Option<String>, ()> {
            match node {
                None => Ok(None),
                Some(Node::File(Some(bytes), _)) if !bytes.contains(&0) => {
                    String::from_utf8(bytes.clone()).map(Some).map_err(|_| ())
                }
                Some(Node::Symlink(target)) => {
                    Ok(Some(format!("symlink -> {}\n", quoted(b"", target))))
                }
                _ => Err(()),
            }
        };
        let (a, b) = (quoted(b"a/", path), quoted(b"b/", path));
        let mut section = String::new();
        let lines = match (text(&old), text(&new)) {
            (Ok(before), Ok(after)) => {
                let (before, after) = (before.unwrap_or_default(), after.unwrap_or_default());
                if before == after && kind == Kind::Modified {
                    return;
                }
                let diff = similar::TextDiff::from_lines(&before, &after);
                let (mut plus, mut minus) = (0, 0);
                for change in diff.iter_all_changes() {
                    match change.tag() {
                        similar::ChangeTag::Insert => plus += 1,
                        similar::ChangeTag::Delete => minus += 1,
                        similar::ChangeTag::Equal => {}
                    }
                }
                let from = if kind == Kind::Added { "/dev/null" } else { &a };
                let to = if kind == Kind::Deleted {
                    "/dev/null"
                } else {
                    &b
                };
                let _ = writeln!(section, "diff --nsm {a} {b}");
                let _ = write!(section, "{}", diff.unified_diff().header(from, to));
                Some((plus, minus))
            }
            _ => {
                if let (Some(Node::File(Some(x), _)), Some(Node::File(Some(y), _))) = (&old, &new)
                    && x == y
                {
                    return;
                }
                let what = |node: &Option<Node>| match node {
                    None => "absent".to_owned(),
                    Some(Node::File(_, size)) => format!("{size} B"),
                    Some(Node::Symlink(_)) => "a symlink".to_owned(),
                    _ => "a special file".to_owned(),
                };
                let _ = writeln!(section, "diff --nsm {a} {b}");
                let _ = writeln!(
                    section,
                    "Binary or special files {a} ({}) and {b} ({}) differ",
                    what(&old),
                    what(&new)
                );
                None
            }
        };
        if self.out.diff.len() + section.len() > self.bounds.diff_bytes {
            self.cut(format!("a diff over {} MiB", self.bounds.diff_bytes >> 20));
        } else {
            self.out.diff.push_str(&section);
        }
        self.out.files.push(Change {
            path: path.to_vec(),
            kind,
            lines,
        });
    }
}

/// `prefix` and `path` as a diff names them, one token whatever the
/// bytes: as they are when all are printable ASCII other than space, `"`
/// and `\\`; otherwise in double quotes with C escapes (`\\n`, `\\t`,
/// `\\"`, `\\\\`, and octal for every other control byte and every byte
/// past ASCII: `\\303\\251`), the form git writes and GNU `patch` reads.
pub(super) fn quoted(prefix: &[u8], path: &[u8]) -> String {
    let whole = [prefix, path].concat();
    let plain = |b: &u8| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\');
    if whole.iter().all(plain) {
        return String::from_utf8_lossy(&whole).into_owned();
    }
    let mut out = String::from("\"");
    for &b in &whole {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b' ' => out.push(' '),
            b if plain(&b) => out.push(char::from(b)),
            b => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "diff_tests.rs"]
pub(super) mod tests;
