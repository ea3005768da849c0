//! The manifest v1 reader (CONTRIBUTING.md, contract 1), strict: a problem
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
/// start (check.rs) and names when a run hits one (limits.rs).
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
    if !valid_name(name) {
        problems.push((
            format!("environments.{name}"),
            "invalid environment name (it must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63})".into(),
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

fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

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
mod tests {
    use super::*;
    use serde_json::json;

    fn good() -> Value {
        json!({
            "version": 1,
            "environments": {
                "python": {
                    "description": "Python 3",
                    "interpreter": "python",
                    "run": ["/nix/store/abc-sandbox-python/bin/run"],
                    "session": [],
                    "limits": {
                        "timeout_s": 30, "memory_mb": 1024, "pids": 256, "output_bytes": 65536,
                        "workspace_mb": 512, "tmp_mb": 256, "cpu_s": 60, "file_mb": 256, "nofile": 1024
                    },
                    "network": false,
                    "packages": ["python3-3.12.8"],
                    "store_path": "/nix/store/abc-sandbox-python",
                    "nixpkgs_rev": null
                }
            }
        })
    }

    fn read(value: &Value, allow: bool) -> Result<Vec<Env>, Vec<ManifestError>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(&path, value.to_string()).unwrap();
        read_file(&path, allow).map_err(|errs| {
            errs.into_iter()
                .map(|e| ManifestError {
                    file: PathBuf::from("m.json"),
                    ..e
                })
                .collect()
        })
    }

    fn only_error(value: &Value, allow: bool) -> String {
        let errs = read(value, allow).expect_err("the manifest should be refused");
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs[0].to_string()
    }

    #[test]
    fn a_good_manifest_loads() {
        let envs = read(&good(), false).unwrap();
        assert_eq!(envs.len(), 1);
        assert_eq!(envs[0].name, "python");
        assert_eq!(envs[0].limits.timeout_s.get(), 30);
    }

    #[test]
    fn unknown_version_is_named() {
        let mut v = good();
        v["version"] = json!(2);
        v["new_field"] = json!(true);
        assert_eq!(
            only_error(&v, false),
            "m.json: version: unknown version 2; this launcher reads version 1"
        );
    }

    #[test]
    fn missing_field_names_its_path() {
        let mut v = good();
        v["environments"]["python"]["limits"]
            .as_object_mut()
            .unwrap()
            .remove("timeout_s");
        assert_eq!(
            only_error(&v, false),
            "m.json: environments.python.limits.timeout_s: missing field"
        );
    }

    #[test]
    fn wrong_type_names_its_path() {
        let mut v = good();
        v["environments"]["python"]["network"] = json!("no");
        let e = only_error(&v, false);
        assert!(
            e.starts_with("m.json: environments.python.network: invalid type"),
            "{e}"
        );
    }

    #[test]
    fn zero_limit_is_refused() {
        let mut v = good();
        v["environments"]["python"]["limits"]["pids"] = json!(0);
        let e = only_error(&v, false);
        assert!(
            e.starts_with("m.json: environments.python.limits.pids: invalid value"),
            "{e}"
        );
    }

    #[test]
    fn unknown_field_is_refused() {
        let mut v = good();
        v["environments"]["python"]["netwrok"] = json!(true);
        let e = only_error(&v, false);
        assert!(
            e.contains("environments.python") && e.contains("unknown field `netwrok`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_interpreter_is_refused() {
        let mut v = good();
        v["environments"]["python"]["interpreter"] = json!("ruby");
        let e = only_error(&v, false);
        assert!(
            e.starts_with("m.json: environments.python.interpreter:"),
            "{e}"
        );
    }

    #[test]
    fn wrapper_outside_store_needs_the_flag() {
        let mut v = good();
        v["environments"]["python"]["run"] = json!(["/tmp/run"]);
        let e = only_error(&v, false);
        assert!(
            e.starts_with(
                "m.json: environments.python.run[0]: wrapper /tmp/run is outside /nix/store"
            ),
            "{e}"
        );
        assert!(read(&v, true).is_ok());
    }

    #[test]
    fn store_path_with_dotdot_is_outside_the_store() {
        let mut v = good();
        v["environments"]["python"]["run"] = json!(["/nix/store/../../tmp/run"]);
        assert!(only_error(&v, false).contains("outside /nix/store"));
    }

    #[test]
    fn relative_wrapper_is_refused_even_with_the_flag() {
        let mut v = good();
        v["environments"]["python"]["session"] = json!(["bin/agent"]);
        let e = only_error(&v, true);
        assert!(
            e.contains("environments.python.session[0]: wrapper bin/agent is not an absolute path"),
            "{e}"
        );
    }

    #[test]
    fn empty_run_and_bad_name_are_refused() {
        let mut v = good();
        let env = v["environments"]["python"].clone();
        v["environments"] = json!({ "-bad": env });
        v["environments"]["-bad"]["run"] = json!([]);
        let errs = read(&v, false).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].contains("environments.-bad: invalid environment name"));
        assert!(text[1].contains("environments.-bad.run: must be a non-empty argv"));
    }

    #[test]
    fn unreadable_and_invalid_json_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let errs = read_file(&missing, false).unwrap_err();
        assert!(
            errs[0]
                .to_string()
                .contains("nope.json: cannot read the manifest")
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{").unwrap();
        let errs = read_file(&bad, false).unwrap_err();
        assert!(errs[0].to_string().contains("bad.json: invalid JSON"));
    }

    #[test]
    fn later_files_override_and_bad_files_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("a.json");
        let second = dir.path().join("b.json");
        let broken = dir.path().join("c.json");
        std::fs::write(&first, good().to_string()).unwrap();
        let mut v = good();
        v["environments"]["python"]["description"] = json!("override");
        std::fs::write(&second, v.to_string()).unwrap();
        std::fs::write(&broken, "[]").unwrap();
        let catalog = Catalog::load(&[first, second, broken], false);
        assert_eq!(catalog.names(), ["python"]);
        assert_eq!(catalog.envs["python"].description, "override");
        assert_eq!(catalog.replaced, ["python"]);
        assert_eq!(catalog.errors.len(), 1);
        assert!(
            catalog.errors[0]
                .to_string()
                .contains("c.json: (top level): expected a JSON object")
        );
    }
}
