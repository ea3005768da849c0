//! jail-budget's port forwarder: the jail's loopback brought up, and the
//! process that connects to the jail's ports for the server (the module
//! comment of jail-budget.rs says the protocol).

use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, SockaddrIn, connect, sendmsg,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;
use nix::unistd::{ForkResult, fork};

/// How long one connect to the jail may take: a loopback connect answers at
/// once unless the jail's listen queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Brings the loopback of the current network namespace up.
pub fn loopback_up() -> Result<(), Errno> {
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut ifr: nix::libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as nix::libc::c_char;
    }
    // SAFETY: the ioctls read and write the ifreq they are given.
    unsafe {
        Errno::result(nix::libc::ioctl(
            sock.as_raw_fd(),
            nix::libc::SIOCGIFFLAGS,
            &mut ifr,
        ))?;
        ifr.ifr_ifru.ifru_flags |= nix::libc::IFF_UP as nix::libc::c_short;
        Errno::result(nix::libc::ioctl(
            sock.as_raw_fd(),
            nix::libc::SIOCSIFFLAGS,
            &ifr,
        ))?;
    }
    Ok(())
}

/// Forks the forwarder serving `fd`, then closes `fd` here, so that what
/// this process execs (bubblewrap, and the jail below it) never holds it.
pub fn start(fd: RawFd) -> Result<(), String> {
    let parent = nix::unistd::getpid();
    // SAFETY: jail-budget is single-threaded; the child only makes
    // system calls and exits.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            let status = match serve(fd, parent) {
                Ok(()) => 0,
                Err(_) => 1,
            };
            // SAFETY: leaves at once, running no destructor of the parent's.
            unsafe { nix::libc::_exit(status) }
        }
        ForkResult::Parent { .. } => nix::unistd::close(fd).map_err(|e| format!("close {fd}: {e}")),
    }
}

/// The forwarder: dies with `parent` (bubblewrap, once it has exec'd),
/// holds nothing of the wrapper's but `fd`, and answers the server's
/// requests until it closes its end.
fn serve(fd: RawFd, parent: nix::unistd::Pid) -> Result<(), Errno> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    if nix::unistd::getppid() != parent {
        return Err(Errno::ESRCH);
    }
    nix::sys::prctl::set_dumpable(false)?;
    // The wrapper's stdio are the server's pipes to the agent: holding them
    // would keep them open after the jail ends.
    let null = nix::fcntl::open(
        "/dev/null",
        nix::fcntl::OFlag::O_RDWR,
        nix::sys::stat::Mode::empty(),
    )?;
    for target in 0..3 {
        // SAFETY: 0, 1 and 2 are this process's to replace.
        Errno::result(unsafe { nix::libc::dup2(null.as_raw_fd(), target) })?;
    }
    drop(null);
    // SAFETY: fd stays open for the life of this process.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    loop {
        let mut port = [0u8; 2];
        if !read_exact(fd, &mut port)? {
            return Ok(());
        }
        let answer = connect_jail(u16::from_be_bytes(port));
        let sent = match &answer {
            Ok(sock) => sendmsg::<()>(
                fd.as_raw_fd(),
                &[IoSlice::new(&[0])],
                &[ControlMessage::ScmRights(&[sock.as_raw_fd()])],
                MsgFlags::MSG_NOSIGNAL,
                None,
            ),
            Err(errno) => {
                let code = u8::try_from(*errno as i32).unwrap_or(u8::MAX).max(1);
                sendmsg::<()>(
                    fd.as_raw_fd(),
                    &[IoSlice::new(&[code])],
                    &[],
                    MsgFlags::MSG_NOSIGNAL,
                    None,
                )
            }
        };
        sent?;
    }
}

/// Fills `buf` from `fd`; false at end of file before the first byte.
fn read_exact(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<bool, Errno> {
    let mut at = 0;
    while at < buf.len() {
        match nix::unistd::read(fd, &mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(Errno::EPROTO),
            Ok(n) => at += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// A socket connected to 127.0.0.1:`port` in this network namespace.
fn connect_jail(port: u16) -> Result<OwnedFd, Errno> {
    let sock = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // Linux bounds a blocking connect by the send timeout.
    let timeout = TimeVal::new(CONNECT_TIMEOUT.as_secs() as _, 0);
    setsockopt(&sock, sockopt::SendTimeout, &timeout)?;
    connect(sock.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port))?;
    Ok(sock)
}
