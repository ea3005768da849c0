//! Tests of clone3 into a cgroup, against the host's cgroup v2 hierarchy
//! (unified, or hybrid's `unified` mount): the child starts in the cgroup
//! given, its stdio is the pipes, and an exec or setup that fails comes
//! back as its errno, with no child left.

use std::io::{Read, Write};
use std::os::fd::AsFd;

use super::*;

/// A new cgroup under this process' own v2 cgroup, or why there is none.
fn scratch_cgroup() -> Result<(std::path::PathBuf, String), String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 line in /proc/self/cgroup")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mount = mounts
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split(' ').nth(4))
        .ok_or("cgroup2 is not mounted")?;
    let name = format!("clone-test-{}", std::process::id());
    let dir = std::path::Path::new(mount)
        .join(path.trim_start_matches('/'))
        .join(&name);
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((dir, format!("{}/{name}", path.trim_end_matches('/'))))
}

fn wait(pid: u32) -> nix::sys::wait::WaitStatus {
    nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None).unwrap()
}

#[test]
fn a_wrapper_starts_in_its_cgroup_and_its_errors_come_back() {
    let (dir, path) = match scratch_cgroup() {
        Ok(made) => made,
        Err(why) => {
            // An unprivileged test on a host whose cgroups are not its own.
            assert_ne!(
                crate::wrapper::delegation::euid(),
                0,
                "root has a cgroup v2: {why}"
            );
            return;
        }
    };
    let fd = open_cgroup(&dir).unwrap();
    let env = [("PATH", OsStr::new("/usr/bin:/bin"))];
    let script = "cat /proc/self/cgroup; read x; echo got $x; echo err >&2".to_owned();
    let sh = Program::new("/bin/sh", &["-c".into(), script], env.into_iter()).unwrap();
    let started = match spawn_into(&sh, fd.as_fd(), &|| Ok(())) {
        Ok(started) => started,
        Err(Ok(Refused(e))) => panic!("the kernel refused clone3 into {}: {e}", dir.display()),
        Err(Err(e)) => panic!("not started: {e}"),
    };
    std::fs::File::from(started.stdin)
        .write_all(b"hi\n")
        .unwrap();
    let mut out = String::new();
    std::fs::File::from(started.stdout)
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    std::fs::File::from(started.stderr)
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(
        wait(started.pid),
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(started.pid as i32), 0)
    );
    assert!(out.contains(&format!("0::{path}\n")), "{out}");
    assert!(out.ends_with("got hi\n"), "{out}");
    assert_eq!(err, "err\n");
    // An exec that fails, and a setup that fails: their errno, nothing left.
    let missing = Program::new("/nonexistent/wrapper", &[], std::iter::empty()).unwrap();
    match spawn_into(&missing, fd.as_fd(), &|| Ok(())) {
        Err(Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
        other => panic!("{:?}", other.map(|s| s.pid)),
    }
    let refused = || Err(io::Error::from_raw_os_error(libc::EPERM));
    match spawn_into(&sh, fd.as_fd(), &refused) {
        Err(Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
        other => panic!("{:?}", other.map(|s| s.pid)),
    }
    let left = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    assert_eq!(left, "", "processes left in the cgroup");
    std::fs::remove_dir(&dir).unwrap();
}

/// A held child runs nothing until the parent's `forked` succeeded: when
/// it fails, the child ends before its setup, the error is the result and
/// the program never ran.
#[test]
fn a_held_child_waits_for_the_parent_and_ends_when_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let env = [("PATH", OsStr::new("/usr/bin:/bin"))];
    let script = format!("echo ran >{}; echo ran", mark.display());
    let sh = Program::new("/bin/sh", &["-c".into(), script], env.into_iter()).unwrap();
    let mut failing = || Err(io::Error::from_raw_os_error(libc::EROFS));
    match spawn_held(&sh, &|| Ok(()), &mut failing) {
        Err(Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::EROFS)),
        other => panic!("{:?}", other.map(|s| s.pid)),
    }
    assert!(
        !mark.exists(),
        "the held child ran though the parent failed"
    );
    let mut called = false;
    let mut letting_go = || {
        called = true;
        Ok(())
    };
    let started = match spawn_held(&sh, &|| Ok(()), &mut letting_go) {
        Ok(started) => started,
        Err(e) => panic!("not started: {:?}", e.map(|r| r.0)),
    };
    assert!(called);
    let mut out = String::new();
    std::fs::File::from(started.stdout)
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "ran\n");
    assert_eq!(
        wait(started.pid),
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(started.pid as i32), 0)
    );
    assert!(mark.exists());
}
