//! The control socket's attacks: another uid connecting, and a symbolic
//! link or a directory planted in the socket directory's place; each
//! refused. Real sockets, real SO_PEERCRED.

use std::os::unix::fs::PermissionsExt;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::*;

fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// A request line sent on a fresh connection to `path`, and what came back
/// (empty when the server closed it unanswered).
async fn ask(path: &Path, line: &str) -> String {
    let mut stream = UnixStream::connect(path).await.unwrap();
    stream.write_all(line.as_bytes()).await.unwrap();
    let mut answer = String::new();
    let mut reader = BufReader::new(stream);
    let read = reader.read_line(&mut answer);
    let read = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("answered or closed");
    match read {
        // Closed with the request unread.
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => String::new(),
        read => {
            read.unwrap();
            answer
        }
    }
}

#[tokio::test]
async fn the_own_uid_is_answered_and_another_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nix-sandbox-mcp");
    let control = Control::bind(&dir, own_uid()).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let mode = std::fs::metadata(control.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let path = control.path().to_owned();
    let shutdown = CancellationToken::new();
    let slots = SessionSlots::new(4, None);
    tokio::spawn(control.serve(slots.clone(), None, shutdown.clone()));
    let answer = ask(&path, "{\"v\":1,\"op\":\"list\"}\n").await;
    let answer: Response = serde_json::from_str(&answer).unwrap();
    assert!(answer.ok && answer.sessions.is_empty(), "{answer:?}");
    let answer = ask(&path, "{\"v\":1,\"op\":\"status\",\"id\":\"nope\"}\n").await;
    assert!(answer.contains("no open session `nope`"), "{answer}");
    let answer = ask(&path, "{\"v\":9,\"op\":\"list\"}\n").await;
    assert!(answer.contains("protocol version 9"), "{answer}");
    shutdown.cancel();

    // A server whose uid is not the test's: the test is another user to it,
    // and with the modes opened up as another user would need, its
    // connection is still closed unanswered.
    let dir = tmp.path().join("other");
    let mut stranger = Control::bind(&dir, own_uid()).unwrap();
    stranger.owner = own_uid().wrapping_add(1);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(stranger.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let path = stranger.path().to_owned();
    let shutdown = CancellationToken::new();
    tokio::spawn(stranger.serve(slots, None, shutdown.clone()));
    assert_eq!(ask(&path, "{\"v\":1,\"op\":\"list\"}\n").await, "");
    shutdown.cancel();
}

/// As root: a real process of uid 65534 connecting (the modes opened up)
/// is refused. As another user this is the test above's stranger.
#[tokio::test]
async fn a_real_other_uid_is_refused_when_root() {
    if own_uid() != 0 {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("nix-sandbox-mcp");
    let control = Control::bind(&dir, 0).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(control.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let path = control.path().to_owned();
    let shutdown = CancellationToken::new();
    tokio::spawn(control.serve(SessionSlots::new(4, None), None, shutdown.clone()));
    let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n\
                  try:\n  s.sendall(b'{\"v\":1,\"op\":\"list\"}\\n')\n  s.settimeout(5)\n  \
                  print(repr(s.recv(4096)))\nexcept (ConnectionResetError, BrokenPipeError):\n  print(repr(b''))";
    let out = tokio::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(&path)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Connected (the modes let it), and closed unanswered.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "b''",
        "{out:?}"
    );
    shutdown.cancel();
}

#[test]
fn a_symbolic_link_or_a_planted_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let own = own_uid();
    // A symbolic link in the directory's place, to a directory of the
    // server's own: still refused (whoever planted it chose where).
    let target = tmp.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = Control::bind(&link, own).unwrap_err().to_string();
    assert!(e.contains("not a directory"), "{e}");
    assert!(std::fs::read_dir(&target).unwrap().next().is_none());
    // A directory others may enter.
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = Control::bind(&open, own).unwrap_err().to_string();
    assert!(e.contains("mode 755"), "{e}");
    // A directory of another uid (what another user planted).
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = prepare_dir(&theirs, own.wrapping_add(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("belongs to uid"), "{e}");
    if own == 0 {
        rustix::fs::chown(&theirs, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
        let e = Control::bind(&theirs, 0).unwrap_err().to_string();
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }
}
