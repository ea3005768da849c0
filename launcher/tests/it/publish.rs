//! Published ports through MCP, in fixture session jails (real bubblewrap;
//! the fixture `jail` hands jail-budget the forwarder's descriptor as
//! lib/jail/kernelBudgets.nix does): a web server the model starts in a
//! session is fetched from the host, a port nothing listens on closes the
//! host's connection and nothing else, the address goes with the session,
//! and ports the environment does not publish are refused. As the test's
//! user and as user 65534.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::json;

use crate::common::*;

/// The fixture manifest whose python sessions may publish 8000 and 8001,
/// sessions marked with `mark`.
fn publishing(mark: &str) -> Manifest {
    let mut m = template();
    let py = &mut m["environments"]["python"];
    py["publish"] = json!([8000, 8001]);
    py["session"].as_array_mut().unwrap().push(json!(mark));
    Manifest::new(&m)
}

/// Starts `python -m http.server 8000` serving /workspace, with a file in
/// it, and returns once it listens.
const START_SERVER: &str = "import subprocess, socket, time
open('/workspace/hello-from-the-jail.txt', 'w').write('hi')
web = subprocess.Popen(['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1',
    '--directory', '/workspace'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        socket.create_connection(('127.0.0.1', 8000)).close()
        break
    except OSError:
        time.sleep(0.05)
print('listening')";

/// Starts a server on the jail's port 8001 that writes to each connection
/// until it closes.
const FLOOD: &str = "import socket, threading
def flood(conn):
    try:
        while True:
            conn.sendall(b'x' * 65536)
    except OSError:
        pass
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(('127.0.0.1', 8001))
srv.listen()
def serve():
    while True:
        threading.Thread(target=flood, args=(srv.accept()[0],), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
print('flooding')";

/// The loopback address and the Unix socket the result's `published:`
/// line names: `published: PORT -> http://ADDR (private: unix:PATH)`.
fn published(r: &rmcp::model::CallToolResult, port: u16) -> (String, String) {
    let t = text(r);
    let prefix = format!("published: {port} -> http://");
    let line = t
        .lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in {t}"));
    let (addr, private) = line.split_once(" (private: unix:").expect("a Unix socket");
    assert!(addr.starts_with("127.0.0.1:"), "{line}");
    (addr.to_owned(), private.trim_end_matches(')').to_owned())
}

/// `GET /` through `addr`: the whole answer, or the error.
fn get(addr: &str) -> std::io::Result<String> {
    let conn = TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(Duration::from_secs(20)))?;
    exchange(conn)
}

/// `GET /` through the Unix socket `path`.
fn get_unix(path: &str) -> std::io::Result<String> {
    let conn = UnixStream::connect(path)?;
    conn.set_read_timeout(Some(Duration::from_secs(20)))?;
    exchange(conn)
}

fn exchange(mut conn: impl Read + Write) -> std::io::Result<String> {
    conn.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    Ok(answer)
}

#[tokio::test]
async fn a_web_server_in_a_session_is_fetched_from_the_host_until_the_session_ends() {
    for user in User::all() {
        let mark = marker("publish");
        // The server's runtime directory, where its private sockets go.
        let runtime = tempfile::tempdir().unwrap();
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let s = Server::start_command(
            user.command(),
            vec![publishing(&mark)],
            &["--allow-wrappers-outside-store"],
            &[
                ("SESSION_IDLE_TIMEOUT", "3"),
                ("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap()),
            ],
        )
        .await;
        let r = s
            .call(json!({"env": "python", "session": "web", "code": START_SERVER, "publish": 8000}))
            .await;
        assert_eq!(r.is_error, Some(false), "{user:?}: {r:?}");
        assert!(text(&r).contains("listening"), "{user:?}: {r:?}");
        let (addr, private) = published(&r, 8000);
        let page = get(&addr).unwrap();
        assert!(page.starts_with("HTTP/1.0 200"), "{user:?}: {page}");
        assert!(page.contains("hello-from-the-jail.txt"), "{user:?}: {page}");
        // The private way: a socket only the server's user may open, in a
        // directory of its own.
        assert!(
            private.starts_with(runtime.path().to_str().unwrap()),
            "{private}"
        );
        let socket = std::fs::metadata(&private).unwrap();
        let dir = std::fs::metadata(std::path::Path::new(&private).parent().unwrap()).unwrap();
        assert_eq!((socket.mode() & 0o777, dir.mode() & 0o777), (0o600, 0o700));
        let page = get_unix(&private).unwrap();
        assert!(page.contains("hello-from-the-jail.txt"), "{user:?}: {page}");

        // Asked again, the same address.
        let r = s
            .call(json!({"session": "web", "code": "1", "publish": 8000}))
            .await;
        assert_eq!(
            published(&r, 8000),
            (addr.clone(), private.clone()),
            "{user:?}"
        );

        // A published port nothing listens on: the host's connection
        // closes, the server says one line, and the other port still works.
        let r = s
            .call(json!({"session": "web", "code": "1", "publish": 8001}))
            .await;
        let (empty, _) = published(&r, 8001);
        let answer = get(&empty);
        assert!(
            answer.as_ref().map_or(true, String::is_empty),
            "{user:?}: {answer:?}"
        );
        assert!(get(&addr).unwrap().contains("hello-from-the-jail.txt"));
        assert!(
            eventually(|| s.stderr().contains("the jail's port 8001 refused it")).await,
            "{user:?}: {}",
            s.stderr()
        );

        // A jail flooding a connection: the host reads what it wants, then
        // stops; the session's end closes the connection all the same.
        let r = s.call(json!({"session": "web", "code": FLOOD})).await;
        assert!(text(&r).contains("flooding"), "{user:?}: {r:?}");
        let mut flooded = TcpStream::connect(&empty).unwrap();
        flooded
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut chunk = vec![0u8; 1 << 20];
        flooded.read_exact(&mut chunk).unwrap();
        assert!(chunk.iter().all(|&b| b == b'x'));

        // The session ends (idle): the address refuses, the server goes on.
        assert!(
            eventually(|| TcpStream::connect(&addr).is_err()).await,
            "{user:?}: {addr} still open after the session ended"
        );
        assert!(
            eventually(|| !std::path::Path::new(&private).exists()).await,
            "{user:?}: {private} left after the session ended"
        );
        // What the flood left in flight is bounded, then end of file.
        let mut rest = Vec::new();
        match flooded.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => assert_eq!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset,
                "{user:?}: {e}"
            ),
        }
        assert!(
            rest.len() < 64 << 20,
            "{user:?}: {} bytes after the end",
            rest.len()
        );
        let r = s.run("python", "print(6 * 7)").await;
        assert!(text(&r).starts_with("42\n"), "{user:?}: {r:?}");
        assert_no_process_left(&mark).await;
    }
}

#[tokio::test]
async fn ports_the_environment_does_not_publish_are_refused_with_one_line() {
    let mark = marker("publish-refused");
    let s = Server::start(vec![publishing(&mark)]).await;
    let r = s
        .call(json!({"env": "python", "session": "a", "code": "1", "publish": 9000}))
        .await;
    let t = assert_refused(&r, "port_not_allowed");
    assert_eq!(t.lines().count(), 1, "{t}");
    assert!(t.contains("port 9000") && t.contains("8000, 8001"), "{t}");
    let r = s
        .call(json!({"env": "python", "code": "1", "publish": 8000}))
        .await;
    let t = assert_refused(&r, "port_not_allowed");
    assert!(
        t.contains("needs a `session`") && t.contains("8000, 8001"),
        "{t}"
    );
    let r = s
        .call(json!({"env": "shell", "session": "b", "code": "true", "publish": 8000}))
        .await;
    let t = assert_refused(&r, "port_not_allowed");
    assert!(t.contains("`shell` publishes no port"), "{t}");
    let r = s
        .call(json!({"env": "python", "session": "a", "code": "1", "publish": "8000"}))
        .await;
    assert_refused(&r, "invalid_arguments");
    // Nothing ran: no session jail was started.
    assert_no_process_now(&mark, "after refused calls");
}
