//! What the host gives the jails, found once at start: cgroups (made ready
//! here), whether the launcher runs as root, the users the jails run as
//! (jailuser.rs: never host root; as root a uid of its own per jail),
//! whether the jails can have user namespaces (tried in a child process,
//! as such a user). It decides how each limit holds here:
//!
//! | limit | how |
//! | --- | --- |
//! | memory | cgroup memory limit (per run, tmpfs pages counted): a delegated cgroup v2 (cgroup.rs, delegation.rs), or as root the server's own cgroup; and RLIMIT_DATA per process (with a cgroup too); without one, a run's processes together up to pids x memory_mb |
//! | processes | cgroup pids.max, else RLIMIT_NPROC in the jail's user namespace |
//! | CPU time, file size, open files | RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE |
//! | /tmp, /workspace, the home, /dev/shm | tmpfs size (the rest of the jail read-only) |
//! | time, output | the launcher (deadline, capped streams) |
//!
//! The launcher writes the cgroup limits when it has a cgroup; the wrapper
//! applies every other limit but the deadline and the output cap (policy,
//! from Nix).

use std::sync::Arc;

use super::cgroup::Cgroups;
use super::jailuser::{self, Ids, JailUsers, Lease};
use crate::catalog::limits::Controller;

/// What the host gives the jails.
#[derive(Debug)]
pub struct Host {
    pub cgroups: Option<Cgroups>,
    /// Why there is no cgroup, when there is none.
    pub no_cgroup: Option<String>,
    /// The launcher runs as host root (its jails do not: `jail_users`).
    pub root: bool,
    /// The users the wrappers run as when the launcher runs as host root,
    /// one per jail; `None`: the launcher's own, not host root.
    pub jail_users: Option<JailUsers>,
    /// Why the jails cannot have user namespaces and how to fix it, when
    /// they cannot.
    pub userns_problem: Option<String>,
    /// Whether a jail's IPC namespace can be given its System V limits
    /// here (else `jail-budget` gives the jail no System V IPC).
    pub sysv_ipc: bool,
}

impl Host {
    /// Finds what the host gives. The error is one line: why the launcher,
    /// running as root, cannot run its jails as another user (it then runs
    /// none).
    pub fn detect() -> Result<Self, String> {
        let root = nix::unistd::geteuid().is_root();
        let jail_users = if jailuser::is_host_root() {
            Some(JailUsers::for_root().map_err(|why| {
                format!(
                    "refusing to run as root: each jail must run as a uid of its own, and {why}"
                )
            })?)
        } else {
            None
        };
        let (cgroups, no_cgroup) = match Cgroups::setup() {
            Ok(c) => (Some(c), None),
            Err(reason) => (None, Some(reason)),
        };
        let probe_ids = jail_users.as_ref().map(JailUsers::probe_ids);
        let userns_problem = userns_problem(probe_ids);
        let sysv_ipc = userns_problem.is_some() || sysv_limits_settable(probe_ids);
        Ok(Self {
            cgroups,
            no_cgroup,
            root,
            jail_users,
            userns_problem,
            sysv_ipc,
        })
    }

    /// A host with no cgroup whose jails run as the launcher, not root,
    /// for tests.
    #[cfg(test)]
    pub fn plain() -> Self {
        Self {
            cgroups: None,
            no_cgroup: Some("none (test)".into()),
            root: false,
            jail_users: None,
            userns_problem: None,
            sysv_ipc: true,
        }
    }

    /// The uid and gid one jail runs as, held until the lease is
    /// dropped: `None` when jails run as the launcher. The error is why
    /// none is free.
    pub fn jail_lease(&self) -> Result<Option<Lease>, String> {
        self.jail_users.as_ref().map(JailUsers::lease).transpose()
    }

    /// Whether a run's cgroup holds the limit of `controller` here.
    pub fn by_cgroup(&self, controller: Controller) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.holds(controller))
    }

    /// The self-test's lines about the host (for `--check` and the log);
    /// user namespaces only when they work (when they do not, that is a
    /// configuration problem: preflight.rs).
    pub fn report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.userns_problem.is_none() {
            lines.push("user namespaces: available".to_owned());
        }
        lines.push(match &self.jail_users {
            Some(users) => {
                let (first, last) = users.range();
                format!(
                    "jails' uid: ok: each jail runs as a uid and gid of its own, never root, from \
                     {first}-{last}, a block no user, group, subordinate range, process or IPC \
                     object of the host had, locked for this server; no other host process can \
                     reach into a jail or connect to its egress gate"
                )
            }
            None => format!(
                "jails' uid: the server's own ({}): its jails and every process of that user share \
                 it (only a server started as root gives each jail a uid of its own)",
                nix::unistd::geteuid()
            ),
        });
        lines.push(match (&self.cgroups, &self.no_cgroup) {
            (Some(c), _) => format!("cgroups: {}", c.describe()),
            (None, Some(why)) => format!("cgroups: none usable: {why}"),
            (None, None) => "cgroups: none usable".into(),
        });
        let memory = if self.by_cgroup(Controller::Memory) {
            "memory by cgroup, per run, its tmpfs mounts counted"
        } else {
            "memory PER PROCESS only, by RLIMIT_DATA (each process's private writable \
             memory) and an 8 MiB stack: a run's processes together may use up to pids x \
             memory_mb, and its tmpfs mounts and shared memory besides"
        };
        let pids = if self.by_cgroup(Controller::Pids) {
            "processes by cgroup pids.max"
        } else if proto::kernel::nproc_per_namespace() {
            "processes by RLIMIT_NPROC in the jail's user namespace"
        } else {
            "processes NOT bounded per run: this kernel (before Linux 5.14) counts RLIMIT_NPROC \
             for every process of the jails' uid, so the jails leave it as it is and stop only at \
             the user's own limit (ulimit -u)"
        };
        if !self.sysv_ipc {
            lines.push(
                "System V IPC: none in the jails: this kernel (Linux before 6.1) lets no user \
                 namespace set the limits of its IPC namespace, so shmget, msgget and semget \
                 fail there with ENOSYS; POSIX shared memory and message queues work"
                    .to_owned(),
            );
        }
        lines.push(format!(
            "limits: {memory}; {pids}; CPU time, file size, open files by rlimits \
             (a session's CPU time, all its processes together, by the launcher); \
             /tmp, /workspace, the home and /dev/shm by tmpfs size, the rest read-only; \
             time and output by the launcher"
        ));
        lines
    }
}

/// Removes what [`Host::detect`] made (in the cgroup hierarchies, the
/// jails' runtime directory) when it is dropped, on the way out, once no
/// run is left.
pub struct Teardown(pub Arc<Host>);

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(cgroups) = &self.0.cgroups {
            cgroups.teardown();
        }
        if let Some(users) = &self.0.jail_users {
            users.remove_runtime();
        }
    }
}

/// Why the jails cannot have user namespaces, with the fix, if they
/// cannot: one line. A child process tries what bubblewrap does first
/// (a new user and mount namespace, then a mount in it), as a jail's
/// user (`jail`, a root launcher's) or the launcher's; the sysctls say why
/// it failed, and which one to change. The jails never run as root, so
/// the sysctls for unprivileged users apply.
fn userns_problem(jail: Option<Ids>) -> Option<String> {
    let failed = try_userns(jail).err()?;
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    let (cause, fix) = if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        (
            "user.max_user_namespaces is 0",
            "`sysctl -w user.max_user_namespaces=65536` (and in /etc/sysctl.d/ to keep it)",
        )
    } else if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        (
            "kernel.unprivileged_userns_clone is 0",
            "`sysctl -w kernel.unprivileged_userns_clone=1` (and in /etc/sysctl.d/ to keep it)",
        )
    } else if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
    {
        (
            "kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor, as on Ubuntu 23.10 and later)",
            "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile \
             with `userns,` for this server",
        )
    } else {
        (
            "no sysctl says why (a container or a seccomp policy may forbid them)",
            "allow user namespaces where this server runs (a container needs them allowed, e.g. \
             Docker's --security-opt seccomp=unconfined --security-opt apparmor=unconfined)",
        )
    };
    Some(format!(
        "bubblewrap cannot make a jail without them: {failed}; {cause}. Fix: {fix}"
    ))
}

/// In the child [`try_userns`] forks: the first of bubblewrap's steps that
/// fails (3: becoming `jail`, 1: a new user and mount namespace, 2: a
/// mount in it; 0: none) and its errno. Only async-signal-safe calls.
fn userns_steps(jail: Option<Ids>) -> [i32; 2] {
    use nix::libc;
    let became = jail.map_or(Ok(()), Ids::become_user);
    // SAFETY: unshare and mount with constant, valid arguments.
    let step: i32 = unsafe {
        if became.is_err() {
            3
        } else if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
            1
        } else if libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            2
        } else {
            0
        }
    };
    let errno = if step == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    };
    [step, errno]
}

/// Runs `job` in a forked child and returns the `N` numbers it reports
/// on a pipe: `None` when it ended without them. The launcher must still
/// be single-threaded (the runtime has no worker threads yet), and `job`
/// must make only async-signal-safe calls (no allocation).
fn in_child<const N: usize>(job: impl FnOnce() -> [i32; N]) -> Result<Option<[i32; N]>, String> {
    use nix::libc;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let [read_end, write_end] = fds;
    // SAFETY: the launcher is single-threaded here and `job` calls only
    // async-signal-safe functions (the caller's promise) before the child
    // exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let report = job();
        // SAFETY: writes the bytes of `report`; then the child ends.
        unsafe {
            libc::write(
                write_end,
                report.as_ptr().cast(),
                std::mem::size_of_val(&report),
            );
            libc::_exit(0);
        }
    }
    // SAFETY: closes the parent's copy of the write end, which it owns.
    unsafe { libc::close(write_end) };
    let mut report = [0i32; N];
    let got = if pid > 0 {
        // SAFETY: reads at most the bytes of `report`.
        let n = unsafe {
            libc::read(
                read_end,
                report.as_mut_ptr().cast(),
                std::mem::size_of_val(&report),
            )
        };
        let mut status = 0;
        // SAFETY: reaps the child forked above (pid > 0).
        unsafe { libc::waitpid(pid, &mut status, 0) };
        usize::try_from(n).ok()
    } else {
        None
    };
    // SAFETY: closes the read end, which this function owns.
    unsafe { libc::close(read_end) };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    Ok((got == Some(std::mem::size_of_val(&report))).then_some(report))
}

/// Tries, in a child process, what bubblewrap does first: a new user and
/// mount namespace (`unshare`), then a mount in it, as `jail` when given.
/// The error names the step that failed and its errno.
fn try_userns(jail: Option<Ids>) -> Result<(), String> {
    match in_child(|| userns_steps(jail)).map_err(|e| format!("cannot test them: {e}"))? {
        Some([0, _]) => Ok(()),
        Some([step, errno]) => {
            let what = match step {
                1 => "creating a user namespace",
                2 => "mounting inside a new user namespace",
                _ => "becoming the jails' user",
            };
            Err(format!(
                "{what} failed ({})",
                std::io::Error::from_raw_os_error(errno)
            ))
        }
        None => Err("the user namespace test ended without an answer".into()),
    }
}

/// Whether a jail's `jail-budget` can write the System V limits of its
/// IPC namespace here: tried in a child as `jail-budget` does it, as
/// `jail` when given (a root server's jails), in a user namespace that
/// maps root to that uid, then an IPC namespace of its own. `false` only
/// when the kernel refuses the write (`EACCES`: before Linux 6.1), as
/// `jail-budget` then gives the jail no System V IPC; `true` when it
/// allows it or the test cannot tell (the jail then says so itself).
fn sysv_limits_settable(jail: Option<Ids>) -> bool {
    sysv_answer(jail).unwrap_or(true)
}

/// [`sysv_limits_settable`]'s test: `None` when it cannot tell (no user
/// or IPC namespace to try it in, a write refused for another reason).
fn sysv_answer(jail: Option<Ids>) -> Option<bool> {
    use nix::libc;
    let (uid, gid) = jail.map_or_else(
        || {
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        },
        |ids| (ids.uid.as_raw(), ids.gid.as_raw()),
    );
    // Made before the fork: the child does not allocate.
    let uid_map = format!("0 {uid} 1");
    let gid_map = format!("0 {gid} 1");
    let job = || -> [i32; 1] {
        let write = |path: &std::ffi::CStr, text: &[u8]| {
            // SAFETY: open, write and close on a NUL-terminated path and a
            // buffer of the given length.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                let ok = fd >= 0 && libc::write(fd, text.as_ptr().cast(), text.len()) >= 0;
                if fd >= 0 {
                    libc::close(fd);
                }
                ok
            }
        };
        let became = jail.map_or(Ok(()), Ids::become_user);
        // A process whose uid changed is not dumpable, and its /proc/self
        // files stay root's: it could not write its own maps (a wrapper,
        // exec'd as the jail's uid, is dumpable).
        // SAFETY: prctl and unshare with constant arguments.
        let entered = became.is_ok()
            && unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } == 0
            && unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0;
        let mapped = entered
            && write(c"/proc/self/setgroups", b"deny")
            && write(c"/proc/self/uid_map", uid_map.as_bytes())
            && write(c"/proc/self/gid_map", gid_map.as_bytes());
        // SAFETY: unshare with constant flags; open of a constant path.
        unsafe {
            if !mapped || libc::unshare(libc::CLONE_NEWIPC) != 0 {
                return [-1];
            }
            let fd = libc::open(
                c"/proc/sys/kernel/msgmax".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::close(fd);
                return [0];
            }
            [*libc::__errno_location()]
        }
    };
    match in_child(job) {
        Ok(Some([0])) => Some(true),
        Ok(Some([libc::EACCES])) => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::{Gid, Uid};

    /// The test tries what `jail-budget` does, as a jail's uid (never
    /// root, which may write the limits on any kernel): it finds the
    /// limits settable exactly where the kernel lets a user namespace set
    /// them (Linux 6.1 and later). On an older kernel the VM test's 5.10
    /// boot sees the other answer (`checks/vm/tests/oldkernel.py`).
    #[test]
    fn system_v_limits_settable_where_a_user_namespace_may_set_them() {
        let jail = nix::unistd::geteuid().is_root().then(|| Ids {
            uid: Uid::from_raw(65534),
            gid: Gid::from_raw(65534),
        });
        assert_eq!(
            sysv_answer(jail),
            Some(proto::kernel::running_at_least(6, 1))
        );
    }
}
