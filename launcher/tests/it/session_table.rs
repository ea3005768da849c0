//! The session table through MCP: refusals, one call at a time, many
//! sessions at once, idle expiry and maximum lifetime, the agent out of
//! user code's reach, a dead agent, and no session process left after the
//! server goes.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

async fn server_with(mark: &str, timeout_s: u64, args: &[&str], envs: &[(&str, &str)]) -> Server {
    let mut all = vec!["--allow-wrappers-outside-store"];
    all.extend_from_slice(args);
    Server::start_with(vec![sessions_marked(mark, timeout_s)], &all, envs).await
}

#[tokio::test]
async fn bad_names_other_envs_and_envs_without_sessions_are_refused() {
    let mut m = template();
    m["environments"]["shell"]["session"] = json!([]);
    let s = Server::start(vec![Manifest::new(&m)]).await;
    let long = "n".repeat(65);
    for bad in ["", "a b", "x/y", "é", long.as_str()] {
        let r = s.session("python", bad, "print(1)").await;
        let msg = assert_refused(&r, "bad_session_name");
        assert!(msg.contains("1 to 64 characters"), "{msg}");
    }
    let r = s.call(json!({"code": "1", "session": 5})).await;
    assert_refused(&r, "invalid_arguments");
    let r = s.session("shell", "s", "echo 1").await;
    let msg = assert_refused(&r, "sessions_unsupported");
    assert!(msg.contains("environment `shell` has no sessions"), "{msg}");
    assert_eq!(
        text(&s.session("python", "p", "print(1)").await),
        "1\nexit code 0"
    );
    let r = s.session("node", "p", "1").await;
    let msg = assert_refused(&r, "session_env_mismatch");
    assert!(
        msg.contains("session `p` belongs to environment `python`") && msg.contains("env `python`"),
        "{msg}"
    );
    // The session is as it was.
    assert_eq!(
        text(&s.session("python", "p", "print(2)").await),
        "2\nexit code 0"
    );
}

#[tokio::test]
async fn too_many_sessions_names_the_open_ones_and_the_idle_timeout() {
    let mark = marker("many");
    let s = server_with(
        &mark,
        30,
        &["--max-sessions", "2"],
        &[("SESSION_IDLE_TIMEOUT", "77")],
    )
    .await;
    for name in ["s1", "s2"] {
        assert_eq!(text(&s.session("shell", name, "echo ok").await), "ok\n");
    }
    let r = s.session("shell", "s3", "echo ok").await;
    let msg = assert_refused(&r, "too_many_sessions");
    assert!(
        msg.contains("2 sessions are open") && msg.contains("(s1, s2)"),
        "{msg}"
    );
    assert!(msg.contains("77 s without calls"), "{msg}");
    // The open ones still work, and calls without a session too.
    assert_eq!(
        text(&s.session("shell", "s2", "echo still").await),
        "still\n"
    );
    assert_eq!(text(&s.run("shell", "echo fresh").await), "fresh\n");
    let schema =
        serde_json::to_value(&*s.client.list_all_tools().await.unwrap()[0].input_schema).unwrap();
    let about = schema["properties"]["session"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(about.contains("77 s idle, 3600 s max"), "{about}");
    assert!(about.contains("/workspace"), "{about}");
}

#[tokio::test]
async fn two_calls_at_once_on_one_session_give_one_busy() {
    let mark = marker("busy");
    let s = server_with(&mark, 30, &[], &[]).await;
    assert_eq!(
        text(&s.session("python", "b", "import time\nn = 0").await),
        "(no output)"
    );
    let call = |code: &'static str| s.session("python", "b", code);
    let (first, second) = tokio::join!(
        call("time.sleep(2)\nn += 1\nprint('slept')"),
        call("time.sleep(2)\nn += 1\nprint('slept')")
    );
    let busy: Vec<_> = [&first, &second]
        .into_iter()
        .filter(|r| error_code(r).as_deref() == Some("session_busy"))
        .collect();
    assert_eq!(busy.len(), 1, "{first:?}\n{second:?}");
    let msg = text(busy[0]);
    assert!(
        msg.contains("session `b` is still running another call"),
        "{msg}"
    );
    let ran = if error_code(&first).is_some() {
        &second
    } else {
        &first
    };
    assert_eq!(text(ran), "slept\n");
    assert_eq!(
        text(&s.session("python", "b", "print(n)").await),
        "1\nexit code 0"
    );
}

/// One client's 32 sessions at once, under the default `--max-sessions`.
#[tokio::test]
async fn thirty_two_sessions_at_once_keep_separate_state_by_default() {
    const SESSIONS: usize = 32;
    let mark = marker("thirty-two");
    let s = server_with(&mark, 60, &[], &[]).await;
    let s = &s;
    let set = (0..SESSIONS).map(|i| async move {
        s.session("shell", &format!("s{i}"), &format!("x={i}"))
            .await
    });
    for r in futures::future::join_all(set).await {
        assert_eq!(r.is_error, Some(false), "{r:?}");
    }
    let get = (0..SESSIONS).map(|i| async move {
        let r = s
            .session("shell", &format!("s{i}"), "x=$((x + 100)); echo $x")
            .await;
        (i, r)
    });
    for (i, r) in futures::future::join_all(get).await {
        assert_eq!(
            text(&r),
            format!("{}\nexit code 0", i + 100),
            "session s{i}"
        );
    }
}

#[tokio::test]
async fn idle_sessions_expire_and_leave_no_process() {
    let mark = marker("idle");
    let s = server_with(&mark, 30, &[], &[("SESSION_IDLE_TIMEOUT", "2")]).await;
    let child = format!("{mark}-child");
    let r = s
        .session(
            "shell",
            "i",
            &format!("x=1; (exec -a {child} sleep 1000) & echo started"),
        )
        .await;
    assert_eq!(text(&r), "started\n");
    wait_running(&child).await;
    // Reaped after 2 s idle: the jail, the agent, the interpreter, the child.
    assert_no_process_left(&mark).await;
    assert!(
        eventually(|| s.stderr().contains("session ended: it was idle for 2 s")).await,
        "{}",
        s.stderr()
    );
    let r = s.session("shell", "i", "echo ${x:-unset}").await;
    assert_eq!(
        text(&r),
        "unset\nnew session `i`: the earlier one ended (it was idle for 2 s); its state and \
         /workspace files are gone"
    );
    assert_eq!(facts(&r)["session_replaced"], true);
}

#[tokio::test]
async fn sessions_end_at_their_maximum_lifetime() {
    let mark = marker("lifetime");
    let s = server_with(&mark, 30, &["--session-max-lifetime", "3"], &[]).await;
    // A call still running at the maximum lifetime finishes, then the
    // session closes.
    let r = s
        .session("python", "l", "import time\ntime.sleep(4)\nprint('done')")
        .await;
    assert_eq!(
        text(&r),
        "done\nsession `l` reached its maximum lifetime and was closed; the next call with \
         this name starts a fresh one"
    );
    assert_eq!(facts(&r)["session_closed"], true);
    assert_no_process_left(&mark).await;
    // An idle session is reaped at its maximum lifetime, though never idle
    // for the idle timeout (300 s).
    assert_eq!(
        text(&s.session("python", "m", "y = 2").await),
        "(no output)"
    );
    assert_no_process_left(&mark).await;
    let r = s.session("python", "m", "print('y' in dir())").await;
    assert_eq!(
        text(&r),
        "False\nnew session `m`: the earlier one ended (it reached the maximum lifetime of \
         3 s); its state and /workspace files are gone"
    );
}

/// User code cannot kill the agent (the jail's pid 1: the kernel drops
/// its signals); an agent that dies all the same (here killed from outside
/// the jail, by the test, in the middle of a call) is detected, and the
/// session reset.
#[tokio::test]
async fn the_agent_outlives_user_codes_signals_and_its_death_resets_the_session() {
    let mark = marker("agent-kill");
    let s = server_with(&mark, 30, &[], &[]).await;
    s.session("python", "k", "x = 1\nopen('/workspace/f', 'w').write('f')")
        .await;
    let signals = "import os, signal, time\n\
        for s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n\
        \x20   os.kill(1, s)\n\
        time.sleep(0.2)\n\
        print('alive', x)";
    let r = s.session("python", "k", signals).await;
    assert_eq!(text(&r), "alive 1\n", "{r:?}");

    let child = format!("{mark}-child");
    let code = format!(
        "import subprocess, time\n\
         subprocess.Popen(['bash', '-c', 'exec -a {child} sleep 1000'])\ntime.sleep(30)"
    );
    let call = s.call(json!({"env": "python", "session": "k", "code": code}));
    let kill = async {
        wait_running(&child).await;
        // The agent: the session jail's process named `agent`.
        let agents: Vec<u32> = pids_with(&mark)
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "agent")
            })
            .collect();
        assert_eq!(agents.len(), 1, "{agents:?}");
        signal_pid(agents[0], nix::sys::signal::Signal::SIGKILL);
    };
    let (r, ()) = tokio::join!(call, kill);
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.starts_with("the session's sandbox failed (")
            && t.ends_with("): session reset: interpreter state and /workspace files lost"),
        "{t}"
    );
    assert_eq!(facts(&r)["session_reset"], true);
    // Every process of the jail went with its pid 1.
    assert_no_process_left(&child).await;
    let r = s
        .session(
            "python",
            "k",
            "import os\nprint('x' in dir(), os.path.exists('/workspace/f'))",
        )
        .await;
    assert_eq!(text(&r), "False False\n");
}

/// A call that names an open session and no `env` runs in the session's
/// environment, not the default one (which would be a mismatch); a call
/// that names a new session and no `env` gets the default.
#[tokio::test]
async fn a_session_call_without_env_runs_in_the_sessions_environment() {
    let mark = marker("own-env");
    let s = server_with(&mark, 30, &[], &[]).await;
    s.session("shell", "sh", "x=kept").await;
    let r = s.call(json!({"session": "sh", "code": "echo $x"})).await;
    assert_eq!(text(&r), "kept\n", "{r:?}");
    let r = s
        .call(json!({"session": "new", "code": "import sys; print(sys.version_info[0])"}))
        .await;
    assert_eq!(text(&r), "3\nexit code 0", "{r:?}");
}

#[tokio::test]
async fn cancelling_a_session_call_interrupts_it_and_keeps_state() {
    let mark = marker("cancel");
    let s = server_with(&mark, 600, &[], &[]).await;
    let child = format!("{mark}-child");
    s.session("shell", "c", "x=kept").await;
    let sleeper = || async {
        let handle = s
            .call_cancellable(json!({
                "env": "shell", "session": "c",
                "code": format!("(exec -a {child} sleep 1000)"),
            }))
            .await;
        wait_running(&child).await;
        handle
    };
    sleeper()
        .await
        .cancel(Some("test cancels".into()))
        .await
        .unwrap();
    // The next call, at once, waits for the interrupt to land instead of
    // being told the session is busy (clients cancel and call again at
    // once). State is kept.
    let r = s.session("shell", "c", "echo $x").await;
    assert_eq!(text(&r), "kept\n", "{r:?}");
    assert_no_process_left(&child).await;
    // A session that is busy and not cancelled is still refused at once.
    let handle = sleeper().await;
    let started = std::time::Instant::now();
    let r = s.session("shell", "c", "echo $x").await;
    let msg = assert_refused(&r, "session_busy");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // It says how long at most (the 600 s timeout and the interrupt's grace).
    assert!(msg.contains("It ends within 60"), "{msg}");
    handle.cancel(None).await.unwrap();
    assert_no_process_left(&child).await;
}

#[tokio::test]
async fn no_session_process_survives_the_client_going_away() {
    let mark = marker("eof");
    let s = server_with(&mark, 600, &[], &[]).await;
    let child = format!("{mark}-child");
    for (env, name, code) in [
        ("python", "p", "1"),
        ("shell", "s", "true"),
        ("node", "n", "1"),
    ] {
        let r = s.session(env, name, code).await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
    }
    s.session("shell", "s", &format!("(exec -a {child} sleep 1000) &"))
        .await;
    // One session busy when the client goes.
    let sleeper = format!("exec -a {child} sleep 1000");
    let busy = s.session("shell", "busy", &sleeper);
    tokio::select! {
        r = busy => panic!("the call ended: {r:?}"),
        () = async {
            wait_running(&child).await;
            while pids_with(&child).len() < 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } => {}
    }
    assert!(!pids_with(&mark).is_empty());
    let pid = s.pid;
    let log = s.disconnect().await;
    assert_no_process_left(&mark).await;
    assert_no_process_left(&child).await;
    let log = log.lock().unwrap().clone();
    assert!(
        log.contains("stdin closed") && log.contains("sessions closed"),
        "{log}"
    );
    assert!(
        eventually(|| !std::path::Path::new(&format!("/proc/{pid}")).exists()).await,
        "the server did not exit"
    );
}

#[tokio::test]
async fn no_session_process_survives_a_killed_server() {
    let mark = marker("crash");
    let s = server_with(&mark, 600, &[], &[]).await;
    let child = format!("{mark}-child");
    s.session("shell", "s", &format!("(exec -a {child} sleep 1000) &"))
        .await;
    s.session("python", "p", "1").await;
    wait_running(&child).await;
    // SIGKILL to the server's own pid (a positive pid this test started).
    signal_pid(s.pid, nix::sys::signal::Signal::SIGKILL);
    assert_no_process_left(&mark).await;
    assert_no_process_left(&child).await;
}
