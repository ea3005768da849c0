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
        "user namespaces: ",
        "cgroups: ",
        "limits: ",
    ];
    let (facts, envs): (Vec<&str>, Vec<&str>) = out
        .lines()
        .partition(|l| host.iter().any(|h| l.starts_with(h)));
    assert_eq!(facts.len(), 4, "{out}");
    envs.iter().map(|l| format!("{l}\n")).collect()
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
        "node: ok (limits hold; seccomp filter off)\npython: ok (limits hold; seccomp filter off)\nshell: ok (limits hold; seccomp filter off)\n",
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
        "node: ok (limits hold; seccomp filter off)\npython: ok (limits hold; seccomp filter off)\nshell: ok (limits hold; seccomp filter off)\n",
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
            .all(|l| l.ends_with(": ok (limits hold; seccomp filter off)")),
        "{out}"
    );
}

#[test]
fn check_fails_on_a_malformed_manifest_or_none() {
    let mut bad = template();
    bad["environments"]["python"]["interpreter"] = json!("ruby");
    let bad = Manifest::new(&bad);
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
