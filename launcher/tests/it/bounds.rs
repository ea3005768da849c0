//! Server-wide bounds over stdio, attacked the way an ordinary user's
//! client could: the server runs as user 65534 (when the tests run as
//! root), with rlimits and no cgroup. Limits are set through their
//! environment variables.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::common::*;

/// 100 runs at once from one client: at most `NIX_SANDBOX_MAX_RUNS` jails
/// are alive at any time; the others wait in line, and those still waiting
/// after the queue's 10 s are refused with `server_busy`, naming the limit
/// and its setting.
#[tokio::test]
async fn runs_past_the_limit_wait_in_line_then_are_refused() {
    const MAX: usize = 4;
    let mark = marker("runs-cap");
    let server = Server::start_command(
        User::unprivileged().command(),
        vec![marked("python", &mark, 60)],
        &["--allow-wrappers-outside-store"],
        &[("NIX_SANDBOX_MAX_RUNS", &MAX.to_string())],
    )
    .await;
    let server = std::sync::Arc::new(server);
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let server = std::sync::Arc::clone(&server);
            tokio::spawn(async move {
                server
                    .run("python", "import time; time.sleep(1.5); print('done')")
                    .await
            })
        })
        .collect();
    let mut most = 0;
    let started = Instant::now();
    while !calls.iter().all(|c| c.is_finished()) && started.elapsed() < Duration::from_secs(90) {
        most = most.max(count_named(&mark, "python3"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut ran, mut refused) = (0, 0);
    for call in calls {
        let result = call.await.unwrap();
        if result.is_error == Some(false) {
            assert!(text(&result).starts_with("done"), "{result:?}");
            ran += 1;
        } else {
            let message = assert_refused(&result, "server_busy");
            assert!(
                message.contains("4 programs at once")
                    && message.contains("--max-runs / NIX_SANDBOX_MAX_RUNS"),
                "{message}"
            );
            refused += 1;
        }
    }
    assert!(most <= MAX, "{most} runs were alive at once, over {MAX}");
    assert!(
        most >= 2,
        "the runs never overlapped ({most}): the test measured nothing"
    );
    // In 10 s of queue and 1.5 s a run, 4 at a time: about 30 ran.
    assert!(ran >= 12, "only {ran} ran; {refused} refused");
    assert!(refused >= 20, "only {refused} refused; {ran} ran");
    assert_no_process_left(&mark).await;
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A client that sends 20,000 requests and reads none of the answers: the
/// server stops reading requests once the unread answers pass
/// `NIX_SANDBOX_MAX_UNREAD_BYTES`, so its memory stays bounded (without
/// back-pressure it held every answer: about 40 MiB of them here). Once the
/// client reads, every request is answered.
#[tokio::test]
async fn a_client_that_never_reads_does_not_grow_the_server() {
    never_reads(Transport::Pipes).await;
}

/// The same over a socketpair each, as Node's clients connect a server:
/// there the server writes its answers straight to the socket and waits on
/// the reactor only once the socket is full.
#[tokio::test]
async fn a_client_on_sockets_that_never_reads_does_not_grow_the_server() {
    never_reads(Transport::Sockets).await;
}

async fn never_reads(transport: Transport) {
    const REQUESTS: u64 = 20_000;
    let manifest = Manifest::new(&template());
    let mut cmd = User::unprivileged().command();
    cmd.arg("--manifest")
        .arg(&manifest.path)
        .arg("--allow-wrappers-outside-store")
        .env("RUST_LOG", "warn")
        .env("NIX_SANDBOX_MAX_UNREAD_BYTES", "1048576")
        .env_remove("NIX_SANDBOX_MANIFEST")
        .kill_on_drop(true);
    let (mut child, mut stdin, stdout) = spawn_over(cmd, transport);
    let pid = child.id().unwrap();
    let log = collect(child.stderr.take().unwrap());
    let mut stdout = tokio::io::BufReader::new(stdout).lines();
    let line = |v: Value| format!("{v}\n").into_bytes();
    stdin
        .write_all(&line(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "never-reads", "version": "0"}}
        })))
        .await
        .unwrap();
    stdin
        .write_all(&line(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ))
        .await
        .unwrap();
    let init = tokio::time::timeout(GUARD, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(init.contains("nix-sandbox-mcp"), "{init}");
    let before = rss_kib(pid);
    // The flood, from a task: its writes block once the server stops
    // reading.
    let writer = tokio::spawn(async move {
        for id in 1..=REQUESTS {
            let request = line(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
            if stdin.write_all(&request).await.is_err() {
                return None;
            }
        }
        Some(stdin)
    });
    // Let the server read what it will, until its memory settles.
    let mut last = rss_kib(pid);
    let mut steady = 0;
    let started = Instant::now();
    while steady < 10 && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = rss_kib(pid);
        steady = if now.abs_diff(last) < 256 {
            steady + 1
        } else {
            0
        };
        last = now;
    }
    let grown_mib = last.saturating_sub(before) / 1024;
    assert!(
        !writer.is_finished(),
        "the server read all {REQUESTS} requests of a client that reads nothing (and grew \
         by {grown_mib} MiB)"
    );
    assert!(
        grown_mib < 16,
        "the server grew by {grown_mib} MiB for a client that reads nothing"
    );
    assert!(
        log.lock()
            .unwrap()
            .contains("the client is not reading its answers"),
        "{}",
        log.lock().unwrap()
    );
    // Now it reads: every request is answered, none dropped.
    let mut answered = 0;
    while answered < REQUESTS {
        let line = tokio::time::timeout(GUARD, stdout.next_line())
            .await
            .expect("the answers keep coming")
            .unwrap()
            .expect("an answer");
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert!(answer["result"]["tools"].is_array(), "{line}");
        answered += 1;
    }
    let stdin = writer.await.unwrap();
    assert!(stdin.is_some(), "the client's writes all went through");
}

/// A session's `cpu_s` holds for all its processes together, across its
/// calls and between them: background processes that each stay under
/// RLIMIT_CPU (which binds every process alone) end the session once they
/// used the budget together, and a call whose children used it resets the
/// session. Each is said to the model.
#[tokio::test]
async fn a_sessions_cpu_budget_counts_all_its_processes_across_calls() {
    let mark = marker("cpu-budget");
    // The fixture jails with RLIMIT_CPU at 2 s: the run wrapper (the probe
    // checks it) through a script of its own, the session's by argument.
    let dir = tempfile::tempdir().unwrap();
    let run = wrapper_script(dir.path(), "python-run-cpu2", "JAIL_CPU_S=2 ", "python-run");
    let mut manifest = template();
    let python = &mut manifest["environments"]["python"];
    python["run"] = json!([run]);
    let session = python["session"].as_array_mut().unwrap();
    session.extend([json!(mark), json!("2")]);
    python["limits"]["cpu_s"] = json!(2);
    let server = Server::start_command(
        User::unprivileged().command(),
        vec![Manifest::new(&manifest)],
        &["--allow-wrappers-outside-store"],
        &[],
    )
    .await;
    let burners = "import subprocess, sys\n\
                   for _ in range(3):\n    \
                       subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n\
                   print('started')";
    let r = server.session("python", "cpu", burners).await;
    assert!(text(&r).starts_with("started"), "{r:?}");
    // Between calls the burners use the 2 s; the session ends, and with
    // it every process of its jail.
    assert!(
        eventually(|| pids_with(&mark).is_empty()).await,
        "the session's processes ran on past its CPU budget: {:?}",
        pids_with(&mark)
    );
    let r = server.session("python", "cpu", "print('again')").await;
    let t = text(&r);
    assert!(
        t.contains(
            "new session `cpu`: the earlier one ended (its processes used its CPU budget of 2 s"
        ),
        "{t}"
    );
    // A call whose own children use the budget resets the session: two
    // children of 1.5 s of CPU each (under RLIMIT_CPU alone), waited for,
    // however slowly a loaded machine gives them that time.
    let spin = "import time\nwhile time.process_time() < 1.5: pass";
    let r = server
        .session(
            "python",
            "cpu",
            &format!(
                "import subprocess, sys\n\
                 ps = [subprocess.Popen([sys.executable, '-c', {spin:?}]) for _ in range(2)]\n\
                 print('spun', [p.wait() for p in ps])"
            ),
        )
        .await;
    let t = text(&r);
    assert!(
        t.starts_with("spun [0, 0]")
            && t.contains(
                "its processes used its CPU budget of 2 s (cpu_s, all of them across its calls): \
                 session reset"
            ),
        "{t}"
    );
}

/// The soft and hard RLIMIT_NOFILE of process `pid`.
fn open_files(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].parse().unwrap(), fields[4].parse().unwrap())
}

/// A server started with a soft limit of 1,024 open files (what systemd
/// gives a unit) raises it to its hard limit at start, and says so; its
/// jails keep their own limit, the environment's `nofile`.
#[tokio::test]
async fn the_server_raises_its_open_files_limit_and_its_jails_keep_theirs() {
    let hard = 4096;
    for user in User::all() {
        let mut cmd = user.command();
        // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                use nix::sys::resource::{Resource, setrlimit};
                setrlimit(Resource::RLIMIT_NOFILE, 1024, hard).map_err(std::io::Error::from)
            });
        }
        let server = Server::start_command(
            cmd,
            vec![Manifest::new(&template())],
            &["--allow-wrappers-outside-store"],
            &[],
        )
        .await;
        assert_eq!(open_files(server.pid), (hard, hard), "{user:?}");
        let log = server.stderr();
        assert!(
            log.contains("open files: the soft limit 1024 raised to the hard limit 4096"),
            "{log}"
        );
        let jail = server
            .run(
                "python",
                "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))",
            )
            .await;
        let nofile = template()["environments"]["python"]["limits"]["nofile"].clone();
        assert!(
            text(&jail).starts_with(&format!("({nofile}, {nofile})")),
            "{user:?}: {}",
            text(&jail)
        );
    }
}
