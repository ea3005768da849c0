//! What the server does with a project asked writable
//! (`NIX_SANDBOX_PROJECT_WRITABLE=1`), decided once at start ([`start`]),
//! and `--check`'s `project:` line ([`check`]): read-only, a layer per
//! session (shown by writing through one in a jail of the first
//! environment whose wrappers mount it, the host's tree left as it was), or
//! why not on this host, in one line.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use crate::catalog::{Catalog, Env, Interpreter};
use crate::probe;
use crate::project::{Layers, pool, share};
use crate::wrapper::{Spawner, idmap};

/// Where the layers' directory (their mount points only) is made.
const BASE: &str = "/var/tmp";

/// Why a root server keeps the project read-only: `why`, the host's
/// refusal of an idmapped mount.
fn root_refusal(why: &str) -> String {
    format!(
        "NIX_SANDBOX_PROJECT_WRITABLE=1 is not served by this root server: its jails run as \
         uids of their own, which can be given the project's files only through an idmapped \
         mount of the project, and this host makes none ({why}); the project stays read-only \
         (run the server as the project's owner, or on Linux 5.12 or later with the project \
         on a file system that takes idmapped mounts)"
    )
}

/// Whether this root server can give a jail's uid the project's files: an
/// idmapped mount of `project` for a stand-in uid, made and dropped.
fn idmap_works(project: &Path) -> Result<(), String> {
    let nobody = crate::wrapper::jailuser::Ids {
        uid: nix::unistd::Uid::from_raw(65534),
        gid: nix::unistd::Gid::from_raw(65534),
    };
    idmap::owner(project)
        .and_then(|owner| idmap::project_mount(project, owner, nobody))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What a root server's lines add: how its jails' uids get the files.
const OWNER: &str = "; each jail's uid has the project owner's files (the owner of \
                     PROJECT_DIR) through a read-only idmapped mount under its layer";

/// The layers of a project asked writable, or why it stays read-only (one
/// line); `None` when it is not asked writable. `root`: the server runs
/// its jails as uids of their own, each given the project owner's files
/// through an idmapped mount, which the host must make.
fn layers(writable: bool, project: Option<&OsStr>, root: bool) -> Option<Result<Layers, String>> {
    let project = project.filter(|_| writable)?;
    if root && let Err(why) = idmap_works(Path::new(project)) {
        return Some(Err(root_refusal(&why)));
    }
    Some(
        Layers::create(Path::new(BASE), Some(Path::new(project))).map_err(|e| {
            format!(
                "NIX_SANDBOX_PROJECT_WRITABLE=1, but no directory for the layers could be made \
                 in {BASE} ({e}): the project stays read-only"
            )
        }),
    )
}

/// Whether this root server can start a session from a checkpoint at the
/// cost of a mount: its jails each run as a uid of their own, so each fork
/// takes its checkpoint layers through idmapped mounts, a layer already
/// idmapped for its source idmapped anew (share.rs). Tried on a scratch
/// tmpfs in a directory of `layers`.
fn idmapped_forks(layers: &Layers) -> Result<(), String> {
    use std::os::fd::AsFd;
    let first = idmap::map_namespace((0, 0), (65534, 65534)).map_err(|e| e.to_string())?;
    let second = idmap::map_namespace((0, 0), (65533, 65533)).map_err(|e| e.to_string())?;
    let scratch = layers.dir().join("forks");
    std::fs::create_dir(&scratch).map_err(|e| e.to_string())?;
    let path = std::ffi::CString::new(scratch.clone().into_os_string().into_encoded_bytes())
        .map_err(|e| e.to_string());
    let tried = path.and_then(|path| {
        share::idmapped_clones_work(&path, first.as_fd(), second.as_fd(), 65533).map_err(|e| {
            format!("an idmapped mount of a tmpfs, idmapped anew by open_tree_attr: {e}")
        })
    });
    let _ = std::fs::remove_dir(&scratch);
    tried
}

/// `layers` deciding how a session started from a checkpoint gets its
/// files, and the line saying so (`forks: ...`).
fn forks(layers: Layers, root: bool) -> (Layers, String) {
    const MOUNTED: &str = "forks: a session started from a checkpoint (NIX_SANDBOX_MAX_CHECKPOINTS \
                           1 or more) is mounted over it, whatever its size";
    if !share::has_mount_setattr() {
        return (
            layers.copying_forks(),
            "forks: copied: a session started from a checkpoint gets a copy of its files \
             (time and memory grow with their size), since this kernel has no mount_setattr \
             to make a checkpoint's mount read-only (Linux 5.12 or later has it)"
                .to_owned(),
        );
    }
    if !root {
        return (
            layers,
            format!("{MOUNTED} (the jails share the server's uid)"),
        );
    }
    match idmapped_forks(&layers) {
        Ok(()) => (
            layers,
            format!(
                "{MOUNTED}: each of its layers idmapped from its owner's uid to the new jail's \
                 (a root server's jails each have a uid of their own)"
            ),
        ),
        Err(why) => (
            layers.copying_forks(),
            format!(
                "forks: copied: a session started from a checkpoint gets a copy of its files \
                 (time and memory grow with their size), since this root server's jails each \
                 have a uid of their own and this host cannot give a fork its layers through \
                 idmapped mounts ({why}; Linux 6.15 or later does)"
            ),
        ),
    }
}

/// The project's layers, or why it stays read-only, decided at start.
pub struct Project {
    /// The sessions' layers, holding the project's when it is writable
    /// here ([`Layers::lower`]).
    pub layers: Option<Arc<Layers>>,
    /// Why a project asked writable stays read-only.
    pub refused: Option<String>,
    /// How a session started from a checkpoint gets its files: the
    /// `forks:` line ([`forks`]), when there are layers.
    pub forks: Option<String>,
}

/// [`layers`], said in the log: the layers' directory, or why not; the
/// layers `bytes` at most in all (`NIX_SANDBOX_LAYERS_MB`; `None`: half
/// of MemTotal).
pub fn start(writable: bool, project: Option<&OsStr>, root: bool, bytes: Option<u64>) -> Project {
    let bytes = bytes.or_else(pool::default_bytes);
    let (layers, refused) = match layers(writable, project, root) {
        Some(Ok(layers)) => {
            let layers = bound(layers, bytes);
            tracing::info!(
                "self-test: project: writable through a copy-on-write layer per session, mount \
                 points in {} (an overlay in each jail's namespaces: Linux 5.11 or later){}",
                layers.dir().display(),
                if root { OWNER } else { "" }
            );
            (Some(layers), None)
        }
        Some(Err(why)) => {
            tracing::error!("project: {why}");
            (None, Some(why))
        }
        None => (None, None),
    };
    // Sessions keep /workspace and their checkpoints on a layer of their
    // own even when the project is read-only.
    let layers = layers.or_else(|| match Layers::create(Path::new(BASE), None) {
        Ok(layers) => Some(bound(layers, bytes)),
        Err(e) => {
            tracing::warn!(
                "no directory for the sessions' layers could be made in {BASE} ({e}): sessions \
                 keep no checkpoints and cannot be forked"
            );
            None
        }
    });
    let (layers, forks) = match layers {
        Some(layers) => {
            let (layers, line) = forks(layers, root);
            tracing::info!("self-test: {}", layers_line(&layers, None));
            tracing::info!("self-test: {line}");
            (Some(Arc::new(layers)), Some(line))
        }
        None => (None, None),
    };
    Project {
        layers,
        refused,
        forks,
    }
}

/// `layers` bounded by `bytes` when known (else said: unbounded).
fn bound(layers: Layers, bytes: Option<u64>) -> Layers {
    match bytes {
        Some(bytes) => layers.bounded(bytes),
        None => {
            tracing::warn!(
                "no MemTotal in /proc/meminfo: the session layers are bounded only by \
                 NIX_SANDBOX_LAYERS_MB, which is not set"
            );
            layers
        }
    }
}

/// The line saying the bound on all session layers; with `largest` (the
/// largest `workspace_mb` of an environment with sessions, and its name),
/// whether a session of it can start at all.
fn layers_line(layers: &Layers, largest: Option<(u64, &str)>) -> String {
    let total = layers.pool().total();
    let bound = match total {
        u64::MAX => "no bound (MemTotal unknown)".to_owned(),
        total => format!("at most {} MiB", total >> 20),
    };
    let mut line = format!(
        "layers: {bound} for all session layers together (NIX_SANDBOX_LAYERS_MB, --layers-mb; \
         default MemTotal), each a tmpfs of its environment's workspace_mb reserved \
         while its jail lives"
    );
    if let Some((mb, name)) = largest {
        line.push_str(&format!("; the largest here: `{name}`'s {mb} MiB"));
    }
    line
}

/// `--check`'s line on the bound on all session layers, and whether every
/// environment with sessions has a layer that fits in it.
pub fn check_layers(project: &Project, catalog: &Catalog) -> Option<(bool, String)> {
    let layers = project.layers.as_ref()?;
    let largest = catalog
        .envs
        .values()
        .filter(|env| env.session_layer)
        .map(|env| (env.limits.workspace_mb.get(), env.name.as_str()))
        .max();
    let line = layers_line(layers, largest);
    Some(match largest {
        Some((mb, name)) if mb.saturating_mul(1 << 20) > layers.pool().total() => (
            false,
            format!(
                "layers: FAIL: `{name}`'s workspace_mb ({mb} MiB) is over the bound on all \
                 session layers ({} MiB): every session of it would be refused (layers_full); \
                 raise NIX_SANDBOX_LAYERS_MB",
                layers.pool().total() >> 20
            ),
        ),
        _ => (true, line),
    })
}

/// `--check`'s line for the project mounted at `mount` (none without a
/// project), and whether it holds: `project` is what [`start`] decided.
pub async fn check(
    mount: Option<&str>,
    project: &Project,
    catalog: &Catalog,
    spawner: &Spawner,
) -> Option<(bool, String)> {
    let mount = mount?;
    if let Some(why) = &project.refused {
        return Some((false, format!("project: FAIL: {why}")));
    }
    let Some(layers) = project.layers.as_ref().filter(|l| l.lower().is_some()) else {
        return Some((
            true,
            format!(
                "project: read-only at {mount} (NIX_SANDBOX_PROJECT_WRITABLE=1: writable \
                 through a copy-on-write layer per session)"
            ),
        ));
    };
    let Some(env) = catalog.envs.values().find(|env| env.project_layer) else {
        return Some((
            false,
            "project: FAIL: no environment's wrappers mount a project layer (built before \
             the writable project): rebuild them"
                .into(),
        ));
    };
    let root = spawner.host.jail_users.is_some();
    Some(match write_through(env, mount, layers, spawner).await {
        Ok(()) => (
            true,
            format!(
                "project: ok (writable at {mount} through a copy-on-write layer per session, \
                 a tmpfs of its environment's workspace_mb in the jail's namespaces, mount \
                 points in {}{}: written through one in `{}`, the host's tree unchanged)",
                layers.dir().display(),
                if root { OWNER } else { "" },
                env.name
            ),
        ),
        Err(why) => (
            false,
            format!(
                "project: FAIL: a session's layer does not work here ({why}): every session \
                 would fail to start; unset NIX_SANDBOX_PROJECT_WRITABLE"
            ),
        ),
    })
}

/// Runs `env`'s run wrapper over a fresh layer with a program that writes
/// a file of a new name in the project and reads it back; the host's
/// project must not have it afterwards.
async fn write_through(
    env: &Env,
    mount: &str,
    layers: &Layers,
    spawner: &Spawner,
) -> Result<(), String> {
    let layer = layers
        .layer(true)
        .map_err(|e| format!("cannot make a layer: {e}"))?;
    let name = format!(".nix-sandbox-mcp-check.{}", std::process::id());
    let path = format!("{}/{name}", mount.trim_end_matches('/'));
    let code = program(env.interpreter, &path);
    let layered = Spawner {
        env: Arc::new(spawner.env.with_all(layer.vars())),
        ..spawner.clone()
    };
    let outcome = probe::run_program(env, &layered, &code).await?;
    let stdout = outcome.stdout.render();
    if stdout.trim() != "layer ok" {
        return Err(format!(
            "the program wrote no file there: {}",
            stdout.trim()
        ));
    }
    if layers
        .lower()
        .is_some_and(|p| p.join(&name).symlink_metadata().is_ok())
    {
        return Err(format!("the write reached the host's project: {name}"));
    }
    Ok(())
}

/// The program, in `interpreter`'s language, that writes `path` and prints
/// `layer ok` when it reads back what it wrote.
fn program(interpreter: Interpreter, path: &str) -> String {
    // A JSON string is a Python and a JavaScript string literal.
    let quoted = serde_json::Value::from(path).to_string();
    match interpreter {
        Interpreter::Python => format!(
            "p = {quoted}\nopen(p, 'w').write('x')\nprint('layer ok' if open(p).read() == 'x' else 'not written')\n"
        ),
        // A program environment's is run in bash, through its `shell`
        // (probe::run_program).
        Interpreter::Bash | Interpreter::Program => {
            let quoted = path.replace('\'', r"'\''");
            format!(
                "p='{quoted}'; echo x >\"$p\" && read -r v <\"$p\" && [ \"$v\" = x ] && echo 'layer ok'\n"
            )
        }
        Interpreter::Node => format!(
            "const fs = require('fs'); const p = {quoted}; fs.writeFileSync(p, 'x'); \
             console.log(fs.readFileSync(p, 'utf8') === 'x' ? 'layer ok' : 'not written');\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_server_and_an_unasked_project_make_no_layers() {
        assert!(layers(false, Some(OsStr::new("/p")), false).is_none());
        assert!(layers(true, None, false).is_none());
        let refused = layers(true, Some(OsStr::new("/p")), true)
            .and_then(Result::err)
            .unwrap_or_default();
        assert!(
            refused.contains("not served by this root server"),
            "{refused}"
        );
        assert!(refused.contains("idmapped mount"), "{refused}");
    }

    #[test]
    fn a_root_server_refuses_a_project_the_host_cannot_idmap() {
        // procfs takes no idmapped mount (and a user makes none at all):
        // the refusal says the host's reason.
        let refused = layers(true, Some(OsStr::new("/proc/self")), true)
            .and_then(Result::err)
            .unwrap_or_default();
        assert!(
            refused
                .contains("through an idmapped mount of the project, and this host makes none (")
                && (refused.contains("mount_setattr")
                    || refused.contains("open_tree")
                    || !nix::unistd::geteuid().is_root()
                        && refused.contains("cannot write the idmap's user namespace")),
            "{refused}"
        );
    }

    #[test]
    fn the_programs_quote_the_path() {
        let path = "/pro'ject\"/x";
        assert!(program(Interpreter::Bash, path).starts_with(r#"p='/pro'\''ject"/x'"#));
        assert!(program(Interpreter::Python, path).starts_with(r#"p = "/pro'ject\"/x""#));
        assert!(program(Interpreter::Node, path).contains(r#"const p = "/pro'ject\"/x";"#));
    }
}
