//! Ephemeral runs through the fixture jails: output, exit codes, code sizes,
//! the environment a wrapper gets, the surface the model sees.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn hello_in_python_bash_and_node() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    for (env, code) in [
        ("python", "print('hello from python')"),
        ("shell", "echo hello from bash"),
        ("node", "console.log('hello from node')"),
    ] {
        let r = s.run(env, code).await;
        let name = if env == "shell" { "bash" } else { env };
        assert_eq!(text(&r), format!("hello from {name}\n"), "{env}");
        assert_eq!(r.is_error, Some(false), "{env}");
        let st = facts(&r);
        assert_eq!(st["env"], env);
        assert_eq!(st["exit_code"], 0);
        assert_eq!(st["timed_out"], false);
        assert!(st["store_path"].as_str().unwrap().ends_with(&format!(
            "-fixture-{}-run",
            if env == "shell" { "bash" } else { env }
        )));
        assert!(st["duration_ms"].is_u64());
    }
}

#[tokio::test]
async fn env_defaults_to_python() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let r = s
        .call(json!({"code": "import sys; print(sys.version_info[0])"}))
        .await;
    assert_eq!(text(&r), "3\nexit code 0");
    assert_eq!(facts(&r)["env"], "python");
}

#[tokio::test]
async fn stderr_is_kept_apart_and_a_non_zero_exit_is_reported() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let r = s
        .run(
            "python",
            "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)",
        )
        .await;
    assert_eq!(text(&r), "out\n--- stderr ---\nerr\nexit code 3");
    assert_eq!(r.is_error, Some(true));
    assert_eq!(facts(&r)["exit_code"], 3);
    assert_eq!(facts(&r)["signal"], serde_json::Value::Null);

    let r = s.run("node", "console.error('bad'); process.exit(5)").await;
    assert_eq!(text(&r), "--- stderr ---\nbad\nexit code 5");
    let r = s.run("shell", "true").await;
    assert_eq!(text(&r), "(no output)");
    assert_eq!(r.is_error, Some(false));
}

#[tokio::test]
async fn a_program_killed_by_a_signal_is_reported() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let r = s
        .run(
            "python",
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    let out = text(&r);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "killed by signal 9", "{out}");
    assert!(lines[1].starts_with("used: CPU "), "{out}");
    assert_eq!(facts(&r)["signal"], 9);
}

#[tokio::test]
async fn the_code_sees_eof_on_stdin() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let r = s
        .run("python", "import sys\nprint(repr(sys.stdin.read()))")
        .await;
    assert_eq!(text(&r), "''\n");
    let r = s
        .run("shell", "if read -r line; then echo got; else echo eof; fi")
        .await;
    assert_eq!(text(&r), "eof\n");
}

#[tokio::test]
async fn two_mib_of_bash_runs_with_a_raised_limit() {
    let s = Server::start_with(
        vec![Manifest::new(&template())],
        &[
            "--allow-wrappers-outside-store",
            "--max-code-bytes",
            "4194304",
        ],
        &[],
    )
    .await;
    let line = "n=$((n + 1))\n";
    let count = (2 << 20) / line.len() + 1;
    let code = format!("n=0\n{}echo \"$n\"\n", line.repeat(count));
    assert!(code.len() > 2 << 20);
    let r = s.run("shell", &code).await;
    assert_eq!(text(&r), format!("{count}\nexit code 0"));
}

#[tokio::test]
async fn three_hundred_kib_of_python_runs() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let line = "x += 1\n";
    let count = (300 << 10) / line.len() + 1;
    let code = format!("x = 0\n{}print(x)\n", line.repeat(count));
    assert!(code.len() > 300 << 10);
    let r = s.run("python", &code).await;
    assert_eq!(text(&r), format!("{count}\nexit code 0"));
}

#[tokio::test]
async fn code_at_the_limit_runs_and_one_byte_more_is_refused() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let head = "print('at the limit')\n";
    let at_limit = format!("{head}{}", "#".repeat((1 << 20) - head.len()));
    assert_eq!(at_limit.len(), 1 << 20);
    let r = s.run("python", &at_limit).await;
    assert_eq!(text(&r), "at the limit\n");

    let over = format!("{at_limit}#");
    let r = s.run("python", &over).await;
    let msg = assert_refused(&r, "code_too_large");
    assert!(
        msg.contains("1048577 bytes") && msg.contains("1048576"),
        "{msg}"
    );
}

#[tokio::test]
async fn twenty_runs_at_once_each_get_their_own_output() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let calls = (0..20).map(|i| {
        let (env, code) = match i % 3 {
            0 => (
                "python",
                format!("import time; time.sleep(0.2); print('run {i}')"),
            ),
            1 => ("shell", format!("sleep 0.2; echo run {i}")),
            _ => (
                "node",
                format!("setTimeout(() => console.log('run {i}'), 200)"),
            ),
        };
        let s = &s;
        async move { (i, s.run(env, &code).await) }
    });
    let results = futures::future::join_all(calls).await;
    assert_eq!(results.len(), 20);
    for (i, r) in results {
        assert_eq!(text(&r), format!("run {i}\n"));
        assert_eq!(r.is_error, Some(false));
    }
}

#[tokio::test]
async fn the_wrapper_gets_only_the_contract_environment() {
    let project = tempfile::tempdir().unwrap();
    let mut m = template();
    m["environments"]["envdump"] = env_with_wrapper(wrappers().join("env-run").to_str().unwrap());
    m["environments"]["envdump"]["interpreter"] = json!("bash");
    let s = Server::start_with(
        vec![Manifest::new(&m)],
        &["--allow-wrappers-outside-store"],
        &[
            ("NSM_TEST_SECRET", "hunter2"),
            ("PROJECT_DIR", project.path().to_str().unwrap()),
            ("PROJECT_MOUNT", "/src"),
        ],
    )
    .await;
    let r = s.run("envdump", "env").await;
    let out = text(&r);
    assert!(out.contains("PATH=/usr/bin:/bin\n"), "{out}");
    assert!(
        out.contains(&format!("PROJECT_DIR={}\n", project.path().display())),
        "{out}"
    );
    assert!(out.contains("PROJECT_MOUNT=/src\n"), "{out}");
    assert!(out.contains("HOME="), "{out}");
    assert!(
        !out.contains("hunter2") && !out.contains("RUST_LOG"),
        "{out}"
    );
}

#[tokio::test]
async fn the_project_is_announced_and_read_only() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("README"), "project file\n").unwrap();
    let s = Server::start_with(
        vec![Manifest::new(&template())],
        &["--allow-wrappers-outside-store"],
        &[("PROJECT_DIR", project.path().to_str().unwrap())],
    )
    .await;
    let info = s.client.peer_info().unwrap();
    let instructions = info.instructions.clone().unwrap();
    assert!(
        instructions.contains("The project is read-only at /project."),
        "{instructions}"
    );
    let r = s
        .run(
            "shell",
            "cat /project/README; touch /project/x 2>/dev/null || echo read-only",
        )
        .await;
    assert_eq!(text(&r), "project file\nread-only\n");
}

#[tokio::test]
async fn tools_list_and_instructions_describe_the_environments() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let tools = s.client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    let tool = &tools[0];
    assert_eq!(tool.name, "run");
    assert!(tool.output_schema.is_none());
    let schema = serde_json::to_value(&*tool.input_schema).unwrap();
    assert_eq!(schema["required"], json!(["code"]));
    // Not an enum: the description names each environment and what it
    // holds, and costs fewer tokens per environment.
    assert!(schema["properties"]["env"].get("enum").is_none());
    assert_eq!(
        schema["properties"]["env"]["description"],
        "python (default): Python 3 (host, fixture); node: Node.js (host, fixture); shell: Bash \
         with coreutils (host, fixture)"
    );
    assert_eq!(
        schema["properties"]["timeout_s"],
        json!({"type": "integer", "nullable": true})
    );

    let info = s.client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "nix-sandbox-mcp");
    let instructions = info.instructions.clone().unwrap();
    let lines: Vec<&str> = instructions.lines().collect();
    assert_eq!(lines[0], "No network unless `env` says.");
    // Memory "per process" where the server has no cgroup (rlimits).
    let limits = lines[1].replace("memory per process 1 GiB", "memory 1 GiB");
    assert_eq!(
        limits,
        "Limits per run: time 30 s (up to 120 s on request), memory 1 GiB, processes 32, \
         CPU 60 s, files 256 MiB, /tmp 256 MiB, /workspace 512 MiB."
    );
    assert_eq!(lines.len(), 2);
    assert!(!instructions.contains("project"));
    // The whole surface stays small (the 250-token target is measured by the
    // benchmark; 4 characters a token is a generous proxy here).
    let surface = serde_json::to_string(&tools).unwrap().len() + instructions.len();
    assert!(
        surface < 1100,
        "tools/list + instructions is {surface} characters"
    );
}
