//! Whether a cgroup v2 is delegated to this launcher, found for real, and a
//! delegated one asked of systemd when it is not.
//!
//! A cgroup is delegated when its manager handed its subtree over: then the
//! launcher may make child cgroups in it and enable controllers for them.
//! Write access alone does not say so: under a systemd user manager every
//! cgroup of the user's (its scopes without `Delegate=yes` included) is
//! owned by the user, and root may write anywhere; a child made in a cgroup
//! systemd manages is one systemd does not expect. So it is delegated when:
//!
//! - systemd marked it: the `trusted.delegate` or `user.delegate` extended
//!   attribute is `1` (systemd sets them on units with `Delegate=yes`; an
//!   unprivileged process can read only the `user.` one), or
//! - its owner is this (non-root) user and its parent's is not: the system
//!   manager hands a `Delegate=yes` unit with `User=` (or `DynamicUser=`)
//!   over by giving it its cgroup, and only then;
//! - it is the cgroup of a unit (its name ends in `.scope` or `.service`)
//!   whose manager says it has `Delegate=yes` (`systemctl show`; a user
//!   manager marks its scopes with no attribute);
//!
//! and its `cgroup.procs` and `cgroup.subtree_control` are writable by this
//! user. Anything else is not delegated, and the reason says which it is.
//!
//! When the launcher's own cgroup is not delegated and a systemd manager is
//! reachable (the user's, or the system's as root), it asks that manager
//! for a transient scope holding itself with `Delegate=yes`
//! (`StartTransientUnit` through `busctl`, which every systemd has), as
//! rootless container engines do, and looks again where it then is.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the launcher waits for systemd to move it into the new scope.
const MOVE_WAIT: Duration = Duration::from_secs(3);

/// What decides whether a cgroup is delegated, read from its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `cgroup.procs` and `cgroup.subtree_control` are writable by this
    /// process' user.
    pub writable: bool,
    /// The value of `trusted.delegate` or `user.delegate`, when one is set.
    pub marked: Option<String>,
    /// The owner of its `cgroup.procs`.
    pub owner: u32,
    /// The owner of its parent's `cgroup.procs` (`None` at the root).
    pub parent_owner: Option<u32>,
    /// The `Delegate` property of the unit whose cgroup it is, as its
    /// manager tells it (`None`: no unit's own cgroup, or no answer).
    pub unit_delegate: Option<bool>,
    /// This process' effective uid.
    pub uid: u32,
}

impl Facts {
    /// Reads the facts of the cgroup at `dir`, `path` in the v2 hierarchy.
    pub fn read(dir: &Path, path: &str) -> Result<Self, String> {
        let procs = dir.join("cgroup.procs");
        let owner = std::fs::metadata(&procs)
            .map_err(|e| format!("{}: {e}", procs.display()))?
            .uid();
        let parent_owner = dir
            .parent()
            .and_then(|p| std::fs::metadata(p.join("cgroup.procs")).ok())
            .map(|m| m.uid());
        let writable = ["cgroup.procs", "cgroup.subtree_control"]
            .iter()
            .all(|f| nix::unistd::access(&dir.join(f), nix::unistd::AccessFlags::W_OK).is_ok());
        let marked = ["trusted.delegate", "user.delegate"]
            .iter()
            .find_map(|name| xattr(dir, name));
        Ok(Self {
            writable,
            marked,
            owner,
            parent_owner,
            unit_delegate: unit_delegate(path),
            uid: euid(),
        })
    }

    /// How the cgroup is known to be delegated, or why it is not.
    pub fn judge(&self) -> Result<&'static str, String> {
        if !self.writable {
            return Err(
                "its cgroup.procs and cgroup.subtree_control are not writable by this user".into(),
            );
        }
        if let Some(value) = &self.marked {
            return if value.trim() == "1" {
                Ok("marked delegated by systemd")
            } else {
                Err(format!("its delegate attribute is {value:?}, not 1"))
            };
        }
        if self.uid != 0
            && self.owner == self.uid
            && self.parent_owner.is_some_and(|p| p != self.uid)
        {
            return Ok("handed to this user by its manager");
        }
        match self.unit_delegate {
            Some(true) => Ok("its unit has Delegate=yes"),
            Some(false) => Err("not delegated: its unit has Delegate=no".into()),
            None => Err(
                "not delegated: no delegate attribute, owned as its parent is, and \
                 not the cgroup of a unit with Delegate=yes"
                    .into(),
            ),
        }
    }
}

/// The `Delegate` property of the unit whose own cgroup is `path` (its
/// last component a unit name), from its manager: the user's for a cgroup
/// under a `user@UID.service`, else the system's. `None` when `path` is no
/// unit's own cgroup or the manager does not answer.
fn unit_delegate(path: &str) -> Option<bool> {
    let unit = path.rsplit('/').next()?;
    if !(unit.ends_with(".scope") || unit.ends_with(".service")) {
        return None;
    }
    let user = path
        .split('/')
        .any(|p| p.starts_with("user@") && p.ends_with(".service"));
    let systemctl = find_program("systemctl")?;
    let mut cmd = Command::new(systemctl);
    if user {
        cmd.arg("--user");
    }
    let out = cmd
        .args(["show", "--property=Delegate", "--value", "--", unit])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        _ if !out.status.success() => None,
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

/// The value of the extended attribute `name` of `path`, if it has one.
fn xattr(path: &Path, name: &str) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let name = std::ffi::CString::new(name).ok()?;
    let mut value = [0u8; 64];
    // SAFETY: two NUL-terminated strings and a buffer of the length given,
    // which getxattr writes at most.
    let n = unsafe {
        nix::libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    let n = usize::try_from(n).ok()?;
    Some(String::from_utf8_lossy(&value[..n]).into_owned())
}

/// Asks the systemd manager this launcher can reach (the user's; the
/// system's as root) for a transient scope with `Delegate=yes` holding this
/// process, and waits until the launcher is in it. Its cgroup (the path in
/// the v2 hierarchy), or why there is none. Must run while the process has
/// one thread (it moves the whole process).
pub fn ask_systemd(cgroup_of_self: impl Fn() -> Option<String>) -> Result<String, String> {
    // How systemd's own tools tell that it runs (sd_booted).
    if !Path::new("/run/systemd/system").is_dir() {
        return Err("systemd does not run here, so no scope can be asked for".into());
    }
    let busctl = find_program("busctl").ok_or("busctl (systemd) is not on PATH")?;
    let pid = std::process::id();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let unit = format!("nix-sandbox-mcp-{pid}-{stamp:08x}.scope");
    let root = euid() == 0;
    let manager = if root { "the system's" } else { "the user's" };
    // A run killed at its memory limit must not stop the scope (systemd's
    // OOMPolicy=stop); a manager older than OOMPolicy for scopes (253) is
    // asked again without it.
    let asked = start_scope(&busctl, root, &unit, pid, true)
        .or_else(|_| start_scope(&busctl, root, &unit, pid, false))
        .map_err(|said| {
            format!("{manager} systemd manager gave no delegated scope: busctl: {said}")
        })?;
    tracing::debug!(
        unit,
        job = asked.trim(),
        "asked systemd for a delegated scope"
    );
    let started = Instant::now();
    loop {
        if let Some(path) = cgroup_of_self().filter(|p| p.ends_with(&format!("/{unit}"))) {
            return Ok(path);
        }
        if started.elapsed() > MOVE_WAIT {
            return Err(format!(
                "{manager} systemd manager made {unit} but did not move the server into it \
                 within {} s",
                MOVE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// This process' effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { nix::libc::geteuid() }
}

/// StartTransientUnit of a scope `unit` holding `pid`, with Delegate=yes
/// (and OOMPolicy=continue when `oom_continue`); busctl's answer, or what
/// it said on failure.
fn start_scope(
    busctl: &Path,
    root: bool,
    unit: &str,
    pid: u32,
    oom_continue: bool,
) -> Result<String, String> {
    let mut cmd = Command::new(busctl);
    if !root {
        cmd.arg("--user");
    }
    let pid = pid.to_string();
    let mut properties = vec![
        "PIDs",
        "au",
        "1",
        &pid,
        "Delegate",
        "b",
        "true",
        "Description",
        "s",
        "nix-sandbox-mcp: the server and its jails' cgroups",
    ];
    if oom_continue {
        properties.extend(["OOMPolicy", "s", "continue"]);
    }
    let count = if oom_continue { "4" } else { "3" };
    cmd.args([
        "--timeout=5",
        "call",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        unit,
        "fail",
        count,
    ])
    .args(&properties)
    .arg("0");
    // Never the MCP channel: busctl's answer is captured.
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run busctl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// `name` in PATH, or where systemd's tools are on NixOS and elsewhere.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/run/current-system/sw/bin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok())
}

#[cfg(test)]
#[path = "delegation_tests.rs"]
mod tests;
