//! Files in, any kind, through MCP with the fixture session jails, as the
//! test's user and as user 65534: binary files (every byte value, and
//! several MiB) checked by hash inside the jail; a file that exists refused
//! with `file_exists` and nothing of the call written, then replaced when
//! the file says `replace`; the server's bound and the workspace's size
//! refused in one line; bad input refused with the session's state kept; a
//! call at the default bound (50 MiB) through stdio and HTTP.

use std::io::Write;
use std::process::{Command, Stdio};

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::common::*;
use crate::http::{HttpServer, result_text};

/// `bytes`' SHA-256 as the host's `sha256sum` prints it.
fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// `n` bytes of a xorshift stream: no two MiB alike, nothing compressible.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn b64(bytes: &[u8]) -> String {
    proto::frame::encode_data(bytes)
}

/// Python printing the SHA-256 of each of `paths`, space-separated.
fn hashes(paths: &[&str]) -> String {
    format!(
        "import hashlib\nprint(' '.join(hashlib.sha256(open(p, 'rb').read()).hexdigest() for p in {paths:?}))"
    )
}

#[track_caller]
fn assert_succeeded(r: &CallToolResult) {
    assert_eq!(r.is_error, Some(false), "{r:?}");
}

/// The fixtures, and `tiny`: python with a /workspace of 1 MiB.
fn manifest() -> Manifest {
    let mut m = template();
    let mut tiny = m["environments"]["python"].clone();
    tiny["limits"]["workspace_mb"] = json!(1);
    let session = tiny["session"].as_array_mut().unwrap();
    session.extend([json!("tiny"), json!("60"), json!("1")]);
    m["environments"]["tiny"] = tiny;
    Manifest::new(&m)
}

#[tokio::test]
async fn binary_files_round_trip_and_exist_only_replaced_when_told() {
    let every: Vec<u8> = (0..=255).collect();
    let big = noise(6 << 20);
    for user in User::all() {
        let s = Server::start_command(
            user.command(),
            vec![manifest()],
            &["--allow-wrappers-outside-store"],
            &[("NIX_SANDBOX_FILES_MB", "8")],
        )
        .await;
        let call = |files: Value, code: &str| json!({"env": "python", "session": "bin", "code": code, "files": files});
        // Every byte value, and several MiB (in several frames to the
        // agent), byte for byte: hashed inside the jail.
        let files = json!([
            {"path": "all.bin", "base64": b64(&every)},
            {"path": "d/big.bin", "base64": b64(&big)},
            {"path": "t.txt", "content": "héllo"},
        ]);
        let r = s
            .call(call(
                files,
                &format!("x = 42\n{}", hashes(&["all.bin", "d/big.bin", "t.txt"])),
            ))
            .await;
        assert_succeeded(&r);
        let want = format!(
            "{} {} {}\n",
            sha256(&every),
            sha256(&big),
            sha256("héllo".as_bytes())
        );
        assert_eq!(text(&r), want, "as {user:?}");

        // A file that exists: refused by name, nothing of the call written.
        let code = "open('/workspace/ran', 'w').write('ran')";
        let r = s
            .call(call(
                json!([{"path": "new.txt", "content": "n"}, {"path": "all.bin", "content": "x"}]),
                code,
            ))
            .await;
        let message = assert_refused(&r, "file_exists");
        assert_eq!(
            message,
            "error[file_exists]: `all.bin` exists in /workspace; nothing was run, and none of the call's files was \
             written. To overwrite it, pass that file with `\"replace\": true`.",
            "as {user:?}"
        );
        let check = "import os\nprint(x, os.path.exists('new.txt'), os.path.exists('ran'), \
                     sorted(n for n in os.listdir('.') if n.startswith('.')))";
        let r = s.call(call(json!([]), check)).await;
        assert_eq!(text(&r), "42 False False []\n", "as {user:?}");
        let r = s.call(call(json!([]), &hashes(&["all.bin"]))).await;
        assert_eq!(text(&r), format!("{}\n", sha256(&every)));
        // Replaced when the file says so.
        let r = s
            .call(call(
                json!([{"path": "all.bin", "content": "x", "replace": true},
                       {"path": "new.txt", "content": "n"}]),
                "print(open('all.bin').read(), open('new.txt').read(), x)",
            ))
            .await;
        assert_succeeded(&r);
        assert_eq!(text(&r), "x n 42\n", "as {user:?}");

        // Over the server's bound (8 MiB here), over /workspace's size, or
        // filling what /workspace has left: one line each, nothing written.
        let r = s
            .call(call(
                json!([{"path": "over", "base64": b64(&noise((8 << 20) + 1))}]),
                code,
            ))
            .await;
        let message = assert_refused(&r, "files_too_large");
        assert!(
            message.contains("more than this server's bound of 8 MiB (NIX_SANDBOX_FILES_MB)"),
            "{message}"
        );
        let tiny = |files: Value, code: &str| json!({"env": "tiny", "session": "tiny", "code": code, "files": files});
        let r = s
            .call(tiny(
                json!([{"path": "over", "base64": b64(&noise(2 << 20))}]),
                code,
            ))
            .await;
        let message = assert_refused(&r, "files_too_large");
        assert!(
            message.contains("more than /workspace holds in `tiny` (workspace_mb 1)"),
            "{message}"
        );
        let r = s
            .call(tiny(
                json!([]),
                "open('/workspace/held', 'wb').write(b'h' * 700_000)",
            ))
            .await;
        assert_succeeded(&r);
        let r = s
            .call(tiny(
                json!([{"path": "a", "content": "a"}, {"path": "b", "base64": b64(&noise(600_000))}]),
                code,
            ))
            .await;
        let message = assert_refused(&r, "bad_file_path");
        assert!(message.contains("`b`: the workspace is full"), "{message}");
        let r = s
            .call(tiny(json!([]), "import os\nprint(sorted(os.listdir('.')))"))
            .await;
        assert_eq!(text(&r), "['held', 'outputs']\n", "as {user:?}");
    }
}

#[tokio::test]
async fn bad_files_are_refused_in_one_line_and_the_session_keeps_its_state() {
    let s = Server::start_command(
        User::unprivileged().command(),
        vec![manifest()],
        &["--allow-wrappers-outside-store"],
        &[],
    )
    .await;
    let r = s.session("python", "keep", "x = 7").await;
    assert_succeeded(&r);
    let many: Vec<Value> = (0..21)
        .map(|i| json!({"path": format!("f{i}"), "content": ""}))
        .collect();
    for (files, code, says) in [
        (
            json!([{"path": "a.bin", "base64": "abc$"}]),
            "invalid_arguments",
            "file `a.bin`: `base64` is not valid base64",
        ),
        (
            json!([{"path": "../a", "content": ""}]),
            "bad_file_path",
            ". or ..",
        ),
        (
            json!([{"path": "/etc/a", "content": ""}]),
            "bad_file_path",
            "absolute",
        ),
        (
            json!([{"path": "a\u{1b}[2Jb", "content": ""}]),
            "bad_file_path",
            "control character",
        ),
        (
            json!([{"path": "a", "content": "", "base64": ""}]),
            "invalid_arguments",
            "has both `content` and `base64`",
        ),
        (
            json!([{"path": "a", "content": "", "replace": 1}]),
            "invalid_arguments",
            "`replace` must be true or false",
        ),
        (
            Value::Array(many),
            "files_too_large",
            "21 files were passed, more than 20",
        ),
    ] {
        let r = s
            .call(json!({"env": "python", "session": "keep", "code": "x = 0", "files": files}))
            .await;
        let message = assert_refused(&r, code);
        assert!(message.contains(says), "{message}");
        assert!(!message.contains('\n'), "one line: {message}");
    }
    let r = s
        .session(
            "python",
            "keep",
            "import os\nprint(x, sorted(os.listdir('.')))",
        )
        .await;
    assert_eq!(text(&r), "7 ['outputs']\n");
}

/// A call at the default bound, 50 MiB (67 MiB of base64: more than
/// rmcp's own 16 MiB line bound, and than one frame to the agent), gets
/// through stdio and through HTTP, and is written whole.
#[tokio::test]
async fn a_call_at_the_default_bound_gets_through_both_transports() {
    let bytes = noise(50 << 20);
    let want = format!("{}\n", sha256(&bytes));
    let files = json!([{"path": "big.bin", "base64": b64(&bytes)}]);
    drop(bytes);
    let arguments = json!({"env": "python", "code": hashes(&["big.bin"]), "files": files});
    let s = Server::start(vec![Manifest::new(&template())]).await;
    let r = s.call(arguments.clone()).await;
    assert_succeeded(&r);
    assert_eq!(text(&r), want, "over stdio");
    drop(s);
    let server = HttpServer::start_command(
        User::Own.command(),
        vec![Manifest::new(&template())],
        &[],
        &[],
    )
    .await;
    let mut client = server.client();
    client.initialize().await;
    let (id, body) = client.request("tools/call", json!({"name": "run", "arguments": arguments}));
    let reply = client.post(&body).await;
    assert_eq!(reply.status, 200, "tools/call: HTTP {}", reply.status);
    assert_eq!(result_text(&reply.message(id).await), want, "over HTTP");
}
