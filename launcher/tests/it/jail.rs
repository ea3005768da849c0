//! What a jail's processes are on the host, and the parts of the kernel a
//! uid reaches whatever its capabilities: the jail never runs as host uid
//! 0 (procfs grants global root's powers by uid); under a root server each
//! jail runs as a uid of its own, from a block of the server's, and no
//! other host process can use its egress gate; a root server's runtime
//! files are root's and go with it; /proc/sys and its like are read-only
//! in every jail (through a server started as the test runs, root here,
//! and one started as uid 65534); and no process holding the jail's uid
//! can raise the limits of the run's cgroup.

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

/// The block a root server's jails' uids come from (uidblock.rs).
const BLOCKS: std::ops::RangeInclusive<u32> = 0x7000_0000..=0x7FFD_FFFF;

/// The one host uid of every process in `seen`; panics when they differ.
fn one_uid(seen: &[(u32, Vec<u32>)], what: &str) -> u32 {
    let all: std::collections::BTreeSet<u32> =
        seen.iter().flat_map(|(_, ids)| ids.clone()).collect();
    assert_eq!(all.len(), 1, "{what}'s processes have uids {seen:?}");
    all.into_iter().next().unwrap()
}

/// Whether `uid` may be a jail's of a server running as `server_uid`: its
/// own when it is a user; as root one of its block's, no user of the host.
fn jail_uid_ok(server_uid: u32, uid: u32) -> bool {
    if server_uid != 0 {
        return uid == server_uid;
    }
    BLOCKS.contains(&uid)
        && nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .unwrap()
            .is_none()
}

#[tokio::test]
async fn runs_and_sessions_never_run_as_host_root() {
    let mark = marker("uid");
    let m = marked("python", &mark, 30);
    let s = Server::start(vec![m]).await;
    let server_uid = nix::unistd::geteuid().as_raw();
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
    let run_uid = one_uid(&seen, "a run");
    assert!(
        jail_uid_ok(server_uid, run_uid),
        "a run's uid {run_uid}: {}",
        s.stderr()
    );
    // Sessions: their jails live between calls, each as its own uid.
    let session_mark = marker("uid-session");
    let s = Server::start(vec![sessions_marked(&session_mark, 30)]).await;
    let mut uids = Vec::new();
    for name in ["u", "v"] {
        let before: Vec<u32> = pids_with(&session_mark);
        let r = s.session("python", name, "print('one')").await;
        assert_eq!(text(&r), "one\n", "{r:?}");
        let seen: Vec<(u32, Vec<u32>)> = uids_of(&session_mark)
            .into_iter()
            .filter(|(pid, _)| !before.contains(pid))
            .collect();
        assert!(seen.len() >= 3, "session {name}'s processes: {seen:?}");
        let uid = one_uid(&seen, "a session");
        assert!(jail_uid_ok(server_uid, uid), "session {name}'s uid {uid}");
        uids.push(uid);
    }
    if server_uid == 0 {
        assert_ne!(uids[0], uids[1], "two sessions' jails share a uid");
        assert_eq!(uids[0] >> 16, uids[1] >> 16, "one server, one block");
    }
}

/// Two root servers at once take two blocks: no jail of one shares a uid
/// with a jail of the other.
#[tokio::test]
async fn two_root_servers_take_two_blocks() {
    if !is_root() {
        return;
    }
    let mut blocks = Vec::new();
    let mut servers = Vec::new();
    for n in 0..2 {
        let mark = marker(&format!("block{n}"));
        let s = Server::start(vec![sessions_marked(&mark, 30)]).await;
        let r = s.session("python", "b", "print('one')").await;
        assert_eq!(text(&r), "one\n", "{r:?}");
        let uid = one_uid(&uids_of(&mark), "a session");
        assert!(BLOCKS.contains(&uid), "{uid}");
        let lock = format!("/run/nix-sandbox-mcp/uid-blocks/{}", uid & 0xFFFF_0000);
        assert!(Path::new(&lock).is_file(), "{lock} is not there");
        blocks.push(uid >> 16);
        servers.push(s);
    }
    assert_ne!(blocks[0], blocks[1], "two servers share a block");
}

/// A root server asks the user database whether its block's uids are
/// someone's from a child process: the modules the C library loads to
/// answer (those nsswitch.conf names: systemd's, sssd's, LDAP's) stay out
/// of the server, which would keep them mapped to its end. The test asks
/// the same question itself first, to say whether answering loads a module
/// on this host.
#[tokio::test]
async fn a_root_server_keeps_no_user_database_module() {
    if !is_root() {
        return;
    }
    let modules = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("/libnss_"))
            .filter_map(|l| l.split_whitespace().nth(5).map(str::to_owned))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let _ = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(0x7FFD_FFFE));
    let here = modules("self");
    let mark = marker("nss");
    let s = Server::start(vec![sessions_marked(&mark, 30)]).await;
    let r = s.run("python", "print('up')").await;
    assert_eq!(text(&r), "up\n", "{r:?}");
    let server = modules(&s.pid.to_string());
    assert!(server.is_empty(), "the server maps {server:?}");
    eprintln!("modules answering loads into the asking process here: {here:?}");
}

/// Python that tries, from inside a jail, what only a process holding host
/// uid 0 or a writable /proc/sys could do, and prints what happened (JSON).
const PROC_ATTACKS: &str = include_str!("../../../checks/e2e/proc_attacks.py");

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
async fn a_root_servers_runtime_directory_is_roots_own_and_goes_with_it() {
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
    let wrapper_home = PathBuf::from(text(&r));
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "TMPDIR is used"
    );
    if !is_root() {
        assert_eq!(wrapper_home, Path::new("/root"));
        return;
    }
    // /run/nix-sandbox-mcp/BASE/home, all of it root's, none of it
    // writable by anyone else (a wrapper built before the jails had their
    // own passwd reads it there).
    let runtime = wrapper_home.parent().unwrap().to_path_buf();
    assert_eq!(runtime.parent().unwrap(), Path::new("/run/nix-sandbox-mcp"));
    let state = wrapper_home.join(".local/share/jail.nix");
    for path in [&runtime, &wrapper_home, &state, &state.join("passwd")] {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{}", path.display());
        assert_eq!(
            meta.mode() & 0o022,
            0,
            "{} is writable by others",
            path.display()
        );
    }
    s.disconnect().await;
    assert!(
        eventually(|| !runtime.exists()).await,
        "{} is left",
        runtime.display()
    );
}

/// Run as `uid`:`uid` with no groups, against a gate's socket and its
/// directory and CA bundle: `connect` and what it did, space-separated.
const GATE_ATTACK: &str = r#"
import errno, os, socket, sys
sock, ca = sys.argv[1], sys.argv[2]
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
out = []
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    out.append('connected')
except OSError as e:
    out.append('connect-' + name(e))
try:
    socket.socket(socket.AF_UNIX).bind(os.path.join(os.path.dirname(sock), 'planted.sock'))
    out.append('planted')
except OSError as e:
    out.append('plant-' + name(e))
try:
    with open(ca + '.new', 'w') as f:
        f.write('a CA of the attacker')
    os.rename(ca + '.new', ca)
    out.append('replaced')
except OSError as e:
    out.append('replace-' + name(e))
print(' '.join(out))
"#;

fn gate_attack(uid: u32, socket: &str, bundle: &str) -> String {
    let id = uid.to_string();
    let o = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={id}"),
            &format!("--regid={id}"),
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            GATE_ATTACK,
            socket,
            bundle,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A value of the environment of the `sleep ARG` running now, read from
/// the host (as root).
fn wrapper_var(arg: &str, var: &str) -> Option<(u32, String)> {
    let prefix = format!("{var}=");
    let cmdline = format!("sleep\0{arg}\0");
    pids_with(&cmdline).into_iter().find_map(|pid| {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let value = environ
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))?;
        Some((pid, String::from_utf8_lossy(value).into_owned()))
    })
}

/// Under a root server, a jail's egress gate is its own: a host process of
/// uid 65534 (nobody), or of another jail's uid, cannot connect to it,
/// plant a socket beside it or replace the CA bundle jails trust; the
/// jail's own uid connects, and no more.
#[tokio::test]
async fn a_root_servers_egress_gates_are_its_own_and_each_jails_alone() {
    if !is_root() {
        return;
    }
    let mut m = template();
    let mut gated = env_with_wrapper(wrappers().join("env-run").to_str().unwrap());
    gated["interpreter"] = serde_json::json!("bash");
    gated["network"] = serde_json::json!({"allow": [{"host": "example.test"}]});
    m["environments"]["gated"] = gated;
    let s = Server::start(vec![Manifest::new(&m)]).await;
    // Each run's `sleep` (its environment the wrapper's: env-run keeps
    // it) is found by its argument.
    let (first, second) = ("4.1", "4.2");
    let (code_a, code_b) = (
        format!("sleep {first}; echo done"),
        format!("sleep {second}; echo done"),
    );
    let runs = async { tokio::join!(s.run("gated", &code_a), s.run("gated", &code_b)) };
    let attack = async {
        let mut found = None;
        eventually(|| {
            found = wrapper_var(first, "NIX_SANDBOX_EGRESS_SOCKET")
                .zip(wrapper_var(first, "NIX_SANDBOX_EGRESS_CA"))
                .zip(wrapper_var(second, "NIX_SANDBOX_EGRESS_SOCKET"));
            found.is_some()
        })
        .await;
        let (((pid_a, socket), (_, bundle)), (pid_b, _)) = found.expect("the gated runs' wrappers");
        let (uid_a, uid_b) = (uids(pid_a).unwrap()[0], uids(pid_b).unwrap()[0]);
        [
            (NOBODY, gate_attack(NOBODY, &socket, &bundle)),
            (uid_b, gate_attack(uid_b, &socket, &bundle)),
            (uid_a, gate_attack(uid_a, &socket, &bundle)),
        ]
    };
    let ((a, b), attacks) = tokio::join!(runs, attack);
    assert_eq!(text(&a), "done\n", "{a:?}");
    assert_eq!(text(&b), "done\n", "{b:?}");
    let refused = "plant-EACCES replace-EACCES";
    assert_eq!(
        attacks[0].1,
        format!("connect-EACCES {refused}"),
        "uid 65534 against a gate: {attacks:?}"
    );
    assert_eq!(
        attacks[1].1,
        format!("connect-EACCES {refused}"),
        "another jail's uid {} against a gate",
        attacks[1].0
    );
    assert_eq!(
        attacks[2].1,
        format!("connected {refused}"),
        "the jail's own uid {} against its gate",
        attacks[2].0
    );
}
