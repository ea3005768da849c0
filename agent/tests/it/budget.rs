//! jail-budget: the program it runs lives in a user namespace whose limits
//! it set, and cannot raise them, not even from a user namespace of its own
//! below (where it may write its own limits, the kernel still charges the
//! one above); its rlimits are lowered; a budget it cannot set, or a bad
//! flag, stops it before the program runs.

use std::process::Command;

const BUDGET: &str = env!("CARGO_BIN_EXE_jail-budget");

/// Python, under the budget: how many inotify instances it gets; whether
/// it may raise its namespace's limit; and the same from a user namespace
/// of its own, whose limit it does raise. One `key=value` a line.
const TAKE: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def take():
    fds = []
    while len(fds) < 1000:
        fd = libc.inotify_init1(0o2000000)
        if fd < 0:
            return len(fds), errno.errorcode[ctypes.get_errno()], fds
        fds.append(fd)
    return len(fds), 'none', fds
def write(path, value):
    try:
        with open(path, 'w') as f:
            f.write(value)
        return 'written'
    except OSError as e:
        return errno.errorcode[e.errno]
out = {'limit': open('/proc/sys/user/max_inotify_instances').read().strip(),
       'raise': write('/proc/sys/user/max_inotify_instances', '100')}
out['took'], out['stop'], fds = take()
for fd in fds:
    os.close(fd)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000) != 0:
    out['nested'] = 'unshare ' + errno.errorcode[ctypes.get_errno()]
else:
    write('/proc/self/setgroups', 'deny')
    write('/proc/self/uid_map', '%d %d 1' % (uid, uid))
    write('/proc/self/gid_map', '%d %d 1' % (gid, gid))
    out['nested_raise'] = write('/proc/sys/user/max_inotify_instances', '100')
    out['nested_took'], out['nested_stop'], _ = take()
out['sigpending'] = next(l.split()[3] for l in open('/proc/self/limits') if l.startswith('Max pending signals'))
for key, value in out.items():
    print('%s=%s' % (key, value))
"#;

/// jail-budget as a wrapper runs it: never as root (a root server's
/// wrappers run as uids of their own; uid 0 would keep every capability in
/// the namespace, so the test runs it as uid 65534 when it is root).
fn budget() -> Command {
    as_jail_uid(Command::new(BUDGET))
}

/// `command` as a jail's wrapper runs: as uid 65534 when the test is root.
fn as_jail_uid(command: Command) -> Command {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { nix::libc::geteuid() } != 0 {
        return command;
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    cmd.arg(command.get_program()).args(command.get_args());
    cmd
}

/// The stdout of a run that must have succeeded (its output shown when not).
fn succeeded(out: &std::process::Output) -> std::borrow::Cow<'_, str> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_program_lives_under_budgets_it_cannot_raise() {
    let out = budget()
        .args([
            "--sysctl",
            "max_inotify_instances=3",
            "--rlimit",
            "sigpending=7",
            "--",
            "/usr/bin/python3",
            "-c",
            TAKE,
        ])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let got: std::collections::HashMap<&str, &str> =
        stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let want = [
        ("limit", "3"),
        ("raise", "EACCES"),
        ("took", "3"),
        ("stop", "EMFILE"),
        ("nested_raise", "written"),
        ("nested_took", "3"),
        ("nested_stop", "EMFILE"),
        ("sigpending", "7"),
    ];
    for (key, value) in want {
        assert_eq!(got.get(key), Some(&value), "{key}: {stdout}");
    }
}

#[test]
fn the_program_starts_with_an_empty_environment() {
    let out = budget()
        .args([
            "--clear-env",
            "--",
            "/usr/bin/python3",
            "-c",
            "import os; print('secret=%s' % os.environ.get('SECRET', 'unset'))",
        ])
        .env("SECRET", "1")
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.lines().any(|l| l == "secret=unset"), "{stdout}");
}

#[test]
fn a_budget_that_cannot_be_set_or_a_bad_flag_runs_nothing() {
    for (args, want) in [
        (
            &["--sysctl", "max_nothing=1", "--", "/bin/echo", "ran"][..],
            "jail-budget: cannot write /proc/sys/user/max_nothing",
        ),
        (
            &["--rlimit", "nofile=4", "--", "/bin/echo", "ran"],
            "unknown rlimit `nofile`",
        ),
        (&["/bin/echo", "ran"], "no `--` before the program"),
    ] {
        let out = Command::new(BUDGET).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} ran the program");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    let out = Command::new(BUDGET)
        .args(["--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
}

/// Store paths of this machine to show: two directories and a file.
fn some_store_paths() -> Vec<std::path::PathBuf> {
    let entries = std::fs::read_dir("/nix/store")
        .expect("the store view needs /nix/store, as every Nix-built jail does");
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with(".lock") {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() && dirs.len() < 2 => dirs.push(path),
            Ok(m) if m.is_file() && !name.ends_with(".drv") && files.is_empty() => files.push(path),
            _ => {}
        }
        if dirs.len() == 2 && files.len() == 1 {
            break;
        }
    }
    assert!(
        dirs.len() == 2 && files.len() == 1,
        "no two directories and a file in /nix/store"
    );
    dirs.into_iter().chain(files).collect()
}

/// Python, in jail-budget's namespace: the view's names, whether a file
/// can be made there or in a shown directory, and the shown file's bytes.
const VIEW: &str = r"
import os, sys
view, shown_dir, shown_file = sys.argv[1:4]
print('names=' + ' '.join(sorted(os.listdir(view))))
for where in (view, os.path.join(view, os.path.basename(shown_dir))):
    try:
        open(os.path.join(where, 'new'), 'w')
        print('write=made')
    except OSError as e:
        print('write=' + os.strerror(e.errno))
same = open(os.path.join(view, os.path.basename(shown_file)), 'rb').read() == open(shown_file, 'rb').read()
print('same=%s' % same)
";

#[test]
fn the_store_view_shows_the_listed_paths_read_only_and_nothing_else() {
    let paths = some_store_paths();
    let dir = tempfile::tempdir().unwrap();
    let view = dir.path().join("view");
    std::fs::create_dir(&view).unwrap();
    let list = dir.path().join("paths");
    // The first path twice: shown once.
    let text: String = paths
        .iter()
        .chain(&paths[..1])
        .map(|p| format!("{}\n", p.display()))
        .collect();
    std::fs::write(&list, text).unwrap();
    for p in [dir.path(), &view, &list] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let out = budget()
        .arg("--store-view")
        .arg(&view)
        .arg("--store-paths")
        .arg(&list)
        .args(["--", "/usr/bin/python3", "-c", VIEW])
        .arg(&view)
        .args([&paths[0], &paths[2]])
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    let mut names: Vec<String> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        stdout,
        format!(
            "names={}\nwrite=Read-only file system\nwrite=Read-only file system\nsame=True\n",
            names.join(" ")
        )
    );
    // The caller's own mount table is left as it was.
    assert_eq!(std::fs::read_dir(&view).unwrap().count(), 0);
}

#[test]
fn a_store_view_of_a_path_outside_the_store_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("paths");
    std::fs::write(&list, "/etc\n").unwrap();
    let out = budget()
        .arg("--store-view")
        .arg(dir.path())
        .arg("--store-paths")
        .arg(&list)
        .args(["--", "/bin/echo", "ran"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr,
        format!(
            "jail-budget: {}: `/etc` is not a path of /nix/store; the jail does not start\n",
            list.display()
        )
    );
}

/// Python, under `--rlimit nproc=N`: its process limit, then how many
/// children it could fork (each waiting on a pipe) and what stopped it.
const FORKS: &str = r#"
import errno, os, resource
print('limit=%d/%d' % resource.getrlimit(resource.RLIMIT_NPROC))
r, w = os.pipe()
kids, stop = [], 'none'
while len(kids) < 64:
    try:
        pid = os.fork()
    except OSError as e:
        stop = errno.errorcode[e.errno]
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    kids.append(pid)
os.close(w)
for pid in kids:
    os.waitpid(pid, 0)
print('took=%d' % len(kids))
print('stop=%s' % stop)
"#;

#[test]
fn the_process_limit_counts_the_jails_processes_only() {
    // Twelve processes of the same uid outside, in a process group of the
    // test's own: set before the namespace, the limit would count them
    // and the program could not fork at all.
    let mut outside = as_jail_uid(Command::new("/bin/sh"));
    outside
        .args([
            "-c",
            "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 60 & done; echo up; wait",
        ])
        .stdout(std::process::Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut outside, 0);
    let mut outside = outside.spawn().unwrap();
    let mut up = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(outside.stdout.take().unwrap()),
        &mut up,
    )
    .unwrap();
    let out = budget()
        .args(["--rlimit", "nproc=6", "--", "/usr/bin/python3", "-c", FORKS])
        .output();
    let group = i32::try_from(outside.id()).unwrap();
    if group > 1 {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), nix::sys::signal::SIGKILL)
            .unwrap();
    }
    outside.wait().unwrap();
    let out = out.unwrap();
    let stdout = succeeded(&out);
    if proto::kernel::nproc_per_namespace() {
        // The program itself and five children: six processes of the uid
        // in the namespace.
        assert_eq!(stdout, "limit=6/6\ntook=5\nstop=EAGAIN\n");
    } else {
        // Left as it is before Linux 5.14.
        assert!(!stdout.starts_with("limit=6/6\n"), "{stdout}");
    }
}
