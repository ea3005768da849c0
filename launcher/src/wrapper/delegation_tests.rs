//! Tests of the delegation judgement: each way a cgroup is known to be
//! delegated, each way it is not, and the facts read from a directory.

use super::*;

fn facts() -> Facts {
    Facts {
        writable: true,
        marked: None,
        owner: 1000,
        parent_owner: Some(1000),
        unit_delegate: None,
        uid: 1000,
    }
}

#[test]
fn a_user_managers_scope_without_delegate_is_not_delegated() {
    // Everything under user@1000.service is owned by the user: writable
    // and owned like its parent, no attribute, not said by systemd.
    let why = facts().judge().unwrap_err();
    assert!(why.starts_with("not delegated"), "{why}");
    let said_no = Facts {
        unit_delegate: Some(false),
        ..facts()
    };
    assert_eq!(
        said_no.judge().unwrap_err(),
        "not delegated: its unit has Delegate=no"
    );
}

#[test]
fn a_mark_an_owner_or_the_unit_says_delegated() {
    let marked = Facts {
        marked: Some("1".into()),
        ..facts()
    };
    assert_eq!(marked.judge(), Ok("marked delegated by systemd"));
    let unmarked = Facts {
        marked: Some("0".into()),
        unit_delegate: Some(true),
        ..facts()
    };
    assert!(unmarked.judge().is_err(), "a mark of 0 is not overruled");
    let handed = Facts {
        parent_owner: Some(0),
        ..facts()
    };
    assert_eq!(handed.judge(), Ok("handed to this user by its manager"));
    let unit = Facts {
        unit_delegate: Some(true),
        ..facts()
    };
    assert_eq!(unit.judge(), Ok("its unit has Delegate=yes"));
}

#[test]
fn root_is_never_delegated_by_ownership_and_nothing_unwritable_is() {
    let root = Facts {
        owner: 0,
        parent_owner: Some(1),
        uid: 0,
        ..facts()
    };
    assert!(root.judge().is_err());
    let unwritable = Facts {
        writable: false,
        marked: Some("1".into()),
        unit_delegate: Some(true),
        ..facts()
    };
    assert!(unwritable.judge().unwrap_err().contains("not writable"));
}

/// A fake cgroup tree on disk: the owner, writability and the `user.`
/// attribute are read from the files (the unit is none: not a unit name).
#[test]
fn facts_are_read_from_the_directory() {
    use std::os::unix::ffi::OsStrExt;
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path().join("app");
    std::fs::create_dir(&dir).unwrap();
    for d in [tree.path(), dir.as_path()] {
        for file in ["cgroup.procs", "cgroup.subtree_control"] {
            std::fs::write(d.join(file), "").unwrap();
        }
    }
    let read = Facts::read(&dir, "/user.slice/app").unwrap();
    let uid = euid();
    assert_eq!(
        read,
        Facts {
            writable: true,
            marked: None,
            owner: uid,
            parent_owner: Some(uid),
            unit_delegate: None,
            uid,
        }
    );
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated strings and a one-byte value of that length.
    let set = unsafe {
        nix::libc::setxattr(
            path.as_ptr(),
            c"user.delegate".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    let read = Facts::read(&dir, "/user.slice/app").unwrap();
    assert_eq!(read.marked.as_deref(), Some("1"));
    assert_eq!(read.judge(), Ok("marked delegated by systemd"));
}
