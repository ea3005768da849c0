//! No System V IPC at all, for a kernel that will not let a jail's IPC
//! namespace be bounded. Linux lets the user namespace that owns an IPC
//! namespace write that namespace's System V limits only from 6.1 on;
//! before, the files of /proc/sys/kernel stay the initial namespace root's,
//! and a new IPC namespace keeps the kernel's defaults, which bound
//! nothing (32768 segments of any size, 32000 message queues). Where the
//! limits cannot be written, [`forbid`] loads the seccomp filter the
//! wrapper names (`--ipc-refused-filter`: lib/kernelBudgets.nix's
//! `ipcRefused`, compiled by nix-sandbox-seccomp, under which `shmget`,
//! `msgget` and `semget` fail with `ENOSYS`): the jail's IPC namespace
//! starts empty and nothing in it can make a segment, queue or semaphore
//! set, so its budget holds at zero. The jail's own filter, which
//! bubblewrap loads below this one, still applies.

use std::path::Path;

use nix::libc;

/// The instructions of a cBPF program file (`struct sock_filter`, 8 bytes
/// each, this machine's byte order): at least one, at most the kernel's
/// `BPF_MAXINSNS`.
fn instructions(bytes: &[u8]) -> Option<Vec<libc::sock_filter>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(8) || bytes.len() / 8 > 4096 {
        return None;
    }
    let each = |i: &[u8]| libc::sock_filter {
        code: u16::from_ne_bytes([i[0], i[1]]),
        jt: i[2],
        jf: i[3],
        k: u32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
    };
    Some(bytes.chunks_exact(8).map(each).collect())
}

/// Loads the filter in `file` into this process, for everything it execs
/// and forks.
pub fn forbid(file: &Path) -> Result<(), String> {
    let bytes = std::fs::read(file)
        .map_err(|e| format!("cannot read the System V filter {}: {e}", file.display()))?;
    let filter = instructions(&bytes).ok_or_else(|| {
        format!(
            "{} is not a seccomp filter (whole 8-byte instructions, 1 to 4096)",
            file.display()
        )
    })?;
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
        .map_err(|e| format!("cannot load the System V filter {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the filter forbids is nix-sandbox-seccomp's (seccomp/tests/
    /// kernel.rs runs `ipcRefused`'s rules); here, only what is a program.
    #[test]
    fn whole_instructions_only() {
        // BPF_RET | BPF_K, SECCOMP_RET_ALLOW.
        let allow = [
            &0x06u16.to_ne_bytes()[..],
            &[0, 0],
            &0x7fff_0000u32.to_ne_bytes(),
        ]
        .concat();
        let one = instructions(&allow).unwrap();
        assert_eq!((one.len(), one[0].code, one[0].k), (1, 6, 0x7fff_0000));
        assert_eq!(instructions(&allow.repeat(2)).map(|p| p.len()), Some(2));
        for bad in [&[][..], &allow[..7], &[allow.as_slice(), &[0]].concat()] {
            assert!(instructions(bad).is_none(), "{bad:?}");
        }
        assert!(instructions(&allow.repeat(4097)).is_none());
    }
}
