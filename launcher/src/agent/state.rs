//! Where a project's agent state is kept (docs/agents.md): one directory
//! per agent and project, `STATE/nix-sandbox-mcp/agents/NAME/HASH`, STATE
//! being `$XDG_STATE_HOME` or `~/.local/state`, HASH the first 16 hex
//! digits of the SHA-256 of the project's canonical path. It holds
//! `project` (that path, for the person), `home/` (the agent's home in the
//! jail), `layer/` (the project's copy-on-write layer: `upper/` the
//! changes, `work/` the overlay's, `ws/` the jail's /workspace, `merged/`
//! its mount point) and `lock` (one run at a time). Every directory made
//! is mode 0700, and the project's must be the person's own and no one
//! else's to write: the jail's changes are kept there.

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One agent's state for one project.
#[derive(Debug)]
pub struct State {
    pub dir: PathBuf,
    pub project: PathBuf,
}

impl State {
    /// The state of agent `name` for `project` (made when missing);
    /// `lookup` reads the environment.
    pub fn open(
        name: &str,
        project: &Path,
        lookup: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Self, String> {
        let project = project
            .canonicalize()
            .map_err(|e| format!("the project {}: {e}", project.display()))?;
        if !project.is_dir() {
            return Err(format!(
                "the project {} is not a directory",
                project.display()
            ));
        }
        let base = lookup("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| lookup("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .filter(|p| p.is_absolute())
            .ok_or("neither XDG_STATE_HOME nor HOME is set: nowhere to keep the agent's state")?;
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            project.as_os_str().as_encoded_bytes(),
        );
        let hash: String = digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = base.join("nix-sandbox-mcp/agents").join(name).join(hash);
        let made = |dir: &Path| DirBuilder::new().recursive(true).mode(0o700).create(dir);
        made(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        own(&dir)?;
        for sub in ["home", "layer"] {
            made(&dir.join(sub))
                .map_err(|e| format!("cannot make {}/{sub}: {e}", dir.display()))?;
        }
        std::fs::write(dir.join("project"), format!("{}\n", project.display()))
            .map_err(|e| format!("cannot write {}/project: {e}", dir.display()))?;
        Ok(Self { dir, project })
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    pub fn layer(&self) -> PathBuf {
        self.dir.join("layer")
    }

    /// The layer's changes, when a run made them.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("layer/upper")
    }

    /// This project's lock, held while a run or an apply goes on; `Err`
    /// says another holds it.
    pub fn lock(&self) -> Result<nix::fcntl::Flock<File>, String> {
        let path = self.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
            format!(
                "another run of this agent holds the project {} (its lock {})",
                self.project.display(),
                path.display()
            )
        })
    }
}

/// `dir` is a directory (not a symlink) of this user's that no one else
/// may write.
fn own(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory of uid {me}'s that only it may write: remove it or fix its mode",
            dir.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_projects_state_is_private_and_found_again_by_its_path() {
        let t = tempfile::tempdir().unwrap();
        let project = t.path().join("proj");
        std::fs::create_dir(&project).unwrap();
        let state_home = t.path().join("state");
        let lookup =
            |var: &str| (var == "XDG_STATE_HOME").then(|| state_home.clone().into_os_string());
        let state = State::open("codex", &project.join("."), lookup).unwrap();
        assert!(
            state
                .dir
                .starts_with(state_home.join("nix-sandbox-mcp/agents/codex"))
        );
        assert_eq!(state.project, project.canonicalize().unwrap());
        for dir in [&state.dir, &state.home(), &state.layer()] {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
        }
        let again = State::open("codex", &project, lookup).unwrap();
        assert_eq!(again.dir, state.dir);
        let held = state.lock().unwrap();
        assert!(again.lock().unwrap_err().contains("another run"));
        drop(held);
        std::fs::set_permissions(&state.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = State::open("codex", &project, lookup).unwrap_err();
        assert!(refused.contains("only it may write"), "{refused}");
    }
}
