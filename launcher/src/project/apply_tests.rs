use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use super::*;
use crate::project::diff::tests::{changes, open, whiteout};

#[test]
fn edits_additions_and_whiteouts_become_the_projects_and_the_diff_is_then_empty() {
    let t = tempfile::tempdir().unwrap();
    let (upper, project) = (t.path().join("upper"), t.path().join("project"));
    fs::create_dir_all(project.join("src")).unwrap();
    fs::create_dir_all(project.join("old/deep")).unwrap();
    fs::write(project.join("src/main.py"), "print(1)\n").unwrap();
    fs::write(project.join("gone.txt"), "bye\n").unwrap();
    fs::write(project.join("old/deep/x"), "x\n").unwrap();
    fs::create_dir_all(upper.join("src")).unwrap();
    fs::create_dir_all(upper.join("new")).unwrap();
    fs::write(upper.join("src/main.py"), "print(2)\n").unwrap();
    fs::write(upper.join("new/tool.sh"), "echo hi\n").unwrap();
    fs::set_permissions(
        upper.join("new/tool.sh"),
        fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    symlink("src/main.py", upper.join("link")).unwrap();
    whiteout(&upper.join("gone.txt"));
    whiteout(&upper.join("old"));
    let applied = apply(&open(&upper), &open(&project)).unwrap();
    assert_eq!(
        fs::read_to_string(project.join("src/main.py")).unwrap(),
        "print(2)\n"
    );
    assert_eq!(
        fs::read_to_string(project.join("new/tool.sh")).unwrap(),
        "echo hi\n"
    );
    let mode = fs::metadata(project.join("new/tool.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "set-id bits dropped");
    assert_eq!(
        fs::read_link(project.join("link")).unwrap(),
        Path::new("src/main.py")
    );
    assert!(!project.join("gone.txt").exists());
    assert!(!project.join("old").exists());
    assert!(applied.skipped.is_empty());
    let left = changes(&open(&upper), &open(&project), diff::Bounds::default());
    assert_eq!(left.summary(), "no changes", "{}", left.diff);
    clear(&open(&upper)).unwrap();
    assert_eq!(fs::read_dir(&upper).unwrap().count(), 0);
}

#[test]
fn a_symlink_of_the_project_is_replaced_never_written_through() {
    let t = tempfile::tempdir().unwrap();
    let (upper, project, outside) = (
        t.path().join("upper"),
        t.path().join("project"),
        t.path().join("outside"),
    );
    fs::create_dir_all(&project).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("f"), "host\n").unwrap();
    // The project's own links out: a file and a directory.
    symlink(outside.join("f"), project.join("file")).unwrap();
    symlink(&outside, project.join("dir")).unwrap();
    fs::create_dir_all(upper.join("dir")).unwrap();
    fs::write(upper.join("dir/f"), "jail\n").unwrap();
    fs::write(upper.join("file"), "jail\n").unwrap();
    apply(&open(&upper), &open(&project)).unwrap();
    assert_eq!(fs::read_to_string(outside.join("f")).unwrap(), "host\n");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
    assert!(project.join("dir").symlink_metadata().unwrap().is_dir());
    assert_eq!(fs::read_to_string(project.join("dir/f")).unwrap(), "jail\n");
    assert!(project.join("file").symlink_metadata().unwrap().is_file());
}

#[test]
fn special_files_are_left_out_and_named() {
    let t = tempfile::tempdir().unwrap();
    let (upper, project) = (t.path().join("upper"), t.path().join("project"));
    fs::create_dir_all(&upper).unwrap();
    fs::create_dir_all(&project).unwrap();
    nix::unistd::mkfifo(
        &upper.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let applied = apply(&open(&upper), &open(&project)).unwrap();
    assert_eq!(applied.skipped, ["pipe"]);
    assert!(!project.join("pipe").exists());
}
