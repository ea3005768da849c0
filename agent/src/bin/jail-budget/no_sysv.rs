//! No System V IPC at all, for a kernel that will not let a jail's IPC
//! namespace be bounded. Linux lets the user namespace that owns an IPC
//! namespace write that namespace's System V limits only from 6.1 on;
//! before, the files of /proc/sys/kernel stay the initial namespace root's,
//! and a new IPC namespace keeps the kernel's defaults, which bound
//! nothing (32768 segments of any size, 32000 message queues). Where the
//! limits cannot be written, [`forbid`] loads a seccomp filter that makes
//! `shmget`, `msgget` and `semget` fail with `ENOSYS`, as on a kernel built
//! without System V IPC: the jail's IPC namespace starts empty and nothing
//! in it can make a segment, queue or semaphore set, so its budget holds at
//! zero. Every other call passes to the jail's own filter, which bubblewrap
//! loads below this one (a filter of another architecture's calls is its
//! concern: it kills them).

use nix::libc;

/// The audit architecture of this build's system calls.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The filter: native `shmget`, `msgget` and `semget` fail with `ENOSYS`;
/// everything else is allowed (here).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn program() -> [libc::sock_filter; 8] {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let equal = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let ret = libc::BPF_RET | libc::BPF_K;
    let call = |nr: libc::c_long| nr as u32;
    [
        // seccomp_data.arch, then .nr.
        op(load, 0, 0, 4),
        op(equal, 0, 4, AUDIT_ARCH),
        op(load, 0, 0, 0),
        op(equal, 3, 0, call(libc::SYS_shmget)),
        op(equal, 2, 0, call(libc::SYS_msgget)),
        op(equal, 1, 0, call(libc::SYS_semget)),
        op(ret, 0, 0, libc::SECCOMP_RET_ALLOW),
        op(ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]
}

/// Loads the filter into this process, for everything it execs and forks.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn forbid() -> Result<(), String> {
    let filter = program();
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes integers only; with
    // PR_SET_SECCOMP it reads `prog` and the filter it points to, both
    // alive for the call (the kernel copies them).
    let done = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const prog,
            )
        }
    };
    nix::errno::Errno::result(done)
        .map(drop)
        .map_err(|e| format!("cannot load the filter that forbids System V IPC: {e}"))
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn forbid() -> Result<(), String> {
    Err("no filter that forbids System V IPC is written for this architecture".into())
}

#[cfg(test)]
mod tests {
    /// In a child loaded with the filter: System V's three makers fail
    /// with ENOSYS, and calls the filter does not name still work.
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn the_filter_fails_the_three_makers_and_nothing_else() {
        use nix::libc;
        use nix::sys::wait::{WaitStatus, waitpid};
        use nix::unistd::ForkResult;
        // SAFETY: the child makes system calls only, then _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            ForkResult::Child => {
                let code = (|| {
                    if super::forbid().is_err() {
                        return 10;
                    }
                    let errno = || nix::errno::Errno::last_raw();
                    // SAFETY: plain system calls with integer arguments.
                    unsafe {
                        if libc::shmget(libc::IPC_PRIVATE, 4096, 0o600) != -1
                            || errno() != libc::ENOSYS
                        {
                            return 11;
                        }
                        if libc::msgget(libc::IPC_PRIVATE, 0o600) != -1 || errno() != libc::ENOSYS {
                            return 12;
                        }
                        if libc::syscall(libc::SYS_semget, libc::IPC_PRIVATE, 1, 0o600) != -1
                            || errno() != libc::ENOSYS
                        {
                            return 13;
                        }
                        if libc::getppid() <= 0 || libc::pipe([0; 2].as_mut_ptr()) != 0 {
                            return 14;
                        }
                        0
                    }
                })();
                // SAFETY: ends the forked child without running the
                // parent's destructors or test harness.
                unsafe { libc::_exit(code) }
            }
            ForkResult::Parent { child } => {
                assert_eq!(waitpid(child, None).unwrap(), WaitStatus::Exited(child, 0));
            }
        }
    }
}
