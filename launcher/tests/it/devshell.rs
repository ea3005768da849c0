//! The project's dev shell as the environment `project`, through the
//! launcher with a stand-in helper (tests/fixtures/wrappers/devshell; the
//! real one, with Nix, is tested by checks/e2e/devshell.py): offered only when
//! the setting is on and the project holds flake.nix, built on first use
//! and cached (a second server builds nothing), built again at the next
//! call after flake.nix or flake.lock changes while a session keeps its
//! own, and a failure is one line naming the flake, remembered, with the
//! other environments working.

use std::path::Path;

use serde_json::json;
use tempfile::TempDir;

use crate::common::{Manifest, Server, assert_refused, facts, template, text, wrappers};

struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["out", "cache", "project"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("compose.log"), "").unwrap();
        std::fs::write(dir.path().join("project/flake.nix"), "{ first }").unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn builds(&self) -> usize {
        std::fs::read_to_string(self.path("compose.log"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("devshell "))
            .count()
    }

    /// A server with the dev shell helper in its manifest and
    /// NIX_SANDBOX_PROJECT_DEVSHELL=`on`, over `project`.
    async fn server(&self, on: &str, project: &Path) -> Server {
        let mut manifest = template();
        manifest["project_dev_shell"] = json!({
            "helper": [wrappers().join("devshell")],
            "timeout_s": 60,
            "environment": {
                "description": "The project's own dev shell (fixture).",
                "limits": manifest["environments"]["shell"]["limits"].clone(),
                "network": false,
            },
        });
        let entry = self.path("template.json");
        std::fs::write(&entry, manifest["environments"]["shell"].to_string()).unwrap();
        let (log, out, cache) = (
            self.path("compose.log"),
            self.path("out"),
            self.path("cache"),
        );
        let project = project.to_str().unwrap();
        let log = log.to_str().unwrap();
        let out = out.to_str().unwrap();
        let cache = cache.to_str().unwrap();
        let entry = entry.to_str().unwrap();
        Server::start_with(
            vec![Manifest::new(&manifest)],
            &["--allow-wrappers-outside-store"],
            &[
                ("NIX_SANDBOX_PROJECT_DEVSHELL", on),
                // Warm jails on: one started before the flake changes is
                // never served after it.
                ("NIX_SANDBOX_WARM_JAILS", "4"),
                ("PROJECT_DIR", project),
                ("NSM_COMPOSE_LOG", log),
                ("NSM_COMPOSE_DIR", out),
                ("NSM_COMPOSE_TEMPLATE", entry),
                ("XDG_CACHE_HOME", cache),
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

#[tokio::test]
async fn the_project_env_is_built_once_cached_and_rebuilt_when_the_flake_changes() {
    let fx = Fixture::new();
    let project = fx.path("project");
    let server = fx.server("1", &project).await;
    let tools = server.client.list_all_tools().await.unwrap();
    let schema = serde_json::to_string(&tools[0].input_schema).unwrap();
    assert!(
        schema.contains("; project: "),
        "project not offered: {schema}"
    );
    assert!(
        server.stderr().contains("`project` is"),
        "{}",
        server.stderr()
    );
    assert_eq!(fx.builds(), 0, "built at start, not on first use");

    let first = server.run("project", "echo built").await;
    assert_eq!(text(&first).trim(), "built", "{first:?}");
    let first_path = store_path(&first);
    assert!(first_path.contains("/out/devshell-"), "{first_path}");
    // Runs of this build are served by its warm jails (session/warm.rs).
    let mut warmed = false;
    for _ in 0..20 {
        let r = server.run("project", "echo warm").await;
        assert_eq!(text(&r).trim(), "warm", "{r:?}");
        if facts(&r)["warm"] == json!(true) {
            warmed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(warmed, "no run was served warm: {}", server.stderr());
    // The replacement is ready before the flake changes below.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let session = server
        .call(json!({"env": "project", "session": "s", "code": "echo in-session"}))
        .await;
    assert_eq!(text(&session).trim(), "in-session");
    assert_eq!(fx.builds(), 1);

    // flake.lock appears: the next call builds again; the session keeps
    // the environment it started with.
    std::fs::write(project.join("flake.lock"), "{}").unwrap();
    let second = server.run("project", "echo again").await;
    assert_eq!(text(&second).trim(), "again");
    assert_ne!(store_path(&second), first_path);
    assert_ne!(
        facts(&second)["warm"],
        json!(true),
        "a jail started before the flake changed served a run after it"
    );
    assert_eq!(fx.builds(), 2);
    let session = server
        .call(json!({"session": "s", "code": "echo still"}))
        .await;
    assert_eq!(text(&session).trim(), "still");
    assert_eq!(
        store_path(&session),
        first_path,
        "the session's own environment"
    );
    drop(server);

    // A new server with the same cache builds nothing.
    let server = fx.server("1", &project).await;
    let third = server.run("project", "echo cached").await;
    assert_eq!(text(&third).trim(), "cached");
    assert_eq!(store_path(&third), store_path(&second));
    assert_eq!(fx.builds(), 2, "{}", server.stderr());
}

#[tokio::test]
async fn a_broken_dev_shell_is_one_line_naming_the_flake_and_the_rest_works() {
    let fx = Fixture::new();
    let project = fx.path("project");
    std::fs::write(project.join("flake.nix"), "{ broken }").unwrap();
    let server = fx.server("1", &project).await;
    let r = server.run("project", "echo never").await;
    let line = assert_refused(&r, "dev_shell_failed");
    assert!(
        line.contains(&format!("flake {}: its dev shell", project.display()))
            && line.contains("attribute 'broken' missing")
            && !line.contains('\n'),
        "{line}"
    );
    let r = server.run("shell", "echo up").await;
    assert_eq!(text(&r).trim(), "up");
    // Remembered: the helper does not run again for the same flake.
    let r = server.run("project", "echo never").await;
    assert_refused(&r, "dev_shell_failed");
    assert_eq!(fx.builds(), 1);
    // Fixed: the next call builds it.
    std::fs::write(project.join("flake.nix"), "{ fixed }").unwrap();
    let r = server.run("project", "echo fixed").await;
    assert_eq!(text(&r).trim(), "fixed");
}

#[tokio::test]
async fn no_project_env_when_off_or_without_a_flake() {
    let fx = Fixture::new();
    let project = fx.path("project");
    let server = fx.server("0", &project).await;
    let r = server.run("project", "echo never").await;
    assert_refused(&r, "unknown_env");
    drop(server);
    std::fs::remove_file(project.join("flake.nix")).unwrap();
    let server = fx.server("1", &project).await;
    let r = server.run("project", "echo never").await;
    assert_refused(&r, "unknown_env");
    assert!(
        server.stderr().contains("has no flake.nix"),
        "{}",
        server.stderr()
    );
    assert_eq!(fx.builds(), 0);
}
