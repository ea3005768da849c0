//! No jail outlives the server. Once, at start, the launcher makes a pid
//! namespace for its jails and forks that namespace's init, a process of a
//! few system calls: it dies with the launcher (PR_SET_PDEATHSIG, plus a
//! pipe that tells it whether the launcher was already gone before that
//! was set), lets the kernel reap what is orphaned in the namespace, and
//! does nothing else.
//!
//! Every wrapper the launcher starts afterwards ([`spawn`]), with its bwrap
//! and jail, is created in that namespace, and the launcher stays its
//! parent (the reapers of wrapper/mod.rs wait for it as before). When the
//! init dies, the kernel SIGKILLs every process of the namespace, jails
//! nested in pid namespaces of their own included, wherever they are, also
//! inside bubblewrap's setup: bubblewrap sets its own parent-death signal
//! only at the end of that setup, so a jail whose bwrap monitor died before
//! then used to be orphaned for good. So:
//!
//! - killed (SIGKILL, a crash), the launcher takes its init with it, and the
//!   init every jail;
//! - stopping (end of input, SIGTERM, SIGINT), the launcher kills the init
//!   itself and waits for it ([`Jails::kill`], [`Jails::reap`]): the kernel
//!   lets an init be reaped only once every process of its namespace is
//!   gone, so no jail is left when the launcher exits.
//!
//! How: a thread whose children are created in a new pid namespace can
//! create no thread any more, and an unprivileged process cannot switch
//! back. So one thread of its own, the spawner, made before the async
//! runtime, unshares the pid namespace (which changes where that thread's
//! children go, and nothing else), forks the init, then forks every wrapper
//! for the rest of the launcher's life; its children get SIGKILL should it
//! ever end. The launcher itself stays in the pid namespace it was started
//! in: the pids it sees and writes (its cgroup, its children's ids) are
//! those of that namespace. An unprivileged launcher first moves, while it
//! has one thread, into a new user namespace that maps its uid and gid to
//! themselves (so files, cgroups and the jails' uid are as before), which
//! is what lets it make a pid namespace; it then drops the capabilities
//! that namespace gave it. As root only the pid namespace is new.
//!
//! That user namespace also holds the jails' share of the user's per-user
//! kernel counters: every jail is nested in it, and the kernel charges a
//! nested namespace's use to each one above it, so its limits
//! (`/proc/sys/user/max_*`, written while the launcher still holds every
//! capability there, which no jail ever does), and the rlimits the
//! launcher lowers for everything it starts, which bound the namespaces
//! its jails' wrappers make, keep all jails together at half of the
//! user's inotify instances and watches, fanotify groups and marks,
//! pending signals, message queue bytes and locked shared memory: the
//! user's other programs keep the rest ([`SHARED_SYSCTLS`]). Each jail's
//! own budget, below that, is its wrapper's (lib/kernelBudgets.nix). A
//! root launcher's jails each have a uid of their own, and so budgets of
//! their own.
//!
//! Where no such namespace can be made (user namespaces disabled, a
//! container that forbids unshare), the server runs as before, with a
//! warning: jails still die with their monitor, except a jail caught in
//! bubblewrap's setup by a killed launcher.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc;
use nix::sched::CloneFlags;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

/// The per-user counters whose limits the jails' user namespace halves.
const SHARED_SYSCTLS: [&str; 4] = [
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
];
/// The rlimits the kernel counts per user namespace and uid, halved for
/// everything the launcher starts.
const SHARED_RLIMITS: [Resource; 3] = [
    Resource::RLIMIT_SIGPENDING,
    Resource::RLIMIT_MSGQUEUE,
    Resource::RLIMIT_MEMLOCK,
];

/// Work for the spawner thread (it reports its own result).
type Job = Box<dyn FnOnce() + Send>;

/// The spawner thread's queue, once the jails have a pid namespace.
static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

/// Starts `command` (a wrapper) in the jails' pid namespace when there is
/// one, else as before, from the calling thread.
pub fn spawn(mut command: Command) -> io::Result<Child> {
    on_spawner(move || command.spawn())?
}

/// Runs `f` on the spawner thread, whose children are created in the
/// jails' pid namespace, when there is one; else on the calling thread.
/// `f` must create its processes itself (fork, clone3), never through
/// another thread.
pub fn on_spawner<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    let Some(spawner) = SPAWNER.get() else {
        return Ok(f());
    };
    let (reply, done) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = reply.send(f());
    });
    spawner
        .send(job)
        .map_err(|_| io::Error::other("the jails' spawner thread is gone"))?;
    done.recv()
        .map_err(|_| io::Error::other("the jails' spawner thread is gone"))
}

/// The parent id a child of the launcher sees while the launcher lives:
/// the launcher's pid, or 0 in the jails' pid namespace, where its parent
/// has no id.
pub fn launcher_as_seen_by_children() -> Pid {
    if SPAWNER.get().is_some() {
        Pid::from_raw(0)
    } else {
        nix::unistd::getpid()
    }
}

/// The pid namespace of the jails, or why there is none.
#[derive(Debug)]
pub enum Jails {
    /// Every wrapper is started in a pid namespace whose init is this; the
    /// jails' share of the user's kernel counters (`None` as root, whose
    /// jails have uids of their own), or why it is not held.
    Contained(Init, Option<Result<(), String>>),
    /// Wrappers are started as before; the reason, with its fix.
    Loose(String),
}

/// The init of the jails' pid namespace, as the launcher sees it.
#[derive(Debug)]
pub struct Init {
    pid: Pid,
    /// Set once the init is reaped: its pid may be reused from then on.
    reaped: bool,
    /// The write end of the pipe whose end of file tells the init that the
    /// launcher is gone.
    _alive: OwnedFd,
}

impl Jails {
    /// Makes the jails' pid namespace, its init and the spawner thread.
    /// `root`: the launcher runs as root, which may make a pid namespace
    /// alone. `userns_problem`: why user namespaces look unusable, if they
    /// do (then an unprivileged launcher does not try). `change_user`: each
    /// wrapper becomes another user between fork and exec (a root
    /// launcher's jails' user, wrapper/jailuser.rs), for which the spawner
    /// keeps CAP_SETUID, CAP_SETGID and CAP_CHOWN (the wrapper loses them
    /// with uid 0). Must run while the process has one thread.
    pub fn contain(root: bool, userns_problem: Option<&str>, change_user: bool) -> Self {
        let userns = !root;
        let mut shared = None;
        if userns {
            if let Some(problem) = userns_problem {
                return Jails::Loose(format!("user namespaces are unusable: {problem}"));
            }
            match enter_user_namespace() {
                Ok(share) => shared = Some(share),
                Err(why) => return Jails::Loose(why),
            }
        }
        // CAP_CHOWN, CAP_SETGID and CAP_SETUID are capabilities 0, 6 and 7.
        let keep = if change_user {
            (1 << 0) | (1 << 6) | (1 << 7)
        } else {
            0
        };
        let started = start_spawner(keep);
        // The main thread's capabilities in the new user namespace (its
        // threads to come inherit the empty sets).
        if userns && let Err(e) = drop_capabilities(0) {
            return fatal(&format!(
                "cannot drop the capabilities of the jails' user namespace: {e}"
            ));
        }
        match started {
            Ok(init) => Jails::Contained(init, shared),
            Err(why) => Jails::Loose(why),
        }
    }

    /// The self-test's line on how long jails live.
    pub fn report(&self) -> String {
        match self {
            Jails::Contained(..) => {
                "jail lifetime: every jail dies with the server (a pid namespace of their own)"
                    .into()
            }
            Jails::Loose(why) => format!(
                "jail lifetime: WARN: a jail caught in bubblewrap's setup can outlive a killed \
                 server: no pid namespace for the jails: {why}"
            ),
        }
    }

    /// The self-test's line on what all jails together may take of the
    /// user's kernel counters; `None` when each jail runs as a uid of its
    /// own (`own_uids`, a root launcher's).
    pub fn budget_report(&self, own_uids: bool) -> Option<String> {
        let line = match self {
            _ if own_uids => return None,
            Jails::Contained(_, None) => return None,
            Jails::Contained(_, Some(Ok(()))) => "jails' kernel budgets: ok: all jails together \
                hold at most half of this user's inotify instances and watches, fanotify groups \
                and marks, pending signals, message queue bytes and locked shared memory (the \
                jails' user namespace); each jail at most its own budget (its wrapper's)"
                .to_owned(),
            Jails::Contained(_, Some(Err(why))) => format!(
                "jails' kernel budgets: WARN: all jails together may take this user's whole \
                 budgets: {why}; each jail still at most its own (its wrapper's)"
            ),
            Jails::Loose(_) => "jails' kernel budgets: WARN: no user namespace for all jails: \
                together they may take this user's whole budgets; each jail still at most its \
                own (its wrapper's)"
                .to_owned(),
        };
        Some(line)
    }

    /// The init's pid (in the launcher's pid namespace), when there is one.
    pub fn init_pid(&self) -> Option<i32> {
        match self {
            Jails::Contained(init, _) => Some(init.pid.as_raw()),
            Jails::Loose(_) => None,
        }
    }

    /// SIGKILL to the init: the kernel kills every process of the
    /// namespace. Then the wrappers' reapers reap the wrappers, and
    /// [`Jails::reap`] the init.
    pub fn kill(&self) {
        if let Jails::Contained(init, _) = self {
            init.kill();
        }
    }

    /// Waits up to `grace` for the init (killed by [`Jails::kill`]) to end,
    /// and reaps it: from then on no process of the namespace is left.
    /// False when it did not end within `grace` (a wrapper not reaped yet,
    /// a process stuck in the kernel); the kernel still ends them.
    pub fn reap(&mut self, grace: Duration) -> bool {
        match self {
            Jails::Contained(init, _) => init.reap(grace),
            Jails::Loose(_) => true,
        }
    }
}

impl Init {
    fn kill(&self) {
        let pid = self.pid.as_raw();
        if !self.reaped && pid > 1 {
            match nix::sys::signal::kill(self.pid, Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => tracing::warn!(pid, error = %e, "cannot kill the jails' init"),
            }
        }
    }

    fn reap(&mut self, grace: Duration) -> bool {
        let start = Instant::now();
        while !self.reaped {
            match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {
                    if start.elapsed() >= grace {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(_) | Err(_) => self.reaped = true,
            }
        }
        true
    }
}

impl Drop for Init {
    /// A launcher that returns early still takes its jails down.
    fn drop(&mut self) {
        self.kill();
    }
}

/// One line naming what cannot be done, then exit 1: for what cannot be
/// undone (a user namespace entered, half made).
fn fatal<T>(what: &str) -> T {
    eprintln!("nix-sandbox-mcp: {what}");
    std::process::exit(1);
}

/// Unprivileged: into a new user namespace that maps this process' uid and
/// gid to themselves, whose share of the user's kernel counters is half
/// of the user's (the result, or why not). An error leaves the process
/// where it was; a map that cannot be written after the unshare is fatal
/// (in a user namespace without maps the process could create no file).
fn enter_user_namespace() -> Result<Result<(), String>, String> {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // The user's limits, as the namespace the launcher is in has them.
    let limits: Vec<(&str, Option<u64>)> = SHARED_SYSCTLS
        .iter()
        .map(|name| (*name, read_sysctl(name)))
        .collect();
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        format!(
            "unshare(CLONE_NEWUSER): {e}; allow unprivileged user namespaces \
             (sysctl user.max_user_namespaces above 0, kernel.unprivileged_userns_clone=1 \
             where it exists)"
        )
    })?;
    let maps = [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (file, line) in maps {
        if let Err(e) = std::fs::write(file, &line) {
            return fatal(&format!(
                "cannot write {line:?} to {file} for the jails' user namespace: {e}; a security \
                 module may restrict user namespaces (AppArmor: \
                 kernel.apparmor_restrict_unprivileged_userns)"
            ));
        }
    }
    Ok(share(&limits))
}

/// `/proc/sys/user/NAME` of the calling process' user namespace.
fn read_sysctl(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/user/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Halves, in the user namespace just entered, the limits the user had
/// (`limits`), and the launcher's own ucount-backed rlimits, which every
/// process it starts inherits.
fn share(limits: &[(&str, Option<u64>)]) -> Result<(), String> {
    for (name, limit) in limits {
        let limit = limit.ok_or_else(|| format!("/proc/sys/user/{name} cannot be read"))?;
        let half = limit / 2;
        std::fs::write(format!("/proc/sys/user/{name}"), half.to_string())
            .map_err(|e| format!("cannot write /proc/sys/user/{name}: {e}"))?;
    }
    for resource in SHARED_RLIMITS {
        let (soft, hard) =
            getrlimit(resource).map_err(|e| format!("cannot read {resource:?}: {e}"))?;
        // Unlimited stays unlimited: a user with no limit has none to keep.
        if hard == nix::sys::resource::RLIM_INFINITY {
            continue;
        }
        let half = hard / 2;
        setrlimit(resource, soft.min(half), half)
            .map_err(|e| format!("cannot lower {resource:?}: {e}"))?;
    }
    Ok(())
}

/// Starts the spawner thread: it moves its own children into a new pid
/// namespace and itself into a mount namespace of its own, forks that pid
/// namespace's init, drops its capabilities, and from then on starts the
/// wrappers sent by [`spawn`]. The init, or why there is none (then the
/// thread is gone and no wrapper is started there).
fn start_spawner(keep: u32) -> Result<Init, String> {
    let (ready, is_ready) = mpsc::sync_channel(1);
    let (queue, jobs) = mpsc::channel::<Job>();
    let thread = std::thread::Builder::new()
        .name("jails-spawner".into())
        .spawn(move || {
            let init = enter_namespaces().and_then(|()| start_init());
            let init = init.and_then(|init| match drop_capabilities(keep) {
                Ok(()) => Ok(init),
                Err(e) => Err(format!("cannot drop capabilities: {e}")),
            });
            let ok = init.is_ok();
            if ready.send(init).is_err() || !ok {
                return;
            }
            // Lives as long as the launcher: its children (the init, every
            // wrapper) get SIGKILL when it ends.
            for job in jobs {
                job();
            }
        })
        .map_err(|e| format!("cannot start the spawner thread: {e}"))?;
    let init = is_ready
        .recv()
        .map_err(|_| "the spawner thread ended at start".to_owned())??;
    if SPAWNER.set(queue).is_err() {
        return Err("the jails' namespace was made twice".into());
    }
    drop(thread);
    Ok(init)
}

/// The calling thread's children go into a new pid namespace, and the
/// thread into a new mount namespace, where nothing it mounts reaches the
/// host: there the init mounts the new namespace's /proc, which bubblewrap
/// reads its child's namespaces from (by the pid it sees).
fn enter_namespaces() -> Result<(), String> {
    nix::sched::unshare(CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS).map_err(|e| {
        format!("unshare(CLONE_NEWPID|CLONE_NEWNS): {e}; the container may forbid it")
    })?;
    let flags = libc::MS_REC | libc::MS_SLAVE;
    // SAFETY: a C string and null pointers, as mount(2) takes them.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    Errno::result(r)
        .map(drop)
        .map_err(|e| format!("cannot make / a slave mount: {e}"))
}

/// Empties the calling thread's effective, permitted and inheritable
/// capability sets, but for the capabilities of `keep` (bits of the first
/// 32), which stay effective and permitted.
fn drop_capabilities(keep: u32) -> Result<(), Errno> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let empty = Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let kept = Data {
        effective: keep,
        permitted: keep,
        inheritable: 0,
    };
    let data = [kept, empty];
    // SAFETY: capset reads a version 3 header and two data structs, which
    // both point to and outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    Errno::result(r).map(drop)
}

/// Forks the init of the pid namespace this thread unshared (the first
/// child made after the unshare is its pid 1) and waits until it mounted
/// the namespace's /proc.
fn start_init() -> Result<Init, String> {
    let forked = |e: Errno| format!("cannot fork the jails' init: {e}");
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(forked)?;
    let (status_read, status_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(forked)?;
    // SAFETY: the child runs only async-signal-safe calls and never
    // returns, so the other threads' state it copied is never touched.
    let pid = match unsafe { nix::unistd::fork() }.map_err(forked)? {
        ForkResult::Child => init(
            read.as_raw_fd(),
            write.as_raw_fd(),
            status_write.as_raw_fd(),
        ),
        ForkResult::Parent { child } => child,
    };
    let mut init = Init {
        pid,
        reaped: false,
        _alive: write,
    };
    drop((read, status_write));
    let mut errno = [0u8; 4];
    let mut status = std::fs::File::from(status_read);
    let failed = match std::io::Read::read_exact(&mut status, &mut errno) {
        Ok(()) if errno == [0; 4] => return Ok(init),
        Ok(()) => format!(
            "the jails' init cannot mount their /proc: {}",
            Errno::from_raw(i32::from_ne_bytes(errno))
        ),
        Err(e) => format!("the jails' init ended at start: {e}"),
    };
    init.kill();
    init.reap(Duration::from_secs(1));
    Err(failed)
}

/// The init: gets SIGKILL when the spawner thread (so the launcher) ends,
/// or exits at once if the launcher was already gone (the `alive` pipe's
/// write end, the launcher's, is closed); mounts the namespace's /proc and
/// says how that went on `status` (an errno, 0 for success); then lets the
/// kernel reap the namespace's orphans (SIGCHLD ignored) and holds no other
/// file. Its death ends the namespace.
fn init(alive: RawFd, launcher_end: RawFd, status: RawFd) -> ! {
    // SAFETY: async-signal-safe calls only, on this process' own state.
    unsafe {
        libc::close(launcher_end);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        libc::prctl(libc::PR_SET_NAME, c"jails-init".as_ptr());
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let mounted = libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            flags,
            std::ptr::null(),
        );
        let errno = if mounted == 0 {
            0
        } else {
            *libc::__errno_location()
        };
        let _ = drop_capabilities(0);
        libc::write(status, errno.to_ne_bytes().as_ptr().cast(), 4);
        // stdio included: the init must not hold the MCP channel.
        let alive_fd = alive as libc::c_uint;
        if alive_fd > 0 {
            libc::syscall(libc::SYS_close_range, 0, alive_fd - 1, 0);
        }
        libc::syscall(libc::SYS_close_range, alive_fd + 1, libc::c_uint::MAX, 0);
        let mut byte = 0u8;
        loop {
            let n = libc::read(alive, (&raw mut byte).cast(), 1);
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        libc::_exit(0)
    }
}
