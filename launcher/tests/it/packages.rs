//! Packages on demand through the launcher, with a stand-in compose helper
//! (tests/fixtures/wrappers/compose; the real one, with Nix, is tested by
//! checks/packages.py): names refused before the helper starts, the
//! composed environment used and cached, sessions keeping theirs, each
//! failure one line, the helper's processes killed at the timeout, calls
//! not held up by a composition.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::{
    GUARD, Manifest, Server, assert_refused, eventually, facts, readable_by_all, template, text,
    wrappers,
};

/// A server of the fixture's python (taking packages by `allow`, composed
/// in `timeout_s` at most) and shell (taking none), its helper's log and
/// output directory, and its cache, all in `dir`.
struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        readable_by_all(dir.path());
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The helper's log: one line per start.
    fn starts(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("compose.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    async fn server(&self, allow: Value, timeout_s: u64) -> Server {
        let mut manifest = template();
        let python = &mut manifest["environments"]["python"];
        python["packages_on_demand"] = json!({
            "compose": [wrappers().join("compose")],
            "allow": allow,
            "timeout_s": timeout_s,
        });
        let entry = self.path("template.json");
        std::fs::write(&entry, python.to_string()).unwrap();
        std::fs::create_dir_all(self.path("out")).unwrap();
        let (log, out, cache) = (
            self.path("compose.log"),
            self.path("out"),
            self.path("cache"),
        );
        Server::start_with(
            vec![Manifest::new(&manifest)],
            &["--allow-wrappers-outside-store"],
            &[
                ("NSM_COMPOSE_LOG", log.to_str().unwrap()),
                ("NSM_COMPOSE_DIR", out.to_str().unwrap()),
                ("NSM_COMPOSE_TEMPLATE", entry.to_str().unwrap()),
                ("XDG_CACHE_HOME", cache.to_str().unwrap()),
            ],
        )
        .await
    }
}

fn store_path(r: &rmcp::model::CallToolResult) -> String {
    facts(r)["store_path"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn composed(fixture: &Fixture, names: &str) -> String {
    fixture
        .path(&format!("out/composed-python-{names}"))
        .display()
        .to_string()
}

#[tokio::test]
async fn names_with_shell_or_nix_syntax_are_refused_before_the_helper_starts() {
    let f = Fixture::new();
    let server = f.server(json!("any"), 30).await;
    for name in [
        "jq; rm -rf /",
        "${builtins.readFile}",
        "../x",
        "a..b",
        ".jq",
        "",
    ] {
        let r = server
            .call(json!({"code": "print(1)", "packages": [name]}))
            .await;
        let t = assert_refused(&r, "bad_package_name");
        assert!(t.contains("not a nixpkgs attribute name"), "{t}");
    }
    let many: Vec<String> = (0..17).map(|i| format!("p{i}")).collect();
    let r = server
        .call(json!({"code": "print(1)", "packages": many}))
        .await;
    assert_refused(&r, "bad_package_name");
    assert!(
        f.starts().is_empty(),
        "the helper started: {:?}",
        f.starts()
    );
    assert!(
        !server.stderr().contains("composing"),
        "{}",
        server.stderr()
    );
    let r = server.run("python", "print('up')").await;
    assert_eq!(text(&r).trim(), "up");
}

#[tokio::test]
async fn the_allowlist_and_an_environment_without_a_policy_refuse() {
    let f = Fixture::new();
    let server = f.server(json!(["jq", "python3Packages."]), 30).await;
    let r = server
        .call(json!({"code": "print(1)", "packages": ["ffmpeg"]}))
        .await;
    let t = assert_refused(&r, "packages_not_allowed");
    assert!(
        t.contains("`ffmpeg`") && t.contains("allowed: jq, python3Packages.*"),
        "{t}"
    );
    let r = server
        .call(json!({"env": "shell", "code": "true", "packages": ["jq"]}))
        .await;
    let t = assert_refused(&r, "packages_not_allowed");
    assert!(t.contains("environment `shell` takes no `packages`"), "{t}");
    assert!(f.starts().is_empty(), "{:?}", f.starts());
}

#[tokio::test]
async fn a_composition_is_used_then_found_in_memory_and_on_disk() {
    let f = Fixture::new();
    let server = f.server(json!("any"), 30).await;
    let r = server
        .call(json!({"code": "print(1)", "packages": ["ripgrep", "jq"]}))
        .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(store_path(&r), composed(&f, "jq-ripgrep"));
    let r = server
        .call(json!({"code": "print(2)", "packages": ["jq", "ripgrep", "jq"]}))
        .await;
    assert_eq!(store_path(&r), composed(&f, "jq-ripgrep"));
    assert_eq!(f.starts(), ["python jq,ripgrep"]);
    let plain = server.run("python", "print(3)").await;
    assert_ne!(store_path(&plain), composed(&f, "jq-ripgrep"));
    drop(server);

    let server = f.server(json!("any"), 30).await;
    let r = server
        .call(json!({"code": "print(1)", "packages": ["jq", "ripgrep"]}))
        .await;
    assert_eq!(store_path(&r), composed(&f, "jq-ripgrep"));
    assert_eq!(f.starts().len(), 1, "a new server composed again");
    assert!(
        server
            .stderr()
            .contains("composed environment found in the cache"),
        "{}",
        server.stderr()
    );
}

#[tokio::test]
async fn a_session_keeps_its_packages_and_refuses_others() {
    let f = Fixture::new();
    let server = f.server(json!("any"), 30).await;
    let r = server
        .call(json!({"code": "x = 41", "session": "s", "packages": ["jq"]}))
        .await;
    assert_eq!(store_path(&r), composed(&f, "jq"), "{r:?}");
    let r = server
        .call(json!({"code": "x += 1; print(f'x={x}')", "session": "s"}))
        .await;
    assert_eq!(text(&r).trim(), "x=42");
    assert_eq!(store_path(&r), composed(&f, "jq"));
    let r = server
        .call(
            json!({"code": "print(f'x={x}')", "session": "s", "env": "python", "packages": ["jq"]}),
        )
        .await;
    assert_eq!(text(&r).trim(), "x=42");
    let r = server
        .call(json!({"code": "print(x)", "session": "s", "packages": ["ripgrep"]}))
        .await;
    let t = assert_refused(&r, "session_packages_mismatch");
    assert!(
        t.contains("session `s` was created with packages jq"),
        "{t}"
    );
    assert!(t.contains("Call it without `packages`"), "{t}");
    assert_eq!(f.starts(), ["python jq"], "a refused call composed");
}

#[tokio::test]
async fn each_failure_is_one_line_and_the_server_goes_on() {
    let f = Fixture::new();
    let server = f.server(json!("any"), 30).await;
    for (name, code, part) in [
        ("unknown-pkg", "unknown_package", "close: known-pkg"),
        (
            "uncached-pkg",
            "package_not_cached",
            "uncached-pkg-1.0 is not in the binary cache",
        ),
        ("unreachable", "nix_unreachable", "daemon-socket"),
        ("broken", "packages_failed", "something broke"),
    ] {
        let r = server
            .call(json!({"code": "print(1)", "packages": [name]}))
            .await;
        let t = assert_refused(&r, code);
        assert!(t.contains(part) && !t.trim().contains('\n'), "{t}");
    }
    // A failure is not cached: the next call tries again.
    server
        .call(json!({"code": "print(1)", "packages": ["broken"]}))
        .await;
    assert_eq!(
        f.starts().iter().filter(|l| l.ends_with("broken")).count(),
        2
    );
    let r = server.run("python", "print('up')").await;
    assert_eq!(text(&r).trim(), "up");
}

fn pid_in(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[tokio::test]
async fn the_timeout_kills_the_helper_and_its_children() {
    let f = Fixture::new();
    let server = f.server(json!("any"), 1).await;
    let r = server
        .call(json!({"code": "print(1)", "packages": ["slow"]}))
        .await;
    let t = assert_refused(&r, "packages_timed_out");
    assert!(t.contains("longer than 1 s"), "{t}");
    let child = pid_in(&f.path("out/slow-child.pid")).expect("the helper started its child");
    assert!(child > 1);
    assert!(
        eventually(|| !alive(child)).await,
        "the helper's child {child} outlived the timeout"
    );
}

#[tokio::test]
async fn a_composition_holds_up_no_other_call_and_is_shared() {
    let f = Fixture::new();
    let server = std::sync::Arc::new(f.server(json!("any"), 30).await);
    let slow = |server: std::sync::Arc<Server>| async move {
        server
            .call(json!({"code": "print(1)", "packages": ["wait"]}))
            .await
    };
    let (a, b) = (
        tokio::spawn(slow(server.clone())),
        tokio::spawn(slow(server.clone())),
    );
    assert!(eventually(|| !f.starts().is_empty()).await);
    let plain = tokio::time::timeout(GUARD, server.run("python", "print('plain')"))
        .await
        .unwrap();
    assert_eq!(text(&plain).trim(), "plain");
    assert!(
        !a.is_finished() || !b.is_finished(),
        "the plain call waited for the composition"
    );
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(store_path(&a), composed(&f, "wait"));
    assert_eq!(store_path(&b), composed(&f, "wait"));
    assert_eq!(f.starts(), ["python wait"], "two calls composed twice");
    tokio::time::sleep(Duration::from_millis(10)).await;
}
