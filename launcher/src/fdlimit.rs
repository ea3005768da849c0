//! The server's limit of open files, raised at start: its soft limit up to
//! its hard one. A systemd unit gets 1,024 of 524,288 unless it says
//! otherwise, a login shell often the same, and the server holds
//! descriptors for every run, session and MCP connection, and each egress
//! gate up to 128 more (proxy.rs). It uses no `select`, the one reason for
//! the low soft default. The jails set their own limit (the manifest's
//! `nofile`) before they start, so nothing they run inherits this one.

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};

/// The soft limit before and after, and the hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    pub was: u64,
    pub now: u64,
    pub hard: u64,
}

/// Raises the soft limit of open files to the hard one (to the kernel's
/// ceiling, `fs.nr_open`, when the hard one is unlimited).
pub fn raise() -> nix::Result<Raised> {
    let (was, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let ceiling = if hard == RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(was)
    } else {
        hard
    };
    if ceiling > was {
        setrlimit(Resource::RLIMIT_NOFILE, ceiling, hard)?;
    }
    let (now, _) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(Raised { was, now, hard })
}
