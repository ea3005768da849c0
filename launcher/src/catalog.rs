//! The catalog: the environments the server offers, read from the manifests
//! Nix wrote (CONTRIBUTING.md, contract 1). The reader is strict: a problem
//! names the file and the field (`environments.python.limits.timeout_s`).
//!
//! A bad file does not stop the server: its problems are collected, its
//! environments are left out, and the other files are served.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU64;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

/// What the `interpreter` field names (what a session agent drives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpreter {
    Python,
    Bash,
    Node,
}

/// Limits of an environment. The launcher enforces the deadline and the
/// output cap; the wrapper enforces the rest, which the launcher checks at
/// start (wrapper/probe.rs) and names when a run hits one
/// (report/limit.rs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub timeout_s: NonZeroU64,
    pub output_bytes: NonZeroU64,
    pub memory_mb: NonZeroU64,
    pub pids: NonZeroU64,
    pub workspace_mb: NonZeroU64,
    pub tmp_mb: NonZeroU64,
    pub cpu_s: NonZeroU64,
    pub file_mb: NonZeroU64,
    pub nofile: NonZeroU64,
}

/// One environment as the manifest declares it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub session: Vec<String>,
    pub limits: Limits,
    pub network: bool,
    pub packages: Vec<String>,
    pub store_path: String,
    #[serde(default)]
    pub nixpkgs_rev: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(rename = "version")]
    _version: u64,
    environments: BTreeMap<String, Env>,
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

/// Every environment that loaded, by name, and the problems of the files
/// that did not.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub envs: BTreeMap<String, Arc<Env>>,
    pub errors: Vec<ManifestError>,
    /// Names a later file took over from an earlier one (sorted, once each):
    /// in the server package, a NIX_SANDBOX_ENVS or NIX_SANDBOX_DIR sandbox
    /// named like one of the server's own.
    pub replaced: Vec<String>,
}

impl Catalog {
    /// Reads `paths` in order; a later file adds environments or replaces
    /// earlier ones of the same name.
    pub fn load(paths: &[PathBuf], allow_outside_store: bool) -> Self {
        let mut catalog = Catalog::default();
        for path in paths {
            match read_file(path, allow_outside_store) {
                Ok(envs) => {
                    for env in envs {
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
                Err(errors) => catalog.errors.extend(errors),
            }
        }
        catalog.replaced.sort();
        catalog.replaced.dedup();
        catalog
    }

    pub fn names(&self) -> Vec<&str> {
        self.envs.keys().map(String::as_str).collect()
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

/// Parses and validates one file: all its environments, or its problems.
pub fn read_file(path: &Path, allow_outside_store: bool) -> Result<Vec<Env>, Vec<ManifestError>> {
    let err = |field: Option<&str>, message: String| ManifestError {
        file: path.to_owned(),
        field: field.map(str::to_owned),
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![err(None, format!("cannot read the manifest: {e}"))])?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| vec![err(None, format!("invalid JSON: {e}"))])?;
    check_version(&value).map_err(|(field, msg)| vec![err(Some(field), msg)])?;
    let file: File = serde_path_to_error::deserialize(value).map_err(|e| {
        let (field, message) = describe(&e);
        vec![err(Some(&field), message)]
    })?;
    let mut envs = Vec::new();
    let mut errors = Vec::new();
    for (name, mut env) in file.environments {
        for (field, message) in validate(&name, &env, allow_outside_store) {
            errors.push(err(Some(&field), message));
        }
        env.name = name;
        env.manifest = path.to_owned();
        envs.push(env);
    }
    if errors.is_empty() {
        Ok(envs)
    } else {
        Err(errors)
    }
}

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

/// Turns a serde error into (field path, problem), putting a missing field's
/// own name at the end of the path.
fn describe(e: &serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let message = e.inner().to_string();
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(name) = rest.strip_suffix('`')
    {
        let field = if path == "." {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        };
        return (field, "missing field".into());
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
    for (field, argv) in [("run", &env.run), ("session", &env.session)] {
        if let Some(program) = argv.first()
            && let Err(problem) = check_wrapper(program, allow_outside_store)
        {
            problems.push((format!("{}[0]", at(field)), problem));
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
#[path = "catalog_tests.rs"]
mod tests;
