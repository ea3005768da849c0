//! A wrapper born in its run's cgroups v1, where no `clone3` can create a
//! process in a cgroup (that is v2 only: clone.rs). The thread that forks
//! the wrappers (the jails' spawner, lifetime.rs) writes `0` to the
//! `tasks` file of the run's cgroup in each hierarchy, which moves that
//! one thread; forks the wrapper, which is born there; then writes `0` to
//! the `tasks` of its own cgroups and lets the wrapper go on.
//!
//! Why a hop and not a move of the wrapper: writing a pid to a v1
//! `cgroup.procs` (or `tasks`) takes the kernel's global
//! `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace
//! period, about 10 ms a run. The kernel skips that lock for one case,
//! `0` written to `tasks`, the calling thread alone (`pid || threadgroup`
//! is false in `cgroup_procs_write_start()`, kernel/cgroup/cgroup.c; a
//! thread that is `current` cannot exit or exec under the move), so each
//! hop costs microseconds.
//!
//! While the spawner stands in the run's cgroups it counts as one task in
//! the run's `pids.max`, and a limit of 1 would refuse the fork: the hop
//! raises `pids.max` by one first, and writes the environment's limit back
//! after the spawner left, before the wrapper may take a step (the child
//! is held until then: clone.rs, [`clone::spawn_held`]). The wrapper thus
//! never sees, nor can use, more than its limit. What the spawner's fork
//! allocates in the kernel is charged to the run (the child's page
//! tables, its task); the launcher's own pages stay the launcher's (v1
//! charges a process' memory to its thread group leader's cgroup).
//!
//! A kernel or policy that refuses the hop (a `tasks` file this user may
//! not write, a hierarchy gone) is [`clone::Refused`]: the spawner is back
//! in its own cgroups, and the caller moves the wrapper in as before.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::clone::{self, Program, Refused, Started};

/// The `tasks` files of the cgroups a thread returns to after a hop: the
/// launcher's own in each hierarchy, open for writing.
#[derive(Debug, Clone)]
pub struct Home(Arc<[File]>);

impl Home {
    /// `tasks` of each of `dirs`, open for writing.
    pub fn open(dirs: &[PathBuf]) -> io::Result<Self> {
        let files: io::Result<Vec<File>> = dirs.iter().map(|dir| open_tasks(dir)).collect();
        Ok(Self(files?.into()))
    }

    /// The calling thread back home; the first error, after trying each.
    fn enter(&self) -> io::Result<()> {
        let mut result = Ok(());
        for tasks in self.0.iter() {
            let stepped = step_in(tasks);
            if result.is_ok() {
                result = stepped;
            }
        }
        result
    }

    /// Tries a hop of the calling thread into `dirs` and back: whether
    /// this kernel and user can, as [`Hop::spawn`] will. Call while the
    /// launcher has one thread, or from the thread that will hop.
    pub fn try_hop(&self, dirs: &[PathBuf]) -> io::Result<()> {
        let into: io::Result<Vec<File>> = dirs.iter().map(|dir| open_tasks(dir)).collect();
        let entered = into.and_then(|into| into.iter().try_for_each(step_in));
        let back = self.enter();
        entered.and(back)
    }
}

/// One run's hop: the `tasks` file of its cgroup in each hierarchy, its
/// `pids.max` and the limit that belongs there, and the way home.
#[derive(Debug)]
pub struct Hop {
    into: Vec<File>,
    pids: Option<(File, u64)>,
    home: Home,
}

impl Hop {
    /// The hop into the run cgroups `dirs` (one per hierarchy), whose
    /// `pids.max`, if any, holds `pids`; opened by the caller (the
    /// launcher's files, so the move is the launcher's to make).
    pub fn open(dirs: &[PathBuf], pids: u64, home: &Home) -> io::Result<Self> {
        let into = dirs
            .iter()
            .map(|dir| open_tasks(dir))
            .collect::<io::Result<_>>()?;
        let pids = dirs
            .iter()
            .map(|dir| dir.join("pids.max"))
            .find(|file| file.exists())
            .map(|file| open_write(&file).map(|f| (f, pids)))
            .transpose()?;
        Ok(Self {
            into,
            pids,
            home: home.clone(),
        })
    }

    /// Starts `program` (as [`clone::spawn_held`] does, `setup` in the
    /// child) in the run's cgroups from the calling thread, which ends
    /// where it was. `Err(Ok(Refused))`: no hop here; nothing was started
    /// and the thread is home.
    pub fn spawn(
        self,
        program: &Program,
        setup: &dyn Fn() -> io::Result<()>,
    ) -> Result<Started, Result<Refused, io::Error>> {
        // Room for the thread itself while it stands in the run's cgroup.
        if let Some((file, limit)) = &self.pids {
            write_value(file, limit.saturating_add(1)).map_err(|e| Ok(Refused(e)))?;
        }
        if let Err(e) = self.into.iter().try_for_each(step_in) {
            let back = self.leave();
            return Err(match back {
                Ok(()) => Ok(Refused(e)),
                Err(back) => Err(back),
            });
        }
        let mut left = false;
        let started = clone::spawn_held(program, setup, &mut || {
            left = true;
            self.leave()
        });
        if !left {
            // The clone failed: the child never was.
            self.leave().map_err(Err)?;
        }
        started
    }

    /// The calling thread home, then the run's own `pids.max` back.
    fn leave(&self) -> io::Result<()> {
        self.home.enter().map_err(|e| {
            tracing::error!(error = %e, "the spawner cannot leave a run's cgroup");
            e
        })?;
        match &self.pids {
            Some((file, limit)) => write_value(file, *limit),
            None => Ok(()),
        }
    }
}

/// `0` to a `tasks` file: the calling thread alone moves there.
fn step_in(tasks: &File) -> io::Result<()> {
    write_at_start(tasks, b"0")
}

fn write_value(file: &File, value: u64) -> io::Result<()> {
    write_at_start(file, value.to_string().as_bytes())
}

/// One write of `bytes` (a cgroup file takes a value in one write).
fn write_at_start(file: &File, bytes: &[u8]) -> io::Result<()> {
    match file.write_at(bytes, 0)? {
        n if n == bytes.len() => Ok(()),
        _ => Err(io::Error::other("a short write to a cgroup file")),
    }
}

fn open_tasks(dir: &Path) -> io::Result<File> {
    open_write(&dir.join("tasks"))
}

fn open_write(file: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))
}

#[cfg(test)]
#[path = "hop_tests.rs"]
mod tests;
