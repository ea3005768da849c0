//! Packages on demand through the launcher, with a stand-in compose helper
//! (tests/fixtures/wrappers/compose; the real one, with Nix, is tested by
//! checks/e2e/packages.py): names refused before the helper starts, the
//! composed environment used and cached, sessions keeping theirs, each
//! failure one line and remembered, the helper's whole process tree killed
//! at the timeout, calls not held up by a composition, one composition at
//! a time on one slot, the cache bounded, and a cache another user planted
//! never run; as root and as user 65534 where the test runs as root.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::{
    GUARD, Manifest, Server, User, assert_refused, cli, eventually, facts, readable_by_all,
    template, text, wrappers,
};

/// A server of the fixture's python (taking packages by `allow`, composed
/// in `timeout_s` at most) and shell (taking none), its helper's log and
/// output directory, and its cache, all in `dir`, usable by user 65534.
struct Fixture {
    dir: TempDir,
}

/// How a fixture's server runs: as whom, with which variables set or
/// removed (None).
struct Run<'a> {
    user: User,
    env: &'a [(&'a str, Option<&'a str>)],
}

impl Run<'_> {
    const OWN: Run<'static> = Run {
        user: User::Own,
        env: &[],
    };
}

impl Fixture {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        readable_by_all(dir.path());
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::create_dir(dir.path().join("cache")).unwrap();
        let log = dir.path().join("compose.log");
        std::fs::write(&log, "").unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
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
        self.server_as(allow, timeout_s, Run::OWN).await
    }

    async fn server_as(&self, allow: Value, timeout_s: u64, run: Run<'_>) -> Server {
        let mut manifest = template();
        let python = &mut manifest["environments"]["python"];
        python["packages_on_demand"] = json!({
            "compose": [wrappers().join("compose")],
            "allow": allow,
            "timeout_s": timeout_s,
        });
        let entry = self.path("template.json");
        std::fs::write(&entry, python.to_string()).unwrap();
        // A cache base of the server's user, as its home would be.
        let cache = self.path(&format!("cache/{:?}", run.user));
        if !cache.exists() {
            std::fs::create_dir(&cache).unwrap();
            if matches!(run.user, User::Nobody) {
                std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
            }
        }
        let (log, out) = (self.path("compose.log"), self.path("out"));
        let mut cmd = run.user.command();
        cmd.env("NSM_COMPOSE_LOG", &log)
            .env("NSM_COMPOSE_DIR", &out)
            .env("NSM_COMPOSE_TEMPLATE", &entry)
            .env("XDG_CACHE_HOME", &cache);
        for (name, value) in run.env {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        Server::start_command(
            cmd,
            vec![Manifest::new(&manifest)],
            &["--allow-wrappers-outside-store"],
            &[],
        )
        .await
    }

    /// The cache directory of a server run as `user` with the fixture's
    /// XDG_CACHE_HOME.
    fn cache_dir(&self, user: User) -> PathBuf {
        self.path(&format!("cache/{user:?}/nix-sandbox-mcp/packages"))
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
    let r = server
        .call(json!({"code": "print(1)", "packages": ["outside-pkg"]}))
        .await;
    let t = assert_refused(&r, "packages_not_allowed");
    assert!(
        t.contains("outside-pkg is the build environment its scope carries")
            && t.contains("allows only the packages of its own scope"),
        "{t}"
    );
    // A failure is remembered: the same set within a minute gets the same
    // answer, and the helper does not run again.
    let r = server
        .call(json!({"code": "print(1)", "packages": ["broken"]}))
        .await;
    let t = assert_refused(&r, "packages_failed");
    assert!(t.contains("something broke"), "{t}");
    assert_eq!(
        f.starts().iter().filter(|l| l.ends_with("broken")).count(),
        1,
        "a failing set was composed again"
    );
    assert!(
        server.stderr().contains("a failed composition remembered"),
        "{}",
        server.stderr()
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

/// At the timeout the helper's whole tree is killed: a child in its process
/// group, one in a session of its own (as Nix starts its builders, out of
/// the helper's process group), and one in a session of its own whose
/// parent is gone (which a subreaper keeps under the helper).
#[tokio::test]
async fn the_timeout_kills_the_helper_and_every_process_it_started() {
    for user in User::all() {
        let f = Fixture::new();
        let run = Run { user, env: &[] };
        // 2 s: the fixture starts its children before anything else.
        let server = f.server_as(json!("any"), 2, run).await;
        let r = server
            .call(json!({"code": "print(1)", "packages": ["slow"]}))
            .await;
        let t = assert_refused(&r, "packages_timed_out");
        assert!(t.contains("longer than 2 s"), "{t}");
        for name in ["slow", "slow-child", "slow-session", "slow-orphan"] {
            let pid = pid_in(&f.path(&format!("out/{name}.pid")))
                .unwrap_or_else(|| panic!("as {user:?}: the helper wrote no {name}.pid"));
            assert!(pid > 1);
            let gone = eventually(|| !alive(pid)).await;
            if !gone {
                // Not left behind by the test either.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            assert!(gone, "as {user:?}: {name} ({pid}) outlived the timeout");
        }
        let r = server.run("python", "print('up')").await;
        assert_eq!(text(&r).trim(), "up");
    }
}

/// Sixteen calls at once, each for a set of its own, on one composition
/// slot: the helpers (each standing for a nix-instantiate and its build)
/// ran one at a time, counted by the helpers themselves, and every call
/// got its composition.
#[tokio::test]
async fn sixteen_calls_on_one_slot_run_one_composition_at_a_time() {
    let f = Fixture::new();
    let run = Run {
        user: User::Own,
        env: &[("NIX_SANDBOX_MAX_COMPOSITIONS", Some("1"))],
    };
    // The last call waits for fifteen compositions before its own: the
    // wait (the packages timeout) is long enough for a loaded machine.
    let server = std::sync::Arc::new(f.server_as(json!("any"), 300, run).await);
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let server = server.clone();
            tokio::spawn(async move {
                let name = format!("counted-{i}");
                let r = server
                    .call(json!({"code": "print(1)", "packages": [name]}))
                    .await;
                (name, r)
            })
        })
        .collect();
    for call in calls {
        let (name, r) = call.await.unwrap();
        assert_eq!(r.is_error, Some(false), "{name}: {r:?}");
        assert_eq!(store_path(&r), composed(&f, &name));
    }
    assert_eq!(f.starts().len(), 16);
    let most = std::fs::read_to_string(f.path("out/most")).unwrap();
    assert_eq!(most.trim(), "1", "helpers ran at once on one slot");
}

/// A cache of at most two sets: a third composed drops the least recently
/// used (its GC root and key), unless a session still holds it; a set
/// dropped is composed again when asked for.
#[tokio::test]
async fn the_cache_keeps_at_most_its_bound_least_recently_used_first() {
    let f = Fixture::new();
    let run = Run {
        user: User::Own,
        env: &[("NIX_SANDBOX_PACKAGES_CACHE_MAX", Some("2"))],
    };
    let server = f.server_as(json!("any"), 30, run).await;
    let dir = f.cache_dir(User::Own);
    let roots = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_symlink())
            .map(|e| std::fs::read_link(e.path()).unwrap().display().to_string())
            .collect();
        names.sort();
        names
    };
    let ask = |name: &'static str| {
        let server = &server;
        async move {
            let r = server
                .call(json!({"code": "print(1)", "packages": [name]}))
                .await;
            assert_eq!(r.is_error, Some(false), "{name}: {r:?}");
        }
    };
    ask("a").await;
    ask("b").await;
    ask("a").await; // b is now the least recently used
    ask("c").await;
    assert_eq!(roots(), [composed(&f, "a"), composed(&f, "c")]);
    ask("b").await;
    assert_eq!(f.starts().len(), 4, "b, dropped, was not composed again");
    assert_eq!(roots(), [composed(&f, "b"), composed(&f, "c")]);

    // A session holds "s": it stays while two newer sets come and go.
    let r = server
        .call(json!({"code": "x = 'kept'", "session": "keep", "packages": ["s"]}))
        .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    ask("d").await;
    ask("e").await;
    assert!(roots().contains(&composed(&f, "s")), "{:?}", roots());
    let r = server
        .call(json!({"code": "print(x)", "session": "keep"}))
        .await;
    assert_eq!(text(&r).trim(), "kept");
}

/// A composed sandbox that is not one: its wrapper writes `marker` and
/// says "planted", outside any jail.
fn planted(dir: &Path, marker: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let tree = dir.join("planted");
    std::fs::create_dir_all(tree.join("share/nix-sandbox-mcp")).unwrap();
    let wrapper = tree.join("planted.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho ran >{}\ncat >/dev/null\necho planted\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut env = template()["environments"]["python"].clone();
    env["run"] = json!([wrapper]);
    env["session"] = json!([wrapper]);
    env["store_path"] = json!(tree);
    let manifest = json!({"version": 1, "environments": {"python": env}});
    std::fs::write(
        tree.join("share/nix-sandbox-mcp/manifest.json"),
        manifest.to_string(),
    )
    .unwrap();
    readable_by_all(&tree);
    tree
}

/// The launcher's name for the cache entry of python + `names`
/// (packages/mod.rs): FNV-1a of the base's store path and the names.
fn stem(names: &[&str]) -> String {
    let base = template()["environments"]["python"]["store_path"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in std::iter::once(base.as_str()).chain(names.iter().copied()) {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("python-{hash:016x}")
}

/// Makes `cache` (and what is above it) and plants an entry for python + jq
/// that names `target`: as user 65534 when the test is root (another user
/// than the server's), else as the test's user with the directories open
/// to all (anyone could have planted it).
fn plant(cache: &Path, target: &Path, attacker: Option<u32>) {
    let key = json!({"store_path": template()["environments"]["python"]["store_path"], "packages": ["jq"]});
    let stem = stem(&["jq"]);
    let c = cache.display();
    let mut script = format!(
        "mkdir -p {c} && printf '%s' '{key}' >{c}/{stem}.json && ln -s {t} {c}/{stem}",
        t = target.display()
    );
    if attacker.is_none() {
        script.push_str(&format!(" && chmod 777 {c} $(dirname {c})"));
    }
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-euc", &script]);
    if let Some(uid) = attacker {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(uid);
    }
    let done = cmd.output().unwrap();
    assert!(done.status.success(), "planting: {done:?}");
}

/// A packages cache someone else made first, with an entry planted for
/// python + jq: for a root server without HOME or XDG_CACHE_HOME (which
/// used to cache under a predictable name in TMPDIR) and for servers whose
/// XDG_CACHE_HOME others may write in, as root and as user 65534 (each
/// planted by another uid when the test is root). The planted wrapper
/// never runs: the first composes in a directory of its own, the others
/// refuse the cache in one line naming it.
#[tokio::test]
async fn a_cache_another_user_planted_never_runs() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { nix::libc::geteuid() };
    let root = uid == 0;
    planted_without_home(uid, root.then_some(65534)).await;
    planted_in_an_open_cache(User::Own, root.then_some(65534)).await;
    if root {
        planted_in_an_open_cache(User::Nobody, Some(65533)).await;
    }
}

/// A directory like /tmp (sticky, open to all) in `f`, and the marker the
/// planted wrapper would write there.
fn shared(f: &Fixture) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let shared = f.path("tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let marker = shared.join("planted-ran");
    (shared, marker)
}

async fn planted_without_home(uid: u32, attacker: Option<u32>) {
    let f = Fixture::new();
    let (shared, marker) = shared(&f);
    let target = planted(f.dir.path(), &marker);
    let predictable = shared.join(format!("nix-sandbox-mcp-{uid}/nix-sandbox-mcp/packages"));
    plant(&predictable, &target, attacker);
    let tmpdir = shared.display().to_string();
    let run = Run {
        user: User::Own,
        env: &[
            ("HOME", None),
            ("XDG_CACHE_HOME", None),
            ("TMPDIR", Some(&tmpdir)),
        ],
    };
    let server = f.server_as(json!("any"), 30, run).await;
    let r = server
        .call(json!({"code": "print(1)", "packages": ["jq"]}))
        .await;
    assert!(!marker.exists(), "no HOME: the planted wrapper ran: {r:?}");
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(store_path(&r), composed(&f, "jq"));
}

async fn planted_in_an_open_cache(user: User, attacker: Option<u32>) {
    let f = Fixture::new();
    let (shared, marker) = shared(&f);
    let target = planted(f.dir.path(), &marker);
    plant(&shared.join("nix-sandbox-mcp/packages"), &target, attacker);
    let xdg = shared.display().to_string();
    let run = Run {
        user,
        env: &[("XDG_CACHE_HOME", Some(&xdg))],
    };
    let server = f.server_as(json!("any"), 30, run).await;
    let r = server
        .call(json!({"code": "print(1)", "packages": ["jq"]}))
        .await;
    assert!(
        !marker.exists(),
        "as {user:?}: the planted wrapper ran: {r:?}"
    );
    let t = assert_refused(&r, "packages_failed");
    let why = match attacker {
        Some(uid) => format!("belongs to uid {uid}"),
        None => "writable by others".to_owned(),
    };
    assert!(
        t.contains(&format!("{xdg}/nix-sandbox-mcp")) && t.contains(&why),
        "as {user:?}: {t}"
    );
    let r = server.run("python", "print('up')").await;
    assert_eq!(text(&r).trim(), "up");
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

/// `nix-sandbox-mcp sandbox create --with`: a person's packages go through
/// the server's policy as the model's `packages` do: an allowed one is
/// composed and the session made with it; a refused one is one line and a
/// non-zero exit, and nothing is composed for it.
#[tokio::test]
async fn a_persons_create_with_packages_holds_to_the_policy() {
    let f = Fixture::new();
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path().to_str().unwrap();
    let run = Run {
        user: User::Own,
        env: &[("XDG_RUNTIME_DIR", Some(rt))],
    };
    let server = f.server_as(json!(["jq"]), 30, run).await;
    let args = ["create", "--with", "jq", "--name", "pk", "python"];
    let out = cli(User::Own, runtime.path(), &args).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pk\n");
    assert_eq!(f.starts(), ["python jq"]);
    let out = cli(
        User::Own,
        runtime.path(),
        &["create", "--with", "ffmpeg", "python"],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("packages_not_allowed") && err.contains("`ffmpeg`"),
        "{err}"
    );
    assert_eq!(f.starts(), ["python jq"], "nothing composed for ffmpeg");
    drop(server);
}
