//! The CPU time of a jail's processes, read in /proc from the wrapper's
//! pid down, for the one limit no rlimit holds: `RLIMIT_CPU` binds each
//! process alone, so a session's processes (a chain of children each
//! starting afresh, or work left running between calls) could together
//! use far more than `cpu_s`. Summed here: every process of the tree that
//! is alive (its own time) and every one that ended and was waited for in
//! the tree (its parent's `cutime` and `cstime`). Inside a jail's pid
//! namespace an orphan is reparented to the jail's own init, so nothing
//! leaves the tree.
//!
//! Read from the host's /proc, where the jail's processes are visible
//! under their host pids; no cgroup is needed. The walk follows each
//! thread's `children` file (a few small reads for a jail: cheap enough
//! after every session call); a kernel without them gets a full scan of
//! /proc instead.

use std::collections::HashMap;
use std::time::Duration;

/// The CPU time used by `root` and every process below it (alive, or
/// ended and waited for); `None` when `root` is gone.
pub fn cpu_of_tree(root: i32) -> Option<Duration> {
    let mut ticks = stat_of(root)?.ticks;
    let mut todo = children_of(root)?;
    let mut seen = 1usize;
    while let Some(pid) = todo.pop() {
        seen += 1;
        // A guard against a loop through reused pids, never reached in a jail.
        if seen > MAX_WALKED {
            break;
        }
        // Gone meanwhile: its time is in its parent's, or in the next look.
        if let Some(stat) = stat_of(pid) {
            ticks = ticks.saturating_add(stat.ticks);
            todo.extend(children_of(pid).unwrap_or_default());
        }
    }
    Some(from_ticks(ticks))
}

/// Most processes one walk looks at.
const MAX_WALKED: usize = 1 << 16;

/// `pid`'s stat, if it is there.
fn stat_of(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The children of every thread of `pid`; from a full scan of /proc when
/// the kernel has no `children` files.
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut children = Vec::new();
    for task in tasks.flatten() {
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(list) => children.extend(
                list.split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some(ProcTable::read().children.remove(&pid).unwrap_or_default());
            }
            // The thread ended meanwhile.
            Err(_) => {}
        }
    }
    Some(children)
}

fn from_ticks(ticks: u64) -> Duration {
    Duration::from_millis(ticks.saturating_mul(1000) / clock_ticks())
}

/// One process: its parent and the CPU ticks it and its waited-for
/// children used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    ppid: i32,
    ticks: u64,
}

/// Every process of the host, read once (where there are no `children`
/// files).
#[derive(Debug, Default)]
struct ProcTable {
    stats: HashMap<i32, Stat>,
    children: HashMap<i32, Vec<i32>>,
}

impl ProcTable {
    /// Reads /proc now (processes that end meanwhile are left out).
    fn read() -> Self {
        let mut table = Self::default();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return table;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if let Some(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|text| parse_stat(&text))
            {
                table.insert(pid, stat);
            }
        }
        table
    }

    fn insert(&mut self, pid: i32, stat: Stat) {
        self.stats.insert(pid, stat);
        self.children.entry(stat.ppid).or_default().push(pid);
    }

    /// [`cpu_of_tree`] from this table.
    #[cfg(test)]
    fn cpu_of_tree(&self, root: i32) -> Option<Duration> {
        self.stats.get(&root)?;
        let mut ticks = 0u64;
        let mut todo = vec![root];
        let mut seen = 0usize;
        while let Some(pid) = todo.pop() {
            seen += 1;
            if seen > self.stats.len() {
                break;
            }
            if let Some(stat) = self.stats.get(&pid) {
                ticks = ticks.saturating_add(stat.ticks);
            }
            if let Some(children) = self.children.get(&pid) {
                todo.extend(children.iter().filter(|&&c| c != pid));
            }
        }
        Some(from_ticks(ticks))
    }
}

/// A /proc/PID/stat line's parent pid and CPU ticks (utime, stime, cutime,
/// cstime, fields 14 to 17); the command name, which may hold spaces and
/// parentheses, ends at the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let ppid = fields.get(1)?.parse().ok()?;
    let mut ticks = 0u64;
    for i in 11..=14 {
        let value: i64 = fields.get(i)?.parse().ok()?;
        ticks = ticks.saturating_add(u64::try_from(value).unwrap_or(0));
    }
    Some(Stat { ppid, ticks })
}

/// Clock ticks per second, as /proc counts them.
fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_odd_command_names() {
        let line = "4242 (a) b (c) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 50 7 3 20 0 1 0 12345 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                ppid: 17,
                ticks: 310
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_tree_sums_its_processes_and_what_they_waited_for() {
        let mut table = ProcTable::default();
        for (pid, ppid, ticks) in [(10, 1, 5), (11, 10, 100), (12, 11, 200), (20, 1, 999)] {
            table.insert(pid, Stat { ppid, ticks });
        }
        let hz = clock_ticks();
        let of = |root| table.cpu_of_tree(root).map(|d| d.as_millis() as u64);
        assert_eq!(of(10), Some(305 * 1000 / hz));
        assert_eq!(of(12), Some(200 * 1000 / hz));
        assert_eq!(of(99), None);
    }

    #[test]
    fn a_child_that_ended_counts_for_its_parent() {
        // A shell whose child burns CPU and ends (waited for: the shell's
        // cutime), then sleeps.
        let mut shell = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                "(i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done); exec sleep 30",
            ])
            .spawn()
            .unwrap();
        let pid = i32::try_from(shell.id()).unwrap();
        let started = std::time::Instant::now();
        let mut used = Duration::ZERO;
        while started.elapsed() < Duration::from_secs(20) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            used = cpu_of_tree(pid).expect("the shell is there");
            // Once `sleep`, the child has ended and was waited for.
            if comm.trim() == "sleep" {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(used >= Duration::from_millis(100), "{used:?}");
        assert_eq!(cpu_of_tree(pid), None, "gone once reaped");
    }
}
