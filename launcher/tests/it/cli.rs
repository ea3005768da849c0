//! The command line: flags, `--help`, `--version` and `--check`.

use std::process::{Command, Output};

use serde_json::json;

use crate::common::*;

fn launcher(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("NIX_SANDBOX_MANIFEST");
    cmd
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [
        &["--bogus"][..],
        &["--manifest"],
        &["--max-code-bytes", "lots"],
    ] {
        let o = launcher(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("nix-sandbox-mcp: "), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn help_and_version() {
    let o = launcher(&["--help"]).output().unwrap();
    assert!(o.status.success());
    assert!(stdout(&o).contains("--allow-wrappers-outside-store"));
    assert!(stdout(&o).contains("FOR TESTS ONLY"));
    let o = launcher(&["--version"]).output().unwrap();
    assert!(o.status.success());
    assert_eq!(
        stdout(&o),
        format!("nix-sandbox-mcp {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// `--check`'s lines after the host's (jail lifetime, user namespaces,
/// cgroups, limits).
fn env_lines(o: &std::process::Output) -> String {
    let out = stdout(o);
    let host = [
        "jail lifetime: ",
        "jails' kernel budgets: ",
        "user namespaces: ",
        "jails' uid: ",
        "cgroups: ",
        "limits: ",
        "http listener: ",
        "layers: ",
        "forks: ",
        "project: ",
    ];
    let (facts, envs): (Vec<&str>, Vec<&str>) = out
        .lines()
        .partition(|l| host.iter().any(|h| l.starts_with(h)));
    // The kernel budgets' line is a user server's only.
    assert!([8, 9].contains(&facts.len()), "{out}");
    envs.iter().map(|l| format!("{l}\n")).collect()
}

/// What `--check` says of a fixture environment: its wrapper holds the
/// limits, the kernel budgets, the hostname and passwd of the Nix-built
/// jails and bounds its writable mounts, without a seccomp filter.
const FIXTURE_OK: &str = "ok (limits hold; seccomp filter off; kernel budgets held (a user \
                          namespace of its own); hostname \"sandbox\"; /etc/passwd the jail's own; \
                          writable mounts bounded, 512 MiB in all (/tmp 256 MiB, /dev/shm 256 MiB), \
                          the rest read-only)";

/// The line of `--check`'s output that starts with `prefix`.
fn line_of(o: &std::process::Output, prefix: &str) -> Option<String> {
    stdout(o)
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(str::to_owned)
}

#[test]
fn check_passes_on_this_machine() {
    let m = Manifest::new(&template());
    let o = launcher(&["--check", "--allow-wrappers-outside-store", "--manifest"])
        .arg(&m.path)
        .output()
        .unwrap();
    assert_eq!(
        env_lines(&o),
        ["node", "python", "shell"]
            .map(|env| format!("{env}: {FIXTURE_OK}\n"))
            .concat(),
        "{}",
        stderr(&o)
    );
    assert!(o.status.success());
    // This host can give the jails a pid namespace that dies with the
    // server (tests/it/lifetime.rs shows that it does).
    assert_eq!(
        stdout(&o).lines().next(),
        Some("jail lifetime: every jail dies with the server (a pid namespace of their own)")
    );
    // A loopback --http port would be held on both families (or this host
    // has no IPv6 loopback for anyone to take).
    let listener = line_of(&o, "http listener: ");
    assert!(
        listener
            .as_deref()
            .is_some_and(|l| l.starts_with("http listener: ok (")),
        "{listener:?}"
    );
    // The bound on all session layers, MemTotal by default.
    let layers = line_of(&o, "layers: ");
    assert!(
        layers
            .as_deref()
            .is_some_and(|l| l.starts_with("layers: at most ")
                && l.contains("MiB for all session layers together (NIX_SANDBOX_LAYERS_MB")
                && l.ends_with("the largest here: `shell`'s 512 MiB")),
        "{layers:?}"
    );
    // How a session started from a checkpoint gets its files: mounted
    // (a root server: idmapped, which this host's kernel does).
    let forks = line_of(&o, "forks: ").unwrap_or_default();
    let how = match nix::unistd::geteuid().is_root() {
        true => ": each of its layers idmapped from its owner's uid to the new jail's",
        false => " (the jails share the server's uid)",
    };
    assert!(
        forks.starts_with("forks: a session started from a checkpoint") && forks.contains(how),
        "{forks}"
    );
    // A bound below an environment's layer fails the check.
    let o = launcher(&[
        "--check",
        "--allow-wrappers-outside-store",
        "--layers-mb",
        "100",
        "--manifest",
    ])
    .arg(&m.path)
    .output()
    .unwrap();
    assert!(
        stdout(&o).contains(
            "\nlayers: FAIL: `shell`'s workspace_mb (512 MiB) is over the bound on all session \
             layers (100 MiB): every session of it would be refused (layers_full); raise \
             NIX_SANDBOX_LAYERS_MB\n"
        ),
        "{}",
        stdout(&o)
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn check_reads_nix_sandbox_manifest() {
    let m = Manifest::new(&template());
    let o = launcher(&["--check", "--allow-wrappers-outside-store"])
        .env("NIX_SANDBOX_MANIFEST", &m.path)
        .output()
        .unwrap();
    assert_eq!(
        env_lines(&o),
        ["node", "python", "shell"]
            .map(|env| format!("{env}: {FIXTURE_OK}\n"))
            .concat(),
        "{}",
        stderr(&o)
    );
}

#[test]
fn check_fails_with_the_reason_when_a_wrapper_cannot_start() {
    let mut m = template();
    m["environments"]["broken"] = env_with_wrapper(wrappers().join("broken-run").to_str().unwrap());
    m["environments"]["gone"] = env_with_wrapper("/nonexistent/sandbox-run");
    let m = Manifest::new(&m);
    let o = launcher(&["--check", "--allow-wrappers-outside-store", "--manifest"])
        .arg(&m.path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = env_lines(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "broken: FAIL: the wrapper exited with code 1: bwrap: Can't find source path \
         /nonexistent-host-path-for-the-jail: No such file or directory"
    );
    assert_eq!(
        lines[1],
        "gone: FAIL: wrapper /nonexistent/sandbox-run is missing or not executable"
    );
    assert!(
        lines[2..]
            .iter()
            .all(|l| l.ends_with(&format!(": {FIXTURE_OK}"))),
        "{out}"
    );
}

#[test]
fn check_fails_on_a_malformed_manifest_or_none() {
    // A file whose one environment is bad (a bad environment leaves out
    // only itself), and one with none.
    let mut python = template()["environments"]["python"].clone();
    python["interpreter"] = json!("ruby");
    let bad = Manifest::new(&json!({"version": 1, "environments": {"python": python}}));
    let good = Manifest::new(&json!({"version": 1, "environments": {}}));
    let o = launcher(&["--check", "--allow-wrappers-outside-store", "--manifest"])
        .arg(&bad.path)
        .arg("--manifest")
        .arg(&good.path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = env_lines(&o);
    assert!(
        out.starts_with(&format!(
            "manifest: FAIL: {}: environments.python.interpreter: ",
            bad.path.display()
        )),
        "{out}"
    );
    assert!(out.contains("environments: FAIL: none usable"), "{out}");

    let o = launcher(&["--check"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("environments: FAIL: none usable"));
}

/// The launcher with only `vars` set (and PATH), quiet logs: what it says
/// on stderr is only its own lines.
fn quiet(args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut cmd = launcher(args);
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RUST_LOG", "off");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd
}

/// The one line a server that refused to start printed: exit 2, nothing on
/// stdout, one line on stderr.
fn refused_start(o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty(), "{}", stdout(o));
    assert_eq!(err.lines().count(), 1, "{err}");
    err.trim_end().to_owned()
}

#[test]
fn a_project_that_would_fail_every_call_stops_the_server_with_its_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().to_str().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, "").unwrap();
    let missing = tmp.path().join("missing");
    for (vars, want) in [
        (
            vec![("PROJECT_DIR", missing.to_str().unwrap())],
            format!(
                "nix-sandbox-mcp: PROJECT_DIR: {} cannot be used (No such file or directory \
                 (os error 2)); it must be an existing directory: create it, fix the path, \
                 or unset PROJECT_DIR",
                missing.display()
            ),
        ),
        (
            vec![("PROJECT_DIR", file.to_str().unwrap())],
            format!(
                "nix-sandbox-mcp: PROJECT_DIR: {} is not a directory; set it to the \
                 project's directory or unset it",
                file.display()
            ),
        ),
        (
            vec![("PROJECT_DIR", home), ("PROJECT_MOUNT", "/workspace")],
            "nix-sandbox-mcp: PROJECT_MOUNT: /workspace would cover or hide /workspace, which \
             the jail itself uses (it uses /nix, /workspace, /tmp, /home/sandbox, /proc, /dev, \
             /etc, /bin, /usr/bin); set it to a new absolute path such as /project (or unset it)"
                .to_owned(),
        ),
    ] {
        let mut all = vec![("HOME", home)];
        all.extend(vars);
        let o = quiet(&["--stdio"], &all).output().unwrap();
        assert_eq!(refused_start(&o), want);
    }
    let all = [
        ("HOME", home),
        ("PROJECT_DIR", home),
        ("PROJECT_MOUNT", "/nix/store"),
    ];
    let line = refused_start(&quiet(&["--stdio"], &all).output().unwrap());
    assert!(
        line.starts_with("nix-sandbox-mcp: PROJECT_MOUNT: /nix/store would cover or hide /nix,"),
        "{line}"
    );
    // --check names it too, among its other lines, and fails.
    let all = [("HOME", home), ("PROJECT_DIR", missing.to_str().unwrap())];
    let m = Manifest::new(&template());
    let o = quiet(
        &["--check", "--allow-wrappers-outside-store", "--manifest"],
        &all,
    )
    .arg(&m.path)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains(&format!(
            "\nPROJECT_DIR: FAIL: {} cannot be used",
            missing.display()
        )),
        "{}",
        stdout(&o)
    );
}

#[test]
fn the_jails_need_no_home_of_the_servers() {
    // The jails keep their /etc/passwd in the store, not under HOME: a
    // server whose HOME is a file starts and serves.
    let m = Manifest::new(&template());
    let mut check = quiet(
        &["--check", "--allow-wrappers-outside-store", "--manifest"],
        &[("HOME", "/etc/passwd")],
    );
    check.arg(&m.path);
    let own = tempfile::tempdir().unwrap();
    let o = unprivileged(check, own.path()).output().unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(!out.contains("HOME"), "{out}");
}

#[test]
fn help_and_version_do_no_work_whatever_the_configuration() {
    let vars = [("PROJECT_DIR", "/nonexistent"), ("HOME", "/nonexistent")];
    for (flag, want) in [
        ("--version", "nix-sandbox-mcp "),
        ("--help", "nix-sandbox-mcp: "),
    ] {
        let o = quiet(&[flag], &vars)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap();
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
        assert!(stdout(&o).starts_with(want), "{flag}: {}", stdout(&o));
        assert_eq!(stderr(&o), "", "{flag}");
    }
}

/// `BIN ARGS` in a user namespace of its own whose
/// `user.max_user_namespaces` is 0: a host with user namespaces off, as far
/// as the server can tell.
fn without_user_namespaces(args: &[&str], home: &str) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--", "sh", "-c"])
        .arg("echo 0 >/proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("RUST_LOG", "off");
    cmd
}

#[test]
fn user_namespaces_off_stop_the_server_with_the_sysctl_to_change() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().to_str().unwrap();
    let m = Manifest::new(&template());
    // As a user: root's uid 0 in a namespace of its own is still host root,
    // whose jails would run as uids of their own, which that namespace lacks.
    let mut serve = without_user_namespaces(&["--stdio", "--allow-wrappers-outside-store"], home);
    serve.arg("--manifest").arg(&m.path);
    let o = unprivileged(serve, tmp.path()).output().unwrap();
    assert_eq!(
        refused_start(&o),
        "nix-sandbox-mcp: user namespaces: bubblewrap cannot make a jail without them: \
         creating a user namespace failed (No space left on device (os error 28)); \
         user.max_user_namespaces is 0. Fix: `sysctl -w user.max_user_namespaces=65536` (and \
         in /etc/sysctl.d/ to keep it)"
    );
    let mut check = without_user_namespaces(&["--check", "--allow-wrappers-outside-store"], home);
    check.arg("--manifest").arg(&m.path);
    let o = unprivileged(check, tmp.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l.starts_with(
            "user namespaces: FAIL: bubblewrap cannot make a jail without them: creating a user \
             namespace failed"
        ) && l.contains("sysctl -w user.max_user_namespaces")),
        "{out}"
    );
    assert!(!out.contains("user namespaces: available"), "{out}");
}

/// `cmd` as an unprivileged user when the tests run as root (root reads
/// and writes everything), with `home` made theirs.
fn unprivileged(cmd: Command, home: &std::path::Path) -> Command {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { nix::libc::geteuid() } != 0 {
        return cmd;
    }
    std::os::unix::fs::chown(home, Some(65534), Some(65534)).unwrap();
    let mut wrapped = Command::new("setpriv");
    wrapped
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    wrapped
}

#[test]
fn an_unreadable_project_and_an_unwritable_output_dir_are_named_and_the_server_serves() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let closed = tmp.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let output = closed.join("outputs");
    let vars = [
        ("HOME", home.to_str().unwrap()),
        ("PROJECT_DIR", closed.to_str().unwrap()),
        ("NIX_SANDBOX_OUTPUT_DIR", output.to_str().unwrap()),
    ];
    let m = Manifest::new(&template());
    let mut check = quiet(
        &["--check", "--allow-wrappers-outside-store", "--manifest"],
        &vars,
    );
    check.arg(&m.path);
    let o = unprivileged(check, &home).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let problems: Vec<&str> = out.lines().filter(|l| l.contains(": FAIL: ")).collect();
    assert_eq!(problems.len(), 2, "{out}");
    assert!(
        problems[0].starts_with(&format!(
            "PROJECT_DIR: FAIL: {} is not readable by this server's user",
            closed.display()
        )) && problems[0].contains("chmod a+rX"),
        "{out}"
    );
    assert!(
        problems[1].starts_with(&format!(
            "NIX_SANDBOX_OUTPUT_DIR: FAIL: {} cannot be made: {} is not writable",
            output.display(),
            closed.display()
        )),
        "{out}"
    );

    // Serving: both logged as errors at start-up, and code still runs.
    let mut serve = quiet(
        &["--stdio", "--allow-wrappers-outside-store", "--manifest"],
        &vars,
    );
    serve.arg(&m.path).env("RUST_LOG", "error");
    let mut serve = unprivileged(serve, &home);
    serve
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let o = serve.output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("PROJECT_DIR: ") && err.contains("is not readable"),
        "{err}"
    );
    assert!(err.contains("NIX_SANDBOX_OUTPUT_DIR: "), "{err}");
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A directory only root may enter.
fn root_only_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn check_names_the_jails_user_and_what_each_jail_shares() {
    let m = Manifest::new(&template());
    let o = launcher(&["--check", "--allow-wrappers-outside-store", "--manifest"])
        .arg(&m.path)
        .output()
        .unwrap();
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("jails' uid: "))
        .unwrap_or_default();
    if is_root() {
        assert!(
            line.starts_with(
                "jails' uid: ok: each jail runs as a uid and gid of its own, never root, from "
            ),
            "{out}"
        );
    } else {
        let uid = nix::unistd::geteuid();
        assert!(
            line.starts_with(&format!("jails' uid: the server's own ({uid})")),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("jails' kernel budgets: ok: all jails together")),
            "{out}"
        );
    }
    // The fixtures' jails have no seccomp filter (their wrappers are not
    // Nix's), and the budgets, hostname and passwd of the Nix-built ones.
    let python = out
        .lines()
        .find(|l| l.starts_with("python: "))
        .unwrap_or_default();
    assert!(python == format!("python: {FIXTURE_OK}"), "{out}");
    assert!(o.status.success(), "{out}");
}

#[test]
fn a_project_the_jails_cannot_read_is_one_line_and_fails_check() {
    let project = root_only_dir();
    let m = Manifest::new(&template());
    let o = launcher(&["--check", "--allow-wrappers-outside-store", "--manifest"])
        .arg(&m.path)
        .env("PROJECT_DIR", project.path())
        .output()
        .unwrap();
    let out = stdout(&o);
    let problem = format!(
        "PROJECT_DIR: FAIL: {} is not readable by the jails' uids (",
        project.path().display()
    );
    if is_root() {
        let lines: Vec<&str> = out.lines().filter(|l| l.contains("FAIL")).collect();
        assert_eq!(lines.len(), 1, "{out}");
        assert!(lines[0].starts_with(&problem), "{out}");
        assert!(lines[0].contains("chmod o+rx"), "{out}");
        assert_eq!(o.status.code(), Some(1));
    } else {
        // A user's jails run as that user, who can read its own directory.
        assert!(!out.contains("FAIL"), "{out}");
        assert!(o.status.success(), "{out}");
    }
}

#[test]
fn a_private_tmpdir_is_left_untouched() {
    // Clients and login sessions often set TMPDIR to a directory of mode
    // 0700, which a root server's jails' uids cannot enter: nothing of
    // theirs is there (a root server's are under /run/nix-sandbox-mcp).
    let tmp = root_only_dir();
    let m = Manifest::new(&template());
    let o = launcher(&["--check", "--allow-wrappers-outside-store", "--manifest"])
        .arg(&m.path)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(!out.contains("FAIL"), "{out}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn root_refuses_to_run_when_its_runtime_directory_is_not_roots_alone() {
    if !is_root() {
        return;
    }
    // Another user made /run/nix-sandbox-mcp first (in a mount namespace of
    // the test's own, over a fresh /run): a root server keeps its uid locks
    // and its jails' gates there, so it does not start. The server and its
    // manifest are opened before the mount hides them.
    let manifest = Manifest::new(&template());
    let script = "exec 3<\"$0\" 4<\"$1\" && \
                  mount -t tmpfs -o mode=0755 run /run && \
                  mkdir -m 0755 /run/nix-sandbox-mcp && chown 65534:65534 /run/nix-sandbox-mcp && \
                  /proc/self/fd/3 --check --allow-wrappers-outside-store \
                  --manifest /proc/self/fd/4";
    let o = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            BIN,
        ])
        .arg(&manifest.path)
        .env_remove("NIX_SANDBOX_MANIFEST")
        .output()
        .unwrap();
    assert_eq!(
        refused_start(&o),
        "nix-sandbox-mcp: refusing to run as root: each jail must run as a uid of its own, and \
         /run/nix-sandbox-mcp is not a directory of root's that only root may write (owner \
         65534, mode 755); remove it"
    );
}

#[test]
fn check_says_what_the_project_layer_does() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("proj");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("a"), "a\n").unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { nix::libc::geteuid() } == 0;
    if root {
        std::os::unix::fs::chown(&project, Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(project.join("a"), Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(tmp.path(), Some(65534), Some(65534)).unwrap();
    }
    let m = Manifest::new(&template());
    let vars = |writable| {
        vec![
            ("HOME", home.to_str().unwrap()),
            ("PROJECT_DIR", project.to_str().unwrap()),
            ("NIX_SANDBOX_PROJECT_WRITABLE", writable),
        ]
    };
    let check = |vars: &[(&str, &str)]| {
        let mut cmd = quiet(
            &["--check", "--allow-wrappers-outside-store", "--manifest"],
            vars,
        );
        cmd.arg(&m.path);
        cmd
    };
    // The project's owner's server: a layer, written through in a jail.
    let o = unprivileged(check(&vars("1")), &home).output().unwrap();
    let out = stdout(&o);
    let line = out.lines().find(|l| l.starts_with("project: "));
    assert!(
        line.is_some_and(|l| l.starts_with(
            "project: ok (writable at /project through a \
                                            copy-on-write layer per session"
        ) && l
            .ends_with("written through one in `node`, the host's tree unchanged)")),
        "{out}{}",
        stderr(&o)
    );
    assert!(o.status.success(), "{out}");
    let names: Vec<_> = std::fs::read_dir(&project).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // Read-only unless asked.
    let o = unprivileged(check(&vars("0")), &home).output().unwrap();
    assert!(
        stdout(&o).contains("\nproject: read-only at /project (NIX_SANDBOX_PROJECT_WRITABLE=1"),
        "{}",
        stdout(&o)
    );
    assert!(o.status.success());
    // A root server serves it too: its jail's uid gets the owner's files
    // (65534's) through an idmapped mount, and the host's tree is left
    // as it was.
    if root {
        let o = check(&vars("1")).output().unwrap();
        let out = stdout(&o);
        let line = out.lines().find(|l| l.starts_with("project: "));
        assert!(
            line.is_some_and(|l| l.starts_with("project: ok (writable at /project")
                && l.contains("through a read-only idmapped mount under its layer")),
            "{out}{}",
            stderr(&o)
        );
        assert!(o.status.success(), "{out}");
        let names: Vec<_> = std::fs::read_dir(&project).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
