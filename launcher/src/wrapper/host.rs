//! What the host gives the jails, found once at start: cgroups (made ready
//! here), whether the launcher runs as root, whether user namespaces look
//! usable. It decides how each limit holds here:
//!
//! | limit | how |
//! | --- | --- |
//! | memory | cgroup memory limit, else RLIMIT_AS (address space) |
//! | processes | cgroup pids.max, else RLIMIT_NPROC in the jail's user namespace, which does not bind host root |
//! | CPU time, file size, open files | RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE |
//! | /tmp, /workspace | tmpfs size |
//! | time, output | the launcher (deadline, capped streams) |
//!
//! The wrapper applies every limit but the deadline and the output cap
//! (policy, from Nix); the launcher gives it a cgroup when it has one.

use std::sync::Arc;

use super::cgroup::Cgroups;

/// What the host gives the jails.
#[derive(Debug)]
pub struct Host {
    pub cgroups: Option<Cgroups>,
    /// Why there is no cgroup, when there is none.
    pub no_cgroup: Option<String>,
    /// The launcher runs as host root: RLIMIT_NPROC does not bind it.
    pub root: bool,
    /// Why user namespaces look unusable, when they do (the probes tell for sure).
    pub userns_problem: Option<String>,
}

impl Host {
    pub fn detect() -> Self {
        let (cgroups, no_cgroup) = match Cgroups::setup() {
            Ok(c) => (Some(c), None),
            Err(reason) => (None, Some(reason)),
        };
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { nix::libc::geteuid() } == 0;
        Self {
            cgroups,
            no_cgroup,
            root,
            userns_problem: userns_problem(root),
        }
    }

    /// A host with no cgroup, for tests.
    #[cfg(test)]
    pub fn plain(root: bool) -> Self {
        Self {
            cgroups: None,
            no_cgroup: Some("none (test)".into()),
            root,
            userns_problem: None,
        }
    }

    pub fn memory_by_cgroup(&self) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.memory)
    }

    pub fn pids_by_cgroup(&self) -> bool {
        self.cgroups.as_ref().is_some_and(|c| c.pids)
    }

    /// Whether the process limit holds at all.
    pub fn pids_enforced(&self) -> bool {
        self.pids_by_cgroup() || !self.root
    }

    /// The self-test's lines about the host (for `--check` and the log).
    pub fn report(&self) -> Vec<String> {
        let mut lines = vec![match &self.userns_problem {
            None => "user namespaces: available".to_owned(),
            Some(p) => format!("user namespaces: FAIL: {p}"),
        }];
        lines.push(match (&self.cgroups, &self.no_cgroup) {
            (Some(c), _) => format!("cgroups: {}", c.describe()),
            (None, Some(why)) => format!("cgroups: none usable: {why}"),
            (None, None) => "cgroups: none usable".into(),
        });
        let memory = if self.memory_by_cgroup() {
            "memory by cgroup"
        } else {
            "memory by RLIMIT_AS (address space)"
        };
        let pids = if self.pids_by_cgroup() {
            "processes by cgroup pids.max"
        } else if self.root {
            "processes NOT limited (RLIMIT_NPROC does not bind host root and there is no cgroup)"
        } else {
            "processes by RLIMIT_NPROC in the jail's user namespace"
        };
        lines.push(format!(
            "limits: {memory}; {pids}; CPU time, file size, open files by rlimits; \
             /tmp and /workspace by tmpfs size; time and output by the launcher"
        ));
        lines
    }
}

/// Removes what [`Host::detect`] made in the cgroup hierarchies when it is
/// dropped, on the way out, once no run is left.
pub struct Teardown(pub Arc<Host>);

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(cgroups) = &self.0.cgroups {
            cgroups.teardown();
        }
    }
}

/// Why unprivileged user namespaces look unusable (sysctls), if they do.
fn userns_problem(root: bool) -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user.max_user_namespaces is 0".into());
    }
    if !root {
        if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return Some("kernel.unprivileged_userns_clone is 0".into());
        }
        if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
            return Some(
                "kernel.apparmor_restrict_unprivileged_userns is 1 (AppArmor blocks bwrap unless it has a profile)"
                    .into(),
            );
        }
    }
    None
}
