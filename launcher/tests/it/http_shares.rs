//! Fair shares over HTTP (admission.rs, mcp/activity.rs): one client's
//! flood of runs, sessions or MCP sessions does not lock another client
//! out, and what is refused names the limit and when a slot frees. The
//! server runs as user 65534 (when the tests run as root), an ordinary
//! user's server; limits are set through their environment variables.

use serde_json::json;

use crate::common::*;
use crate::http::{HttpServer, result_text};

/// A client's runs beyond its share while another client wants one: of 4
/// slots, a client with a share of 2 starting 6 runs that sleep gets 3
/// (the last slot stays free), another client's run starts at once in the
/// free one, and the flooder's runs still in line are refused after 10 s,
/// naming its share and when its first run ends.
#[tokio::test]
async fn one_clients_sleeping_runs_leave_a_slot_for_another() {
    let mark = marker("runs-share");
    let server = HttpServer::unprivileged(
        marked("python", &mark, 60),
        &[
            ("NIX_SANDBOX_MAX_RUNS", "4"),
            ("NIX_SANDBOX_CLIENT_RUNS_SHARE", "2"),
        ],
    )
    .await;
    let mut flooder = server.client();
    flooder.initialize().await;
    let mut flood = Vec::new();
    for _ in 0..6 {
        flood.push(
            flooder
                .start_run("python", "import time\ntime.sleep(1000)")
                .await,
        );
    }
    assert!(
        eventually(|| count_named(&mark, "python3") == 3).await,
        "{} of the flooder's runs started, not 3",
        count_named(&mark, "python3")
    );
    let mut other = server.client();
    other.initialize().await;
    assert_eq!(
        other.run("shell", "echo $((6 * 7))").await,
        "42\nexit code 0"
    );
    assert_eq!(
        count_named(&mark, "python3"),
        3,
        "the flooder got the free slot"
    );
    // The three in line wait 10 s, then are refused; the sleeping ones
    // go on.
    let mut refused = 0;
    for (id, reply) in flood.split_off(3) {
        let text = result_text(&reply.message(id).await);
        assert!(
            text.starts_with(
                "error[server_busy]: this client is running 3 programs at once, beyond its \
                 share of 2 of the server's 4 (--client-runs-share / \
                 NIX_SANDBOX_CLIENT_RUNS_SHARE) while other clients want them, and none of \
                 its own ended within 10 s; nothing was run. The first of them ends within "
            ) && text.contains("s at the latest (its timeout)"),
            "{text}"
        );
        refused += 1;
    }
    assert_eq!(refused, 3);
    assert_eq!(count_named(&mark, "python3"), 3);
    assert_eq!(flooder.end_session().await, 204);
    assert_no_process_left(&mark).await;
}

/// A client's sessions beyond its share: of 5 slots, a client with a
/// share of 2 opens 4 and is refused the fifth (kept for another client,
/// which gets it); a third client within its share finds none free, and
/// the flooder's least recently used idle session is ended for it. The
/// flooder's next call with that name, once slots are free, is told why.
#[tokio::test]
async fn one_clients_sessions_make_room_for_another() {
    let mark = marker("sessions-share");
    let server = HttpServer::unprivileged(
        sessions_marked(&mark, 30),
        &[
            ("NIX_SANDBOX_MAX_SESSIONS_TOTAL", "5"),
            ("NIX_SANDBOX_CLIENT_SESSIONS_SHARE", "2"),
        ],
    )
    .await;
    let mut flooder = server.client();
    flooder.initialize().await;
    for name in ["s1", "s2", "s3", "s4"] {
        let out = flooder
            .session_run("python", name, &format!("x = '{name}'\nprint(x)"))
            .await;
        assert_eq!(out, format!("{name}\n"));
    }
    let refused = flooder.session_run("python", "s5", "print(5)").await;
    assert!(
        refused.starts_with(
            "error[server_busy]: this client has 4 sessions open, beyond its share of 2 of the \
             server's 5 (--client-sessions-share / NIX_SANDBOX_CLIENT_SESSIONS_SHARE), and the \
             server's last free session is kept for another client; nothing was run. Reuse \
             one of its sessions, call without `session`, or wait: a session ends after 300 s \
             without calls (the first in "
        ) && refused.ends_with(" s)."),
        "{refused}"
    );
    let mut second = server.client();
    second.initialize().await;
    assert_eq!(second.session_run("python", "b", "print('b')").await, "b\n");
    let mut third = server.client();
    third.initialize().await;
    assert_eq!(third.session_run("python", "c", "print('c')").await, "c\n");
    assert!(eventually(|| count_named(&mark, "agent") == 5).await);
    // The flooder's other sessions kept their state.
    assert_eq!(
        flooder.session_run("python", "s2", "print(x)").await,
        "s2\n"
    );
    // With the other clients gone there is room again: s1 starts afresh,
    // and says why its state is gone.
    assert_eq!(second.end_session().await, 204);
    assert_eq!(third.end_session().await, 204);
    assert!(eventually(|| count_named(&mark, "agent") == 3).await);
    let again = flooder.session_run("python", "s1", "print(x)").await;
    assert!(
        again.contains(
            "new session `s1`: the earlier one ended (the server ended it for another client: \
             it was the least recently used of this client's 4 sessions, beyond its share of 2 \
             (--client-sessions-share / NIX_SANDBOX_CLIENT_SESSIONS_SHARE) while the server's \
             5 were all open)"
        ) && again.contains("NameError"),
        "{again}"
    );
}

/// MCP sessions: at the cap, `initialize` ends the least recently used
/// MCP session that is idle and holds nothing, never one holding a
/// sandbox session; when every one holds something, 503 says when the
/// first idle one ends.
#[tokio::test]
async fn mcp_sessions_past_the_cap_end_an_idle_empty_one() {
    let server = HttpServer::unprivileged(
        Manifest::new(&template()),
        &[("NIX_SANDBOX_MAX_MCP_SESSIONS", "3")],
    )
    .await;
    let mut owner = server.client();
    owner.initialize().await;
    assert_eq!(
        owner
            .session_run("python", "s", "x = 42\nprint('set')")
            .await,
        "set\n"
    );
    let mut flood = Vec::new();
    for _ in 0..2 {
        let mut client = server.client();
        client.initialize().await;
        flood.push(client);
    }
    // A new client is let in: the oldest idle empty one makes room.
    let mut newcomer = server.client();
    newcomer.initialize().await;
    let (_, body) = flood[0].request("tools/list", json!({}));
    assert_eq!(
        flood[0].post(&body).await.status,
        404,
        "the LRU idle one was not ended"
    );
    assert_eq!(
        owner.session_run("python", "s", "print(x)").await,
        "42\nexit code 0",
        "an MCP session holding a sandbox session was ended"
    );
    // Every MCP session holds something: no room.
    for client in [&mut newcomer, &mut flood[1]] {
        assert_eq!(client.session_run("python", "t", "print('t')").await, "t\n");
    }
    let reply = server.client().try_initialize().await.unwrap_err();
    assert_eq!(reply.status, 503);
    let retry: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((290..=300).contains(&retry), "Retry-After: {retry}");
    let body = reply.text().await;
    assert!(
        body.starts_with(
            "Service Unavailable: 3 MCP sessions are open, the most this server allows \
             (--max-mcp-sessions / NIX_SANDBOX_MAX_MCP_SESSIONS), and each holds sandbox \
             sessions, runs or a request being answered, so none was ended for this one; an \
             MCP session ends 300 s after its last request (the first idle one in "
        ),
        "{body}"
    );
}
