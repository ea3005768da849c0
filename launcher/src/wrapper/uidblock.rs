//! A block of 65536 uids (and the gids of the same numbers) that nothing
//! else on the host uses, held by a root launcher for its jails as long as
//! it runs: the way systemd-nspawn's `--private-users=pick` and
//! DynamicUser take theirs (systemd's UIDS-GIDS.md).
//!
//! - **Where**: a block starts at a multiple of 65536 from 0x70000000
//!   (1879048192) to 0x7FFD0000: above the range systemd-nspawn and
//!   systemd-nsresourced pick container ranges from (524288-1879048191),
//!   below systemd's foreign range (0x7FFE0000) and 2^31, which some kernel
//!   interfaces treat as signed. Candidates are tried in random order.
//! - **Two root servers**: a block is taken by an exclusive `flock` on
//!   `/run/nix-sandbox-mcp/uid-blocks/BASE`, held by an open file for the
//!   launcher's life; the kernel drops it when the launcher dies, however
//!   it dies. `/run/nix-sandbox-mcp` and that folder must be root's and
//!   writable by root alone (made so, or refused).
//! - **Anything else using a uid of the block** (checked once the lock is
//!   held; any hit skips the block): a user or group of the user database
//!   (NSS, as nspawn asks it: the block's first uid, its second and the
//!   one before nobody's place; and every entry of /etc/passwd and
//!   /etc/group), a subordinate range of /etc/subuid or /etc/subgid (a
//!   user's rootless containers map those), a process of the host holding
//!   one as a real, effective, saved or file-system uid or gid, a SysV IPC
//!   object one owns or made.
//! - **What a jail leaves**: nothing on the host's file systems, which no
//!   jail can write (its writable mounts are tmpfs of its own); its IPC
//!   objects live in its own IPC namespace and its processes die with the
//!   launcher's pid namespace, and those that could survive are what the
//!   checks above look for. What a launcher killed with SIGKILL left in
//!   `/run/nix-sandbox-mcp/BASE` (its jails' runtime directory) is removed
//!   by the next root launcher to start, once it holds that block's lock.

use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Group, Uid, User};

/// The size of a block: a 16-bit uid space, as containers get.
pub const SIZE: u32 = 0x1_0000;
/// The lowest and highest block a root launcher takes.
pub const FIRST_BASE: u32 = 0x7000_0000;
pub const LAST_BASE: u32 = 0x7FFD_0000;
/// Where every root launcher of the host takes its block's lock and keeps
/// its runtime files.
pub const RUN_DIR: &str = "/run/nix-sandbox-mcp";
// Whole blocks, above systemd-nspawn's and systemd-nsresourced's container
// ranges (524288-1879048191), below systemd's foreign range (0x7FFE0000).
const _: () = assert!(FIRST_BASE.is_multiple_of(SIZE) && LAST_BASE.is_multiple_of(SIZE));
const _: () = assert!(FIRST_BASE > 1_879_048_191 && LAST_BASE + SIZE <= 0x7FFE_0000);

/// How many candidate blocks are tried.
const TRIES: usize = 100;

/// A block this launcher holds: `base` to `base + 0xFFFF`.
#[derive(Debug)]
pub struct Block {
    pub base: u32,
    /// Released by the kernel when the launcher dies; removed on drop.
    _lock: Flock<File>,
    lock_path: PathBuf,
}

impl Block {
    /// Takes a free block, or says why none could be had.
    pub fn reserve() -> Result<Self, String> {
        let locks = owned_dir(&Path::new(RUN_DIR).join("uid-blocks"))?;
        sweep(&locks);
        let state = RandomState::new();
        let mut skipped = Vec::new();
        for attempt in 0..TRIES {
            let blocks = u64::from((LAST_BASE - FIRST_BASE) / SIZE + 1);
            let offset = state.hash_one((std::process::id(), attempt)) % blocks;
            let base = FIRST_BASE + u32::try_from(offset).unwrap_or(0) * SIZE;
            let Some(block) = Self::lock(&locks, base)? else {
                continue;
            };
            match in_use(base) {
                None => return Ok(block),
                Some(why) => {
                    tracing::debug!(base, %why, "uid block in use, skipped");
                    skipped.push(why);
                }
            }
        }
        Err(format!(
            "no free block of 65536 uids for the jails after {TRIES} tries between {FIRST_BASE} \
             and {}: {}",
            LAST_BASE + SIZE - 1,
            skipped
                .last()
                .map_or("all locked by other servers", String::as_str)
        ))
    }

    /// The block at `base` locked, `None` when another launcher holds it.
    fn lock(dir: &Path, base: u32) -> Result<Option<Self>, String> {
        let path = dir.join(base.to_string());
        loop {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => lock,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
                Err((_, e)) => return Err(format!("cannot lock {}: {e}", path.display())),
            };
            // Unlinked by its last holder between open and lock: again.
            match lock.metadata() {
                Ok(meta) if meta.nlink() > 0 => {
                    return Ok(Some(Self {
                        base,
                        _lock: lock,
                        lock_path: path,
                    }));
                }
                Ok(_) => continue,
                Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
            }
        }
    }
}

/// Removes the runtime directories (`RUN_DIR/BASE`) of blocks no launcher
/// holds any more: what launchers that died (SIGKILL) left.
fn sweep(locks: &Path) {
    let Ok(entries) = std::fs::read_dir(RUN_DIR) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(base) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(Some(_held)) = Block::lock(locks, base)
            && let Err(e) = std::fs::remove_dir_all(entry.path())
        {
            tracing::warn!(dir = %entry.path().display(), error = %e, "cannot remove what a stopped server left");
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // Unlinked while still locked: a launcher that opened it meanwhile
        // sees no link once it gets the lock, and tries again.
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// `dir` (and its parent, RUN_DIR), made if missing with mode 0755: a
/// directory of root's that no one else may write, or an error naming why
/// it is not.
pub fn owned_dir(dir: &Path) -> Result<PathBuf, String> {
    for d in [Path::new(RUN_DIR), dir] {
        match std::fs::DirBuilder::new().mode(0o755).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot make {}: {e}", d.display())),
        }
        let meta = std::fs::symlink_metadata(d)
            .map_err(|e| format!("cannot stat {}: {e}", d.display()))?;
        if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is not a directory of root's that only root may write (owner {}, mode {:o}); \
                 remove it",
                d.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(dir.to_path_buf())
}

/// Why the block at `base` is used by something else, if it is.
fn in_use(base: u32) -> Option<String> {
    let last = base + (SIZE - 1);
    let inside = |id: u32| (base..=last).contains(&id);
    if let Some(why) = user_database(&[base, base + 1, base + (SIZE - 2)]) {
        return Some(why);
    }
    for file in ["/etc/passwd", "/etc/group"] {
        if let Some(id) = lines(file).find_map(|l| database_id(&l).filter(|id| inside(*id))) {
            return Some(format!("{file} names id {id}"));
        }
    }
    for file in ["/etc/subuid", "/etc/subgid"] {
        if let Some(range) = lines(file).find_map(|l| {
            subordinate(&l).filter(|(start, count)| overlaps(*start, *count, base, SIZE))
        }) {
            return Some(format!("{file} gives {}+{} to a user", range.0, range.1));
        }
    }
    if let Some((pid, id)) = process_ids().find(|(_, ids)| ids.iter().any(|id| inside(*id))) {
        return Some(format!("process {pid} runs as id {id:?}"));
    }
    for kind in ["msg", "sem", "shm"] {
        let path = format!("/proc/sysvipc/{kind}");
        if lines(&path)
            .skip(1)
            .any(|l| ipc_ids(kind, &l).iter().any(|id| inside(*id)))
        {
            return Some(format!("a SysV IPC object of {path} belongs to the block"));
        }
    }
    None
}

/// The first of `ids` the user database (NSS) knows as a user or a group,
/// said as [`in_use`] says it.
///
/// Asked by a child process when this one has a single thread (a root
/// launcher has, when it takes its block): the C library loads the modules
/// nsswitch.conf names (systemd's, sssd's, LDAP's) into the process that
/// asks and keeps them for its life, so the server would carry them to the
/// end (0.7 MiB of resident memory for systemd's and the libraries it
/// needs, on Debian). With more threads a fork could not safely allocate,
/// so the process asks itself. A child that ends any other way than with
/// its answer is a reason to skip the block.
fn user_database(ids: &[u32]) -> Option<String> {
    if !one_thread() {
        return ask_user_database(ids);
    }
    let (read, write) = match nix::unistd::pipe() {
        Ok(ends) => ends,
        Err(_) => return ask_user_database(ids),
    };
    // SAFETY: this process has one thread, so the child may allocate and
    // load libraries as any program does; it ends with _exit.
    match unsafe { nix::unistd::fork() } {
        Err(_) => ask_user_database(ids),
        Ok(ForkResult::Child) => {
            drop(read);
            let answer = ask_user_database(ids).unwrap_or_default();
            let code = i32::from(File::from(write).write_all(answer.as_bytes()).is_err());
            // SAFETY: ends the child without running the parent's exit
            // handlers or destructors (the block's lock file among them).
            unsafe { nix::libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(write);
            let mut answer = String::new();
            let read = File::from(read).read_to_string(&mut answer);
            let status = loop {
                match waitpid(child, None) {
                    Err(Errno::EINTR) => continue,
                    other => break other,
                }
            };
            match (read, status) {
                (Ok(_), Ok(WaitStatus::Exited(_, 0))) => (!answer.is_empty()).then_some(answer),
                (_, status) => Some(format!(
                    "the user database could not be asked about uids {ids:?} (the asking \
                     process ended: {status:?})"
                )),
            }
        }
    }
}

/// [`user_database`]'s question, asked by this process.
fn ask_user_database(ids: &[u32]) -> Option<String> {
    for &id in ids {
        if let Ok(Some(user)) = User::from_uid(Uid::from_raw(id)) {
            return Some(format!("uid {id} is the user {}", user.name));
        }
        if let Ok(Some(group)) = Group::from_gid(Gid::from_raw(id)) {
            return Some(format!("gid {id} is the group {}", group.name));
        }
    }
    None
}

/// Whether this process has a single thread (/proc/self/status).
fn one_thread() -> bool {
    lines("/proc/self/status").any(|l| l.split_whitespace().eq(["Threads:", "1"]))
}

/// The lines of a file, none when it cannot be read.
fn lines(path: &str) -> impl Iterator<Item = String> {
    File::open(path)
        .ok()
        .map(io::BufReader::new)
        .into_iter()
        .flat_map(|r| r.lines().map_while(Result::ok))
}

/// The id (third field) of a passwd or group line.
fn database_id(line: &str) -> Option<u32> {
    line.split(':').nth(2)?.parse().ok()
}

/// `name:start:count` of /etc/subuid and /etc/subgid.
fn subordinate(line: &str) -> Option<(u32, u32)> {
    let mut fields = line.split(':').skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

fn overlaps(start: u32, count: u32, base: u32, size: u32) -> bool {
    let end = u64::from(start) + u64::from(count);
    u64::from(start) < u64::from(base) + u64::from(size) && end > u64::from(base)
}

/// The owner's uid and gid and the creator's uid and gid of a line of
/// /proc/sysvipc/`kind`: columns 4 to 7 of `sem`, 7 to 10 of `msg` and
/// `shm` (0-based, the kernel's fixed layout).
fn ipc_ids(kind: &str, line: &str) -> Vec<u32> {
    let at = if kind == "sem" { 4 } else { 7 };
    line.split_whitespace()
        .skip(at)
        .take(4)
        .filter_map(|f| f.parse().ok())
        .collect()
}

/// Every process of /proc now with the uids and gids it holds (real,
/// effective, saved, file system).
fn process_ids() -> impl Iterator<Item = (u32, Vec<u32>)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            Some((pid, status_ids(&status)))
        })
}

/// The ids of `Uid:` and `Gid:` lines of /proc/PID/status.
fn status_ids(status: &str) -> Vec<u32> {
    status
        .lines()
        .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
        .flat_map(|l| l.split_whitespace().skip(1).filter_map(|v| v.parse().ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_and_subordinate_lines_are_read() {
        assert_eq!(
            database_id("alice:x:1000:1000::/home/alice:/bin/sh"),
            Some(1000)
        );
        assert_eq!(database_id("users:x:100:alice"), Some(100));
        assert_eq!(database_id("# comment"), None);
        assert_eq!(subordinate("alice:100000:65536"), Some((100_000, 65536)));
        assert_eq!(subordinate("bad"), None);
        assert!(overlaps(100_000, 65536, 131_072, SIZE));
        assert!(!overlaps(100_000, 65536, 165_536, SIZE));
        assert!(overlaps(0x6FFF_0000, 0x2_0000, FIRST_BASE, SIZE));
        assert!(!overlaps(0x6FFF_0000, 0x1_0000, FIRST_BASE, SIZE));
    }

    #[test]
    fn process_and_ipc_ids_are_read() {
        let status = "Name:\tx\nUid:\t0\t1879048193\t0\t0\nGid:\t5\t5\t5\t5\nGroups:\t7\n";
        assert_eq!(status_ids(status), [0, 1_879_048_193, 0, 0, 5, 5, 5, 5]);
        let shm = "       0      3 1600        4096  1234  1235      1 1879048192 100 1879048199 101 1 2 3 0 0";
        assert_eq!(
            ipc_ids("shm", shm),
            [1_879_048_192, 100, 1_879_048_199, 101]
        );
        let msg = "       0      0  600        0 0 0 0 1879048192 100 1879048192 100 0 0 1";
        assert_eq!(
            ipc_ids("msg", msg),
            [1_879_048_192, 100, 1_879_048_192, 100]
        );
        let sem = "       0      0  600        1 1879048192 100 1879048192 100 0 0";
        assert_eq!(
            ipc_ids("sem", sem),
            [1_879_048_192, 100, 1_879_048_192, 100]
        );
    }
}
