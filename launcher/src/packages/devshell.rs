//! The project's dev shell as the environment `project`
//! (`NIX_SANDBOX_PROJECT_DEVSHELL=1`): built by the dev shell helper
//! mkServer generated (lib/devShellHelper.nix: `HELPER FLAKE OUT`, a pure
//! evaluation of the project's flake and a sandbox from its dev shell)
//! through the same machinery as packages on demand: the same slots, the
//! same cache of GC roots and its bound, the same failure memory.
//!
//! Its cache key is the flake's directory, the helper (another server
//! builds with another helper) and a hash of `flake.nix` and `flake.lock`
//! as they are when a call asks: a call after either changed builds the
//! environment again; a session keeps the environment it started with.

use std::path::Path;
use std::sync::Arc;

use super::{ComposeError, Composer, Input, Job, Key};
use crate::catalog::Env;

impl Composer {
    /// The `project` environment of `placeholder` (the catalog's, with its
    /// dev shell helper) built from the flake in `flake`: from memory,
    /// from the disk cache, or by the helper now. `started` is called once
    /// when a build starts (not on a hit).
    pub async fn dev_shell(
        &self,
        placeholder: &Arc<Env>,
        flake: &Path,
        started: impl FnOnce(),
    ) -> Result<Arc<Env>, ComposeError> {
        let Some(dev_shell) = placeholder.dev_shell.as_ref() else {
            return Err(ComposeError::Failed(format!(
                "{} is not the project's dev shell",
                placeholder.name
            )));
        };
        let helper = dev_shell.helper.first().map_or("", String::as_str);
        let key: Key = (
            placeholder.name.clone(),
            fingerprint(flake, helper)
                .map_err(|e| ComposeError::Failed(format!("{}: {e}", flake.display())))?,
            Vec::new(),
        );
        let job = Job {
            key,
            helper: &dev_shell.helper,
            input: Input::Flake(flake),
            timeout_s: dev_shell.timeout_s,
        };
        self.build(job, placeholder, started).await
    }
}

/// What the project's environment is cached by: the flake's directory,
/// the helper, and the FNV-1a of `flake.nix` and `flake.lock` (absent is
/// a value of its own). A flake.nix that cannot be read is the error.
pub fn fingerprint(flake: &Path, helper: &str) -> Result<String, String> {
    let nix = std::fs::read(flake.join("flake.nix")).map_err(|e| format!("flake.nix: {e}"))?;
    let lock = match std::fs::read(flake.join("flake.lock")) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("flake.lock: {e}")),
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts = [Some(nix.as_slice()), lock.as_deref()];
    for part in parts {
        let bytes = part.map_or(&b"(absent)"[..], |p| p);
        for byte in bytes.iter().copied().chain([0, 0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(format!("{}|{helper}|{hash:016x}", flake.display()))
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn the_fingerprint_follows_flake_nix_and_flake_lock() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            fingerprint(dir.path(), "h")
                .unwrap_err()
                .starts_with("flake.nix: ")
        );
        std::fs::write(dir.path().join("flake.nix"), "{ outputs = _: { }; }").unwrap();
        let first = fingerprint(dir.path(), "h").unwrap();
        assert_eq!(fingerprint(dir.path(), "h").unwrap(), first);
        assert_ne!(fingerprint(dir.path(), "other").unwrap(), first);
        std::fs::write(dir.path().join("flake.lock"), "{}").unwrap();
        let locked = fingerprint(dir.path(), "h").unwrap();
        assert_ne!(locked, first);
        std::fs::write(dir.path().join("flake.lock"), "{ }").unwrap();
        assert_ne!(fingerprint(dir.path(), "h").unwrap(), locked);
        std::fs::write(dir.path().join("flake.nix"), "{ outputs = _: { x = 1; }; }").unwrap();
        assert_ne!(fingerprint(dir.path(), "h").unwrap(), locked);
    }
}
