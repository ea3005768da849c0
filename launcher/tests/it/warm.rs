//! Warm single-use jails (session/warm.rs), as the test's user and as user
//! 65534: runs without a session are served by warm jails, each jail
//! serves one run (its pid namespace and its pid 1's start time, together,
//! are never seen twice: the kernel reuses a freed namespace's inode
//! number, but not in a jail started before the one it was freed by
//! ended), and nothing a
//! run leaves (a file in /tmp, /workspace and the home, a background
//! process, a variable of the interpreter's environment, a global of the
//! interpreter) reaches the next; a new session takes a warm jail; the
//! server's stop kills every warm jail; `--warm-jails 0`, the default,
//! keeps none.
//! A jail started before its environment changed: devshell.rs.

use std::collections::HashSet;
use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::json;

use crate::common::*;

/// The attack: reports what an earlier run left, then leaves all of it
/// (files, a background process whose command line holds `left`, an
/// environment variable, an interpreter global) for the next; what cannot
/// be written is skipped (a run that found no warm jail ran in the run
/// wrapper, whose fixture may have no /workspace).
fn leaver(left: &str) -> String {
    format!(
        "import os, sys, subprocess, builtins\n\
         paths = ['/tmp/left', '/workspace/left', os.path.expanduser('~/left')]\n\
         procs = [open(f'/proc/{{p}}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()]\n\
         print('ns', os.readlink('/proc/self/ns/pid'), open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])\n\
         print('seen', [p for p in paths if os.path.exists(p)], os.environ.get('LEFT'), \
               getattr(builtins, 'LEFT', None), [p for p in procs if '{left}' in p])\n\
         for p in paths:\n    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n\
         os.environ['LEFT'] = '1'\n\
         builtins.LEFT = 1\n\
         subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{left}'], \
                          start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    )
}

fn warm(r: &CallToolResult) -> bool {
    facts(r)["warm"] == json!(true)
}

#[tokio::test]
async fn each_warm_jail_serves_one_run_and_leaves_nothing_for_the_next() {
    for user in User::all() {
        let mark = marker("warm");
        let left = format!("{mark}-left");
        let s = Server::start_command(
            user.command(),
            vec![sessions_marked(&mark, 30)],
            &["--allow-wrappers-outside-store", "--warm-jails", "4"],
            &[],
        )
        .await;
        let mut namespaces = HashSet::new();
        let mut warm_runs = 0;
        for i in 0..8 {
            let r = s.run("python", &leaver(&left)).await;
            assert_eq!(r.is_error, Some(false), "as {user:?}, run {i}: {r:?}");
            let out = text(&r);
            let ns = out.lines().next().unwrap().to_owned();
            assert!(ns.starts_with("ns pid:["), "{out}");
            assert!(
                namespaces.insert(ns.clone()),
                "as {user:?}, run {i}: a jail served twice ({ns})"
            );
            assert!(
                out.contains("seen [] None None []"),
                "as {user:?}, run {i} saw what an earlier run left: {out}"
            );
            warm_runs += usize::from(warm(&r));
            // The run's jail is killed with it, background process and all.
            assert_no_process_left(&left).await;
            // Give the pool its replacement, as calls spaced out do.
            let started = std::time::Instant::now();
            while count_named(&mark, "agent") == 0 && started.elapsed() < GUARD {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            warm_runs >= 6,
            "as {user:?}: only {warm_runs} of 8 runs were served warm: {}",
            s.stderr()
        );
        // A new session takes a warm jail: its first call finds the
        // interpreter started, and nothing of the runs before.
        let r = s.session("python", "s", &leaver(&left)).await;
        assert!(
            text(&r).contains("seen [] None None []"),
            "as {user:?}: {r:?}"
        );
        // The control: a jail that serves twice (a session's) shows the
        // attack everything the first call left.
        let r = s.session("python", "s", &leaver(&left)).await;
        let out = text(&r);
        assert!(
            out.contains("seen ['/tmp/left', '/workspace/left', '") && out.contains("] 1 1 ['"),
            "as {user:?}, the attack missed what a reused jail holds: {out}"
        );
        assert!(
            s.stderr().contains("the session took a warm jail"),
            "as {user:?}: {}",
            s.stderr()
        );
    }
}

#[tokio::test]
async fn the_servers_stop_kills_every_warm_jail() {
    for user in User::all() {
        let mark = marker("warmstop");
        let manifest = sessions_marked(&mark, 30);
        let mut cmd = RawServer::command_as(user, &manifest, "info");
        cmd.env("NIX_SANDBOX_WARM_JAILS", "4");
        let mut raw = RawServer::from_command(cmd);
        raw.initialize().await;
        raw.call_run(1, "python", "print(1)").await;
        let answer = raw.next_line().await.expect("the run is answered");
        assert!(answer.contains("\"id\":1"), "{answer}");
        // The replacement jail starts after the run: its agent is waiting.
        assert!(
            eventually(|| count_named(&mark, "agent") > 0).await,
            "as {user:?}: no warm jail started: {}",
            raw.stderr()
        );
        let status = raw.close_and_wait().await;
        assert!(
            status.success(),
            "as {user:?}: {status:?}: {}",
            raw.stderr()
        );
        assert_no_process_now(&mark, &format!("as {user:?}, warm jails at the stop"));
    }
}

#[tokio::test]
async fn no_warm_jail_is_kept_when_the_pool_is_off() {
    let mark = marker("warmoff");
    let s = Server::start_with(
        vec![sessions_marked(&mark, 30)],
        &["--allow-wrappers-outside-store", "--warm-jails", "0"],
        &[],
    )
    .await;
    for _ in 0..2 {
        let r = s
            .run("python", "import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/a.txt', 'w').write('a')\nprint(1)")
            .await;
        assert!(text(&r).starts_with("1\n"), "{r:?}");
        // The run wrapper served it, as before the pool: no outputs.
        assert!(!warm(&r), "{r:?}");
        assert!(facts(&r).get("outputs").is_none(), "{r:?}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        count_named(&mark, "agent"),
        0,
        "a session jail with the pool off"
    );
    let tools = s.client.list_all_tools().await.unwrap();
    let description = tools[0].description.as_deref().unwrap_or_default();
    assert!(
        description.contains("Session and `files` runs return"),
        "{description}"
    );
}
