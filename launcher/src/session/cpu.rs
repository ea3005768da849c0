//! When a session's CPU counter must be read after a call ([`CpuWatch`]).
//!
//! The session's budget (`cpu_s`, all its processes together) is checked
//! after every call, and reading the counter costs a call a few syscalls
//! as root (the cgroup's file) and dozens as an unprivileged user (a walk
//! of the jail's process tree in /proc). The jail's processes cannot use
//! more than the wall time passed on each CPU of the machine, so while
//! the last reading plus that much stays under the budget the budget is
//! not reached, and nothing needs reading. A reading older than
//! [`READ_AT_LEAST_EVERY`] is taken again all the same: the /proc walk
//! can miss a process whose parent ended while it looked, and a fresh
//! reading soon counts it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How old the last reading may get before a call reads the counter
/// again, whatever the bound says.
pub const READ_AT_LEAST_EVERY: Duration = Duration::from_secs(1);

/// The last reading of a jail's CPU time.
#[derive(Debug, Default)]
pub struct CpuWatch {
    /// The CPU time read, and when.
    seen: Option<(Duration, Instant)>,
}

impl CpuWatch {
    /// Whether the counter must be read at `now` to tell whether `budget`
    /// is used: no reading yet, one too old, or one from which `cpus`
    /// CPUs busy since could have reached it.
    pub fn must_read(&self, budget: Duration, now: Instant, cpus: u32) -> bool {
        let Some((used, at)) = self.seen else {
            return true;
        };
        let passed = now.saturating_duration_since(at);
        passed >= READ_AT_LEAST_EVERY || used.saturating_add(passed.saturating_mul(cpus)) >= budget
    }

    /// Keeps `used`, read at `at`.
    pub fn note(&mut self, used: Duration, at: Instant) {
        self.seen = Some((used, at));
    }
}

/// The CPUs the kernel may run a jail's processes on at most: every CPU
/// configured (a jail may widen its affinity past the launcher's).
pub fn machine_cpus() -> u32 {
    static CPUS: OnceLock<u32> = OnceLock::new();
    *CPUS.get_or_init(|| {
        let configured = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF);
        match configured {
            Ok(Some(n)) if n > 0 => u32::try_from(n).unwrap_or(u32::MAX),
            // Unknown: every call reads the counter.
            _ => u32::MAX,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_secs(60);

    #[test]
    fn the_first_call_reads() {
        assert!(CpuWatch::default().must_read(BUDGET, Instant::now(), 2));
    }

    #[test]
    fn a_fresh_reading_far_from_the_budget_is_enough() {
        let t = Instant::now();
        let mut w = CpuWatch::default();
        w.note(Duration::from_secs(10), t);
        assert!(!w.must_read(BUDGET, t, 2));
        assert!(!w.must_read(BUDGET, t + Duration::from_millis(999), 2));
    }

    #[test]
    fn an_old_reading_is_taken_again() {
        let t = Instant::now();
        let mut w = CpuWatch::default();
        w.note(Duration::ZERO, t);
        assert!(w.must_read(BUDGET, t + READ_AT_LEAST_EVERY, 2));
    }

    #[test]
    fn every_cpu_busy_since_the_reading_could_reach_the_budget() {
        let t = Instant::now();
        let mut w = CpuWatch::default();
        // 59.5 s used; 0.3 s later two CPUs could have added 0.6 s.
        w.note(Duration::from_millis(59_500), t);
        assert!(!w.must_read(BUDGET, t + Duration::from_millis(200), 2));
        assert!(w.must_read(BUDGET, t + Duration::from_millis(250), 2));
        assert!(w.must_read(BUDGET, t + Duration::from_millis(300), 2));
        // More CPUs reach it sooner.
        assert!(w.must_read(BUDGET, t + Duration::from_millis(200), 4));
        // An unknown count of CPUs: always read.
        assert!(w.must_read(BUDGET, t + Duration::from_micros(1), u32::MAX));
        // A reading at the budget: read (and reset).
        w.note(BUDGET, t);
        assert!(w.must_read(BUDGET, t, 2));
    }

    #[test]
    fn the_machine_has_a_cpu() {
        assert!(machine_cpus() >= 1);
    }
}
