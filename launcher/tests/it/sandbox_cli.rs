//! `nix-sandbox-mcp sandbox` against a real server's sessions (real
//! bubblewrap, the fixture session wrappers), through its control socket,
//! as the test's user and as uid 65534: list, status, destroy (of an idle
//! session and of one running a call), and each bad input one line and a
//! non-zero exit.

use std::process::Output;

use serde_json::{Value, json};

use crate::common::*;

/// A runtime directory of `user`'s (mode 0700), as `XDG_RUNTIME_DIR`.
fn runtime_dir(user: User) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if user == User::Nobody {
        let uid = Some(rustix::fs::Uid::from_raw(65534));
        let gid = Some(rustix::fs::Gid::from_raw(65534));
        rustix::fs::chown(dir.path(), uid, gid).unwrap();
    }
    dir
}

/// The CLI failed with one line on stderr holding `says`, nothing on stdout.
#[track_caller]
fn assert_one_line_failure(out: &Output, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(says), "{err}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// The NDJSON lines of `out`, each parsed.
fn json_lines(out: &Output) -> Vec<Value> {
    assert!(out.status.success(), "{out:?}");
    (String::from_utf8_lossy(&out.stdout).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_person_lists_inspects_and_ends_the_models_sessions() {
    for user in User::all() {
        let runtime = runtime_dir(user);
        let rt = runtime.path();
        // No server yet.
        let out = cli(user, rt, &["list"]).await;
        assert_one_line_failure(&out, "no nix-sandbox-mcp server of yours is running");

        let mark = marker("cli");
        let s = control_server(user, rt, sessions_marked(&mark, 30)).await;
        let r = s
            .session("shell", "work", "echo made > /workspace/f; echo ok")
            .await;
        assert_eq!(text(&r), "ok\n", "{user:?}: {r:?}");
        // The jail, of the server's uid, does not see the control socket.
        let sock = rt.join("nix-sandbox-mcp").join(format!("{}.sock", s.pid));
        assert!(sock.exists(), "{}", sock.display());
        let code = format!("test -e {} && echo seen || echo unseen", sock.display());
        assert_eq!(text(&s.session("shell", "probe", &code).await), "unseen\n");

        let rows = json_lines(&cli(user, rt, &["list", "--json"]).await);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let row = &rows[1];
        assert_eq!(rows[0]["id"], "probe");
        assert_eq!(row["id"], "work");
        assert_eq!(row["env"], "shell");
        assert_eq!(row["server"], s.pid);
        assert_eq!(row["client"], "stdio");
        assert_eq!(row["busy"], false);
        assert_eq!(row["calls"], 1, "{row}");

        let out = cli(user, rt, &["list"]).await;
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.starts_with("ID") && table.contains("work"), "{table}");
        assert!(
            table.lines().nth(2).unwrap().contains(&s.pid.to_string()),
            "{table}"
        );

        let status = json_lines(&cli(user, rt, &["status", "work", "--json"]).await);
        assert_eq!(status[0]["id"], "work");
        let out = cli(user, rt, &["status", &format!("{}/work", s.pid)]).await;
        let detail = String::from_utf8_lossy(&out.stdout);
        assert!(
            detail.contains("environment: shell") && detail.contains("state: idle"),
            "{detail}"
        );

        // Bad input: one line naming it and the fix, a non-zero exit.
        let out = cli(user, rt, &["status", "nope"]).await;
        assert_one_line_failure(&out, "no open session `nope`");
        let out = cli(user, rt, &["destroy", "1/work"]).await;
        assert_one_line_failure(&out, "no server of yours has pid 1");
        let out = cli(user, rt, &["frob"]).await;
        assert_one_line_failure(&out, "unknown verb `frob`");
        assert_eq!(out.status.code(), Some(2));

        // Destroy: gone from the list; the model's next call is told why.
        let out = cli(user, rt, &["destroy", "work"]).await;
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("destroyed work (server {})\n", s.pid)
        );
        let rows = json_lines(&cli(user, rt, &["list", "--json"]).await);
        assert_eq!(rows.len(), 1, "only probe is left: {rows:?}");
        let r = s
            .session("shell", "work", "cat /workspace/f 2>&1 || echo gone")
            .await;
        let said = text(&r);
        assert!(
            said.contains("gone") && said.contains("a person ended it"),
            "{said}"
        );

        // A session running a call: its call is cancelled, then it ends.
        let call = s
            .call_cancellable(json!({"env": "shell", "session": "long", "code": "sleep 100"}))
            .await;
        let mut busy = false;
        for _ in 0..300 {
            let rows = json_lines(&cli(user, rt, &["list", "--json"]).await);
            if rows.iter().any(|r| r["id"] == "long" && r["busy"] == true) {
                busy = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(busy, "the long call shows as running");
        let out = cli(user, rt, &["destroy", "long"]).await;
        assert!(out.status.success(), "{out:?}");
        let ended = tokio::time::timeout(GUARD, call.await_response()).await;
        assert!(ended.is_ok(), "the cancelled call ended");
        let rows = json_lines(&cli(user, rt, &["list", "--json"]).await);
        let ids: Vec<&Value> = rows.iter().map(|r| &r["id"]).collect();
        // `work` again: the model's call after the destroy made it anew.
        assert_eq!(ids, ["probe", "work"], "{rows:?}");
        // Destroyed, a session's jail is gone: none of its processes is left.
        assert!(cli(user, rt, &["destroy", "work"]).await.status.success());
        assert!(cli(user, rt, &["destroy", "probe"]).await.status.success());
        assert_no_process_left(&mark).await;
        let log = s.stderr();
        assert!(log.contains("control socket listening"), "{log}");
        drop(s);
    }
}

/// Another user's directory in the socket directory's place: the server
/// makes no socket there and says so; the CLI refuses to trust it.
#[tokio::test]
async fn a_planted_socket_directory_is_refused_by_server_and_cli() {
    let user = User::unprivileged();
    let runtime = runtime_dir(user);
    let planted = runtime.path().join("nix-sandbox-mcp");
    std::fs::create_dir(&planted).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let s = control_server(user, runtime.path(), Manifest::new(&template())).await;
    let log = s.stderr();
    assert!(log.contains("control socket: none"), "{log}");
    assert!(std::fs::read_dir(&planted).unwrap().next().is_none());
    let out = cli(user, runtime.path(), &["list"]).await;
    assert_one_line_failure(&out, "not trusting the sockets in it");
}

/// Over HTTP, each MCP session's sessions show with it as their client,
/// and two clients' sessions of one name are listed apart; `status` of
/// that name is refused in one line saying why.
#[tokio::test]
async fn an_http_servers_clients_sessions_are_listed_apart() {
    use crate::http::{HttpServer, result_text};
    let user = User::Own;
    let runtime = runtime_dir(user);
    let rt = runtime.path();
    let server = HttpServer::start_command(
        user.command(),
        vec![Manifest::new(&template())],
        &["--allow-wrappers-outside-store"],
        &[("XDG_RUNTIME_DIR", rt.to_str().unwrap())],
    )
    .await;
    for _ in 0..2 {
        let mut client = server.client();
        client.initialize().await;
        let arguments = json!({"env": "shell", "session": "same", "code": "echo hi"});
        let (id, body) =
            client.request("tools/call", json!({"name": "run", "arguments": arguments}));
        let reply = client.post(&body).await;
        assert_eq!(result_text(&reply.message(id).await), "hi\n");
        // The client stays: its MCP session keeps its sessions.
        std::mem::forget(client);
    }
    let rows = json_lines(&cli(user, rt, &["list", "--json"]).await);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row["id"], "same");
        assert!(row["client"].as_str().unwrap().starts_with("mcp:"), "{row}");
    }
    assert_ne!(rows[0]["client"], rows[1]["client"]);
    let out = cli(user, rt, &["status", "same"]).await;
    assert_one_line_failure(&out, "each have a session `same`");
}

/// `exec`: a person's command in the model's session, as the test's user
/// and as uid 65534: output streamed to the CLI's stdout and stderr, the
/// command's status as the CLI's, `--json` events parsed (text, base64 for
/// bytes that are not UTF-8, the exit), the model's interpreter state
/// untouched, the session's timeout enforced, Ctrl-C ending the command;
/// bad input one line and a non-zero exit.
#[tokio::test]
async fn a_person_runs_commands_in_a_models_session() {
    for user in User::all() {
        let runtime = runtime_dir(user);
        let rt = runtime.path();
        let mark = marker("cliexec");
        let mut manifest = template();
        for env in manifest["environments"]
            .as_object_mut()
            .unwrap()
            .values_mut()
        {
            env["session"].as_array_mut().unwrap().push(json!(mark));
            env["limits"]["timeout_s"] = json!(4);
            env["limits"]["max_timeout_s"] = json!(4);
        }
        let s = control_server(user, rt, Manifest::new(&manifest)).await;
        let r = s
            .session("shell", "work", "x=5; echo hi > /workspace/f; echo ok")
            .await;
        assert_eq!(text(&r), "ok\n", "{user:?}: {r:?}");

        // No shell: the argv as it is, cwd /workspace.
        let out = cli(user, rt, &["exec", "work", "--", "cat", "f"]).await;
        assert_eq!(
            (out.status.code(), &out.stdout[..], &out.stderr[..]),
            (Some(0), &b"hi\n"[..], &b""[..]),
            "{user:?}: {out:?}"
        );
        let script = "echo out; echo err >&2; exit 3";
        let out = cli(user, rt, &["exec", "work", "--", "sh", "-c", script]).await;
        assert_eq!(
            (out.status.code(), &out.stdout[..], &out.stderr[..]),
            (Some(3), &b"out\n"[..], &b"err\n"[..]),
            "{out:?}"
        );

        // --json: one event a line; bytes that are not UTF-8 as base64.
        let script = "printf 'a\\377b'; kill -9 $$";
        let out = cli(
            user,
            rt,
            &["exec", "--json", "work", "--", "sh", "-c", script],
        )
        .await;
        assert_eq!(out.status.code(), Some(137), "{out:?}");
        let events: Vec<Value> = (String::from_utf8_lossy(&out.stdout).lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            events,
            [
                json!({"type": "stdout", "text": "a"}),
                json!({"type": "stdout", "base64": "/w=="}),
                json!({"type": "stdout", "text": "b"}),
                json!({"type": "exit", "code": 137, "signal": 9}),
            ],
            "{out:?}"
        );

        // The model's interpreter kept its state.
        assert_eq!(
            text(&s.session("shell", "work", "echo x=$x").await),
            "x=5\n"
        );

        // The session's timeout holds.
        let out = cli(user, rt, &["exec", "--json", "work", "--", "sleep", "100"]).await;
        let last = String::from_utf8_lossy(&out.stdout);
        let last: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
        assert_eq!(
            last,
            json!({"type": "exit", "code": 137, "signal": 9, "timed_out": true})
        );

        // Ctrl-C on the CLI ends the command: the session is idle again.
        let mut cmd = user.command();
        cmd.args(["sandbox", "exec", "work", "--", "sh", "-c"])
            .arg("echo started; exec sleep 100")
            .env("XDG_RUNTIME_DIR", rt)
            .stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut first)
            .await
            .unwrap();
        assert_eq!(first, "started\n");
        signal_child(&child, nix::sys::signal::Signal::SIGINT);
        let status = tokio::time::timeout(GUARD, child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(!status.success(), "{status:?}");
        let mut idle = false;
        for _ in 0..100 {
            let rows = json_lines(&cli(user, rt, &["status", "--json", "work"]).await);
            if rows[0]["busy"] == false {
                idle = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(idle, "the command ended with the CLI");
        assert_eq!(
            text(&s.session("shell", "work", "echo x=$x").await),
            "x=5\n"
        );

        // Bad input: one line, a non-zero exit.
        let out = cli(user, rt, &["exec", "work", "--", "/no/such/program"]).await;
        assert_one_line_failure(&out, "cannot run `/no/such/program`");
        assert_eq!(out.status.code(), Some(127));
        let out = cli(user, rt, &["exec", "nope", "--", "true"]).await;
        assert_one_line_failure(&out, "no open session `nope`");
        let out = cli(user, rt, &["exec", "work"]).await;
        assert_one_line_failure(&out, "exec needs a command after `--`");
        assert_eq!(out.status.code(), Some(2));

        assert!(cli(user, rt, &["destroy", "work"]).await.status.success());
        assert_no_process_left(&mark).await;
        drop(s);
    }
}

/// `create`: a person makes a session on the running server, as the
/// test's user and as uid 65534, then runs a command in it; a name taken,
/// an unknown environment, a package the policy refuses and no server are
/// each one line and a non-zero exit.
#[tokio::test]
async fn a_person_makes_a_session_and_uses_it() {
    for user in User::all() {
        let runtime = runtime_dir(user);
        let rt = runtime.path();
        let out = cli(user, rt, &["create", "shell"]).await;
        assert_one_line_failure(&out, "no nix-sandbox-mcp server of yours is running");

        let mark = marker("clicreate");
        let s = control_server(user, rt, sessions_marked(&mark, 30)).await;
        let out = cli(user, rt, &["create", "--name", "made", "shell"]).await;
        assert!(out.status.success(), "{user:?}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "made\n");
        let rows = json_lines(&cli(user, rt, &["list", "--json"]).await);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            (&rows[0]["id"], &rows[0]["env"], &rows[0]["client"]),
            (&json!("made"), &json!("shell"), &json!("cli"))
        );
        let out = cli(
            user,
            rt,
            &["exec", "made", "--", "sh", "-c", "echo in-$PWD"],
        )
        .await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "in-/workspace\n",
            "{out:?}"
        );

        // Without --name, the server's ID printed is the one to use.
        let out = cli(user, rt, &["create", "shell"]).await;
        assert!(out.status.success(), "{out:?}");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(id.starts_with("cli-") && id.len() == 12, "{id}");
        assert!(cli(user, rt, &["status", &id]).await.status.success());

        let out = cli(user, rt, &["create", "--name", "made", "shell"]).await;
        assert_one_line_failure(&out, "a session `made` is open");
        let out = cli(user, rt, &["create", "nope"]).await;
        assert_one_line_failure(&out, "unknown environment `nope`");
        let out = cli(user, rt, &["create", "--with", "jq", "shell"]).await;
        assert_one_line_failure(&out, "packages");
        let out = cli(user, rt, &["create", "--server", "1", "shell"]).await;
        assert_one_line_failure(&out, "no server of yours has pid 1");

        assert!(cli(user, rt, &["destroy", "made"]).await.status.success());
        assert!(cli(user, rt, &["destroy", &id]).await.status.success());
        assert_no_process_left(&mark).await;
        drop(s);
    }
}

/// `enter`: an interactive shell in the model's session on a
/// pseudo-terminal, driven as a person's terminal, as the test's user and
/// as uid 65534: a command's output and a /dev/pts terminal in the jail,
/// Ctrl-C ending the foreground job and not the shell (nor the CLI), a
/// resize seen by `stty size`, the shell's exit status as the CLI's, the
/// person's terminal modes given back, the session idle after; bad input
/// (no terminal, an unknown session) one line and a non-zero exit.
#[tokio::test]
async fn a_person_enters_a_models_session() {
    for user in User::all() {
        let runtime = runtime_dir(user);
        let rt = runtime.path();
        let mark = marker("clienter");
        let s = control_server(user, rt, sessions_marked(&mark, 30)).await;
        let r = s.session("shell", "work", "x=5; echo ok").await;
        assert_eq!(text(&r), "ok\n", "{user:?}: {r:?}");

        let (mut child, master, slave, before) = enter_on_pty(user, rt, "work");
        let mut keys = std::fs::File::from(master.try_clone().unwrap());
        let mut typed = |text: &[u8]| std::io::Write::write_all(&mut keys, text).unwrap();
        let screen = Screen::follow(master);
        // The prompt is computed, so the typed line does not hold it.
        typed(b"PS1='<$((6*9))> '\r");
        let at = screen.wait_for(0, "<54> ").await;
        typed(b"echo $((6*7)); tty; pwd\r");
        let at = screen.wait_for(at, "42\r\n").await;
        let at = screen.wait_for(at, "/dev/pts/").await;
        let at = screen.wait_for(at, "/workspace\r\n<54> ").await;

        // Ctrl-C ends the foreground job: the prompt is back and the
        // shell answers at once.
        typed(b"sleep 100\r");
        let at = screen.wait_for(at, "sleep 100\r\n").await;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        typed(b"\x03");
        let at = screen.wait_for(at, "<54> ").await;
        typed(b"echo after-$((1+1))\r");
        let at = screen.wait_for(at, "after-2\r\n<54> ").await;
        // The shell holds the session as a call does.
        let rows = json_lines(&cli(user, rt, &["status", "--json", "work"]).await);
        assert_eq!(rows[0]["busy"], true, "{rows:?}");

        // A resize: the person's window's new size, then SIGWINCH.
        let size = nix::pty::Winsize {
            ws_row: 40,
            ws_col: 120,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize, which lives through the call.
        let set = unsafe {
            nix::libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&slave),
                nix::libc::TIOCSWINSZ,
                std::ptr::from_ref(&size),
            )
        };
        assert_eq!(set, 0);
        signal_child(&child, nix::sys::signal::Signal::SIGWINCH);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        typed(b"stty size\r");
        let at = screen.wait_for(at, "40 120\r\n").await;

        // The shell's status is the CLI's; the terminal's modes are back.
        typed(b"exit 3\r");
        let status = tokio::time::timeout(GUARD, child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(3), "{user:?}: {}", screen.text());
        let after = nix::sys::termios::tcgetattr(&slave).unwrap();
        assert_eq!(
            (after.local_flags, after.input_flags, after.output_flags),
            (before.local_flags, before.input_flags, before.output_flags)
        );
        assert!(screen.text()[..at].contains("<54> "));
        let rows = json_lines(&cli(user, rt, &["status", "--json", "work"]).await);
        assert_eq!(rows[0]["busy"], false, "{rows:?}");
        assert_eq!(
            text(&s.session("shell", "work", "echo x=$x").await),
            "x=5\n"
        );

        // Bad input: no terminal on stdin (exit 2), an unknown session.
        let out = cli(user, rt, &["enter", "work"]).await;
        assert_one_line_failure(&out, "enter needs a terminal on stdin");
        assert_eq!(out.status.code(), Some(2));
        let (mut child, master, _slave, _) = enter_on_pty(user, rt, "nope");
        let screen = Screen::follow(master);
        let status = tokio::time::timeout(GUARD, child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(1));
        screen.wait_for(0, "no open session `nope`").await;
        assert_eq!(
            screen.text().trim_end().lines().count(),
            1,
            "{}",
            screen.text()
        );

        assert!(cli(user, rt, &["destroy", "work"]).await.status.success());
        assert_no_process_left(&mark).await;
        drop(s);
    }
}

/// Profiles: `profiles` lists the manifest's (text and `--json`); a
/// session made under one has its limits lowered where the launcher holds
/// them (the layer's size, the exec timeout) and its wrapper told the rest
/// (`NIX_SANDBOX_LIMITS`, `NIX_SANDBOX_NETWORK_OFF`, no `PROJECT_DIR`; no
/// layer of the writable project under `project = "read-only"`), as
/// the test's user and as uid 65534; a profile that changes nothing
/// changes no variable; an unknown profile and `--with` under a profile
/// without packages are each one line and a non-zero exit.
#[tokio::test]
async fn a_person_makes_sessions_under_profiles() {
    use std::os::unix::fs::PermissionsExt;
    for user in User::all() {
        let runtime = runtime_dir(user);
        let rt = runtime.path();
        // The session wrapper writes the variables it was given here.
        let seen = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        readable_by_all(project.path());
        let mark = marker("cliprofile");
        let mut m = template();
        let wrapper = wrapper_script(
            seen.path(),
            "session-env",
            &format!("env > {}/env.$$\n", seen.path().display()),
            "session",
        );
        // Writable by the jails' uids (a root server's are its own).
        std::fs::set_permissions(seen.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let shell = &mut m["environments"]["shell"];
        shell["session"][0] = json!(wrapper);
        shell["session"].as_array_mut().unwrap().push(json!(mark));
        m["profiles"] = json!({
            "tight": {
                "description": "no network, no packages, no project, small",
                "network": false, "packages": false, "project": "none",
                "limits": {"workspace_mb": 8, "max_timeout_s": 2, "timeout_s": 1, "nofile": 100}
            },
            "same": {
                "description": "the environment as it is",
                "network": null, "packages": true, "project": null, "limits": {}
            },
            "ro": {
                "description": "the project read-only",
                "network": null, "packages": true, "project": "read-only", "limits": {}
            }
        });
        let s = Server::start_command(
            user.command(),
            vec![Manifest::new(&m)],
            &["--allow-wrappers-outside-store"],
            &[
                ("XDG_RUNTIME_DIR", rt.to_str().unwrap()),
                ("PROJECT_DIR", project.path().to_str().unwrap()),
                // A writable project: `ro` must take its layer away.
                ("NIX_SANDBOX_PROJECT_WRITABLE", "1"),
            ],
        )
        .await;

        let out = cli(user, rt, &["profiles"]).await;
        assert!(out.status.success(), "{user:?}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("PROFILE  SETTINGS\n"), "{text}");
        assert!(
            text.contains("tight    network off, no packages, no project, max_timeout_s 2, nofile 100, timeout_s 1, workspace_mb 8\n"),
            "{text}"
        );
        assert!(text.contains("same     as the environment\n"), "{text}");
        let rows = json_lines(&cli(user, rt, &["profiles", "--json"]).await);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(
            (&rows[2]["name"], &rows[2]["network"], &rows[2]["project"]),
            (&json!("tight"), &json!(false), &json!("none"))
        );
        assert_eq!(rows[2]["limits"]["workspace_mb"], json!(8));

        let out = cli(user, rt, &["create", "--profile", "nope", "shell"]).await;
        assert_one_line_failure(&out, "no profile `nope` on server");
        let out = cli(
            user,
            rt,
            &["create", "--profile", "tight", "--with", "jq", "shell"],
        )
        .await;
        assert_one_line_failure(&out, "profile `tight` takes no packages");

        let out = cli(
            user,
            rt,
            &["create", "--name", "t", "--profile", "tight", "shell"],
        )
        .await;
        assert!(out.status.success(), "{user:?}: {out:?}");
        let row = &json_lines(&cli(user, rt, &["status", "--json", "t"]).await)[0];
        assert_eq!(row["profile"], json!("tight"), "{row}");
        assert_eq!(row["workspace_max_bytes"], json!(8 << 20), "{row}");
        let out = cli(user, rt, &["status", "t"]).await;
        assert!(
            String::from_utf8_lossy(&out.stdout).ends_with("profile: tight\n"),
            "{out:?}"
        );
        // The exec timeout is the profile's max_timeout_s.
        let out = cli(user, rt, &["exec", "--json", "t", "--", "sleep", "10"]).await;
        assert_eq!(out.status.code(), Some(137), "{out:?}");
        let events: Vec<Value> = (String::from_utf8_lossy(&out.stdout).lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            events.last().unwrap(),
            &json!({"type": "exit", "code": 137, "signal": 9, "timed_out": true}),
            "{events:?}"
        );
        let out = cli(
            user,
            rt,
            &["create", "--name", "u", "--profile", "same", "shell"],
        )
        .await;
        assert!(out.status.success(), "{user:?}: {out:?}");
        let row = &json_lines(&cli(user, rt, &["status", "--json", "u"]).await)[0];
        assert_eq!(row["workspace_max_bytes"], json!(512 << 20), "{row}");
        let out = cli(
            user,
            rt,
            &["create", "--name", "r", "--profile", "ro", "shell"],
        )
        .await;
        assert!(out.status.success(), "{user:?}: {out:?}");

        let mut seen_envs: Vec<String> = std::fs::read_dir(seen.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("env."))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect();
        // `same` tells the wrapper nothing, `ro` its limits, `tight` the network too.
        seen_envs.sort_by_key(|e| {
            (
                e.contains("NIX_SANDBOX_LIMITS="),
                e.contains("NIX_SANDBOX_NETWORK_OFF"),
            )
        });
        assert_eq!(seen_envs.len(), 3, "{seen_envs:?}");
        let (same, ro, tight) = (&seen_envs[0], &seen_envs[1], &seen_envs[2]);
        // The writable project's layer for `same`, none for `ro`, which
        // still sees the project (read-only), nor for `tight`.
        assert!(same.contains("NIX_SANDBOX_PROJECT_LAYER=1\n"), "{same}");
        assert!(!ro.contains("NIX_SANDBOX_PROJECT_LAYER"), "{ro}");
        assert!(ro.contains("PROJECT_DIR="), "{ro}");
        assert!(!tight.contains("NIX_SANDBOX_PROJECT_LAYER"), "{tight}");
        assert!(
            tight.contains("NIX_SANDBOX_LIMITS=cpu_s=60 file_mb=256 nofile=100 memory_mb=1024\n"),
            "{tight}"
        );
        assert!(tight.contains("NIX_SANDBOX_NETWORK_OFF=1\n"), "{tight}");
        assert!(!tight.contains("PROJECT_DIR="), "{tight}");
        assert!(!same.contains("NIX_SANDBOX_NETWORK_OFF"), "{same}");
        assert!(
            same.contains(&format!("PROJECT_DIR={}\n", project.path().display())),
            "{same}"
        );

        assert!(cli(user, rt, &["destroy", "t"]).await.status.success());
        assert!(cli(user, rt, &["destroy", "u"]).await.status.success());
        assert!(cli(user, rt, &["destroy", "r"]).await.status.success());
        assert_no_process_left(&mark).await;
        drop(s);
    }
}
