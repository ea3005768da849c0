//! Warm single-use jails (session/warm.rs), as the test's user and as user
//! 65534: runs without a session are served by warm jails, each jail
//! serves one run (its pid namespace and its pid 1's start time, together,
//! are never seen twice: the kernel reuses a freed namespace's inode
//! number, but not in a jail started before the one it was freed by
//! ended), and nothing a
//! run leaves (a file in /tmp, /workspace and the home, a background
//! process, a variable of the interpreter's environment, a global of the
//! interpreter) reaches the next; a new session takes a warm jail; the
//! server's stop kills every warm jail; `--warm-jails 0` keeps none (the
//! other tests' servers run with it: common.rs).
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

/// With the pool off a plain run is the run wrapper's, unless its code
/// names its outputs: then a session jail started for it serves it (once),
/// its outputs come back, and it reads as the run wrapper's run; no jail is
/// kept afterwards.
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
        let r = s.run("python", "import os\nprint('one')\n1 + 1").await;
        assert_eq!(text(&r), "one\n", "{r:?}");
        // The run wrapper served it, as before the pool: no outputs.
        assert!(!warm(&r), "{r:?}");
        assert!(facts(&r).get("outputs").is_none(), "{r:?}");
        let r = s
            .run("python", "import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/a.txt', 'w').write('a')\nprint(1)\n1 + 1")
            .await;
        assert!(
            text(&r).starts_with("1\noutputs (new or changed in /workspace/outputs):\n- a.txt"),
            "{r:?}"
        );
        assert!(!warm(&r), "{r:?}");
        assert_eq!(facts(&r)["outputs"][0]["path"], json!("a.txt"), "{r:?}");
        assert_eq!(facts(&r)["exit_code"], json!(0), "{r:?}");
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

/// The run `arguments` asks for on `s`, served by a warm jail: asked again
/// (a run's own effects are its alone) until a warm jail served it.
async fn served_warm(s: &Server, arguments: &serde_json::Value) -> CallToolResult {
    for _ in 0..20 {
        let r = s.call(arguments.clone()).await;
        if warm(&r) {
            return r;
        }
        // The pool refills after the run: give it its replacement.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("no warm jail served {arguments}: {}", s.stderr());
}

/// A result's text with the figures of its `used:` line left out: a warm
/// jail's cgroup holds the agent too, a few hundred KiB more.
fn usage_left_out(text: &str) -> String {
    text.lines()
        .map(|line| match line.starts_with("used: ") {
            true => "used: ...",
            false => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the model reads of a run served by a warm jail is what it reads of
/// the same run served by the run wrapper (the pool off): the value of a
/// last expression is not shown, a traceback names `<stdin>` without its
/// source, `sys.exit(3)`, `exit 4` and `process.exit(3)` are the run's exit
/// codes, a death by a signal is the run wrapper's exit code 128+N, node
/// runs its event loop out, a timeout
/// kills the process tree, a flood is stopped at the same bound. The
/// shell's runs come after python's have filled the pool's bound: the shell
/// gets a jail of python's.
#[tokio::test]
async fn a_run_served_warm_reads_as_one_served_by_the_run_wrapper() {
    for user in User::all() {
        let mark = marker("warmsame");
        let mut servers = Vec::new();
        for pool in ["4", "0"] {
            let flags = ["--allow-wrappers-outside-store", "--warm-jails", pool];
            let manifests = vec![sessions_marked(&mark, 30)];
            servers.push(Server::start_command(user.command(), manifests, &flags, &[]).await);
        }
        let (warm_server, cold_server) = (&servers[0], &servers[1]);
        let same = [
            ("python", "print(1)\n1 + 1\n", None),
            (
                "python",
                "def f():\n    raise ValueError('no')\nf()\n",
                None,
            ),
            ("python", "print('x'\n", None),
            ("python", "import sys\nprint('before')\nsys.exit(3)\n", None),
            (
                "python",
                "import time\nprint('begun', flush=True)\ntime.sleep(60)\n",
                Some(3),
            ),
            ("shell", "echo out; echo err >&2; exit 4", None),
            ("shell", "set -e\nfalse\necho never\n", None),
            ("shell", "echo before; kill -ABRT $$", None),
            (
                "python",
                "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n",
                None,
            ),
            ("node", "console.log(1)\n1 + 1\n", None),
            (
                "node",
                "setTimeout(() => console.log('later'), 100)\nconsole.error('now')\nprocess.exitCode = 5\n",
                None,
            ),
            (
                "node",
                "console.log(process.argv.length, typeof fs, __filename)\nprocess.exit(3)\n",
                None,
            ),
            (
                "node",
                "console.log('begun')\nsetInterval(() => {}, 1000)\n",
                Some(3),
            ),
        ];
        for (env, code, timeout_s) in same {
            let mut arguments = json!({"env": env, "code": code});
            if let Some(t) = timeout_s {
                arguments["timeout_s"] = json!(t);
            }
            let cold = cold_server.call(arguments.clone()).await;
            assert!(!warm(&cold), "{cold:?}");
            assert!(error_code(&cold).is_none(), "refused: {cold:?}");
            let hot = served_warm(warm_server, &arguments).await;
            assert_eq!(
                usage_left_out(&text(&hot)),
                usage_left_out(&text(&cold)),
                "as {user:?}, {env}: {code:?}"
            );
            assert_eq!(hot.is_error, cold.is_error, "as {user:?}, {code:?}");
            for fact in ["exit_code", "signal", "timed_out", "flooded"] {
                assert_eq!(
                    facts(&hot)[fact],
                    facts(&cold)[fact],
                    "as {user:?}, {code:?}: {fact}"
                );
            }
        }
        // A flood: how far past the bound each read before the stop
        // differs (so does the count of bytes dropped); what is said of
        // the stop does not.
        let flood = json!({"env": "shell", "code": "echo first; yes"});
        let cold = cold_server.call(flood.clone()).await;
        let hot = served_warm(warm_server, &flood).await;
        let last = |r: &CallToolResult| text(r).lines().last().unwrap_or_default().to_owned();
        assert!(
            last(&cold).starts_with("stopped: stdout passed 64 MiB"),
            "{}",
            text(&cold)
        );
        assert_eq!(last(&hot), last(&cold), "as {user:?}");
        assert!(text(&hot).starts_with("first\n"), "{}", text(&hot));
        assert_eq!(facts(&hot)["flooded"], json!("stdout"));
        drop(servers);
        assert_no_process_left(&mark).await;
    }
}

/// An idle warm jail's layer holds no share of `NIX_SANDBOX_LAYERS_MB`: it
/// takes it when a call takes the jail. Four idle warm jails (python's,
/// shell's) under a bound of two layers keep no session out; the bound
/// still holds for what calls take.
#[tokio::test]
async fn idle_warm_jails_keep_no_session_out_of_the_layers() {
    let mark = marker("warmlayers");
    let s = Server::start_with(
        vec![sessions_marked(&mark, 30)],
        &["--allow-wrappers-outside-store", "--warm-jails", "4"],
        &[("NIX_SANDBOX_LAYERS_MB", "1024")],
    )
    .await;
    for (env, code) in [("python", "print('one')"), ("shell", "echo one")] {
        let r = s.run(env, code).await;
        assert_eq!(text(&r), "one\n", "{r:?}");
    }
    // Each environment's first run found none ready: each gets two.
    assert!(
        eventually(|| count_named(&mark, "agent") == 4).await,
        "the two warm jails did not start: {}",
        s.stderr()
    );
    // A session of an environment with no warm jail: the layers are free.
    let r = s.session("node", "n", "console.log('node')").await;
    assert_eq!(text(&r), "node\n", "{r:?}");
    // Python's warm jail, taken, takes the second layer.
    let r = s.session("python", "p", "print('python')").await;
    assert_eq!(text(&r), "python\n", "{r:?}");
    assert!(
        s.stderr().contains("the session took a warm jail"),
        "{}",
        s.stderr()
    );
    // The bound holds: the shell's warm jail finds no room.
    let r = s.session("shell", "s", "echo shell").await;
    assert_refused(&r, "layers_full");
}
