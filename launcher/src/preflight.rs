//! The configuration checked against this host before the first call:
//! each problem is one line naming the setting, what is wrong and the fix.
//! A fatal one would make every call fail (no jail can start, or every
//! wrapper would refuse), so the server stops at start-up with it (an MCP
//! client shows the server's stderr); the others are logged and the server
//! goes on. `--check` prints every one as a FAIL line.

use std::ffi::OsString;
use std::fmt;
use std::path::{Component, Path};

use nix::unistd::{AccessFlags, access};

use crate::config::Options;
use crate::settings;
use crate::wrapper::host::Host;

/// One configuration problem, shown as `SETTING: VALUE what is wrong; the
/// fix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The setting (`PROJECT_DIR`) or host facility (`user namespaces`).
    pub setting: &'static str,
    /// What is wrong and the fix, in one line.
    pub message: String,
    /// Every call would fail: the server does not start.
    pub fatal: bool,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.setting, self.message)
    }
}

/// The paths the jail itself uses (the wrappers' layout, contract 2): the
/// project may be mounted neither on them, nor inside them, nor above them.
pub const JAIL_PATHS: [&str; 9] = [
    "/nix",
    "/workspace",
    "/tmp",
    "/home/sandbox",
    "/proc",
    "/dev",
    "/etc",
    "/bin",
    "/usr/bin",
];

/// Every problem of `opts` on `host`.
pub fn check(opts: &Options, host: &Host) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(problem) = &host.userns_problem {
        problems.push(Problem {
            setting: "user namespaces",
            message: problem.clone(),
            fatal: true,
        });
    }
    if let Some(dir) = &opts.project_dir {
        problems.extend(project_dir_problem(dir, host));
        let mount = opts
            .project_mount
            .as_deref()
            .unwrap_or(settings::PROJECT_MOUNT.text());
        if let Err(why) = check_mount(mount) {
            problems.push(Problem {
                setting: settings::PROJECT_MOUNT.var_name(),
                message: format!(
                    "{mount} {why}; set it to a new absolute path such as {} \
                     (or unset it)",
                    settings::PROJECT_MOUNT.text()
                ),
                fatal: true,
            });
        }
    }
    if let Some(dir) = &opts.output_dir {
        problems.extend(output_dir_problem(dir));
    }
    problems
}

/// A `PROJECT_DIR` that is not an existing directory stops every wrapper
/// (fatal); one the jails' users (this server's, or as root uids of their
/// own, "others" to every file) cannot read would give every run an
/// unreadable project.
fn project_dir_problem(dir: &OsString, host: &Host) -> Option<Problem> {
    let name = settings::PROJECT_DIR.var_name();
    let shown = Path::new(dir).display();
    let problem = |message: String, fatal| Problem {
        setting: name,
        message,
        fatal,
    };
    match std::fs::metadata(dir) {
        Err(e) => Some(problem(
            format!(
                "{shown} cannot be used ({e}); it must be an existing directory: \
                 create it, fix the path, or unset PROJECT_DIR"
            ),
            true,
        )),
        Ok(meta) if !meta.is_dir() => Some(problem(
            format!(
                "{shown} is not a directory; set it to the project's directory \
                 or unset it"
            ),
            true,
        )),
        Ok(_) if host.jail_users.is_some() => {
            let users = host.jail_users.as_ref()?;
            let e = users
                .may_access(Path::new(dir), AccessFlags::R_OK | AccessFlags::X_OK)
                .err()?;
            let (first, last) = users.range();
            Some(problem(
                format!(
                    "{shown} is not readable by the jails' uids ({first}-{last}, each jail one \
                     of its own, when the server runs as root: {e}), so code could not read the \
                     project; make it and every directory above it readable and searchable by \
                     others (chmod o+rx), or run the server as a user who can read it"
                ),
                false,
            ))
        }
        Ok(_) => match access(Path::new(dir), AccessFlags::R_OK | AccessFlags::X_OK) {
            Ok(()) => None,
            Err(e) => Some(problem(
                format!(
                    "{shown} is not readable by this server's user (uid {}: {e}), \
                     so code could not read the project; make it readable (chmod a+rX) or \
                     run the server as a user who can read it",
                    // SAFETY: geteuid has no preconditions and cannot fail.
                    unsafe { nix::libc::geteuid() }
                ),
                false,
            )),
        },
    }
}

/// Why `mount` cannot be where the jail sees the project, if it cannot.
pub fn check_mount(mount: &str) -> Result<(), String> {
    let path = Path::new(mount);
    if !path.is_absolute() {
        return Err("is not an absolute path".into());
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        || mount.contains("//")
    {
        return Err("is not a plain path (no `.`, `..` or `//`)".into());
    }
    let path = Path::new(mount.trim_end_matches('/'));
    if path.as_os_str().is_empty() {
        return Err("is the jail's root".into());
    }
    for used in JAIL_PATHS {
        let used = Path::new(used);
        if path == used || path.starts_with(used) || used.starts_with(path) {
            return Err(format!(
                "would cover or hide {}, which the jail itself uses (it uses {})",
                used.display(),
                JAIL_PATHS.join(", ")
            ));
        }
    }
    Ok(())
}

/// The mirror's directory must be one this user can make and write; it is
/// not fatal (outputs still reach the model), but a person would look for
/// files that never come.
fn output_dir_problem(dir: &Path) -> Option<Problem> {
    let problem = |what: String| Problem {
        setting: settings::OUTPUT_DIR.var_name(),
        message: format!(
            "{} {what}, so no output would be mirrored there; set it to \
             a directory this server's user can write (it is made if missing), or unset it",
            dir.display()
        ),
        fatal: false,
    };
    writable_dir(dir).err().map(problem)
}

/// `dir` is a directory this process can write, or could make: the
/// nearest existing one of it and its parents is a writable directory.
fn writable_dir(dir: &Path) -> Result<(), String> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(meta) if !meta.is_dir() => {
                return Err(format!(
                    "cannot be made: {} is not a directory",
                    at.display()
                ));
            }
            Ok(_) => {
                return access(at, AccessFlags::W_OK | AccessFlags::X_OK).map_err(|e| {
                    if at == dir {
                        format!("is not writable ({e})")
                    } else {
                        format!("cannot be made: {} is not writable ({e})", at.display())
                    }
                });
            }
            Err(_) => match at.parent() {
                Some(parent) => at = parent,
                None => return Err("cannot be made".into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_on_or_around_the_jails_own_paths_are_refused() {
        for good in [
            "/project",
            "/src",
            "/data/project",
            "/home/project",
            "/usr/src/p",
        ] {
            assert_eq!(check_mount(good), Ok(()), "{good}");
        }
        for bad in [
            "/workspace",
            "/workspace/",
            "/workspace/in",
            "/nix/store",
            "/nix",
            "/",
            "/home",
            "/usr",
            "/tmp/x",
            "project",
            "/a/../nix",
            "/a//b",
        ] {
            assert!(check_mount(bad).is_err(), "{bad}");
        }
        assert!(
            check_mount("/nix/store")
                .unwrap_err()
                .contains("would cover or hide /nix")
        );
    }

    #[test]
    fn a_writable_dir_is_one_that_exists_writable_or_can_be_made() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(writable_dir(tmp.path()), Ok(()));
        assert_eq!(writable_dir(&tmp.path().join("a/b")), Ok(()));
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = writable_dir(&file.join("sub")).unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
    }
}
