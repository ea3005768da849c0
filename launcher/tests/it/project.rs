//! The writable project (docs/workbench.md), through MCP with the fixture
//! session jails on real bubblewrap and a real overlay: edits and builds in
//! place, the one-line summary, the diff resource, sessions that do not see
//! each other's layers, the host's edits seen live, and the attacks on the
//! host's tree, as the test's user and as 65534 when run as root.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use serde_json::json;

use crate::common::*;

/// Every path under `dir` with its kind and content (symlinks as their
/// targets, never followed; devices, fifos and sockets as their kind),
/// to compare the host's tree before and after.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let rel = path.strip_prefix(dir).unwrap().display().to_string();
        let mode = meta.permissions().mode();
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            all.insert(
                rel,
                format!("link {mode:o} {}", target.display()).into_bytes(),
            );
        } else if meta.is_dir() {
            all.insert(rel, format!("dir {mode:o}").into_bytes());
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else if !meta.is_file() {
            // A device, fifo or socket: its kind and number, never opened.
            use std::os::unix::fs::MetadataExt;
            let kind = format!("{:?} {:x}", meta.file_type(), meta.rdev());
            all.insert(rel, format!("special {mode:o} {kind}").into_bytes());
        } else {
            let mut bytes = format!("file {mode:o} ").into_bytes();
            bytes.extend(std::fs::read(&path).unwrap());
            all.insert(rel, bytes);
        }
    }
    all
}

/// A project every jail uid may write (a root server's jails run as uids
/// of their own, and the overlay keeps the host's permissions), with a
/// symlink pointing out of it, and a host file outside it.
pub(crate) fn project(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let project = root.join("proj");
    let outside = root.join("outside");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(project.join("src/main.sh"), "echo one\necho two\n").unwrap();
    std::fs::write(project.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(outside.join("secret"), "host secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("out")).unwrap();
    for dir in [root, &project, &project.join("src"), &outside] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    for file in [
        project.join("src/main.sh"),
        project.join("gone.txt"),
        outside.join("secret"),
    ] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    (project, outside)
}

/// Gives `dir` and everything in it to `uid` (symlinks themselves).
pub(crate) fn chown_tree(dir: &Path, uid: u32) {
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).unwrap();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
}

/// [`project`], owned by 65534 when the test is root (the unprivileged
/// server's, as a real project is its user's).
fn unprivileged_project(root: &Path) -> std::path::PathBuf {
    let (project, _) = project(root);
    // SAFETY: geteuid has no preconditions.
    if unsafe { nix::libc::geteuid() } == 0 {
        chown_tree(&project, 65534);
    }
    project
}

/// A server as `user` serving `manifest` over `project` made writable.
pub(crate) async fn writable(user: User, manifest: &serde_json::Value, project: &Path) -> Server {
    Server::start_command(
        user.command(),
        vec![Manifest::new(manifest)],
        &["--allow-wrappers-outside-store"],
        &[
            ("PROJECT_DIR", project.to_str().unwrap()),
            ("NIX_SANDBOX_PROJECT_WRITABLE", "1"),
        ],
    )
    .await
}

/// A server as `user` over `project` made writable, keeping 4
/// checkpoints (its sessions can be forked and rolled back).
pub(crate) async fn checkpointed(user: User, project: &Path) -> Server {
    Server::start_command(
        user.command(),
        vec![Manifest::new(&template())],
        &["--allow-wrappers-outside-store"],
        &[
            ("PROJECT_DIR", project.to_str().unwrap()),
            ("NIX_SANDBOX_PROJECT_WRITABLE", "1"),
            ("NIX_SANDBOX_MAX_CHECKPOINTS", "4"),
        ],
    )
    .await
}

/// Applies `diff` in `dir` with GNU `patch -p1`, as docs/workbench.md
/// tells the person to.
pub(crate) fn patch(dir: &Path, diff: &str) {
    use std::io::Write;
    let mut patch = std::process::Command::new("patch")
        .args(["-s", "-p1", "-d", dir.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    patch
        .stdin
        .take()
        .unwrap()
        .write_all(diff.as_bytes())
        .unwrap();
    assert!(patch.wait().unwrap().success(), "patch refused:\n{diff}");
}

pub(crate) async fn diff(s: &Server, session: &str) -> String {
    let read = s
        .client
        .read_resource(ReadResourceRequestParams::new(format!(
            "sandbox://{session}/project.diff"
        )))
        .await
        .expect("resources/read succeeds");
    match &read.contents[..] {
        [ResourceContents::TextResourceContents { text, .. }] => text.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_session_writes_its_own_layer_and_never_the_host() {
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, outside) = project(tmp.path());
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { nix::libc::geteuid() } == 0;
        if root && user == User::Nobody {
            // The project is the server's user's, as a real one is: the
            // overlay copies up only files whose owner the jail's user
            // namespace maps.
            chown_tree(&project, 65534);
        }
        if root {
            // A file of another owner than the project's, writable by all
            // on the host: the layer cannot copy it up (a root server's
            // jails get only the owner's files through their idmapped
            // mount, as a user server's get only its user's).
            std::fs::write(project.join("other.txt"), "other's\n").unwrap();
            std::fs::set_permissions(
                project.join("other.txt"),
                std::fs::Permissions::from_mode(0o666),
            )
            .unwrap();
            std::os::unix::fs::chown(project.join("other.txt"), Some(4343), Some(4343)).unwrap();
        }
        let (before, outside_before) = (snapshot(&project), snapshot(&outside));
        let s = writable(user, &template(), &project).await;
        // A build and an edit in place.
        let r = s
            .call(json!({"env": "shell", "session": "w", "code":
                "cd /project && sed -i s/two/TWO/ src/main.sh && rm gone.txt && mkdir -p build \
                 && bash src/main.sh > build/out.txt && cat build/out.txt"}))
            .await;
        let out = text(&r);
        assert!(out.contains("one\nTWO"), "{user:?}: {out}\n{}", s.stderr());
        assert!(
            out.contains("project: 3 files changed, +3 -2 (diff: sandbox://w/project.diff)"),
            "{user:?}: {out}"
        );
        let d = diff(&s, "w").await;
        assert!(d.starts_with("# project: 3 files changed, +3 -2\n"), "{d}");
        assert!(d.contains("-echo two\n+echo TWO\n"), "{d}");
        assert!(d.contains("--- a/gone.txt\n+++ /dev/null\n"), "{d}");
        assert!(d.contains("+++ b/build/out.txt\n"), "{d}");
        // The diff applies to a copy of the project as docs/workbench.md says.
        let copy = tmp.path().join("copy");
        let copied = std::process::Command::new("cp")
            .args(["-a", project.to_str().unwrap(), copy.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(copied.success());
        patch(&copy, &d);
        let patched = std::fs::read_to_string(copy.join("src/main.sh")).unwrap();
        assert_eq!(patched, "echo one\necho TWO\n");
        assert!(!copy.join("gone.txt").exists());
        assert_eq!(
            std::fs::read_to_string(copy.join("build/out.txt")).unwrap(),
            "one\nTWO\n"
        );
        std::fs::remove_dir_all(&copy).unwrap();
        // A call that changes nothing says nothing of the project.
        let r = s
            .call(json!({"env": "shell", "session": "w", "code": "cat /project/src/main.sh"}))
            .await;
        assert!(!text(&r).contains("project:"), "{}", text(&r));
        // The attacks: every way out of the layer the jail can try.
        let r = s
            .call(json!({"env": "shell", "session": "w", "code": "\
                cd /project; \
                echo x > out/secret; echo x > out/planted; \
                ln -sf /proc/self/root/etc/passwd src/main.sh 2>&1; \
                ln -s ../../../../../../ up; echo x > up/escaped; \
                echo y > ../project-escape; touch /project/../p2; \
                mv src/main.sh /tmp/m 2>&1; mv /tmp/m src/main.sh 2>&1; \
                ln gone.txt hard 2>&1; ln /etc/hostname hostlink 2>&1; \
                echo z > hard2; mv -f hard2 src/main.sh; \
                mount -t tmpfs none /project 2>&1; \
                chmod 000 src 2>&1; \
                echo x >> other.txt 2>&1 || echo other-refused; \
                echo idmapped=$(grep -c idmapped /proc/self/mountinfo); \
                true"}))
            .await;
        let out = text(&r);
        if root {
            // Root's jails: the other owner's file stays unmodifiable, and
            // the idmapped mount the overlay's lower layer came from is
            // nowhere in the jail's mounts (nothing to write it through).
            assert!(out.contains("other-refused"), "{user:?}: {out}");
        }
        assert!(out.contains("idmapped=0"), "{user:?}: {out}");
        assert_eq!(
            snapshot(&project),
            before,
            "{user:?}: the host's project changed"
        );
        assert_eq!(
            snapshot(&outside),
            outside_before,
            "{user:?}: outside the project changed"
        );
        let d = diff(&s, "w").await;
        assert!(!d.contains("host secret"), "{d}");
        // Another session sees the host's tree, not w's layer; the host's
        // own edit is seen by both.
        std::fs::write(project.join("host.txt"), "from the host\n").unwrap();
        let r = s
            .call(json!({"env": "shell", "session": "v", "code":
                "cat /project/gone.txt /project/host.txt; ls /project"}))
            .await;
        let out = text(&r);
        assert!(out.contains("bye\nfrom the host"), "{user:?}: {out}");
        assert!(!out.contains("build"), "{user:?}: {out}");
        assert!(!out.contains("project:"), "{user:?}: {out}");
        let r = s
            .call(json!({"env": "shell", "session": "w", "code": "cat /project/host.txt"}))
            .await;
        assert!(text(&r).contains("from the host"), "{user:?}: {}", text(&r));
        // No layer for a read-only session: the resource says why.
        let missing = s
            .client
            .read_resource(ReadResourceRequestParams::new(
                "sandbox://nope/project.diff",
            ))
            .await;
        assert!(missing.is_err());
        drop(s);
        std::fs::remove_file(project.join("host.txt")).unwrap();
        assert_eq!(snapshot(&project), before);
    }
}

#[tokio::test]
async fn the_project_stays_read_only_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let (project, _) = project(tmp.path());
    let s = Server::start_with(
        vec![Manifest::new(&template())],
        &["--allow-wrappers-outside-store"],
        &[("PROJECT_DIR", project.to_str().unwrap())],
    )
    .await;
    let r = s
        .call(json!({"env": "shell", "session": "ro", "code":
            "touch /project/x 2>&1 || echo refused"}))
        .await;
    let out = text(&r);
    assert!(
        out.contains("Read-only file system") && out.contains("refused"),
        "{out}"
    );
    assert!(!out.contains("project:"), "{out}");
}

/// The bytes held on disk under `dir` (blocks, nothing followed).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        total += meta.blocks() * 512;
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

#[tokio::test]
async fn a_session_cannot_write_past_its_layer_bound() {
    // A jail writing 64 MiB into /project, whose layer is bounded by its
    // workspace_mb of 16: the write stops at the bound, the host's disk
    // holds none of it, and the session keeps working.
    for user in User::all() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { nix::libc::geteuid() } == 0;
        let tmp = tempfile::tempdir().unwrap();
        let (project, _) = project(tmp.path());
        if root {
            chown_tree(&project, 65534);
        }
        let mut manifest = template();
        let shell = &mut manifest["environments"]["shell"];
        shell["limits"]["workspace_mb"] = json!(16);
        let session = shell["session"].as_array_mut().unwrap();
        session.extend([json!("session"), json!("60"), json!("16")]);
        let s = writable(user, &manifest, &project).await;
        let r = s
            .call(json!({"env": "shell", "session": "big", "code":
                "{ head -c 64M /dev/zero > /project/big; } 2>&1; echo status $?; \
                 stat -c 'size %s' /project/big"}))
            .await;
        let out = text(&r);
        let stderr = s.stderr();
        let layers = stderr
            .split("copy-on-write layer per session, mount points in ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("no layers directory in the log:\n{stderr}"));
        let on_disk = disk_bytes(Path::new(layers));
        assert!(
            out.contains("No space left on device") && out.contains("status 1"),
            "{user:?}: the write was not stopped:\n{out}"
        );
        let size: u64 = out
            .split("size ")
            .nth(1)
            .and_then(|n| n.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        assert!(size <= 16 << 20, "{user:?}: {size} bytes written");
        assert!(
            on_disk < 1 << 20,
            "{user:?}: the layer holds {on_disk} bytes of the host's disk in {layers}"
        );
        // The session keeps working, and its layer still holds the file;
        // a directory of the project removed and made again (an opaque
        // directory, marked with a user xattr on the tmpfs) works too.
        let r = s
            .call(json!({"env": "shell", "session": "big", "code":
                "rm /project/big && echo removed && touch /project/after && ls /project; \
                 rm -r /project/src && mkdir /project/src && echo new > /project/src/x \
                 && ls /project/src"}))
            .await;
        let out = text(&r);
        assert!(out.contains("removed"), "{user:?}: {out}");
        assert!(out.contains("after"), "{user:?}: {out}");
        assert!(
            out.ends_with("x\n") || out.contains("\nx\n"),
            "{user:?}: {out}"
        );
        assert!(!out.contains("main.sh"), "{user:?}: {out}");
    }
}

#[tokio::test]
async fn a_reset_says_the_project_changes_are_lost() {
    let user = User::unprivileged();
    let tmp = tempfile::tempdir().unwrap();
    let project = unprivileged_project(tmp.path());
    let mut manifest = template();
    manifest["environments"]["shell"]["limits"]["timeout_s"] = json!(1);
    let s = writable(user, &manifest, &project).await;
    let r = s
        .call(json!({"env": "shell", "session": "r", "code": "echo x > /project/mine"}))
        .await;
    assert!(text(&r).contains("project: 1 file changed"), "{}", text(&r));
    let r = s
        .call(json!({"env": "shell", "session": "r", "code":
            "trap '' INT; while :; do :; done"}))
        .await;
    assert!(
        text(&r).ends_with(
            "session reset: interpreter state, /workspace files and project changes lost"
        ),
        "{}",
        text(&r)
    );
    let r = s
        .call(json!({"env": "shell", "session": "r", "code":
            "ls /project/mine 2>&1 || echo gone"}))
        .await;
    assert!(text(&r).contains("gone"), "{}", text(&r));
}

/// A session started from a checkpoint gets that call's project layer
/// exactly: files added, deleted (whiteouts) and a directory removed and
/// made again (opaque), none of the later changes, the host untouched.
#[tokio::test]
async fn a_fork_carries_the_project_layer_as_it_was() {
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        let (project, _) = project(tmp.path());
        if root() && user == User::Nobody {
            chown_tree(&project, 65534);
        }
        let before = snapshot(&project);
        let s = checkpointed(user, &project).await;
        let r = s
            .call(json!({"env": "shell", "session": "w", "code":
                "rm /project/gone.txt && mkdir /project/new && echo n > /project/new/x \
                 && rm -r /project/src && mkdir /project/src && echo fresh > /project/src/other"}))
            .await;
        assert!(
            text(&r).contains("checkpoint: w@1"),
            "{user:?}: {}",
            text(&r)
        );
        let r = s
            .call(json!({"env": "shell", "session": "w", "code":
                "echo later > /project/later; echo back > /project/gone.txt"}))
            .await;
        assert!(
            text(&r).contains("checkpoint: w@2"),
            "{user:?}: {}",
            text(&r)
        );
        let r = s
            .call(json!({"env": "shell", "session": "v", "from": "w@1", "code":
                "ls /project/src; cat /project/new/x; [ -e /project/gone.txt ] || echo no-gone; \
                 [ -e /project/later ] || echo no-later; [ -e /project/src/main.sh ] || echo opaque"}))
            .await;
        let out = text(&r);
        for want in [
            "other",
            "\nn\n",
            "no-gone",
            "no-later",
            "opaque",
            "started from w@1",
        ] {
            assert!(out.contains(want), "{user:?}: {want}: {out}");
        }
        let diff = diff(&s, "v").await;
        assert!(
            diff.contains("gone.txt") && diff.contains("new/x"),
            "{diff}"
        );
        // Two forks of w as it is now diverge in the project too: neither
        // sees the other's writes, nor does w.
        for (fork, other) in [("a", "b"), ("b", "a")] {
            let code = format!(
                "cat /project/later; echo {fork} > /project/only-{fork}; \
                 echo {fork} >> /project/new/x; ls /project"
            );
            let r = s
                .call(json!({"env": "shell", "session": fork, "from": "w", "code": code}))
                .await;
            let out = text(&r);
            assert!(
                out.starts_with("later\n") && !out.contains(&format!("only-{other}")),
                "{user:?}: {out}"
            );
        }
        for (session, want) in [("a", "n\na\n"), ("b", "n\nb\n"), ("w", "n\n")] {
            let r = s
                .call(json!({"env": "shell", "session": session, "code":
                    "cat /project/new/x; ls /project"}))
                .await;
            let out = text(&r);
            assert!(out.starts_with(want), "{user:?} {session}: {out}");
            let others = ["a", "b"].iter().filter(|f| **f != session);
            for other in others {
                assert!(!out.contains(&format!("only-{other}")), "{user:?}: {out}");
            }
        }
        assert_eq!(snapshot(&project), before, "{user:?}");
    }
}

#[tokio::test]
async fn sessions_past_the_bound_on_all_layers_are_refused() {
    // Layers of 16 MiB under a server-wide bound of 40: two sessions fit,
    // a third is refused in one line naming the setting and what holds it,
    // and fits once one of the two ended; the server stays up throughout.
    for user in User::all() {
        let mut manifest = template();
        let shell = &mut manifest["environments"]["shell"];
        shell["limits"]["workspace_mb"] = json!(16);
        let session = shell["session"].as_array_mut().unwrap();
        session.extend([json!("session"), json!("60"), json!("16")]);
        let s = Server::start_command(
            user.command(),
            vec![Manifest::new(&manifest)],
            &["--allow-wrappers-outside-store", "--layers-mb", "40"],
            &[],
        )
        .await;
        for name in ["a", "b"] {
            let r = s
                .call(json!({"env": "shell", "session": name, "code": "echo up"}))
                .await;
            assert!(text(&r).contains("up"), "{user:?}: {}", text(&r));
        }
        let r = s
            .call(json!({"env": "shell", "session": "c", "code": "echo up"}))
            .await;
        let refused = assert_refused(&r, "layers_full");
        assert!(
            refused.contains(
                "the session's layer (16 MiB, its environment's workspace_mb) does not fit in \
                 the server's bound on all layers, NIX_SANDBOX_LAYERS_MB (40 MiB): 2 open \
                 session layers hold 32 MiB of it; nothing was run."
            ),
            "{user:?}: {refused}"
        );
        // A call with files and no session takes a layer too.
        let r = s
            .call(json!({"env": "shell", "code": "cat /workspace/f",
                         "files": [{"path": "f", "content": "x"}]}))
            .await;
        assert_refused(&r, "layers_full");
        let r = s
            .call(json!({"env": "shell", "session": "a", "code": "true", "end": true}))
            .await;
        assert!(
            text(&r).contains("ended, as asked"),
            "{user:?}: {}",
            text(&r)
        );
        // Its reservation goes with its jail's last process, reaped a moment
        // after the end.
        let mut tries = 0;
        let r = loop {
            let r = s
                .call(json!({"env": "shell", "session": "c", "code": "echo up"}))
                .await;
            tries += 1;
            if error_code(&r).as_deref() != Some("layers_full") || tries == 50 {
                break r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert!(text(&r).contains("up"), "{user:?}: {}", text(&r));
        let r = s
            .call(json!({"env": "shell", "session": "b", "code": "echo still"}))
            .await;
        assert!(text(&r).contains("still"), "{user:?}: {}", text(&r));
    }
}

/// The project README's session ("A session on your project") runs: each
/// `run {...}` line of its transcripts is sent as it stands, over a
/// project of the three scripts it names, and the server answers each
/// with the very lines the README shows under it.
#[tokio::test]
async fn the_readmes_session_is_what_the_server_answers() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let section = readme
        .split("### A session on your project")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README's session section");
    let mut steps: Vec<(serde_json::Value, String)> = Vec::new();
    for block in section.split("```text\n").skip(1) {
        let block = block.split("```").next().unwrap();
        for line in block.lines() {
            if let Some(call) = line.strip_prefix("run ") {
                steps.push((serde_json::from_str(call).unwrap(), String::new()));
            } else {
                let answer = &mut steps.last_mut().expect("a line after a run").1;
                answer.push_str(line);
                answer.push('\n');
            }
        }
    }
    assert!(steps.len() >= 4, "{steps:?}");
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("proj");
        std::fs::create_dir(&project).unwrap();
        for (name, text) in [
            ("add.sh", "echo $(($1 - $2))\n"),
            (
                "build.sh",
                "mkdir -p bin && { echo '#!/bin/sh'; cat add.sh; } > bin/add\n",
            ),
            (
                "test.sh",
                "r=$(sh bin/add 2 3); [ \"$r\" = 5 ] && echo test ok || { echo \"test failed: 2 + 3 = $r\"; exit 1; }\n",
            ),
        ] {
            std::fs::write(project.join(name), text).unwrap();
        }
        if root() && user == User::Nobody {
            chown_tree(&project, 65534);
        }
        let before = snapshot(&project);
        let s = checkpointed(user, &project).await;
        for (call, want) in &steps {
            let got = text(&s.call(call.clone()).await);
            assert_eq!(got.trim_end(), want.trim_end(), "{user:?}: {call}");
        }
        assert_eq!(snapshot(&project), before);
    }
}

/// Whether the test runs as root.
pub(crate) fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { nix::libc::geteuid() == 0 }
}
