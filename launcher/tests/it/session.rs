//! Sessions through MCP, in fixture session jails (the fixture wrapper
//! `session`: real bubblewrap around the built agent and the host's
//! interpreters): state that persists, output user code cannot use to break
//! the protocol, interrupts, resets, dead interpreters, and the refusals.

use crate::common::*;

/// A server of the fixture environments, sessions marked with `mark`.
async fn server(mark: &str, timeout_s: u64) -> Server {
    Server::start(vec![sessions_marked(mark, timeout_s)]).await
}

/// The call succeeded and printed exactly `want` (nothing on stderr, no note).
#[track_caller]
fn assert_prints(r: &rmcp::model::CallToolResult, want: &str) {
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(r), want, "{r:?}");
}

#[tokio::test]
async fn python_keeps_variables_imports_functions_cwd_and_files() {
    let mark = marker("py-state");
    let s = server(&mark, 30).await;
    let r = s
        .session(
            "python",
            "a",
            "import json, os\nx = 41\ndef f(v):\n    return v + 1\nos.chdir('/tmp')\n\
             open('/workspace/kept.txt', 'w').write('file kept')\nx",
        )
        .await;
    assert_prints(&r, "41\nexit code 0");
    let st = facts(&r);
    assert_eq!(st["session"], "a");
    assert_eq!(st["exit_code"], 0);
    let r = s
        .session(
            "python",
            "a",
            "print(f(x), json.dumps([1]), os.getcwd(), open('/workspace/kept.txt').read())",
        )
        .await;
    assert_prints(&r, "42 [1] /tmp file kept\n");
    // Another session does not share it.
    let r = s.session("python", "b", "print('x' in dir())").await;
    assert_prints(&r, "False\n");
}

#[tokio::test]
async fn bash_keeps_variables_functions_cwd_exports_and_options() {
    let mark = marker("sh-state");
    let s = server(&mark, 30).await;
    let r = s
        .session(
            "shell",
            "a",
            "x=41; f() { echo $(( $1 + 1 )); }; cd /tmp; export Y=exported; set -o pipefail\n\
             echo data > /workspace/kept.txt",
        )
        .await;
    assert_prints(&r, "(no output)");
    let r = s
        .session(
            "shell",
            "a",
            "f $x; pwd; bash -c 'echo $Y'; [[ -o pipefail ]] && echo pipefail; cat /workspace/kept.txt",
        )
        .await;
    assert_prints(&r, "42\n/tmp\nexported\npipefail\ndata\n");
    let r = s.session("shell", "a", "false").await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(text(&r), "exit code 1");
    assert_prints(&s.session("shell", "a", "echo $x").await, "41\nexit code 0");
}

#[tokio::test]
async fn node_keeps_bindings_and_awaits_at_top_level() {
    let mark = marker("node-state");
    let s = server(&mark, 30).await;
    let r = s
        .session(
            "node",
            "a",
            "const fs = require('fs');\nlet x = 41;\nfunction f(v) { return v + 1; }\n\
             process.chdir('/tmp');\nfs.writeFileSync('/workspace/kept.txt', 'node file');",
        )
        .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let r = s
        .session(
            "node",
            "a",
            "const v = await new Promise((ok) => setTimeout(() => ok(f(x)), 10));\n\
             console.log(v, process.cwd(), fs.readFileSync('/workspace/kept.txt', 'utf8'));",
        )
        .await;
    assert_prints(&r, "42 /tmp node file\n");
    assert_prints(
        &s.session("node", "a", "console.log(v + 1)").await,
        "43\nexit code 0",
    );
}

#[tokio::test]
async fn output_tricks_return_their_own_result_and_the_session_goes_on() {
    let mark = marker("tricks");
    let s = server(&mark, 30).await;
    assert_prints(
        &s.session("python", "t", "import os, subprocess, sys\nn = 1")
            .await,
        "(no output)",
    );

    // 10 MB straight to fd 1: capped (64 KiB kept), the rest counted.
    let r = s.session("python", "t", "os.write(1, b'x' * 10**7)").await;
    let st = facts(&r).clone();
    assert_eq!(st["exit_code"], 0, "{r:?}");
    let dropped = st["stdout_dropped_bytes"].as_u64().unwrap();
    assert!(dropped > 9_000_000, "{st}");
    let t = text(&r);
    assert!(t.starts_with("xxxx") && t.contains(&format!("[... {dropped} bytes dropped ...]")));
    assert!(t.ends_with(&format!(
        "stdout cut: {dropped} bytes dropped from the middle"
    )));

    // A subprocess writes to the same stdout.
    let r = s
        .session("python", "t", "subprocess.run(['echo', 'hi'])\nn += 1")
        .await;
    assert_prints(&r, "hi\n");

    // Reading stdin gets EOF.
    let r = s.session("python", "t", "print(input())").await;
    assert_eq!(facts(&r)["exit_code"], 1, "{r:?}");
    assert!(text(&r).contains("EOFError"), "{}", text(&r));

    // 5 MB on stderr.
    let r = s
        .session(
            "python",
            "t",
            "sys.stderr.write('e' * 5_000_000)\nprint('done')",
        )
        .await;
    let st = facts(&r).clone();
    assert_eq!(st["exit_code"], 0, "{r:?}");
    assert!(
        st["stderr_dropped_bytes"].as_u64().unwrap() > 4_000_000,
        "{st}"
    );
    assert!(text(&r).starts_with("done\n--- stderr ---\neeee"));

    // A forged reply frame is just output.
    let forged = r#"{"type":"exec","id":1,"status":0,"stdout":"forged","stderr":"","stdout_dropped":0,"stderr_dropped":0,"exit":null,"restarted":false,"interrupted":false,"duration_ms":1}"#;
    let r = s
        .session("python", "t", &format!("print({forged:?})"))
        .await;
    assert_prints(&r, &format!("{forged}\n"));
    let r = s
        .session("shell", "t-sh", &format!("echo '{forged}' >&2; echo out"))
        .await;
    assert_eq!(text(&r), format!("out\n--- stderr ---\n{forged}\n"));

    // The session still works, with its state.
    assert_prints(
        &s.session("python", "t", "print(n)").await,
        "2\nexit code 0",
    );
}

#[tokio::test]
async fn a_python_loop_is_interrupted_at_the_deadline_with_state_kept() {
    let mark = marker("py-intr");
    let s = server(&mark, 2).await;
    s.session("python", "p", "n = 0").await;
    let r = s.session("python", "p", "while True:\n    n += 1").await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(t.contains("KeyboardInterrupt"), "{t}");
    assert!(t.ends_with("\ninterrupted after 2 s; state kept"), "{t}");
    let st = facts(&r);
    assert_eq!(
        (st["timed_out"].as_bool(), st["interrupted"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(st["exit_code"], 130);
    assert_eq!(st["session_reset"], false);
    assert_prints(&s.session("python", "p", "print(n > 0)").await, "True\n");
}

#[tokio::test]
async fn a_bash_sleep_is_interrupted_with_state_kept() {
    let mark = marker("sh-intr");
    let s = server(&mark, 2).await;
    s.session("shell", "b", "x=kept").await;
    let r = s
        .session(
            "shell",
            "b",
            &format!("(exec -a {mark}-child sleep 1000); echo after"),
        )
        .await;
    assert_eq!(text(&r), "interrupted after 2 s; state kept", "{r:?}");
    assert_no_process_left(&format!("{mark}-child")).await;
    assert_prints(&s.session("shell", "b", "echo $x").await, "kept\n");
}

#[tokio::test]
async fn code_ignoring_the_interrupt_gets_the_session_reset() {
    let mark = marker("py-reset");
    let s = server(&mark, 2).await;
    let child = format!("{mark}-child");
    s.session(
        "python",
        "r",
        "import signal, subprocess\nx = 1\nopen('/workspace/f', 'w').write('f')",
    )
    .await;
    let r = s
        .session(
            "python",
            "r",
            &format!(
                "subprocess.Popen(['bash', '-c', 'exec -a {child} sleep 1000'])\n\
                 signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
            ),
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        text(&r),
        "timed out after 2 s and did not stop when interrupted: session reset: \
         interpreter state and /workspace files lost",
        "{r:?}"
    );
    let st = facts(&r);
    assert_eq!(st["session_reset"], true);
    assert_eq!(st["exit_code"], serde_json::Value::Null);
    // The old jail is gone, with everything it started.
    assert_no_process_left(&child).await;
    // A fresh session: no variable, no file.
    let r = s
        .session(
            "python",
            "r",
            "import os\nprint('x' in dir(), os.path.exists('/workspace/f'))",
        )
        .await;
    assert_prints(&r, "False False\n");
}

#[tokio::test]
async fn a_dead_python_interpreter_is_restarted_and_files_are_kept() {
    let mark = marker("py-exit");
    let s = server(&mark, 30).await;
    s.session("python", "e", "open('/workspace/f', 'w').write('kept')")
        .await;
    for (code, status, note) in [
        ("x = 1\nexit()", 0, "the interpreter exited with code 0"),
        (
            "x = 1\nimport sys\nsys.exit(3)",
            3,
            "the interpreter exited with code 3",
        ),
        (
            "x = 1\nimport ctypes\nctypes.string_at(0)",
            139,
            "the interpreter was killed by signal 11",
        ),
    ] {
        let r = s.session("python", "e", code).await;
        assert_eq!(facts(&r)["exit_code"], status, "{code}: {r:?}");
        assert_eq!(
            text(&r),
            format!(
                "{note}; the next call starts a fresh one (variables lost, /workspace files kept)"
            ),
            "{code}"
        );
        let r = s
            .session(
                "python",
                "e",
                "print('x' in dir(), open('/workspace/f').read())",
            )
            .await;
        assert_eq!(
            text(&r),
            "False kept\nthe interpreter had exited; this call ran in a fresh one \
             (variables lost, /workspace files kept)",
            "after {code}"
        );
        assert_eq!(facts(&r)["fresh_interpreter"], true);
    }
}

#[tokio::test]
async fn dead_bash_and_node_interpreters_are_restarted() {
    let mark = marker("sh-exit");
    let s = server(&mark, 30).await;
    for (env, code, status, after) in [
        ("shell", "x=1; echo bye; exit 7", 7, "echo ${x:-unset}"),
        (
            "shell",
            "x=1; set -e; false; echo not reached",
            1,
            "echo ${x:-unset}",
        ),
        (
            "node",
            "globalThis.x = 1; process.exit(2)",
            2,
            "console.log(typeof x === 'undefined' ? 'unset' : x)",
        ),
    ] {
        let r = s.session(env, env, code).await;
        let st = facts(&r);
        assert_eq!(st["exit_code"], status, "{code}: {r:?}");
        assert_eq!(st["interpreter_exit"]["code"], status, "{code}");
        assert!(
            text(&r).ends_with(&format!(
                "the interpreter exited with code {status}; the next call starts a fresh one \
                 (variables lost, /workspace files kept)"
            )),
            "{code}: {}",
            text(&r)
        );
        let r = s.session(env, env, after).await;
        assert!(
            text(&r).starts_with("unset\nthe interpreter had exited"),
            "{code}: {r:?}"
        );
    }
}

#[tokio::test]
async fn user_code_cannot_reach_the_agents_protocol_fds() {
    let mark = marker("py-forge");
    let s = server(&mark, 30).await;
    s.session("python", "f", "x = 1").await;
    // User code finds the agent (its interpreter's parent) and tries to
    // read the launcher's requests from its stdin and to write a reply of
    // its own to its stdout, through /proc. The agent is not dumpable, so
    // both are refused.
    let forge = "import os\n\
        agent = os.getppid()\n\
        for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY)):\n\
        \x20   try:\n\
        \x20       n = os.open(f'/proc/{agent}/fd/{fd}', flags)\n\
        \x20       if fd == 1:\n\
        \x20           os.write(n, b'{\"type\":\"ack\",\"id\":1,\"busy\":false}\\n')\n\
        \x20       print(fd, 'opened')\n\
        \x20   except PermissionError:\n\
        \x20       print(fd, 'refused')";
    assert_prints(
        &s.session("python", "f", forge).await,
        "0 refused\n1 refused\n",
    );
    assert_prints(
        &s.session("python", "f", "print(x)").await,
        "1\nexit code 0",
    );
}

/// The launcher's threads, from /proc.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn open_sessions_hold_no_launcher_thread_each() {
    const SESSIONS: usize = 8;
    let mark = marker("threads");
    let s = server(&mark, 30).await;
    assert_prints(&s.session("python", "warm", "print('a')").await, "a\n");
    let before = threads(s.pid);
    for i in 0..SESSIONS {
        let name = format!("s{i}");
        assert_prints(
            &s.session("python", &name, "x = 'a'\nprint(x)").await,
            "a\n",
        );
    }
    let after = threads(s.pid);
    assert!(
        after < before + SESSIONS,
        "{SESSIONS} more sessions took the launcher from {before} to {after} threads"
    );
}

/// A running session needs no wrapper to take its next call: one removed
/// meanwhile (a store path collected) leaves the session answering, and
/// is named to a call that must start a jail with it.
#[tokio::test]
async fn a_running_session_answers_without_its_wrapper_and_a_new_one_is_refused() {
    let mark = marker("no-wrapper");
    let dir = tempfile::tempdir().unwrap();
    let wrapper = wrapper_script(dir.path(), "session", "", "session");
    let mut manifest = template();
    let session = manifest["environments"]["python"]["session"]
        .as_array_mut()
        .unwrap();
    session[0] = serde_json::json!(wrapper);
    session.push(serde_json::json!(mark));
    let s = Server::start_with(
        vec![Manifest::new(&manifest)],
        &["--allow-wrappers-outside-store"],
        &[],
    )
    .await;
    let r = s.session("python", "kept", "x = 1\nprint(x)").await;
    assert!(text(&r).starts_with("1\n"), "{r:?}");
    std::fs::remove_file(&wrapper).unwrap();
    let r = s.session("python", "kept", "x += 1\nprint(x)").await;
    assert!(text(&r).starts_with("2\n"), "{r:?}");
    let msg = assert_refused(
        &s.session("python", "new", "print(1)").await,
        "wrapper_missing",
    );
    assert!(msg.contains(wrapper.to_str().unwrap()), "{msg}");
}
