use std::os::unix::fs::{MetadataExt, PermissionsExt};

use nix::unistd::{Gid, Uid};

use super::*;

/// As root: the mount shows the owner's files as the jail's, another
/// owner's as the overflow id, and nothing can be written through it; as
/// another user it cannot be made.
#[test]
fn the_owner_shows_as_the_jail_and_nothing_is_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("p");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("mine"), "mine\n").unwrap();
    std::fs::write(project.join("theirs"), "theirs\n").unwrap();
    let jail = Ids {
        uid: Uid::from_raw(0x7000_0101),
        gid: Gid::from_raw(0x7000_0101),
    };
    if !nix::unistd::geteuid().is_root() {
        let refused = project_mount(&project, owner(&project).unwrap(), jail);
        assert!(refused.is_err(), "an idmapped mount made without root");
        return;
    }
    for (path, id) in [(&project, 4242), (&project.join("mine"), 4242)] {
        std::os::unix::fs::chown(path, Some(id), Some(id)).unwrap();
    }
    std::os::unix::fs::chown(project.join("theirs"), Some(4343), Some(4343)).unwrap();
    std::fs::set_permissions(project.join("mine"), std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(owner(&project).unwrap(), (4242, 4242));
    let mount = project_mount(&project, (4242, 4242), jail).unwrap();
    let seen = |name: &str| {
        let path = format!("/proc/self/fd/{}/{name}", mount.as_raw_fd());
        std::fs::symlink_metadata(path).unwrap()
    };
    assert_eq!(
        (seen("mine").uid(), seen("mine").gid()),
        (0x7000_0101, 0x7000_0101)
    );
    assert_eq!(seen(".").uid(), 0x7000_0101);
    assert_eq!(seen("theirs").uid(), 65534);
    let written = std::fs::OpenOptions::new()
        .append(true)
        .open(format!("/proc/self/fd/{}/mine", mount.as_raw_fd()));
    assert_eq!(
        written.map(drop).map_err(|e| e.raw_os_error()),
        Err(Some(libc::EROFS))
    );
    let made = std::fs::write(format!("/proc/self/fd/{}/new", mount.as_raw_fd()), "x");
    assert_eq!(made.map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)));
    assert_eq!(
        std::fs::read_to_string(project.join("mine")).unwrap(),
        "mine\n"
    );
    assert!(!project.join("new").exists());
}

/// Two threads making user namespaces at once (a session's jail and a warm
/// jail starting together): each one's waiting child is cloned with the
/// other thread's descriptors, the other's release pipe among them, and
/// must not keep it, or each child waits for the other forever and so do
/// both threads. As another user the namespaces cannot be made.
#[test]
fn namespaces_made_at_once_by_two_threads_all_finish() {
    if !nix::unistd::geteuid().is_root() {
        assert!(map_namespace((0, 0), (0x7000_0102, 0x7000_0102)).is_err());
        return;
    }
    let (done, finished) = std::sync::mpsc::channel();
    for thread in 0..2u32 {
        let done = done.clone();
        std::thread::spawn(move || {
            let to = 0x7000_0200 + thread;
            for _ in 0..400 {
                map_namespace((4242, 4242), (to, to)).unwrap();
            }
            let _ = done.send(thread);
        });
    }
    for _ in 0..2 {
        let finished = finished.recv_timeout(std::time::Duration::from_secs(60));
        assert!(
            finished.is_ok(),
            "the threads making namespaces are stuck: their children hold each other's pipe"
        );
    }
}
