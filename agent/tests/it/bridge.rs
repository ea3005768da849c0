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

#[test]
fn the_bridge_carries_bytes_and_leaves_the_entry_its_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // The proxy's side: answers each connection with what it read, upper-cased.
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
        .args(["--", "/bin/sh", "-c", "echo entry $$; exec sleep 2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The entry's first line: it runs, so the bridge listens already.
    let mut stdout = std::io::BufReader::new(entry.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert_eq!(
        first,
        format!("entry {}\n", entry.id()),
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
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", entry.id())).unwrap();
    let bridge: Vec<&str> = children.split_whitespace().collect();
    assert!(!bridge.is_empty(), "no serving child");
    for child in bridge {
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
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(entry.wait().unwrap().success());
    // And the bridge died with it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        TcpStream::connect(&listen).is_err(),
        "the bridge outlived its entry"
    );
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
