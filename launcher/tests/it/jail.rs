//! What a jail's processes are on the host, and the parts of the kernel a
//! uid reaches whatever its capabilities: the jail never runs as host uid
//! 0 (procfs grants global root's powers by uid), a root server gives its
//! jails' user a home of its own, /proc/sys and its like are read-only in
//! every jail (through a server started as the test runs, root here, and
//! one started as uid 65534), and no process holding the jail's uid can
//! raise the limits of the run's cgroup.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

/// The unprivileged user the tests switch to (and root's jails run as).
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A manifest every user can read (the server as [`NOBODY`] reads it).
fn readable(manifest: Manifest) -> Manifest {
    let dir = manifest.path.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&manifest.path, std::fs::Permissions::from_mode(0o644)).unwrap();
    manifest
}

/// The fixture server started as [`NOBODY`] through setpriv.
async fn server_as_nobody(manifest: Manifest) -> Server {
    let id = NOBODY.to_string();
    Server::start_as(
        vec![readable(manifest)],
        &[
            "setpriv",
            &format!("--reuid={id}"),
            &format!("--regid={id}"),
            "--clear-groups",
        ],
    )
    .await
}

/// The real, effective, saved and file-system uids of `pid` (`Uid:` in
/// /proc/PID/status, as the host sees them).
fn uids(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect(),
    )
}

/// Every process of a marked run or session: its host uids.
fn uids_of(mark: &str) -> Vec<(u32, Vec<u32>)> {
    pids_with(mark)
        .into_iter()
        .filter_map(|pid| Some((pid, uids(pid)?)))
        .collect()
}

/// The uid the server's jails must have on the host: [`NOBODY`] when
/// it runs as root, else its own.
fn jail_uid(server_uid: u32) -> u32 {
    if server_uid == 0 { NOBODY } else { server_uid }
}

#[tokio::test]
async fn runs_and_sessions_never_run_as_host_root() {
    let mark = marker("uid");
    let m = marked("python", &mark, 30);
    let s = Server::start(vec![m]).await;
    let want = jail_uid(nix::unistd::geteuid().as_raw());
    // A run: its wrapper, bubblewrap and the interpreter, while it sleeps.
    let run = s.run("python", "import time; time.sleep(3); print('done')");
    let look = async {
        // bubblewrap and the interpreter, once the code runs.
        let mut seen = Vec::new();
        eventually(|| {
            seen = uids_of(&mark);
            seen.len() >= 2
        })
        .await;
        seen
    };
    let (r, seen) = tokio::join!(run, look);
    assert_eq!(text(&r), "done\n", "{r:?}");
    assert!(seen.len() >= 2, "the run's processes: {seen:?}");
    for (pid, ids) in &seen {
        assert!(
            ids.iter().all(|&id| id == want),
            "process {pid} of a run has uids {ids:?}, not {want}: {}",
            s.stderr()
        );
    }
    // A session: its jail lives between calls.
    let session_mark = marker("uid-session");
    let s = Server::start(vec![sessions_marked(&session_mark, 30)]).await;
    let r = s.session("python", "u", "print('one')").await;
    assert_eq!(text(&r), "one\n", "{r:?}");
    let seen = uids_of(&session_mark);
    assert!(seen.len() >= 3, "the session's processes: {seen:?}");
    for (pid, ids) in &seen {
        assert!(
            ids.iter().all(|&id| id == want),
            "process {pid} of a session has uids {ids:?}, not {want}"
        );
    }
}

/// Python that tries, from inside a jail, what only a process holding host
/// uid 0 or a writable /proc/sys could do, and prints what happened (JSON).
const PROC_ATTACKS: &str = include_str!("../../../checks/proc_attacks.py");

/// Runs [`PROC_ATTACKS`] in a run and a session of `s`; checks that every
/// attack failed and that /proc/sys still shows the jail's own namespaces.
async fn assert_proc_holds(s: &Server, who: &str) {
    for (how, r) in [
        ("run", s.run("python", PROC_ATTACKS).await),
        ("session", s.session("python", "proc", PROC_ATTACKS).await),
    ] {
        let out = text(&r);
        let got: Value = serde_json::from_str(out.lines().next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{who} {how}: {e}: {out}"));
        let refused = ["EROFS", "EACCES", "EPERM"];
        for sysctl in ["sysctl", "core_pattern"] {
            assert!(
                refused.contains(&got[sysctl].as_str().unwrap()),
                "{who} {how}: a global sysctl written back: {got}"
            );
        }
        let sysrq = got["sysrq"].as_str().unwrap();
        assert!(
            refused.contains(&sysrq) || sysrq == "ENOENT",
            "{who} {how}: /proc/sysrq-trigger: {got}"
        );
        assert!(
            ["EACCES", "EPERM", "ENOENT"].contains(&got["kpageflags"].as_str().unwrap()),
            "{who} {how}: /proc/kpageflags: {got}"
        );
        for path in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
            if path == "/proc/sys" || std::path::Path::new(path).exists() {
                assert_eq!(
                    got["mounts"][path], "ro",
                    "{who} {how}: {path} is not a read-only mount: {got}"
                );
            }
        }
        assert_eq!(got["hostname"], true, "{who} {how}: {got}");
        assert_eq!(
            got["interfaces"],
            serde_json::json!(["all", "default", "lo"]),
            "{who} {how}: /proc/sys/net shows another network namespace: {got}"
        );
    }
}

#[tokio::test]
async fn proc_sys_is_read_only_and_root_only_files_are_out_of_reach() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let who = if is_root() { "as root" } else { "as a user" };
    assert_proc_holds(&s, who).await;
}

#[tokio::test]
async fn proc_sys_is_read_only_for_an_unprivileged_server_too() {
    if !is_root() {
        // The server already runs unprivileged: the test above is this one.
        let s = Server::start(vec![Manifest::new(&template())]).await;
        return assert_proc_holds(&s, "as a user").await;
    }
    let s = server_as_nobody(Manifest::new(&template())).await;
    assert_proc_holds(&s, "as uid 65534").await;
}

/// The run cgroup directories of a process (v1: one per hierarchy; v2:
/// one), found from /proc/PID/cgroup: those the launcher made
/// (`nix-sandbox-mcp.PID/run-...` in v1, `run-...` in v2).
fn run_cgroups(pid: u32) -> Vec<PathBuf> {
    let Ok(own) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let leaf = path.rsplit('/').next().unwrap_or("");
        if !leaf.starts_with("run-") {
            continue;
        }
        let mount = if controllers.is_empty() {
            "/sys/fs/cgroup/unified".to_owned()
        } else {
            format!("/sys/fs/cgroup/{controllers}")
        };
        let dir = PathBuf::from(format!("{mount}{path}"));
        if dir.is_dir() {
            dirs.push(dir);
        }
    }
    dirs
}

/// Tries, as `uid`:`uid` with no groups, to write `value` into `file`;
/// true when it was written.
fn writes_as(uid: u32, file: &std::path::Path, value: &str) -> bool {
    std::process::Command::new("/bin/sh")
        .args(["-c", "printf '%s\\n' \"$2\" >\"$1\"", "sh"])
        .arg(file)
        .arg(value)
        .uid(uid)
        .gid(uid)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test]
async fn the_jails_uid_cannot_raise_the_limits_of_its_cgroup() {
    let mark = marker("cgroup");
    let s = Server::start(vec![sessions_marked(&mark, 30)]).await;
    let r = s.session("python", "c", "print('one')").await;
    assert_eq!(text(&r), "one\n", "{r:?}");
    let argv0 = format!("/run/agent-{mark}/agent");
    let agent = pids_with(&argv0)
        .into_iter()
        .find(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            cmdline.split(|&b| b == 0).next() == Some(argv0.as_bytes())
        })
        .expect("the session's agent");
    let dirs = run_cgroups(agent);
    if dirs.is_empty() {
        // No cgroup: the limits are rlimits, which no unprivileged process
        // raises. That is only so when the server said it has none.
        assert!(
            !is_root(),
            "root's session has no run cgroup: {}",
            s.stderr()
        );
        assert!(
            s.stderr().contains("cgroups: none usable"),
            "{}",
            s.stderr()
        );
        return;
    }
    let jail = uids(agent).unwrap()[0];
    let mut limits = 0;
    for dir in &dirs {
        for file in [
            "pids.max",
            "memory.max",
            "memory.swap.max",
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
        ] {
            let path = dir.join(file);
            if !path.exists() {
                continue;
            }
            limits += 1;
            let before = std::fs::read_to_string(&path).unwrap();
            assert!(
                !writes_as(jail, &path, "max") && !writes_as(jail, &path, "9223372036854771712"),
                "uid {jail} (the jail's) raised {}",
                path.display()
            );
            assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
        }
        let child = dir.join(format!("nsm-test-{}", std::process::id()));
        let made = std::process::Command::new("/bin/mkdir")
            .arg(&child)
            .uid(jail)
            .gid(jail)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success();
        if made {
            let _ = std::fs::remove_dir(&child);
        }
        assert!(!made, "uid {jail} made a cgroup in {}", dir.display());
    }
    assert!(limits >= 2, "no memory and pids limit in {dirs:?}");
}

#[tokio::test]
async fn root_gives_its_jails_a_home_of_their_own_and_removes_it() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A wrapper that keeps its environment in the jail: HOME is the wrapper's.
    let mut m = template();
    m["environments"]["envdump"] = env_with_wrapper(wrappers().join("env-run").to_str().unwrap());
    m["environments"]["envdump"]["interpreter"] = serde_json::json!("bash");
    let s = Server::start_with(
        vec![Manifest::new(&m)],
        &["--allow-wrappers-outside-store"],
        &[("TMPDIR", tmp.path().to_str().unwrap()), ("HOME", "/root")],
    )
    .await;
    let r = s.run("envdump", "printf %s \"$HOME\"").await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let wrapper_home = text(&r);
    let homes: Vec<PathBuf> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    if is_root() {
        assert_eq!(homes.len(), 1, "{homes:?}");
        let home = &homes[0];
        let name = home.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("nix-sandbox-mcp-jails."), "{name}");
        let meta = std::fs::metadata(home).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
        assert_eq!(meta.mode() & 0o7777, 0o700);
        assert_eq!(Path::new(&wrapper_home), home.as_path());
        assert!(
            s.stderr().contains(&format!("home {}", home.display())),
            "{}",
            s.stderr()
        );
    } else {
        assert!(homes.is_empty(), "{homes:?}");
        assert_eq!(wrapper_home, "/root");
    }
    s.disconnect().await;
    assert!(
        eventually(|| std::fs::read_dir(tmp.path()).unwrap().count() == 0).await,
        "the jails' home is left in {}",
        tmp.path().display()
    );
}
