//! A property test of the manifest reader (its fuzz target), a bounded
//! random loop: good manifests mutated at random (values swapped for
//! other JSON, fields dropped or added, bytes flipped, cut or inserted) must
//! never panic the reader, and whatever it accepts must hold contract 1's
//! rules; whatever it refuses must name the file. It stops after
//! [`CASES`] cases or [`BUDGET`], whichever comes first (a guard on the
//! suite's time, not an assertion).

use std::path::Path;
use std::time::{Duration, Instant};

use proto::fuzz::Rng;
use serde_json::{Value, json};

use crate::catalog::{read_file, valid_env_name};
use crate::testing;

const CASES: usize = 4000;
const BUDGET: Duration = Duration::from_secs(10);

/// Two good environments: the tests' own, and one that differs in every
/// way the manifest allows (sessions, network, no `nixpkgs_rev`).
fn good() -> Value {
    let mut shell = testing::env_json();
    shell["interpreter"] = json!("bash");
    shell["run"] = json!([
        "/nix/store/def-sandbox-shell/bin/sandbox-shell",
        "-c",
        "source /dev/stdin"
    ]);
    shell["session"] = json!(["/nix/store/def-sandbox-shell/bin/sandbox-shell-session"]);
    for limit in shell["limits"].as_object_mut().unwrap().values_mut() {
        *limit = json!(1);
    }
    shell["network"] = json!(true);
    shell.as_object_mut().unwrap().remove("nixpkgs_rev");
    testing::manifest_json([("python", testing::env_json()), ("shell", shell)])
}

/// A random JSON value, sometimes one that is nearly right.
fn value(rng: &mut Rng, depth: usize) -> Value {
    let choices = if depth > 2 { 9 } else { 11 };
    match rng.below(choices) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(0),
        3 => json!(-1),
        4 => json!(u64::MAX),
        5 => json!(1.5),
        6 => json!(rng.next_u64() % 100_000),
        7 => json!(*rng.pick(&[
            "",
            "python",
            "ruby",
            "/nix/store/x-y/bin/z",
            "/tmp/run",
            "relative/run",
            "/nix/store/../../etc/passwd",
            "-bad",
            "a\nb",
            "\u{0}",
            "é",
            "/nix/store",
        ])),
        8 => json!("x".repeat(rng.below(300))),
        9 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                let key = rng
                    .pick(&[
                        "version",
                        "environments",
                        "run",
                        "limits",
                        "timeout_s",
                        "x",
                        "",
                    ])
                    .to_string();
                map.insert(key, value(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

/// Every (parent, key) path of `v`, to choose where to mutate.
fn paths(v: &Value, here: Vec<String>, out: &mut Vec<Vec<String>>) {
    if let Value::Object(map) = v {
        for (key, child) in map {
            let mut path = here.clone();
            path.push(key.clone());
            out.push(path.clone());
            paths(child, path, out);
        }
    }
}

fn at<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, key| v.get_mut(key))
}

/// One mutated manifest text.
fn mutate(rng: &mut Rng) -> Vec<u8> {
    let mut v = good();
    for _ in 0..1 + rng.below(3) {
        let mut all = Vec::new();
        paths(&v, Vec::new(), &mut all);
        if all.is_empty() {
            // Every key was removed: nothing left to mutate.
            break;
        }
        let path = rng.pick(&all).clone();
        let (parent, key) = path.split_at(path.len() - 1);
        let Some(Value::Object(map)) = at(&mut v, parent) else {
            continue;
        };
        match rng.below(4) {
            0 => {
                map.remove(&key[0]);
            }
            1 => {
                map.insert(format!("{}x", key[0]), value(rng, 0));
            }
            _ => {
                map.insert(key[0].clone(), value(rng, 0));
            }
        }
    }
    let mut bytes = v.to_string().into_bytes();
    if rng.below(3) == 0 {
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[i] = rng.next_u64() as u8,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, *rng.pick(b"{}[]\",:0-\\\n\xff")),
            }
            if bytes.is_empty() {
                break;
            }
        }
    }
    bytes
}

/// What an accepted environment must be (contract 1).
fn check_accepted(env: &crate::catalog::Env, seed: u64) {
    assert!(
        valid_env_name(&env.name),
        "seed {seed}: accepted the name {:?}",
        env.name
    );
    assert!(!env.run.is_empty(), "seed {seed}: accepted an empty run");
    assert!(
        env.limits.unknown.is_empty(),
        "seed {seed}: accepted a limit it cannot enforce: {:?}",
        env.limits.unknown
    );
    for argv in [&env.run, &env.session] {
        if let Some(program) = argv.first() {
            let p = Path::new(program);
            assert!(
                p.starts_with("/nix/store")
                    && p.components().count() > 3
                    && !program.contains(".."),
                "seed {seed}: accepted the wrapper {program:?}"
            );
        }
    }
}

#[test]
fn random_manifests_never_panic_and_only_valid_ones_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    let started = Instant::now();
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..CASES {
        if started.elapsed() > BUDGET {
            break;
        }
        let seed = 0x9e37_79b9_7f4a_7c15 ^ (case as u64 + 1);
        let mut rng = Rng(seed);
        std::fs::write(&path, mutate(&mut rng)).unwrap();
        let read = read_file(&path, false);
        for env in &read.envs {
            check_accepted(env, seed);
        }
        if read.errors.is_empty() {
            accepted += 1;
        } else {
            refused += 1;
        }
        for e in read.errors.iter().chain(&read.notes) {
            assert!(
                e.to_string().starts_with(&path.display().to_string()),
                "seed {seed}: {e} does not name the file"
            );
        }
    }
    // The mutations reach both sides: some stay valid, most do not.
    assert!(
        accepted > 0 && refused > accepted,
        "{accepted} accepted, {refused} refused"
    );
}
