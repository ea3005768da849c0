//! A baseline of bench.py: the least a process between a client and a
//! session wrapper can do. It runs the wrapper (its arguments) with pipes
//! and copies bytes both ways from one thread waiting in poll(2), as the
//! launcher's single-threaded runtime waits in epoll: no parsing, no
//! framing. The round trip through it, beside the wrapper run directly and
//! the launcher, shows what the extra process hop itself costs on the
//! machine and what the launcher adds to it.
//!
//! Built by bench/run with rustc alone (the standard library and poll from
//! libc): `relay WRAPPER [ARG...]`.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Command, ExitCode, Stdio};

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 0x1;

unsafe extern "C" {
    fn poll(fds: *mut PollFd, nfds: u64, timeout: i32) -> i32;
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: relay WRAPPER [ARG...]");
        return ExitCode::from(2);
    };
    let mut child = match Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("relay: cannot run {program}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut to_child = child.stdin.take();
    let mut from_child = child.stdout.take().expect("piped stdout");
    // Unbuffered: every read and write is one system call, as the
    // launcher's are.
    // SAFETY: fds 0 and 1 are open for the process's lifetime, and
    // nothing else here uses them.
    let (mut stdin, mut stdout) = unsafe { (File::from_raw_fd(0), File::from_raw_fd(1)) };
    let mut buf = vec![0u8; 1 << 16];
    let mut fds = [
        PollFd {
            fd: stdin.as_raw_fd(),
            events: POLLIN,
            revents: 0,
        },
        PollFd {
            fd: from_child.as_raw_fd(),
            events: POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: fds is a valid array of two pollfd structures.
        if unsafe { poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if fds[0].revents != 0 {
            match stdin.read(&mut buf) {
                Ok(n) if n > 0 => {
                    if let Some(pipe) = to_child.as_mut()
                        && pipe.write_all(&buf[..n]).is_err()
                    {
                        break;
                    }
                }
                // End of input: the wrapper's too; poll stdin no more.
                _ => {
                    to_child = None;
                    fds[0].fd = -1;
                }
            }
        }
        if fds[1].revents != 0 {
            match from_child.read(&mut buf) {
                Ok(n) if n > 0 => {
                    if stdout.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
    }
    drop(to_child);
    match child.wait() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}
