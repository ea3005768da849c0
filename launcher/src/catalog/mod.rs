//! The catalog: the environments the server offers, read from the manifests
//! Nix wrote (docs/contracts.md, contract 1). A problem names the file and the
//! field (`environments.python.limits.timeout_s`).
//!
//! A bad file does not stop the server: its problems are collected, its
//! environments are left out, and the other files are served; a bad
//! environment is left out alone. Manifests and servers of different ages
//! meet: a field this server does not know is a note naming it and the
//! environment is served (it is a feature this server does not use),
//! except in `limits`, where it is a limit this server cannot enforce, so
//! that environment is refused ("upgrade the server"); and the fields a
//! newer server added may be absent from an older sandbox's manifest
//! ([`Limits`], [`Env`]).

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU64;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::egress::policy::{Network, Policy};

pub mod limits;
pub mod names;
pub mod profiles;

pub use limits::Limits;
use names::Allow;
pub use profiles::Profile;

/// What the `interpreter` field names (what a session agent drives).
/// `program`: the code is one source file of a compiled language, which
/// the `run` wrapper builds and runs (lib/programRunner.nix); the probe
/// runs through the environment's `shell` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpreter {
    Python,
    Bash,
    Node,
    Program,
}

/// An environment's policy, as mkServer wrote it (lib/packagesOnDemand.nix).
/// Its `build` (whether Nix may build what the binary cache does not have)
/// is the helper's to apply: it is in the helper's text.
#[derive(Debug, Clone, Deserialize)]
pub struct OnDemand {
    /// The compose helper's argv; the launcher appends ENV, REQUEST, OUT.
    pub compose: Vec<String>,
    pub allow: Allow,
    /// How long a composition may take (and wait for a slot).
    pub timeout_s: NonZeroU64,
}

/// The project's dev shell as an environment, as mkServer wrote it
/// (lib/projectDevShell.nix, the manifest's top-level `project_dev_shell`):
/// the helper that builds it from the project's flake, how long that may
/// take, and the `project` environment's fields known before it is built
/// (description, limits, network), which the instructions show.
#[derive(Debug, Clone, Deserialize)]
pub struct DevShell {
    /// The dev shell helper's argv; the launcher appends FLAKE, OUT.
    pub helper: Vec<String>,
    pub timeout_s: NonZeroU64,
    pub environment: Value,
}

/// The name of the environment the project's dev shell is served as.
pub const PROJECT_ENV: &str = "project";

impl DevShell {
    /// The `project` environment as offered before it is built: its
    /// manifest fields, its wrappers the helper (never run as one: a call
    /// builds the environment first, packages/devshell.rs).
    pub fn placeholder(self: &Arc<Self>, manifest: &Path) -> Result<Env, String> {
        let mut fields = self.environment.clone();
        let Some(object) = fields.as_object_mut() else {
            return Err("project_dev_shell.environment: expected a JSON object".into());
        };
        let helper = self.helper.first().cloned().unwrap_or_default();
        object.insert("interpreter".into(), "bash".into());
        object.insert("run".into(), serde_json::json!([helper]));
        object.insert("session".into(), serde_json::json!([helper]));
        object.insert("store_path".into(), helper.clone().into());
        let mut env: Env = serde_path_to_error::deserialize(fields).map_err(|e| {
            let (field, message) = describe(&e, "project_dev_shell.environment");
            format!("{field}: {message}")
        })?;
        env.name = PROJECT_ENV.into();
        env.manifest = manifest.to_owned();
        env.dev_shell = Some(Arc::clone(self));
        Ok(env)
    }
}

/// One environment as the manifest declares it. Besides `nixpkgs_rev`,
/// the fields that may be absent (a sandbox older than them) are
/// `session` (no sessions), `packages` (none listed), `kernel_budgets`
/// and the limits [`Limits`] says. Fields this server does not know are in
/// `unknown`.
#[derive(Debug, Clone, Deserialize)]
pub struct Env {
    /// The key under `environments`; filled in after parsing.
    #[serde(skip)]
    pub name: String,
    /// The manifest file it came from; filled in after parsing.
    #[serde(skip)]
    pub manifest: PathBuf,
    pub description: String,
    pub interpreter: Interpreter,
    pub run: Vec<String>,
    #[serde(default)]
    pub session: Vec<String>,
    /// The argv that runs bash code from stdin in the same jail as `run`:
    /// how the probe looks inside a `program` environment, whose `run`
    /// takes a source file. Required there, unused elsewhere.
    #[serde(default)]
    pub shell: Vec<String>,
    pub limits: Limits,
    /// `false`, `true`, or an allowlist the egress proxy enforces.
    pub network: Network,
    /// The store names of what the environment holds. Read so that a
    /// manifest listing them wrongly is refused; shown nowhere, since the
    /// description says what matters in fewer tokens.
    #[serde(default)]
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "parsed to check the manifest; shown nowhere")
    )]
    pub packages: Vec<String>,
    pub store_path: String,
    #[serde(default)]
    pub nixpkgs_rev: Option<String>,
    /// Its wrappers mount a session's project layer when given one
    /// (`NIX_SANDBOX_PROJECT_LAYER`): false for a sandbox built before
    /// they could, whose sessions then see the project read-only.
    #[serde(default)]
    pub project_layer: bool,
    /// Its session wrapper keeps /workspace (and the project's layer) on a
    /// session layer the launcher names (`NIX_SANDBOX_LAYER`), where its
    /// checkpoints are kept: false for a sandbox built before, whose
    /// sessions then have no checkpoints and cannot be forked.
    #[serde(default)]
    pub session_layer: bool,
    /// Ports inside a session's jail that a call may publish to the host
    /// (session/publish.rs); its session wrapper then takes the
    /// forwarder's socket (`NIX_SANDBOX_PUBLISH_FD`). Empty for a sandbox
    /// built before them.
    #[serde(default)]
    pub publish: Vec<std::num::NonZeroU16>,
    /// What the jail may take of its host user's per-user kernel counters
    /// (lib/kernelBudgets.nix), which its wrapper sets before bubblewrap:
    /// `/proc/sys/user` limits by name (`max_inotify_instances`) and
    /// rlimits (`sigpending`, `msgqueue`, `memlock`); `None` for a sandbox
    /// built before them. The probe checks the rlimits from inside.
    #[serde(default)]
    pub kernel_budgets: Option<BTreeMap<String, u64>>,
    /// Whether, and which, packages a call may add (packages/mod.rs); set
    /// by mkServer for its own environments.
    #[serde(default)]
    pub packages_on_demand: Option<OnDemand>,
    /// The packages a composed environment was given (sorted); empty for
    /// the manifest's own.
    #[serde(skip)]
    pub added: Vec<String>,
    /// Set on the `project` environment before it is built (a
    /// placeholder, [`DevShell::placeholder`]): a call builds it first.
    #[serde(skip)]
    pub dev_shell: Option<Arc<DevShell>>,
    /// The profile a person's session of it was made under
    /// ([`Profile::apply`]); `None` for the manifest's own.
    #[serde(skip)]
    pub profile: Option<Arc<Profile>>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

/// A file's top level: each environment is read on its own, so that one
/// bad environment leaves out only itself.
#[derive(Deserialize)]
struct File {
    #[serde(rename = "version")]
    _version: u64,
    environments: BTreeMap<String, Value>,
    #[serde(default)]
    project_dev_shell: Option<DevShell>,
    #[serde(default)]
    profiles: BTreeMap<String, Value>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// A problem with one manifest file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    /// The field path, when the problem is in one field.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: {field}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Every environment that loaded, by name, the problems of the files and
/// environments that did not, and notes on what was served all the same.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub envs: BTreeMap<String, Arc<Env>>,
    pub errors: Vec<ManifestError>,
    /// Fields this server does not know, in environments it serves.
    pub notes: Vec<ManifestError>,
    /// Names a later file took over from an earlier one (sorted, once each):
    /// in the server package, a NIX_SANDBOX_ENVS or NIX_SANDBOX_DIR sandbox
    /// named like one of the server's own.
    pub replaced: Vec<String>,
    /// The last manifest's dev shell helper, if any carries one, and that
    /// manifest.
    pub dev_shell: Option<(Arc<DevShell>, PathBuf)>,
    /// The profiles a person may make sessions under, by name: a later
    /// file's replace an earlier one's of the same name.
    pub profiles: BTreeMap<String, Arc<Profile>>,
}

impl Catalog {
    /// Reads `paths` in order; a later file adds environments or replaces
    /// earlier ones of the same name.
    pub fn load(paths: &[PathBuf], allow_outside_store: bool) -> Self {
        let mut catalog = Catalog::default();
        for path in paths {
            let read = read_file(path, allow_outside_store);
            catalog.errors.extend(read.errors);
            catalog.notes.extend(read.notes);
            if let Some(dev_shell) = read.dev_shell {
                catalog.dev_shell = Some((Arc::new(dev_shell), path.clone()));
            }
            for profile in read.profiles {
                catalog
                    .profiles
                    .insert(profile.name.clone(), Arc::new(profile));
            }
            for env in read.envs {
                let name = env.name.clone();
                if let Some(earlier) = catalog.envs.insert(name.clone(), Arc::new(env)) {
                    tracing::info!(
                        env = %name,
                        from = %path.display(),
                        replaces = %earlier.manifest.display(),
                        "environment replaced by a later manifest"
                    );
                    catalog.replaced.push(name);
                }
            }
        }
        catalog.replaced.sort();
        catalog.replaced.dedup();
        catalog
    }

    pub fn names(&self) -> Vec<&str> {
        self.envs.keys().map(String::as_str).collect()
    }

    /// The name and network policy of each environment that has one (the
    /// egress proxy serves those).
    pub fn policies(&self) -> impl Iterator<Item = (&String, &Policy)> {
        (self.envs.iter()).filter_map(|(name, env)| env.network.policy().map(|p| (name, p)))
    }

    /// Offers the project's dev shell as the environment `project` (a
    /// placeholder the first call builds) when `on`
    /// (`NIX_SANDBOX_PROJECT_DEVSHELL=1`), `project_dir` holds `flake.nix`
    /// and a manifest carries the dev shell helper. The line says what was
    /// done (Ok) or why not (Err); None when off.
    pub fn offer_project(
        &mut self,
        on: bool,
        project_dir: Option<&Path>,
    ) -> Result<Option<String>, String> {
        if !on {
            return Ok(None);
        }
        const NOT: &str = "project dev shell: NIX_SANDBOX_PROJECT_DEVSHELL=1, but no `project` \
                           environment:";
        let Some(dir) = project_dir else {
            return Err(format!("{NOT} PROJECT_DIR is not set"));
        };
        if !dir.join("flake.nix").is_file() {
            return Err(format!("{NOT} {} has no flake.nix", dir.display()));
        }
        let Some((dev_shell, manifest)) = &self.dev_shell else {
            return Err(format!(
                "{NOT} no manifest carries the dev shell helper (a server package built \
                 before it: rebuild the server)"
            ));
        };
        if let Some(env) = self.envs.get(PROJECT_ENV) {
            return Err(format!(
                "{NOT} an environment of {} is named `{PROJECT_ENV}` already",
                env.manifest.display()
            ));
        }
        let env = dev_shell
            .placeholder(manifest)
            .map_err(|e| format!("{NOT} {}: {e}", manifest.display()))?;
        self.envs.insert(PROJECT_ENV.into(), Arc::new(env));
        Ok(Some(format!(
            "project dev shell: `{PROJECT_ENV}` is {}'s devShells.default, built on first use",
            dir.display()
        )))
    }

    /// `python` when there is one, else the first by name.
    pub fn default_env(&self) -> Option<&str> {
        if self.envs.contains_key("python") {
            Some("python")
        } else {
            self.envs.keys().next().map(String::as_str)
        }
    }

    pub fn error_lines(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }
}

/// What one file gave: the environments that loaded, the problems of the
/// file or of the environments left out, and notes on fields this server
/// does not know in those it serves.
#[derive(Debug, Default)]
pub struct Read {
    pub envs: Vec<Env>,
    pub profiles: Vec<Profile>,
    pub dev_shell: Option<DevShell>,
    pub errors: Vec<ManifestError>,
    pub notes: Vec<ManifestError>,
}

/// Parses and validates one file, each environment on its own.
pub fn read_file(path: &Path, allow_outside_store: bool) -> Read {
    let err = |field: Option<&str>, message: String| ManifestError {
        file: path.to_owned(),
        field: field.map(str::to_owned),
        message,
    };
    let mut read = Read::default();
    let file = std::fs::read_to_string(path)
        .map_err(|e| err(None, format!("cannot read the manifest: {e}")))
        .and_then(|text| {
            serde_json::from_str::<Value>(&text)
                .map_err(|e| err(None, format!("invalid JSON: {e}")))
        })
        .and_then(|value| {
            check_version(&value).map_err(|(field, msg)| err(Some(field), msg))?;
            serde_path_to_error::deserialize::<_, File>(value).map_err(|e| {
                let (field, message) = describe(&e, "");
                err(Some(&field), message)
            })
        });
    let file = match file {
        Ok(file) => file,
        Err(e) => {
            read.errors.push(e);
            return read;
        }
    };
    for field in file.unknown.keys() {
        read.notes.push(err(Some(field), UNKNOWN_FIELD.into()));
    }
    if let Some(dev_shell) = file.project_dev_shell {
        match dev_shell.helper.first() {
            None => read.errors.push(err(
                Some("project_dev_shell.helper"),
                "must name the helper".into(),
            )),
            Some(helper) => match check_wrapper(helper, allow_outside_store) {
                Err(problem) => read
                    .errors
                    .push(err(Some("project_dev_shell.helper[0]"), problem)),
                Ok(()) => read.dev_shell = Some(dev_shell),
            },
        }
    }
    for (name, value) in file.profiles {
        match profiles::parse(&name, value) {
            Ok(profile) => read.profiles.push(profile),
            Err(problems) => read
                .errors
                .extend((problems.into_iter()).map(|(field, message)| err(Some(&field), message))),
        }
    }
    for (name, value) in file.environments {
        let at = format!("environments.{name}");
        let mut env: Env = match serde_path_to_error::deserialize(value) {
            Ok(env) => env,
            Err(e) => {
                let (field, message) = describe(&e, &at);
                read.errors.push(err(Some(&field), message));
                continue;
            }
        };
        let problems = validate(&name, &env, allow_outside_store);
        if !problems.is_empty() {
            for (field, message) in problems {
                read.errors.push(err(Some(&field), message));
            }
            continue;
        }
        for field in env.unknown.keys() {
            read.notes
                .push(err(Some(&format!("{at}.{field}")), UNKNOWN_FIELD.into()));
        }
        env.name = name;
        env.manifest = path.to_owned();
        read.envs.push(env);
    }
    read
}

/// The note on a field this server does not know, outside `limits`.
const UNKNOWN_FIELD: &str = "a field this server does not know, left unused (the sandbox is \
                             newer than the server: upgrade the server to use it)";

/// The version is checked first: a newer file gets "unknown version", not a
/// list of fields this reader does not know.
fn check_version(value: &Value) -> Result<(), (&'static str, String)> {
    let Some(obj) = value.as_object() else {
        return Err(("(top level)", "expected a JSON object".into()));
    };
    match obj.get("version") {
        None => Err(("version", "missing field".into())),
        Some(v) if v.as_u64() == Some(1) => Ok(()),
        Some(v) => Err((
            "version",
            format!("unknown version {v}; this launcher reads version 1"),
        )),
    }
}

/// Turns a serde error into (field path, problem), the path under
/// `prefix`, with a missing field's own name at the end of the path.
fn describe(e: &serde_path_to_error::Error<serde_json::Error>, prefix: &str) -> (String, String) {
    let join = |a: &str, b: &str| match (a, b) {
        ("" | ".", b) => b.to_owned(),
        (a, "" | ".") => a.to_owned(),
        (a, b) => format!("{a}.{b}"),
    };
    let path = join(prefix, &e.path().to_string());
    let message = e.inner().to_string();
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(name) = rest.strip_suffix('`')
    {
        return (join(&path, name), "missing field".into());
    }
    (path, message)
}

/// Rules serde cannot express: the name, non-empty argv, wrappers in the store.
fn validate(name: &str, env: &Env, allow_outside_store: bool) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let at = |field: &str| format!("environments.{name}.{field}");
    if !valid_env_name(name) {
        problems.push((
            format!("environments.{name}"),
            format!("invalid environment name (it must match {ENV_NAME_PATTERN})"),
        ));
    }
    if env.run.is_empty() {
        problems.push((at("run"), "must be a non-empty argv".into()));
    }
    if env.interpreter == Interpreter::Program && env.shell.is_empty() {
        problems.push((
            at("shell"),
            "must be a non-empty argv for a program environment".into(),
        ));
    }
    for limit in env.limits.unknown.keys() {
        problems.push((
            at(&format!("limits.{limit}")),
            "a limit this server does not know, so it cannot enforce it: the environment is \
             not served; upgrade the server"
                .into(),
        ));
    }
    if let Some(policy) = env.network.policy() {
        for (field, problem) in policy.problems() {
            problems.push((at(&format!("network.{field}")), problem));
        }
    }
    for (field, argv) in [
        ("run", &env.run),
        ("session", &env.session),
        ("shell", &env.shell),
    ] {
        if let Some(program) = argv.first()
            && let Err(problem) = check_wrapper(program, allow_outside_store)
        {
            problems.push((format!("{}[0]", at(field)), problem));
        }
    }
    if let Some(policy) = &env.packages_on_demand {
        match policy.compose.first() {
            None => problems.push((
                at("packages_on_demand.compose"),
                "must be a non-empty argv".into(),
            )),
            Some(program) => {
                if let Err(problem) = check_wrapper(program, allow_outside_store) {
                    problems.push((at("packages_on_demand.compose[0]"), problem));
                }
            }
        }
    }
    problems
}

/// The most characters of a name the launcher takes from outside: an
/// environment's here, a session's (session/names.rs) likewise.
pub const MAX_NAME: usize = 64;

/// Whether `b` may appear in such a name: `[A-Za-z0-9_.-]`, which is safe in
/// a path, a URI and a log line as it is.
pub fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// Whether `name` is an environment name: [`ENV_NAME_PATTERN`].
pub fn valid_env_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME
        && bytes[0].is_ascii_alphanumeric()
        && bytes.iter().copied().all(name_byte)
}

/// Environment names, as the refusal of a bad one says.
pub const ENV_NAME_PATTERN: &str = "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}";

fn check_wrapper(program: &str, allow_outside_store: bool) -> Result<(), String> {
    let path = Path::new(program);
    if !path.is_absolute() {
        return Err(format!("wrapper {program} is not an absolute path"));
    }
    let in_store = path.starts_with("/nix/store")
        && path.components().count() > 3
        && !path.components().any(|c| c == Component::ParentDir);
    if in_store || allow_outside_store {
        Ok(())
    } else {
        Err(format!(
            "wrapper {program} is outside /nix/store (refused unless \
             --allow-wrappers-outside-store is given, which is for tests only)"
        ))
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
