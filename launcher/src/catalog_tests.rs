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
