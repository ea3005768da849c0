//! Tests of the manifest reader: what loads, and how every refusal names
//! its file and field.

use super::*;
use crate::testing;
use serde_json::json;

/// A manifest of one good environment.
fn good() -> Value {
    testing::manifest_json([("python", testing::env_json())])
}

fn read(value: &Value, allow: bool) -> Result<Vec<Env>, Vec<ManifestError>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    std::fs::write(&path, value.to_string()).unwrap();
    let read = read_file(&path, allow);
    if read.errors.is_empty() {
        return Ok(read.envs);
    }
    Err(read
        .errors
        .into_iter()
        .map(|e| ManifestError {
            file: PathBuf::from("m.json"),
            ..e
        })
        .collect())
}

/// The notes on a manifest that loads, as the log shows them.
fn notes(value: &Value) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    std::fs::write(&path, value.to_string()).unwrap();
    let read = read_file(&path, false);
    assert!(read.errors.is_empty(), "{:?}", read.errors);
    read.notes
        .iter()
        .map(|n| n.to_string().replace(&path.display().to_string(), "m.json"))
        .collect()
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
        .remove("memory_mb");
    assert_eq!(
        only_error(&v, false),
        "m.json: environments.python.limits.memory_mb: missing field"
    );
}

#[test]
fn wrong_type_names_its_path() {
    let mut v = good();
    v["environments"]["python"]["network"] = json!("no");
    let e = only_error(&v, false);
    assert!(
        e.starts_with("m.json: environments.python.network: expected true, false or a policy"),
        "{e}"
    );
}

#[test]
fn a_network_policy_is_read_and_its_unknown_fields_refuse_the_environment() {
    let mut v = good();
    v["environments"]["python"]["network"] = json!({
        "allow": [{"host": "pypi.org"}], "credentials": {}, "ca_bundle": null
    });
    let envs = read(&v, false).unwrap();
    assert_eq!(envs[0].network.policy().unwrap().hosts(), ["pypi.org"]);
    // A field of the policy this server does not know may be a restriction
    // it would not enforce: the environment is not served.
    v["environments"]["python"]["network"]["allow"][0]["max_bytes"] = json!(10);
    let e = only_error(&v, false);
    assert!(
        e.starts_with(
            "m.json: environments.python.network.allow[0].max_bytes: a network policy field"
        ),
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

/// A newer server, an older sandbox: the fields added since may be absent.
#[test]
fn an_older_manifest_without_the_newer_optional_fields_loads_with_defaults() {
    let mut v = good();
    let env = v["environments"]["python"].as_object_mut().unwrap();
    for field in [
        "session",
        "packages",
        "nixpkgs_rev",
        "kernel_budgets",
        "project_layer",
    ] {
        env.remove(field);
    }
    let limits = env["limits"].as_object_mut().unwrap();
    limits.remove("timeout_s");
    limits.remove("output_bytes");
    let envs = read(&v, false).unwrap();
    let env = &envs[0];
    assert_eq!(env.limits.timeout_s.get(), 30);
    assert_eq!(env.limits.output_bytes.get(), 65536);
    assert!(env.session.is_empty() && env.packages.is_empty() && env.nixpkgs_rev.is_none());
    assert!(env.kernel_budgets.is_none());
    assert!(
        !env.project_layer,
        "a sandbox built before the writable project"
    );
    assert!(notes(&v).is_empty());
}

/// A sandbox's kernel budgets are read as numbers by name; a value that is
/// not a number leaves the environment out, naming the field.
#[test]
fn kernel_budgets_are_read() {
    let mut v = good();
    v["environments"]["python"]["kernel_budgets"] =
        json!({"max_inotify_instances": 16, "sigpending": 1024});
    let envs = read(&v, false).unwrap();
    let budgets = envs[0].kernel_budgets.as_ref().unwrap();
    assert_eq!(budgets["max_inotify_instances"], 16);
    assert_eq!(budgets["sigpending"], 1024);
    v["environments"]["python"]["kernel_budgets"]["sigpending"] = json!("many");
    let e = only_error(&v, false);
    assert!(e.contains("kernel_budgets"), "{e}");
}

/// Only the manifest can say that the wrapper enforces a limit: one the
/// wrapper enforces may not be absent, and without it the environment
/// alone is left out.
#[test]
fn a_missing_limit_of_the_wrapper_leaves_out_only_its_environment() {
    let mut v = testing::manifest_json([
        ("python", testing::env_json()),
        ("old", testing::env_json()),
    ]);
    v["environments"]["old"]["limits"]
        .as_object_mut()
        .unwrap()
        .remove("memory_mb");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let read = read_file(&path, false);
    assert_eq!(read.envs.len(), 1);
    assert_eq!(read.envs[0].name, "python");
    assert_eq!(read.errors.len(), 1);
    assert_eq!(
        read.errors[0].to_string(),
        format!(
            "{}: environments.old.limits.memory_mb: missing field",
            path.display()
        )
    );
}

/// An older server, a newer sandbox: a field it does not know is a note
/// naming it, and the environment is served.
#[test]
fn an_unknown_field_is_a_note_naming_it_and_the_environment_is_served() {
    let mut v = good();
    v["environments"]["python"]["gpu"] = json!(true);
    v["generator"] = json!("mkServer 2");
    assert_eq!(read(&v, false).unwrap()[0].name, "python");
    assert_eq!(
        notes(&v),
        [
            "m.json: generator: a field this server does not know, left unused (the sandbox \
             is newer than the server: upgrade the server to use it)",
            "m.json: environments.python.gpu: a field this server does not know, left unused \
             (the sandbox is newer than the server: upgrade the server to use it)",
        ]
    );
}

/// ... but a limit it does not know is one it cannot enforce: never
/// dropped silently, the environment is refused, naming the limit.
#[test]
fn an_unknown_limit_refuses_its_environment_naming_it() {
    let mut v = testing::manifest_json([
        ("python", testing::env_json()),
        ("gpu", testing::env_json()),
    ]);
    v["environments"]["gpu"]["limits"]["gpu_mb"] = json!(512);
    let errs = read(&v, false).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(
        errs[0].to_string(),
        "m.json: environments.gpu.limits.gpu_mb: a limit this server does not know, so it \
         cannot enforce it: the environment is not served; upgrade the server"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let catalog = Catalog::load(&[path], false);
    assert_eq!(catalog.names(), ["python"]);
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

/// A program environment's probe runs through its `shell`: without one it
/// is refused, with one it is served.
#[test]
fn a_program_environment_needs_a_shell() {
    let mut v = good();
    v["environments"]["python"]["interpreter"] = json!("program");
    let e = only_error(&v, false);
    assert!(
        e.starts_with("m.json: environments.python.shell:") && e.contains("program"),
        "{e}"
    );
    v["environments"]["python"]["shell"] = json!(["/nix/store/x-a/bin/a", "--shell"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let catalog = Catalog::load(&[path], false);
    assert_eq!(catalog.names(), ["python"]);
    v["environments"]["python"]["shell"] = json!(["/tmp/shell"]);
    let e = only_error(&v, false);
    assert!(e.contains("environments.python.shell[0]"), "{e}");
}

#[test]
fn wrapper_outside_store_needs_the_flag() {
    let mut v = good();
    v["environments"]["python"]["run"] = json!(["/tmp/run"]);
    let e = only_error(&v, false);
    assert!(
        e.starts_with("m.json: environments.python.run[0]: wrapper /tmp/run is outside /nix/store"),
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
    let errs = read_file(&missing, false).errors;
    assert!(
        errs[0]
            .to_string()
            .contains("nope.json: cannot read the manifest")
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{").unwrap();
    let errs = read_file(&bad, false).errors;
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

/// `good()` with a dev shell helper at `helper`.
fn with_dev_shell(helper: &str) -> Value {
    let mut v = good();
    v["project_dev_shell"] = json!({
        "helper": [helper],
        "timeout_s": 600,
        "environment": {
            "description": "The project's own dev shell.",
            "limits": testing::env_json()["limits"].clone(),
            "network": false,
        },
    });
    v
}

#[test]
fn the_dev_shell_helper_is_held_to_the_store_as_a_wrapper() {
    let err = only_error(&with_dev_shell("/tmp/helper"), false);
    assert!(
        err.starts_with("m.json: project_dev_shell.helper[0]: "),
        "{err}"
    );
    assert!(read(&with_dev_shell("/tmp/helper"), true).is_ok());
    let mut v = with_dev_shell("/nix/store/x-h/bin/h");
    v["project_dev_shell"]["helper"] = json!([]);
    assert!(only_error(&v, true).contains("project_dev_shell.helper"));
}

#[test]
fn the_project_env_is_offered_only_when_on_with_a_flake_and_a_helper() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("m.json");
    std::fs::write(
        &manifest,
        with_dev_shell("/nix/store/x-h/bin/h").to_string(),
    )
    .unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let load = || Catalog::load(std::slice::from_ref(&manifest), false);

    assert_eq!(load().offer_project(false, Some(&project)), Ok(None));
    let err = load().offer_project(true, None).unwrap_err();
    assert!(err.ends_with("PROJECT_DIR is not set"), "{err}");
    let err = load().offer_project(true, Some(&project)).unwrap_err();
    assert!(err.ends_with("has no flake.nix"), "{err}");

    std::fs::write(project.join("flake.nix"), "{ }").unwrap();
    let mut catalog = load();
    let line = catalog
        .offer_project(true, Some(&project))
        .unwrap()
        .unwrap();
    assert!(line.contains("`project` is"), "{line}");
    let env = &catalog.envs[PROJECT_ENV];
    assert!(env.dev_shell.is_some());
    assert_eq!(env.interpreter, Interpreter::Bash);
    assert_eq!(env.limits.timeout_s.get(), 30);
    assert_eq!(env.description, "The project's own dev shell.");

    // Without the helper (an older server package), or with an
    // environment of the server's own named `project`: not offered.
    let plain = dir.path().join("plain.json");
    std::fs::write(&plain, good().to_string()).unwrap();
    let err = Catalog::load(&[plain], false)
        .offer_project(true, Some(&project))
        .unwrap_err();
    assert!(
        err.contains("no manifest carries the dev shell helper"),
        "{err}"
    );
    let mut taken = with_dev_shell("/nix/store/x-h/bin/h");
    taken["environments"]["project"] = testing::env_json();
    std::fs::write(&manifest, taken.to_string()).unwrap();
    let mut catalog = load();
    let err = catalog.offer_project(true, Some(&project)).unwrap_err();
    assert!(err.contains("is named `project` already"), "{err}");
    assert!(catalog.envs[PROJECT_ENV].dev_shell.is_none());
}
