//! The filter the binary writes, loaded by the real kernel in front of the
//! host's Python: denied calls fail with their errno, and so do socket
//! families and protocols the rules leave out; the rest (threads,
//! subprocesses through clone3's ENOSYS fallback, the families kept) keep
//! working.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "a test: a failed unwrap is a failed test, and a scenario reads best whole"
)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The flags lib/seccompRules.nix gives the generator, in short.
const RULES: &[&str] = &[
    "--deny=keyctl",
    "--deny=add_key",
    "--deny=bpf",
    "--deny=ptrace",
    "--deny=mount",
    "--deny=clone3=ENOSYS",
    "--deny-namespaces=clone",
    "--deny-namespaces=unshare",
    "--allow-only=personality=0,8,0xffffffff",
    "--allow-only=socket=1,2,10,16:EAFNOSUPPORT",
    "--allow-only-arg=socket=2:2=0,6,17:EPROTONOSUPPORT",
    "--allow-only-arg=socket=16:2=0:EPROTONOSUPPORT",
];

/// The rules lib/kernelBudgets.nix's `ipcRefused` gives it: the filter
/// jail-budget loads where the kernel refuses an IPC namespace's limits.
const IPC_REFUSED: &[&str] = &[
    "--deny=shmget=ENOSYS",
    "--deny=msgget=ENOSYS",
    "--deny=semget=ENOSYS",
];

fn filter(rules: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_nix-sandbox-seccomp"))
        .args(rules)
        .output()
        .expect("run nix-sandbox-seccomp");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len() % 8, 0, "a whole number of instructions");
    out.stdout
}

/// What Python sees: each probe prints `name errno` (0 when it worked).
const PROBE: &str = r#"
import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, 0 if r != -1 else ctypes.get_errno())
call("keyctl", 250, 0, -3, 0)
call("add_key", 248, 0, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("ptrace", 101, 0, 0, 0, 0)
call("mount", 165, 0, 0, 0, 0, 0)
call("unshare_newuser", 272, 0x10000000)
call("unshare_newns", 272, 0x20000)
call("unshare_files", 272, 0x400)
call("personality_query", 135, 0xffffffff)
call("personality_no_aslr", 135, 0x0040000)
call("clone3", 435, 0, 0)
call("socket_vsock", 41, 40, 1, 0)
call("socket_netlink_uevent", 41, 16, 2, 15)
call("socket_netlink_route", 41, 16, 2, 0)
call("socket_tcp", 41, 2, 1, 6)
call("socket_sctp", 41, 2, 1, 132)
call("socket_unix", 41, 1, 1, 0)
t = threading.Thread(target=lambda: None); t.start(); t.join()
print("thread", 0)
print("subprocess", subprocess.run(["/bin/true"]).returncode)
"#;

/// Python's output under the filter `program`, as (name, errno) pairs
/// from its `name errno` lines.
fn probed(program: Vec<u8>, probe: &str) -> Vec<(String, i32)> {
    let mut child = Command::new("/usr/bin/python3");
    child.args(["-c", probe]);
    // SAFETY: only async-signal-safe calls (prctl) between fork and exec; the
    // program bytes are owned by this closure and outlive the calls.
    unsafe {
        child.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: (program.len() / 8) as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = child.output().expect("run python3 under the filter");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let (name, errno) = l.split_once(' ').expect("name errno");
            (name.to_owned(), errno.parse().expect("a number"))
        })
        .collect()
}

#[test]
#[cfg(target_arch = "x86_64")]
fn the_kernel_applies_the_filter() {
    let got = probed(filter(RULES), PROBE);
    let (eperm, enosys) = (libc::EPERM, libc::ENOSYS);
    let want = [
        ("keyctl", eperm),
        ("add_key", eperm),
        ("bpf", eperm),
        ("ptrace", eperm),
        ("mount", eperm),
        ("unshare_newuser", eperm),
        ("unshare_newns", eperm),
        ("unshare_files", 0),
        ("personality_query", 0),
        ("personality_no_aslr", eperm),
        ("clone3", enosys),
        ("socket_vsock", libc::EAFNOSUPPORT),
        ("socket_netlink_uevent", libc::EPROTONOSUPPORT),
        ("socket_netlink_route", 0),
        ("socket_tcp", 0),
        ("socket_sctp", libc::EPROTONOSUPPORT),
        ("socket_unix", 0),
        ("thread", 0),
        ("subprocess", 0),
    ];
    assert_eq!(got, want.map(|(n, e)| (n.to_owned(), e)));
}

/// System V's three makers, then calls the filter does not name.
const SYSTEM_V: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, 0 if r != -1 else ctypes.get_errno())
call("shmget", 29, 0, 4096, 0o600)
call("msgget", 68, 0, 0o600)
call("semget", 64, 0, 1, 0o600)
print("getppid", 0 if os.getppid() > 0 else 1)
os.pipe()
print("pipe", 0)
"#;

/// Under the filter of `ipcRefused`, System V's three makers fail with
/// ENOSYS, and calls the filter does not name still work.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_system_v_filter_fails_the_three_makers_and_nothing_else() {
    let got = probed(filter(IPC_REFUSED), SYSTEM_V);
    let enosys = libc::ENOSYS;
    let want = [
        ("shmget", enosys),
        ("msgget", enosys),
        ("semget", enosys),
        ("getppid", 0),
        ("pipe", 0),
    ];
    assert_eq!(got, want.map(|(n, e)| (n.to_owned(), e)));
}
