use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

/// The file `path` of the repository.
fn read(path: &str) -> String {
    let full = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn keys() -> BTreeSet<&'static str> {
    LIMITS.iter().map(|limit| limit.key).collect()
}

/// Each limit's key at a value of its own (1, 2, ...), as a manifest's
/// `limits`.
fn distinct() -> serde_json::Map<String, Value> {
    (LIMITS.iter().zip(1u64..))
        .map(|(limit, n)| (limit.key.to_owned(), json!(n)))
        .collect()
}

/// A field of `Limits` without a row, or a row without a field, fails
/// here; and each row reads its own field.
#[test]
fn the_table_and_the_limits_have_the_same_keys() {
    let limits: Limits = serde_json::from_value(Value::Object(distinct()))
        .unwrap_or_else(|e| panic!("a field of Limits has no row of LIMITS: {e}"));
    assert!(
        limits.unknown.is_empty(),
        "rows of LIMITS that are no field of Limits: {:?}",
        limits.unknown.keys()
    );
    let Value::Object(fields) = serde_json::to_value(&limits).unwrap() else {
        panic!("Limits is a JSON object");
    };
    let fields: BTreeSet<&str> = fields.keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        keys(),
        "the fields of Limits are not the rows of LIMITS"
    );
    for (limit, n) in LIMITS.iter().zip(1u64..) {
        assert_eq!(
            limit.of(&limits),
            n,
            "{}'s row reads another field",
            limit.key
        );
    }
    assert_eq!(keys().len(), LIMITS.len(), "a key is in LIMITS twice");
}

/// A limit the launcher enforces may be absent and takes its default; one
/// the wrapper enforces may not.
#[test]
fn only_the_launchers_limits_may_be_absent() {
    for limit in LIMITS {
        let mut without = distinct();
        without.remove(limit.key);
        let read = serde_json::from_value::<Limits>(Value::Object(without));
        match limit.probe {
            Probe::Launcher => {
                let limits = read.unwrap_or_else(|e| panic!("{}: {e}", limit.key));
                assert_eq!(limit.of(&limits), limit.default, "{}", limit.key);
            }
            _ => {
                let e = read.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(e.contains(&format!("missing field `{}`", limit.key)), "{e}");
            }
        }
    }
}

/// The cgroup code writes one limit per controller, and a result says
/// what the controller refused.
#[test]
fn each_controller_holds_one_limit_that_says_when_it_refused() {
    for controller in [Controller::Memory, Controller::Pids] {
        let held: Vec<&Limit> = (LIMITS.iter().copied())
            .filter(|limit| limit.cgroup == Some(controller))
            .collect();
        assert_eq!(held.len(), 1, "{controller:?}");
        let certain = held[0].hit.and_then(|signs| signs.certain);
        assert!(
            certain.is_some(),
            "{}: no sentence for a refusal",
            held[0].key
        );
    }
    for signs in LIMITS.iter().filter_map(|limit| limit.hit) {
        if signs.signal.is_some() {
            assert!(
                signs.certain.is_some(),
                "{}: no sentence for its signal",
                signs.name
            );
        }
    }
}

/// lib/environment.nix declares one option of `limits` per row, with the
/// row's default (`KEY = limit DEFAULT EXAMPLE ...`).
#[test]
fn mksandbox_declares_every_limit_with_its_default() {
    let nix = read("lib/environment.nix");
    let declared: BTreeSet<(String, String)> = nix
        .lines()
        .filter_map(|line| {
            let (key, rest) = line.trim().split_once(" = limit ")?;
            let default = rest.split_whitespace().next()?;
            Some((key.to_owned(), default.to_owned()))
        })
        .collect();
    let rows: BTreeSet<(String, String)> = (LIMITS.iter())
        .map(|limit| (limit.key.to_owned(), limit.default.to_string()))
        .collect();
    assert_eq!(
        declared, rows,
        "lib/environment.nix's limits are not the table's"
    );
}

/// The test manifest, the contract's example and the docs name every
/// limit: a new one cannot be left out of them.
#[test]
fn the_test_manifest_and_the_docs_state_every_limit() {
    let fixtures: Value =
        serde_json::from_str(&read("launcher/tests/fixtures/manifests/fixtures.json")).unwrap();
    for (name, env) in fixtures["environments"].as_object().unwrap() {
        let stated: BTreeSet<&str> = env["limits"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(stated, keys(), "fixtures.json: {name}'s limits");
    }
    let (environments, contracts, limits) = (
        read("docs/environments.md"),
        read("docs/contracts.md"),
        read("docs/limits.md"),
    );
    for limit in LIMITS {
        let (key, default) = (limit.key, limit.default);
        assert!(
            environments.contains(&format!("| `{key}` | {default} |")),
            "docs/environments.md's defaults: no row `{key}` | {default}"
        );
        assert!(
            contracts.contains(&format!("\"{key}\": {default}")),
            "docs/contracts.md's example: no \"{key}\": {default}"
        );
        assert!(
            limits.contains(&format!("`{key}`")),
            "docs/limits.md: no `{key}`"
        );
    }
}
