use std::fs;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::*;

pub(in crate::project) fn open(dir: &Path) -> OwnedFd {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// A whiteout as the overlay makes it (a character device 0:0, which the
/// kernel lets any user make).
pub(in crate::project) fn whiteout(path: &Path) {
    nix::sys::stat::mknod(
        path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::empty(),
        0,
    )
    .unwrap();
}

fn read(upper: &Path, lower: &Path) -> Changes {
    changes(&open(upper), &open(lower), Bounds::default())
}

fn paths(changes: &Changes) -> Vec<(String, Kind)> {
    changes
        .files
        .iter()
        .map(|c| {
            (
                String::from_utf8_lossy(&c.path).into_owned(),
                c.kind.clone(),
            )
        })
        .collect()
}

/// The changes of one upper directory over `lower`.
pub(crate) fn changes(upper: &OwnedFd, lower: &OwnedFd, bounds: Bounds) -> Changes {
    changes_over(vec![rustix::io::dup(upper).unwrap()], lower, bounds)
}

/// A session started over a checkpoint: its own upper over the
/// checkpoint's, each hiding what is below it as the overlay does.
#[test]
fn a_stack_of_uppers_is_read_as_the_overlay_merges_it() {
    let t = tempfile::tempdir().unwrap();
    let [new, old, lower] = ["new", "old", "lower"].map(|d| t.path().join(d));
    for dir in [&new, &old, &lower] {
        fs::create_dir_all(dir.join("d")).unwrap();
    }
    fs::write(lower.join("kept"), "k\n").unwrap();
    fs::write(lower.join("gone"), "g\n").unwrap();
    fs::write(lower.join("d/low"), "l\n").unwrap();
    // The checkpoint deleted `gone`, changed `kept`, added `back` and `f`.
    whiteout(&old.join("gone"));
    fs::write(old.join("kept"), "k2\n").unwrap();
    fs::write(old.join("back"), "b\n").unwrap();
    fs::write(old.join("d/f"), "f\n").unwrap();
    // The session deleted `back`, changed `f` again and replaced `d`
    // whole (an opaque directory).
    whiteout(&new.join("back"));
    fs::write(new.join("d/g"), "g\n").unwrap();
    rustix::fs::setxattr(
        new.join("d"),
        "user.overlay.opaque",
        b"y",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let stack = [&new, &old].map(|d| open(d)).into_iter().collect();
    let changes = changes_over(stack, &open(&lower), Bounds::default());
    assert_eq!(
        paths(&changes),
        vec![
            ("d/g".into(), Kind::Added),
            ("d/low".into(), Kind::Deleted),
            ("gone".into(), Kind::Deleted),
            ("kept".into(), Kind::Modified),
        ]
    );
    // Without the opaque mark, the checkpoint's `d/f` shows through.
    rustix::fs::removexattr(new.join("d"), "user.overlay.opaque").unwrap();
    let stack = [&new, &old].map(|d| open(d)).into_iter().collect();
    let changes = changes_over(stack, &open(&lower), Bounds::default());
    let found = paths(&changes);
    assert!(found.contains(&("d/f".into(), Kind::Added)), "{found:?}");
    assert!(
        !found.iter().any(|(p, _)| p == "d/low" || p == "back"),
        "{found:?}"
    );
}

#[test]
fn edits_additions_and_whiteouts_are_read_as_the_merged_tree() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    fs::create_dir_all(lower.join("src")).unwrap();
    fs::create_dir_all(upper.join("src")).unwrap();
    fs::write(lower.join("src/main.c"), "int main() {\n  return 1;\n}\n").unwrap();
    fs::write(upper.join("src/main.c"), "int main() {\n  return 0;\n}\n").unwrap();
    fs::write(lower.join("README"), "hello\n").unwrap();
    whiteout(&upper.join("README"));
    fs::write(upper.join("NEW"), "a\nb\n").unwrap();
    let changes = read(&upper, &lower);
    assert_eq!(
        paths(&changes),
        vec![
            ("NEW".into(), Kind::Added),
            ("README".into(), Kind::Deleted),
            ("src/main.c".into(), Kind::Modified)
        ]
    );
    assert_eq!(changes.summary(), "3 files changed, +3 -2");
    assert!(
        changes.diff.contains("-  return 1;\n+  return 0;\n"),
        "{}",
        changes.diff
    );
    assert!(
        changes.diff.contains("--- /dev/null\n+++ b/NEW"),
        "{}",
        changes.diff
    );
}

#[test]
fn an_opaque_directory_hides_the_lower_one_and_a_whiteout_removes_a_tree() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    for d in ["gone/deep", "opaque"] {
        fs::create_dir_all(lower.join(d)).unwrap();
    }
    fs::write(lower.join("gone/deep/x"), "x\n").unwrap();
    fs::write(lower.join("opaque/old"), "old\n").unwrap();
    fs::create_dir_all(upper.join("opaque")).unwrap();
    fs::write(upper.join("opaque/new"), "new\n").unwrap();
    rustix::fs::setxattr(
        upper.join("opaque"),
        "user.overlay.opaque",
        b"y",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    whiteout(&upper.join("gone"));
    let changes = read(&upper, &lower);
    assert_eq!(
        paths(&changes),
        vec![
            ("gone/deep/x".into(), Kind::Deleted),
            ("opaque/new".into(), Kind::Added),
            ("opaque/old".into(), Kind::Deleted)
        ]
    );
}

#[test]
fn symlinks_are_compared_as_targets_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    fs::create_dir_all(&lower).unwrap();
    fs::create_dir_all(&upper).unwrap();
    let secret = t.path().join("secret");
    fs::write(&secret, "SECRET-CONTENT\n").unwrap();
    std::os::unix::fs::symlink(&secret, upper.join("link")).unwrap();
    // A directory symlink planted where the lower has a directory: the
    // walk must not descend through it.
    fs::create_dir_all(lower.join("d")).unwrap();
    fs::write(lower.join("d/f"), "f\n").unwrap();
    std::os::unix::fs::symlink(t.path(), upper.join("d")).unwrap();
    let changes = read(&upper, &lower);
    assert!(!changes.diff.contains("SECRET-CONTENT"), "{}", changes.diff);
    assert!(
        changes
            .diff
            .contains(&format!("+symlink -> {}", secret.display()))
    );
    assert_eq!(
        paths(&changes),
        vec![
            ("d/f".into(), Kind::Deleted),
            ("d".into(), Kind::Added),
            ("link".into(), Kind::Added)
        ]
    );
}

#[test]
fn binary_large_and_special_files_are_listed_not_diffed() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    fs::create_dir_all(&lower).unwrap();
    fs::create_dir_all(&upper).unwrap();
    fs::write(upper.join("bin"), b"\x00\x01\x02").unwrap();
    fs::write(upper.join("big"), vec![b'a'; 2 << 20]).unwrap();
    nix::unistd::mkfifo(&upper.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    fs::write(upper.join("weird\nname"), "x\n").unwrap();
    let changes = read(&upper, &lower);
    assert_eq!(changes.files.len(), 4);
    assert!(changes.files.iter().filter(|c| c.lines.is_none()).count() == 3);
    assert!(
        changes.diff.contains("\"b/weird\\nname\""),
        "{}",
        changes.diff
    );
    assert!(!changes.diff.contains("weird\nname"));
}

#[test]
fn the_walk_and_the_diff_are_bounded() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    fs::create_dir_all(&lower).unwrap();
    fs::create_dir_all(&upper).unwrap();
    for i in 0..50 {
        fs::write(upper.join(format!("f{i:02}")), "line\n".repeat(100)).unwrap();
    }
    let bounds = Bounds {
        entries: 10,
        ..Bounds::default()
    };
    let few = changes(&open(&upper), &open(&lower), bounds);
    assert!(few.files.len() <= 10);
    assert!(
        few.summary().contains("at least: more than 10 entries"),
        "{}",
        few.summary()
    );
    let bounds = Bounds {
        diff_bytes: 2000,
        ..Bounds::default()
    };
    let short = changes(&open(&upper), &open(&lower), bounds);
    assert!(short.diff.len() <= 2000);
    assert!(short.cut.is_some());
}

#[test]
fn a_file_too_large_to_diff_is_listed_without_cutting_the_reading() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    fs::create_dir_all(&lower).unwrap();
    fs::create_dir_all(&upper).unwrap();
    fs::write(upper.join("big"), vec![b'x'; 3000]).unwrap();
    let bounds = Bounds {
        file_bytes: 1000,
        read_bytes: 2000,
        ..Bounds::default()
    };
    let listed = changes(&open(&upper), &open(&lower), bounds);
    assert_eq!(listed.summary(), "1 file changed, +0 -0");
    assert!(
        listed.diff.contains("Binary or special files"),
        "{}",
        listed.diff
    );
}

#[test]
fn an_unchanged_copy_up_is_no_change() {
    let t = tempfile::tempdir().unwrap();
    let (upper, lower) = (t.path().join("upper"), t.path().join("lower"));
    fs::create_dir_all(&lower).unwrap();
    fs::create_dir_all(&upper).unwrap();
    fs::write(lower.join("same"), "same\n").unwrap();
    fs::write(upper.join("same"), "same\n").unwrap();
    let changes = read(&upper, &lower);
    assert_eq!(changes.summary(), "no changes");
}

/// Names of every kind a build or an agent can make (a newline, a tab, a
/// leading dash, a space, quotes, a backslash, bytes that are no UTF-8):
/// each section names its file in one token, no two names alike, and GNU
/// `patch -p1` makes exactly those files from the diff.
#[test]
fn hostile_names_are_quoted_one_token_each_and_patch_reads_them() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let (upper, lower, copy) = (
        t.path().join("upper"),
        t.path().join("lower"),
        t.path().join("copy"),
    );
    for dir in [&upper, &lower, &copy] {
        fs::create_dir_all(dir).unwrap();
    }
    let names: [&[u8]; 10] = [
        b"new\nline",
        b"tab\there",
        b"-rf",
        b"--- a",
        b"it's \"q\"",
        b"back\\slash",
        b"bad\xff",
        b"bad\xfe",
        b"caf\xc3\xa9",
        b"+++ b\n@@ -1 +1 @@",
    ];
    for (i, name) in names.iter().enumerate() {
        let path = upper.join(std::ffi::OsStr::from_bytes(name));
        fs::write(path, format!("{i}\n")).unwrap();
    }
    let changes = read(&upper, &lower);
    assert_eq!(changes.summary(), "10 files changed, +10 -0");
    for line in changes.diff.lines().filter(|l| l.starts_with("+++ ")) {
        let name = &line[4..];
        assert!(
            !name.contains(' ') || (name.starts_with('"') && name.ends_with('"')),
            "{line}"
        );
    }
    assert!(
        changes.diff.contains("+++ \"b/bad\\377\"\n"),
        "{}",
        changes.diff
    );
    assert!(changes.diff.contains("+++ \"b/bad\\376\"\n"));
    assert!(changes.diff.contains("+++ b/-rf\n"));
    assert!(
        changes.diff.contains("+++ \"b/it's \\\"q\\\"\"\n"),
        "{}",
        changes.diff
    );
    assert_eq!(
        changes
            .diff
            .lines()
            .filter(|l| l.starts_with("+++ "))
            .count(),
        10
    );
    let mut patch = std::process::Command::new("patch")
        .args(["-s", "-p1", "-d"])
        .arg(&copy)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    patch
        .stdin
        .take()
        .unwrap()
        .write_all(changes.diff.as_bytes())
        .unwrap();
    assert!(patch.wait().unwrap().success(), "{}", changes.diff);
    for (i, name) in names.iter().enumerate() {
        let path = copy.join(std::ffi::OsStr::from_bytes(name));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{i}\n"),
            "{path:?}"
        );
    }
    assert_eq!(fs::read_dir(&copy).unwrap().count(), names.len());
}
