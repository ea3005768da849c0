//! Fork, checkpoint and roll back (docs/sessions.md): sessions started
//! `from` another session or one of its checkpoints, through MCP with the
//! fixture session jails on real bubblewrap, as the test's user and as
//! 65534 when run as root: forks diverge, a rollback restores exactly the
//! tree of that call's end, the jail cannot reach the frozen copies, and
//! the server's copy follows no link the jail planted.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::common::*;

async fn server(user: User) -> Server {
    Server::start_command(
        user.command(),
        vec![Manifest::new(&template())],
        &["--allow-wrappers-outside-store"],
        &[("NIX_SANDBOX_MAX_CHECKPOINTS", "3")],
    )
    .await
}

/// Runs `code` in session `session` of the shell, started `from` one.
pub(crate) async fn shell(s: &Server, session: &str, from: Option<&str>, code: &str) -> String {
    let mut args = json!({"env": "shell", "session": session, "code": code});
    if let Some(from) = from {
        args["from"] = json!(from);
    }
    text(&s.call(args).await)
}

#[tokio::test]
async fn forks_diverge_and_a_rollback_restores_that_calls_tree() {
    for user in User::all() {
        let s = server(user).await;
        let out = shell(
            &s,
            "a",
            None,
            "mkdir -p d/e && echo one > d/f && echo keep > k && chmod 640 k && ln -s k link \
             && touch -d 2001-01-01 d/f && echo ok",
        )
        .await;
        assert!(out.contains("checkpoint: a@1"), "{user:?}: {out}");
        let out = shell(&s, "a", None, "echo two > d/f; rm k; echo new > n; echo ok").await;
        assert!(out.contains("checkpoint: a@2"), "{out}");

        // Two forks of a's last call diverge.
        let out = shell(&s, "b", Some("a"), "cat d/f; echo b > only-b; ls").await;
        assert!(out.contains("two") && out.contains("only-b"), "{out}");
        assert!(
            out.contains("started from a:")
                && out.contains("fresh interpreter (its state is not copied)"),
            "{out}"
        );
        let out = shell(&s, "c", Some("a"), "echo c > only-c; ls").await;
        assert!(out.contains("only-c") && !out.contains("only-b"), "{out}");
        let out = shell(&s, "b", None, "ls").await;
        assert!(out.contains("only-b") && !out.contains("only-c"), "{out}");
        let out = shell(&s, "a", None, "ls").await;
        assert!(!out.contains("only-b") && !out.contains("only-c"), "{out}");

        // Back to the end of a's first call: the changed file, the deleted
        // one, the added one, modes, times and links as they were then.
        let out = shell(
            &s,
            "r",
            Some("a@1"),
            "cat d/f k; readlink link; stat -c '%a %n' k; stat -c '%Y' d/f; ls -a; ls d",
        )
        .await;
        assert!(out.contains("started from a@1"), "{out}");
        for want in ["one", "keep", "640 k", "978307200", "e\nf"] {
            assert!(out.contains(want), "{want}: {out}");
        }
        assert!(!out.contains("new") && !out.contains(" n\n"), "{out}");
        let listing = shell(&s, "r", None, "ls -A | tr '\\n' ' '").await;
        assert!(listing.starts_with("d k link "), "{listing}");

        // In place: a itself goes back, and keeps counting its calls; its
        // first checkpoint is that of its first call that changes a file.
        let out = shell(&s, "a", Some("a@1"), "cat d/f; ls").await;
        assert!(
            out.contains("one") && out.contains("started from a@1"),
            "{out}"
        );
        assert!(!out.contains("checkpoint:"), "{out}");
        let out = shell(&s, "a", None, "echo three > d/f").await;
        assert!(out.contains("checkpoint: a@5"), "{out}");
        // A call that changed nothing keeps no checkpoint of its own: its
        // end is the one before.
        let out = shell(&s, "a", None, "true").await;
        assert!(!out.contains("checkpoint:"), "{out}");
        let out = shell(&s, "a2", Some("a@6"), "cat d/f").await;
        assert!(
            out.contains("three") && out.contains("started from a@6"),
            "{out}"
        );

        // Names that are not there: one line naming the fix.
        let out = shell(&s, "x", Some("nope"), "true").await;
        assert!(out.starts_with("error[unknown_session]"), "{out}");
        let out = shell(&s, "y", Some("a@99"), "true").await;
        assert!(out.starts_with("error[unknown_checkpoint]"), "{out}");
        assert!(out.contains("it keeps a@"), "{out}");
        let out = shell(&s, "c", Some("a"), "true").await;
        assert!(out.starts_with("error[invalid_arguments]"), "{out}");

        // At most 3 kept: the oldest go first, and the result says so.
        let mut said = String::new();
        for _ in 0..3 {
            said.push_str(&shell(&s, "c", None, "echo more >> only-c").await);
        }
        assert!(
            said.contains("checkpoint: c@4 (dropped c@1: the oldest go first)"),
            "{said}"
        );
        let out = shell(&s, "y", Some("c@1"), "true").await;
        assert!(out.starts_with("error[unknown_checkpoint]"), "{out}");

        // A call ends a session by name.
        let r = s
            .call(json!({"env": "shell", "session": "b", "code": "true", "end": true}))
            .await;
        assert!(
            text(&r).contains("session `b` ended, as asked"),
            "{}",
            text(&r)
        );
        let out = shell(&s, "z", Some("b"), "true").await;
        assert!(out.starts_with("error[unknown_session]"), "{out}");
    }
}

#[tokio::test]
async fn the_jail_reaches_no_checkpoint_and_plants_no_link_for_the_server() {
    for user in User::all() {
        let tmp = tempfile::tempdir().unwrap();
        readable_by_all(tmp.path());
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "host secret\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = server(user).await;
        let code = format!(
            "echo one > f; ln -s {} evil; ln -s {} evildir; echo ok",
            secret.display(),
            tmp.path().display()
        );
        let out = shell(&s, "h", None, &code).await;
        assert!(out.contains("checkpoint: h@1"), "{out}");
        // Written in place through a descriptor, hard linked, renamed over:
        // the live file changes, the frozen one does not.
        let out = shell(
            &s,
            "h",
            None,
            "exec 3<>f; echo evil >&3; exec 3>&-; ln f g; mv g f2; \
             find / -xdev -name ckpt 2>/dev/null; grep -c ckpt /proc/self/mountinfo; echo done",
        )
        .await;
        assert!(
            out.contains("\n0\ndone") || out.starts_with("0\ndone"),
            "{out}"
        );
        let out = shell(
            &s,
            "k",
            Some("h@1"),
            "sed 's/^/f=/' f; [ -L evil ] && readlink evil; [ -L evildir ] && echo dirlink; ls",
        )
        .await;
        assert!(out.contains("f=one") && !out.contains("f=evil"), "{out}");
        assert!(
            out.contains(secret.to_str().unwrap()) && out.contains("dirlink"),
            "{out}"
        );
        assert!(!out.contains("host secret") && !out.contains("f2"), "{out}");
    }
}

/// By default no checkpoint is kept and nothing is said of them, yet a
/// session can still be copied as it is now; `NAME@N` says how to have it.
#[tokio::test]
async fn without_checkpoints_a_fork_copies_the_files_as_they_are() {
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let out = shell(&s, "a", None, "echo one > f; echo ok").await;
    assert_eq!(out, "ok\n");
    let out = shell(&s, "b", Some("a"), "cat f").await;
    assert!(
        out.starts_with("one\n") && out.contains("started from a:"),
        "{out}"
    );
    let out = shell(&s, "c", Some("a@1"), "true").await;
    assert!(
        out.starts_with("error[unknown_checkpoint]")
            && out.contains("NIX_SANDBOX_MAX_CHECKPOINTS=0"),
        "{out}"
    );
    let r = s
        .call(json!({"env": "shell", "code": "true", "end": true}))
        .await;
    assert!(
        text(&r).starts_with("error[invalid_arguments]"),
        "{}",
        text(&r)
    );
}

/// Whether server `s` starts a session from a checkpoint at the cost of a
/// mount (docs/fork.md), as its start-up line says: any but a root server
/// on a host that cannot idmap a tmpfs's mounts anew (before Linux 6.15),
/// which copies. On this host's kernel, a root server must mount them.
fn mounts(s: &Server) -> bool {
    let log = s.stderr();
    assert!(log.contains("self-test: forks: "), "{log}");
    let mounted = !log.contains("forks: copied");
    let release = nix::sys::utsname::uname().unwrap();
    let release = release.release().to_string_lossy().into_owned();
    let mut numbers = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    assert!(mounted || version < (6, 15), "{release}: {log}");
    mounted
}

#[tokio::test]
async fn a_fork_is_mounted_over_the_checkpoint_and_outlives_its_source() {
    for user in User::all() {
        let s = server(user).await;
        let out = shell(
            &s,
            "a",
            None,
            "mkdir d && echo x > d/x && echo base > f && echo kept > keep && echo own > own \
             && chmod 600 own && touch -d 2001-01-01 own && echo ok",
        )
        .await;
        assert!(out.contains("checkpoint: a@1"), "{user:?}: {out}");
        let kind = if mounts(&s) { "overlayfs" } else { "tmpfs" };
        let out = shell(&s, "b", Some("a@1"), "stat -f -c %T /workspace; cat f").await;
        assert!(
            out.starts_with(&format!("{kind}\nbase\n")),
            "{user:?}: {out}"
        );

        // Hostile code in the fork writes over, deletes, renames and
        // truncates what it was started from, and looks for the layers
        // below: its writes are its own, never the checkpoint's.
        let out = shell(
            &s,
            "b",
            None,
            "echo evil > f; rm -r d; mv keep kept2; truncate -s 0 kept2; echo n > n; \
             mount -o remount,rw / 2>/dev/null && echo remounted; \
             find / -xdev \\( -name base -o -name ckpt -o -name wsup \\) 2>/dev/null | wc -l",
        )
        .await;
        assert!(
            out.starts_with("0\n") && !out.contains("remounted"),
            "{out}"
        );
        assert!(out.contains("checkpoint: b@2"), "{out}");
        // Every file it was started from is its own uid's (a root
        // server's fork: idmapped from its source's), none another's; it
        // reads the source's mode-0600 file, changes its mode and times,
        // and cannot give it away.
        let out = shell(
            &s,
            "b",
            None,
            "find /workspace ! -user $(id -u) | wc -l; cat own; chmod 644 own; \
             touch -d 2002-02-02 own; chown 12345 own 2>/dev/null && echo chowned; \
             stat -c '%a' own",
        )
        .await;
        assert!(out.starts_with("0\nown\n644\n"), "{user:?}: {out}");
        let out = shell(&s, "a", None, "cat f keep; ls d; stat -c '%a %Y' own").await;
        assert!(out.starts_with("base\nkept\nx\n600 978307200\n"), "{out}");
        let out = shell(&s, "r", Some("a@1"), "cat f keep; ls d").await;
        assert!(out.starts_with("base\nkept\nx\n"), "{out}");

        // A fork of the fork: its files over a's, neither changed.
        let out = shell(&s, "c", Some("b"), "cat f n; wc -c < kept2; ls -A").await;
        assert!(
            out.starts_with("evil\nn\n0\nf\nkept2\nn\n"),
            "{user:?}: {out}"
        );
        let out = shell(&s, "c", None, "echo c > f; rm n; ls -A").await;
        assert!(out.starts_with("f\nkept2\n"), "{out}");
        let out = shell(&s, "b", None, "cat f n").await;
        assert!(out.starts_with("evil\nn\n"), "{out}");

        // The source ends while its forks live: they still read its files,
        // and can be forked and rolled back.
        let r = s
            .call(json!({"env": "shell", "session": "a", "code": "true", "end": true}))
            .await;
        assert!(text(&r).contains("ended, as asked"), "{}", text(&r));
        let out = shell(&s, "r", None, "cat f keep; ls d").await;
        assert!(out.starts_with("base\nkept\nx\n"), "{out}");
        let out = shell(&s, "r", None, "echo more >> keep; cat keep").await;
        assert!(out.contains("kept\nmore\n") && out.contains("r@3"), "{out}");
        let out = shell(&s, "r", None, "echo again >> keep; rm -r d").await;
        assert!(out.contains("checkpoint: r@4"), "{out}");
        // In place, over its own checkpoint and a's below it.
        let out = shell(&s, "r", Some("r@3"), "cat keep; ls d").await;
        assert!(out.starts_with("kept\nmore\nx\n"), "{user:?}: {out}");
        let out = shell(&s, "e", Some("c@2"), "cat f; ls -A").await;
        assert!(
            out.starts_with("c\nf\nkept2\n"),
            "{user:?}: {out}\n{}",
            s.stderr()
        );
    }
}

/// Each rollback of a session started over checkpoints stacks one more:
/// at most 16, past which `from` is refused, saying so, and the session
/// keeps working. A root server mounts each layer idmapped anew for each
/// jail (open_tree_attr, Linux 6.15); elsewhere it copies, and has no chain.
#[tokio::test]
async fn a_chain_of_checkpoints_is_bounded() {
    for user in User::all() {
        let s = server(user).await;
        let out = shell(&s, "d", None, "echo 0 > f").await;
        assert!(out.contains("checkpoint: d@1"), "{user:?}: {out}");
        // The start-up lines reach the test's reader of stderr in time.
        assert!(eventually(|| s.stderr().contains("self-test: forks: ")).await);
        let mounted = mounts(&s);
        for k in 1..=16 {
            let at = format!("d@{k}");
            let code = format!("cat f; echo {k} > f; stat -f -c %T /workspace");
            let out = shell(&s, "d", Some(&at), &code).await;
            let next = format!("checkpoint: d@{}", k + 1);
            let kind = if mounted { "overlayfs" } else { "tmpfs" };
            assert!(
                out.starts_with(&format!("{}\n{kind}\n", k - 1)) && out.contains(&next),
                "{user:?} {k}: {out}"
            );
        }
        let out = shell(&s, "d", Some("d@17"), "true").await;
        if mounted {
            assert!(
                out.starts_with("error[unknown_checkpoint]") && out.contains("chain of 16"),
                "{user:?}: {out}"
            );
        } else {
            assert!(out.contains("started from d@17"), "{user:?}: {out}");
        }
        let out = shell(&s, "d", None, "cat f").await;
        assert!(out.starts_with("16\n"), "{user:?}: {out}");
        // The chain's files are the jail's own, whoever wrote each layer.
        let out = shell(&s, "d", None, "find /workspace ! -user $(id -u) | wc -l").await;
        assert!(out.starts_with("0\n"), "{user:?}: {out}");
    }
}
