//! A wrapper started straight into its run's cgroup: on cgroup v2 by
//! `clone3` with `CLONE_INTO_CGROUP` (Linux 5.7) ([`spawn_into`]); on v1
//! by a `clone3` from a thread that stands in the run's cgroups for the
//! moment (hop.rs, [`spawn_held`]). Either way no process is ever moved
//! between cgroups for a run: moving one (a write to `cgroup.procs`)
//! takes the kernel's cgroup lock for writing, which waits for an RCU
//! grace period, milliseconds a run. Where the kernel (or a seccomp
//! policy) refuses `clone3`, [`Refused`] says so and the caller starts the
//! wrapper as before and moves it in (wrapper/mod.rs).
//!
//! Everything the child needs (argv, environment, pipes) is made before
//! the `clone3`; the child, a copy of a thread of a process with other
//! threads, then makes only system calls: (held) it waits until the
//! parent lets it go, its stdio, a process group of its own, the default
//! signal mask and SIGPIPE, the caller's `setup` (the same as std's
//! `pre_exec`), `execve`. An error before the exec comes back as an errno
//! on a close-on-exec pipe.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::libc;

/// `clone3`'s flag for a child created in the cgroup `cgroup` names.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// A program to start: its path, argv and environment, as C strings.
pub struct Program {
    path: CString,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_strings` (heap buffers that move with
// the struct and are never changed); nothing else refers to them.
unsafe impl Send for Program {}

impl Program {
    /// `path` with `args` (argv[0] is `path`) and exactly `env`. `None`
    /// when a string holds a NUL byte.
    pub fn new<'a>(
        path: &str,
        args: &[String],
        env: impl Iterator<Item = (&'a str, &'a OsStr)>,
    ) -> Option<Self> {
        let path = CString::new(path).ok()?;
        let args: Vec<CString> = std::iter::once(Some(path.clone()))
            .chain(args.iter().map(|a| CString::new(a.as_str()).ok()))
            .collect::<Option<_>>()?;
        let vars: Vec<CString> = env
            .map(|(k, v)| {
                let mut pair = k.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(v.as_bytes());
                CString::new(pair).ok()
            })
            .collect::<Option<_>>()?;
        let pointers = |list: &[CString]| {
            list.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let (argv, envp) = (pointers(&args), pointers(&vars));
        let mut strings = args;
        strings.extend(vars);
        Some(Self {
            path,
            _strings: strings,
            argv,
            envp,
        })
    }
}

/// A started wrapper: its pid and the parent's ends of its stdio pipes.
pub struct Started {
    pub pid: u32,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// The kernel would not `clone3` into a cgroup here; nothing was started.
#[derive(Debug)]
pub struct Refused(pub io::Error);

/// Starts `program` in the cgroup v2 whose directory `cgroup` is open,
/// with fresh pipes for its stdio, in a process group of its own, after
/// `setup` ran in the child (only async-signal-safe calls, as in std's
/// `pre_exec`). `Err(Ok(Refused))`: the kernel refused `clone3` or the
/// cgroup flag, start it another way; `Err(Err(e))`: it did not start.
pub fn spawn_into(
    program: &Program,
    cgroup: BorrowedFd<'_>,
    setup: &dyn Fn() -> io::Result<()>,
) -> Result<Started, Result<Refused, io::Error>> {
    spawn(program, Some(cgroup), setup, None)
}

/// Runs `forked` in the parent, then lets the held child go: it goes on
/// once one byte is written on the `gate`, and exits at its end of file
/// (`forked` failed). The error that kept it held, if one did.
fn let_go(
    forked: &mut dyn FnMut() -> io::Result<()>,
    (gate_r, gate_w): (OwnedFd, OwnedFd),
) -> Option<io::Error> {
    drop(gate_r);
    match forked() {
        Ok(()) => nix::unistd::write(&gate_w, b"g").err().map(io::Error::from),
        Err(e) => Some(e),
    }
}

/// The errno the child wrote on the status pipe when its exec failed; `None`
/// at the end of file, which means the exec happened (the pipe was
/// close-on-exec), or when the pipe cannot be read (logged).
fn exec_errno(status_r: &OwnedFd) -> Option<i32> {
    let mut errno = [0u8; 4];
    let mut got = 0;
    while got < errno.len() {
        match nix::unistd::read(status_r, &mut errno[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the wrapper's start status");
                return None;
            }
        }
    }
    (got == errno.len()).then(|| i32::from_ne_bytes(errno))
}

/// Starts `program` as [`spawn_into`] does, but in the calling thread's
/// own cgroups, and holds the child before its first step until `forked`
/// ran in the parent: the child does nothing while the parent is still
/// where it was forked. An error of `forked` ends the child (it never
/// runs `setup`) and is the result.
pub fn spawn_held(
    program: &Program,
    setup: &dyn Fn() -> io::Result<()>,
    forked: &mut dyn FnMut() -> io::Result<()>,
) -> Result<Started, Result<Refused, io::Error>> {
    spawn(program, None, setup, Some(forked))
}

fn spawn(
    program: &Program,
    cgroup: Option<BorrowedFd<'_>>,
    setup: &dyn Fn() -> io::Result<()>,
    forked: Option<&mut dyn FnMut() -> io::Result<()>>,
) -> Result<Started, Result<Refused, io::Error>> {
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from);
    let fail = |e: io::Error| Err(Err(e));
    let (in_r, in_w) = pipe().or_else(fail)?;
    let (out_r, out_w) = pipe().or_else(fail)?;
    let (err_r, err_w) = pipe().or_else(fail)?;
    let (status_r, status_w) = pipe().or_else(fail)?;
    let gate = match forked {
        Some(_) => Some(pipe().or_else(fail)?),
        None => None,
    };
    let child_ends = [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    // dup2 onto 0, 1 and 2 would clobber a pipe that is itself one of them
    // (a launcher started with a standard fd closed).
    if child_ends.iter().any(|&fd| fd <= 2) {
        return Err(Ok(Refused(io::Error::other(
            "a standard fd of the launcher is closed",
        ))));
    }
    let mut args = CloneArgs {
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(cgroup) = cgroup {
        args.flags = CLONE_INTO_CGROUP;
        args.cgroup = cgroup.as_raw_fd() as u64;
    }
    let held = gate.as_ref().map(|(r, w)| (r.as_raw_fd(), w.as_raw_fd()));
    // SAFETY: clone3 reads `args` (of the size given) and, with no stack
    // given, the child runs on a copy of this thread's stack like fork's:
    // it only makes system calls on memory prepared above and never
    // returns from `child`.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &raw mut args,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        child(program, child_ends, status_w.as_raw_fd(), held, setup);
    }
    if pid < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOMEM) => Err(Err(e)),
            _ => Err(Ok(Refused(e))),
        };
    }
    drop((in_r, out_w, err_w, status_w));
    let pid = pid as libc::pid_t;
    let not_let_go = match (forked, gate) {
        (Some(forked), Some(gate)) => let_go(forked, gate),
        _ => None,
    };
    if let Some(errno) = exec_errno(&status_r) {
        // It never ran: reap it here, it is nobody else's.
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        let error = io::Error::from_raw_os_error(errno);
        return Err(Err(not_let_go.unwrap_or(error)));
    }
    if let Some(e) = not_let_go {
        // Never so while the child is held; should it have run anyway,
        // it is ended here, unreaped, so its id is still this one's.
        if pid > 1 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(Err(e));
    }
    Ok(Started {
        pid: pid as u32,
        stdin: in_w,
        stdout: out_r,
        stderr: err_r,
    })
}

/// The child: (`held`: the gate's read and write ends) waits for one byte
/// on the gate, then stdio, process group, signals, `setup`, exec; on an
/// error its errno on `status`, then exit 127.
fn child(
    program: &Program,
    stdio: [RawFd; 3],
    status: RawFd,
    held: Option<(RawFd, RawFd)>,
    setup: &dyn Fn() -> io::Result<()>,
) -> ! {
    // SAFETY: system calls on fds and memory prepared before the clone.
    unsafe {
        let error = (|| {
            if let Some((gate, parents_end)) = held {
                // Its own copy of the write end would keep the gate open.
                libc::close(parents_end);
                let mut byte = 0u8;
                loop {
                    match libc::read(gate, (&raw mut byte).cast(), 1) {
                        1 => break,
                        n if n < 0 && *libc::__errno_location() == libc::EINTR => {}
                        _ => return io::Error::from_raw_os_error(libc::ECANCELED),
                    }
                }
            }
            for (fd, target) in stdio.iter().zip(0..) {
                if libc::dup2(*fd, target) < 0 {
                    return io::Error::last_os_error();
                }
            }
            if libc::setpgid(0, 0) < 0 {
                return io::Error::last_os_error();
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut empty);
            libc::pthread_sigmask(libc::SIG_SETMASK, &raw const empty, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            if let Err(e) = setup() {
                return e;
            }
            libc::execve(
                program.path.as_ptr(),
                program.argv.as_ptr(),
                program.envp.as_ptr(),
            );
            io::Error::last_os_error()
        })();
        let errno = error.raw_os_error().unwrap_or(libc::EINVAL);
        // Never freed here: another thread may have held the allocator's
        // lock when this process was cloned.
        std::mem::forget(error);
        let status = BorrowedFd::borrow_raw(status);
        libc::write(status.as_raw_fd(), errno.to_ne_bytes().as_ptr().cast(), 4);
        libc::_exit(127)
    }
}

/// An fd of the cgroup directory `dir`, for [`spawn_into`].
pub fn open_cgroup(dir: &std::path::Path) -> io::Result<OwnedFd> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a cgroup path"))?;
    // SAFETY: a NUL-terminated path; the fd returned is owned here.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd of this process, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
#[path = "clone_tests.rs"]
mod tests;
