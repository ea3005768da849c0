//! Hostile projects under a writable `/project` (docs/workbench.md), through
//! MCP with the fixture session jails on real bubblewrap and a real
//! overlay, as the test's user and as 65534 when run as root: symlinks
//! pointing out of the project (absolute, `../..`, and swapped in by the
//! host while a session lives), device files, fifos and sockets, a
//! 100,000-file tree, and names with newlines, tabs, leading dashes and
//! bytes that are no UTF-8. Nothing outside the project is read or written
//! through them, the diff shows links and special files without reading
//! them, the bounds say when they cut, and forks of such sessions finish.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use crate::fork::shell;
use crate::project::{checkpointed, chown_tree, diff, patch, project, root, snapshot};

/// Gives `project` to the server's user when the test is root and the
/// server 65534 (a real project is its user's: the overlay copies up only
/// files whose owner the jail's user namespace maps).
fn own(project: &Path, user: User) {
    if root() && user == User::Nobody {
        chown_tree(project, 65534);
    }
}

#[tokio::test]
async fn symlinks_out_of_the_project_reach_nothing_and_show_as_links() {
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, outside) = project(tmp.path());
        let secret = outside.join("secret");
        // `out` -> the outside directory (absolute) is the fixture's; an
        // absolute link to a file, relative ones climbing out, and one
        // climbing past the root.
        std::os::unix::fs::symlink(&secret, project.join("abs")).unwrap();
        std::os::unix::fs::symlink("../outside/secret", project.join("rel")).unwrap();
        std::os::unix::fs::symlink("../outside", project.join("reldir")).unwrap();
        std::os::unix::fs::symlink("../../../../../../../..", project.join("up")).unwrap();
        own(&project, user);
        let outside_before = snapshot(&outside);
        let s = checkpointed(user, &project).await;
        let out = shell(
            &s,
            "w",
            None,
            "cd /project; cat abs rel reldir/secret out/secret 2>&1; \
             echo w > abs; echo w > rel; echo w > reldir/planted; echo w > out/planted; \
             mkdir -p reldir/sub; echo w > up/tmp/escaped; echo w > up/planted; \
             sed -i s/one/ONE/ src/main.sh; echo attacked",
        )
        .await;
        assert!(out.contains("attacked"), "{user:?}: {out}\n{}", s.stderr());
        assert!(!out.contains("host secret"), "{user:?}: {out}");
        // The host swaps a directory the session changed, and a file it
        // did not, for links out of the project while the session lives.
        std::fs::rename(project.join("src"), tmp.path().join("src.moved")).unwrap();
        std::os::unix::fs::symlink("../outside", project.join("src")).unwrap();
        std::fs::remove_file(project.join("gone.txt")).unwrap();
        std::os::unix::fs::symlink(&secret, project.join("gone.txt")).unwrap();
        own(&project, user);
        let before = snapshot(&project);
        let out = shell(
            &s,
            "w",
            None,
            "cd /project; cat gone.txt src/secret 2>&1; echo x > gone.txt; \
             echo x > src/planted2; ls src; ln -s ../outside/secret planted-rel; \
             ln -sfn /etc/shadow rel; echo swapped",
        )
        .await;
        assert!(out.contains("swapped"), "{user:?}: {out}");
        assert!(!out.contains("host secret"), "{user:?}: {out}");
        // The session's own copy of src wins over the host's link; the
        // host's link is followed in the jail, where nothing is there.
        assert!(out.contains("main.sh"), "{user:?}: {out}");
        let d = diff(&s, "w").await;
        assert!(!d.contains("host secret"), "{user:?}: {d}");
        for want in [
            "-symlink -> ../outside\n",
            "+symlink -> ../outside/secret\n",
            "-symlink -> ../outside/secret\n+symlink -> /etc/shadow\n",
            "+++ b/src/main.sh\n",
            "+++ b/src/planted2\n",
        ] {
            assert!(d.contains(want), "{user:?}: {want}: {d}");
        }
        // A fork of it copies the links as links.
        let out = shell(
            &s,
            "f",
            Some("w"),
            "readlink /project/planted-rel; cat /project/planted-rel 2>&1",
        )
        .await;
        assert!(
            out.starts_with("../outside/secret\n") && !out.contains("host secret"),
            "{user:?}: {out}"
        );
        assert_eq!(snapshot(&project), before, "{user:?}: the project changed");
        assert_eq!(
            snapshot(&outside),
            outside_before,
            "{user:?}: outside the project changed"
        );
    }
}

/// A listener on a Unix socket at `path` (any user may connect), counting
/// the connections it gets.
fn listen(path: &Path) -> Arc<AtomicUsize> {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for _ in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    count
}

/// A fifo at `path` (mode 0666) and a host process's end holding it open
/// for reading: a write that reached it would be read there.
fn fifo(path: &Path) -> std::fs::File {
    let any = nix::sys::stat::Mode::from_bits_truncate(0o666);
    nix::unistd::mkfifo(path, any).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .unwrap()
}

#[tokio::test]
async fn devices_fifos_and_sockets_open_nothing_of_the_host() {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    use std::os::unix::fs::MetadataExt;
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, _) = project(tmp.path());
        let any = Mode::from_bits_truncate(0o666);
        if root() {
            // The kernel log (written to, read) and the disk the host's
            // root is on (read only: a write that passed would harm it).
            mknod(&project.join("kmsg"), SFlag::S_IFCHR, any, makedev(1, 11)).unwrap();
            let disk = std::fs::metadata("/").unwrap().dev();
            mknod(&project.join("disk"), SFlag::S_IFBLK, any, disk).unwrap();
        }
        let reader = fifo(&project.join("pipe"));
        own(&project, user);
        let connections = listen(&project.join("sock"));
        let before = snapshot(&project);
        let s = checkpointed(user, &project).await;
        let out = shell(
            &s,
            "d",
            None,
            "cd /project; for f in kmsg disk; do [ -e $f ] || continue; \
               if head -c 16 $f > /dev/null 2>&1; then echo read-$f; else echo refused-$f; fi; done; \
             [ -e kmsg ] && { (echo leak-from-the-jail > kmsg) 2>/dev/null && echo wrote-kmsg; }; \
             timeout 3 sh -c 'echo leak > pipe' && echo wrote-pipe; \
             python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); \
s.connect('/project/sock'); print('connected-sock')\" 2>&1 | tail -n 1; \
             mkfifo myfifo /workspace/wsfifo; mknod mydev c 1 11 2>/dev/null || echo no-mknod; \
             python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/project/mysock')\"; \
             chmod 600 pipe; echo special-done",
        )
        .await;
        assert!(
            out.contains("special-done"),
            "{user:?}: {out}\n{}",
            s.stderr()
        );
        for leak in [
            "read-kmsg",
            "read-disk",
            "wrote-kmsg",
            "wrote-pipe",
            "connected-sock",
        ] {
            assert!(!out.contains(leak), "{user:?}: {leak}: {out}");
        }
        if root() {
            assert!(
                out.contains("refused-kmsg") && out.contains("refused-disk"),
                "{user:?}: {out}"
            );
        }
        assert!(out.contains("no-mknod"), "{user:?}: {out}");
        assert_eq!(connections.load(Ordering::SeqCst), 0, "{user:?}: connected");
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut &reader, &mut got);
        assert!(got.is_empty(), "{user:?}: the host's fifo got {got:?}");
        // The diff names them without opening them, and the fifo the
        // session changed (its mode) does not hang it.
        assert!(out.contains("project: "), "{user:?}: {out}");
        let d = diff(&s, "d").await;
        for want in [
            "b/myfifo (a special file) differ",
            "b/mysock (a special file) differ",
            "a/pipe (a special file) and b/pipe (a special file) differ",
        ] {
            assert!(d.contains(want), "{user:?}: {want}: {d}");
        }
        // Forks and rollbacks of it finish, fifos and all (they are not
        // copied: docs/fork.md).
        let out = shell(&s, "e", Some("d"), "ls /project /workspace; echo forked").await;
        assert!(out.contains("forked"), "{user:?}: {out}");
        let out = shell(&s, "d", None, "echo more > /project/more").await;
        assert!(out.contains("checkpoint: d@2"), "{user:?}: {out}");
        let out = shell(&s, "d", Some("d@1"), "ls /project; echo rolled").await;
        assert!(
            out.contains("rolled") && !out.contains("more"),
            "{user:?}: {out}"
        );
        drop(s);
        assert_eq!(snapshot(&project), before, "{user:?}: the project changed");
    }
}

/// `count` empty files in `dirs` directories under `dir`.
fn tree(dir: &Path, dirs: usize, count: usize) {
    for d in 0..dirs {
        let sub = dir.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..count / dirs {
            std::fs::write(sub.join(format!("f{f:04}")), "").unwrap();
        }
    }
}

#[tokio::test]
async fn a_tree_of_100000_files_is_served_and_the_diff_says_where_it_was_cut() {
    for user in User::all() {
        // On a tmpfs where there is one: on the disk, making 100,000 files
        // while the last user's tree is deleted waits on the journal (23 s
        // here, minutes beside the other tests), which is not what is tested.
        let shm = Path::new("/dev/shm");
        let tmp = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .unwrap();
        let (project, _) = project(tmp.path());
        tree(&project.join("tree"), 100, 100_000);
        std::fs::set_permissions(project.join("tree"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        own(&project, user);
        let s = checkpointed(user, &project).await;
        // A session starts over it, and a build writes 25,000 files in it:
        // past the 20,000 entries the diff walks.
        let out = shell(
            &s,
            "w",
            None,
            "find /project/tree -type f | wc -l; mkdir /project/build && cd /project/build \
             && seq 1 25000 | xargs touch && echo built",
        )
        .await;
        assert!(out.starts_with("100000\nbuilt\n"), "{user:?}: {out}");
        assert!(
            out.contains(" (at least: more than 20000 entries) (diff: sandbox://w/project.diff)"),
            "{user:?}: {out}"
        );
        assert!(out.contains("checkpoint: w@1"), "{user:?}: {out}");
        let d = diff(&s, "w").await;
        assert!(
            d.lines()
                .next()
                .is_some_and(|l| l.starts_with("# project: ")
                    && l.ends_with(" (at least: more than 20000 entries)")),
            "{user:?}: {}",
            &d[..200.min(d.len())]
        );
        // The diff's own size bound: 6 text files of about 0.9 MiB each
        // make more than its 4 MiB.
        let out = shell(
            &s,
            "t",
            None,
            "for i in 1 2 3 4 5 6; do seq 1 150000 > /project/text$i; done; echo written",
        )
        .await;
        assert!(
            out.contains("written") && out.contains("(at least: a diff over 4 MiB)"),
            "{user:?}: {out}"
        );
        let d = diff(&s, "t").await;
        assert!(d.len() <= (4 << 20) + 200, "{user:?}: {} bytes", d.len());
        assert!(d.contains("+++ b/text1\n") && !d.contains("+++ b/text6\n"));
        // A fork and a rollback of the build finish; a fork deletes the
        // whole tree, which the diff lists up to its bound.
        let out = shell(
            &s,
            "f",
            Some("w"),
            "ls /project/build | wc -l; rm -rf /project/tree && echo deleted",
        )
        .await;
        assert!(
            out.starts_with("25000\ndeleted\n") && out.contains("started from w:"),
            "{user:?}: {out}"
        );
        assert!(
            out.contains("(at least: more than 20000 entries)"),
            "{user:?}: {out}"
        );
        let out = shell(&s, "w", None, "rm -r /project/build; echo x > /project/x").await;
        assert!(out.contains("checkpoint: w@2"), "{user:?}: {out}");
        let out = shell(
            &s,
            "r",
            Some("w@1"),
            "ls /project/build | wc -l; ls /project/tree | wc -l",
        )
        .await;
        assert!(out.starts_with("25000\n100\n"), "{user:?}: {out}");
        assert_eq!(
            std::fs::read_dir(project.join("tree")).unwrap().count(),
            100,
            "{user:?}"
        );
        assert!(!project.join("build").exists());
    }
}

/// Every byte string a name can hold and a diff could misread.
const NAMES: [&[u8]; 8] = [
    b"new\nline",
    b"tab\there",
    b"-rf",
    b"--- a",
    b"it's \"q\"",
    b"bad\xff",
    b"bad\xfe",
    b"+++ b\n@@ -1 +1 @@",
];

#[tokio::test]
async fn names_with_newlines_dashes_and_bad_bytes_are_unambiguous() {
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, _) = project(tmp.path());
        // The host's project holds such names too; the session edits them.
        for name in [&b"-n"[..], b"host\nnl"] {
            let path = project.join(OsStr::from_bytes(name));
            std::fs::write(&path, "old\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        }
        own(&project, user);
        let s = checkpointed(user, &project).await;
        // Each name written by printf from its bytes (octal escapes).
        let mut code = String::from("cd /project; ");
        for (i, name) in NAMES.iter().enumerate() {
            let octal: String = name.iter().map(|b| format!("\\{b:03o}")).collect();
            code.push_str(&format!("echo {i} > \"$(printf '{octal}x')\"; "));
        }
        code.push_str("echo named");
        // `$(...)` drops trailing newlines: each name ends in an `x`.
        let out = shell(&s, "n", None, &code).await;
        assert!(out.contains("named"), "{user:?}: {out}\n{}", s.stderr());
        assert!(
            out.contains("project: 8 files changed, +8 -0"),
            "{user:?}: {out}"
        );
        let out = shell(
            &s,
            "n",
            None,
            "cd /project; echo new > ./-n; echo new > \"$(printf 'host\\nnl')\"",
        )
        .await;
        assert!(
            out.contains("project: 10 files changed, +10 -2"),
            "{user:?}: {out}"
        );
        let d = diff(&s, "n").await;
        assert!(
            d.starts_with("# project: 10 files changed, +10 -2\n"),
            "{d}"
        );
        assert_eq!(d.lines().filter(|l| l.starts_with("+++ ")).count(), 10);
        assert!(d.contains("--- a/-n\n+++ b/-n\n"), "{d}");
        assert!(d.contains("+++ \"b/bad\\377x\"\n"), "{d}");
        // Applied with patch to a copy, it makes exactly those names.
        let copy = tmp.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        for name in [&b"-n"[..], b"host\nnl"] {
            std::fs::write(copy.join(OsStr::from_bytes(name)), "old\n").unwrap();
        }
        patch(&copy, &d);
        for (i, name) in NAMES.iter().enumerate() {
            let mut name = name.to_vec();
            name.push(b'x');
            let path: PathBuf = copy.join(OsStr::from_bytes(&name));
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                format!("{i}\n"),
                "{path:?}"
            );
        }
        for name in [&b"-n"[..], b"host\nnl"] {
            let path = copy.join(OsStr::from_bytes(name));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        }
        assert_eq!(
            std::fs::read_dir(&copy).unwrap().count(),
            NAMES.len() + 2,
            "{user:?}"
        );
    }
}

/// The shell code that tries the host's socket and fifo in the project,
/// then a write, printing what got through.
const REACH_HOST: &str = "cd /project; \
     timeout 3 sh -c 'echo leak > pipe' 2>/dev/null && echo wrote-pipe; \
     python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); \
s.connect('/project/sock'); print('connected-sock')\" 2>&1 | tail -n 1; \
     touch /project/x 2>&1 | grep -q 'Read-only file system' && echo refused-write; \
     cat edited; echo reach-done";

/// A read-only `/project` (the default, and a writable project's calls
/// without a session) shows the host's socket and fifo as files no one
/// listens on: a jail reaches neither a host program's socket nor its
/// fifo there, in a plain run or a session, and the host's edits are seen
/// by the next run.
#[tokio::test]
async fn a_read_only_project_reaches_no_host_socket_or_fifo() {
    for user in User::all() {
        for writable in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let (project, _) = project(tmp.path());
            let reader = fifo(&project.join("pipe"));
            std::fs::write(project.join("edited"), "first\n").unwrap();
            own(&project, user);
            let connections = listen(&project.join("sock"));
            let mut vars = vec![("PROJECT_DIR", project.to_str().unwrap())];
            if writable {
                vars.push(("NIX_SANDBOX_PROJECT_WRITABLE", "1"));
            }
            let s = Server::start_command(
                user.command(),
                vec![Manifest::new(&template())],
                &["--allow-wrappers-outside-store"],
                &vars,
            )
            .await;
            let mut calls = vec![serde_json::json!({"env": "shell", "code": REACH_HOST})];
            if !writable {
                calls
                    .push(serde_json::json!({"env": "shell", "session": "ro", "code": REACH_HOST}));
            }
            for (i, call) in calls.into_iter().enumerate() {
                let edit = format!("edit {i}\n");
                std::fs::write(project.join("edited"), &edit).unwrap();
                let out = text(&s.call(call.clone()).await);
                let what = format!("{user:?} writable={writable} {call}");
                assert!(out.contains("reach-done"), "{what}: {out}\n{}", s.stderr());
                assert!(!out.contains("wrote-pipe"), "{what}: {out}");
                assert!(!out.contains("connected-sock"), "{what}: {out}");
                assert!(out.contains("refused-write"), "{what}: {out}");
                assert!(out.contains(edit.trim()), "{what}: the host's edit: {out}");
                assert_eq!(connections.load(Ordering::SeqCst), 0, "{what}: connected");
                let mut got = Vec::new();
                let _ = std::io::Read::read_to_end(&mut &reader, &mut got);
                assert!(got.is_empty(), "{what}: the host's fifo got {got:?}");
            }
        }
    }
}
