//! One deadline, cancellation and a client going away all end the run, and
//! no process of it is left; a flood is capped while memory stays flat.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn a_busy_loop_ends_at_the_deadline_and_leaves_no_process() {
    let mark = marker("busy");
    let s = Server::start(vec![marked("python", &mark, 2)]).await;
    let r = s
        .run("python", "print('started', flush=True)\nwhile True: pass")
        .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        text(&r),
        "started\ntimed out after 2 s; the process tree was killed"
    );
    let st = facts(&r);
    assert_eq!(st["timed_out"], true);
    assert_eq!(st["exit_code"], serde_json::Value::Null);
    assert!(st["duration_ms"].as_u64().unwrap() >= 2000);
    assert_no_process_left(&mark).await;
    // The server still answers.
    assert_eq!(text(&s.run("python", "print(2)").await), "2\nexit code 0");
}

#[tokio::test]
async fn a_sleeper_that_closed_its_output_ends_at_the_deadline() {
    let mark = marker("closed");
    let s = Server::start(vec![marked("shell", &mark, 2)]).await;
    let r = s
        .run("shell", "echo before; exec >&- 2>&-; sleep 1000")
        .await;
    assert_eq!(
        text(&r),
        "before\ntimed out after 2 s; the process tree was killed"
    );
    assert_eq!(facts(&r)["timed_out"], true);
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_background_child_does_not_outlive_the_run() {
    let mark = marker("bg");
    let s = Server::start(vec![marked("shell", &mark, 30)]).await;
    let r = s
        .run(
            "shell",
            "(exec -a \"$1-child\" sleep 1000) >/dev/null 2>&1 &\necho parent done",
        )
        .await;
    assert_eq!(text(&r), "parent done\n");
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_flood_is_capped_and_memory_stays_flat() {
    // A flood of a fixed size (60 MiB on each stream, under the 64 MiB past
    // which the server stops a run as a flood), not of a fixed time: on a
    // loaded machine a few seconds carried less than the bound.
    let s = Server::fixtures_with_timeout(300).await;
    let r = s
        .run(
            "shell",
            "head -c 62914560 /dev/zero >&2 &\nyes | head -c 62914560\nwait",
        )
        .await;
    let st = facts(&r).clone();
    assert_eq!(st["timed_out"], false, "{st}");
    assert_eq!(st["flooded"], serde_json::Value::Null, "{st}");
    let (out_dropped, err_dropped) = (
        st["stdout_dropped_bytes"].as_u64().unwrap(),
        st["stderr_dropped_bytes"].as_u64().unwrap(),
    );
    let t = text(&r);
    // 64 KiB kept of each stream, plus the markers and notes.
    assert!(t.len() < 2 * 65536 + 512, "the result is {} bytes", t.len());
    assert!(t.starts_with("y\ny\n"));
    assert!(t.contains(&format!("[... {out_dropped} bytes dropped ...]")));
    assert!(t.contains(&format!(
        "stdout cut: {out_dropped} bytes dropped from the middle"
    )));
    assert!(t.contains(&format!(
        "stderr cut: {err_dropped} bytes dropped from the middle"
    )));
    // The flood was far larger than the memory bound below ...
    let flood_mib = (out_dropped + err_dropped) >> 20;
    assert!(flood_mib >= 119, "only {flood_mib} MiB flowed");
    // ... and the launcher's peak memory stayed under it.
    let peak_mib = s.peak_rss_kib() >> 10;
    eprintln!("flood {flood_mib} MiB, peak {peak_mib} MiB");
    assert!(
        peak_mib < 32,
        "peak RSS {peak_mib} MiB after a {flood_mib} MiB flood"
    );
}

#[tokio::test]
async fn cancelling_a_call_kills_the_job() {
    let mark = marker("cancel");
    let s = Server::start(vec![marked("shell", &mark, 600)]).await;
    // The job's own mark: the start-up probe's jail carries `mark` too.
    let job = format!("{mark}-job");
    let handle = s
        .call_cancellable(json!({"env": "shell", "code": format!("exec -a {job} sleep 1000")}))
        .await;
    wait_running(&job).await;
    handle.cancel(Some("test cancels".into())).await.unwrap();
    assert_no_process_left(&mark).await;
    assert!(
        eventually(|| s.stderr().contains("cancelled=true")).await,
        "{}",
        s.stderr()
    );
    assert_eq!(
        text(&s.run("shell", "echo still here").await),
        "still here\n"
    );
}

#[tokio::test]
async fn the_client_going_away_kills_running_jobs() {
    let mark = marker("eof");
    let manifest = marked("shell", &mark, 600);
    let mut raw = RawServer::spawn(&manifest, "info");
    raw.initialize().await;
    // The job's own mark: the start-up probe's jail carries `mark` too.
    let job = format!("{mark}-job");
    raw.call_run(1, "shell", &format!("exec -a {job} sleep 1000"))
        .await;
    wait_running(&job).await;
    raw.close_stdin();
    let status = tokio::time::timeout(GUARD, raw.child.wait())
        .await
        .expect("the server exits when its client is gone")
        .unwrap();
    assert!(status.success(), "{status}");
    assert_no_process_left(&mark).await;
    let log = raw.stderr();
    assert!(
        log.contains("stdin closed") && log.contains("cancelled=true"),
        "{log}"
    );
}

/// SIGKILL, with a run going and a jail inside bubblewrap's setup (before
/// bubblewrap sets its parent-death signal, the gap a killed server used to
/// leave jails in): nothing of either is left, as the test's user and as
/// user 65534.
#[tokio::test]
async fn a_killed_server_leaves_no_job_behind() {
    crate::lifetime::with_a_jail_mid_setup(crate::lifetime::End::Signal(
        nix::sys::signal::Signal::SIGKILL,
    ))
    .await;
}
