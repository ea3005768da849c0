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
use crate::project::Layers;
use crate::wrapper::Spawner;

/// Where the layers' directory (their mount points only) is made.
const BASE: &str = "/var/tmp";

/// Why a root server keeps the project read-only.
const ROOT: &str = "NIX_SANDBOX_PROJECT_WRITABLE=1 is not served by a root server: its jails \
                    run as uids of their own, which cannot own the copies of the project's \
                    files the layer makes (EOVERFLOW); the project stays read-only (run the \
                    server as the project's owner)";

/// The layers of a project asked writable, or why it stays read-only (one
/// line); `None` when it is not asked writable. `root`: the server runs
/// its jails as uids of their own.
fn layers(writable: bool, project: Option<&OsStr>, root: bool) -> Option<Result<Layers, String>> {
    let project = project.filter(|_| writable)?;
    if root {
        return Some(Err(ROOT.into()));
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

/// The project's layers, or why it stays read-only, decided at start.
pub struct Project {
    /// The sessions' layers, holding the project's when it is writable
    /// here ([`Layers::lower`]).
    pub layers: Option<Arc<Layers>>,
    /// Why a project asked writable stays read-only.
    pub refused: Option<String>,
}

/// [`layers`], said in the log: the layers' directory, or why not.
pub fn start(writable: bool, project: Option<&OsStr>, root: bool) -> Project {
    let mut project = match layers(writable, project, root) {
        Some(Ok(layers)) => {
            tracing::info!(
                "self-test: project: writable through a copy-on-write layer per session, mount \
                 points in {} (an overlay in each jail's namespaces: Linux 5.11 or later)",
                layers.dir().display()
            );
            Project {
                layers: Some(Arc::new(layers)),
                refused: None,
            }
        }
        Some(Err(why)) => {
            tracing::error!("project: {why}");
            Project {
                layers: None,
                refused: Some(why),
            }
        }
        None => Project {
            layers: None,
            refused: None,
        },
    };
    // Sessions keep /workspace and their checkpoints on a layer of their
    // own even when the project is read-only.
    if project.layers.is_none() {
        match Layers::create(Path::new(BASE), None) {
            Ok(layers) => project.layers = Some(Arc::new(layers)),
            Err(e) => tracing::warn!(
                "no directory for the sessions' layers could be made in {BASE} ({e}): sessions \
                 keep no checkpoints and cannot be forked"
            ),
        }
    }
    project
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
    Some(match write_through(env, mount, layers, spawner).await {
        Ok(()) => (
            true,
            format!(
                "project: ok (writable at {mount} through a copy-on-write layer per session, \
                 a tmpfs of its environment's workspace_mb in the jail's namespaces, mount \
                 points in {}: written through one in `{}`, the host's tree unchanged)",
                layers.dir().display(),
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
        assert!(refused.contains("not served by a root server"), "{refused}");
    }

    #[test]
    fn the_programs_quote_the_path() {
        let path = "/pro'ject\"/x";
        assert!(program(Interpreter::Bash, path).starts_with(r#"p='/pro'\''ject"/x'"#));
        assert!(program(Interpreter::Python, path).starts_with(r#"p = "/pro'ject\"/x""#));
        assert!(program(Interpreter::Node, path).contains(r#"const p = "/pro'ject\"/x";"#));
    }
}
