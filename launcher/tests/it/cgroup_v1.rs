//! A server with cgroup v1 hierarchies (root on a host that mounts them, as
//! this one does): each wrapper is born in its run's cgroups, by the thread
//! that forks it stepping into them and back (no process is moved), with
//! the environment's limits exact, and the launcher's threads, that thread
//! included, are back in the server's own cgroups after every run.

use std::collections::BTreeMap;

use serde_json::json;

use crate::common::*;

/// The controllers whose hierarchies a v1 server makes each run's cgroup in.
const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpuacct"];

/// The v1 path of `cgroup_file`'s (a /proc/.../cgroup) hierarchy of each
/// of [`CONTROLLERS`] that it is in.
fn v1_paths(cgroup_file: &str) -> BTreeMap<&'static str, String> {
    let text = std::fs::read_to_string(cgroup_file).unwrap_or_default();
    v1_paths_in(&text)
}

fn v1_paths_in(text: &str) -> BTreeMap<&'static str, String> {
    let mut paths = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        for c in CONTROLLERS {
            if controllers.split(',').any(|x| x == c) {
                paths.insert(c, path.to_owned());
            }
        }
    }
    paths
}

/// `child` under the v1 path `parent` ("/" or "/a/b").
fn under(parent: &str, child: &str) -> String {
    format!("{}/{child}", parent.trim_end_matches('/'))
}

#[tokio::test]
async fn a_v1_wrapper_is_born_in_its_run_cgroups_and_the_launcher_stays_home() {
    let mut m = template();
    let mut env = env_with_wrapper(wrappers().join("cgroup-run").to_str().unwrap());
    env["interpreter"] = json!("bash");
    env["limits"]["pids"] = json!(24);
    env["limits"]["memory_mb"] = json!(300);
    m["environments"]["cgdump"] = env;
    let s = Server::start_with(
        vec![Manifest::new(&m)],
        &["--allow-wrappers-outside-store"],
        &[("RUST_LOG", "info,nix_sandbox_mcp::wrapper=debug")],
    )
    .await;
    let first = s.run("cgdump", "echo ok").await;
    let log = s.stderr();
    if !log.contains("cgroups: cgroup v1") {
        // Not a v1 server: nothing of this test applies (a user's server
        // without writable hierarchies, or a cgroup v2 host).
        let line = log.lines().find(|l| l.contains("cgroups:")).unwrap_or("");
        eprintln!("skipped: the server has no cgroup v1: {line}");
        return;
    }
    let home = v1_paths(&format!("/proc/{}/cgroup", s.pid));
    assert!(!home.is_empty(), "the server's own v1 cgroups");
    let mut results = vec![first];
    for _ in 0..2 {
        results.push(s.run("cgdump", "echo ok").await);
    }
    for r in &results {
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let out = text(r);
        let (stdout, stderr) = out.split_once("--- stderr ---\n").unwrap_or((&out, ""));
        assert_eq!(stdout, "ok\n", "{out}");
        // What the wrapper's first instruction saw.
        let seen: String = stderr
            .lines()
            .filter_map(|l| l.strip_prefix("cgroup "))
            .map(|l| format!("{l}\n"))
            .collect();
        let seen = v1_paths_in(&seen);
        for (controller, path) in &home {
            let run = seen.get(controller).map(String::as_str).unwrap_or("");
            let prefix = under(path, &format!("nix-sandbox-mcp.{}/run-", s.pid));
            assert!(
                run.starts_with(&prefix),
                "the wrapper started in {controller}:{run}, not in its run's {prefix}...: {out}"
            );
        }
        for want in ["limit pids.max 24", "limit memory.limit_in_bytes 314572800"] {
            assert!(stderr.lines().any(|l| l == want), "no {want:?}: {out}");
        }
    }
    // A session jail is started the same way.
    let r = s.session("python", "s", "print(1)").await;
    assert!(text(&r).starts_with("1\n"), "{r:?}");
    let log = s.stderr();
    assert!(
        log.matches("placed=\"hop\"").count() >= 4,
        "the wrappers were not started in their cgroups by a hop: {log}"
    );
    assert!(
        !log.contains("placed=\"move\""),
        "a wrapper was moved into its cgroup: {log}"
    );
    // Every thread of the launcher, the one that forks the wrappers
    // included, is back home: none is charged to a run.
    let tasks = std::fs::read_dir(format!("/proc/{}/task", s.pid)).unwrap();
    let mut threads = 0;
    for task in tasks.flatten() {
        let file = task.path().join("cgroup");
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        assert_eq!(
            v1_paths(file.to_str().unwrap()),
            home,
            "thread {} ({}) of the server is not in the server's cgroups",
            task.file_name().to_string_lossy(),
            comm.trim()
        );
        threads += 1;
    }
    assert!(threads >= 2, "the server's threads: {threads}");
}

/// The server's own v1 cgroup directory in the pids hierarchy (where a
/// v1 server's spawner returns to), if this host has one.
fn own_pids_dir() -> Option<String> {
    let own = v1_paths("/proc/self/cgroup");
    let path = own.get("pids")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let (before, after) = l.split_once(" - ")?;
        let mut f = after.split(' ');
        let fs = f.next()?;
        let options = f.nth(1)?;
        (fs == "cgroup" && options.split(',').any(|o| o == "pids"))
            .then(|| before.split(' ').nth(4))?
    })?;
    Some(format!("{mount}{}", path.trim_end_matches('/')))
}

#[tokio::test]
async fn a_v1_server_that_cannot_hop_moves_each_wrapper_and_says_so_once() {
    let Some(pids_home) = own_pids_dir().filter(|_| nix::unistd::geteuid().is_root()) else {
        eprintln!("skipped: not root on a host with a v1 pids hierarchy");
        return;
    };
    // The server's own `tasks` in the pids hierarchy cannot be opened for
    // writing (a read-only file bound over it, in a mount namespace of the
    // server's own): a policy that refuses the way back home.
    let blocker = tempfile::NamedTempFile::new().unwrap();
    let script =
        "mount --bind \"$1\" \"$2\" && mount -o remount,bind,ro \"$2\" && shift 2 && exec \"$@\"";
    let mut m = template();
    let mut env = env_with_wrapper(wrappers().join("cgroup-run").to_str().unwrap());
    env["interpreter"] = json!("bash");
    env["limits"]["pids"] = json!(24);
    m["environments"]["cgdump"] = env;
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["-m", "sh", "-c", script, "sh"])
        .arg(blocker.path())
        .arg(format!("{pids_home}/tasks"))
        .arg(BIN);
    let s = Server::start_command(
        cmd,
        vec![Manifest::new(&m)],
        &["--allow-wrappers-outside-store"],
        &[("RUST_LOG", "info,nix_sandbox_mcp::wrapper=debug")],
    )
    .await;
    let log = s.stderr();
    if !log.contains("cgroups: cgroup v1") {
        let line = log.lines().find(|l| l.contains("cgroups:")).unwrap_or("");
        eprintln!("skipped: the server has no cgroup v1: {line}");
        return;
    }
    for _ in 0..2 {
        let r = s.run("cgdump", "echo ok").await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let out = text(&r);
        assert!(out.starts_with("ok\n"), "{out}");
        assert!(out.lines().any(|l| l == "limit pids.max 24"), "{out}");
        let seen: String = out
            .lines()
            .filter_map(|l| l.strip_prefix("cgroup "))
            .map(|l| format!("{l}\n"))
            .collect();
        let run = v1_paths_in(&seen).get("pids").cloned().unwrap_or_default();
        assert!(
            run.contains(&format!("nix-sandbox-mcp.{}/run-", s.pid)),
            "the wrapper is not in its run's pids cgroup: {out}"
        );
    }
    let log = s.stderr();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot step into them"))
        .collect();
    assert_eq!(said.len(), 1, "the refusal is said once: {log}");
    assert!(said[0].contains("Read-only file system"), "{}", said[0]);
    assert!(!log.contains("placed=\"hop\""), "{log}");
    assert!(log.matches("placed=\"move\"").count() >= 2, "{log}");
}
