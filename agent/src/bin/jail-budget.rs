//! `jail-budget`: the step of a jail's wrapper just before bubblewrap that
//! bounds what the jail can take of its host user's per-user kernel
//! counters. The kernel counts inotify instances and watches, fanotify
//! groups and marks, and namespaces per user namespace and uid, and charges
//! a namespace's use to every namespace above it, each level checked
//! against its own limit (`/proc/sys/user/max_*`). So this program makes a
//! user namespace that maps the caller's uid and gid to themselves, writes
//! that namespace's limits (it holds every capability there until it
//! execs), lowers the ucount-backed rlimits (pending signals, message
//! queue bytes, locked shared memory, which bound a namespace's processes
//! together, and processes), and execs PROGRAM (bubblewrap) inside it.
//! The jail, nested below, cannot write these limits: it holds no
//! capability in this namespace, and reads and writes its own namespace's
//! sysctls only.
//!
//! `--rlimit nproc=N` bounds the jail's processes and threads: set in this
//! namespace, the kernel counts the processes of this namespace's uid
//! (bubblewrap's and everything below it), not the caller's on the host,
//! and the jail, inheriting N, cannot raise it. Bubblewrap's user
//! namespace, made below with N as its ceiling, is checked against it
//! again. Before Linux 5.14 the kernel counts `RLIMIT_NPROC` for every
//! process of the uid on the host, whatever its namespace, so there it is
//! left as it is (a run's cgroup bounds the processes, or `--check` says
//! nothing does).
//!
//! With `--clear-env`, PROGRAM starts with an empty environment: bubblewrap
//! stays a jail's pid 1 or its parent, and a process in the jail could read
//! its environment (`/proc/PID/environ`); bubblewrap's `--clearenv` clears
//! only the jail's. One exec less than `env -i` before it.
//!
//! With `--ipc`, it also makes the jail's IPC namespace (bubblewrap then
//! shares it instead of making one) and writes that namespace's System V
//! limits: a new IPC namespace starts with the kernel's defaults, which
//! allow a jail to hold gigabytes of shared memory segments and of
//! message queue and semaphore kernel memory, none of it counted by an
//! rlimit, and the segments outlive the processes that made them. Before
//! Linux 6.1 the kernel lets no user namespace write those limits: there,
//! with `--ipc-refused-filter FILE` (a cBPF program, lib/kernelBudgets.nix's
//! `ipcRefused` under which `shmget`, `msgget` and `semget` fail with
//! `ENOSYS`), it loads FILE as a seccomp filter, so the jail has no System
//! V IPC at all (jail-budget/no_sysv.rs); without it the jail does not
//! start.
//!
//!   jail-budget [--sysctl NAME=VALUE]... [--rlimit NAME=VALUE]... [--ipc NAME=VALUE]...
//!               [--ipc-refused-filter FILE] [--clear-env] [--layer DIR (--layer-size BYTES | --layer-on-disk) [--project-lower PATH
//!               [--project-lower-fd FD]] [--restore]] [--project-read-only PATH]
//!               [--net [--publish-fd FD]] [--store-view DIR --store-paths LIST]
//!               -- PROGRAM [ARGS...]
//!
//! NAME of `--sysctl` is a file of /proc/sys/user (`max_inotify_instances`);
//! NAME of `--rlimit` is `sigpending`, `msgqueue`, `memlock` or `nproc`; NAME of
//! `--ipc` is a System V limit of /proc/sys/kernel (`shmmax`, `shmmni`,
//! `msgmax`, `msgmnb`, `msgmni`), `shm_total_bytes` (written to `shmall`
//! in pages of this machine), or one of the four fields of its `sem`
//! (`semmsl`, `semmns`, `semopm`, `semmni`: all four or none). The values
//! are the jail's policy (lib/kernelBudgets.nix). Every limit is read back:
//! any that does not hold stops the wrapper with status 2 and one line on
//! stderr, so no jail runs with a budget weaker than it states.
//!
//! With `--layer DIR --layer-size BYTES` (a session jail, docs/sessions.md)
//! it also makes a mount namespace owned by the user namespace it execs in
//! (the innermost, with `--ipc`) and mounts a tmpfs of BYTES over DIR (the
//! server's empty directory for this session jail, outside the jail's
//! view) there, holding `ws` (which the wrapper binds at /workspace) and
//! `ckpt` (the session's checkpoints, which the server writes and the jail
//! never sees): everything the session keeps is on it, so BYTES bounds it
//! all. With `--project-lower PATH` too (a server with a writable project,
//! docs/workbench.md) it makes an overlay at DIR/merged: PATH (the host's
//! project) as the read-only lower layer, DIR/upper and DIR/work as the
//! upper one; the wrapper binds DIR/merged at the project mount. With
//! `--project-lower-fd FD` too (a root server's jail, whose uid is not the
//! project's owner: docs/workbench.md), the lower layer is instead the
//! detached mount FD names, which the server made: PATH read-only and
//! idmapped, its owner's files shown as this jail's uid's, so the overlay
//! can copy them up; it is moved to DIR/lower, overlaid, then unmounted
//! (the overlay keeps its own private copy), and FD is closed before
//! bubblewrap starts: the jail never reaches the idmapped mount. With
//! `--restore` (a session started from a checkpoint) it makes DIR/ready
//! once the tmpfs and its directories are made, then waits for one byte on
//! its stdin (the server's, which copies the checkpoint into `ws` and
//! `upper` meanwhile) before mounting the overlay and starting bubblewrap:
//! `G` goes on, anything else stops it. When the server mounted
//! checkpoints at DIR/base/0, DIR/base/1... meanwhile (a session started
//! over a checkpoint at the cost of a mount, launcher/src/project/share.rs),
//! DIR/ws becomes an overlay of their `ws`, newest first, under DIR/wsup,
//! and their `upper` go above the project in its overlay. The mounts must be made by this
//! process, which holds every capability in the namespace until it execs;
//! bubblewrap below holds none here.
//!
//! With `--project-read-only PATH` (a project shown read-only: the
//! default, and a writable project's calls without a session) it makes a
//! mount namespace of its own (or uses the layer's) and shows PATH there
//! through a read-only overlay mounted over PATH itself: PATH as the upper
//! of two lower layers, an empty tmpfs below it (an overlay without an
//! upper layer needs two). The wrapper binds PATH at the project mount as
//! before, and the jail sees the overlay. Its inodes are the overlay's, not
//! the host's: a Unix socket a host program listens on in the project
//! refuses a connect (`ECONNREFUSED`), and a fifo there is a pipe of the
//! overlay's inode, never the host program's, which a read-only bind mount
//! does not stop. Each jail mounts its own, so an edit on the host is seen
//! by the next run.
//!
//! With `--layer-on-disk` instead of `--layer-size` (a person's agent
//! jail, docs/agents.md) no tmpfs is mounted: DIR is a directory of the
//! person's on disk (mode 0700, kept between runs) and its `ws`, `upper`,
//! `work` and `merged` are used as they are, made when missing, so the
//! project's changes outlive the jail until the person applies or
//! discards them.
//!
//! With `--net` (an environment that publishes ports, docs/sessions.md) it
//! also makes the jail's network namespace, owned by the budget namespace,
//! and brings its loopback up, as bubblewrap does for one of its own
//! (bubblewrap then shares it). With `--publish-fd FD` as well (a session
//! jail: FD is one end of a Unix socket pair whose other end the server
//! holds), it forks a forwarder that stays in that network namespace but
//! outside bubblewrap's pid and mount namespaces, so the jail can neither
//! see nor signal it, and closes FD in the process that becomes bubblewrap,
//! so the jail never holds it. The forwarder reads a port (two bytes, big
//! endian) at a time on FD, connects to 127.0.0.1:PORT in the jail's
//! namespace and answers one byte: 0 with the connected socket attached
//! (SCM_RIGHTS), else the connect's errno. It reads nothing the jail
//! sends, and ends when the server closes its end or bubblewrap ends.
//!
//! With `--store-view DIR --store-paths LIST` (every Nix-built jail,
//! lib/jail/storeView.nix) it mounts, in a mount namespace of its own (or
//! the layer's), a read-only tmpfs over DIR showing each store path LIST
//! names at its name, and bubblewrap binds DIR at /nix/store: the jail sees
//! its runtime closure only, as before, for one bind of bubblewrap's where
//! there was one for each path (see jail-budget/store_view.rs).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::ExitCode;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::resource::Resource;
use nix::sys::stat::Mode;

#[path = "common/command.rs"]
mod command;
#[path = "jail-budget/forward.rs"]
mod forward;
#[path = "jail-budget/no_sysv.rs"]
mod no_sysv;
#[path = "jail-budget/store_view.rs"]
mod store_view;

const USAGE: &str = "usage: jail-budget [--sysctl NAME=VALUE]... [--rlimit NAME=VALUE]... \
                     [--ipc NAME=VALUE]... [--ipc-refused-filter FILE] [--clear-env] \
                     [--layer DIR (--layer-size BYTES | --layer-on-disk) [--project-lower PATH \
                     [--project-lower-fd FD]] [--restore]] [--project-read-only PATH] \
                     [--net [--publish-fd FD]] [--store-view DIR --store-paths LIST] \
                     -- PROGRAM [ARGS...]";

/// The System V limits of an IPC namespace that `--ipc` may set, each a
/// file of /proc/sys/kernel.
const IPC_FILES: [&str; 5] = ["shmmax", "shmmni", "msgmax", "msgmnb", "msgmni"];

/// The fields of /proc/sys/kernel/sem, in its order.
const SEM_FIELDS: [&str; 4] = ["semmsl", "semmns", "semopm", "semmni"];

/// What to set, and what to run afterwards.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    sysctls: Vec<(String, u64)>,
    rlimits: Vec<(Resource, u64)>,
    /// Files of /proc/sys/kernel and what to write there; `sem`'s four
    /// fields are one entry.
    ipc: Vec<(String, String)>,
    /// The session jail's layer, when it is one.
    layer: Option<Layer>,
    /// The project to show through a read-only overlay over itself.
    read_only: Option<OsString>,
    /// Whether to make the jail's network namespace.
    net: bool,
    /// The server's end of the forwarder's socket pair, with `net`.
    publish_fd: Option<i32>,
    /// Whether PROGRAM starts with an empty environment.
    clear_env: bool,
    /// The seccomp filter to load where the kernel refuses the System V
    /// limits of `ipc`.
    ipc_refused_filter: Option<OsString>,
    /// The directory to mount the jail's view of the store over, and the
    /// file listing the store paths it shows.
    store_view: Option<(OsString, OsString)>,
    program: OsString,
    args: Vec<OsString>,
}

/// A session jail's layer: the server's directory for it, the bytes it may
/// hold (`None`: on disk as it is, no tmpfs), the project under its
/// copy-on-write layer when the project is writable, and whether the
/// server fills it before the jail starts.
#[derive(Debug, PartialEq, Eq)]
struct Layer {
    dir: OsString,
    size: Option<u64>,
    lower: Option<OsString>,
    /// The server's idmapped, read-only mount of `lower`, to use instead
    /// of it (a root server's jail).
    idmapped: Option<i32>,
    restore: bool,
}

/// `NAME=VALUE`, VALUE a decimal number.
fn pair(text: &str) -> Result<(&str, u64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))?;
    let value = value
        .parse()
        .map_err(|_| format!("`{text}`: {value} is not a number"))?;
    Ok((name, value))
}

/// The rlimits whose counts the kernel keeps per user namespace and uid.
fn resource(name: &str) -> Result<Resource, String> {
    match name {
        "sigpending" => Ok(Resource::RLIMIT_SIGPENDING),
        "msgqueue" => Ok(Resource::RLIMIT_MSGQUEUE),
        "memlock" => Ok(Resource::RLIMIT_MEMLOCK),
        "nproc" => Ok(Resource::RLIMIT_NPROC),
        _ => Err(format!(
            "unknown rlimit `{name}` (sigpending, msgqueue, memlock or nproc)"
        )),
    }
}

fn parse(argv: Vec<OsString>) -> Result<Args, String> {
    use lexopt::prelude::*;
    let (flags, program, args) = command::split(&argv)?;
    let mut parsed = Args {
        sysctls: Vec::new(),
        rlimits: Vec::new(),
        ipc: Vec::new(),
        layer: None,
        read_only: None,
        net: false,
        publish_fd: None,
        clear_env: false,
        ipc_refused_filter: None,
        store_view: None,
        program,
        args,
    };
    let mut sem = [None; 4];
    let mut parser = lexopt::Parser::from_args(flags.iter().cloned());
    let text = |v: OsString| v.into_string().map_err(|v| format!("not UTF-8: {v:?}"));
    let (mut layer, mut lower, mut size, mut restore, mut on_disk) =
        (None, None, None, false, false);
    let mut idmapped = None;
    let (mut view, mut view_paths) = (None, None);
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Long("sysctl") => {
                let value = text(parser.value().map_err(|e| e.to_string())?)?;
                let (name, value) = pair(&value)?;
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    return Err(format!("`{name}` is not a file of /proc/sys/user"));
                }
                parsed.sysctls.push((name.to_owned(), value));
            }
            Long("rlimit") => {
                let value = text(parser.value().map_err(|e| e.to_string())?)?;
                let (name, value) = pair(&value)?;
                parsed.rlimits.push((resource(name)?, value));
            }
            Long("layer") => layer = Some(parser.value().map_err(|e| e.to_string())?),
            Long("project-lower") => lower = Some(parser.value().map_err(|e| e.to_string())?),
            Long("project-lower-fd") => idmapped = Some(descriptor(parser.value())?),
            Long("restore") => restore = true,
            Long("project-read-only") => {
                parsed.read_only = Some(parser.value().map_err(|e| e.to_string())?);
            }
            Long("layer-on-disk") => on_disk = true,
            Long("layer-size") => {
                let value = text(parser.value().map_err(|e| e.to_string())?)?;
                let bytes = value.parse().ok().filter(|&n: &u64| n > 0);
                size = Some(bytes.ok_or_else(|| format!("--layer-size {value}: not a size"))?);
            }
            Long("net") => parsed.net = true,
            Long("store-view") => view = Some(parser.value().map_err(|e| e.to_string())?),
            Long("store-paths") => view_paths = Some(parser.value().map_err(|e| e.to_string())?),
            Long("clear-env") => parsed.clear_env = true,
            Long("ipc-refused-filter") => {
                parsed.ipc_refused_filter = Some(parser.value().map_err(|e| e.to_string())?);
            }
            Long("publish-fd") => parsed.publish_fd = Some(descriptor(parser.value())?),
            Long("ipc") => {
                let value = text(parser.value().map_err(|e| e.to_string())?)?;
                let (name, value) = pair(&value)?;
                sem_or_ipc(&mut parsed.ipc, &mut sem, name, value)?;
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    parsed.ipc.extend(sem_line(sem)?);
    parsed.store_view = match (view, view_paths) {
        (Some(dir), Some(list)) => Some((dir, list)),
        (None, None) => None,
        _ => return Err("--store-view and --store-paths go together".into()),
    };
    parsed.layer = layer_of(layer, size, on_disk, lower, restore)?;
    parsed.layer = with_idmapped(parsed.layer, idmapped)?;
    consistent(parsed)
}

/// The line of /proc/sys/kernel/sem that `--ipc`'s four fields make, if
/// given (all four or none).
fn sem_line(sem: [Option<u64>; 4]) -> Result<Option<(String, String)>, String> {
    match sem {
        [None, None, None, None] => Ok(None),
        [Some(msl), Some(mns), Some(opm), Some(mni)] => Ok(Some((
            "sem".to_owned(),
            format!("{msl}\t{mns}\t{opm}\t{mni}"),
        ))),
        _ => Err(format!(
            "--ipc needs all four of {} or none",
            SEM_FIELDS.join(", ")
        )),
    }
}

/// `parsed`, unless it holds flags that do not go together: a forwarder's
/// descriptor without a network namespace, or a read-only project beside
/// a copy-on-write one.
fn consistent(parsed: Args) -> Result<Args, String> {
    if parsed.publish_fd.is_some() && !parsed.net {
        return Err("--publish-fd needs --net".into());
    }
    match (&parsed.read_only, &parsed.layer) {
        (Some(_), Some(Layer { lower: Some(_), .. })) => {
            Err("--project-read-only goes without --project-lower".into())
        }
        _ => Ok(parsed),
    }
}

/// The layer `--layer`, `--layer-size` (or `--layer-on-disk`),
/// `--project-lower` and `--restore` name: the first with one of the
/// second, the others only with them.
fn layer_of(
    dir: Option<OsString>,
    size: Option<u64>,
    on_disk: bool,
    lower: Option<OsString>,
    restore: bool,
) -> Result<Option<Layer>, String> {
    match (dir, size, on_disk) {
        (Some(dir), Some(size), false) => Ok(Some(Layer {
            dir,
            size: Some(size),
            lower,
            idmapped: None,
            restore,
        })),
        (Some(dir), None, true) => Ok(Some(Layer {
            dir,
            size: None,
            lower,
            idmapped: None,
            restore,
        })),
        (None, None, false) if lower.is_none() && !restore => Ok(None),
        _ => Err(
            "--layer goes with one of --layer-size and --layer-on-disk, and \
                  --project-lower and --restore need them"
                .into(),
        ),
    }
}

/// `layer` with the idmapped lower `--project-lower-fd` names, which
/// needs `--project-lower`.
fn with_idmapped(layer: Option<Layer>, fd: Option<i32>) -> Result<Option<Layer>, String> {
    match (layer, fd) {
        (layer, None) => Ok(layer),
        (Some(layer), Some(fd)) if layer.lower.is_some() => Ok(Some(Layer {
            idmapped: Some(fd),
            ..layer
        })),
        _ => Err("--project-lower-fd needs --project-lower".into()),
    }
}

/// The descriptor `--publish-fd` or `--project-lower-fd` names: a number above 2 (0 to 2 are the
/// wrapper's stdio).
fn descriptor(value: Result<OsString, lexopt::Error>) -> Result<i32, String> {
    let value = value.map_err(|e| e.to_string())?;
    let value = value.to_string_lossy();
    let fd = value.parse().ok().filter(|&fd: &i32| fd > 2);
    fd.ok_or_else(|| format!("--publish-fd {value}: not a descriptor above 2"))
}

/// Files one `--ipc NAME=VALUE`: a file of [`IPC_FILES`], or a field of
/// `sem`, kept until all four are known.
fn sem_or_ipc(
    ipc: &mut Vec<(String, String)>,
    sem: &mut [Option<u64>; 4],
    name: &str,
    value: u64,
) -> Result<(), String> {
    if let Some(field) = SEM_FIELDS.iter().position(|f| *f == name) {
        sem[field] = Some(value);
    } else if name == "shm_total_bytes" {
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|p| u64::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or("cannot read this machine's page size")?;
        ipc.push(("shmall".to_owned(), (value / page).to_string()));
    } else if IPC_FILES.contains(&name) {
        ipc.push((name.to_owned(), value.to_string()));
    } else {
        return Err(format!(
            "unknown IPC limit `{name}` ({}, shm_total_bytes or {})",
            IPC_FILES.join(", "),
            SEM_FIELDS.join(", ")
        ));
    }
    Ok(())
}

/// A user namespace of this process' own that maps this process's uid
/// and gid to `root` (0) or, without, to the caller's uid and gid
/// (`outside`), as they were before any namespace.
fn enter_namespace(root: bool, outside: (u32, u32)) -> Result<(), String> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        format!(
            "cannot make the jail's budget namespace: unshare(CLONE_NEWUSER): {e} (user \
             namespaces nested in user namespaces must be allowed)"
        )
    })?;
    let inside = |own: u32| if root { 0 } else { own };
    for (file, line) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        (
            "/proc/self/uid_map",
            format!("{} {uid} 1", inside(outside.0)),
        ),
        (
            "/proc/self/gid_map",
            format!("{} {gid} 1", inside(outside.1)),
        ),
    ] {
        std::fs::write(file, &line).map_err(|e| format!("cannot write {line:?} to {file}: {e}"))?;
    }
    Ok(())
}

/// In this process' mount namespace (`mounts`' own), a tmpfs of
/// `size` bytes mounted over `layer.dir` (the server's empty directory
/// for this session jail), holding `ws` and `ckpt`, and with a project
/// `lower` (opened once: its path never goes into the options, whatever
/// bytes it holds) `upper`, `work` and `merged`, `lower` overlaid by
/// `upper` at `merged`. The tmpfs bounds what the session keeps
/// (`ENOSPC` past it; its pages are memory, charged to the writer's
/// cgroup), and it lives only in this namespace: it goes with the jail's
/// last process, and the server reads and writes it through /proc/PID/root
/// of the jail's wrapper. `userxattr`: an overlay in a user namespace marks
/// opaque directories with `user.overlay.*` attributes (tmpfs has them from
/// Linux 6.6), which the jail cannot see or set through the overlay.
fn mount_layer(layer: &Layer) -> Result<(), String> {
    use nix::fcntl::{OFlag, open};
    use nix::mount::{MsFlags, mount};
    use nix::sys::stat::Mode;
    let dir = OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let lower_fd = match (&layer.lower, layer.idmapped) {
        (Some(_), Some(fd)) => Some(take_descriptor(fd)?),
        (Some(lower), None) => Some(
            open(lower.as_os_str(), dir | OFlag::O_RDONLY, Mode::empty())
                .map_err(|e| format!("cannot open the project {}: {e}", lower.to_string_lossy()))?,
        ),
        (None, _) => None,
    };
    let name = layer.dir.to_string_lossy();
    // The directory is the server's, in a directory of the server's, and
    // no jail runs yet: its path is what the server made.
    if let Some(size) = layer.size {
        mount(
            Some("tmpfs"),
            layer.dir.as_os_str(),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(format!("size={size},mode=0700").as_str()),
        )
        .map_err(|e| format!("cannot mount the session layer's tmpfs on {name}: {e}"))?;
    }
    // O_PATH: the directory is mode 0700, the namespace's own.
    let layer_fd = open(
        layer.dir.as_os_str(),
        dir | OFlag::O_PATH | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open the session layer {name}: {e}"))?;
    make_dirs(&layer_fd, layer, lower_fd.is_some())?;
    let lowers = match layer.restore {
        true => filled_by_server(&layer_fd, &name)?,
        false => Vec::new(),
    };
    match lower_fd {
        Some(lower_fd) => mount_project(layer, &layer_fd, lower_fd, &lowers),
        None => Ok(()),
    }
}

/// A mount namespace of this user namespace's own, its mounts private:
/// nothing mounted here propagates back to the host.
fn private_mount_namespace() -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    nix::sched::unshare(CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("cannot make the jail's mount namespace: {e}"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))
}

/// Shows the project `path` through a read-only overlay mounted over it
/// in this process' mount namespace: `path` (opened first) above an empty
/// read-only tmpfs mounted over `path` meanwhile, both named by descriptor
/// (the path may hold commas or colons). Its sockets and fifos are the
/// overlay's inodes, which no host program listens on or reads.
fn mount_read_only_project(path: &std::ffi::OsStr) -> Result<(), String> {
    use nix::fcntl::{OFlag, open};
    use nix::mount::{MsFlags, mount};
    use nix::sys::stat::Mode;
    use std::os::fd::AsRawFd;
    let name = path.to_string_lossy();
    // O_PATH: a project this uid may not read is shown as it is, its
    // reads refused in the jail, as the bind mount did.
    let dir = OFlag::O_DIRECTORY | OFlag::O_PATH | OFlag::O_CLOEXEC;
    let project = open(path, dir, Mode::empty())
        .map_err(|e| format!("cannot open the project {name}: {e}"))?;
    let sealed = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RDONLY;
    mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        sealed | MsFlags::MS_NOEXEC,
        Some("size=4k,nr_inodes=1,mode=0755"),
    )
    .map_err(|e| format!("cannot mount the project's empty lower layer on {name}: {e}"))?;
    let empty = open(path, dir, Mode::empty())
        .map_err(|e| format!("cannot open the project's empty lower layer: {e}"))?;
    let options = format!(
        "lowerdir=/proc/self/fd/{}:/proc/self/fd/{}",
        project.as_raw_fd(),
        empty.as_raw_fd()
    );
    mount(
        Some("overlay"),
        path,
        Some("overlay"),
        sealed,
        Some(options.as_str()),
    )
    .map_err(|e| {
        format!(
            "cannot show the project {name} through a read-only overlay (overlay in a user \
             namespace needs Linux 5.11 or later): {e}"
        )
    })
}

/// The project's overlay at `merged` in the layer (`layer_fd`): `lower_fd`
/// (the project, or the server's idmapped mount of it) under the `upper`
/// of the checkpoints `lowers` the server attached (newest first), all
/// overlaid by `upper`.
fn mount_project(
    layer: &Layer,
    layer_fd: &std::os::fd::OwnedFd,
    lower_fd: std::os::fd::OwnedFd,
    lowers: &[String],
) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    // Relative to the layer directory: its path may hold commas or colons,
    // which the overlay's options would read as separators.
    nix::unistd::fchdir(layer_fd).map_err(|e| format!("cannot enter the project layer: {e}"))?;
    if layer.idmapped.is_some() {
        attach_idmapped(&lower_fd)?;
    }
    let lowerdir = match layer.idmapped {
        Some(_) => "lower".to_owned(),
        None => format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&lower_fd)
        ),
    };
    let above = forked_project_lowers(layer_fd, lowers);
    let options = format!("lowerdir={above}{lowerdir},upperdir=upper,workdir=work,userxattr");
    mount(
        Some("overlay"),
        "merged",
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| {
        format!(
            "cannot mount the project's copy-on-write layer (overlay in a user namespace needs \
             Linux 5.11 or later): {e}"
        )
    })?;
    if layer.idmapped.is_some() {
        detach_idmapped(lower_fd)?;
    }
    nix::unistd::chdir("/").map_err(|e| format!("cannot leave the project layer: {e}"))?;
    Ok(())
}

/// Makes the layer's directories in `layer_fd` (`layer`'s directory):
/// `ws`, `ckpt` and, for a `project` layer, `upper`, `work` and `merged`
/// (and `lower` for the server's idmapped mount of it);
/// those kept on disk from the jail before are used as they are.
fn make_dirs(layer_fd: &std::os::fd::OwnedFd, layer: &Layer, project: bool) -> Result<(), String> {
    use nix::sys::stat::{Mode, mkdirat};
    let name = layer.dir.to_string_lossy();
    let project: &[&str] = match (project, layer.idmapped) {
        (true, Some(_)) => &["upper", "work", "merged", "lower"],
        (true, None) => &["upper", "work", "merged"],
        (false, _) => &[],
    };
    for (sub, mode) in [("ws", 0o755), ("ckpt", 0o700)]
        .into_iter()
        .chain(project.iter().map(|sub| (*sub, 0o755)))
    {
        match mkdirat(layer_fd, sub, Mode::from_bits_truncate(mode)) {
            Err(nix::errno::Errno::EEXIST) if layer.size.is_none() => {}
            made => made.map_err(|e| format!("cannot make {name}/{sub}: {e}"))?,
        }
    }
    Ok(())
}

/// With `--restore`: makes DIR/ready, waits for the server's `G` on stdin
/// while it fills the layer, then mounts the workspace over the
/// checkpoints it attached, if it did ([`attached_lowers`], returned).
fn filled_by_server(layer_fd: &std::os::fd::OwnedFd, name: &str) -> Result<Vec<String>, String> {
    use nix::sys::stat::{Mode, mkdirat};
    mkdirat(layer_fd, "ready", Mode::from_bits_truncate(0o700))
        .map_err(|e| format!("cannot make {name}/ready: {e}"))?;
    let mut go = [0u8; 1];
    match nix::unistd::read(std::io::stdin(), &mut go) {
        Ok(1) if go[0] == b'G' => {}
        _ => return Err("the server did not fill the session's layer".into()),
    }
    let lowers = attached_lowers(layer_fd);
    if !lowers.is_empty() {
        mount_forked_workspace(layer_fd, &lowers)?;
    }
    Ok(lowers)
}

/// The checkpoints the server mounted at DIR/base/0, DIR/base/1... while
/// this process waited (a session started from a checkpoint at the cost of
/// a mount: launcher/src/project/share.rs), newest first, as paths
/// relative to DIR; none for a fresh layer or one the server filled by
/// copying. Each holds `ws` and, with a project, `upper`.
fn attached_lowers(layer_fd: &std::os::fd::OwnedFd) -> Vec<String> {
    use nix::fcntl::AtFlags;
    (0..)
        .map(|i| format!("base/{i}"))
        .take_while(|path| {
            nix::sys::stat::fstatat(layer_fd, path.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
        })
        .collect()
}

/// Mounts the workspace of a session started from a checkpoint at DIR/ws:
/// an overlay of the `ws` of `lowers` (newest first: the checkpoint, then
/// those it was itself started from), read-only, under DIR/wsup, where the
/// session's own writes go (DIR/wswork its work directory), on the tmpfs
/// that bounds the session. The paths are relative to DIR, as the project
/// overlay's are.
fn mount_forked_workspace(
    layer_fd: &std::os::fd::OwnedFd,
    lowers: &[String],
) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    use nix::sys::stat::{Mode, mkdirat};
    nix::unistd::fchdir(layer_fd).map_err(|e| format!("cannot enter the session layer: {e}"))?;
    for sub in ["wsup", "wswork"] {
        mkdirat(layer_fd, sub, Mode::from_bits_truncate(0o755))
            .map_err(|e| format!("cannot make {sub} in the session layer: {e}"))?;
    }
    let below: Vec<String> = lowers.iter().map(|l| format!("{l}/ws")).collect();
    let options = format!(
        "lowerdir={},upperdir=wsup,workdir=wswork,userxattr",
        below.join(":")
    );
    mount(
        Some("overlay"),
        "ws",
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| format!("cannot mount the workspace over the checkpoint it starts from: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| format!("cannot leave the session layer: {e}"))
}

/// The project layers of `lowers` (their `upper`), newest first, each
/// followed by `:`, to go above the project in its overlay's `lowerdir`.
fn forked_project_lowers(layer_fd: &std::os::fd::OwnedFd, lowers: &[String]) -> String {
    use nix::fcntl::AtFlags;
    lowers
        .iter()
        .map(|l| format!("{l}/upper"))
        .filter(|p| {
            nix::sys::stat::fstatat(layer_fd, p.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
        })
        .map(|p| p + ":")
        .collect()
}

/// The inherited descriptor `fd` as ours, close-on-exec from now on: the
/// jail must never hold it.
fn take_descriptor(fd: i32) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::FromRawFd;
    nix::fcntl::fcntl(
        // SAFETY: a descriptor number; fcntl fails on one that is not open.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|e| format!("--project-lower-fd {fd}: not an open descriptor: {e}"))?;
    // SAFETY: open (checked above), inherited for this process alone, and
    // owned from here on.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Moves the server's detached idmapped mount `mount` onto `lower` in the
/// layer (the current directory): the overlay takes a layer only from a
/// mount of its own namespace (a detached one must belong to a namespace
/// whose user namespace the mounter holds capabilities in, which the
/// server's is not).
fn attach_idmapped(mount: &std::os::fd::OwnedFd) -> Result<(), String> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(mount);
    // SAFETY: plain integers and NUL-terminated constants.
    let moved = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            nix::libc::AT_FDCWD,
            c"lower".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    nix::errno::Errno::result(moved)
        .map(drop)
        .map_err(|e| format!("cannot attach the project's idmapped mount: move_mount: {e}"))
}

/// Unmounts `lower` (the overlay holds its own private copy of it) and
/// closes `mount`, before bubblewrap starts.
fn detach_idmapped(mount: std::os::fd::OwnedFd) -> Result<(), String> {
    drop(mount);
    nix::mount::umount2("lower", nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| format!("cannot detach the project's idmapped mount: {e}"))
}

/// move_mount's flag: the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: nix::libc::c_uint = 0x0000_0004;

/// Makes the jail's network namespace, owned by the user namespace this
/// process holds every capability in, and brings its loopback up.
fn enter_net_namespace() -> Result<(), String> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(|e| {
        format!("cannot make the jail's network namespace: unshare(CLONE_NEWNET): {e}")
    })?;
    forward::loopback_up().map_err(|e| format!("cannot bring the jail's loopback up: {e}"))
}

/// A directory of /proc/sys (`user`, `kernel`) as this process sees it
/// now: its files are then opened from it, one name to look up each
/// (proc's sysctl lookups compare every entry of every namespace's table).
fn sysctl_dir(name: &str) -> Result<(OwnedFd, String), String> {
    let path = format!("/proc/sys/{name}");
    let dir = nix::fcntl::open(
        path.as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {path}: {e}"))?;
    Ok((dir, path))
}

/// The sysctl file `name` of `dir`, opened to write it and read it back.
fn open_sysctl(dir: &OwnedFd, name: &str) -> nix::Result<std::fs::File> {
    nix::fcntl::openat(dir, name, OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
        .map(std::fs::File::from)
}

/// Makes the jail's IPC namespace, owned by the user namespace this
/// process holds every capability in, and writes its System V limits.
/// False when the kernel refuses the first (`EACCES`: before Linux 6.1 the
/// files stay the initial namespace root's), and so every one of them.
fn enter_ipc_namespace(limits: &[(String, String)]) -> Result<bool, String> {
    nix::sched::unshare(CloneFlags::CLONE_NEWIPC)
        .map_err(|e| format!("cannot make the jail's IPC namespace: unshare(CLONE_NEWIPC): {e}"))?;
    let (dir, path) = sysctl_dir("kernel")?;
    for (at, (file, value)) in limits.iter().enumerate() {
        let opened = open_sysctl(&dir, file);
        if at == 0 && opened.as_ref().is_err_and(|e| *e == Errno::EACCES) {
            return Ok(false);
        }
        write_and_check(opened, &format!("{path}/{file}"), value)?;
    }
    Ok(true)
}

/// Writes `value` to the sysctl file `path`, opened as `file`, and reads
/// it back through the same descriptor (fields compared whatever
/// whitespace separates them).
fn write_and_check(
    file: nix::Result<std::fs::File>,
    path: &str,
    value: &str,
) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let cannot_write = |e: std::io::Error| {
        if e.raw_os_error() == Some(nix::libc::EROFS) {
            format!(
                "cannot write {path}: /proc/sys is read-only here (a container's default); \
                 let user namespaces write their own limits (Docker: --security-opt \
                 systempaths=unconfined)"
            )
        } else {
            format!("cannot write {path}: {e}")
        }
    };
    let mut file = file.map_err(|e| cannot_write(e.into()))?;
    file.write_all(value.as_bytes()).map_err(cannot_write)?;
    let mut read = [0u8; 256];
    let n = file
        .read_at(&mut read, 0)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    let read = String::from_utf8_lossy(&read[..n]);
    if !read.split_whitespace().eq(value.split_whitespace()) {
        return Err(format!("{path} is {}, not {value}", read.trim()));
    }
    Ok(())
}

/// Enters the budget namespace and sets every limit of `args`. Without
/// `--ipc`, the namespace maps the caller's uid and gid to themselves.
/// With it, the kernel lets only the uid that is root in the user
/// namespace owning an IPC namespace write its limits, whatever its
/// capabilities: so the budget namespace maps root to the caller, makes
/// the IPC namespace there and writes its limits, and a namespace nested
/// in it maps the caller's uid and gid back to themselves, as bubblewrap
/// expects them. (The jail, whose uid outside is the caller's, could
/// write them too through a writable /proc/sys: bubblewrap mounts it
/// read-only, and the jail can mount nothing.) Where the kernel refuses
/// them, the jail gets no System V IPC at all (`no_sysv`, with the filter
/// `--ipc-refused-filter` names).
fn budgets(args: &Args) -> Result<(), String> {
    let outside = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    enter_namespace(!args.ipc.is_empty(), outside)?;
    let (user, path) = sysctl_dir("user")?;
    args.sysctls.iter().try_for_each(|(name, value)| {
        write_and_check(
            open_sysctl(&user, name),
            &format!("{path}/{name}"),
            &value.to_string(),
        )
    })?;
    if args.net {
        enter_net_namespace()?;
    }
    if !args.ipc.is_empty() {
        let bounded = enter_ipc_namespace(&args.ipc)?;
        enter_namespace(false, outside)?;
        if !bounded {
            let filter = args.ipc_refused_filter.as_ref().ok_or(
                "this kernel lets no user namespace set the System V limits of its IPC \
                 namespace (Linux 6.1 does), and no --ipc-refused-filter was given",
            )?;
            no_sysv::forbid(Path::new(filter))?;
        }
    }
    // Before Linux 5.14 the kernel counts RLIMIT_NPROC against every
    // process of the uid on the host, whatever its namespace: in a jail
    // whose uid is shared (a user's server, a service's dynamic user), the
    // server's threads and the other jails' processes would count, and the
    // jail's forks fail. There it stays as it is: a run's cgroup
    // (`pids.max`) bounds the processes where the server has one, and
    // `--check` says when nothing does.
    let nproc = proto::kernel::nproc_per_namespace();
    args.rlimits
        .iter()
        .filter(|(resource, _)| nproc || *resource != Resource::RLIMIT_NPROC)
        .try_for_each(|(resource, value)| command::lower_rlimit(*resource, *value))
}

/// The jail's mounts, each when asked, in one mount namespace of this
/// process' own, made once and private first: the session's layer, the
/// read-only project, the view of the store.
fn mounts(args: &Args) -> Result<(), String> {
    if args.layer.is_none() && args.read_only.is_none() && args.store_view.is_none() {
        return Ok(());
    }
    private_mount_namespace()?;
    if let Some(layer) = &args.layer {
        mount_layer(layer)?;
    }
    if let Some(project) = &args.read_only {
        mount_read_only_project(project)?;
    }
    if let Some((dir, list)) = &args.store_view {
        store_view::mount_view(Path::new(dir), &store_view::names(Path::new(list))?)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1).collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("jail-budget: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // The rlimits after the namespace: its own ceilings for them are the
    // caller's limits at its creation, which bound the caller's user; the
    // jail's, lowered, bound the jail.
    let set = budgets(&args);
    if set.is_ok()
        && let Err(e) = mounts(&args)
    {
        eprintln!("jail-budget: {e}; the jail does not start");
        return ExitCode::from(2);
    }
    if let Err(e) = set {
        eprintln!(
            "jail-budget: {e}; the jail's kernel budgets cannot be set, so it does not start"
        );
        return ExitCode::from(2);
    }
    if let Some(fd) = args.publish_fd
        && let Err(e) = forward::start(fd)
    {
        eprintln!("jail-budget: cannot start the port forwarder: {e}; the jail does not start");
        return ExitCode::from(2);
    }
    let mut program = std::process::Command::new(&args.program);
    program.args(&args.args);
    if args.clear_env {
        program.env_clear();
    }
    command::exec("jail-budget", program)
}

#[cfg(test)]
mod tests {
    use super::*;
    use command::os_args as args;

    #[test]
    fn flags_before_the_separator_the_program_after() {
        let parsed = parse(args(&[
            "--sysctl",
            "max_inotify_instances=16",
            "--rlimit=sigpending=1024",
            "--",
            "/bin/bwrap",
            "--unshare-all",
            "--",
            "sh",
        ]))
        .unwrap();
        assert_eq!(
            parsed,
            Args {
                sysctls: vec![("max_inotify_instances".into(), 16)],
                rlimits: vec![(Resource::RLIMIT_SIGPENDING, 1024)],
                ipc: vec![],
                layer: None,
                read_only: None,
                net: false,
                publish_fd: None,
                clear_env: false,
                ipc_refused_filter: None,
                store_view: None,
                program: "/bin/bwrap".into(),
                args: args(&["--unshare-all", "--", "sh"]),
            }
        );
    }

    #[test]
    fn the_process_limit_is_an_rlimit_of_the_namespace() {
        let parsed = parse(args(&["--rlimit", "nproc=32", "--", "bwrap"])).unwrap();
        assert_eq!(parsed.rlimits, vec![(Resource::RLIMIT_NPROC, 32)]);
    }

    #[test]
    fn a_store_view_and_its_paths() {
        let parsed = parse(args(&["--store-view", "/v", "--store-paths=/l", "--", "x"])).unwrap();
        assert_eq!(parsed.store_view, Some(("/v".into(), "/l".into())));
    }

    #[test]
    fn an_empty_environment() {
        let parsed = parse(args(&["--clear-env", "--", "bwrap"])).unwrap();
        assert!(parsed.clear_env);
    }

    #[test]
    fn bad_flags_are_refused() {
        for bad in [
            &["/bin/true"][..],
            &["--"],
            &["--sysctl", "../../kernel/core_pattern=1", "--", "x"],
            &["--sysctl", "max_user_namespaces", "--", "x"],
            &["--sysctl", "max_user_namespaces=-1", "--", "x"],
            &["--rlimit", "nofile=4", "--", "x"],
            &["--nope", "--", "x"],
            &["--layer", "/l", "--", "x"],
            &["--project-lower", "/p", "--", "x"],
            &["--restore", "--", "x"],
            &["--layer", "/l", "--project-lower", "/p", "--", "x"],
            &["--layer", "/l", "--layer-size", "0", "--", "x"],
            &[
                "--layer",
                "/l",
                "--layer-size",
                "1",
                "--project-lower-fd",
                "5",
                "--",
                "x",
            ],
            &[
                "--layer",
                "/l",
                "--layer-size",
                "1",
                "--project-lower",
                "/p",
                "--project-lower-fd",
                "2",
                "--",
                "x",
            ],
            &["--project-lower-fd", "5", "--", "x"],
            &["--ipc", "core_pattern=1", "--", "x"],
            &["--ipc", "semmsl=250", "--", "x"],
            &["--publish-fd", "5", "--", "x"],
            &["--net", "--publish-fd", "1", "--", "x"],
            &["--net", "--publish-fd", "x", "--", "x"],
            &["--store-view", "/v", "--", "x"],
            &["--store-paths", "/l", "--", "x"],
            &[
                "--layer",
                "/l",
                "--layer-size",
                "1",
                "--project-lower",
                "/p",
                "--project-read-only",
                "/p",
                "--",
                "x",
            ],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_read_only_project_goes_alone_or_with_a_layer() {
        let plain = parse(args(&["--project-read-only", "/p", "--", "x"])).unwrap();
        assert_eq!(plain.read_only, Some("/p".into()));
        assert_eq!(plain.layer, None);
        let session = parse(args(&[
            "--layer",
            "/l",
            "--layer-size",
            "1",
            "--project-read-only=/p",
            "--",
            "x",
        ]))
        .unwrap();
        assert_eq!(session.read_only, Some("/p".into()));
        assert!(session.layer.is_some_and(|l| l.lower.is_none()));
    }

    #[test]
    fn an_idmapped_lower_goes_with_the_project_lower() {
        let parsed = parse(args(&[
            "--layer=/l",
            "--layer-size=1024",
            "--project-lower=/p",
            "--project-lower-fd=7",
            "--",
            "/bin/bwrap",
        ]))
        .unwrap();
        assert_eq!(
            parsed.layer,
            Some(Layer {
                dir: "/l".into(),
                size: Some(1024),
                lower: Some("/p".into()),
                idmapped: Some(7),
                restore: false,
            })
        );
    }

    #[test]
    fn ipc_limits_and_sem_as_one_line() {
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .unwrap()
            .unwrap() as u64;
        let parsed = parse(args(&[
            "--ipc=shm_total_bytes=67108864",
            "--ipc",
            "semmni=16",
            "--ipc=semmsl=250",
            "--ipc=semopm=32",
            "--ipc=semmns=4096",
            "--",
            "/bin/bwrap",
        ]))
        .unwrap();
        assert_eq!(
            parsed.ipc,
            vec![
                ("shmall".to_owned(), (67_108_864 / page).to_string()),
                ("sem".to_owned(), "250\t4096\t32\t16".to_owned()),
            ]
        );
    }
}
