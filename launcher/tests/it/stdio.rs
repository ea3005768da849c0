//! Standard input and output as clients connect them: pipes (Python's and
//! Rust's subprocess), a socketpair each (Node's `child_process`, so
//! Claude Code, Gemini CLI and the TypeScript SDK), or one socket for both
//! (inetd, socat). Over each, a session serves its calls with the streams
//! read and written on the runtime's reactor, the server's own descriptors
//! keep their blocking flags (they may be shared with the client or with
//! whatever else inherited them), and the client's closing ends the server
//! and the call it left running, with nothing more written.

use serde_json::{Value, json};

use crate::common::*;

/// The line the server logs when it reads and writes sockets on the
/// reactor; without it, tokio's stdin and stdout read and write on the
/// blocking pool, a hand-off between threads for every message.
const ON_THE_REACTOR: &str = "stdio: sockets, read and written on the reactor";

fn session_call(id: u64, code: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "run", "arguments": {"env": "python", "session": "s", "code": code}}
    })
}

/// The text of the answer to `id`, skipping other lines.
async fn answer(raw: &mut RawServer, id: u64) -> String {
    loop {
        let line = raw.next_line().await.expect("an answer");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == id {
            return message["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("{message}"))
                .to_owned();
        }
    }
}

/// The open flags of the server's descriptor `fd`, from /proc.
fn flags(pid: u32, fd: u32) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
    let octal = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .expect("fdinfo has flags")
        .trim();
    u32::from_str_radix(octal, 8).unwrap()
}

async fn serves_over(transport: Transport) {
    let mark = marker("stdio");
    let manifest = sessions_marked(&mark, 600);
    let cmd = RawServer::command(&manifest, "info,nix_sandbox_mcp::mcp::stdio=debug");
    let mut raw = RawServer::from_command_over(cmd, transport);
    raw.initialize().await;
    raw.send(session_call(1, "x = 41")).await;
    answer(&mut raw, 1).await;
    raw.send(session_call(2, "print(x + 1)")).await;
    let printed = answer(&mut raw, 2).await;
    assert!(
        printed.starts_with("42\n"),
        "over {transport:?}: {printed:?}"
    );
    let pid = raw.child.id().unwrap();
    for fd in [0, 1] {
        assert_eq!(
            flags(pid, fd) & nix::libc::O_NONBLOCK as u32,
            0,
            "over {transport:?}, the server made its fd {fd} non-blocking"
        );
    }
    let sockets = transport != Transport::Pipes;
    assert_eq!(
        raw.stderr().contains(ON_THE_REACTOR),
        sockets,
        "over {transport:?}: {}",
        raw.stderr()
    );
    raw.send(session_call(3, "import time\ntime.sleep(1000)"))
        .await;
    wait_running(&mark).await;
    raw.close_stdin();
    assert_eq!(raw.next_line().await, None, "{}", raw.stderr());
    assert!(
        raw.child.wait().await.unwrap().success(),
        "{}",
        raw.stderr()
    );
    assert_no_process_left(&mark).await;
}

#[tokio::test]
async fn a_session_is_served_over_pipes() {
    serves_over(Transport::Pipes).await;
}

#[tokio::test]
async fn a_session_is_served_over_a_socketpair_each() {
    serves_over(Transport::Sockets).await;
}

#[tokio::test]
async fn a_session_is_served_over_one_socket_for_both() {
    serves_over(Transport::OneSocket).await;
}
