//! egress-bridge: a jail's 127.0.0.1:PORT carried to the proxy's Unix
//! socket, the entry exec'd with its pid and stdio, and the bridge holding
//! none of that stdio (the launcher would wait for it) and gone with it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A port free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The bridge in front of a proxy's socket that answers each connection
/// with what it read, upper-cased; its entry runs `script`.
struct Bridge {
    entry: std::process::Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    /// The entry's first line: once it is read, the bridge listens.
    first: String,
    /// Where the bridge listens, on 127.0.0.1.
    port: u16,
    _dir: tempfile::TempDir,
}

impl Bridge {
    fn start(script: &str) -> Bridge {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("egress.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = [0u8; 64];
                let n = stream.read(&mut buf).unwrap_or(0);
                let _ = stream.write_all(&buf[..n].to_ascii_uppercase());
            }
        });
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut entry = Command::new(env!("CARGO_BIN_EXE_egress-bridge"))
            .args(["--listen", &listen, "--socket"])
            .arg(&socket)
            .args(["--", "/bin/sh", "-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(entry.stdout.take().unwrap());
        let mut first = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
        Bridge {
            entry,
            stdout,
            first,
            port,
            _dir: dir,
        }
    }

    fn listen(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

#[test]
fn the_bridge_carries_bytes_and_leaves_the_entry_its_stdio() {
    let mut bridge = Bridge::start("echo entry $$; exec sleep 2");
    let listen = bridge.listen();
    assert_eq!(
        bridge.first,
        format!("entry {}\n", bridge.entry.id()),
        "the entry keeps the pid (exec)"
    );
    let mut tcp = TcpStream::connect(&listen).expect("the bridge listens before the entry runs");
    tcp.write_all(b"hello").unwrap();
    let mut answer = [0u8; 5];
    tcp.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HELLO");
    // The serving child's stdio is /dev/null: in a session jail the entry
    // is the agent, whose stdin and stdout are the launcher's channel, which
    // no other process of the jail may hold.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", bridge.entry.id())).unwrap();
    let serving: Vec<&str> = children.split_whitespace().collect();
    assert!(!serving.is_empty(), "no serving child");
    for child in serving {
        for fd in 0..3 {
            let target = std::fs::read_link(format!("/proc/{child}/fd/{fd}")).unwrap();
            assert_eq!(
                target,
                std::path::Path::new("/dev/null"),
                "fd {fd} of the bridge"
            );
        }
    }

    // The entry's stdout closes when it ends: the bridge's child holds no
    // copy.
    let started = Instant::now();
    let mut rest = String::new();
    bridge.stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(bridge.entry.wait().unwrap().success());
    // And the bridge died with it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        TcpStream::connect(&listen).is_err(),
        "the bridge outlived its entry"
    );
}

/// The bridge's end of each connection has TCP_NODELAY: the proxy writes
/// an answer in pieces (its head, then its body), and with Nagle's
/// algorithm the bridge's second write waited for the client to
/// acknowledge the first, which a client delays up to 40 ms: an exchange
/// answered in two writes took 44 ms through the bridge. Read from the
/// bridge's own socket, taken from it with pidfd_getfd.
#[test]
fn the_bridges_connections_send_without_delay() {
    let mut bridge = Bridge::start("echo ready; exec sleep 5");
    let mut tcp = TcpStream::connect(bridge.listen()).unwrap();
    // Answered: the bridge accepted the connection and carries it.
    tcp.write_all(b"ping").unwrap();
    let mut answer = [0u8; 4];
    tcp.read_exact(&mut answer).unwrap();
    let ours = tcp.local_addr().unwrap().port();

    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", bridge.entry.id())).unwrap();
    let theirs = children
        .split_whitespace()
        .find_map(|child| socket_of(child.parse().unwrap(), bridge.port, ours))
        .expect("the bridge's end of the connection");
    assert!(
        theirs.nodelay().unwrap(),
        "the bridge's end of the connection waits for acknowledgements (Nagle)"
    );
    let _ = bridge.entry.kill();
    let _ = bridge.entry.wait();
}

/// A duplicate of the TCP socket process `pid` holds from local port
/// `port` to `peer_port`, taken with pidfd_getfd.
fn socket_of(pid: i32, port: u16, peer_port: u16) -> Option<TcpStream> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: a plain system call on numbers; a descriptor it returns is
    // ours alone.
    let pidfd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: just returned, owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: as above; a descriptor closed meanwhile fails here.
        let taken =
            unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if taken < 0 {
            continue;
        }
        // SAFETY: just returned, owned by nothing else.
        let socket = TcpStream::from(unsafe { OwnedFd::from_raw_fd(taken as i32) });
        if let (Ok(here), Ok(there)) = (socket.local_addr(), socket.peer_addr())
            && here.port() == port
            && there.port() == peer_port
        {
            return Some(socket);
        }
    }
    None
}

#[test]
fn bad_arguments_are_one_line_and_status_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_egress-bridge"))
        .args(["--listen", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("egress-bridge: no program after --"),
        "{err}"
    );
}
