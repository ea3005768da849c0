//! `egress-bridge`: the jail's side of network by policy. The jail has its
//! own network namespace with only loopback; the launcher's egress proxy is
//! a Unix socket the wrapper binds into the jail. This bridge listens on
//! 127.0.0.1:PORT (the jail's `HTTP_PROXY`) and copies each connection to
//! that socket, then runs the jail's entry:
//!
//!   egress-bridge --listen 127.0.0.1:3128 --socket /run/nix-sandbox/egress.sock -- PROGRAM ARGS...
//!
//! It binds first (so the port is ready before any code runs), forks, and
//! the parent execs PROGRAM (keeping its pid: a session's agent stays the
//! jail's pid 1). The child serves, with stdin, stdout and stderr on
//! /dev/null so that it holds none of the launcher's pipes, and dies with
//! PROGRAM. It is as untrusted as everything in the jail: the proxy decides
//! every request; this only carries bytes.

use std::ffi::OsString;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use nix::sys::signal::Signal;
use nix::unistd::{ForkResult, fork};

const USAGE: &str = "usage: egress-bridge --listen ADDR --socket PATH -- PROGRAM [ARGS...]";

struct Args {
    listen: String,
    socket: PathBuf,
    program: OsString,
    args: Vec<OsString>,
}

fn parse(mut argv: impl Iterator<Item = OsString>) -> Result<Args, String> {
    let (mut listen, mut socket) = (None, None);
    loop {
        let arg = argv.next().ok_or("no program after --")?;
        match arg.to_str() {
            Some("--listen") => {
                listen = Some(
                    argv.next()
                        .ok_or("--listen needs ADDR")?
                        .into_string()
                        .map_err(|_| "ADDR is not UTF-8")?,
                );
            }
            Some("--socket") => {
                socket = Some(PathBuf::from(argv.next().ok_or("--socket needs PATH")?))
            }
            Some("--") => break,
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    let program = argv.next().ok_or("no program after --")?;
    Ok(Args {
        listen: listen.ok_or("--listen is required")?,
        socket: socket.ok_or("--socket is required")?,
        program,
        args: argv.collect(),
    })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("egress-bridge: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(&args.listen) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("egress-bridge: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(2);
        }
    };
    // SAFETY: one thread so far; the child only makes system calls and
    // threads of its own after the fork.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            serve(&listener, &args.socket);
            ExitCode::SUCCESS
        }
        Ok(ForkResult::Parent { .. }) => {
            drop(listener);
            let e = std::process::Command::new(&args.program)
                .args(&args.args)
                .exec();
            eprintln!("egress-bridge: cannot run {:?}: {e}", args.program);
            ExitCode::from(127)
        }
        Err(e) => {
            eprintln!("egress-bridge: fork failed: {e}");
            ExitCode::from(2)
        }
    }
}

/// The child: dies with its parent, holds no stdio of the jail's entry,
/// carries each connection to the proxy's socket.
fn serve(listener: &TcpListener, socket: &std::path::Path) {
    let parent = nix::unistd::getppid();
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || nix::unistd::getppid() != parent
    {
        return;
    }
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto stdio with a valid open fd; no memory touched.
            unsafe { nix::libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    for stream in listener.incoming() {
        let Ok(tcp) = stream else { continue };
        // The proxy answers in pieces (a head, then a body): each goes on
        // as it comes, not held by Nagle's algorithm until the client
        // acknowledges the one before, up to its delayed ACK (40 ms).
        let _ = tcp.set_nodelay(true);
        let socket = socket.to_owned();
        let _ = std::thread::Builder::new().spawn(move || {
            if let Ok(unix) = UnixStream::connect(&socket) {
                let _ = carry(tcp, unix);
            }
        });
    }
}

/// Copies both ways until each side ends.
fn carry(tcp: TcpStream, unix: UnixStream) -> io::Result<()> {
    let (mut tcp_r, mut unix_w) = (tcp.try_clone()?, unix.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut tcp_r, &mut unix_w);
        let _ = unix_w.shutdown(Shutdown::Write);
    });
    let (mut unix_r, mut tcp_w) = (unix, tcp);
    let _ = io::copy(&mut unix_r, &mut tcp_w);
    let _ = tcp_w.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}
